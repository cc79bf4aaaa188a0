"""The benchmark client as a one-thread stage, tried on the published `vllm bench serve` results (issue 37).

    python benchmarks/accuracy/public_bench_client.py --out $OUT/client.json [--only ID ...] [--cost-factor F]
        [--request-ms MS] [--no-accept-per-turn]

`vllm bench serve` is one Python asyncio process (vllm/benchmarks/serve.py; vllm/benchmarks/lib/
endpoint_request_func.py): per request it starts the task, builds the payload, takes aiohttp's connection and writes
the request; per streamed SSE message it reads the transport, parses the message (`StreamedResponseHandler.add_chunk`,
`json.loads`) and stamps it, so a request's TTFT and ITL are taken when the client has processed its chunk. On a GPU
host (its client not on the API server's cores) the simulator models none of that. This script asks what it would
change without changing the simulator: each case is simulated as `public_bench.py` simulates it (the same run, the
simulator's own figures), and every request's token times are then passed through one first-come-first-served
thread: each request's send (`request_s`) at its send time, each streamed token (one SSE message) at the time the
simulated API server streamed it (`chunk_s`); a token's stamp is the end of its work there. The sends do not feed back
into the server here (in a burst they all come before the first chunk; at a rate or in a closed loop each is one
`request_s` later than simulated), so this is the stage's effect on the stamps, not a new simulation.

Costs (seconds of the client's thread, `CLIENT_COSTS`): the client's CPU measured on this project's CPU hosts
(BENCHMARKS.md, "client split": 0.28-0.33 ms per request before the send and 52-57 us per SSE message in bursts; the
midpoints), divided by the GPU host's `host.single_thread_speed_relative` as every API-server cost is
(`roofline.sim.api_server.ApiServerCosts.for_host`), and the same costs unscaled (a client no faster than the
reference host's). Also per burst: where the simulated API server's loop spends its time, in eight windows of the run
(`loop_windows`: output passes, requests reaching the engine core, the loop's busy share; completions-endpoint costs,
without a release's chat extras). `--cost-factor F` multiplies every API-server cost (a sensitivity: F = 2 puts the GPU
hosts at the reference host's speed), `--request-ms MS` sets the loop's work per request (`request_s`) on every host
(a sensitivity: how slow an intake the bursts ask for); `--no-accept-per-turn` runs
`SimulationOptions.api_server_accept_per_turn` False.

A diagnosis, not a judge of its own and nothing fitted: it writes per case the simulated and the client-stamped
figures' errors, and per load shape median / p90 of |error| and the bias, as public_bench.py does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "accuracy"))

import public_bench as pb  # noqa: E402

import roofline.calibration.vllm_bench as vllm_bench  # noqa: E402
from roofline.sim import api_server  # noqa: E402

# (name, per SSE message s, per request s) on the reference host; "scaled" ones are divided by the case's host speed.
CLIENT_COSTS = (("none", 0.0, 0.0, False), ("scaled", 55e-6, 0.31e-3, True), ("unscaled", 55e-6, 0.31e-3, False))


def client_stamps(token_times: list[list[float]], sent_s: np.ndarray, chunk_s: float,
                  request_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Each request's first and last token as a one-thread client stamps them: sends (`request_s` each, at `sent_s`)
    and tokens (`chunk_s` each, at their times) first come first served, a send before a token at the same time."""
    events = sorted([(float(t), 0, i, -1) for i, t in enumerate(sent_s)]
                    + [(t, 1, i, k) for i, times in enumerate(token_times) for k, t in enumerate(times)])
    first = np.full(len(token_times), np.nan)
    last = np.full(len(token_times), np.nan)
    free = 0.0
    for at, kind, i, k in events:
        free = max(free, at) + (chunk_s if kind else request_s)
        if kind and k == 0:
            first[i] = free
        if kind and k == len(token_times[i]) - 1:
            last[i] = free
    return first, last


def stamped_metrics(token_times: list[list[float]], sent_s: np.ndarray, chunk_s: float,
                    request_s: float) -> dict[str, float]:
    """The scored figures (`public_bench.SCORED`) of the client's stamps, as vLLM computes them."""
    first, last = client_stamps(token_times, sent_s, chunk_s, request_s)
    num = np.array([len(times) for times in token_times])
    ttft = first - sent_s
    tpot = (last - first)[num > 1] / (num[num > 1] - 1)
    return {"mean_ttft_ms": 1e3 * float(ttft.mean()), "median_ttft_ms": 1e3 * float(np.median(ttft)),
            "mean_tpot_ms": 1e3 * float(tpot.mean()), "output_throughput": float(num.sum() / np.nanmax(last))}


def token_times_of(result: Any) -> list[list[float]]:
    """Every request's token times (its runs of `TokenTimes`), by request row."""
    times = result.itl
    out: list[list[float]] = [[] for _ in range(times.num_requests)]
    for row, start, length in zip(times.row, times.start, times.length):
        out[int(row)].extend(times.times[start:start + length].tolist())
    return out


def loop_windows(result: Any, costs: api_server.ApiServerCosts, num_windows: int = 8) -> list[dict[str, float]]:
    """Per window of the run: engine steps, output tokens per pass, the passes' loop time, requests first scheduled,
    and the loop's busy share (passes + `request_s` per request scheduled)."""
    steps, requests = result.steps, result.requests
    ends, tokens = steps["end_s"].to_numpy(), steps["num_output_tokens"].to_numpy()
    pass_s = costs.output_pass_s + costs.output_token_s * tokens
    reached = requests["first_scheduled_s"].to_numpy()
    edges = np.linspace(0.0, float(ends.max()), num_windows + 1)
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        in_window = (ends > lo) & (ends <= hi)
        num_reached = int(((reached > lo) & (reached <= hi)).sum())
        rows.append({"from_s": float(lo), "to_s": float(hi), "steps": int(in_window.sum()),
                     "tokens_per_pass": float(tokens[in_window].mean()) if in_window.any() else 0.0,
                     "passes_s": float(pass_s[in_window].sum()), "reached_engine": num_reached,
                     "loop_busy": float((pass_s[in_window].sum() + num_reached * costs.request_s) / (hi - lo))})
    return rows


def simulate(case: dict[str, Any], options: dict[str, Any]) -> tuple[dict[str, Any], Any, Any]:
    """`public_bench.simulate_case`'s row, and the run's `SimulationResult` and deployment (its simulation options
    replaced by `options`)."""
    captured: dict[str, Any] = {}
    run = vllm_bench.run_simulation

    def capture(deployment: Any, workload: Any, sim_options: Any, **kwargs: Any) -> Any:
        result = run(deployment, workload, dataclasses.replace(sim_options, **options), **kwargs)
        captured.update(result=result, deployment=deployment)
        return result

    vllm_bench.run_simulation = capture  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory() as work:
            row = pb.simulate_case(case, Path(work))
    finally:
        vllm_bench.run_simulation = run  # type: ignore[assignment]
    return row, captured.get("result"), captured.get("deployment")


def errors_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for shape in (*pb.SHAPES, "all"):
        chosen = [r for r in rows if shape == "all" or r["shape"] == shape]
        out[shape] = {name: {k: pb.stats([r["errors"][name][k] for r in chosen]) for k in pb.SCORED}
                      for name in ("simulated", *(c[0] for c in CLIENT_COSTS))}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--cases", type=Path, default=pb.DEFAULT_CASES)
    parser.add_argument("--only", nargs="*", default=None, metavar="ID")
    parser.add_argument("--cost-factor", type=float, default=1.0, help="every API-server cost x this (sensitivity)")
    parser.add_argument("--request-ms", type=float, default=None,
                        help="every host's loop work per request (request_s) set to this many ms (sensitivity)")
    parser.add_argument("--no-accept-per-turn", action="store_true")
    args = parser.parse_args(argv)
    for_host = api_server.ApiServerCosts.__dict__["for_host"].__func__

    def scaled_for_host(cls: Any, host: Any) -> api_server.ApiServerCosts:
        costs = for_host(cls, host).scaled(args.cost_factor)
        return costs if args.request_ms is None else dataclasses.replace(costs, request_s=args.request_ms * 1e-3)

    if args.cost_factor != 1.0 or args.request_ms is not None:
        api_server.ApiServerCosts.for_host = classmethod(scaled_for_host)  # type: ignore[method-assign,assignment]
    options = {"api_server_accept_per_turn": False} if args.no_accept_per_turn else {}
    rows = []
    for case in pb.load_cases(args.cases):
        if args.only and case["id"] not in args.only:
            continue
        row, result, deployment = simulate(case, options)
        if "metrics" not in row:
            continue
        measured = {k: row["metrics"][k]["measured"] for k in pb.SCORED}
        sent = result.requests["arrival_s"].to_numpy()
        tokens = token_times_of(result)
        speed = deployment.hw.host.single_thread_speed_relative
        entry: dict[str, Any] = {"id": case["id"], "shape": row["shape"],
                                 "errors": {"simulated": {k: row["metrics"][k]["rel_err"] for k in pb.SCORED}},
                                 "decoding_at_once": row["decoding_at_once"]}
        for name, chunk_s, request_s, scaled in CLIENT_COSTS:
            factor = 1.0 / speed if scaled else 1.0
            figures = stamped_metrics(tokens, sent, chunk_s * factor, request_s * factor)
            entry["errors"][name] = {k: figures[k] / measured[k] - 1 for k in pb.SCORED}
        if row["shape"] == "burst":
            costs = api_server.ApiServerCosts.for_host(deployment.hw.host)
            entry["loop_windows"] = loop_windows(result, costs)
            entry["first_scheduled_s"] = [float(np.min(result.requests["first_scheduled_s"])),
                                          float(np.max(result.requests["first_scheduled_s"]))]
        rows.append(entry)
        print(case["id"], " ".join(f"{name} {100 * entry['errors'][name]['mean_ttft_ms']:+.1f}"
                                   for name in entry["errors"]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    head = {"cost_factor": args.cost_factor, "request_ms": args.request_ms, "accept_per_turn": not args.no_accept_per_turn,
            "client_costs": CLIENT_COSTS, "summary": errors_summary(rows)}
    lines = [json.dumps(row, separators=(",", ":")) for row in rows]  # (one case a line)
    args.out.write_text(json.dumps(head, indent=1)[:-2] + ',\n "cases": [\n' + ",\n".join(lines) + "\n]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
