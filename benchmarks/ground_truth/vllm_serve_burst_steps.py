"""The served engine's steps against the requests that reach its engine core during them, and the cores' CPU over a
burst's intake: does a real `vllm serve` engine step stretch while requests arrive, and who holds the two cores?

Reads work directories of `vllm_serve_bench.py --timeline` sessions (one API-server process: `runs.json`,
`timeline-a1.log`, `server-a1.log`, with `--perf-sched` also `<run>.perf.data`):

    python benchmarks/ground_truth/vllm_serve_burst_steps.py --work-dirs $WORK/A1 $WORK/B1 ... --perf \
        --out benchmarks/results/vllm-serve-bench/2026-12-01f-serve25/burst-steps.json

Per session, each logged engine step (`--enable-logging-iteration-details`: context requests and tokens, generation
requests, elapsed ms; vLLM 0.32 `EngineCore.capture_iteration_details`) joined in order with the Worker's
`execute_model` call (`vllm_timeline.py`'s `wk_rpc`: its span, and where stamped its thread's user and system CPU and
minor faults) and the arrivals during it: the requests whose `MsgpackDecoder.decode` the engine core's input thread
ran in that span (`ec_dec`). Steps that scheduled nothing log no iteration and are left out; a pair whose elapsed time
and call span disagree (by more than 1.5 ms + 15 %) is dropped as misjoined. Then, like for like:
- full prefill steps (>= 1,900 context tokens of the 2,048 budget) with and without arrivals, after a step (not after
  an idle engine);
- one-prompt steps (1 context request, no generation) without arrivals, after a step and after >= 1 s idle (vLLM's
  busy-loop window: `shm_broadcast.SpinCondition` busy_loop_s, after which the Worker and the engine core sleep on a
  ZMQ poll instead of spinning on the shared-memory queue), and by the idle time before them;
- each burst's first six steps.
With `--fit-groups`, per group of sessions the line through their prefill steps' elapsed time with a term per arrival
(`per_arrival_fit`). With `--perf`, per run with scheduler events: each CPU's run time by role (the API server's loop
thread, its other threads, the client, the engine core's threads by name, the Worker, other tasks) from the first send
to the first hand-off (`add`) and, per hand-off, between the first and the last hand-off (`perf sched timehist`,
CLOCK_MONOTONIC like the stamps).

Results and their reading: BENCHMARKS.md, "vLLM's API server in a burst"; docs/benchmark-history/2026-12-01f-serve25.md.
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from perf_sched_holders import timehist
from vllm_serve_bench import ITERATION

FULL_CONTEXT_TOKENS = 1900  # of the campaign's --max-num-batched-tokens 2048
IDLE_S = 1.0  # vLLM 0.32 shm_broadcast.SpinCondition(busy_loop_s=1)
IDLE_BUCKETS_S = (0.0, 0.5, 1.0, 2.0)


def logged_steps(server_log: str) -> list[tuple[int, int, int, float]]:
    """The session's logged steps in order: (context requests, context tokens, generation requests, elapsed ms)."""
    steps = {int(m[1]): (int(m[2]), int(m[3]), int(m[4]), float(m[6])) for m in ITERATION.finditer(server_log)}
    return [steps[i] for i in sorted(steps)]


def worker_calls(events: list[list[Any]]) -> list[list[Any]]:
    """The Worker's `execute_model` stamps of steps that scheduled something (the `ec_sched` before each shows new or
    running requests), in order."""
    scheds = sorted((e for e in events if e[0] == "ec_sched"), key=lambda e: e[1])
    sched_at = [e[1] for e in scheds]
    calls = []
    for e in sorted((e for e in events if e[0] == "wk_rpc" and e[1] == "execute_model"), key=lambda e: e[2]):
        k = bisect.bisect_right(sched_at, e[2]) - 1
        if k >= 0 and (scheds[k][4] > 0 or scheds[k][5] > 0):
            calls.append(e)
    return calls


def join(steps: list[tuple[int, int, int, float]], calls: list[list[Any]], arrivals_s: list[float]
         ) -> list[dict[str, Any]]:
    """Logged steps and Worker calls paired from the end (the warm-up's calls come first), with the arrivals in each
    call's span, the idle time before it and, where stamped, the Worker thread's CPU and faults."""
    n = min(len(steps), len(calls))
    rows: list[dict[str, Any]] = []
    prev_end = None
    for (ctx_reqs, ctx_tokens, gen_reqs, ms), call in zip(steps[len(steps) - n:], calls[len(calls) - n:]):
        start, end = call[2], call[3]
        span_ms = (end - start) * 1e3
        rows.append({"ctx_reqs": ctx_reqs, "ctx_tokens": ctx_tokens, "gen_reqs": gen_reqs, "ms": ms,
                     "worker_ms": round(span_ms, 3), "start_s": start,
                     "arrivals": bisect.bisect_left(arrivals_s, end) - bisect.bisect_left(arrivals_s, start),
                     "idle_s": None if prev_end is None else round(start - prev_end, 6),
                     "worker_user_ms": round(call[5] * 1e3, 3) if len(call) > 5 else None,
                     "worker_faults": call[4] if len(call) > 4 else None})
        prev_end = end
    offset = statistics.median(r["ms"] - r["worker_ms"] for r in rows) if rows else 0.0
    for r in rows:
        r["consistent"] = abs(r["ms"] - r["worker_ms"] - offset) <= 1.5 + 0.15 * r["ms"]
    return rows


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def compare(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Like-for-like medians (module docstring)."""
    ok = [r for r in rows if r["consistent"]]
    after_step = [r for r in ok if r["idle_s"] is not None and r["idle_s"] < 0.05]
    full = [r for r in after_step if r["ctx_tokens"] >= FULL_CONTEXT_TOKENS]
    one = [r for r in ok if r["ctx_reqs"] == 1 and r["gen_reqs"] == 0 and r["arrivals"] == 0]
    warm = [r for r in one if r["idle_s"] is not None and r["idle_s"] < 0.05]
    cold = [r for r in one if r["idle_s"] is None or r["idle_s"] >= IDLE_S]
    by_idle = {}
    for lo, hi in zip(IDLE_BUCKETS_S, [*IDLE_BUCKETS_S[1:], float("inf")]):
        sel = [r for r in one if r["idle_s"] is not None and lo <= r["idle_s"] < hi and r["idle_s"] >= 0.05]
        by_idle[f"{lo}-{hi}"] = {"n": len(sel), "ms": _median([r["ms"] for r in sel]),
                                 "worker_user_ms": _median([r["worker_user_ms"] for r in sel
                                                           if r["worker_user_ms"] is not None])}
    return {
        "steps": len(rows), "misjoined": len(rows) - len(ok),
        "full_prefill_ms": {"without_arrivals": _median([r["ms"] for r in full if r["arrivals"] == 0]),
                            "n_without": sum(r["arrivals"] == 0 for r in full),
                            "with_arrivals": _median([r["ms"] for r in full if r["arrivals"] > 0]),
                            "n_with": sum(r["arrivals"] > 0 for r in full),
                            "arrivals_median": _median([r["arrivals"] for r in full if r["arrivals"] > 0])},
        "one_prompt_ms": {"after_a_step": _median([r["ms"] for r in warm]), "n_after_a_step": len(warm),
                          "after_idle": _median([r["ms"] for r in cold]), "n_after_idle": len(cold),
                          "worker_user_after_a_step": _median([r["worker_user_ms"] for r in warm
                                                               if r["worker_user_ms"] is not None]),
                          "worker_user_after_idle": _median([r["worker_user_ms"] for r in cold
                                                             if r["worker_user_ms"] is not None]),
                          "by_idle_s": by_idle},
        "first_steps_of_bursts": [[{k: r[k] for k in ("ctx_reqs", "ctx_tokens", "gen_reqs", "ms", "arrivals",
                                                      "worker_user_ms", "worker_faults")} for r in burst]
                                  for burst in bursts(rows)],
    }


def per_arrival_fit(sessions: list[list[dict[str, Any]]], min_context_tokens: int = 500, num_boot: int = 400,
                    seed: int = 0) -> dict[str, Any]:
    """Least squares through the prefill-heavy steps (>= `min_context_tokens`, after a step, misjoined pairs out) of
    the sessions together: ms = the session's intercept + a x 1,000 context tokens + b x decodes + c x arrivals, with
    residuals beyond 3 sd dropped (three rounds: the Python GC's long steps) and a bootstrap 90 % interval of c."""
    import numpy as np

    rows = [(i, r) for i, rs in enumerate(sessions) for r in rs if r["consistent"] and r["idle_s"] is not None
            and r["idle_s"] < 0.05 and r["ctx_tokens"] >= min_context_tokens]
    a = np.zeros((len(rows), len(sessions) + 3))
    for k, (i, r) in enumerate(rows):
        a[k, i] = 1.0
        a[k, -3:] = r["ctx_tokens"] / 1000, r["gen_reqs"], r["arrivals"]
    y = np.array([r["ms"] for _, r in rows])
    keep = np.ones(len(y), bool)
    for _ in range(3):
        coef = np.linalg.lstsq(a[keep], y[keep], rcond=None)[0]
        residual = y - a @ coef
        keep = np.abs(residual) <= max(3 * residual[keep].std(), 1e-9)
    coef = np.linalg.lstsq(a[keep], y[keep], rcond=None)[0]  # on the rows kept, as the bootstrap below
    residual = y - a @ coef
    rng = np.random.default_rng(seed)
    kept = np.flatnonzero(keep)
    boot = [np.linalg.lstsq(a[k], y[k], rcond=None)[0][-1] for k in (rng.choice(kept, len(kept)) for _ in range(num_boot))]
    return {"steps": int(keep.sum()), "of": len(y), "ms_per_1000_context_tokens": round(float(coef[-3]), 3),
            "ms_per_decode": round(float(coef[-2]), 4), "ms_per_arrival": round(float(coef[-1]), 4),
            "ms_per_arrival_90": [round(float(x), 4) for x in np.percentile(boot, [5, 95])],
            "residual_sd_ms": round(float(residual[keep].std()), 3)}


def bursts(rows: list[dict[str, Any]], first: int = 6) -> list[list[dict[str, Any]]]:
    """The first `first` steps after each idle of >= IDLE_S in which the engine reached 8 or more context requests in
    a step (a burst, not one request at a time)."""
    out, current = [], []
    for r in rows:
        if r["idle_s"] is None or r["idle_s"] >= IDLE_S:
            if current and max(x["ctx_reqs"] for x in current) >= 8:
                out.append(current[:first])
            current = []
        current.append(r)
    if current and max(x["ctx_reqs"] for x in current) >= 8:
        out.append(current[:first])
    return out


def roles(threads_sched: dict[str, Any]) -> dict[int, str]:
    """tid -> role from a run's `engine_window.threads_sched` keys ("process/thread/pid/tid"): the API server's loop
    (its main thread), its other threads, the client, the engine core's threads by name, the Worker's."""
    out = {}
    for key in threads_sched:
        *name, pid, tid = key.split("/")
        process = name[0]
        if process == "api_server" and name[1] == "python":
            out[int(tid)] = "api_loop" if pid == tid else "api_thread"
        else:
            out[int(tid)] = "client" if process == "client" else "/".join(name)
    return out


def intake_cpu(events: list[tuple[float, int, str, int, float, float]], role_of: dict[int, str], first_send_s: float,
               first_add_s: float, last_add_s: float, num_hand_offs: int) -> dict[str, Any]:
    """Per CPU and role, ms of run time from the first send to the first hand-off, and per hand-off between the first
    and the last (`perf_sched_holders.timehist`'s events: each a task's switch-out with its run time)."""
    before: dict[str, float] = defaultdict(float)
    during: dict[str, float] = defaultdict(float)
    for end, cpu, comm, tid, _delay_s, run_s in events:
        role = f"cpu{cpu}/" + role_of.get(tid, "other:" + comm.split("[")[0])
        before[role] += max(0.0, min(first_add_s, end) - max(first_send_s, end - run_s))
        during[role] += max(0.0, min(last_add_s, end) - max(first_add_s, end - run_s))
    return {"first_hand_off_ms": round((first_add_s - first_send_s) * 1e3, 2),
            "ms_a_hand_off": round((last_add_s - first_add_s) * 1e3 / (num_hand_offs - 1), 3),
            "before_first_hand_off_ms": {k: round(v * 1e3, 2) for k, v in sorted(before.items()) if v > 5e-4},
            "per_hand_off_ms": {k: round(v * 1e3 / (num_hand_offs - 1), 3) for k, v in sorted(during.items())
                                if v > 5e-4}}


def session_rows(work_dir: Path) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    events = [json.loads(line) for line in (work_dir / "timeline-a1.log").read_text().splitlines()]
    rows = join(logged_steps((work_dir / "server-a1.log").read_text(errors="replace")), worker_calls(events),
                sorted(e[2] for e in events if e[0] == "ec_dec"))
    return rows, events


def session(work_dir: Path, perf: bool) -> dict[str, Any]:
    index = json.loads((work_dir / "runs.json").read_text())
    rows, events = session_rows(work_dir)
    out = compare(rows)
    adds = sorted(e[2] for e in events if e[0] == "add")
    out["runs"] = {}
    for run in index["runs"]:
        result = run["result"]
        entry = {k: round(result[k], 2) for k in ("mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms",
                                                  "output_throughput")}
        data = work_dir / f"{run['name']}.perf.data"
        if perf and data.exists() and run["load"].startswith("burst"):
            first_send = min(result["start_times"])
            mine = [a for a in adds if a >= first_send][:len(result["start_times"])]
            entry["intake_cpu"] = intake_cpu(timehist(data), roles(run["engine_window"]["threads_sched"]), first_send,
                                             mine[0], mine[-1], len(mine))
        out["runs"][run["name"]] = entry
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dirs", type=Path, nargs="+", required=True)
    parser.add_argument("--perf", action="store_true", help="read each burst's <run>.perf.data (perf must be installed)")
    parser.add_argument("--fit-groups", nargs="*", default=[], metavar="NAME=DIR,DIR",
                        help="per group of work directories (e.g. the engine core's threads on its core / moved), the "
                             "per-arrival line through their prefill steps (per_arrival_fit)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    result: dict[str, Any] = {str(d.name): session(d, args.perf) for d in args.work_dirs}
    fits = {}
    for group in args.fit_groups:
        name, _, dirs = group.partition("=")
        if not name or not dirs:
            parser.exit(2, f"--fit-groups: {group}: must be NAME=DIR[,DIR...]\n")
        fits[name] = per_arrival_fit([session_rows(Path(d))[0] for d in dirs.split(",")])
        print(name, json.dumps(fits[name]))
    if fits:
        result["per_arrival_fits"] = fits
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, s in result.items():
        if name == "per_arrival_fits":
            continue
        print(name, json.dumps({k: s[k] for k in ("steps", "misjoined", "full_prefill_ms")}),
              json.dumps({k: v for k, v in s["one_prompt_ms"].items() if k != "by_idle_s"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
