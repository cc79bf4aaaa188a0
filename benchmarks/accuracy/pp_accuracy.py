"""Pipeline parallelism against the public measurements of vLLM with `--pipeline-parallel-size` that could be found
(judge only; nothing is fitted on them).

    python benchmarks/accuracy/pp_accuracy.py            # one line per case: predicted / measured and the error

aiconfigurator-core 0.12.0's silicon_sample.csv has no pipeline-parallel row (pp_size, prefill_pp_size and
decode_pp_size are 1 in all 3,619 rows), and its operator tables have no point-to-point (send / recv) table. The cases
below are the public runs found (docs/benchmark-history/2026-11-29d-pp.md says how they were searched for). Both
publish means of a `vllm bench serve`-style run (benchmarks/benchmark_serving.py) with ShareGPT prompts, which are not
here (no network): the requests are a `random` dataset of each run's mean prompt and output lengths (its published
token counts over its requests), which keeps the load and loses the spread of the lengths (so a Poisson run's request
throughput, set by its longest requests' tail, is not compared). Neither says its vLLM
version beyond what is noted; the simulator is vLLM 0.32's.

- "gist-a100": vLLM's nightly-benchmark table of a user run (https://gist.github.com/surajssd/c8bbcb244b210a3607ad952a7bdda759,
  row serving_meta-llama-Llama-3.3-70B-Instruct_tp4_pp2_sharegpt_qps_01 / _04; "1xStandard_ND96asr_v4 x 2": Azure VMs of
  8 A100-SXM4-40GB each), 200 ShareGPT prompts at Poisson rates 1 and 4 req/s; its throughput columns give 213 prompt
  and 214 output tokens per request (Total - Output tok/s over req/s). Two VMs: TP 4 per stage, the stages perhaps on
  different VMs; simulated on one node (a100-40gb-sxm describes no network between nodes; the send of a decode batch's
  activations is tens of microseconds either way).
- "substratus-l4": https://substratus.ai/blog/benchmarking-llama-3.1-70b-on-l4 (vLLM of September 2024, V0): 8 x L4,
  neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8, fp8 KV cache, --enforce-eager, chunked prefill off, 1,000 ShareGPT
  prompts at once; 233 prompt and 175 output tokens per request (as above). PP 4 x TP 2 and PP 2 x TP 4.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from dataclasses import dataclass

from roofline.cli import main as roofline_main


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    measured: dict[str, float]  # metric -> value, as published (seconds, req/s, tok/s)


GIST = ("--model", "llama-3.1-70b", "--hardware", "a100-40gb-sxm", "-tp", "4", "-pp", "2", "--dataset-name", "random",
        "--random-input-len", "213", "--random-output-len", "214", "--random-range-ratio", "0", "--num-prompts", "200",
        "--max-model-len", "4096")
L4 = ("--model", "llama-3.1-70b-instruct-fp8", "--hardware", "l4", "--dataset-name", "random",
      "--random-input-len", "233", "--random-output-len", "175", "--random-range-ratio", "0", "--num-prompts", "1000",
      "--max-model-len", "32768", "--max-num-batched-tokens", "32768", "--max-num-seqs", "512",
      "--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "fp8", "--enforce-eager", "--no-enable-chunked-prefill",
      "--enable-prefix-caching")
CASES = (
    Case("gist-a100 TP4 PP2 1 req/s", (*GIST, "--request-rate", "1"),
         {"mean_ttft_s": 0.110373, "median_ttft_s": 0.0969817, "mean_tpot_s": 0.0437218, "median_tpot_s": 0.0435453}),
    Case("gist-a100 TP4 PP2 4 req/s", (*GIST, "--request-rate", "4"),
         {"mean_ttft_s": 0.139838, "median_ttft_s": 0.125156, "mean_tpot_s": 0.0616271, "median_tpot_s": 0.063497}),
    Case("substratus-l4 TP2 PP4 all at once", (*L4, "-tp", "2", "-pp", "4"),
         {"requests_per_s": 1.76, "output_tokens_per_s": 307.61}),
    Case("substratus-l4 TP4 PP2 all at once", (*L4, "-tp", "4", "-pp", "2"),
         {"requests_per_s": 1.50, "output_tokens_per_s": 261.16}),
)


def simulate(args: tuple[str, ...]) -> dict[str, float]:
    """The case's run counted as `vllm bench serve` counts it (the summary's `vllm_bench` fields)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = roofline_main(["simulate", *args, "--json"])
    assert rc == 0, rc
    bench = json.loads(out.getvalue())["vllm_bench"]
    return {"mean_ttft_s": bench["mean_ttft_ms"] / 1e3, "median_ttft_s": bench["median_ttft_ms"] / 1e3,
            "mean_tpot_s": bench["mean_tpot_ms"] / 1e3, "median_tpot_s": bench["median_tpot_ms"] / 1e3,
            "requests_per_s": bench["request_throughput"], "output_tokens_per_s": bench["output_throughput"]}


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    for case in CASES:
        predicted = simulate(case.args)
        parts = [f"{m} {predicted[m]:.4g} / {v:.4g} ({(predicted[m] / v - 1) * 100:+.1f} %)"
                 for m, v in case.measured.items()]
        print(f"{case.name}: " + "; ".join(parts))


if __name__ == "__main__":
    main()
