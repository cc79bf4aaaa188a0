"""vllm_serve_chat_split.py: a closed-loop request's API-server loop steps summed by the interval of its life they
start in (before the hand-off, to the client's first token, to its last, after it), from made-up stamps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "ground_truth"))

import vllm_serve_chat_split  # noqa: E402


def test_each_step_counts_in_the_interval_it_starts_in() -> None:
    """Request 0 sent at 1.000 s, handed off at 1.002, first token at 1.010 (TTFT 10 ms), last at 1.030; request 1
    sent at 1.040. Steps of 0.5 ms at 1.0005 (before), 1.003 (to the first token), 1.009 + 1.020 (first to last: the
    one at 1.009 starts before the first token, so it is the first's), 1.035 (after the last); uvicorn's read at
    1.0001 (before)."""
    events = [["add", "r0", 1.002, 7], ["add", "r1", 1.0415, 7],
              ["io", 1.0001, 1.0002, 7],
              ["step", "run_asgi", 1.0005, 1.0010, 7], ["step", "handler", 1.003, 1.0035, 7],
              ["step", "TaskHandle._run_coro", 1.009, 1.0095, 7], ["step", "output_handler", 1.020, 1.0205, 7],
              ["step", "run_asgi", 1.035, 1.0355, 7], ["step", "run_asgi", 1.0405, 1.041, 7]]
    result = {"start_times": [1.000, 1.040], "ttfts": [0.010, 0.010], "latencies": [0.030, 0.030],
              "output_lens": [4, 4]}
    rows = vllm_serve_chat_split.request_rows(events, result)
    assert len(rows) == 2
    first = rows[0]
    assert sum(first["before_handoff"].values()) == pytest.approx(0.0006)
    assert sum(first["handoff_to_first"].values()) == pytest.approx(0.001)
    assert sum(first["first_to_last"].values()) == pytest.approx(0.0005)
    assert sum(first["after_last"].values()) == pytest.approx(0.0005)
    assert first["before_handoff"]["io"] == pytest.approx(0.0001)
    assert sum(rows[1]["before_handoff"].values()) == pytest.approx(0.0005)
