"""`roofline simulate` end to end: the default run, --json, --out tables (byte-identical for the same seed),
bad input as one line and exit 2, no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from engine.core.trace import read_trace
from roofline.cli import main

# Multi-turn conversations behind shared prefixes, shortened to keep the test fast (a 156M model would get
# 570,000 KV blocks on an H100, whose pool takes seconds to build: 2,000 are plenty here).
SMALL = ["--model", "llama-156m", "--hardware", "h100-sxm", "--workload", "multi-turn-chat", "--num-requests", "40",
         "--request-rate", "20", "--output-len", "12", "--max-model-len", "4096", "--num-gpu-blocks-override", "2000"]


def test_no_arguments_runs_the_default_and_prints_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate"]) == 0
    out = capsys.readouterr().out
    assert "llama-3.1-8b on 1 replica of 1 x h100-sxm (1 GPU per replica, 1 GPU in all)" in out and "sharegpt-chat" in out
    assert "TTFT" in out and "TPOT" in out and "req/s" in out


def test_json_summary_with_slos(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *SMALL, "--json", "--slo-ttft-s", "0.2", "--slo-tpot-s", "0.02", "--warmup-s", "1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["num_requests"] == 40 and summary["model"] == "llama-156m"
    assert summary["window_s"][0] == 1.0
    assert 0 <= summary["slo"]["both_percent_meeting"] <= 100
    assert summary["kv_cache"]["num_gpu_blocks"] > 0
    assert set(summary["latency"]) == {"ttft_s", "tpot_s", "itl_s", "e2e_s", "queueing_s"}


def test_max_concurrency_caps_requests_in_flight_and_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *SMALL, "--request-rate", "inf", "--max-concurrency", "4", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["max_concurrency"] == 4


def test_out_writes_tables_byte_identical_for_the_same_seed(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("a", "b"):
        assert main(["simulate", *SMALL, "--num-replicas", "2", "--out", str(tmp_path / name)]) == 0
    capsys.readouterr()
    files = ("requests.csv", "steps.parquet", "sequences.parquet", "run.json", "timeseries.csv", "summary.json")
    for file in files:
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes(), file
    assert main(["simulate", *SMALL, "--seed", "5", "--out", str(tmp_path / "c")]) == 0
    assert (tmp_path / "a" / "requests.csv").read_bytes() != (tmp_path / "c" / "requests.csv").read_bytes()


def test_step_table_has_trace_columns_and_a_breakdown_that_sums_to_the_prediction(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *SMALL, "--out", str(tmp_path)]) == 0
    steps, metadata = read_trace(tmp_path)  # validates the step-trace schema
    assert metadata.source == "simulator" and metadata.model_name == "llama-156m"
    assert metadata.device["hardware_profile"] == "h100-sxm" and metadata.extra["offered_load"]["request_rate"] == 20.0
    assert metadata.engine_config.max_model_len == 4096 and metadata.engine_config.num_kv_blocks == int(
        steps["num_kv_blocks_total"].iloc[0]) + 1
    for column in ("replica", "request_ids", "predicted_s"):
        assert column in steps.columns
    ops = steps[[c for c in steps.columns if c.startswith("op_")]]
    assert len(ops.columns) > 5
    assert (ops.sum(axis=1) - steps["predicted_s"]).abs().max() < 1e-9
    assert (steps["num_seqs"] == steps["query_lens"].map(len)).all()
    requests = pd.read_csv(tmp_path / "requests.csv")
    assert len(requests) == 40 and requests["num_prefix_hit_tokens"].sum() > 0
    timeseries = pd.read_csv(tmp_path / "timeseries.csv")
    assert list(timeseries.columns) == ["time_s", "replica", "num_running", "num_waiting", "num_kv_blocks_used",
                                        "kv_usage"]


@pytest.mark.parametrize("argv, flag", [
    (["--request-rate", "-1"], "--request-rate"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
    (["--num-replicas", "0"], "--num-replicas"),
    (["--model", "no-such-model"], "--model"),
    (["--workload", "no-such-workload"], "--workload"),
    (["--warmup-s", "-1"], "--warmup-s"),
    (["--max-concurrency", "0"], "--max-concurrency"),
    (["--model", "llama-3.1-70b"], "does not fit"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--num-requests", "5", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]


def test_simulate_never_imports_torch() -> None:
    code = ("import sys; from roofline.cli import main; main(['simulate', '--num-requests', '3', '--json']); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
