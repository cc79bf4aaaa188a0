"""The benchmark client's own share of TTFT: InferenceX's request pattern against the API-server costs' reference client.

InferenceX's client (`utils/bench_serving/backend_request_func.py` `async_request_openai_completions` at
ef01c2205, the version of its 2026-03/04 runs) opens a new `aiohttp.ClientSession` per request (a new connector,
hence a new TCP connection), starts the TTFT clock, then posts `json=payload` (the prompt TEXT, encoded by aiohttp
inside the clock) with `trust_env=True`. The client that measured the simulator's API-server costs
(`vllm_frontend_overhead.py`, `roofline.sim.api_server.ApiServerCosts`: its `latency_s` holds that client's share)
shares one session and its keep-alive connections and posts a body JSON-encoded before the clock starts
(`data=body`), as `vllm bench serve` 0.32 (`vllm/benchmarks/serve.py`) shares its session. Both take TTFT at the
first streamed chunk with `choices`.
The server here is a stand-in with vLLM's HTTP stack (uvicorn + FastAPI under uvloop, as
`vllm/entrypoints/openai/api_server.py` runs it) that parses the JSON body and streams one SSE chunk at once: the
difference between the two clients against it is the client pattern's own time, nothing of vLLM's engine.

Run under vLLM's venv (it has aiohttp, uvicorn, fastapi, uvloop):

    $VLLM_VENV/bin/python benchmarks/ground_truth/client_overhead.py --out $OUT/client-overhead.json

Prompts: text of `--prompt-tokens` x 4 characters drawn from a mix of ASCII words and non-ASCII characters
(random token ids of a 200k vocabulary decode to such text; json.dumps escapes each non-ASCII character as \\uXXXX).
Per (pattern, prompt length): `--requests` sequential requests (concurrency 1), repeated `--repeats` times,
interleaved; the median TTFT per repeat, then the median over repeats. Wall times on a shared host include the
wake-ups of two processes, which load stretches (a new connection needs more of them): read them with the load
average the result records. Load-independent: the CPU time per request of the client process (`time.process_time`,
the whole request: session, connection, post, stream, close) and of the server process (`/proc/PID/stat` utime +
stime), per cell, medians over repeats; and the client's CPU time inside the TTFT clock (from the clock's start to
the first chunk), median per repeat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import random
import socket
import statistics
import sys
import time
from pathlib import Path

PATTERNS = ("inferencex", "reference")


def serve(port: int) -> None:
    """The stand-in server: POST /v1/completions -> parse the body, stream one chunk and [DONE]."""
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import StreamingResponse

    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(request: Request) -> StreamingResponse:
        body = json.loads(await request.body())
        n = len(body["prompt"])

        async def stream():  # noqa: ANN202
            yield "data: " + json.dumps({"id": "x", "choices": [{"index": 0, "text": "a", "n": n}]}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", loop="uvloop", http="httptools")


def prompt_text(num_tokens: int, rng: random.Random) -> str:
    pieces = []
    for _ in range(num_tokens):
        if rng.random() < 0.5:
            pieces.append(" " + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3)))
        else:
            pieces.append("".join(chr(rng.randrange(0x400, 0x9FFF)) for _ in range(2)))
    return "".join(pieces)


async def first_chunk(response) -> None:  # noqa: ANN001 - aiohttp response
    async for chunk in response.content:
        chunk = chunk.strip()
        if chunk and chunk.decode().removeprefix("data: ") != "[DONE]":
            json.loads(chunk.decode().removeprefix("data: "))
            return


async def run_pattern(pattern: str, url: str, prompt: str, num_requests: int) -> tuple[list[float], list[float]]:
    """TTFT and the client's CPU time inside the TTFT clock, per request."""
    import aiohttp

    payload = {"model": "m", "prompt": prompt, "temperature": 0.0, "best_of": 1, "max_tokens": 16, "logprobs": None,
               "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    headers = {"Authorization": "Bearer x"}
    ttfts, in_clock_cpu = [], []
    if pattern == "inferencex":
        for _ in range(num_requests):
            async with aiohttp.ClientSession(trust_env=True, timeout=aiohttp.ClientTimeout(total=60)) as session:
                st, cpu = time.perf_counter(), time.process_time()
                async with session.post(url, json=payload, headers=headers) as response:
                    await first_chunk(response)
                    ttfts.append(time.perf_counter() - st)
                    in_clock_cpu.append(time.process_time() - cpu)
                    async for _ in response.content:
                        pass
    else:
        body = json.dumps(payload).encode()
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
            for _ in range(num_requests):
                st, cpu = time.perf_counter(), time.process_time()
                async with session.post(url, data=body, headers={**headers, "Content-Type": "application/json"}
                                        ) as response:
                    await first_chunk(response)
                    ttfts.append(time.perf_counter() - st)
                    in_clock_cpu.append(time.process_time() - cpu)
                    async for _ in response.content:
                        pass
    return ttfts, in_clock_cpu


def process_cpu_s(pid: int) -> float:
    """utime + stime of process `pid` in seconds (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt-tokens", default="1024,8192")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--server-cpu", type=int, default=None, help="pin the server to this core")
    parser.add_argument("--client-cpu", type=int, default=None, help="pin the client to this core")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    port = free_port()
    server = multiprocessing.Process(target=serve, args=(port,), daemon=True)
    server.start()
    if args.server_cpu is not None:
        os.sched_setaffinity(server.pid, {args.server_cpu})
    if args.client_cpu is not None:
        os.sched_setaffinity(0, {args.client_cpu})
    url = f"http://127.0.0.1:{port}/v1/completions"
    for _ in range(200):  # wait for the server
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    rng = random.Random(0)
    lens = [int(x) for x in args.prompt_tokens.split(",")]
    prompts = {n: prompt_text(n, rng) for n in lens}
    medians: dict[str, dict[int, list[float]]] = {p: {n: [] for n in lens} for p in PATTERNS}
    client_cpu: dict[str, dict[int, list[float]]] = {p: {n: [] for n in lens} for p in PATTERNS}
    server_cpu: dict[str, dict[int, list[float]]] = {p: {n: [] for n in lens} for p in PATTERNS}
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    for p in PATTERNS:  # warm-up
        asyncio.run(run_pattern(p, url, prompts[lens[0]], 5))
    in_clock: dict[str, dict[int, list[float]]] = {p: {n: [] for n in lens} for p in PATTERNS}
    for r in range(args.repeats):
        cells = [(p, n) for p in PATTERNS for n in lens]
        for p, n in (cells if r % 2 == 0 else cells[::-1]):
            c0, s0 = time.process_time(), process_cpu_s(server.pid)
            ttfts, cpus = asyncio.run(run_pattern(p, url, prompts[n], args.requests))
            in_clock[p][n].append(statistics.median(cpus))
            client_cpu[p][n].append((time.process_time() - c0) / args.requests)
            server_cpu[p][n].append((process_cpu_s(server.pid) - s0) / args.requests)
            medians[p][n].append(statistics.median(ttfts))
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[:3]
    server.terminate()
    result: dict = {"python": platform.python_version(), "machine": platform.processor() or platform.machine(),
                    "requests": args.requests, "repeats": args.repeats, "loadavg_before": load_before,
                    "loadavg_after": load_after, "prompt_chars": {str(n): len(prompts[n]) for n in lens},
                    "median_ttft_ms": {}, "inferencex_minus_reference_ms": {}, "client_cpu_ms_per_request": {},
                    "server_cpu_ms_per_request": {}, "client_cpu_in_ttft_clock_ms": {}}
    for n in lens:
        for p in PATTERNS:
            result["median_ttft_ms"].setdefault(p, {})[str(n)] = {
                "median": round(statistics.median(medians[p][n]) * 1e3, 4),
                "min": round(min(medians[p][n]) * 1e3, 4), "max": round(max(medians[p][n]) * 1e3, 4)}
            result["client_cpu_ms_per_request"].setdefault(p, {})[str(n)] = round(
                statistics.median(client_cpu[p][n]) * 1e3, 4)
            result["server_cpu_ms_per_request"].setdefault(p, {})[str(n)] = round(
                statistics.median(server_cpu[p][n]) * 1e3, 4)
            result["client_cpu_in_ttft_clock_ms"].setdefault(p, {})[str(n)] = round(
                statistics.median(in_clock[p][n]) * 1e3, 4)
        diffs = [a - b for a, b in zip(medians["inferencex"][n], medians["reference"][n])]
        result["inferencex_minus_reference_ms"][str(n)] = {
            "median": round(statistics.median(diffs) * 1e3, 4), "min": round(min(diffs) * 1e3, 4),
            "max": round(max(diffs) * 1e3, 4)}
        print(f"prompt {n} tokens ({len(prompts[n])} chars): InferenceX pattern "
              f"{statistics.median(medians['inferencex'][n]) * 1e3:.3f} ms, reference pattern "
              f"{statistics.median(medians['reference'][n]) * 1e3:.3f} ms; difference per repeat median "
              f"{statistics.median(diffs) * 1e3:.3f} ms (min {min(diffs) * 1e3:.3f}, max {max(diffs) * 1e3:.3f}); CPU per "
              f"request, client / server: InferenceX {result['client_cpu_ms_per_request']['inferencex'][str(n)]:.3f} / "
              f"{result['server_cpu_ms_per_request']['inferencex'][str(n)]:.3f} ms, reference "
              f"{result['client_cpu_ms_per_request']['reference'][str(n)]:.3f} / "
              f"{result['server_cpu_ms_per_request']['reference'][str(n)]:.3f} ms; client CPU inside the TTFT clock: "
              f"InferenceX {result['client_cpu_in_ttft_clock_ms']['inferencex'][str(n)]:.3f} ms, reference "
              f"{result['client_cpu_in_ttft_clock_ms']['reference'][str(n)]:.3f} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
