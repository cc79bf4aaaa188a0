"""Where each request's time from the API server's hand-off to the engine's first token goes, from the raw events of a
`vllm_serve_bench.py --timeline` work directory (`timeline-a<api-server-count>.log`, `vllm_timeline.py`: `add`, `ec_in`, `ec_add`,
`ec_sched`, `ec_step`, `req`), per run, means in ms:

    python benchmarks/ground_truth/timeline_engine_parts.py --work-dir $OUT/tl

- hop: the hand-off (`AsyncMPClient.add_request_async`) to the engine core's input thread (`preprocess_add_request`);
- wait: the input thread's end to the busy loop's `EngineCore.add_request` (the step under way);
- step: the `EngineCore.step` that scheduled the request (schedule, the Worker's forward pass, update), whose end is
  the first token's stamp; with the iteration log's forward time (`elapsed`) of the run's prompt steps beside it;
- running: the running requests at that step's `Scheduler.schedule`.

With `--by-step` (a work directory recorded with the engine-core and Worker stamps: `ec_exec`, `ec_upd`, `wk_rpc`,
`wk_upd`, `wk_loads`), each `EngineCore.step` of the run's send window split into its parts, means in ms by kind: the
steps that admit a new request (`Scheduler.schedule` scheduled one) and the decode-only ones:
- schedule: `Scheduler.schedule` (vllm/v1/core/sched/scheduler.py);
- enqueue: `MultiprocExecutor.execute_model`, the scheduler output pickled into the shared-memory queue;
- worker_loads: the Worker's `pickle.loads` of that message (`MessageQueue.dequeue`);
- worker_update_states: the Worker's `GPUModelRunner._update_states` (a new request's state, `InputBatch.add_request`);
- worker_rest: the Worker's RPCs (`execute_model`, `sample_tokens`) less `_update_states`: the forward pass, sampling,
  the output's enqueue;
- update_from_output: `Scheduler.update_from_output`;
- step_other: the step less all the above (waits for the Worker's message and reply, the grammar bitmask, ...);
- gap_after: from the step's end to the next step's start (the busy loop: the outputs put on the output queue, the
  input queue drained, `EngineCore.add_request`), over the steps after which the loop did not block on its input
  queue (no `_process_input_queue` of more than 1 ms in the gap: the engine had nothing to run);
- period: step + gap_after; outside_worker: period less worker_rest (everything but the forward pass and sampling),
  over the same steps.
And the input thread's `preprocess_add_request` (`input_thread`) per request.
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
from pathlib import Path
from typing import Any

from vllm_timeline import timeline


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
    # With several API-server processes: the requests each handed to the engine core (`add`'s pid) and the HTTP
    # connections accepted over the window (`conn`: the client's pool opens one per request in flight beyond it).
    pids: dict[int, int] = {}
    for e in events:
        if e[0] == "add" and len(e) > 3 and first - 0.5 <= e[2] <= last:
            pids[e[3]] = pids.get(e[3], 0) + 1
    conns = [e[1] for e in events if e[0] == "conn" and first - 1.0 <= e[1] <= last]
    # Each connection's accept (`connection_made`) after the client's latest send before it (ms; the ones more than
    # 50 ms after any send are not a request's: the harness's /metrics reads): vLLM's deferred accept with several
    # processes (vllm/entrypoints/launchers/launcher.py `NoSignalServer._accept`, up to 5 x 1 ms).
    sends = sorted(start_times)
    after_send = sorted(round(1e3 * (t - sends[i - 1]), 3) for t in conns
                        if (i := bisect.bisect_right(sends, t)) and t - sends[i - 1] <= 0.05)
    return ({key: round(statistics.mean(row[key] for row in rows), 3) for key in rows[0]}
            | {"requests": len(rows), "requests_per_api_process": sorted(pids.values()), "connections": len(conns),
               "connection_after_send_ms": after_send})


IDLE_DRAIN_S = 1e-3  # a `_process_input_queue` this long blocked on an empty queue: the engine was idle
STEP_PARTS = ("schedule", "enqueue", "worker_loads", "worker_update_states", "worker_rest", "update_from_output",
              "step_other", "gap_after", "period", "outside_worker")


def within(spans: list[tuple[float, ...]], starts: list[float], lo: float, hi: float) -> list[tuple[float, ...]]:
    """The spans (sorted by start) that start in [lo, hi)."""
    return spans[bisect.bisect_left(starts, lo):bisect.bisect_left(starts, hi)]


def step_kinds(events: list[list[Any]], start_times: list[float]) -> dict[str, Any]:
    """Per kind of step ("admitting": its schedule() scheduled a new request; "decode": none), the mean of each part
    of STEP_PARTS in ms over the steps in the run's send window, their count and the new requests per admitting step;
    and the input thread's mean `preprocess_add_request` per request (module docstring)."""
    def spans(kind: str, first: int = 1) -> tuple[list[tuple[float, ...]], list[float]]:
        rows = sorted(tuple(e[first:]) for e in events if e[0] == kind)
        return rows, [r[0] for r in rows]

    steps, _ = spans("ec_step")
    scheds, sched_at = spans("ec_sched")
    execs, exec_at = spans("ec_exec")
    updates, update_at = spans("ec_upd")
    rpcs, rpc_at = spans("wk_rpc", 2)
    states, state_at = spans("wk_upd")
    loads, load_at = spans("wk_loads")
    drains, drain_at = spans("ec_inq")
    lo, hi = min(start_times), max(start_times) + 1.0
    kinds: dict[str, list[dict[str, Any]]] = {"admitting": [], "decode": []}
    new_per_step = []
    for (start, end), (next_start, _) in zip(steps, steps[1:]):
        if not lo <= start <= hi:
            continue
        sched = within(scheds, sched_at, start, end)
        execute = within(execs, exec_at, start, end)
        update = within(updates, update_at, start, end)
        if len(sched) != 1 or len(execute) != 1 or len(update) != 1:
            continue  # a step that ran no model (nothing scheduled) or whose stamps are incomplete
        worker = within(rpcs, rpc_at, execute[0][0], end)
        worker_s = sum(r[1] - r[0] for r in worker)
        state_s = sum(r[1] - r[0] for r in within(states, state_at, execute[0][0], end))
        loads_s = sum(r[1] - r[0] for r in within(loads, load_at, execute[0][0], end))
        part: dict[str, Any] = {
            "schedule": sched[0][1] - sched[0][0], "enqueue": execute[0][1] - execute[0][0],
            "worker_loads": loads_s, "worker_update_states": state_s, "worker_rest": worker_s - state_s,
            "update_from_output": update[0][1] - update[0][0],
            "step_other": (end - start) - (sched[0][1] - sched[0][0]) - (execute[0][1] - execute[0][0]) - worker_s
            - (update[0][1] - update[0][0])}
        idle = any(d[1] - d[0] > IDLE_DRAIN_S for d in within(drains, drain_at, end, next_start))
        part["gap_after"] = None if idle else next_start - end
        part["period"] = None if idle else next_start - start
        part["outside_worker"] = None if idle else next_start - start - (worker_s - state_s)
        new = int(sched[0][2])
        part["new"], part["running"] = new, int(sched[0][3])
        kinds["admitting" if new else "decode"].append(part)
        if new:
            new_per_step.append(new)
    out: dict[str, Any] = {}
    for kind, rows in kinds.items():
        if rows:
            out[kind] = {key: round(1e3 * statistics.mean(v for r in rows if (v := r[key]) is not None), 3)
                         for key in STEP_PARTS}
            out[kind]["steps"] = len(rows)
            out[kind]["steps_before_idle"] = sum(r["period"] is None for r in rows)
    if new_per_step:
        out["new_per_admitting_step"] = round(statistics.mean(new_per_step), 3)
        out["admitting_extra_ms_by_new"] = extra_by_new(kinds["admitting"], kinds["decode"])
    ins = [e[3] - e[2] for e in events if e[0] == "ec_in" and lo <= e[2] <= hi]
    if ins:
        out["input_thread_ms"] = round(1e3 * statistics.mean(ins), 3)
    return out


def extra_by_new(admitting: list[dict[str, Any]], decode: list[dict[str, Any]]) -> dict[str, Any]:
    """By the number of new requests a step admits: the mean over its steps of their time outside the Worker's forward
    pass less that of the decode-only steps with as many requests running (at least 3 of them), ms, and the steps."""
    decode_by_running: dict[int, list[float]] = {}
    for row in decode:
        if row["outside_worker"] is not None:
            decode_by_running.setdefault(row["running"], []).append(row["outside_worker"])
    diffs: dict[int, list[float]] = {}
    for row in admitting:
        same = decode_by_running.get(row["running"], [])
        if row["outside_worker"] is not None and len(same) >= 3:
            diffs.setdefault(row["new"], []).append(row["outside_worker"] - statistics.mean(same))
    return {str(new): {"extra_ms": round(1e3 * statistics.mean(d), 3), "steps": len(d)}
            for new, d in sorted(diffs.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="a vllm_serve_bench.py --timeline work directory")
    parser.add_argument("--by-step", action="store_true", help="also each step's parts by kind (module docstring)")
    parser.add_argument("--ttft", action="store_true",
                        help="also where each run's TTFT went (vllm_timeline.timeline, recomputed from the log: with "
                             "several API-server processes per process too)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures per run (JSON)")
    args = parser.parse_args()
    logs: dict[int, list[list[Any]]] = {}  # per --api-server-count, its session's events
    rows: dict[str, Any] = {}
    for run in json.loads((args.work_dir / "runs.json").read_text())["runs"]:
        count = run.get("api_server_count", 1)
        if count not in logs:
            logs[count] = [json.loads(line) for line in
                           (args.work_dir / f"timeline-a{count}.log").read_text().splitlines()]
        events = logs[count]
        detailed = json.loads((args.work_dir / run["file"]).read_text())
        # (no iteration log with several API servers: vllm/v1/metrics/loggers.py `StatLoggerManager` disables the
        # logging stat logger for client_count > 1)
        prompt_steps = [s[5] for s in run["engine_steps"] if s[1] > 0]
        parts = engine_parts(events, detailed["start_times"])
        if prompt_steps:
            parts |= {"prompt_step_forward_ms": round(statistics.mean(prompt_steps), 3)}
        if args.by_step:
            parts["by_step"] = step_kinds(events, detailed["start_times"])
        if args.ttft:
            parts["ttft"] = timeline(events, detailed["start_times"], detailed["ttfts"])
        rows[run["name"]] = parts
        print(run["name"], json.dumps(parts))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
