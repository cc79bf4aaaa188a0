"""Hardware profiles: every shipped profile loads with sources; schema errors name file, field and allowed values;
`roofline profile-device --quick` writes a profile that loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from roofline.cli import main
from roofline.cost.hardware import DTYPES, PowerLimit, load_profile, parse_profile
from roofline.cost.params import EfficiencyParams
from roofline.cost.profile_yaml import dump_profile, read_profile_dict
from roofline.errors import UserError
from roofline.registry import list_ids, resolve

SHIPPED = ["h100-sxm", "h100-pcie", "h200-sxm", "a100-80gb-sxm", "a100-40gb-sxm", "l40s", "l4", "a10g",
           "rtx-4090", "b200", "b300", "gb200", "mi300x"]


def test_the_thirteen_profiles_are_shipped() -> None:
    assert set(SHIPPED) <= set(list_ids("hardware"))


@pytest.mark.parametrize("profile_id", list_ids("hardware"))
def test_every_shipped_profile_loads(profile_id: str) -> None:
    hw = load_profile(profile_id)
    assert hw.id == profile_id == resolve("hardware", profile_id).stem
    assert hw.peak_flops("bf16") > hw.peak_flops("fp32")
    assert hw.memory_bandwidth_bytes_per_s > 0 and hw.memory_capacity_bytes > 0
    assert hw.kind == "gpu" and hw.executor.mode == "cuda_graphs"


def test_units_are_converted_to_si() -> None:
    hw = load_profile("h100-sxm")
    assert hw.peak_flops("bf16") == pytest.approx(989.4e12)
    assert hw.memory_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert hw.memory_capacity_bytes == pytest.approx(85.52e9)
    assert hw.l2_cache_bytes == 50 * 2**20
    assert hw.boost_clock_hz == pytest.approx(1.98e9)
    assert hw.interconnect is not None
    assert hw.interconnect.bandwidth_bytes_per_s_per_direction == pytest.approx(450e9)  # 900 GB/s bidirectional
    assert hw.interconnect.latency_s == pytest.approx(42.5e-6)


def test_pcie_only_card_has_no_interconnect() -> None:
    hw = load_profile("l40s")
    assert hw.interconnect is None
    assert hw.pcie_bandwidth_bytes_per_s_per_direction == pytest.approx(32e9)


def test_unsupported_dtype_lists_supported() -> None:
    with pytest.raises(UserError, match="'fp8' is not supported; supported: fp32, tf32, bf16, fp16, int8"):
        load_profile("a100-80gb-sxm").peak_flops("fp8")


def test_ids_are_case_insensitive() -> None:
    assert load_profile("H100-SXM") == load_profile("h100-sxm")


def test_profile_loads_from_a_path() -> None:
    assert load_profile(str(resolve("hardware", "l4"))) == load_profile("l4")


def test_profiles_are_hashable_for_caches() -> None:
    assert len({load_profile("l4"), load_profile("L4")}) == 1


# ---- errors -----------------------------------------------------------------------------------------------


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "custom.yaml"
    dump_profile(data, path)
    return path


def _h100() -> dict:
    return read_profile_dict(resolve("hardware", "h100-sxm"))


def test_unknown_id_lists_allowed() -> None:
    with pytest.raises(UserError, match="unknown hardware 'h900'; allowed: a100-40gb-sxm, .*h100-sxm"):
        load_profile("h900")


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("id: x\nname: y\npeak_tflops: {bf16: 1\nkind: gpu\n")
    with pytest.raises(UserError, match=r"bad\.yaml: malformed YAML at line \d"):
        load_profile(path)


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(resolve("hardware", "l4").read_text() + "tdp_w: 80\n")
    with pytest.raises(UserError, match="dup.yaml: malformed YAML at line .*duplicate key 'tdp_w'"):
        load_profile(path)


def test_unknown_field_is_named_with_allowed(tmp_path: Path) -> None:
    data = _h100()
    data["memory_bandwith_gb_per_s"] = 1
    with pytest.raises(UserError, match="custom.yaml: unknown field 'memory_bandwith_gb_per_s'; allowed: id, name"):
        load_profile(_write(tmp_path, data))


def test_missing_field_is_named(tmp_path: Path) -> None:
    data = _h100()
    del data["memory_bandwidth_gb_per_s"]
    with pytest.raises(UserError, match="custom.yaml: missing field 'memory_bandwidth_gb_per_s'"):
        load_profile(_write(tmp_path, data))


def test_unknown_dtype_lists_allowed(tmp_path: Path) -> None:
    data = _h100()
    data["peak_tflops"]["fp6"] = 1
    with pytest.raises(UserError, match=f"peak_tflops: unknown field 'fp6'; allowed: {', '.join(DTYPES)}"):
        load_profile(_write(tmp_path, data))


def test_bad_kind_lists_allowed(tmp_path: Path) -> None:
    data = _h100() | {"kind": "tpu"}
    with pytest.raises(UserError, match="kind: 'tpu' is not allowed; allowed: gpu, cpu"):
        load_profile(_write(tmp_path, data))


def test_negative_number_is_rejected(tmp_path: Path) -> None:
    data = _h100() | {"memory_capacity_gb": -80}
    with pytest.raises(UserError, match="memory_capacity_gb: must be a positive number, got -80"):
        load_profile(_write(tmp_path, data))


def test_exp_throughput_factor_defaults_to_one_and_needs_a_source(tmp_path: Path) -> None:
    assert load_profile("h100-sxm").exp_throughput_factor == 1.0
    data = _h100() | {"exp_throughput_factor": 2}
    with pytest.raises(UserError, match="no source for 'exp_throughput_factor'"):
        load_profile(_write(tmp_path, data))
    data["sources"] = data["sources"] | {"exp_throughput_factor": "a datasheet"}
    assert load_profile(_write(tmp_path, data)).exp_throughput_factor == 2.0
    with pytest.raises(UserError, match="exp_throughput_factor: must be a positive number, got 0"):
        load_profile(_write(tmp_path, data | {"exp_throughput_factor": 0}))


def test_power_limit_defaults_to_none_needs_a_source_and_a_fraction(tmp_path: Path) -> None:
    assert load_profile("b200").power_limit is None and load_profile("gb200").power_limit is not None
    data = _h100() | {"power_limit": {"after_ms": 4.0, "clock_factor": 0.5}}
    with pytest.raises(UserError, match="no source for 'power_limit.after_ms'"):
        load_profile(_write(tmp_path, data))
    data["sources"] = data["sources"] | {"power_limit": "fitted: a table"}
    assert load_profile(_write(tmp_path, data)).power_limit == PowerLimit(after_s=4e-3, clock_factor=0.5)
    with pytest.raises(UserError, match=r"power_limit: clock_factor: must be in \(0, 1\]"):
        load_profile(_write(tmp_path, data | {"power_limit": {"after_ms": 4.0, "clock_factor": 1.5}}))
    with pytest.raises(UserError, match="power_limit: must be a mapping with exactly the keys after_ms, clock_factor"):
        load_profile(_write(tmp_path, data | {"power_limit": {"after_ms": 4.0}}))
    with pytest.raises(UserError, match="power_limit: after_ms: must be a positive number, got 0"):
        load_profile(_write(tmp_path, data | {"power_limit": {"after_ms": 0, "clock_factor": 0.5}}))


def test_sustained_clock_factor_defaults_to_one_and_needs_a_source(tmp_path: Path) -> None:
    assert load_profile("b200").sustained_clock_factor == 1.0 and load_profile("b300").sustained_clock_factor > 1.0
    data = _h100() | {"sustained_clock_factor": 1.05}
    with pytest.raises(UserError, match="no source for 'sustained_clock_factor'"):
        load_profile(_write(tmp_path, data))
    data["sources"] = data["sources"] | {"sustained_clock_factor": "fitted: a table"}
    assert load_profile(_write(tmp_path, data)).sustained_clock_factor == 1.05
    with pytest.raises(UserError, match="sustained_clock_factor: must be a positive number, got -1"):
        load_profile(_write(tmp_path, data | {"sustained_clock_factor": -1}))


def test_interconnect_field_is_checked(tmp_path: Path) -> None:
    data = _h100()
    del data["interconnect"]["latency_us"]
    with pytest.raises(UserError, match="interconnect: missing field 'latency_us'"):
        load_profile(_write(tmp_path, data))


def test_every_number_needs_a_source(tmp_path: Path) -> None:
    data = _h100()
    del data["sources"]["tdp_w"]
    with pytest.raises(UserError, match="no source for 'tdp_w'"):
        load_profile(_write(tmp_path, data))


def test_a_parent_source_covers_its_fields(tmp_path: Path) -> None:
    data = _h100()
    del data["sources"]["interconnect.latency_us"]
    assert load_profile(_write(tmp_path, data)).interconnect == load_profile("h100-sxm").interconnect


def test_source_for_a_missing_field_is_an_error(tmp_path: Path) -> None:
    data = _h100()
    data["sources"]["peak_tflops.fp4"] = "made up"
    with pytest.raises(UserError, match="sources.peak_tflops.fp4: names no sourced field"):
        load_profile(_write(tmp_path, data))


def test_efficiency_section_errors_come_from_cost_params(tmp_path: Path) -> None:
    data = _h100()
    data["efficiency"] = {"gemm_efficency": 0.5}
    with pytest.raises(UserError, match="custom.yaml: efficiency: unknown field 'gemm_efficency'"):
        load_profile(_write(tmp_path, data))


def test_datasheet_profile_without_sections_gets_defaults(tmp_path: Path) -> None:
    data = read_profile_dict(resolve("hardware", "l4"))
    del data["family"]
    hw = load_profile(_write(tmp_path, data))
    assert hw.executor.mode == "cuda_graphs" and hw.efficiency == EfficiencyParams.from_dict(None, "defaults")
    assert hw.provenance.status == "datasheet-only"


def test_cpu_profile_must_run_eager(tmp_path: Path) -> None:
    data = read_profile_dict(resolve("hardware", "l4")) | {"kind": "cpu"}
    with pytest.raises(UserError, match="executor.mode: a cpu profile must set mode: eager"):
        load_profile(_write(tmp_path, data))


def test_dump_is_deterministic_and_round_trips(tmp_path: Path) -> None:
    data = _h100()
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    dump_profile(data, first)
    dump_profile(data, second)
    assert first.read_bytes() == second.read_bytes()
    assert yaml.safe_load(first.read_text()) == data
    assert load_profile(first) == load_profile("h100-sxm")


def test_parse_profile_names_where() -> None:
    with pytest.raises(UserError, match="^from calibrate: missing field 'id'"):
        parse_profile({}, where="from calibrate")


# ---- profile-device ---------------------------------------------------------------------------------------


def test_profile_device_quick_writes_a_loadable_cpu_profile(tmp_path: Path) -> None:
    """Under 10 s on a 2-core CPU (tiny sweeps)."""
    pytest.importorskip("torch")
    out = tmp_path / "cpu.yaml"
    assert main(["profile-device", "--quick", "--threads", "1", "--id", "test-cpu", "--out", str(out)]) == 0
    hw = load_profile(out)
    assert hw.id == "test-cpu" and hw.kind == "cpu" and hw.is_measured
    assert hw.provenance.status == "measured" and hw.provenance_line().startswith("test-cpu: measured (")
    assert {"fp32", "bf16"} <= set(hw.supported_dtypes)
    assert hw.executor.mode == "eager" and hw.executor.kernel_launch_s > 0
    assert hw.num_compute_units == 1 and hw.measured["num_threads"] == 1
    assert hw.measured["memory"]["read"]["plateau_gb_per_s"] > 0
    assert all(row["spread"] >= 0 for row in hw.measured["gemm"]["bf16"]["sweep"])
    # the engine's GEMM kernel, per row count; memory-bound GEMMs stream weights at its one-row rate relative to
    # the read plateau, scaled by the curve's shape
    curve = hw.streaming_curve("roofline-engine")
    assert curve is not None and curve.rows == (1, 2, 3) and all(b > 0 for b in curve.bytes_per_s)
    assert hw.streaming_curve("vllm-cpu") is None  # measured only with --vllm-python
    sweep = hw.measured["weight_streaming"]["engine"]["sweep"]
    assert [row["rows"] for row in sweep] == [1, 2, 3] and all(row["spread"] >= 0 for row in sweep)
    expected = min(1.0, sweep[0]["gb_per_s"] / hw.measured["memory"]["read"]["plateau_gb_per_s"])
    assert hw.efficiency.memory_efficiency == pytest.approx(expected, rel=0.01)


def test_gemm_compute_fit_recovers_the_kernels_rate() -> None:
    """Rows past the saturated rate, made with efficiency 0.5 and 6 fixed rows at a 1 TFLOP/s peak (and a 25 GB/s
    streaming rate), give those two back; fewer than two such rows leave the peak as it is."""
    from roofline.commands.profile_device import fit_gemm_compute

    weight_bytes, peak, p = 100e6, 1e12, 4.0
    t_memory = weight_bytes / 25e9

    def rate(m: int) -> float:
        t_compute = weight_bytes * (m + 6.0) / (peak * 0.5)
        return weight_bytes / (t_compute ** p + t_memory ** p) ** (1 / p)

    sweep = [{"rows": 1, "bytes_per_s": 20e9}, {"rows": 4, "bytes_per_s": 25e9}]
    sweep += [{"rows": m, "bytes_per_s": rate(m)} for m in (16, 32, 64, 128, 256)]
    assert fit_gemm_compute({"sweep": sweep, "weight_bytes": weight_bytes}, peak) == pytest.approx((0.5, 6.0),
                                                                                                  abs=0.01)
    assert fit_gemm_compute({"sweep": sweep[:3], "weight_bytes": weight_bytes}, peak) == (1.0, 2.0)


def test_profile_device_vllm_python_must_be_a_file(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    missing = tmp_path / "no-python"
    assert main(["profile-device", "--quick", "--vllm-python", str(missing), "--out", str(tmp_path / "p.yaml")]) == 2


def _cpu_profile() -> dict:
    return read_profile_dict(Path(__file__).resolve().parents[1] / "tests" / "data" / "cpu-profile.yaml")


def _curve(rows: list, rates: list) -> dict:
    return {"kernel": "k", "rows": rows, "gb_per_s": rates, "spread": [0.0] * len(rows)}


def test_weight_streaming_curve_loads_in_si_units(tmp_path: Path) -> None:
    data = _cpu_profile()
    data["weight_streaming"] = {"vllm-cpu": _curve([1, 2, 4], [20.0, 18.0, 25.0])}
    data["sources"]["weight_streaming"] = "a test"
    hw = load_profile(_write(tmp_path, data))
    curve = hw.streaming_curve("vllm-cpu")
    assert curve is not None and curve.rows == (1, 2, 4) and curve.bytes_per_s == (20e9, 18e9, 25e9)
    assert hw.streaming_curve("roofline-engine") is None
    assert "k, GB/s by rows {1: 20, 2: 18, 4: 25}, saturated at 4 rows" in hw.streaming_note("vllm-cpu")
    assert "assumed one rate for every row count" in hw.streaming_note("roofline-engine")


@pytest.mark.parametrize(("section", "match"), [
    ({"sglang": _curve([1, 2], [1.0, 1.0])}, "unknown field 'sglang'"),
    ({"vllm-cpu": _curve([2, 4], [1.0, 1.0])}, "rows: must be increasing integers starting at 1"),
    ({"vllm-cpu": _curve([1, 1], [1.0, 1.0])}, "rows: must be increasing integers starting at 1"),
    ({"vllm-cpu": _curve([1, 2], [1.0])}, "gb_per_s: must be one positive number per row count"),
    ({"vllm-cpu": _curve([1, 2], [1.0, 0.0])}, "gb_per_s: must be one positive number per row count"),
    ({"vllm-cpu": {"rows": [1, 2], "gb_per_s": [1.0, 1.0], "spread": [0, 0]}}, "missing field 'kernel'"),
])
def test_weight_streaming_errors_name_the_field(tmp_path: Path, section: dict, match: str) -> None:
    data = _cpu_profile() | {"weight_streaming": section}
    data["sources"]["weight_streaming"] = "a test"
    with pytest.raises(UserError, match=match):
        load_profile(_write(tmp_path, data))


def test_weight_streaming_needs_a_source_and_a_cpu(tmp_path: Path) -> None:
    data = _cpu_profile() | {"weight_streaming": {"vllm-cpu": _curve([1, 2], [1.0, 2.0])}}
    del data["sources"]["weight_streaming"]
    with pytest.raises(UserError, match="no source for 'weight_streaming.vllm-cpu.rows'"):
        load_profile(_write(tmp_path, data))
    gpu = _h100() | {"weight_streaming": {"vllm-cpu": _curve([1, 2], [1.0, 2.0])}}
    gpu["sources"]["weight_streaming"] = "a test"
    with pytest.raises(UserError, match="weight_streaming: only a cpu profile has one"):
        load_profile(_write(tmp_path, gpu))


def test_profile_device_restores_torch_threads(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    main(["profile-device", "--quick", "--threads", "1", "--out", str(tmp_path / "p.yaml")])
    assert torch.get_num_threads() == before


@pytest.mark.gpu
def test_profile_device_cuda_writes_a_loadable_gpu_profile(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    out = tmp_path / "gpu.yaml"
    assert main(["profile-device", "--device", "cuda", "--quick", "--out", str(out)]) == 0
    hw = load_profile(out)
    assert hw.kind == "gpu" and {"fp32", "tf32", "bf16", "fp16"} <= set(hw.supported_dtypes)
    assert hw.memory_capacity_bytes == pytest.approx(torch.cuda.get_device_properties(0).total_memory, rel=1e-5)


def test_profile_device_gemm_sweep_stops_at_its_time_budget() -> None:
    """A shape whose estimated time (from the previous shape's rate) would pass the per-dtype budget is not run."""
    pytest.importorskip("torch")
    import torch

    from engine.profile_device import ProfileSettings, _Bench

    lines: list[str] = []
    bench = _Bench(ProfileSettings(num_repeats=2, min_time_s=0.001, gemm_budget_s=0.5), torch.device("cpu"),
                   lines.append)
    result = bench._gemm_sweep("fp32", ((32, 32, 32), (8192, 8192, 8192)))
    assert [row["mnk"] for row in result["sweep"]] == [[32, 32, 32]]
    assert any("stopped after 1 of 2 shapes: 8192x8192x8192" in line for line in lines)


def test_profile_device_says_which_dtypes_this_cpu_runs_natively() -> None:
    pytest.importorskip("torch")
    from engine.profile_device import native_dtypes_line

    line = native_dtypes_line()
    assert line.startswith("this CPU runs: fp32") and "bf16 " in line and "fp16 " in line
