"""Issue 37's judgement table (benchmarks/ground_truth/vllm_serve_judge_table.py): each figure met or missed under
its own spread and another floor's, counted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"))

import vllm_serve_judge_table as judge  # noqa: E402


def figure(error_pct: float, spread_pct: float) -> dict[str, float]:
    return {"measured": 100.0, "predicted": 100.0 + error_pct, "error_pct": error_pct, "spread_pct": spread_pct}


def test_each_figure_is_met_within_its_floors_spread_plus_ten_points() -> None:
    row = {"cell": "rate20-completions-a1", "mean_ttft_ms": figure(-15.0, 4.0), "median_ttft_ms": figure(-14.0, 4.0),
           "mean_tpot_ms": figure(+10.0, 0.0), "output_throughput": figure(+0.5, 0.2)}
    floor = {"rate20-completions-a1": {"mean_ttft_ms": 5.0, "median_ttft_ms": 3.9, "mean_tpot_ms": 0.0,
                                       "output_throughput": 0.0}}
    text, counts = judge.table([row], {"sessions": floor}, also={"rate20-completions-a1": row})
    # own: -15 > 14, -14 <= 14, 10 <= 10, 0.5 <= 10.2; sessions: -15 <= 15, -14 > 13.9
    assert counts == {"own": 3, "sessions": 3}
    lines = text.splitlines()
    assert len(lines) == 2 + 4 and lines[2].count("**miss**") == 1 and lines[3].count("**miss**") == 1
    assert lines[2].endswith("| -15.0 |")  # the other simulation's error


def test_a_missing_or_wrong_file_is_refused_in_one_line(tmp_path, monkeypatch, capsys) -> None:
    wrong = tmp_path / "index.json"
    wrong.write_text('{"runs": []}')
    for argv, said in ((["--sim", str(tmp_path / "none.json")], "argument --sim: no such file"),
                       (["--sim", str(wrong)], f"--sim {wrong}: not a vllm_serve_sim.py --out file")):
        monkeypatch.setattr(sys, "argv", ["vllm_serve_judge_table.py", *argv])
        with pytest.raises(SystemExit) as stop:
            judge.main()
        assert stop.value.code == 2
        assert said in capsys.readouterr().err.splitlines()[-1]


def test_median_error_and_bias_by_api_server_count() -> None:
    rows = [{"cell": "burst100-chat-a2", "mean_ttft_ms": figure(-30.0, 1.0), "median_ttft_ms": figure(-10.0, 1.0),
             "mean_tpot_ms": figure(+4.0, 1.0), "output_throughput": figure(+2.0, 1.0)},
            {"cell": "rate20-chat-a2", "mean_ttft_ms": figure(-20.0, 1.0), "median_ttft_ms": figure(-20.0, 1.0),
             "mean_tpot_ms": figure(-6.0, 1.0), "output_throughput": figure(0.0, 1.0)},
            {"cell": "rate20-chat-a1", "mean_ttft_ms": figure(5.0, 1.0), "median_ttft_ms": figure(7.0, 1.0),
             "mean_tpot_ms": figure(1.0, 1.0), "output_throughput": figure(-1.0, 1.0)}]
    groups = judge.errors_by_count(rows)
    assert groups["a2 TTFT"] == {"figures": 4, "median_abs_error_pct": 20.0, "bias_pct": -20.0}
    assert groups["a2 all"] == {"figures": 8, "median_abs_error_pct": 8.0, "bias_pct": -8.0}
    assert groups["a1 TPOT"] == {"figures": 1, "median_abs_error_pct": 1.0, "bias_pct": 1.0}
