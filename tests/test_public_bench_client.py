"""The benchmark client as a one-thread stage (benchmarks/accuracy/public_bench_client.py): its stamps."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "accuracy"))

from public_bench_client import client_stamps, stamped_metrics  # noqa: E402


def test_a_free_client_stamps_each_token_its_cost_after_it_comes() -> None:
    first, last = client_stamps([[1.0, 2.0], [3.0]], np.array([0.0, 0.5]), chunk_s=0.25, request_s=0.125)
    assert first.tolist() == [1.25, 3.25] and last.tolist() == [2.25, 3.25]


def test_a_busy_client_stamps_first_come_first_served_sends_first() -> None:
    # both sent at 0 (0.5 s each), three tokens at 0.25: the sends end at 1.0, the tokens at 1.5, 2.0, 2.5
    first, last = client_stamps([[0.25, 0.25], [0.25]], np.array([0.0, 0.0]), chunk_s=0.5, request_s=0.5)
    assert first.tolist() == [1.5, 2.5] and last.tolist() == [2.0, 2.5]


def test_the_stamped_figures_are_vllms() -> None:
    figures = stamped_metrics([[1.0, 2.0, 3.0], [2.0]], np.array([0.0, 1.0]), chunk_s=0.0, request_s=0.0)
    assert figures == {"mean_ttft_ms": 1000.0, "median_ttft_ms": 1000.0, "mean_tpot_ms": 1000.0,
                       "output_throughput": 4 / 3.0}
