"""Held-out accuracy of expert parallelism's dispatch / combine model (`roofline.cost.kernels.all_to_all`) on
aiconfigurator-core's measured tables, per chip and backend.

    python benchmarks/accuracy/all_to_all_accuracy.py            # refit per chip, print held-out errors (markdown)
    python benchmarks/accuracy/all_to_all_accuracy.py --shipped  # the shipped profiles' values, no refit

Refits exactly as `roofline calibrate --op-tables --all-to-all` does (`roofline.calibration.all_to_all_fit`: DeepEP
high-throughput / low-latency rows of vLLM's moe_a2a tables held out by (hidden, topk, experts) shape, NCCL
all-gather / reduce-scatter rows by message size) and reports the held-out rows; `--shipped` predicts every row with
the values the chip profiles ship (written by that command with --write) and reports the held-out rows.
Target (issue 40): held-out median <= 15 % per GPU and backend.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from roofline.calibration.all_to_all_fit import (  # noqa: E402
    BACKEND_LABELS,
    NCCL_OPS,
    chips_with_tables,
    fit_chip,
    load_a2a_tables,
    predict,
)
from roofline.cost.hardware import load_profile  # noqa: E402


def shipped_rows(chip: str, system: str) -> list[tuple[str, float, float, float, int]]:
    d = load_a2a_tables(system)
    d = d[d.held_out].reset_index(drop=True)
    err = predict(load_profile(chip), d) / d.measured_s.to_numpy() - 1.0
    backend = d.op.where(~d.op.isin(NCCL_OPS), "allgather_reducescatter").to_numpy()
    out = []
    for label in BACKEND_LABELS:
        e = err[backend == label]
        if e.size:
            out.append((label, float(np.median(np.abs(e))), float(np.percentile(np.abs(e), 90)), float(np.median(e)),
                        int(e.size)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shipped", action="store_true", help="the shipped profiles' values (no refit)")
    args = ap.parse_args()
    print("| GPU | backend | held-out median | p90 | bias | rows |")
    print("|---|---|---|---|---|---|")
    for chip, system in chips_with_tables().items():
        if args.shipped:
            rows = shipped_rows(chip, system)
        else:
            r = fit_chip(chip, system)
            rows = [(k, v["median_pct"] / 100, v["p90_pct"] / 100, v["bias_pct"] / 100, v["num_rows"])
                    for k, v in r.held_out_by_group.items()]
        for label, med, p90, bias, n in rows:
            print(f"| {chip} | {label} | {100 * med:.1f} % | {100 * p90:.1f} % | {100 * bias:+.1f} % | {n} |")


if __name__ == "__main__":
    main()
