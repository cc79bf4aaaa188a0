"""Data-parallel rows of the end-to-end judge whose measurement is a one-node row's: for every row simulated with
--data-parallel-size > 1, the row of the same model, GPU, precision, TP, isl / osl, vLLM version and client
concurrency simulated without data parallelism whose measured mean TTFT and TPOT are closest, and how close.

    python -m roofline.judge.twins [--within 0.05]
    python -m roofline.judge.twins --rows $OUT/rows.csv   # + a judge run's errors by node count and twin status

A diagnosis of the judge's rows, never an input to the model. Two deployments of different GPU counts at one client
concurrency (DP x TP GPUs, each rank holding concurrency / DP requests, against TP GPUs holding them all) do not
measure the same TTFT and TPOT to a few parts in a thousand on every concurrency of a sweep; rows that do are the
one-node run's measurement under another row's parallel labels, and the simulated DP deployment is not what was
measured.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from roofline.judge.rows import RowError, SiliconRow, SimCase, read_silicon_rows, resolve_row

EXACT = 0.005  # TTFT and TPOT both within 0.5 %: the same measurement


@dataclass(frozen=True)
class Twin:
    row: SiliconRow  # the data-parallel row
    twin: SiliconRow  # its closest one-node row
    data_parallel_size: int
    distance: float  # max of |twin / row - 1| over mean TTFT and mean TPOT


def _key(case: SimCase) -> tuple:
    r = case.row
    return r.model_path, r.system, r.precision, r.tp_size, r.isl, r.osl, r.backend_version, case.concurrency


def find_twins(rows: list[SiliconRow] | None = None) -> tuple[list[Twin], list[SiliconRow]]:
    """(each data-parallel row's closest twin, the data-parallel rows without a candidate)."""
    cases = []
    for row in read_silicon_rows() if rows is None else rows:
        try:
            case = resolve_row(row)
        except RowError:
            continue
        if isinstance(case, SimCase):
            cases.append(case)
    plain: dict[tuple, list[SiliconRow]] = defaultdict(list)
    for case in cases:
        if case.engine.data_parallel_size == 1:
            plain[_key(case)].append(case.row)
    twins, alone = [], []
    for case in cases:
        if case.engine.data_parallel_size == 1:
            continue
        r = case.row
        scored = [(max(abs(o.measured_ttft_s / r.measured_ttft_s - 1), abs(o.measured_tpot_s / r.measured_tpot_s - 1)),
                   o.row_id, o) for o in plain[_key(case)]]
        if scored:
            distance, _, twin = min(scored)
            twins.append(Twin(r, twin, case.engine.data_parallel_size, distance))
        else:
            alone.append(r)
    return twins, alone


def _stats(errors: list[float]) -> str:
    """median |e| / p90 |e| / mean e, in percent (the judge's figures)."""
    e = np.asarray(errors, dtype=float) * 100
    a = np.abs(e)
    return f"{np.median(a):.1f} / {np.percentile(a, 90):.1f} / {e.mean():+.1f}"


def judge_split(rows_csv: Path, twins: list[Twin], exact: float) -> list[str]:
    """Table lines: a judge run's TTFT / TPOT errors of its simulated data / expert-parallel rows, by node count
    (two nodes: `data_parallel_size_local` set), and by whether a data-parallel row has a one-node twin within
    `exact`."""
    twin_of = {t.row.row_id: t.distance for t in twins}
    by_id = {r.row_id: r for r in read_silicon_rows()}
    groups: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    with rows_csv.open() as f:
        for rec in csv.DictReader(f):
            if rec["status"] != "simulated":
                continue
            case = resolve_row(by_id[rec["row_id"]])
            assert isinstance(case, SimCase)
            if case.engine.data_parallel_size == 1 and not case.engine.enable_expert_parallel:
                continue
            nodes = "two nodes" if case.engine.data_parallel_size_local else "one node"
            copy = twin_of.get(rec["row_id"], 1.0) <= exact
            e_ttft = float(rec["predicted_ttft_s"]) / float(rec["measured_ttft_s"]) - 1
            e_tpot = float(rec["predicted_tpot_s"]) / float(rec["measured_tpot_s"]) - 1
            for name in (nodes, f"{nodes}, {'a one-node twin' if copy else 'no twin'}"):
                groups[name][0].append(e_ttft)
                groups[name][1].append(e_tpot)
    lines = [f"| rows ({rows_csv.name}; twin: within {exact * 100:g} %) | n | TTFT median / p90 / bias (%) | "
             "TPOT median / p90 / bias (%) |", "|---|---|---|---|"]
    for name in sorted(groups):
        ttft, tpot = groups[name]
        lines.append(f"| {name} | {len(ttft)} | {_stats(ttft)} | {_stats(tpot)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--within", type=float, default=0.05,
                        help="count a twin whose TTFT and TPOT are both within this fraction (default 0.05)")
    parser.add_argument("--rows", type=Path, default=None,
                        help="a judge run's rows.csv (e2e_accuracy.py --out): its errors split by node count and "
                             "by whether a row is a twin within 0.5 %%")
    args = parser.parse_args(argv)
    if not 0 <= args.within < 1:
        parser.error(f"--within: must be in [0, 1), got {args.within}")
    if args.rows is not None and not args.rows.is_file():
        parser.error(f"--rows: {args.rows} is not a file")
    twins, alone = find_twins()
    groups: dict[tuple, list[Twin]] = defaultdict(list)
    for t in twins:
        groups[(t.row.model_path, t.row.system, t.row.precision, t.row.tp_size, t.data_parallel_size,
                t.row.backend_version)].append(t)
    print("| model | GPU | precision | TP | DP | vLLM | rows | twins within 0.5 % | within "
          f"{args.within * 100:g} % | median distance |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key, items in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        d = sorted(t.distance for t in items)
        exact = sum(x <= EXACT for x in d)
        close = sum(x <= args.within for x in d)
        print(f"| {' | '.join(str(k) for k in key)} | {len(d)} | {exact} | {close} | {d[len(d) // 2] * 100:.1f} % |")
    n = len(twins) + len(alone)
    print(f"{n} data-parallel rows: {sum(t.distance <= EXACT for t in twins)} within 0.5 % of a one-node row, "
          f"{sum(t.distance <= args.within for t in twins)} within {args.within * 100:g} %, {len(alone)} without a "
          f"one-node row of the same TP, lengths, version and concurrency")
    if args.rows is not None:
        print("\n".join(judge_split(args.rows, twins, EXACT)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
