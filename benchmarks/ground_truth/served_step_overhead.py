"""The served engine core's time per step beyond an in-process step of the same shape, measured on real vLLM:
`vllm serve` runs (`vllm_serve_bench.py`: every engine step's batch and elapsed time from the server's iteration
log) against in-process step traces of the same load recorded on the same core just before and just after them
(`roofline measure --engine vllm`, the server's flags). The simulator's `engine_step_s` (`roofline.sim.api_server`)
is this quantity: the engine's step time is calibrated on in-process traces, and a served step takes longer.

    python benchmarks/ground_truth/served_step_overhead.py --runs $OUT/runs.json \
        --traces $OUT/trace-B/repeat-1 $OUT/trace-B/repeat-2 --loads rate20 --out served-step.json

Per served step (its number of prefills and of sequences from the iteration log): the in-process steps with the same
number of prefills and a number of sequences within +-1 (at least 3 of them, else the step is left out) and their
median duration (what the engine's cost model is calibrated on: `roofline calibrate --trace`). The served step's
period is its elapsed time plus the run's mean time per step outside the elapsed ones ((duration - sum of elapsed)
/ steps: `schedule()`, `update_from_output()`, taking the requests in, the outputs' hand-off; the engine is never
idle at these loads); a run's figure is the mean over its matched steps of the served period less the in-process
duration, and `engine_step_s` the median over the runs. Steps of the first and last second are left out (the load
ramps up and drains).

Why a served step is longer (vLLM 0.32, `vllm/v1/engine/core.py` `EngineCoreProc`): the engine core runs two more
threads beside its busy loop, the input socket thread (`process_input_sockets`: each request's msgpack decoding and
`preprocess_add_request`) and the output socket thread (`process_output_sockets`: each step's outputs encoded and
sent); they share the engine's core and the GIL with the busy loop, whose step they lengthen. (The encoding itself
is ~0.3 us per output: not the bulk.)

With `--step-kinds` (`timeline_engine_parts.py --by-step --out` of traced runs): a step that admits new requests takes
longer outside the Worker's forward pass than a decode-only step with as many requests running, by about as much for
one new request as for two to five (`admitting_extra_ms_by_new`), which the mean above spreads over every step. Then
`engine_admit_step_s` is the median over the traced runs of that extra for one new request, less one request's
engine-core Python (`ApiServerCosts`' reference `engine_new_request_s` + `engine_prompt_token_s` x the runs' 128
prompt tokens, charged besides); `engine_step_s` the median over the runs of their figure less, per matched step, the
admitting steps' share x `engine_admit_step_s` and the prompts' x that request's work: a decode step's, the new
requests charged in the step that admits them (`roofline.sim.api_server.ApiServerCosts`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

from roofline.sim.api_server import ApiServerCosts


def inprocess_durations(trace_dirs: list[Path]) -> dict[tuple[int, int], list[float]]:
    """{(prefills, sequences): [duration s, ...]} over the steps of in-process traces."""
    from engine.core.trace import read_trace

    out: dict[tuple[int, int], list[float]] = {}
    for trace in trace_dirs:
        steps, _ = read_trace(trace)
        prefills = [int(np.sum(np.asarray(q) > 1)) for q in steps["query_lens"]]
        for n, seqs, duration in zip(prefills, steps["num_seqs"], steps["duration_s"]):
            out.setdefault((n, int(seqs)), []).append(float(duration))
    return out


def matched_duration_s(durations: dict[tuple[int, int], list[float]], prefills: int, seqs: int) -> float | None:
    values = [d for n in (seqs - 1, seqs, seqs + 1) for d in durations.get((prefills, n), [])]
    return statistics.median(values) if len(values) >= 3 else None


def run_overhead(run: dict[str, Any], durations: dict[tuple[int, int], list[float]]) -> dict[str, Any] | None:
    """One served run against the in-process steps: the mean over its matched steps of its period less the
    in-process duration."""
    steps = run.get("engine_steps") or []
    if not steps:
        return None
    duration_s = run["result"]["duration"]
    outside_s = (duration_s - sum(s[5] for s in steps) / 1e3) / len(steps)
    elapsed_s = np.cumsum([s[5] / 1e3 + outside_s for s in steps])  # each step's end, from the run's start
    diffs, matched, prompts, admitting = [], 0, 0, 0
    for step, end_s in zip(steps, elapsed_s):
        _, prefills, _, decodes, _, elapsed_ms = step
        if end_s < 1.0 or end_s > duration_s - 1.0:
            continue
        inproc = matched_duration_s(durations, prefills, prefills + decodes)
        if inproc is None:
            continue
        matched += 1
        prompts += prefills
        admitting += prefills > 0
        diffs.append(elapsed_ms / 1e3 + outside_s - inproc)
    if not diffs:
        return None
    return {"run": run["name"], "steps": len(steps), "matched_steps": matched,
            "outside_elapsed_ms_per_step": round(1e3 * outside_s, 3),
            "served_minus_inprocess_ms": round(1e3 * float(np.mean(diffs)), 3),
            "prompts_per_matched_step": round(prompts / matched, 4),
            "admitting_share_of_matched_steps": round(admitting / matched, 4),
            "loadavg_before": run.get("loadavg_before", [None])[0]}


TRACED_PROMPT_TOKENS = 128  # the traced runs' prompts (vllm_serve_bench.py's loads: random 128 in)


def admit_step_ms(parts: dict[str, Any]) -> dict[str, float]:
    """Per traced run (`timeline_engine_parts.py --by-step --out`): the steps admitting one new request, their time
    outside the Worker's forward pass less the decode steps' with as many running, ms."""
    return {name: run["by_step"]["admitting_extra_ms_by_new"]["1"]["extra_ms"] for name, run in parts.items()
            if "1" in (run.get("by_step") or {}).get("admitting_extra_ms_by_new", {})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True, help="the index vllm_serve_bench.py wrote")
    parser.add_argument("--traces", type=Path, nargs="+", required=True,
                        help="in-process step traces (roofline measure --engine vllm repeat directories)")
    parser.add_argument("--loads", default="rate20", help="comma-separated loads of the index to measure")
    parser.add_argument("--step-kinds", type=Path, default=None,
                        help="timeline_engine_parts.py --by-step --out file: also engine_new_request_s (module docstring)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    durations = inprocess_durations(args.traces)
    loads = set(args.loads.split(","))
    runs = [run for run in json.loads(args.runs.read_text())["runs"]
            if run["load"] in loads and "excluded" not in run]
    rows = [row for row in (run_overhead(run, durations) for run in runs) if row is not None]
    if not rows:
        print(f"served_step_overhead: no run of loads {sorted(loads)} has steps matching the traces", file=sys.stderr)
        return 2
    record: dict[str, Any] = {"runs_index": str(args.runs), "traces": [str(t) for t in args.traces],
                              "loads": sorted(loads), "rows": rows}
    step_ms = request_ms = 0.0
    if args.step_kinds:
        per_run = admit_step_ms(json.loads(args.step_kinds.read_text()))
        if not per_run:
            print(f"--step-kinds: {args.step_kinds} has no run with steps admitting one new request (--by-step)",
                  file=sys.stderr)
            return 2
        reference = ApiServerCosts()
        request_ms = 1e3 * (reference.engine_new_request_s + reference.engine_prompt_token_s * TRACED_PROMPT_TOKENS)
        step_ms = statistics.median(per_run.values()) - request_ms
        record.update(step_kinds=str(args.step_kinds), one_new_extra_ms_by_run=per_run,
                      engine_admit_step_s=round(step_ms / 1e3, 6))
    median_ms = statistics.median(row["served_minus_inprocess_ms"] - step_ms * row["admitting_share_of_matched_steps"]
                                  - request_ms * row["prompts_per_matched_step"] for row in rows)
    record["engine_step_s"] = round(median_ms / 1e3, 6)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for row in rows:
        print(f"{row['run']}: {row['matched_steps']}/{row['steps']} steps matched, served - in-process "
              f"{row['served_minus_inprocess_ms']:+.2f} ms per step (outside the elapsed: "
              f"{row['outside_elapsed_ms_per_step']:.2f} ms)")
    if args.step_kinds:
        print(f"engine_admit_step_s: {step_ms / 1e3:.6f} (median over {len(record['one_new_extra_ms_by_run'])} "
              f"traced runs, less {request_ms:.3f} ms of one request's engine-core work)")
    print(f"engine_step_s: {median_ms / 1e3:.6f} (median over {len(rows)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
