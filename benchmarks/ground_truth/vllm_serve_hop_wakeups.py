"""Whether a request's input hop waits for a core: real `vllm serve` traced (`vllm_serve_bench.py --timeline
--perf-sched`, perf's clock CLOCK_MONOTONIC, the timeline's) with vllm_timeline.py's `sent` / `ec_dec` stamps
(docs/benchmark-history/2026-11-30i-serve17.md):

    python benchmarks/ground_truth/vllm_serve_hop_wakeups.py --work-dir $OUT/s7 --out $OUT/hop-wakeups.json

Per request, its transport (the API server's ZMQ send returned -> the engine core's input thread decoding it: the two
processes' ZMQ I/O threads and the input thread woken), and within it each thread's scheduling delay (woken,
runnable, not yet running: `perf sched timehist`) by role (`run_delay.role`: the engine core's other threads, the
API server's other threads, ...), the delay clipped to the window; also the time the Worker's main thread and the
engine core's busy loop ran on the engine's core meanwhile. By load and by whether the engine core was in a step
(`EngineCore.step`, the timeline's "ec_step") when the request was sent. Means per request, ms.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_sched_holders import timehist  # noqa: E402
from run_delay import role  # noqa: E402
from vllm_serve_stages import read_events  # noqa: E402

RUNNERS = ("worker_main", "engine_loop")


def transports(events: list[list[Any]], lo: float, hi: float) -> list[tuple[float, float, bool]]:
    """(sent, decode start, sent during a step) of the requests handed off in [lo, hi]."""
    steps = sorted((e[1], e[2]) for e in events if e[0] == "ec_step")
    starts = [a for a, _ in steps]
    sent = {e[1]: e[2] for e in events if e[0] == "sent" and lo <= e[2] <= hi}
    out = []
    for e in events:
        if e[0] == "ec_dec" and e[1] in sent:
            k = bisect.bisect_right(starts, sent[e[1]]) - 1
            out.append((sent[e[1]], e[2], k >= 0 and steps[k][1] > sent[e[1]]))
    return sorted(out)


def waits_in(sched: list[tuple[float, int, str, int, float, float]], roles: dict[int, str],
             windows: list[tuple[float, float, bool]]) -> list[dict[str, float]]:
    """Per window: each role's scheduling delay inside it and the runners' time on the CPU meanwhile (s)."""
    spans = sorted((end - run - delay, end - run, end, tid) for end, _cpu, _comm, tid, delay, run in sched)
    starts = [s[0] for s in spans]
    out = []
    for lo, hi, _ in windows:
        row: dict[str, float] = collections.defaultdict(float)
        i = max(0, bisect.bisect_left(starts, lo - 0.05) - 1)
        while i < len(spans) and spans[i][0] < hi:
            woken, running, end, tid = spans[i]
            r = roles.get(tid, "other")
            row[f"delay:{r}"] += max(0.0, min(running, hi) - max(woken, lo))
            if r in RUNNERS:
                row[f"ran:{r}"] += max(0.0, min(end, hi) - max(running, lo))
            i += 1
        out.append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="a vllm_serve_bench.py --timeline --perf-sched "
                                                                     "work dir")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    index = args.work_dir / "runs.json"
    logs = list(args.work_dir.glob("timeline-a*.log"))
    if not index.is_file() or not logs:
        parser.exit(2, f"--work-dir: {args.work_dir} has no runs.json or timeline-a<N>.log (a vllm_serve_bench.py "
                       f"--timeline --perf-sched work dir)\n")
    events = read_events(logs[0])
    out: dict[str, Any] = {"runs": {}}
    for run in json.loads(index.read_text())["runs"]:
        data = args.work_dir / f"{run['name']}.perf.data"
        if not data.is_file():
            continue
        sends = json.loads((args.work_dir / run["file"]).read_text())["start_times"]
        windows = transports(events, sends[0], sends[-1] + 1.0)
        roles = {int(key.rsplit("/", 1)[1]): role(key) for key in run["engine_window"]["threads_sched"]}
        rows = waits_in(timehist(data), roles, windows)
        groups: dict[str, Any] = {}
        for during, name in ((True, "in_step"), (False, "between_steps")):
            mine = [(w, r) for w, r in zip(windows, rows) if w[2] == during]
            if not mine:
                continue
            keys = sorted({k for _, r in mine for k in r})
            groups[name] = {"requests": len(mine),
                            "transport_ms": round(1e3 * statistics.mean(w[1] - w[0] for w, _ in mine), 4)} | {
                k: round(1e3 * statistics.mean(r.get(k, 0.0) for _, r in mine), 4) for k in keys}
        out["runs"][run["name"]] = {"load": run["load"], **groups}
        print(run["name"], json.dumps(groups))
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
