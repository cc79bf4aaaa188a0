"""A speed change changes no result: `roofline simulate` of this tree against an earlier commit's, byte for byte, on
the cases the simulator's loop has paths for.

    python benchmarks/speed/identity.py --baseline REF [--case NAME ...] [--out DIR]

Each case is one `roofline simulate ... --out DIR` run with the baseline commit (checked out into a temporary git
worktree and run from there, so its own modules are imported) and one with this tree; compared byte for byte: what
the run printed (the vLLM-style result block and summary, or the `--json` summary), requests.csv, steps.parquet,
timeseries.csv, summary.json and run.json. The cases: the README's workload (overloaded, with preemptions), with
`--json` and another seed, a prefix-cache workload (multi-turn sessions), a preemption-heavy one (a small KV cache),
no prefix caching, chunked prefill off on long prompts, all requests at once, a closed loop behind two API-server
processes, two replicas under the least-outstanding router, pipeline parallelism, an MoE model with data and expert
parallelism, and prediction intervals. Exit 0 when every case is identical, 1 otherwise.
(`benchmarks/ground_truth/output_identity.py` is the older list of the shipped workloads at their defaults.)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FILES = ("stdout.txt", "requests.csv", "steps.parquet", "timeseries.csv", "summary.json", "run.json")
README = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--workload", "sharegpt-chat"]

CASES: dict[str, list[str]] = {
    "readme-2000": [*README, "--request-rate", "10", "--num-requests", "2000"],
    "readme-json-seed3": [*README, "--request-rate", "10", "--num-requests", "1000", "--seed", "3", "--json"],
    "prefix-multi-turn": ["--workload", "multi-turn-chat", "--num-requests", "400", "--request-rate", "4"],
    "preempt-small-cache": [*README, "--request-rate", "20", "--num-requests", "600", "--num-gpu-blocks-override",
                            "3000", "--max-model-len", "16384", "--seed", "5"],
    "no-prefix-cache": [*README, "--request-rate", "12", "--num-requests", "800", "--no-enable-prefix-caching",
                        "--seed", "7"],
    "no-chunked-long": ["--workload", "long-summarization", "--num-requests", "200", "--no-enable-chunked-prefill",
                        "--max-model-len", "16384", "--max-num-batched-tokens", "16384"],
    "offline-batch": ["--workload", "offline-batch", "--num-requests", "400"],
    "closed-loop-2-api": [*README, "--num-requests", "500", "--request-rate", "inf", "--max-concurrency", "64",
                          "--api-server-count", "2"],
    "70b-tp4-2-replicas": ["--model", "llama-3.1-70b", "--tensor-parallel-size", "4", "--num-replicas", "2",
                           "--router", "least_outstanding", "--workload", "sharegpt-chat", "--num-requests", "400",
                           "--request-rate", "6"],
    "pp2": ["--model", "llama-3.1-70b", "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2",
            "--workload", "sharegpt-chat", "--num-requests", "300", "--request-rate", "5"],
    "moe-dp2-ep": ["--model", "qwen3-30b-a3b", "--data-parallel-size", "2", "--enable-expert-parallel",
                   "--workload", "sharegpt-chat", "--num-requests", "300", "--request-rate", "8"],
    "intervals": [*README, "--num-requests", "300", "--request-rate", "8", "--intervals", "--interval-samples", "4"],
}


def simulate(tree: Path, case_args: list[str], out: Path) -> float:
    """One run from `tree` into `out` (its stdout as stdout.txt); returns its wall seconds."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "roofline", "simulate", *case_args, "--out", str(out)], cwd=tree,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: roofline simulate {' '.join(case_args)} failed:\n{proc.stderr.decode()[-2000:]}")
    (out / "stdout.txt").write_bytes(proc.stdout.replace(str(out).encode(), b"$OUT"))
    return time.perf_counter() - started


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.exists() else "missing"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="git commit (or ref) whose outputs are the reference")
    parser.add_argument("--out", type=Path, default=None, help="keep both sets of outputs here")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="run only these cases")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="roofline-identity-") as tmp:
        out = args.out or Path(tmp) / "out"
        baseline = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(baseline), args.baseline], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        all_same = True
        try:
            for name in args.case or list(CASES):
                base_s = simulate(baseline, CASES[name], out / "baseline" / name)
                this_s = simulate(REPO, CASES[name], out / "current" / name)
                diffs = [f for f in FILES if digest(out / "baseline" / name / f) != digest(out / "current" / name / f)]
                missing = [f for f in FILES if not (out / "current" / name / f).exists()]
                all_same &= not diffs
                print(f"{name:20s} {'identical' if not diffs else 'DIFFERENT: ' + ', '.join(diffs)}"
                      f"{' (absent in both: ' + ', '.join(missing) + ')' if missing else ''}"
                      f"  wall {base_s:.1f} s -> {this_s:.1f} s", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(baseline)], cwd=REPO, check=False)
    print("all cases identical" if all_same else "some cases differ")
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
