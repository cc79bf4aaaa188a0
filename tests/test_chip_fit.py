"""The one writer of fitted values (`roofline.calibration.profile_writer`) and the per-chip fits behind `roofline
calibrate --op-tables --op OP` (`roofline.calibration.chip_fit`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from test_bad_input import run_cli

from roofline.calibration.profile_writer import profile_text_with, write_profile_values, yaml_number
from roofline.cost.hardware import load_profile
from roofline.registry import data_dir, list_ids, resolve

PROFILES = data_dir("hardware_profiles")
SHIPPED = sorted([resolve("hardware", pid) for pid in list_ids("hardware")]
                 + list((PROFILES / "families").glob("*.yaml")))


def _own_values(text: str) -> tuple[dict, dict, dict]:
    data = yaml.safe_load(text)
    sources = {k: v for k, v in (data.get("sources") or {}).items()
               if k.startswith("efficiency.") or k in ("power_limit", "sustained_clock_factor")}
    top = {k: data[k] for k in ("power_limit", "sustained_clock_factor") if k in data}
    return data.get("efficiency") or {}, sources, top


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_writing_a_profiles_own_values_changes_no_byte(path: Path) -> None:
    text = path.read_text()
    efficiency, sources, top = _own_values(text)
    assert profile_text_with(text, efficiency, sources, top) == text


def test_writer_edits_in_place_appends_new_keys_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "hopper.yaml"
    shutil.copy(PROFILES / "families" / "hopper.yaml", path)  # multi-line single-quoted sources
    before = yaml.safe_load(path.read_text())
    lines_before = path.read_text().splitlines()
    changed = write_profile_values(
        path, {"moe_fp8_block_gemm_factor": 0.5, "mla_decode_fixed_us": 1e-06},
        {"efficiency.moe_fp8_block_gemm_factor": 'new "quoted" source', "efficiency.mla_decode_fixed_us": "added"},
        top={"power_limit": {"after_ms": 4.25, "clock_factor": 0.5}})
    assert changed
    after = yaml.safe_load(path.read_text())
    lines = path.read_text().splitlines()
    # only what was given changed; the edited key kept its place, the new one closes the section
    assert after["efficiency"] == {**before["efficiency"], "moe_fp8_block_gemm_factor": 0.5,
                                   "mla_decode_fixed_us": 1e-06}
    assert list(after["efficiency"]) == list(before["efficiency"]) + ["mla_decode_fixed_us"]
    assert "  mla_decode_fixed_us: 1.0e-06" in lines
    assert after["sources"] == {**before["sources"], "efficiency.moe_fp8_block_gemm_factor": 'new "quoted" source',
                                "efficiency.mla_decode_fixed_us": "added"}
    assert after["power_limit"] == {"after_ms": 4.25, "clock_factor": 0.5}
    start = lines.index("sources:")
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    assert lines[0] == lines_before[0] and lines[end - 1] == '  efficiency.mla_decode_fixed_us: "added"'
    assert lines[end:] == lines_before[len(lines_before) - (len(lines) - end):]  # the sections after sources: kept
    # the same values again: no byte changes
    text = path.read_text()
    assert not write_profile_values(path, {"moe_fp8_block_gemm_factor": 0.5}, {}, {"power_limit": after["power_limit"]})
    assert path.read_text() == text


@pytest.mark.parametrize("value, text", [(1e-06, "1.0e-06"), (2.123e-12, "2.123e-12"), (0.314, "0.314"),
                                         (1.0, "1.0"), (31.7, "31.7"), (228.48, "228.48")])
def test_numbers_are_written_as_yaml_reads_them(value: float, text: str) -> None:
    assert yaml_number(value) == text and yaml.safe_load(text) == value


@pytest.mark.slow
def test_gemm_format_fit_reproduces_the_shipped_h200_values(tmp_path: Path) -> None:
    """The fit of h200-sxm's block-fp8 GEMMs, written into a copy of its profile, leaves every value as shipped (its
    sources name the command); ~15 s of CPU."""
    from roofline.calibration.chip_fit import fit_op, write

    copy = tmp_path / "h200-sxm.yaml"
    shutil.copy(resolve("hardware", "h200-sxm"), copy)
    (w,) = fit_op("gemm-formats", ["h200-sxm"])
    assert set(w.efficiency) == {"gemm_fp8_block_factor", "gemm_fp8_block_tile_fixed_k",
                                 "act_group_quant_memory_efficiency"}
    write(w, copy)
    shipped, written = yaml.safe_load(resolve("hardware", "h200-sxm").read_text()), yaml.safe_load(copy.read_text())
    assert written["efficiency"] == shipped["efficiency"]
    assert load_profile(copy) == load_profile("h200-sxm")
    assert all("--op gemm-formats --chip h200-sxm" in written["sources"][f"efficiency.{k}"] for k in w.efficiency)


def _run(argv: list[str]) -> tuple[int, str]:
    rc, _, err = run_cli(argv)
    return rc, err.strip()


@pytest.mark.parametrize("argv, field", [
    (["calibrate", "--op-tables", "--op", "bogus"], "--op"),
    (["calibrate", "--op-tables", "--op", "mla", "--chip", "a10g"], "--chip"),
    (["calibrate", "--op-tables", "--op", "moe-formats", "--family", "ada"], "--family"),
    (["calibrate", "--op-tables", "--op", "mla", "--chip", "h200-sxm", "--family", "hopper"], "--chip"),
    (["calibrate", "--op-tables", "h200_sxm", "--op", "mla"], "--op"),
    (["calibrate", "--op-tables", "--op", "mla", "--hardware", "h200-sxm"], "--hardware"),
    (["calibrate", "--op-tables", "--op", "mla", "--all-to-all"], "--all-to-all"),
    (["calibrate", "--op-tables", "--chip", "h200-sxm"], "--chip"),
    (["calibrate", "--op-tables", "--op", "mla", "--uncertainty"], "--uncertainty"),
    (["calibrate", "--op-tables", "--op", "mla", "--format", "nvfp4"], "--format"),
    (["calibrate", "--op-tables", "--op", "moe-formats", "--format", "int3"], "--format"),
])
def test_calibrate_op_refuses_in_one_line(argv: list[str], field: str) -> None:
    rc, message = _run(argv)
    assert rc == 2 and len(message.splitlines()) == 1 and field in message, message


@pytest.mark.slow
def test_gemm_format_fit_reproduces_the_shipped_b200_values_with_deepgemms_small_calls(tmp_path: Path) -> None:
    """B200's fit also fits DeepGEMM's decode-sized calls on the SGLang table (the vLLM table times them eagerly)
    and leaves every shipped value as it is; ~20 s of CPU."""
    from roofline.calibration.chip_fit import fit_op, write

    copy = tmp_path / "b200.yaml"
    shutil.copy(resolve("hardware", "b200"), copy)
    (w,) = fit_op("gemm-formats", ["b200"])
    assert {"gemm_fp8_block_fixed_us", "gemm_fp8_block_saturation_fraction"} <= set(w.efficiency)
    write(w, copy)
    assert load_profile(copy) == load_profile("b200")
    assert "sglang/0.5.14/gemm_perf.parquet" in yaml.safe_load(copy.read_text())["sources"][
        "efficiency.gemm_fp8_block_fixed_us"]


def test_small_call_rows_are_the_sglang_deepgemm_calls_under_the_vllm_tables_floor() -> None:
    from roofline.calibration.gemm_format_fit import EAGER_DEVICE_ROWS_FLOOR_MULTIPLE, load_small_call_rows

    floor_s = 100e-6
    d = load_small_call_rows("b200_sxm", floor_s)
    assert len(d) > 1000 and set(d.gemm_dtype) == {"fp8_block"}
    assert (d.measured_s < EAGER_DEVICE_ROWS_FLOOR_MULTIPLE * floor_s).all()
    assert d.held_out.any() and not d.held_out.all()
    assert load_small_call_rows("a30", floor_s).empty  # no SGLang table


@pytest.mark.parametrize("write", [True, False])
def test_a_written_per_chip_fit_rewrites_its_familys_uncertainty(monkeypatch: pytest.MonkeyPatch,
                                                                 write: bool) -> None:
    """`--op ... --write` rewrites the held-out ratios of every family it wrote into (a chip's or the family file's),
    once each, from the values just written; without --write nothing is rewritten."""
    from roofline.calibration import chip_fit
    from roofline.commands import calibrate

    writes = [chip_fit.ChipWrite("b200", {}, {}), chip_fit.ChipWrite("gb200", {}, {}),
              chip_fit.ChipWrite("families/hopper", {}, {})]
    monkeypatch.setattr(chip_fit, "fit_op", lambda *a, **k: writes)
    monkeypatch.setattr(chip_fit, "write", lambda w: Path(w.target))
    rewritten: list[tuple[str, bool]] = []
    monkeypatch.setattr(calibrate, "_uncertainty", lambda family, members, write: rewritten.append((family, write)))
    rc, _ = _run(["calibrate", "--op-tables", "--op", "mla"] + (["--write"] if write else []))
    assert rc == 0
    assert rewritten == ([("blackwell", True), ("hopper", True)] if write else [])
