"""Fused-MoE operator accuracy per weight format and token distribution, on aiconfigurator-core's vLLM tables.

    python benchmarks/accuracy/moe_accuracy.py [--gpus h100_sxm,b200_sxm] [--json out.json]

Data: `aiconfigurator_core/systems/data/<gpu>/moe/vllm/<newest version>/moe_perf.parquet` (PyPI
aiconfigurator-core==0.12.0; read from the installed package), rows without expert parallelism (moe_ep_size 1;
moe_tp_size > 1 rows are the per-rank width inter_size / moe_tp_size, as tensor parallelism runs them), the
kernel vLLM runs by default for each format (the one with the most rows; for MXFP4 the gpt-oss path). Formats:
bf16, per-tensor fp8, fp8-block (128x128), NVFP4, MXFP4 (W4A16).

Split by shape: a shape (hidden, inter, topk, experts, moe_tp) is held out when a hash of it is 0 mod 5; every token
count of a shape goes to the same side. Nemotron-H's experts have no gate (`gated`,
`roofline.calibration.op_tables.nongated_moe_shapes`). bf16 and per-tensor fp8 are judged with the profile's own
(family-fitted) parameters, except on Hopper and Blackwell, whose GPUs are fitted jointly per family
(`roofline.calibration.moe_fits.fit_joint`, one set per format: what `roofline calibrate --op-tables --family F
--write` ships in the family file, refitted here on the same training rows and judged); for fp8-block, MXFP4 and
NVFP4 this script fits the three parameters of the format (`moe_<format>_gemm_factor`, `_bandwidth_factor`,
`_fixed_s`, `roofline.cost.params`) per GPU on the balanced training shapes (Nelder-Mead on the median absolute log
error from `FIT_STARTS`; the bandwidth factor up to `bandwidth_cap`, the DRAM peak) and prints them; the held-out
shapes judge them. MXFP4 on Blackwell (FlashInfer's TRT-LLM mxfp4-bf16 MoE, described as its MXFP8 sibling, below)
is fitted as that sibling (`_fit_trtllm_w4a16`: the fixed cost shared by B200, B300 and GB200, the factors per GPU,
the mean absolute log error), and its fit on every shape printed beside it.

Dense GEMMs (`gemm_perf.parquet`) in fp8-block (DeepGEMM, the kernel with the most rows) and NVFP4 (FlashInfer
CuTe-DSL): the format's parameters of `roofline.cost.step_cost.linear_time_s` (`GEMM_FORMATS`) fitted per GPU on
shapes whose (n, k) hash is not 0 mod 5, judged on the rest. The collector times fp8_block eagerly and nvfp4 in a
CUDA graph (`EAGER_FORMATS`): fp8-block is judged on the rows where device time dominates the eager host floor;
the held-out error on its calls under `POWER_THROTTLE_CALL_S` is printed beside it (longer calls run power-limited).

MXFP4 experts on Marlin (`--moe-backend marlin`, vLLM's VLLM_MXFP4_USE_MARLIN=1): the tables' Marlin MoE kernel on
two models' experts, MXFP4 (`MARLIN_KERNEL`; hidden 3584, intermediate 3072, top-16 of 896, moe_tp 1-16) and int4
(`MARLIN_INT4_KERNEL`; hidden 7168, intermediate 2048, top-8 of 384, moe_tp 1-32): eleven shapes, too few for the
hash split, judged leave-one-shape-out: `moe_w4a16_marlin_*` fitted on the balanced rows of the other shapes
(`_fit_marlin`: the fixed cost per kernel family, the compute and bandwidth factors per GPU), the left-out shape's
rows judged, for each shape, per model; the fit on all eleven shapes is printed beside it.

This script judges; it writes nothing. The fits live in `roofline.calibration.moe_format_fit` and
`roofline.calibration.gemm_format_fit`, and what the chip files ship is written by `roofline calibrate --op-tables
--op moe-formats|gemm-formats [--chip C | --family F] --write` (`roofline.calibration.chip_fit`): the per-chip
formats fitted on the training shapes (the fits judged here), the family-fitted ones (TRT-LLM MXFP4, MXFP4 x MXFP8,
Marlin) on every shape (the "all shapes" fits printed here).

Token distributions: the tables measure the collector's own "balanced" (a fixed round robin) and power-law
(exponent 1.01 and 1.2) distributions, a measurement condition of the tables (`roofline.calibration.moe_routing`:
the collector's construction, per-expert load vectors, each row's time the mean over its draws). Fits and the
judged error use it (`routing="table"`); the serving model's own assumption, uniform random routing
(`roofline.cost.ops.expected_experts_touched`), is printed beside it (`routing="uniform"`). Per cell: median
absolute error, p90 and bias (the median signed error).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from roofline.calibration.gemm_format_fit import (  # noqa: E402
    EAGER_DEVICE_ROWS_FLOOR_MULTIPLE,
    EAGER_FORMATS,
    GEMM_FORMATS,
    POWER_THROTTLE_CALL_S,
    eager_host_floor_s,
    fit_gemm,
    fit_power_limit,
    gemm_errors,
    gemm_predict,
    load_gemm_table,
)
from roofline.calibration.moe_fits import (  # noqa: E402
    FITTED,
    JOINT_FAMILIES,
    fit_format,
    fit_joint,
    fit_wide_tile,
    load_table,
    predict,
    with_params,
    with_values,
)
from roofline.calibration.moe_format_fit import (  # noqa: E402
    MARLIN_FIT_STARTS,
    MXFP8_FIT_REDUCE,
    MXFP8_FIT_STARTS,
    errors,
    fit_family_format,
    load_marlin_table,
    load_mxfp8_table,
    yaml_values,
)
from roofline.calibration.moe_routing import DISTRIBUTIONS  # noqa: E402
from roofline.cost.hardware import HardwareProfile, load_profile  # noqa: E402
from roofline.cost.kernels import kernel_family  # noqa: E402
from roofline.cost.params import EFFICIENCY_PARAMS  # noqa: E402

GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200", "gb200": "gb200", "b300_sxm": "b300"}
TARGET = 0.15
GEMM_TARGET = 0.10


def run(gpus: list[str], routing: str = "table", bandwidth_max: float | None = None) -> list[dict]:
    """Per GPU and format: fitted on the balanced training rows, judged per distribution on the held-out shapes,
    both with `routing` (`predict`); the other routing's error beside it."""
    other = "uniform" if routing == "table" else "table"
    rows = []
    tables = {gpu: load_table(gpu) for gpu in gpus}
    trtllm_w4a16 = _fit_trtllm_w4a16(gpus, tables, routing, bandwidth_max)
    joint = _fit_joint(gpus, tables, routing)
    for gpu in gpus:
        hw = load_profile(GPUS[gpu])
        for scheme, d in tables[gpu].groupby("scheme"):
            params = {}
            if (gpu, scheme) in joint:
                hw_s = with_values(hw, joint[gpu, scheme])
                params = _yaml_values(joint[gpu, scheme])
            elif scheme in FITTED:
                factor, bw, fixed_s = trtllm_w4a16[gpu][0] if scheme == "mxfp4" and gpu in trtllm_w4a16 else fit_format(
                    hw, d[~d.held_out & (d.distribution == "balanced")], scheme, routing, bandwidth_max)
                hw_s = with_params(hw, FITTED[scheme], factor, bw, fixed_s)
                params = {f"{FITTED[scheme]}_gemm_factor": round(factor, 3),
                          f"{FITTED[scheme]}_bandwidth_factor": round(bw, 3),
                          f"{FITTED[scheme]}_fixed_us": round(fixed_s * 1e6, 1)}
            else:
                hw_s = hw
            test = d[d.held_out]
            for dist in DISTRIBUTIONS:
                part = test[test.distribution == dist]
                if part.empty:
                    continue
                measured = part.measured_s.to_numpy()
                table = errors(predict(hw_s, part, scheme, routing), measured)
                uniform = errors(predict(hw_s, part, scheme, other), measured)
                shipped = ({"fit_all_shapes": _params("mxfp4", trtllm_w4a16[gpu][1])}
                           if scheme == "mxfp4" and gpu in trtllm_w4a16 else {})
                rows.append({"gpu": gpu, "format": scheme, "kernel": d.kernel_source.iloc[0], "distribution": dist,
                             "held_out_rows": len(part), "train_rows": int((~d.held_out).sum()), **table,
                             **{f"{other}_{k}": v for k, v in uniform.items()}, **params, **shipped})
    return rows


def _yaml_values(values: dict[str, float]) -> dict[str, float]:
    """The values as the family files write them (`roofline.cost.params`: YAML key, scale from YAML to SI)."""
    return {EFFICIENCY_PARAMS[k].key: float(f"{v / EFFICIENCY_PARAMS[k].scale:.6g}") for k, v in values.items()}


def _fit_joint(gpus: list[str], tables: dict[str, pd.DataFrame], routing: str = "table"
               ) -> dict[tuple[str, str], dict[str, float]]:
    """(GPU, format) -> the values of `roofline.calibration.moe_fits.fit_joint` on the shipped profiles, for the
    families of `JOINT_FAMILIES` with all their GPUs in `gpus` (what `roofline calibrate --op-tables --family F`
    fits and writes)."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for members in JOINT_FAMILIES.values():
        if all(g in gpus for g in members):
            fitted = fit_joint({g: load_profile(GPUS[g]) for g in members}, tables, routing)
            out.update({(g, scheme): values for g in members for scheme, values in fitted.items()})
    return out


def _fit_trtllm_w4a16(gpus: list[str], tables: dict[str, pd.DataFrame], routing: str = "table",
                      bandwidth_max: float | None = None) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
    """MXFP4 W4A16 on the GPUs whose family runs it (`MoeKernels.mxfp4_bf16_trtllm`) (FlashInfer's TRT-LLM mxfp4-bf16 MoE,
    `roofline.cost.step_cost._mxfp4_bf16_moe_s`): `_fit_family` as for MXFP4 x MXFP8 (the fixed cost shared by the
    family's GPUs, the factors per GPU, the mean absolute log error), on the balanced training rows and on every
    balanced row (what the chip files ship): GPU -> (training fit, fit on all shapes)."""
    hws = {g: load_profile(GPUS[g]) for g in gpus}
    out: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {}
    for family in sorted({hw.family for hw in hws.values() if kernel_family(hw.family).moe.mxfp4_bf16_trtllm}):
        members = {g: hws[g] for g in hws if hws[g].family == family}
        balanced = {g: tables[g][(tables[g].scheme == "mxfp4") & (tables[g].distribution == "balanced")]
                    for g in members}
        train = fit_family_format(members, {g: b[~b.held_out] for g, b in balanced.items()}, "mxfp4", MXFP8_FIT_STARTS,
                            routing, bandwidth_max, MXFP8_FIT_REDUCE)
        every = fit_family_format(members, balanced, "mxfp4", MXFP8_FIT_STARTS, routing, bandwidth_max, MXFP8_FIT_REDUCE)
        out.update({g: (train[g], every[g]) for g in members})
    return out


def _fit_marlin(hws: dict[str, HardwareProfile], tables: dict[str, pd.DataFrame], routing: str = "table",
                bandwidth_max: float | None = None) -> dict[str, tuple[float, ...]]:
    """Marlin parameters per GPU of one kernel family (`_fit_family`)."""
    return fit_family_format(hws, tables, "mxfp4-marlin", MARLIN_FIT_STARTS, routing, bandwidth_max)


def run_marlin(gpus: list[str], routing: str = "table", bandwidth_max: float | None = None) -> list[dict]:
    """Leave-one-shape-out on the Marlin MXFP4 rows (module docstring) per kernel family of `gpus` (`_fit_marlin`
    on the balanced rows of the other shapes), judged per GPU and token distribution; and the fit on every shape
    (what the chip files ship)."""
    rows = []
    tables = {g: load_marlin_table(g) for g in gpus}
    hws = {g: load_profile(GPUS[g]) for g in gpus if not tables[g].empty}
    for family in sorted({hw.family or "" for hw in hws.values()}):
        members = {g: hws[g] for g in hws if (hws[g].family or "") == family}
        shapes = {g: tables[g][["hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size"]].astype(str).agg(
            "-".join, axis=1) for g in members}
        ratios: dict[tuple[str, str], list[float]] = {}
        for left_out in sorted(set().union(*(set(s) for s in shapes.values()))):
            params = _fit_marlin(members, {g: tables[g][(shapes[g] != left_out)
                                                        & (tables[g].distribution == "balanced")] for g in members},
                                 routing, bandwidth_max)
            for g in members:
                hw_s = with_params(hws[g], FITTED["mxfp4-marlin"], *params[g])
                for (dtype, dist), part in tables[g][shapes[g] == left_out].groupby(["moe_dtype", "distribution"]):
                    ratios.setdefault((g, dtype, dist), []).extend(
                        predict(hw_s, part, "mxfp4-marlin", routing) / part.measured_s.to_numpy())
        shipped = _fit_marlin(members, {g: tables[g][tables[g].distribution == "balanced"] for g in members}, routing,
                              bandwidth_max)
        for (g, dtype, dist), r in sorted(ratios.items()):
            err = np.asarray(r) - 1.0
            kernel = tables[g].kernel_source[tables[g].moe_dtype == dtype].iloc[0]
            rows.append({"gpu": g, "family": family, "experts": dtype, "distribution": dist, "rows": len(r),
                         "kernel": kernel, "median_err": float(np.median(np.abs(err))),
                         "p90_err": float(np.quantile(np.abs(err), 0.9)), "bias": float(np.median(err)),
                         "fit_all_shapes": _params("mxfp4-marlin", shipped[g])})
    return rows


def run_mxfp8(gpus: list[str], routing: str = "table", bandwidth_max: float | None = None) -> list[dict]:
    """MXFP4 x MXFP8 (module docstring) per kernel family of `gpus`: `moe_mxfp4_mxfp8_*` fitted on the balanced
    training rows (`_fit_family`: the fixed cost shared by the family's GPUs, the compute and bandwidth factors per
    GPU), judged per GPU and token distribution on the held-out shapes (hash split, as `load_table`); beside it a
    fit of all three per GPU alone (`fit`), and the family fit on every shape (what the chip files ship)."""
    other = "uniform" if routing == "table" else "table"
    rows = []
    tables = {g: load_mxfp8_table(g) for g in gpus}
    hws = {g: load_profile(GPUS[g]) for g in gpus if not tables[g].empty}
    for family in sorted({hw.family or "" for hw in hws.values()}):
        members = {g: hws[g] for g in hws if (hws[g].family or "") == family}
        balanced = {g: tables[g][tables[g].distribution == "balanced"] for g in members}
        params = fit_family_format(members, {g: b[~b.held_out] for g, b in balanced.items()}, "mxfp4-mxfp8",
                             MXFP8_FIT_STARTS, routing, bandwidth_max, MXFP8_FIT_REDUCE)
        shipped = fit_family_format(members, balanced, "mxfp4-mxfp8", MXFP8_FIT_STARTS, routing, bandwidth_max,
                              MXFP8_FIT_REDUCE)
        for g in members:
            alone = fit_format(hws[g], balanced[g][~balanced[g].held_out], "mxfp4-mxfp8", routing, bandwidth_max,
                        MXFP8_FIT_REDUCE)
            hw_s = with_params(hws[g], FITTED["mxfp4-mxfp8"], *params[g])
            hw_alone = with_params(hws[g], FITTED["mxfp4-mxfp8"], *alone)
            test = tables[g][tables[g].held_out]
            for dist in DISTRIBUTIONS:
                part = test[test.distribution == dist]
                if part.empty:
                    continue
                measured = part.measured_s.to_numpy()
                rows.append({"gpu": g, "family": family, "distribution": dist, "held_out_rows": len(part),
                             "train_rows": int((~tables[g].held_out & (tables[g].distribution == "balanced")).sum()),
                             "kernel": part.kernel_source.iloc[0],
                             **errors(predict(hw_s, part, "mxfp4-mxfp8", routing), measured),
                             **{f"{other}_{k}": v for k, v in errors(predict(hw_s, part, "mxfp4-mxfp8", other),
                                                                     measured).items()},
                             **{f"per_gpu_{k}": v for k, v in errors(predict(hw_alone, part, "mxfp4-mxfp8", routing),
                                                                     measured).items()},
                             "fit": _params("mxfp4-mxfp8", params[g]),
                             "fit_per_gpu": _params("mxfp4-mxfp8", alone),
                             "fit_all_shapes": _params("mxfp4-mxfp8", shipped[g])})
    return rows


def _params(scheme: str, params: tuple[float, ...]) -> dict[str, float]:
    """A format's fitted (compute factor, bandwidth factor, fixed seconds, *family-shared values) under their YAML
    names, as the chip files write them."""
    return yaml_values(scheme, params)


def run_gemm(gpus: list[str]) -> list[dict]:
    rows = []
    for gpu in gpus:
        hw = load_profile(GPUS[gpu])
        for gemm_dtype, d in load_gemm_table(gpu).groupby("gemm_dtype"):
            if GEMM_FORMATS[gemm_dtype][1] not in hw.supported_dtypes:
                continue
            row = {"gpu": gpu, "format": GEMM_FORMATS[gemm_dtype][0], "kernel": d.kernel_source.iloc[0],
                   "rows": len(d)}
            judged = d
            if gemm_dtype in EAGER_FORMATS:
                floor_s = eager_host_floor_s(d)
                judged = d[d.measured_s >= EAGER_DEVICE_ROWS_FLOOR_MULTIPLE * floor_s]
                row["eager_host_floor_us"] = round(floor_s * 1e6, 1)
            train, test = judged[~judged.held_out], judged[judged.held_out]
            shipped = hw
            if gemm_dtype in EAGER_FORMATS and hw.power_limit is not None:
                params, limit = fit_power_limit(hw, train, gemm_dtype)
                hw = replace(hw, power_limit=limit)
                row["fitted_power_limit"] = {"after_ms": round(limit.after_s * 1e3, 2),
                                             "clock_factor": round(limit.clock_factor, 3)}
            else:
                params = fit_gemm(hw, train, gemm_dtype)
            row.update({"judged_rows": len(judged), "train_rows": len(train), "held_out_rows": len(test),
                        **gemm_errors(gemm_predict(hw, test, gemm_dtype, params), test.measured_s.to_numpy()),
                        **{f"shipped_{k}": v for k, v in gemm_errors(
                            gemm_predict(shipped, test, gemm_dtype, {}), test.measured_s.to_numpy()).items()},
                        "fitted": {(k[:-2] + "_us" if k.endswith("_s") else k): round(v * 1e6 if k.endswith("_s")
                                                                                        else v, 3)
                                   for k, v in params.items()}})
            if gemm_dtype in EAGER_FORMATS:
                short = test[test.measured_s < POWER_THROTTLE_CALL_S]
                row.update({"held_out_rows_short": len(short), **{f"short_{k}": v for k, v in gemm_errors(
                    gemm_predict(hw, short, gemm_dtype, params), short.measured_s.to_numpy()).items()}})
            rows.append(row)
            hw = shipped
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", default=",".join(GPUS))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--routing", choices=("table", "uniform"), default="table",
                    help="token routing the MoE rows are fitted and judged with (default: the tables' own)")
    ap.add_argument("--bandwidth-factor-max", type=float, default=None,
                    help="diagnostic: bound the fitted MoE bandwidth factors by this value (default: the DRAM peak)")
    ap.add_argument("--skip-gemm", action="store_true", help="only the MoE tables")
    ap.add_argument("--fit-wide-tile", action="store_true",
                    help="fit Blackwell's moe_trtllm_wide_tile_bandwidth_factor as `roofline calibrate --op-tables "
                         "--family blackwell` does (roofline.calibration.moe_fits.fit_wide_tile), print it and stop")
    args = ap.parse_args()
    if args.fit_wide_tile:
        members = [g for g in JOINT_FAMILIES["blackwell"] if g in args.gpus.split(",")]
        factor, tried = fit_wide_tile({g: load_profile(GPUS[g]) for g in members}, {g: load_table(g) for g in members},
                                      args.routing, log=lambda line: print(line, file=sys.stderr))
        print(f"moe_trtllm_wide_tile_bandwidth_factor: {factor:.4g} (tried: "
              f"{', '.join(f'{f:.4f} -> {v:.5f}' for f, v in sorted(tried))})")
        return
    rows = run(args.gpus.split(","), args.routing, args.bandwidth_factor_max)
    other = "uniform" if args.routing == "table" else "table"
    print(f"{'gpu':9} {'format':9} {'distribution':15} {'rows':>5} {'median':>7} {'p90':>7} {'bias':>7} "
          f"{other:>8}  fitted (train: balanced; routing: {args.routing}; {other}: its median with the other routing)")
    for r in rows:
        fitted = {k: v for k, v in r.items() if k.startswith("moe_")}
        flag = "" if r["median_err"] <= TARGET else "  MISS"
        shipped = f" (all shapes: {r['fit_all_shapes']})" if "fit_all_shapes" in r else ""
        print(f"{r['gpu']:9} {r['format']:9} {r['distribution']:15} {r['held_out_rows']:5d} {r['median_err']:7.1%} "
              f"{r['p90_err']:7.1%} {r['bias']:+7.1%} {r[other + '_median_err']:8.1%}  {fitted or ''}{shipped}{flag}")
    marlin_rows = run_marlin(args.gpus.split(","), args.routing, args.bandwidth_factor_max)
    print(f"\n{'gpu':9} {'Marlin':11} {'distribution':15} {'rows':>5} {'median':>7} {'p90':>7} {'bias':>7}  "
          "(leave-one-shape-out) fit on all shapes")
    for r in marlin_rows:
        flag = "" if r["median_err"] <= TARGET else "  MISS"
        print(f"{r['gpu']:9} {r['experts']:11} {r['distribution']:15} {r['rows']:5d} {r['median_err']:7.1%} "
              f"{r['p90_err']:7.1%} {r['bias']:+7.1%}  {r['fit_all_shapes']}{flag}")
    mxfp8_rows = run_mxfp8(args.gpus.split(","), args.routing, args.bandwidth_factor_max)
    print(f"\n{'gpu':9} {'MXFP4xMXFP8':11} {'distribution':15} {'rows':>5} {'median':>7} {'p90':>7} {'bias':>7} "
          f"{other:>8} {'per-GPU':>8}  (held out; fixed cost per family, factors per GPU) fit on training shapes")
    for r in mxfp8_rows:
        flag = "" if r["median_err"] <= TARGET else "  MISS"
        print(f"{r['gpu']:9} {'':11} {r['distribution']:15} {r['held_out_rows']:5d} {r['median_err']:7.1%} "
              f"{r['p90_err']:7.1%} {r['bias']:+7.1%} {r[other + '_median_err']:8.1%} {r['per_gpu_median_err']:8.1%}  "
              f"{r['fit']} (all shapes: {r['fit_all_shapes']}){flag}")
    gemm_rows = [] if args.skip_gemm else run_gemm(args.gpus.split(","))
    print(f"\n{'gpu':9} {'GEMM':9} {'judged':>7} {'held':>5} {'median':>7} {'p90':>7} {'bias':>7} {'shipped':>8}  fitted")
    for r in gemm_rows:
        flag = "" if r["median_err"] <= GEMM_TARGET else "  MISS"
        floor = (f" (eager host floor {r['eager_host_floor_us']} us; held-out calls < "
                 f"{POWER_THROTTLE_CALL_S * 1e3:.0f} ms: {r['short_median_err']:.1%} on {r['held_out_rows_short']} rows)"
                 if "eager_host_floor_us" in r else "")
        print(f"{r['gpu']:9} {r['format']:9} {r['judged_rows']:7d} {r['held_out_rows']:5d} {r['median_err']:7.1%} "
              f"{r['p90_err']:7.1%} {r['bias']:+7.1%} {r['shipped_median_err']:8.1%}  {r['fitted']} "
              f"{'power limit ' + str(r['fitted_power_limit']) + ' ' if 'fitted_power_limit' in r else ''}"
              f"({r['kernel']}){floor}{flag}")
    if args.json:
        args.json.write_text(json.dumps({"moe": rows, "marlin": marlin_rows, "mxfp8": mxfp8_rows, "gemm": gemm_rows},
                                        indent=1))


if __name__ == "__main__":
    main()
