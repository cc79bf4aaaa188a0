"""Fit a chip's block-scaled fp8 (DeepGEMM) and NVFP4 (FlashInfer CuTe-DSL) dense GEMMs, and its power limit, on
aiconfigurator-core's vLLM GEMM table (`roofline calibrate --op-tables --chip C --op gemm-formats`).

    fit = fit_gemm_formats(load_profile("gb200"), "gb200")   # per format: values, power limit, held-out errors

Data: `systems/data/<system>/gemm/vllm/<newest>/gemm_perf.parquet` (read from the installed package), its `fp8_block`
and `nvfp4` rows, the kernel measured on the most shapes (vLLM's default there). Split: rows whose (n, k) CRC32 is 0
mod 5 are held out, never fitted on. The format's parameters of `roofline.cost.op_time.linear_time_s`
(`GEMM_FORMATS`) minimize the median absolute log error on the training rows (Nelder-Mead from two fixed starts).

The collector times fp8_block eagerly and nvfp4 in a CUDA graph (`EAGER_FORMATS`): fp8-block is fitted and judged
on the rows where device time dominates the eager host floor. A chip whose profile declares a `power_limit` (GB200)
gets it fitted on the same rows (`fit_power_limit`). The decode-sized DeepGEMM calls under that floor, which the vLLM
table cannot time, are fitted on the same chip's SGLang GEMM table (`fit_small_calls`: the same DeepGEMM call, timed
in a CUDA graph) where the chip's family runs DeepGEMM's SM100 kernel. benchmarks/accuracy/moe_accuracy.py prints the
judge.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize, minimize_scalar

from roofline.calibration.op_tables import package_root
from roofline.cost.hardware import HardwareProfile, PowerLimit
from roofline.cost.kernels import kernel_family
from roofline.cost.kernels.gemm_block_scaled import DEEPGEMM_SM100
from roofline.cost.op_time import linear_time_s
from roofline.cost.params import EFFICIENCY_PARAMS, group_fields

# table gemm_dtype -> (our scheme, peak dtype, weight bytes per parameter, the efficiency parameters fitted with
# their starting values (YAML units: fractions, microseconds)).
GEMM_FORMATS = {"fp8_block": ("fp8-block", "fp8", 1.0 + 4.0 / (128 * 128),
                              dict(zip(group_fields("gemm_fp8_block", "gemm_format"), (0.8, 200.0, 0.5)))),
                "nvfp4": ("nvfp4", "fp4", 0.5 + 1.0 / 16,
                          dict(zip(group_fields("gemm_fp4", "gemm_format"), (0.6, 3.0, 0.3))))}
# The collector times fp8_block eagerly (aiconfigurator collector/vllm/collect_gemm.py: `use_cuda_graph=gemm_type !=
# "fp8_block"`; 3 warm-up and 6 timed back-to-back `forward` calls between two CUDA events), so each row is about
# max(host time of one forward, device time) + a sixth of the first call's host time. The host time (Python
# dispatch, QuantFP8 and DeepGEMM's launch) is the floor of the table: the median of its rows with n, k <= 1024
# and m <= 256 (< 1.3 MB and < 0.6 GFLOP: a few us of device time on any of these GPUs). Fitted and judged are the
# rows measured at >= EAGER_DEVICE_ROWS_FLOOR_MULTIPLE floors, where the device time dominates and the first call's
# host time adds at most 1 / (6 * 3) = 5.6 % (a CUDA graph, as vLLM serves, has neither). nvfp4 is timed in a
# CUDA graph: every row is device time.
EAGER_FORMATS = ("fp8_block",)
EAGER_DEVICE_ROWS_FLOOR_MULTIPLE = 3.0
# Calls longer than this run into the GPU's power limit in the collector's back-to-back loop (3 + 3 warm-up and 6
# timed calls): on GB200 every fp8_block row the model puts above ~4-5 ms runs at about half the throughput of the
# shorter ones, on B200 / B300 the throughput falls gradually to ~0.65x at 50 ms (BENCHMARKS.md, issue 17).
# FlashInfer's benchmark utilities name 5 ms as the empirical threshold on B200 before sustained compute throttles
# the SM clock (flashinfer-ai/flashinfer PR #2899). The judge keeps these rows; the held-out error without them is
# printed beside it (a diagnostic, not the target).
POWER_THROTTLE_CALL_S = 5e-3
# A chip whose profile declares a `power_limit` (GB200) gets it fitted on its own fp8_block training rows, after the
# format's parameters: the median loss of `fit_gemm` is blind to the long calls (17 % of GB200's training rows), so
# the limit minimizes the MEAN absolute log error, with the parameters held: for each threshold on this grid (ms of
# math at the full clock) the clock factor in [0.2, 1]; the threshold with the lowest loss wins. The parameters are
# then refitted with the limit (`fit_gemm`).
POWER_LIMIT_AFTER_MS = tuple(float(x) for x in np.arange(2.0, 8.01, 0.25))
DECIMALS = 3  # the fitted values as written (YAML units); the power limit's threshold in ms: 2


# The decode-sized block-fp8 calls (`fit_small_calls`). vLLM's table times fp8_block eagerly, so its rows under
# EAGER_DEVICE_ROWS_FLOOR_MULTIPLE host floors (every decode-sized call: B200's floor is ~194 us where such a call runs
# 5-15 us on the device) say nothing of the kernel. aiconfigurator's SGLang collector times the same call in a CUDA
# graph (collector/sglang/collect_gemm.py: `sglang_per_token_group_quant_fp8` with column-major, TMA-aligned UE8M0
# scales, then DeepGEMM's `gemm_nt_f8f8bf16`), the library call vLLM's DeepGemmFp8BlockScaledMMKernel makes after its
# own group quantization kernel (vllm/model_executor/layers/quantization/utils/fp8_utils.py
# `W8A8BlockFp8LinearOp._run_deepgemm` -> `fp8_gemm_nt`, 0.19.0). Where both tables time a call above the floor they
# agree (SGLang / vLLM, median over the shapes of 1-3 ms: B200 0.97, B300 1.09; above 10 ms 1.03 / 0.99). These rows
# fit gemm_fp8_block_fixed_s and gemm_fp8_block_saturation_fraction with the format's other parameters held. Only
# where the family runs DeepGEMM's SM100 kernel: the SM90 kernel's small calls were not examined.
SMALL_CALL_PARAMS = group_fields("gemm_fp8_block_small", "gemm_format")  # the fixed time (us), the saturation
SMALL_CALL_STARTS = ((2.0, 0.3), (1.0, 0.6), (3.0, 0.1))  # YAML units: us, fraction


def _newest(root: Any) -> Any:
    return max(root.glob("*/gemm_perf.parquet"),
               key=lambda p: tuple(int(x) if x.isdigit() else 0 for x in p.parent.name.split(".")))


def gemm_table_path(system: str) -> Any:
    """The newest vLLM GEMM table of `system` in the installed package (versions compared numerically)."""
    return _newest(package_root() / system / "gemm" / "vllm")


def small_call_table_path(system: str) -> Any | None:
    """The newest SGLang GEMM table of `system` in the installed package, None where there is none."""
    root = package_root() / system / "gemm" / "sglang"
    return _newest(root) if any(root.glob("*/gemm_perf.parquet")) else None


def load_small_call_rows(system: str, floor_s: float) -> pd.DataFrame:
    """The SGLang table's fp8_block rows measured under EAGER_DEVICE_ROWS_FLOOR_MULTIPLE times the vLLM table's host
    floor `floor_s` (the calls that table cannot time), with `measured_s` and `held_out` ((n, k) CRC32 0 mod 5)."""
    path = small_call_table_path(system)
    if path is None:
        return pd.DataFrame()
    d = pd.read_parquet(path)
    d = d[d.gemm_dtype == "fp8_block"]
    d = d.assign(measured_s=d.latency * 1e-3)
    d = d[d.measured_s < EAGER_DEVICE_ROWS_FLOOR_MULTIPLE * floor_s]
    d["held_out"] = [zlib.crc32(f"{n}-{k}".encode()) % 5 == 0 for n, k in zip(d.n, d.k)]
    return d.reset_index(drop=True)


def load_gemm_table(system: str) -> pd.DataFrame:
    """The fp8_block and nvfp4 rows of the default kernel (the one measured on the most shapes), with `measured_s`
    and `held_out` ((n, k) CRC32 0 mod 5)."""
    d = pd.read_parquet(gemm_table_path(system))
    d = d[d.gemm_dtype.isin(list(GEMM_FORMATS))]
    keep = [part[part.kernel_source == part.kernel_source.value_counts().index[0]]
            for _, part in d.groupby("gemm_dtype")]
    d = pd.concat(keep) if keep else d
    d = d.assign(measured_s=d.latency * 1e-3)
    d["held_out"] = [zlib.crc32(f"{n}-{k}".encode()) % 5 == 0 for n, k in zip(d.n, d.k)]
    return d.reset_index(drop=True)


def eager_host_floor_s(d: pd.DataFrame) -> float:
    """The per-call host time of an eagerly timed table (see EAGER_FORMATS): its median on negligible shapes."""
    return float(d.measured_s[(d.n <= 1024) & (d.k <= 1024) & (d.m <= 256)].median())


def gemm_predict(hw: HardwareProfile, d: pd.DataFrame, gemm_dtype: str, params: dict[str, float]) -> np.ndarray:
    """Seconds of the rows with the format's efficiency parameters set to `params` (SI units)."""
    _, peak, weight_bytes, _ = GEMM_FORMATS[gemm_dtype]
    hw = replace(hw, efficiency=replace(hw.efficiency, **params))
    return linear_time_s(hw, d.m.to_numpy(np.float64), d.n.to_numpy(np.float64), d.k.to_numpy(np.float64), peak,
                         weight_bytes, 2.0, GEMM_FORMATS[gemm_dtype][0])


def _gemm_params(gemm_dtype: str, x: np.ndarray) -> dict[str, float]:
    """Nelder-Mead's point -> parameters in SI units (fractions clipped to (0, 1], microseconds to [0, 100], tile
    costs in K elements to [0, 4096])."""
    names = GEMM_FORMATS[gemm_dtype][3]
    return {name: float(np.clip(v, 0.0, 100.0)) * 1e-6 if name.endswith("_s") else
            float(np.clip(v, 0.0, 4096.0)) if name.endswith("_k") else float(np.clip(v, 0.02, 1.0))
            for name, v in zip(names, x)}


def fit_gemm(hw: HardwareProfile, train: pd.DataFrame, gemm_dtype: str) -> dict[str, float]:
    """The format's parameters minimizing the median absolute log error on `train` (two fixed starts)."""
    measured = train.measured_s.to_numpy()
    start = np.array(list(GEMM_FORMATS[gemm_dtype][3].values()))

    def loss(x: np.ndarray) -> float:
        return float(np.median(np.abs(np.log(gemm_predict(hw, train, gemm_dtype, _gemm_params(gemm_dtype, x))
                                             / measured))))

    best = min((minimize(loss, x0, method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-5, "maxiter": 300})
                for x0 in (start, start * 0.5)), key=lambda r: r.fun)
    return _gemm_params(gemm_dtype, best.x)


def fit_small_call_params(hw: HardwareProfile, train: pd.DataFrame) -> dict[str, float]:
    """SMALL_CALL_PARAMS (SI) minimizing the median absolute log error of the fp8_block rows `train` on `hw` (its
    other parameters as they are), Nelder-Mead from SMALL_CALL_STARTS."""
    measured = train.measured_s.to_numpy()

    def params(x: np.ndarray) -> dict[str, float]:  # (us, fraction) -> SI
        return dict(zip(SMALL_CALL_PARAMS, (float(np.clip(x[0], 0.0, 100.0)) * 1e-6, float(np.clip(x[1], 1e-3, 1.0)))))

    def loss(x: np.ndarray) -> float:
        return float(np.median(np.abs(np.log(gemm_predict(hw, train, "fp8_block", params(x)) / measured))))

    best = min((minimize(loss, np.array(x0), method="Nelder-Mead",
                         options={"xatol": 1e-3, "fatol": 1e-5, "maxiter": 300}) for x0 in SMALL_CALL_STARTS),
               key=lambda r: r.fun)
    return params(best.x)


def fit_power_limit(hw: HardwareProfile, train: pd.DataFrame, gemm_dtype: str) -> tuple[dict[str, float], PowerLimit]:
    """The format's parameters and the chip's `PowerLimit` on `train` (see POWER_LIMIT_AFTER_MS)."""
    measured = train.measured_s.to_numpy()
    params = fit_gemm(replace(hw, power_limit=None), train, gemm_dtype)

    def loss(limit: PowerLimit) -> float:
        return float(np.mean(np.abs(np.log(gemm_predict(replace(hw, power_limit=limit), train, gemm_dtype, params)
                                           / measured))))

    fits = [minimize_scalar(lambda f, a=after_ms: loss(PowerLimit(a * 1e-3, f)), bounds=(0.2, 1.0),
                            method="bounded", options={"xatol": 1e-4}) for after_ms in POWER_LIMIT_AFTER_MS]
    best = int(np.argmin([r.fun for r in fits]))
    limit = PowerLimit(POWER_LIMIT_AFTER_MS[best] * 1e-3, float(fits[best].x))
    return fit_gemm(replace(hw, power_limit=limit), train, gemm_dtype), limit


def gemm_errors(pred: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """Median and p90 absolute relative error, and the bias (the geometric-mean ratio - 1)."""
    ratio = pred / measured
    return {"median_err": float(np.median(np.abs(ratio - 1.0))), "p90_err": float(np.quantile(np.abs(ratio - 1.0), 0.9)),
            "bias": float(np.exp(np.median(np.log(ratio))) - 1.0)}


def yaml_values(params: dict[str, float]) -> dict[str, float]:
    """Fitted SI values -> {YAML key: value in YAML units, rounded to `DECIMALS`} as the chip file records them."""
    return {EFFICIENCY_PARAMS[n].key: round(v / EFFICIENCY_PARAMS[n].scale, DECIMALS) for n, v in params.items()}


@dataclass(frozen=True)
class GemmFormatFit:
    """One format's fit on one chip: the values as written (YAML), what it was fitted on, its held-out error."""

    gemm_dtype: str
    kernel: str
    table: str  # systems/data/... relative path
    values: dict[str, float]  # YAML key -> YAML units, rounded as written
    power_limit: dict[str, float] | None  # {"after_ms", "clock_factor"} where the chip declares one
    rows: int
    judged_rows: int
    train_rows: int
    held_out_rows: int
    host_floor_us: float | None  # eager formats
    held_out: dict[str, float]  # gemm_errors at the written values (with the power limit)
    held_out_without_limit: dict[str, float] | None
    held_out_short: dict[str, float] | None  # eager formats: calls < POWER_THROTTLE_CALL_S
    held_out_short_rows: int
    # The small-call fit (`fit_small_calls`): which rows, and the vLLM table's judged held-out rows with every
    # written value (the fit must leave them as they were).
    rows_note: str = ""
    vllm_held_out: dict[str, float] | None = None


def _as_written(hw: HardwareProfile, values: dict[str, float], limit: dict[str, float] | None) -> HardwareProfile:
    spec = {p.key: n for n, p in EFFICIENCY_PARAMS.items()}
    eff = replace(hw.efficiency, **{spec[k]: v * EFFICIENCY_PARAMS[spec[k]].scale for k, v in values.items()})
    power = hw.power_limit if limit is None else PowerLimit(limit["after_ms"] * 1e-3, limit["clock_factor"])
    return replace(hw, efficiency=eff, power_limit=power)


def fit_gemm_formats(hw: HardwareProfile, system: str) -> list[GemmFormatFit]:
    """Each format of `system`'s GEMM table whose peak dtype `hw` has: fitted on its training rows (module
    docstring), judged on the held-out rows at the values as written."""
    out = []
    table = gemm_table_path(system)
    rel = str(table.relative_to(package_root()))
    # The format parameters are fitted with the small-call terms at their no-effect defaults (those are fitted after
    # them, on other rows): the same values whatever the chip file held before.
    hw = replace(hw, efficiency=replace(hw.efficiency, **{n: EFFICIENCY_PARAMS[n].default for n in SMALL_CALL_PARAMS}))
    for gemm_dtype, d in load_gemm_table(system).groupby("gemm_dtype"):
        if GEMM_FORMATS[gemm_dtype][1] not in hw.supported_dtypes:
            continue
        judged, floor_us = d, None
        if gemm_dtype in EAGER_FORMATS:
            floor_s = eager_host_floor_s(d)
            judged, floor_us = d[d.measured_s >= EAGER_DEVICE_ROWS_FLOOR_MULTIPLE * floor_s], round(floor_s * 1e6, 1)
        train, test = judged[~judged.held_out], judged[judged.held_out]
        limit = None
        if gemm_dtype in EAGER_FORMATS and hw.power_limit is not None:
            params, fitted_limit = fit_power_limit(hw, train, gemm_dtype)
            limit = {"after_ms": round(fitted_limit.after_s * 1e3, 2),
                     "clock_factor": round(fitted_limit.clock_factor, DECIMALS)}
        else:
            params = fit_gemm(hw, train, gemm_dtype)
        values = yaml_values(params)
        written = _as_written(hw, values, limit)
        measured = test.measured_s.to_numpy()
        short = test[test.measured_s < POWER_THROTTLE_CALL_S] if gemm_dtype in EAGER_FORMATS else None
        out.append(GemmFormatFit(
            gemm_dtype=str(gemm_dtype), kernel=str(d.kernel_source.iloc[0]), table=rel, values=values,
            power_limit=limit, rows=len(d), judged_rows=len(judged), train_rows=len(train), held_out_rows=len(test),
            host_floor_us=floor_us, held_out=gemm_errors(gemm_predict(written, test, gemm_dtype, {}), measured),
            held_out_without_limit=None if limit is None else gemm_errors(
                gemm_predict(replace(written, power_limit=None), test, gemm_dtype, {}), measured),
            held_out_short=None if short is None else gemm_errors(gemm_predict(written, short, gemm_dtype, {}),
                                                                  short.measured_s.to_numpy()),
            held_out_short_rows=0 if short is None else len(short)))
        if gemm_dtype in EAGER_FORMATS and kernel_family(hw.family).block_fp8_gemm is DEEPGEMM_SM100:
            small = fit_small_calls(written, system, eager_host_floor_s(d), test)
            if small is not None:
                out.append(small)
    return out


def fit_small_calls(hw: HardwareProfile, system: str, floor_s: float, vllm_test: pd.DataFrame) -> GemmFormatFit | None:
    """SMALL_CALL_PARAMS on `system`'s SGLang fp8_block rows under the vLLM table's floor (`load_small_call_rows`;
    `hw` holds the format's other parameters as written), judged on their held-out rows and, with every value as
    written, on the vLLM table's judged held-out rows `vllm_test`. None where the chip has no SGLang table."""
    d = load_small_call_rows(system, floor_s)
    if d.empty:
        return None
    train, test = d[~d.held_out], d[d.held_out]
    values = yaml_values(fit_small_call_params(hw, train))
    written = _as_written(hw, values, None)
    path = small_call_table_path(system)
    assert path is not None  # (load_small_call_rows read it)
    return GemmFormatFit(
        gemm_dtype="fp8_block", kernel=str(d.kernel_source.iloc[0]), table=str(path.relative_to(package_root())),
        values=values, power_limit=None, rows=len(d), judged_rows=len(d), train_rows=len(train),
        held_out_rows=len(test), host_floor_us=None,
        held_out=gemm_errors(gemm_predict(written, test, "fp8_block", {}), test.measured_s.to_numpy()),
        held_out_without_limit=None, held_out_short=None, held_out_short_rows=0,
        rows_note=(f"measured under {EAGER_DEVICE_ROWS_FLOOR_MULTIPLE:g}x the vLLM table's eager host floor of "
                   f"{floor_s * 1e6:.1f} us ({len(d)} rows: the decode-sized calls it cannot time), the other "
                   f"fp8_block parameters held"),
        vllm_held_out=gemm_errors(gemm_predict(written, vllm_test, "fp8_block", {}), vllm_test.measured_s.to_numpy()))
