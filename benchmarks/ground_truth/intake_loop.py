"""What the API server's event loop does while each request is taken in, at 20/s against one at a time
(docs/benchmark-history/2026-11-30f-serve12.md, section 6): from `vllm_serve_bench.py --timeline` work directories
recorded with `VLLM_SERVE_TIMELINE_STEPS=1` (vllm_timeline.py: each step of each task of the loop, each read of
uvicorn's HTTP protocol, each request's arrival stamp and hand-off to the engine core).

    python benchmarks/ground_truth/intake_loop.py --work-dirs $OUT/steps/s1 $OUT/steps/s2 --out $OUT/intake-loop.json

Per request, two windows: the client's send to the API server's arrival stamp (`RequestStateStats.arrival_time`,
taken as the request's rendering starts), and that to its hand-off (`add`, `AsyncMLLM.add_request_async`). In each,
the loop's time by what it ran (task steps clipped to the window): the output path's tasks (the output handler,
the output socket's task, the server's own: `loop_steps.NOT_INPUT`), the streaming responses (each request's task
writing its SSE chunks), the input path's steps (this and other
requests' intake), uvicorn's reads (`io`), and nothing (idle: the loop waits on epoll or on the renderer's thread,
or has no core). Means over the run's requests, ms. With `--by-task` also each task's (coroutine qualname's) ms a
request in each window, per load, and its growth from one at a time to 20/s (2026-11-30f-serve13.md).
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
from pathlib import Path
from typing import Any

from loop_steps import NOT_INPUT

KINDS = ("output_path", "stream", "input", "io", "idle")
# The streaming responses: Starlette's `StreamingResponse.__call__` runs `stream_response` (which drives vLLM's
# `completion_stream_generator` / `chat_completion_stream_generator` and writes each SSE chunk) and
# `listen_for_disconnect` in an anyio task group, whose tasks step as anyio's `TaskHandle._run_coro`
# (starlette/responses.py; anyio/_core/_tasks.py).
STREAM = ("TaskHandle._run_coro", "listen_for_disconnect", "stream_response", "stream_generator")


def kind_of(qualname: str) -> str:
    if any(k in qualname for k in NOT_INPUT):
        return "output_path"
    if any(k in qualname for k in STREAM):
        return "stream"
    return "input"


def busy(spans: list[tuple[float, float, str, str]], starts: list[float], lo: float, hi: float,
         tasks: dict[str, float] | None = None) -> dict[str, float]:
    """Seconds of [lo, hi) the loop spent in each kind's spans (sorted by start, not overlapping), and idle; with
    `tasks`, each span's seconds are also added there under its task's qualname ("io": uvicorn's reads)."""
    out = dict.fromkeys(KINDS, 0.0)
    i = max(0, bisect.bisect_right(starts, lo) - 1)
    while i < len(spans) and spans[i][0] < hi:
        a, b, kind, name = spans[i]
        overlap = min(b, hi) - max(a, lo)
        if overlap > 0:
            out[kind] += overlap
            if tasks is not None:
                tasks[name] = tasks.get(name, 0.0) + overlap
        i += 1
    out["idle"] = max(0.0, (hi - lo) - sum(out[k] for k in KINDS if k != "idle"))
    return out


def analyse(work_dir: Path, by_task: bool = False) -> dict[str, Any]:
    events = [json.loads(line) for line in (work_dir / "timeline-a1.log").read_text().splitlines()]
    spans = sorted([(e[2], e[3], kind_of(e[1]), e[1]) for e in events if e[0] == "step"]
                   + [(e[1], e[2], "io", "io") for e in events if e[0] == "io"])
    starts = [s[0] for s in spans]
    adds = {e[1].rsplit("-", 1)[0]: e[2] for e in events if e[0] == "add"}
    reqs = sorted((e for e in events if e[0] == "req"), key=lambda e: e[2])
    runs = {}
    for run in json.loads((work_dir / "runs.json").read_text())["runs"]:
        detailed = json.loads((work_dir / run["file"]).read_text())
        sends = sorted(detailed["start_times"])
        lo, hi = sends[0] - 0.5, sends[-1] + 5
        windows: dict[str, list[dict[str, float]]] = {"send_to_arrival": [], "arrival_to_handoff": []}
        tasks: dict[str, dict[str, float]] = {name: {} for name in windows}
        used: set[int] = set()
        for e in reqs:
            rid, arrival = e[1], e[2]
            if not lo <= arrival <= hi or rid not in adds:
                continue
            i = bisect.bisect_right(sends, arrival) - 1  # the latest send before it (vllm_timeline's matching)
            while i >= 0 and i in used:
                i -= 1
            if i < 0:
                continue
            used.add(i)
            windows["send_to_arrival"].append(busy(spans, starts, sends[i], arrival, tasks["send_to_arrival"]))
            windows["arrival_to_handoff"].append(busy(spans, starts, arrival, adds[rid], tasks["arrival_to_handoff"]))
        n = len(windows["send_to_arrival"])
        runs[run["name"]] = {"load": run["load"], "requests": n} | {
            name: {k: round(1e3 * statistics.mean(w[k] for w in rows), 3) for k in KINDS}
            | {"total": round(1e3 * statistics.mean(sum(w.values()) for w in rows), 3)}
            for name, rows in windows.items()}
        if by_task:  # each task's (qualname's) mean ms a request in each window, most first
            runs[run["name"]]["by_task"] = {
                name: {q: round(1e3 * t / n, 3) for q, t in sorted(per.items(), key=lambda kv: -kv[1])}
                for name, per in tasks.items()}
    return runs


def by_task_loads(runs: dict[str, Any]) -> dict[str, Any]:
    """Per load and window, each task's mean ms a request over the runs (0 where a run lacks it); with two loads
    (sorted: closed1, rate20) also its growth, the second's less the first's, the biggest first."""
    loads = sorted({r["load"] for r in runs.values()})
    out: dict[str, Any] = {}
    for window in ("send_to_arrival", "arrival_to_handoff"):
        per_load = {}
        for load in loads:
            mine = [r["by_task"][window] for r in runs.values() if r["load"] == load]
            names = {q for m in mine for q in m}
            per_load[load] = {q: statistics.mean(m.get(q, 0.0) for m in mine) for q in names}
        names = sorted({q for m in per_load.values() for q in m})
        rows = {q: {load: round(per_load[load].get(q, 0.0), 3) for load in loads} for q in names}
        if len(loads) == 2:
            for q, row in rows.items():
                row["growth"] = round(row[loads[1]] - row[loads[0]], 3)
            rows = dict(sorted(rows.items(), key=lambda kv: -abs(kv[1]["growth"])))
        out[window] = rows
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dirs", type=Path, nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--by-task", action="store_true",
                        help="also each task's (coroutine qualname's) ms a request in each window, and its growth")
    args = parser.parse_args()
    runs: dict[str, Any] = {}
    for k, path in enumerate(args.work_dirs, 1):
        runs |= {f"{name}-s{k}": row for name, row in analyse(path, args.by_task).items()}
    loads: dict[str, Any] = {}
    for load in sorted({r["load"] for r in runs.values()}):
        mine = [r for r in runs.values() if r["load"] == load]
        loads[load] = {w: {k: round(statistics.mean(r[w][k] for r in mine), 3) for k in (*KINDS, "total")}
                       for w in ("send_to_arrival", "arrival_to_handoff")} | {"runs": len(mine)}
    for name, row in runs.items():
        print(name, row["send_to_arrival"], row["arrival_to_handoff"])
    for load, row in loads.items():
        print(load, json.dumps(row))
    result: dict[str, Any] = {"runs": runs, "loads": loads}
    if args.by_task:
        result["by_task"] = by_task_loads(runs)
        for window, rows in result["by_task"].items():
            print(window)
            for q, row in list(rows.items())[:12]:
                print("  ", json.dumps(row), q)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
