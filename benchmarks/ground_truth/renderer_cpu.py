"""Measure the CPU of the work `vllm serve` runs on its renderer thread per request, and how much of it holds the GIL.

vLLM 0.32 renders and tokenizes on a thread pool of `ModelConfig.renderer_num_workers` (default 1) workers
(`vllm/renderers/base.py` `BaseRenderer.__init__`: `self._executor`, `_tokenize_prompt_async =
make_async(self._tokenize_prompt, executor=self._executor)`; `vllm/renderers/hf.py` `HfRenderer`:
`_apply_chat_template_async = make_async(safe_apply_chat_template, executor=self._executor)`). `_tokenize_prompt`
calls the tokenizer (`tokenizer(prompt["prompt"], **params.get_encode_kwargs())`); the fast tokenizer's
`_batch_encode_plus` (transformers `tokenization_utils_tokenizers.py`) calls the Rust `Tokenizer.encode_batch`.

This script runs those two calls on the campaign's tokenizer (vllm_serve_bench.py `make_model`, loaded with vLLM's
own `vllm.tokenizers.get_tokenizer`) for prompts like `vllm bench serve --dataset-name random` sends (random token
ids decoded to text, re-tokenized by the server), and reports per call:
- the thread's CPU time (`time.thread_time`), median over `--calls` calls;
- the share of it that releases the GIL: a pure-Python counter thread on the other core counts while the main thread
  calls the tokenizer, against its count alone (ratio ~1: the call runs without the GIL; ~0: it holds the GIL).

Run with the vLLM venv: `PYTHONPATH=$PWD "$VLLM_VENV/bin/python" benchmarks/ground_truth/renderer_cpu.py --work-dir
$W --out renderer-cpu.json` (needs 2 cores for the GIL share).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

PROMPT_TOKENS = 128


def counter_rate(seconds: float, busy: Callable[[], None] | None) -> float:
    """Increments per second of a pure-Python counter thread while the main thread runs `busy` in a loop."""
    stop = threading.Event()
    count = [0]

    def spin() -> None:
        n = 0
        while not stop.is_set():
            for _ in range(1000):
                n += 1
        count[0] = n

    thread = threading.Thread(target=spin)
    start = time.perf_counter()
    thread.start()
    while time.perf_counter() - start < seconds:
        if busy is None:
            time.sleep(0.01)
        else:
            busy()
    stop.set()
    thread.join()
    return count[0] / (time.perf_counter() - start)


def per_call_cpu(call: Callable[[], Any], calls: int) -> list[float]:
    samples = []
    for _ in range(calls):
        t0 = time.thread_time()
        call()
        samples.append(time.thread_time() - t0)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="holds (or gets) the campaign's model dir")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the GIL test")
    args = parser.parse_args()
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls, --rounds: >= 1")
    sys.path.insert(0, str(Path(__file__).parent))
    from vllm.tokenizers import get_tokenizer
    from vllm_serve_bench import make_model

    model_dir = args.work_dir / "model"
    if not (model_dir / "tokenizer.json").exists():
        model_dir.mkdir(parents=True, exist_ok=True)
        make_model(model_dir)
    tokenizer = get_tokenizer(str(model_dir))
    rng = random.Random(0)
    prompts = [tokenizer.decode([rng.randrange(3, tokenizer.vocab_size) for _ in range(PROMPT_TOKENS)])
               for _ in range(64)]
    # TokenizeParams.get_encode_kwargs for a completions request without truncation: max_input_tokens + 1 caps it.
    kwargs = dict(truncation=True, max_length=2048, add_special_tokens=True)
    it = iter(range(1 << 62))

    def encode() -> None:
        tokenizer(prompts[next(it) % len(prompts)], **kwargs)

    def chat() -> None:
        messages = [{"role": "user", "content": prompts[next(it) % len(prompts)]}]
        tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    for fn in (encode, chat):  # warm-up
        per_call_cpu(fn, 200)
    record: dict[str, Any] = {"prompt_tokens": PROMPT_TOKENS, "calls": args.calls, "tokenizer": type(tokenizer).__name__,
                              "cpus": len(os.sched_getaffinity(0)), "loadavg_start": os.getloadavg()}
    for name, fn in (("encode", encode), ("chat_template", chat)):
        samples = per_call_cpu(fn, args.calls)
        samples.sort()
        record[name] = {"cpu_median_us": statistics.median(samples) * 1e6,
                        "cpu_p10_us": samples[len(samples) // 10] * 1e6,
                        "cpu_p90_us": samples[len(samples) * 9 // 10] * 1e6}
        ratios = []
        for _ in range(args.rounds):
            idle = counter_rate(1.0, None)
            ratios.append(counter_rate(1.0, fn) / idle)
        record[name]["counter_rate_while_calling"] = ratios
    record["loadavg_end"] = os.getloadavg()
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
