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
