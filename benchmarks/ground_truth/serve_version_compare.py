"""Two `vllm_serve_bench.py` run indexes of different vLLM releases side by side, per cell (load, endpoint): burst
duration, request throughput, mean and median TTFT, and the API-server process's CPU per request, each as the
repeats' mean and range, and the ratio of the means (B / A) beside the noise floor (the larger of the two releases'
relative ranges, (max - min) / mean).

    python benchmarks/ground_truth/serve_version_compare.py --a runs-0.32.json --b runs-0.11.json --out compare.json

(a run index may be gzipped: NAME.json.gz)
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

METRICS = {"duration_s": lambda r: r["result"]["duration"],
           "request_throughput": lambda r: r["result"]["request_throughput"],
           "mean_ttft_ms": lambda r: r["result"]["mean_ttft_ms"],
           "median_ttft_ms": lambda r: r["result"]["median_ttft_ms"],
           # The API server's main thread and its helpers (the tokenizer's thread, ZMQ's I/O threads), per request.
           "api_server_cpu_ms_per_request": lambda r: 1e3 * sum(
               v for k, v in r["cpu_s"].items() if k.startswith("api_server/")) / r["result"]["completed"]}


def cells(index: dict[str, Any]) -> dict[tuple[str, str], dict[str, list[float]]]:
    out: dict[tuple[str, str], dict[str, list[float]]] = {}
    for run in index["runs"]:
        cell = out.setdefault((run["load"], run["endpoint"]), {m: [] for m in METRICS})
        for name, get in METRICS.items():
            cell[name].append(get(run))
    return out


def summary(values: list[float]) -> dict[str, float]:
    mean = sum(values) / len(values)
    return {"mean": mean, "min": min(values), "max": max(values), "n": len(values),
            "rel_range": (max(values) - min(values)) / mean if mean else 0.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True, help="the reference release's run index")
    parser.add_argument("--b", type=Path, required=True, help="the other release's run index")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    a, b = (json.loads(gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_text()) for p in (args.a, args.b))
    ca, cb = cells(a), cells(b)
    rows = []
    print(f"B = vLLM {b.get('vllm_server')} / A = vLLM {a.get('vllm_server')} (client {a.get('vllm_client')} / "
          f"{b.get('vllm_client')})")
    print("| cell | metric | A mean (range) | B mean (range) | B / A | noise floor |")
    print("|---|---|---|---|---|---|")
    for cell in sorted(set(ca) & set(cb)):
        for metric in METRICS:
            sa, sb = summary(ca[cell][metric]), summary(cb[cell][metric])
            ratio = sb["mean"] / sa["mean"]
            floor = max(sa["rel_range"], sb["rel_range"])
            rows.append({"load": cell[0], "endpoint": cell[1], "metric": metric, "a": sa, "b": sb,
                         "ratio": ratio, "noise_floor": floor})
            print(f"| {cell[0]} {cell[1]} | {metric} | {sa['mean']:.4g} ({sa['min']:.4g}-{sa['max']:.4g}, "
                  f"n={sa['n']}) | {sb['mean']:.4g} ({sb['min']:.4g}-{sb['max']:.4g}, n={sb['n']}) | "
                  f"{ratio:.3f} | {floor:.3f} |")
    if args.out:
        args.out.write_text(json.dumps({"a": str(args.a), "b": str(args.b), "vllm_a": a.get("vllm_server"),
                                        "vllm_b": b.get("vllm_server"), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
