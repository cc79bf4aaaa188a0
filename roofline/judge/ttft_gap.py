"""Where the end-to-end judge's TTFT misses: measured minus predicted mean TTFT of the concurrency-4 rows, split
into a part per request and a part per prompt token, per (model, GPU, vLLM version, precision).

    python -m roofline.judge.ttft_gap $OUT/rows.csv      # a judge run's rows.csv (e2e_accuracy.py --out $OUT)

A diagnosis of the judge's residuals, never an input to the model: nothing here is fitted into a profile or a
parameter (silicon_sample.csv is a judge only). At concurrency 4 a prompt of <= 8,192 tokens is prefilled in one
step and rarely queues, so the gap is what the simulator lacks per request: if it is flat in TP (1-8) and in the
GPU, it is not device work split by TP, and its slope per prompt token says how it grows with the prompt. The
prompt length is the mean of the judge's ranged lengths, uniform integers in [int(0.8 L), L]
(`roofline.judge.rows.ASSUMPTIONS`).
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

import numpy as np

from roofline.judge.checks import RANGE_RATIO  # InferenceX's --random-range-ratio

CONCURRENCY = 4


def mean_prompt_tokens(isl: int) -> float:
    """Mean of the uniform integers in [int(0.8 L), L]."""
    return (int(isl * RANGE_RATIO) + isl) / 2


def fit_gap(prompt_tokens: np.ndarray, gap_s: np.ndarray) -> tuple[float, float, float]:
    """Least squares gap = fixed + per_token x tokens: (fixed seconds, seconds per token, rms residual seconds)."""
    design = np.vstack([np.ones_like(prompt_tokens), prompt_tokens]).T
    coef, *_ = np.linalg.lstsq(design, gap_s, rcond=None)
    residual = gap_s - design @ coef
    return float(coef[0]), float(coef[1]), float(np.sqrt(np.mean(residual ** 2)))


def gap_table(rows: list[dict[str, str]]) -> list[str]:
    """One line per group with >= 3 simulated rows at concurrency 4 and two prompt lengths."""
    groups: dict[tuple[str, ...], list[tuple[int, float, float]]] = defaultdict(list)
    for r in rows:
        if r["status"] != "simulated" or int(r["concurrency"]) != CONCURRENCY:
            continue
        key = (r["model"], r["system"], r["backend_version"] or "unversioned", r["precision"] or "-")
        gap = float(r["measured_ttft_s"]) - float(r["predicted_ttft_s"])
        groups[key].append((int(r["tp"]), mean_prompt_tokens(int(r["isl"])), gap))
    lines = ["model | GPU | vLLM | precision | rows | fixed ms | us / prompt token | rms residual ms | gap ms by TP"]
    for group, points in sorted(groups.items()):
        tokens = np.array([p[1] for p in points])
        if len(points) < 3 or len(set(tokens.tolist())) < 2:
            continue
        fixed_s, per_token_s, rms_s = fit_gap(tokens, np.array([p[2] for p in points]))
        by_tp = ", ".join(f"TP{tp} {tok:.0f} tok {gap * 1e3:.0f}" for tp, tok, gap in sorted(points))
        lines.append(f"{' | '.join(group)} | {len(points)} | {fixed_s * 1e3:.1f} | {per_token_s * 1e6:.2f} | "
                     f"{rms_s * 1e3:.1f} | {by_tp}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows_csv", type=Path, help="a judge run's rows.csv (e2e_accuracy.py --out)")
    args = parser.parse_args()
    with args.rows_csv.open(newline="") as f:
        print("\n".join(gap_table(list(csv.DictReader(f)))))


if __name__ == "__main__":
    main()
