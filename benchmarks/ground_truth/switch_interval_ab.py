"""The A/B of CPython's GIL switch interval in real `vllm serve` (docs/benchmark-history/2026-11-30f-serve12.md): the
runs of `vllm_serve_bench.py` sessions with and without `--switch-interval-s`, per cell and arm, and with --timeline
work directories the engine core's input hop per request.

    python benchmarks/ground_truth/switch_interval_ab.py --sessions $OUT/s1-D $OUT/s2-E ... --scratch $OUT \
        --merged benchmarks/results/vllm-serve-bench/2026-11-30f-serve12/runs-ab.json --out .../ab.json

Each session directory holds a `runs.json` (one server session). A run's arm is its `switch_interval_in` and
`switch_interval_s` ("default": Python's 5 ms everywhere). Per cell and arm: each run's mean and median TTFT and mean
TPOT (ms), their mean over runs, the spread ((max - min) / median of the per-session means, %), and the difference
from the default arm. With --timeline (the sessions ran `vllm_serve_bench.py --timeline`): per run the hop from the API
server's hand-off (`AsyncMPClient.add_request_async`, the `add` stamp) to the engine core's input thread
(`preprocess_add_request`, `ec_in`): the ZMQ message's way and the input thread's wake-up, its GIL re-acquisitions
after `poller.poll()` and each frame's `recv` (vllm/v1/engine/core.py `process_input_sockets`), and the decode;
median, p90, p99, mean, and the output hand-off (`vllm_timeline.timeline`'s `output_handoff`: the first token's
outputs made in the busy loop to the API server's output handler: the output thread's wake-up from
`output_queue.get()`, its GIL, the encode and send, the API server's receive)."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

METRICS = ("mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms")


def arm_of(run: dict[str, Any]) -> str:
    if not run.get("switch_interval_s"):
        return "default"
    return f"{run['switch_interval_in']} {1e3 * run['switch_interval_s']:g} ms"


def cell_of(run: dict[str, Any]) -> str:
    return f"{run['load']}-{run['endpoint']}-a{run['api_server_count']}"


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def hops(events: list[list[Any]], start_times: list[float]) -> dict[str, float]:
    """The input hop (ms) of the requests handed to the engine core in the run's send window (module docstring)."""
    adds = {e[1].rsplit("-", 1)[0]: e[2] for e in events if e[0] == "add"}
    ins = {e[1].rsplit("-", 1)[0]: e[2] for e in events if e[0] == "ec_in"}
    lo, hi = min(start_times) - 0.5, max(start_times) + 5.0
    values = [1e3 * (ins[rid] - t) for rid, t in adds.items() if rid in ins and lo <= t <= hi]
    return {"requests": len(values), "median": round(statistics.median(values), 3),
            "p90": round(quantile(values, 0.9), 3), "p99": round(quantile(values, 0.99), 3),
            "mean": round(statistics.mean(values), 3), "max": round(max(values), 3)}


def session_runs(path: Path, session: str, timeline: bool) -> list[dict[str, Any]]:
    index = json.loads((path / "runs.json").read_text())
    events = None
    if timeline:
        from vllm_timeline import timeline as ttft_parts  # same folder

        events = [json.loads(line) for line in (path / "timeline-a1.log").read_text().splitlines()]
    runs = []
    for run in index["runs"]:
        run = dict(run, session=session, name=f"{run['name']}-{session}")
        if events is not None:
            detailed = json.loads((path / run["file"]).read_text())
            run["input_hop_ms"] = hops(events, detailed["start_times"])
            run["timeline"] = ttft_parts(events, detailed["start_times"], detailed["ttfts"])
        runs.append(run)
    return runs


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for cell in sorted({cell_of(r) for r in runs}):
        arms = sorted({arm_of(r) for r in runs if cell_of(r) == cell}, key=lambda a: (a != "default", a))
        base: dict[str, float] = {}
        for arm in arms:
            mine = [r for r in runs if cell_of(r) == cell and arm_of(r) == arm]
            row: dict[str, Any] = {"cell": cell, "arm": arm, "runs": len(mine),
                                   "sessions": sorted({r["session"] for r in mine})}
            for metric in METRICS:
                values = [r["result"][metric] for r in mine]
                per_session = [statistics.mean(r["result"][metric] for r in mine if r["session"] == s)
                               for s in row["sessions"]]
                mean = statistics.mean(values)
                row[metric] = {"mean": round(mean, 3), "runs": [round(v, 3) for v in values],
                               "per_session": [round(v, 3) for v in per_session],
                               "session_spread_pct": round(100 * (max(per_session) - min(per_session))
                                                           / statistics.median(per_session), 1)}
                if arm == "default":
                    base[metric] = mean
                elif metric in base:
                    row[metric]["vs_default_ms"] = round(mean - base[metric], 3)
                    row[metric]["vs_default_pct"] = round(100 * (mean / base[metric] - 1), 1)
            traced = [r["input_hop_ms"] for r in mine if "input_hop_ms" in r]
            if traced:
                row["input_hop_ms"] = {k: round(statistics.mean(t[k] for t in traced), 3)
                                       for k in ("median", "p90", "p99", "mean")}
                row["output_handoff_ms"] = round(statistics.mean(r["timeline"]["output_handoff_ms"]["mean"]
                                                                 for r in mine), 3)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=Path, nargs="+", required=True,
                        help="vllm_serve_bench.py work directories, one per server session (each with runs.json)")
    parser.add_argument("--timeline", action="store_true", help="the sessions ran with --timeline: the hops too")
    parser.add_argument("--scratch", default=None, help="written as $OUT in --merged (the scratch folder's path)")
    parser.add_argument("--merged", type=Path, default=None, help="the sessions' runs as one index (JSON)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    runs = []
    for k, path in enumerate(args.sessions, 1):
        runs += session_runs(path, f"s{k}", args.timeline)
    rows = summarize(runs)
    if args.merged:
        index = json.loads((args.sessions[0] / "runs.json").read_text())
        index["runs"] = runs
        text = json.dumps(index)
        if args.scratch:
            text = text.replace(args.scratch.rstrip("/"), "$OUT")
        args.merged.write_text(text + "\n")
    args.out.write_text(json.dumps({"sessions": [p.name for p in args.sessions], "rows": rows}, indent=1) + "\n")
    for row in rows:
        print(row["cell"], row["arm"], row["runs"], " ".join(
            f"{m} {row[m]['mean']:.2f} (sessions {'/'.join(f'{v:.1f}' for v in row[m]['per_session'])}, spread "
            f"{row[m]['session_spread_pct']}%{', %+.1f %%' % row[m]['vs_default_pct'] if 'vs_default_pct' in row[m] else ''})"
            for m in METRICS), row.get("input_hop_ms", ""), row.get("output_handoff_ms", ""))


if __name__ == "__main__":
    main()
