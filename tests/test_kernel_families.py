"""Kernel families (`roofline.cost.kernels.KernelFamily`): a family is one record plus its family file, and the chip
facts its kernels read come from the profile (`architecture`, `pcie_latency_us`), each bad or missing value one line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from engine.core.model_spec import ModelSpec
from roofline.cli import main
from roofline.cost import kernels
from roofline.cost.hardware import load_profile
from roofline.cost.kernels.attention import TRTLLM_GEN_KERNELS
from roofline.cost.kernels.collectives import all_reduce_time_s
from roofline.cost.profile_yaml import read_profile_dict
from roofline.cost.quant import QuantConfig
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepArrays
from roofline.errors import UserError
from roofline.registry import data_dir

SPEC = ModelSpec(name="m", architecture="LlamaForCausalLM", num_layers=4, hidden_size=1024, num_heads=16,
                 num_kv_heads=4, head_dim=64, intermediate_size=4096, vocab_size=32000, max_position_embeddings=4096)
BF16 = QuantConfig.from_user(model_dtype="bfloat16")
SIMULATE = ["simulate", "--model", "llama-156m", "--input-len", "300", "--output-len", "8", "--num-requests", "6",
            "--request-rate", "inf", "--max-model-len", "512", "--json"]


def _fake_family(root: Path, family: str) -> Path:
    """A family file `family` (hopper's parameters) and a chip of it (H100 SXM's datasheet), under `root`."""
    families = root / "families"
    families.mkdir(exist_ok=True)
    doc = read_profile_dict(data_dir("hardware_profiles") / "families" / "hopper.yaml")
    doc.update(id=family, name=f"test family {family}", per_chip={})
    (families / f"{family}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    chip = read_profile_dict(data_dir("hardware_profiles") / "h100-sxm.yaml")
    chip.update(id=f"{family}-gpu", family=family)
    chip.pop("operator_tables", None)
    path = root / f"{family}-gpu.yaml"
    path.write_text(yaml.safe_dump(chip, sort_keys=False))
    return path


def test_a_new_family_is_one_record_plus_its_family_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # Hopper's kernels but Blackwell's TRT-LLM attention: its prefill attention is timed by 256-row tiles of one
    # query head, every other operator as on the H100 whose datasheet and parameters it shares
    record = replace(kernels.HOPPER, id="fake", attention=TRTLLM_GEN_KERNELS)
    monkeypatch.setitem(kernels.KERNEL_FAMILIES, "fake", record)
    path = _fake_family(tmp_path, "fake")
    fake = load_profile(path)
    assert fake.family == "fake" and kernels.kernel_family(fake.family) is record
    batch = (np.array([1000, 1]), np.array([0, 500]), np.array([True, True]))
    ours = StepCostModel(SPEC, fake, BF16).cost(StepArrays(*batch)).breakdown_s
    theirs = StepCostModel(SPEC, replace(fake, family="hopper"), BF16).cost(StepArrays(*batch)).breakdown_s
    assert ours["attention_prefill"] != theirs["attention_prefill"]
    assert {k: v for k, v in ours.items() if not k.startswith(("attention", "host"))} == \
        {k: v for k, v in theirs.items() if not k.startswith(("attention", "host"))}
    # and the simulator runs it end to end
    assert main([*SIMULATE, "--hardware", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["hardware"] == "fake-gpu" and summary["offered_load"]["num_requests"] == 6


def test_a_family_file_without_a_record_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _fake_family(tmp_path, "norecord")
    assert main([*SIMULATE, "--hardware", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "family: 'norecord' has no kernel record (roofline.cost.kernels.KERNEL_FAMILIES); known: ampere, ada, " \
           "hopper, blackwell" in err


@pytest.mark.parametrize(("value", "message"), [
    ({"shared_memory_per_sm_kib": 0}, "architecture: shared_memory_per_sm_kib: must be a positive integer, got 0"),
    ({"sm_subpartitions": 4.5}, "architecture: sm_subpartitions: must be a positive integer, got 4.5"),
    ({"smem_kib": 100}, "architecture: unknown field 'smem_kib'; allowed: shared_memory_per_sm_kib"),
])
def test_bad_architecture_values_are_one_line(tmp_path: Path, value: dict, message: str) -> None:
    data = read_profile_dict(data_dir("hardware_profiles") / "l40s.yaml")
    data["architecture"] = {**data["architecture"], **value}
    data["sources"].update({f"architecture.{k}": "test" for k in value})
    path = tmp_path / "l40s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_profile(path)


def test_architecture_numbers_need_sources(tmp_path: Path) -> None:
    data = read_profile_dict(data_dir("hardware_profiles") / "l40s.yaml")
    del data["sources"]["architecture.sm_subpartitions"]
    path = tmp_path / "l40s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(UserError, match="sources: no source for 'architecture.sm_subpartitions'"):
        load_profile(path)


def test_a_chip_fact_its_kernels_read_is_required(tmp_path: Path) -> None:
    # Ada's CUTLASS 2.x fp8 CTAs share the SM's shared memory: a profile without it fails when the model is built
    l40s = load_profile("l40s")
    without = replace(l40s, architecture=replace(l40s.architecture, shared_memory_per_sm_bytes=None))
    with pytest.raises(UserError, match="hardware profile l40s: architecture.shared_memory_per_sm_kib is needed by "
                                        "the cublas-sm80-kernels-on-sm89 GEMM kernels' CTAs"):
        StepCostModel(SPEC, without, BF16)
    # Hopper's DeepGEMM layout reads the per-block shared memory where a block-scaled fp8 layer is timed
    h100 = load_profile("h100-sxm")
    from roofline.cost.op_time import linear_time_s
    no_block = replace(h100, architecture=replace(h100.architecture, shared_memory_per_block_bytes=None))
    assert linear_time_s(h100, 64.0, 4096, 4096, "fp8", 1.0, 2.0, "fp8-block") > 0
    with pytest.raises(UserError, match="architecture.shared_memory_per_block_kib is needed by DeepGEMM's SM90"):
        linear_time_s(no_block, 64.0, 4096, 4096, "fp8", 1.0, 2.0, "fp8-block")


def test_collectives_over_pcie_need_its_latency_and_bandwidth() -> None:
    l40s = load_profile("l40s")
    assert l40s.interconnect is None and l40s.pcie_latency_s == 20e-6
    assert all_reduce_time_s(l40s, 1e6, 2) > 0
    with pytest.raises(UserError, match="hardware profile l40s: collectives go over PCIe .* add pcie_latency_us"):
        all_reduce_time_s(replace(l40s, pcie_latency_s=None), 1e6, 2)
    with pytest.raises(UserError, match="pcie_bandwidth_gb_per_s_per_direction is null"):
        all_reduce_time_s(replace(l40s, pcie_bandwidth_bytes_per_s_per_direction=None), 1e6, 2)
