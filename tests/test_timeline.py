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
