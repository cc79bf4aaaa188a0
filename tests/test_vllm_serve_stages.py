"""The TTFT stages of real `vllm serve` against the simulator's (benchmarks/ground_truth/vllm_serve_stages.py): exact
boundaries on a small made-up trace, and the observed simulator giving the simulator's own times."""

from __future__ import annotations

import json
import os
import runpy
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"))

import vllm_serve_stages  # noqa: E402

from roofline.cost.host_cpu import HostCpu  # noqa: E402
from roofline.sim.api_server import LOOP, RENDERER, ApiServer, ApiServerCosts  # noqa: E402


def test_request_keys_of_the_hand_off_and_of_the_output_processor() -> None:
    assert vllm_serve_stages.request_key("cmpl-bench-81dfec64-3-0-a29e3e4e") == "bench-81dfec64-3"
    assert vllm_serve_stages.request_key("cmpl-bench-81dfec64-3-0", suffixed=False) == "bench-81dfec64-3"
    assert vllm_serve_stages.request_key("chatcmpl-bench-x-7-9904051d") == "bench-x-7"
    assert vllm_serve_stages.request_key("chatcmpl-bench-x-7", suffixed=False) == "bench-x-7"


def _work_dir(tmp_path: Path, sends: list[float]) -> Path:
    """Request 0 sent at 10.000 s: read at 10.001, the render submitted by the step ending 10.002 and resumed at
    10.003, handed off at 10.004, the engine core's input thread done at 10.005, scheduled at 10.006, its token out
    of the step at 10.016, at the output handler 10.017, at the client 10.020 (TTFT 20 ms). The other one's intake
    (sent at `sends[1]`) overlaps it or not."""
    pid = 7
    events: list[list[object]] = []
    for i, send in enumerate(sends):
        t = send
        events += [["io", t + 0.0010, t + 0.0011, pid], ["asgi", f"bench-r-{i}", t + 0.0012, 5000 + i],
                   ["step", "BaseRenderer.tokenize_prompt_async", t + 0.0015, t + 0.0020, pid],
                   ["step", "BaseRenderer.tokenize_prompt_async", t + 0.0030, t + 0.0035, pid],
                   ["step", "TaskHandle._run_coro", t + 0.0037, t + 0.0041, pid],
                   ["add", f"cmpl-bench-r-{i}-0-s{i}", t + 0.004, pid],
                   ["ec_in", f"cmpl-bench-r-{i}-0-s{i}", t + 0.0045, t + 0.005],
                   ["req", f"cmpl-bench-r-{i}-0", t + 0.0012, t + 0.0055, t + 0.006, t + 0.016, t + 0.017, t + 0.1,
                    t + 0.1]]
    (tmp_path / "timeline-a1.log").write_text("".join(json.dumps(e) + "\n" for e in events))
    (tmp_path / "r0.json").write_text(json.dumps({"start_times": sends, "ttfts": [0.020] * len(sends)}))
    (tmp_path / "runs.json").write_text(json.dumps({"runs": [{"name": "rate20-completions-a1-r0", "file": "r0.json"}]}))
    return tmp_path


def test_measured_stages_of_a_request_and_requests_whose_intakes_overlap_left_out(tmp_path: Path) -> None:
    apart = vllm_serve_stages.measured(_work_dir(tmp_path, [10.0, 10.5]), 1)["rate20-completions-a1-r0"]
    assert [row["index"] for row in apart] == [0, 1]
    assert apart[0]["bounds"] == pytest.approx([10.0, 10.001, 10.002, 10.003, 10.004, 10.005, 10.006, 10.016, 10.017,
                                                10.020])
    # The loop in the read stage (10.001-10.002): its own read (0.1 ms) and step (0.5 ms), idle 0.4 ms; in the
    # hand-off stage (10.003-10.004) its own steps 0.8 ms (the stream task's first step, which hands it off, counted
    # to the hand-off).
    assert apart[0]["loop"]["read"] == pytest.approx({"own": 0.0006, "stream": 0.0, "output_path": 0.0, "idle": 0.0004})
    assert apart[0]["loop"]["handoff"] == pytest.approx({"own": 0.0008, "stream": 0.0, "output_path": 0.0,
                                                          "idle": 0.0002})
    overlapping = vllm_serve_stages.measured(_work_dir(tmp_path, [10.0, 10.002]), 1)["rate20-completions-a1-r0"]
    assert overlapping == []


def test_the_observed_simulator_notes_each_part_and_keeps_its_times() -> None:
    """A request alone (1 ms on the loop before the render, 0.5 ms of render, 1 ms after): its parts are noted
    where they are queued and end, and it reaches the engine core when the unobserved simulator says."""
    costs = replace(ApiServerCosts(), request_s=0.002, prompt_token_s=0.0, render_request_s=0.0005, latency_s=0.0)
    host = HostCpu("x", 1.0, api_server_before_render_fraction=0.5)
    plain = ApiServer(costs, host=host)
    process, ticket, _ = plain.take_request(0.0, 0)
    expected = plain.reach_s(0.0, process, ticket)
    vllm_serve_stages._save_originals()
    try:
        seen = vllm_serve_stages.observe_threads()
        server = ApiServer(costs, host=host)
        process, ticket, _ = server.take_request(0.0, 0)
        assert server.reach_s(1.0, process, ticket) == expected == pytest.approx(0.0025)
    finally:
        vllm_serve_stages.restore()
    marks = [(what, queue, t) for t, what, queue, job in seen["log"] if job == ticket]
    assert marks == [("queued", LOOP, 0.0), ("ended", LOOP, pytest.approx(0.001)),
                     ("queued", RENDERER, pytest.approx(0.001)), ("ended", RENDERER, pytest.approx(0.0015)),
                     ("queued", LOOP, pytest.approx(0.0015)), ("ended", LOOP, pytest.approx(0.0025))]
    assert ApiServer.__init__ is vllm_serve_stages._ORIGINALS[("server", "__init__")]


def test_output_steps_of_a_pass_the_handler_and_its_stream_steps_back_to_back(tmp_path: Path) -> None:
    """A step's output work at 10.1 s: the socket task's step (0.1 ms), the handler's step (0.4 ms) around its pass
    of 2 outputs, two stream steps (0.15 ms each, 20 us apart), then a stream step 1 ms later (another request's
    hand-off: not this step's)."""
    pid = 7
    events = [["step", "AsyncMPClient._ensure_output_queue_task.<locals>.process_outputs_socket", 10.1, 10.1001, pid],
              ["step", "AsyncLLM._run_output_handler.<locals>.output_handler", 10.1001, 10.1005, pid],
              ["pass", 10.1002, 10.1003, 2, pid],
              ["step", "TaskHandle._run_coro", 10.10052, 10.10067, pid],
              ["step", "TaskHandle._run_coro", 10.10069, 10.10084, pid],
              ["step", "TaskHandle._run_coro", 10.1018, 10.1020, pid]]
    (tmp_path / "timeline-a1.log").write_text("".join(json.dumps(e) + "\n" for e in events))
    (tmp_path / "r0.json").write_text(json.dumps({"start_times": [10.0], "ttfts": [0.2]}))
    (tmp_path / "runs.json").write_text(json.dumps({"runs": [{"name": "rate20-completions-a1-r0", "file": "r0.json"}]}))
    out = vllm_serve_stages.output_steps(tmp_path, 1)["rate20-completions-a1-r0"]
    assert out == {"2": {"passes": 1, "socket_step": pytest.approx(0.1), "handler_step": pytest.approx(0.4),
                         "stream_steps": pytest.approx(0.3), "stream_steps_seen": 2, "span": pytest.approx(0.54)}}


def test_input_hop_in_parts_where_the_send_and_decode_are_stamped(tmp_path: Path) -> None:
    """Handed off at 10.001 s, sent 0.1 ms later, decoded in the engine core 10.0015-10.0016, preprocessed
    10.0017-10.0018: send 0.1, transport 0.4 (sent while the engine core was in a step), decode 0.1, to preprocess
    0.1, preprocess 0.1 ms; a request of another run (at 99 s) is left out, and a work dir without the stamps gives
    nothing."""
    rid = "cmpl-bench-r-0-0-s0"
    events = [["add", rid, 10.001, 7], ["sent", rid, 10.0011, 7], ["ec_dec", rid, 10.0015, 10.0016],
              ["ec_in", rid, 10.0017, 10.0018], ["add", "cmpl-x-0-0-s", 99.0, 7], ["sent", "cmpl-x-0-0-s", 99.1, 7],
              ["ec_dec", "cmpl-x-0-0-s", 99.2, 99.3], ["ec_in", "cmpl-x-0-0-s", 99.4, 99.5],
              ["ec_step", 10.0005, 10.005]]
    (tmp_path / "timeline-a1.log").write_text("".join(json.dumps(e) + "\n" for e in events))
    (tmp_path / "r0.json").write_text(json.dumps({"start_times": [10.0], "ttfts": [0.02]}))
    (tmp_path / "runs.json").write_text(json.dumps({"runs": [{"name": "rate20-completions-a1-r0", "file": "r0.json"}]}))
    out = vllm_serve_stages.input_hop(tmp_path, 1)["rate20-completions-a1-r0"]
    assert out == {"send": pytest.approx(0.1), "transport": pytest.approx(0.4), "decode": pytest.approx(0.1),
                   "to_preprocess": pytest.approx(0.1), "preprocess": pytest.approx(0.1), "requests": 1,
                   "transport_in_step": pytest.approx(0.4), "requests_in_step": 1}
    (tmp_path / "timeline-a1.log").write_text(json.dumps(events[0]) + "\n")
    assert vllm_serve_stages.input_hop(tmp_path, 1) == {}


def test_the_script_runs_the_simulator_it_observes(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Run as a script it selects the simulator's Python loop and API server, the ones `observe` and
    `observe_threads` patch (under the compiled loop no simulated stage was found), before anything of roofline is
    imported by it."""
    monkeypatch.setenv("ROOFLINE_PURE_PYTHON", "")
    monkeypatch.setattr(sys, "argv", ["vllm_serve_stages.py", "--help"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(vllm_serve_stages.__file__, run_name="__main__")
    assert stop.value.code == 0 and "--work-dirs" in capsys.readouterr().out
    assert os.environ["ROOFLINE_PURE_PYTHON"] == "1"
