"""The end-to-end judge's rows (`e2e_accuracy.py`'s rows.csv) split as BENCHMARKS.md "End-to-end judge" reports them.

    python benchmarks/accuracy/judge_split.py $OUT/rows.csv

Groups by the layout each row was simulated with (`roofline.judge.rows.resolve_row`: the InferenceX recipe's launched
layout where one is public, else the row's labels): tensor parallel (no `--data-parallel-size` > 1, no expert
parallelism) without Kimi-K2.5, per GPU and per origin of the row; Kimi-K2.5 tensor parallel; data / expert parallel;
every simulated row; and the peer (aiconfigurator-core's estimator, in-sample) next to ours on the rows it estimates.
Per group: the rows, then median / p90 of |predicted / measured - 1| and the bias (mean signed error), in %, of the
mean TTFT and the mean TPOT. A judge only: nothing here is fitted.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

from roofline.judge.rows import SimCase, read_silicon_rows, resolve_row

GPUS = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm")
NEEDED = {"row_id", "status", "system", "origin", "predicted_ttft_s", "measured_ttft_s", "predicted_tpot_s",
          "measured_tpot_s", "peer_ttft_s", "peer_tpot_s"}


def stats(rows: list[dict], metric: str, source: str = "predicted") -> str:
    """median / p90 / bias of `source`'s error on `metric` (ttft, tpot) over `rows`, in %."""
    err = np.array([float(r[f"{source}_{metric}_s"]) / float(r[f"measured_{metric}_s"]) - 1 for r in rows])
    if err.size == 0:
        return "-"
    return (f"{100 * np.median(np.abs(err)):.1f} / {100 * np.percentile(np.abs(err), 90):.1f} / "
            f"{100 * err.mean():+.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows_csv", type=Path, help="e2e_accuracy.py's rows.csv")
    args = parser.parse_args(argv)
    try:
        table = list(csv.DictReader(args.rows_csv.open()))
    except OSError as exc:
        parser.error(f"rows_csv: cannot read {args.rows_csv}: {exc.strerror}")
    missing = NEEDED - set(table[0] if table else ())
    if missing:
        parser.error(f"rows_csv: {args.rows_csv} is not e2e_accuracy.py's rows.csv: no column "
                     f"{', '.join(sorted(missing))}")
    silicon = {r.row_id: r for r in read_silicon_rows()}
    simulated = [r for r in table if r["status"] == "simulated"]
    parallel, kimi = set(), set()
    for r in simulated:
        row = silicon[r["row_id"]]
        case = resolve_row(row)
        if isinstance(case, SimCase) and (case.engine.parallel.data_parallel_size > 1
                                          or case.engine.enable_expert_parallel):
            parallel.add(r["row_id"])
        if "kimi" in row.model_path.lower():
            kimi.add(r["row_id"])

    def line(name: str, rows: list[dict], source: str = "predicted") -> None:
        print(f"| {name} | {len(rows)} | {stats(rows, 'ttft', source)} | {stats(rows, 'tpot', source)} |")

    print("| rows (mean error's median / p90 / bias, %) | n | TTFT | TPOT |\n|---|---|---|---|")
    tp = [r for r in simulated if r["row_id"] not in parallel and r["row_id"] not in kimi]
    line("tensor parallel as launched, not Kimi", tp)
    for gpu in GPUS:
        on_gpu = [r for r in tp if r["system"] == gpu]
        line(gpu, on_gpu)
        for origin in sorted({r["origin"] for r in on_gpu}):
            line(f"{gpu}, {origin}", [r for r in on_gpu if r["origin"] == origin])
    line("Kimi-K2.5, tensor parallel as launched", [r for r in simulated if r["row_id"] in kimi - parallel])
    line("data / expert parallel as launched", [r for r in simulated if r["row_id"] in parallel])
    line("every simulated row", simulated)
    peer = [r for r in simulated if r.get("peer_ttft_s") and r.get("peer_tpot_s")]
    line("peer: aiconfigurator-core (in-sample), on the rows it estimates", peer, source="peer")
    line("ours on the same rows", peer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
