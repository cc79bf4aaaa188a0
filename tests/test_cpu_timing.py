"""The CPU execution model (`roofline.cost.cpu.engine`): its formulas, how step time scales, fast path = full path,
and that GPU profiles do not reach it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.core.model_spec import ModelSpec
from roofline.cost.cpu import engine as cpu_timing
from roofline.cost.hardware import StreamingCurve, load_profile
from roofline.cost.op_time import gemm_formula
from roofline.cost.ops import BatchStats
from roofline.cost.params import FITTABLE, EfficiencyParams, ExecutorParams
from roofline.cost.quant import QuantConfig
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepArrays
from roofline.errors import UserError

CPU = load_profile(Path(__file__).resolve().parents[1] / "tests" / "data" / "cpu-profile.yaml")
# llama-156m's shape (models/llama-156m.json), the model the engine runs on this CPU.
SPEC = ModelSpec(name="m", architecture="LlamaForCausalLM", num_layers=8, hidden_size=1024, num_heads=16,
                 num_kv_heads=4, head_dim=64, intermediate_size=2816, vocab_size=32000)


@pytest.fixture(scope="module")
def cpu():
    return CPU


@pytest.fixture(scope="module")
def spec():
    return SPEC


def _model(spec, hw) -> StepCostModel:
    return StepCostModel(spec, hw, QuantConfig.from_user(model_dtype="bfloat16"))


def test_cpu_gemm_closed_form(cpu):
    """Soft maximum of 2nk(m + fixed rows) / (peak * eff) and bytes / (bw * eff): no tile padding."""
    hw = replace(cpu, efficiency=replace(cpu.efficiency, overlap_exponent=64.0))
    m, n, k = 3.0, 4096.0, 1024.0
    e = hw.efficiency
    tc = 2 * n * k * (m + e.gemm_fixed_rows) / (hw.peak_flops("bf16") * e.gemm_compute_efficiency)
    tm = (m * k * 2 + n * k * 2 + m * n * 2) / (hw.memory_bandwidth_bytes_per_s * e.memory_efficiency)
    gemm_time_s = gemm_formula(hw)  # a CPU profile's: no tiles or waves
    got = gemm_time_s(hw, m, n, k, "bf16", 2.0, 2.0, 2.0)
    assert max(tc, tm) <= got <= max(tc, tm) * 1.02
    # Efficiency m / (m + fixed rows): 8x the rows cost less than 8x the compute time.
    big = gemm_time_s(replace(hw, memory_bandwidth_bytes_per_s=1e18), 8 * m, n, k, "bf16", 2.0, 2.0, 2.0)
    small = gemm_time_s(replace(hw, memory_bandwidth_bytes_per_s=1e18), m, n, k, "bf16", 2.0, 2.0, 2.0)
    assert big / small == pytest.approx((8 * m + e.gemm_fixed_rows) / (m + e.gemm_fixed_rows), rel=0.02)
    assert big < small * 8


def _with_curve(hw, engine: str, rows: tuple, gb_per_s: tuple):
    curve = StreamingCurve("k", rows, tuple(r * 1e9 for r in gb_per_s), (0.0,) * len(rows))
    return replace(hw, weight_streaming=((engine, curve),))


def test_gemm_memory_term_follows_the_streaming_curve(cpu):
    """Memory-bound (huge peak): the time at m rows is the one-row time scaled by rate(1) / rate(m); the rate is
    interpolated between measured rows and held at its highest beyond the saturated row count."""
    hw = replace(cpu, peak_flops_by_dtype=(("bf16", 1e18),), weight_streaming=(),
                 efficiency=replace(cpu.efficiency, overlap_exponent=64.0))
    curved = _with_curve(hw, "roofline-engine", (1, 2, 4, 8), (20.0, 16.0, 30.0, 25.0))
    curve = curved.streaming_curve("roofline-engine")
    assert curve.saturated_rows == 4
    assert [curve.relative(m) for m in (1, 2, 3, 4, 8, 64)] == pytest.approx([1.0, 0.8, 1.15, 1.5, 1.5, 1.5])
    assert curve.relative(np.array([1, 3, 64])) == pytest.approx([1.0, 1.15, 1.5])
    n, k = 4096.0, 1024.0

    def t(profile, m: float) -> float:
        return cpu_timing.gemm_time_s(profile, m, n, k, "bf16", 2.0, 0.0, 0.0,
                                      streaming=profile.streaming_curve("roofline-engine"))

    assert t(curved, 1) == pytest.approx(t(hw, 1), rel=1e-3)
    assert t(curved, 2) == pytest.approx(t(hw, 2) / 0.8, rel=1e-3)
    assert t(curved, 16) == pytest.approx(t(hw, 16) / 1.5, rel=1e-3)


def test_each_cpu_engine_streams_at_its_own_curve(cpu, spec):
    """A decode step of 2 sequences against 1: slower where the engine's curve dips at 2 rows; a curve of the
    other engine does not act, and no curve is one rate for every row count."""
    def decode(hw, engine: str, b: int) -> float:
        m = StepCostModel(spec, hw, QuantConfig.from_user(model_dtype="bfloat16"), cpu_engine=engine)
        return m.time_s(StepArrays(np.ones(b, np.int64), np.full(b, 300, np.int64), np.ones(b, bool)))

    flat = replace(cpu, weight_streaming=())
    dip = _with_curve(flat, "vllm-cpu", (1, 2, 3), (25.0, 20.0, 28.0))
    assert decode(dip, "vllm-cpu", 2) / decode(dip, "vllm-cpu", 1) > decode(flat, "vllm-cpu", 2) / decode(
        flat, "vllm-cpu", 1) * 1.1
    assert decode(dip, "vllm-cpu", 3) < decode(dip, "vllm-cpu", 2)
    assert decode(dip, "roofline-engine", 2) == decode(flat, "roofline-engine", 2)


def test_a_chunk_after_cached_context_pays_the_whole_masked_rectangle(cpu, spec):
    """SDPA with an explicit mask (a chunk with cached context) skips no key blocks: q x (context + q) pairs; a first
    chunk (is_causal) only the causal ones."""
    quant = QuantConfig.from_user(model_dtype="bfloat16")
    stats = BatchStats.from_arrays(np.array([100, 50]), np.array([0, 300]), np.ones(2, bool))
    assert stats.prefill_masked_pairs == 50 * 49 / 2
    assert stats.prefill_pairs + stats.prefill_masked_pairs == 100 * 101 / 2 + 50 * 350
    prefill = [r for r in cpu_timing.attention_records(_model(spec, cpu).rank, stats, quant)
               if r.kind == "attention_prefill"]
    assert prefill[0].shape[1] == 100 * 101 / 2 + 50 * 350


def test_step_time_scales_with_batch_and_context(cpu, spec):
    m = _model(spec, cpu)

    def decode(b: int, ctx: int) -> float:
        return m.time_s(StepArrays(np.ones(b, np.int64), np.full(b, ctx, np.int64), np.ones(b, bool)))

    times = [decode(b, 256) for b in (1, 2, 8, 32, 64)]
    assert all(a < b for a, b in zip(times, times[1:]))
    # Decode at batch 1 streams the weights: a bigger batch costs far less than proportionally more.
    assert times[2] < 3 * times[0]
    assert decode(8, 256) < decode(8, 1024)
    # Padding to the longest decode: one long sequence costs more than the same keys spread evenly.
    ctx = np.array([100, 100, 100, 1900])
    assert m.time_s(StepArrays(np.ones(4, np.int64), ctx, np.ones(4, bool))) > decode(4, 550)


def test_fast_path_equals_full_path_on_cpu(cpu, spec):
    m = _model(spec, cpu)
    rng = np.random.default_rng(0)
    for _ in range(20):
        n_dec, n_pre = int(rng.integers(0, 20)), int(rng.integers(0, 3))
        q = np.concatenate([np.ones(n_dec, np.int64), rng.integers(2, 300, n_pre)])
        c = rng.integers(0, 800, n_dec + n_pre)
        if q.size == 0:
            continue
        e = np.ones(q.size, bool)
        full = m.cost(StepArrays(q, c, e))
        assert m.time_s(StepArrays(q, c, e)) == pytest.approx(full.total_s, rel=1e-12)


def test_engine_op_counts_and_per_sequence_host_cost(cpu, spec):
    m = _model(spec, cpu)
    one = m.cost(StepArrays(np.array([1]), np.array([10]), np.array([True])))
    layers = spec.num_layers
    expected = (sum(cpu_timing.ENGINE_TORCH_OPS[n] * layers for n in ("input_norm", "rope", "post_attn_norm",
                                                                        "silu_and_mul"))
                + 4 * layers  # qkv, o, gate_up, down
                + (cpu_timing.ATTENTION_CALL_OPS + cpu_timing.DECODE_OPS) * layers
                + sum(cpu_timing.ENGINE_TORCH_OPS[n] for n in ("embedding", "final_norm", "lm_head", "sampling")))
    assert one.num_kernels == expected
    ex = cpu.executor
    assert one.host_s == pytest.approx(ex.step_overhead_s + expected * ex.kernel_launch_s + ex.step_overhead_per_seq_s)
    # Prefill chunks are SDPA calls one by one: two chunks launch more ops than one of the same tokens.
    two = m.cost(StepArrays(np.array([64, 64]), np.array([0, 0]), np.array([True, True])))
    single = m.cost(StepArrays(np.array([128]), np.array([0]), np.array([True])))
    assert two.num_kernels - single.num_kernels == cpu_timing.PREFILL_CHUNK_OPS * layers


def test_gpu_profile_never_uses_cpu_terms(spec):
    """The CPU-only parameters do not move a GPU prediction."""
    h100 = load_profile("h100-sxm")
    q, c, e = np.ones(16, np.int64), np.full(16, 500, np.int64), np.ones(16, bool)
    base = _model(spec, h100).time_s(StepArrays(q, c, e))
    moved = replace(h100, efficiency=replace(h100.efficiency, gemm_fixed_rows=1000.0))
    assert _model(spec, moved).time_s(StepArrays(q, c, e)) == base


def test_new_parameters_are_fittable_and_round_trip():
    assert "efficiency.gemm_fixed_rows" in FITTABLE and "executor.step_overhead_per_seq_s" in FITTABLE
    ex = ExecutorParams.from_dict({"mode": "eager", "step_overhead_per_seq_us": 12.5}, "x")
    assert ex.step_overhead_per_seq_s == pytest.approx(12.5e-6)
    assert ExecutorParams.from_dict(ex.to_dict(), "x") == ex
    assert EfficiencyParams.from_dict({"gemm_fixed_rows": 4}, "x").gemm_fixed_rows == 4.0
    with pytest.raises(UserError, match="step_overhead_per_seq_us"):
        ExecutorParams.from_dict({"step_overhead_per_seq_us": -1}, "x")


def test_cpu_profile_rejects_gpu_elementwise_knob(cpu, spec):
    bad = replace(cpu, executor=replace(cpu.executor, kernels_per_elementwise_op=5))
    with pytest.raises(UserError, match="kernels_per_elementwise_op"):
        _model(spec, bad)


def test_decode_groups_each_launch_their_ops(cpu, spec):
    """engine.attention attends decodes in groups of <= DECODE_GROUP_KEYS padded keys, DECODE_OPS per group."""
    m = _model(spec, cpu)
    ones, emit = np.ones(16, np.int64), np.ones(16, bool)
    one_group = m.cost(StepArrays(ones, np.full(16, 100, np.int64), emit))  # 16 x ~100 keys: one group
    three_groups = m.cost(StepArrays(ones, np.full(16, 1100, np.int64), emit))  # 16 x ~1100 keys > 2 x 8192
    assert three_groups.num_kernels - one_group.num_kernels == 2 * cpu_timing.DECODE_OPS * spec.num_layers


# qwen3-moe-156m's shape (models/qwen3-moe-156m.json): llama-156m's with 16 experts of width 176, top 4.
MOE_SPEC = ModelSpec.from_path(Path(__file__).resolve().parents[1] / "models" / "qwen3-moe-156m.json")


def test_moe_on_cpu_is_the_engines_router_and_expert_loop(cpu):
    m = _model(MOE_SPEC, cpu)
    one = m.cost(StepArrays(np.array([1]), np.array([10]), np.array([True])))
    ops = {op.name: op for op in one.ops}
    layers = MOE_SPEC.num_layers
    assert ops["router"].num_kernels == layers and ops["moe_experts"].num_kernels == cpu_timing.MOE_FIXED_OPS * layers
    assert "gate_up_proj" not in ops and "silu_and_mul" not in ops
    # One token touches its top-4 experts: 4 x (gate_up GEMM + down GEMM on 1 row), their ops' host time, the
    # bytes around the loop.
    a, h, i, k = 2.0, MOE_SPEC.hidden_size, MOE_SPEC.intermediate_size, MOE_SPEC.num_experts_per_tok
    expected = (cpu_timing.gemm_time_s(cpu, 1.0, 2 * i, h, "bf16", 2.0, a, a, groups=k)
                + cpu_timing.gemm_time_s(cpu, 1.0, h, i, "bf16", 2.0, a, a, groups=k)
                + cpu_timing.memory_s(cpu, k * (cpu_timing.MOE_ROUTED_HIDDEN_BYTES * h
                                                + cpu_timing.MOE_SILU_MUL_BYTES * i) * a)
                + k * cpu_timing.MOE_OPS_PER_EXPERT * cpu.executor.kernel_launch_s)
    assert ops["moe_experts"].time_s == pytest.approx(layers * expected, rel=1e-9)


def test_moe_on_cpu_costs_more_experts_as_the_batch_grows(cpu):
    m = _model(MOE_SPEC, cpu)

    def experts_s(num_decodes: int) -> float:
        cost = m.cost(StepArrays(np.ones(num_decodes, np.int64), np.full(num_decodes, 64), np.ones(num_decodes, bool)))
        return next(op.time_s for op in cost.ops if op.name == "moe_experts")

    one, four, many = experts_s(1), experts_s(4), experts_s(256)
    # 4 decodes touch 16 * (1 - (3/4)^4) = 10.9 experts in expectation, 2.7x the weights of one token's 4.
    assert 2.0 < four / one < 3.0
    assert many > four


def test_moe_fast_path_equals_full_path_on_cpu(cpu):
    m = _model(MOE_SPEC, cpu)
    for q, c in ((np.array([1, 1, 1]), np.array([5, 50, 500])), (np.array([1, 37]), np.array([20, 0])),
                 (np.array([300]), np.array([0]))):
        e = np.ones(q.size, bool)
        assert m.time_s(StepArrays(q, c, e)) == pytest.approx(m.cost(StepArrays(q, c, e)).total_s, rel=1e-12)
