"""Each server session's engine speed against the campaign's, next to the simulator's TTFT error on its runs:
whether a session's misses go with its own engine step time (docs/benchmark-history/2026-11-30i-serve18.md):

    R=benchmarks/results/vllm-serve-bench
    python benchmarks/ground_truth/vllm_serve_engine_speed.py --reference $R/2026-11-30c/runs.json \
        --session $R/2026-11-30c/runs.json $R/2026-11-30i-serve17/sim-2026-11-30c-host-busy-hop.json \
        --session $R/2026-11-30e-serve11/runs-sessions.json $R/2026-11-30i-serve17/sim-sessions-serve11-busy-hop.json \
        --out $OUT/engine-speed.json

A run's engine speed: vLLM's own step times (the served engine's `--enable-logging-iteration-details` lines,
`vllm_serve_bench.py` `engine_steps`: schedule, the Worker's forward pass, update_from_output, all on the engine's
core) of its decode-only steps, per batch size, over the reference index's runs of the same cell; the ratio's mean
over the batch sizes both have (at least 5 steps each). Runs without logged steps (two API-server processes before
`vllm_serve_bench.py --engine-steps`: their API servers log none) have no ratio; a two-process run's steps are set
against the reference's one-process runs of its load and endpoint where the reference has no steps of its own cell
(the engine's work is the same; the campaign's two-process runs logged none). Beside it, core 0's side: the API
server processes' CPU per request over the engine's working window (which also holds the client's test request: the
same in every session) against the reference's one-process runs of the load and endpoint. The error: the
`vllm_serve_sim.py --out` row's `run_error_pct` of the cell's mean TTFT, by the run's place among the cell's runs in
the index (the order vllm_serve_sim.py reads them). A run listed by two sessions (the same
name and TTFT) counts once. Nothing here is fitted: a diagnostic of what the profile, fitted on one session, cannot
know of another.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path
from typing import Any

MIN_STEPS = 5


def decode_steps(run: dict[str, Any]) -> dict[int, list[float]]:
    """Decode-only steps' times (ms) by the requests in them (no prefill in the step)."""
    out: dict[int, list[float]] = collections.defaultdict(list)
    for _, context_requests, _, generation_requests, _, elapsed_ms in run.get("engine_steps") or []:
        if context_requests == 0 and generation_requests >= 1:
            out[int(generation_requests)].append(elapsed_ms)
    return out


def api_cpu_per_request(run: dict[str, Any]) -> float | None:
    """The API-server process's threads' CPU (s) over the engine's working window (`engine_window`: it also holds the
    client's test request), per completed request; None without the window."""
    threads = (run.get("engine_window") or {}).get("threads_cpu_s") or {}
    completed = run["result"].get("completed") or 0
    if not threads or not completed:
        return None
    return sum(v for k, v in threads.items() if k.startswith("api_server") or k.startswith("VLLM::APIServer")) \
        / completed


def cell(name: str) -> str:
    """`rate20-completions-a1-r0-s1` -> `rate20-completions-a1`."""
    return name.rsplit("-r", 1)[0]


def one_process(cell_name: str) -> str:
    """`burst100-chat-a2` -> `burst100-chat-a1`: the one-process cell of the same load and endpoint."""
    return cell_name.rsplit("-a", 1)[0] + "-a1"


def speed_ratio(steps: dict[int, list[float]], reference: dict[int, list[float]]) -> float | None:
    """The mean over batch sizes of this run's mean step time over the reference's (sizes with >= MIN_STEPS both)."""
    ratios = [statistics.fmean(v) / statistics.fmean(reference[b]) for b, v in steps.items()
              if len(v) >= MIN_STEPS and len(reference.get(b, [])) >= MIN_STEPS]
    return statistics.fmean(ratios) if ratios else None


def correlation(xs: list[float], ys: list[float]) -> dict[str, float] | None:
    """Pearson's r and the least-squares line y = a + b x (None with fewer than 3 points or no spread)."""
    if len(xs) < 3:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None
    return {"pearson": sxy / (sxx * syy) ** 0.5, "intercept": my - sxy / sxx * mx, "slope": sxy / sxx}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, required=True, help="the index whose engine steps are 1.0")
    parser.add_argument("--session", nargs=2, action="append", type=Path, required=True, metavar=("RUNS", "SIM"),
                        help="a session block's index and vllm_serve_sim.py's --out on it (repeatable)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    reference: dict[str, dict[int, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    reference_api: dict[str, list[float]] = collections.defaultdict(list)
    for run in json.loads(args.reference.read_text())["runs"]:
        for b, v in decode_steps(run).items():
            reference[cell(run["name"])][b].extend(v)
        api = api_cpu_per_request(run)
        if api is not None and run.get("api_server_count") == 1:
            reference_api[cell(run["name"])].append(api)
    reference = {c: v for c, v in reference.items() if v}
    rows, seen = [], set()
    for runs_path, sim_path in args.session:
        sim = {row["cell"]: row for row in json.loads(sim_path.read_text())["rows"]}
        place: collections.Counter[str] = collections.Counter()
        for run in json.loads(runs_path.read_text())["runs"]:
            c = cell(run["name"])
            if c not in sim:
                continue
            i = place[c]
            place[c] += 1
            key = (run["name"], run["result"]["mean_ttft_ms"])
            errors = sim[c]["mean_ttft_ms"].get("run_error_pct") or []
            if key in seen or i >= len(errors):
                continue
            seen.add(key)
            api = api_cpu_per_request(run)
            steps_cell = c if c in reference else one_process(c)
            api_cell = one_process(c)
            rows.append({"session": str(runs_path), "run": run["name"], "cell": c,
                         "engine_step_ratio": speed_ratio(decode_steps(run), reference.get(steps_cell, {})),
                         "engine_step_reference": steps_cell,
                         # the API server processes' CPU per request over the reference's one-process mean
                         "api_cpu_ratio": (api / statistics.fmean(reference_api[api_cell])
                                           if api is not None and reference_api.get(api_cell) else None),
                         "mean_ttft_ms": run["result"]["mean_ttft_ms"], "ttft_error_pct": errors[i]})
    with_ratio = [r for r in rows if r["engine_step_ratio"] is not None]
    out: dict[str, Any] = {"rows": rows, "correlation": {}}
    for count in ("1", "2", "all"):
        for load in ("rate20", "burst100", "burst1000", "all"):
            sel = [r for r in with_ratio if load in ("all", r["cell"].split("-")[0])
                   and count in ("all", r["cell"].rsplit("-a", 1)[1])]
            key = load if count == "all" else f"{load}-a{count}"
            out["correlation"][key] = {
                "runs": len(sel), "ratio_to_error": correlation([r["engine_step_ratio"] for r in sel],
                                                                [r["ttft_error_pct"] for r in sel])}
    for r in rows:
        ratio = r["engine_step_ratio"]
        api = r["api_cpu_ratio"]
        print(f"{Path(r['session']).parent.name:22s} {r['run']:30s} engine step x"
              f"{'  -  ' if ratio is None else f'{ratio:.3f}'}  API CPU x{'  -  ' if api is None else f'{api:.3f}'}"
              f"  mean TTFT {r['mean_ttft_ms']:.1f} ms, "
              f"error {r['ttft_error_pct']:+.1f} %")
    print(json.dumps(out["correlation"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
