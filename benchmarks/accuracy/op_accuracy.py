"""Operator cost model against measured vLLM operator latencies (PyPI `aiconfigurator-core`).

    python benchmarks/accuracy/op_accuracy.py                       # H100 SXM fit + held-out report + other GPUs
    python benchmarks/accuracy/op_accuracy.py --json out.json       # also write every number as JSON

For each operator kind the distinct shape keys (`roofline.calibration.op_tables`: weight shape (n, k) for GEMM; heads /
KV heads / head_dim for attention; message size for all-reduce; hidden / inter / topk / experts for MoE)
are split in two halves by a seeded permutation. The H100 parameters are fitted on the first half of every
kind (in stages: GEMM, attention, all-reduce, MoE; each stage its own few parameters) and the median and p90
absolute relative error is reported on the held-out half, per kind and dtype, before fitting (the datasheet
profile with `EfficiencyParams()` defaults) and after. Other GPUs' tables are never fitted on: they are
predicted with their datasheet profile and the H100-fitted efficiency parameters (all rows).

The shipped parameters now come from `benchmarks/accuracy/gpu_profiles.py` (one fit per kernel family over all its GPUs,
written to hardware_profiles/families/); this script stays the single-GPU (H100) view of the same model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace

import numpy as np
import pandas as pd

from roofline.calibration.calibrate import (
    OP_TABLE_STAGES as STAGES,  # the fit stages of `roofline calibrate --op-tables`
)
from roofline.calibration.calibrate import op_table_samples, split_by_shape
from roofline.calibration.fit import fit, predict_table, relative_errors
from roofline.calibration.op_tables import load_op_tables
from roofline.cost.hardware import HardwareProfile, load_profile
from roofline.cost.params import EfficiencyParams

# aiconfigurator system folder -> roofline hardware profile id (generalization check only).
OTHER_GPUS = {"h200_sxm": "h200-sxm", "a100_sxm": "a100-80gb-sxm", "b200_sxm": "b200"}


def error_rows(hw: HardwareProfile, tables: dict[str, pd.DataFrame]) -> list[dict]:
    """Median / p90 absolute relative error per (kind, dtype[, kv dtype / devices])."""
    rows = []
    for kind, frame in tables.items():
        err = relative_errors(predict_table(hw, kind, frame), frame.measured_s.to_numpy())
        group = frame.dtype.astype(str)
        if "kv_dtype" in frame:
            group = group + "/kv " + frame.kv_dtype.astype(str)
        if kind == "all_reduce":
            group = group + "/" + frame.num_devices.astype(int).astype(str) + " gpus"
        for name in sorted(group.unique()):
            e = err[(group == name).to_numpy()]
            rows.append({"kind": kind, "group": name, "rows": int(len(e)), "median": float(np.median(e)),
                         "p90": float(np.percentile(e, 90))})
    return rows


def fit_h100(train: dict[str, pd.DataFrame], hw: HardwareProfile) -> tuple[HardwareProfile, list[dict]]:
    log = []
    for stage, kinds, params in STAGES:
        samples = [s for kind in kinds for s in op_table_samples(train[kind], kind)]
        t0 = time.perf_counter()
        result = fit(samples, hw, [f"efficiency.{p}" for p in params])
        hw = result.profile
        log.append({"stage": stage, "rows": len(samples), "iterations": result.num_iterations,
                    "seconds": round(time.perf_counter() - t0, 1), "values": result.values,
                    "train_median": result.train_median_abs_rel_err, "train_p90": result.train_p90_abs_rel_err})
        print(f"fit {stage}: {len(samples)} rows, {result.num_iterations} iterations, "
              f"train median {result.train_median_abs_rel_err:.3f} p90 {result.train_p90_abs_rel_err:.3f}",
              file=sys.stderr)
    return hw, log


def print_table(title: str, before: list[dict], after: list[dict] | None = None) -> None:
    print(f"\n{title}\n")
    if after is None:
        print("| kind | group | rows | median | p90 |\n|---|---|---|---|---|")
        for r in before:
            print(f"| {r['kind']} | {r['group']} | {r['rows']} | {r['median']:.1%} | {r['p90']:.1%} |")
        return
    print("| kind | group | held-out rows | before: median | before: p90 | after: median | after: p90 |")
    print("|---|---|---|---|---|---|---|")
    for b, a in zip(before, after):
        print(f"| {a['kind']} | {a['group']} | {a['rows']} | {b['median']:.1%} | {b['p90']:.1%} | "
              f"{a['median']:.1%} | {a['p90']:.1%} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write all results to this JSON file")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    datasheet = load_profile("h100-sxm")
    datasheet = replace(datasheet, efficiency=EfficiencyParams())
    tables = load_op_tables("h100_sxm")
    train, test = {}, {}
    for kind, frame in tables.items():
        train[kind], test[kind] = split_by_shape(frame)
    fitted, log = fit_h100(train, datasheet)
    before, after = error_rows(datasheet, test), error_rows(fitted, test)
    print_table("H100 SXM, held-out shapes (datasheet + default efficiencies -> fitted)", before, after)
    print("\nfitted efficiency section (YAML units):")
    print(json.dumps(fitted.efficiency.to_dict(), indent=1))
    others = {}
    for system, profile_id in OTHER_GPUS.items():
        hw = load_profile(profile_id)
        rows = error_rows(replace(hw, efficiency=fitted.efficiency), load_op_tables(system))
        others[system] = rows
        print_table(f"{system} (never fitted): datasheet profile '{profile_id}' + H100-fitted parameters, all rows",
                    rows)
    elapsed = time.perf_counter() - t0
    print(f"\nelapsed {elapsed:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"fit": log, "before": before, "after": after, "others": others,
                       "fitted_efficiency": fitted.efficiency.to_dict(), "elapsed_s": elapsed}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
