"""vLLM's API server as a stage of the simulation (roofline.sim.api_server): each process's event loop (input parts
first come first served, output passes first) and its renderer's one worker, the rest of a request's input path
re-queued at the render's await, the client's thread, shared cores, the connections' spacing, `--api-server-count`,
the chat endpoint, the host's speed, determinism."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import yaml
from api_costs import only
from profiles import gpu_profile_without_tokenizer

from roofline.cost.hardware import load_profile, parse_profile
from roofline.cost.host_cpu import HostCpu
from roofline.cost.profile_yaml import read_profile_dict
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.registry import resolve
from roofline.sim import api_server
from roofline.sim.api_server import (
    ACCEPT,
    LOOP,
    RENDERER,
    ApiServer,
    ApiServerCosts,
    Connections,
    _Threads,
    assigns_by_connection,
)
from roofline.sim.deployment import make_deployment
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.workload import ArrivalProcess, LengthDistribution, Workload

ENGINE = EngineArgs(max_num_seqs=64, max_num_batched_tokens=4096, max_model_len=512, num_gpu_blocks_override=400,
                    async_scheduling=False)
STEP_S = 0.01


# A host whose loop does all of a request's work after the render's await: with no tokenization (prompt_token_s 0)
# each request's input work is then one part on the loop, first come first served (the tests of the output passes'
# priority, the processes, the chat endpoint below).
ALL_AFTER = {"api_server_before_render_fraction": 0.0}


def _hw(speed: float = 1.0, **host):  # noqa: ANN003, ANN202 - a HardwareProfile with a host of the given speed
    return replace(gpu_profile_without_tokenizer("h100-sxm"), host=HostCpu("test host", speed, **host))


def _burst(n: int, prompt: int = 16, output: int = 1) -> Workload:
    return Workload(name="burst", seed=0, num_requests=n, arrival=ArrivalProcess("all_at_once"),
                    prompt_tokens=LengthDistribution("fixed", value=prompt),
                    output_tokens=LengthDistribution("fixed", value=output))


def _run(workload: Workload, costs: ApiServerCosts, speed: float = 1.0, host: dict | None = None,
         **options):  # noqa: ANN003, ANN202
    deployment = make_deployment("llama-156m", _hw(speed, **(ALL_AFTER if host is None else host)), ENGINE)
    return run_simulation(deployment, workload, SimulationOptions(api_server_costs=costs, **options),
                          step_time_fn=lambda replica, step, start, plan: STEP_S)


INPUT_ONLY = only(request_s=0.02)


def test_a_burst_queues_behind_one_process_and_ttft_grows_with_the_position() -> None:
    """Input work (20 ms) longer than a step (10 ms): request k reaches an idle engine at 20 (k + 1) ms and its token
    leaves with the end of its step: the output work (none here) does not wait for the input work still queued."""
    result = _run(_burst(5), INPUT_ONLY)
    assert np.allclose(result.requests.first_scheduled_s, [0.02 * (k + 1) for k in range(5)], rtol=0, atol=1e-12)
    assert np.allclose(result.requests.ttft_s, [0.02 * (k + 1) + STEP_S for k in range(5)], rtol=0, atol=1e-12)
    assert np.allclose(result.requests.arrival_s, 0.0)
    # Spread out (one request every 50 ms), each request's TTFT is its own input work and step.
    spread = replace(_burst(5), arrival=ArrivalProcess("constant", 20.0))
    assert np.allclose(_run(spread, INPUT_ONLY).requests.ttft_s, 0.02 + STEP_S, rtol=0, atol=1e-12)


def test_the_rest_of_each_request_queues_behind_the_first_parts_of_the_burst() -> None:
    """vLLM's input path gives the loop up at the render (the renderer's one worker, `make_async`): with 49 % of the
    20-ms input work before it and every connection read as its bytes arrive (`api_server_accept_per_turn` False),
    the burst's 5 first parts run first (5 x 9.8 ms), each rest (10.2 ms) after them: request k reaches the engine at
    49 + 10.2 (k + 1) ms. Alone, each takes its 20 ms."""
    result = _run(_burst(5), INPUT_ONLY, host={}, api_server_accept_per_turn=False)
    reach = [5 * 0.0098 + 0.0102 * (k + 1) for k in range(5)]
    assert np.allclose(result.requests.first_scheduled_s, reach, rtol=0, atol=1e-12)
    spread = replace(_burst(5), arrival=ArrivalProcess("constant", 20.0))
    assert np.allclose(_run(spread, INPUT_ONLY, host={}, api_server_accept_per_turn=False).requests.ttft_s,
                       0.02 + STEP_S, rtol=0, atol=1e-12)


def test_a_burst_of_new_connections_is_taken_one_request_a_turn_of_the_loop() -> None:
    """One connection accepted a turn (`SimulationOptions.api_server_accept_per_turn`): request 0 goes out on the
    client's kept-alive test connection, requests 1-4 each open one. The loop takes request 1's first part (9.8 ms)
    beside request 0's; each later one is accepted when the one before it has been read (its first part ended) and
    queues behind the work ready then: 0 first, 1 first, 0 rest, 2 first, 1 rest, 3 first, ... Request k < 4 reaches
    the engine at 9.8 + 20 (k + 1) ms (all first parts first: 49 + 10.2 (k + 1) ms, above); the last at 100 ms
    either way (the same work on one loop)."""
    result = _run(_burst(5), INPUT_ONLY, host={}, api_server_accept_per_turn=True)
    reach = [0.0098 + 0.02 * (k + 1) for k in range(4)] + [0.1]
    assert np.allclose(result.requests.first_scheduled_s, reach, rtol=0, atol=1e-12)


def test_the_loop_accepts_the_next_connection_once_it_has_read_the_last_one() -> None:
    """`_Threads`' ACCEPT parts, one process, 1-s parts: four requests at 0 s on new connections, each a first loop
    part, a render, a last loop part. Accepted: 0 at once; 1 when 0's first part ends (1 s), queued behind what is
    ready then; 2 when 1's ends (2 s), behind 0's rest (ready at 2 s); 3 at 3 s behind 0's rest, before 1's. The
    loop: 0 first, 1 first, 2 first, 0 rest, 3 first, 1 rest, 2 rest, 3 rest: ends 4, 6, 7, 8 s. Without the accepts
    (all first parts queued at once): 5, 6, 7, 8 s."""
    ends = {}
    for accept in (True, False):
        threads = _Threads(1, None, False)
        for ticket in range(4):
            chain = [(LOOP, 1.0), (RENDERER, 1.0), (LOOP, 1.0)]
            threads.arrive(0.0, ticket, [(ACCEPT, 0.0), *chain] if accept else chain)
        threads.advance(20.0)
        ends[accept] = [threads.finished_s[ticket] for ticket in range(4)]
    assert ends == {True: [4.0, 6.0, 7.0, 8.0], False: [5.0, 6.0, 7.0, 8.0]}


def test_only_a_new_connections_request_waits_for_the_accept(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ApiServer` with `accept_per_turn` (the Python threads): the client's part in two (its start, its send), and a
    request opening a connection gets an ACCEPT part after them; none for the client's kept-alive test connection, nor
    for a connection idle since a release; without `accept_per_turn`, none, the client's part whole (and with one
    process no connections are tracked)."""
    monkeypatch.setattr(api_server, "COMPILED", False)
    host = HostCpu("x", 1.0, api_server_num_cores=1, client_shares_api_server_cores=True)
    costs = replace(INPUT_ONLY, client_request_s=1e-4)
    server = ApiServer(costs, host=host, by_connection=True, accept_per_turn=True)
    chains = []
    for now in (0.0, 0.0, 0.0, 2.0):  # (the last on the connection idle since 1 s)
        if now == 2.0:
            server.release(0, 1.0)
        ticket = server.take_request(now, 16)[1]
        chains.append([queue for queue, _ in server.threads.chains[ticket]])
    client = server.threads.client
    kept, new = [client, client, LOOP, RENDERER, LOOP], [client, client, ACCEPT, LOOP, RENDERER, LOOP]
    assert chains == [kept, new, new, kept]
    plain = ApiServer(costs, host=host, by_connection=True)
    plain.take_request(0.0, 16)
    plain.take_request(0.0, 16)
    assert plain.connections is None
    assert [[queue for queue, _ in chain] for chain in plain.threads.chains.values()] == [[client, LOOP, RENDERER, LOOP]] * 2


def test_with_the_accepts_a_bursts_client_starts_every_request_before_it_sends_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`accept_per_turn`: the client's thread runs each request's start (`CLIENT_START_FRACTION` of
    `client_request_s`) and queues its send behind the starts queued by then, and the connections get no spacing of
    their own (`connection_accept_gap_us`): 3 requests at 0 s with 1 ms of client work each (0.71 + 0.29 ms), the
    client alone on its core (the loop's work 0): sends end at 3 x 0.71 + 0.29, + 0.29, + 0.29 ms. Without:
    requests 1 ms apart (the gap), each its whole 1 ms: 1, 2, 3 ms."""
    monkeypatch.setattr(api_server, "COMPILED", False)
    host = HostCpu("x", 1.0, api_server_before_render_fraction=0.0, connection_accept_gap_s=1e-3,
                   api_server_num_cores=2, client_shares_api_server_cores=True)
    costs = replace(only(request_s=0.0), client_request_s=1e-3)
    ends = {}
    for accept in (True, False):
        server = ApiServer(costs, host=host, by_connection=True, accept_per_turn=accept)
        sends = []
        for _ in range(3):
            sends.append(server.take_request(0.0, 0)[1])
        server.threads.advance(1.0)
        ends[accept] = [server.threads.finished_s[ticket] for ticket in sends]
    start = api_server.CLIENT_START_FRACTION * 1e-3
    assert ends[True] == pytest.approx([3 * start + k * (1e-3 - start) for k in (1, 2, 3)], abs=1e-12)
    assert ends[False] == pytest.approx([1e-3, 2e-3, 3e-3], abs=1e-12)


def _two_process_burst(first_s: float, kept_alive_at_s: float | None) -> dict[int, float]:
    """`_Threads` of two processes with the client's test connection on process 0 (loads 1, 0, as `ApiServer` starts
    them), a burst at 0 s on new connections as `Connections` gives them out: 1 and 3 to process 1 (their loop parts
    `first_s` and 3 ms), 2 and 4 to process 0 (0.5 ms each); maybe a request on process 0's kept-alive connection
    (no accept, 1 ms) at `kept_alive_at_s`. Returns when each request's input ends."""
    threads = _Threads(2, None, False)
    threads.accepts.loads[0] = 1
    loop0, loop1 = LOOP, 3 + LOOP
    for ticket, chain in ((1, [(loop1, first_s)]), (2, [(loop0, 0.5e-3)]), (3, [(loop1, 3e-3)]),
                          (4, [(loop0, 0.5e-3)])):
        threads.arrive(0.0, ticket, [(ACCEPT, 0.0), *chain])
    if kept_alive_at_s is not None:
        threads.arrive(kept_alive_at_s, 5, [(loop0, 1e-3)])
    threads.advance(1.0)
    return threads.finished_s


def test_a_process_ahead_defers_its_accept_until_the_other_has_accepted() -> None:
    """vLLM's least-loaded accept (`NoSignalServer._accept`, `_Threads._defer`). At 0 s process 1 (load 0) accepts 1
    and process 0 (load 1, not more than 1) accepts 2: loads 2, 1. Request 2 read at 0.5 ms, process 0 is ahead:
    it defers 4 and checks again 1 ms later (1.5 ms), behind the work its loop has ready then: request 5 (kept
    alive, 1.2-2.2 ms), so at 2.2 ms, still ahead; again at 3.2 ms. Process 1 has read 1 at 3 ms and accepted 3
    (loads 2, 2): the check at 3.2 ms accepts 4, read 3.2-3.7 ms. Without request 5: checks at 1.5, 2.5, 3.5 ms; 4 is
    read 3.5-4.0 ms."""
    ends = _two_process_burst(3e-3, 1.2e-3)
    assert [ends[ticket] for ticket in (1, 2, 3, 4, 5)] == pytest.approx([3e-3, 0.5e-3, 6e-3, 3.7e-3, 2.2e-3],
                                                                         abs=1e-12)
    ends = _two_process_burst(3e-3, None)
    assert [ends[ticket] for ticket in (1, 2, 3, 4)] == pytest.approx([3e-3, 0.5e-3, 6e-3, 4e-3], abs=1e-12)


def test_a_deferred_accept_goes_ahead_after_five_checks() -> None:
    """Process 1 busy reading request 1 for 10 ms: process 0 checks at 0.5 ms and after each of its sleeps, 1.5 to
    4.5 ms, ahead at all five (`ACCEPT_DEFER_CHECKS`), and accepts 4 after the fifth sleep, at 5.5 ms (read by 6 ms),
    while still the more loaded."""
    ends = _two_process_burst(10e-3, None)
    assert [ends[ticket] for ticket in (1, 2, 3, 4)] == pytest.approx([10e-3, 0.5e-3, 13e-3, 6e-3], abs=1e-12)


def test_the_loads_count_the_test_connection_and_the_closed_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ApiServer` with two processes and the accepts: process 0's load starts at 1 (the client's test connection);
    each accept adds one; the connections the server closed after their keep-alive (`Connections.closed`) are taken
    off when the next request is sent."""
    monkeypatch.setattr(api_server, "COMPILED", False)
    server = ApiServer(INPUT_ONLY, num_processes=2, host=HostCpu("x", 1.0), by_connection=True, accept_per_turn=True)
    loads = server.threads.accepts.loads
    assert loads == [1, 0]
    for _ in range(3):  # the test connection's, then new ones on processes 1 and 0
        process, ticket, _ = server.take_request(0.0, 16)
        server.reach_s(1.0, process, ticket)
        server.release(process, 1.0)
    assert loads == [2, 1]
    assert server.take_request(10.0, 16)[0] == 0  # all three closed; a new one on process 0, accepted at once
    server.threads.advance(10.0)
    assert loads == [1, 0] and server.connections is not None and server.connections.closed == []


def test_connections_say_which_request_opened_one() -> None:
    connections = Connections(1)
    opened = []
    for now in (0.0, 0.0, 0.0):
        connections.take(now)
        opened.append(connections.opened)
    connections.release(0, 1.0)
    connections.take(2.0)
    opened.append(connections.opened)
    assert opened == [False, True, True, False]


def _reach(server: ApiServer, now_s: float, num_prompt_tokens: int) -> float:
    """A request taken at `now_s`: when it reaches the engine core as far as known then."""
    process, ticket, _ = server.take_request(now_s, num_prompt_tokens)
    return server.reach_s(now_s, process, ticket)


def test_the_renderer_thread_tokenizes_beside_the_loop() -> None:
    """ApiServer alone, a core per thread: the tokenizer's 10 ms per request (1,000 tokens x 10 us) on the renderer
    thread, FIFO, the loop's 2 ms (1 before the render, 1 after) beside it: request 0 in at 1 + 10 + 1 = 12 ms,
    request 1's render waits for request 0's (to 21 ms), in at 22; on one shared core the two threads run at half
    speed while both have work."""
    costs = replace(INPUT_ONLY, request_s=0.002, prompt_token_s=1e-5)
    own = ApiServer(costs, host=HostCpu("x", 1.0, api_server_before_render_fraction=0.5))
    assert _reach(own, 0.0, 1000) == pytest.approx(0.012)
    assert _reach(own, 0.0, 1000) == pytest.approx(0.022)
    # One core: request 0's first part 0-1 ms; request 1's first part beside its render, both at half speed, 1-3;
    # the render alone to 12, its rest beside request 1's render to 14; request 1's render alone to 23, its rest 24.
    shared = ApiServer(costs, host=HostCpu("x", 1.0, api_server_before_render_fraction=0.5, api_server_num_cores=1))
    assert _reach(shared, 0.0, 1000) == pytest.approx(0.012)  # alone so far
    assert _reach(shared, 0.0, 1000) == pytest.approx(0.024)
    assert shared.reach_s(0.012, 0, 0) == pytest.approx(0.014)  # delayed by request 1, which came later
    assert shared.reach_s(0.014, 0, 0) == pytest.approx(0.014)


def test_the_client_thread_and_the_connections_spacing_delay_the_intake() -> None:
    """A client on the API server's cores (`client_shares_api_server_cores`) sends each request with its own CPU
    (client_request_s, 3 ms here) first, FIFO; the connections reach the server one per 5 ms at the most."""
    costs = replace(INPUT_ONLY, request_s=0.002, client_request_s=0.003)
    apart = ApiServer(costs, host=HostCpu("x", 1.0))  # the client elsewhere (a GPU host): not the server's work
    assert [_reach(apart, 0.0, 0) for _ in range(2)] == [pytest.approx(0.002), pytest.approx(0.004)]
    gap = ApiServer(costs, host=HostCpu("x", 1.0, connection_accept_gap_s=0.005))
    assert [_reach(gap, 0.0, 0) for _ in range(2)] == [pytest.approx(0.002), pytest.approx(0.007)]
    # Client and loop on two cores (1 ms before the render, 1 after): request 0 sent 0-3 ms, in 3-5; request 1
    # sent 3-6 (its send beside request 0's loop work), in 6-8.
    shares = HostCpu("x", 1.0, api_server_before_render_fraction=0.5, api_server_num_cores=2,
                     client_shares_api_server_cores=True)
    both = ApiServer(costs, host=shares)
    assert [_reach(both, 0.0, 0) for _ in range(2)] == [pytest.approx(0.005), pytest.approx(0.008)]


def test_a_pass_pays_the_refill_for_its_turns_after_another_process() -> None:
    """Two processes on one core, the client on it (its reads take a turn per chunk), 1 ms a token, a refill of
    0.1 ms a turn after the other process's: a pass of 3 tokens has 4 turns (its wake-up and a chunk each). Alone
    (the other process idle) it takes its 3 ms; beside the other process's pass of 3 tokens both share the core and
    half of each one's turns follow the other's: 4 x 0.1 / 2 = 0.2 ms more each, both end at 6.4 ms. One process or no
    refill: no term."""
    costs = replace(INPUT_ONLY, output_token_s=0.001)
    turns = HostCpu("x", 1.0, api_server_num_cores=1, client_shares_api_server_cores=True,
                    api_server_refill_after_other_s=1e-4)
    alone = ApiServer(costs, num_processes=2, host=turns)
    assert alone.stream_outputs(1.0, 0, num_tokens=3) == pytest.approx(1.003)
    both = ApiServer(costs, num_processes=2, host=turns)
    both.stream_outputs(1.0, 0, num_tokens=3)
    assert both.stream_outputs(1.0, 1, num_tokens=3) == pytest.approx(1.0064)
    for host, num_processes in ((turns, 1), (replace(turns, api_server_refill_after_other_s=0.0), 2)):
        server = ApiServer(costs, num_processes=num_processes, host=host)
        server.stream_outputs(1.0, 0, num_tokens=3)
        assert server.stream_outputs(1.0, num_processes - 1, num_tokens=3) == pytest.approx(1.006)


def test_the_clients_chunk_work_lengthens_the_output_pass_only_where_it_shares_the_cores() -> None:
    """The client's CPU after a send, per streamed chunk (client_output_token_s, 1 ms here), runs on the API server's
    cores where the client does (`client_shares_api_server_cores`): a pass of 3 tokens takes 3 x (1 + 1) ms there;
    with the client elsewhere (a GPU host's default) the pass is the server's own 3 ms, as without the cost."""
    costs = replace(INPUT_ONLY, output_token_s=0.001, client_output_token_s=0.001)
    shares = HostCpu("x", 1.0, api_server_num_cores=1, client_shares_api_server_cores=True)
    assert ApiServer(costs, host=shares).stream_outputs(1.0, 0, num_tokens=3) == pytest.approx(1.006)
    for server in (ApiServer(costs, host=HostCpu("x", 1.0)), ApiServer(costs),
                   ApiServer(replace(costs, client_output_token_s=0.0), host=HostCpu("x", 1.0))):
        assert server.stream_outputs(1.0, 0, num_tokens=3) == pytest.approx(1.003)
    # The before-send part spaces the intake, the chunk part does not: two requests in a burst reach the engine at
    # the same times whatever the chunk cost.
    one = HostCpu("x", 1.0, api_server_before_render_fraction=0.0, api_server_num_cores=1,
                  client_shares_api_server_cores=True)
    for chunk_s in (0.0, 0.005):
        server = ApiServer(replace(INPUT_ONLY, request_s=0.002, client_request_s=0.001,
                                   client_output_token_s=chunk_s), host=one)
        assert [_reach(server, 0.0, 0) for _ in range(2)] == [pytest.approx(0.003), pytest.approx(0.006)]


def test_output_work_runs_first_and_delays_the_input_work_pending() -> None:
    """A step's output pass (5 ms) runs as soon as the step ends, before the input work queued, which it delays:
    request 0 in at 20 ms, its step to 30, streamed 30-35 ms; request 1's input (due at 40) ends at 45, its step to
    55, streamed 55-60; request 2's input (due at 60) is delayed by both passes to 70, its step to 80, seen at 85."""
    result = _run(_burst(3), replace(INPUT_ONLY, output_pass_s=0.005))
    assert np.allclose(result.requests.first_scheduled_s, [0.02, 0.045, 0.07], rtol=0, atol=1e-12)
    assert np.allclose(result.requests.ttft_s, [0.035, 0.06, 0.085], rtol=0, atol=1e-12)


def test_two_processes_take_a_burst_in_parallel() -> None:
    """--api-server-count 2: requests alternate between two processes, so pairs reach the engine together: 0 and 1
    at 20 ms (one step, their tokens out at 30 ms), 2 and 3 at 40 ms."""
    result = _run(_burst(4), INPUT_ONLY, api_server_count=2)
    assert np.allclose(result.requests.first_scheduled_s, [0.02, 0.02, 0.04, 0.04], rtol=0, atol=1e-12)
    assert np.allclose(result.requests.ttft_s, [0.03, 0.03, 0.05, 0.05], rtol=0, atol=1e-12)


def test_the_host_speed_divides_the_api_server_costs() -> None:
    fast = _run(_burst(5), INPUT_ONLY, speed=2.0)
    assert np.allclose(fast.requests.first_scheduled_s, [0.01 * (k + 1) for k in range(5)], rtol=0, atol=1e-12)
    assert np.allclose(fast.requests.ttft_s, [0.01 * (k + 1) + STEP_S for k in range(5)], rtol=0, atol=1e-12)


def test_the_chat_endpoint_adds_its_own_input_and_output_work() -> None:
    costs = replace(INPUT_ONLY, chat_request_s=0.005, output_pass_s=0.001, output_token_s=0.002,
                    chat_output_token_s=0.003)
    one = _burst(1, output=3)
    completions = _run(one, costs)
    chat = _run(one, costs, endpoint="chat")
    # Completions: reaches at 20 ms; each step's one token is seen 1 + 2 ms after the step: TTFT 20 + 10 + 3 ms.
    assert completions.requests.ttft_s[0] == pytest.approx(0.033, abs=1e-12)
    assert chat.requests.ttft_s[0] == pytest.approx(0.025 + STEP_S + 0.006, abs=1e-12)
    # Decode steps follow back to back; each token is seen the same output work after its step.
    assert completions.requests.tpot_s[0] == pytest.approx(STEP_S, abs=1e-12)
    assert chat.requests.tpot_s[0] == pytest.approx(STEP_S, abs=1e-12)


def test_output_work_longer_than_a_step_stretches_the_clients_tpot() -> None:
    """The process streams a step's 8 tokens in 0.5 + 8 x 2 = 16.5 ms, longer than the 10-ms step: the client sees
    tokens every 16.5 ms, not every step (the engine does not wait for the API server). Request 0 reaches the engine
    alone and runs a step ahead of the other 7, whose last step carries 7 tokens (14.5 ms)."""
    costs = replace(INPUT_ONLY, request_s=1e-4, output_pass_s=5e-4, output_token_s=2e-3)
    result = _run(_burst(8, output=20), costs)
    assert result.steps.duration_s.max() == STEP_S  # the engine runs at its own pace
    assert np.allclose(result.requests.tpot_s[1:], (18 * 0.0165 + 0.0145) / 19, rtol=1e-9, atol=0)


def test_input_work_waits_for_output_work_and_is_delayed_by_later_output_work() -> None:
    """ApiServer alone, exact times: a request taken while an output pass runs (to 6 ms) starts after it (done at
    26 ms); a pass taken at 10 ms runs at once (to 12 ms) and delays the pending request by its 2 ms."""
    server = ApiServer(replace(INPUT_ONLY, output_pass_s=0.001, output_token_s=0.0005), num_processes=1,
                       host=HostCpu("x", 1.0, **ALL_AFTER))
    assert server.stream_outputs(0.0, 0, num_tokens=10) == pytest.approx(0.006)
    assert server.take_request(0.002, num_prompt_tokens=5) == (0, 0, pytest.approx(0.022))  # its own work
    assert server.reach_s(0.002, 0, 0) == pytest.approx(0.026)  # after the pass under way
    assert server.stream_outputs(0.010, 0, num_tokens=2) == pytest.approx(0.012)
    assert server.reach_s(0.026, 0, 0) == pytest.approx(0.028)
    assert server.reach_s(0.028, 0, 0) == pytest.approx(0.028)  # done: no later pass delays it
    assert server.stream_outputs(0.030, 0, num_tokens=0) == pytest.approx(0.031)


@pytest.mark.parametrize("cores", [None, 1])
def test_the_output_pass_starts_after_the_hand_off_and_the_input_work_runs_meanwhile(cores: int | None) -> None:
    """ApiServer alone, exact times, a core per thread or one shared core: a step ends at 0; its outputs reach the
    output handler 3 ms later (output_latency_s), where their 2-ms pass starts, preempting the input work then under
    way: a request taken at 2.5 ms (4 ms of input work) runs 2.5-3, waits for the pass (3-5; the client sees the
    tokens at 5 ms, as when the pass ran first and the hand-off came after it) and ends at 8.5 ms (it ended at 6.5 ms
    with the pass at 0-2). A pass taken while no request is under way and a request arriving before it reaches
    the loop: the request runs first (1-3), then the pass (3-5), then the rest (5-7)."""
    host = HostCpu("x", 1.0, api_server_num_cores=cores, **ALL_AFTER)
    costs = replace(INPUT_ONLY, request_s=0.004, output_pass_s=0.002, output_latency_s=0.003)
    server = ApiServer(costs, host=host)
    assert server.stream_outputs(0.0, 0, num_tokens=4) == pytest.approx(0.005)
    assert _reach(server, 0.0025, 0) == pytest.approx(0.0085)
    server = ApiServer(costs, host=host)
    assert server.stream_outputs(0.0, 0, num_tokens=4) == pytest.approx(0.005)
    assert _reach(server, 0.001, 0) == pytest.approx(0.007)


@pytest.mark.parametrize("cores", [None, 1])
def test_the_intake_waits_for_wake_ups_only_where_the_thread_sleeps(cores: int | None) -> None:
    """The intake's wake-ups occupy no thread and apply only where the thread taking the next part is idle: a request
    alone (2 ms on the loop before the render, 1 ms of render, 2 ms after; the loop's wake-up on the read 1 ms, the
    worker's 0.2 ms, the loop's after the render 0.3 ms) reaches the engine core at 1 + 2 + 0.2 + 1 + 0.3 + 2 =
    6.5 ms (5 ms without them). They make its intake longer, so more output work meets it: an output pass (1.5 ms)
    reaching the loop at 6 ms preempts its rest (4.5-6.5 ms): it ends at 8 ms. A pass reaching the loop at 4.4 ms,
    while the loop was asleep waiting for the render, keeps it busy at the render's end (4.2): no wake-up, the rest
    runs after the pass (5.9-7.9 ms). Two requests at once: they share the loop's one wake-up on the read, and their
    renders' wake-ups find the worker or the loop busy with the other request: each reaches the engine core 1 ms later
    than without the wake-ups, not 1.5."""
    host = HostCpu("x", 1.0, api_server_num_cores=cores, api_server_before_render_fraction=0.5)
    costs = replace(INPUT_ONLY, request_s=0.004, render_request_s=0.001, read_wait_s=0.001, render_start_wait_s=0.0002,
                    render_resume_wait_s=0.0003, output_pass_s=0.0015)
    asleep = replace(costs, read_wait_s=0.0, render_start_wait_s=0.0, render_resume_wait_s=0.0)
    assert _reach(ApiServer(asleep, host=host), 0.0, 0) == pytest.approx(0.005)
    assert _reach(ApiServer(costs, host=host), 0.0, 0) == pytest.approx(0.0065)
    for pass_s, reach_s in ((0.006, 0.008), (0.0044, 0.0079)):
        server = ApiServer(costs, host=host)
        process, ticket, _ = server.take_request(0.0, 0)
        server.stream_outputs(pass_s, process, num_tokens=0)
        assert server.reach_s(pass_s, process, ticket) == pytest.approx(reach_s)
    reach = []
    for variant in (asleep, costs):
        server = ApiServer(replace(variant, output_pass_s=0.0), host=host)
        first, second = server.take_request(0.0, 0), server.take_request(0.0, 0)
        reach.append(np.array([server.reach_s(0.0, first[0], first[1]), server.reach_s(0.0, second[0], second[1])]))
    assert reach[1] - reach[0] == pytest.approx([0.001, 0.001])


def test_closed_loop_sends_the_next_request_when_the_client_saw_the_last_token() -> None:
    costs = replace(INPUT_ONLY, request_s=1e-3, output_pass_s=1e-3, output_token_s=1e-3)
    result = _run(_burst(3, output=2), costs, max_concurrency=1)
    finish = result.requests.finish_s.to_numpy()
    assert np.allclose(result.requests.arrival_s.to_numpy()[1:], finish[:-1], rtol=0, atol=1e-12)
    # Request 0: in at 1 ms, prefill step ends at 11 ms, seen at 13; decode ends at 21, seen at 23.
    assert finish[0] == pytest.approx(0.023, abs=1e-12)


@pytest.mark.parametrize("options", [{}, {"api_server_count": 3, "endpoint": "chat"}, {"max_concurrency": 7}])
def test_runs_are_deterministic(options: dict) -> None:
    workload = Workload(name="mixed", seed=4, num_requests=60, arrival=ArrivalProcess("poisson", 500.0),
                        prompt_tokens=LengthDistribution("uniform", min_tokens=10, max_tokens=200),
                        output_tokens=LengthDistribution("uniform", min_tokens=1, max_tokens=40))
    deployment = make_deployment("llama-156m", load_profile("h100-sxm"), ENGINE)
    first = run_simulation(deployment, workload, SimulationOptions(**options))
    second = run_simulation(deployment, workload, SimulationOptions(**options))
    assert first.requests.to_csv() == second.requests.to_csv()
    assert np.array_equal(first.itl.gap_s, second.itl.gap_s)


def test_more_processes_spread_a_burst_on_the_shipped_profile() -> None:
    """On H100's profile (host 2x the reference): a 200-request burst's median TTFT falls with a second process, and
    a request's TTFT grows with its position behind one."""
    deployment = make_deployment("llama-156m", load_profile("h100-sxm"), ENGINE)
    one = run_simulation(deployment, _burst(200, prompt=128, output=8))
    two = run_simulation(deployment, _burst(200, prompt=128, output=8), SimulationOptions(api_server_count=2))
    assert two.requests.ttft_s.median() < one.requests.ttft_s.median()
    slope = np.polyfit(np.arange(200), one.requests.ttft_s.to_numpy(), 1)[0]
    input_s = ApiServerCosts.for_host(deployment.hw.host).request_s  # at least the input work per position
    assert slope > input_s


def test_bad_api_server_options_are_refused() -> None:
    with pytest.raises(UserError, match=r"^--api-server-count: must be a positive integer, got 0$"):
        SimulationOptions(api_server_count=0)
    with pytest.raises(UserError, match=r"^--endpoint: 'embeddings' is not allowed; allowed: completions, chat$"):
        SimulationOptions(endpoint="embeddings")
    bare = make_deployment("llama-156m", gpu_profile_without_tokenizer("h100-sxm"), ENGINE)
    with pytest.raises(UserError, match=r"^--api-server-count: hardware profile 'h100-sxm' has no host: section"):
        run_simulation(bare, _burst(2), SimulationOptions(api_server_count=2))


def test_host_section_is_validated() -> None:
    data = read_profile_dict(resolve("hardware", "h100-sxm"))
    host = {"cpu_model": "x", "single_thread_speed_relative": 0}
    with pytest.raises(UserError, match=r"host\.single_thread_speed_relative: must be a number in \[0\.05, 20\]"):
        parse_profile({**data, "host": host}, "p.yaml")
    with pytest.raises(UserError, match=r"host: unknown field 'speed'"):
        parse_profile({**data, "host": {"cpu_model": "x", "speed": 1}}, "p.yaml")
    with pytest.raises(UserError, match=r"host: missing field 'single_thread_speed_relative'"):
        parse_profile({**data, "host": {"cpu_model": "x"}}, "p.yaml")
    both = {**data, "executor": {"frontend_us_per_request": 4640}}
    with pytest.raises(UserError, match=r"host: the API server it describes replaces"):
        parse_profile(both, "p.yaml")


def test_costs_measured_on_the_host_replace_the_scaled_reference_ones() -> None:
    """host.api_server_costs_s: seconds measured on that host, used as they are; the costs it does not state are
    the reference ones divided by the host's speed."""
    host = HostCpu.from_dict({"cpu_model": "x", "single_thread_speed_relative": 2.0,
                              "api_server_costs_s": {"request": 0.02, "output_pass": 0.002},
                              "api_server_before_render_fraction": 0.0}, "p.yaml: host")
    costs = ApiServerCosts.for_host(host)
    reference = ApiServerCosts()
    assert costs.request_s == 0.02 and costs.output_pass_s == 0.002
    assert costs.output_token_s == reference.output_token_s / 2 and costs.latency_s == reference.latency_s / 2
    assert host.to_dict()["api_server_costs_s"] == {"request": 0.02, "output_pass": 0.002}
    # In a run: the measured input work (20 ms, longer than a step) per position of a burst; costs given to the run
    # override the host's.
    deployment = make_deployment("llama-156m", replace(gpu_profile_without_tokenizer("h100-sxm"), host=host), ENGINE)
    step = lambda replica, s, start, plan: STEP_S  # noqa: E731
    measured = run_simulation(deployment, _burst(3), SimulationOptions(), step_time_fn=step)
    render = 16 * reference.prompt_token_s / 2  # request 0's tokenization, on the renderer thread, before its loop work
    latency = reference.latency_s / 2  # not measured on the host: the reference's at its speed
    latency += 16 * reference.block_hash_token_s / 2  # the engine core's input thread hashes its blocks
    # Each step's output pass (its one token) delays the input work still pending: request 1 by one, 2 by two.
    output = 0.002 + reference.output_token_s / 2
    assert np.allclose(measured.requests.first_scheduled_s,
                       [render + 0.02 * (k + 1) + k * output + latency for k in range(3)], rtol=0, atol=1e-12)
    given = run_simulation(deployment, _burst(3), SimulationOptions(api_server_costs=INPUT_ONLY), step_time_fn=step)
    assert np.allclose(given.requests.first_scheduled_s, [0.01 * (k + 1) for k in range(3)], rtol=0, atol=1e-12)
    # A sampled cost model's factors (--intervals) multiply given costs too: request x 1.5 -> 15 ms per position.
    sampled = make_deployment("llama-156m", replace(gpu_profile_without_tokenizer("h100-sxm"), host=replace(
        host, cost_factors=(("request", 1.5), ("output_pass", 3.0)))), ENGINE)
    given = run_simulation(sampled, _burst(3), SimulationOptions(api_server_costs=INPUT_ONLY), step_time_fn=step)
    assert np.allclose(given.requests.first_scheduled_s, [0.015 * (k + 1) for k in range(3)], rtol=0, atol=1e-12)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("api_server_before_render_fraction", 1.5, r"host\.api_server_before_render_fraction: must be a number in \[0, 1\]"),
    ("connection_accept_gap_us", -1, r"host\.connection_accept_gap_us: must be microseconds in \[0, 1000000\], got -1$"),
    ("api_server_num_cores", 0, r"host\.api_server_num_cores: must be a positive integer .*, got 0$"),
    ("api_server_num_cores", 1.5, r"host\.api_server_num_cores: must be a positive integer .*, got 1\.5$"),
    ("client_shares_api_server_cores", "yes", r"host\.client_shares_api_server_cores: must be true or false, got 'yes'$"),
    ("api_server_refill_after_other_us", -1, r"host\.api_server_refill_after_other_us: must be microseconds in \[0, "
                                             r"100000\], got -1$"),
    ("api_server_refill_after_other_us", 100, r"host\.api_server_refill_after_other_us: needs api_server_num_cores"),
])
def test_the_api_server_layout_is_validated(field: str, value: object, message: str) -> None:
    data = read_profile_dict(resolve("hardware", "h100-sxm"))
    host = {"cpu_model": "x", "single_thread_speed_relative": 1, field: value}
    with pytest.raises(UserError, match=message):
        parse_profile({**data, "host": host}, "p.yaml")


def test_the_api_server_layout_is_read_with_its_defaults() -> None:
    """A GPU family's host states none of it: the loop's split as measured on the reference host (0.49), no spacing,
    a core per thread, the client apart; a pinned CPU host states its own, and they round-trip."""
    family = load_profile("h100-sxm").host
    assert family is not None
    assert (family.api_server_before_render_fraction, family.connection_accept_gap_s, family.api_server_num_cores,
            family.client_shares_api_server_cores) == (0.49, 0.0, None, False)
    assert family.api_server_refill_after_other_s == 0.0
    pinned = {"cpu_model": "x", "single_thread_speed_relative": 1.0, "api_server_before_render_fraction": 0.4,
              "connection_accept_gap_us": 234.5, "api_server_num_cores": 1, "client_shares_api_server_cores": True,
              "api_server_refill_after_other_us": 100.0}
    host = HostCpu.from_dict(pinned, "p.yaml: host")
    assert host.connection_accept_gap_s == pytest.approx(234.5e-6) and host.api_server_num_cores == 1
    assert host.api_server_refill_after_other_s == pytest.approx(100e-6)
    assert host.to_dict() == pinned
    with pytest.raises(UserError, match=r"client_shares_api_server_cores: true needs api_server_num_cores"):
        HostCpu.from_dict({**pinned, "api_server_num_cores": None}, "p.yaml: host")


@pytest.mark.parametrize(("costs", "message"), [
    ({"request_s": 0.001}, r"host\.api_server_costs_s\.request_s: not an API-server cost; allowed: request, "),
    ({"request": -0.001}, r"host\.api_server_costs_s\.request: must be seconds in \[0, 1\], got -0\.001"),
    ({"request": "1ms"}, r"host\.api_server_costs_s\.request: must be seconds in \[0, 1\], got '1ms'"),
    ({"client_output_token": 2}, r"host\.api_server_costs_s\.client_output_token: must be seconds in \[0, 1\], got 2$"),
    ({"client_chunk": 1e-5}, r"host\.api_server_costs_s\.client_chunk: not an API-server cost; allowed: .*, "
                             r"client_request, client_output_token, render_request, read_wait, render_start_wait, "
                             r"render_resume_wait, busy_engine_hop$"),
    ([0.001], r"host\.api_server_costs_s: must be a mapping of request, chat_request, "),
])
def test_measured_host_costs_are_validated(costs: object, message: str) -> None:
    data = read_profile_dict(resolve("hardware", "h100-sxm"))
    host = {"cpu_model": "x", "single_thread_speed_relative": 1, "api_server_costs_s": costs}
    with pytest.raises(UserError, match=message):
        parse_profile({**data, "host": host}, "p.yaml")


def test_the_served_engine_core_adds_its_own_work_to_every_step() -> None:
    """engine_step_s (the served engine core's per-step work beyond an in-process step) lengthens each step: one
    request of 1 prompt step and 3 decode steps of 10 ms each takes 4 x 15 ms in the engine with 5 ms more per step."""
    result = _run(_burst(1, output=4), replace(INPUT_ONLY, request_s=0.0, engine_step_s=0.005))
    bare = _run(_burst(1, output=4), replace(INPUT_ONLY, request_s=0.0))
    assert np.allclose(result.requests.ttft_s - bare.requests.ttft_s, 0.005, rtol=0, atol=1e-12)
    assert np.allclose(result.requests.e2e_s - bare.requests.e2e_s, 4 * 0.005, rtol=0, atol=1e-12)


def test_a_new_requests_engine_work_lands_in_the_step_that_admits_it() -> None:
    """engine_admit_step_s once per step that admits requests, engine_new_request_s and the prompt tokens' share per
    request it admits (with prefix caching, prefix_cache_token_s more per token): a burst of 3 x 16-token prompts is
    admitted by the first step (10 + 4 + 3 x 1 + 48 x (0.01 + 0.02) ms); the two decode steps after it keep 10 ms.
    With prefix caching the input thread's block hashes (block_hash_token_s per token) delay the reach, not a step;
    without it neither the hashes nor prefix_cache_token_s are charged."""
    costs = replace(INPUT_ONLY, request_s=0.0, engine_admit_step_s=0.004, engine_new_request_s=0.001,
                    engine_prompt_token_s=1e-5, prefix_cache_token_s=2e-5, block_hash_token_s=1e-4)
    result = _run(_burst(3, output=3), costs)
    assert np.allclose(result.steps.duration_s, [STEP_S + 0.004 + 0.003 + 48 * 3e-5, STEP_S, STEP_S], rtol=0,
                       atol=1e-12)
    assert np.allclose(result.requests.first_scheduled_s, 16 * 1e-4, rtol=0, atol=1e-12)
    one = _run(_burst(1, output=3), costs)  # per step, not per request: one request pays the same step cost
    assert one.steps.duration_s.iloc[0] == pytest.approx(STEP_S + 0.004 + 0.001 + 16 * 3e-5, abs=1e-12)
    deployment = make_deployment("llama-156m", _hw(**ALL_AFTER), replace(ENGINE, enable_prefix_caching=False))
    off = run_simulation(deployment, _burst(3, output=3), SimulationOptions(api_server_costs=costs),
                         step_time_fn=lambda replica, step, start, plan: STEP_S)
    assert np.allclose(off.steps.duration_s, [STEP_S + 0.004 + 0.003 + 48 * 1e-5, STEP_S, STEP_S], rtol=0,
                       atol=1e-12)
    assert np.allclose(off.requests.first_scheduled_s, 0.0, rtol=0, atol=1e-12)
    # Async scheduling: the engine core schedules while the device runs the step before; the admission hides there.
    overlapped = make_deployment("llama-156m", _hw(**ALL_AFTER), replace(ENGINE, async_scheduling=True))
    assert overlapped.hw.executor.host_overlaps_device
    hidden = run_simulation(overlapped, _burst(3, output=3), SimulationOptions(api_server_costs=costs),
                            step_time_fn=lambda replica, step, start, plan: STEP_S)
    assert np.allclose(hidden.steps.duration_s, STEP_S, rtol=0, atol=1e-12)


def test_the_new_request_costs_scale_with_the_host_and_a_host_may_state_them() -> None:
    """The reference costs of a new request divided by the host's speed; a host's measured admit-step cost replaces
    the reference's (0: not measured on a GPU host)."""
    reference = ApiServerCosts()
    assert reference.engine_admit_step_s == 0.0 and reference.engine_new_request_s > 0
    fast = ApiServerCosts.for_host(HostCpu("x", 2.0))
    assert fast.engine_new_request_s == reference.engine_new_request_s / 2
    assert fast.block_hash_token_s == reference.block_hash_token_s / 2
    host = HostCpu.from_dict({"cpu_model": "x", "single_thread_speed_relative": 2.0,
                              "api_server_costs_s": {"engine_admit_step": 0.0004}}, "p.yaml: host")
    assert ApiServerCosts.for_host(host).engine_admit_step_s == 0.0004


def test_a_bad_new_request_cost_in_a_profile_is_one_line_and_exit_2(tmp_path, capsys) -> None:  # noqa: ANN001
    from roofline.cli import main

    data = read_profile_dict(resolve("hardware", "h100-sxm"))
    data["host"] = {"cpu_model": "x", "single_thread_speed_relative": 1, "api_server_costs_s": {"engine_admit_step": -1}}
    profile = tmp_path / "bad.yaml"
    profile.write_text(yaml.safe_dump(data))
    assert main(["simulate", "--model", "llama-156m", "--hardware", str(profile), "--num-requests", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert "host.api_server_costs_s.engine_admit_step: must be seconds in [0, 1], got -1" in err[0]


def test_the_outputs_hand_off_delays_what_the_client_sees_not_the_engine() -> None:
    """output_latency_s (the hand-off of a step's outputs from the engine core to the API server's output handler)
    delays every token the client sees by the same 3 ms: TTFT and end-to-end latency grow by 3 ms, TPOT and the
    engine's steps do not change; a closed loop of one client sends each next request 3 ms later."""
    costs = replace(INPUT_ONLY, request_s=0.0, output_pass_s=0.001)
    result = _run(_burst(1, output=4), replace(costs, output_latency_s=0.003))
    bare = _run(_burst(1, output=4), costs)
    assert np.allclose(result.requests.ttft_s - bare.requests.ttft_s, 0.003, rtol=0, atol=1e-12)
    assert np.allclose(result.requests.e2e_s - bare.requests.e2e_s, 0.003, rtol=0, atol=1e-12)
    assert np.allclose(result.requests.tpot_s, bare.requests.tpot_s, rtol=0, atol=1e-12)
    assert np.allclose(result.steps.duration_s, bare.steps.duration_s, rtol=0, atol=1e-12)
    closed, bare_closed = (_run(_burst(2, output=1), replace(costs, output_latency_s=latency), max_concurrency=1)
                           for latency in (0.003, 0.0))
    assert closed.requests.arrival_s.iloc[1] - bare_closed.requests.arrival_s.iloc[1] == pytest.approx(0.003, abs=1e-12)


def test_a_bursts_new_connections_go_to_the_least_loaded_process() -> None:
    """vLLM 0.32 with --api-server-count 2 (roofline.sim.api_server.Connections): the run's first request reuses the
    client's test connection (process 0); each new connection goes to the process with fewer open connections (of
    equals the lowest-numbered): a burst goes round robin."""
    connections = Connections(2)
    assert [connections.take(0.0) for _ in range(7)] == [0, 1, 0, 1, 0, 1, 0]


def test_a_paced_request_reuses_the_connection_idle_longest_and_a_closed_one_is_dropped() -> None:
    connections = Connections(2)
    assert [connections.take(0.0), connections.take(0.0)] == [0, 1]
    connections.release(1, 1.0)
    connections.release(0, 2.0)
    assert connections.take(0.5) == 0  # none idle yet: a new connection, to the lowest-numbered of equals
    assert [connections.take(3.0), connections.take(3.0)] == [1, 0]  # idle since 1.0 s, then since 2.0 s
    later = Connections(2)
    assert [later.take(0.0), later.take(0.0)] == [0, 1]
    later.release(0, 0.0)
    later.release(1, 4.0)
    # Process 0's connection, idle 5 s, was closed by the server (uvicorn's keep-alive timeout): process 1's is taken.
    assert later.take(5.0) == 1
    assert later.open == [0, 1]


def test_the_request_to_process_assignment_follows_the_release() -> None:
    """vLLM 0.32 (the simulator's default): a closed loop of one request at a time reuses one connection, so one
    process takes them all; 0.11.0 (uvloop's own accept, not modelled): round robin."""
    taken: list[int] = []
    original = ApiServer.next_process

    def record(self: ApiServer, now_s: float) -> int:
        taken.append(original(self, now_s))
        return taken[-1]

    costs = replace(INPUT_ONLY, request_s=1e-3, output_pass_s=1e-3, output_token_s=1e-3)
    for version, expected in (("0.32.0", [0, 0, 0, 0]), ("0.11.0", [0, 1, 0, 1])):
        taken.clear()
        deployment = make_deployment("llama-156m", _hw(**ALL_AFTER), ENGINE, vllm_version=version)
        ApiServer.next_process = record  # type: ignore[method-assign]
        try:
            run_simulation(deployment, _burst(4, output=2), SimulationOptions(api_server_costs=costs, max_concurrency=1,
                                                                             api_server_count=2),
                           step_time_fn=lambda replica, step, start, plan: STEP_S)
        finally:
            ApiServer.next_process = original  # type: ignore[method-assign]
        assert taken == expected, version
    assert assigns_by_connection("0.32.0") and not assigns_by_connection("0.11.0")


def test_a_request_reaching_a_busy_engine_core_waits_for_its_core() -> None:
    """`busy_engine_hop_s` (6 ms): request 0 (5 ms of input work) reaches the idle engine core at 5 ms and runs its
    step 5-15 ms; request 1, taken in next (5-10 ms), reaches it during that step and arrives 6 ms later, at 16 ms,
    after the step (without the term: at 10 ms, scheduled at the step's end, 15 ms). A request reaching an idle engine
    core, as the first, takes no more."""
    costs = replace(INPUT_ONLY, request_s=0.005)
    before = _run(_burst(2), costs).requests
    after = _run(_burst(2), replace(costs, busy_engine_hop_s=0.006)).requests
    assert np.allclose(before.first_scheduled_s, [0.005, 0.015], rtol=0, atol=1e-12)
    assert np.allclose(after.first_scheduled_s, [0.005, 0.016], rtol=0, atol=1e-12)
