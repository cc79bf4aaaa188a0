"""Kernel families: chips share their family's parameters, overrides win, schema errors name the field, provenance
is shown; the vLLM-table reader picks the default kernel per group; the shipped profiles rank GPUs sensibly."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.core.model_spec import ModelSpec
from roofline.calibration.families import fit_clock_factor
from roofline.calibration.fit import predict_table
from roofline.calibration.op_tables import load_op_tables
from roofline.cli import main
from roofline.cost.hardware import family_path, list_families, load_family, load_profile
from roofline.cost.profile_yaml import dump_profile, read_profile_dict
from roofline.cost.quant import QuantConfig
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepArrays
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.registry import list_ids, resolve
from roofline.sim.deployment import make_deployment

FAMILY_OF = {"h100-sxm": "hopper", "h100-pcie": "hopper", "h200-sxm": "hopper", "b200": "blackwell",
             "b300": "blackwell", "gb200": "blackwell", "a100-80gb-sxm": "ampere", "a100-40gb-sxm": "ampere",
             "a10g": "ampere", "l40s": "ada", "l4": "ada", "rtx-4090": "ada"}


def test_every_nvidia_gpu_names_its_family_and_mi300x_none() -> None:
    assert set(list_families()) == {"hopper", "blackwell", "ampere", "ada"}
    for pid, family in FAMILY_OF.items():
        assert load_profile(pid).family == family
    mi300x = load_profile("mi300x")
    assert mi300x.family is None and mi300x.provenance.status == "datasheet-only"
    assert "datasheet-only" in mi300x.provenance_line()


def test_registry_lists_chips_only() -> None:
    ids = list_ids("hardware")
    assert not set(list_families()) & set(ids) and "families" not in ids and "prices" not in ids


def test_chips_of_a_family_share_its_efficiency_but_keep_their_numbers() -> None:
    h100, h200, pcie = load_profile("h100-sxm"), load_profile("h200-sxm"), load_profile("h100-pcie")
    assert h100.efficiency.gemm_compute_efficiency == h200.efficiency.gemm_compute_efficiency
    assert h100.efficiency.attention_memory_efficiency == pcie.efficiency.attention_memory_efficiency
    assert h100.executor == h200.executor
    assert h200.memory_bandwidth_bytes_per_s > h100.memory_bandwidth_bytes_per_s


def test_gb200_is_one_nvlink_domain_of_72() -> None:
    gb200 = load_profile("gb200")
    assert gb200.interconnect is not None and gb200.interconnect.max_num_gpus == 72


def _chip(tmp_path: Path, **changes: object) -> Path:
    data = read_profile_dict(resolve("hardware", "h200-sxm")) | changes
    path = tmp_path / "chip.yaml"
    dump_profile(data, path)
    return path


def test_chip_efficiency_overrides_the_family(tmp_path: Path) -> None:
    data = read_profile_dict(resolve("hardware", "h200-sxm"))
    path = _chip(tmp_path, efficiency={**data.get("efficiency", {}), "memory_efficiency": 0.5},
                 sources={**data["sources"], "efficiency.memory_efficiency": "test"})
    hw = load_profile(path)
    assert hw.efficiency.memory_efficiency == 0.5
    assert hw.efficiency.gemm_compute_efficiency == load_profile("h200-sxm").efficiency.gemm_compute_efficiency


def test_chip_override_needs_a_source(tmp_path: Path) -> None:
    data = read_profile_dict(resolve("hardware", "h200-sxm"))
    with pytest.raises(UserError, match="no source for 'efficiency.memory_efficiency'"):
        load_profile(_chip(tmp_path, efficiency={**data.get("efficiency", {}), "memory_efficiency": 0.5}))


def test_unknown_family_lists_the_allowed_ones(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"family: 'volta' is not allowed; allowed: ada, ampere, blackwell, hopper"):
        load_profile(_chip(tmp_path, family="volta"))


def _family_copy(tmp_path: Path, **changes: object) -> Path:
    """A chip beside a local families/ folder holding an edited copy of hopper.yaml."""
    data = read_profile_dict(family_path("hopper")) | changes
    (tmp_path / "families").mkdir()
    dump_profile(data, tmp_path / "families" / "hopper.yaml")
    return _chip(tmp_path)


def test_a_local_family_file_wins_over_the_shipped_one(tmp_path: Path) -> None:
    family = read_profile_dict(family_path("hopper"))
    path = _family_copy(tmp_path, efficiency={**family["efficiency"], "memory_efficiency": 0.4})
    assert load_profile(path).efficiency.memory_efficiency == 0.4


def test_family_schema_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="hopper.yaml: unknown field 'efficency'; allowed: id, name, efficiency"):
        load_profile(_family_copy(tmp_path, efficency={}))


def test_family_parameter_errors_name_the_field(tmp_path: Path) -> None:
    family = read_profile_dict(family_path("hopper"))
    path = _family_copy(tmp_path, efficiency={**family["efficiency"], "memory_efficiency": 1.5})
    with pytest.raises(UserError, match=r"hopper.yaml: efficiency.memory_efficiency: must be a number in \[0.001, 1.0\]"):
        load_profile(path)


def test_every_family_number_has_a_source() -> None:
    for name in list_families():
        family = load_family(name)
        assert set(family["efficiency"]) <= {k.split(".")[1] for k in family["sources"] if k.startswith("efficiency.")}


def test_provenance_of_fitted_family_and_datasheet_profiles() -> None:
    h200, pcie = load_profile("h200-sxm"), load_profile("h100-pcie")
    assert h200.provenance.status == "fitted" and h200.provenance.family == "hopper"
    assert "h200_sxm" in h200.provenance.fitted_on and "vLLM" in h200.provenance.fitted_on
    assert {kind for kind, *_ in h200.provenance.held_out} == {"gemm", "attention", "all_reduce", "moe"}
    line = h200.provenance_line()
    assert line.startswith("h200-sxm: fitted (hopper family") and "held-out median error GEMM" in line
    assert "\n" not in line
    assert pcie.provenance.status == "family" and "no operator tables" in pcie.provenance_line()


def test_profiles_command_shows_where_parameters_come_from(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "fitted hopper" in lines["h200-sxm"] and "family hopper" in lines["h100-pcie"]
    assert "datasheet-only" in lines["mi300x"] and "fitted blackwell" in lines["gb200"]


# ---- the operator-table reader's kernel choice (a synthetic table; no aiconfigurator-core needed) --------------


def _gemm_table(root: Path, version: str, kernels: dict[str, str]) -> None:
    folder = root / "gpu_x" / "gemm" / "vllm" / version
    folder.mkdir(parents=True)
    rows = [{"kernel_source": kernel, "gemm_dtype": dtype, "m": m, "n": 256, "k": 512, "latency": 0.01 * (i + 1)}
            for i, (kernel, dtype) in enumerate(kernels.items()) for m in (1, 8)]
    pd.DataFrame(rows).to_parquet(folder / "gemm_perf.parquet")


def test_reader_takes_the_newest_version_and_the_default_kernel_per_dtype(tmp_path: Path) -> None:
    _gemm_table(tmp_path, "0.9.0", {"torch.nn.functional.linear": "bfloat16"})
    _gemm_table(tmp_path, "0.10.0", {"torch.nn.functional.linear": "bfloat16", "SomeOtherKernel": "bfloat16",
                                     "CutlassFP8ScaledMMLinearKernel": "fp8", "DeepGemm": "fp8_block"})
    default = load_op_tables("gpu_x", root=tmp_path)["gemm"]
    assert default.attrs["vllm_version"] == "0.10.0"
    assert sorted(set(zip(default["dtype"], default["kernel"]))) == [
        ("bf16", "torch.nn.functional.linear"), ("fp8", "CutlassFP8ScaledMMLinearKernel")]
    other = load_op_tables("gpu_x", root=tmp_path, kernels="other")["gemm"]
    assert set(other["kernel"]) == {"SomeOtherKernel"}  # fp8_block is another quantization, not another kernel
    assert np.allclose(default["measured_s"][default["kernel"] == "torch.nn.functional.linear"], 1e-5)


def test_reader_rejects_an_unknown_kernel_choice(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="kernels 'all' is not allowed; allowed: default, other"):
        load_op_tables("gpu_x", root=tmp_path, kernels="all")


# ---- the shipped profiles rank GPUs the right way ---------------------------------------------------------------

# (query lengths, context lengths): decode-only batches of 1 to 256 sequences, a long prefill, a mixed step.
_BATCHES = [([1], [512]), ([1] * 32, [2000] * 32), ([1] * 256, [1000] * 256), ([2048], [0]),
            ([512] + [1] * 63, [0] + [3000] * 63)]


@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b"])
@pytest.mark.parametrize("tp", [1, 4])
@pytest.mark.parametrize("quantization", ["none", "fp8"])
def test_h200_never_predicts_a_slower_step_than_h100(model: str, tp: int, quantization: str) -> None:
    """Same compute, more bandwidth and memory: an H200 step is never slower than the same H100 step."""
    spec = ModelSpec.from_path(resolve("model", model))
    quant = QuantConfig.from_user(quantization=quantization, kv_cache_dtype="fp8" if quantization == "fp8" else "auto")
    h100, h200 = (StepCostModel(spec, load_profile(pid), quant, tp) for pid in ("h100-sxm", "h200-sxm"))
    for q, c in _BATCHES:
        args = (np.array(q), np.array(c), np.ones(len(q), bool))
        assert h200.time_s(StepArrays(*args)) <= h100.time_s(StepArrays(*args)), (q[:2], c[:2])


@pytest.mark.parametrize("moe_backend", ["auto", "marlin"])
def test_h200_never_predicts_a_slower_gpt_oss_step_than_h100(moe_backend: str) -> None:
    """The same with MXFP4 experts, whose Marlin parameters are fitted per chip (h200-sxm.yaml's own)."""
    h100, h200 = (make_deployment("gpt-oss-120b", pid, EngineArgs(tensor_parallel_size=2, moe_backend=moe_backend))
                  for pid in ("h100-sxm", "h200-sxm"))
    for q, c in _BATCHES + [([8192], [0])]:
        args = (np.array(q), np.array(c), np.ones(len(q), bool))
        assert h200.cost_model.time_s(StepArrays(*args)) <= h100.cost_model.time_s(StepArrays(*args)), (q[:2], c[:2])


def test_clock_factor_fit_recovers_a_chip_faster_than_its_family() -> None:
    # rows measured as the model predicts them at a factor of 1.07: the fit on them finds 1.07
    b300 = replace(load_profile("b300"), sustained_clock_factor=1.0)
    m, n, k = np.meshgrid([1, 16, 256, 4096], [1024, 4096, 8192], [1024, 8192])
    frame = pd.DataFrame({"m": m.ravel(), "n": n.ravel(), "k": k.ravel()})
    frame = pd.concat([frame.assign(dtype="bf16"), frame.assign(dtype="fp8")], ignore_index=True)
    frame["measured_s"] = predict_table(replace(b300, sustained_clock_factor=1.07), "gemm", frame)
    assert fit_clock_factor(b300, frame) == pytest.approx(1.07, rel=1e-3)


def test_b300_clock_factor_has_a_fitted_source_with_its_held_out_error() -> None:
    b300 = load_profile("b300")
    source = dict(b300.sources)["sustained_clock_factor"]
    assert source.startswith("fitted: aiconfigurator-core") and "b300_sxm/gemm" in source
    assert "held-out GEMM median error" in source and "leave-one-GPU-out" in source
    assert "sustained clock factor" in b300.provenance_line()
    assert "sustained clock" not in load_profile("b200").provenance_line()
