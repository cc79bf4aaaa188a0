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
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np

from roofline.cost.hardware import load_profile
from roofline.engine_args import EngineArgs
from roofline.sim.api_server import without_api_server
from roofline.sim.simulator import SimulationOptions, make_deployment, run_simulation
from roofline.sim.workload import ArrivalProcess, load_workload


def measured_slopes(runs: Path) -> dict[str, float]:
    """Per endpoint: the median over repeats of the least-squares slope of client TTFT on send position (s per
    request) in the 1,000-prompt bursts with one API-server process."""
    index = json.loads(runs.read_text())
    slopes: dict[str, list[float]] = {}
    for run in index["runs"]:
        if run["load"] != "burst1000" or run["api_server_count"] != 1:
            continue
        result = run["result"]
        sent = np.array(result["start_times"]) - np.array(result.get("queue_times", [0.0] * len(result["ttfts"])))
        ttft = np.array(result["ttfts"])
        order = np.argsort(sent, kind="stable")
        slopes.setdefault(run["endpoint"], []).append(float(np.polyfit(np.arange(len(ttft)), ttft[order], 1)[0]))
    return {endpoint: statistics.median(values) for endpoint, values in slopes.items()}


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
    fig, ax = plt.subplots(figsize=(8, 5))
    curves = {"simulated, API server (1 process)": (hw, SimulationOptions()),
              "simulated, API server (2 processes)": (hw, SimulationOptions(api_server_count=2)),
              "simulated, no API server (before)": (without_api_server(hw), SimulationOptions())}
    for label, (profile, options) in curves.items():
        result = run_simulation(make_deployment("llama-3.1-8b", profile, EngineArgs()), workload, options)
        ttft = result.requests.ttft_s.to_numpy()  # in send order: all sent at 0, in workload order
        slope = np.polyfit(np.arange(len(ttft)), ttft, 1)[0]
        print(f"{label}: TTFT median {np.median(ttft):.2f} s, slope {slope * 1e3:.2f} ms per position")
        ax.plot(np.arange(len(ttft)), ttft, label=f"{label}: {slope * 1e3:.1f} ms/position")
    speed = hw.host.single_thread_speed_relative
    for endpoint, slope in sorted(measured_slopes(args.runs).items()):
        print(f"measured on this CPU host, {endpoint}, 1,000-prompt burst (128-token prompts): {slope * 1e3:.2f} ms "
              f"per position; on the H100 profile's host ({speed}x): {slope / speed * 1e3:.2f}")
        x = np.arange(1000)
        ax.plot(x, x * slope / speed, linestyle="--",
                label=f"measured API-server slope ({endpoint}, CPU host / {speed}): {slope / speed * 1e3:.2f} ms/position")
    ax.set_xlabel("position in the burst (send order)")
    ax.set_ylabel("TTFT (s)")
    ax.set_title("1,000 ShareGPT-length prompts at once, Llama-3.1-8B on one H100 SXM")
    ax.legend(fontsize=7)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
