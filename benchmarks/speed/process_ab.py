"""Two source trees' `roofline` commands timed as a user runs them: whole processes under `/usr/bin/time -v`,
alternating in pairs, with the printed bytes checked the same.

    git worktree add --detach $OUT/wt-main main
    python benchmarks/speed/process_ab.py $OUT/wt-main . --pairs 7                      # the README's 10,000 requests
    python benchmarks/speed/process_ab.py $OUT/wt-main . --pairs 7 -- simulate --help

Each tree runs `python -m roofline ARGS` (default: `simulate --model llama-3.1-8b --hardware h100-sxm --workload
sharegpt-chat --request-rate 10 --num-requests 10000`) with `PYTHONPATH` set to it, its bytecode compiled first (as
an installed package's: `compileall` of roofline/ and engine/). Per run: wall, user + system CPU and peak RSS from
`/usr/bin/time -v`, and the 1-minute load average before it; the order within a pair alternates. Prints one JSON line
a run, then per tree the best and the median CPU and the RSS range. Exit 1 when the two trees printed different bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

README = ["simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--workload", "sharegpt-chat",
          "--request-rate", "10", "--num-requests", "10000"]
_FIELDS = {"user_s": r"User time \(seconds\): ([\d.]+)", "sys_s": r"System time \(seconds\): ([\d.]+)",
           "rss_kb": r"Maximum resident set size \(kbytes\): (\d+)",
           "wall": r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)"}


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _seconds(clock: str) -> float:
    total = 0.0
    for part in clock.split(":"):
        total = total * 60 + float(part)
    return total


def run(tree: Path, args: list[str]) -> tuple[dict[str, float], bytes]:
    """One process of `python -m roofline ARGS` from `tree`: its figures and what it printed."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with tempfile.NamedTemporaryFile(suffix=".time") as timing:
        before = loadavg()
        proc = subprocess.run(["/usr/bin/time", "-v", "-o", timing.name, sys.executable, "-m", "roofline", *args],
                              cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        text = Path(timing.name).read_text()
    value = {name: _field(text, pattern) for name, pattern in _FIELDS.items()}
    user, system = float(value["user_s"]), float(value["sys_s"])
    return {"exit": proc.returncode, "wall_s": _seconds(value["wall"]), "cpu_s": round(user + system, 2),
            "user_s": user, "sys_s": system, "peak_rss_mb": round(int(value["rss_kb"]) / 1024, 1),
            "load_1min": before}, proc.stdout


def _field(text: str, pattern: str) -> str:
    match = re.search(pattern, text)
    assert match is not None, f"/usr/bin/time -v gave no {pattern}: {text}"
    return match.group(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="source tree compared with (e.g. a worktree of main)")
    parser.add_argument("candidate", type=Path, help="source tree measured")
    parser.add_argument("--pairs", type=int, default=5)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)  # the roofline command line after --
    opts = parser.parse_args(argv[:cut])
    args = argv[cut + 1:] or README
    trees = {"base": opts.base.resolve(), "candidate": opts.candidate.resolve()}
    for tree in trees.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", "roofline", "engine"], cwd=tree, check=True)
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    printed: dict[str, set[bytes]] = {name: set() for name in trees}
    for pair in range(opts.pairs):
        order = list(trees) if pair % 2 == 0 else list(reversed(trees))
        for name in order:
            result, out = run(trees[name], args)
            figures[name].append(result)
            printed[name].add(out)
            print(json.dumps({"pair": pair, "tree": name, **result}), flush=True)
    for name, runs in figures.items():
        cpu = [r["cpu_s"] for r in runs]
        rss = [r["peak_rss_mb"] for r in runs]
        wall = [r["wall_s"] for r in runs]
        print(f"{name}: {trees[name]}: CPU best {min(cpu):.2f} s, median {statistics.median(cpu):.2f} s "
              f"({', '.join(f'{c:.2f}' for c in cpu)}); wall median {statistics.median(wall):.2f} s; peak RSS "
              f"{min(rss):.0f}-{max(rss):.0f} MB")
    same = len(printed["base"] | printed["candidate"]) == 1
    print("printed bytes: " + ("identical" if same else "DIFFERENT"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
