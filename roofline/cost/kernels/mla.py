"""Multi-head latent attention (DeepSeek-V3 family) as vLLM runs it: operator records and the two attention kernels.

    records = mla_records(spec, quant, tp, stats, backend)     # list[OpRecord], per layer summed over layers
    backend = mla_backend(hw.family, quant.kv_dtype)            # the kernels vLLM picks on that GPU
    t = mla_decode_time_s(hw, *record.shape, kv_fp8)            # kind "mla_decode"
    t = mla_prefill_time_s(hw, *record.shape)                   # kind "mla_prefill"

vLLM's MLA layer (vllm/model_executor/layers/mla.py `MultiHeadLatentAttentionWrapper`, the attention in
vllm/model_executor/layers/attention/mla_attention.py `MLACommonImpl`; DeepSeek-V2 paper, section 2.1) per layer
and rank, with h = heads / TP query heads, latent width L = kv_lora_rank (512), rope width R (64), nope width P
(128), value width V (128), all tokens of the step (T):

    fused_qkv_a_proj  T x hidden -> q_lora_rank + L + R   replicated on every rank (not split by TP)
    q_a / kv_a norms  RMSNorm of the q latent and the kv latent
    q_b_proj          T x q_lora_rank -> h x (P + R)     column-parallel
    rope              on the R-wide part of q and of the shared key k_pe
    cache write       L + R values per token into the latent cache (`concat_and_cache_mla`), one "head" shared
                      by all query heads: every rank holds the whole latent cache
    prefill path      (query lengths above the decode backend's `reorder_batch_threshold`): kv_b_proj up-projects
                      the latents of the new tokens AND of the cached context (chunk by chunk through the
                      workspace, `_compute_prefill_context`) to h keys (P) and values (V); flash attention with
                      query/key head P + R = 192 and value head 128 ("mla_prefill")
    decode path       (the other tokens): W_UK absorbed into q (a batched matmul per head, T x P -> T x L),
                      attention of h heads of width L + R = 576 over the latent cache, values L wide
                      ("mla_decode"), W_UV (per head, L -> V)
    o_proj            T x h V -> hidden, row-parallel (its all-reduce is the layer's usual one)

The decode kernels per family and KV dtype (`KernelFamily.mla`, vLLM 0.24 `CudaPlatform.get_attn_backend_cls` order for
MLA, as the aiconfigurator-core tables record them): Hopper FLASH_ATTN_MLA (FA3 with a 576-wide head, bf16 KV only,
`reorder_batch_threshold` 512) and FLASHMLA for an fp8 KV cache (threshold 128); Blackwell FLASHINFER_MLA
(TRT-LLM-gen MLA kernels, decode only); Ada and SM120 TRITON_MLA. Prefill: FLASH_ATTN (vLLM's flash-attention)
on all of them with a bf16 query (`prefill/selector.py`; the tables' context rows name it). A decode work tile holds
`AttentionKernels.mla_decode_rows` query rows (heads x query tokens of one sequence): 64 for FlashMLA's and FA3's
Q tile, 16 for the Triton MLA kernel (vLLM `vllm/v1/attention/ops/triton_decode_attention.py`
`_decode_grouped_att_m_fwd`: BLOCK_H = 16, grid (batch, cdiv(heads, 16), splits)); on Blackwell TRT-LLM-gen's
kernel choice per call (`mla_decode_rows`: 8, 16, 64 or 128 rows).
Fewer heads pad a tile; more heads read the latents once per tile, the repeated reads
of one sequence's latents by its other tiles (running at the same time) partly from the L2:
`mla_decode_reread_fraction` of their bytes cost DRAM time.

The kernels' efficiencies are the chip's `mla_*` efficiency fields, fitted on the package's vLLM MLA module tables
(`roofline calibrate --op-tables --op mla`, `roofline.calibration.mla_fit`), per KV dtype for the decode kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.core.model_spec import ModelSpec
from roofline.cost.hardware import HardwareProfile
from roofline.cost.kernels.attention import AttentionKernels
from roofline.cost.kernels.gemm import gemm_time_s
from roofline.cost.kernels.mla_backends import MlaBackend
from roofline.cost.ops import OpRecord, elementwise_record, gemm_record
from roofline.cost.quant import QuantConfig
from roofline.errors import UserError

# Query rows of one decode work tile (heads x query tokens of a sequence) where the family does not say otherwise
# (`AttentionKernels.mla_decode_rows`): FlashMLA's `BLOCK_SIZE_M` 64 (csrc/flash_mla/kernels,
# `Flash_fwd_kernel_traits_mla`) and FA3's 64-row tile for a 576-wide head.
MLA_DECODE_ROWS = 64
_ROPE_FLOPS_PER_ELEMENT = 3
_NORM_FLOPS_PER_ELEMENT = 5




def mla_decode_rows(kernels: AttentionKernels, heads: int, num_seqs: Any, kv_len: Any, sms: int) -> Any:
    """Query rows of one decode work tile of `num_seqs` decodes over `kv_len` keys each (scalars or arrays; each tile
    of a sequence reads its latents): the family's fixed `AttentionKernels.mla_decode_rows`, or, where
    `mla_decode_trtllm_gen`, the MLA generation kernel TRT-LLM-gen picks (FlashInfer
    `include/flashinfer/trtllm/fmha/fmhaKernels.cuh`, `selectMlaGenerationKernel` and `useSwapsMmaAbMlaGenKernel`;
    the same in TensorRT-LLM's `fmhaKernels.h`): up to 32 heads the low-latency SwapsMmaAb kernel with 8 (up to 8
    heads) or 16 query heads a CTA; above, the same 16-head kernel while its CTAs (sequences x ceil(heads / 16))
    fit the `sms` and the keys a CTA takes after the split over the KV sequence (at most ceil(keys / 256) splits,
    SMs / CTAs) are at most 1024, else the high-throughput KeepsMmaAb kernel with 64 heads a CTA, whose 128-head form
    runs two CTAs of one cluster on one latent stream (2-CTA MMA: one tile of 128 rows)."""
    if not kernels.mla_decode_trtllm_gen:
        return kernels.mla_decode_rows
    if heads <= 32:
        return 8 if heads <= 8 else 16
    ctas = np.asarray(num_seqs) * -(-heads // 16)
    kv = np.asarray(kv_len, dtype=np.float64)
    splits = np.maximum(1, np.minimum(np.ceil(kv / 256.0), np.maximum(1, sms // np.maximum(ctas, 1))))
    swaps = (np.ceil(kv / splits) <= 1024) & (ctas <= sms)
    rows = np.where(swaps, 16, 128 if heads == 128 else 64)
    return int(rows) if rows.ndim == 0 else rows


def mla_backend(family: str | None, kv_fp8: bool) -> MlaBackend:
    """vLLM's MLA kernels on a kernel family (`KernelFamily.mla`); a UserError for a family without them."""
    from roofline.cost.kernels import KERNEL_FAMILIES  # (the records are built from this module's backends)

    record = KERNEL_FAMILIES.get(family or "")
    if record is None or record.mla is None:
        families = sorted(f.id for f in KERNEL_FAMILIES.values() if f.mla is not None)
        raise UserError(f"multi-head latent attention is modelled on the kernel families {', '.join(families)}; "
                        f"the device's family is {family or 'not set'}")
    return record.mla[kv_fp8]


@dataclass(frozen=True)
class MlaBatch:
    """What the MLA operators of one step depend on, per path (`MlaBackend.decode_threshold` splits them):
    decode path: sequences, query tokens, work tiles (sum over sequences of ceil(q h / R), R rows a tile),
    padded work rows x keys (sum of ceil(q h / R) R (c + q)), latent reads by all tiles (sum of ceil(q h / R)
    (c + q)), the latents themselves (sum of c + q); prefill path: tokens, cached context tokens (up-projected
    again), (query, key) pairs, query tiles, padding pairs, keys read."""

    decode_seqs: int = 0
    decode_tokens: int = 0
    decode_tiles: int = 0  # work tiles: sum over sequences of ceil(q h / 64)
    decode_row_keys: float = 0.0
    decode_latent_reads: float = 0.0
    decode_latent_tokens: float = 0.0
    prefill_seqs: int = 0
    prefill_tokens: int = 0
    prefill_context_tokens: float = 0.0
    prefill_pairs: float = 0.0
    prefill_q_tiles: int = 0
    prefill_pad_pairs: float = 0.0

    @classmethod
    def from_lengths(cls, query_lens: Any, context_lens: Any, heads: int, threshold: int,
                     q_tile: int = 128, rows: int = MLA_DECODE_ROWS) -> "MlaBatch":
        """Per-sequence query and context lengths -> the sums (query length 0 sequences are skipped); `rows`: query
        rows of a decode work tile (`AttentionKernels.mla_decode_rows`)."""
        q = np.asarray(query_lens, dtype=np.int64)
        c = np.asarray(context_lens, dtype=np.int64)
        live = q > 0
        q, c = q[live], c[live]
        dec = q <= threshold
        qd, cd = q[dec], c[dec]
        tiles = np.ceil(qd * heads / rows)
        qp, cp = q[~dec].astype(np.float64), c[~dec].astype(np.float64)
        n_tiles = np.ceil(qp / q_tile)
        pairs = qp * (cp + 1) + qp * (qp - 1) / 2
        pad = (n_tiles * q_tile - qp) * (cp + qp)
        return cls(decode_seqs=int(qd.size), decode_tokens=int(qd.sum()), decode_tiles=int(tiles.sum()),
                   decode_row_keys=float((tiles * rows * (cd + qd)).sum()),
                   decode_latent_reads=float((tiles * (cd + qd)).sum()), decode_latent_tokens=float((cd + qd).sum()),
                   prefill_seqs=int(qp.size), prefill_tokens=int(qp.sum()), prefill_context_tokens=float(cp.sum()),
                   prefill_pairs=float(pairs.sum()), prefill_q_tiles=int(n_tiles.sum()),
                   prefill_pad_pairs=float(pad.sum()))

    @property
    def num_tokens(self) -> int:
        return self.decode_tokens + self.prefill_tokens

    @classmethod
    def of_decodes(cls, num_seqs: Any, pairs: Any, heads: int, rows: Any = MLA_DECODE_ROWS) -> "MlaBatch":
        """`num_seqs` decodes (one query token each) over `pairs` keys in all (their contexts plus themselves)."""
        tiles = -(-heads // rows)
        return cls(decode_seqs=num_seqs, decode_tokens=num_seqs, decode_tiles=num_seqs * tiles,
                   decode_row_keys=tiles * rows * pairs, decode_latent_reads=tiles * pairs, decode_latent_tokens=pairs)

    @classmethod
    def from_stats(cls, s: Any, heads: int, rows: Any = MLA_DECODE_ROWS) -> "MlaBatch":
        """From a step's `roofline.cost.ops.BatchStats`: its decodes (one query token) on the decode path, every
        longer query on the prefill path. vLLM sends queries up to the decode backend's `reorder_batch_threshold`
        through the decode path too (Hopper: 512 / 128 tokens); the aggregates do not keep them apart, so the step
        model charges such short chunks the prefill path (the tables' fit, `from_lengths`, splits them exactly)."""
        return replace(cls.of_decodes(s.num_decode_seqs, s.decode_pairs, heads, rows),
                       prefill_seqs=s.num_prefill_seqs, prefill_tokens=s.prefill_tokens,
                       prefill_context_tokens=s.prefill_kv_tokens - s.prefill_tokens, prefill_pairs=s.prefill_pairs,
                       prefill_q_tiles=s.prefill_q_tiles, prefill_pad_pairs=s.prefill_pad_pairs)


def mla_heads_per_rank(spec: ModelSpec, tp: int) -> int:
    if spec.num_heads % tp:
        raise UserError(f"--tensor-parallel-size: {tp} must divide num_attention_heads ({spec.num_heads}) of model "
                        f"'{spec.name}'")
    return spec.num_heads // tp


def mla_records(spec: ModelSpec, quant: QuantConfig, tp: int, b: MlaBatch) -> list[OpRecord]:
    """The MLA layer's operators of one step on one rank, summed over the layers (module docstring), from the
    q/kv down-projection to o_proj (the input norm before and the all-reduce after are the decoder's): those of
    every token (`mla_token_records`) and those of the batch's paths (`mla_attention_records`), in execution order
    up to o_proj, which comes last. `b`'s fields may be arrays (many steps at once) whose paths agree (all with a
    decode part or none, likewise prefill)."""
    tokens = mla_token_records(spec, quant, tp, b.num_tokens)
    return tokens[:-1] + mla_attention_records(spec, quant, tp, b) + tokens[-1:]


def mla_token_records(spec: ModelSpec, quant: QuantConfig, tp: int, num_tokens: Any) -> list[OpRecord]:
    """The MLA operators whose cost depends on the step's token count only (a count or an array of counts): the
    q/kv down-projection, the two latent norms, q_b_proj, RoPE, the latent cache write, and o_proj (last)."""
    m = spec.mla
    assert m is not None, "an MLA model"
    h = mla_heads_per_rank(spec, tp)
    n_l, a = spec.num_layers, quant.act_bytes
    wb, gd = quant.weight_bytes_per_param, quant.gemm_dtype
    in_b = 1.0 if gd in ("fp8", "int8") else a
    t = num_tokens
    q_rank = m.q_lora_rank or 0
    kvb = quant.kv_bytes_per_element
    ops: list[OpRecord] = []
    if q_rank:
        ops.append(gemm_record("mla_qkv_a_proj", t, q_rank + m.latent_width, spec.hidden_size, n_l, wb, a, gd, in_b))
        ops.append(elementwise_record("mla_q_a_norm", t * q_rank, t * q_rank, _NORM_FLOPS_PER_ELEMENT, n_l, a,
                                      q_rank * a))
        ops.append(gemm_record("mla_q_b_proj", t, h * m.qk_head_dim, q_rank, n_l, wb, a, gd, in_b))
    else:
        ops.append(gemm_record("mla_q_proj", t, h * m.qk_head_dim, spec.hidden_size, n_l, wb, a, gd, in_b))
        ops.append(gemm_record("mla_kv_a_proj", t, m.latent_width, spec.hidden_size, n_l, wb, a, gd, in_b))
    rope = t * (h + 1) * m.qk_rope_head_dim
    ops += [elementwise_record("mla_kv_a_norm", t * m.kv_lora_rank, t * m.kv_lora_rank, _NORM_FLOPS_PER_ELEMENT, n_l,
                               a, m.kv_lora_rank * a),
            elementwise_record("mla_rope", rope, rope, _ROPE_FLOPS_PER_ELEMENT, n_l, a),
            OpRecord(name="mla_cache_write", kind="elementwise", count=n_l, flops=0.0, weight_bytes=0.0,
                     act_bytes=n_l * t * m.latent_width * a, kv_write_bytes=n_l * t * m.latent_width * kvb),
            gemm_record("mla_o_proj", t, spec.hidden_size, h * m.v_head_dim, n_l, wb, a, gd, in_b)]
    return ops


def mla_attention_records(spec: ModelSpec, quant: QuantConfig, tp: int, b: MlaBatch) -> list[OpRecord]:
    """The MLA operators of the batch's two paths: prefill (kv_b_proj over the new and cached latents, the prefill
    attention) and decode (W_UK, the absorbed attention, W_UV)."""
    m = spec.mla
    assert m is not None, "an MLA model"
    h = mla_heads_per_rank(spec, tp)
    n_l, a = spec.num_layers, quant.act_bytes
    wb, gd = quant.weight_bytes_per_param, quant.gemm_dtype
    in_b = 1.0 if gd in ("fp8", "int8") else a
    kvb = quant.kv_bytes_per_element
    ops: list[OpRecord] = []
    if np.any(b.prefill_tokens):
        up = b.prefill_tokens + b.prefill_context_tokens  # new and cached latents, up-projected
        ops.append(gemm_record("mla_kv_b_proj", up, h * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, n_l,
                               wb, a, gd, in_b))
        q_token = h * m.qk_head_dim * a
        kv_token = h * (m.qk_head_dim + m.v_head_dim) * a  # up-projected K (nope + rope) and V
        flops_per_pair = 2.0 * h * (m.qk_head_dim + m.v_head_dim)
        moved = b.prefill_tokens * (q_token + h * m.v_head_dim * a) + up * kv_token
        computed = b.prefill_pairs + b.prefill_q_tiles * 128 * 128 / 2.0 + b.prefill_pad_pairs
        ops.append(OpRecord(name="mla_prefill", kind="mla_prefill", count=n_l, flops=n_l * flops_per_pair * b.prefill_pairs,
                            weight_bytes=0.0, act_bytes=n_l * moved,
                            kv_read_bytes=n_l * b.prefill_context_tokens * m.latent_width * kvb,
                            shape=(flops_per_pair * computed, moved, h * b.prefill_q_tiles,
                                   float(m.qk_head_dim + m.v_head_dim)),
                            dtype=quant.act_dtype))
    if np.any(b.decode_tokens):
        # W_UK and W_UV: per-head batched matmuls in the activation dtype (vLLM keeps W_UK_T / W_UV unquantized,
        # `MLACommonBaseImpl.process_weights_after_loading`; the tables' bf16 torch.bmm).
        ops.append(_bmm_record("mla_w_uk", b.decode_tokens, m.kv_lora_rank, m.qk_nope_head_dim, h, n_l, a,
                               quant.act_dtype))
        shape = mla_decode_shape(spec, quant, tp, b.decode_tokens, b.decode_row_keys, b.decode_latent_tokens,
                                 b.decode_latent_reads, b.decode_tiles)
        ops.append(OpRecord(name="mla_decode", kind="mla_decode", count=n_l, flops=n_l * shape[0], weight_bytes=0.0,
                            act_bytes=n_l * (shape[1] - b.decode_latent_tokens * m.latent_width * kvb),
                            kv_read_bytes=n_l * b.decode_latent_tokens * m.latent_width * kvb, shape=shape,
                            dtype=quant.act_dtype))
        ops.append(_bmm_record("mla_w_uv", b.decode_tokens, m.v_head_dim, m.kv_lora_rank, h, n_l, a,
                               quant.act_dtype))
    return ops


def mla_decode_shape(spec: ModelSpec, quant: QuantConfig, tp: int, tokens: Any, row_keys: Any, latent_tokens: Any,
                     latent_reads: Any, tiles: Any) -> tuple[Any, Any, Any, Any]:
    """One layer's absorbed decode kernel (`mla_decode_time_s`'s arguments after `hw`): FLOPs of the padded work rows
    (QK over L + R, PV over L), the query, output and latents read once, the work tiles, and the latents' repeated
    reads by a sequence's other tiles (`MlaBatch`'s decode sums)."""
    m = spec.mla
    assert m is not None, "an MLA model"
    h, a, kvb = mla_heads_per_rank(spec, tp), quant.act_bytes, quant.kv_bytes_per_element
    width = m.latent_width + m.kv_lora_rank
    qo = tokens * h * width * a
    return (2.0 * width * row_keys, qo + latent_tokens * m.latent_width * kvb, tiles,
            (latent_reads - latent_tokens) * m.latent_width * kvb)


def _bmm_record(name: str, m: float, n: int, k: int, groups: int, count: int, a: float, dtype: str) -> OpRecord:
    """`groups` GEMMs of m x k by k x n in one batched call (kind "mla_bmm", shape (m, n, k, groups))."""
    return OpRecord(name=name, kind="mla_bmm", count=count, flops=count * 2.0 * m * n * k * groups,
                    weight_bytes=count * groups * n * k * a, act_bytes=count * groups * (m * k + m * n) * a,
                    shape=(m, n, k, float(groups)), dtype=dtype)


MLA_OP_KINDS = ("mla_prefill", "mla_decode", "mla_bmm")


def mla_op_time_s(hw: HardwareProfile, op: OpRecord, kv_fp8: bool) -> Any:
    """Seconds of one MLA record (all its `count` instances): the two attention kernels, and the W_UK / W_UV
    batched matmuls as one grouped 16-bit GEMM each (`gemm_time_s` with `groups` = heads: torch.bmm runs cuBLAS's
    batched GEMM)."""
    if op.kind == "mla_prefill":
        flops, moved, tiles, width = op.shape
        t = mla_prefill_time_s(hw, flops, moved, tiles, width)
    elif op.kind == "mla_decode":
        flops, moved, tiles, reread = op.shape
        t = mla_decode_time_s(hw, flops, moved, tiles, reread, kv_fp8)
    else:
        assert op.kind == "mla_bmm", op.kind
        m, n, k, groups = op.shape
        a = op.weight_bytes / (op.count * groups * n * k)  # 16-bit weights: bytes per element
        t = gemm_time_s(hw, m, n, k, op.dtype, a, a, a, groups=groups)
    return t


def _soft_max(tc: Any, tm: Any, p: float) -> Any:
    """(tc^p + tm^p)^(1/p): the project's overlap of compute and memory time (`overlap_exponent`)."""
    hi = np.maximum(tc, tm) + 1e-30
    return hi * ((tc / hi) ** p + (tm / hi) ** p) ** (1.0 / p)


def mla_prefill_time_s(hw: HardwareProfile, flops: Any, bytes_moved: Any, work_tiles: Any, head_width: Any) -> Any:
    """vLLM's MLA prefill flash attention (query/key head 192, value 128, h heads, causal) of one layer: the family's
    attention kernel description (`attention_compute_efficiency` per SM over waves of work tiles, the softmax per
    pair) at `mla_prefill_compute_factor` of its efficiency, `mla_prefill_tile_fixed_s` per wave of work tiles (a
    tile's Q load, its K/V pipeline fill and its output write, which a short sequence's tile pays whole: many short
    prompts cost far more than their pairs), plus the kernel's and the attention's fixed costs. `flops` are those of
    the computed pairs (diagonal tiles and padding included), `head_width` the QK plus PV width (320). Plus
    `mla_prefill_fixed_s`: the prefill path's own kernels besides the attention (query and key concatenation, the
    workspace gather, output copies), per call."""
    e = hw.efficiency
    sms = hw.num_compute_units
    units = np.maximum(work_tiles, 1.0)
    per_sm = hw.peak_flops("bf16") * e.attention_compute_efficiency * e.mla_prefill_compute_factor / sms
    waves = np.ceil(units / sms)
    pairs_flops = flops * (1.0 + e.attention_softmax_flops_per_pair / (2.0 * head_width))
    tc = waves * (pairs_flops / units / per_sm + e.mla_prefill_tile_fixed_s)
    tm = bytes_moved / (hw.memory_bandwidth_bytes_per_s * e.memory_efficiency)
    return _soft_max(tc, tm, e.overlap_exponent) + e.kernel_fixed_s + e.attention_fixed_s + e.mla_prefill_fixed_s


def mla_decode_time_s(hw: HardwareProfile, flops: Any, bytes_moved: Any, num_tiles: Any, reread_bytes: Any,
                      kv_fp8: bool = False) -> Any:
    """The absorbed MLA decode kernel of one layer (FlashMLA / FA3-MLA / FlashInfer MLA / Triton MLA): the padded
    work rows' FLOPs at `mla_decode_compute_efficiency` of the bf16 peak, the latents (read once) and the query and
    output, plus `mla_decode_reread_fraction` of `reread_bytes` (the latents read again by a sequence's other work
    tiles, partly from the L2), at `mla_decode_memory_efficiency` of the DRAM bandwidth (the `_fp8_kv` fields with
    an fp8 KV cache, another kernel), overlapped; plus `mla_decode_tile_fixed_s` per wave of its `num_tiles` work
    tiles over the SMs (a tile's Q load, output write and split combine), `mla_decode_fixed_s` (the metadata and
    combine kernels) and the kernel's fixed cost."""
    e = hw.efficiency
    if kv_fp8:
        ce, me, fixed = e.mla_decode_fp8_kv_compute_efficiency, e.mla_decode_fp8_kv_memory_efficiency, \
            e.mla_decode_fp8_kv_fixed_s
    else:
        ce, me, fixed = e.mla_decode_compute_efficiency, e.mla_decode_memory_efficiency, e.mla_decode_fixed_s
    tc = flops / (hw.peak_flops("bf16") * ce)
    tm = (bytes_moved + e.mla_decode_reread_fraction * reread_bytes) / (hw.memory_bandwidth_bytes_per_s * me)
    waves = np.ceil(np.maximum(num_tiles, 1.0) / hw.num_compute_units)
    return _soft_max(tc, tm, e.overlap_exponent) + e.kernel_fixed_s + fixed + waves * e.mla_decode_tile_fixed_s


def latent_cache_bytes_per_token(spec: ModelSpec, kv_bytes_per_element: float) -> float:
    """One token's latent cache over all layers on ONE rank: every rank holds it whole (vLLM's `MLAAttentionSpec`:
    one KV head of `kv_lora_rank + qk_rope_head_dim` values, not split by tensor parallelism)."""
    assert spec.mla is not None
    return spec.num_layers * spec.mla.latent_width * kv_bytes_per_element

