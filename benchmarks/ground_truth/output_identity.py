"""Simulator outputs of this tree against those of an earlier commit, file by file (a refactor changes no result).

    python benchmarks/ground_truth/output_identity.py --baseline 479dcdb [--candidate REF] [--out DIR] [--case sharegpt-chat ...]

For every case, runs `roofline simulate --out` once with the baseline commit (checked out into a temporary git
worktree, run from there so its own modules are imported) and once with this tree, and compares what the run printed
(the vLLM-style result block and summary, or the `--json` summary; the output folder's path written as $OUT),
`requests.csv`, `steps.parquet`, `sequences.parquet`, `timeseries.csv` and `summary.json` byte for byte; a step trace
(steps.parquet, and sequences.parquet from the step trace's schema version 2 on) whose bytes differ counts as the same
when the table `engine.core.trace.read_trace_table` of this tree reads back from it (values, types, column order: the
DataFrame `read_trace` gives) is, and is reported as re-encoded, with the schema versions where they differ (the
writer's encoding options or the files' layout changed, not the result). Against a baseline of schema version 1 (no
sequences.parquet), the printout's list of the files written is compared without sequences.parquet. The cases: each
shipped workload with the default deployment; a tensor-parallel, two-replica deployment under the least-outstanding
router; and the paths of the simulator's loop: the README's workload (overloaded, with preemptions), with `--json` and
another seed, a preemption-heavy one (a small KV cache), no prefix caching, chunked prefill off on long prompts, a
closed loop behind two API-server processes, pipeline parallelism, an MoE model with data and expert parallelism, and
prediction intervals; and the printout's own paths, most of them without `--out` (the printout alone, from the tables'
numpy columns without pandas): the verbose block with SLOs, goodput and every percentile metric, a run that keeps up
(steady state) with --warmup-s/--drain, an open-loop burst, a closed loop's client-queue metrics in `--json`, a trace
replay (its load over time), intervals with SLOs, and `--save-result --save-detailed`'s result JSON. Besides the files
named, load_over_time.csv and the result JSON are compared. `run.json` is compared too but reported apart: its
metadata may change with a documented schema change. A build from 51ee9e7 up to 6b0fa82 (data folders moved, registry
not yet reading a checkout's own folders) reads the data of the installed editable checkout instead of its worktree's:
take baselines before 51ee9e7 or from 6b0fa82 on. Exit 0 when every compared file is identical, 1 otherwise."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULT_FILES = ("stdout.txt", "requests.csv", "steps.parquet", "sequences.parquet", "timeseries.csv", "summary.json",
                "load_over_time.csv", "result.json")
TRACE_FILES = ("steps.parquet", "sequences.parquet")
README = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--workload", "sharegpt-chat"]

CASES: dict[str, list[str]] = {
    "sharegpt-chat": ["--workload", "sharegpt-chat"],
    "multi-turn-chat": ["--workload", "multi-turn-chat"],
    "code-completion": ["--workload", "code-completion"],
    "long-summarization": ["--workload", "long-summarization"],
    "offline-batch": ["--workload", "offline-batch"],
    "70b-tp4-2-replicas": ["--model", "llama-3.1-70b", "--tensor-parallel-size", "4", "--num-replicas", "2",
                           "--router", "least_outstanding", "--workload", "sharegpt-chat", "--num-requests", "400",
                           "--request-rate", "6", "--slo-ttft-s", "1", "--slo-tpot-s", "0.05"],
    "readme-2000": [*README, "--request-rate", "10", "--num-requests", "2000"],
    "readme-json-seed3": [*README, "--request-rate", "10", "--num-requests", "1000", "--seed", "3", "--json"],
    "preempt-small-cache": [*README, "--request-rate", "20", "--num-requests", "600", "--num-gpu-blocks-override",
                            "3000", "--max-model-len", "16384", "--seed", "5"],
    "no-prefix-cache": [*README, "--request-rate", "12", "--num-requests", "800", "--no-enable-prefix-caching",
                        "--seed", "7"],
    "no-chunked-long": ["--workload", "long-summarization", "--num-requests", "200", "--no-enable-chunked-prefill",
                        "--max-model-len", "16384", "--max-num-batched-tokens", "16384"],
    "closed-loop-2-api": [*README, "--num-requests", "500", "--request-rate", "inf", "--max-concurrency", "64",
                          "--api-server-count", "2"],
    "pp2": ["--model", "llama-3.1-70b", "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2",
            "--workload", "sharegpt-chat", "--num-requests", "300", "--request-rate", "5"],
    "moe-dp2-ep": ["--model", "qwen3-30b-a3b", "--data-parallel-size", "2", "--enable-expert-parallel",
                   "--workload", "sharegpt-chat", "--num-requests", "300", "--request-rate", "8"],
    "intervals": [*README, "--num-requests", "300", "--request-rate", "8", "--intervals", "--interval-samples", "4"],
    "verbose-slo-goodput-no-out": [*README, "--request-rate", "10", "--num-requests", "1000", "--verbose",
                                   "--slo-ttft-s", "0.5", "--slo-tpot-s", "0.05", "--goodput", "ttft:500", "tpot:50",
                                   "e2el:20000", "--percentile-metrics", "ttft,tpot,itl,e2el",
                                   "--metric-percentiles", "50,90,99,99.9"],
    "readme-2000-no-out": [*README, "--request-rate", "10", "--num-requests", "2000"],
    "steady-window-verbose": [*README, "--request-rate", "4", "--num-requests", "800", "--verbose", "--warmup-s",
                              "20", "--drain", "--slo-ttft-s", "0.3"],
    "burst-verbose-no-out": [*README, "--request-rate", "inf", "--num-requests", "300", "--verbose"],
    "closed-loop-json-no-out": [*README, "--request-rate", "5", "--num-requests", "400", "--max-concurrency", "16",
                                "--percentile-metrics", "ttft,e2el,client_queue_time,e2el_including_client_queue",
                                "--json", "--slo-ttft-s", "1"],
    "trace-azure-no-out": ["--workload", "tests/data/azure-llm-conv-2023-head20.csv", "--verbose", "--slo-ttft-s",
                           "0.05"],
    "intervals-slo-no-out": [*README, "--num-requests", "300", "--request-rate", "8", "--intervals",
                             "--interval-samples", "4", "--verbose", "--slo-tpot-s", "0.02"],
    "save-result-detailed": [*README, "--num-requests", "300", "--request-rate", "6", "--save-result",
                             "--save-detailed", "--result-dir", "{out}", "--result-filename", "result.json"],
}
# Cases run without --out: what they printed is compared (their folder holds stdout.txt alone).
NO_OUT = frozenset(name for name in CASES if name.endswith("-no-out"))


def simulate(tree: Path, case_args: list[str], out: Path, with_out: bool = True) -> None:
    """One run from `tree` into `out` (`with_out`: as its --out), what it printed kept as stdout.txt; "{out}" in
    `case_args` is `out`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out.mkdir(parents=True, exist_ok=True)
    args = [arg.replace("{out}", str(out)) for arg in case_args] + (["--out", str(out)] if with_out else [])
    proc = subprocess.run([sys.executable, "-m", "roofline", "simulate", *args], cwd=tree, env=env, check=True,
                          stdout=subprocess.PIPE)
    (out / "stdout.txt").write_bytes(proc.stdout.replace(str(out).encode(), b"$OUT"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.exists() else "missing"


def same_trace(a: Path, b: Path) -> str | None:
    """How the step traces in folders `a` and `b` are the same table read back ("re-encoded", with their schema
    versions where they differ), or None where they are not (or one is not a trace)."""
    sys.path.insert(0, str(REPO))  # (this tree's reader: it reads every schema version)
    from engine.core.trace import read_trace_table

    try:
        (table_a, meta_a), (table_b, meta_b) = read_trace_table(a), read_trace_table(b)
    except ValueError:
        return None
    if not (table_a.schema.equals(table_b.schema) and table_a.equals(table_b) and meta_a == meta_b):
        return None
    versions = [json.loads((folder / "run.json").read_text())["schema_version"] for folder in (a, b)]
    return "the same table, re-encoded" + (f": schema version {versions[0]} -> {versions[1]}"
                                           if versions[0] != versions[1] else "")


def same_printout(a: Path, b: Path) -> bool:
    """stdout.txt of `b` is `a`'s but for sequences.parquet in the list of files written, where `a` has none (a
    baseline of schema version 1)."""
    if (a / "sequences.parquet").exists() or not (b / "sequences.parquet").exists():
        return False
    return (a / "stdout.txt").read_bytes() == (b / "stdout.txt").read_bytes().replace(b", sequences.parquet", b"")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="git commit (or ref) whose outputs are the reference")
    parser.add_argument("--candidate", default=None, help="compare this commit instead of the working tree")
    parser.add_argument("--out", type=Path, default=None, help="keep both sets of outputs here")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="run only these cases")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="roofline-identity-") as tmp:
        out = args.out or Path(tmp) / "out"
        worktree = Path(tmp) / "baseline"
        candidate = REPO if args.candidate is None else Path(tmp) / "candidate"
        for tree, ref in ((worktree, args.baseline), (candidate, args.candidate)):
            if ref is not None:
                subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref], cwd=REPO, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            all_same = True
            for name in args.case or list(CASES):
                simulate(worktree, CASES[name], out / "baseline" / name, name not in NO_OUT)
                simulate(candidate, CASES[name], out / "current" / name, name not in NO_OUT)
                diffs = [f for f in RESULT_FILES
                         if digest(out / "baseline" / name / f) != digest(out / "current" / name / f)]
                base, current = out / "baseline" / name, out / "current" / name
                trace = same_trace(base, current) if any(f in TRACE_FILES for f in diffs) else None
                reencoded = [f for f in diffs if f in TRACE_FILES] if trace is not None else []
                if "stdout.txt" in diffs and same_printout(base, current):
                    reencoded.append("stdout.txt")  # (the list of files written)
                diffs = [f for f in diffs if f not in reencoded]
                run_json = "same" if digest(out / "baseline" / name / "run.json") == digest(
                    out / "current" / name / "run.json") else "differs"
                all_same &= not diffs
                notes = [f"{', '.join(f for f in reencoded if f in TRACE_FILES)}: {trace}" if trace is not None
                         and any(f in TRACE_FILES for f in reencoded) else "",
                         "stdout.txt: + sequences.parquet in the files written" if "stdout.txt" in reencoded else ""]
                notes = [note for note in notes if note]
                same = "identical" + (f" ({'; '.join(notes)})" if notes else "")
                print(f"{name:22s} {same if not diffs else 'DIFFERENT: ' + ', '.join(diffs)}"
                      f" (run.json {run_json})", flush=True)
        finally:
            for tree in (worktree, candidate):
                if tree != REPO:
                    subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
    print("all result files identical" if all_same else "some result files differ")
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
