"""The operator tables' measurement conditions (warm L2 between graph replays; the MoE tables' token distributions)
and that serving never sees them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from engine.core.model_spec import ModelSpec
from roofline.calibration import fit, moe_routing
from roofline.calibration.calibrate import stage_params
from roofline.calibration.fit import l2_resident_rows, predict_table
from roofline.calibration.moe_routing import NUM_POWER_LAW_DRAWS, balanced_loads, power_law_loads, table_expert_loads
from roofline.calibration.op_tables import GEMM_LAYERS_PER_REPLAY, replay_working_set_bytes
from roofline.cost.hardware import load_profile
from roofline.cost.kernels.moe import moe_time_s
from roofline.cost.ops import expected_experts_touched
from roofline.cost.quant import QuantConfig
from roofline.cost.single_ops import predict_single_ops
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepArrays
from roofline.registry import load_model


def _gemm_rows() -> pd.DataFrame:
    # m = 1: 6 copies of 4096 x 4096 bf16 weights = 201 MB (cold on a 96 MiB L2); 1024 x 4096: 50 MB (warm).
    return pd.DataFrame({"m": [1.0, 1.0], "n": [4096.0, 1024.0], "k": [4096.0, 4096.0], "dtype": ["bf16", "bf16"]})


def _cols(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    return {c: frame[c].to_numpy(dtype=str if "dtype" in c else np.float64) for c in frame.columns}


def test_gemm_working_set_is_six_layers_of_weights_one_output_and_the_shared_input() -> None:
    # The collector discards each layer's output, so graph capture hands the six layers one output buffer.
    ws = replay_working_set_bytes("gemm", _cols(_gemm_rows()))
    assert GEMM_LAYERS_PER_REPLAY == 6
    assert ws[0] == 6 * 4096 * 4096 * 2 + 4096 * 2 + 4096 * 2
    fp8 = replay_working_set_bytes("gemm", {"m": np.array([2.0]), "n": np.array([8.0]), "k": np.array([16.0]),
                                            "dtype": np.array(["fp8"])})
    assert fp8[0] == 6 * 8 * 16 * 1 + 2 * 8 * 2 + 2 * 16 * 1 + 2 * 16 * 2  # one quantized input, reused too


def test_decode_working_set_counts_the_cache_in_its_dtype() -> None:
    cols = {"batch_size": np.array([2.0]), "seq_len": np.array([10.0]), "num_heads": np.array([4.0]),
            "num_kv_heads": np.array([1.0]), "head_dim": np.array([8.0]), "dtype": np.array(["bf16"]),
            "kv_dtype": np.array(["fp8"])}
    qo, kv = 2 * 4 * 8 * 2, 2 * 1 * 8
    assert replay_working_set_bytes("attention_decode", cols)[0] == 2 * (qo + kv * 2) + 2 * 10 * kv * 1


def test_only_rows_that_fit_in_the_l2_read_at_the_l2_rate() -> None:
    l40s = load_profile("l40s")
    hw = replace(l40s, efficiency=replace(l40s.efficiency, l2_bandwidth_factor=3.0))
    frame = _gemm_rows()
    assert list(l2_resident_rows(hw, "gemm", _cols(frame))) == [False, True]
    serving = predict_single_ops(hw, "gemm", _cols(frame))
    table = predict_table(hw, "gemm", frame)
    assert table[0] == serving[0]
    assert table[1] < serving[1]


def test_no_l2_term_without_an_l2_capacity_or_at_factor_one() -> None:
    b200 = load_profile("b200")
    assert b200.l2_cache_bytes is None and l2_resident_rows(b200, "gemm", _cols(_gemm_rows())) is None
    assert "l2_bandwidth_factor" not in stage_params(("l2_bandwidth_factor",), "blackwell", l2_known=False)
    l40s = load_profile("l40s")
    hw = replace(l40s, efficiency=replace(l40s.efficiency, l2_bandwidth_factor=1.0))
    np.testing.assert_array_equal(predict_table(hw, "gemm", _gemm_rows()),
                                  predict_single_ops(hw, "gemm", _cols(_gemm_rows())))


def test_the_serving_step_model_ignores_the_l2_factor() -> None:
    l40s = load_profile("l40s")
    # Serving: each layer reads other weights and another KV cache, so no step reads at the L2 rate.
    spec = ModelSpec(name="m", architecture="LlamaForCausalLM", num_layers=4, hidden_size=1024, num_heads=16,
                     num_kv_heads=4, head_dim=64, intermediate_size=4096, vocab_size=32000)
    fast = replace(l40s, efficiency=replace(l40s.efficiency, l2_bandwidth_factor=64.0))
    q, c, e = np.array([1, 1, 300]), np.array([500, 900, 0]), np.array([1, 1, 1])
    bf16 = QuantConfig.from_user(model_dtype="bfloat16")
    times = [StepCostModel(spec, hw, bf16).time_s(StepArrays(q, c, e)) for hw in (l40s, fast)]
    assert times[0] == times[1]


# The fused-MoE tables' token distributions (roofline.calibration.moe_routing): a measurement condition too.

def test_balanced_table_rows_are_a_round_robin_over_every_expert() -> None:
    # 16 tokens, top-8 of 128: stride 16, token t picks t, t + 16, ..., t + 112: each expert exactly once, where
    # uniform random routing touches 82 experts in expectation.
    assert list(balanced_loads(16, 128, 8)) == [1] * 128
    assert expected_experts_touched(16, 8, 128) == pytest.approx(82.4, abs=0.1)
    # Fewer tokens than the stride: t * stride / T spreads them (4 tokens: experts 0, 4, 8, ... mod 128).
    loads = balanced_loads(4, 128, 8)
    assert loads.sum() == 32 and loads.max() == 1 and list(np.nonzero(loads)[0][:4]) == [0, 4, 8, 12]
    assert table_expert_loads("balanced", 16, 128, 8).shape == (1, 128)


def test_power_law_rows_cap_each_expert_at_the_token_count_and_are_seeded() -> None:
    loads = table_expert_loads("power_law_1.2", 8192, 128, 8)
    assert loads.shape == (NUM_POWER_LAW_DRAWS, 128)
    assert (loads.sum(axis=1) == 8192 * 8).all() and loads.max() <= 8192
    assert (np.diff(loads, axis=1) <= 0).all()  # sorted descending, hottest first
    assert 7000 < np.median(loads[:, 0]) <= 8192  # the hottest expert takes most tokens (collector: ~7.7k)
    again = power_law_loads(8192, 128, 8, 1.2, np.random.default_rng(0))
    np.testing.assert_array_equal(again, power_law_loads(8192, 128, 8, 1.2, np.random.default_rng(0)))
    # Few tokens: the counts drawn on [0.01, 2] round mostly to 0 or 1 and the rest is filled up one token per
    # least-loaded expert, so nearly every routed token has its own expert.
    assert (table_expert_loads("power_law_1.01", 4, 128, 8) > 0).sum(axis=1).mean() > 30


def test_overflow_goes_one_token_at_a_time_to_the_least_loaded_expert_below_the_cap() -> None:
    assert list(moe_routing._raise_lowest(np.array([5, 0, 2, 5]), 4, 5)) == [3, 3, 5, 5]
    assert list(moe_routing._raise_lowest(np.array([5, 5]), 3, 5)) == [5, 5]  # nowhere below the cap: dropped
    assert sorted(moe_routing._lower_highest(np.array([4, 1, 4]), 3)) == [1, 2, 3]


def test_moe_table_rows_take_the_tables_routing_serving_never_does(monkeypatch: pytest.MonkeyPatch) -> None:
    h100 = load_profile("h100-sxm")
    frame = pd.DataFrame({"num_tokens": [16.0, 16.0], "hidden_size": [4096.0] * 2, "inter_size": [1536.0] * 2,
                          "topk": [8.0] * 2, "num_experts": [128.0] * 2, "dtype": ["bf16"] * 2,
                          "distribution": ["balanced", "power_law_1.2"]})
    uniform = predict_single_ops(h100, "moe", _cols(frame.drop(columns="distribution")))
    table = predict_table(h100, "moe", frame)
    assert table[0] > uniform[0]  # 128 experts' weights read instead of 82
    np.testing.assert_array_equal(predict_table(h100, "moe", frame.drop(columns="distribution")), uniform)

    def fail(*args: object) -> None:
        raise AssertionError("the serving step model read the tables' token distributions")

    for module in (moe_routing, fit):  # the module and the name predict_table calls
        monkeypatch.setattr(module, "table_routing", fail)
    monkeypatch.setattr(moe_routing, "table_expert_loads", fail)
    spec = load_model("qwen3-30b-a3b")
    cost = StepCostModel(spec, h100, QuantConfig.from_user(), 1)
    q, c, e = np.array([1, 1, 300]), np.array([500, 900, 0]), np.array([1, 1, 1])
    assert cost.time_s(StepArrays(q, c, e)) > 0
    with pytest.raises(AssertionError, match="serving step model"):
        predict_table(h100, "moe", frame)


def test_unequal_expert_loads_pad_a_row_tile_per_expert() -> None:
    h100 = load_profile("h100-sxm")
    args = (h100, np.array([32.0]), np.array([64.0]), 4096.0, 1536.0, "bf16", 2.0, 2.0)
    even = moe_time_s(*args)
    np.testing.assert_array_equal(moe_time_s(*args, row_tiles=lambda tm: 64 * np.ceil(32.0 / tm)), even)
    # The same 2048 routed rows, one hot expert and 63 experts of one token each: ceil(1985 / tm) + 63 row tiles.
    loads = np.array([[1985.0] + [1.0] * 63])
    skewed = moe_time_s(*args, row_tiles=lambda tm: np.ceil(loads / tm).sum(axis=1))
    assert skewed[0] > even[0]
