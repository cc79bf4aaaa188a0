"""stream_steps.py (benchmarks/ground_truth, an experiment): each engine step's output work on the API server's loop
as vLLM 0.32 runs it, the output handler's turn and then the requests' stream steps' turn, first come first served
with the input work (docs/benchmark-history/2026-11-30g-serve14.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from api_costs import only  # noqa: E402
from stream_steps import StreamStepApiServer  # noqa: E402

from roofline.cost.host_cpu import HostCpu  # noqa: E402

# One shared core, half of a request's loop work before the render and half after it, no tokenization, no client.
HOST = HostCpu("x", 1.0, api_server_num_cores=1, api_server_before_render_fraction=0.5)
COSTS = only(request_s=0.004, output_pass_s=0.001, output_token_s=0.001)


def test_the_handler_and_the_stream_steps_interleave_with_a_requests_intake() -> None:
    """A request's loop work, 2 ms before the render and 2 after it, from 0 ms; a step's 2 outputs at 1 ms: the
    handler's turn waits for the part under way (not preempting it) and runs 2-3, ahead of the request's second
    part (ready at 2 ms, after the handler); the handler wakes the streams at 3 ms, so they queue behind that part
    (3-5) and run 5-7: the request reaches the engine at 5 ms, the client has the tokens at 7 ms (the model's
    preemptive pass: 1-4 and 7 ms)."""
    server = StreamStepApiServer(COSTS, host=HOST, handler_token_fraction=0.0)
    process, ticket, _ = server.take_request(0.0, 0)
    assert server.stream_outputs(0.001, 0, num_tokens=2) == pytest.approx(0.007)
    assert server.reach_s(0.001, process, ticket) == pytest.approx(0.005)
    assert server.reach_s(0.005, process, ticket) == pytest.approx(0.005)


@pytest.mark.parametrize(("fraction", "steps", "seen_s", "reach_s"), [(1.0, 1, 0.007, 0.007), (0.0, 2, 0.005, 0.007)])
def test_the_handlers_share_per_output_and_the_input_steps(fraction: float, steps: int, seen_s: float,
                                                           reach_s: float) -> None:
    """The step's outputs at 0.5 ms. handler_token_fraction 1: the per-output work in the handler's turn (3 ms, 2-5),
    ahead of the request's second part (5-7). input_steps 2: each part in two 1-ms steps, each queued at the back:
    the handler (1-2) runs between the first part's steps, the streams (3-5) between the parts, the second part
    5-7."""
    server = StreamStepApiServer(COSTS, host=HOST, handler_token_fraction=fraction, input_steps=steps)
    process, ticket, _ = server.take_request(0.0, 0)
    assert server.stream_outputs(0.0005, 0, num_tokens=2) == pytest.approx(seen_s)
    assert server.reach_s(0.0005, process, ticket) == pytest.approx(reach_s)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(SystemExit, match="--stream-steps"):
        StreamStepApiServer(COSTS, host=HOST, handler_token_fraction=1.5)
    with pytest.raises(SystemExit, match="--stream-input-steps"):
        StreamStepApiServer(COSTS, host=HOST, handler_token_fraction=0.0, input_steps=0)
    with pytest.raises(SystemExit, match="api_server_num_cores"):
        StreamStepApiServer(COSTS, host=HostCpu("x", 1.0), handler_token_fraction=0.0)
