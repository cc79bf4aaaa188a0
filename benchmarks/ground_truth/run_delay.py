"""Who waits for a core in the served runs: each thread's run delay (time runnable but not running, the kernel's
per-task schedstat) over a run's engine window, from a `vllm_serve_bench.py` index (its runs'
`engine_window.threads_sched`), summed by role, per run and per cell:

    python benchmarks/ground_truth/run_delay.py --runs $OUT/runs.json [--out delay.json]

Roles (the thread's process name and whether it is the process's main thread, tid == pid): the API server's event
loop (`api_server` or `VLLM::APIServer`, main) and its other threads (the renderer's worker, ZMQ's I/O); the client
(`vllm bench serve`); the engine core's busy loop (`VLLM::EngineCor`, main: schedule, the hand-off to the Worker,
update) and its other threads (the input and output socket threads, ZMQ's I/O); the Worker's main thread (the forward
pass and, between steps, its spin on the shared-memory queue: vllm/distributed/device_communicators/shm_broadcast.py
`SpinCondition.wait`, `sched_yield` for `busy_loop_s` = 1 s after each read) and its other threads. Per role: CPU s,
run delay s, times scheduled in, and per request / per engine step / per scheduling-in; the CPUs its threads may run
on and last ran on.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

ROLES = ("api_loop", "api_other", "client", "engine_loop", "engine_other", "worker_main", "worker_other")


def role(key: str) -> str:
    proc = key.split("/", 1)[0]  # process names have no "/"; thread names may ("ZMQbg/IO/0")
    pid, tid = key.rsplit("/", 2)[1:]
    main = pid == tid
    if proc in ("api_server", "VLLM::APIServer"):
        return "api_loop" if main else "api_other"
    if proc == "client":
        return "client"
    if proc.startswith("VLLM::EngineCor"):
        return "engine_loop" if main else "engine_other"
    if proc.startswith("VLLM::Worker"):
        return "worker_main" if main else "worker_other"
    return "other"


def run_roles(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per role, over the run's engine window: cpu_s, run_delay_s, slices, the per-request, per-step and
    per-slice delays (ms), the allowed and last CPUs."""
    sched = run.get("engine_window", {}).get("threads_sched", {})
    requests = run["result"]["completed"]
    steps = max(1, len(run.get("engine_steps", [])))
    out: dict[str, dict[str, Any]] = {}
    for key, v in sched.items():
        r = out.setdefault(role(key), {"cpu_s": 0.0, "run_delay_s": 0.0, "slices": 0, "allowed": set(),
                                       "last": set(), "threads": 0})
        r["cpu_s"] += v["cpu_s"]
        r["run_delay_s"] += v["run_delay_s"]
        r["slices"] += v["slices"]
        r["allowed"].update(v["allowed_cpus"])
        r["last"].add(v["last_cpu"])
        r["threads"] += 1
    for r in out.values():
        r["delay_per_request_ms"] = r["run_delay_s"] / requests * 1e3
        r["delay_per_step_ms"] = r["run_delay_s"] / steps * 1e3
        r["delay_per_slice_ms"] = r["run_delay_s"] / max(1, r["slices"]) * 1e3
        r["cpu_per_step_ms"] = r["cpu_s"] / steps * 1e3
        r["allowed"], r["last"] = sorted(r["allowed"]), sorted(r["last"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="vllm_serve_bench.py indexes")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    runs = [r for path in args.runs for r in json.loads(path.read_text())["runs"]
            if r.get("engine_window", {}).get("threads_sched")]
    if not runs:
        raise SystemExit("no run with engine_window.threads_sched (vllm_serve_bench.py records it since serve7)")
    per_run = {r["name"]: {"wall_s": r["engine_window"]["wall_s"], "steps": len(r.get("engine_steps", [])),
                           "mean_ttft_ms": r["result"]["mean_ttft_ms"], "roles": run_roles(r)} for r in runs}
    print(f"{'run':32} {'TTFT':>6} {'steps':>5}  " + "  ".join(f"{k:>22}" for k in ROLES))
    print(f"{'':32} {'ms':>6} {'':>5}  " + "  ".join(f"{'cpu/step dly/step dly/sl':>22}" for _ in ROLES))
    for name, row in per_run.items():
        cells = []
        for k in ROLES:
            r = row["roles"].get(k)
            cells.append(f"{r['cpu_per_step_ms']:6.2f} {r['delay_per_step_ms']:6.2f} {r['delay_per_slice_ms']:6.3f}"
                         if r else f"{'-':>22}")
        print(f"{name:32} {row['mean_ttft_ms']:6.1f} {row['steps']:5d}  " + "  ".join(cells))
    cells: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        cells.setdefault(f"{r['load']}-{r['endpoint']}-a{r['api_server_count']}", []).append(per_run[r["name"]])
    summary = {}
    print("\nmedians over repeats, ms: run delay per request / per step / per scheduling-in, by role")
    for cell, rows in cells.items():
        summary[cell] = {k: {m: statistics.median(row["roles"][k][m] for row in rows if k in row["roles"])
                             for m in ("delay_per_request_ms", "delay_per_step_ms", "delay_per_slice_ms",
                                       "cpu_per_step_ms")}
                         for k in ROLES if any(k in row["roles"] for row in rows)}
        print(cell, {k: [round(v[m], 3) for m in ("delay_per_request_ms", "delay_per_step_ms", "delay_per_slice_ms")]
                     for k, v in summary[cell].items()})
    if args.out:
        args.out.write_text(json.dumps({"runs": per_run, "cells": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
