"""Where each request's time from the API server's hand-off to the engine's first token goes, from the raw events of a
`vllm_serve_bench.py --timeline` work directory (`timeline-a1.log`, `vllm_timeline.py`: `add`, `ec_in`, `ec_add`,
`ec_sched`, `ec_step`, `req`), per run, means in ms:

    python benchmarks/ground_truth/timeline_engine_parts.py --work-dir $OUT/tl

- hop: the hand-off (`AsyncMPClient.add_request_async`) to the engine core's input thread (`preprocess_add_request`);
- wait: the input thread's end to the busy loop's `EngineCore.add_request` (the step under way);
- step: the `EngineCore.step` that scheduled the request (schedule, the Worker's forward pass, update), whose end is
  the first token's stamp; with the iteration log's forward time (`elapsed`) of the run's prompt steps beside it;
- running: the running requests at that step's `Scheduler.schedule`.
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
from pathlib import Path
from typing import Any


def engine_parts(events: list[list[Any]], start_times: list[float]) -> dict[str, float]:
    """The means (ms; `running`: requests) over the requests whose arrival lies in the run's send window."""
    # The engine's request ids are the API server's (`req`) with a random suffix (`-a913e470`).
    adds = {e[1].rsplit("-", 1)[0]: e[2] for e in events if e[0] == "add"}
    ins = {e[1].rsplit("-", 1)[0]: (e[2], e[3]) for e in events if e[0] == "ec_in"}
    queued = {e[1].rsplit("-", 1)[0]: (e[2], e[3]) for e in events if e[0] == "ec_add"}
    steps = sorted((e[1], e[2]) for e in events if e[0] == "ec_step")
    scheds = sorted((e[1], e[2], e[3], e[4], e[5]) for e in events if e[0] == "ec_sched")
    step_starts, sched_starts = [s[0] for s in steps], [s[0] for s in scheds]
    first, last = min(start_times), max(start_times) + 5.0
    rows = []
    for e in events:
        if e[0] != "req" or not first - 0.5 <= e[2] <= last:
            continue
        rid, scheduled = e[1], e[4]
        if rid not in adds or rid not in ins or rid not in queued:
            continue
        step = steps[bisect.bisect_right(step_starts, scheduled) - 1]
        sched = scheds[bisect.bisect_right(sched_starts, scheduled) - 1]
        rows.append({"hop_ms": 1e3 * (ins[rid][0] - adds[rid]), "wait_ms": 1e3 * (queued[rid][0] - ins[rid][1]),
                     "step_ms": 1e3 * (step[1] - step[0]), "token_after_step_end_ms": 1e3 * (e[5] - step[1]),
                     "running": sched[3]})
    return {key: round(statistics.mean(row[key] for row in rows), 3) for key in rows[0]} | {"requests": len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="a vllm_serve_bench.py --timeline work directory")
    args = parser.parse_args()
    events = [json.loads(line) for line in (args.work_dir / "timeline-a1.log").read_text().splitlines()]
    for run in json.loads((args.work_dir / "runs.json").read_text())["runs"]:
        detailed = json.loads((args.work_dir / run["file"]).read_text())
        prompt_steps = [s[5] for s in run["engine_steps"] if s[1] > 0]
        parts = engine_parts(events, detailed["start_times"])
        print(run["name"], json.dumps(parts | {"prompt_step_forward_ms": round(statistics.mean(prompt_steps), 3)}))


if __name__ == "__main__":
    main()
