"""How sure the GPU families' host terms are: the `host.host_time_uncertainty` field (`roofline.cost.host_uncertainty`)
of the family files, from the documented ranges behind each term (below, with their sources). Never the end-to-end
judge, nothing fitted.

    python benchmarks/ground_truth/host_time_uncertainty.py          # the ranges and their sources (JSON)
    python benchmarks/ground_truth/host_time_uncertainty.py --yaml   # the host: field as YAML

Each entry is a documented range of a stated value, as a ratio to it (low, high), read as the support of a
log-uniform distribution (no value in the range more likely than another; its quantiles at
`roofline.calibration.uncertainty.LEVELS`: low x (high / low) ^ level). `roofline simulate --intervals` draws one
factor per entry and sample (`roofline.sim.intervals.IntervalSpec.profiles`):

- `assumed_cpu_speed`: the GPU server's host CPU taken to run one thread 2.0x the reference host's
  (`host.single_thread_speed_relative`), from HF tokenizers' time per token: 1.07 us on a DGX H100 host
  (vllm-project/vllm issue #19012, `tokenizer('hi ' * 10000)`, 10.7 ms) against 1.67-2.4 us on the reference host
  (benchmarks/tokenize_random_prompts.py: 1.8-2.4 us across runs with the reference string, 1.67 us with o200k;
  docs/benchmark-history/2026-11-25.md, "Does the random dataset's text tokenize slower?"): 1.56-2.24x. Divides the
  terms measured on the reference host and scaled by that speed: the API server's reference costs and
  `executor.step_overhead_us`.
- `server_cpu_speed`: which host CPU the GPU server has: NVIDIA's DGX datasheets name the Xeon Platinum 8480C (DGX
  H100 / H200, 3.8 GHz max boost), the Xeon Platinum 8570 (DGX B200, 4.0 GHz, the same core generation) and the Xeon
  6776P (DGX B300, 3.9 GHz): one thread 1.0-1.053x the assumed 8480C's by clock (a lower bound of the spread: other
  servers' CPUs, e.g. AMD EPYC in HGX boards, not compared). Divides every host term.
- `step_overhead`: `executor.step_overhead_us`'s own measurement, 2.85 ms of 3 rounds 2.78-2.93 ms
  (benchmarks/ground_truth/vllm_sync_step.py; BENCHMARKS.md, "vLLM's synchronous step on the host").
- `step_overhead_per_seq`: `executor.step_overhead_per_seq_us` (15.9 us: 5.5 ms less the fixed 1.42 ms over 256
  sequences), from the GPU's 5-6 ms idle between synchronous decode steps at batch 256 (vllm-project/vllm issue
  #10634, PR #11133): (5.0 - 1.42) / 256 to (6.0 - 1.42) / 256 us.
- `kernel_launch`: `executor.kernel_launch_us` (40 us), from public A/B runs of vLLM's CUDA-graph modes: 33-44 us a
  launch (vllm-project/vllm issue #45709; benchmarks/ground_truth/host_launch_evidence.py).
- `step_gap`: `executor.step_gap_us` (160 us), the device's idle gap between asynchronous decode steps: 150-170 us
  (vllm-project/vllm PR #11133).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from roofline.calibration.uncertainty import LEVELS  # noqa: E402

COMMAND = "python benchmarks/ground_truth/host_time_uncertainty.py --yaml"
DIGITS = 4
ASSUMED_SPEED = 2.0  # host.single_thread_speed_relative of the GPU families
STEP_OVERHEAD_MS = 2.85  # the sync-step measurement's fixed part on the reference host
FIXED_AT_SPEED_MS = 1.42  # executor.step_overhead_us at the assumed speed
PER_SEQ_US = 15.9  # executor.step_overhead_per_seq_us

# name -> (low, high) as a ratio to the stated value; the names in `roofline.cost.host_uncertainty.HOST_TIME_TERMS`
# order (the draw order).
RANGES: dict[str, tuple[float, float]] = {
    "assumed_cpu_speed": (1.67 / 1.07 / ASSUMED_SPEED, 2.4 / 1.07 / ASSUMED_SPEED),
    "server_cpu_speed": (3.8 / 3.8, 4.0 / 3.8),
    "step_overhead": (2.78 / STEP_OVERHEAD_MS, 2.93 / STEP_OVERHEAD_MS),
    "step_overhead_per_seq": ((5.0 - FIXED_AT_SPEED_MS) / 256 * 1e3 / PER_SEQ_US,
                              (6.0 - FIXED_AT_SPEED_MS) / 256 * 1e3 / PER_SEQ_US),
    "kernel_launch": (33 / 40, 44 / 40),
    "step_gap": (150 / 160, 170 / 160),
}


def quantiles(low: float, high: float) -> list[float]:
    """The log-uniform distribution over [low, high] at LEVELS (ratios, `DIGITS` significant digits)."""
    return [float(f"{low * (high / low) ** q:.{DIGITS}g}") for q in LEVELS]


def host_section() -> dict[str, Any]:
    """The `host_time_uncertainty` field (`roofline.cost.host_uncertainty`), YAML units (ratios)."""
    return {"host_time_uncertainty": {
        "method": "per host term, the documented range of its stated value as a ratio to it, read as the support of "
                  "a log-uniform distribution; quantiles at levels. assumed_cpu_speed (tokenizer time per token, DGX "
                  "H100 against the reference host) and server_cpu_speed (the DGX hosts' CPUs by max boost clock) on "
                  "the host's single-thread speed; step_overhead, step_overhead_per_seq, kernel_launch and step_gap on "
                  "the executor's terms of those names; sources in the command's docstring. Never the end-to-end "
                  "judge",
        "command": COMMAND, "levels": list(LEVELS),
        "ratio_to_stated": {name: quantiles(*r) for name, r in RANGES.items()}}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--yaml", action="store_true", help="print the host: field as YAML (else the ranges)")
    args = parser.parse_args(argv)
    if args.yaml:
        from roofline.cost.profile_yaml import profile_yaml
        print(profile_yaml(host_section()), end="")
    else:
        print(json.dumps({name: {"low": low, "high": high} for name, (low, high) in RANGES.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
