"""The host's API-server cost uncertainty and served run-to-run noise (`roofline.cost.host_uncertainty`), as
`roofline simulate --intervals` samples them (`roofline.sim.intervals`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from roofline.cost.hardware import load_profile
from roofline.cost.host_cpu import HostCpu
from roofline.cost.host_uncertainty import read_ratio_quantiles
from roofline.errors import UserError
from roofline.sim.api_server import ApiServerCosts
from roofline.sim.intervals import IntervalSpec, apply_noise, interval_record, not_sampled, with_host_time

CPU_HOST = Path(__file__).resolve().parents[1] / "benchmarks/results/vllm-serve-bench/cpu-host-calibrated.yaml"
LEVELS = [0.1, 0.5, 0.9]


def _host(**extra: object) -> dict:
    return {"cpu_model": "test", "single_thread_speed_relative": 2.0, **extra}


def test_cost_factors_are_drawn_per_term_and_multiply_the_hosts_costs() -> None:
    hw = load_profile("h100-sxm")
    assert hw.host is not None and hw.host.cost_uncertainty is not None and hw.uncertainty is not None
    spec = IntervalSpec(80.0, 8, 0, 1)
    profiles = spec.profiles(hw)
    # the operator kinds' draws are those of the operator uncertainty alone
    assert [p.op_time_factors for p in profiles] == hw.uncertainty.sample(8, 0)
    u = hw.host.cost_uncertainty
    midpoints = (np.arange(8) + 0.5) / 8
    base = ApiServerCosts.for_host(hw.host)
    for name, ratios in u.ratios:
        drawn = sorted(dict(p.host.cost_factors)[name] for p in profiles if p.host is not None)
        expected = np.exp(np.interp(midpoints, u.levels, np.log(ratios)))
        assert drawn == pytest.approx(sorted(expected), rel=1e-5), name
    for p in profiles:
        assert p.host is not None
        costs, factors = ApiServerCosts.for_host(p.host), dict(p.host.cost_factors)
        base = ApiServerCosts.for_host(replace(p.host, cost_factors=()))  # at the sample's host speed
        for field in base.__dataclass_fields__:
            assert getattr(costs, field) == getattr(base, field) * factors.get(field[:-2], 1.0), field
    assert [p.host.cost_factors for p in spec.profiles(hw) if p.host] == [p.host.cost_factors for p in profiles
                                                                          if p.host]
    assert [p.host.cost_factors for p in IntervalSpec(80.0, 8, 1, 1).profiles(hw) if p.host] \
        != [p.host.cost_factors for p in profiles if p.host]


def test_run_to_run_noise_multiplies_the_ttft_and_tpot_figures_only() -> None:
    hw = load_profile(str(CPU_HOST))
    assert hw.uncertainty is None and hw.host is not None and hw.host.run_to_run_noise is not None
    spec = IntervalSpec.from_flags("80", "4", hw, seed=0, workers=1)  # a host-only profile takes --intervals
    noise = spec.noise(hw)
    assert len(noise) == 4 and all(set(f) == {"ttft", "tpot"} for f in noise)
    figures = {"mean_ttft_ms": 10.0, "p99_ttft_ms": 20.0, "mean_tpot_ms": 5.0, "mean_itl_ms": 5.0,
               "request_throughput": 3.0, "ttft_s": 0.5, "median_e2el_ms": None}
    out = apply_noise(figures, {"ttft": 1.25, "tpot": 0.5})
    assert out == {"mean_ttft_ms": 12.5, "p99_ttft_ms": 25.0, "mean_tpot_ms": 2.5, "mean_itl_ms": 5.0,
                   "request_throughput": 3.0, "ttft_s": 0.625, "median_e2el_ms": None}
    assert apply_noise(figures, {}) == figures
    samples = [{"mean_ttft_ms": 10.0} for _ in range(4)]
    record = interval_record({"mean_ttft_ms": 10.0}, [apply_noise(s, f) for s, f in zip(samples, noise)], spec, hw)
    assert [f["run_to_run"] for f in record["factors"]] == noise
    assert record["metrics"]["mean_ttft_ms"]["low"] < 10.0 < record["metrics"]["mean_ttft_ms"]["high"]
    assert not any("run-to-run" in line for line in not_sampled(hw))
    assert any("run-to-run" in line for line in not_sampled(load_profile("h100-sxm")))


def test_a_profile_without_any_uncertainty_refuses_intervals() -> None:
    hw = load_profile("mi300x")
    with pytest.raises(UserError, match=r"--intervals: hardware profile mi300x states no uncertainty"):
        IntervalSpec.from_flags("80", None, replace(hw, host=None), seed=0)


@pytest.mark.parametrize(("field", "section", "message"), [
    ("api_server_cost_uncertainty", {"levels": LEVELS, "resample_over_fit": {"bogus": [0.9, 1.0, 1.1]}},
     r"host.api_server_cost_uncertainty.resample_over_fit.bogus: not allowed; allowed: request, "),
    ("api_server_cost_uncertainty", {"levels": LEVELS, "resample_over_fit": {"request": [1.1, 1.0, 0.9]}},
     r"host.api_server_cost_uncertainty.resample_over_fit.request: must be 3 positive ratios"),
    ("api_server_cost_uncertainty", {"levels": [0.5, 0.1], "resample_over_fit": {"request": [0.9, 1.0]}},
     r"host.api_server_cost_uncertainty.levels: must be a list of at least 2 increasing probabilities"),
    ("served_run_to_run_noise", {"levels": LEVELS, "run_over_mean": {"itl": [0.9, 1.0, 1.1]}},
     r"host.served_run_to_run_noise.run_over_mean.itl: not allowed; allowed: ttft, tpot"),
    ("served_run_to_run_noise", {"levels": LEVELS},
     r"host.served_run_to_run_noise: missing field 'run_over_mean'"),
    ("served_run_to_run_noise", {"levels": LEVELS, "run_over_mean": {"ttft": [0, 1.0, 1.1]}, "extra": 1},
     r"host.served_run_to_run_noise: unknown field 'extra'"),
])
def test_a_bad_host_uncertainty_is_refused_naming_the_field(field: str, section: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        HostCpu.from_dict(_host(**{field: section}), "p.yaml: host")


def test_the_sampling_is_seeded_per_section() -> None:
    u = read_ratio_quantiles({"levels": LEVELS, "resample_over_fit": {"output_token": [0.8, 1.0, 1.2]}},
                             "api_server_cost_uncertainty", ("request", "output_pass", "output_token"), "h")
    both = read_ratio_quantiles({"levels": LEVELS, "resample_over_fit": {"request": [0.5, 1.0, 2.0],
                                                                         "output_token": [0.8, 1.0, 1.2]}},
                                "api_server_cost_uncertainty", ("request", "output_pass", "output_token"), "h")
    # a term's draws do not depend on which other terms the section states
    assert [dict(f)["output_token"] for f in u.sample(6, 2)] == [dict(f)["output_token"] for f in both.sample(6, 2)]


def test_host_time_factors_scale_the_hosts_speed_and_the_executors_host_terms() -> None:
    hw = load_profile("h100-sxm")
    assert hw.host is not None and hw.host.time_uncertainty is not None
    factors = (("assumed_cpu_speed", 0.8), ("server_cpu_speed", 1.05), ("step_overhead", 1.02),
               ("step_overhead_per_seq", 0.9), ("kernel_launch", 1.1), ("step_gap", 0.95))
    out = with_host_time(hw, factors)
    ex, new = hw.executor, out.executor
    assert out.host is not None and out.host.single_thread_speed_relative == 2.0 * 0.8 * 1.05
    assert new.step_overhead_s == ex.step_overhead_s * 1.02 / (0.8 * 1.05)
    assert new.step_overhead_per_seq_s == ex.step_overhead_per_seq_s * 0.9 / 1.05
    assert new.kernel_launch_s == ex.kernel_launch_s * 1.1 / 1.05
    assert new.step_gap_s == ex.step_gap_s * 0.95
    assert replace(new, step_overhead_s=ex.step_overhead_s, step_overhead_per_seq_s=ex.step_overhead_per_seq_s,
                   kernel_launch_s=ex.kernel_launch_s, step_gap_s=ex.step_gap_s) == ex  # nothing else moves
    # the API server's reference costs are divided by the sampled speed
    assert ApiServerCosts.for_host(out.host).request_s == pytest.approx(ApiServerCosts().request_s / (2.0 * 0.84))
    assert with_host_time(hw, ()) == replace(hw, host=replace(hw.host, time_factors=()))  # no factor: as stated
    # drawn as a Latin hypercube per term, from their own stream: the other sections' draws stay as they were
    profiles = IntervalSpec(80.0, 8, 0, 1).profiles(hw)
    u = hw.host.time_uncertainty
    midpoints = (np.arange(8) + 0.5) / 8
    for name, ratios in u.ratios:
        drawn = sorted(dict(p.host.time_factors)[name] for p in profiles if p.host is not None)
        assert drawn == pytest.approx(sorted(np.exp(np.interp(midpoints, u.levels, np.log(ratios)))), rel=1e-5)
    without = replace(hw, host=replace(hw.host, time_uncertainty=None))
    assert [p.op_time_factors for p in profiles] == [p.op_time_factors for p in IntervalSpec(80.0, 8, 0, 1).profiles(
        without)]
    assert [p.host.cost_factors for p in profiles if p.host] == [
        p.host.cost_factors for p in IntervalSpec(80.0, 8, 0, 1).profiles(without) if p.host]
    assert not any("executor step" in line for line in not_sampled(hw))
    assert any("executor step" in line for line in not_sampled(without))


def test_the_families_host_time_uncertainty_is_the_scripts() -> None:
    """Every GPU family file's host.host_time_uncertainty is what its command prints (the documented ranges)."""
    import importlib.util

    from roofline.cost.profile_yaml import read_profile_dict
    from roofline.registry import data_dir

    path = Path(__file__).resolve().parents[1] / "benchmarks/ground_truth/host_time_uncertainty.py"
    spec = importlib.util.spec_from_file_location("host_time_uncertainty", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    section = module.host_section()["host_time_uncertainty"]
    for family in ("hopper", "blackwell", "ampere", "ada"):
        data = read_profile_dict(data_dir("hardware_profiles") / "families" / f"{family}.yaml")
        assert data["host"]["host_time_uncertainty"] == section, family
    # the ranges' ends, as their sources state them (the module docstring)
    assert module.RANGES["assumed_cpu_speed"] == (1.67 / 1.07 / 2.0, 2.4 / 1.07 / 2.0)
    assert module.RANGES["kernel_launch"] == (33 / 40, 44 / 40)


def test_wider_host_time_uncertainty_gives_wider_intervals(tmp_path: Path) -> None:
    """Only the host's speed and executor terms sampled (operator kinds at factor 1, no API-server cost section): a
    wider range of the host's speed gives a wider TTFT interval (the API server's costs scale with it)."""
    import contextlib
    import io
    import json

    import yaml

    from roofline.calibration.uncertainty import LEVELS as LEVELS_ALL
    from roofline.cli import main
    from roofline.cost.uncertainty import KINDS
    from roofline.registry import resolve

    widths = {}
    for name, (low, high) in (("narrow", (0.98, 1.02)), ("wide", (0.6, 1.4))):
        data = yaml.safe_load(resolve("hardware", "h100-sxm").read_text())
        data["uncertainty"] = {"levels": list(LEVELS_ALL), "without_tables": {
            k: {"num_rows": 1, "measured_over_predicted": [1.0] * len(LEVELS_ALL)} for k in KINDS}}
        ratios = [low * (high / low) ** q for q in LEVELS_ALL]
        data["host"] = _host(host_time_uncertainty={
            "levels": list(LEVELS_ALL), "ratio_to_stated": {"assumed_cpu_speed": ratios, "step_overhead": ratios}})
        data["sources"]["host"] = "a test host"
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["simulate", "--model", "llama-3.1-8b", "--num-requests", "20", "--request-rate", "8",
                         "--hardware", str(path), "--intervals", "--interval-samples", "4", "--json"]) == 0
        m = json.loads(out.getvalue())["intervals"]["metrics"]["mean_ttft_ms"]
        widths[name] = (m["high"] - m["low"]) / m["central"]
    assert widths["wide"] > 3 * widths["narrow"] > 0
