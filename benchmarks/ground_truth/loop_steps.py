"""What the API server's event loop runs during a burst's intake, per task kind: from a `vllm_serve_bench.py
--timeline` work directory recorded with `VLLM_SERVE_TIMELINE_STEPS=1` (vllm_timeline.py's "step" and "io" stamps:
each step of each task of the loop, each read of uvicorn's HTTP protocol).

    python benchmarks/ground_truth/loop_steps.py --work-dir $WORK --out $OUT/loop-steps.json

Per run (the runs' result files `*-a1-r*.json` in send order): the intake (the first send to the last hand-off to the
engine core, `add` stamps); per task kind (the coroutine's qualname) its steps in the intake and over the whole run,
their CPU (sum, median, p90); the steps per request of the input path's kinds in the intake (every kind but the
output path's: the output handler, the output socket's task, the server's own tasks) and their CPU; the output
handler's steps in the intake and the gaps between them (how long the loop keeps it waiting).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
from pathlib import Path
from typing import Any

# Not the input path: the output handler (`AsyncLLM._run_output_handler`), the output socket's task
# (`AsyncMPClient._ensure_output_queue_task`), uvicorn's and vLLM's own housekeeping.
NOT_INPUT = ("output_handler", "process_outputs_socket", "Server.serve", "_force_log", "watchdog")


def quantiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {"n": len(values), "sum_ms": round(1e3 * sum(values), 3), "median_us": round(1e6 * values[len(values) // 2], 1),
            "p90_us": round(1e6 * values[int(0.9 * (len(values) - 1))], 1)}


def analyse(work_dir: Path) -> dict[str, Any]:
    events = [json.loads(line) for line in (work_dir / "timeline-a1.log").read_text().splitlines()]
    steps = [e for e in events if e[0] == "step"]
    reads = [e for e in events if e[0] == "io"]
    adds = [e[2] for e in events if e[0] == "add"]
    results = sorted(((json.loads(p.read_text()), p.stem) for p in work_dir.glob("*-a1-r*.json")),
                     key=lambda item: min(item[0]["start_times"]))
    runs = {}
    for result, name in results:
        t0 = min(result["start_times"])
        end = t0 + result["duration"] + 1
        handoffs = sorted(t for t in adds if t0 <= t <= end)
        requests = len(result["start_times"])
        t1 = handoffs[requests - 1] if len(handoffs) >= requests else handoffs[-1]
        intake = [e for e in steps if t0 <= e[2] <= t1]
        by_kind: dict[str, list[float]] = collections.defaultdict(list)
        for e in intake:
            by_kind[e[1]].append(e[3] - e[2])
        whole = collections.Counter(e[1] for e in steps if t0 <= e[2] <= end)
        inputs = [e[3] - e[2] for e in intake if not any(k in e[1] for k in NOT_INPUT)]
        handler = sorted(e[2] for e in intake if "output_handler" in e[1])
        gaps = [b - a for a, b in zip(handler, handler[1:])]
        runs[name] = {
            "intake_ms": round(1e3 * (t1 - t0), 1), "requests": requests,
            "input_steps_per_request": round(len(inputs) / requests, 2),
            "input_cpu_ms_per_request": round(1e3 * sum(inputs) / requests, 3),
            "input_step_us": quantiles(inputs),
            "reads": quantiles([e[2] - e[1] for e in reads if t0 <= e[1] <= t1]),
            "output_handler_steps": len(handler),
            "output_handler_gap_ms": {"median": round(1e3 * statistics.median(gaps), 1),
                                      "p90": round(1e3 * sorted(gaps)[int(0.9 * (len(gaps) - 1))], 1)} if gaps else None,
            "intake_by_kind": {k: quantiles(v) for k, v in sorted(by_kind.items(), key=lambda kv: -sum(kv[1]))},
            "whole_run_steps_per_request": {k: round(v / requests, 2) for k, v in whole.most_common()},
        }
    return {"work_dir": str(work_dir), "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    data = analyse(args.work_dir)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    for name, run in data["runs"].items():
        print(f"{name}: intake {run['intake_ms']} ms; input path {run['input_steps_per_request']} steps, "
              f"{run['input_cpu_ms_per_request']} ms CPU per request (step median {run['input_step_us']['median_us']} us, "
              f"p90 {run['input_step_us']['p90_us']}); output handler {run['output_handler_steps']} steps, gaps "
              f"{run['output_handler_gap_ms']} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
