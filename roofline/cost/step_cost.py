"""Time of operators and of whole engine steps on a hardware profile: a roofline with shape-aware efficiencies.

    m = StepCostModel(spec, hw, quant, tp=1)
    c = m.cost(StepArrays(query_lens, context_lens, emits))   # StepCost: total_s, breakdown_s, ops (OpCost)
    m.time_s(plan)                  # the same total, fast: any StepShape (a scheduler's StepPlan is one)
    m.breakdown_columns(steps)      # `cost(...).breakdown_s` of many steps, as columns (the simulator's --out)

The formulas run unchanged on Python floats (the simulator's scalar path: `_ceil`/`_max` avoid numpy calls on
floats) and on numpy arrays (fitting thousands of measured shapes). `time_s` equals `cost().total_s`
(tests/test_cost_model.py checks it to 1e-12 relative on random batches).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from engine.core.model_spec import ModelSpec
from roofline.cost.count_table import _TABLE_BLOCK, _CountTable, _OpCountTable
from roofline.cost.cpu import CPU_ENGINES, DEFAULT_CPU_ENGINE, check_cpu_engine
from roofline.cost.cpu import engine as cpu_engine_timing
from roofline.cost.hardware import HardwareProfile
from roofline.cost.host import DEFAULT_CUDAGRAPH_MODE, HostModel
from roofline.cost.kernels import kernel_family
from roofline.cost.kernels.attention import (
    DecodeAttentionTerms,
    attention_decode_terms,
    attention_decode_time_of_terms_s,
    attention_prefill_time_s,
    attention_q_tile_tokens,
    attention_tile_heads,
)
from roofline.cost.kernels.mla import (
    MlaBatch,
    mla_attention_records,
    mla_decode_rows,
    mla_decode_shape,
    mla_decode_time_s,
    mla_heads_per_rank,
)
from roofline.cost.native import COMPILED, _stepcost
from roofline.cost.op_time import OpCost, op_cost, op_time_s
from roofline.cost.ops import (
    BatchStats,
    OpRecord,
    RankShape,
    _attention_records,
    attention_pairs,
    attention_records,
    decode_attention_shape,
    emit_ops,
    expert_weight_bytes_per_rank,
    kv_bytes_per_token_per_rank,
    mla_step_records,
    prefill_attention_shape,
    step_ops,
    token_ops,
    weight_bytes_per_rank,
)
from roofline.cost.quant import (
    QuantConfig,
    check_moe_backend,
    kept_scale_copy_bytes,
    resolve_for_device,
    resolve_for_hardware,
    resolve_for_model,
)
from roofline.cost.roofline_math import (
    _bandwidth,
    _distinct_rows,
    _ExactPowArray,
    _overlap,
    _segment_sums,
    _sum,
    row_sums,
)
from roofline.cost.step_shape import ConcatenatedSteps, StepShape

# `_op_columns` tabulates counts below this (a table holds a row of every count up to the largest: ~20 operators x 8
# bytes each, 21 MB at this bound); a call with a larger count evaluates its counts (the same floats).
_OP_TABLE_COUNTS = 2**17


@dataclass(frozen=True)
class StepCost:
    total_s: float
    device_s: float
    host_s: float
    breakdown_s: dict[str, float]  # operator name -> seconds; plus "host_overhead" (host time not hidden)
    ops: tuple[OpCost, ...] = field(default=())
    num_kernels: int = 0
    padded_num_tokens: int = 0



class StepCostModel:
    """Predicted time of engine steps for one model, device, quantization and TP degree."""

    def __init__(self, spec: ModelSpec, hw: HardwareProfile, quant: QuantConfig, tp: int = 1,
                 cpu_engine: str = DEFAULT_CPU_ENGINE, cudagraph_mode: str = DEFAULT_CUDAGRAPH_MODE,
                 capture_sizes: tuple[int, ...] | None = None) -> None:
        """`cpu_engine` (one of `CPU_ENGINES`): whose execution a `kind: cpu` profile describes; GPU profiles
        ignore it. `cudagraph_mode` (`CUDAGRAPH_MODE_CHOICES`): which batches replay CUDA graphs on a device whose
        executor captures them (`_host_time_s`); `capture_sizes`: the batch sizes they are captured for (None: the
        profile's `executor.cuda_graph_batch_sizes`; `roofline.engine_args.EngineArgs.cudagraph_capture_sizes`)."""
        # The checkpoint's per-module quantization (or --quantization), and the device's MoE kernel padding.
        quant = resolve_for_model(quant, spec)
        family = kernel_family(hw.family)
        family.check_profile(hw)
        check_moe_backend(quant, spec, family.moe, hw.id, hw.family)
        quant = resolve_for_hardware(quant, family.moe)
        if hw.kind != "cpu":  # fp8 / NVFP4 weights without their tensor cores: weight-only on Marlin
            quant = resolve_for_device(quant, spec, hw.supported_dtypes, hw.id)
        self.spec, self.hw, self.quant, self.tp = spec, hw, quant, tp
        self.cpu_engine = check_cpu_engine(cpu_engine)
        if hw.kind == "cpu":
            cpu_engine_timing.check_profile(hw)
        self.rank = RankShape.of(spec, tp)
        for dtype in {quant.act_dtype, quant.gemm_dtype}:
            hw.peak_flops(dtype)  # a dtype the device lacks is a UserError now, not mid-simulation
        # Token-count and emit-count operators tabulated in blocks of _TABLE_BLOCK counts (`_CountTable`).
        self._token_table = _CountTable(self._token_part)
        self._emit_table = _CountTable(self._emit_part)
        ex = hw.executor
        # The host side: CUDA-graph mode and padding, launches, host/device overlap (`roofline.cost.host`).
        self.host = HostModel(hw, cudagraph_mode, tuple(ex.cuda_graph_batch_sizes if capture_sizes is None
                                                        else capture_sizes), self.rank.layers)
        self.cudagraph_mode = self.host.cudagraph_mode
        self._padded_tokens = self.host.padded_tokens
        self._host_time_s = self.host.time_s
        self._combine = self.host.combine
        self._decode_graph, self._mixed_graph = self.host.decode_graph, self.host.mixed_graph
        self._max_graph = self.host.max_graph
        # Token operators of a batch with prefills are tabulated apart where such a batch is eager at every size.
        self._graph_max_tokens = self.host.graph_max_tokens
        self._mixed_eager = self.host.mixed_eager
        self._mixed_token_table = _CountTable(partial(self._token_part, graph_max_tokens=0)) \
            if self._mixed_eager else self._token_table
        # `breakdown_columns`' token and emit operators, per operator, by count (`_OpCountTable`), on a GPU, whose
        # formulas are elementwise in the count but an MoE layer's (`_PER_CALL_KINDS`); a CPU's: None, per call.
        self._op_tables: dict[str, _OpCountTable] | None = {} if hw.kind != "cpu" else None
        self._op_orders: dict[str, list[str]] = {}  # each table's operator names with the per-call ones, in order
        self._op_per_call: dict[str, Any] = {}  # each table's per-call operators (`_ops_of_kinds`), or None
        self._batch_records = True  # (`_records_columns`; False: record by record)
        # A hybrid model's sliding layers with a plain window (not chunked, not MLA) on a GPU: `_stats_columns` sums
        # their `_WINDOW_FIELDS` beside the full layers' (as "sliding_" columns), `_attention_columns` evaluates their
        # records on those, instead of step by step.
        self._hybrid_columns = spec.is_hybrid_attention and bool(spec.sliding_window) and \
            not spec.chunked_local_attention and not spec.is_mla and hw.kind != "cpu" and self.rank.sliding_layers > 0
        self._attn_kernels = family.attention
        self._moe_kernels = family.moe
        self._q_tile = attention_q_tile_tokens(spec.head_dim, self.rank.heads, self.rank.kv_heads, self._attn_kernels)
        r = self.rank
        # Per-layer constants of the attention records (`roofline.cost.ops.attention_records`), for the fast path.
        self._kv_token = 2 * r.kv_heads * r.head_dim * quant.kv_bytes_per_element
        self._q_token = r.heads * r.head_dim * quant.act_bytes
        self._kv_fp8 = quant.kv_dtype == "fp8"
        self._mla_heads = mla_heads_per_rank(spec, tp) if spec.is_mla else 0
        # A step of decodes only depends on its number of sequences and the sum of their contexts alone (`time_s`).
        self._plain_decode = hw.kind != "cpu" and not spec.sliding_window
        # A step's decodes enter its `BatchStats` as a count, a context sum and a context maximum (`_rows_time_s`).
        self._rows_suffice = not spec.sliding_window
        # `time_s`'s parts of a step of decodes only that depend on the number of sequences alone, by that number.
        self._decode_parts: dict[int, tuple[float, float, float]] = {}
        # `time_s`'s of a step of decodes only where `_plain_gqa_decode`, by number of decodes (`_decode_step_terms`).
        self._plain_gqa_decode = self._plain_decode and not spec.is_mla
        self._decode_steps: dict[int, tuple[Any, ...]] = {}
        self._prefill_terms: tuple[Any, ...] | None = None  # `_plain_rows_time_s`'s (`_make_prefill_terms`)
        self._host_overlaps = hw.executor.host_overlaps_device  # `HostModel.combine`'s case, and its gap
        self._step_gap_s = hw.executor.step_gap_s
        # `_decode_layer_s`'s, by number of decodes: their bytes of Q and O, and the time's terms.
        self._decode_terms: dict[int, tuple[float, DecodeAttentionTerms]] = {}
        self._decode_flops_per_pair = 4.0 * self.rank.heads * self.rank.head_dim  # (decode_attention_shape's order)
        # MLA: the W_UK / W_UV batched matmuls' (time, kernels), by (record name, decodes) (`_mla_attention_s`).
        self._mla_bmm: dict[tuple[str, int], tuple[float, int]] = {}
        # Factors on attention's time of a sampled cost model (`roofline.cost.uncertainty`); 1 as fitted.
        self._prefill_factor = hw.op_time_factors.attention_prefill
        self._decode_factor = hw.op_time_factors.attention_decode
        self._mla_factor = hw.op_time_factors.mla
        # `time_s`'s GPU full-attention paths compiled (roofline/cost/_stepcost.c), where built; None: the Python code.
        self._core = self._make_core() if COMPILED else None

    # -- public API --
    @property
    def max_capture_size(self) -> int:
        """The largest batch, in tokens, that replays a CUDA graph (0: none does)."""
        return self._max_graph

    def weight_bytes_per_rank(self) -> float:
        return weight_bytes_per_rank(self.spec, self.quant, self.tp)

    def loaded_weight_bytes_per_rank(self, vllm_version: str, experts_saved_bytes: float = 0.0) -> float:
        """The weights vLLM `vllm_version` holds loaded on a rank (its "Model loading took" figure): the kernels'
        weights less `experts_saved_bytes` (experts another layout places elsewhere, `DataParallelMoe`), plus what
        the version keeps beside them (`kept_scale_copy_bytes`)."""
        experts = expert_weight_bytes_per_rank(self.spec, self.quant, self.tp) - experts_saved_bytes
        return self.weight_bytes_per_rank() - experts_saved_bytes + kept_scale_copy_bytes(
            experts, self.quant, self._moe_kernels, vllm_version)

    def kv_bytes_per_token_per_rank(self) -> float:
        return kv_bytes_per_token_per_rank(self.spec, self.quant, self.tp)

    def cost(self, shape: StepShape) -> StepCost:
        """Every operator of the step with its FLOPs, bytes, time and bound, and the step total (from its arrays)."""
        stats = self._stats(*shape.seq_arrays())
        padded = self._padded_tokens(stats.num_tokens, stats.num_prefill_seqs > 0)
        ops = self._step_ops(replace(stats, num_tokens=padded))
        k = self.hw.executor.kernels_per_elementwise_op
        costs = tuple(op_cost(self.hw, op, self.quant, k, self.cpu_engine) for op in ops)
        device_s = sum(c.time_s for c in costs)
        num_kernels = sum(c.num_kernels for c in costs)
        host_s, launch_s = self._host_s(stats, num_kernels)
        total_s = self._combine(device_s, host_s, launch_s)
        breakdown = {c.name: c.time_s for c in costs}
        breakdown["host_overhead"] = total_s - device_s
        return StepCost(total_s=total_s, device_s=device_s, host_s=host_s, breakdown_s=breakdown, ops=costs,
                        num_kernels=num_kernels, padded_num_tokens=padded)

    def plan_time_fn(self) -> Callable[[StepShape], float]:
        """`time_s` as the simulator calls it, once a step: compiled, a step is timed from the plan's fields in C
        without `time_s`'s Python calls (`_stepcost.PlainStepCost.plan_s`, the same floats: a step of decodes only
        as `decode_s`; a `StepPlan`'s step with prefills as `seq_sums` and `rows_s`, its slots read in C), a
        count's first step and any other shape by `time_s`; else `time_s` itself."""
        core = self._core
        if core is None:
            return self.time_s
        from engine.core.step_plan import ColumnRows, StepPlan  # (the simulator's plans: read at their slots)
        _stepcost.bind_plan_types(StepPlan, ColumnRows)
        return partial(core.plan_s, self.time_s)

    def time_s(self, shape: StepShape) -> float:
        """`cost(shape).total_s` (to 1e-12 relative), fast: the simulator calls it once per step. The same floats
        whichever of the shape's parts it reads (tests/test_cost_model.py checks them against `_arrays_time_s` bit
        for bit); it reads the cheapest that determines the step:

        - decodes only, on a GPU without sliding windows: the number of sequences and their context sum; what
          depends on the number alone (token and emit operators, host time) is cached per number, and attention is
          `_attention_s`'s arithmetic on the two (`_decode_layer_s`);
        - otherwise decodes only: their context lengths (`BatchStats.from_decode_contexts`);
        - with prefills, without sliding windows: the decodes' count, context sum and longest context and the
          prefill chunks' lengths (`StepShape.seq_sums`), where the shape has them;
        - else the arrays (`BatchStats.from_arrays`).

        The token- and emit-count operators are tabulated per count (`_CountTable`); attention is the records'
        scalar formulas on the aggregates (`_attention_s`), without building records."""
        if not shape.num_prefill_tokens:  # decodes only (a prompt's last token counts as prefill)
            n = shape.num_seqs
            if self._plain_gqa_decode and n:
                core = self._core
                if core is not None:  # (the compiled path below: the same floats)
                    context_sum = shape.num_context_tokens
                    t = core.decode_s(n, context_sum)
                    if t is None:  # n's first step: its terms handed over
                        self._set_decode_terms(core, n)
                        t = core.decode_s(n, context_sum)
                    if t is not None:
                        return t
                # `_decode_layer_s`, `attention_decode_time_of_terms_s`, `_overlap` and `HostModel.combine` written
                # out on the terms of n (`_decode_step_terms`): the same operations on the same floats, in order.
                k = self._decode_steps.get(n)
                if k is None:
                    k = self._decode_step_terms(n)
                token_emit_s, rest_s, launch_s, q_bytes, rate, prologue, bandwidth, p, inv_p, kernel_fixed_s, \
                    attention_fixed_s, waves_s = k
                pairs = float(shape.num_context_tokens) + n
                tc = self._decode_flops_per_pair * pairs / rate
                tm = (q_bytes + (pairs + n) * self._kv_token + prologue) / bandwidth
                big, small = (tc, tm) if tc >= tm else (tm, tc)
                hi = big + 1e-30
                if big / hi == 1.0:
                    t = hi * (1.0 + (small / hi) ** p) ** inv_p + kernel_fixed_s + attention_fixed_s
                else:
                    t = hi * ((tc / hi) ** p + (tm / hi) ** p) ** inv_p + kernel_fixed_s + attention_fixed_s
                if waves_s is not None:
                    t = t + waves_s
                device_s = token_emit_s + float(self.rank.layers * (t * self._decode_factor))
                if self._host_overlaps:
                    return (rest_s if rest_s > device_s else device_s) + self._step_gap_s
                return rest_s + (launch_s if launch_s > device_s else device_s)
            if self._plain_decode and n:
                r = self.rank
                pairs = float(shape.num_context_tokens) + n
                if self.spec.is_mla:  # `_mla_attention_s` of decodes only (its kernels depend on n alone)
                    attn_s, attn_k = self._mla_decode_only_s(n, pairs)
                parts = self._decode_parts.get(n)
                if parts is None:
                    # What depends on n alone: the token and emit operators' seconds summed first, as
                    # `_stats_time_s`'s left-to-right sum does, and the host time (the attention's: `_decode_layer_s`).
                    token_s, token_k = self._token_table.lookup(self._padded_tokens(n))
                    emit_s, emit_k = self._emit_table.lookup(n)
                    kernels = attn_k if self.spec.is_mla else r.layers
                    parts = self._decode_parts[n] = (token_s + emit_s,
                                                     *self._host_time_s(n, 0, n, token_k + emit_k + kernels))
                if not self.spec.is_mla:
                    # As `_attention_s`: t = 0.0 + float(...), which is float(...) itself.
                    attn_s = float(r.layers * self._decode_layer_s(n, pairs))
                return self._combine(parts[0] + attn_s, parts[1], parts[2])
            context = shape.seq_arrays()[1]
            if self._plain_decode:  # (no sequences)
                return self._stats_time_s(BatchStats.from_decode_contexts(context))
            return self._stats_time_s(BatchStats.from_decode_contexts(context, self.spec.sliding_window,
                                                                      self.spec.is_hybrid_attention,
                                                                      self.spec.chunked_local_attention))
        # (`_plain_rows_time_s` reads no longest context: not asked for)
        sums = shape.seq_sums(not self._plain_gqa_decode) if self._rows_suffice else None
        if sums is not None:
            return self._rows_time_s(shape.num_batched_tokens, shape.num_emitting_seqs, *sums)
        if self._plain_gqa_decode:  # `BatchStats.from_arrays`' sums, then as a step given by its sums
            q, c, emits = shape.seq_arrays()
            decode = q == 1
            prefill = np.flatnonzero(q > 1).tolist()
            return self._plain_rows_time_s(int(_sum(q)), int(np.count_nonzero(emits)), int(np.count_nonzero(decode)),
                                           int(_sum(c[decode])), q[prefill].tolist(), c[prefill].tolist())
        return self._arrays_time_s(*shape.seq_arrays())

    def _arrays_time_s(self, query_lens: np.ndarray, context_lens: np.ndarray, emits: np.ndarray) -> float:
        """`time_s` from the arrays: the batch aggregated once (`BatchStats.from_arrays`), then `_stats_time_s`."""
        return self._stats_time_s(self._stats(query_lens, context_lens, emits))

    def _rows_time_s(self, num_tokens: int, num_emits: int, num_decodes: int, decode_context_sum: int,
                     decode_context_max: int, prefill_query: list[int], prefill_context: list[int]) -> float:
        """`time_s` of a step given as its token and emit counts, the count, context sum and longest context of its
        sequences of one query token, and the query and context lengths of the others in order
        (`StepShape.seq_sums`), where `_rows_suffice`: the `BatchStats` that `BatchStats.from_arrays` builds, field
        for field, without the arrays."""
        if self._plain_gqa_decode:
            return self._plain_rows_time_s(num_tokens, num_emits, num_decodes, decode_context_sum, prefill_query,
                                           prefill_context)
        prefill = BatchStats._prefill_sums(prefill_query, prefill_context, None, self._q_tile) if prefill_query else {}
        stats = BatchStats(num_tokens=num_tokens, num_emits=num_emits, num_decode_seqs=num_decodes,
                           decode_pairs=float(decode_context_sum) + num_decodes,
                           decode_max_keys=float(decode_context_max) + 1.0 if num_decodes else 0.0, **prefill)
        return self._stats_time_s(stats)

    def _plain_rows_time_s(self, num_tokens: int, num_emits: int, num_decodes: int, decode_context_sum: int,
                           prefill_query: list[int], prefill_context: list[int]) -> float:
        """`_rows_time_s` where `_plain_gqa_decode` (a GPU, full attention, not MLA): `BatchStats._prefill_sums`
        without a window, `_stats_time_s`, `_attention_s`, `prefill_attention_shape` and `attention_prefill_time_s`
        written out, without the `BatchStats`; the same operations on the same floats, in order (the prefill
        attention's constants, `_prefill_terms`, computed once). Compiled where built (`_core`), the same floats."""
        core = self._core
        if core is not None:
            t = core.rows_s(num_tokens, num_emits, num_decodes, decode_context_sum, prefill_query, prefill_context)
            if t is None:  # a count's first step: its parts handed over
                self._set_rows_terms(core, num_tokens, len(prefill_query) > 0, num_emits, num_decodes)
                t = core.rows_s(num_tokens, num_emits, num_decodes, decode_context_sum, prefill_query,
                                prefill_context)
            if t is not None:
                return t
        r = self.rank
        t, kernels = 0.0, 0
        num_prefills = len(prefill_query)
        if num_prefills:
            q_tile = self._q_tile
            pairs = kv_tokens = pad = 0.0
            tiles = 0
            for q, c in zip(prefill_query, prefill_context):
                assert c >= 0, "context lengths must be >= 0"
                n = math.ceil(q / q_tile)
                qf, cf = float(q), float(c)
                pairs += qf * (cf + 1) + qf * (qf - 1) / 2  # attention_pairs without a window
                kv_tokens += c + q  # min(c, inf) + q
                pad += (n * q_tile - q) * (c + q)  # last_keys = min(c + q, inf)
                tiles += n
            tokens = sum(prefill_query)
            half_tile, q_token, kv_token, tile_heads, sms, per_pair, per_sm, tile_fixed_s, bandwidth, p, \
                fixed_s, attention_fixed_s = self._prefill_terms or self._make_prefill_terms()
            # prefill_attention_shape
            computed = pairs + tiles * half_tile + float(pad)
            moved = 2 * tokens * q_token + (float(kv_tokens) + tokens) * kv_token
            work_units = tile_heads * tiles
            # attention_prefill_time_s
            units = max(work_units, 1.0)
            waves = math.ceil(units / sms)
            tc = waves * (r.heads * computed) / units * per_pair / per_sm + (waves - 1) * tile_fixed_s
            tm = moved / bandwidth
            t += float(r.layers * (_overlap(tc, tm, p) + fixed_s + attention_fixed_s) * self._prefill_factor)
            kernels += r.layers
        if num_decodes:
            t += float(r.layers * self._decode_layer_s(num_decodes, float(decode_context_sum) + num_decodes))
            kernels += r.layers
        padded = self._padded_tokens(num_tokens, num_prefills > 0)
        token_s, token_k = (self._mixed_token_table if num_prefills else self._token_table).lookup(padded)
        emit_s, emit_k = self._emit_table.lookup(num_emits)
        return self._combine(token_s + emit_s + t, *self._host_time_s(num_tokens, num_prefills, num_decodes,
                                                                      token_k + emit_k + kernels))

    def _make_core(self) -> Any:
        """The compiled `time_s` paths of a GPU with full attention (`_plain_gqa_decode`, roofline/cost/_stepcost.c),
        with this model's constants; None where they do not apply (another host model, constants of other types)."""
        if _stepcost is None or not self._plain_gqa_decode or type(self.host) is not HostModel:
            return None
        host, ex, r = self.host, self.hw.executor, self.rank
        launches = {"full": 1, "piecewise": 2 * host._layers + 1, None: -1}  # (`HostModel.time_s`; -1: every kernel)
        half_tile, q_token, kv_token, tile_heads, sms, per_pair, per_sm, tile_fixed_s, bandwidth, p, fixed_s, \
            attention_fixed_s = self._prefill_terms or self._make_prefill_terms()
        if not (isinstance(self._q_tile, float) and isinstance(q_token, (int, float))):
            return None
        try:
            return _stepcost.PlainStepCost(
                layers=r.layers, heads=r.heads, tile_heads=tile_heads, sms=sms, kv_token=kv_token, q_token=q_token,
                flops_per_pair=self._decode_flops_per_pair, decode_factor=self._decode_factor,
                prefill_factor=self._prefill_factor, q_tile=self._q_tile, half_tile=half_tile, per_pair=per_pair,
                per_sm=per_sm, tile_fixed_s=tile_fixed_s, bandwidth=bandwidth, p=p, fixed_s=fixed_s,
                attention_fixed_s=attention_fixed_s, max_graph=host.max_graph,
                decode_launches=launches[host.decode_graph], mixed_launches=launches[host.mixed_graph],
                kernel_launch_s=ex.kernel_launch_s, step_overhead_s=ex.step_overhead_s,
                per_seq_s=ex.step_overhead_per_seq_s, step_gap_s=ex.step_gap_s, host_overlaps=ex.host_overlaps_device)
        except (TypeError, ValueError, OverflowError):  # (a constant of another type: the Python code)
            return None

    def _set_decode_terms(self, core: Any, n: int) -> None:
        """Hand `_core` what a step of `n` decodes only needs (`_decode_step_terms`)."""
        token_emit_s, rest_s, launch_s, q_bytes, rate, prologue, bandwidth, p, _, kernel_fixed_s, attention_fixed_s, \
            waves_s = self._decode_steps.get(n) or self._decode_step_terms(n)
        core.set_decode(n, token_emit_s, rest_s, launch_s)
        core.set_layer(n, q_bytes, rate, prologue, bandwidth, p, kernel_fixed_s, attention_fixed_s, waves_s)

    def _set_rows_terms(self, core: Any, num_tokens: int, with_prefills: bool, num_emits: int,
                        num_decodes: int) -> None:
        """Hand `_core` what `_plain_rows_time_s` looks up by count: the token operators (of the padded count, from
        the table of a step with or without prefills), the emit operators, the decodes' attention terms."""
        table = self._mixed_token_table if with_prefills else self._token_table
        padded = self._padded_tokens(num_tokens, with_prefills)
        token_s, token_k = table.lookup(padded)
        if num_tokens > self._max_graph:  # no graph pads it, nor the rest of its table block: the block at once
            block = num_tokens // _TABLE_BLOCK
            first = max(block * _TABLE_BLOCK, self._max_graph + 1)
            core.set_tokens_range(with_prefills, first, table.block(block)[first - block * _TABLE_BLOCK:], token_k)
        else:
            core.set_tokens(with_prefills, num_tokens, token_s, token_k)
        if num_emits > 0:
            core.set_emits(num_emits, *self._emit_table.lookup(num_emits))
        if num_decodes:
            self._decode_layer_s(num_decodes, 0.0)  # (its terms)
            q_bytes, terms = self._decode_terms[num_decodes]
            core.set_layer(num_decodes, q_bytes, *terms)

    def _make_prefill_terms(self) -> tuple[Any, ...]:
        """`_plain_rows_time_s`'s constants of `prefill_attention_shape` and `attention_prefill_time_s` (the same
        expressions: q_tile^2 / 2, the efficiency, the peak per SM, the FLOPs of a pair, the bandwidth)."""
        r, hw, e = self.rank, self.hw, self.hw.efficiency
        kv_fp8 = self.quant.kv_dtype == "fp8"
        eff = e.attention_compute_efficiency * np.where(kv_fp8, e.attention_fp8_kv_compute_factor, 1.0) \
            if kv_fp8 else e.attention_compute_efficiency
        sms = hw.num_compute_units
        softmax = e.attention_softmax_flops_per_pair
        if self._attn_kernels.softmax_on_sfu:
            softmax = softmax / hw.exp_throughput_factor
        self._prefill_terms = (self._q_tile * self._q_tile / 2.0, self._q_token, self._kv_token,
                               attention_tile_heads(r.heads, r.kv_heads, self._attn_kernels), sms,
                               4.0 * r.head_dim + softmax, hw.peak_flops(self.quant.act_dtype) * eff / sms,
                               e.attention_tile_fixed_s, _bandwidth(hw) * e.memory_efficiency, e.overlap_exponent,
                               e.kernel_fixed_s, e.attention_fixed_s)
        return self._prefill_terms

    def expect_max_num_tokens(self, max_num_tokens: int) -> None:
        """A hint, which changes no result: steps will have at most `max_num_tokens` tokens (the scheduler's
        budget), so the token counts above the first table block are tabulated together at their first lookup
        (`_CountTable`). Only where every token operator is elementwise in the count: a dense model on a GPU. (An
        MoE layer's expected row tiles sum a Poisson window chosen from the block's smallest and largest count,
        `_poisson_row_tiles`, so its counts keep the floats of their own blocks only when tabulated block by block;
        a CPU's formulas are not checked for it.)"""
        if not self.spec.is_moe and self.hw.kind != "cpu":
            self._token_table.span_end = self._padded_tokens(max_num_tokens) + 1

    def breakdown_columns(self, steps: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
        """`cost(StepArrays(q, c, e)).breakdown_s` of many steps (query, context, emits arrays each) as columns:
        operator name -> seconds per step, 0.0 where a step lacks the operator; the same floats.

        In bulk: the steps are aggregated into columns of `BatchStats` fields (`_stats_columns`); the operators
        are evaluated on arrays (`_ExactPowArray`): those of the token count and of the emit count once per
        distinct count and kept for later calls (`_op_columns`: the simulator's `--out` calls this once per part of
        steps), attention once for all steps (`_attention_columns`); the host time of every step on arrays
        (`HostModel.time_s_array`); each step's total is `cost`'s `sum` (`row_sums`: the same rounding; an absent
        operator adds 0.0, which changes no sum). `ConcatenatedSteps` (the simulator's records) are read as their
        concatenated arrays, not step by step."""
        if not len(steps):
            return {}
        cols, stats = self._stats_columns(steps)
        host = self.host
        # `HostModel`'s padding and host time on arrays (the same integers and floats), unless replaced
        arrays = type(host) is HostModel and self._padded_tokens == host.padded_tokens \
            and self._host_time_s == host.time_s and list(host.graph_sizes) == sorted(host.graph_sizes)
        tokens = cols["num_tokens"].astype(np.int64)
        if arrays:
            padded = host.padded_tokens_array(tokens, cols["num_prefill_seqs"] > 0)
        else:
            distinct, inverse = np.unique(tokens, return_inverse=True)
            padded = np.array([self._padded_tokens(n) for n in distinct.tolist()], dtype=np.int64)[inverse]
            if self._mixed_graph != self._decode_graph:  # batches with prefills padded as their own graph pads them
                mixed = cols["num_prefill_seqs"] > 0
                padded[mixed] = np.array([self._padded_tokens(n, True) for n in distinct.tolist()],
                                         dtype=np.int64)[inverse][mixed]
        token_names, token_s, token_k = self._op_columns(
            "tokens", partial(token_ops, graph_max_tokens=self._graph_max_tokens), padded)
        if self._mixed_eager and (cols["num_prefill_seqs"] > 0).any():  # batches with prefills: eager at any size
            mixed = cols["num_prefill_seqs"] > 0
            token_s[mixed] = self._op_columns("eager_tokens", partial(token_ops, graph_max_tokens=0),
                                              padded[mixed])[1]
        emit_names, emit_s, emit_k = self._op_columns("emits", emit_ops, cols["num_emits"].astype(np.int64))
        attn_names, attn_s, attn_k = self._attention_columns(cols, stats)
        names = token_names + attn_names + emit_names  # cost's order
        times = np.concatenate([token_s, attn_s, emit_s], axis=1)
        kernels = (token_k + attn_k + emit_k).astype(np.int64)
        prefills, decodes = cols["num_prefill_seqs"].astype(np.int64), cols["num_decode_seqs"].astype(np.int64)
        if arrays:
            host_s, launch_s = host.time_s_array(tokens, prefills, decodes, kernels)
        else:  # the host time of each distinct (tokens, prefill seqs, decode seqs, kernels), once
            distinct_keys, key_of = _distinct_rows([tokens, prefills, decodes, kernels])
            host_s, launch_s = np.array([self._host_time_s(t, p, d, k) for t, p, d, k in distinct_keys.tolist()],
                                        dtype=np.float64).reshape(-1, 2)[key_of].T
        device_s = row_sums(times)
        total_s = self._combine(device_s, host_s, launch_s)  # elementwise: the same IEEE operations
        columns = {name: times[:, j].copy() for j, name in enumerate(names)}
        columns["host_overhead"] = total_s - device_s
        return columns

    # BatchStats fields aggregated per step (`_stats_columns`).
    _STATS_FIELDS = ("num_tokens", "num_emits", "num_prefill_seqs", "prefill_tokens", "prefill_pairs",
                     "prefill_q_tiles", "prefill_kv_tokens", "prefill_pad_pairs", "prefill_masked_pairs",
                     "num_decode_seqs", "decode_pairs")

    def _stats_columns(self, steps: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]
                       ) -> tuple[dict[str, np.ndarray], list[BatchStats] | None]:
        """`_stats` of every step as columns (float64) of `_STATS_FIELDS`, and on a CPU the `BatchStats` too; of a
        hybrid model (`_hybrid_columns`) the full layers' fields, and its sliding layers' window-dependent ones
        (`BatchStats.sliding`'s) as "sliding_" + name.

        The sequences of all steps are concatenated (`ConcatenatedSteps` hold them so) and each step's sums taken
        with `BatchStats.from_arrays`'s arithmetic: decodes (query length 1) by integer sums converted to float
        once; prefill chunks (longer queries) by `_prefill_columns` (exact integer sums) or else by its own Python
        loop (`_prefill_sums`, the same float order), step by step."""
        n = len(steps)
        records = steps if isinstance(steps, ConcatenatedSteps) else None
        lengths = np.diff(records.offsets) if records is not None else np.array([len(q) for q, _, _ in steps], dtype=np.int64)
        # CPU attention reads every field, an MLA or chunked hybrid model's stats other windows; reduceat needs rows.
        spec = self.spec
        if self.hw.kind == "cpu" or (spec.is_hybrid_attention and not self._hybrid_columns) or spec.is_mla \
                or not lengths.all():
            stats = [self._stats(q, c, e) for q, c, e in steps]
            values = np.array([[getattr(s, f) for f in self._STATS_FIELDS] for s in stats], dtype=np.float64)
            return {name: values[:, j] for j, name in enumerate(self._STATS_FIELDS)}, stats
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        q, c, e = records.concatenated if records is not None else (np.concatenate([q for q, _, _ in steps]),
                                                        np.concatenate([c for _, c, _ in steps]),
                                                        np.concatenate([e for _, _, e in steps]))
        cols: dict[str, np.ndarray] = {}
        # Most sequences are decodes (query 1) that emit: each step's counts are its length less a count of the
        # few others (integers, exact in float64), and one sum over every sequence is left (the decodes' contexts).
        other = np.flatnonzero(q != 1)
        other_step = np.searchsorted(starts, other, side="right") - 1
        num_decodes = lengths - np.bincount(other_step, minlength=n)
        cols["num_tokens"] = num_decodes + np.bincount(other_step, weights=q[other], minlength=n)
        silent = np.flatnonzero(np.logical_not(e) if e.dtype == np.bool_ else e == 0)  # (bool's `== 0`: 10x slower)
        cols["num_emits"] = (lengths - np.bincount(np.searchsorted(starts, silent, side="right") - 1, minlength=n)
                             ).astype(np.float64)
        cols["num_decode_seqs"] = num_decodes.astype(np.float64)
        windowed = (q, c, other, other_step, starts, lengths, cols["num_decode_seqs"])
        cols.update(self._window_columns(*windowed, None if self._hybrid_columns else spec.sliding_window))
        if self._hybrid_columns:  # `from_arrays`' `sliding`: the same sums in the window
            cols.update({"sliding_" + name: values for name, values in
                         self._window_columns(*windowed, spec.sliding_window).items()})
        return cols, None

    # `_stats_columns`' fields that depend on the window (the rest are counts of sequences and tokens).
    _WINDOW_FIELDS = ("decode_pairs", "prefill_tokens", "prefill_pairs", "prefill_q_tiles", "prefill_kv_tokens",
                      "prefill_pad_pairs", "prefill_masked_pairs", "num_prefill_seqs")

    def _window_columns(self, q: np.ndarray, c: np.ndarray, other: np.ndarray, other_step: np.ndarray,
                        starts: np.ndarray, lengths: np.ndarray, num_decode_seqs: np.ndarray, window: int | None
                        ) -> dict[str, np.ndarray]:
        """`_stats_columns`' `_WINDOW_FIELDS` of every step with keys limited to `window` (None: every key), as
        `BatchStats.from_arrays` sums them: `other` the rows of sequences that are not decodes, `other_step` their
        steps."""
        n = len(lengths)
        cols = {name: np.zeros(n) for name in self._WINDOW_FIELDS}
        if window:  # from_arrays' decode_pairs
            keys = np.where(q == 1, np.minimum(c + 1, window), 0)
            cols["decode_pairs"] = _segment_sums(keys, starts, lengths).astype(np.float64)
        else:
            context_sums = _segment_sums(c, starts, lengths)
            context_sums -= np.bincount(other_step, weights=c[other], minlength=n).astype(np.int64)
            cols["decode_pairs"] = context_sums.astype(np.float64) + num_decode_seqs
        prefill = other[q[other] > 1]
        step_of = other_step[q[other] > 1]
        exact = self._prefill_columns(q[prefill], c[prefill], step_of, n, window)
        if exact is not None:
            cols.update(exact)
            return cols
        qs, cs = q[prefill].tolist(), c[prefill].tolist()
        bounds = np.flatnonzero(np.diff(step_of, prepend=-1, append=n + 1)).tolist()
        sums = [BatchStats._prefill_sums(qs[lo:hi], cs[lo:hi], window, self._q_tile)
                for lo, hi in zip(bounds[:-1], bounds[1:])]
        if sums:
            rows = step_of[bounds[:-1]]
            for name in sums[0]:
                cols[name][rows] = [step[name] for step in sums]
        return cols

    def _prefill_columns(self, q: np.ndarray, c: np.ndarray, step_of: np.ndarray, n: int,
                         window: int | None | str = "model") -> dict[str, np.ndarray] | None:
        """The prefill fields of `_stats_columns` from each prefill chunk's query and context length and step:
        `_prefill_sums`' terms as arrays, summed per step by `bincount`. Every term is a non-negative integer, so
        where the sum of all of them is below 2^53 every partial sum is exact and any order of addition gives
        `_prefill_sums`' floats; None where that fails (a work tile of a fractional number of tokens, or sums too
        large), for `_prefill_sums` to do."""
        q_tile = self._q_tile
        if not float(q_tile).is_integer() or (len(q) and max(int(q.max()), int(c.max())) >= 2**26):
            return None
        if window == "model":
            window = self.spec.sliding_window
        w = float(window) if window else math.inf
        qf, cf = q.astype(np.float64), c.astype(np.float64)
        tiles = np.ceil(qf / q_tile)
        terms = {"num_prefill_seqs": np.ones_like(qf), "prefill_tokens": qf,
                 "prefill_pairs": attention_pairs(qf, cf, w), "prefill_q_tiles": tiles,
                 "prefill_kv_tokens": np.minimum(cf, w) + qf,
                 "prefill_pad_pairs": (tiles * q_tile - qf) * np.minimum(cf + qf, w),
                 "prefill_masked_pairs": np.where(cf != 0, qf * (qf - 1) / 2, 0.0)}
        if any(float(values.sum()) >= 2**53 for values in terms.values()):
            return None
        return {name: np.bincount(step_of, weights=values, minlength=n) for name, values in terms.items()}

    # Operator kinds evaluated on each call's counts together, never tabulated: an MoE layer's expected row tiles sum
    # a Poisson window chosen from the smallest and largest count evaluated (`_poisson_row_tiles`).
    _PER_CALL_KINDS = frozenset({"moe"})

    def _op_columns(self, key: str, ops_of: Any, counts: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
        """`_count_columns(ops_of, counts)`, the same floats: the operators whose formulas are elementwise in the
        count from the table `key` of this model's counts kept across calls (`_OpCountTable`), an MoE layer's
        (`_PER_CALL_KINDS`) evaluated on `counts` as `_count_columns` evaluates it, in the operators' order; a CPU's
        all evaluated now (its formulas are not checked for elementwise evaluation)."""
        if self._op_tables is None or (len(counts) and int(counts.max()) >= _OP_TABLE_COUNTS):
            return self._count_columns(ops_of, counts)
        table = self._op_tables.get(key)
        order = self._op_orders.get(key)
        if table is None or order is None:
            records = ops_of(self.spec, self.quant, self.tp, np.ones(1).view(_ExactPowArray))
            order = self._op_orders[key] = [op.name for op in records]
            per_call = [op.name for op in records if op.kind in self._PER_CALL_KINDS]
            tabulated = ops_of if not per_call else partial(_ops_of_kinds, ops_of, self._PER_CALL_KINDS, False)
            table = self._op_tables[key] = _OpCountTable(partial(self._count_columns, tabulated))
            self._op_per_call[key] = partial(_ops_of_kinds, ops_of, self._PER_CALL_KINDS, True) if per_call else None
        names, seconds, kernels = table.columns(counts)
        per_call_ops = self._op_per_call.get(key)
        if per_call_ops is None or not names:
            return names, seconds, kernels
        more_names, more_seconds, more_kernels = self._count_columns(per_call_ops, counts)
        merged = [name for name in order if name in names or name in more_names]
        index = {name: j for j, name in enumerate(merged)}
        times = np.empty((len(counts), len(merged)))
        times[:, [index[name] for name in names]] = seconds
        times[:, [index[name] for name in more_names]] = more_seconds
        return merged, times, kernels + more_kernels

    def _count_columns(self, ops_of: Any, counts: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Names, seconds (steps x operators) and kernels per step of the operators `ops_of(spec, quant, tp,
        count)` of each step's count (none for a count of 0), evaluated once on the array of distinct counts."""
        distinct, inverse = np.unique(counts, return_inverse=True)
        positive = distinct > 0
        if not positive.any():
            return [], np.zeros((len(counts), 0)), np.zeros(len(counts), dtype=np.int64)
        array = distinct[positive].astype(np.float64).view(_ExactPowArray)
        k = self.hw.executor.kernels_per_elementwise_op
        names, columns, kernels = [], [], 0
        for op in ops_of(self.spec, self.quant, self.tp, array):
            t, op_kernels = op_time_s(self.hw, op, self.quant, k, self.cpu_engine)
            column = np.zeros(len(distinct))
            column[positive] = np.broadcast_to(np.asarray(t, dtype=np.float64), array.shape)
            columns.append(column)
            names.append(op.name)
            kernels += op.count * op_kernels
        table = np.stack(columns, axis=1)
        return names, table[inverse], np.where(positive, kernels, 0)[inverse]

    def _attention_columns(self, cols: dict[str, np.ndarray], stats: list[BatchStats] | None
                           ) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Names, seconds (steps x records) and kernels per step of the attention records. On a GPU each record
        is evaluated once for all steps that have it: the record of the first such step, with the shape of all
        (`prefill_attention_shape`, `decode_attention_shape`, as `_attention_s` computes them). On a CPU step by
        step (`roofline.cost.cpu.engine.attention_records`)."""
        n = len(cols["num_tokens"])
        if stats is not None:
            return self._records_columns([self._attention_records(s) for s in stats])
        r = self.rank
        prefill = np.flatnonzero(cols["num_prefill_seqs"])
        decode = np.flatnonzero(cols["num_decode_seqs"])
        # (layers, name suffix, columns' prefix): a hybrid model's full layers, then its sliding ones (`attention_records`)
        layer_sets = [(r.layers - r.sliding_layers, "", ""), (r.sliding_layers, "_sliding", "sliding_")] \
            if self._hybrid_columns else [(r.layers, "", "")]
        names, columns, kernels = [], [], np.zeros(n, dtype=np.int64)
        for layers, suffix, prefix in layer_sets:

            def field(rows: np.ndarray, name: str, prefix: str = prefix) -> np.ndarray:
                return cols[prefix + name if prefix + name in cols else name][rows].view(_ExactPowArray)

            shapes = [("attention_prefill", prefill, lambda field=field: prefill_attention_shape(
                r.heads, r.kv_heads, r.head_dim, self._q_tile, field(prefill, "prefill_tokens"),
                field(prefill, "prefill_pairs"), field(prefill, "prefill_q_tiles"),
                field(prefill, "prefill_pad_pairs"), field(prefill, "prefill_kv_tokens"), self._q_token,
                self._kv_token, self._attn_kernels)),
                ("attention_decode", decode, lambda field=field: decode_attention_shape(
                    r.heads, r.kv_heads, r.head_dim, field(decode, "num_decode_seqs"), field(decode, "decode_pairs"),
                    self._q_token, self._kv_token, self._attn_kernels))]
            for kind, rows, shape in shapes:
                if not len(rows):
                    continue
                s = BatchStats(**{f: field(rows[:1], f)[0].item() for f in self._STATS_FIELDS})
                record = next(op for op in _attention_records(r, layers, s, self.quant, self._attn_kernels, suffix)
                              if op.kind == kind)
                t, op_kernels = op_time_s(self.hw, replace(record, shape=shape()), self.quant,
                                          self.hw.executor.kernels_per_elementwise_op)
                column = np.zeros(n)
                column[rows] = np.broadcast_to(np.asarray(t, dtype=np.float64), rows.shape)
                names.append(record.name)
                columns.append(column)
                kernels[rows] += record.count * op_kernels
        times = np.stack(columns, axis=1) if columns else np.zeros((n, 0))
        return names, times, kernels

    # Record kinds whose time depends on the step through the shape's first element alone (a GEMM's m), which
    # `_records_columns` evaluates for all steps at once on a GPU.
    _M_KINDS = frozenset({"gemm", "mla_bmm"})

    def _records_columns(self, records: list[list[OpRecord]]) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Names (in the order the steps give them), seconds (steps x records: `op_time_s`'s, 0.0 where a step
        lacks the record) and kernels per step of each step's records. On a GPU the records of `_M_KINDS` of the same
        name, count, dtype, weights and shape but its first element (a GEMM's rows: an MLA step's kv_b_proj over
        its latents, W_UK / W_UV over its decodes) are evaluated once on the array of their distinct first
        elements (`_ExactPowArray`: the floats of each step's own evaluation, as the token operators'); the others
        record by record."""
        n = len(records)
        index = {name: j for j, name in enumerate(_merged_order([op.name for op in ops] for ops in records))}
        times, kernels = np.zeros((n, len(index))), np.zeros(n, dtype=np.int64)
        k = self.hw.executor.kernels_per_elementwise_op
        batched: dict[tuple[Any, ...], tuple[OpRecord, list[int], list[Any]]] = {}
        batch = self.hw.kind != "cpu" and self._batch_records
        for i, ops in enumerate(records):
            for op in ops:
                if batch and op.kind in self._M_KINDS:
                    key = (op.name, op.kind, op.count, op.dtype, op.weight_bytes, op.shape[1:])
                    rows, ms = batched.setdefault(key, (op, [], []))[1:]
                    rows.append(i)
                    ms.append(op.shape[0])
                    continue
                t, op_kernels = op_time_s(self.hw, op, self.quant, k, self.cpu_engine)
                times[i, index[op.name]] = float(t)
                kernels[i] += op.count * op_kernels
        for op, rows, ms in batched.values():
            distinct, inverse = np.unique(np.array(ms, dtype=np.float64), return_inverse=True)
            shape: tuple[Any, ...] = (distinct.view(_ExactPowArray), *op.shape[1:])
            t, op_kernels = op_time_s(self.hw, replace(op, shape=shape), self.quant, k, self.cpu_engine)
            times[rows, index[op.name]] = np.broadcast_to(np.asarray(t, dtype=np.float64), distinct.shape)[inverse]
            kernels[rows] += op.count * op_kernels
        return list(index), times, kernels

    def _stats_time_s(self, stats: BatchStats) -> float:
        padded = self._padded_tokens(stats.num_tokens, stats.num_prefill_seqs > 0)
        token_s, token_k = (self._mixed_token_table if stats.num_prefill_seqs else self._token_table).lookup(padded)
        emit_s, emit_k = self._emit_table.lookup(stats.num_emits)
        attn_s, attn_k = self._attention_s(stats)
        device_s = token_s + emit_s + attn_s
        return self._combine(device_s, *self._host_s(stats, token_k + emit_k + attn_k))

    # -- internals --
    def _stats(self, query_lens: np.ndarray, context_lens: np.ndarray, emits: np.ndarray) -> BatchStats:
        return BatchStats.from_arrays(query_lens, context_lens, emits, self.spec.sliding_window, self._q_tile,
                                      self.spec.is_hybrid_attention, self.spec.chunked_local_attention)

    def _attention_s(self, s: BatchStats) -> tuple[float, int]:
        """Time and kernels of the attention records of `s`, as `op_cost` computes them (same formulas, same
        arguments: `roofline.cost.ops.attention_records`)."""
        if self.spec.is_mla and self.hw.kind != "cpu":
            return self._mla_attention_s(s)
        if self.hw.kind == "cpu":
            return self._records_attention_s(s)
        r, hw, dtype = self.rank, self.hw, self.quant.act_dtype
        # A hybrid model's full layers (`s`'s own fields), then its sliding layers (`s.sliding`): the records' order.
        parts = [(r.layers - r.sliding_layers, s), (r.sliding_layers, s.sliding)] \
            if s.sliding is not None and r.sliding_layers else [(r.layers, s)]
        t, kernels = 0.0, 0
        for layers, p in parts:
            if p.num_prefill_seqs:
                shape = prefill_attention_shape(r.heads, r.kv_heads, r.head_dim, self._q_tile, p.prefill_tokens,
                                                p.prefill_pairs, p.prefill_q_tiles, p.prefill_pad_pairs,
                                                p.prefill_kv_tokens, self._q_token, self._kv_token, self._attn_kernels)
                t += float(layers * attention_prefill_time_s(hw, *shape, dtype, self.quant.kv_dtype == "fp8")
                           * self._prefill_factor)
                kernels += layers
            if p.num_decode_seqs:
                t += float(layers * self._decode_layer_s(p.num_decode_seqs, p.decode_pairs))
                kernels += layers
        return t, kernels

    def _decode_step_terms(self, n: int) -> tuple[Any, ...]:
        """What `time_s` of a step of `n` decodes (`_plain_gqa_decode`) needs besides their context sum: the token and
        emit operators' seconds summed (as `_stats_time_s` sums them, left to right), the host time less its
        launches (where `HostModel.combine` subtracts them: the same subtraction) or the whole host time (where the
        host overlaps the device), the launches' time, and `_decode_layer_s`'s bytes of Q and O and time's terms
        (with 1 / overlap_exponent, `_overlap`'s same division)."""
        token_s, token_k = self._token_table.lookup(self._padded_tokens(n))
        emit_s, emit_k = self._emit_table.lookup(n)
        host_s, launch_s = self._host_time_s(n, 0, n, token_k + emit_k + self.rank.layers)
        self._decode_layer_s(n, 0.0)  # (its terms)
        q_bytes, terms = self._decode_terms[n]
        rate, prologue, bandwidth, p, kernel_fixed_s, attention_fixed_s, waves_s = terms
        k = self._decode_steps[n] = (token_s + emit_s, host_s if self._host_overlaps else host_s - launch_s,
                                     launch_s, q_bytes, rate, prologue, bandwidth, p, 1.0 / p, kernel_fixed_s,
                                     attention_fixed_s, waves_s)
        return k

    def _decode_layer_s(self, num_seqs: int, pairs: float) -> float:
        """`attention_decode_time_s` of one layer's decode attention over `num_seqs` sequences and `pairs` keys
        (a GPU's kernels) at its `decode_attention_shape`, with what depends on the number of sequences alone computed
        once per number: the shape's bytes of Q and O, and the time's terms."""
        batch = self._decode_terms.get(num_seqs)
        if batch is None:
            r = self.rank
            _, _, work_units, key_bytes = decode_attention_shape(r.heads, r.kv_heads, r.head_dim, num_seqs, 0.0,
                                                                 self._q_token, self._kv_token, self._attn_kernels)
            batch = self._decode_terms[num_seqs] = (2 * num_seqs * self._q_token, attention_decode_terms(
                self.hw, work_units, key_bytes, self.quant.act_dtype, self._kv_fp8))
        # decode_attention_shape's FLOPs and bytes moved, the same operations
        flops = self._decode_flops_per_pair * pairs
        moved = batch[0] + (pairs + num_seqs) * self._kv_token
        return attention_decode_time_of_terms_s(batch[1], flops, moved) * self._decode_factor

    def _host_s(self, stats: BatchStats, num_kernels: int) -> tuple[float, float]:
        """Host time and the launches' part of it (`HostModel.time_s`) of the step `stats` describe."""
        return self._host_time_s(stats.num_tokens, stats.num_prefill_seqs, stats.num_decode_seqs, num_kernels)

    def _step_ops(self, s: BatchStats) -> list[OpRecord]:
        """`roofline.cost.ops.step_ops`; on a CPU with the attention shapes of `cpu_engine` (`CPU_ENGINES`)."""
        if self.hw.kind != "cpu":
            graph_max = 0 if self._mixed_eager and s.num_prefill_seqs else self._graph_max_tokens
            return step_ops(self.spec, self.quant, self.tp, s, self._attn_kernels, graph_max, self.hw.num_compute_units)
        return (token_ops(self.spec, self.quant, self.tp, s.num_tokens)
                + CPU_ENGINES[self.cpu_engine].attention_records(self.rank, s, self.quant)
                + emit_ops(self.spec, self.quant, self.tp, s.num_emits))

    def _attention_records(self, s: BatchStats) -> list[OpRecord]:
        """The attention records of `s` as `cost` builds them (on a CPU: those of `cpu_engine`)."""
        if self.hw.kind == "cpu":
            return CPU_ENGINES[self.cpu_engine].attention_records(self.rank, s, self.quant)
        if self.spec.is_mla:
            return mla_step_records(self.spec, self.quant, self.tp, s, self._attn_kernels, self.hw.num_compute_units)
        return attention_records(self.rank, s, self.quant, self._attn_kernels)

    def _mla_attention_s(self, s: BatchStats) -> tuple[float, int]:
        """`_records_attention_s` of an MLA model, the same floats, with the W_UK / W_UV batched matmuls' times
        (which depend on the number of decodes alone) computed once per number of decodes."""
        t, kernels = 0.0, 0
        k = self.hw.executor.kernels_per_elementwise_op
        if s.num_decode_seqs and not s.num_prefill_seqs:  # decodes only: the records' floats, without the records
            return self._mla_decode_only_s(s.num_decode_seqs, s.decode_pairs)
        for op in mla_step_records(self.spec, self.quant, self.tp, s, self._attn_kernels, self.hw.num_compute_units):
            if op.kind == "mla_bmm":
                key = (op.name, s.num_decode_seqs)
                cached = self._mla_bmm.get(key)
                if cached is None:
                    op_t, op_kernels = op_time_s(self.hw, op, self.quant, k, self.cpu_engine)
                    cached = self._mla_bmm[key] = (float(op_t), op.count * op_kernels)
                t += cached[0]
                kernels += cached[1]
                continue
            op_t, op_kernels = op_time_s(self.hw, op, self.quant, k, self.cpu_engine)
            t += float(op_t)
            kernels += op.count * op_kernels
        return t, kernels

    def _mla_decode_only_s(self, n: int, pairs: float) -> tuple[float, int]:
        """`_mla_attention_s` of a step of `n` decodes over `pairs` keys: W_UK, the absorbed decode kernel, W_UV,
        in the records' order and with their arguments (`mla_attention_records`, `op_time_s`), the batched matmuls
        computed once per `n`."""
        rows = mla_decode_rows(self._attn_kernels, self._mla_heads, n, pairs / n, self.hw.num_compute_units)
        b = MlaBatch.of_decodes(n, pairs, self._mla_heads, rows)
        if ("mla_w_uk", n) not in self._mla_bmm:
            k = self.hw.executor.kernels_per_elementwise_op
            for op in mla_attention_records(self.spec, self.quant, self.tp, b):
                if op.kind == "mla_bmm":
                    op_t, op_kernels = op_time_s(self.hw, op, self.quant, k, self.cpu_engine)
                    self._mla_bmm[(op.name, n)] = (float(op_t), op.count * op_kernels)
        shape = mla_decode_shape(self.spec, self.quant, self.tp, b.decode_tokens, b.decode_row_keys,
                                 b.decode_latent_tokens, b.decode_latent_reads, b.decode_tiles)
        n_l = self.spec.num_layers
        w_uk, w_uv = self._mla_bmm[("mla_w_uk", n)], self._mla_bmm[("mla_w_uv", n)]
        t = 0.0 + w_uk[0]
        decode_s = float(n_l * mla_decode_time_s(self.hw, *shape, self._kv_fp8))
        t += decode_s if self._mla_factor == 1.0 else decode_s * self._mla_factor  # `op_time_s`'s factor
        t += w_uv[0]
        return t, w_uk[1] + n_l + w_uv[1]

    def _records_attention_s(self, s: BatchStats) -> tuple[float, int]:
        """`_attention_s` from the records (a CPU's engine kernels): the same records and formulas as `cost`."""
        t, kernels = 0.0, 0
        k = self.hw.executor.kernels_per_elementwise_op
        for op in self._attention_records(s):
            op_t, op_kernels = op_time_s(self.hw, op, self.quant, k, self.cpu_engine)
            t += float(op_t)
            kernels += op.count * op_kernels
        return t, kernels

    def _parts_cost(self, ops: list[OpRecord]) -> tuple[np.ndarray, int]:
        """Summed time (in `op_cost`'s order, so it equals the full path's floats) and kernels of records whose
        shapes hold arrays of counts."""
        k = self.hw.executor.kernels_per_elementwise_op
        total_s: Any = 0  # an array of times once an op is added
        kernels = 0
        for op in ops:
            t, op_kernels = op_time_s(self.hw, op, self.quant, k, self.cpu_engine)
            total_s = total_s + t
            kernels += op.count * op_kernels
        return total_s, kernels

    def _token_part(self, num_tokens: np.ndarray, graph_max_tokens: float | None = None) -> tuple[np.ndarray, int]:
        graph_max = self._graph_max_tokens if graph_max_tokens is None else graph_max_tokens
        return self._parts_cost(token_ops(self.spec, self.quant, self.tp, num_tokens, graph_max))

    def _emit_part(self, num_emits: np.ndarray) -> tuple[np.ndarray, int]:
        return self._parts_cost(emit_ops(self.spec, self.quant, self.tp, num_emits))


def _ops_of_kinds(ops_of: Any, kinds: frozenset[str], inside: bool, *args: Any, **kwargs: Any) -> list[OpRecord]:
    """The records of `ops_of(*args, **kwargs)` of `kinds` (`inside`) or of the other kinds, in order."""
    return [op for op in ops_of(*args, **kwargs) if (op.kind in kinds) == inside]


def _merged_order(sequences: Any) -> list[str]:
    """An order of the names of all `sequences` in which each sequence's names keep their own order (a topological
    order of their consecutive pairs, ties to the name seen first), so that summing a step's columns in it adds its
    records in `cost`'s order; where none exists, the order of first appearance."""
    first: dict[str, int] = {}
    after: dict[str, set[str]] = {}
    before: dict[str, int] = {}
    for names in dict.fromkeys(tuple(names) for names in sequences):
        for name in names:
            if name not in first:
                first[name], after[name], before[name] = len(first), set(), 0
        for a, b in zip(names, names[1:]):
            if b not in after[a]:
                after[a].add(b)
                before[b] += 1
    ready = [(rank, name) for name, rank in first.items() if not before[name]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        for b in after[name]:
            before[b] -= 1
            if not before[b]:
                heapq.heappush(ready, (first[b], b))
    return order if len(order) == len(first) else list(first)
