"""The simulator's compiled records (roofline/sim/_simcore.c): built where a C compiler is and in use when built (off
by ROOFLINE_PURE_PYTHON=1), and the Python code's records exactly: each step's row (`StepRows`) and each request's
runs of stamps (`Segments.add`, also tests/test_token_times.py)."""

import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from roofline.engine_args import EngineArgs
from roofline.sim import native, recorder, token_times
from roofline.sim.api_server import ApiServerCosts
from roofline.sim.deployment import make_deployment
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.workload import ArrivalProcess, RequestSpec, load_workload

requires_build = pytest.mark.skipif(not native.BUILT, reason="roofline.sim._simcore is not built")

_PROBE = "from roofline.sim.recorder import StepRows; print(StepRows().record is not None)"


def test_the_extension_is_built_where_the_step_costs_is():
    """Built by the same setup.py as roofline.cost._stepcost (tests/test_compiled_step_cost.py checks that one is
    built where a compiler is)."""
    from roofline.cost import native as cost_native
    assert native.BUILT == cost_native.BUILT


@requires_build
def test_in_use_when_built_and_off_by_the_environment():
    def probe(value: str) -> str:
        return subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True,
                              env={**os.environ, "ROOFLINE_PURE_PYTHON": value}).stdout.strip()
    assert probe("") == "True"
    assert probe("1") == "False"


def _run(compiled: bool, monkeypatch: pytest.MonkeyPatch, chunk: int, workload_id: str = "sharegpt-chat"):
    for module in (recorder, token_times):
        monkeypatch.setattr(module, "COMPILED", compiled)
    monkeypatch.setattr(recorder.StepRows, "CHUNK", chunk)
    workload = replace(load_workload(workload_id), num_requests=400, arrival=ArrivalProcess("poisson", 30.0))
    deployment = make_deployment("llama-3.1-8b", "h100-sxm", EngineArgs(num_gpu_blocks_override=3000, max_model_len=16384))
    return run_simulation(deployment, workload, SimulationOptions(record_steps=True))


@requires_build
@pytest.mark.parametrize("chunk", [4096, 7])
def test_the_compiled_records_are_the_python_records(monkeypatch: pytest.MonkeyPatch, chunk: int):
    """A run with preemptions (a small KV cache), blocks of rows full and not: every step column and every request's
    runs the same, bit for bit."""
    python = _run(False, monkeypatch, chunk)
    compiled = _run(True, monkeypatch, chunk)
    assert python.request_table["num_preemptions"].sum() > 10
    for name in python.step_table.columns:
        a, b = python.step_table[name], compiled.step_table[name]
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    for name in ("times", "row", "start", "length"):
        assert np.array_equal(getattr(python.itl, name), getattr(compiled.itl, name)), name
    assert python.request_table["first_token_s"].tobytes() == compiled.request_table["first_token_s"].tobytes()


@requires_build
@pytest.mark.parametrize("workload_id", ["sharegpt-chat", "multi-turn-chat"])
def test_a_finished_requests_records_in_one_call_are_the_python_records(monkeypatch: pytest.MonkeyPatch,
                                                                        workload_id: str):
    """`Recorder.finished` through `_simcore.Finisher` (most requests: the first of a series and a run the search
    must find go to the Python code), on a run with preemptions and one with prefix hits: every request column and every
    run the same, bit for bit."""
    python = _run(False, monkeypatch, 4096, workload_id)
    handled: list[bool] = []
    compiled_finisher = native._simcore.Finisher

    class Counting:
        def __init__(self, *args):
            self._record = compiled_finisher(*args).record

        def record(self, *args):
            handled.append(self._record(*args))
            return handled[-1]

    monkeypatch.setattr(native._simcore, "Finisher", Counting)
    compiled = _run(True, monkeypatch, 4096, workload_id)
    if workload_id == "sharegpt-chat":
        assert python.request_table["num_preemptions"].sum() > 10
    else:
        assert python.request_table["num_prefix_hit_tokens"].sum() > 0
    assert len(handled) == 400 and sum(handled) > 350
    for name in python.request_table.columns:
        a, b = np.asarray(python.request_table[name]), np.asarray(compiled.request_table[name])
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    for name in ("times", "row", "start", "length"):
        a, b = getattr(python.itl, name), getattr(compiled.itl, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name


def _loop_run(compiled: bool, monkeypatch: pytest.MonkeyPatch, case: str):
    """One of the loop cases below, its event loop compiled (`_simcore.run_loop`, checked to have run) or Python's."""
    from roofline.sim import simulator
    from tests.profiles import gpu_profile_without_tokenizer

    ran: list[bool] = []
    run_loop = native._simcore.run_loop

    def counted(*args):
        ran.append(run_loop(*args))
        return ran[-1]
    monkeypatch.setattr(native._simcore, "run_loop", counted)
    for module in (simulator, recorder, token_times):
        monkeypatch.setattr(module, "COMPILED", compiled)
    hw = gpu_profile_without_tokenizer("h100-sxm") if case in ("no-api-server", "bursts-no-api-server", "ties") \
        else "h100-sxm"
    engine = EngineArgs(num_gpu_blocks_override=3000, max_model_len=16384,
                        async_scheduling=False if case == "sync-scheduling" else None)
    options = {"closed-loop": SimulationOptions(max_concurrency=40, record_steps=False),
               "two-replicas": SimulationOptions(num_replicas=2, router="least_outstanding", record_steps=False),
               "bursts-no-api-server": SimulationOptions(num_replicas=2, record_steps=False),
               "bursts-api-server": SimulationOptions(num_replicas=2, record_steps=False),
               # (new connections accepted one a turn: `end_step_streamed` releases each finished request's)
               "bursts-accept-per-turn": SimulationOptions(num_replicas=2, record_steps=False,
                                                           api_server_accept_per_turn=True),
               "steps-recorded": SimulationOptions(record_steps=True),
               # (a request reaching the engine core during a step waits for its core: `reach`'s second wait)
               "busy-hop": SimulationOptions(record_steps=False, api_server_costs=replace(
                   ApiServerCosts(), busy_engine_hop_s=2e-3)),
               # (the chat endpoint's first outputs in their step's pass: `end_step_streamed`)
               "chat-first-output": SimulationOptions(record_steps=False, endpoint="chat", api_server_costs=replace(
                   ApiServerCosts(), chat_first_output_s=2e-3))}.get(case, SimulationOptions(record_steps=False))
    if case == "steps-recorded":
        monkeypatch.setattr(recorder.StepRows, "CHUNK", 7)  # (blocks full: `_record_rest`)
    workload = replace(load_workload("sharegpt-chat"), num_requests=300, arrival=ArrivalProcess("poisson", 30.0))
    # (bursts of equal requests at equal times on two replicas: steps ending at the same instant, `next_step`'s tie)
    specs = [RequestSpec(f"b{i}", (i // 40) * 2.0, 600 + 500 * (i % 3 == 0), 150) for i in range(300)] \
        if case.startswith("bursts") else None
    step_time_fn = None
    if case == "ties":  # steps of 0.25 s, requests arriving at multiples of 0.5 s: arrivals at a step's end
        specs = [RequestSpec(f"t{i}", 0.5 * (i // 3), 200 + 37 * (i % 5), 40) for i in range(300)]

        def step_time_fn(replica: int, step_index: int, start_s: float, plan) -> float:
            return 0.25
    result = run_simulation(make_deployment("llama-3.1-8b", hw, engine), workload, options, specs=specs,
                            step_time_fn=step_time_fn)
    assert ran == ([True] if compiled else [])
    return result


@requires_build
@pytest.mark.parametrize("case", ["api-server", "sync-scheduling", "closed-loop", "two-replicas", "no-api-server",
                                  "bursts-no-api-server", "bursts-api-server", "ties", "busy-hop", "steps-recorded",
                                  "chat-first-output", "bursts-accept-per-turn"])
def test_the_compiled_event_loop_is_the_python_loop(monkeypatch: pytest.MonkeyPatch, case: str):
    """`_Simulation.run` through `_simcore.run_loop` (the common step's handlers and the requests' way in, in C)
    against the Python loop, on runs with preemptions (a small KV cache) behind an API server of one process
    (asynchronous scheduling: requests wait in transit; synchronous: the engine core's admissions), a closed loop,
    two replicas, no API server, bursts on two replicas (steps ending at the same time; with new connections accepted
    one a turn), arrivals at a step's end (a step time function), requests waiting for a busy engine core's core, the
    chat endpoint's first outputs in their steps' output passes, and the steps' sequences recorded with
    blocks of rows filling: every request and step column, every run of stamps, the summary, the same bytes."""
    python = _loop_run(False, monkeypatch, case)
    compiled = _loop_run(True, monkeypatch, case)
    assert python.request_table["num_preemptions"].sum() > 0 or case.startswith("bursts") or case == "ties"
    for table in ("request_table", "step_table"):
        a_table, b_table = getattr(python, table), getattr(compiled, table)
        assert a_table.columns == b_table.columns
        for name in a_table.columns:
            a, b = np.asarray(a_table[name]), np.asarray(b_table[name])
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (table, name)
    for name in ("times", "row", "start", "length"):
        a, b = getattr(python.itl, name), getattr(compiled.itl, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    assert repr(python.summary()) == repr(compiled.summary())
    assert len(python.step_seqs) == len(compiled.step_seqs)
