"""Weight-only linear layers (roofline.cost.kernels.gemm_weight_only): the kernel vLLM picks per GPU family and scheme
(Marlin, Machete), fp8 and NVFP4 weights without their tensor cores run weight-only on Marlin, and the refusals vLLM
makes (ModelOpt FP8 below capability 8.9)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from engine.core.model_spec import ModelSpec
from roofline.cli import main
from roofline.cost.hardware import load_profile
from roofline.cost.kernels import kernel_family
from roofline.cost.kernels.gemm import gemm_time_s
from roofline.cost.kernels.gemm_weight_only import MACHETE, MARLIN, marlin_time_s
from roofline.cost.op_time import linear_time_s
from roofline.cost.quant import QuantConfig
from roofline.cost.roofline_math import _bandwidth
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepArrays
from roofline.errors import UserError
from roofline.registry import load_model

INT4 = 0.5 + 2.5 / 128  # AWQ / GPTQ bytes per weight (roofline.cost.quant)


def test_marlin_is_its_bytes_or_its_padded_flops_at_the_16bit_rate() -> None:
    hw = load_profile("a100-80gb-sxm")
    e = hw.efficiency
    m, n, k = 100, 4096, 4096
    tc = 2.0 * 112 * n * k / (hw.peak_flops("bf16") * e.gemm_compute_efficiency * e.marlin_compute_factor
                              * hw.sustained_clock_factor)  # 100 rows run as 7 blocks of 16
    tm = (m * k * 2 + n * k * INT4 + m * n * 2) / (_bandwidth(hw) * e.memory_efficiency)
    p = e.overlap_exponent
    expected = (tc ** p + tm ** p) ** (1 / p) + e.kernel_fixed_s
    assert marlin_time_s(hw, m, n, k, "bf16", INT4, 2.0) == pytest.approx(expected, rel=1e-12)
    halved = replace(hw, efficiency=replace(e, marlin_compute_factor=0.5))
    big = 8192  # compute-bound: half the factor, about twice the time
    assert marlin_time_s(halved, big, n, k, "bf16", INT4, 2.0) / marlin_time_s(hw, big, n, k, "bf16", INT4, 2.0) \
        == pytest.approx(2.0, rel=0.05)


@pytest.mark.parametrize("profile, scheme, kernel", [
    ("h100-sxm", "gptq", MACHETE), ("h100-sxm", "w4a16-int4", MACHETE), ("h100-sxm", "awq", MARLIN),
    ("a100-80gb-sxm", "gptq", MARLIN), ("l40s", "gptq", MARLIN), ("b200", "gptq", MARLIN),
])
def test_vllm_kernel_choice_per_family(profile: str, scheme: str, kernel: str) -> None:
    hw = load_profile(profile)
    assert kernel_family(hw.family).weight_only.kernel(scheme) == kernel
    m, n, k = np.array([1.0, 64.0, 2048.0]), 8192, 4096
    t = linear_time_s(hw, m, n, k, "bf16", INT4, 2.0, scheme)
    expected = gemm_time_s(hw, m, n, k, "bf16", INT4, 2.0, 2.0) if kernel == MACHETE else \
        marlin_time_s(hw, m, n, k, "bf16", INT4, 2.0)
    assert np.array_equal(t, expected)


def test_16bit_weights_never_take_the_weight_only_path() -> None:
    hw = load_profile("h100-sxm")
    assert linear_time_s(hw, 64.0, 8192, 4096, "bf16", 2.0, 2.0, "awq") == \
        gemm_time_s(hw, 64.0, 8192, 4096, "bf16", 2.0, 2.0, 2.0)  # the LM head of an AWQ model


def _decode_step_s(model: str, hw: str, quantization: str = "none") -> float:
    spec = load_model(model)
    quant = QuantConfig.from_user(quantization=quantization, model_dtype=spec.torch_dtype)
    cost = StepCostModel(spec, load_profile(hw), quant)
    return float(cost.time_s(StepArrays(np.zeros(32, dtype=np.int64) + 1, np.full(32, 1000), np.ones(32, bool))))


def test_fp8_on_ampere_runs_weight_only_marlin() -> None:
    """vLLM's Fp8LinearMethod below capability 8.9 (A100): fp8 weights, bf16 math; a decode step streams half the
    bytes of bf16's."""
    spec = load_model("llama-3.1-8b")
    cost = StepCostModel(spec, load_profile("a100-80gb-sxm"), QuantConfig.from_user(quantization="fp8"))
    assert (cost.quant.gemm_dtype, cost.quant.weight_bytes_per_param) == ("bf16", 1.0)
    bf16, fp8 = _decode_step_s("llama-3.1-8b", "a100-80gb-sxm"), _decode_step_s("llama-3.1-8b", "a100-80gb-sxm", "fp8")
    assert 0.5 < fp8 / bf16 < 0.8
    assert _decode_step_s("qwen3-8b-fp8", "a100-80gb-sxm") < _decode_step_s("qwen3-8b", "a100-80gb-sxm")
    # compressed-tensors FP8-dynamic (vLLM CompressedTensorsW8A16Fp8 below capability 8.9): the same Marlin path
    spec = load_model("llama-3.1-8b-instruct-fp8-dynamic")
    assert StepCostModel(spec, load_profile("a100-80gb-sxm"), QuantConfig.from_user()).quant.gemm_dtype == "bf16"


def test_nvfp4_on_hopper_runs_weight_only_marlin() -> None:
    cost = StepCostModel(load_model("llama-3.3-70b-instruct-fp4"), load_profile("h100-sxm"),
                         QuantConfig.from_user(), tp=2)
    assert cost.quant.gemm_dtype == "bf16" and cost.quant.quantization == "nvfp4"


def test_modelopt_fp8_and_fp8_experts_without_fp8_are_refused() -> None:
    with pytest.raises(UserError, match="ModelOpt FP8 checkpoint.*capability >= 8.9.*'a100-80gb-sxm'"):
        StepCostModel(load_model("llama-3.1-8b-instruct-fp8"), load_profile("a100-80gb-sxm"), QuantConfig.from_user())
    with pytest.raises(UserError, match="MoE experts in fp8 need fp8 tensor cores.*Marlin MoE .* not modelled"):
        StepCostModel(load_model("qwen3-30b-a3b"), load_profile("a100-80gb-sxm"),
                      QuantConfig.from_user(quantization="fp8"))


def test_modelopt_fp8_round_trips_its_producer() -> None:
    spec = load_model("llama-3.1-8b-instruct-fp8")
    assert spec.checkpoint_quant is not None and spec.checkpoint_quant.producer == "modelopt"
    assert ModelSpec.from_hf_config(spec.to_hf_config(), name=spec.name) == spec


def test_simulate_names_the_kernel_and_profiles_the_unfitted_factor(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--model", "llama-3.1-8b-instruct-awq-int4", "--hardware", "a100-80gb-sxm", "--dataset-name",
            "random", "--num-prompts", "4", "--random-input-len", "64", "--random-output-len", "4"]
    assert main(args) == 0
    assert "quantization=awq (Marlin W4A16, unfitted)" in capsys.readouterr().out
    assert main([*args[:2], "llama-3.1-8b-instruct-w8a8", *args[3:]]) == 0
    assert "quantization=int8 (CUTLASS W8A8 int8 at the fp8 kernels' fit, unfitted)" in capsys.readouterr().out
    assert main(["profiles", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(r["unfitted"] == {"marlin_compute_factor": 1.0} for r in rows if r["kind"] == "gpu")
