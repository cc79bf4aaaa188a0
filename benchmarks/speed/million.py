"""Issue 42 item 1, side by side in one run: `roofline simulate` of the README's workload as a user runs it (a
whole process: its start, the simulation, vLLM's result block, the summary), timed from outside, against the
targets.

    python benchmarks/speed/million.py                          # 1,000,000 and 10,000 requests, --out overhead
    python benchmarks/speed/million.py --num-requests 100000    # a shorter large run
    python benchmarks/speed/million.py --skip-large --out-rounds 3

Each run is `python -m roofline simulate --model llama-3.1-8b --hardware h100-sxm --workload sharegpt-chat
--num-requests N --request-rate 10` in a child process; wall time from here, CPU time (user + system) and peak
RSS (the child's `ru_maxrss`) from `os.wait4`. The targets (issue 42): 1,000,000 requests in <= 60 s wall and
<= 4 GB peak RSS; 10,000 requests in <= 1 s of CPU, judged on the whole process as a user runs it (reported also
without the process's own start, `roofline simulate --num-requests 1`, which is measured too); `--out` adds at most
25 % (rounds of the 10,000-request run without and with `--out`, alternating). Before the runs the repository's
packages are compiled to bytecode (`compileall`), as an installed package is: with `PYTHONDONTWRITEBYTECODE` set
(this project's sessions set it) every process would otherwise compile the project's modules it imports from source
(BENCHMARKS.md, Simulator speed). The load average before and after each run is printed with it: CPU and wall times
of a loaded machine are no measurements of the simulator (peak RSS is). Prints one JSON object per run as it ends,
then the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--workload", "sharegpt-chat",
            "--request-rate", "10"]
TARGETS = {"large_wall_s": 60.0, "large_rss_gb": 4.0, "small_cpu_s": 1.0, "out_overhead": 0.25}


def loadavg() -> str:
    """The 1-, 5- and 15-minute load averages (Linux)."""
    path = Path("/proc/loadavg")
    return " ".join(path.read_text().split()[:3]) if path.exists() else "?"


def run(num_requests: int, out: Path | None = None) -> dict[str, object]:
    """One `roofline simulate` process: its wall and CPU seconds and peak RSS."""
    argv = [sys.executable, "-m", "roofline", "simulate", *WORKLOAD, "--num-requests", str(num_requests)]
    if out is not None:
        argv += ["--out", str(out)]
    before = loadavg()
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    stdout, stderr = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    if status != 0:
        raise SystemExit(f"roofline simulate --num-requests {num_requests} failed:\n{stderr.decode()[-2000:]}")
    served = next((line for line in stdout.decode().splitlines() if line.startswith("Output token throughput")), "")
    record = {"num_requests": num_requests, "out": out is not None, "wall_s": round(wall, 2),
              "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
              "loadavg_before": before, "loadavg_after": loadavg(), "output_throughput": served.split()[-1:]}
    print(json.dumps(record), flush=True)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-requests", type=int, default=1_000_000, help="the large run (default 1,000,000)")
    parser.add_argument("--small", type=int, default=10_000, help="the small run (default 10,000)")
    parser.add_argument("--out-rounds", type=int, default=2, help="rounds without and with --out (default 2; 0: none)")
    parser.add_argument("--skip-large", action="store_true", help="leave out the large run")
    args = parser.parse_args()

    subprocess.run([sys.executable, "-m", "compileall", "-q", "roofline", "engine"], cwd=REPO, check=True)
    start = run(1)
    small = [run(args.small) for _ in range(2)]
    rows = [("process start (1 request)", f"{start['cpu_s']} s CPU", "", "")]
    small_cpu = min(float(r["cpu_s"]) for r in small)  # type: ignore[arg-type]
    sim_cpu = small_cpu - float(start["cpu_s"])  # type: ignore[arg-type]
    judged = args.small == 10_000  # (the CPU target is of 10,000 requests)
    rows.append((f"{args.small:,} requests, CPU (best of 2)", f"{small_cpu:.2f} s whole process, {sim_cpu:.2f} s "
                 f"without the start", f"<= {TARGETS['small_cpu_s']} s, the whole process (as a user runs it)"
                 if judged else "", _met(small_cpu <= TARGETS["small_cpu_s"]) if judged else ""))
    with tempfile.TemporaryDirectory() as tmp:
        plain, written = [], []
        for i in range(args.out_rounds):
            plain.append(run(args.small))
            written.append(run(args.small, Path(tmp) / f"out-{i}"))
    for key in ("wall_s", "cpu_s") if args.out_rounds else ():
        a = statistics.median(float(r[key]) for r in plain)  # type: ignore[arg-type]
        b = statistics.median(float(r[key]) for r in written)  # type: ignore[arg-type]
        overhead = b / a - 1
        rows.append((f"--out, {args.small:,} requests, {key[:-2]} (median of {args.out_rounds})",
                     f"{a:.2f} -> {b:.2f} s: {overhead:+.1%}", f"<= +{TARGETS['out_overhead']:.0%}",
                     _met(overhead <= TARGETS["out_overhead"])))
    if args.out_rounds:
        rows.append((f"--out, {args.small:,} requests, peak RSS", f"{plain[0]['peak_rss_mb']} -> "
                     f"{written[0]['peak_rss_mb']} MB", "", ""))
    if not args.skip_large:
        large = run(args.num_requests)
        rss_gb = float(large["peak_rss_mb"]) / 1024  # type: ignore[arg-type]
        rows.append((f"{args.num_requests:,} requests, wall", f"{large['wall_s']} s (CPU {large['cpu_s']} s)",
                     f"<= {TARGETS['large_wall_s']:.0f} s", _met(float(large["wall_s"]) <= TARGETS["large_wall_s"])))  # type: ignore[arg-type]
        rows.append((f"{args.num_requests:,} requests, peak RSS", f"{rss_gb:.2f} GB",
                     f"<= {TARGETS['large_rss_gb']:.0f} GB", _met(rss_gb <= TARGETS["large_rss_gb"])))
    width = max(len(r[0]) for r in rows)
    print(f"\n{'figure':<{width}}  measured | target | met")
    for name, value, target, met in rows:
        print(f"{name:<{width}}  {value} | {target} | {met}")


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


if __name__ == "__main__":
    main()
