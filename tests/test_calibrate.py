"""`roofline calibrate`: fitting on step traces with a held-out workload, on operator tables split by shape,
and the calibrated profile it writes.

The "measured" traces are simulated on a known profile (the truth); calibration starts from a profile with
two parameters off and must find values that predict both the fitted and the held-out workload.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from profiles import TEST_CPU_PROFILE

from roofline.calibration.calibrate import (
    DEFAULT_TRACE_PARAMS,
    EXERCISED_MIN_STEPS,
    calibrate_on_op_tables,
    calibrate_on_traces,
    check_params,
    fit_rows,
    split_by_shape,
)
from roofline.calibration.fit import predict_table
from roofline.calibration.traces import load_trace
from roofline.cli import main
from roofline.commands.calibrate import format_report
from roofline.cost.hardware import load_profile
from roofline.cost.kernels import kernel_family
from roofline.errors import UserError

TRUTH = TEST_CPU_PROFILE
# The profile calibration starts from: GEMM efficiency and per-step overhead are off.
START = {**TRUTH, "efficiency": {"gemm_compute_efficiency": 0.2, "memory_efficiency": 0.7},
         "executor": {"mode": "eager", "kernel_launch_us": 5.0, "step_overhead_us": 4000.0}}
PARAMS = ["efficiency.gemm_compute_efficiency", "executor.step_overhead_s"]


def simulate(out: Path, profile: Path, input_len: int, output_len: int, rate: str) -> Path:
    assert main(["simulate", "--model", "llama-156m", "--hardware", str(profile), "--input-len", str(input_len),
                 "--output-len", str(output_len), "--num-requests", "8", "--request-rate", rate,
                 "--max-num-seqs", "4", "--max-num-batched-tokens", "96", "--num-gpu-blocks-override", "200",
                 "--max-model-len", "256", "--out", str(out), "--json"]) == 0
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("calibrate")
    (root / "truth.yaml").write_text(yaml.safe_dump(TRUTH, sort_keys=False))
    (root / "start.yaml").write_text(yaml.safe_dump(START, sort_keys=False))
    return {"truth": root / "truth.yaml", "start": root / "start.yaml", "root": root,
            "a": simulate(root / "a", root / "truth.yaml", input_len=40, output_len=6, rate="20"),
            "b": simulate(root / "b", root / "truth.yaml", input_len=24, output_len=12, rate="5")}


def test_fit_on_one_workload_predicts_the_other(setup: dict[str, Path]) -> None:
    report = calibrate_on_traces(load_profile(setup["start"]), [load_trace(setup["a"])], [load_trace(setup["b"])],
                                 PARAMS, prior_scale=0.0)  # noise-free data: the fit alone recovers the truth
    train, test = report.error["train"], report.error["test"]
    assert train["before"]["median_abs_rel_err"] > 0.1 and test["before"]["median_abs_rel_err"] > 0.1
    assert train["after"]["median_abs_rel_err"] < 0.01
    assert test["after"]["p90_abs_rel_err"] < 0.01
    assert report.parameters["efficiency.gemm_compute_efficiency"]["after"] == pytest.approx(0.8, rel=0.05)
    assert report.parameters["executor.step_overhead_s"]["after"] == pytest.approx(1e-3, rel=0.05)
    assert [d["trace"] for d in report.fitted_on] == [str(setup["a"])]
    assert [d["trace"] for d in report.held_out] == [str(setup["b"])]


def test_cli_writes_a_calibrated_profile_that_records_the_fit(setup: dict[str, Path], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # 2023-11-14 UTC
    args = ["calibrate", "--hardware", str(setup["start"]), "--trace", str(setup["a"]),
            "--test-trace", str(setup["b"]), "--params", ",".join(PARAMS), "--prior-scale", "0"]
    assert main([*args, "--out", str(tmp_path / "one.yaml")]) == 0
    (tmp_path / "first.yaml").write_bytes((tmp_path / "one.yaml").read_bytes())
    assert main([*args, "--out", str(tmp_path / "one.yaml")]) == 0
    assert (tmp_path / "one.yaml").read_bytes() == (tmp_path / "first.yaml").read_bytes()
    hw = load_profile(tmp_path / "one.yaml")
    assert hw.efficiency.gemm_compute_efficiency == pytest.approx(0.8, rel=0.05)
    assert hw.executor.step_overhead_s == pytest.approx(1e-3, rel=0.05)
    assert hw.efficiency.memory_efficiency == 0.7  # not fitted: unchanged
    cal = hw.calibration
    assert cal["date"] == "2023-11-14" and cal["source"] == "step_traces"
    assert cal["command"].startswith(f"roofline calibrate --hardware {setup['start']} --out {tmp_path / 'one.yaml'}")
    assert cal["fitted_on"][0]["trace"] == str(setup["a"]) and cal["held_out"][0]["trace"] == str(setup["b"])
    assert cal["error"]["test"]["after"]["median_abs_rel_err"] < 0.01
    assert set(cal["parameters"]) == set(PARAMS)
    data = yaml.safe_load((tmp_path / "one.yaml").read_text())
    assert "fitted by roofline calibrate" in data["sources"]["executor.step_overhead_us"]


def test_the_prior_pulls_every_parameter_toward_the_starting_profile(setup: dict[str, Path]) -> None:
    start = load_profile(setup["start"])
    free, held = (calibrate_on_traces(start, [load_trace(setup["a"])], [], PARAMS, prior_scale=scale).parameters
                  for scale in (0.0, 10.0))
    moved = {n: tuple(abs(math.log(fit[n]["after"] / fit[n]["before"])) for fit in (free, held)) for n in PARAMS}
    assert all(h <= f + 1e-9 for f, h in moved.values())
    assert all(h < 0.5 * f for f, h in moved.values() if f > 0.05)


def test_fit_rows_samples_evenly_and_deterministically() -> None:
    assert fit_rows(5, 10).tolist() == [0, 1, 2, 3, 4]
    rows = fit_rows(1000, 50)
    assert len(rows) == len(set(rows.tolist())) == 50 and np.all(np.diff(rows) > 0)
    assert rows.tolist() == fit_rows(1000, 50).tolist()


def test_unknown_parameter_is_a_user_error() -> None:
    with pytest.raises(UserError, match="--params: unknown parameter 'efficiency.nope'"):
        check_params(["efficiency.nope"])


def test_cli_rejects_test_traces_with_op_tables(setup: dict[str, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--hardware", str(setup["start"]), "--out", str(tmp_path / "x.yaml"),
                 "--op-tables", "h100_sxm", "--test-trace", str(setup["b"])]) == 2
    assert "--test-trace" in capsys.readouterr().err
    assert not (tmp_path / "x.yaml").exists()


def test_split_by_shape_never_shares_a_shape() -> None:
    frame = pd.DataFrame({"shape_key": [f"{i % 7}" for i in range(40)], "x": range(40)})
    train, test = split_by_shape(frame)
    assert set(train.shape_key).isdisjoint(set(test.shape_key))
    assert len(train) + len(test) == 40 and train.shape_key.nunique() == 3


def test_op_table_fit_generalizes_to_held_out_shapes() -> None:
    """GEMM rows timed by a known profile; the fit starts from other GEMM efficiencies."""
    truth = load_profile("h100-sxm")
    ms, shapes = [1, 16, 256, 4096], [(n, k) for n in (1024, 4096, 8192, 14336) for k in (1024, 4096, 8192)]
    frame = pd.DataFrame([{"m": m, "n": n, "k": k, "dtype": "bf16", "shape_key": f"{n}/{k}"}
                          for n, k in shapes for m in ms])
    frame["measured_s"] = predict_table(truth, "gemm", frame)
    start = load_profile("h100-sxm")
    start = replace(start, efficiency=replace(start.efficiency, gemm_compute_efficiency=0.4, memory_efficiency=0.4))
    report = calibrate_on_op_tables(start, {"gemm": frame}, source="synthetic")
    assert report.error["test"]["before"]["median_abs_rel_err"] > 0.1
    assert report.error["test"]["after"]["median_abs_rel_err"] < 0.03
    assert {d["kind"] for d in report.fitted_on} == {"gemm"}
    assert report.fitted_on[0]["num_shapes"] == 6 and report.held_out[0]["num_shapes"] == 6


@pytest.mark.parametrize("profile,family", [("h100-sxm", "hopper"), ("b200", "blackwell")])
def test_op_table_fit_says_which_moe_parameters_another_fit_gives(profile: str, family: str) -> None:
    """Hopper's and Blackwell's MoE parameters come from the family's joint fit (`KernelFamily.fitted_elsewhere`, stage
    moe_joint): a calibration on MoE rows leaves them as shipped and its report says so, parameter by parameter, with
    the reason."""
    truth = load_profile(profile)
    frame = pd.DataFrame([{"num_tokens": t, "hidden_size": h, "inter_size": i, "topk": 8, "num_experts": 128,
                           "dtype": "bf16", "distribution": "balanced", "shape_key": f"{h}/{i}"}
                          for t in (1, 64, 1024) for h, i in ((2048, 768), (4096, 1536), (2880, 2880), (7168, 2048))])
    frame["measured_s"] = predict_table(truth, "moe", frame) * 1.3
    report = calibrate_on_op_tables(truth, {"moe": frame}, source="synthetic")
    held = {n: v for n, v in report.parameters.items() if not v.get("fitted", True)}
    assert set(held) == {f"efficiency.{p}" for p in kernel_family(family).fitted_elsewhere}
    assert all(v["before"] == v["after"] and f"--op-tables --family {family}" in v["held"] for v in held.values())
    text = format_report(report)
    assert "efficiency.moe_fixed_s" in text and "held: the family profile's value, fitted jointly" in text


def test_a_fitted_trace_cannot_be_held_out(setup: dict[str, Path]) -> None:
    with pytest.raises(UserError, match="held-out data must be another workload"):
        calibrate_on_traces(load_profile(setup["start"]), [load_trace(setup["a"])], [load_trace(setup["a"])], PARAMS)


def test_default_fit_holds_the_parameters_the_steps_do_not_exercise(setup: dict[str, Path], tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    start = load_profile(setup["start"])
    report = calibrate_on_traces(start, [load_trace(setup["a"])], [load_trace(setup["b"])])
    params = report.parameters
    assert set(params) == set(DEFAULT_TRACE_PARAMS)
    efficiencies = [n for n in params if n.startswith("efficiency.")]
    assert all(0.0 <= params[n]["exercised_steps"] <= 1.0 for n in efficiencies)
    assert all(params[n]["exercised_steps"] is None and params[n]["fitted"] for n in params if n not in efficiencies)
    held = [n for n in efficiencies if not params[n]["fitted"]]
    # 40-token prompts: attention is a sliver of every step; the GEMMs carry the prefills
    assert "efficiency.attention_compute_efficiency" in held
    assert params["efficiency.gemm_compute_efficiency"]["fitted"]
    for name in held:
        assert params[name]["exercised_steps"] < EXERCISED_MIN_STEPS
        assert params[name]["after"] == params[name]["before"]
    named = calibrate_on_traces(start, [load_trace(setup["a"])], [], list(DEFAULT_TRACE_PARAMS)).parameters
    assert all(v["fitted"] for v in named.values())  # named parameters are all fitted

    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--hardware", str(setup["start"]), "--trace", str(setup["a"]), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "efficiency.attention_compute_efficiency" in text and "held: moves >= 5% of the step time in" in text
    # Progress on stderr while it fits: what is fitted on how much, then the iterations, each line timed.
    progress = captured.err.splitlines()
    assert re.match(r"roofline calibrate: \[\d+m\d\ds\] ", progress[0]) and "samples: coarse search done" in progress[0]
    assert any("iteration 1/" in line for line in progress[1:])
    sources = yaml.safe_load(out.read_text())["sources"]
    assert "efficiency.attention_compute_efficiency" not in sources
    assert "fitted by roofline calibrate" in sources["efficiency.gemm_compute_efficiency"]


@pytest.mark.slow  # reads every operator table of b200_sxm
def test_the_op_tables_mark_nemotron_h_experts_ungated() -> None:
    """The MoE tables carry no activation: the package's Nemotron-H configs name the shapes whose experts the collector
    runs without a gate (relu2_no_mul), read as `gated` False; every other shape is gated."""
    pytest.importorskip("aiconfigurator_core")
    from roofline.calibration.op_tables import load_op_tables, nongated_moe_shapes

    nemotron = {(1024, 2688, 22, 512), (2048, 5120, 22, 512), (2688, 1856, 6, 128)}  # Super, Ultra, Nano (latent)
    assert nongated_moe_shapes() == nemotron
    moe = load_op_tables("b200_sxm")["moe"]
    shapes = list(zip(moe.hidden_size, moe.inter_size, moe.topk, moe.num_experts))
    assert list(moe.gated) == [s not in nemotron for s in shapes]
    assert (~moe.gated).any() and moe.gated.any()
