"""The MoE fits of a kernel family on aiconfigurator-core's vLLM MoE tables (stages `moe_joint`, `moe_wide_tile`).

    tables = {system: load_table(system) for system in ("h100_sxm", "h200_sxm")}
    values = fit_joint(chips, tables)       # {format: {EfficiencyParams field: SI value}}, one set per family
    factor, tried = fit_wide_tile(chips, tables)   # Blackwell's moe_trtllm_wide_tile_bandwidth_factor

Data: `aiconfigurator_core/systems/data/<system>/moe/vllm/<newest version>/moe_perf.parquet` (read from the installed
package), rows without expert parallelism (moe_ep_size 1; moe_tp_size > 1 rows are the per-rank width
inter_size / moe_tp_size, as tensor parallelism runs them), the kernel vLLM runs by default for each format (the one
with the most rows; for MXFP4 the gpt-oss path). Split by shape: a shape (hidden, inter, topk, experts, moe_tp) is
held out when a hash of it is 0 mod 5; every token count of a shape goes to the same side; fits use the balanced
training rows, routed as the collector routes them (`roofline.calibration.moe_routing`). Nemotron-H's experts have no
gate (`roofline.calibration.op_tables.nongated_moe_shapes`).

`fit_joint`: bf16 and per-tensor fp8 experts of one family (Triton and FlashInfer CUTLASS on Hopper, FlashInfer
TRT-LLM on Blackwell: one kernel each), one parameter set per format over the family's GPUs together, minimizing the
median absolute log error (`roofline.calibration.fit.minimize_from_starts`). The TP = 1 rows of the op-table MoE stage
lack the TP-sliced (narrow) experts that separate the fixed costs from the per-tensor fp8 weight rate, so these
families take them from this fit (`roofline.cost.kernels.KernelFamily.fitted_elsewhere`). `fit_wide_tile`: one value for
the TRT-LLM formats of `TRTLLM_WIDE_TILE_SCHEMES`, each format's own three parameters refitted at every trial value
(`fit_format`). benchmarks/accuracy/moe_accuracy.py judges these fits and the other formats' on the held-out shapes.
"""

from __future__ import annotations

import glob
import zlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import lru_cache, partial
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd

from roofline.calibration.fit import minimize_bounded_scalar, minimize_from_starts
from roofline.calibration.moe_routing import mean_over_draws, table_routing
from roofline.calibration.op_tables import moe_rows_gated
from roofline.cost.hardware import HardwareProfile
from roofline.cost.kernels import kernel_family
from roofline.cost.kernels.moe import (
    TRITON_FP8_BLOCK,
    TRTLLM_WIDE_TILE_SCHEMES,
    moe_bandwidth_cap,
    moe_row_tiles,
    moe_time_s,
)
from roofline.cost.ops import expected_experts_touched
from roofline.cost.params import EFFICIENCY_PARAMS, GROUPS, group_fields, search_value
from roofline.cost.quant import _SCHEMES, MXFP8_MOE_BACKEND, QuantConfig, resolve_for_hardware

GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200", "gb200": "gb200", "b300_sxm": "b300"}
# table moe_dtype -> our scheme name (roofline.cost.quant)
FORMATS = {"bfloat16": "none", "fp8": "fp8", "fp8_block": "fp8-block", "nvfp4": "nvfp4", "w4a16_mxfp4": "mxfp4"}
FITTED = {"fp8-block": "moe_fp8_block", TRITON_FP8_BLOCK: "moe_triton_fp8_block", "mxfp4": "moe_w4a16",
          "nvfp4": "moe_fp4", "mxfp4-marlin": "moe_w4a16_marlin", "mxfp4-mxfp8": "moe_mxfp4_mxfp8"}
# MXFP4 experts with MXFP8 activations (`--moe-backend flashinfer-mxfp4-mxfp8`): the tables' FlashInfer TRT-LLM
# mxfp4 x mxfp8 kernel (`w4a8_mxfp4_mxfp8`, `vllm_mxfp4moe_flashinfer_trtllm_mxfp4_mxfp8_trtllmmxfp4expertsmodular`:
# DeepSeek-V4's experts, hidden 4096 / 7168, top-6 of 256 / 384), Blackwell only (`run_mxfp8`).
MXFP8_DTYPE = "w4a8_mxfp4_mxfp8"
MARLIN_KERNEL = "mxfp4moe_marlin_marlinexperts"  # substring of the tables' kernel_source for MXFP4 on Marlin
# The same Marlin MoE kernel (csrc/moe/marlin_moe_wna16) on int4 experts: Kimi-K2's compressed-tensors W4A16
# (`vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts`; hidden 7168, intermediate 2048, top-8 of 384,
# moe_tp 1-32): 4-bit weights with a bf16 scale per group of 32 (0.5 + 2/32 bytes per parameter), not padded.
# A second expert count and top-k for the Marlin fit (MXFP4's table holds top-16 of 896 only).
MARLIN_INT4_KERNEL = "wna16marlinmoe_marlin_marlinexperts"
MARLIN_INT4_DTYPE = "int4_wo"
MARLIN_INT4_WEIGHT_BYTES = 0.5 + 2.0 / 32


def _newest_moe_table(gpu: str) -> pd.DataFrame:
    """The newest vLLM MoE table of `gpu` in the installed aiconfigurator-core (versions compared numerically)."""
    import aiconfigurator_core
    root = Path(aiconfigurator_core.__file__).parent / "systems" / "data" / gpu / "moe" / "vllm"
    versions = sorted(glob.glob(str(root / "*" / "moe_perf.parquet")),
                      key=lambda p: tuple(int(x) if x.isdigit() else 0 for x in Path(p).parent.name.split(".")))
    return pd.read_parquet(versions[-1])


def _with_shape_split(d: pd.DataFrame) -> pd.DataFrame:
    """`d` with `held_out`: the shapes (hidden, inter, topk, experts, moe_tp) whose CRC32 is 0 mod 5."""
    shape = d[["hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size"]].astype(str).agg("-".join, axis=1)
    d["held_out"] = [zlib.crc32(s.encode()) % 5 == 0 for s in shape]
    return d.reset_index(drop=True)


def load_table(gpu: str) -> pd.DataFrame:
    d = _newest_moe_table(gpu)
    d = d[(d.moe_ep_size == 1) & d.moe_dtype.isin(list(FORMATS)) & (d.inter_size % d.moe_tp_size == 0)]
    keep = []
    for dtype, part in d.groupby("moe_dtype"):
        kernels = part.kernel_source.value_counts()
        gpt_oss = [k for k in kernels.index if "gptoss" in k]
        keep.append(part[part.kernel_source == (gpt_oss[0] if gpt_oss else kernels.index[0])])
    d = pd.concat(keep)
    d = d.assign(inter=d.inter_size // d.moe_tp_size, measured_s=d.latency * 1e-3, scheme=d.moe_dtype.map(FORMATS),
                 gated=moe_rows_gated(d))
    return _with_shape_split(d)


def predict(hw: HardwareProfile, d: pd.DataFrame, scheme: str, routing: str = "table") -> np.ndarray:
    """Seconds for the rows of one format. `routing`: "table", the tables' own token distributions
    (`roofline.calibration.moe_routing`, the mean over each row's draws); "uniform", the serving model's assumption
    (`roofline.cost.ops.expected_experts_touched`)."""
    if routing == "table":
        rows, touched, weights, row_tiles = _table_routing(tuple(zip(d.distribution, d.num_tokens, d.num_experts,
                                                                     d.topk)))
        return mean_over_draws(rows, weights, _predict(hw, d.iloc[rows], scheme, touched, row_tiles), len(d))
    assert routing == "uniform", routing
    touched = expected_experts_touched(d.num_tokens.to_numpy(np.float64), d.topk.to_numpy(np.float64),
                                       d.num_experts.to_numpy(np.float64))
    return _predict(hw, d, scheme, touched)


@lru_cache(maxsize=256)
def _table_routing(keys: tuple[tuple[str, int, int, int], ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                         Callable[[int], np.ndarray]]:
    """`table_routing` of rows (distribution, tokens, experts, top-k), with the touched experts and the row tiles
    per tile height of each entry (computed once per frame: the fits evaluate the same rows many times)."""
    rows, loads, weights = table_routing(*(np.array(col) for col in zip(*keys)))
    touched, row_tiles = moe_row_tiles(loads)
    return rows, touched, weights, row_tiles


def _quantization(scheme: str) -> str:
    """The `--quantization` scheme (`roofline.cost.quant`) of a format's experts: the kernel variants' base format."""
    if scheme in ("mxfp4-marlin", "mxfp4-mxfp8"):
        return "mxfp4"
    return "fp8-block" if scheme == TRITON_FP8_BLOCK else scheme


def _expert_dtype(hw: HardwareProfile, scheme: str) -> tuple[str, float]:
    """(the dtype the format's experts compute in on `hw`, their weight bytes per parameter)."""
    weight_bytes, gemm_dtype = _SCHEMES[_quantization(scheme)]
    dtype = "fp8" if scheme == "mxfp4-mxfp8" else gemm_dtype or "bf16"
    return (dtype if dtype in hw.supported_dtypes else "bf16"), weight_bytes or 2.0


def _predict(hw: HardwareProfile, d: pd.DataFrame, scheme: str, touched: np.ndarray,
             row_tiles: Callable[[int], np.ndarray] | None = None) -> np.ndarray:
    """Seconds for the rows of one format with `touched` experts each: routed tokens spread evenly over them, or
    the tables' unequal loads (`row_tiles`, `roofline.cost.kernels.moe.moe_time_s`)."""
    t = d.num_tokens.to_numpy(np.float64)
    k = d.topk.to_numpy(np.float64)
    marlin = scheme == "mxfp4-marlin"
    dtype, bytes_per_param = _expert_dtype(hw, scheme)
    weight_bytes: float | np.ndarray = bytes_per_param
    # The experts as the kernel holds them: MXFP4 kernels pad (roofline.cost.quant.resolve_for_hardware).
    backend = {"mxfp4-marlin": "marlin", "mxfp4-mxfp8": MXFP8_MOE_BACKEND}.get(scheme, "auto")
    quant = QuantConfig.from_user(quantization=_quantization(scheme), moe_backend=backend)
    align_h, align_i = resolve_for_hardware(quant, kernel_family(hw.family).moe).expert_alignment
    hidden = np.ceil(d.hidden_size.to_numpy(np.float64) / align_h) * align_h
    inter = np.ceil(d.inter.to_numpy(np.float64) / align_i) * align_i
    if marlin and "moe_dtype" in d and (d.moe_dtype == MARLIN_INT4_DTYPE).any():  # int4 experts: no padding
        int4 = (d.moe_dtype == MARLIN_INT4_DTYPE).to_numpy()
        hidden = np.where(int4, d.hidden_size.to_numpy(np.float64), hidden)
        inter = np.where(int4, d.inter.to_numpy(np.float64), inter)
        weight_bytes = np.where(int4, MARLIN_INT4_WEIGHT_BYTES, weight_bytes)
    gated = d.gated.to_numpy(bool) if "gated" in d else True
    # moe_time_s is elementwise over numpy arrays; its annotation names the scalar case only
    return moe_time_s(hw, t * k / touched, touched, hidden, inter, dtype, cast(float, weight_bytes), 2.0, scheme,
                      row_tiles,
                      num_experts=d.num_experts.to_numpy(np.float64), num_tokens=t, gated=gated,
                      marlin_int4=(d.moe_dtype == MARLIN_INT4_DTYPE).to_numpy() if marlin and "moe_dtype" in d
                      else False)


def with_values(hw: HardwareProfile, values: dict[str, float]) -> HardwareProfile:
    """`hw` with these `EfficiencyParams` values (SI)."""
    return replace(hw, efficiency=replace(hw.efficiency, **values))


def with_params(hw: HardwareProfile, prefix: str, factor: float, bandwidth_factor: float,
                fixed_s: float, *shared: float) -> HardwareProfile:
    """`hw` with a format's three values and, where it has them, its family-shared ones (`family_shared`, in that
    order, SI)."""
    names = family_shared(prefix)
    assert len(shared) in (0, len(names)), (prefix, shared)
    return with_values(hw, {f"{prefix}_gemm_factor": factor, f"{prefix}_bandwidth_factor": bandwidth_factor,
                            f"{prefix}_fixed_s": fixed_s, **dict(zip(names, shared))})


def family_shared(prefix: str) -> tuple[str, ...]:
    """A format's parameters beyond its three (`FITTED`'s prefix: `_gemm_factor`, `_bandwidth_factor`, `_fixed_s`)
    that its family fit shares over the family's chips (`roofline.calibration.moe_format_fit.fit_family_format`):
    its other `moe_format` parameters of the same group, in declaration order (Marlin's slice step, its
    dequantization rates per weight type and its overlap exponent: the same SMs run the same kernel)."""
    own = {f"{prefix}_gemm_factor", f"{prefix}_bandwidth_factor", f"{prefix}_fixed_s"}
    return tuple(n for n in group_fields(prefix, "moe_format") if n not in own) if prefix in GROUPS else ()


def bandwidth_cap(hw: HardwareProfile, scheme: str) -> float:
    """The highest bandwidth factor of a format on `hw`: the one at which its experts stream at the DRAM peak
    (`roofline.cost.kernels.moe.moe_bandwidth_cap`)."""
    return moe_bandwidth_cap(hw, _expert_dtype(hw, scheme)[0])


def _clip(x: np.ndarray, bandwidth_max: float = 1.0) -> tuple[float, float, float]:
    return (float(np.clip(x[0], 0.02, 1.0)), float(np.clip(x[1], 0.02, bandwidth_max)),
            float(np.clip(x[2], 0.0, 500.0)))


def fit_format(hw: HardwareProfile, train: pd.DataFrame, scheme: str, routing: str = "table",
               bandwidth_max: float | None = None, reduce: Callable[[np.ndarray], float] = np.median
               ) -> tuple[float, float, float]:
    """(compute factor, bandwidth factor, fixed seconds) minimizing `reduce` (the median by default) of the absolute
    log errors. `bandwidth_max`: the highest bandwidth factor allowed (None: `bandwidth_cap`, the DRAM peak;
    `--bandwidth-factor-max`)."""
    if bandwidth_max is None:
        bandwidth_max = bandwidth_cap(hw, scheme)
    prefix = FITTED[scheme]
    measured = train.measured_s.to_numpy()

    def loss(x: np.ndarray) -> float:
        factor, bw, fixed_us = _clip(x, bandwidth_max)
        pred = predict(with_params(hw, prefix, factor, bw, fixed_us * 1e-6), train, scheme, routing)
        return float(reduce(np.abs(np.log(pred / measured))))

    best = minimize_from_starts(loss, FIT_STARTS, 300)
    factor, bw, fixed_us = _clip(best, bandwidth_max)
    return factor, bw, fixed_us * 1e-6


# Nelder-Mead starts (compute factor, bandwidth factor, fixed us). The median loss is flat in patches: from the first
# two alone the H100 MXFP4 fit with the tables' routing stopped at a training loss of 0.103 where (0.487, 0.89,
# 29.2 us) has 0.062; the third start finds 0.053. Fixed starts: the fit does not depend on what a profile ships.
FIT_STARTS = ((0.5, 0.8, 20.0), (0.2, 0.5, 40.0), (0.5, 0.9, 30.0))


def _search_range(name: str) -> tuple[float, float]:
    search = EFFICIENCY_PARAMS[name].search
    assert search is not None, name
    return search


# The families whose bf16 and per-tensor fp8 experts are fitted jointly (`fit_joint`), with the systems whose tables
# the fit uses, in the order their losses are summed.
JOINT_FAMILIES = {"hopper": ("h100_sxm", "h200_sxm"), "blackwell": ("b200_sxm", "gb200", "b300_sxm")}
# Per format: the fitted fields (`EfficiencyParams`, stage `moe_joint`), each with its Nelder-Mead coordinate's range
# and its value from that coordinate (`roofline.cost.params.search_value`: the weight rate is searched as us per MB of
# touched expert weights), and the starts.
JOINT_GROUPS = {"none": "moe_bf16", "fp8": "moe_fp8"}  # format -> its `roofline.cost.params` group
JOINT_FIELDS: dict[str, tuple[tuple[str, tuple[float, float], Callable[[float], float]], ...]] = {
    scheme: tuple((name, _search_range(name), partial(search_value, name)) for name in group_fields(group, "moe_joint"))
    for scheme, group in JOINT_GROUPS.items()}
JOINT_STARTS = {"none": ((0.8, 14.0), (0.5, 25.0), (0.3, 40.0)),
                "fp8": ((0.25, 150.0, 0.65, 1.0), (0.5, 40.0, 0.5, 1.5), (0.3, 60.0, 0.0, 1.2))}


def _joint_values(scheme: str, x: np.ndarray) -> dict[str, float]:
    """The format's `EfficiencyParams` values (SI) from a Nelder-Mead vector, each coordinate clipped to its range."""
    return {name: convert(float(np.clip(v, *bounds))) for (name, bounds, convert), v in zip(JOINT_FIELDS[scheme], x)}


def fit_joint(hws: Mapping[str, HardwareProfile], tables: Mapping[str, pd.DataFrame], routing: str = "table",
              schemes: tuple[str, ...] = tuple(JOINT_FIELDS)) -> dict[str, dict[str, float]]:
    """Format -> fitted values (SI) for `schemes` (formats of `JOINT_FIELDS`): one set per format over the GPUs of
    `hws` (system -> its profile) together, minimizing the median absolute log error over their balanced training rows
    of `tables` (`load_table`; Nelder-Mead from `JOINT_STARTS`)."""
    out: dict[str, dict[str, float]] = {}
    for scheme in schemes:
        train = {g: t[(t.scheme == scheme) & ~t.held_out & (t.distribution == "balanced")]
                 for g, t in tables.items() if g in hws}

        def loss(x: np.ndarray, scheme: str = scheme, train: dict[str, pd.DataFrame] = train) -> float:
            values = _joint_values(scheme, x)
            errs = [np.abs(np.log(predict(with_values(hws[g], values), d, scheme, routing)
                                  / d.measured_s.to_numpy())) for g, d in train.items()]
            return float(np.median(np.concatenate(errs)))

        out[scheme] = _joint_values(scheme, minimize_from_starts(loss, JOINT_STARTS[scheme], 400))
    return out


# `--fit-wide-tile`: `moe_trtllm_wide_tile_bandwidth_factor`, one value for the TRT-LLM family's formats in
# `roofline.cost.kernels.moe.TRTLLM_WIDE_TILE_SCHEMES`, searched in this range (golden section, to this width).
WIDE_TILE_RANGE = (0.5, 1.0)
WIDE_TILE_TOLERANCE = 0.005


def fit_wide_tile(hws: Mapping[str, HardwareProfile], tables: Mapping[str, pd.DataFrame], routing: str = "table",
                  log: Callable[[str], None] | None = None) -> tuple[float, list[tuple[float, float]]]:
    """The Blackwell family's `moe_trtllm_wide_tile_bandwidth_factor` and the (value, loss) pairs tried: the value
    minimizing the sum, over the GPUs of `hws` (system -> profile; B200, GB200 and B300 in that order) and the formats
    it acts on, of the training loss (median absolute log error, balanced training shapes of `tables`) the formats of
    `TRTLLM_WIDE_TILE_SCHEMES` (per-GPU fitted formats of `FITTED`) reach with their own parameters refitted at that
    value (`fit_format`). Bounded search over `WIDE_TILE_RANGE` (`minimize_bounded_scalar`, deterministic); `log` gets a line
    per trial."""
    tried: list[tuple[float, float]] = []

    def loss(factor: float) -> float:
        values = {"moe_trtllm_wide_tile_bandwidth_factor": factor}
        total = 0.0
        for g, base in hws.items():
            hw = with_values(base, values)
            for scheme in TRTLLM_WIDE_TILE_SCHEMES:
                d = tables[g]
                train = d[(d.scheme == scheme) & ~d.held_out & (d.distribution == "balanced")]
                hw_s = with_params(hw, FITTED[scheme], *fit_format(hw, train, scheme, routing))
                total += float(np.median(np.abs(np.log(predict(hw_s, train, scheme, routing)
                                                       / train.measured_s.to_numpy()))))
        tried.append((factor, total))
        if log is not None:
            log(f"  wide-tile factor {factor:.4f}: training loss {total:.5f}")
        return total

    return minimize_bounded_scalar(loss, WIDE_TILE_RANGE, WIDE_TILE_TOLERANCE), tried
