"""Block-fp8 experts on DeepGEMM's padded contiguous grouped GEMM, as vLLM 0.12 runs them on Hopper
(`roofline.cost.quant.resolve_deepgemm_moe`, `roofline.cost.kernels.moe.deepgemm_padded_moe_s`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from roofline.cost.hardware import load_profile
from roofline.cost.kernels.gemm_block_scaled import (
    DEEPGEMM_CONTIGUOUS_BLOCK_M,
    deepgemm_sm90_contiguous_time_s,
    deepgemm_sm90_layout,
)
from roofline.cost.kernels.moe import deepgemm_padded_moe_s, moe_time_s
from roofline.cost.quant import DEEPGEMM_FP8_BLOCK_PADDED, TRITON_FP8_BLOCK, QuantConfig, resolve_deepgemm_moe
from roofline.cost.step_shape import StepArrays
from roofline.engine_args import EngineArgs
from roofline.sim.deployment import make_deployment

_FP8_IN = 1.0 + 4.0 / 128  # fp8 values and one fp32 scale per 128


def _deployment(version: str, tp: int = 2, moe_backend: str = "auto"):  # noqa: ANN202
    return make_deployment("qwen3-235b-a22b-fp8", "h200-sxm",
                           EngineArgs(tensor_parallel_size=tp, moe_backend=moe_backend, max_model_len=8192),
                           vllm_version=version)


@pytest.mark.parametrize("version, deepgemm_family, expert_tp, backend, padded", [
    ("0.12.0", True, 2, "auto", True),
    ("0.12.1", True, 4, "auto", True),
    ("0.11.0", True, 2, "auto", False),  # E8M0 off on Hopper: Triton below 128 tokens
    ("0.13.0", True, 2, "auto", False),  # padding blocks marked -1 and skipped
    ("0.32.0", True, 2, "auto", False),
    ("0.12.0", True, 8, "auto", False),  # 0.12's Triton fallback at an experts' TP of 8
    ("0.12.0", True, 2, "triton", False),  # --moe-backend triton
    ("0.12.0", False, 2, "auto", False),  # no DeepGEMM grouped kernel on the family
])
def test_vllm_0_12_runs_block_fp8_experts_on_padded_deepgemm(version: str, deepgemm_family: bool, expert_tp: int,
                                                            backend: str, padded: bool) -> None:
    quant = QuantConfig.from_user(quantization="fp8-block", moe_backend=backend)
    resolved = resolve_deepgemm_moe(quant, deepgemm_family, version, expert_tp)
    assert resolved.deepgemm_padded_moe is padded
    assert (resolved.expert_kernel == DEEPGEMM_FP8_BLOCK_PADDED) is padded


def test_only_block_fp8_experts_take_the_padded_kernel() -> None:
    for scheme in ("none", "fp8", "mxfp4"):
        quant = resolve_deepgemm_moe(QuantConfig.from_user(quantization=scheme), True, "0.12.0", 2)
        assert quant.expert_kernel != DEEPGEMM_FP8_BLOCK_PADDED


def test_contiguous_grouped_gemm_takes_128_row_blocks() -> None:
    m = np.array([128.0, 16384.0, 81920.0])
    block_m, _ = deepgemm_sm90_layout(m, 1536.0, 4096.0, 132, 232448, (DEEPGEMM_CONTIGUOUS_BLOCK_M,))
    assert np.all(block_m == 128.0)


def test_padded_moe_computes_every_experts_blocks_whatever_the_batch() -> None:
    # Qwen3-235B at TP 2 (128 experts of 4096 x 768): 1 and 16 tokens of top-8 both make 16,384 rows (8 or 128 routed
    # + 128 x 127, rounded up to 128), so the two calls differ only by the weights of the experts they touch and the
    # routed rows' streaming passes; 17 tokens (136 routed) make 16,512.
    hw = load_profile("h200-sxm")
    h, i, e = 4096.0, 768.0, 128.0

    def gemms(rows: float, touched: float) -> float:
        w = 1.0 * min(touched + 1.0, e)
        return float(deepgemm_sm90_contiguous_time_s(hw, rows, 2 * i, h, w, _FP8_IN, 2.0)
                     + deepgemm_sm90_contiguous_time_s(hw, rows, h, i, w, _FP8_IN, 2.0))

    one = float(deepgemm_padded_moe_s(hw, 1.0, 8.0, h, i, e, 1.0, 1.0, 2.0))
    same_touched = float(deepgemm_padded_moe_s(hw, 16.0, 8.0, h, i, e, 16.0, 1.0, 2.0))
    bw = hw.memory_bandwidth_bytes_per_s
    # the 120 more routed rows' scatter and gather and the 15 more tokens' input quantization; nothing on the GEMMs
    assert same_touched - one == pytest.approx(
        (2 * 120 * h * _FP8_IN + (120 + 15) * h * 2.0) / (bw * hw.efficiency.memory_efficiency)
        + 15 * h * (2.0 + _FP8_IN) / (bw * hw.efficiency.act_group_quant_memory_efficiency), rel=1e-9)
    rows_17 = float(deepgemm_padded_moe_s(hw, 136.0 / 80.0, 80.0, h, i, e, 17.0, 1.0, 2.0)) \
        - float(deepgemm_padded_moe_s(hw, 128.0 / 80.0, 80.0, h, i, e, 16.0, 1.0, 2.0))
    assert rows_17 > gemms(16512.0, 80.0) - gemms(16384.0, 80.0) > 0.0


def test_moe_time_routes_the_padded_scheme_and_adds_the_fixed_part() -> None:
    hw = load_profile("h200-sxm")
    t = moe_time_s(hw, 2.0, 64.0, 4096.0, 768.0, "fp8", 1.0, 2.0, DEEPGEMM_FP8_BLOCK_PADDED, num_experts=128.0,
                   num_tokens=16.0)
    assert t == pytest.approx(float(deepgemm_padded_moe_s(hw, 2.0, 64.0, 4096.0, 768.0, 128.0, 16.0, 1.0, 2.0))
                              + hw.efficiency.moe_fp8_block_fixed_s)


def test_qwen3_235b_decode_on_vllm_0_12_is_nearly_flat_in_the_batch() -> None:
    # The deployment resolves the row's release: 0.12.0 pads, 0.13.0 runs the family's block-fp8 fit.
    old, new = _deployment("0.12.0"), _deployment("0.13.0")
    assert old.cost_model.quant.expert_kernel == DEEPGEMM_FP8_BLOCK_PADDED
    assert new.cost_model.quant.expert_kernel == "fp8-block"
    assert _deployment("0.12.0", moe_backend="triton").cost_model.quant.expert_kernel == TRITON_FP8_BLOCK

    def moe_s(deployment, batch: int) -> float:  # noqa: ANN001
        cost = deployment.cost_model.cost(StepArrays(np.ones(batch, dtype=np.int64), np.full(batch, 3000),
                                                     np.ones(batch, dtype=np.int64)))
        return sum(op.time_s for op in cost.ops if op.kind == "moe")

    # Padded: 16,384 rows at 1 and at 16 sequences, only the touched experts' weights grow; the fit follows them.
    assert moe_s(old, 16) / moe_s(old, 1) < 1.3
    assert moe_s(new, 16) / moe_s(new, 1) > 3.0
    assert moe_s(old, 1) > 4.0 * moe_s(new, 1)


def test_the_flag_is_part_of_the_quant_config_only_where_resolved() -> None:
    quant = QuantConfig.from_user(quantization="fp8-block")
    assert not quant.deepgemm_padded_moe
    assert replace(quant, deepgemm_padded_moe=True).expert_kernel == DEEPGEMM_FP8_BLOCK_PADDED
