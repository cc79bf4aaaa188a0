"""The simulator's hot modules compiled by mypyc against the same tree in pure Python (issue 42 item 1): is a
compiled core worth an optional build? Measured, side by side in one run, with byte-identical results checked.

    python benchmarks/speed/compiled_ab.py                              # 10,000 requests, 3 rounds of each
    python benchmarks/speed/compiled_ab.py --num-requests 100000 --rounds 1
    python benchmarks/speed/compiled_ab.py --group core                 # engine/core's modules only

Copies this checkout's tracked files (as they are in the working tree) to a scratch folder, compiles the chosen
modules there with mypyc (`python -m mypyc`: needs mypy's mypyc, installed with the dev extra's mypy, and a C
compiler; a few minutes), and runs `python -m roofline simulate` of the README's workload (`--model llama-3.1-8b
--hardware h100-sxm --workload sharegpt-chat --request-rate 10 --num-requests N`) alternately in this checkout and in
the compiled copy (each by `PYTHONPATH`, its bytecode compiled first as an installed package's), wall time from here,
CPU time (user + system) and peak RSS of the child from `os.wait4`. Every run's printed result must be the same bytes
as the pure tree's; then one `--out` run of each at `--out-requests` requests compares requests.csv, timeseries.csv,
summary.json and the tables of steps.parquet and sequences.parquet. Prints one JSON object per run, then the medians
and best CPU times with their ratio. CPU times of a loaded machine are no measurements of the code (the load average
is printed with each run); instruction counts are (valgrind callgrind, the README's workload in each tree, the
simulation's share = the count at N requests minus the count at `--num-requests 1`: BENCHMARKS.md, Simulator speed).
Nothing is built in, or written to, this checkout."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--workload", "sharegpt-chat",
            "--request-rate", "10"]
# The modules a step runs through (the profile of 2026-11-30b-speed.md): the scheduler with its block pool and KV
# cache manager, and the simulator's event loop, records and step cost. roofline/cost/ops.py and roofline_math.py
# are left out: they are called with numpy arrays where their annotations say float (vectorized count tables), which
# mypyc's checks of a compiled function's arguments refuse.
GROUPS = {
    "core": ["engine/core/block_pool.py", "engine/core/kv_cache_manager.py", "engine/core/scheduler.py",
             "engine/core/fast_path.py", "engine/core/request.py", "engine/core/step_plan.py",
             "engine/core/request_queue.py", "engine/core/block_hash.py", "engine/core/token_ids.py"],
    "sim": ["roofline/sim/simulator.py", "roofline/sim/token_times.py", "roofline/sim/recorder.py",
            "roofline/sim/api_server.py", "roofline/cost/step_cost.py"],
}
OUT_FILES = ("requests.csv", "timeseries.csv", "summary.json")


def loadavg() -> str:
    path = Path("/proc/loadavg")
    return " ".join(path.read_text().split()[:3]) if path.exists() else "?"


def copy_tree(dest: Path) -> None:
    """This checkout's tracked files, as they are in its working tree."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout
    for name in listed.decode().split("\0"):
        if name and (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)


def compile_modules(tree: Path, modules: list[str]) -> float:
    """mypyc over `modules` in `tree`, in place (.so files next to the sources); returns its wall seconds."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mypyc", *modules], cwd=tree, capture_output=True, text=True,
                          env={**os.environ, "MYPYC_MULTI_FILE": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"mypyc failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return time.perf_counter() - started


def simulate(tree: Path, num_requests: int, out: Path | None = None) -> tuple[dict[str, object], bytes]:
    argv = [sys.executable, "-m", "roofline", "simulate", *WORKLOAD, "--num-requests", str(num_requests)]
    if out is not None:
        argv += ["--out", str(out)]
    before = loadavg()
    with tempfile.TemporaryFile() as printed:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, stdout=printed,
                                stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        stderr = proc.stderr.read()  # type: ignore[union-attr]
        printed.seek(0)
        stdout = printed.read()
    if status != 0:
        raise SystemExit(f"roofline simulate in {tree} failed:\n{stderr.decode()[-2000:]}")
    if out is not None:  # the output folder's path is printed: compare without it
        stdout = stdout.replace(str(out).encode(), b"$OUT")
    return {"num_requests": num_requests, "wall_s": round(wall, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "load_before": before, "load_after": loadavg()}, stdout


def same_outputs(a: Path, b: Path) -> list[str]:
    """The result files that differ (steps.parquet and sequences.parquet by their tables: values, types, schema
    metadata)."""
    import pyarrow.parquet as pq

    differ = [name for name in OUT_FILES if (a / name).read_bytes() != (b / name).read_bytes()]
    for name in ("steps.parquet", "sequences.parquet"):
        if not pq.read_table(a / name).equals(pq.read_table(b / name), check_metadata=True):
            differ.append(name)
    return differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tree, alternating (default 3)")
    parser.add_argument("--group", choices=["core", "all"], default="all",
                        help="core: engine/core's modules; all (default): and the simulator's (GROUPS above)")
    parser.add_argument("--out-requests", type=int, default=2000,
                        help="requests of the one --out run of each tree whose files are compared (0: none)")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="build the compiled copy in DIR and keep it (default: a temporary folder)")
    args = parser.parse_args()
    if args.num_requests < 1 or args.rounds < 1 or args.out_requests < 0:
        parser.error("--num-requests and --rounds must be >= 1, --out-requests >= 0")
    modules = GROUPS["core"] + (GROUPS["sim"] if args.group == "all" else [])

    with tempfile.TemporaryDirectory() as tmp:
        compiled = args.keep if args.keep is not None else Path(tmp) / "compiled"
        compiled.mkdir(parents=True, exist_ok=True)
        copy_tree(compiled)
        build_s = compile_modules(compiled, modules)
        print(json.dumps({"compiled": modules, "build_s": round(build_s, 1)}), flush=True)
        trees = {"pure": REPO, "mypyc": compiled}
        for tree in trees.values():
            subprocess.run([sys.executable, "-m", "compileall", "-q", "roofline", "engine"], cwd=tree, check=True,
                           stdout=subprocess.DEVNULL)
        runs: dict[str, list[dict[str, object]]] = {name: [] for name in trees}
        printed: dict[str, bytes] = {}
        for r in range(args.rounds):
            for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
                record, stdout = simulate(trees[name], args.num_requests)
                runs[name].append(record)
                print(json.dumps({"tree": name, **record}), flush=True)
                if printed.setdefault(name, stdout) != stdout:
                    raise SystemExit(f"{name}: two runs printed different results")
        if printed["pure"] != printed["mypyc"]:
            print("DIFFERENT: the compiled tree printed another result than the pure one")
            return 1
        if args.out_requests:
            outs = {name: Path(tmp) / f"out-{name}" for name in trees}
            texts = {name: simulate(tree, args.out_requests, outs[name])[1] for name, tree in trees.items()}
            differ = same_outputs(outs["pure"], outs["mypyc"]) + (["stdout"] if texts["pure"] != texts["mypyc"]
                                                                  else [])
            print(json.dumps({"out_requests": args.out_requests, "files_differ": differ}), flush=True)
            if differ:
                return 1

    cpu = {name: [float(str(r["cpu_s"])) for r in rs] for name, rs in runs.items()}
    print(f"\n{args.num_requests:,} requests, {args.rounds} runs each: the same printed result in every run")
    print("| tree | CPU s, median (best) | wall s, median | peak RSS MB, max |")
    print("|---|---|---|---|")
    for name, rs in runs.items():
        print(f"| {name} | {statistics.median(cpu[name]):.2f} ({min(cpu[name]):.2f}) | "
              f"{statistics.median(float(str(r['wall_s'])) for r in rs):.2f} | "
              f"{max(float(str(r['peak_rss_mb'])) for r in rs):.1f} |")
    print(f"CPU ratio pure / mypyc: median {statistics.median(cpu['pure']) / statistics.median(cpu['mypyc']):.2f}x, "
          f"best {min(cpu['pure']) / min(cpu['mypyc']):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
