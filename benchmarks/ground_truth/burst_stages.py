"""Where a request of a real `vllm serve` burst spends the time before its first token, stage by stage and by its
position in the burst, against the simulator's replay of the same runs (issue 37: the 1,000-prompt bursts' TTFT).

    # measured: a `vllm_serve_bench.py --timeline` work directory (timeline-a1.log and the runs' result files)
    python benchmarks/ground_truth/burst_stages.py --work-dir $WORK --out $OUT/burst-stages.json
    # the simulator's replay of the same runs (this project's venv): reach, first schedule, first token per request
    PYTHONPATH=$PWD python benchmarks/ground_truth/burst_stages.py --stages $OUT/burst-stages.json \
        --runs $WORK/runs-timeline-burst1000.json --hardware benchmarks/results/vllm-serve-bench/cpu-host-calibrated.yaml \
        --client-costs benchmarks/results/vllm-serve-bench/sim-after.json --out $OUT/burst-stages-sim.json

Per request, on CLOCK_MONOTONIC (`vllm_timeline.py`'s events; the client's `start_times` and TTFTs): the client's
send; the request's ASGI task starting (uvicorn parsed its headers); the endpoint's handler starting (FastAPI read and
validated the body); vLLM's arrival stamp (rendering starts); the hand-off to the engine core
(`AsyncMPClient.add_request_async`); the engine core's input thread done with it (`preprocess_add_request`); the
busy loop adding it to the scheduler (`EngineCore.add_request`, QUEUED); its first schedule (SCHEDULED); its first
token out of the engine core (`EngineCoreOutputs.timestamp`); the API server's output handler taking it; the client
having it. Requests are matched by the client's request id (`timeline_pairs.client_key`). Printed: per block of 100
positions, the median time of each stage after the run's first send, over the block's requests and the runs; with
`--stages`, the simulator's reach of the engine core (its API-server stage's hand-off plus `latency_s`, i.e. the
scheduler's waiting queue), first schedule and the client's first token for the same requests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timeline_pairs import client_key  # noqa: E402

STAGES = ("sent", "asgi", "handler", "arrival", "add", "ec_in", "ec_add", "scheduled", "token", "seen", "client")
SIM_STAGES = ("sent", "reach", "scheduled", "client")
BLOCK = 100


def header_key(rid: str) -> tuple[str, int]:
    """The client's x-request-id ("bench-0e0f8042-7") -> ("bench-0e0f8042", 7)."""
    prefix, _, index = rid.rpartition("-")
    return prefix, int(index)


def extract(work_dir: Path) -> dict[str, Any]:
    events = [json.loads(line) for line in (work_dir / "timeline-a1.log").read_text().splitlines()]
    by_stage: dict[str, dict[tuple[str, int], float]] = {s: {} for s in STAGES}
    prefixes: list[str] = []
    for e in events:
        kind = e[0]
        if kind in ("asgi", "handler") and e[1]:
            key = header_key(e[1])
            by_stage[kind][key] = e[2]
        elif kind == "add":
            key = client_key(e[1].rsplit("-", 1)[0])
            by_stage["add"][key] = e[2]
        elif kind in ("ec_in", "ec_add"):
            key = client_key(e[1].rsplit("-", 1)[0])
            by_stage[kind][key] = e[3]
        elif kind == "req":
            key = client_key(e[1])
            by_stage["arrival"][key], by_stage["scheduled"][key] = e[2], e[4]
            by_stage["token"][key], by_stage["seen"][key] = e[5], e[6]
        else:
            continue
        if key[0] not in prefixes:
            prefixes.append(key[0])
    # (not the client's `<run>.client-split.json` beside each result, which vllm_serve_bench.py writes since 2fa3c99)
    results = sorted(((json.loads(p.read_text()), p.stem) for p in work_dir.glob("*-a1-r*.json")
                      if not p.name.endswith(".client-split.json")),
                     key=lambda item: min(item[0]["start_times"]))
    if len(results) != len(prefixes):
        raise SystemExit(f"{work_dir}: {len(results)} run results but {len(prefixes)} request id prefixes")
    conns = [e[1] for e in events if e[0] == "conn"]
    engine = [e for e in events if e[0] in ("ec_inq", "ec_sched", "ec_step")]
    runs = {}
    for (result, name), prefix in zip(results, prefixes):
        t0 = min(result["start_times"])
        end = t0 + result["duration"] + 1
        rows = []
        for i, sent in enumerate(result["start_times"]):
            key = (prefix, i)
            row = [sent, *(by_stage[s].get(key) for s in STAGES[1:-1]), sent + result["ttfts"][i]]
            rows.append([None if t is None else round(t - t0, 6) for t in row])
        runs[name] = {"t0": t0, "columns": list(STAGES), "rows": rows,
                      "conn": [round(t - t0, 6) for t in conns if t0 - 1 <= t <= end],
                      "engine": [[e[0], *(round(x - t0, 6) for x in e[1:3]), *e[3:]] for e in engine
                                 if t0 - 1 <= e[1] <= end]}
    return {"work_dir": str(work_dir), "runs": runs}


def stages_from_runs(index: dict[str, Any], load: str) -> dict[str, Any]:
    """Only the client's stages (its send and first token) of the runs of `load` with one API-server process in a
    runs index without timelines (e.g. the 2026-11-29 campaign's runs.json): for the simulated comparison alone."""
    runs = {}
    for run in index["runs"]:
        if run["load"] != load or run["api_server_count"] != 1 or "excluded" in run:
            continue
        result = run["result"]
        t0 = min(result["start_times"])
        rows = [[round(sent - t0, 6), *([None] * (len(STAGES) - 2)), round(sent + ttft - t0, 6)]
                for sent, ttft in zip(result["start_times"], result["ttfts"])]
        runs[run["name"]] = {"t0": t0, "columns": list(STAGES), "rows": rows, "conn": [], "engine": []}
    return {"runs": runs}


def engine_summary(run: dict[str, Any]) -> dict[str, Any]:
    """The engine core's loop during the burst's intake: steps and input drains until every request was queued."""
    rows = run["rows"]
    queued = [r[STAGES.index("ec_add")] for r in rows if r[STAGES.index("ec_add")] is not None]
    last_queued = max(queued)
    sched = [e for e in run["engine"] if e[0] == "ec_sched" and e[1] <= last_queued]
    steps = [e for e in run["engine"] if e[0] == "ec_step" and e[1] <= last_queued]
    inq = [e for e in run["engine"] if e[0] == "ec_inq" and e[1] <= last_queued]
    ec_in = [r[STAGES.index("ec_in")] for r in rows if r[STAGES.index("ec_in")] is not None]
    return {"first_queued_s": round(min(queued), 3), "last_queued_s": round(last_queued, 3),
            "last_ec_in_s": round(max(ec_in), 3) if ec_in else None,
            "steps_before_last_queued": len(steps),
            "step_s_sum_before_last_queued": round(sum(e[2] - e[1] for e in steps), 3),
            "schedule_s_sum_before_last_queued": round(sum(e[2] - e[1] for e in sched), 3),
            "input_drain_s_sum_before_last_queued": round(sum(e[2] - e[1] for e in inq), 3),
            "new_scheduled_before_last_queued": sum(e[3] for e in sched),
            "connections": len(run["conn"]),
            "connections_accepted_s_p50_p100": [round(statistics.median(run["conn"]), 3), round(max(run["conn"]), 3)]
            if run["conn"] else None}


def blocks(rows: list[list[float | None]], columns: list[str]) -> list[dict[str, Any]]:
    out = []
    for start in range(0, len(rows), BLOCK):
        part = rows[start:start + BLOCK]
        row: dict[str, Any] = {"positions": f"{start}-{start + len(part) - 1}"}
        for j, stage in enumerate(columns):
            values = [r[j] for r in part if r[j] is not None]
            row[stage] = round(1e3 * statistics.median(values), 1) if values else None
        out.append(row)
    return out


def merged_blocks(runs: list[dict[str, Any]], columns: list[str]) -> list[dict[str, Any]]:
    """Per block, the median over the runs of the block medians."""
    per_run = [blocks(run["rows"], columns) for run in runs]
    out = []
    for k, first in enumerate(per_run[0]):
        row: dict[str, Any] = {"positions": first["positions"]}
        for stage in columns:
            values = [b[k][stage] for b in per_run if k < len(b) and b[k][stage] is not None]
            row[stage] = round(statistics.median(values), 1) if values else None
        out.append(row)
    return out


@contextlib.contextmanager
def captured_simulations() -> Iterator[tuple[list[Any], dict[str, float]]]:
    """While open, every simulation run in this process is appended to the first list (its `_Simulation`: the
    recorder's `sent` and `first_token` per request) and each request's reach of the engine core's scheduler is
    recorded in the dict (request id -> simulated time).

    The reach is taken where both of the simulator's loops see it: behind an API server, from its `reach_s` (each
    server's instance attribute, wrapped once the simulation is made: the compiled loop, roofline/sim/_simcore.c
    `loop_reach`, looks it up there and calls no `_Simulation.enter`), the final answer (no later than the loop's
    `now`) plus the busy engine core's hop where a step is under way, as `_Simulation.reach` enters it; without one,
    from `_Simulation.enter` (the Python loop's only)."""
    import roofline.sim.simulator as sim

    captured: list[Any] = []
    reach: dict[str, float] = {}
    init, enter = sim._Simulation.__init__, sim._Simulation.enter

    def init_capture(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        captured.append(self)
        for api in self.api or ():
            api.reach_s = _reach_capture(self, api, api.reach_s, reach)

    def enter_capture(self: Any, now: float, replica: Any, request: Any, *args: Any, **kwargs: Any) -> None:
        if self.api is None:
            reach[request.request_id] = now
        enter(self, now, replica, request, *args, **kwargs)

    sim._Simulation.__init__ = init_capture  # type: ignore[method-assign]
    sim._Simulation.enter = enter_capture  # type: ignore[method-assign]
    try:
        yield captured, reach
    finally:
        sim._Simulation.__init__ = init  # type: ignore[method-assign]
        sim._Simulation.enter = enter  # type: ignore[method-assign]


def _reach_capture(simulation: Any, api: Any, reach_s: Any, reach: dict[str, float]) -> Any:
    """`api.reach_s` recording, when a request's input is done (the answer no later than `now_s`), when it enters its
    engine core: then, or after `api.busy_hop_s` where its replica has a step under way (`_Simulation.reach`). The
    request is the one whose ticket this is (`_Simulation.api_ticket`, index -> (replica, process, ticket), held
    until it enters)."""
    index_of: dict[tuple[int, int], int] = {}

    def capture(now_s: float, process: int, ticket: int) -> float:
        at_s: float = reach_s(now_s, process, ticket)
        if at_s <= now_s:
            if (process, ticket) not in index_of:
                for index, (replica, p, t) in simulation.api_ticket.items():
                    if simulation.api[replica.index] is api:
                        index_of[(p, t)] = index
            index = index_of.pop((process, ticket))
            replica = simulation.api_ticket[index][0]
            hop_s = api.busy_hop_s if api.busy_hop_s > 0 and replica.plan is not None else 0.0
            reach[simulation.in_frontend[index].request_id] = now_s + hop_s
        return at_s

    return capture


def simulate(stages: dict[str, Any], index: dict[str, Any], hardware: str, client: dict[str, float] | None,
             costs: dict[str, float] | None = None) -> dict[str, Any]:
    """Each run of `index` named in `stages` replayed by vllm_serve_sim.simulate_run (the same inputs as its judge),
    with the simulator's per-request reach of the engine core, first schedule and client first token captured."""
    import tempfile

    from vllm_serve_sim import api_cores, simulate_run

    from roofline.sim.api_server import ApiServerCosts

    out: dict[str, Any] = {}
    with captured_simulations() as (captured, reach), tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "llama-tiny"
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps(index["model_config"]))
        for run in index["runs"]:
            if run["name"] not in stages["runs"]:
                continue
            captured.clear()
            reach.clear()
            metrics = simulate_run(run, model_dir, hardware, index["server_flags"],
                                   None if costs is None else ApiServerCosts(**costs), api_cores(index), client)
            s = captured[-1]
            rec = s.recorder
            ids = sorted(rec.row_of, key=rec.row_of.get)
            t0 = float(min(rec.sent))
            rows = []
            for row, rid in enumerate(ids):
                values = [rec.sent[row], reach.get(rid), rec.first_scheduled[row], rec.first_token[row]]
                rows.append([None if v is None else round(float(v) - t0, 6) for v in values])
            out[run["name"]] = {"columns": list(SIM_STAGES), "rows": rows, "metrics": metrics}
    return {"hardware": hardware, "runs": out}


def print_tables(stages: dict[str, Any], simulated: dict[str, Any] | None) -> None:
    names = sorted(stages["runs"])
    for endpoint in ("completions", "chat"):
        runs = [stages["runs"][n] for n in names if f"-{endpoint}-" in n]
        if not runs:
            continue
        print(f"\n{endpoint}: {len(runs)} runs; median ms after the run's first send, by position block")
        print("| positions | " + " | ".join(STAGES[1:]) + " |")
        print("|---" * len(STAGES) + "|")
        for row in merged_blocks(runs, list(STAGES)):
            print(f"| {row['positions']} | " + " | ".join(str(row[s]) for s in STAGES[1:]) + " |")
        for n in names:
            if f"-{endpoint}-" in n and stages["runs"][n]["engine"]:
                print(n, json.dumps(engine_summary(stages["runs"][n])))
        if simulated:
            sim_runs = [simulated["runs"][n] for n in names if f"-{endpoint}-" in n and n in simulated["runs"]]
            print(f"\n{endpoint}: measured against simulated (ms after the first send; medians by block)")
            print("| positions | ec_add measured | reach simulated | scheduled measured | simulated | first token "
                  "(client) measured | simulated |")
            print("|---|---|---|---|---|---|---|")
            sim_blocks = merged_blocks(sim_runs, list(SIM_STAGES))
            for m, p in zip(merged_blocks(runs, list(STAGES)), sim_blocks):
                print(f"| {m['positions']} | {m['ec_add']} | {p['reach']} | {m['scheduled']} | {p['scheduled']} | "
                      f"{m['client']} | {p['client']} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, help="a vllm_serve_bench.py --timeline work directory")
    parser.add_argument("--stages", type=Path, help="this script's --work-dir output")
    parser.add_argument("--load", default="burst1000", help="with --runs and no --stages: the load whose runs (one "
                        "API-server process) are compared on the client's first token alone")
    parser.add_argument("--runs", type=Path, help="the runs' index (vllm_serve_bench.py --out), for --stages")
    parser.add_argument("--hardware", help="the profile the simulator replays the runs with (with --runs)")
    parser.add_argument("--client-costs", type=Path, help="vllm_serve_sim.py's output holding client_costs_s")
    parser.add_argument("--api-costs", type=Path, help="vllm_serve_sim.py's output whose fitted API-server costs "
                        "(`costs`) replace the profile's (a host whose profile does not state them)")
    parser.add_argument("--simulated", type=Path, help="print against this --runs output")
    parser.add_argument("--input-phases", default=None, metavar="F1,F2,...",
                        help="simulate with api_server_phases.py's round-robin intake (as vllm_serve_sim.py)")
    parser.add_argument("--output-in-round", action="store_true", help="with --input-phases: as vllm_serve_sim.py")
    parser.add_argument("--event-loop", default=None, metavar="F1,F2,...",
                        help="simulate with api_server_phases.py's event loop (as vllm_serve_sim.py)")
    parser.add_argument("--accept-gap-ms", type=float, default=0.0, help="with --event-loop: as vllm_serve_sim.py")
    parser.add_argument("--io-at-poll", action="store_true", help="with --event-loop: as vllm_serve_sim.py")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.event_loop:
        from vllm_serve_sim import install_event_loop

        install_event_loop(parser, args.event_loop, args.accept_gap_ms, io_at_poll=args.io_at_poll)
    if args.input_phases:
        import functools

        from api_server_phases import PhasedApiServer

        import roofline.sim.simulator as simulator

        phases = tuple(float(f) for f in args.input_phases.split(","))
        simulator.ApiServer = functools.partial(  # type: ignore[misc]
            PhasedApiServer, phases=phases, reach_phase=len(phases), output_in_round=args.output_in_round)
    if args.work_dir:
        data = extract(args.work_dir)
        if args.out:
            args.out.write_text(json.dumps(data) + "\n")
        print_tables(data, None)
        return 0
    if args.stages:
        stages = json.loads(args.stages.read_text())
    elif args.runs:
        stages = stages_from_runs(json.loads(args.runs.read_text()), args.load)
    else:
        parser.error("give --work-dir, or --stages or --runs (with --hardware and --out, or --simulated)")
    if args.simulated:
        simulated = json.loads(args.simulated.read_text())
    else:
        if not (args.runs and args.hardware and args.out):
            parser.error("--stages / --runs: give --runs, --hardware and --out (or --simulated)")
        client = json.loads(args.client_costs.read_text())["client_costs_s"] if args.client_costs else None
        costs = json.loads(args.api_costs.read_text())["costs"] if args.api_costs else None
        simulated = simulate(stages, json.loads(args.runs.read_text()), args.hardware, client, costs)
        args.out.write_text(json.dumps(simulated) + "\n")
    print_tables(stages, simulated)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
