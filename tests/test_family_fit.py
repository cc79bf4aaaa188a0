"""`roofline calibrate --op-tables --family F`: the one writer of a family's fitted values (small checks only: a
whole family refit takes minutes: docs/benchmark-history/2026-11-29-params.md)."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from roofline.calibration import moe_fits
from roofline.calibration.family_fit import written_chip
from roofline.calibration.moe_fits import JOINT_FIELDS, fit_joint, predict
from roofline.cli import main
from roofline.cost.hardware import load_profile
from roofline.cost.params import EFFICIENCY_PARAMS, EfficiencyParams
from roofline.cost.profile_yaml import read_profile_dict
from roofline.registry import data_dir


@pytest.mark.parametrize("args,message", [
    (["--op-tables", "--family", "nosuch"], "--family: 'nosuch' is not allowed; allowed: ada, ampere, blackwell, hopper"),
    (["--op-tables", "h100_sxm", "--family", "hopper"], "--family: takes --op-tables without a value"),
    (["--op-tables", "--family", "hopper", "--hardware", "h100-sxm"], "--hardware: not with --family"),
    (["--op-tables", "--hardware", "h100-sxm", "--out", "x.yaml"], "--op-tables: name the system folder"),
    (["--op-tables", "h100_sxm", "--hardware", "h100-sxm", "--out", "x.yaml", "--write"],
     "--write: only with --op-tables --family F"),
    (["--op-tables", "h100_sxm", "--out", "x.yaml"], "--hardware: required (except with --op-tables --family F)"),
])
def test_family_cli_errors_are_one_line(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("pid", ["h100-sxm", "h200-sxm", "b300", "gb200"])
def test_a_chip_as_written_is_the_chip_as_loaded_when_the_fit_returns_the_files_values(pid: str) -> None:
    """`written_chip` (what the MoE stages fit with) reads a family file that is not written yet: given the file's own
    values as the fit's result, it is exactly `load_profile`'s chip."""
    hw = load_profile(pid)
    existing = read_profile_dict(data_dir("hardware_profiles") / "families" / f"{hw.family}.yaml")
    family = EfficiencyParams.from_dict(existing["efficiency"], "family")
    per_chip = {pid: {n: getattr(EfficiencyParams.from_dict({**existing["efficiency"], **section["efficiency"]},
                                                            "chip"), n)
                      for n, p in EFFICIENCY_PARAMS.items() if p.key in section["efficiency"]}
                for pid, section in (existing.get("per_chip") or {}).items()}
    fitted = tuple(n for n, p in EFFICIENCY_PARAMS.items() if p.key in existing["efficiency"])
    assert written_chip(pid, existing, family, fitted, per_chip, {}) == hw
    clock = {pid: {"factor": 1.25}}
    assert written_chip(pid, existing, family, fitted, per_chip, clock).sustained_clock_factor == 1.25


@pytest.mark.slow
def test_joint_moe_fit_recovers_the_values_a_synthetic_table_was_made_with(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two chips' bf16 rows predicted with known parameters (uniform routing: the cheap prediction): the joint fit
    (Nelder-Mead on the median absolute log error over both chips, from one of its starts) finds them again."""
    monkeypatch.setitem(moe_fits.JOINT_STARTS, "none", moe_fits.JOINT_STARTS["none"][1:2])
    truth = {"moe_compute_efficiency": 0.55, "moe_fixed_s": 30e-6}
    chips = {"a": load_profile("h100-sxm"), "b": load_profile("h200-sxm")}
    rows = pd.DataFrame([{"num_tokens": t, "hidden_size": h, "inter": i, "inter_size": i, "topk": 8, "num_experts": 64,
                          "gated": True, "distribution": "balanced", "scheme": "none", "held_out": False}
                         for t in (1, 64, 4096) for h, i in ((4096, 1536),)])
    tables = {name: rows.assign(measured_s=predict(replace(hw, efficiency=replace(hw.efficiency, **truth)), rows,
                                                   "none", routing="uniform")) for name, hw in chips.items()}
    fitted = fit_joint(chips, tables, routing="uniform", schemes=("none",))
    assert list(fitted) == ["none"] and set(fitted["none"]) == {name for name, _, _ in JOINT_FIELDS["none"]}
    assert fitted["none"]["moe_compute_efficiency"] == pytest.approx(0.55, rel=0.01)
    assert fitted["none"]["moe_fixed_s"] == pytest.approx(30e-6, rel=0.01)
