"""The input hop's waits for a core (benchmarks/ground_truth/vllm_serve_hop_wakeups.py): exact sums on made-up
scheduler events."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"))

import vllm_serve_hop_wakeups  # noqa: E402


def test_transports_by_whether_the_engine_core_was_in_a_step() -> None:
    events = [["ec_step", 10.0, 10.005], ["sent", "a", 10.001, 7], ["ec_dec", "a", 10.0014, 10.0015],
              ["sent", "b", 10.006, 7], ["ec_dec", "b", 10.0061, 10.0062], ["sent", "c", 99.0, 7],
              ["ec_dec", "c", 99.1, 99.2]]
    assert vllm_serve_hop_wakeups.transports(events, 9.0, 11.0) == [(10.001, 10.0014, True), (10.006, 10.0061, False)]


def test_waits_in_a_window_by_role_and_the_runners_time() -> None:
    """Window 10.000-10.001 s: the engine core's input thread (tid 2) woken at 10.0002 waits 0.3 ms (runs from
    10.0005 to 10.0006) while the Worker (tid 3) runs 10.0000-10.0005; a wait wholly before the window counts nothing."""
    # perf sched timehist rows: (switch-out time, cpu, comm, tid, scheduling delay, run time)
    sched = [(10.0005, 1, "worker", 3, 0.0, 0.0005), (10.0006, 1, "input", 2, 0.0003, 0.0001),
             (9.9, 1, "input", 2, 0.001, 0.0001)]
    roles = {2: "engine_other", 3: "worker_main"}
    (row,) = vllm_serve_hop_wakeups.waits_in(sched, roles, [(10.0, 10.001, True)])
    assert row["delay:engine_other"] == pytest.approx(0.0003)
    assert row["ran:worker_main"] == pytest.approx(0.0005)
    assert row["delay:worker_main"] == pytest.approx(0.0)
