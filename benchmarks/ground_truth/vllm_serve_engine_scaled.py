"""A diagnostic for one server session: its runs, with the profile's engine made as much slower as the session's own
logged engine steps were (vllm_serve_engine_speed.py's ratios), for vllm_serve_sim.py to replay
(docs/benchmark-history/2026-11-30i-serve18.md, section 4):

    python benchmarks/ground_truth/vllm_serve_engine_scaled.py --runs $R/2026-11-30e-serve11/runs-sessions.json \
        --suffix -s1 --speed $O/engine-speed.json --hardware $R/2026-11-30c/cal-host.yaml \
        --costs $S/sim-2026-11-30c-host-busy-hop.json --out-dir $OUT/s1
    python benchmarks/ground_truth/vllm_serve_sim.py --runs $OUT/s1/runs.json --hardware $OUT/s1/hardware.yaml \
        --costs $OUT/s1/costs.json --out $OUT/s1/sim.json

The factor: the mean of the session's runs' `engine_step_ratio` (its runs whose name ends with `--suffix`, e.g.
`--suffix=-a2-r1` for `vllm_serve_bench.py --interleave`'s session a2 r1; two-process runs have steps with `--engine-steps`).
It divides the profile's peak FLOP rates, memory bandwidth and weight-streaming rates and multiplies its per-step
executor overheads, and multiplies the API-server costs' engine-core terms (`engine_step_s`,
`engine_admit_step_s`, `engine_new_request_s`, `engine_prompt_token_s`). Only the engine's core: the API server's
and the client's costs are left as fitted, unless `--api-too`, which scales core 0's CPU costs (`CORE0_COSTS` and
`client_costs_s`) by the mean of the runs' `api_cpu_ratio` (the API server's CPU per request against the reference
session's). Not the model: a check of how much of a session's error its measured engine
speed accounts for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import yaml

ENGINE_COSTS = ("engine_step_s", "engine_admit_step_s", "engine_new_request_s", "engine_prompt_token_s")
# The CPU work on core 0 (the API server's loop and renderer, the client's): with --api-too
CORE0_COSTS = ("request_s", "chat_request_s", "prompt_token_s", "output_pass_s", "output_token_s",
               "chat_output_token_s", "render_request_s", "client_request_s", "client_output_token_s")
EXECUTOR_TIMES = ("kernel_launch_us", "step_overhead_per_seq_us", "step_overhead_us")


def scaled_hardware(profile: dict, factor: float) -> dict:
    """The profile with its engine `factor` times slower (module docstring)."""
    out = json.loads(json.dumps(profile))
    out["peak_tflops"] = {k: v / factor for k, v in out["peak_tflops"].items()}
    out["memory_bandwidth_gb_per_s"] = out["memory_bandwidth_gb_per_s"] / factor
    for kernel in (out.get("weight_streaming") or {}).values():
        kernel["gb_per_s"] = [v / factor for v in kernel["gb_per_s"]]
    for key in EXECUTOR_TIMES:
        if out.get("executor", {}).get(key) is not None:
            out["executor"][key] = out["executor"][key] * factor
    out["name"] = f"{out['name']} (engine x{factor:.3f} slower)"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--suffix", required=True, help="the session's runs: names ending with it, e.g. -s1")
    parser.add_argument("--speed", type=Path, required=True, help="vllm_serve_engine_speed.py's --out")
    parser.add_argument("--hardware", type=Path, required=True)
    parser.add_argument("--costs", type=Path, required=True, help="vllm_serve_sim.py --out of a fit")
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--api-too", action="store_true",
                        help="also scale core 0's CPU costs (the API server's and the client's, client_costs_s too) by "
                             "the mean of the session's runs' api_cpu_ratio")
    args = parser.parse_args()
    index = json.loads(args.runs.read_text())
    runs = [r for r in index["runs"] if r["name"].endswith(args.suffix)]
    names = {r["name"] for r in runs}
    ratios = [row["engine_step_ratio"] for row in json.loads(args.speed.read_text())["rows"]
              if row["run"] in names and row["engine_step_ratio"] is not None
              and Path(row["session"]).resolve() == args.runs.resolve()]
    if not ratios:
        parser.exit(2, f"--suffix: {args.suffix}: no run of {args.runs} with an engine_step_ratio in "
                       f"{args.speed}\n")
    factor = statistics.fmean(ratios)
    api_ratios = [row["api_cpu_ratio"] for row in json.loads(args.speed.read_text())["rows"]
                  if row["run"] in names and row.get("api_cpu_ratio") is not None
                  and Path(row["session"]).resolve() == args.runs.resolve()]
    if args.api_too and not api_ratios:
        parser.exit(2, f"--api-too: no api_cpu_ratio for {args.suffix}'s runs in {args.speed}\n")
    api_factor = statistics.fmean(api_ratios) if args.api_too else 1.0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "runs.json").write_text(json.dumps({**index, "runs": runs}) + "\n")
    profile = yaml.safe_load(args.hardware.read_text())
    (args.out_dir / "hardware.yaml").write_text(yaml.safe_dump(scaled_hardware(profile, factor), sort_keys=False))
    fitted = json.loads(args.costs.read_text())
    fitted["costs"] = {k: v * factor if k in ENGINE_COSTS else v * api_factor if k in CORE0_COSTS else v
                       for k, v in fitted["costs"].items()}
    if fitted.get("client_costs_s"):
        fitted["client_costs_s"] = {k: v * api_factor for k, v in fitted["client_costs_s"].items()}
    fitted["engine_scaled"] = {"factor": factor, "api_factor": api_factor, "runs": sorted(names),
                               "from": str(args.costs)}
    (args.out_dir / "costs.json").write_text(json.dumps(fitted) + "\n")
    print(f"{args.suffix}: {len(runs)} runs, engine x{factor:.3f} ({len(ratios)} ratios), core 0 x{api_factor:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
