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
or has no core). Means over the run's requests, ms.
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


def busy(spans: list[tuple[float, float, str]], starts: list[float], lo: float, hi: float) -> dict[str, float]:
    """Seconds of [lo, hi) the loop spent in each kind's spans (sorted by start, not overlapping), and idle."""
    out = dict.fromkeys(KINDS, 0.0)
    i = max(0, bisect.bisect_right(starts, lo) - 1)
    while i < len(spans) and spans[i][0] < hi:
        a, b, kind = spans[i]
        overlap = min(b, hi) - max(a, lo)
        if overlap > 0:
            out[kind] += overlap
        i += 1
    out["idle"] = max(0.0, (hi - lo) - sum(out[k] for k in KINDS if k != "idle"))
    return out


def analyse(work_dir: Path) -> dict[str, Any]:
    events = [json.loads(line) for line in (work_dir / "timeline-a1.log").read_text().splitlines()]
    spans = sorted([(e[2], e[3], kind_of(e[1])) for e in events if e[0] == "step"]
                   + [(e[1], e[2], "io") for e in events if e[0] == "io"])
    starts = [s[0] for s in spans]
    adds = {e[1].rsplit("-", 1)[0]: e[2] for e in events if e[0] == "add"}
    reqs = sorted((e for e in events if e[0] == "req"), key=lambda e: e[2])
    runs = {}
    for run in json.loads((work_dir / "runs.json").read_text())["runs"]:
        detailed = json.loads((work_dir / run["file"]).read_text())
        sends = sorted(detailed["start_times"])
        lo, hi = sends[0] - 0.5, sends[-1] + 5
        windows: dict[str, list[dict[str, float]]] = {"send_to_arrival": [], "arrival_to_handoff": []}
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
            windows["send_to_arrival"].append(busy(spans, starts, sends[i], arrival))
            windows["arrival_to_handoff"].append(busy(spans, starts, arrival, adds[rid]))
        runs[run["name"]] = {"load": run["load"], "requests": len(windows["send_to_arrival"])} | {
            name: {k: round(1e3 * statistics.mean(w[k] for w in rows), 3) for k in KINDS}
            | {"total": round(1e3 * statistics.mean(sum(w.values()) for w in rows), 3)}
            for name, rows in windows.items()}
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dirs", type=Path, nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    runs: dict[str, Any] = {}
    for k, path in enumerate(args.work_dirs, 1):
        runs |= {f"{name}-s{k}": row for name, row in analyse(path).items()}
    loads: dict[str, Any] = {}
    for load in sorted({r["load"] for r in runs.values()}):
        mine = [r for r in runs.values() if r["load"] == load]
        loads[load] = {w: {k: round(statistics.mean(r[w][k] for r in mine), 3) for k in (*KINDS, "total")}
                       for w in ("send_to_arrival", "arrival_to_handoff")} | {"runs": len(mine)}
    for name, row in runs.items():
        print(name, row["send_to_arrival"], row["arrival_to_handoff"])
    for load, row in loads.items():
        print(load, json.dumps(row))
    args.out.write_text(json.dumps({"runs": runs, "loads": loads}, indent=1) + "\n")


if __name__ == "__main__":
    main()
