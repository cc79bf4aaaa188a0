"""Operator times of this project's engine (`engine/`, PyTorch eager) on a CPU: the `kind: cpu` branch of
`roofline.cost.step_cost`.

    t, kernels = op_time_s(hw, op, quant)                      # one OpRecord, all its `count` instances
    records = attention_records(rank, stats, quant)            # attention as the engine runs it (CPU shapes)
    gemm_time_s(hw, m, n, k, "bf16", 2.0, 2.0, 2.0)           # one GEMM call

`roofline.cost.step_cost` calls these when the profile's `kind` is `cpu`; GPU profiles never reach this module.
A CPU runs the engine's torch ops one after the other on its threads, so the GPU ideas (output tiles, waves
over SMs, CUDA graphs, split-KV kernels) do not apply. What does (parameters: `hw.efficiency`, `hw.executor`,
see `roofline.cost.params`):

- GEMM (oneDNN's prepacked bf16 kernel, `engine.model.linear`): compute time = 2*n*k*(m + gemm_fixed_rows)
  / (peak * gemm_compute_efficiency): efficiency m / (m + gemm_fixed_rows) on m rows, with no tile padding;
  memory time = (weights + input + output) / (bandwidth * memory_efficiency * relative streaming rate at m rows):
  a model far larger than the last-level cache streams every weight from DRAM once per step, and how fast the
  kernel pulls them depends on m (the profile's `weight_streaming` curve, measured by `roofline profile-device`
  for the kernel each engine runs, `HardwareProfile.streaming_curve`; on this project's EPYC oneDNN streams 9-11 %
  slower at m = 2 than at m = 1 and 4-17 % faster at m = 3-6, which is why a 2-sequence decode step is the slowest
  of batches 1-4). The curve gives the shape, relative to m = 1; memory_efficiency the level (calibration scales
  it); a profile without a curve streams at one rate for every m. The two overlap as a soft maximum
  (t_c^p + t_m^p)^(1/p), p = overlap_exponent (hardware prefetch streams weights while the cores compute).
- Attention (`engine.attention.paged_attention`, per layer): the new K/V are written with two `index_copy_`;
  decodes in groups of about DECODE_GROUP_KEYS padded keys gather their blocks (`index_select` of K and V into
  a reused scratch buffer, padded to the longest decode), then two batched matmuls with an fp32 softmax
  between; each prefill chunk is one SDPA call (with a gather of its cached context first when it has one). A
  chunk with cached context passes SDPA an explicit causal mask, and PyTorch's CPU flash kernel skips key blocks
  only for `is_causal` (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp: `num_keys = is_causal ? min(m +
  qBlockSize, kvSize) : kvSize`), so it computes all q x (context + q) pairs: the causal ones plus
  `BatchStats.prefill_masked_pairs`. FLOPs at attention_compute_efficiency of the peak, the bytes those
  torch ops move at attention_memory_efficiency (decode) / memory_efficiency (prefill), soft maximum.
- Elementwise operators (norms, RoPE, SiLU*mul, residual adds, embedding) and sampling: bytes at
  memory_efficiency. Their cost on a CPU is mostly the torch ops the engine issues (`ENGINE_TORCH_OPS`, counted
  in engine/model.py): each costs executor.kernel_launch_s of host time (Python, dispatcher, allocation),
  which `roofline.cost.step_cost.StepCostModel` adds per kernel in eager mode, with step_overhead_s per step and
  step_overhead_per_seq_s per scheduled sequence. There is no separate device-side fixed cost per kernel
  (efficiency.kernel_fixed_s is a GPU parameter; on a CPU the host is the device).
- Mixture of experts (Qwen3-MoE, `engine.model.SparseMoeBlock`): the router is a GEMM record like the others;
  the experts' record (`roofline.cost.ops.moe_record`: tokens per touched expert, touched experts in expectation
  under uniform routing, E * (1 - (1 - k/E)^T), as on a GPU) costs, per touched expert, its own two GEMM calls on
  its tokens (`gemm_time_s` with groups = touched: each call pays the small-m efficiency of its few rows and
  streams its expert's weights) and MOE_OPS_PER_EXPERT torch ops of host time (executor.kernel_launch_s each,
  folded into the record's time because their number is a fractional expectation); plus the bytes of SiLU*mul
  and of the gather/sort/scale/scatter around the loop at memory_efficiency, and MOE_FIXED_OPS torch ops counted
  per layer like `ENGINE_TORCH_OPS`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from roofline.cost.hardware import HardwareProfile, StreamingCurve
from roofline.cost.ops import BatchStats, OpRecord, RankShape
from roofline.cost.ops import attention_records as gpu_attention_records
from roofline.cost.quant import EIGHT_BIT_DTYPES, QuantConfig
from roofline.errors import UserError

# This executor's name among `roofline.cost.cpu.CPU_ENGINES` (the profile's `weight_streaming` key).
ENGINE = "roofline-engine"

# Torch ops (dispatched calls that compute or copy; views and splits not counted) per instance of each
# operator record of `roofline.cost.ops`, as engine/model.py issues them:
# - rms_norm: float(), F.rms_norm, to(dtype), mul by weight = 4; each residual add (x + o_proj(...),
#   x + down_proj(...): 2 per layer) is counted with the norm that follows it (input_norm, post_attn_norm: 5;
#   final_norm stays 4, layer 0's input_norm has no add before it: the totals match).
# - RoPE on q and k together (one view of qkv's columns): x*cos, roll, *signed_sin, add = 4. qk_norm (Qwen3):
#   two rms_norms and the cat that rejoins q and k = 9.
# - embedding: F.embedding, rope_table[positions]. silu_and_mul: silu, mul.
# - lm_head: hidden[logit_rows], linear, .float(). GEMMs: one oneDNN call each.
# - sampling (`engine.sampler`, temperature > 0): argmax, tolist, the temperatures tensor, index random rows,
#   divide by temperature, softmax, the uniforms (empty, rand, index-assign), inverse-CDF draw (cumsum, scale,
#   searchsorted, clamp), tolist = 14.
ENGINE_TORCH_OPS: dict[str, int] = {"embedding": 2, "input_norm": 5, "qk_norm": 9, "rope": 4,
                                    "post_attn_norm": 5, "silu_and_mul": 2, "final_norm": 4, "lm_head": 3,
                                    "sampling": 14}
# Qwen3-MoE's sparse block (engine/model.py SparseMoeBlock; the router GEMM is its own record): outside the expert
# loop softmax, topk, sum and div (norm_topk_prob: every Qwen3-MoE preset; the records do not carry the flag),
# argsort, bincount, tolist, //, the gather x[tokens], cat, to(dtype), the [order] index of the weights, mul,
# zeros_like, index_add_ = 15 (engine.model.MOE_FIXED_OPS + MOE_NORM_TOPK_OPS - the router); per expert that
# received tokens: gate_up GEMM, silu, mul, down GEMM = 4.
MOE_FIXED_OPS = 15
MOE_OPS_PER_EXPERT = 4
# Bytes per routed (token, expert) pair and hidden element around the expert loop, in activation bytes: the
# gather reads x and writes xs (2), cat reads and writes the outputs (2), the weight multiply reads and writes
# them (2), index_add_ reads them (1) = 7 (the output's zeros_like and index_add_ passes, 3 per token, and the
# [T, E] fp32 router softmax/topk are left out: a few per cent of these). SiLU*mul per routed pair and
# expert-width element: silu reads and writes the gate half (2), mul reads it and up and writes (3) = 5.
MOE_ROUTED_HIDDEN_BYTES = 7.0
MOE_SILU_MUL_BYTES = 5.0
# paged_attention per layer: index_copy_ of K and of V, torch.empty of the output.
ATTENTION_CALL_OPS = 3
# Per decode group: 2 index_select gathers, matmul, float(), mul_ scale, add_ padding bias, softmax, to(bf16),
# matmul into the output = 9.
DECODE_OPS = 9
# engine.attention.DECODE_GROUP_KEYS (roofline does not import engine): decodes are attended in groups of
# consecutive sequences holding at most this many padded keys, DECODE_OPS each.
DECODE_GROUP_KEYS = 8192
# DRAM passes over the decodes' K/V bytes: the gather reads the cache once; its copy (written, then read by
# the two matmuls) is a group of <= DECODE_GROUP_KEYS keys in a reused scratch buffer and stays in the cache.
# (The engine's earlier fresh-tensor gather of all decodes at once moved them 3 times.)
DECODE_KV_PASSES = 1.0
# A prefill chunk: SDPA and the copy into the output; one with cached context also gathers K and V (+2).
PREFILL_CHUNK_OPS = 2
# Bytes per decode score (per head and key) of the engine's fp32 softmax path: bmm writes bf16 (2), float()
# reads 2 writes 4, mul_ and add_ (+ bias) read and write fp32 (20), softmax reads and writes fp32 (8), to(bf16)
# reads 4 writes 2, the second bmm reads 2: 44.
DECODE_SCORE_BYTES = 44.0
# Sampling bytes per fp32 logit: argmax reads 4; indexing, temperature divide and softmax read and write
# (24); the inverse-CDF draw reads the probabilities and writes their running sum (8): 36.
SAMPLING_BYTES_PER_LOGIT = 36.0
# Extra bytes per LM-head logit row element beyond the GEMM's: .float() reads bf16 and writes fp32.
LOGITS_TO_FP32_BYTES = 6.0


def check_profile(hw: HardwareProfile) -> None:
    """A CPU profile describes this engine: its per-operator op counts are `ENGINE_TORCH_OPS`, so the GPU
    executor's single `kernels_per_elementwise_op` knob must stay at its default."""
    if hw.executor.kernels_per_elementwise_op != 1:
        raise UserError(f"hardware '{hw.id}': executor.kernels_per_elementwise_op: a cpu profile takes the "
                        f"engine's own torch op counts (roofline.cost.cpu.engine.ENGINE_TORCH_OPS); remove the field "
                        f"or set it to 1")


def _soft_max(tc: Any, tm: Any, p: float) -> Any:
    """(tc^p + tm^p)^(1/p), the soft maximum of compute and memory time of `roofline.cost.roofline_math._overlap`."""
    hi = (tc + tm) + 1e-30  # any positive scale >= both keeps the powers in range; scalars or arrays
    return hi * ((tc / hi) ** p + (tm / hi) ** p) ** (1.0 / p)


def gemm_time_s(hw: HardwareProfile, m: Any, n: Any, k: Any, dtype: str, weight_bytes_per_param: float,
                in_bytes: float, out_bytes: float, groups: Any = 1, eff_scale: float = 1.0,
                streaming: StreamingCurve | None = None) -> Any:
    """One GEMM call y (m x n) = x (m x k) @ W (k x n) (or `groups` equal ones): see the module docstring.
    `streaming`: the weight-streaming curve of the kernel (`HardwareProfile.streaming_curve`); None = one rate."""
    e = hw.efficiency
    eff = (e.gemm_fp8_compute_efficiency if dtype in EIGHT_BIT_DTYPES else e.gemm_compute_efficiency) * eff_scale
    tc = groups * 2.0 * n * k * (m + e.gemm_fixed_rows) / (hw.peak_flops(dtype) * eff)
    moved = groups * (m * k * in_bytes + n * k * weight_bytes_per_param + m * n * out_bytes)
    rate = hw.memory_bandwidth_bytes_per_s * e.memory_efficiency
    tm = moved / (rate if streaming is None else rate * streaming.relative(m))
    return _soft_max(tc, tm, e.overlap_exponent)


def memory_s(hw: HardwareProfile, bytes_moved: Any) -> Any:
    return bytes_moved / (hw.memory_bandwidth_bytes_per_s * hw.efficiency.memory_efficiency)


def attention_records(r: RankShape, s: BatchStats, quant: QuantConfig) -> list[OpRecord]:
    """`roofline.cost.ops.attention_records` (same names, FLOPs and bytes) with the shapes `op_time_s` needs for
    the engine's attention. Decode: (sequences, keys per head read = sequences x longest decode's keys,
    query heads, head_dim, bytes of one token's K and V, new tokens' K/V + Q/O bytes, torch ops).
    Prefill: (chunks, causal (query, key) pairs, cached context tokens gathered, query heads, head_dim,
    bytes of one token's K and V, Q/O + new K/V bytes, torch ops)."""
    kv_token = 2 * r.kv_heads * r.head_dim * quant.kv_bytes_per_element
    q_token = r.heads * r.head_dim * quant.act_bytes
    call_ops = ATTENTION_CALL_OPS
    out = []
    shape: tuple[float, ...]
    for rec in gpu_attention_records(r, s, quant):
        if rec.kind == "attention_decode":
            new = s.num_decode_seqs * (2 * kv_token + 2 * q_token)  # index_copy_ reads and writes; Q, O
            keys = s.num_decode_seqs * s.decode_max_keys
            num_groups = max(1, math.ceil(keys / DECODE_GROUP_KEYS))
            shape = (s.num_decode_seqs, keys, r.heads, r.head_dim, kv_token, new,
                     call_ops + DECODE_OPS * num_groups)
        else:
            new = s.prefill_tokens * (2 * kv_token + 2 * q_token)
            context = s.prefill_kv_tokens - s.prefill_tokens
            ops = (call_ops if not s.num_decode_seqs else 0) + PREFILL_CHUNK_OPS * s.num_prefill_seqs
            pairs = s.prefill_pairs + s.prefill_masked_pairs  # masked chunks: the whole rectangle (docstring)
            shape = (s.num_prefill_seqs, pairs, context, r.heads, r.head_dim, kv_token, new, ops)
        out.append(replace(rec, shape=shape))
    return out


def attention_s(hw: HardwareProfile, pairs: Any, heads: int, head_dim: int, bytes_moved: Any,
                memory_efficiency: float, dtype: str) -> Any:
    """Attention of one layer on a CPU: 4*head_dim FLOPs per (query, key) pair and head at
    attention_compute_efficiency of the peak, `bytes_moved` at `memory_efficiency` of the bandwidth, soft maximum.
    Shared by this engine's attention and vLLM-CPU's (`roofline.cost.cpu.vllm_cpu`): they differ in the bytes."""
    e = hw.efficiency
    tc = 4.0 * heads * head_dim * pairs / (hw.peak_flops(dtype) * e.attention_compute_efficiency)
    tm = bytes_moved / (hw.memory_bandwidth_bytes_per_s * memory_efficiency)
    return _soft_max(tc, tm, e.overlap_exponent)


def attention_decode_time_s(hw: HardwareProfile, num_seqs: float, keys: float, heads: int, head_dim: int,
                            kv_token_bytes: float, new_bytes: float, dtype: str) -> float:
    """One layer's decodes: gather (DECODE_KV_PASSES over the K/V of `keys` keys), scores through the fp32
    softmax path, two batched matmuls."""
    moved = DECODE_KV_PASSES * keys * kv_token_bytes + heads * keys * DECODE_SCORE_BYTES + new_bytes
    return attention_s(hw, keys, heads, head_dim, moved, hw.efficiency.attention_memory_efficiency, dtype)


def attention_prefill_time_s(hw: HardwareProfile, pairs: float, context_tokens: float, heads: int,
                             head_dim: int, kv_token_bytes: float, new_bytes: float, dtype: str) -> float:
    """One layer's prefill chunks: SDPA's (flash, causal-block-skipping) math on the causal pairs; the gather
    of cached context (read and written, then read by SDPA) and Q/O/new K/V at memory_efficiency."""
    return attention_s(hw, pairs, heads, head_dim, 3.0 * context_tokens * kv_token_bytes + new_bytes,
                       hw.efficiency.memory_efficiency, dtype)


def gemm_record_time_s(hw: HardwareProfile, op: OpRecord, quant: QuantConfig, dtype: str, engine: str) -> Any:
    """One instance of a `gemm` record as a oneDNN call (both CPU executors run their projections so, each its own
    oneDNN primitive: `engine`'s weight-streaming curve)."""
    m, n, k, _ = op.shape
    in_bytes = 1.0 if dtype in EIGHT_BIT_DTYPES else quant.act_bytes
    return gemm_time_s(hw, m, n, k, dtype, op.weight_bytes / (op.count * n * k), in_bytes, quant.act_bytes,
                       streaming=hw.streaming_curve(engine))


def op_time_s(hw: HardwareProfile, op: OpRecord, quant: QuantConfig) -> tuple[Any, int]:
    """Seconds of one record (all its `count` instances; shapes may hold arrays of token counts) and the torch
    ops of one instance. Attention records must come from `attention_records` (CPU shapes). The MoE
    experts' torch ops per layer are the fixed ones; their per-expert ops are in the time (`moe_time_s`). Kinds
    this engine never runs on a CPU (collectives) are left to `roofline.cost.step_cost` (`HANDLED_KINDS`)."""
    c = op.count
    dtype = op.dtype if op.dtype in hw.supported_dtypes else quant.act_dtype
    if op.kind == "gemm":
        m, n, k, _ = op.shape
        t = gemm_record_time_s(hw, op, quant, dtype, ENGINE)
        if op.name == "lm_head":  # gather the sampled rows, logits to fp32
            t = t + memory_s(hw, m * k * 2 * quant.act_bytes + m * n * LOGITS_TO_FP32_BYTES)
        return c * t, ENGINE_TORCH_OPS.get(op.name, 1)
    if op.kind == "attention_decode":
        num_seqs, keys, heads, head_dim, kv_token, new, ops = op.shape
        return c * attention_decode_time_s(hw, num_seqs, keys, int(heads), int(head_dim), kv_token, new, dtype), int(ops)
    if op.kind == "attention_prefill":
        _, pairs, context, heads, head_dim, kv_token, new, ops = op.shape
        return (c * attention_prefill_time_s(hw, pairs, context, int(heads), int(head_dim), kv_token, new, dtype),
                int(ops))
    if op.kind == "moe":
        return c * moe_time_s(hw, op, quant, dtype), MOE_FIXED_OPS
    if op.kind == "sampling":
        logits = op.act_bytes / (3 * 4.0)  # the record's fp32 logits (roofline.cost.ops.emit_ops: 3 passes)
        return c * memory_s(hw, logits * SAMPLING_BYTES_PER_LOGIT), ENGINE_TORCH_OPS["sampling"]
    assert op.kind == "elementwise", op.kind
    moved = (op.weight_bytes + op.act_bytes + op.kv_read_bytes + op.kv_write_bytes) / c
    return c * memory_s(hw, moved), ENGINE_TORCH_OPS.get(op.name, 1)


def moe_time_s(hw: HardwareProfile, op: OpRecord, quant: QuantConfig, dtype: str) -> Any:
    """One layer's sparse MoE block without its router (see the module docstring): the touched experts' GEMM calls,
    SiLU*mul and the gather/scatter bytes, and the host time of the per-expert torch ops."""
    tokens_per_expert, touched, hidden, inter = op.shape[:4]
    routed = tokens_per_expert * touched
    w_param, a = quant.experts[1], quant.act_bytes
    curve = hw.streaming_curve(ENGINE)
    gemms = (gemm_time_s(hw, tokens_per_expert, 2 * inter, hidden, dtype, w_param, a, a, groups=touched,
                         streaming=curve)
             + gemm_time_s(hw, tokens_per_expert, hidden, inter, dtype, w_param, a, a, groups=touched,
                           streaming=curve))
    moved = routed * (MOE_ROUTED_HIDDEN_BYTES * hidden + MOE_SILU_MUL_BYTES * inter) * a
    return gemms + memory_s(hw, moved) + touched * MOE_OPS_PER_EXPERT * hw.executor.kernel_launch_s


HANDLED_KINDS = ("gemm", "attention_decode", "attention_prefill", "sampling", "elementwise", "moe")
