"""The load of a run over time (`roofline.sim.timeline`): exact bins of a hand-made run, and `simulate --out` on a
trace excerpt."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from roofline.sim.timeline import bin_width_s, format_peaks, load_over_time, peaks

AZURE_2023 = Path(__file__).parent / "data" / "azure-llm-conv-2023-head20.csv"


def _run(two_replicas: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    requests = pd.DataFrame({
        "arrival_s": [0.5, 1.5, 2.5], "num_prompt_tokens": [10, 20, 30], "num_output_tokens": [1, 2, 3],
        "finish_s": [1.0, 3.0, 3.0], "ttft_s": [0.1, 0.2, 0.3], "tpot_s": [math.nan, 0.05, 0.2]})
    # replica 0: [0, 1) at KV 0.5 with 2 waiting, then [1, 3) at 0.25 with none; replica 1: [0, 2) at 1.0, 1 waiting
    steps = pd.DataFrame({"replica": [0, 0], "start_s": [0.0, 1.0], "end_s": [1.0, 3.0], "kv_usage": [0.5, 0.25],
                          "num_running": [1, 2], "num_waiting": [2, 0], "num_output_tokens": [4, 6]})
    if two_replicas:
        steps = pd.concat([steps, pd.DataFrame({"replica": [1], "start_s": [0.0], "end_s": [2.0], "kv_usage": [1.0],
                                                "num_running": [3], "num_waiting": [1], "num_output_tokens": [0]})])
    return requests, steps


def test_each_bin_holds_its_arrivals_finishes_and_time_averages() -> None:
    requests, steps = _run()
    table = load_over_time(requests, steps, slo_ttft_s=0.25, slo_tpot_s=0.1, width_s=2.0)
    assert table["start_s"].tolist() == [0.0, 2.0] and table["end_s"].tolist() == [2.0, 4.0]
    assert table["arrivals_per_s"].tolist() == [1.0, 0.5]
    assert table["offered_prompt_tokens_per_s"].tolist() == [15.0, 15.0]
    assert table["offered_output_tokens_per_s"].tolist() == [1.5, 1.5]
    assert table["finished_per_s"].tolist() == [0.5, 1.0]  # the finishes at 3.0 s in the second bin
    assert table["output_tokens_per_s"].tolist() == [2.0, 3.0]  # by each step's end
    # KV: (0.5 x 1 s + 0.25 x 1 s) / 2 s, then 0.25 for [2, 3) and idle for [3, 4)
    assert table["kv_usage_mean"].tolist() == [0.375, 0.125]
    assert table["kv_usage_max"].tolist() == [0.5, 0.25]  # the step running at 2 s counts in the second bin
    assert table["num_waiting_mean"].tolist() == [1.0, 0.0] and table["num_waiting_max"].tolist() == [2.0, 0.0]
    assert table["num_running_mean"].tolist() == [1.5, 1.0]
    assert table["ttft_p50_s"].tolist() == [pytest.approx(0.15), 0.3]
    assert table["tpot_p50_s"].tolist() == [0.05, 0.2]  # the one-token output has no TPOT
    assert table["ttft_slo_percent"].tolist() == [100.0, 0.0]
    assert table["tpot_slo_percent"].tolist() == [100.0, 0.0]
    assert table["slo_percent"].tolist() == [100.0, 0.0]


def test_replicas_average_their_kv_usage_and_add_their_queues() -> None:
    requests, steps = _run(two_replicas=True)
    table = load_over_time(requests, steps, width_s=2.0)
    assert table["kv_usage_mean"].tolist() == [(0.375 + 1.0) / 2, 0.125 / 2]
    assert table["kv_usage_max"].tolist() == [1.0, 0.25]
    assert table["num_waiting_mean"].tolist() == [2.0, 0.0]
    assert "slo_percent" not in table.columns  # no SLOs given


def test_the_bins_of_a_run_are_at_most_sixty_of_a_round_width() -> None:
    assert [bin_width_s(s) for s in (3.0, 300.0, 3600.0, 3601.0, 86400.0, 7 * 86400.0)] == [
        0.1, 5.0, 60.0, 120.0, 1800.0, 10800.0]
    requests, steps = _run()
    table = load_over_time(requests, steps)  # a 3 s run: 0.1 s bins
    assert len(table) == 30 and table["arrivals_per_s"].sum() * 0.1 == pytest.approx(3)


def test_peaks_name_the_busiest_bin_and_the_lowest_attainment() -> None:
    requests, steps = _run()
    summary = peaks(load_over_time(requests, steps, slo_ttft_s=0.25, width_s=2.0))
    assert summary == {"bin_s": 2.0, "num_bins": 2, "peak_arrivals_per_s": {"value": 1.0, "at_s": 0.0},
                       "peak_kv_usage": {"value": 0.5, "at_s": 0.0}, "peak_num_waiting": {"value": 2.0, "at_s": 0.0},
                       "lowest_slo_percent": {"value": 0.0, "at_s": 2.0}}
    assert format_peaks(summary) == (
        "over time (2 s bins; --out: load_over_time.csv): busiest 1.00 req/s at 0 s, KV cache up to 50% at 0 s, "
        "up to 2 waiting at 0 s; lowest SLO attainment 0.0% (requests arriving at 2 s)")


def test_simulate_writes_the_load_over_time_of_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from roofline.cli import main

    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert main(["simulate", "--workload", str(AZURE_2023), "--slo-ttft-s", "0.05", "--out", str(out)]) == 0
        runs.append(out)
    printed = capsys.readouterr().out
    assert "over time (0.5 s bins; --out: load_over_time.csv): busiest 6.00 req/s at 8 s" in printed  # 8.25, 8.34, 8.47 s
    table = pd.read_csv(runs[0] / "load_over_time.csv")
    assert np.isclose(table["arrivals_per_s"].sum() * 0.5, 20)  # the excerpt's 20 requests, 13 s of arrivals
    assert table["start_s"].iloc[0] == 0.0 and set(table["slo_percent"].dropna()) <= set(np.linspace(0, 100, 101))
    for name in ("load_over_time.csv", "load_over_time.png"):  # the same run, the same bytes
        assert (runs[0] / name).read_bytes() == (runs[1] / name).read_bytes()


def _reference_integral(start: np.ndarray, end: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """One replica's signal integrated as the table computed it before its sort was shared: sorted, its breaks and
    levels stacked, interpolated."""
    order = np.argsort(start, kind="stable")
    start, end, values = start[order], end[order], values[order]
    after = np.cumsum(values * (end - start))
    before = after - values * (end - start)
    return np.interp(at, np.column_stack((start, end)).ravel(), np.column_stack((before, after)).ravel(), left=0.0,
                     right=float(after[-1]))


def test_three_replicas_steps_out_of_order_average_as_each_alone() -> None:
    # Steps of three replicas interleaved out of start order (each replica's own steps back to back): every mean the
    # same floats as each replica integrated alone, and close to the overlaps summed bin by bin.
    rng = np.random.default_rng(4)
    parts = []
    for r in range(3):
        ends = np.cumsum(rng.uniform(0.01, 0.3, 400))
        starts = np.concatenate(([0.0], ends[:-1])) + rng.uniform(0, 0.005, 400) * (rng.random(400) < 0.5)
        parts.append(pd.DataFrame({"replica": r, "start_s": starts, "end_s": ends, "kv_usage": rng.random(400),
                                   "num_running": rng.integers(0, 50, 400), "num_waiting": rng.integers(0, 9, 400),
                                   "num_output_tokens": rng.integers(0, 50, 400)}))
    steps = pd.concat(parts).sample(frac=1.0, random_state=1).reset_index(drop=True)
    requests = pd.DataFrame({"arrival_s": [0.0, 5.0], "num_prompt_tokens": [1, 2], "num_output_tokens": [1, 2],
                             "finish_s": [1.0, 9.0], "ttft_s": [0.1, 0.2], "tpot_s": [math.nan, 0.1]})
    table = load_over_time(requests, steps, width_s=2.0)
    edges = np.append(table["start_s"], table["end_s"][-1])
    for name in ("kv_usage", "num_running", "num_waiting"):
        total = np.zeros(len(edges) - 1)
        brute = np.zeros(len(edges) - 1)
        for r in range(3):
            mine = steps[steps["replica"] == r]
            start, end = mine["start_s"].to_numpy(), mine["end_s"].to_numpy()
            signal = mine[name].to_numpy(dtype=float)
            total += np.diff(_reference_integral(start, end, signal, edges)) / 2.0
            overlap = np.clip(np.minimum(end[:, None], edges[None, 1:]) - np.maximum(start[:, None], edges[None, :-1]),
                              0, None)
            brute += (signal[:, None] * overlap).sum(axis=0) / 2.0
        expected = total / 3 if name == "kv_usage" else total
        assert table[f"{name}_mean"].tobytes() == expected.tobytes()
        assert table[f"{name}_mean"] == pytest.approx(brute / 3 if name == "kv_usage" else brute, rel=1e-9)
    # the maxima: the highest value of any step overlapping the bin
    for name in ("kv_usage", "num_waiting"):
        start, end = steps["start_s"].to_numpy(), steps["end_s"].to_numpy()
        signal = steps[name].to_numpy(dtype=float)
        running = (start[:, None] < edges[None, 1:]) & (end[:, None] > edges[None, :-1])
        assert table[f"{name}_max"].tolist() == np.where(running, signal[:, None], 0.0).max(axis=0).tolist()
