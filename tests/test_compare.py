"""`roofline compare`: error statistics, step kinds, the per-step and end-to-end comparison, plots and CLI.

Traces are written by the simulator on a small CPU-like profile, so "measured" equals what that profile
predicts: comparing a trace with its own profile must give zero error, step by step and end to end.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from profiles import TEST_CPU_PROFILE

from roofline.calibration.compare import compare_trace, error_stats, step_kinds, write_report
from roofline.calibration.traces import load_trace
from roofline.cli import main
from roofline.cost.hardware import load_profile
from roofline.errors import UserError

CPU_PROFILE = TEST_CPU_PROFILE


def write_profile(path: Path, **changes: dict) -> Path:
    data = {**CPU_PROFILE, **changes}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def simulate(out: Path, profile: Path, input_len: int, output_len: int, rate: str, num_requests: int = 10,
             model: str = "llama-156m") -> Path:
    assert main(["simulate", "--model", model, "--hardware", str(profile), "--input-len", str(input_len),
                 "--output-len", str(output_len), "--num-requests", str(num_requests), "--request-rate", rate,
                 "--max-num-seqs", "4", "--max-num-batched-tokens", "96", "--num-gpu-blocks-override", "200",
                 "--max-model-len", "256",
                 "--out", str(out), "--json"]) == 0
    return out


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(profile, trace simulated on it): prefill chunks, decodes and mixed steps."""
    root = tmp_path_factory.mktemp("compare")
    profile = write_profile(root / "cpu.yaml")
    return profile, simulate(root / "trace", profile, input_len=40, output_len=6, rate="20")


def test_error_stats_exact() -> None:
    stats = error_stats(np.array([1.1, 0.5, 2.0]), np.array([1.0, 1.0, 1.0]))
    assert stats["num_steps"] == 3
    assert stats["median_abs_rel_err"] == pytest.approx(0.5)
    assert stats["p90_abs_rel_err"] == pytest.approx(0.9)  # linear interpolation between 0.5 and 1.0
    assert stats["max_abs_rel_err"] == pytest.approx(1.0)
    assert stats["mean_rel_err"] == pytest.approx(0.2)


def test_error_stats_of_nothing_is_none() -> None:
    assert error_stats(np.array([]), np.array([]))["median_abs_rel_err"] is None


def test_step_kinds() -> None:
    steps = pd.DataFrame({"num_prefill_tokens": [32, 0, 10], "num_decode_tokens": [0, 4, 2]})
    assert step_kinds(steps).tolist() == ["prefill", "decode", "mixed"]


def test_own_profile_gives_zero_error_per_step_and_end_to_end(traced: tuple[Path, Path]) -> None:
    profile, trace_dir = traced
    result = compare_trace(load_trace(trace_dir), load_profile(profile))
    s = result.summary
    assert s["num_steps"] == len(result.table) > 0
    assert s["max_abs_rel_err"] == pytest.approx(0.0, abs=1e-9)
    kinds = s["by_kind"]
    assert all(kinds[k]["num_steps"] > 0 for k in ("prefill", "decode", "mixed"))
    assert sum(kinds[k]["num_steps"] for k in kinds) == s["num_steps"]
    for metric in ("mean_ttft_s", "mean_tpot_s", "output_tokens_per_s"):
        assert s["end_to_end"][metric]["rel_err"] == pytest.approx(0.0, abs=1e-9), metric


def test_slower_profile_over_predicts(traced: tuple[Path, Path], tmp_path: Path) -> None:
    _, trace_dir = traced
    slow = write_profile(tmp_path / "slow.yaml",
                         executor={"mode": "eager", "kernel_launch_us": 5.0, "step_overhead_us": 5000.0})
    s = compare_trace(load_trace(trace_dir), load_profile(slow)).summary
    assert s["mean_rel_err"] > 0 and s["median_abs_rel_err"] > 0.01
    assert s["end_to_end"]["mean_tpot_s"]["rel_err"] > 0
    assert s["end_to_end"]["output_tokens_per_s"]["rel_err"] < 0


def test_noise_floor_is_the_error_of_per_shape_medians(traced: tuple[Path, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Simulated step times depend on shape only (and context within a bucket), so a trace's own per-shape
    medians predict it almost exactly; a repeat run on a slower machine predicts it too slow."""
    profile, trace_dir = traced
    trace = load_trace(trace_dir)
    floor = compare_trace(trace, load_profile(profile), e2e=False, repeat=trace).summary["noise_floor"]
    own = floor["in_run"]
    assert 0 < own["num_steps"] <= own["num_steps_in_trace"] == len(trace.steps)
    assert 0.0 <= own["median_abs_rel_err"] < 0.02
    assert floor["across_runs"] == own
    slow = write_profile(tmp_path / "slow.yaml",
                         executor={"mode": "eager", "kernel_launch_us": 5.0, "step_overhead_us": 5000.0})
    slow_trace = simulate(tmp_path / "slow_trace", slow, input_len=40, output_len=6, rate="20")
    across = compare_trace(trace, load_profile(profile), e2e=False,
                           repeat=load_trace(slow_trace)).summary["noise_floor"]["across_runs"]
    assert across["num_steps"] > 0 and across["mean_rel_err"] > 0.05  # predicted slow: the repeat is slower
    assert main(["compare", "--trace", str(trace_dir), "--hardware", str(profile), "--no-end-to-end",
                 "--repeat-trace", str(slow_trace)]) == 0
    assert "noise floor, per-shape medians across runs" in capsys.readouterr().out
    other = simulate(tmp_path / "other", profile, input_len=40, output_len=6, rate="20", model="llama-tiny")
    assert main(["compare", "--trace", str(trace_dir), "--hardware", str(profile), "--repeat-trace", str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--repeat-trace" in err and "llama-tiny" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_old_engine_run_json_loads_the_same_spec_and_dtypes(traced: tuple[Path, Path], tmp_path: Path) -> None:
    """Engine traces written before RunMetadata recorded only torch dtypes (no engine_config dtype): read alike."""
    profile, trace_dir = traced
    sim = load_trace(trace_dir)
    engine_dir = tmp_path / "engine"
    engine_dir.mkdir()
    for name in ("steps.parquet", "sequences.parquet", "requests.csv"):
        (engine_dir / name).write_bytes((trace_dir / name).read_bytes())
    meta = json.loads((trace_dir / "run.json").read_text())
    meta["model"] = dataclasses.asdict(sim.spec)
    meta["dtypes"] = {"weights": "bfloat16", "activations": "bfloat16", "kv_cache": "bfloat16"}
    meta["engine_config"] = {k: v for k, v in meta["engine_config"].items()
                             if k not in ("dtype", "quantization", "kv_cache_dtype")}
    (engine_dir / "run.json").write_text(json.dumps(meta))
    engine = load_trace(engine_dir)
    assert engine.spec == sim.spec and engine.quant == sim.quant
    s = compare_trace(engine, load_profile(profile), e2e=False).summary
    assert s["max_abs_rel_err"] == pytest.approx(0.0, abs=1e-9)


def test_report_files_and_byte_identical_plots(traced: tuple[Path, Path], tmp_path: Path) -> None:
    profile, trace_dir = traced
    result = compare_trace(load_trace(trace_dir), load_profile(profile), e2e=False)
    first = write_report(result, tmp_path / "a")
    second = write_report(result, tmp_path / "b")
    names = sorted(p.name for p in first)
    assert names == ["error_over_time.png", "error_vs_batch_tokens.png", "predicted_vs_measured.png",
                     "step_time_over_time.png", "steps.csv", "summary.json"]
    for a, b in zip(first, second):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert first[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = pd.read_csv(tmp_path / "a" / "steps.csv")
    assert len(table) == result.summary["num_steps"]


def test_cli_json_has_step_errors_at_top_level(traced: tuple[Path, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    profile, trace_dir = traced
    assert main(["compare", "--trace", str(trace_dir), "--hardware", str(profile), "--json",
                 "--out", str(tmp_path / "out")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["median_abs_rel_err"] == pytest.approx(0.0, abs=1e-9)
    assert summary["p90_abs_rel_err"] == pytest.approx(0.0, abs=1e-9)
    assert set(summary["by_kind"]) == {"prefill", "decode", "mixed"}
    assert (tmp_path / "out" / "predicted_vs_measured.png").is_file()


def test_cli_bad_trace_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--trace", str(tmp_path), "--hardware", "h100-sxm"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--trace" in err and "not a step trace" in err


def test_load_trace_rejects_a_bad_model_record(traced: tuple[Path, Path], tmp_path: Path) -> None:
    _, trace_dir = traced
    for name in ("steps.parquet", "sequences.parquet", "requests.csv"):
        (tmp_path / name).write_bytes((trace_dir / name).read_bytes())
    meta = json.loads((trace_dir / "run.json").read_text())
    meta["model"] = 42
    (tmp_path / "run.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match="run.json: model must be the model spec"):
        load_trace(tmp_path)
