"""`StepCostModel.breakdown_columns` in bulk: the token and emit operators kept per count across calls
(`_OpCountTable`, on a GPU; an MoE layer evaluated per call), a hybrid model's sliding layers as columns
(`_hybrid_columns`), the step-by-step records' GEMMs evaluated for all steps at once (`_records_columns`), the host
time on arrays. Every call's columns are `cost(...).breakdown_s` of each step bit for bit, whichever counts the
earlier calls tabulated, and the columns of the paths they replace."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from profiles import TEST_CPU_PROFILE

from roofline.cost import step_cost
from roofline.cost.count_table import _TABLE_BLOCK, _OpCountTable
from roofline.cost.hardware import load_profile, parse_profile
from roofline.cost.host import CUDAGRAPH_MODE_CHOICES, HostModel
from roofline.cost.ops import emit_ops, token_ops
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepArrays
from roofline.engine_args import EngineArgs
from roofline.sim.deployment import make_deployment

Step = tuple[np.ndarray, np.ndarray, np.ndarray]

# (model, hardware, engine arguments) on GPUs, where the operators are tabulated (an MoE layer's evaluated per call).
CASES = {
    "llama-tp1": ("llama-3.1-8b", "h100-sxm", EngineArgs(max_num_batched_tokens=2048)),
    # TP 2 (all-reduces, their eager path above the graph sizes), batches with prefills eager at every size
    "llama-tp2-decode-graphs": ("llama-3.1-8b", "h100-sxm",
                                EngineArgs(tensor_parallel_size=2, max_num_batched_tokens=1024,
                                           cudagraph_mode="FULL_DECODE_ONLY")),
    # W8A8 fp8 (CUTLASS 8-bit dispatch, the input quantization) on Ada (power limit, CTA occupancy, split-K reduce)
    "fp8-l40s": ("llama-3.1-8b-instruct-fp8-dynamic", "l40s", EngineArgs(max_num_batched_tokens=1024)),
    # weight-only int4 (Marlin / Machete) on Blackwell (split-K reduction kernel)
    "awq-b200": ("llama-3.1-8b-instruct-awq-int4", "b200", EngineArgs(max_num_batched_tokens=1024)),
    # sliding-window layers beside full ones (Gemma 3), qk-norm and sandwich norms
    "gemma-hybrid": ("gemma-3-4b", "h100-sxm", EngineArgs(max_num_batched_tokens=1024)),
    # MoE models: their experts (`_PER_CALL_KINDS`) evaluated on each call's counts, the rest tabulated
    "qwen3-moe": ("qwen3-30b-a3b", "h100-sxm", EngineArgs(max_num_batched_tokens=1024)),
    "mixtral-fp8-tp4": ("mixtral-8x7b", "h200-sxm", EngineArgs(tensor_parallel_size=4, quantization="fp8",
                                                               max_num_batched_tokens=1024)),
    # latent attention and MoE (its dense first layers, shared experts), TP 8
    "deepseek-mla": ("deepseek-v3", "h200-sxm", EngineArgs(tensor_parallel_size=8, max_num_batched_tokens=1024)),
    # sliding and full layers with MoE
    "gpt-oss-hybrid": ("gpt-oss-20b", "h100-sxm", EngineArgs(max_num_batched_tokens=1024)),
}


def random_steps(rng: np.random.Generator, n: int, max_query: int) -> list[Step]:
    """`n` steps of decodes (contexts up to 6,000) and up to 3 prefill chunks, some sequences emitting nothing."""
    steps = []
    for _ in range(n):
        decodes = int(rng.integers(0, 70))
        chunks = int(rng.integers(0 if decodes else 1, 4))
        q = np.concatenate([np.ones(decodes, dtype=np.int64), rng.integers(2, max_query, size=chunks)])
        c = rng.integers(0, 6000, size=len(q))
        e = rng.random(len(q)) < 0.85
        steps.append((q, c, e))
    return steps


def assert_breakdown_is_step_cost(model: StepCostModel, steps: list[Step], untabulated: StepCostModel | None = None
                                  ) -> None:
    """`model.breakdown_columns(steps)` is `cost(...).breakdown_s` of each step and, where `untabulated` is given (the
    same model without `_op_tables`, the operators evaluated on this call's counts alone, and a hybrid model's
    attention step by step, not `_hybrid_columns`, its records one by one, not `_batch_records`), its columns bit for
    bit."""
    columns = model.breakdown_columns(steps)
    names: set[str] = set()
    for i, (q, c, e) in enumerate(steps):
        expected = model.cost(StepArrays(q, c, e)).breakdown_s
        names |= expected.keys()
        assert {name: columns[name][i] for name in columns} == {name: expected.get(name, 0.0) for name in columns}, i
    assert names == set(columns)
    if untabulated is not None:
        untabulated._op_tables = None
        untabulated._hybrid_columns = False
        untabulated._batch_records = False
        reference = untabulated.breakdown_columns(steps)
        assert set(columns) == set(reference)
        for name in reference:
            assert columns[name].tobytes() == reference[name].tobytes(), name


@pytest.mark.parametrize("case", sorted(CASES))
def test_tabulated_breakdown_is_step_cost_call_after_call(case: str) -> None:
    model_id, hardware, engine = CASES[case]
    model = make_deployment(model_id, hardware, engine).cost_model
    assert model._op_tables == {}
    rng = np.random.default_rng(sum(map(ord, case)))
    budget = engine.max_num_batched_tokens or 2048
    # parts of steps one after another on one model, as the simulator's --out hands them over, each with counts of
    # blocks the ones before did not fill
    for part, max_query in enumerate((budget // 2, budget, 2 * budget + 700)):
        assert_breakdown_is_step_cost(model, random_steps(rng, 25, max_query),
                                      make_deployment(model_id, hardware, engine).cost_model)
        assert set(model._op_tables) >= {"tokens", "emits"}, part


def test_a_call_of_tabulated_counts_evaluates_no_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    model_id, hardware, engine = CASES["llama-tp1"]
    model = make_deployment(model_id, hardware, engine).cost_model
    rng = np.random.default_rng(7)
    first = random_steps(rng, 30, 2048)
    reference = StepCostModel.breakdown_columns(make_deployment(model_id, hardware, engine).cost_model, first[5:])
    model.breakdown_columns(first)
    evaluated: list[int] = []
    original = StepCostModel._count_columns

    def counting(self: StepCostModel, ops_of: Any, counts: np.ndarray) -> Any:
        evaluated.append(len(counts))
        return original(self, ops_of, counts)

    monkeypatch.setattr(StepCostModel, "_count_columns", counting)
    again = model.breakdown_columns(first[5:])  # token counts within the span, emit counts already seen
    assert evaluated == []
    assert list(again) == list(reference)
    for name in reference:
        assert again[name].tobytes() == reference[name].tobytes(), name


@pytest.mark.parametrize("case", ["llama-tp2-decode-graphs", "fp8-l40s"])
def test_op_count_table_equals_evaluating_the_counts(case: str) -> None:
    """Random arrays of counts (zeros among them, in any order, repeated) from the table kept across lookups: the
    names, seconds and kernels of `_count_columns` on that array alone, bit for bit."""
    model_id, hardware, engine = CASES[case]
    model = make_deployment(model_id, hardware, engine).cost_model
    rng = np.random.default_rng(11)
    tables = {"tokens": _OpCountTable(lambda x: model._count_columns(token_ops, x)),
              "emits": _OpCountTable(lambda x: model._count_columns(emit_ops, x))}
    for _ in range(6):
        for key, ops_of in (("tokens", token_ops), ("emits", emit_ops)):
            top = int(rng.choice([3, 300, 1100, 3 * _TABLE_BLOCK + 5]))
            counts = rng.integers(0, top, size=int(rng.integers(1, 60)))
            counts[rng.random(len(counts)) < 0.2] = 0
            names, seconds, kernels = tables[key].columns(counts)
            want_names, want_seconds, want_kernels = model._count_columns(ops_of, counts)
            assert names == want_names
            assert seconds.shape == want_seconds.shape and seconds.tobytes() == want_seconds.tobytes()
            assert kernels.dtype == want_kernels.dtype and kernels.tolist() == want_kernels.tolist()
    assert tables["tokens"].columns(np.zeros(4, dtype=np.int64))[0] == []  # no positive count: no operators


def test_a_cpu_breakdown_is_evaluated_per_call() -> None:
    """A CPU's formulas are not checked for elementwise evaluation: its operators are evaluated per call."""
    model = make_deployment("llama-156m", parse_profile(TEST_CPU_PROFILE, where="test"),
                            EngineArgs(max_num_batched_tokens=512, max_model_len=1024, num_gpu_blocks_override=256)
                            ).cost_model
    assert model._op_tables is None
    rng = np.random.default_rng(3)
    for _ in range(2):
        assert_breakdown_is_step_cost(model, random_steps(rng, 12, 400))


def test_an_moe_layer_is_evaluated_on_each_calls_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """An MoE model's experts are evaluated on each call's counts together (their Poisson window depends on them),
    its other token operators tabulated: the second call of the same steps evaluates the experts alone."""
    model_id, hardware, engine = CASES["qwen3-moe"]
    model = make_deployment(model_id, hardware, engine).cost_model
    steps = random_steps(np.random.default_rng(4), 20, 1024)
    first = model.breakdown_columns(steps)
    evaluated: list[list[str]] = []
    original = StepCostModel._count_columns

    def recording(self: StepCostModel, ops_of: Any, counts: np.ndarray) -> Any:
        result = original(self, ops_of, counts)
        evaluated.append(result[0])
        return result

    monkeypatch.setattr(StepCostModel, "_count_columns", recording)
    again = model.breakdown_columns(steps)
    assert evaluated == [["moe_experts"]]
    assert list(again) == list(first) and all(again[n].tobytes() == first[n].tobytes() for n in first)


@pytest.mark.parametrize("mode", CUDAGRAPH_MODE_CHOICES)
@pytest.mark.parametrize("hardware", ["h100-sxm", "cpu"])
@pytest.mark.parametrize("sizes", [None, (1, 2, 4, 8, 24, 512)])
def test_host_model_on_arrays_is_its_scalar_time(mode: str, hardware: str, sizes: tuple[int, ...] | None) -> None:
    """`HostModel.padded_tokens_array` and `time_s_array` (`breakdown_columns`' host side): each step's padded count
    and (host, launch) seconds of `padded_tokens` and `time_s`, bit for bit, below, at and above the captured sizes."""
    hw = load_profile(hardware) if hardware != "cpu" else parse_profile(TEST_CPU_PROFILE, where="test")
    host = HostModel(hw, mode, sizes or hw.executor.cuda_graph_batch_sizes, 28)
    rng = np.random.default_rng(5)
    graph_sizes = list(host.graph_sizes)
    tokens = np.concatenate([rng.integers(0, 1500, size=400), graph_sizes, [s + 1 for s in graph_sizes],
                             [0, 1, host.max_graph]]).astype(np.int64)
    prefills = np.where(rng.random(len(tokens)) < 0.5, 0, rng.integers(1, 5, size=len(tokens))).astype(np.int64)
    decodes = rng.integers(0, 300, size=len(tokens)).astype(np.int64)
    kernels = rng.integers(0, 2000, size=len(tokens)).astype(np.int64)
    padded = host.padded_tokens_array(tokens, prefills > 0)
    assert padded.tolist() == [host.padded_tokens(t, p > 0) for t, p in zip(tokens.tolist(), prefills.tolist())]
    host_s, launch_s = host.time_s_array(tokens, prefills, decodes, kernels)
    expected = [host.time_s(*row) for row in zip(tokens.tolist(), prefills.tolist(), decodes.tolist(), kernels.tolist())]
    assert list(zip(host_s.tolist(), launch_s.tolist())) == expected


def test_counts_beyond_the_tables_bound_are_evaluated_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call with a count at or above `_OP_TABLE_COUNTS` (a table holds a row of every count up to its largest)
    evaluates its counts, the same floats, and tabulates nothing."""
    monkeypatch.setattr(step_cost, "_OP_TABLE_COUNTS", 600)
    model_id, hardware, engine = CASES["llama-tp1"]
    model = make_deployment(model_id, hardware, engine).cost_model
    steps = [(np.array([1, 1, 700]), np.array([10, 20, 0]), np.array([True, True, False])),
             (np.array([1] * 5), np.array([100] * 5), np.ones(5, dtype=bool))]
    assert_breakdown_is_step_cost(model, steps, make_deployment(model_id, hardware, engine).cost_model)
    assert "tokens" not in model._op_tables


@pytest.mark.parametrize("case", ["gemma-hybrid", "gpt-oss-hybrid"])
@pytest.mark.parametrize("exact_prefill_sums", [True, False])
def test_hybrid_columns_are_the_step_by_step_breakdown(case: str, exact_prefill_sums: bool,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A hybrid model's sliding layers summed as columns beside the full layers' (`_hybrid_columns`): the columns of
    building each step's `BatchStats` and records, bit for bit, `host_overhead` included (a first step of decodes
    only: each step's device time still summed in its records' order, `_merged_order`); with the prefill sums of
    `_prefill_columns` and of `_prefill_sums`' loop."""
    model_id, hardware, engine = CASES[case]
    model = make_deployment(model_id, hardware, engine).cost_model
    assert model._hybrid_columns
    if not exact_prefill_sums:
        monkeypatch.setattr(StepCostModel, "_prefill_columns", lambda *args: None)
    rng = np.random.default_rng(9)
    decodes_first = [(np.ones(4, dtype=np.int64), rng.integers(0, 9000, size=4), np.ones(4, dtype=bool))]
    for steps in (decodes_first + random_steps(rng, 30, 1024), random_steps(rng, 30, 3000)):
        columns = model.breakdown_columns(steps)
        step_by_step = make_deployment(model_id, hardware, engine).cost_model
        step_by_step._hybrid_columns = False
        reference = step_by_step.breakdown_columns(steps)
        assert set(columns) == set(reference)
        for name in reference:
            assert columns[name].tobytes() == reference[name].tobytes(), name


@pytest.mark.parametrize("model_id, hardware, engine", [
    ("deepseek-v3", "h200-sxm", EngineArgs(tensor_parallel_size=8, max_num_batched_tokens=2048)),
    ("kimi-k2.5-nvfp4", "b200", EngineArgs(tensor_parallel_size=8, max_num_batched_tokens=2048)),
    ("llama-4-scout", "h200-sxm", EngineArgs(tensor_parallel_size=4, max_num_batched_tokens=2048,
                                             max_model_len=32768)),
    ("llama-3.2-1b", "cpu", EngineArgs(max_num_batched_tokens=2048, num_gpu_blocks_override=512, max_model_len=8192))])
def test_batched_records_are_the_records_one_by_one(model_id: str, hardware: str, engine: EngineArgs) -> None:
    """The steps whose attention records are built step by step (an MLA model, chunked local attention, a CPU):
    their GEMM-like records of the same shape but the rows evaluated for all steps at once (`_records_columns`):
    the columns of evaluating every record of every step on its own, bit for bit, and `cost(...).breakdown_s`."""
    hw = parse_profile(TEST_CPU_PROFILE, where="test") if hardware == "cpu" else hardware
    model = make_deployment(model_id, hw, engine).cost_model
    rng = np.random.default_rng(13)
    for _ in range(2):
        steps = random_steps(rng, 30, 2048)
        one_by_one = make_deployment(model_id, hw, engine).cost_model
        one_by_one._batch_records = False
        assert_breakdown_is_step_cost(model, steps)
        reference = one_by_one.breakdown_columns(steps)
        columns = model.breakdown_columns(steps)
        assert set(columns) == set(reference)
        for name in reference:
            assert columns[name].tobytes() == reference[name].tobytes(), name


def test_merged_order_keeps_every_sequences_order() -> None:
    """`_merged_order`: a step of decodes only first, then one of prefills only, then one with both: the order
    of the one with both, which keeps the others'; no order that keeps all: the first appearance."""
    steps = [["d", "ds"], ["p", "ps"], ["p", "d", "ps", "ds"]]
    assert step_cost._merged_order(steps) == ["p", "d", "ps", "ds"]
    assert step_cost._merged_order([["a", "b"], ["b", "a"]]) == ["a", "b"]
    assert step_cost._merged_order([]) == []
