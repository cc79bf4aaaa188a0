"""Held-out accuracy of the MLA attention model on aiconfigurator-core's vLLM MLA module tables.

    python benchmarks/accuracy/mla_accuracy.py                    # fit the mla_* fields per GPU on the training shapes,
                                                         # report train / held-out median and p90 per GPU and phase
    python benchmarks/accuracy/mla_accuracy.py --gpus h200_sxm --print-yaml   # the fitted values as efficiency YAML lines

The tables, the model, the split (per-rank head counts whose CRC32 is 0 mod 4 held out) and the fit (which chips take
B200's fit, what a legacy collector's table holds) are `roofline.calibration.mla_fit`'s; this script judges and
writes nothing. The chip files' values are written by `roofline calibrate --op-tables --op mla [--chip C] --write`
(`roofline.calibration.chip_fit`), the same fit.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from roofline.calibration.mla_fit import FIT_ON, GPUS, fit_mla_chip, legacy_collector, yaml_values  # noqa: E402
from roofline.calibration.profile_writer import yaml_number  # noqa: E402

TARGET_MEDIAN, TARGET_P90 = 0.10, 0.25


def yaml_lines(values: dict[str, float]) -> list[str]:
    """The fitted values as the chip file's efficiency lines (`roofline.calibration.profile_writer.yaml_number`)."""
    return [f"  {key}: {yaml_number(value)}" for key, value in yaml_values(values).items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", default=",".join(GPUS))
    ap.add_argument("--print-yaml", action="store_true", help="print the fitted values as efficiency YAML lines")
    args = ap.parse_args()
    print("| GPU | split | phase | median | p90 | rows |")
    print("|---|---|---|---|---|---|")
    fits: dict[str, dict[str, float]] = {}
    gpus = sorted(args.gpus.split(","), key=lambda g: g != "b200_sxm")  # B200's fit first: the others may hold it
    needed = sorted({"b200_sxm" for g in gpus if g in FIT_ON or legacy_collector(g)} - set(gpus))
    for gpu in needed + gpus:
        _, values, report = fit_mla_chip(gpu, fits.get("b200_sxm"))
        fits[gpu] = values
        if gpu in needed:
            continue
        for split, phase, med, p90, count in report:
            print(f"| {gpu} | {split} | {phase} | {100 * med:.1f} % | {100 * p90:.1f} % | {count} |")
    if args.print_yaml:
        for gpu, values in fits.items():
            print(f"# {GPUS[gpu]}")
            print("\n".join(yaml_lines(values)))


if __name__ == "__main__":
    main()
