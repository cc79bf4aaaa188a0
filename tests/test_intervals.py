"""Prediction intervals: the profile's operator-time uncertainty (`roofline.cost.uncertainty`), the sampled cost
model, and `roofline simulate --intervals` (`roofline.sim.intervals`)."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from roofline.calibration.uncertainty import LEVELS, section_text, write_uncertainty
from roofline.cli import main
from roofline.cost.hardware import load_profile
from roofline.cost.quant import QuantConfig
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepArrays
from roofline.cost.uncertainty import KINDS, OpTimeFactors, chip_uncertainty
from roofline.errors import UserError
from roofline.registry import load_model, resolve

PLAIN = ["simulate", "--model", "llama-3.1-8b", "--num-requests", "20", "--request-rate", "8"]
SIM = PLAIN + ["--intervals", "--interval-samples", "4"]


def _section(spread: float) -> dict:
    """An uncertainty section whose every kind's ratios are exp(spread x the standard normal quantile) at LEVELS."""
    from statistics import NormalDist

    ratios = [float(np.exp(spread * NormalDist().inv_cdf(p))) for p in LEVELS]
    return {"levels": list(LEVELS), "without_tables": {k: {"num_rows": 100, "measured_over_predicted": ratios}
                                                       for k in KINDS}}


def _profile_with(tmp_path: Path, spread: float, name: str) -> Path:
    """h100-sxm with its own uncertainty section (every kind log-normal of `spread`), as a file."""
    data = yaml.safe_load(resolve("hardware", "h100-sxm").read_text())
    data["uncertainty"] = _section(spread)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _run(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def test_every_chip_with_operator_tables_states_its_own_uncertainty() -> None:
    for pid in ("h100-sxm", "h200-sxm", "b200", "b300", "gb200", "a100-80gb-sxm", "l40s"):
        u = load_profile(pid).uncertainty
        assert u is not None and u.levels == LEVELS and u.source.startswith(f"{pid}'s held-out"), pid
        assert set(u.quantiles) >= {"gemm", "attention_prefill", "attention_decode"}, pid
    pooled = load_profile("h100-pcie").uncertainty  # no tables of its own: the family's chips pooled, said so
    assert pooled is not None and "lower bound" in pooled.source
    assert load_profile("mi300x").uncertainty is None


def test_latin_hypercube_takes_each_kind_at_every_stratum_midpoint_once() -> None:
    u = chip_uncertainty(_section(0.2), "x", "test")
    assert u is not None
    samples = u.sample(8, seed=3)
    assert samples == u.sample(8, seed=3) and samples != u.sample(8, seed=4)
    midpoints = (np.arange(8) + 0.5) / 8
    for kind in KINDS:
        drawn = sorted(getattr(s, kind) for s in samples)
        assert drawn == pytest.approx(sorted(u.ratio_at(kind, midpoints)), rel=1e-5)
    # kinds are drawn independently: not all in the same order
    assert len({tuple(np.argsort([getattr(s, k) for s in samples])) for k in KINDS}) > 1


def test_a_section_with_bad_ratios_is_refused_naming_the_field() -> None:
    section = _section(0.1)
    section["without_tables"]["gemm"]["measured_over_predicted"] = [1.0] * (len(LEVELS) - 1)
    with pytest.raises(UserError, match=r"without_tables.gemm.measured_over_predicted"):
        chip_uncertainty(section, "x", "p.yaml")
    with pytest.raises(UserError, match=r"uncertainty.levels"):
        chip_uncertainty({**_section(0.1), "levels": [0.5, 0.2]}, "x", "p.yaml")


def test_factors_multiply_each_kinds_time_and_time_s_agrees_with_cost() -> None:
    spec, hw = load_model("llama-3.1-8b"), load_profile("h100-sxm")
    quant = QuantConfig.from_user(dtype="auto", model_dtype=spec.torch_dtype)
    shape = StepArrays(np.array([512, 1, 1]), np.array([512, 300, 900]), np.array([1, 1, 1]))
    factors = OpTimeFactors(gemm=1.5, attention_prefill=0.5, attention_decode=2.0)
    nominal = StepCostModel(spec, hw, quant).cost(shape)
    sampled_model = StepCostModel(spec, replace(hw, op_time_factors=factors), quant)
    sampled = sampled_model.cost(shape)
    for a, b in zip(nominal.ops, sampled.ops):
        assert b.time_s == pytest.approx(a.time_s * factors.of(a.kind), rel=1e-12), a.name
    assert sampled_model.time_s(shape) == pytest.approx(sampled.total_s, rel=1e-12)
    decodes = StepArrays(np.array([1] * 4), np.array([100, 200, 300, 400]), np.array([1] * 4))
    assert sampled_model.time_s(decodes) == pytest.approx(sampled_model.cost(decodes).total_s, rel=1e-12)
    assert StepCostModel(spec, replace(hw, op_time_factors=OpTimeFactors()), quant).time_s(shape) \
        == StepCostModel(spec, hw, quant).time_s(shape)  # factors of 1: the same floats


def test_wider_uncertainty_gives_wider_intervals(tmp_path: Path) -> None:
    widths = {}
    for name, spread in (("narrow", 0.03), ("wide", 0.3)):
        record = json.loads(_run(SIM + ["--hardware", str(_profile_with(tmp_path, spread, name)), "--json"]))
        m = record["intervals"]["metrics"]
        widths[name] = {k: (m[k]["high"] - m[k]["low"]) / m[k]["central"] for k in ("mean_tpot_ms", "mean_ttft_ms")}
        assert m["mean_tpot_ms"]["central"] == record["vllm_bench"]["mean_tpot_ms"]  # central: the plain run
    for key in ("mean_tpot_ms", "mean_ttft_ms"):
        assert widths["wide"][key] > 3 * widths["narrow"][key] > 0, key


def test_same_seed_same_bytes_whatever_the_number_of_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The samples on 1 (here, one after another), 2 or 3 forked workers, started beside the central run
    (`SampleRuns`), give the same bytes; the central run's figures are the plain run's."""
    import roofline.sim.intervals as intervals

    real = intervals.IntervalSpec.from_flags.__func__  # type: ignore[attr-defined]
    outputs = {}
    for workers in (1, 2, 3):
        monkeypatch.setattr(intervals.IntervalSpec, "from_flags",
                            classmethod(lambda cls, *a, w=workers, **k: replace(real(cls, *a, **k), num_workers=w)))
        outputs[workers] = _run(SIM + ["--json"])
    assert outputs[1] == outputs[2] == outputs[3]
    monkeypatch.undo()
    assert _run(SIM + ["--json"]) == outputs[1]
    assert _run(SIM + ["--json", "--seed", "1"]) != outputs[1]
    plain = json.loads(_run(PLAIN + ["--json"]))
    assert "intervals" not in plain
    record = json.loads(outputs[1])
    assert {k: v for k, v in record.items() if k != "intervals"} == plain  # the plain run, as without --intervals
    text = _run(SIM)
    assert "80 % intervals (4 sampled cost models)" in text and "Mean TPOT (ms):" in text


def test_a_failing_sample_ends_the_run_with_its_error_and_no_worker_left(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    from roofline.sim.intervals import SampleRuns

    def run_one(hw: object) -> dict[str, float | None]:
        raise UserError("sample failed")

    hw = load_profile("h100-sxm")
    runs = SampleRuns(run_one, [hw] * 4, 2)
    with pytest.raises(UserError, match="sample failed"):
        try:
            runs.results()
        finally:
            runs.close()
    assert not multiprocessing.active_children()


def test_save_result_holds_the_intervals(tmp_path: Path) -> None:
    _run(SIM + ["--save-result", "--result-dir", str(tmp_path), "--result-filename", "r.json"])
    record = json.loads((tmp_path / "r.json").read_text())["roofline"]["intervals"]
    assert record["level_percent"] == 80 and record["num_samples"] == 4 and len(record["factors"]) == 4
    assert record["metrics"]["request_throughput"]["low"] <= record["metrics"]["request_throughput"]["high"]
    # the end-to-end error source no operator table holds is named with the result, not only in BENCHMARKS.md
    assert any(n.startswith("the served prefill steps' time") for n in record["not_sampled"])


def test_writing_the_section_replaces_it_and_keeps_every_other_byte(tmp_path: Path) -> None:
    path = tmp_path / "fam.yaml"
    head, tail = "id: fam\nname: x\n", "sources:\n  a: b\n"
    path.write_text(head + tail)
    write_uncertainty(path, _section(0.1))
    assert path.read_text() == head + tail + section_text(_section(0.1))
    path.write_text(head + section_text(_section(0.1)) + tail)
    write_uncertainty(path, _section(0.2))
    assert path.read_text() == head + section_text(_section(0.2)) + tail


def test_mla_and_all_to_all_factors_scale_their_kernels_only() -> None:
    """The `mla` factor multiplies the MLA records (prefill, absorbed decode, W_UK / W_UV) and nothing else, on the
    records' path and on the decode-only fast path alike; `all_to_all` multiplies expert parallelism's exchange."""
    from roofline.cost.expert_parallel import DataParallelMoe
    from roofline.parallel_config import ParallelLayout

    spec, hw = load_model("deepseek-r1"), load_profile("h200-sxm")
    quant = QuantConfig.from_user(dtype="auto", model_dtype=spec.torch_dtype)
    factors = OpTimeFactors(mla=1.25, all_to_all=0.5)
    nominal, sampled_model = StepCostModel(spec, hw, quant, 8), StepCostModel(spec, replace(hw, op_time_factors=factors),
                                                                             quant, 8)
    shape = StepArrays(np.array([512, 1, 1]), np.array([512, 300, 900]), np.array([1, 1, 1]))
    decodes = StepArrays(np.array([1] * 4), np.array([100, 200, 300, 400]), np.array([1] * 4))
    for s in (shape, decodes):
        a, b = nominal.cost(s), sampled_model.cost(s)
        kinds = {op.kind for op in a.ops}
        assert {"mla_decode", "mla_bmm"} <= kinds
        for x, y in zip(a.ops, b.ops):
            want = 1.25 if x.kind.startswith("mla_") else 1.0
            assert y.time_s == pytest.approx(x.time_s * want, rel=1e-12), x.name
        assert sampled_model.time_s(s) == pytest.approx(b.total_s, rel=1e-12)  # the fast path applies it too
    layout = ParallelLayout(8, 1, 8, 8, True)
    a2a = [DataParallelMoe(m, layout, "deepep_low_latency").exchange_s(64) for m in (nominal, sampled_model)]
    assert a2a[0] > 0 and a2a[1] == pytest.approx(0.5 * a2a[0], rel=1e-12)
