"""Single operators, vectorized: the `roofline predict-ops` schema and predictor (also the fits on measured
operator tables)."""

from __future__ import annotations

import numpy as np

from roofline.cost.hardware import HardwareProfile
from roofline.cost.kernels import kernel_family
from roofline.cost.kernels.attention import attention_decode_time_s, attention_prefill_time_s, attention_q_tile_tokens
from roofline.cost.kernels.collectives import all_reduce_time_s
from roofline.cost.kernels.gemm import act_quant_time_s
from roofline.cost.kernels.moe import moe_row_tiles, moe_time_s
from roofline.cost.op_time import gemm_formula
from roofline.cost.ops import attention_pairs, decode_attention_shape, expected_experts_touched, prefill_attention_shape
from roofline.cost.quant import EIGHT_BIT_DTYPES

_ATTENTION_ELEMENT_BYTES = 2.0  # Q and O of flash attention are bf16/fp16

# Columns each single-operator kind needs (the `roofline predict-ops` input schema).
SINGLE_OP_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k", "dtype"),
    "attention_prefill": ("batch_size", "seq_len", "num_heads", "num_kv_heads", "head_dim", "dtype", "kv_dtype"),
    "attention_decode": ("batch_size", "seq_len", "num_heads", "num_kv_heads", "head_dim", "dtype", "kv_dtype"),
    "all_reduce": ("message_bytes", "num_devices", "dtype"),
    "moe": ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "dtype"),
}
# Columns a kind may have (true or false; `roofline predict-ops`): absent, the value in the comment. moe `gated`:
# gate and up projections with SiLU-and-mul between (true, SwiGLU experts), or one up projection and an elementwise
# activation (false, Nemotron-H's relu2 experts; `moe_time_s`).
OPTIONAL_OP_COLUMNS: dict[str, tuple[str, ...]] = {"moe": ("gated",)}  # gated: true
# predict-ops dtype names -> (peak dtype, bytes per element).
OP_DTYPES: dict[str, tuple[str, float]] = {"bf16": ("bf16", 2.0), "fp16": ("fp16", 2.0), "fp8": ("fp8", 1.0),
                                           "int8": ("int8", 1.0), "fp32": ("fp32", 4.0)}


def predict_single_ops(hw: HardwareProfile, kind: str, cols: dict[str, np.ndarray]) -> np.ndarray:
    """Seconds for each row of one operator kind; `cols` maps the kind's `SINGLE_OP_COLUMNS` to arrays
    (numbers as floats, dtypes as strings), already validated."""
    n_rows = len(next(iter(cols.values())))
    out = np.zeros(n_rows)
    for dtype in sorted(set(cols["dtype"])):
        sel = cols["dtype"] == dtype
        part = {k: v[sel] for k, v in cols.items()}
        out[sel] = _PREDICTORS[kind](hw, part, dtype)
    return out


def _predict_gemm(hw: HardwareProfile, c: dict[str, np.ndarray], dtype: str) -> np.ndarray:
    peak, size = OP_DTYPES[dtype]
    m, n, k = c["m"], c["n"], c["k"]
    # W8A8 (vLLM static per-tensor fp8 / int8): bf16 output, the bf16 input is quantized by a kernel first.
    t = gemm_formula(hw)(hw, m, n, k, peak, size, size, max(size, 2.0))
    if peak in EIGHT_BIT_DTYPES:
        t = t + act_quant_time_s(hw, m, k, 2.0)
    return t


def _attention_shape(c: dict[str, np.ndarray], dtype: str) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """(peak dtype, kv bytes per element, q/o bytes per token, kv bytes per token) of attention rows. The math
    runs at the activation dtype's peak also with an fp8 KV cache (see `roofline.cost.ops.attention_records`)."""
    kvb = np.where(c["kv_dtype"] == "fp8", 1.0, OP_DTYPES[dtype][1])
    qo_token = c["num_heads"] * c["head_dim"] * _ATTENTION_ELEMENT_BYTES
    kv_token = 2 * c["num_kv_heads"] * c["head_dim"] * kvb
    return OP_DTYPES[dtype][0], kvb, qo_token, kv_token


def _predict_attention_prefill(hw: HardwareProfile, c: dict[str, np.ndarray], dtype: str) -> np.ndarray:
    """`batch_size` prompts of `seq_len` tokens each, no earlier context."""
    peak, _, qo_token, kv_token = _attention_shape(c, dtype)
    b, s, d, h, kv = c["batch_size"], c["seq_len"], c["head_dim"], c["num_heads"], c["num_kv_heads"]
    kernels = kernel_family(hw.family).attention
    q_tile = np.array([attention_q_tile_tokens(int(x), int(y), int(z), kernels) for x, y, z in zip(d, h, kv)])
    tiles = np.ceil(s / q_tile)
    shape = prefill_attention_shape(h, kv, d, q_tile, b * s, b * attention_pairs(s, 0.0, np.inf), b * tiles,
                                    b * (tiles * q_tile - s) * s, b * s, qo_token, kv_token, kernels)
    return attention_prefill_time_s(hw, *shape, peak, c["kv_dtype"] == "fp8")


def _predict_attention_decode(hw: HardwareProfile, c: dict[str, np.ndarray], dtype: str) -> np.ndarray:
    """`batch_size` sequences of one new token each, attending `seq_len` keys (the cache and itself)."""
    peak, _, qo_token, kv_token = _attention_shape(c, dtype)
    b, s = c["batch_size"], c["seq_len"]
    shape = decode_attention_shape(c["num_heads"], c["num_kv_heads"], c["head_dim"], b, b * s, qo_token, kv_token,
                                   kernel_family(hw.family).attention)
    return attention_decode_time_s(hw, *shape, peak, c["kv_dtype"] == "fp8")


def _predict_all_reduce(hw: HardwareProfile, c: dict[str, np.ndarray], dtype: str) -> np.ndarray:
    return all_reduce_time_s(hw, c["message_bytes"], c["num_devices"])


def _predict_moe(hw: HardwareProfile, c: dict[str, np.ndarray], dtype: str) -> np.ndarray:
    """Uniform random routing (the serving model's assumption), unless `c` carries `expert_loads` (rows x experts,
    tokens per expert): the operator tables' own routing, a measurement condition only
    `roofline.calibration.fit.predict_table` passes (`roofline.calibration.moe_routing`)."""
    peak, size = OP_DTYPES[dtype]
    t, e, topk = c["num_tokens"], c["num_experts"], c["topk"]
    gated = c.get("gated", True)
    if "expert_loads" not in c:
        touched = expected_experts_touched(t, topk, e)
        return moe_time_s(hw, t * topk / touched, touched, c["hidden_size"], c["inter_size"], peak, size, 2.0,
                          num_experts=e, num_tokens=t, gated=gated, gemm=gemm_formula(hw))
    touched, row_tiles = moe_row_tiles(c["expert_loads"])
    return moe_time_s(hw, t * topk / touched, touched, c["hidden_size"], c["inter_size"], peak, size, 2.0,
                      row_tiles=row_tiles, num_experts=e, num_tokens=t, gated=gated, gemm=gemm_formula(hw))


_PREDICTORS = {
    "gemm": _predict_gemm,
    "attention_prefill": _predict_attention_prefill,
    "attention_decode": _predict_attention_decode,
    "all_reduce": _predict_all_reduce,
    "moe": _predict_moe,
}
