"""The all-reduce of a step without a CUDA graph: the cost model against aiconfigurator-core's eager rows.

    python benchmarks/accuracy/eager_all_reduce.py [--min-mib 16]

vLLM's custom all-reduce called outside a CUDA graph first copies its input into the buffer it registered with its
peers (`roofline.cost.ops.all_reduce_record`); a step of more tokens than the largest captured graph (a prefill of
a long prompt) runs its all-reduces so. aiconfigurator-core's all-reduce tables time the call both ways
(`vllm_graph`, fitted on; `vllm_eager`, never fitted on). For every GPU profile with tables, per number of GPUs:
the measured eager-minus-graph time and what bandwidth one read and one write of the message at that time would
be, then the error on the eager rows of at least `--min-mib` MiB of the graph path alone (the model before the copy
term) and with the copy (`all_reduce_time_s(..., copy_bytes=2 x message)`). Below ~4 MiB the eager rows are
flat at 20-40 us: the host's time per call in the collector's loop, which a serving step's launches overlap with
its kernels (`StepCostModel._combine`), so they are not the device time a step pays and are left out. Last, the
graph rows' own error by message size and number of GPUs (what a step in a graph pays; where the profiles' collective
parameters are fitted).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from roofline.calibration.op_tables import load_op_tables  # noqa: E402
from roofline.cost.hardware import load_profile  # noqa: E402
from roofline.cost.kernels.collectives import all_reduce_time_s  # noqa: E402

# GPU profile -> aiconfigurator-core system with vLLM all-reduce tables.
SYSTEMS = {"h100-sxm": "h100_sxm", "h200-sxm": "h200_sxm", "b200": "b200_sxm", "b300": "b300_sxm",
           "gb200": "gb200", "a100-80gb-sxm": "a100_sxm"}


def _stats(err: np.ndarray) -> str:
    return f"{100 * np.median(np.abs(err)):.1f} / {100 * np.quantile(np.abs(err), 0.9):.1f} % ({100 * np.median(err):+.1f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--min-mib", type=float, default=16.0, help="smallest message (MiB) of the eager rows judged")
    args = parser.parse_args(argv)
    print("| GPU | GPUs | eager - graph at >= min (measured, us) | as a copy's bandwidth (TB/s, read + write) "
          "| graph path alone: median / p90 (bias) | with the copy | rows |")
    print("|---|---|---|---|---|---|---|")
    for pid, system in SYSTEMS.items():
        hw = load_profile(pid)
        graph = load_op_tables(system)["all_reduce"]
        eager = load_op_tables(system, kernels="other").get("all_reduce")
        if eager is None:
            continue
        eager = eager[eager.kernel == "vllm_eager"]
        pooled: list[np.ndarray] = [np.zeros(0), np.zeros(0)]
        for n in sorted(eager.num_devices.unique()):
            e = eager[(eager.num_devices == n) & (eager.message_bytes >= args.min_mib * 2**20)]
            g = graph[graph.num_devices == n].set_index("message_bytes").measured_s
            e = e[e.message_bytes.isin(g.index)]
            if e.empty:
                continue
            size = e.message_bytes.to_numpy(dtype=float)
            extra = e.measured_s.to_numpy() - g.loc[e.message_bytes].to_numpy()
            alone = np.array([all_reduce_time_s(hw, b, int(n)) for b in size])
            copied = np.array([all_reduce_time_s(hw, b, int(n), 2 * b) for b in size])
            measured = e.measured_s.to_numpy()
            rate = 2 * size / extra / 1e12
            pooled = [np.concatenate([pooled[0], alone / measured - 1]), np.concatenate([pooled[1], copied / measured - 1])]
            print(f"| {pid} | {n} | {1e6 * extra.min():.0f}-{1e6 * extra.max():.0f} | "
                  f"{np.min(rate):.1f}-{np.max(rate):.1f} (DRAM {hw.memory_bandwidth_bytes_per_s / 1e12:.2f}) | "
                  f"{_stats(alone / measured - 1)} | {_stats(copied / measured - 1)} | {len(e)} |")
        if len(pooled[0]):
            print(f"| {pid} | all | | | {_stats(pooled[0])} | {_stats(pooled[1])} | {len(pooled[0])} |")
    print("\nGraph rows (the fitted path; training and held-out rows together) by message size, median / p90 (bias):\n")
    bands = ((0, 2**20, "< 1 MiB"), (2**20, 16 * 2**20, "1-16 MiB"), (16 * 2**20, 2**28, "16-256 MiB"))
    print("| GPU | GPUs | " + " | ".join(name for _, _, name in bands) + " |")
    print("|---|---|" + "---|" * len(bands))
    for pid, system in SYSTEMS.items():
        hw = load_profile(pid)
        graph = load_op_tables(system)["all_reduce"]
        for n in sorted(graph.num_devices.unique()):
            cells = []
            for lo, hi, _ in bands:
                g = graph[(graph.num_devices == n) & (graph.message_bytes >= lo) & (graph.message_bytes < hi)]
                predicted = np.array([all_reduce_time_s(hw, float(b), int(n)) for b in g.message_bytes])
                cells.append(_stats(predicted / g.measured_s.to_numpy() - 1) if len(g) else "-")
            print(f"| {pid} | {n} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
