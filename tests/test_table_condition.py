"""The operator tables' measurement condition (warm L2 between graph replays) and that serving never sees it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from engine.core.model_spec import ModelSpec
from roofline.calibration.calibrate import stage_params
from roofline.calibration.fit import l2_resident_rows, predict_table
from roofline.calibration.op_tables import GEMM_LAYERS_PER_REPLAY, replay_working_set_bytes
from roofline.cost.hardware import load_profile
from roofline.cost.quant import QuantConfig
from roofline.cost.step_cost import StepCostModel, predict_single_ops


def _gemm_rows() -> pd.DataFrame:
    # m = 1: 6 copies of 4096 x 4096 bf16 weights = 201 MB (cold on a 96 MiB L2); 1024 x 4096: 50 MB (warm).
    return pd.DataFrame({"m": [1.0, 1.0], "n": [4096.0, 1024.0], "k": [4096.0, 4096.0], "dtype": ["bf16", "bf16"]})


def _cols(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    return {c: frame[c].to_numpy(dtype=str if "dtype" in c else np.float64) for c in frame.columns}


def test_gemm_working_set_is_six_layers_of_weights_and_outputs_plus_the_shared_input() -> None:
    ws = replay_working_set_bytes("gemm", _cols(_gemm_rows()))
    assert GEMM_LAYERS_PER_REPLAY == 6
    assert ws[0] == 6 * (4096 * 4096 * 2 + 4096 * 2) + 4096 * 2
    fp8 = replay_working_set_bytes("gemm", {"m": np.array([2.0]), "n": np.array([8.0]), "k": np.array([16.0]),
                                            "dtype": np.array(["fp8"])})
    assert fp8[0] == 6 * (8 * 16 * 1 + 2 * 8 * 2 + 2 * 16 * 1) + 2 * 16 * 2  # plus the quantized input per layer


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
    times = [StepCostModel(spec, hw, QuantConfig.from_user(model_dtype="bfloat16")).step_time_s(q, c, e) for hw in (l40s, fast)]
    assert times[0] == times[1]
