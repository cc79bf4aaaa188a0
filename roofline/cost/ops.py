"""Per-operator FLOP and byte counts of one engine step on one tensor-parallel rank.

    stats = BatchStats.from_arrays(query_lens, context_lens, emits, sliding_window=None)
    records = step_ops(spec, quant, tp, stats)      # list[OpRecord], one per operator (summed over layers)

FLOP convention (stated once, used everywhere): 2 FLOPs per multiply-accumulate, as in the Chinchilla / Kaplan
"6N" accounting and LLM-Viewer `model_analyzer.py`; a GEMM of an m-by-k by k-by-n product is 2*m*n*k.
Elementwise operators (norms, RoPE, SiLU-and-mul, sampling) get nominal per-element counts (they are
memory-bound; their FLOPs only label them).

Bytes are split by kind: `weight_bytes` (parameters read), `act_bytes` (activations read + written),
`kv_read_bytes` / `kv_write_bytes` (paged KV cache), `comm_bytes` (per-rank message of a collective).
Tensor parallelism (Megatron-style, as vLLM): attention heads, MLP width, experts' width and vocabulary are
split over `tp` ranks; KV heads too, replicated when `tp` exceeds them (max(1, kv_heads / tp) per rank).
Each record also carries the shape its time formula needs (`roofline.cost.step_cost`): GEMM (m, n, k, groups),
attention aggregates, collective message size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.core.model_spec import ModelSpec
from roofline.cost.kernels.attention import (
    ATTENTION_Q_TILE,
    FA3_KERNELS,
    AttentionKernels,
    attention_q_tile_tokens,
    attention_tile_heads,
    decode_work_heads,
)
from roofline.cost.quant import EIGHT_BIT_DTYPES, QuantConfig
from roofline.errors import UserError

# Nominal FLOPs per element of the memory-bound elementwise operators.
_NORM_FLOPS_PER_ELEMENT = 5  # residual add, square, accumulate, scale by rsqrt, scale by weight
_ROPE_FLOPS_PER_ELEMENT = 3  # x*cos + rotate(x)*sin
_SILU_MUL_FLOPS_PER_ELEMENT = 5  # exp, add, divide (sigmoid), multiply by x, multiply by up
_SAMPLING_FLOPS_PER_LOGIT = 5  # temperature, max, exp, sum, compare (softmax + top-k/top-p + draw)

OP_KINDS = ("gemm", "attention_prefill", "attention_decode", "elementwise", "moe", "all_reduce", "all_gather",
            "sampling")


@dataclass(frozen=True)
class OpRecord:
    """One operator of one step, summed over its `count` instances (layers). Bytes and FLOPs are totals."""

    name: str
    kind: str  # one of OP_KINDS
    count: int  # instances in the step (num_layers for per-layer operators)
    flops: float
    weight_bytes: float
    act_bytes: float
    kv_read_bytes: float = 0.0
    kv_write_bytes: float = 0.0
    comm_bytes: float = 0.0
    # Shape of ONE instance, as the time formula needs it (see roofline.cost.op_time.op_time_s).
    shape: tuple[float, ...] = ()
    dtype: str = "bf16"  # the peak this operator's math runs at


# `BatchStats.from_arrays` runs once per simulated step; `arr.sum()`/`.max()` go through numpy's Python wrappers
# (numpy/_core/_methods.py) on every call, so the ufunc reductions are called directly (the same reductions:
# `.sum()` is `np.add.reduce`; benchmarks/speed/sim_speed.py measures it).
_sum = np.add.reduce
_max = np.maximum.reduce
_min = np.minimum.reduce


@dataclass(frozen=True)
class BatchStats:
    """What the operators of one step depend on, aggregated over its sequences.

    A sequence with one query token is a decode (it reads its context from the paged KV cache); one with more
    is a prefill chunk (causal over its own tokens, attending its earlier context too). `pairs` counts
    (query, key) pairs attention computes, limited by a sliding window. `q_tile` is the number of tokens of one
    flash-attention work tile (`attention_q_tile_tokens`): prefill work is split into tiles of that many tokens.
    """

    num_tokens: int
    num_emits: int
    num_prefill_seqs: int = 0
    prefill_tokens: int = 0
    prefill_pairs: float = 0.0
    prefill_q_tiles: int = 0  # sum over prefill sequences of ceil(q / q_tile): work tiles per KV head
    prefill_kv_tokens: float = 0.0  # keys read per head: cached context in the window + the new tokens
    # Tokens padding the last tile of each prefill sequence up to q_tile, times the keys they see: work the
    # kernel does for nothing (sum over prefill sequences of (ceil(q/q_tile)*q_tile - q) * keys of the last row).
    prefill_pad_pairs: float = 0.0
    # Pairs above the causal diagonal of chunks that follow cached context (sum of q(q-1)/2 over them): what a
    # kernel computes anyway when such a chunk comes with an explicit mask instead of causal block skipping (this
    # project's engine on a CPU: `roofline.cost.cpu.engine.attention_records`); the sliding window is not applied.
    prefill_masked_pairs: float = 0.0
    num_decode_seqs: int = 0
    decode_pairs: float = 0.0  # = keys read per head, one query each
    decode_max_keys: float = 0.0  # keys of the longest decode (an engine padding block tables reads B times it)
    # Hybrid models (gpt-oss: sliding-window and full-attention layers): the same step as its sliding layers see
    # it (keys limited to the window); these stats are then the full layers'. None otherwise.
    sliding: BatchStats | None = None

    @classmethod
    def from_arrays(cls, query_lens: np.ndarray, context_lens: np.ndarray, emits: np.ndarray,
                    sliding_window: int | None = None, q_tile: float = ATTENTION_Q_TILE,
                    hybrid: bool = False, chunked: bool = False) -> "BatchStats":
        """Aggregate per-sequence lengths. The simulator calls this once per step, so decode sequences are
        summed by a few numpy reductions and the (few) prefill sequences in a plain Python loop. `hybrid`: only
        some layers slide (`ModelSpec.is_hybrid_attention`): the full layers' stats with the sliding ones'
        in `sliding`. `chunked`: the window is chunked local attention (`ModelSpec.chunked_local_attention`): a
        query at position p sees the keys of its own chunk of `sliding_window` tokens, p mod window + 1 of them."""
        if hybrid and sliding_window:
            full = cls.from_arrays(query_lens, context_lens, emits, None, q_tile)
            return replace(full, sliding=cls.from_arrays(query_lens, context_lens, emits, sliding_window, q_tile,
                                                         chunked=chunked))
        q = np.asarray(query_lens)
        c = np.asarray(context_lens)
        assert q.shape == c.shape, "query/context lengths per sequence"
        num_tokens = int(_sum(q))
        num_emits = int(np.count_nonzero(emits))
        if q.size == 0 or int(_max(q)) <= 1:
            # Every query length is 0 or 1; with no zeros (sum == count) every sequence is a decode.
            dec = c if num_tokens == q.size else c[q == 1]
            prefill: dict[str, Any] = {}
        else:
            assert int(_min(q)) >= 0, "query lengths must be >= 0"
            dec = c[q == 1]
            idx = np.flatnonzero(q > 1).tolist()
            prefill = cls._prefill_sums(q[idx].tolist(), c[idx].tolist(), sliding_window, q_tile, chunked)
        if chunked and sliding_window:
            return cls._chunked_decodes(num_tokens, num_emits, dec, sliding_window, prefill)
        if sliding_window:
            decode_pairs = float(_sum(np.minimum(dec + 1, sliding_window)))
        else:
            decode_pairs = float(_sum(dec)) + dec.size
        max_keys = 0.0
        if dec.size:
            max_keys = float(_max(dec)) + 1.0
            max_keys = min(max_keys, float(sliding_window)) if sliding_window else max_keys
        return cls(num_tokens=num_tokens, num_emits=num_emits, num_decode_seqs=int(dec.size),
                   decode_pairs=decode_pairs, decode_max_keys=max_keys, **prefill)

    @classmethod
    def _chunked_decodes(cls, num_tokens: int, num_emits: int, dec: np.ndarray, chunk: int,
                         prefill: dict[str, Any]) -> "BatchStats":
        """The stats of chunked local attention layers (`from_arrays`' `chunked`): a decode at context c sees the
        c mod chunk earlier keys of its chunk and itself."""
        keys = dec % chunk + 1
        return cls(num_tokens=num_tokens, num_emits=num_emits, num_decode_seqs=int(dec.size),
                   decode_pairs=float(_sum(keys)), decode_max_keys=float(_max(keys)) if dec.size else 0.0, **prefill)

    @classmethod
    def from_decode_contexts(cls, context_lens: np.ndarray, sliding_window: int | None = None,
                             hybrid: bool = False, chunked: bool = False) -> "BatchStats":
        """`from_arrays` of a step of decodes only (one query token each, every one emitting), from their context
        lengths: the same numbers, two reductions."""
        c = context_lens
        n = int(c.size)
        if chunked and sliding_window and not hybrid:
            return cls._chunked_decodes(n, n, c, sliding_window, {})
        sliding = cls.from_decode_contexts(c, sliding_window, chunked=chunked) if hybrid and sliding_window else None
        window = None if sliding is not None else sliding_window  # a hybrid model's full layers see every key
        if window:
            decode_pairs = float(_sum(np.minimum(c + 1, window)))
        else:
            decode_pairs = float(_sum(c)) + n
        max_keys = 0.0
        if n:
            max_keys = float(_max(c)) + 1.0
            max_keys = min(max_keys, float(window)) if window else max_keys
        return cls(num_tokens=n, num_emits=n, num_decode_seqs=n, decode_pairs=decode_pairs,
                   decode_max_keys=max_keys, sliding=sliding)

    @staticmethod
    def _prefill_sums(qs: list[int], cs: list[int], sliding_window: int | None, q_tile: float,
                      chunked: bool = False) -> dict[str, Any]:
        """The prefill fields of a `BatchStats`, by name (counts as int, sums as float); `chunked`: the window is
        chunked local attention (`from_arrays`)."""
        w = float(sliding_window) if sliding_window else math.inf
        pairs = kv_tokens = pad = masked = 0.0
        tiles = 0
        for q, c in zip(qs, cs):
            assert c >= 0, "context lengths must be >= 0"
            n = math.ceil(q / q_tile)
            if chunked and sliding_window:
                chunk = sliding_window
                last_keys = float((c + q - 1) % chunk + 1)
                pairs += chunked_attention_pairs(q, c, chunk)
                kv_tokens += c % chunk + q
            else:
                last_keys = min(c + q, w)
                pairs += attention_pairs(float(q), float(c), w)
                kv_tokens += min(c, w) + q
            pad += (n * q_tile - q) * last_keys
            tiles += n
            if c:
                masked += q * (q - 1) / 2
        return dict(num_prefill_seqs=len(qs), prefill_tokens=sum(qs), prefill_pairs=pairs, prefill_q_tiles=tiles,
                    prefill_kv_tokens=float(kv_tokens), prefill_pad_pairs=float(pad),
                    prefill_masked_pairs=float(masked))


def chunked_attention_pairs(q: int, c: int, chunk: int) -> float:
    """(query, key) pairs of chunked local attention (Llama 4: vLLM's ChunkedLocalAttention) for q new tokens after
    c cached ones: the query at position p sees p mod chunk + 1 keys. Sum over p in [c, c + q) = F(c + q) - F(c),
    F(n) = (n // chunk) * chunk (chunk + 1) / 2 + r (r + 1) / 2 with r = n mod chunk."""
    def prefix(n: int) -> float:
        r = n % chunk
        return (n // chunk) * chunk * (chunk + 1) / 2 + r * (r + 1) / 2
    return prefix(c + q) - prefix(c)


def attention_pairs(q: Any, c: Any, window: float) -> Any:
    """(query, key) pairs of causal attention for q new tokens after c cached ones, each query seeing at most
    `window` keys: query i (0-based) sees min(c + i + 1, window) keys. Closed form: the first j queries see
    c+1 .. c+j keys (j = clip(window - c, 0, q)); the rest see `window`. Floats or arrays."""
    if not math.isfinite(window):
        return q * (c + 1) + q * (q - 1) / 2
    if isinstance(q, float) and isinstance(c, float):
        j = min(max(window - c, 0.0), q)
        return j * (c + 1) + j * (j - 1) / 2 + (q - j) * min(window, c + q)
    j = np.clip(window - c, 0, q)
    return j * (c + 1) + j * (j - 1) / 2 + (q - j) * np.minimum(window, c + q)


@dataclass(frozen=True)
class RankShape:
    """The per-rank sizes of a model under tensor parallelism `tp`."""

    hidden: int
    heads: int  # query heads per rank
    kv_heads: int  # KV heads per rank (replicated when tp > num_kv_heads)
    head_dim: int
    inter: int  # MLP (or each expert's) width per rank
    vocab: int  # vocabulary rows per rank
    layers: int
    num_experts: int
    topk: int
    sliding_layers: int = 0  # of a hybrid model (BatchStats.sliding); 0 when every layer is the same

    @classmethod
    def of(cls, spec: ModelSpec, tp: int) -> "RankShape":
        if not isinstance(tp, int) or tp < 1:
            raise UserError(f"--tensor-parallel-size: must be a positive integer, got {tp!r}")
        def splits(t: int) -> bool:
            return not (spec.num_heads % t or spec.intermediate_size % t or (spec.num_kv_heads > t
                                                                             and spec.num_kv_heads % t)
                        or (spec.num_dense_layers and spec.dense_intermediate_size % t))
        allowed = ", ".join(str(t) for t in range(1, 65) if splits(t))
        if spec.num_dense_layers and spec.dense_intermediate_size % tp:
            raise UserError(f"--tensor-parallel-size: {tp} must divide the dense layers' intermediate_size "
                            f"({spec.dense_intermediate_size}) of model '{spec.name}'; allowed up to 64: {allowed}")
        if spec.num_heads % tp or spec.intermediate_size % tp:
            raise UserError(f"--tensor-parallel-size: {tp} must divide num_attention_heads ({spec.num_heads}) and "
                            f"intermediate_size ({spec.intermediate_size}) of model '{spec.name}'; allowed up to 64: "
                            f"{allowed}")
        if spec.num_kv_heads > tp and spec.num_kv_heads % tp:
            raise UserError(f"--tensor-parallel-size: {tp} must divide num_key_value_heads ({spec.num_kv_heads}) "
                            f"of model '{spec.name}' or be a multiple of it; allowed up to 64: {allowed}")
        return cls(hidden=spec.hidden_size, heads=spec.num_heads // tp, kv_heads=max(1, spec.num_kv_heads // tp),
                   head_dim=spec.head_dim, inter=spec.intermediate_size // tp,
                   vocab=-(-spec.vocab_size // tp),  # vLLM pads the vocabulary to a multiple of tp
                   layers=spec.num_layers, num_experts=spec.num_experts, topk=spec.num_experts_per_tok,
                   sliding_layers=spec.num_sliding_layers if spec.is_hybrid_attention else 0)

    @property
    def qkv_width(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.head_dim


def gemm_record(name: str, m: float, n: int, k: int, count: int, weight_bytes_per_param: float, act_bytes: float,
                dtype: str, in_bytes: float | None = None) -> OpRecord:
    """y (m x n) = x (m x k) @ W (k x n); x read in `in_bytes` per element (the GEMM's input dtype)."""
    in_bytes = act_bytes if in_bytes is None else in_bytes
    return OpRecord(name=name, kind="gemm", count=count, flops=count * 2.0 * m * n * k,
                    weight_bytes=count * n * k * weight_bytes_per_param,
                    act_bytes=count * (m * k * in_bytes + m * n * act_bytes), shape=(m, n, k, 1), dtype=dtype)


def elementwise_record(name: str, elements_read: float, elements_written: float, flops_per_element: float,
                       count: int, act_bytes: float, weight_bytes: float = 0.0, dtype: str = "bf16") -> OpRecord:
    return OpRecord(name=name, kind="elementwise", count=count, flops=count * flops_per_element * elements_written,
                    weight_bytes=count * weight_bytes,
                    act_bytes=count * (elements_read + elements_written) * act_bytes, dtype=dtype)


def collective_record(name: str, kind: str, message_bytes: float, count: int, tp: int) -> OpRecord:
    """An all-reduce / all-gather over `tp` ranks of a `message_bytes` buffer (the full, reduced tensor)."""
    return OpRecord(name=name, kind=kind, count=count, flops=0.0, weight_bytes=0.0, act_bytes=0.0,
                    comm_bytes=count * message_bytes, shape=(message_bytes, tp))


def all_reduce_record(name: str, message_bytes: Any, count: int, tp: int, eager: Any) -> OpRecord:
    """A TP all-reduce of `message_bytes` (`collective_record`); where `eager` (a step that replays no CUDA graph),
    the shape's third element is the bytes of the copy vLLM's custom all-reduce makes first: outside a CUDA graph
    its input is not in the buffer registered with the peers, so it is copied there, read once and written once
    (vllm/distributed/device_communicators/custom_all_reduce.py, `custom_all_reduce`: "outside of cuda graph
    context, custom allreduce incurs a cost of cudaMemcpy"; `all_reduce(input, registered=False)`). aiconfigurator's
    tables time both paths (`vllm_graph`, `vllm_eager`): at 16 MB and above the eager call is slower by one read
    and one write of the message at 0.80-0.90 of the DRAM bandwidth on H100, H200, B200, B300 and A100
    (BENCHMARKS.md, "The all-reduce of a step without a CUDA graph"). `eager`: a bool or an array of them."""
    record = collective_record(name, "all_reduce", message_bytes, count, tp)
    return replace(record, shape=(message_bytes, tp, 2 * message_bytes * eager))


def attention_records(r: RankShape, s: BatchStats, quant: QuantConfig,
                      kernels: AttentionKernels = FA3_KERNELS) -> list[OpRecord]:
    """Prefill and decode parts of the (one, varlen) attention call per layer. Both write the new tokens'
    K and V into the paged cache (vLLM `reshape_and_cache_flash`) and read Q, write O. `shape` holds the
    arguments of the time formulas (`prefill_attention_shape`, `decode_attention_shape`).

    A hybrid model's sliding layers get their own records ("..._sliding"), whose keys are limited to the window
    (`BatchStats.sliding`): a sliding layer reads at most the window of each sequence's KV cache. Attention
    sinks (gpt-oss: one learned logit per head added to the softmax's denominator, FA3's `s_aux`) add one term
    per (query, head): not counted."""
    if s.sliding is not None and r.sliding_layers:  # the full layers', then the sliding layers' (same shapes)
        return _attention_records(r, r.layers - r.sliding_layers, s, quant, kernels, "") + \
            _attention_records(r, r.sliding_layers, s.sliding, quant, kernels, "_sliding")
    return _attention_records(r, r.layers, s, quant, kernels, "")


def _attention_records(r: RankShape, layers: int, s: BatchStats, quant: QuantConfig, kernels: AttentionKernels,
                       suffix: str) -> list[OpRecord]:
    """`attention_records` of `layers` layers of `r`'s shape over `s`'s own fields (not `s.sliding`), the records
    named with `suffix`."""
    kv_token = 2 * r.kv_heads * r.head_dim * quant.kv_bytes_per_element  # K and V of one token, per layer
    q_token = r.heads * r.head_dim * quant.act_bytes
    flops_per_pair = 4.0 * r.heads * r.head_dim  # QK^T and PV: 2 MACs per (query, key, head, dim)
    # Attention math runs at the activation peak also with an fp8 KV cache: vLLM's FA3 tables on H100 show
    # no fp8 speed-up (aiconfigurator-core h100_sxm context attention, fp8 vs bf16 KV: 483 vs 521 TFLOP/s
    # median for prompts >= 4096), so fp8 KV only halves the bytes.
    dtype = quant.act_dtype
    q_tile_tokens = attention_q_tile_tokens(r.head_dim, r.heads, r.kv_heads, kernels)
    out = []
    if s.num_prefill_seqs:
        out.append(OpRecord(
            name="attention_prefill" + suffix, kind="attention_prefill", count=layers,
            flops=layers * flops_per_pair * s.prefill_pairs, weight_bytes=0.0,
            act_bytes=layers * 2 * s.prefill_tokens * q_token,
            kv_read_bytes=layers * s.prefill_kv_tokens * kv_token,
            kv_write_bytes=layers * s.prefill_tokens * kv_token,
            shape=prefill_attention_shape(r.heads, r.kv_heads, r.head_dim, q_tile_tokens, s.prefill_tokens,
                                          s.prefill_pairs, s.prefill_q_tiles, s.prefill_pad_pairs,
                                          s.prefill_kv_tokens, q_token, kv_token, kernels),
            dtype=dtype))
    if s.num_decode_seqs:
        out.append(OpRecord(
            name="attention_decode" + suffix, kind="attention_decode", count=layers,
            flops=layers * flops_per_pair * s.decode_pairs, weight_bytes=0.0,
            act_bytes=layers * 2 * s.num_decode_seqs * q_token,
            kv_read_bytes=layers * s.decode_pairs * kv_token,
            kv_write_bytes=layers * s.num_decode_seqs * kv_token,
            shape=decode_attention_shape(r.heads, r.kv_heads, r.head_dim, s.num_decode_seqs, s.decode_pairs,
                                         q_token, kv_token, kernels),
            dtype=dtype))
    return out


def prefill_attention_shape(heads: Any, kv_heads: Any, head_dim: Any, q_tile: Any, tokens: Any, pairs: Any,
                            q_tiles: Any, pad_pairs: Any, kv_tokens: Any, q_token_bytes: Any,
                            kv_token_bytes: Any, kernels: AttentionKernels = FA3_KERNELS
                            ) -> tuple[Any, Any, Any, Any]:
    """Arguments of `roofline.cost.kernels.attention.attention_prefill_time_s` for one layer (scalars or arrays):
    ((query, key) pairs the kernel computes over all heads, bytes moved, work tiles, head_dim).

    Flash attention computes whole blocks: causal masking skips blocks above the diagonal, computes the
    diagonal ones in full and masks them (FA2 paper, Dao 2023, section 3.1): a tile of T = `q_tile` tokens
    wastes about T*T/2 pairs per head there; the padding tokens of a sequence's last tile are computed too.
    A work tile is one (sequence, KV head, tile of T tokens of all its query heads), or without GQA packing
    (`kernels.packs_gqa`) one (sequence, query head, tile of T tokens)."""
    computed = pairs + q_tiles * (q_tile * q_tile / 2.0) + pad_pairs
    moved = 2 * tokens * q_token_bytes + (kv_tokens + tokens) * kv_token_bytes  # Q, O; K/V read + new K/V written
    return (heads * computed, moved, attention_tile_heads(heads, kv_heads, kernels) * q_tiles, head_dim)


def decode_attention_shape(heads: Any, kv_heads: Any, head_dim: Any, num_seqs: Any, pairs: Any, q_token_bytes: Any,
                           kv_token_bytes: Any, kernels: AttentionKernels = FA3_KERNELS) -> tuple[Any, Any, Any, Any]:
    """Arguments of `roofline.cost.kernels.attention.attention_decode_time_s` for one layer: (FLOPs, bytes moved,
    work units (`decode_work_heads` per sequence), bytes of one key and value of one KV head)."""
    moved = 2 * num_seqs * q_token_bytes + (pairs + num_seqs) * kv_token_bytes  # Q, O; cached KV; new K/V
    return (4.0 * heads * head_dim * pairs, moved, num_seqs * decode_work_heads(heads, kv_heads, kernels),
            kv_token_bytes / kv_heads)


def moe_record(name: str, num_tokens: float, hidden: int, inter: int, topk: int, num_experts: int, count: int,
               quant: QuantConfig, bias: bool = False) -> OpRecord:
    """Fused MoE experts (gate_up and down grouped GEMMs, SiLU-and-mul between) for `num_tokens` tokens routed
    to `topk` of `num_experts`, at the experts' quantization (`QuantConfig.experts`).

    Routing is assumed uniform (every expert equally likely, the "balanced" distribution of aiconfigurator-core's
    tables): E * (1 - (1 - topk/E)^T) distinct experts are touched in expectation, and only their weights are
    read, so a batch of 1 reads topk experts and a large batch all E. Skewed routing touches fewer experts and
    loads some more heavily: `expected_experts_touched` takes a routing distribution, and
    benchmarks/accuracy/moe_accuracy.py judges the uniform assumption on the tables' power-law distributions.
    Shape: (tokens per touched expert, touched experts, hidden, inter, experts, tokens)."""
    touched = expected_experts_touched(num_tokens, topk, num_experts)
    routed = num_tokens * topk
    a = quant.act_bytes
    _, weight_bytes, gemm_dtype = quant.experts
    # gate_up: routed x h -> routed x 2I; act: 2I -> I; down: I -> h; final weighted sum over topk -> h.
    act = routed * (hidden + 2 * inter) * a + routed * 3 * inter * a + routed * (inter + hidden) * a \
        + (routed + num_tokens) * hidden * a
    bias_bytes = touched * (2 * inter + hidden) * a if bias else 0.0
    return OpRecord(name=name, kind="moe", count=count,
                    flops=count * (2.0 * routed * 3 * hidden * inter + _SILU_MUL_FLOPS_PER_ELEMENT * routed * inter),
                    weight_bytes=count * (touched * 3 * hidden * inter * weight_bytes + bias_bytes),
                    act_bytes=count * act,
                    shape=(_per_expert(routed, touched), touched, hidden, inter, num_experts, num_tokens),
                    dtype=gemm_dtype)


def expert_shape(r: RankShape, quant: QuantConfig) -> tuple[int, int]:
    """(hidden, intermediate) of one expert on one rank as the MoE kernel holds it: padded up to
    `QuantConfig.expert_alignment` (vLLM's MXFP4 kernels, `roofline.cost.quant.resolve_for_hardware`)."""
    align_h, align_i = quant.expert_alignment
    return -(-r.hidden // align_h) * align_h, -(-r.inter // align_i) * align_i


def expected_experts_touched(num_tokens: Any, topk: Any, num_experts: Any, probs: np.ndarray | None = None) -> Any:
    """Distinct experts a step of `num_tokens` tokens routes to, in expectation. Uniform routing (`probs` None):
    E * (1 - (1 - k/E)^T): each expert is missed by one token with probability 1 - k/E. Otherwise `probs` (E
    routing probabilities summing to 1, e.g. a power law): sum_e 1 - (1 - min(1, k p_e))^T. Scalars or arrays
    of token counts; 0 tokens touch no expert ((1 - x)^0 == 1 exactly). A rank holding fewer experts than a token
    picks (expert parallelism over more GPUs than E / k, e.g. DeepSeek's 256 experts over 128 GPUs) has every one
    touched by each token: k/E is capped at 1, as min(1, k p_e) is."""
    if probs is None:
        ratio = topk / num_experts
        if np.ndim(ratio):
            ratio = np.minimum(ratio, 1.0)
        elif ratio > 1.0:
            ratio = 1.0
        return num_experts * (1.0 - (1.0 - ratio) ** num_tokens)
    p = np.minimum(1.0, topk * np.asarray(probs, dtype=np.float64))
    t = np.asarray(num_tokens, dtype=np.float64)
    return (1.0 - (1.0 - p[None, :]) ** t.reshape(-1, 1)).sum(axis=1).reshape(t.shape)


def _per_expert(routed: Any, touched: Any) -> Any:
    """Tokens per touched expert, 0 when none is touched (scalars or arrays)."""
    if isinstance(touched, np.ndarray):
        return np.where(touched > 0, routed / np.where(touched > 0, touched, 1.0), 0.0)
    return routed / touched if touched else 0.0


def step_ops(spec: ModelSpec, quant: QuantConfig, tp: int, s: BatchStats,
             kernels: AttentionKernels = FA3_KERNELS, graph_max_tokens: float = math.inf,
             sms: int = 0) -> list[OpRecord]:
    """Every operator of one step on one rank, in execution order (per-layer operators summed over layers), with
    the attention `kernels` of the device's family (`KernelFamily.attention`); `graph_max_tokens`: `token_ops`."""
    r = RankShape.of(spec, tp)
    attention = mla_step_records(spec, quant, tp, s, kernels, sms) if spec.is_mla else attention_records(r, s, quant,
                                                                                                    kernels)
    return token_ops(spec, quant, tp, s.num_tokens, graph_max_tokens) + attention + emit_ops(spec, quant, tp,
                                                                                             s.num_emits)


def mla_step_records(spec: ModelSpec, quant: QuantConfig, tp: int, s: BatchStats,
                     kernels: AttentionKernels = FA3_KERNELS, sms: int = 0) -> list[OpRecord]:
    """An MLA model's attention records of a step (`roofline.cost.kernels.mla.mla_attention_records`), its decode
    work tiles as the family's `kernels` cut them (`roofline.cost.kernels.mla.mla_decode_rows`; `sms`: the
    device's SMs, which TRT-LLM-gen's kernel choice for more than 32 heads reads)."""
    from roofline.cost.kernels.mla import MlaBatch, mla_attention_records, mla_decode_rows, mla_heads_per_rank
    heads = mla_heads_per_rank(spec, tp)
    rows = mla_decode_rows(kernels, heads, s.num_decode_seqs, s.decode_pairs / np.maximum(s.num_decode_seqs, 1), sms)
    batch = MlaBatch.from_stats(s, heads, rows)
    return mla_attention_records(spec, quant, tp, batch)


def token_ops(spec: ModelSpec, quant: QuantConfig, tp: int, num_tokens: Any,
              graph_max_tokens: float = math.inf) -> list[OpRecord]:
    """The operators whose cost depends only on the number of tokens in the step (all but attention and the
    per-emitted-token tail): embedding, norms, projections, RoPE, MLP or MoE, TP all-reduces. `num_tokens`: a count
    or an array of counts. A step of more than `graph_max_tokens` tokens replays no CUDA graph: its all-reduces
    take the eager path (`all_reduce_record`)."""
    r = RankShape.of(spec, tp)
    eager = num_tokens > graph_max_tokens
    t, h, a, n_l = num_tokens, r.hidden, quant.act_bytes, r.layers
    wb, gd = quant.weight_bytes_per_param, quant.gemm_dtype
    # W8A8 GEMMs read their input in 8 bits (the activation is quantized first; counted in the GEMM's time).
    in_b = 1.0 if gd in EIGHT_BIT_DTYPES else a
    qk_elems = t * (r.heads + r.kv_heads) * r.head_dim
    ops = [OpRecord(name="embedding", kind="elementwise", count=1, flops=0.0, weight_bytes=t * h * a / tp,
                    act_bytes=t * h * a, dtype=quant.act_dtype)]
    if tp > 1:
        ops.append(all_reduce_record("embedding_all_reduce", t * h * a, 1, tp, eager))
    ops.append(elementwise_record("input_norm", 2 * t * h, 2 * t * h, _NORM_FLOPS_PER_ELEMENT / 2, n_l, a, h * a))
    if spec.is_mla:  # latent attention: its token operators (`roofline.cost.kernels.mla`), o_proj last
        from roofline.cost.kernels.mla import mla_token_records
        ops += mla_token_records(spec, quant, tp, t)
    else:
        ops.append(gemm_record("qkv_proj", t, r.qkv_width, h, n_l, wb, a, gd, in_b))
    if spec.qk_norm:
        norm_weights = (r.heads + r.kv_heads) * r.head_dim if spec.qk_norm_per_layer else 2 * r.head_dim
        ops.append(elementwise_record("qk_norm", qk_elems, qk_elems, _NORM_FLOPS_PER_ELEMENT - 1, n_l, a,
                                      norm_weights * a))
        if spec.qk_norm_per_layer and tp > 1:
            # MiniMax-M2: one RMSNorm over all heads' q (and k), sharded by TP: the per-token sums of squares
            # (2 fp32 per token) are all-reduced in every layer (vLLM MiniMaxText01RMSNormTP,
            # layers/minimax_rms_norm/rms_norm_tp.py `_all_reduce_variance`).
            ops.append(all_reduce_record("qk_norm_all_reduce", t * 2 * 4.0, n_l, tp, eager))
    if not spec.is_mla:
        ops += [
            elementwise_record("rope", qk_elems, qk_elems, _ROPE_FLOPS_PER_ELEMENT, n_l, a),
            gemm_record("o_proj", t, h, r.heads * r.head_dim, n_l, wb, a, gd, in_b),
        ]
    if tp > 1:
        ops.append(all_reduce_record("attn_all_reduce", t * h * a, n_l, tp, eager))
    ops.append(elementwise_record("post_attn_norm", 2 * t * h, 2 * t * h, _NORM_FLOPS_PER_ELEMENT / 2, n_l, a,
                                  h * a))
    if spec.sandwich_norms:  # Gemma 3: the attention output and the MLP output normed too (`ModelSpec.sandwich_norms`)
        ops.append(elementwise_record("sandwich_norms", 2 * t * h, 2 * t * h, _NORM_FLOPS_PER_ELEMENT / 2, 2 * n_l,
                                      a, h * a))
    if spec.is_moe:
        n_moe, n_dense = spec.num_moe_layers, spec.num_dense_layers
        _, mwb, mgd = quant.mlp  # DeepSeek's dense layers and shared experts: their checkpoint scheme
        m_in_b = 1.0 if mgd in EIGHT_BIT_DTYPES else a
        if n_dense:  # DeepSeek's first dense layers (first_k_dense_replace)
            dense = spec.dense_intermediate_size // tp
            ops += [gemm_record("dense_gate_up_proj", t, 2 * dense, h, n_dense, mwb, a, mgd, m_in_b),
                    elementwise_record("dense_silu_and_mul", 2 * t * dense, t * dense, _SILU_MUL_FLOPS_PER_ELEMENT,
                                       n_dense, a),
                    gemm_record("dense_down_proj", t, h, dense, n_dense, mwb, a, mgd, m_in_b)]
        ops += router_records(spec, quant, t, r.num_experts, h, n_moe, a)
        ops += [moe_record("moe_experts", t, *expert_shape(r, quant), r.topk, r.num_experts, n_moe, quant,
                           spec.expert_bias)]
        if spec.num_shared_experts:  # DeepSeek's shared experts: one MLP of their combined width, every token
            shared = r.inter * spec.num_shared_experts
            ops += [gemm_record("shared_gate_up_proj", t, 2 * shared, h, n_moe, mwb, a, mgd, m_in_b),
                    elementwise_record("shared_silu_and_mul", 2 * t * shared, t * shared, _SILU_MUL_FLOPS_PER_ELEMENT,
                                       n_moe, a),
                    gemm_record("shared_down_proj", t, h, shared, n_moe, mwb, a, mgd, m_in_b)]
    else:
        ops += [gemm_record("gate_up_proj", t, 2 * r.inter, h, n_l, wb, a, gd, in_b),
                elementwise_record("silu_and_mul", 2 * t * r.inter, t * r.inter, _SILU_MUL_FLOPS_PER_ELEMENT, n_l, a),
                gemm_record("down_proj", t, h, r.inter, n_l, wb, a, gd, in_b)]
    if tp > 1:
        ops.append(all_reduce_record("mlp_all_reduce", t * h * a, n_l, tp, eager))
    ops.append(elementwise_record("final_norm", 2 * t * h, t * h, _NORM_FLOPS_PER_ELEMENT / 2, 1, a, h * a))
    return ops


def router_records(spec: ModelSpec, quant: QuantConfig, t: Any, num_experts: int, h: int, n_l: int,
                   a: float) -> list[OpRecord]:
    """The router GEMM (replicated on every TP rank: `ReplicatedLinear`), in the activation dtype, or in fp32
    where vLLM runs it so (`ModelSpec.router_fp32`, MiniMax-M2): the hidden states cast to fp32 first (read in the
    activation dtype, written in fp32), fp32 weights and logits; an fp32 GEMM runs at the float32 matmul precision
    (`roofline.cost.step_cost`: `QuantConfig.fp32_gemm_dtype`, true fp32 by vLLM's default)."""
    if not spec.router_fp32:
        return [gemm_record("router", t, num_experts, h, n_l, a, a, quant.act_dtype)]
    return [elementwise_record("router_cast", t * h * a, t * h * 4.0, 0.0, n_l, 1.0),
            gemm_record("router", t, num_experts, h, n_l, 4.0, 4.0, "fp32", 4.0)]


def emit_ops(spec: ModelSpec, quant: QuantConfig, tp: int, num_emits: Any) -> list[OpRecord]:
    """LM head, logits gather and sampling, only for the sequences that emit a token this step (vLLM computes
    logits only at those positions). `num_emits`: a count or an array of counts (all > 0)."""
    if np.max(num_emits) <= 0:
        return []
    r = RankShape.of(spec, tp)
    a = quant.act_bytes
    ops = [gemm_record("lm_head", num_emits, r.vocab, r.hidden, 1, a, a, quant.act_dtype)]
    if tp > 1:
        ops.append(collective_record("logits_gather", "all_gather", num_emits * r.vocab * tp * a, 1, tp))
    logits = num_emits * r.vocab * tp
    # Sampling reads fp32 logits twice (softmax with temperature / top-k / top-p, then the draw) and writes
    # probabilities once (vLLM v1 `Sampler`).
    ops.append(OpRecord(name="sampling", kind="sampling", count=1, flops=_SAMPLING_FLOPS_PER_LOGIT * logits,
                        weight_bytes=0.0, act_bytes=3 * logits * 4.0, dtype="fp32"))
    return ops


def weight_bytes_per_rank(spec: ModelSpec, quant: QuantConfig, tp: int) -> float:
    """Parameters one rank holds: sharded linear layers at the quantized width, the rest at the activation
    dtype (embedding and LM head sharded by vocabulary, norms replicated)."""
    r = RankShape.of(spec, tp)
    h, a = r.hidden, quant.act_bytes
    attn = (r.qkv_width + r.heads * r.head_dim) * h * quant.weight_bytes_per_param
    if spec.mla is not None:
        m = spec.mla
        # fused q/kv down-projection (replicated on every rank), q_b_proj, kv_b_proj, o_proj (split by TP), the two
        # latent norms; W_UK_T and W_UV, which vLLM derives from kv_b_proj and keeps beside it in the activation
        # dtype (`MLACommonBaseImpl.process_weights_after_loading`).
        q_rank = m.q_lora_rank or 0
        attn = ((h * (q_rank + m.latent_width) if q_rank else h * (r.heads * m.qk_head_dim + m.latent_width))
                + q_rank * r.heads * m.qk_head_dim + m.kv_lora_rank * r.heads * (m.qk_nope_head_dim + m.v_head_dim)
                + r.heads * m.v_head_dim * h) * quant.weight_bytes_per_param \
            + (q_rank + m.kv_lora_rank) * a + r.heads * m.kv_lora_rank * (m.qk_nope_head_dim + m.v_head_dim) * a
    if spec.attention_bias:
        attn += r.qkv_width * a
    if spec.o_proj_bias:
        attn += h * a
    if spec.attention_sinks:
        attn += r.heads * a
    bias = (2 * r.inter + h) * a if spec.expert_bias else 0.0
    if spec.is_moe:
        _, expert_bytes, _ = quant.experts
        eh, ei = expert_shape(r, quant)
        bias = (2 * ei + eh) * a if spec.expert_bias else 0.0
        router = 4.0 if spec.router_fp32 else a  # (fp32 weights and score-correction bias: `router_records`)
        mlp = r.num_experts * (3 * eh * ei * expert_bytes + bias) + r.num_experts * h * router
        if spec.router_bias:
            mlp += r.num_experts * router
        mlp += 3 * h * r.inter * spec.num_shared_experts * quant.mlp[1]
    else:
        mlp = 3 * h * r.inter * quant.weight_bytes_per_param + bias
    qk_norm = 0
    if spec.qk_norm:
        qk_norm = (r.heads + r.kv_heads) * r.head_dim if spec.qk_norm_per_layer else 2 * r.head_dim
    norms = ((4 if spec.sandwich_norms else 2) * h + qk_norm) * a
    embed = r.vocab * h * a
    lm_head = 0.0 if spec.tie_word_embeddings else embed
    n_dense = spec.num_dense_layers if spec.is_moe else 0
    if not n_dense:
        return r.layers * (attn + mlp + norms) + embed + lm_head + h * a
    dense = 3 * h * (spec.dense_intermediate_size // tp) * quant.mlp[1]
    return r.layers * (attn + norms) + (r.layers - n_dense) * mlp + n_dense * dense + embed + lm_head + h * a


def expert_weight_bytes_per_rank(spec: ModelSpec, quant: QuantConfig, tp: int) -> float:
    """The routed experts' weights one rank holds (all MoE layers, TP-sliced, no biases): `weight_bytes_per_rank`'s
    expert term."""
    if not spec.is_moe:
        return 0.0
    r = RankShape.of(spec, tp)
    _, expert_bytes, _ = quant.experts
    eh, ei = expert_shape(r, quant)
    return (r.layers - spec.num_dense_layers) * r.num_experts * 3 * eh * ei * expert_bytes


def kv_bytes_per_token_per_rank(spec: ModelSpec, quant: QuantConfig, tp: int) -> float:
    """K and V of one token over all layers on one rank; MLA: the latent and rotated key of every layer, which every
    rank holds whole (vLLM's `MLAAttentionSpec`: one KV head, not split by tensor parallelism)."""
    if spec.mla is not None:
        return spec.num_layers * spec.mla.latent_width * quant.kv_bytes_per_element
    r = RankShape.of(spec, tp)
    return 2.0 * r.layers * r.kv_heads * r.head_dim * quant.kv_bytes_per_element
