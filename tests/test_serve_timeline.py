"""The measurements behind the API server's hops and the served engine core's per-step time
(benchmarks/ground_truth/vllm_timeline.py, served_step_overhead.py): exact results on small made-up inputs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"))

import served_step_overhead  # noqa: E402
import vllm_timeline  # noqa: E402


def test_timeline_splits_each_requests_ttft_and_matches_by_time() -> None:
    """Two requests sent at 10.000 and 10.050 s (client clock = CLOCK_MONOTONIC); the server's ids carry a suffix
    on "add"; the event of a request from another run (arrival 99 s) is left out."""
    events = [
        ["add", "cmpl-a-0-x1", 10.004], ["add", "cmpl-b-0-x2", 10.056],
        # req: id, arrival, queued, scheduled, first token, first token seen by the output handler, last, finished
        ["req", "cmpl-a-0", 10.001, 10.005, 10.006, 10.036, 10.040, 10.3, 10.3],
        ["req", "cmpl-b-0", 10.052, 10.070, 10.071, 10.101, 10.103, 10.4, 10.4],
        ["req", "cmpl-c-0", 99.0, 99.1, 99.2, 99.3, 99.4, 99.5, 99.5],
        ["pass", 10.036, 10.038, 2], ["pass", 10.101, 10.102, 4],
    ]
    out = vllm_timeline.timeline(events, [10.050, 10.000], [0.110, 0.045])
    assert out["requests_matched"] == 2 and out["requests"] == 2
    # Request a: 1 ms to the arrival stamp, 3 ms input, 1 ms hop, 1 ms, 30 ms step, 4 ms hand-off, 5 ms out.
    # Request b: 2, 4, 14, 1, 30, 2 and 57 ms (its TTFT 110 ms ends at 10.160).
    expected = {"client_to_arrival_ms": (1.5, 1.5), "arrival_to_engine_ms": (3.5, 3.5),
                "engine_to_queued_ms": (7.5, 7.5), "queued_to_scheduled_ms": (1.0, 1.0),
                "prefill_step_ms": (30.0, 30.0), "output_handoff_ms": (3.0, 3.0), "output_to_client_ms": (31.0, 31.0)}
    for key, (mean, median) in expected.items():
        assert out[key]["mean"] == pytest.approx(mean, abs=1e-6), key
        assert out[key]["median"] == pytest.approx(median, abs=1e-6), key
    assert out["output_pass_ms_mean"] == pytest.approx(1.5, abs=1e-6)
    assert out["outputs_per_pass_mean"] == 3


def test_timeline_splits_the_ttft_by_api_server_process() -> None:
    """The same two requests handed off by two processes (`add`'s pid 7 and 8): each process's parts are its one
    request's; the 90th percentiles interpolate between the two requests' parts; with one pid no per-process split."""
    events = [
        ["add", "cmpl-a-0-x1", 10.004, 7], ["add", "cmpl-b-0-x2", 10.056, 8],
        ["req", "cmpl-a-0", 10.001, 10.005, 10.006, 10.036, 10.040, 10.3, 10.3],
        ["req", "cmpl-b-0", 10.052, 10.070, 10.071, 10.101, 10.103, 10.4, 10.4],
    ]
    out = vllm_timeline.timeline(events, [10.050, 10.000], [0.110, 0.045])
    assert out["by_api_process"]["7"]["requests"] == 1 and out["by_api_process"]["8"]["requests"] == 1
    assert out["by_api_process"]["7"]["arrival_to_engine_ms"] == pytest.approx(3.0, abs=1e-6)
    assert out["by_api_process"]["8"]["engine_to_queued_ms"] == pytest.approx(14.0, abs=1e-6)
    assert out["p90_ms"]["engine_to_queued"] == pytest.approx(0.1 * 1.0 + 0.9 * 14.0, abs=1e-6)
    events[1][3] = 7
    assert "by_api_process" not in vllm_timeline.timeline(events, [10.050, 10.000], [0.110, 0.045])


def test_served_step_overhead_is_the_served_period_less_the_matched_in_process_duration() -> None:
    """In-process steps of (1 prefill, 10 sequences) last 20 ms, decodes of 10 sequences 15 ms; a served run of 300
    steps alternating the two shapes with elapsed 21 / 16 ms in 6 s spends 1.5 ms per step outside the elapsed, so
    each matched step is 2.5 ms longer served; the steps of its first and last second are left out."""
    durations = {(1, 10): [0.020] * 3, (0, 10): [0.015] * 3}
    steps = [[i, i % 2, 128 * (i % 2), 10 - i % 2, 10 - i % 2, 21.0 if i % 2 else 16.0] for i in range(300)]
    run = {"name": "r", "engine_steps": steps, "result": {"duration": 6.0}}
    out = served_step_overhead.run_overhead(run, durations)
    assert out is not None
    outside_ms = (6000.0 - 150 * 21.0 - 150 * 16.0) / 300  # 1.5 ms per step
    assert out["outside_elapsed_ms_per_step"] == pytest.approx(outside_ms)
    # Every matched step: served elapsed + 1.5 ms less the in-process duration = 1 + 1.5 ms.
    assert out["served_minus_inprocess_ms"] == pytest.approx(2.5)
    assert 0 < out["matched_steps"] < 300
    assert served_step_overhead.matched_duration_s(durations, 1, 11) == pytest.approx(0.020)
    assert served_step_overhead.matched_duration_s(durations, 1, 12) is None  # no in-process step within +-1


def _engine_step(events: list, start: float, new: int, running: int, forward_s: float, outside_s: float,
                 states_s: float = 0.0) -> float:
    """One traced `EngineCore.step` at `start` (s): schedule 0.1 ms, the enqueue 0.2 ms, the Worker's RPC (its
    `_update_states` `states_s`, then the forward pass) and the update 0.1 ms, the rest of `outside_s` after the step
    before the next (the busy loop); returns the next step's start."""
    sched_end = start + 1e-4
    events += [["ec_sched", start, sched_end, new, running, 0], ["ec_exec", sched_end, sched_end + 2e-4, new]]
    worker = sched_end + 2e-4
    events += [["wk_upd", worker, worker + states_s, new, 0], ["wk_rpc", "execute_model", worker,
                                                                worker + states_s + forward_s]]
    update = worker + states_s + forward_s
    end = update + 1e-4
    events += [["ec_upd", update, end], ["ec_step", start, end]]
    return start + forward_s + outside_s


def test_step_kinds_split_the_admitting_steps_extra_outside_the_forward_pass() -> None:
    """Decode steps with 3 running: 1 ms outside the forward pass; steps admitting 1 new request (3 running): 1.4 ms,
    0.1 of it the Worker's `_update_states`: the extra of one new request is 0.4 ms, per kind and by new requests."""
    import timeline_engine_parts

    events: list = []
    t = 0.0
    for i in range(40):
        new = 1 if i % 4 == 0 else 0
        t = _engine_step(events, t, new, 3, 0.005, 0.0014 if new else 0.001, states_s=1e-4 if new else 0.0)
    out = timeline_engine_parts.step_kinds(events, [0.0, t - 1.5])
    assert out["admitting"]["outside_worker"] == pytest.approx(1.4, abs=1e-6)
    assert out["decode"]["outside_worker"] == pytest.approx(1.0, abs=1e-6)
    assert out["admitting"]["worker_update_states"] == pytest.approx(0.1, abs=1e-6)
    assert out["admitting"]["schedule"] == pytest.approx(0.1, abs=1e-6)
    assert out["admitting_extra_ms_by_new"]["1"]["extra_ms"] == pytest.approx(0.4, abs=1e-6)
    assert out["new_per_admitting_step"] == 1
    # served_step_overhead.py --step-kinds: that extra less one request's engine-core Python, per step.
    parts = {"r": {"by_step": out}}
    assert served_step_overhead.admit_step_ms(parts) == {"r": pytest.approx(0.4, abs=1e-6)}


def test_engine_parts_with_two_api_server_processes_counts_each_ones_requests_and_the_connections() -> None:
    """Three requests handed to the engine core by two API-server processes (`add`'s pid 11, 12, 11): the hop, the
    wait for the busy loop and the admitting step per request, the requests per process and the connections accepted
    in the run's window (one an hour before it left out); an `add` without a pid (older logs) is still joined."""
    import timeline_engine_parts

    events: list = [["conn", 9.99], ["conn", 10.049], ["conn", -3600.0],
                    ["ec_step", 10.000, 10.004], ["ec_sched", 10.000, 10.001, 0, 2, 0],
                    ["ec_step", 10.010, 10.030], ["ec_sched", 10.010, 10.011, 2, 4, 0],
                    ["ec_step", 10.060, 10.080], ["ec_sched", 10.060, 10.061, 1, 5, 0]]
    for rid, add, pid, scheduled in (("a", 10.002, 11, 10.010), ("b", 10.005, 12, 10.010), ("c", 10.050, 11, 10.060)):
        events += [["add", f"cmpl-{rid}-x", add, pid], ["ec_in", f"cmpl-{rid}-x", add + 0.001, add + 0.0011],
                   ["ec_add", f"cmpl-{rid}-x", add + 0.003, add + 0.0031],
                   ["req", f"cmpl-{rid}", add - 0.002, add + 0.003, scheduled, scheduled + 0.02, 0, 0, 0]]
    events[-4] = ["add", "cmpl-c-x", 10.050]  # no pid: counted with the others' requests, not per process
    out = timeline_engine_parts.engine_parts(events, [10.0, 10.045])
    assert out["requests"] == 3
    assert out["hop_ms"] == pytest.approx(1.0, abs=1e-6)
    assert out["wait_ms"] == pytest.approx(1.9, abs=1e-6)
    assert out["step_ms"] == pytest.approx(20.0, abs=1e-6)
    assert out["running"] == pytest.approx((4 + 4 + 5) / 3, abs=1e-3)
    assert out["requests_per_api_process"] == [1, 1]
    assert out["connections"] == 2
    assert out["connection_after_send_ms"] == [pytest.approx(4.0)]  # 10.049 after the send at 10.045; 9.99: none


def test_the_api_server_timestamps_go_in_only_in_the_processes_vllm_spawns_as_api_servers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`install_api_server` (timeline_site/sitecustomize.py, once `vllm.v1.utils` is imported): `install` in a
    process multiprocessing names "ApiServer_<i>" (vllm/v1/utils.py `APIServerProcessManager`), not in the launcher,
    the engine core or the Worker, which import the module too."""
    import multiprocessing

    calls: list[str] = []
    monkeypatch.setattr(vllm_timeline, "install", calls.append)
    process = multiprocessing.current_process()
    for name in ("MainProcess", "EngineCore_DP0", "ApiServer_1"):
        monkeypatch.setattr(process, "name", name)
        vllm_timeline.install_api_server(f"log-{name}", None)
    assert calls == ["log-ApiServer_1"]


def test_timeline_pairs_matches_requests_by_the_clients_ids_and_counts_close_pairs() -> None:
    """benchmarks/ground_truth/timeline_pairs.py: ids of both endpoints; two requests sent 1 ms apart (none within
    15 ms before) handed off 14 and 16 ms after their sends, an isolated one 10 ms after; steps by SCHEDULED stamp."""
    import timeline_pairs

    assert timeline_pairs.client_key("cmpl-bench-0e0f8042-7-0") == ("bench-0e0f8042", 7)
    assert timeline_pairs.client_key("chatcmpl-bench-0e0f8042-12") == ("bench-0e0f8042", 12)
    with pytest.raises(ValueError):
        timeline_pairs.client_key("embd-bench-0e0f8042-7")
    # index, sent, arrival, add, scheduled
    rows = [[0, 1.000, 1.004, 1.014, 1.020], [1, 1.001, 1.006, 1.017, 1.020], [2, 1.100, 1.104, 1.110, 1.130]]
    out = timeline_pairs.pairs(rows)
    assert out["isolated"] == 1 and out["isolated_send_to_add_ms"] == pytest.approx(10.0)
    assert out["pairs"] == 1 and out["pair_send_gap_ms"] == pytest.approx(1.0)
    assert out["pair_first_send_to_add_ms"] == pytest.approx(14.0)
    assert out["pair_second_send_to_add_ms"] == pytest.approx(16.0)
    assert out["pair_add_gap_ms"] == pytest.approx(3.0) and out["pair_second_first"] == 0
    assert out["steps_with_1_2_3plus_new"] == [1, 1, 0]


def test_phased_api_server_takes_input_work_round_robin_behind_output_work() -> None:
    """benchmarks/ground_truth/api_server_phases.py (an experiment): three requests of 20 ms input work at t = 0 in
    two phases of 10 ms: the first phases run 0-30 ms, the second phases 30-60 ms; an output pass of 5 ms taken at
    35 ms preempts the first request's second phase (done at 45 ms, the others at 55 and 65 ms). Before the others
    came, the first request's reach was 20 ms (a lower bound, as the simulator needs)."""
    from api_server_phases import PhasedApiServer

    from roofline.sim.api_server import ApiServerCosts

    costs = ApiServerCosts(request_s=0.02, chat_request_s=0.0, prompt_token_s=0.0, output_pass_s=0.005,
                           output_token_s=0.0, latency_s=0.0)
    server = PhasedApiServer(costs, 1, "completions", phases=(0.5, 0.5), reach_phase=2)
    assert server.take_request(0.0, 0)[2] == pytest.approx(0.02)
    server.take_request(0.0, 0)
    server.take_request(0.0, 0)
    assert server.reach_s(0.0, 0, 0) == pytest.approx(0.04)
    assert server.stream_outputs(0.035, 0, 1) == pytest.approx(0.04)
    assert [server.reach_s(0.035, 0, t) for t in range(3)] == pytest.approx([0.045, 0.055, 0.065])
    assert server.reach_s(0.07, 0, 2) == pytest.approx(0.065)


def test_burst_stages_joins_every_stage_by_the_clients_request_id(tmp_path: Path) -> None:
    """benchmarks/ground_truth/burst_stages.py: two requests of one run (client ids bench-ab-0 and bench-ab-1, sent
    at 5.000 and 5.002 s); the second reaches the server first. Each stage by id (the x-request-id header on asgi /
    handler, the server's ids with a suffix on add / ec_in / ec_add), relative to the first send; the connection
    accepted before the run's window (t0 - 1 s) is left out; blocks of 100 positions give medians in ms."""
    import json

    import burst_stages

    log = [
        ["conn", 3.5], ["conn", 5.010], ["conn", 5.011],
        ["asgi", "bench-ab-1", 5.020], ["asgi", "bench-ab-0", 5.030],
        ["handler", "bench-ab-1", 5.021], ["handler", "bench-ab-0", 5.031],
        ["add", "cmpl-bench-ab-1-0-x9", 5.025], ["add", "cmpl-bench-ab-0-0-x8", 5.040],
        ["ec_in", "cmpl-bench-ab-1-0-x9", 5.0255, 5.026], ["ec_in", "cmpl-bench-ab-0-0-x8", 5.0405, 5.041],
        ["ec_add", "cmpl-bench-ab-1-0-x9", 5.030, 5.0305], ["ec_add", "cmpl-bench-ab-0-0-x8", 5.050, 5.0502],
        ["ec_sched", 5.0306, 5.031, 1, 1, 0], ["ec_step", 5.0306, 5.060],
        # req: id, arrival, queued, scheduled, first token, seen by the output handler, last, finished
        ["req", "cmpl-bench-ab-1-0", 5.022, 5.0305, 5.031, 5.060, 5.070, 5.3, 5.3],
        ["req", "cmpl-bench-ab-0-0", 5.032, 5.0502, 5.061, 5.090, 5.095, 5.4, 5.4],
    ]
    (tmp_path / "timeline-a1.log").write_text("".join(json.dumps(e) + "\n" for e in log))
    result = {"start_times": [5.000, 5.002], "ttfts": [0.100, 0.080], "duration": 0.5}
    (tmp_path / "burst1000-completions-a1-r0.json").write_text(json.dumps(result))
    run = burst_stages.extract(tmp_path)["runs"]["burst1000-completions-a1-r0"]
    assert run["columns"] == list(burst_stages.STAGES)
    assert run["rows"][0] == pytest.approx([0.0, 0.030, 0.031, 0.032, 0.040, 0.041, 0.0502, 0.061, 0.090, 0.095,
                                            0.100])
    assert run["rows"][1] == pytest.approx([0.002, 0.020, 0.021, 0.022, 0.025, 0.026, 0.0305, 0.031, 0.060, 0.070,
                                            0.082])
    assert run["conn"] == pytest.approx([0.010, 0.011])
    assert burst_stages.engine_summary(run)["new_scheduled_before_last_queued"] == 1
    block = burst_stages.blocks(run["rows"], run["columns"])[0]
    assert block["positions"] == "0-1" and block["scheduled"] == 46.0 and block["client"] == 91.0


def test_burst_stages_captures_each_requests_reach_under_either_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """burst_stages.py's capture: behind one API-server process (the compiled loop's case: it calls no
    `_Simulation.enter`) every request's reach of the engine core is recorded, and it is when the Python loop enters
    it (a busy engine core's hop of 0.3 ms included)."""
    from dataclasses import replace

    import burst_stages

    import roofline.sim.simulator as sim
    from roofline.cost.hardware import load_profile
    from roofline.engine_args import EngineArgs
    from roofline.sim.api_server import ApiServerCosts
    from roofline.sim.deployment import make_deployment
    from roofline.sim.simulator import SimulationOptions, run_simulation
    from roofline.sim.workload import ArrivalProcess, LengthDistribution, Workload

    host = Path(__file__).resolve().parents[1] / "benchmarks/results/vllm-serve-bench/2026-11-30c/cal-host.yaml"
    deployment = make_deployment("llama-156m", load_profile(host), EngineArgs(max_num_seqs=64,
                                                                              max_num_batched_tokens=4096,
                                                                              max_model_len=512))
    workload = Workload(name="w", seed=3, num_requests=40, arrival=ArrivalProcess("all_at_once"),
                        prompt_tokens=LengthDistribution("uniform", min_tokens=8, max_tokens=200),
                        output_tokens=LengthDistribution("uniform", min_tokens=1, max_tokens=16))
    options = SimulationOptions(api_server_count=1, api_server_costs=replace(ApiServerCosts(),
                                                                              busy_engine_hop_s=3e-4))
    entered: dict[str, float] = {}
    enter = sim._Simulation.enter

    def enter_noted(self: object, now: float, replica: object, request: object, *args: object) -> None:
        entered[request.request_id] = now  # type: ignore[attr-defined]
        enter(self, now, replica, request, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sim._Simulation, "enter", enter_noted)
    reaches = []
    for compiled in (True, False):
        if not compiled:
            monkeypatch.setattr(sim._Simulation, "compiled_loop", lambda self: False)
        with burst_stages.captured_simulations() as (captured, reach):
            run_simulation(deployment, workload, options)
        assert len(captured) == 1 and len(reach) == 40
        if compiled and sim.COMPILED:
            assert not entered  # (the compiled loop ran: no `enter`)
        reaches.append(dict(reach))
    assert reaches[1] == entered  # the Python loop's entries
    assert reaches[0] == entered  # the compiled loop's (`enter` called there only without it)


def test_phased_api_server_with_the_output_pass_in_the_round() -> None:
    """api_server_phases.py with `output_in_round`: the same three requests (20 ms of input work in two phases of 10 ms,
    at t = 0); the output pass of 5 ms taken at 35 ms goes to the back of the round, behind the second phases of all
    three (done at 40, 50, 60 ms): it ends at 65 ms and delays none of them."""
    from api_server_phases import PhasedApiServer

    from roofline.sim.api_server import ApiServerCosts

    costs = ApiServerCosts(request_s=0.02, chat_request_s=0.0, prompt_token_s=0.0, output_pass_s=0.005,
                           output_token_s=0.0, latency_s=0.0)
    server = PhasedApiServer(costs, 1, "completions", phases=(0.5, 0.5), reach_phase=2, output_in_round=True)
    for _ in range(3):
        server.take_request(0.0, 0)
    assert server.stream_outputs(0.035, 0, 1) == pytest.approx(0.065)
    assert [server.reach_s(0.035, 0, t) for t in range(3)] == pytest.approx([0.04, 0.05, 0.06])
    assert server.stream_outputs(0.07, 0, 1) == pytest.approx(0.075)  # the loop is idle again: at once


def test_event_loop_api_server_runs_the_ready_queue_in_rounds() -> None:
    """api_server_phases.py EventLoopApiServer (an experiment): three requests of 20 ms input work in two phases of
    10 ms sent at t = 0, their connections arriving at 5, 10, 15 ms (one per 5 ms). Poll at 5 ms: r0's first phase
    (5-15); poll at 15: r0's second phase, then r1's and r2's first (15-25-35-45: r0 reaches the engine at 25); an
    output pass of 5 ms arriving at 30 ms joins at the poll of 45, behind r1's and r2's second phases (done at 55 and
    65): it ends at 70. A pass of 200 outputs (two chunks of 128 + 72 at 0.1 ms each, the pass's 5 ms in the first)
    arriving at 80 ms with a request sent then (its connection at 85): the second chunk, queued by the first (its
    `asyncio.sleep(0)`), runs before the new connection polled with it (97.8-105), then the request's phases
    (105-125)."""
    from api_server_phases import EventLoopApiServer

    from roofline.sim.api_server import ApiServerCosts

    costs = ApiServerCosts(request_s=0.02, chat_request_s=0.0, prompt_token_s=0.0, output_pass_s=0.005,
                           output_token_s=0.0, latency_s=0.0)
    server = EventLoopApiServer(costs, 1, "completions", phases=(0.5, 0.5), accept_gap_s=0.005)
    assert server.take_request(0.0, 0)[2] == pytest.approx(0.025)
    server.take_request(0.0, 0)
    server.take_request(0.0, 0)
    assert [server.reach_s(0.0, 0, t) for t in range(3)] == pytest.approx([0.025, 0.055, 0.065])
    assert server.stream_outputs(0.03, 0, 1) == pytest.approx(0.07)
    assert [server.reach_s(0.03, 0, t) for t in range(3)] == pytest.approx([0.025, 0.055, 0.065])
    server.output_token_s = 1e-4
    assert server.stream_outputs(0.08, 0, 200) == pytest.approx(0.105)
    assert server.take_request(0.08, 0)[2] == pytest.approx(0.125)
    with pytest.raises(SystemExit, match="--event-loop"):
        EventLoopApiServer(costs, phases=(0.5, 0.6))


def test_event_loop_api_server_with_the_io_callbacks_at_the_poll() -> None:
    """EventLoopApiServer with `io_at_poll` (uvloop: the accept and the read run in libuv's poll phase): a request of
    20 ms in two phases and an output pass of 5 ms both arriving at t = 0. Queued, the poll puts the request's first
    phase and the pass in the round (0-10, 10-15) and the second phase after (15-25); at the poll, the first phase runs
    there (0-10) and the round holds its second phase, then the pass (10-20, 20-25)."""
    from api_server_phases import EventLoopApiServer

    from roofline.sim.api_server import ApiServerCosts

    costs = ApiServerCosts(request_s=0.02, chat_request_s=0.0, prompt_token_s=0.0, output_pass_s=0.005,
                           output_token_s=0.0, latency_s=0.0)
    for io_at_poll, reach, seen in ((False, 0.025, 0.015), (True, 0.02, 0.025)):
        server = EventLoopApiServer(costs, 1, "completions", phases=(0.5, 0.5), io_at_poll=io_at_poll)
        server.take_request(0.0, 0)
        assert server.stream_outputs(0.0, 0, 1) == pytest.approx(seen)
        assert server.reach_s(0.0, 0, 0) == pytest.approx(reach)


def test_loop_steps_counts_the_input_paths_steps_per_request_in_the_intake(tmp_path: Path) -> None:
    """benchmarks/ground_truth/loop_steps.py: two requests sent at t = 10 s, handed off at 10.004 and 10.006 s; in the
    intake 4 input-path steps of 100 us and 2 output-handler steps 1 ms apart (not input); a step after the last
    hand-off counts for the whole run only: 2 input steps and 0.2 ms of CPU per request, one gap of 1 ms."""
    import json

    import loop_steps

    events = [["step", "RequestResponseCycle.run_asgi", 10.0001 + i * 1e-3, 10.0002 + i * 1e-3] for i in range(4)]
    events += [["step", "AsyncLLM._run_output_handler.<locals>.output_handler", t, t + 1e-5] for t in (10.002, 10.003)]
    events += [["add", "a", 10.004], ["add", "b", 10.006], ["step", "TaskHandle._run_coro", 10.01, 10.0101],
               ["io", 10.00005, 10.00008]]
    (tmp_path / "timeline-a1.log").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    (tmp_path / "burst1000-completions-a1-r0.json").write_text(json.dumps({"start_times": [10.0, 10.0],
                                                                           "duration": 1.0}))
    run = loop_steps.analyse(tmp_path)["runs"]["burst1000-completions-a1-r0"]
    assert run["input_steps_per_request"] == 2.0
    assert run["input_cpu_ms_per_request"] == pytest.approx(0.2)
    assert run["output_handler_steps"] == 2 and run["output_handler_gap_ms"] == {"median": 1.0, "p90": 1.0}
    assert run["reads"]["n"] == 1 and run["whole_run_steps_per_request"]["TaskHandle._run_coro"] == 0.5


def test_vllm_serve_sim_joins_the_runs_of_several_indexes_of_one_setup(tmp_path: Path) -> None:
    """vllm_serve_sim.py --runs A B: one session's one-process runs with another's two-process runs, in one index;
    indexes of another setup (server flags, model, pinning) are refused."""
    import argparse
    import json

    import vllm_serve_sim

    setup = {"server_flags": ["--max-num-seqs", "256"], "model_config": {"hidden_size": 256}, "api_cores": "0",
             "engine_cores": "1"}
    paths = [tmp_path / "a1.json", tmp_path / "a2.json", tmp_path / "other.json"]
    paths[0].write_text(json.dumps({**setup, "started": "06:02", "runs": [{"name": "burst100-completions-a1-r0"}]}))
    paths[1].write_text(json.dumps({**setup, "started": "08:41", "runs": [{"name": "burst100-completions-a2-r0"}]}))
    paths[2].write_text(json.dumps({**setup, "api_cores": "0,2", "runs": []}))
    parser = argparse.ArgumentParser()
    index = vllm_serve_sim.merged_index(parser, paths[:2])
    assert [run["name"] for run in index["runs"]] == ["burst100-completions-a1-r0", "burst100-completions-a2-r0"]
    assert index["started"] == "06:02" and index["server_flags"] == setup["server_flags"]
    with pytest.raises(SystemExit):
        vllm_serve_sim.merged_index(parser, [paths[0], paths[2]])
