"""Two builds of the simulator timed against each other: `benchmarks/speed/sim_speed.py` (10,000 requests by default) run in
fresh processes from two source trees, alternating, and the ratio of their median in-process CPU times.

    git worktree add --detach $OUT/wt-a5a1f9e a5a1f9e       # the build to compare with (issue 20's "today")
    python benchmarks/speed/sim_speed_ab.py --rounds 12 $OUT/wt-a5a1f9e .

Each tree runs its own `benchmarks/speed/sim_speed.py` with `PYTHONPATH` set to it, so each imports its own `roofline`.
Prints one line per round (both CPU times, their ratio, the load average) and the medians' ratio with the range of
the per-round ratios: this machine's speed drifts between runs a minute apart, so alternate and report the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def cpu_s(tree: Path, num_requests: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
    script = next(path for path in ("benchmarks/speed/sim_speed.py", "benchmarks/sim_speed.py")  # before the move
                  if (tree / path).exists())
    out = subprocess.run([sys.executable, script, "--num-requests", str(num_requests)], cwd=tree,
                         env=env, capture_output=True, text=True, check=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["cpu_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="source tree of the build compared with")
    parser.add_argument("candidate", type=Path, help="source tree of the build measured")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--num-requests", type=int, default=10_000)
    args = parser.parse_args()
    base, cand = [], []
    for i in range(args.rounds):
        base.append(cpu_s(args.base.resolve(), args.num_requests))
        cand.append(cpu_s(args.candidate.resolve(), args.num_requests))
        print(f"round {i}: base {base[-1]:.3f} s, candidate {cand[-1]:.3f} s, ratio {base[-1] / cand[-1]:.3f}, "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
    ratios = [b / c for b, c in zip(base, cand)]
    print(f"medians: base {statistics.median(base):.3f} s, candidate {statistics.median(cand):.3f} s, ratio "
          f"{statistics.median(base) / statistics.median(cand):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
