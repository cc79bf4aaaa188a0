"""What `--out` adds to a simulation's time (issue 20: at most 25 %), on the saturated ShareGPT-like benchmark
(`benchmarks/speed/sim_speed.py`, 10,000 requests) and on the issue's request list (Llama-2-7B on H100, 10,000 requests,
Poisson 8 req/s, `benchmarks/speed/vs_vidur.py`'s `request_list`, seed 0, `--max-num-seqs 128`).

    python benchmarks/speed/out_overhead.py --rounds 8

Each round runs the four commands in fresh processes (each workload without and with `--out`, in that order); wall
time around the child and its CPU time (user + system, `os.wait4`). Prints the median of each, the overhead of
`--out` by the medians and the range of the per-round overheads, and each child's peak RSS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vs_vidur import request_list  # this folder: the script's own directory is on sys.path

REPO = Path(__file__).resolve().parents[2]


def child(cmd: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one fresh process."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="out-overhead-"))
    trace = work / "requests.csv"
    request_list(10_000, 8.0, 0).to_csv(trace, index=False)
    listed = [sys.executable, "-m", "roofline", "simulate", "--model", "llama-2-7b", "--hardware", "h100-sxm",
              "--workload", str(trace), "--max-num-seqs", "128", "--json"]
    cases = {"sharegpt": [sys.executable, "benchmarks/speed/sim_speed.py"],
             "sharegpt --out": [sys.executable, "benchmarks/speed/sim_speed.py", "--out", str(work / "out")],
             "list": listed, "list --out": [*listed, "--out", str(work / "out")]}
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
    for i in range(args.rounds):
        for name, cmd in cases.items():
            shutil.rmtree(work / "out", ignore_errors=True)
            runs[name].append(child(cmd))
        print(f"round {i}: " + ", ".join(f"{n} {r[-1][0]:.2f} s" for n, r in runs.items()), flush=True)
    for base in ("sharegpt", "list"):
        plain, out = runs[base], runs[base + " --out"]
        wall0, wall1 = (statistics.median(r[0] for r in x) for x in (plain, out))
        cpu0, cpu1 = (statistics.median(r[1] for r in x) for x in (plain, out))
        pairs = [o[0] / p[0] - 1 for p, o in zip(plain, out)]
        print(f"{base}: wall {wall0:.2f} -> {wall1:.2f} s ({wall1 / wall0 - 1:+.1%}, rounds {min(pairs):+.1%} to "
              f"{max(pairs):+.1%}); CPU {cpu0:.2f} -> {cpu1:.2f} s ({cpu1 / cpu0 - 1:+.1%}); peak RSS "
              f"{statistics.median(r[2] for r in plain):.0f} / {statistics.median(r[2] for r in out):.0f} MB")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
