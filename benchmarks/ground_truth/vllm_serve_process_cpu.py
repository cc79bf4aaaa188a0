"""Per run of `vllm_serve_bench.py` indexes, core 0's and core 1's work as the kernel accounted it, by API-server count:
the API server processes' CPU per request (each process apart), their wake-ups (times scheduled in) and run delay per
wake-up, the client's CPU per request, the engine core's and the Worker's CPU per engine step (with --engine-steps the
two-process runs have their steps too), each step's logged time and the hypervisor's steal time; then per cell the
median over the runs and the two-process median over the one-process one:

    R=benchmarks/results/vllm-serve-bench/2026-12-01a-serve20
    python benchmarks/ground_truth/vllm_serve_process_cpu.py --runs $R/runs-w1-on.json --out $OUT/process-cpu.json

All figures are over the run's engine window (`engine_window`: from the sample before the Worker's first busy one to
the one after its last, 0.2-s samples), whose threads' accounting is /proc/<pid>/task/<tid>/schedstat (CPU ns, run
delay ns, times scheduled in) and /proc/stat's steal ticks (`cpus`, the whole run). A request here is a completed one
plus the client's one-prompt test request. Nothing is fitted: a diagnostic of what differs between one and two API
server processes on the same host (docs/benchmark-history/2026-12-01a-serve20.md).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from vllm_serve_sim import existing_file

API_PROCESSES = ("api_server/", "VLLM::APIServer/")  # the one-process server (the leader) and the spawned ones


def run_row(run: dict[str, Any]) -> dict[str, Any]:
    """One run's figures (module docstring); an API server process is one pid of `threads_sched` under
    API_PROCESSES with CPU in the window (the two-process setup's idle parent, the leader, has next to none)."""
    window = run["engine_window"]
    requests = run["result"]["completed"] + 1
    processes: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    engine_core = worker = client = 0.0
    for key, sched in window["threads_sched"].items():
        process, pid = key.split("/", 1)[0], key.rsplit("/", 2)[-2]
        if any(key.startswith(p) for p in API_PROCESSES):
            acc = processes[pid]
            acc[0] += sched["cpu_s"]
            acc[1] += sched["run_delay_s"]
            acc[2] += sched["slices"]
        elif process == "VLLM::EngineCor":
            engine_core += sched["cpu_s"]
        elif process == "VLLM::Worker":
            worker += sched["cpu_s"]
        elif process == "client":
            client += sched["cpu_s"]
    # the processes that served (the two-process parent's CPU is a few ms: not one of them)
    busy = sorted((p for p in processes.values() if p[0] >= 0.02), key=lambda p: -p[0])
    steps = run.get("engine_steps") or []
    cpu_s = sum(p[0] for p in busy)
    slices = sum(p[2] for p in busy)
    return {"run": run["name"], "cell": run["name"].rsplit("-r", 1)[0], "api_server_count": run["api_server_count"],
            "api_processes": len(busy),
            "api_cpu_ms_per_request": 1e3 * cpu_s / requests,
            "api_cpu_ms_per_request_by_process": [round(1e3 * p[0] / requests, 3) for p in busy],
            "api_wakeups_per_request": slices / requests,
            "api_run_delay_ms_per_wakeup": 1e3 * sum(p[1] for p in busy) / slices if slices else None,
            "client_cpu_ms_per_request": 1e3 * client / requests,
            "engine_steps": len(steps),
            "engine_core_cpu_ms_per_step": 1e3 * engine_core / len(steps) if steps else None,
            "worker_cpu_ms_per_step": 1e3 * worker / len(steps) if steps else None,
            "step_ms_mean": statistics.fmean(s[5] for s in steps) if steps else None,
            "steal_s": sum(c["steal_s"] for c in run.get("cpus", {}).values()),
            "mean_ttft_ms": run["result"]["mean_ttft_ms"],
            "sched_autogroup_enabled": run.get("sched_autogroup_enabled")}


# figure -> its short name in the printed lines
FIGURES = {"api_cpu_ms_per_request": "API CPU", "api_wakeups_per_request": "wake-ups",
           "api_run_delay_ms_per_wakeup": "delay/wake-up", "client_cpu_ms_per_request": "client CPU",
           "engine_core_cpu_ms_per_step": "engine core CPU/step", "worker_cpu_ms_per_step": "Worker CPU/step",
           "step_ms_mean": "step", "steal_s": "steal", "mean_ttft_ms": "TTFT"}


def cell_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell, each figure's median over its runs; for a two-process cell also its median over the one-process
    cell's of the same load and endpoint (`<figure>_over_a1`)."""
    cells: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for row in rows:
        cells[row["cell"]].append(row)
    medians = {}
    for cell, runs in cells.items():
        medians[cell] = {"cell": cell, "runs": len(runs)}
        for figure in FIGURES:
            values = [r[figure] for r in runs if r[figure] is not None]
            medians[cell][figure] = statistics.median(values) if values else None
    for cell, row in medians.items():
        one = medians.get(cell.rsplit("-a", 1)[0] + "-a1")
        if one is not None and one is not row:
            for figure in FIGURES:
                if row[figure] is not None and one[figure]:
                    row[f"{figure}_over_a1"] = row[figure] / one[figure]
    return list(medians.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=existing_file, nargs="+", required=True, help="vllm_serve_bench.py indexes")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    for path in args.runs:
        index = json.loads(path.read_text())
        if not isinstance(index, dict) or not isinstance(index.get("runs"), list):
            parser.exit(2, f"--runs: {path}: not a vllm_serve_bench.py index (no 'runs' list)\n")
        # (indexes before the scheduler's per-thread accounting, 2026-11-30d, have no threads_sched: left out)
        rows += [run_row(run) for run in index["runs"] if (run.get("engine_window") or {}).get("threads_sched")]
    cells = cell_rows(rows)
    for row in cells:
        ratio = ", ".join(f"{name} x{row[f + '_over_a1']:.2f}" for f, name in FIGURES.items() if f + "_over_a1" in row)
        print(f"{row['cell']:28s} runs {row['runs']}  API CPU {row['api_cpu_ms_per_request']:.2f} ms/req  "
              f"wake-ups {row['api_wakeups_per_request']:.1f}/req  delay "
              f"{row['api_run_delay_ms_per_wakeup'] or 0:.3f} ms  client {row['client_cpu_ms_per_request']:.2f}  "
              f"step {row['step_ms_mean'] or 0:.2f} ms  TTFT {row['mean_ttft_ms']:.1f}" + (f"; over a1: {ratio}" if ratio
                                                                                         else ""))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": rows, "cells": cells}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
