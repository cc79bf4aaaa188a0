"""Step cost model: monotonic in work, fast path equals the full breakdown, executor semantics, the fitter."""

import math
from dataclasses import replace

import numpy as np
import pytest
from profiles import TEST_CPU_PROFILE

from engine.core.model_spec import ModelSpec
from roofline.calibration.calibrate import OP_TABLE_STAGES, stage_params
from roofline.calibration.fit import fit, with_params
from roofline.cost import kernels, op_time, roofline_math
from roofline.cost.hardware import PowerLimit, load_profile, parse_profile
from roofline.cost.kernels import NCCL_PARAMS, attention
from roofline.cost.kernels.attention import attention_decode_time_s, attention_prefill_time_s
from roofline.cost.kernels.collectives import all_reduce_time_s
from roofline.cost.kernels.gemm import SM89_GEMM_KERNELS, SM90_GEMM_KERNELS, gemm_time_s
from roofline.cost.op_time import linear_time_s
from roofline.cost.ops import collective_record
from roofline.cost.params import EfficiencyParams, ExecutorParams
from roofline.cost.quant import QuantConfig
from roofline.cost.roofline_math import memory_op_time_s
from roofline.cost.single_ops import predict_single_ops
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepArrays
from roofline.errors import UserError

SPEC = ModelSpec(name="m", architecture="LlamaForCausalLM", num_layers=4, hidden_size=1024, num_heads=16,
                 num_kv_heads=4, head_dim=64, intermediate_size=4096, vocab_size=32000)
BF16 = QuantConfig.from_user(model_dtype="bfloat16")
H100 = load_profile("h100-sxm")


def model(hw=H100, spec=SPEC, quant=BF16, tp=1) -> StepCostModel:
    return StepCostModel(spec, hw, quant, tp)


def step(m, q, c, e=None):
    q, c = np.array(q), np.array(c)
    return m.cost(StepArrays(q, c, np.ones(len(q), bool) if e is None else np.array(e, bool)))


def test_time_grows_with_tokens_and_context():
    m = model()
    times = [step(m, [q], [0]).total_s for q in (1, 16, 128, 1024, 4096)]
    assert all(a <= b for a, b in zip(times, times[1:]))
    ctx = [step(m, [1] * 32, [c] * 32).total_s for c in (0, 100, 1000, 10000, 100000)]
    assert all(a <= b for a, b in zip(ctx, ctx[1:]))
    assert ctx[-1] > ctx[0]


@pytest.mark.parametrize("spec,tp,mode", [(SPEC, 1, "cuda_graphs"), (SPEC, 4, "eager"),
                                          (replace(SPEC, sliding_window=512), 2, "cuda_graphs")])
def test_fast_path_equals_breakdown(spec, tp, mode):
    hw = replace(H100, executor=replace(H100.executor, mode=mode))
    m = model(hw=hw, spec=spec, tp=tp)
    rng = np.random.default_rng(1)
    for i in range(40):
        n = int(rng.integers(1, 80))
        share = (0.0, 0.05, 0.7, 1.0)[i % 4]  # decode-only, mostly decode, mixed, prefill-only batches
        q = np.where(rng.random(n) < share, rng.integers(2, 3000, n), 1)
        c = rng.integers(0, 5000, n)
        e = rng.random(n) < 0.8
        full = m.cost(StepArrays(q, c, e))
        assert m.time_s(StepArrays(q, c, e)) == pytest.approx(full.total_s, rel=1e-12, abs=0)
        assert sum(full.breakdown_s.values()) == pytest.approx(full.total_s, rel=1e-12)


EAGER_H100 = replace(H100, executor=replace(H100.executor, mode="eager"))
FP8_KV = QuantConfig.from_user(model_dtype="bfloat16", kv_cache_dtype="fp8")


@pytest.mark.parametrize("spec,hw,quant,tp", [
    (SPEC, H100, BF16, 1), (replace(SPEC, sliding_window=512), H100, BF16, 1),
    (SPEC, parse_profile(TEST_CPU_PROFILE, "test"), BF16, 1), (SPEC, H100, FP8_KV, 2), (SPEC, EAGER_H100, BF16, 1),
    (SPEC, load_profile("b200"), BF16, 1),
    (SPEC, load_profile("l40s"), QuantConfig.from_user(quantization="fp8", model_dtype="bfloat16"), 1)])
def test_decode_only_path_equals_general(spec, hw, quant, tp):
    """`time_s` of a step of decodes only (from the number of sequences and their context sum, or their contexts)
    gives exactly the floats of the general path (`_arrays_time_s`: `BatchStats` of the arrays) with one query
    token and an emitted token per sequence: with CUDA graphs and past the largest graph, eager, an fp8 KV cache,
    TP, each attention kernel family, a sliding window, a CPU."""
    m = model(hw=hw, spec=spec, quant=quant, tp=tp)
    rng = np.random.default_rng(2)
    for n in (1, 2, 7, 64, 300, 700):
        c = rng.integers(0, 9000, n)
        ones, emits = np.ones(n, np.int64), np.ones(n, bool)
        assert m.time_s(StepArrays(ones, c, emits)) == m._arrays_time_s(ones, c, emits)


@pytest.mark.parametrize("hw,quant", [(H100, BF16), (H100, FP8_KV), (load_profile("b200"), BF16),
                                      (load_profile("l40s"), BF16)])
def test_decode_attention_terms_give_the_floats_of_the_whole_formula(hw, quant):
    """The steps' decode attention (`_decode_layer_s`: its terms computed once per number of sequences) is
    `attention_decode_time_s` of the shape, float for float, for each attention kernel family."""
    from roofline.cost.ops import decode_attention_shape

    m = model(hw=hw, quant=quant)
    r = m.rank
    rng = np.random.default_rng(4)
    for n in (1, 3, 64, 300, 700, 3, 64):  # (repeated: from the cache)
        pairs = float(rng.integers(0, 9000 * n)) + n
        shape = decode_attention_shape(r.heads, r.kv_heads, r.head_dim, n, pairs, m._q_token, m._kv_token,
                                       m._attn_kernels)
        whole = attention.attention_decode_time_s(hw, *shape, m.quant.act_dtype, m.quant.kv_dtype == "fp8")
        assert m._decode_layer_s(n, pairs) == whole


@pytest.mark.parametrize("spec,hw,quant,tp", [
    (SPEC, H100, BF16, 1), (SPEC, parse_profile(TEST_CPU_PROFILE, "test"), BF16, 1), (SPEC, H100, FP8_KV, 2),
    (SPEC, EAGER_H100, BF16, 1), (SPEC, load_profile("b200"), BF16, 1)])
def test_rows_path_equals_general(spec, hw, quant, tp):
    """`time_s` of a step with prefills given by its sums (`StepShape.seq_sums`: what a plan hands over without
    building arrays) gives exactly the floats of the general path on the arrays: decodes only, mixed, prefills only,
    single last prompt tokens."""
    m = model(hw=hw, spec=spec, quant=quant, tp=tp)
    assert m._rows_suffice
    rng = np.random.default_rng(3)
    for i in range(40):
        n = int(rng.integers(1, 200))
        share = (0.0, 0.05, 0.7, 1.0)[i % 4]
        q = np.where(rng.random(n) < share, rng.integers(2, 3000, n), 1)
        c = rng.integers(0, 9000, n)
        e = rng.random(n) < 0.9
        dec = c[q == 1]
        rows = (int(dec.size), int(dec.sum()), int(dec.max()) if dec.size else 0, q[q > 1].tolist(),
                c[q > 1].tolist())
        assert m.time_s(_SumsOnly(q, c, e, rows)) == m._arrays_time_s(q, c, e)
    assert not model(spec=replace(SPEC, sliding_window=512))._rows_suffice


class _SumsOnly(StepArrays):
    """A step shape that hands over its counts and sums (as a scheduler's plan does) and refuses its arrays."""

    __slots__ = ("rows",)

    def __init__(self, q: np.ndarray, c: np.ndarray, e: np.ndarray, rows: tuple) -> None:
        super().__init__(q, c, e)
        self.rows = rows

    @property
    def num_prefill_tokens(self) -> int:
        return max(1, super().num_prefill_tokens)  # (the all-decode steps too: through their sums)

    def seq_sums(self, longest: bool = True) -> tuple:  # type: ignore[override]
        return self.rows

    def seq_arrays(self) -> tuple:
        raise AssertionError("the sums suffice")


SERIAL_HOST_H100 = replace(H100, executor=replace(H100.executor, host_overlaps_device=False))


@pytest.mark.parametrize("hw,quant,tp", [
    (H100, BF16, 1), (SERIAL_HOST_H100, BF16, 1), (H100, FP8_KV, 2),
    (replace(EAGER_H100, executor=replace(EAGER_H100.executor, host_overlaps_device=False)), BF16, 1),
    (load_profile("b200"), BF16, 1),
    (load_profile("l40s"), QuantConfig.from_user(quantization="fp8", model_dtype="bfloat16"), 1),
    (load_profile("a100-80gb-sxm"), BF16, 4)])
def test_plain_paths_give_the_general_floats(hw, quant, tp):
    """On a GPU with full attention (`_plain_gqa_decode`), `time_s`'s written-out paths (decodes only from their
    count and context sum, `_decode_step_terms`; a step given by its sums; a step given by its arrays, prefills,
    decodes and idle rows of no query token, `_plain_rows_time_s`) give the general path's floats bit for bit, with
    the host overlapping the device or not, in and past the CUDA graphs' sizes."""
    m = model(hw=hw, quant=quant, tp=tp)
    assert m._plain_gqa_decode
    rng = np.random.default_rng(7)
    for i in range(60):
        n = int(rng.integers(1, 700))
        share = (0.0, 0.03, 0.5, 1.0)[i % 4]
        q = np.where(rng.random(n) < share, rng.integers(2, 4000, n), 1)
        if i % 5 == 0:
            q[rng.random(n) < 0.1] = 0
        c = rng.integers(0, 60000 if i % 3 else 50, n)
        e = rng.random(n) < 0.9
        general = m._arrays_time_s(q, c, e)
        assert m.time_s(StepArrays(q, c, e)) == general
        dec = c[q == 1]
        if (q > 0).all():
            rows = (int(dec.size), int(dec.sum()), int(dec.max()) if dec.size else 0, q[q > 1].tolist(),
                    c[q > 1].tolist())
            assert m.time_s(_SumsOnly(q, c, e, rows)) == general
        ones = np.ones(n, np.int64)
        assert m.time_s(StepArrays(ones, c, np.ones(n, bool))) == m._arrays_time_s(ones, c, np.ones(n, bool))


MOE = replace(SPEC, num_experts=8, num_experts_per_tok=2)
FP8 = QuantConfig.from_user(quantization="fp8", model_dtype="bfloat16")


@pytest.mark.parametrize("spec,quant", [(SPEC, FP8), (MOE, BF16), (MOE, FP8)])
def test_tabulated_counts_equal_breakdown(spec, quant):
    """The token- and emit-count operators are tabulated in blocks of counts (vectorized); single steps of
    counts at, across and far beyond block edges, dense or MoE, 16- or 8-bit GEMMs, equal the full path."""
    m = model(spec=spec, quant=quant)
    for tokens in (1, 2, 511, 512, 513, 1024, 8191, 8192, 70_001):
        q = np.array([tokens])
        for e in (np.array([True]), np.array([False])):
            full = m.cost(StepArrays(q, np.array([7]), e))
            assert m.time_s(StepArrays(q, np.array([7]), e)) == pytest.approx(full.total_s, rel=1e-12, abs=0)
    decode = np.ones(600, int)
    full = m.cost(StepArrays(decode, np.arange(600), decode > 0))
    assert m.time_s(StepArrays(decode, np.arange(600), decode > 0)) == pytest.approx(full.total_s, rel=1e-12, abs=0)


@pytest.mark.parametrize("quant", [BF16, FP8])
def test_tokens_tabulated_in_one_span_equal_block_by_block(quant):
    """`expect_max_num_tokens` (a dense model on a GPU): the first lookup above the first block fills every block
    up to the budget in one evaluation; each count's time is the float of its own block's evaluation."""
    spanned, blockwise = model(quant=quant), model(quant=quant)
    spanned.expect_max_num_tokens(3000)
    counts = np.random.default_rng(3).permutation(4000).tolist()
    assert [spanned._token_table.lookup(n) for n in counts] == [blockwise._token_table.lookup(n) for n in counts]
    assert sorted(spanned._token_table._blocks) == sorted(blockwise._token_table._blocks) == list(range(8))


def test_span_fills_only_dense_models():
    """An MoE layer's Poisson row tiles depend on the counts evaluated together: its blocks are filled one by one."""
    m = model(spec=MOE)
    m.expect_max_num_tokens(8192)
    m._token_table.lookup(600)
    assert sorted(m._token_table._blocks) == [1]
    dense = model()
    dense.expect_max_num_tokens(8192)
    dense._token_table.lookup(600)
    assert sorted(dense._token_table._blocks) == list(range(1, 17))


def test_overlap_without_the_larger_terms_pow_is_the_formula():
    """`_overlap` computes 1.0^p as 1.0 (one pow fewer): the floats of hi * ((tc/hi)^p + (tm/hi)^p)^(1/p), on
    Python floats and on arrays (numpy's SIMD pow), tiny and infinite times included."""
    rng = np.random.default_rng(11)
    tc = 10.0 ** rng.uniform(-16, 0, 200_000)
    tm = np.where(rng.random(tc.size) < 0.01, tc, 10.0 ** rng.uniform(-16, 0, tc.size))
    for p in (3.22164, 2.15367, 4.0):
        for rows in (slice(None), np.maximum(tc, tm) > 1e-12):  # some larger times below ~1e-14 s, or none
            a, b = tc[rows], tm[rows]
            hi = np.maximum(a, b) + 1e-30
            expected = hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)
            assert roofline_math._overlap(a, b, p).tolist() == expected.tolist()
        for a, b in zip(tc[:2000].tolist(), tm[:2000].tolist()):
            h = max(a, b) + 1e-30
            assert roofline_math._overlap(a, b, p) == h * ((a / h) ** p + (b / h) ** p) ** (1.0 / p)
    with np.errstate(invalid="ignore"):
        assert np.isnan(roofline_math._overlap(np.array([np.inf, 1.0]), np.array([1.0, 2.0]), 3.0)[0])
    assert math.isnan(roofline_math._overlap(math.inf, 1.0, 3.0))


@pytest.mark.parametrize("hw_id", ["h100-sxm", "a100-80gb-sxm", "b200", "l40s", "mi300x"])
def test_gemm_skips_beaten_tilings_without_changing_a_float(hw_id, monkeypatch):
    """`gemm_time_s` evaluates a 16-bit tiling only where its lower bound is not beaten (`_beatable`): the floats
    of evaluating every tiling everywhere (`_BEATEN` 0 skips none), on count arrays as the tables evaluate them
    (tilings beaten everywhere, nowhere and in part) and on Python ints; far fewer soft maxima computed."""
    hw = load_profile(hw_id)
    m = np.arange(1.0, 8705.0)
    shapes = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (128256, 4096), (512, 7168), (2048, 512)]
    calls = []
    overlap = roofline_math._overlap
    monkeypatch.setattr(roofline_math, "_overlap", lambda *a: calls.append(np.size(a[0])) or overlap(*a))
    skipping = [gemm_time_s(hw, x, n, k, "bf16", 2.0, 2.0, 2.0) for n, k in shapes for x in (m, 1, 700, 8192)]
    num_skipping = sum(calls)
    monkeypatch.setattr(roofline_math, "_BEATEN", 0.0)
    calls.clear()
    every = [gemm_time_s(hw, x, n, k, "bf16", 2.0, 2.0, 2.0) for n, k in shapes for x in (m, 1, 700, 8192)]
    assert [np.asarray(t).tolist() for t in skipping] == [np.asarray(t).tolist() for t in every]
    assert num_skipping < sum(calls) / 2


def test_records_carry_bytes_time_and_bound():
    cost = step(model(), [2048], [0])
    ops = {o.name: o for o in cost.ops}
    assert ops["gate_up_proj"].bound == "compute"
    assert all(o.time_s > 0 for o in cost.ops)
    decode = {o.name: o for o in step(model(), [1], [100]).ops}
    assert decode["gate_up_proj"].bound in ("memory", "latency")


def test_cuda_graphs_pad_decode_batches():
    m = model()
    assert step(m, [1] * 9, [10] * 9).padded_num_tokens == 16
    eager = model(hw=replace(H100, executor=replace(H100.executor, mode="eager")))
    assert step(eager, [1] * 9, [10] * 9).padded_num_tokens == 9
    assert step(m, [600], [0]).padded_num_tokens == 600  # beyond the largest captured size: eager


def test_eager_launches_cost_host_time():
    # On a GPU the launches overlap the kernels already running: a step takes the rest of its host work plus the
    # longer of its launches and its device time, whether or not the host schedules the next step meanwhile.
    slow = replace(H100.executor, mode="eager", kernel_launch_s=10e-6, step_overhead_s=1e-3,
                   step_overhead_per_seq_s=0.0, host_overlaps_device=False, step_gap_s=0.0)
    hw = replace(H100, executor=slow)
    decode = step(model(hw=hw), [1], [10])
    assert decode.host_s == pytest.approx(1e-3 + decode.num_kernels * 10e-6)
    assert decode.num_kernels * 10e-6 > decode.device_s  # launch-bound
    assert decode.total_s == pytest.approx(decode.host_s)
    prefill = step(model(hw=hw), [4096], [0])
    assert prefill.num_kernels * 10e-6 < prefill.device_s  # the launches hide under the kernels
    assert prefill.total_s == pytest.approx(1e-3 + prefill.device_s)
    overlapped = replace(hw, executor=replace(slow, host_overlaps_device=True))
    c2 = step(model(hw=overlapped), [1], [10])
    assert c2.total_s == pytest.approx(max(c2.device_s, c2.host_s))
    # On a CPU the ops run on the host one after another: device and host time add.
    cpu = parse_profile(TEST_CPU_PROFILE, "test")
    assert not cpu.executor.host_overlaps_device
    c3 = step(model(hw=cpu), [1], [10])
    assert c3.total_s == pytest.approx(c3.device_s + c3.host_s)


@pytest.mark.parametrize("mode, decode_launches, mixed_launches, mixed_padded", [
    ("FULL_AND_PIECEWISE", 1, "piecewise", True),
    ("FULL_DECODE_ONLY", 1, "all", False),
    ("PIECEWISE", "piecewise", "piecewise", True),
    ("NONE", "all", "all", False),
])
def test_cudagraph_mode_sets_which_batches_replay_graphs(mode, decode_launches, mixed_launches, mixed_padded):
    launch = 7e-6
    ex = replace(H100.executor, kernel_launch_s=launch, step_overhead_s=0.0, step_overhead_per_seq_s=0.0,
                 host_overlaps_device=False, step_gap_s=0.0)
    m = StepCostModel(SPEC, replace(H100, executor=ex), BF16, 1, cudagraph_mode=mode)
    piecewise = 2 * SPEC.num_layers + 1  # the pieces between the layers' attention calls

    def launches(expected, cost):
        return {"all": cost.num_kernels, "piecewise": piecewise}.get(expected, expected) * launch

    decode = step(m, [1] * 9, [10] * 9)
    assert decode.host_s == pytest.approx(launches(decode_launches, decode))
    assert decode.padded_num_tokens == (9 if decode_launches == "all" else 16)
    mixed = step(m, [200, 1], [0, 10])
    assert mixed.host_s == pytest.approx(launches(mixed_launches, mixed))
    assert mixed.padded_num_tokens == (208 if mixed_padded else 201)
    assert m.time_s(StepArrays(np.array([200, 1]), np.array([0, 10]), np.array([1, 1]))) == pytest.approx(mixed.total_s)
    beyond = step(m, [600], [0])  # above the largest captured size: no graph in any mode
    assert beyond.host_s == pytest.approx(beyond.num_kernels * launch) and beyond.padded_num_tokens == 600
    batches = [(np.array(q), np.array(c), np.ones(len(q), bool)) for q, c in (([1] * 9, [10] * 9), ([200, 1], [0, 10]))]
    columns = m.breakdown_columns(batches)  # the bulk path: the same floats as step_cost's
    for i, cost in enumerate((decode, mixed)):
        assert {name: values[i] for name, values in columns.items() if values[i]} == {
            name: t for name, t in cost.breakdown_s.items() if t}


@pytest.mark.parametrize("mode, mixed_eager", [("FULL_AND_PIECEWISE", False), ("FULL_DECODE_ONLY", True),
                                                ("PIECEWISE", False), ("NONE", True)])
def test_all_reduces_outside_a_cuda_graph_copy_their_input_first(mode, mixed_eager):
    # vLLM's custom all-reduce, called outside a CUDA graph, copies its input into its registered buffer: one
    # read and one write of the message more, in every step that replays no graph and only there.
    m = StepCostModel(SPEC, H100, BF16, 2, cudagraph_mode=mode)
    layers = SPEC.num_layers

    def expected(tokens, eager):
        message = tokens * SPEC.hidden_size * BF16.act_bytes
        copy = memory_op_time_s(H100, 2 * message, 1) if eager else 0.0
        return layers * (all_reduce_time_s(H100, message, 2) + copy)

    decode = step(m, [1] * 9, [10] * 9)  # replays a graph of 16 tokens, but in NONE
    mixed = step(m, [200, 1], [0, 10])
    beyond = step(m, [600], [0])  # above the largest captured size: no graph in any mode
    assert decode.breakdown_s["attn_all_reduce"] == pytest.approx(
        expected(decode.padded_num_tokens, mode == "NONE"), rel=1e-12)
    assert mixed.breakdown_s["mlp_all_reduce"] == pytest.approx(
        expected(mixed.padded_num_tokens, mixed_eager), rel=1e-12)
    assert beyond.breakdown_s["attn_all_reduce"] == pytest.approx(expected(600, True), rel=1e-12)
    assert expected(600, True) > expected(600, False)
    batches = [(np.array(q), np.array(c), np.ones(len(q), bool)) for q, c in
               (([1] * 9, [10] * 9), ([200, 1], [0, 10]), ([600], [0]))]
    columns = m.breakdown_columns(batches)  # the bulk path and the simulator's path: the same floats
    for i, (cost, (q, c, e)) in enumerate(zip((decode, mixed, beyond), batches)):
        assert {name: values[i] for name, values in columns.items() if values[i]} == {
            name: t for name, t in cost.breakdown_s.items() if t}
        assert m.time_s(StepArrays(q, c, e)) == pytest.approx(cost.total_s, rel=1e-12, abs=0)


def test_custom_all_reduce_runs_the_kernel_vllm_dispatches():
    # csrc/custom_all_reduce.cuh: one-stage on 2 GPUs at every size and below 512 KiB (<= 4 GPUs) or 256 KiB
    # (<= 8 GPUs); two-stage otherwise; each at its own fraction of the link.
    b200 = load_profile("b200")  # Blackwell: the custom all-reduce at every size
    hw = replace(b200, efficiency=replace(b200.efficiency, collective_one_stage_bus_efficiency=0.5,
                                          collective_bus_efficiency=0.8))
    e, link = hw.efficiency, hw.interconnect.bandwidth_bytes_per_s_per_direction
    alpha = hw.interconnect.latency_s * e.collective_latency_scale

    def one(b, n):
        return alpha + (n - 1) * b / (link * 0.5) + e.kernel_fixed_s

    def two(b, n):
        return 2 * alpha + 2 * (n - 1) / n * b / (link * 0.8) + e.kernel_fixed_s

    kib = 1024
    cases = [(2, 64 * kib, one), (2, 64 * 1024 * kib, one), (4, 500 * kib, one), (4, 512 * kib, two),
             (8, 255 * kib, one), (8, 300 * kib, two), (8, 64 * 1024 * kib, two)]
    for n, b, form in cases:
        assert all_reduce_time_s(hw, float(b), n) == pytest.approx(form(b, n), rel=1e-12), (n, b)
    sizes = np.array([b for _, b, _ in cases], dtype=float)
    counts = np.array([n for n, _, _ in cases])
    assert list(all_reduce_time_s(hw, sizes, counts)) == pytest.approx([form(b, n) for n, b, form in cases],
                                                                       rel=1e-12)


def test_eager_all_reduce_copy_only_where_the_custom_all_reduce_runs():
    # NCCL's ring (PCIe-only GPUs above 2) reduces in place; a CPU runs no CUDA all-reduce.
    l40s = load_profile("l40s")
    for n, copies in ((2, True), (4, False)):
        copy = all_reduce_time_s(l40s, 1e7, n, 2e7) - all_reduce_time_s(l40s, 1e7, n)
        assert copy == (pytest.approx(memory_op_time_s(l40s, 2e7, 1), rel=1e-9) if copies else 0.0)
    pcie = {"pcie_bandwidth_gb_per_s_per_direction": 16, "pcie_latency_us": 20}  # collectives over PCIe need both
    cpu = parse_profile({**TEST_CPU_PROFILE, **pcie, "sources": {**TEST_CPU_PROFILE["sources"], **dict.fromkeys(pcie,
                                                                                                        "test")}}, "test")
    cost = step(model(hw=cpu, tp=2), [600], [0])
    in_place = collective_record("attn_all_reduce", "all_reduce", 600 * SPEC.hidden_size * BF16.act_bytes,
                                 SPEC.num_layers, 2)
    assert cost.breakdown_s["attn_all_reduce"] == op_time.op_time_s(cpu, in_place, BF16, 1)[0]


def test_tensor_parallel_reduces_per_rank_work_and_adds_collectives():
    one, four = step(model(), [512], [0]), step(model(tp=4), [512], [0])
    assert {o.name for o in four.ops} >= {"attn_all_reduce", "mlp_all_reduce"}
    assert four.breakdown_s["gate_up_proj"] < one.breakdown_s["gate_up_proj"]
    assert model(tp=4).weight_bytes_per_rank() < model().weight_bytes_per_rank() / 3


def test_unsupported_dtype_is_user_error():
    # (fp8 without an fp8 peak runs weight-only on Marlin, as vLLM does: tests/test_weight_only_gemm.py)
    a100 = load_profile("a100-80gb-sxm")
    no_int8 = replace(a100, peak_flops_by_dtype=tuple(p for p in a100.peak_flops_by_dtype if p[0] != "int8"))
    with pytest.raises(UserError, match="'int8' is not supported"):
        model(hw=no_int8, quant=QuantConfig.from_user(quantization="int8", model_dtype="bfloat16"))


def test_gemm_wave_quantization():
    # 132 SMs: one row more than 12 full 128-row tiles needs a 13th row of tiles, a partial second wave,
    # even with the best other tile shape; time is not proportional to FLOPs
    full = gemm_time_s(H100, 128 * 12, 256 * 11, 8192, "bf16", 2.0, 2.0, 2.0)
    over = gemm_time_s(H100, 128 * 12 + 1, 256 * 11, 8192, "bf16", 2.0, 2.0, 2.0)
    assert over > full * 1.05


def test_prefill_attention_wave_quantization():
    # 132 SMs: 133 equal work tiles take two waves of the same tile, 132 take one
    pairs_per_tile = 128 * 8192
    one = attention_prefill_time_s(H100, 132 * pairs_per_tile, 0.0, 132, 128, "bf16")
    two = attention_prefill_time_s(H100, 133 * pairs_per_tile, 0.0, 133, 128, "bf16")
    assert two > 1.8 * one


def test_blackwell_softmax_scales_with_the_chips_exp_throughput():
    # B300 (exp_throughput_factor 2) and B200 share the family's parameters and the bf16 peak: the softmax part of
    # a prefill tile costs half as much on B300; Hopper's FA3 prefill ignores the factor
    b200, b300 = load_profile("b200"), load_profile("b300")
    assert b300.exp_throughput_factor == 2 and b200.exp_throughput_factor == 1
    b300_as_b200 = replace(b300, efficiency=b200.efficiency)
    e = b200.efficiency
    pairs, units, head_dim = 148 * 256 * 4096, 148, 128
    t200 = attention_prefill_time_s(b200, pairs, 0.0, units, head_dim, "bf16") - e.kernel_fixed_s - e.attention_fixed_s
    t300 = attention_prefill_time_s(b300_as_b200, pairs, 0.0, units, head_dim, "bf16") - e.kernel_fixed_s \
        - e.attention_fixed_s
    softmax = e.attention_softmax_flops_per_pair
    assert t300 / t200 == pytest.approx((4 * head_dim + softmax / 2) / (4 * head_dim + softmax), rel=1e-9)
    assert attention_prefill_time_s(replace(H100, exp_throughput_factor=2.0), pairs, 0.0, units, head_dim, "bf16") \
        == attention_prefill_time_s(H100, pairs, 0.0, units, head_dim, "bf16")


def test_blackwell_decode_pays_a_fill_per_extra_wave():
    # 148 SMs: 149 work units of no work take a second wave, one attention_tile_fixed_s more; FA3 decode has no waves
    b200 = load_profile("b200")
    one = attention_decode_time_s(b200, 0.0, 0.0, 148, 0.0, "bf16")
    two = attention_decode_time_s(b200, 0.0, 0.0, 149, 0.0, "bf16")
    assert two - one == pytest.approx(b200.efficiency.attention_tile_fixed_s, rel=1e-9)
    assert attention_decode_time_s(H100, 0.0, 0.0, 133, 0.0, "bf16") == \
        attention_decode_time_s(H100, 0.0, 0.0, 132, 0.0, "bf16")


def test_blackwell_split_k_gemm_adds_a_reduction_kernel():
    # n = 512, k = 4096, m = 16: 4 output tiles, so split-K is the fastest tiling; on Blackwell the partial sums
    # are reduced by a second kernel (one more kernel_fixed_s); without split-K (k = 256) nothing changes
    b200 = load_profile("b200")
    as_hopper = replace(b200, family="hopper")
    assert gemm_time_s(b200, 16, 512, 4096, "bf16", 2.0, 2.0, 2.0) > \
        gemm_time_s(as_hopper, 16, 512, 4096, "bf16", 2.0, 2.0, 2.0) + 0.9 * b200.efficiency.kernel_fixed_s
    assert gemm_time_s(b200, 16, 512, 256, "bf16", 2.0, 2.0, 2.0) == \
        gemm_time_s(as_hopper, 16, 512, 256, "bf16", 2.0, 2.0, 2.0)


def test_ada_split_k_gemm_adds_a_reduction_kernel(monkeypatch: pytest.MonkeyPatch):
    # cuBLAS's SM80 kernels on Ada sum split-K partials in cublasLt::splitKreduce_kernel, as on Blackwell: with
    # split-K the fastest tiling (n = 512, k = 4096, m = 16: 8 output tiles of 64x64) the second kernel costs at
    # least its kernel_fixed_s; without a split (k = 256) the reduction kernel changes nothing
    assert kernels.kernel_family("ada").gemm is SM89_GEMM_KERNELS
    assert kernels.kernel_family("ampere").gemm is SM90_GEMM_KERNELS
    l40s = load_profile("l40s")
    l40s = replace(l40s, efficiency=replace(l40s.efficiency, kernel_fixed_s=3e-6))
    with_reduction = [gemm_time_s(l40s, 16, 512, k, "bf16", 2.0, 2.0, 2.0) for k in (4096, 256)]
    monkeypatch.setitem(kernels.KERNEL_FAMILIES, "ada", replace(kernels.ADA, gemm=replace(SM89_GEMM_KERNELS,
                                                                                split_k_reduction_kernel=False)))
    without = [gemm_time_s(l40s, 16, 512, k, "bf16", 2.0, 2.0, 2.0) for k in (4096, 256)]
    assert with_reduction[0] > without[0] + 0.9 * 3e-6
    assert with_reduction[1] == without[1]


def test_ada_fp8_gemm_dispatches_on_m_and_n():
    # vLLM's SM89 fp8 dispatch: m in (128, 256] with n <= 4096 runs 64x128 tiles (SM90's table: 128x128), so a
    # compute-bound m = 256, n = 1024 GEMM has twice the CTAs on Ada and finishes sooner than with SM90's tiles
    l40s = load_profile("l40s")
    e = replace(l40s.efficiency, gemm_fp8_memory_efficiency=1.0)
    ada = replace(l40s, efficiency=e)
    assert gemm_time_s(ada, 256, 1024, 65536, "fp8", 1.0, 1.0, 2.0) < \
        0.6 * gemm_time_s(replace(ada, family="hopper"), 256, 1024, 65536, "fp8", 1.0, 1.0, 2.0)
    # m <= 16 with n <= 8192: 16x64 tiles
    m, n = SM89_GEMM_KERNELS.tiles_8bit[0][0], SM89_GEMM_KERNELS.tiles_8bit[0][1][0]
    assert (m, n) == (16, (8192, (16, 64)))


def test_sm89_fp8_ctas_from_their_shared_memory_and_warps():
    # 16x64x128, 5 stages: 51,200 B of shared memory + 1 KB reserved, so one CTA per 100 KB SM, of 2 warps (warp
    # 16x64x64: the tile's k split in two): half the SM's 4 tensor cores. 16x128x64: two such CTAs share an SM
    # (all 4 busy). 128x128x64: one CTA of 4 warps, the whole SM. SM90's tables: one full-rate tile per SM.
    sm89 = (100 * 1024, 4)  # L40S: architecture.shared_memory_per_sm_kib, sm_subpartitions
    assert load_profile("l40s").architecture.shared_memory_per_sm_bytes == sm89[0]
    assert SM89_GEMM_KERNELS.cta_occupancy(16, 64, *sm89) == (1, 0.5)
    assert SM89_GEMM_KERNELS.cta_occupancy(16, 128, *sm89) == (2, 0.5)
    assert SM89_GEMM_KERNELS.cta_occupancy(128, 128, *sm89) == (1, 1.0)
    assert SM90_GEMM_KERNELS.cta_occupancy(64, 64, *sm89) == (1, 1.0)
    # A compute-bound m <= 16 fp8 GEMM on Ada (16x64 tiles, one wave) takes twice the math time of full-rate CTAs
    l40s = load_profile("l40s")
    ada = replace(l40s, memory_bandwidth_bytes_per_s=1e30, efficiency=replace(
        l40s.efficiency, kernel_fixed_s=0.0, gemm_fp8_tile_fixed_k=0.0, gemm_warp_step_overhead_mma=0.0))
    full = replace(SM89_GEMM_KERNELS, ctas_8bit=())
    half_rate = gemm_time_s(ada, 16, 1024, 65536, "fp8", 1.0, 1.0, 2.0)
    saved = kernels.KERNEL_FAMILIES["ada"]
    kernels.KERNEL_FAMILIES["ada"] = replace(saved, gemm=full)
    try:
        full_rate = gemm_time_s(ada, 16, 1024, 65536, "fp8", 1.0, 1.0, 2.0)
    finally:
        kernels.KERNEL_FAMILIES["ada"] = saved
    assert half_rate == pytest.approx(2 * full_rate, rel=1e-9)


def test_sm89_warp_tile_rate_from_its_mmas_per_k_step():
    sm89 = (100 * 1024, 4)  # L40S: architecture.shared_memory_per_sm_kib, sm_subpartitions
    # A lone warp per sub-partition pays the per-k-step overhead on its MMAs: 16x64 (fp8) and 32x32 (bf16) warp
    # tiles issue 8 MMAs per step, 64x64 ones 32. Two warps per sub-partition (8-warp CTAs) hide it. The fp8
    # 64x64x128 tile (OpMultiplyAdd: staged accumulation, warp 32x64x64, k split in two) adds 2 x 32 x 64 / 32 FP32
    # instructions per thread per iteration of 2 k-steps, at 1/16 of an MMA each: 4 MMAs.
    assert SM89_GEMM_KERNELS.warp_tile_rate(16, 64, True, 2.0, *sm89) == pytest.approx(8 / 10)
    assert SM89_GEMM_KERNELS.warp_tile_rate(128, 128, True, 2.0, *sm89) == pytest.approx(32 / 34)
    assert SM89_GEMM_KERNELS.warp_tile_rate(64, 64, True, 2.0, *sm89) == pytest.approx(16 / 22)
    assert SM89_GEMM_KERNELS.warp_tile_rate(64, 64, True, 0.0, *sm89) == pytest.approx(16 / 20)
    assert SM89_GEMM_KERNELS.warp_tile_rate(256, 128, True, 2.0, *sm89) == 1.0
    assert SM89_GEMM_KERNELS.warp_tile_rate(64, 64, False, 2.0, *sm89) == pytest.approx(8 / 10)
    assert SM89_GEMM_KERNELS.warp_tile_rate(128, 256, False, 2.0, *sm89) == 1.0
    assert SM90_GEMM_KERNELS.warp_tile_rate(64, 64, True, 2.0, *sm89) == 1.0
    assert SM90_GEMM_KERNELS.warp_tile_rate(128, 128, False, 2.0, *sm89) == 1.0


def test_power_limited_chip_slows_waves_that_keep_most_sms_busy():
    # Ada: a wave keeping more than gemm_sustained_sm_fraction of the SMs busy runs slower in proportion; a call of
    # one CTA does not. Math only (memory infinitely fast, no fixed costs).
    l40s = load_profile("l40s")
    base = replace(l40s, memory_bandwidth_bytes_per_s=1e30, efficiency=replace(
        l40s.efficiency, kernel_fixed_s=0.0, gemm_sustained_sm_fraction=1.0))
    capped = replace(base, efficiency=replace(base.efficiency, gemm_sustained_sm_fraction=0.5))
    for dtype, size in (("bf16", 2.0), ("fp8", 1.0)):
        many = (32768, 16384, 4096, dtype, size, size, 2.0)  # tens of full waves
        assert gemm_time_s(capped, *many) / gemm_time_s(base, *many) == pytest.approx(2.0, rel=0.02)
        one = (16, 64, 65536, dtype, size, size, 2.0)  # a single tile
        assert gemm_time_s(capped, *one) == gemm_time_s(base, *one)
    # Families that are not power-limited never read it: neither fitted nor used
    h100 = load_profile("h100-sxm")
    slow = replace(h100, efficiency=replace(h100.efficiency, gemm_sustained_sm_fraction=0.1))
    assert gemm_time_s(slow, 8192, 8192, 8192, "bf16", 2.0, 2.0, 2.0) == \
        gemm_time_s(h100, 8192, 8192, 8192, "bf16", 2.0, 2.0, 2.0)
    assert {"gemm_sustained_sm_fraction", "gemm_warp_step_overhead_mma"} <= \
        kernels.kernel_family("hopper").unused_params()
    assert not {"gemm_sustained_sm_fraction", "gemm_warp_step_overhead_mma"} & \
        kernels.kernel_family("ada").unused_params()


def test_sustained_clock_factor_speeds_dense_gemm_math_and_fixed_costs_not_hbm():
    b200 = load_profile("b200")
    faster = replace(b200, sustained_clock_factor=1.1)
    # math and fixed latencies only (memory infinitely fast): 1.1x faster, cuBLAS and CUTLASS fp8 alike
    no_memory = {"memory_bandwidth_bytes_per_s": 1e30}
    for dtype, size in (("bf16", 2.0), ("fp8", 1.0)):
        base = gemm_time_s(replace(b200, **no_memory), 4096, 4096, 4096, dtype, size, size, 2.0)
        fast = gemm_time_s(replace(faster, **no_memory), 4096, 4096, 4096, dtype, size, size, 2.0)
        assert fast == pytest.approx(base / 1.1, rel=1e-9)
    # bytes only (math infinitely fast, no fixed cost): unchanged
    no_math = {"peak_flops_by_dtype": tuple((d, 1e30) for d, _ in b200.peak_flops_by_dtype),
               "efficiency": replace(b200.efficiency, kernel_fixed_s=0.0)}
    assert gemm_time_s(replace(faster, **no_math), 1, 8192, 8192, "bf16", 2.0, 2.0, 2.0) == \
        gemm_time_s(replace(b200, **no_math), 1, 8192, 8192, "bf16", 2.0, 2.0, 2.0)
    # fused-MoE grouped GEMMs (other kernels, fitted per chip) are not scaled
    assert gemm_time_s(faster, 64, 4096, 4096, "bf16", 2.0, 2.0, 2.0, groups=8, cublas=False) == \
        gemm_time_s(b200, 64, 4096, 4096, "bf16", 2.0, 2.0, 2.0, groups=8, cublas=False)


def test_power_limit_slows_only_long_deepgemm_math():
    # B200 with GB200's kind of power limit: a call whose DeepGEMM math at the full clock lasts longer than after_s
    # runs it at clock_factor; shorter calls, bytes and Hopper's DeepGEMM are untouched
    b200 = load_profile("b200")
    limited = replace(b200, power_limit=PowerLimit(after_s=4e-3, clock_factor=0.5))
    no_memory = {"memory_bandwidth_bytes_per_s": 1e30}
    shapes = np.array([[4096.0, 4096.0, 4096.0], [32768.0, 65536.0, 51200.0]])
    m, n, k = shapes.T
    base = linear_time_s(replace(b200, **no_memory), m, n, k, "fp8", 1.0, 2.0, "fp8-block")
    slow = linear_time_s(replace(limited, **no_memory), m, n, k, "fp8", 1.0, 2.0, "fp8-block")
    assert slow[0] == base[0] and base[1] > 4e-3
    fixed = b200.efficiency.kernel_fixed_s * 2  # the quantization kernel's and the GEMM's
    assert slow[1] - fixed == pytest.approx(2 * (base[1] - fixed), rel=1e-3)  # the quantization pass: no bytes here
    # the scalar (simulator) path agrees with the array path
    assert linear_time_s(limited, 32768, 65536, 51200, "fp8", 1.0, 2.0, "fp8-block") == pytest.approx(
        float(linear_time_s(limited, m, n, k, "fp8", 1.0, 2.0, "fp8-block")[1]), rel=1e-12)
    # the family's cuBLAS / CUTLASS GEMMs are not limited (only DeepGEMM's tables show it)
    assert gemm_time_s(limited, 32768, 65536, 51200, "bf16", 2.0, 2.0, 2.0) == \
        gemm_time_s(b200, 32768, 65536, 51200, "bf16", 2.0, 2.0, 2.0)


def test_fa2_decode_units_pay_their_wave_not_prologue_bytes():
    # Ada's FA2 split-KV decode: one CTA per SM; a unit's fixed cost is its wave's attention_tile_fixed_s (143 units
    # on 142 SMs: one more), not gemm_tile_fixed_k keys of extra bytes (FA3 on Hopper keeps that prologue)
    l40s = load_profile("l40s")
    e = l40s.efficiency
    one = attention_decode_time_s(l40s, 0.0, 1e6, 142, 512.0, "bf16")
    two = attention_decode_time_s(l40s, 0.0, 1e6, 143, 512.0, "bf16")
    assert two - one == pytest.approx(e.attention_tile_fixed_s, rel=1e-9)
    more_k = replace(l40s, efficiency=replace(e, gemm_tile_fixed_k=4 * e.gemm_tile_fixed_k))
    assert attention_decode_time_s(more_k, 0.0, 1e6, 142, 512.0, "bf16") == one
    h100_more_k = replace(H100, efficiency=replace(H100.efficiency, gemm_tile_fixed_k=4 * H100.efficiency.gemm_tile_fixed_k))
    assert attention_decode_time_s(h100_more_k, 0.0, 1e6, 132, 512.0, "bf16") > \
        attention_decode_time_s(H100, 0.0, 1e6, 132, 512.0, "bf16")


def test_ada_all_reduce_is_custom_for_two_gpus_and_nccl_ring_above():
    # vLLM enables its custom all-reduce on PCIe-only GPUs only for 2 of them; 4 and 8 run NCCL's ring, whose
    # ring traffic (2(n-1) messages) shares one link: 2(n-1) steps + 2(n-1) B / (pcie * nccl_bus_efficiency)
    l40s = load_profile("l40s")
    e = l40s.efficiency
    b = 1e6
    bw = l40s.pcie_bandwidth_bytes_per_s_per_direction
    two = all_reduce_time_s(l40s, b, 2)
    assert two == pytest.approx(20e-6 * e.collective_latency_scale + b / (bw * e.collective_one_stage_bus_efficiency)
                                + e.kernel_fixed_s, rel=1e-12)
    for n in (4, 8):
        ring = 2 * (n - 1) * e.nccl_step_s + 2 * (n - 1) * b / (bw * e.nccl_bus_efficiency) + e.kernel_fixed_s
        assert all_reduce_time_s(l40s, b, n) == pytest.approx(ring, rel=1e-12)
    vec = all_reduce_time_s(l40s, np.array([b, b, b]), np.array([2, 4, 8]))
    assert list(vec) == pytest.approx([two, all_reduce_time_s(l40s, b, 4), all_reduce_time_s(l40s, b, 8)], rel=1e-12)
    # Blackwell keeps the custom all-reduce at every size and never fits the NCCL parameters
    b200 = load_profile("b200")
    assert all_reduce_time_s(b200, b, 8) == all_reduce_time_s(replace(b200, efficiency=replace(
        b200.efficiency, nccl_step_s=1.0, nccl_bus_efficiency=0.01)), b, 8)
    collective = next(params for stage, _, params in OP_TABLE_STAGES if stage == "all_reduce")
    assert not set(NCCL_PARAMS) & set(stage_params(collective, "blackwell"))
    assert set(NCCL_PARAMS) <= set(stage_params(collective, "ada"))
    assert set(NCCL_PARAMS) <= set(stage_params(collective, "hopper"))


def test_hopper_all_reduce_leaves_the_custom_kernel_above_vllms_size_limits():
    # all_reduce_utils.py CUSTOM_ALL_REDUCE_MAX_SIZES["9.0"]: 64 MiB (2 GPUs), 32 MiB (4), 512 KiB (6), 256 KiB (8);
    # above them (and on GPU counts without a custom all-reduce) vLLM's symmetric-memory or NCCL all-reduce, timed
    # as NCCL's ring over NVLink, which copies its input first outside a CUDA graph too.
    e, link = H100.efficiency, H100.interconnect.bandwidth_bytes_per_s_per_direction
    b200 = replace(load_profile("b200"), interconnect=H100.interconnect, efficiency=e)  # the custom form alone

    def ring(b, n):
        return 2 * (n - 1) * e.nccl_step_s + 2 * (n - 1) / n * b / (link * e.nccl_bus_efficiency) + e.kernel_fixed_s

    mib = 2.0**20
    for n, limit in ((2, 64 * mib), (4, 32 * mib), (6, 0.5 * mib), (8, 0.25 * mib)):
        assert all_reduce_time_s(H100, limit, n) == all_reduce_time_s(b200, limit, n)
        assert all_reduce_time_s(H100, limit + 2, n) == pytest.approx(ring(limit + 2, n), rel=1e-12)
        eager = all_reduce_time_s(H100, limit + 2, n, 2 * (limit + 2)) - all_reduce_time_s(H100, limit + 2, n)
        assert eager == pytest.approx(memory_op_time_s(H100, 2 * (limit + 2), 1), rel=1e-9)
    assert all_reduce_time_s(H100, 1024.0, 16) == pytest.approx(ring(1024.0, 16), rel=1e-12)
    sizes, counts = np.array([mib, 40 * mib, mib, 300 * 1024.0]), np.array([2, 4, 8, 8])
    assert list(all_reduce_time_s(H100, sizes, counts)) == pytest.approx(
        [all_reduce_time_s(H100, float(b), int(n)) for b, n in zip(sizes, counts)], rel=1e-12)


def test_hopper_and_blackwell_moe_parameters_are_left_to_the_joint_fit():
    # The family fit's moe_joint stage fits the bf16 and per-tensor fp8 MoE of Hopper and Blackwell over their chips
    # together (KernelFamily.fitted_elsewhere): the family stage fits none of them there, Ada and Ampere keep their MoE
    # stage.
    moe = next(params for stage, _, params in OP_TABLE_STAGES if stage == "moe")
    for family in ("hopper", "blackwell"):
        assert stage_params(moe, family) == ()
        assert set(kernels.kernel_family(family).fitted_elsewhere) >= set(moe)
    assert set(stage_params(moe, "ada")) == set(moe)


def test_fp8_gemm_includes_input_quantization():
    cols = {"m": np.array([4096.0]), "n": np.array([4096.0]), "k": np.array([4096.0]), "dtype": np.array(["fp8"])}
    gemm_only = gemm_time_s(H100, 4096.0, 4096.0, 4096.0, "fp8", 1.0, 1.0, 2.0)
    assert predict_single_ops(H100, "gemm", cols)[0] > gemm_only  # plus the bf16 -> fp8 quantization kernel


def test_yaml_round_trip_and_unknown_keys():
    e = EfficiencyParams(kernel_fixed_s=3.5e-6)
    assert EfficiencyParams.from_dict(e.to_dict(), "x").to_dict() == e.to_dict()
    x = ExecutorParams(mode="eager", kernel_launch_s=7e-6)
    assert ExecutorParams.from_dict(x.to_dict(), "x").to_dict() == x.to_dict()
    with pytest.raises(UserError, match="unknown field 'gemm_eff'"):
        EfficiencyParams.from_dict({"gemm_eff": 0.5}, "x")
    assert ExecutorParams.from_dict({"tokenize_us_per_prompt_token": 1}, "x").tokenize_s_per_prompt_token == 1e-6
    with pytest.raises(UserError, match=r"x\.tokenize_us_per_prompt_token: must be a number in \[0"):
        ExecutorParams.from_dict({"tokenize_us_per_prompt_token": -1}, "x")
    with pytest.raises(UserError, match="memory_efficiency"):
        EfficiencyParams.from_dict({"memory_efficiency": 1.5}, "x")


def test_fit_recovers_known_parameters():
    truth = with_params(H100, {"efficiency.gemm_compute_efficiency": 0.7, "efficiency.kernel_fixed_s": 5e-6})
    shapes = [(m, n, k) for m in (1, 64, 1024, 8192) for n in (1024, 8192) for k in (1024, 8192)]
    import pandas as pd

    from roofline.calibration.fit import predict_table
    frame = pd.DataFrame([{"m": m, "n": n, "k": k, "dtype": "bf16"} for m, n, k in shapes])
    seconds = predict_table(truth, "gemm", frame)
    samples = [("gemm", row, s) for row, s in zip(frame.to_dict("records"), seconds)]
    result = fit(samples, H100, ["efficiency.gemm_compute_efficiency", "efficiency.kernel_fixed_s"])
    assert result.values["efficiency.gemm_compute_efficiency"] == pytest.approx(0.7, rel=1e-3)
    assert result.values["efficiency.kernel_fixed_s"] == pytest.approx(5e-6, rel=1e-3)
    assert result.train_median_abs_rel_err < 1e-4


def test_row_sums_equal_python_sum():
    """`row_sums` (the --out breakdown's step totals) gives the floats of Python's own `sum` of each row, whose
    rounding differs between versions (left to right up to 3.11, compensated from 3.12)."""
    rng = np.random.default_rng(5)
    for num_columns in (1, 2, 7, 19):
        values = rng.random((500, num_columns)) * 10.0 ** rng.integers(-9, 2, (500, num_columns))
        values[rng.random(values.shape) < 0.2] = 0.0  # operators a step lacks
        expected = [sum(row) for row in values.tolist()]
        assert roofline_math.row_sums(values).tolist() == expected
