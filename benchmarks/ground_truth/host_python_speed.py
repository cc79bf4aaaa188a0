"""One host's single-thread speed on Python work of the kind vLLM's API server does per streamed token, against
another host's: fixed CPython workloads timed here and written to JSON; two such files give the speed of one host
relative to the other (`host.single_thread_speed_relative` is the reference host's time over the GPU server's).

    python benchmarks/ground_truth/host_python_speed.py --out $OUT/this-host.json [--tokenizer tokenizer.json]
    python benchmarks/ground_truth/host_python_speed.py --compare $BASE/reference.json $OUT/gpu-host.json

Run it on the reference host (`roofline.sim.api_server.REFERENCE_HOST`) and on a GPU server's host CPU with the same
Python; the comparison prints, per workload, the reference's time over the other host's (above 1: the other host is
faster) and their geometric mean. Standard library only, so it runs on a bare GPU host; no GPU is used. Why not
the API server itself: a real `vllm serve` on the GPU host measures it better (`vllm_serve_speed_probe.py`), where
vLLM is installed there. The workloads, each a fixed amount of work (`SIZES`), none of it vLLM's code:
- `sse_chunk`: per token, a completion stream chunk shaped like vLLM's `CompletionStreamResponse` built as a dict,
  `json.dumps`-ed and framed as a server-sent event (`serving_completion`'s per-token output);
- `asyncio_queue`: tokens handed from one asyncio task to another through an `asyncio.Queue` (the output handler
  feeding each request's stream generator, one await a token);
- `text_append`: per token, a piece appended to a request's output text and the tail checked for stop strings (the
  detokenizer's Python around the tokenizer's own step);
- `tokenizer` (only with --tokenizer FILE, where `tokenizers` is installed): `Tokenizer.encode('hi ' * 10000)`, the
  string timed on a DGX H100 host in vllm-project/vllm issue #19012 (10.7 ms); its time depends on the tokenizer
  file (a 32k and a 131k byte-level BPE differ ~3x on one host), so compare only runs with the same file.
Each workload runs `--repeats` times, the workloads interleaved; the minimum of the process's CPU time is compared
(its median and the median wall time are reported beside it). On this project's shared 2-vCPU VM at load 3 the
median CPU time moved 1.5x between back-to-back runs, the minimum 1.0-1.2x: state the load and the time with the
numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIZES = {"sse_chunk": 20_000, "asyncio_queue": 20_000, "text_append": 20_000, "tokenizer": 10_000}
PIECES = ("hi", " the", " model", ",", " token", "s", " of", " a", " stream", ".")
STOP_STRINGS = ("</s>", "\n\nUser:")


def sse_chunk(num_tokens: int) -> int:
    """Bytes of `num_tokens` stream chunks, one a token."""
    total = 0
    for i in range(num_tokens):
        chunk = {"id": "cmpl-0123456789abcdef", "object": "text_completion", "created": 1764547200,
                 "model": "model", "choices": [{"index": 0, "text": PIECES[i % len(PIECES)], "logprobs": None,
                                                "finish_reason": None, "stop_reason": None}], "usage": None}
        total += len(f"data: {json.dumps(chunk)}\n\n".encode())
    return total


def asyncio_queue(num_tokens: int) -> int:
    """Tokens passed from a producer task to a consumer task through an asyncio.Queue."""
    async def run() -> int:
        queue: asyncio.Queue[int | None] = asyncio.Queue()

        async def produce() -> None:
            for i in range(num_tokens):
                queue.put_nowait(i)
                await asyncio.sleep(0)  # the producer gives the loop up, as the output handler does between steps
            queue.put_nowait(None)

        async def consume() -> int:
            count = 0
            while (item := await queue.get()) is not None:
                count += item >= 0
            return count

        producer = asyncio.create_task(produce())
        count = await consume()
        await producer
        return count

    return asyncio.run(run())


def text_append(num_tokens: int) -> int:
    """Characters of an output text grown one piece a token, its tail checked for stop strings each time."""
    text = ""
    for i in range(num_tokens):
        text += PIECES[i % len(PIECES)]
        tail = text[-16:]
        if any(stop in tail for stop in STOP_STRINGS):
            break
    return len(text)


def tokenizer_workload(path: Path) -> Callable[[int], int]:
    """`Tokenizer.encode('hi ' * n)` with the tokenizer file at `path` (the `tokenizers` package)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    return lambda n: len(tokenizer.encode("hi " * n).ids)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def measure(workloads: dict[str, Callable[[int], int]], sizes: dict[str, int], repeats: int) -> dict[str, Any]:
    """Per workload over `repeats` interleaved rounds: the minimum and median of the process's CPU seconds (CPU time:
    a niced run on a loaded host waits for the core, which its CPU time does not count; the minimum: the rounds least
    slowed by the other tenants' cache and memory traffic), the median wall seconds, and CPU microseconds a unit."""
    cpu: dict[str, list[float]] = {name: [] for name in workloads}
    wall: dict[str, list[float]] = {name: [] for name in workloads}
    for _ in range(repeats):
        for name, work in workloads.items():
            cpu_started, wall_started = time.process_time(), time.perf_counter()
            work(sizes[name])
            cpu[name].append(time.process_time() - cpu_started)
            wall[name].append(time.perf_counter() - wall_started)
    return {name: {"units": sizes[name], "median_s": statistics.median(ts), "min_s": min(ts),
                   "wall_median_s": statistics.median(wall[name]),
                   "us_per_unit": min(ts) / sizes[name] * 1e6} for name, ts in cpu.items()}


def compare(reference: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Per common workload of the same size, the reference's minimum CPU time over the other's; their geometric
    mean."""
    ref, oth = reference["workloads"], other["workloads"]
    common = [name for name in ref if name in oth and ref[name]["units"] == oth[name]["units"]]
    if not common:
        raise ValueError("the two files have no workload of the same size in common")
    speeds = {name: ref[name]["min_s"] / oth[name]["min_s"] for name in common}
    return {"reference": reference["host"], "other": other["host"], "speed": speeds,
            "geometric_mean": math.exp(statistics.fmean(math.log(s) for s in speeds.values()))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write this host's timings (JSON) here")
    parser.add_argument("--tokenizer", type=Path, help="a tokenizer.json for the `tokenizer` workload")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("REFERENCE", "OTHER"),
                        help="two files written by --out: print the other host's speed relative to the reference")
    args = parser.parse_args(argv)
    if args.compare:
        reference, other = (json.loads(p.read_text()) for p in args.compare)
        print(json.dumps(compare(reference, other), indent=1))
        return 0
    if args.out is None:
        parser.error("--out or --compare is required")
    workloads: dict[str, Callable[[int], int]] = {"sse_chunk": sse_chunk, "asyncio_queue": asyncio_queue,
                                                  "text_append": text_append}
    if args.tokenizer is not None:
        workloads["tokenizer"] = tokenizer_workload(args.tokenizer)
    result = {"host": {"cpu_model": cpu_model(), "python": sys.version.split()[0], "platform": platform.platform(),
                       "tokenizer": args.tokenizer.name if args.tokenizer else None},
              "repeats": args.repeats, "workloads": measure(workloads, SIZES, args.repeats)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, row in result["workloads"].items():
        print(f"{name:14s} CPU min {row['min_s'] * 1e3:8.2f} ms ({row['us_per_unit']:.3f} us a unit), median "
              f"{row['median_s'] * 1e3:.2f} ms; wall median {row['wall_median_s'] * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
