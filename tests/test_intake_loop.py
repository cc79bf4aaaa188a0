"""intake_loop.py (benchmarks/ground_truth): a request's intake window split by what the API server's loop ran, and
with --by-task by which task (docs/benchmark-history/2026-11-30f-serve13.md)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"))

import intake_loop  # noqa: E402


def test_busy_clips_spans_to_the_window_and_names_each_task() -> None:
    spans = [(0.0, 2.0, "stream", "TaskHandle._run_coro"), (3.0, 4.0, "input", "create_completion"),
             (5.0, 9.0, "output_path", "output_handler")]
    tasks: dict[str, float] = {}
    out = intake_loop.busy(spans, [s[0] for s in spans], 1.0, 6.0, tasks)
    assert out == {"output_path": 1.0, "stream": 1.0, "input": 1.0, "io": 0.0, "idle": 2.0}
    assert tasks == {"TaskHandle._run_coro": 1.0, "create_completion": 1.0, "output_handler": 1.0}
    assert intake_loop.busy(spans, [s[0] for s in spans], 1.0, 6.0) == out  # without tasks: the same split


def test_by_task_loads_growth_is_rate20_less_closed1_biggest_first() -> None:
    runs = {"closed1-a": {"load": "closed1", "by_task": {"send_to_arrival": {"a": 1.0}, "arrival_to_handoff": {}}},
            "rate20-a": {"load": "rate20", "by_task": {"send_to_arrival": {"a": 1.5, "b": 2.0},
                                                       "arrival_to_handoff": {"b": 0.5}}},
            "rate20-b": {"load": "rate20", "by_task": {"send_to_arrival": {"a": 2.5},
                                                       "arrival_to_handoff": {"b": 1.5}}}}
    out = intake_loop.by_task_loads(runs)
    # b is absent from rate20-b's first window: 0 there, so its mean is 1.0
    assert out["send_to_arrival"] == {"a": {"closed1": 1.0, "rate20": 2.0, "growth": 1.0},
                                      "b": {"closed1": 0.0, "rate20": 1.0, "growth": 1.0}}
    assert list(out["arrival_to_handoff"]) == ["b"]
    assert out["arrival_to_handoff"]["b"]["growth"] == 1.0
