"""The client's reads of one pass's chunks (benchmarks/ground_truth/vllm_serve_client_chunks.py): exact parts on
made-up loop waits and chunk stamps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"))

import vllm_serve_client_chunks  # noqa: E402

# Waits: (wall in, wall out, thread CPU in, out, run-queue delay in, out (-1: a poll), events); ns
SELECTS = [
    [0, 1_000_000, 0, 0, 0, 100_000, 1],  # idle 0.9 ms, woken, then 0.1 ms runnable before running: a new group
    [1_010_000, 1_010_000, 10_000, 10_000, -1, -1, 1],  # a poll (callbacks ready): inside the cycle
    [1_070_000, 1_170_000, 70_000, 70_000, 100_000, 120_000, 1],  # 0.1 ms: 20 us runnable, 80 us idle: same group
    [1_250_000, 3_000_000, 150_000, 150_000, 120_000, 120_000, 1],  # idle 1.75 ms: the next group
    [3_100_000, 5_000_000, 220_000, 220_000, 120_000, 120_000, 0],
]
# Chunks: (request, wall, thread CPU in, out, SSE messages, the last wait's index)
CHUNKS = [[1, 950_000, 40_000, 45_000, 1, 1], [2, 1_200_000, 100_000, 110_000, 1, 2],
          [1, 3_050_000, 200_000, 205_000, 2, 3]]


def test_a_pass_group_is_split_into_client_cpu_idle_and_waiting_for_the_core() -> None:
    first, second = vllm_serve_client_chunks.groups(SELECTS, CHUNKS, {1, 2}, 0.3e6)
    # From the wake (1.0 ms less its 0.1 ms run-queue delay) to the last chunk (1.2 ms): 0.3 ms = CPU 70 us (the
    # first cycle) + 30 us (up to the chunk) + idle 80 us + runnable 100 + 20 us
    assert (first["k"], first["requests"], first["span"]) == (2, 2, 300_000)
    assert (first["cpu"], first["idle"], first["not_running"], first["wake_delay"]) == (100_000, 80_000, 120_000,
                                                                                        100_000)
    assert first["first_tokens"] == [(0, 50_000), (1, 300_000)]
    assert (second["k"], second["span"], second["cpu"], second["idle"], second["first_tokens"]) == (1, 50_000, 50_000,
                                                                                                   0, [])


def test_groups_with_an_untimed_request_are_left_out_and_a_short_idle_joins_groups() -> None:
    (second,) = vllm_serve_client_chunks.groups(SELECTS, CHUNKS, {1}, 0.3e6)
    assert second["k"] == 1
    (whole,) = vllm_serve_client_chunks.groups(SELECTS, CHUNKS, {1, 2}, 2e6)  # 1.75 ms idle no longer separates
    assert (whole["k"], whole["requests"], whole["idle"]) == (3, 2, 80_000 + 1_750_000)


def test_cycles_and_the_line() -> None:
    assert vllm_serve_client_chunks.cycles(SELECTS, CHUNKS) == [(1, 70_000, 0), (1, 80_000, 0), (1, 70_000, 0)]
    intercept, slope = vllm_serve_client_chunks.line([1.0, 2.0, 3.0], [1.0, 3.0, 5.0])
    assert (intercept, slope) == pytest.approx((-1.0, 2.0))
    assert vllm_serve_client_chunks.line([2.0, 2.0], [1.0, 3.0]) is None
