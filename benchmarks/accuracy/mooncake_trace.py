"""Mooncake's public production traces replayed: each trace's statistics and prefix reuse next to what its authors
publish, and the prefix-cache hit rate of a simulated vLLM deployment serving it.

    python benchmarks/accuracy/mooncake_trace.py --trace-dir $MOONCAKE_TRACES [--request-rate 1.0] [--json OUT]

$MOONCAKE_TRACES: a folder holding conversation_trace.jsonl and synthetic_trace.jsonl from
github.com/kvcache-ai/Mooncake, FAST25-release/traces/ (Apache-2.0; toolagent_trace.jsonl is read too where present).
Published: Qin et al., "Mooncake: Trading More Storage for Less Computation", FAST'25, Table 2 (average input and
output length, "cache ratio", number of requests per workload). The trace's own ratio is `trace_cache_ratio`: the
share of prompt tokens in blocks an earlier request had (an unbounded cache; the paper does not say whether its
ratio counts tokens or blocks, so both are printed).

The simulation (`roofline simulate` as a user runs it, in process): Llama-3.1-70B (the paper's model is LLaMA3-70B
shaped) on one 8-GPU H100 node at tensor parallelism 8, vLLM 0.32's defaults (prefix caching on), max_model_len
131,072 (the traces reach 128k tokens), the trace's arrival times scaled to `--request-rate` (the hour's 3.3 requests/s
of 12k-token prompts is several nodes' prefill): the hit rate is what one instance's HBM cache holds of the reuse.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from roofline.engine_args import EngineArgs  # noqa: E402
from roofline.sim.deployment import make_deployment  # noqa: E402
from roofline.sim.simulator import run_simulation  # noqa: E402
from roofline.sim.traces import MOONCAKE_BLOCK_TOKENS, read_mooncake_trace, trace_cache_ratio  # noqa: E402
from roofline.sim.workload import Workload  # noqa: E402

# Table 2 of the paper: (average input length, average output length, cache ratio, number of requests).
PUBLISHED = {"conversation": (12035, 343, 0.40, 12031), "toolagent": (8596, 182, 0.59, 23608),
             "synthetic": (15325, 149, 0.66, 3993)}
MODEL, HARDWARE, TP, MAX_MODEL_LEN = "llama-3.1-70b", "h100-sxm", 8, 131072


def block_ratio(specs: list) -> float:
    """The share of blocks (not tokens) seen before."""
    seen: set[int] = set()
    hit = total = 0
    for spec in specs:
        for block in spec.block_ids:
            hit += block in seen
            total += 1
            seen.add(block)
    return hit / total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace-dir", type=Path, required=True)
    ap.add_argument("--request-rate", type=float, default=1.0, help="mean arrival rate the trace is scaled to")
    ap.add_argument("--traces", default=",".join(PUBLISHED), help="comma-separated traces to run (default: all)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    deployment = make_deployment(MODEL, HARDWARE, EngineArgs(tensor_parallel_size=TP, max_model_len=MAX_MODEL_LEN))
    rows = []
    for name, (avg_in, avg_out, ratio, count) in PUBLISHED.items():
        if name not in args.traces.split(","):
            continue
        path = args.trace_dir / f"{name}_trace.jsonl"
        if not path.exists() or path.stat().st_size == 0:
            print(f"{name}: {path} not found, skipped")
            continue
        specs = read_mooncake_trace(path)
        row = {"trace": name, "requests": len(specs), "published_requests": count,
               "avg_input": sum(s.num_prompt_tokens for s in specs) / len(specs), "published_avg_input": avg_in,
               "avg_output": sum(s.num_output_tokens for s in specs) / len(specs), "published_avg_output": avg_out,
               "cache_ratio_tokens": trace_cache_ratio(specs), "cache_ratio_blocks": block_ratio(specs),
               "published_cache_ratio": ratio}
        workload = Workload(name=path.stem, trace_path=path, num_requests=len(specs))
        # vLLM refuses a prompt that leaves no room for an output token within max_model_len (an error response):
        # those requests are left out of the simulation and counted.
        served = [s for s in read_mooncake_trace(path, rate_per_s=args.request_rate)
                  if s.num_prompt_tokens < MAX_MODEL_LEN]
        row["refused_over_max_model_len"] = len(specs) - len(served)
        wall, cpu = time.perf_counter(), time.process_time()
        result = run_simulation(deployment, workload, specs=served)
        row.update({"simulated_wall_s": time.perf_counter() - wall, "simulated_cpu_s": time.process_time() - cpu})
        req = result.requests
        row["trace_cache_ratio_served"] = trace_cache_ratio(served)
        hit_rate = float(req["num_prefix_hit_tokens"].sum() / req["num_prompt_tokens"].sum())
        row.update({"request_rate": args.request_rate, "kv_cache_tokens": deployment.kv.num_gpu_blocks
                    * deployment.cache_config.block_size, "simulated_hit_rate": hit_rate,
                    "hit_rate_of_trace_ratio": hit_rate / row["trace_cache_ratio_served"],
                    "mean_ttft_s": float(req["ttft_s"].mean()), "median_ttft_s": float(req["ttft_s"].median())})
        rows.append(row)
        print(f"{name}: {row['requests']} requests (published {count}); mean input {row['avg_input']:.0f} / output "
              f"{row['avg_output']:.0f} tokens (published {avg_in} / {avg_out}); the trace's reuse "
              f"{row['cache_ratio_tokens']:.1%} of tokens, {row['cache_ratio_blocks']:.1%} of {MOONCAKE_BLOCK_TOKENS}-token "
              f"blocks (published cache ratio {ratio:.0%})")
        print(f"  simulated {MODEL} on {HARDWARE} TP {TP}, one instance ({row['refused_over_max_model_len']} requests over "
              f"max_model_len {MAX_MODEL_LEN:,} refused), {row['kv_cache_tokens']:,} tokens of KV cache, "
              f"arrivals scaled to {args.request_rate:g}/s: prefix-cache hits {hit_rate:.1%} of prompt tokens "
              f"({row['hit_rate_of_trace_ratio']:.0%} of the trace's reuse); mean TTFT {row['mean_ttft_s']:.2f} s, "
              f"median {row['median_ttft_s']:.2f} s; {row['simulated_wall_s']:.0f} s wall, "
              f"{row['simulated_cpu_s']:.0f} s CPU")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
