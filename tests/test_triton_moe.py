"""`--moe-backend triton`: vLLM's Triton fused MoE on block-fp8 experts (its own fit on Blackwell, the family's fit
where Triton is the default), its row block, its masked rows under expert parallelism, and the refusals."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from roofline.cli import main
from roofline.cost.hardware import load_profile
from roofline.cost.kernels.moe import TRITON_FP8_BLOCK, moe_time_s, triton_masked_rows_s
from roofline.cost.quant import QuantConfig
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepArrays
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.registry import load_model
from roofline.sim.deployment import make_deployment

# MiniMax-M2.5's experts (hidden 3072, intermediate 1536, top-8 of 256), block fp8 (1 + 4 / 128^2 bytes a weight).
_MINIMAX = dict(hidden=3072.0, inter=1536.0, topk=8, experts=256, weight_bytes=1.0 + 4.0 / 128**2)


def _experts_s(model: StepCostModel, tokens: int) -> float:
    cost = model.cost(StepArrays(np.array([tokens]), np.array([0]), np.array([True])))
    return float(cost.breakdown_s["moe_experts"])


def _triton_s(hw_id: str, tokens: float, scheme: str = TRITON_FP8_BLOCK) -> float:
    m = _MINIMAX
    routed = tokens * m["topk"]
    touched = min(float(m["experts"]), routed)
    return float(moe_time_s(load_profile(hw_id), routed / touched, touched, m["hidden"], m["inter"], "fp8",
                            m["weight_bytes"], 2.0, scheme, num_experts=float(m["experts"]), num_tokens=tokens))


def test_triton_backend_runs_block_fp8_experts_on_its_own_fit_on_blackwell_and_the_default_on_hopper() -> None:
    spec = load_model("minimax-m2.5")
    for hw_id, same in (("b200", False), ("h200-sxm", True)):
        hw = load_profile(hw_id)
        auto = StepCostModel(spec, hw, QuantConfig.from_user(), 4)
        triton = StepCostModel(spec, hw, QuantConfig.from_user(moe_backend="triton"), 4)
        assert triton.quant.expert_kernel == TRITON_FP8_BLOCK
        for tokens in (1, 64, 2048):
            assert (_experts_s(triton, tokens) == _experts_s(auto, tokens)) is same, (hw_id, tokens)
    # Blackwell: the Triton kernel is slower than TRT-LLM-gen at a prefill's tokens, as the B200 tables time them
    # (vLLM 0.22.0 Triton against 0.24.0 TRT-LLM-gen: 1.47-2.15x from 80 tokens at moe_tp 2 / 4).
    b200 = load_profile("b200")
    assert _experts_s(StepCostModel(spec, b200, QuantConfig.from_user(moe_backend="triton"), 4), 2048) \
        > 1.3 * _experts_s(StepCostModel(spec, b200, QuantConfig.from_user(), 4), 2048)


def test_triton_row_block_follows_the_calls_tokens_as_vllms_default_config() -> None:
    # get_default_config: BLOCK_SIZE_M 16 up to 64 tokens, 64 above. B200's table (aiconfigurator-core 0.12.0,
    # vLLM 0.22.0, moe_tp 1, balanced) steps from 0.62 to 1.02 ms between 64 and 80 tokens; the fitted model must
    # show a step of the same sense and at least half the size there, and none between 48 and 64.
    at_48, at_64, at_80 = (_triton_s("b200", t) for t in (48.0, 64.0, 80.0))
    assert at_80 / at_64 > 1.3 and at_64 / at_48 < 1.1
    for tokens, measured_ms in ((64.0, 0.621), (80.0, 1.023), (8192.0, 4.344)):  # the 0.19.0 table's values
        assert _triton_s("b200", tokens) * 1e3 == pytest.approx(measured_ms, rel=0.2)


def test_triton_expert_parallel_at_dp1_adds_the_other_ranks_rows() -> None:
    # Every rank is called with all the step's tokens and runs the other ranks' routed rows through its zero-writing
    # blocks, activation, quantization and moe_sum (`triton_masked_rows_s`); the default TRT-LLM-gen MoE does not.
    engine = dict(tensor_parallel_size=2, enable_expert_parallel=True, max_model_len=8192)
    triton = make_deployment("minimax-m2.5", "b200", EngineArgs(moe_backend="triton", **engine))
    assert triton.moe is not None
    moe, tokens = triton.moe, 4096
    busiest = float(moe.busiest_tokens(tokens))
    h, i = moe.group_shape
    masked = moe.num_moe_layers * triton_masked_rows_s(moe.hw, (tokens - busiest) * moe.topk, h, i, 2.0)
    own = float(moe._moe_s(np.array([busiest]), moe.group_shape, moe.local_experts, np.array([float(tokens)]))[0])
    assert moe.experts_s(tokens) == pytest.approx(own + masked, rel=1e-12)
    assert masked > 0.0
    default = make_deployment("minimax-m2.5", "b200", EngineArgs(**engine)).moe
    assert default is not None
    assert default.experts_s(tokens) == pytest.approx(
        float(default._moe_s(np.array([busiest]), default.group_shape, default.local_experts)[0]), rel=1e-12)
    assert triton.engine_record["moe_backend"] == "triton"


@pytest.mark.parametrize("model_id,hw_id,match", [
    ("qwen3-30b-a3b", "b200", "runs its experts in 16-bit on device 'b200'"),
    ("gpt-oss-120b", "h100-sxm", "runs its experts in mxfp4"),
    ("kimi-k2.5-nvfp4", "b200", "runs its experts in nvfp4"),
    ("llama-3.1-8b", "h100-sxm", "has no MoE experts"),
])
def test_triton_backend_refuses_experts_it_does_not_model(model_id: str, hw_id: str, match: str) -> None:
    with pytest.raises(UserError, match=f"--moe-backend triton: .*{match}.*allowed: auto"):
        StepCostModel(load_model(model_id), load_profile(hw_id), QuantConfig.from_user(moe_backend="triton"), 8)


def test_triton_backend_on_16_bit_experts_where_it_is_the_default_is_the_default() -> None:
    spec, hw = load_model("qwen3-30b-a3b"), load_profile("h100-sxm")
    auto = StepCostModel(spec, hw, QuantConfig.from_user(), 1)
    triton = StepCostModel(spec, hw, QuantConfig.from_user(moe_backend="triton"), 1)
    assert _experts_s(triton, 512) == _experts_s(auto, 512)


def test_a_bad_moe_backend_is_one_line_and_exit_2() -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--model", "minimax-m2.5", "--hardware", "b200", "--moe-backend", "tritonn"])
    assert exit_info.value.code == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and "--moe-backend: invalid choice: 'tritonn'" in lines[0] and "'triton'" in lines[0]
