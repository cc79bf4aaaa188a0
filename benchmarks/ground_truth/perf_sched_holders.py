"""Who held the core while the served threads waited for it: a `vllm_serve_bench.py --perf-sched` run's scheduler
events (`<run>.perf.data`, `perf sched record -a`) read with `perf sched timehist`, each wait of a server thread
(its scheduling delay: woken or preempted, runnable, not yet running) split over the tasks that ran on its CPU
meanwhile:

    python benchmarks/ground_truth/perf_sched_holders.py --runs $OUT/perf/runs.json --work-dir $OUT/perf

The server's threads and their roles come from the run's `engine_window.threads_sched` (`run_delay.py`'s roles);
the window is the run's engine window's length, ending at the last event. Per role: the summed scheduling delay and,
per holder (a role of the server's, or "other:<comm>" for other sessions' tasks), the time it ran on that CPU
during those waits, in ms per request.
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
import subprocess
from pathlib import Path
from typing import Any

from run_delay import role

LINE = re.compile(r"^\s*([\d.]+)\s+\[(\d+)\]\s+(\S.*?)\[(\d+)(?:/\d+)?\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def timehist(path: Path) -> list[tuple[float, int, str, int, float, float]]:
    """[(switch-out time s, cpu, comm, tid, scheduling delay s, run time s)], from `perf sched timehist`."""
    text = subprocess.run(["perf", "sched", "timehist", "-i", str(path)], capture_output=True, text=True,
                          check=True).stdout
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            out.append((float(m[1]), int(m[2]), m[3], int(m[4]), float(m[6]) / 1e3, float(m[7]) / 1e3))
    return out


def holders(events: list[tuple[float, int, str, int, float, float]], roles: dict[int, str],
            since_s: float) -> dict[str, dict[str, Any]]:
    """Per role of the server's threads: its waits' total (s) and who ran on its CPU during them (s by holder)."""
    runs: dict[int, list[tuple[float, float, str]]] = {}  # cpu -> [(start, end, holder)] sorted by start
    for end, cpu, comm, tid, _delay, run in events:
        runs.setdefault(cpu, []).append((end - run, end, roles.get(tid, f"other:{comm}")))
    starts = {}
    for cpu, spans in runs.items():
        spans.sort()
        starts[cpu] = [s[0] for s in spans]
    out: dict[str, dict[str, Any]] = {}
    for end, cpu, _comm, tid, delay, run in events:
        r = roles.get(tid)
        if r is None or delay <= 0 or end - run < since_s:
            continue
        t1 = end - run  # it ran from here; it waited from t1 - delay
        t0 = t1 - delay
        row = out.setdefault(r, {"delay_s": 0.0, "waits": 0, "held_by_s": {}})
        row["delay_s"] += delay
        row["waits"] += 1
        spans = runs[cpu]
        i = max(0, bisect.bisect_left(starts[cpu], t0) - 1)
        while i < len(spans) and spans[i][0] < t1:
            s, e, holder = spans[i]
            overlap = min(e, t1) - max(s, t0)
            if overlap > 0:
                row["held_by_s"][holder] = row["held_by_s"].get(holder, 0.0) + overlap
            i += 1
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = {}
    for run in json.loads(args.runs.read_text())["runs"]:
        data = args.work_dir / f"{run['name']}.perf.data"
        if not data.exists():
            continue
        roles = {int(key.rsplit("/", 1)[1]): role(key) for key in run["engine_window"]["threads_sched"]}
        events = timehist(data)
        since = events[-1][0] - run["engine_window"]["wall_s"]
        per = holders(events, roles, since)
        n = run["result"]["completed"]
        result[run["name"]] = per
        print(f"{run['name']}: TTFT {run['result']['mean_ttft_ms']:.1f} ms; waits per request, ms, and who held the core")
        for r, row in sorted(per.items()):
            held = sorted(row["held_by_s"].items(), key=lambda kv: -kv[1])[:6]
            print(f"  {r:13} {row['delay_s'] / n * 1e3:7.3f} ms ({row['waits'] / n:6.1f} waits): "
                  + ", ".join(f"{h} {s / n * 1e3:.3f}" for h, s in held))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
