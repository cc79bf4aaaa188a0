"""The compiled API server (roofline/sim/_apicore.c) against its reference, the Python `_Threads` and `ApiServer`
(roofline/sim/api_server.py): the same random calls to both, every returned float the same double, the threads'
state the same after each call. Processes 1-3, a core per thread or 1-3 shared cores, the client on the server's
cores or apart, the intake's waits, both endpoints, prefix caching's hashing, connections or round robin."""

from __future__ import annotations

import random
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from roofline.cost import native as cost_native
from roofline.cost.hardware import load_profile
from roofline.cost.host_cpu import HostCpu
from roofline.engine_args import EngineArgs
from roofline.sim import api_server
from roofline.sim.api_server import (
    ACCEPT,
    LOOP,
    OUTPUTS,
    RENDERER,
    WAIT,
    ApiServer,
    ApiServerCosts,
    _Threads,
    reach_after,
)
from roofline.sim.deployment import make_deployment
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.workload import ArrivalProcess, LengthDistribution, Workload

requires_build = pytest.mark.skipif(api_server._apicore is None, reason="roofline.sim._apicore is not built")


def test_the_extension_is_built_where_the_step_costs_is() -> None:
    """Built by the same setup.py as roofline.cost._stepcost (tests/test_compiled_step_cost.py checks that one is
    built where a compiler is): a build that drops this one fails here, not by skipping the tests below."""
    assert (api_server._apicore is not None) == cost_native.BUILT

_DUMMY_COSTS = (0.0,) * 12
ENGINE = EngineArgs(max_num_seqs=64, max_num_batched_tokens=4096, max_model_len=512, num_gpu_blocks_override=400,
                    async_scheduling=False)


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


def _same(py: Any, c: Any) -> None:
    """Equal results, floats bit for bit (a tuple's items each)."""
    if isinstance(py, tuple):
        assert isinstance(c, tuple) and len(py) == len(c)
        for a, b in zip(py, c):
            _same(a, b)
    elif isinstance(py, float):
        assert isinstance(c, float) and _bits(py) == _bits(c), (py, c)
    else:
        assert py == c


def _work(rng: random.Random) -> float:
    return 0.0 if rng.random() < 0.05 else rng.uniform(0.0, 2e-3)


def _chain(rng: random.Random, num_processes: int, client: int) -> list[tuple[int, float]]:
    """A random chain of 1-6 thread parts, each maybe after a wait (a wait never last, never two in a row), a loop's
    part maybe after an accept (and a wait)."""
    chain: list[tuple[int, float]] = []
    for _ in range(rng.randint(1, 6)):
        if rng.random() < 0.2:  # a new connection's accept (`_Threads._accept`): then the loop's part
            chain.append((ACCEPT, 0.0))
            if rng.random() < 0.3:
                chain.append((WAIT, rng.uniform(0.0, 1e-3)))
            chain.append((3 * rng.randrange(num_processes) + LOOP, _work(rng)))
            continue
        if rng.random() < 0.3:
            chain.append((WAIT, rng.uniform(0.0, 1e-3)))
        process = rng.randrange(num_processes)
        queue = rng.choice([3 * process + LOOP, 3 * process + RENDERER, 3 * process + LOOP, client])
        chain.append((queue, _work(rng)))
    return chain


def _threads_state(py: _Threads, c: Any, tickets: range) -> None:
    _same(py.now_s, c.now_s)
    assert (py.num_inputs, py.num_arrivals, len(py.chains)) == (c.num_inputs, c.num_arrivals, c.num_chains)
    for ticket in tickets:
        done = py.finished_s.get(ticket)
        if done is None:
            assert c.finished(ticket) is None
        else:
            _same(done, c.finished(ticket))


@requires_build
@pytest.mark.parametrize("num_processes", [1, 2, 3])
@pytest.mark.parametrize("num_cores", [None, 1, 2, 3])
@pytest.mark.parametrize("client_shares", [False, True])
def test_the_threads_give_the_same_times_as_the_python_threads(num_processes: int, num_cores: int | None,
                                                               client_shares: bool) -> None:
    """`_Threads`' calls (`arrive`, `add_output`, `advance`, `projected_end`, `reach_after`) on random chains with
    waits, accepts, the client's thread and output passes (some with turns' refills), in both: the same floats and
    state after every call."""
    for seed in range(6):
        rng = random.Random(seed + 10 * num_processes + 100 * (num_cores or 0) + 1000 * client_shares)
        py = _Threads(num_processes, num_cores, client_shares)
        parts: list[tuple[list[Any], int, list[Any]]] = [([], 3 * p + RENDERER, []) for p in range(num_processes)]
        c = api_server._apicore.Server(num_processes, num_cores, client_shares, parts, _DUMMY_COSTS)
        now, num_tickets, num_passes = 0.0, 0, 0
        pending: list[int] = []
        for _ in range(300):
            op = rng.random()
            if op < 0.3:
                at = now + (0.0 if rng.random() < 0.3 else rng.uniform(0.0, 2e-3))
                chain = _chain(rng, num_processes, py.client)
                py.arrive(at, num_tickets, list(chain))
                c.arrive(at, num_tickets, chain)
                pending.append(num_tickets)
                num_tickets += 1
            elif op < 0.55:
                num_passes += 1
                at = now + (0.0 if rng.random() < 0.5 else rng.uniform(0.0, 5e-4))
                process, work = rng.randrange(num_processes), _work(rng)
                refill = rng.choice([0.0, 0.0, rng.uniform(0.0, 2.0)])  # (turns after another process's)
                _same(py.add_output(now, at, process, -num_passes, work, refill),
                      c.add_output(now, at, process, -num_passes, work, refill))
            elif op < 0.7:
                to = now + rng.uniform(-1e-3, 3e-3)
                py.advance(to)
                c.advance(to)
            elif op < 0.8 and pending:
                ticket = rng.choice(pending)
                if ticket in py.chains:
                    _same(py.projected_end(ticket), c.projected_end(ticket))
            elif pending:
                ticket = rng.choice(pending)
                latency = rng.choice([0.0, rng.uniform(0.0, 1e-3)])
                reach = reach_after(py, now, ticket, latency)
                _same(reach, c.reach(now, ticket, latency))
                if reach <= now:
                    pending.remove(ticket)
            now += rng.expovariate(1.0 / 4e-4)
            _threads_state(py, c, range(num_tickets))


@requires_build
def test_arrivals_of_the_same_time_and_order_go_by_ticket() -> None:
    """A wait counts the arrivals before taking its order and `arrive` after, so the two can share one; Python's
    (time, order, ticket) tuples then put the lower ticket first, and so does the C heap: request 5 reaches its wait
    at 1 s (the renderer idle: ready at 2 s, order 2), request 1 arrives at 2 s for the renderer with order 2 too and
    goes first (2-3 s), request 5's render after it (3-4 s)."""
    py = _Threads(1, None, False)
    c = api_server._apicore.Server(1, None, False, [([], RENDERER, [])], _DUMMY_COSTS)
    for threads in (py, c):
        threads.arrive(0.0, 5, [(LOOP, 1.0), (WAIT, 1.0), (RENDERER, 1.0)])
        threads.advance(1.5)
        threads.arrive(2.0, 1, [(RENDERER, 1.0)])
        threads.advance(10.0)
    assert (py.finished_s[1], py.finished_s[5]) == (3.0, 4.0) == (c.finished(1), c.finished(5))


def _server_pair(monkeypatch: pytest.MonkeyPatch, costs: ApiServerCosts, **kwargs: Any) -> tuple[ApiServer, ApiServer]:
    """The Python `ApiServer` and the compiled one, made alike."""
    compiled = ApiServer(costs, **kwargs)
    assert compiled.core is not None
    with monkeypatch.context() as patch:
        patch.setattr(api_server, "COMPILED", False)
        python = ApiServer(costs, **kwargs)
    assert python.core is None
    return python, compiled


def _random_costs(rng: random.Random) -> ApiServerCosts:
    costs = replace(ApiServerCosts(), latency_s=rng.choice([0.0, 3.77e-3]), output_latency_s=rng.choice([0.0, 5e-4]),
                    render_request_s=rng.choice([0.0, 1e-4]), client_request_s=rng.choice([0.0, 3e-4]),
                    client_output_token_s=rng.choice([0.0, 2e-5]), chat_output_token_s=rng.choice([0.0, 1e-5]),
                    chat_first_output_s=rng.choice([0.0, 3e-4]))
    if rng.random() < 0.5:  # the intake's waits
        costs = replace(costs, read_wait_s=rng.choice([0.0, 2e-4]), render_start_wait_s=rng.choice([0.0, 1e-4]),
                        render_resume_wait_s=rng.choice([0.0, 3e-4]))
    return costs.scaled(rng.choice([0.25, 1.0, 3.0]))


@requires_build
@pytest.mark.parametrize("seed", range(24))
def test_the_api_server_gives_the_same_times_as_the_python_api_server(seed: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`ApiServer`'s calls as the simulator makes them (`take_request`, `reach_s` until the request is in,
    `stream_outputs` with and without first outputs, `release`), with and without the accepts of new connections,
    random: the same processes, tickets and floats from both."""
    rng = random.Random(seed)
    num_processes = 1 + seed % 3
    cores = rng.choice([None, 1, 2])
    host = HostCpu("x", 1.0, api_server_before_render_fraction=rng.choice([0.0, 0.49, 1.0]),
                   connection_accept_gap_s=rng.choice([0.0, 234.5e-6]), api_server_num_cores=cores,
                   client_shares_api_server_cores=rng.random() < 0.5,
                   api_server_refill_after_other_s=0.0 if cores is None else rng.choice([0.0, 1e-4]))
    python, compiled = _server_pair(monkeypatch, _random_costs(rng), num_processes=num_processes,
                                    endpoint=rng.choice(["completions", "chat"]), host=host,
                                    enable_prefix_caching=rng.random() < 0.7, by_connection=rng.random() < 0.6,
                                    accept_per_turn=rng.random() < 0.5)
    now = 0.0
    pending: list[tuple[int, int]] = []  # (process, ticket) not yet in
    for _ in range(400):
        op = rng.random()
        if op < 0.35:
            num_tokens = rng.choice([1, 16, 128, rng.randint(1, 4000)])
            taken = python.take_request(now, num_tokens)
            _same(taken, compiled.take_request(now, num_tokens))
            pending.append(taken[:2])
        elif op < 0.65 and pending:
            process, ticket = rng.choice(pending)
            reach = python.reach_s(now, process, ticket)
            _same(reach, compiled.reach_s(now, process, ticket))
            if reach <= now:
                pending.remove((process, ticket))
        elif op < 0.9:
            process, num = rng.randrange(num_processes), rng.randint(1, 200)
            if rng.random() < 0.5:
                seen = python.stream_outputs(now, process, num)
                _same(seen, compiled.stream_outputs(now, process, num_tokens=num))
            else:  # with first outputs (the chat endpoint's role chunks)
                first = rng.randint(0, num)
                seen = python.stream_outputs(now, process, num, first)
                _same(seen, compiled.stream_outputs(now, process, num_tokens=num, num_first=first))
            if rng.random() < 0.3:
                python.release(process, seen)
                compiled.release(process, seen)
        now += rng.expovariate(1.0 / rng.choice([1e-4, 1e-3, 1e-2, 1e-2, 1.0]))  # (1 s: connections idle past the keep-alive)


@requires_build
def test_a_process_ahead_defers_its_accepts_alike_in_c(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes taking a burst of new connections while process 1's loop streams a long output pass: process 0
    (ahead by the client's test connection) defers its accepts until process 1 has accepted (`_Threads._defer`). The
    compiled server gives the same floats; without the deferral (`ACCEPT_DEFER_CHECKS` 0) the Python times differ."""
    host = HostCpu("x", 1.0)

    def reaches(server: ApiServer) -> list[float]:
        server.stream_outputs(0.0, 1, 500)
        taken = [server.take_request(0.0, 16) for _ in range(6)]
        return [server.reach_s(1.0, process, ticket) for process, ticket, _ in taken]

    python, compiled = _server_pair(monkeypatch, ApiServerCosts(), num_processes=2, host=host, by_connection=True,
                                    accept_per_turn=True)
    deferred = reaches(python)
    _same(tuple(deferred), tuple(reaches(compiled)))
    monkeypatch.setattr(api_server, "COMPILED", False)
    monkeypatch.setattr(api_server, "ACCEPT_DEFER_CHECKS", 0)
    assert reaches(ApiServer(ApiServerCosts(), num_processes=2, host=host, by_connection=True,
                             accept_per_turn=True)) != deferred


@requires_build
def test_the_simulator_uses_the_compiled_api_server_unless_told_or_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Built and allowed, `ApiServer` runs the compiled threads; with `ROOFLINE_PURE_PYTHON` (`COMPILED` false), for
    a subclass, or with `_Threads` patched (the experiments of benchmarks/ground_truth/), the Python code."""
    costs = ApiServerCosts()
    server = ApiServer(costs)
    assert server.core is not None and server.reach_s == server.core.reach_s
    monkeypatch.setattr(api_server, "COMPILED", False)
    assert ApiServer(costs).core is None
    monkeypatch.setattr(api_server, "COMPILED", True)

    class Variant(ApiServer):
        pass

    assert Variant(costs).core is None
    monkeypatch.setattr(_Threads, "_alone", _Threads._alone)  # (the same function, but set on the class again:
    assert ApiServer(costs).core is not None                  # unchanged)

    def alone(self: Any, *args: Any) -> Any:
        return _Threads._alone(self, *args)

    monkeypatch.setattr(_Threads, "_alone", alone)
    assert ApiServer(costs).core is None


@requires_build
def test_the_output_queue_index_layout() -> None:
    """The C code's queue layout (per process OUTPUTS, LOOP, RENDERER, then the client's) and wait and accept marks
    are this module's."""
    assert (OUTPUTS, LOOP, RENDERER, WAIT, ACCEPT) == (0, 1, 2, api_server._apicore.WAIT, api_server._apicore.ACCEPT)


CPU_HOST = Path(__file__).resolve().parents[1] / "benchmarks/results/vllm-serve-bench/cpu-host-calibrated.yaml"


@requires_build
@pytest.mark.parametrize(("arrival", "num_processes", "endpoint", "max_concurrency", "refill_s", "accept"), [
    (ArrivalProcess("poisson", 20.0), 1, "completions", None, 0.0, False),
    (ArrivalProcess("poisson", 20.0), 2, "chat", None, 0.0, False),
    (ArrivalProcess("all_at_once"), 2, "completions", None, 0.0, False),
    (ArrivalProcess("poisson", 20.0), 2, "completions", 4, 0.0, False),
    (ArrivalProcess("all_at_once"), 2, "completions", None, 1e-4, False),
    (ArrivalProcess("poisson", 20.0), 2, "chat", None, 1e-4, False),
    (ArrivalProcess("all_at_once"), 1, "chat", None, 0.0, False),
    (ArrivalProcess("all_at_once"), 2, "chat", None, 0.0, False),
    (ArrivalProcess("all_at_once"), 1, "chat", None, 0.0, True),
    (ArrivalProcess("all_at_once"), 2, "completions", None, 1e-4, True),
    (ArrivalProcess("poisson", 20.0), 1, "completions", None, 0.0, True),
    (ArrivalProcess("poisson", 20.0), 2, "chat", 4, 0.0, True),
])
def test_a_simulation_behind_the_compiled_api_server_is_the_python_ones(
        arrival: ArrivalProcess, num_processes: int, endpoint: str, max_concurrency: int | None, refill_s: float,
        accept: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The served CPU host (its API server and client on one shared core, the hand-off's delay, the connections of
    two processes, the turns' refill, the chat endpoint's first outputs, new connections accepted one a turn), open
    and closed loops: every request's times the same with either implementation."""
    hw = load_profile(CPU_HOST)
    assert hw.host is not None
    hw = replace(hw, host=replace(hw.host, api_server_refill_after_other_s=refill_s,
                                  api_server_costs_s=(*hw.host.api_server_costs_s, ("chat_first_output", 3e-4))))
    deployment = make_deployment("llama-156m", hw, ENGINE)
    workload = Workload(name="w", seed=3, num_requests=60, arrival=arrival,
                        prompt_tokens=LengthDistribution("uniform", min_tokens=8, max_tokens=200),
                        output_tokens=LengthDistribution("uniform", min_tokens=1, max_tokens=24))
    options = SimulationOptions(api_server_count=num_processes, endpoint=endpoint, max_concurrency=max_concurrency,
                                api_server_accept_per_turn=accept)
    results = []
    for compiled in (True, False):
        monkeypatch.setattr(api_server, "COMPILED", compiled)
        results.append(run_simulation(deployment, workload, options).requests)
    for column in ("arrival_s", "first_scheduled_s", "ttft_s", "e2e_s", "tpot_s"):
        assert np.array_equal(results[0][column], results[1][column], equal_nan=True), column
