"""Fit a chip's fused-MoE weight formats on aiconfigurator-core's vLLM MoE tables (`roofline calibrate --op-tables
--chip C --op moe-formats`): block fp8, NVFP4, MXFP4 (OAI Triton on Hopper, FlashInfer TRT-LLM mxfp4-bf16 on
Blackwell), MXFP4 x MXFP8 (FlashInfer TRT-LLM) and vLLM's Marlin MoE (MXFP4 and int4 experts).

    fits = fit_moe_formats("b200")     # format -> MoeFormatFit (values as written, rows, held-out errors)

Data and split: `roofline.calibration.moe_fits` (`load_table`: rows without expert parallelism, the default kernel
per format, a shape held out when its CRC32 is 0 mod 5, the tables' own routing). Each format has three parameters
(`moe_<format>_gemm_factor`, `_bandwidth_factor`, `_fixed_s`, `roofline.cost.params`), fitted on balanced rows,
the bandwidth factor up to `moe_fits.bandwidth_cap` (the DRAM peak):

- fp8-block, NVFP4, and MXFP4 where Triton runs it (Hopper): per chip on its training shapes (`moe_fits.fit_format`,
  median absolute log error, starts `FIT_STARTS`); the held-out shapes judge it.
- MXFP4 on FlashInfer TRT-LLM (`MoeKernels.mxfp4_bf16_trtllm`), MXFP4 x MXFP8 and Marlin: `fit_family_format`, the
  fixed cost (the routing, sort and combine kernels around the two GEMMs: the kernel family's) fitted on all the
  family's chips' rows together, then each chip's two factors on its own rows with that fixed cost; on every
  balanced row of every shape (Marlin's eleven shapes are too few for the hash split; the TRT-LLM formats'
  shipped fits take every shape too). Their held-out error (leave one shape out, training shapes only) is the
  judge's: benchmarks/accuracy/moe_accuracy.py.

The chips are those of `moe_fits.GPUS` (the order the family fits sum their losses in).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from roofline.calibration.fit import minimize_bounded_scalar
from roofline.calibration.moe_fits import (
    FIT_STARTS,
    FITTED,
    GPUS,
    MARLIN_INT4_DTYPE,
    MARLIN_INT4_KERNEL,
    MARLIN_KERNEL,
    MXFP8_DTYPE,
    _clip,
    _newest_moe_table,
    _with_shape_split,
    bandwidth_cap,
    family_shared,
    fit_format,
    load_table,
    predict,
    with_params,
)
from roofline.calibration.moe_routing import DISTRIBUTIONS, balanced_loads
from roofline.calibration.op_tables import moe_rows_gated
from roofline.cost.hardware import HardwareProfile, load_profile
from roofline.cost.kernels import kernel_family
from roofline.cost.kernels.moe import TRITON_FP8_BLOCK, moe_row_tiles, moe_time_s, triton_masked_rows_s
from roofline.cost.params import EFFICIENCY_PARAMS
from roofline.cost.quant import _SCHEMES

# Marlin's starts (compute factor, bandwidth factor, fixed us, slice step us, int4 and fp4 dequantization rates in G
# weights/s per SM, overlap exponent: `family_shared`): near its compute factor (~0.3 of the 16-bit GEMM's efficiency
# on Hopper, ~0.15 on Blackwell), weights at or near the DRAM peak, a few us per slice step, 30-60 G weights/s per SM
# (20-30 per clock at ~2 GHz: a dozen-odd integer / half2 instructions per 8 weights, dequant.h), the weight stream
# and the conversion from a soft sum (4, the 16-bit GEMMs' order) to nearly the larger of the two (16).
MARLIN_FIT_STARTS = ((0.3, 1.0, 30.0, 2.0, 40.0, 40.0, 8.0), (0.3, 0.9, 20.0, 1.0, 60.0, 30.0, 4.0),
                     (0.15, 1.2, 25.0, 3.0, 30.0, 25.0, 16.0))
# The range of a fitted rate's log (YAML units, G weights/s per SM): 1 to 10,000; of an exponent's: 1 to its
# declared bound (64).
_LOG_RATE = (0.0, math.log(1e4))
# Family-shared values as written: four significant digits.
SHARED_DIGITS = 4
# MXFP8's starts: FIT_STARTS and one nearer a compute-bound fp8 kernel's factor.
MXFP8_FIT_STARTS = FIT_STARTS + ((0.3, 1.2, 30.0),)
# The TRT-LLM MXFP4 formats' loss: the MEAN absolute log error. Their tables hold more small-batch (weight-streaming)
# rows than compute-bound ones, and the median loss of the other formats leaves the compute factor free: fitted with
# it, the MXFP8 family fit took compute factors of 0.13-0.17 that predict the large batches up to 5x slow.
MXFP8_FIT_REDUCE = np.mean
# The values as written: factors to 3 decimals, the fixed cost in us to 1.
FACTOR_DECIMALS, FIXED_US_DECIMALS = 3, 1


def load_marlin_table(gpu: str) -> pd.DataFrame:
    """The Marlin MoE rows of the newest MoE table without expert parallelism: MXFP4 (`MARLIN_KERNEL`) and int4
    (`MARLIN_INT4_KERNEL`) experts."""
    d = _newest_moe_table(gpu)
    d = d[(d.moe_ep_size == 1) & (((d.moe_dtype == "w4a16_mxfp4") & d.kernel_source.str.contains(MARLIN_KERNEL))
                                  | ((d.moe_dtype == MARLIN_INT4_DTYPE) & d.kernel_source.str.contains(MARLIN_INT4_KERNEL)))
          & (d.inter_size % d.moe_tp_size == 0)]
    return d.assign(inter=d.inter_size // d.moe_tp_size, measured_s=d.latency * 1e-3,
                    scheme="mxfp4-marlin").reset_index(drop=True)


def load_mxfp8_table(gpu: str) -> pd.DataFrame:
    """The MXFP4 x MXFP8 rows (`MXFP8_DTYPE`) of the newest MoE table without expert parallelism, with the shape
    split of `load_table`; empty where the GPU has none."""
    d = _newest_moe_table(gpu)
    d = d[(d.moe_ep_size == 1) & (d.moe_dtype == MXFP8_DTYPE) & (d.inter_size % d.moe_tp_size == 0)]
    d = d.assign(inter=d.inter_size // d.moe_tp_size, measured_s=d.latency * 1e-3, scheme="mxfp4-mxfp8")
    if d.empty:  # (an empty frame's row-wise join is a frame: its column names would become rows)
        return d.assign(held_out=False).reset_index(drop=True)
    return _with_shape_split(d)


# vLLM's Triton fused MoE where another kernel is the family's default (`--moe-backend triton`): the tables whose
# collector calls `fused_experts` itself (ai-dynamo/aiconfigurator collector/vllm/collect_moe_v1.py, kernel_source
# `vllm_fused_moe`; the expert map of moe_ep rows from vLLM's `determine_expert_map`, the rank's experts first).
TRITON_KERNEL = "vllm_fused_moe"
TRITON_DTYPE = "fp8_block"


def _triton_table(gpu: str) -> tuple[str, pd.DataFrame] | None:
    """(its path under systems/data, its block-fp8 `TRITON_KERNEL` rows) of the newest vLLM MoE table of `gpu` that
    has them; None where none has."""
    from roofline.calibration.op_tables import package_root
    root = package_root() / gpu / "moe" / "vllm"
    for path in sorted(root.glob("*/moe_perf.parquet"), reverse=True,
                       key=lambda p: tuple(int(x) if x.isdigit() else 0 for x in p.parent.name.split("."))):
        d = pd.read_parquet(path)
        d = d[(d.moe_dtype == TRITON_DTYPE) & (d.kernel_source == TRITON_KERNEL)]
        if not d.empty:
            return str(path.relative_to(package_root())), d
    return None


def load_triton_table(gpu: str, expert_parallel: bool = False) -> pd.DataFrame:
    """The block-fp8 Triton rows of `_triton_table` (empty where there are none): without expert parallelism (the
    per-rank width inter_size / moe_tp_size), or with it (`expert_parallel`: moe_ep_size > 1, moe_tp 1), with the
    shape split of `load_table` (an EP row goes with its shape's moe_tp 1 rows)."""
    found = _triton_table(gpu)
    if found is None:
        return pd.DataFrame(columns=["held_out", "distribution", "measured_s"])
    d = found[1]
    d = d[(d.moe_ep_size > 1) & (d.moe_tp_size == 1)] if expert_parallel else \
        d[(d.moe_ep_size == 1) & (d.inter_size % d.moe_tp_size == 0)]
    d = d.assign(inter=d.inter_size // d.moe_tp_size, measured_s=d.latency * 1e-3, scheme=TRITON_FP8_BLOCK,
                 gated=moe_rows_gated(d))
    return _with_shape_split(d)


def predict_triton_ep(hw: HardwareProfile, d: pd.DataFrame) -> np.ndarray:
    """Seconds of balanced moe_ep rows of the Triton block-fp8 table (`load_triton_table(..., True)`): the rank's
    E / EP experts (vLLM's linear expert map: the first ones) on their share of the collector's balanced routing
    (`moe_routing.balanced_loads`), the call's row block from all its tokens, plus the other ranks' routed rows
    through the kernels that run on every row (`roofline.cost.kernels.moe.triton_masked_rows_s`)."""
    out = np.empty(len(d))
    for i, r in enumerate(d.itertuples()):
        local = int(r.num_experts) // int(r.moe_ep_size)
        loads = balanced_loads(int(r.num_tokens), int(r.num_experts), int(r.topk)).astype(np.float64)[:local]
        touched, row_tiles = moe_row_tiles(loads[None, :])
        rows = float(loads.sum())
        t = moe_time_s(hw, rows / max(float(touched[0]), 1.0), touched, float(r.hidden_size), float(r.inter), "fp8",
                       _SCHEMES["fp8-block"][0] or 1.0, 2.0, TRITON_FP8_BLOCK, row_tiles,
                       num_experts=float(local), num_tokens=float(r.num_tokens))
        masked = triton_masked_rows_s(hw, float(r.num_tokens) * float(r.topk) - rows, float(r.hidden_size),
                                      float(r.inter), 2.0)
        out[i] = float(np.asarray(t).reshape(-1)[0]) + masked
    return out


# The masked-row efficiency's search range and tolerance (`minimize_bounded_scalar`, deterministic).
MASKED_ROW_RANGE, MASKED_ROW_TOLERANCE = (0.02, 1.0), 0.002
EXPERT_PARALLEL = "expert parallel (balanced)"  # MoeFormatFit.held_out's key for the moe_ep rows


def fit_triton_fp8_block(hw: HardwareProfile, system: str, table: str, routing: str = "table") -> "MoeFormatFit":
    """The Triton block-fp8 MoE of `system` (`load_triton_table`): its three parameters on the balanced training
    shapes without expert parallelism (`fit_format`), then moe_triton_masked_row_efficiency on the balanced moe_ep
    rows of the training shapes with those held (`predict_triton_ep`, median absolute log error); the held-out
    shapes judge both."""
    scheme = TRITON_FP8_BLOCK
    d = load_triton_table(system)
    balanced = d[d.distribution == "balanced"]
    train = balanced[~balanced.held_out]
    three = yaml_values(scheme, (*fit_format(hw, train, scheme, routing), 1.0))
    hw_3 = with_params(hw, FITTED[scheme], *written(scheme, three))
    ep = load_triton_table(system, expert_parallel=True)
    ep = ep[ep.distribution == "balanced"]
    ep_train, ep_test = ep[~ep.held_out], ep[ep.held_out]
    measured = ep_train.measured_s.to_numpy()

    def loss(x: float) -> float:
        hw_x = with_params(hw, FITTED[scheme], *written(scheme, three)[:3], x)
        return float(np.median(np.abs(np.log(predict_triton_ep(hw_x, ep_train) / measured))))

    masked = minimize_bounded_scalar(loss, MASKED_ROW_RANGE, MASKED_ROW_TOLERANCE)
    values = yaml_values(scheme, (*written(scheme, three)[:3], masked))
    hw_s = with_params(hw_3, FITTED[scheme], *written(scheme, values))
    test = d[d.held_out]
    held = {dist: errors(predict(hw_s, t, scheme, routing), t.measured_s.to_numpy())
            for dist in DISTRIBUTIONS if not (t := test[test.distribution == dist]).empty}
    held[EXPERT_PARALLEL] = errors(predict_triton_ep(hw_s, ep_test), ep_test.measured_s.to_numpy())
    shapes = int(train[["hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size"]].drop_duplicates().shape[0])
    return MoeFormatFit(scheme, "per_chip", (system,), (TRITON_KERNEL,), (TRITON_DTYPE,), table, values,
                        len(train), shapes, held, len(ep_train))


def fit_family_format(hws: dict[str, HardwareProfile], tables: dict[str, pd.DataFrame], scheme: str,
                      starts: tuple[tuple[float, ...], ...], routing: str = "table",
                      bandwidth_max: float | None = None, reduce: Callable[[np.ndarray], float] = np.median
                      ) -> dict[str, tuple[float, ...]]:
    """A format's (compute factor, bandwidth factor, fixed seconds, *shared values) per GPU of one kernel family:
    the fixed cost and the format's family-shared parameters (`family_shared`: Marlin's slice step and
    dequantization rates) fitted on all the GPUs' rows together, then each GPU's two factors on its own rows with
    those held (minimizing `reduce`, the median by default, of the absolute log errors; Nelder-Mead from `starts`,
    each (factor, bandwidth factor, fixed us, then the shared values in YAML units), and for the per-GPU factors
    also from the joint fit's)."""
    prefix = FITTED[scheme]
    shared = family_shared(prefix)
    rate = np.array([EFFICIENCY_PARAMS[n].unit != "us" for n in shared], dtype=bool)
    scale = np.array([EFFICIENCY_PARAMS[n].scale for n in shared])
    log_hi = np.array([math.log(EFFICIENCY_PARAMS[n].hi) if EFFICIENCY_PARAMS[n].unit == "exponent" else _LOG_RATE[1]
                       for n in shared])
    if bandwidth_max is None:  # one kernel family, one memory efficiency
        bandwidth_max = bandwidth_cap(next(iter(hws.values())), scheme)

    def values(x: np.ndarray, common: np.ndarray | None) -> tuple[float, ...]:
        # shared coordinates: a time in us (at least 0), a rate as its log in YAML units
        z = np.asarray(x[2:] if common is None else common, dtype=np.float64)
        factor, bw, fixed = _clip(np.array([x[0], x[1], z[0]]), bandwidth_max)
        extra = np.where(rate, np.exp(np.clip(z[1:], _LOG_RATE[0], log_hi)), np.clip(z[1:], 0.0, 500.0)) * scale
        return (factor, bw, fixed * 1e-6, *(float(v) for v in extra))

    def loss(x: np.ndarray, gpus: list[str], common: np.ndarray | None) -> float:
        params = values(x, common)
        errs = [np.abs(np.log(predict(with_params(hws[g], prefix, *params), tables[g], scheme, routing)
                              / tables[g].measured_s.to_numpy())) for g in gpus]
        return float(reduce(np.concatenate(errs)))

    def best(gpus: list[str], common: np.ndarray | None, x0s: list[np.ndarray]) -> np.ndarray:
        runs = [minimize(loss, x0, args=(gpus, common), method="Nelder-Mead",
                         options={"xatol": 1e-3, "fatol": 1e-5, "maxiter": 1500 if shared else 600}) for x0 in x0s]
        return min(runs, key=lambda r: r.fun).x

    def coordinates(start: tuple[float, ...]) -> np.ndarray:
        assert len(start) == 3 + len(shared), (scheme, start)
        extra = np.array(start[3:], dtype=np.float64)
        return np.array([*start[:3], *np.where(rate, np.log(np.maximum(extra, 1e-300)), extra)])

    joint = best(list(hws), None, [coordinates(x0) for x0 in starts])
    common = joint[2:]
    out = {}
    for g in hws:
        x0s = ([joint[:2]] if shared else []) + [np.array(x0[:2]) for x0 in starts]
        out[g] = values(best([g], common, x0s), common)
    return out


def yaml_values(scheme: str, params: tuple[float, ...]) -> dict[str, float]:
    """A format's fitted (compute factor, bandwidth factor, fixed seconds, *shared SI values) -> {YAML key: value as
    written}."""
    factor, bw, fixed_s, *extra = params
    prefix = FITTED[scheme]
    shared = {EFFICIENCY_PARAMS[n].key: float(f"{v / EFFICIENCY_PARAMS[n].scale:.{SHARED_DIGITS}g}")
              for n, v in zip(family_shared(prefix), extra)}
    return {f"{prefix}_gemm_factor": round(factor, FACTOR_DECIMALS),
            f"{prefix}_bandwidth_factor": round(bw, FACTOR_DECIMALS),
            f"{prefix}_fixed_us": round(fixed_s * 1e6, FIXED_US_DECIMALS), **shared}


def written(scheme: str, values: dict[str, float]) -> tuple[float, ...]:
    """The (factor, bandwidth factor, fixed seconds, *shared SI values) a chip file with `values` (`yaml_values`)
    reads back."""
    prefix = FITTED[scheme]
    return (values[f"{prefix}_gemm_factor"], values[f"{prefix}_bandwidth_factor"],
            values[f"{prefix}_fixed_us"] * 1e-6,
            *(values[EFFICIENCY_PARAMS[n].key] * EFFICIENCY_PARAMS[n].scale for n in family_shared(prefix)
              if EFFICIENCY_PARAMS[n].key in values))


def errors(pred: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """Median and p90 absolute relative error and the bias (the median signed error)."""
    err = pred / measured - 1.0
    return {"median_err": float(np.median(np.abs(err))), "p90_err": float(np.quantile(np.abs(err), 0.9)),
            "bias": float(np.median(err))}


@dataclass(frozen=True)
class MoeFormatFit:
    """One format's fit for one chip."""

    scheme: str  # roofline.cost.quant scheme (FITTED's keys)
    how: str  # "per_chip" (training shapes) or "family" (every shape, the fixed cost shared)
    family_systems: tuple[str, ...]  # the systems a family fit pooled (the fixed cost's)
    kernels: tuple[str, ...]  # the tables' kernel_source(s) fitted on
    dtypes: tuple[str, ...]  # the tables' moe_dtype(s)
    table: str  # systems/data/<system>/moe/vllm/<v>/moe_perf.parquet
    values: dict[str, float]  # YAML key -> value as written
    fit_rows: int
    fit_shapes: int
    held_out: dict[str, dict[str, float]]  # distribution -> errors on the held-out shapes (per_chip fits only)
    ep_rows: int = 0  # the moe_ep rows a fit also took (the Triton MoE's masked-row efficiency)


def chips_with_moe_tables() -> dict[str, str]:
    """chip id -> system, for the chips whose MoE format tables are fitted (`moe_fits.GPUS`, in its order)."""
    return {pid: system for system, pid in GPUS.items()}


def _family_members(pid: str) -> dict[str, HardwareProfile]:
    """system -> profile of the chips of `moe_fits.GPUS` in `pid`'s kernel family, in `GPUS` order."""
    family = load_profile(pid).family
    return {system: hw for system, other in GPUS.items() if (hw := load_profile(other)).family == family}


def _table_path(system: str) -> str:
    from roofline.calibration.op_tables import package_root
    root = package_root() / system / "moe" / "vllm"
    newest = max(root.glob("*/moe_perf.parquet"),
                 key=lambda p: tuple(int(x) if x.isdigit() else 0 for x in p.parent.name.split(".")))
    return str(newest.relative_to(package_root()))


# The formats fitted over a kernel family's chips: scheme -> (rows loader per system, Nelder-Mead starts, loss).
FAMILY_FORMATS: dict[str, tuple[Callable[[str], pd.DataFrame], tuple[tuple[float, ...], ...],
                                Callable[[np.ndarray], float]]] = {
    "mxfp4": (lambda g: load_table(g).query("scheme == 'mxfp4'"), MXFP8_FIT_STARTS, MXFP8_FIT_REDUCE),
    "mxfp4-mxfp8": (load_mxfp8_table, MXFP8_FIT_STARTS, MXFP8_FIT_REDUCE),
    "mxfp4-marlin": (load_marlin_table, MARLIN_FIT_STARTS, np.median)}


@lru_cache(maxsize=32)
def _family_fit(systems: tuple[str, ...], scheme: str, routing: str) -> dict[str, tuple[float, ...]]:
    """`fit_family_format` of `scheme` over `systems` (in this order) on their balanced rows (computed once per
    family and format: each chip of the family reads it)."""
    loader, starts, reduce = FAMILY_FORMATS[scheme]
    tables = {g: (t := loader(g))[t.distribution == "balanced"] for g in systems}
    return fit_family_format({g: load_profile(GPUS[g]) for g in systems}, tables, scheme, starts, routing, None, reduce)


def fit_moe_formats(pid: str, routing: str = "table", formats: frozenset[str] | None = None
                    ) -> dict[str, MoeFormatFit]:
    """Every MoE format `pid`'s table has rows of (module docstring), or those of `formats`, -> its fit for `pid`."""
    if pid not in GPUS.values():
        raise ValueError(pid)
    system = next(s for s, p in GPUS.items() if p == pid)
    hw = load_profile(pid)
    members = _family_members(pid)
    table = _table_path(system)
    out: dict[str, MoeFormatFit] = {}
    d = load_table(system)
    trtllm_mxfp4 = kernel_family(hw.family).moe.mxfp4_bf16_trtllm
    for scheme, part in d.groupby("scheme"):
        if scheme not in FITTED or (scheme == "mxfp4" and trtllm_mxfp4) or (formats and scheme not in formats):
            continue
        balanced = part[part.distribution == "balanced"]
        train = balanced[~balanced.held_out]
        values = yaml_values(str(scheme), fit_format(hw, train, str(scheme), routing))
        hw_s = with_params(hw, FITTED[str(scheme)], *written(str(scheme), values))
        test = part[part.held_out]
        held = {dist: errors(predict(hw_s, t, str(scheme), routing), t.measured_s.to_numpy())
                for dist in DISTRIBUTIONS if not (t := test[test.distribution == dist]).empty}
        out[str(scheme)] = MoeFormatFit(str(scheme), "per_chip", (system,), (str(part.kernel_source.iloc[0]),),
                                        (str(part.moe_dtype.iloc[0]),), table, values, len(train),
                                        int(train[["hidden_size", "inter_size", "topk", "num_experts",
                                                   "moe_tp_size"]].drop_duplicates().shape[0]), held)
    if not kernel_family(hw.family).moe.fp8_block_triton and (not formats or TRITON_FP8_BLOCK in formats):
        found = _triton_table(system)
        if found is not None:
            out[TRITON_FP8_BLOCK] = fit_triton_fp8_block(hw, system, found[0], routing)
    for scheme, (loader, _, _) in FAMILY_FORMATS.items():
        if (scheme == "mxfp4" and not trtllm_mxfp4) or (formats and scheme not in formats):
            continue
        tables = {g: t[t.distribution == "balanced"] for g in members if not (t := loader(g)).empty}
        if system not in tables:
            continue
        fitted = _family_fit(tuple(tables), scheme, routing)
        mine = tables[system]
        out[scheme] = MoeFormatFit(scheme, "family", tuple(tables), tuple(sorted(mine.kernel_source.unique())),
                                   tuple(sorted(mine.moe_dtype.unique())), table, yaml_values(scheme, fitted[system]),
                                   len(mine), int(mine[["hidden_size", "inter_size", "topk", "num_experts",
                                                        "moe_tp_size"]].drop_duplicates().shape[0]), {})
    return out
