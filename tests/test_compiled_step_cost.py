"""The compiled step cost (roofline/cost/_stepcost.c, `StepCostModel._core`): built where a C compiler is, in use
when built, turned off by ROOFLINE_PURE_PYTHON=1, and the Python code's floats bit for bit (the Python code,
`_core = None`, is the reference)."""

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.core.model_spec import ModelSpec
from roofline.cost import native
from roofline.cost.hardware import load_profile
from roofline.cost.quant import QuantConfig
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepArrays
from tests.test_cost_model import _SumsOnly

SPEC = ModelSpec(name="m", architecture="LlamaForCausalLM", num_layers=4, hidden_size=1024, num_heads=16,
                 num_kv_heads=4, head_dim=64, intermediate_size=4096, vocab_size=32000)
BF16 = QuantConfig.from_user(model_dtype="bfloat16")
FP8_KV = QuantConfig.from_user(model_dtype="bfloat16", kv_cache_dtype="fp8")
FP8 = QuantConfig.from_user(quantization="fp8", model_dtype="bfloat16")
H100 = load_profile("h100-sxm")
SERIAL_H100 = replace(H100, executor=replace(H100.executor, host_overlaps_device=False))
EAGER_SERIAL_H100 = replace(H100, executor=replace(H100.executor, mode="eager", host_overlaps_device=False))

_PROBE = ("from roofline.sim.deployment import make_deployment; from roofline.engine_args import EngineArgs; "
          "print(type(make_deployment('llama-3.1-8b', 'h100-sxm', EngineArgs()).cost_model._core).__name__)")

requires_build = pytest.mark.skipif(not native.BUILT, reason="roofline.cost._stepcost is not built")
# (in use: built and not turned off by ROOFLINE_PURE_PYTHON)
requires_compiled = pytest.mark.skipif(not native.COMPILED, reason="roofline.cost._stepcost is not built or selected")


def _compiler_found() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None and (Path(sysconfig.get_paths()["include"]) / "Python.h").exists()


def _run(args: list[str], **env: str) -> str:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **env}).stdout


def test_the_extension_is_built_where_a_compiler_is():
    """In CI (a fresh clone installed by .ci/run) a missing build is a failure; in a checkout installed before the
    extension existed it is only a skip that says how to build it."""
    if not _compiler_found():
        pytest.skip("no C compiler or Python headers here: the step cost runs on its Python code")
    if not native.BUILT and not os.environ.get("CI"):
        pytest.skip("roofline.cost._stepcost is not built in this checkout: `pip install -e .` builds it")
    assert native.BUILT, "a C compiler is here but roofline.cost._stepcost was not built (pip install -e . again)"


@requires_build
def test_in_use_when_built_and_off_by_the_environment():
    assert _run(["-c", _PROBE], ROOFLINE_PURE_PYTHON="").strip() == "PlainStepCost"
    for value in ("1", "TRUE", " yes"):
        assert _run(["-c", _PROBE], ROOFLINE_PURE_PYTHON=value).strip() == "NoneType"


@requires_compiled
def test_only_the_gpu_full_attention_paths_are_compiled():
    assert StepCostModel(SPEC, H100, BF16)._core is not None
    assert StepCostModel(replace(SPEC, sliding_window=512), H100, BF16)._core is None


def _pair(hw, quant, tp):
    compiled, reference = StepCostModel(SPEC, hw, quant, tp), StepCostModel(SPEC, hw, quant, tp)
    reference._core = None
    assert compiled._core is not None
    return compiled, reference


@requires_compiled
@pytest.mark.parametrize("hw,quant,tp", [
    (H100, BF16, 1), (SERIAL_H100, BF16, 1), (H100, FP8_KV, 2), (EAGER_SERIAL_H100, BF16, 1),
    (load_profile("b200"), BF16, 1), (load_profile("l40s"), FP8, 1), (load_profile("a100-80gb-sxm"), BF16, 4)])
def test_the_compiled_paths_give_the_python_floats(hw, quant, tp):
    """Steps of decodes only, steps given by their sums (prefill chunks, decodes, none of either, no emits) and by
    their arrays, in and past the CUDA graphs' sizes, each count seen first by either model: the same floats."""
    compiled, reference = _pair(hw, quant, tp)
    rng = np.random.default_rng(11)
    for i in range(150):
        n = int(rng.integers(1, (40, 700, 3000)[i % 3]))
        share = (0.0, 0.03, 0.5, 1.0)[i % 4]
        q = np.where(rng.random(n) < share, rng.integers(2, 9000, n), 1)
        c = rng.integers(0, (60, 60000, 130000)[i % 3], n)
        e = rng.random(n) < (0.9, 0.0, 1.0)[i % 3]
        dec = c[q == 1]
        shapes = [StepArrays(q, c, e), StepArrays(np.ones(n, np.int64), c, np.ones(n, bool)),
                  _SumsOnly(q, c, e, (int(dec.size), int(dec.sum()), 0, q[q > 1].tolist(), c[q > 1].tolist()))]
        for shape in shapes if i % 2 else shapes[::-1]:
            first, second = (compiled, reference) if i % 2 else (reference, compiled)
            a, b = first.time_s(shape), second.time_s(shape)
            assert a == b and np.float64(a).tobytes() == np.float64(b).tobytes()


@requires_compiled
def test_a_negative_context_is_refused_by_the_python_code():
    compiled, _ = _pair(H100, BF16, 1)
    with pytest.raises(AssertionError, match="context lengths"):
        compiled.time_s(_SumsOnly(np.array([5]), np.array([-1]), np.array([True]), (0, 0, 0, [5], [-1])))


@requires_build
def test_a_simulation_prints_the_same_bytes_with_and_without_it():
    args = ["-m", "roofline", "simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--workload",
            "sharegpt-chat", "--request-rate", "10", "--num-requests", "300"]
    assert _run(args, ROOFLINE_PURE_PYTHON="") == _run(args, ROOFLINE_PURE_PYTHON="1")


@requires_compiled
def test_a_plan_is_timed_from_its_fields_with_time_s_floats():
    # `plan_time_fn` (what the simulator calls once a step) on every plan of a run with preemptions, against the
    # Python code's `time_s`: the same floats; the steps of decodes only timed in C (time_s not called for them).
    from dataclasses import replace as dc_replace

    from roofline.engine_args import EngineArgs
    from roofline.sim.deployment import make_deployment
    from roofline.sim.simulator import run_simulation
    from roofline.sim.workload import load_workload

    engine = EngineArgs(num_gpu_blocks_override=1200, max_model_len=16384)  # (preemptions)
    deployment = make_deployment("llama-3.1-8b", "h100-sxm", engine)
    reference = make_deployment("llama-3.1-8b", "h100-sxm", engine).cost_model
    reference._core = None
    compiled = deployment.cost_model
    called = []

    def time_s(shape):
        called.append(shape)
        return compiled.time_s(shape)

    timed = compiled._core.plan_s
    decode_only = []

    def step_time(replica, step_index, start_s, plan):
        t = timed(time_s, plan)
        expected = reference.time_s(plan)
        assert np.float64(t).tobytes() == np.float64(expected).tobytes()
        if not plan.num_prefill_tokens:
            decode_only.append(plan)
        return t

    workload = dc_replace(load_workload("sharegpt-chat"), num_requests=300)
    result = run_simulation(deployment, workload, step_time_fn=step_time)
    assert int(result.request_table["num_preemptions"].sum()) > 0
    assert len(decode_only) > 100
    assert len(called) < len(result.step_table["step_index"]) - len(decode_only) + 20  # (a count's first step)


def _plan(rng, bulk: str):
    """A StepPlan of random rows: bulk rows of decodes only, bulk rows with prefill chunks (out of row order, some of
    one query token), or none; then admitted sequences (prefill chunks and single tokens)."""
    from engine.core.step_plan import ColumnRows, StepPlan

    plan = StepPlan(0)
    n = int(rng.integers(1, 300))
    off = rng.integers(1, 5000, n).tolist()
    plan.requests = [None] * n  # type: ignore[list-item]  # (only their number is read)
    num_tokens = prefill_tokens = 0
    if bulk == "decodes":
        plan.add_running_columns(plan.requests, ColumnRows(off, 1, 16, [], list(range(n)), []), sum(off), n, 0,
                                 longest_decode=lambda: max(off))
        num_tokens = n
    elif bulk == "chunks":
        rows = rng.choice(n, size=min(n, int(rng.integers(1, 40))), replace=False).tolist()
        prefill_rows = [(row, int(rng.integers(0, 3000)), int(rng.choice([1, 2, 700, 4000])), 9) for row in rows]
        context = list(off)
        query = [1] * n
        for row, ctx, q, _ in prefill_rows:
            context[row], query[row] = ctx, q
        num_tokens, prefill_tokens = sum(query), sum(q for _, _, q, _ in prefill_rows if q > 1)
        plan.add_running_columns(plan.requests, ColumnRows(off, 1, 16, prefill_rows, list(range(n)), []),
                                 sum(context), num_tokens, prefill_tokens)
    else:
        plan.requests = []
    plan.num_emitting_seqs = len(plan.requests)
    for _ in range(int(rng.integers(1, 6))):  # admissions after the bulk rows (`add_seq`'s columns)
        q = int(rng.choice([1, 3, 512, 2048]))
        plan.requests.append(None)  # type: ignore[arg-type]
        plan._query.append(q)
        plan._context.append(int(rng.integers(0, 9000)))
        emits = bool(rng.random() < 0.7)
        plan._emits.append(emits)
        plan.num_emitting_seqs += emits
        num_tokens += q
        prefill_tokens += q if q > 1 else 0
    plan.num_batched_tokens, plan.num_prefill_tokens = num_tokens, max(prefill_tokens, 1)
    return plan


@requires_compiled
@pytest.mark.parametrize("hw", [H100, SERIAL_H100])
def test_a_plan_with_prefills_is_timed_from_its_slots_with_time_s_floats(hw):
    """`plan_s` of StepPlans with prefills (bulk rows of decodes, bulk rows with prefill chunks out of row order,
    none): `time_s`'s floats bit for bit, `time_s` called only for a count's first step (its parts handed over) and
    for a plan without bulk rows (the arrays' path)."""
    compiled, reference = _pair(hw, BF16, 1)
    timed = compiled.plan_time_fn().func  # type: ignore[attr-defined]
    rng = np.random.default_rng(5)
    called = []

    def time_s(shape):
        called.append(shape)
        return compiled.time_s(shape)

    for i in range(300):
        plan = _plan(rng, ("decodes", "chunks", "none")[i % 3])
        expected = reference.time_s(plan)
        first = timed(time_s, plan)
        num_called = len(called)
        again = timed(time_s, plan)  # (every count's parts set now: in C)
        assert len(called) == num_called or not plan._columns
        assert np.float64(first).tobytes() == np.float64(expected).tobytes() == np.float64(again).tobytes()
    assert len(called) < 300 + 200
