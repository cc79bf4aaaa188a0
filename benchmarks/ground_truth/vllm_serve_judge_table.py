"""Issue 37's judgement of a `vllm_serve_sim.py --out` file as a Markdown table, one line per (cell, metric), under
its own repeats' spread and each --floor file's spreads (spread + 10 points), and the figures against another
simulation's (e.g. the same runs with the host profile at a probed speed):

    R=benchmarks/results/vllm-serve-bench
    O=$R/2026-11-30j-serve19
    python benchmarks/ground_truth/vllm_serve_judge_table.py --sim $O/sim-a1.json $O/sim-a2.json \
        --floor $R/2026-11-30i-serve17/sim-sessions-serve11-busy-hop.json \
        --also $O/sim-a1-probed.json $O/sim-a2-probed.json

Each figure is the error of the simulated median over the cell's runs against the measured median, as
`vllm_serve_sim.judge_summary` counts it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vllm_serve_sim import METRICS, existing_file, spreads

LABELS = {"mean_ttft_ms": "mean TTFT ms", "median_ttft_ms": "median TTFT ms", "mean_tpot_ms": "mean TPOT ms",
          "output_throughput": "output tok/s"}


def met(error_pct: float, spread_pct: float) -> bool:
    return abs(error_pct) <= spread_pct + 10


def table(rows: list[dict[str, Any]], floors: dict[str, dict[str, dict[str, float]]],
          also: dict[str, dict[str, Any]] | None = None) -> tuple[str, dict[str, int]]:
    """The Markdown table and the count met under each floor ("own" and each of `floors`' names)."""
    heads = ["cell", "metric", "measured (median)", "simulated", "error %", "own spread %", "own"]
    for name in floors:
        heads += [f"{name} spread %", name]
    if also is not None:
        heads += ["error % (also)"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    counts = {name: 0 for name in ["own", *floors]}
    for row in rows:
        for metric in METRICS:
            figure = row[metric]
            error, own = figure["error_pct"], figure["spread_pct"]
            cells = [row["cell"], LABELS[metric], f"{figure['measured']:.1f}",
                     f"{figure['predicted']:.1f}", f"{error:+.1f}", f"{own:.1f}",
                     "met" if met(error, own) else "**miss**"]
            counts["own"] += met(error, own)
            for name, floor in floors.items():
                spread = floor[row["cell"]][metric]
                cells += [f"{spread:.1f}", "met" if met(error, spread) else "**miss**"]
                counts[name] += met(error, spread)
            if also is not None:
                cells.append(f"{also[row['cell']][metric]['error_pct']:+.1f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), counts


def errors_by_count(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per API-server count (the cell's `-aN`) and metric kind (TTFT: mean and median; TPOT; throughput) and over
    all: how many figures, the median |error| % and the bias, the median signed error % (negative: simulated
    shorter / lower than measured)."""
    import statistics

    kinds = {"mean_ttft_ms": "TTFT", "median_ttft_ms": "TTFT", "mean_tpot_ms": "TPOT",
             "output_throughput": "throughput"}
    groups: dict[str, list[float]] = {}
    for row in rows:
        count = "a" + row["cell"].rsplit("-a", 1)[1]
        for metric in METRICS:
            for key in (f"{count} all", f"{count} {kinds[metric]}"):
                groups.setdefault(key, []).append(row[metric]["error_pct"])
    return {key: {"figures": len(errors), "median_abs_error_pct": statistics.median(abs(e) for e in errors),
                  "bias_pct": statistics.median(errors)} for key, errors in sorted(groups.items())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sim", type=existing_file, nargs="+", required=True,
                        help="vllm_serve_sim.py's --out files (their rows together, e.g. one per server session)")
    parser.add_argument("--floor", type=existing_file, nargs="*", default=[], help="--out files whose spreads are floors")
    parser.add_argument("--also", type=existing_file, nargs="*", default=[],
                        help="other --out files of the same runs (e.g. another profile): their errors beside")
    args = parser.parse_args()

    def sim_rows(flag: str, path: Path) -> list[dict[str, Any]]:
        """The rows of a `vllm_serve_sim.py --out` file; anything else refused in one line."""
        try:
            rows = json.loads(path.read_text())["rows"]
        except (ValueError, KeyError, TypeError):
            parser.error(f"{flag} {path}: not a vllm_serve_sim.py --out file (JSON with a 'rows' list)")
        return rows

    rows = [row for path in args.sim for row in sim_rows("--sim", path)]
    floors = {path.parent.name + "/" + path.stem: spreads(sim_rows("--floor", path)) for path in args.floor}
    also = {row["cell"]: row for path in args.also for row in sim_rows("--also", path)} or None
    if also is not None and set(also) != {row["cell"] for row in rows}:
        parser.error("--also: not the same cells as --sim")
    for name, floor in floors.items():
        missing = sorted({row["cell"] for row in rows} - set(floor))
        if missing:
            parser.error(f"--floor: {name} has no cell {', '.join(missing)}")
    text, counts = table(rows, floors, also)
    print(text)
    print()
    print("; ".join(f"{name}: {n} of {len(rows) * len(METRICS)} met" for name, n in counts.items()))
    print()
    for key, group in errors_by_count(rows).items():
        print(f"{key}: {group['figures']} figures, median |error| {group['median_abs_error_pct']:.1f} %, bias (median "
              f"signed error) {group['bias_pct']:+.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
