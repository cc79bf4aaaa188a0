"""The render's round trip through vLLM 0.32's tokenizer thread, one request at a time, against the thread's own CPU.

vLLM 0.32 tokenizes a text prompt on its renderer's thread pool (`vllm/renderers/base.py` `BaseRenderer.__init__`:
`_tokenize_prompt_async = make_async(self._tokenize_prompt, executor=self._executor)`, one worker by default;
`vllm/utils/async_utils.py` `make_async` -> `loop.run_in_executor`): the request's coroutine awaits a future that the
worker thread's `_tokenize_prompt` (the HF tokenizer's `__call__` with `TokenizeParams.get_encode_kwargs()`) resolves,
and the loop (uvloop, as `vllm serve` runs it) resumes the coroutine once the worker's `call_soon_threadsafe` has
woken it. Traced `vllm serve` runs show the loop idle ~0.7-1.0 ms across that await one request at a time
(docs/benchmark-history/2026-11-30h-serve15.md), where the simulator charges the thread's work only. This runs the
same await in vLLM's venv (its tokenizer loader, uvloop, a one-worker `ThreadPoolExecutor`) with the campaign's
prompts (random token ids decoded to text, as `vllm bench serve`'s random dataset does), one await at a time with
`--gap-ms` of idle between them, and reports per await: the wall time, the worker's thread CPU inside the call, the
time before the worker starts the call and after it returns until the coroutine resumes.

    taskset -c 0 "$VLLM_VENV/bin/python" benchmarks/ground_truth/vllm_serve_render_wait.py \
        --tokenizer $WORK/llama-tiny-bpe --prompts 300 --out $OUT/render-wait.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def summary(values: list[float]) -> dict[str, float]:
    ms = sorted(1e3 * v for v in values)
    return {"mean": round(statistics.mean(ms), 4), "median": round(statistics.median(ms), 4),
            "p10": round(ms[len(ms) // 10], 4), "p90": round(ms[9 * len(ms) // 10], 4)}


async def run(tokenizer: Any, prompts: list[str], kwargs: dict[str, Any], gap_s: float) -> dict[str, list[float]]:
    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(max_workers=1)  # vLLM's renderer_num_workers default
    marks: dict[str, float] = {}

    def tokenize(prompt: str) -> list[int]:
        marks["start"], cpu0 = time.perf_counter(), time.thread_time()
        ids = tokenizer(prompt, **kwargs)["input_ids"]
        marks["cpu"], marks["end"] = time.thread_time() - cpu0, time.perf_counter()
        return ids  # type: ignore[no-any-return]

    out: dict[str, list[float]] = {"wall": [], "thread_cpu": [], "thread_wall": [], "to_start": [],
                                   "to_resume": []}
    for n, prompt in enumerate(prompts):
        await asyncio.sleep(gap_s)
        t0 = time.perf_counter()
        await loop.run_in_executor(executor, tokenize, prompt)
        t1 = time.perf_counter()
        if n < 10:  # warm-up
            continue
        out["wall"].append(t1 - t0)
        out["thread_cpu"].append(marks["cpu"])
        out["thread_wall"].append(marks["end"] - marks["start"])
        out["to_start"].append(marks["start"] - t0)
        out["to_resume"].append(t1 - marks["end"])
    executor.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True, help="the served model's tokenizer directory")
    parser.add_argument("--prompts", type=int, default=300)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--gap-ms", type=float, default=50.0, help="idle between awaits (20/s: 50 ms)")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.prompts < 20:
        parser.exit(2, "vllm_serve_render_wait.py: --prompts must be at least 20 (10 are warm-up)\n")
    if args.input_len < 1 or args.gap_ms < 0 or args.max_model_len < args.input_len:
        parser.exit(2, "vllm_serve_render_wait.py: --input-len must be >= 1, --gap-ms >= 0 and --max-model-len >= "
                       "--input-len\n")
    if not Path(args.tokenizer).is_dir():
        parser.exit(2, f"vllm_serve_render_wait.py: --tokenizer {args.tokenizer} is not a directory (the served "
                       "model's, e.g. the campaign's llama-tiny-bpe)\n")
    try:
        import uvloop
        from vllm.tokenizers.registry import get_tokenizer
    except ImportError as exc:
        parser.exit(2, f"vllm_serve_render_wait.py: runs in vLLM's venv (\"$VLLM_VENV/bin/python\"): {exc}\n")

    tokenizer = get_tokenizer(args.tokenizer)
    rng = random.Random(0)
    prompts = [tokenizer.decode([rng.randrange(tokenizer.vocab_size) for _ in range(args.input_len)])
               for _ in range(args.prompts)]
    kwargs = {"truncation": True, "max_length": args.max_model_len + 1, "add_special_tokens": True}
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_before = os.getloadavg()
    out = uvloop.run(run(tokenizer, prompts, kwargs, args.gap_ms / 1e3))
    result = {"started": started, "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
              "affinity": sorted(os.sched_getaffinity(0)), "prompts": len(out["wall"]), "input_len": args.input_len,
              "gap_ms": args.gap_ms} | {k: summary(v) for k, v in out.items()}
    print(json.dumps(result, indent=1))
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
