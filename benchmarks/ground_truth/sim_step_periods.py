"""The served engine's step periods against the simulator's for the same runs: does the simulation's wait for the step
under way (a request reaching the engine core mid-step waits for its end) match? For a request arriving at a random time
while the engine steps back to back, the mean wait is E[P^2] / 2E[P] over the step periods P.

    python benchmarks/ground_truth/sim_step_periods.py --runs $D/runs.json --hardware $D/cal-host.yaml \
        --fitted sim-host-after.json --served-step $D/served-step.json --names rate20-completions-a1-r0,...

Measured: each step's forward time from the server's iteration log plus the run's mean time per step outside it
(`served_step_overhead.py`'s `outside_elapsed_ms_per_step`); simulated: the run replayed as `vllm_serve_sim.py` does,
with a `vllm_serve_sim.py --out` file's fitted costs (`costs`, `client_costs_s`), every simulated step's duration.
Per run: the share of steps carrying a prompt, the mean period of those and of the pure decodes, E[P^2] / 2E[P].
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def residual_ms(periods: list[float]) -> float:
    """E[P^2] / 2E[P]: the mean time to the end of the step under way at a random instant of back-to-back steps."""
    return sum(p * p for p in periods) / (2 * sum(periods))


def summary(periods: list[float], prompt: list[bool]) -> dict[str, float]:
    with_prompt = [p for p, k in zip(periods, prompt) if k]
    decode = [p for p, k in zip(periods, prompt) if not k]
    return {"steps": len(periods), "prompt_share": len(with_prompt) / len(periods),
            "prompt_ms": statistics.mean(with_prompt), "decode_ms": statistics.mean(decode),
            "residual_ms": residual_ms(periods)}


def main() -> int:
    import vllm_serve_sim

    from roofline.calibration import vllm_bench
    from roofline.sim.api_server import ApiServerCosts

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--hardware", required=True)
    parser.add_argument("--fitted", type=Path, required=True, help="a vllm_serve_sim.py --out file")
    parser.add_argument("--served-step", type=Path, required=True, help="served_step_overhead.py's --out file")
    parser.add_argument("--names", required=True, help="run names, comma-separated")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    fitted = json.loads(args.fitted.read_text())
    outside = {r["run"]: r["outside_elapsed_ms_per_step"] for r in json.loads(args.served_step.read_text())["rows"]}
    index = json.loads(args.runs.read_text())
    names = args.names.split(",")
    missing = [n for n in names if n not in outside]
    if missing:
        raise SystemExit(f"--names: no outside_elapsed_ms_per_step in --served-step for {', '.join(missing)}")
    results: list[Any] = []
    original = vllm_bench.run_simulation

    def keep(*a: Any, **k: Any) -> Any:
        result = original(*a, **k)
        results.append(result)
        return result

    vllm_bench.run_simulation = keep
    rows = {}
    runs = {r["name"]: r for r in index["runs"]}
    for name in names:
        predicted = vllm_serve_sim.simulate_all(index, args.hardware, ApiServerCosts(**fitted["costs"]), {name},
                                                client=fitted["client_costs_s"])[name]
        steps = results[-1].steps
        sim = summary(list(steps["duration_s"] * 1e3), list(steps["num_prefill_tokens"] > 0))
        served = runs[name]["engine_steps"]
        meas = summary([s[5] + outside[name] for s in served], [s[1] > 0 for s in served])
        rows[name] = {"measured": meas, "simulated": sim, "mean_ttft_ms": {
            "measured": runs[name]["result"]["mean_ttft_ms"], "simulated": predicted["mean_ttft_ms"]}}
        print(f"{name}: TTFT {rows[name]['mean_ttft_ms']['measured']:.1f} measured, "
              f"{rows[name]['mean_ttft_ms']['simulated']:.1f} simulated")
        for side, s in (("measured", meas), ("simulated", sim)):
            print(f"  {side:9} {s['steps']} steps, {s['prompt_share'] * 100:.0f} % with a prompt: {s['prompt_ms']:.2f} ms,"
                  f" decodes {s['decode_ms']:.2f} ms; E[P^2]/2E[P] {s['residual_ms']:.2f} ms")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
