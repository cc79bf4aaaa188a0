"""Which API-server process served each request of a real `vllm serve --api-server-count N` run, and what that
assignment does to the simulated run (issue 37).

    # the assignment, from traced runs (vllm_serve_bench.py --timeline: each request's `add` event names the API-server
    # process that handed it to the engine core):
    python benchmarks/ground_truth/api_process_assignment.py --runs W/runs.json --timeline W/timeline-a2.log \\
        --out $OUT/assignment.json
    # and each traced run simulated with the processes assigned round robin, as measured, and as the model assigns them:
    python benchmarks/ground_truth/api_process_assignment.py --runs W/runs.json --timeline W/timeline-a2.log \\
        --hardware benchmarks/results/vllm-serve-bench/2026-11-30c/cal-host.yaml \\
        --costs benchmarks/results/vllm-serve-bench/2026-11-30e-serve8/sim-2026-11-30c-host.json --simulate \\
        --out $OUT/assignment.json

Per run: the requests per process, how often two requests in a row (by send) went to different processes (round
robin: every time), the longest run of one process, and against round robin where they went. With --simulate, each
run replayed (`vllm_serve_sim.simulate_run`, the fitted costs as they are) with the simulator's assignment and with the
measured one (`MeasuredAssignment`), so the assignment's own effect on the simulated figures is isolated from
everything else. Results and their reading: docs/benchmark-history/2026-11-30h-serve16.md.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vllm_serve_sim import METRICS, api_cores, simulate_run  # noqa: E402

# vLLM's request id: the API server's prefix ("cmpl-" / "chatcmpl-"), the client's id ("bench-<hex>-<index>", vllm
# bench serve's `request_id_prefix` + the request's index in its input list, i.e. its send order) and a suffix.
REQUEST_ID = re.compile(r"bench-([0-9a-f]+)-(\d+)")


def assignments(timeline_log: Path, runs: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Per run (traced, more than one process): each request's process by send order, the processes numbered by
    pid (0: the lowest). A run's requests are the ids of one client whose first hand-off falls within its sends."""
    pids: dict[str, dict[int, int]] = {}
    first: dict[str, float] = {}
    with open(timeline_log) as f:
        for line in f:
            if not line.startswith('["add"'):
                continue
            event = json.loads(line)
            match = REQUEST_ID.search(event[1])
            if match is None or len(event) < 4:
                continue
            pids.setdefault(match[1], {})[int(match[2])] = event[3]
            first.setdefault(match[1], event[2])
    out: dict[str, list[int]] = {}
    for run in runs:
        if run.get("api_server_count", 1) < 2:
            continue
        starts = run["result"]["start_times"]
        lo, hi = min(starts), max(starts)
        clients = [c for c, t in first.items() if lo - 0.5 <= t <= hi + 5.0]
        if len(clients) != 1 or len(pids[clients[0]]) != len(starts):
            continue
        by_index = pids[clients[0]]
        order = sorted(set(by_index.values()))
        out[run["name"]] = [order.index(by_index[i]) for i in range(len(starts))]
    return out


def accepts(timeline_log: Path, runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per run (traced with the `conn` events' pid and port and the `asgi` events' port): the connections its requests
    came on, in the order the processes accepted them, and how the processes took them (`accept_stats`); each
    request's connection is the latest accepted with its port before its ASGI start."""
    conns: list[tuple[float, int, int]] = []  # (accepted at, pid, client port)
    asgi: dict[str, dict[int, tuple[float, int]]] = {}  # client id -> request index -> (t, client port)
    with open(timeline_log) as f:
        for line in f:
            if line.startswith('["conn"'):
                event = json.loads(line)
                if len(event) >= 4 and event[3] is not None:
                    conns.append((event[1], event[2], event[3]))
            elif line.startswith('["asgi"'):
                event = json.loads(line)
                match = REQUEST_ID.search(event[1])
                if match is not None and len(event) >= 4 and event[3] is not None:
                    asgi.setdefault(match[1], {})[int(match[2])] = (event[2], event[3])
    conns.sort()
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        starts = run["result"]["start_times"]
        lo, hi = min(starts), max(starts)
        clients = [c for c, reqs in asgi.items() if lo - 0.5 <= min(t for t, _ in reqs.values()) <= hi + 5.0]
        if run.get("api_server_count", 1) < 2 or len(clients) != 1 or len(asgi[clients[0]]) != len(starts):
            continue
        conn_of: dict[int, tuple[float, int, int]] = {}
        for index, (t, port) in asgi[clients[0]].items():
            before = [c for c in conns if c[2] == port and c[0] <= t]
            if before:
                conn_of[index] = before[-1]
        used = sorted(set(conn_of.values()))
        pids = sorted({c[1] for c in used})
        rank = {c: i for i, c in enumerate(used)}
        out[run["name"]] = {
            "connections": len(used), "accepted": "".join(str(pids.index(c[1])) for c in used),
            "request_connection_rank": [rank[conn_of[i]] for i in sorted(conn_of)],
            **accept_stats([pids.index(c[1]) for c in used], len(pids))}
    return out


def accept_stats(accepted: list[int], num_processes: int) -> dict[str, int]:
    """Of connections accepted in order by `accepted`'s processes (all new; open counts from 0): how many went to a
    process with the fewest open ones, and at ties to the process that accepted the one before ("last") or another."""
    opened = [0] * num_processes
    least = tie_last = tie_other = 0
    previous = None
    for process in accepted:
        fewest = min(opened)
        if opened[process] == fewest:
            least += 1
            if opened.count(fewest) > 1:
                if process == previous:
                    tie_last += 1
                else:
                    tie_other += 1
        opened[process] += 1
        previous = process
    return {"to_least_loaded": least, "ties_to_last_acceptor": tie_last, "ties_to_another": tie_other}


def sequence_stats(processes: list[int], num_processes: int) -> dict[str, Any]:
    """The requests per process, the changes of process between consecutive requests (of len - 1), the runs'
    longest and mean length, and the requests whose process differs from round robin's (i mod N, relabelled so that
    the first request's process is 0; the fewer of the N rotations)."""
    changes = sum(a != b for a, b in zip(processes, processes[1:]))
    runs, length = [], 1
    for a, b in zip(processes, processes[1:]):
        if a == b:
            length += 1
        else:
            runs.append(length)
            length = 1
    runs.append(length)
    off_rr = min(sum(p != (i + shift) % num_processes for i, p in enumerate(processes))
                 for shift in range(num_processes))
    return {"requests": len(processes), "per_process": [processes.count(p) for p in range(num_processes)],
            "changes": changes, "pairs": len(processes) - 1, "longest_run": max(runs),
            "mean_run": round(statistics.mean(runs), 2), "off_round_robin": off_rr}


class Assigned:
    """`roofline.sim.api_server.ApiServer` variants: each request's process given (`sequence`, set per run), or the
    simulator's own choice recorded (`taken`)."""

    sequence: list[int] = []
    taken: list[int] = []

    @classmethod
    def given(cls, base: Any) -> Any:
        class Given(base):  # type: ignore[valid-type, misc]
            def next_process(self, now_s: float) -> int:
                return cls.sequence[self.num_taken]
        return Given

    @classmethod
    def recorded(cls, base: Any, by_connection: bool) -> Any:
        from roofline.sim.api_server import Connections

        class Recorded(base):  # type: ignore[valid-type, misc]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self.connections = Connections(self.num_processes) if by_connection else None

            def next_process(self, now_s: float) -> int:
                process: int = super().next_process(now_s)
                cls.taken.append(process)
                return process
        return Recorded


def simulate(index: dict[str, Any], hardware: str, costs_path: Path,
             measured: dict[str, list[int]]) -> dict[str, dict[str, Any]]:
    """Per run with a measured assignment: its figures simulated with round robin, with the measured assignment and
    with the connections' (`roofline.sim.api_server.Connections`), and the latter's assignment."""
    import roofline.sim.simulator as simulator
    from roofline.sim.api_server import ApiServerCosts

    fitted = json.loads(costs_path.read_text())
    costs, client = ApiServerCosts(**fitted["costs"]), fitted.get("client_costs_s")
    own = simulator.ApiServer
    variants = {"round_robin": Assigned.recorded(own, by_connection=False), "measured": Assigned.given(own),
                "connections": Assigned.recorded(own, by_connection=True)}
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "llama-tiny"
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps(index["model_config"]))
        for run in index["runs"]:
            if run["name"] not in measured:
                continue
            row: dict[str, Any] = {"real": {m: run["result"][m] for m in METRICS}}
            for variant, cls in variants.items():
                Assigned.sequence, Assigned.taken = measured[run["name"]], []
                simulator.ApiServer = cls  # type: ignore[misc]
                try:
                    row[variant] = simulate_run(run, model_dir, hardware, index["server_flags"], costs,
                                                api_cores(index), client)
                finally:
                    simulator.ApiServer = own  # type: ignore[misc]
                if variant == "connections":
                    row["connections_stats"] = sequence_stats(Assigned.taken, run["api_server_count"])
                    row["connections_assignment"] = "".join(map(str, Assigned.taken))
            out[run["name"]] = row
            print(run["name"], "; ".join(f"{m}: real {row['real'][m]:.2f}, " + ", ".join(
                f"{v} {row[v][m]:.2f}" for v in variants) for m in METRICS), file=sys.stderr)
            print("  connections:", json.dumps(row["connections_stats"]), file=sys.stderr)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True, help="a vllm_serve_bench.py --timeline run index")
    parser.add_argument("--timeline", type=Path, required=True, help="its timeline-a<N>.log")
    parser.add_argument("--simulate", action="store_true", help="also simulate each run (needs --hardware, --costs)")
    parser.add_argument("--hardware")
    parser.add_argument("--costs", type=Path, help="a vllm_serve_sim.py --fit-cpu --out file (the fitted costs)")
    parser.add_argument("--apply-to", type=Path, nargs="+", default=None, metavar="INDEX",
                        help="with --simulate: simulate these (untraced) run indexes instead, each run with the "
                             "measured assignment of the traced run of its cell and seed (a diagnostic: the traced "
                             "session's timing, not the run's own)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    for name in ("runs", "timeline", "costs"):
        path = getattr(args, name)
        if path is not None and not path.is_file():
            parser.exit(2, f"--{name}: {path} is not a file\n")
    if args.simulate and not (args.hardware and args.costs):
        parser.exit(2, "--simulate: needs --hardware and --costs\n")
    index = json.loads(args.runs.read_text())
    measured = assignments(args.timeline, index["runs"])
    counts = {run["name"]: run["api_server_count"] for run in index["runs"]}
    record: dict[str, Any] = {"runs": str(args.runs), "timeline": str(args.timeline),
                              "stats": {name: sequence_stats(seq, counts[name]) for name, seq in measured.items()},
                              "assignment": {name: "".join(map(str, seq)) for name, seq in measured.items()}}
    for name, stats in record["stats"].items():
        print(name, json.dumps(stats), file=sys.stderr)
    record["accepts"] = accepts(args.timeline, index["runs"])
    for name, stats in record["accepts"].items():
        print(name, "accepted", json.dumps({k: v for k, v in stats.items() if k != "request_connection_rank"}),
              file=sys.stderr)
    if args.simulate and args.apply_to:
        by_cell = {(run["load"], run["endpoint"], run["api_server_count"], run["seed"]): measured[run["name"]]
                   for run in index["runs"] if run["name"] in measured}
        record["simulated"] = {}
        for path in args.apply_to:
            other = json.loads(path.read_text())
            given = {run["name"]: by_cell[key] for run in other["runs"] if "excluded" not in run
                     and (key := (run["load"], run["endpoint"], run["api_server_count"], run["seed"])) in by_cell}
            record["simulated"][str(path)] = simulate(other, args.hardware, args.costs, given)
    elif args.simulate:
        record["simulated"] = simulate(index, args.hardware, args.costs, measured)
    elif args.apply_to:
        parser.exit(2, "--apply-to: only with --simulate\n")
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
