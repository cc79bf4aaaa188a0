"""Where the simulated TTFT goes, part by part, against the measured parts of the same traced runs
(docs/benchmark-history/2026-11-30f-serve12.md, section 4): which part of the 20/s load's growth the simulator lacks.

    python benchmarks/ground_truth/sim_ttft_parts.py --runs .../runs-traced.json --hardware .../cal-host.yaml \
        --costs .../sim-2026-11-30c-host.json --out $OUT/parts.json

Each traced run (`vllm_serve_bench.py --timeline`; `switch_interval_ab.py --merged` keeps the per-run `timeline` and
`input_hop_ms`) is simulated as `vllm_serve_sim.py --costs` does, with the simulator's events observed (nothing in it
changes): per request its send, its reach of the engine core (`_Simulation.enter`), its first schedule, the end of the
step that made its first token and when the client saw it. Four parts, means in ms, beside the measured ones
(`vllm_timeline.timeline`'s parts, the run's means):
- intake: send -> reach (measured: client_to_arrival + arrival_to_engine + the input hop, `input_hop_ms`' mean);
- wait: reach -> first schedule (measured: engine_to_queued - the input hop + queued_to_scheduled: the input thread,
  the step under way);
- prompt step: first schedule -> the end of the step with its first token (measured: prefill_step);
- output: that step's end -> the client (measured: output_handoff + output_to_client).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

PARTS = ("intake", "wait", "prompt_step", "output", "ttft")


def measured_parts(run: dict[str, Any]) -> dict[str, float]:
    t = {k: v["mean"] for k, v in run["timeline"].items() if isinstance(v, dict) and "mean" in v}
    hop = run["input_hop_ms"]["mean"]
    parts = {"intake": t["client_to_arrival_ms"] + t["arrival_to_engine_ms"] + hop,
             "wait": t["engine_to_queued_ms"] - hop + t["queued_to_scheduled_ms"],
             "prompt_step": t["prefill_step_ms"],
             "output": t["output_handoff_ms"] + t["output_to_client_ms"]}
    return parts | {"ttft": sum(parts.values())}


def observe() -> dict[str, Any]:
    """Patch the simulator's `_Simulation` to note each request's reach and first token's step end (per run)."""
    from roofline.sim import simulator

    seen: dict[str, Any] = {"reach": {}, "step_end": {}, "recorder": None}
    sim = simulator._Simulation
    enter, end_streamed, run = sim.enter, sim.end_step_streamed, sim.run

    def enter_noted(self: Any, now: float, replica: Any, request: Any, ending: Any = None) -> None:
        seen["reach"][request.request_id] = now
        enter(self, now, replica, request, ending)

    def end_noted(self: Any, now: float, replica: Any, plan: Any) -> None:
        for req, emit in zip(plan.requests, plan.emits):
            if emit:
                seen["step_end"].setdefault(req.request_id, now)
        end_streamed(self, now, replica, plan)

    def run_noted(self: Any, *args: Any, **kwargs: Any) -> None:
        run(self, *args, **kwargs)
        seen["recorder"] = self.recorder

    sim.enter, sim.end_step_streamed, sim.run = enter_noted, end_noted, run_noted  # type: ignore[method-assign]
    return seen


def simulated_parts(seen: dict[str, Any]) -> dict[str, float]:
    rec = seen["recorder"]
    rows: dict[str, list[float]] = {p: [] for p in PARTS}
    for rid, row in rec.row_of.items():
        if rid not in seen["reach"] or rid not in seen["step_end"]:
            continue
        sent, reach = rec.sent[row], seen["reach"][rid]
        sched, end, token = rec.first_scheduled[row], seen["step_end"][rid], rec.first_token[row]
        for part, value in zip(PARTS, (reach - sent, sched - reach, end - sched, token - end, token - sent)):
            rows[part].append(1e3 * value)
    return {p: statistics.mean(v) for p, v in rows.items()}


def main() -> None:
    import vllm_serve_sim

    from roofline.sim.api_server import ApiServerCosts

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True, help="traced runs (switch_interval_ab.py --merged)")
    parser.add_argument("--hardware", required=True)
    parser.add_argument("--costs", type=Path, required=True, help="a vllm_serve_sim.py --out file: its fitted costs")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    fitted = json.loads(args.costs.read_text())
    costs = ApiServerCosts(**fitted["costs"])
    client = fitted.get("client_costs_s")
    index = json.loads(args.runs.read_text())
    seen = observe()
    out: dict[str, Any] = {"runs": {}}
    for run in index["runs"]:
        seen["reach"].clear()
        seen["step_end"].clear()
        one = dict(index, runs=[run])
        predicted = vllm_serve_sim.simulate_all(one, args.hardware, costs, client=client)[run["name"]]
        sim, meas = simulated_parts(seen), measured_parts(run)
        out["runs"][run["name"]] = {"cell": vllm_serve_sim.cell_of(run), "arm": run.get("switch_interval_s"),
                                    "measured_ms": {k: round(v, 3) for k, v in meas.items()},
                                    "simulated_ms": {k: round(v, 3) for k, v in sim.items()},
                                    "simulated_mean_ttft_ms": round(predicted["mean_ttft_ms"], 3),
                                    "measured_mean_ttft_ms": run["result"]["mean_ttft_ms"]}
        print(run["name"], " ".join(f"{p} {meas[p]:.2f}/{sim[p]:.2f}" for p in PARTS))
    cells: dict[str, Any] = {}
    for name, row in out["runs"].items():
        cells.setdefault(row["cell"], []).append(row)
    out["cells"] = {cell: {side: {p: round(statistics.mean(r[side][p] for r in rows), 3) for p in PARTS}
                           for side in ("measured_ms", "simulated_ms")} | {"runs": len(rows)}
                    for cell, rows in cells.items()}
    for cell, row in out["cells"].items():
        print(cell, " ".join(f"{p} {row['measured_ms'][p]:.2f}/{row['simulated_ms'][p]:.2f}" for p in PARTS))
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
