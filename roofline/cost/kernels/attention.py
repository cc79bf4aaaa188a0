"""Attention kernels: how each family's kernels cut prefill and decode into work units, and their time.

Attention prefill: work tiles run in waves over the SMs, as the family's kernels cut them
(`roofline.cost.kernels.attention.AttentionKernels`: FA3 varlen on Hopper, (sequence, KV head, 128 or 192 packed query
rows); TRT-LLM's context kernel on Blackwell, (sequence, query head, 256 query rows); FA2's split-KV kernel
on Ada, (sequence, query head, 64 query rows)); every computed
(query, key) pair (causal pairs plus the masked half of the diagonal blocks and the padding rows) costs
4*head_dim FLOPs plus the softmax's attention_softmax_flops_per_pair (divided by the chip's
exp_throughput_factor where the softmax runs on the SFU), at attention_compute_efficiency of the peak; each
wave after the first pays attention_tile_fixed_s; bytes at memory_efficiency; plus kernel_fixed_s +
attention_fixed_s (`attention_prefill_time_s`).
Attention decode: KV bytes at attention_memory_efficiency (split-KV kernels fill the SMs when
seqs * kv_heads is small); FLOPs at attention_compute_efficiency; plus the fixed costs; on Blackwell (TRT-LLM
generation kernels) and Ada (FA2's split-KV kernel, one CTA per SM) each wave of work units after the first
pays attention_tile_fixed_s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

import roofline.cost.kernels as kernel_families  # (the records hold this module's tables: bound at call time)
from roofline.cost.hardware import HardwareProfile
from roofline.cost.roofline_math import _any, _bandwidth, _ceil, _max, _overlap

# Flash-attention 3 forward Q tile rows on Hopper by head_dim, 16-bit inputs, causal (flash-attention
# `hopper/tile_size.h`, `tile_size_fwd_sm90`: 192 rows for head_dim <= 96, else 128). (largest head_dim, rows).
_FA3_Q_ROWS: tuple[tuple[float, int], ...] = ((96, 192), (math.inf, 128))
ATTENTION_Q_TILE = 128  # the Q tile of the common head_dim 128


@dataclass(frozen=True)
class AttentionKernels:
    """How a family's attention kernels split their work into work units (CTAs), which run in waves over the SMs.

    `q_rows`: query rows of one prefill work tile by head_dim ((largest head_dim, rows), in order).
    `packs_gqa`: the query heads sharing a KV head are packed into a prefill tile's rows (a tile of R rows
    covers R / (heads / kv_heads) tokens of all of them) and one decode work unit is one (sequence, KV head);
    otherwise a prefill tile covers R tokens of one query head, and a decode work unit is one (sequence, group
    of at most `decode_heads_per_cta` query heads of one KV head).
    `decode_waves`: decode work units run in waves over the SMs and each wave after the first pays
    attention_tile_fixed_s, as prefill tiles do (`roofline.cost.kernels.attention.attention_decode_time_s`).
    `softmax_on_sfu`: the softmax's cost per pair is divided by the chip's `exp_throughput_factor` (its SFU
    exponential throughput relative to the family's base chip).
    `decode_unit_prologue`: each decode work unit also streams a prologue worth gemm_tile_fixed_k keys
    (`roofline.cost.kernels.attention.attention_decode_time_s`); without it a unit's fixed cost is only its wave's
    attention_tile_fixed_s (`decode_waves`)."""

    name: str
    q_rows: tuple[tuple[float, int], ...]
    packs_gqa: bool
    decode_heads_per_cta: int = 1
    decode_waves: bool = False
    softmax_on_sfu: bool = False
    decode_unit_prologue: bool = True
    mla_decode_rows: int = 64
    mla_decode_trtllm_gen: bool = False


# vLLM's FA3 varlen on Hopper (and the FA2 kernels of Ampere, described with the same tiles): FA3 always packs
# GQA heads for varlen (flash-attention `hopper/heuristics.h` `should_pack_gqa`).
FA3_KERNELS = AttentionKernels(name="fa3", q_rows=_FA3_Q_ROWS, packs_gqa=True)
# vLLM's default attention on SM100/SM103: FlashInfer's TRT-LLM ("trtllm-gen") FMHA cubins, e.g.
# `fmhaSm100fKernel_QkvBfloat16OBfloat16H128PagedKvCausalP32VarSeqQ128Kv128PersistentContext`. The launch (TensorRT-LLM
# `cpp/tensorrt_llm/kernels/trtllmGenKernels/fmha/fmhaKernels.h`, `computeNumCtas`, the same code in FlashInfer's
# `include/flashinfer/trtllm/fmha/fmhaKernels.cuh`): grid = ceil(max_q / stepQ) x query heads (context kernels:
# maxNumHeadsQPerKvInCta == 1, no GQA packing) x batch, run by the persistent tile scheduler. One CTA holds two 128-row
# Q tiles (one per softmax warpgroup: the SM100 FMHA design of CUTLASS's `examples/python/CuTeDSL/blackwell/fmha.py`,
# q_stage = 2), so a work tile is 256 query rows of one head; of 128 and 256 rows the tables fit 256 better
# (benchmarks/accuracy/gpu_profiles.py). Generation kernels put min(heads per KV head, 8 or 16 (SwapsMmaAb) / 32
# (KeepsMmaAb)) query heads of one KV head in a CTA: one work unit per (sequence, KV head) up to 32 heads per KV head.
# With too few CTAs to fill the SMs the generation kernels split the KV sequence over more CTAs (multiCtasKvMode), else
# run persistent over waves. Softmax exponentials run on the SFU (MUFU.EX2), whose throughput Blackwell Ultra doubles
# (`exp_throughput_factor` of the chip profile).
TRTLLM_GEN_KERNELS = AttentionKernels(name="trtllm-gen", q_rows=((math.inf, 256),), packs_gqa=False,
                                      decode_heads_per_cta=32, decode_waves=True, softmax_on_sfu=True,
                                      mla_decode_trtllm_gen=True)
# vLLM's FLASH_ATTN backend on Ada (SM89) runs FlashAttention 2 (vllm_flash_attn, fa_version 2); with a paged KV
# cache `mha_varlen_fwd` always launches the split-KV kernel (csrc/flash_attn/flash_api.cpp:
# `run_mha_fwd(params, stream, /*force_split_kernel=*/paged_KV)`), whose tiles are fixed for every head_dim
# (flash_fwd_launch_template.h `run_mha_fwd_splitkv_dispatch`: kBlockM = 64 query rows, kBlockN = 256 / 128 / 64
# keys for head_dim <= 64 / <= 128 / above, 4 warps: 72-96 KB of shared memory, one CTA per SM on Ada's 100 KB).
# Prefill: one CTA per (64 query rows, query head, sequence), no GQA packing. Decode (max_seqlen_q == 1):
# `seqlenq_ngroups_swapped` moves a KV head's query heads into the 64 rows, one CTA per (sequence, KV head), split
# over the keys (`num_splits_heuristic`) while the CTAs do not fill the SMs; past that the CTAs run in waves of one
# per SM, each wave paying a CTA's fixed time (load Q, the first K/V block, write O): the L40S decode tables take
# 4.0-4.5 us per wave of 142 (sequence, KV head) units at short contexts (batch 64-2048, 2-8 keys: 25-503 us).
# With an fp8 KV cache vLLM runs FlashInfer on Ada (its decode/prefill kernels: CTAs per (sequence, KV head) and
# 64-128-row query tiles too); the family's one description covers both.
# One CTA per SM: a decode unit's fixed cost is its wave's (attention_tile_fixed_s), not extra bytes streamed
# (`decode_unit_prologue` False; with it the fitted per-unit prologue, tied to gemm_tile_fixed_k, charged 3.5x the
# tables' 4 us per wave; benchmarks/accuracy/gpu_profiles.py compares both).
FA2_SPLITKV_KERNELS = AttentionKernels(name="fa2-splitkv", q_rows=((math.inf, 64),), packs_gqa=False,
                                       decode_heads_per_cta=64, decode_waves=True, decode_unit_prologue=False,
                                       mla_decode_rows=16)
def attention_q_tile_tokens(head_dim: int, heads: int, kv_heads: int,
                            kernels: AttentionKernels = FA3_KERNELS) -> float:
    """Tokens of one prefill work tile: the tile's query rows, divided among the query heads packed into it."""
    rows = next(r for max_dim, r in kernels.q_rows if head_dim <= max_dim)
    return rows / max(heads / kv_heads, 1.0) if kernels.packs_gqa else float(rows)


def attention_tile_heads(heads: Any, kv_heads: Any, kernels: AttentionKernels = FA3_KERNELS) -> Any:
    """Prefill work tiles per token tile of a sequence: one per KV head (GQA packed) or one per query head."""
    return kv_heads if kernels.packs_gqa else heads


def decode_work_heads(heads: Any, kv_heads: Any, kernels: AttentionKernels = FA3_KERNELS) -> Any:
    """Decode work units per sequence: one per KV head, or (without packing) per group of at most
    `decode_heads_per_cta` query heads of one KV head."""
    if kernels.packs_gqa:
        return kv_heads
    return kv_heads * np.ceil(heads / kv_heads / kernels.decode_heads_per_cta)



def attention_prefill_time_s(hw: HardwareProfile, pairs: Any, bytes_moved: Any, work_units: Any, head_dim: Any,
                             dtype: str, kv_fp8: Any = False) -> Any:
    """One varlen flash-attention call's prefill part (arguments: `roofline.cost.ops.prefill_attention_shape`).

    Each computed (query, key) pair costs 4*head_dim matmul FLOPs plus attention_softmax_flops_per_pair of
    softmax work. The work tiles run on the SMs in waves (FA3's persistent scheduler): compute time =
    ceil(tiles / SMs) waves of the mean tile at attention_compute_efficiency of the peak per SM. Each wave
    after the first also pays attention_tile_fixed_s (a tile's pipeline fill: load Q and the first K/V block,
    write O; the first wave's is part of the call's fixed latency, attention_fixed_s). Bytes at
    memory_efficiency; overlap as `_overlap`; plus kernel_fixed_s + attention_fixed_s. With an fp8 KV cache
    (`kv_fp8`, a bool or an array of them) the compute efficiency is scaled by attention_fp8_kv_compute_factor.
    Where the family's kernels run the softmax on the SFU (`AttentionKernels.softmax_on_sfu`), its cost is
    divided by the chip's `exp_throughput_factor` (Blackwell Ultra: 2)."""
    e = hw.efficiency
    sms = hw.num_compute_units
    units = _max(work_units, 1.0)
    eff = e.attention_compute_efficiency * np.where(kv_fp8, e.attention_fp8_kv_compute_factor, 1.0) \
        if _any(kv_fp8) else e.attention_compute_efficiency
    per_sm = hw.peak_flops(dtype) * eff / sms
    waves = _ceil(units / sms)
    softmax = e.attention_softmax_flops_per_pair
    if kernel_families.kernel_family(hw.family).attention.softmax_on_sfu:
        softmax = softmax / hw.exp_throughput_factor
    tc = waves * pairs / units * (4.0 * head_dim + softmax) / per_sm + (waves - 1) * e.attention_tile_fixed_s
    tm = bytes_moved / (_bandwidth(hw) * e.memory_efficiency)
    return _overlap(tc, tm, e.overlap_exponent) + e.kernel_fixed_s + e.attention_fixed_s


def attention_decode_time_s(hw: HardwareProfile, flops: Any, bytes_moved: Any, work_units: Any, key_bytes: Any,
                            dtype: str, kv_fp8: Any = False) -> Any:
    """Decode attention: streams each sequence's KV cache once (split-KV kernels keep all SMs busy); each
    work unit (`roofline.cost.kernels.attention.decode_work_heads`) also pays a prologue worth `gemm_tile_fixed_k` keys of
    `key_bytes`. With an fp8 KV cache the bandwidth efficiency is scaled by attention_fp8_kv_bandwidth_factor.
    Where the family's decode kernel runs its work units in waves (`AttentionKernels.decode_waves`: TRT-LLM's
    persistent generation kernels once the units fill the SMs; FA2's split-KV kernel, one CTA per SM), each wave
    after the first pays
    attention_tile_fixed_s, as prefill tiles do."""
    return attention_decode_time_of_terms_s(attention_decode_terms(hw, work_units, key_bytes, dtype, kv_fp8), flops,
                                            bytes_moved)


class DecodeAttentionTerms(NamedTuple):
    """The parts of `attention_decode_time_s` that depend on the device, the dtypes and the work units alone (not on
    the FLOPs and bytes of the contexts), so that a caller timing many steps of one batch size computes them once."""

    compute_flops_per_s: Any  # peak at the attention compute efficiency
    prologue_bytes: Any  # the work units' prologues
    bandwidth_bytes_per_s: Any  # at the attention memory efficiency (fp8-scaled)
    overlap_exponent: float
    kernel_fixed_s: float
    attention_fixed_s: float
    waves_s: Any  # the waves after the first (`AttentionKernels.decode_waves`), else None


def attention_decode_terms(hw: HardwareProfile, work_units: Any, key_bytes: Any, dtype: str,
                           kv_fp8: Any = False) -> DecodeAttentionTerms:
    e = hw.efficiency
    eff = e.attention_memory_efficiency * np.where(kv_fp8, e.attention_fp8_kv_bandwidth_factor, 1.0) \
        if _any(kv_fp8) else e.attention_memory_efficiency
    kernels = kernel_families.kernel_family(hw.family).attention
    prologue = work_units * e.gemm_tile_fixed_k * key_bytes if kernels.decode_unit_prologue else 0.0
    waves = (_ceil(_max(work_units, 1.0) / hw.num_compute_units) - 1) * e.attention_tile_fixed_s \
        if kernels.decode_waves else None
    return DecodeAttentionTerms(hw.peak_flops(dtype) * e.attention_compute_efficiency, prologue, _bandwidth(hw) * eff,
                                e.overlap_exponent, e.kernel_fixed_s, e.attention_fixed_s, waves)


def attention_decode_time_of_terms_s(terms: DecodeAttentionTerms, flops: Any, bytes_moved: Any) -> Any:
    """`attention_decode_time_s` from its `attention_decode_terms`: the same floats."""
    compute_rate, prologue, bandwidth, p, kernel_fixed_s, attention_fixed_s, waves_s = terms
    tc = flops / compute_rate
    tm = (bytes_moved + prologue) / bandwidth
    t = _overlap(tc, tm, p) + kernel_fixed_s + attention_fixed_s
    if waves_s is not None:
        t = t + waves_s
    return t

