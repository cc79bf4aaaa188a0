"""CPU time of vLLM V1's API-server path per streamed token, in-process, for whichever vLLM release runs it.

What one API-server process does for every token a streamed completion gets (vLLM V1, one token per request per
engine step):
- `vllm/v1/engine/core_client.py`: the engine core's `EngineCoreOutputs` for the step, msgpack-decoded
  (`vllm/v1/serial_utils.py` `MsgpackDecoder`; measured here as the "decode" part);
- `vllm/v1/engine/async_llm.py` `output_handler`: `OutputProcessor.process_outputs` in slices of
  `VLLM_V1_OUTPUT_PROC_CHUNK_SIZE` (`vllm/v1/engine/output_processor.py`: per-request stats, incremental
  detokenization with the HF tokenizer, `RequestOutput`, `RequestOutputCollector.put`) with `asyncio.sleep(0)`
  between slices ("process");
- each request's task: `AsyncLLM.generate`'s loop (`q.get_nowait() or await q.get()`, re-implemented here: it is
  three lines), `merge_async_iterators`, and the completions endpoint's `completion_stream_generator`
  (`vllm/entrypoints/openai/serving_completion.py` in 0.8, `.../openai/completion/serving.py` in 0.32): one
  `CompletionStreamResponse` per token, `model_dump_json`, the SSE line, encoded to bytes as Starlette's
  `StreamingResponse` does ("stream").
Not driven: the HTTP layer (uvicorn/h11 writes), the stat loggers' `record`, the request's intake (tokenization,
`InputProcessor`, the engine-core request's encode). The code is the release's own except the generate loop and the
consumer.

No engine, no model, no server: `--concurrency` requests are added to the release's `OutputProcessor` (with their
collectors and stream tasks) as one wave, then `--output-len` steps each give every request one token (the last one
with finish reason "length", as `--ignore-eos` runs end). The tokens are English text tokenized with the given
tokenizer (the serve campaigns' 32,000-token byte-level BPE: `vllm_serve_bench.py` writes it to
`$WORK/llama-tiny-bpe`), a different seeded text per request. The request is what `vllm bench serve --backend
openai` sends (stream, `stream_options.include_usage`, `ignore_eos`, `max_tokens`). Stats are on (`log_stats`, a
server's default), so `process_outputs` fills an `IterationStats` per step. As in the servers, the heap is frozen
(`gc.freeze`) after a warm-up wave, and vLLM's environment variables are not cached (0.32's `enable_envs_cache`
runs in the engine-core and worker processes only, so the API server's per-output `envs.VLLM_COMPUTE_NANS_IN_LOGITS`
reads the environment each time).

A wave is timed by CPU time (`time.process_time`) in parts: "add" (the requests' `add_request`, collectors, tasks'
first run up to their first wait), "decode", "process" (the `process_outputs` calls), "stream" (the loop's turn after
each slice, where the requests' tasks run, and the tasks' tail after the last step). Per token (`per_token_s`) =
(decode + process + stream) / (concurrency x output_len); `slope_per_token_s` and `per_request_s`: the line through
the wave's whole CPU time (all four parts) at the first and last output lengths, per request.

Run under the release's venv from the repo root (it imports no `roofline`):

    nice -n 19 "$VLLM_VENV/bin/python" benchmarks/ground_truth/frontend_version_cost.py \
        --tokenizer $WORK/llama-tiny-bpe --concurrency 64,256 --output-len 2,256 --rounds 3 --out $OUT/v032-1.json
    python benchmarks/ground_truth/frontend_version_cost.py --compare $OUT/*.json    # releases' ratios

Instructions instead of CPU time (the VM's speed drifts): two processes under callgrind, `--one-wave 2` and
`--one-wave 258`, each `PYTHONHASHSEED=0 valgrind --tool=callgrind "$PY" ... --concurrency 64 --output-len 2,258`;
the difference of their totals over 64 x 256 tokens (it includes building the synthetic frames).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path
from typing import Any

from harmony_stream_cost import WORDS  # the same seeded English words (a sibling script, standard library only)

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
PARTS = ("add", "decode", "process", "stream")


def parse_int_list(text: str, name: str) -> list[int]:
    """'64,256' -> [64, 256]; every value a positive integer, no repeats."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a comma-separated list of integers") from None
    if not values or any(v <= 0 for v in values) or len(set(values)) != len(values):
        raise ValueError(f"{name}: {text!r} needs distinct positive integers")
    return values


def per_token_and_request(totals_s: dict[int, float], concurrency: int) -> tuple[float, float]:
    """A wave's CPU time at each output length -> (per token, per request) by the line through the first and last
    lengths: total = concurrency x (per_request + output_len x per_token)."""
    lengths = sorted(totals_s)
    if len(lengths) < 2:
        raise ValueError(f"need two output lengths for a slope, got {lengths}")
    a, b = lengths[0], lengths[-1]
    per_token = (totals_s[b] - totals_s[a]) / (b - a) / concurrency
    per_request = totals_s[a] / concurrency - a * per_token
    return per_token, per_request


def summarize(samples: list[float]) -> dict[str, float]:
    """min, median, max of repeated measurements and the spread (max - min) / median."""
    med = statistics.median(samples)
    return {"min": min(samples), "median": med, "max": max(samples),
            "spread": (max(samples) - min(samples)) / med if med else 0.0, "n": len(samples)}


def token_streams(tokenizer: Any, count: int, length: int, seed: int) -> list[list[int]]:
    """`count` token-id lists of exactly `length` tokens of seeded English text."""
    rng = random.Random(seed)
    streams = []
    for _ in range(count):
        ids: list[int] = []
        while len(ids) < length:
            sentence = " ".join(rng.choice(WORDS) for _ in range(48)).capitalize() + ". "
            ids += tokenizer.encode(sentence, add_special_tokens=False)
        streams.append(ids[:length])
    return streams


def compare(runs: list[dict[str, Any]], length: int) -> dict[str, Any]:
    """Runs of this script (several releases, several processes each) -> per release (its label: the version, and
    "slow-detokenizer" where forced) and concurrency, the min and median over processes of each process's median
    per-token CPU at output length `length` and of its per-request intercept; and every pair of releases' ratio of
    those (the later version over the earlier)."""
    table: dict[str, dict[str, dict[str, list[float]]]] = {}
    for run in runs:
        for c, row in run["by_concurrency"].items():
            cell = table.setdefault(run.get("label", run["vllm"]), {}).setdefault(c, {"per_token_s": [], "per_request_s": []})
            cell["per_token_s"].append(row["per_token_s"][str(length)]["median"])
            cell["per_request_s"].append(row["per_request_s"]["median"])
    releases = {v: {c: {k: summarize(x) for k, x in cell.items()} for c, cell in by_c.items()}
                for v, by_c in table.items()}
    names = sorted(releases, key=lambda v: ([int(p) if p.isdigit() else 0 for p in v.split()[0].split(".")], v))
    ratios: dict[str, Any] = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            common = sorted(set(releases[a]) & set(releases[b]), key=int)
            ratios[f"{b}/{a}"] = {c: {k: {stat: releases[b][c][k][stat] / releases[a][c][k][stat]
                                           for stat in ("min", "median")}
                                       for k in ("per_token_s", "per_request_s")} for c in common}
    return {"output_len": length, "releases": releases, "ratios": ratios}


class Release:
    """The installed vLLM's frontend classes, found where each release keeps them."""

    def __init__(self, tokenizer_dir: str, slow_detokenizer: bool = False) -> None:
        import vllm
        from vllm.sampling_params import RequestOutputKind, SamplingParams
        from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest, FinishReason
        from vllm.v1.engine.output_processor import OutputProcessor, RequestOutputCollector
        from vllm.v1.metrics.stats import IterationStats
        from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder
        self.version = str(vllm.__version__)
        try:  # vLLM 0.32
            from vllm.entrypoints.generate.base.protocol import RequestResponseMetadata
            from vllm.entrypoints.openai.completion.protocol import CompletionRequest
            from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
            from vllm.tokenizers.registry import get_tokenizer
            from vllm.utils.async_utils import merge_async_iterators
        except ImportError:  # vLLM 0.8
            from vllm.entrypoints.openai.protocol import (  # type: ignore[no-redef]
                CompletionRequest,
                RequestResponseMetadata,
            )
            from vllm.entrypoints.openai.serving_completion import (  # type: ignore[no-redef]
                OpenAIServingCompletion,
            )
            from vllm.transformers_utils.tokenizer import get_tokenizer  # type: ignore[no-redef]
            from vllm.utils import merge_async_iterators  # type: ignore[no-redef]
        try:
            from vllm.envs import VLLM_V1_OUTPUT_PROC_CHUNK_SIZE as chunk_size
        except ImportError:
            chunk_size = 128
        self.chunk_size = int(chunk_size)
        self.SamplingParams, self.DELTA = SamplingParams, RequestOutputKind.DELTA
        self.EngineCoreOutput, self.EngineCoreOutputs = EngineCoreOutput, EngineCoreOutputs
        self.EngineCoreRequest, self.LENGTH = EngineCoreRequest, FinishReason.LENGTH
        self.IterationStats, self.Collector = IterationStats, RequestOutputCollector
        self.CompletionRequest, self.Metadata = CompletionRequest, RequestResponseMetadata
        self.merge = merge_async_iterators
        self.encoder, self.decoder = MsgpackEncoder(), MsgpackDecoder(EngineCoreOutputs)
        self.tokenizer = get_tokenizer(tokenizer_dir)
        self.tokenizer_class = type(self.tokenizer).__name__
        op_args = inspect.signature(OutputProcessor.__init__).parameters
        if "stream_interval" in op_args:  # 0.32: the tokenizer itself
            self.processor_factory = lambda: OutputProcessor(self.tokenizer, log_stats=True)
        else:  # 0.8: a TokenizerGroup; only get_lora_tokenizer is read
            from vllm.transformers_utils.tokenizer_group import TokenizerGroup
            group = object.__new__(TokenizerGroup)
            group.tokenizer, group.enable_lora = self.tokenizer, False
            group.lora_tokenizers = None
            group.get_lora_tokenizer = lambda lora_request=None: self.tokenizer
            self.processor_factory = lambda: OutputProcessor(group, log_stats=True)
        if slow_detokenizer:
            self._force_slow_detokenizer()
        self.collector_takes_id = "request_id" in inspect.signature(RequestOutputCollector.__init__).parameters
        self.serving = self._serving(OpenAIServingCompletion)
        self.generator_args = inspect.signature(self.serving.completion_stream_generator).parameters

    @staticmethod
    def _force_slow_detokenizer() -> None:
        """Every request gets `SlowIncrementalDetokenizer` (Python `detokenize_incrementally` over the tokenizer's
        `convert_ids_to_tokens` / `convert_tokens_to_string`): V1's only detokenizer until vLLM PR #15137 (March
        2025, after 0.8.0) added `FastIncrementalDetokenizer` (tokenizers' `DecodeStream`), and its fallback since."""
        from vllm.v1.engine import detokenizer
        base = detokenizer.IncrementalDetokenizer
        plain = base.from_new_request.__func__  # type: ignore[attr-defined]

        def slow(cls: type, tokenizer: Any, request: Any) -> Any:
            if tokenizer is None:
                return plain(cls, tokenizer, request)
            return detokenizer.SlowIncrementalDetokenizer(tokenizer, request)
        base.from_new_request = classmethod(slow)  # type: ignore[method-assign,assignment]

    @staticmethod
    def _serving(cls: type) -> Any:
        """OpenAIServingCompletion without an engine: only the attributes the stream generator reads."""
        serving = object.__new__(cls)
        for name, value in (("enable_force_include_usage", False), ("system_fingerprint", None),
                            ("enable_prompt_tokens_details", False), ("enable_per_request_metrics", False),
                            ("request_logger", None), ("return_tokens_as_token_ids", False),
                            ("log_error_stack", False)):
            serving.__dict__[name] = value
        return serving

    def engine_request(self, request_id: str, max_tokens: int) -> Any:
        """An EngineCoreRequest as the release's processor builds it for a text prompt (128 prompt tokens)."""
        params = self.SamplingParams(max_tokens=max_tokens, ignore_eos=True, output_kind=self.DELTA)
        values: dict[str, Any] = {"request_id": request_id, "prompt_token_ids": [1] * 128,
                                  "sampling_params": params, "arrival_time": time.time(),
                                  "eos_token_id": 2, "external_req_id": request_id}
        fields = self.EngineCoreRequest.__struct_fields__
        defaults = len(self.EngineCoreRequest.__struct_defaults__)
        required = fields[:len(fields) - defaults]
        kwargs = {name: values.get(name) for name in required}
        kwargs.update({name: values[name] for name in fields[len(required):] if name in values})
        return self.EngineCoreRequest(**kwargs)

    def detokenizer_class(self) -> str:
        processor = self.processor_factory()
        processor.add_request(self.engine_request("probe", 4), "hi", None, 0, self.collector("probe"))
        return type(processor.request_states["probe"].detokenizer).__name__

    def collector(self, request_id: str) -> Any:
        return self.Collector(self.DELTA, request_id) if self.collector_takes_id else self.Collector(self.DELTA)

    def completion_request(self, max_tokens: int) -> Any:
        return self.CompletionRequest(model="m", prompt="hi", stream=True, max_tokens=max_tokens, ignore_eos=True,
                                      stream_options={"include_usage": True})

    def stream(self, request: Any, results: Any, request_id: str) -> Any:
        args: list[Any] = [request]
        if "engine_inputs" in self.generator_args:  # 0.32
            args.append([{"prompt": "hi", "prompt_token_ids": [1] * 128}])
        args += [results, request_id, int(time.time()), "m", 1, self.tokenizer, self.Metadata(request_id=request_id)]
        return self.serving.completion_stream_generator(*args)


async def generate(queue: Any) -> Any:
    """`AsyncLLM.generate`'s loop after the request is added (the same three lines in 0.8 and 0.32)."""
    finished = False
    while not finished:
        out = queue.get_nowait() or await queue.get()
        finished = out.finished
        yield out


async def consume(release: Release, request: Any, queue: Any, request_id: str, sink: list[int]) -> None:
    """The HTTP response's side: iterate the SSE generator, encode each chunk (Starlette's `StreamingResponse`)."""
    size = 0
    async for chunk in release.stream(request, release.merge(generate(queue)), request_id):
        if chunk.startswith('data: {"error') or chunk.startswith('data: {"object":"error'):
            raise SystemExit(f"the stream generator failed: {chunk[:400]}")
        size += len(chunk.encode("utf-8"))
    sink.append(size)


async def wave(release: Release, streams: list[list[int]], output_len: int, wave_id: int) -> dict[str, Any]:
    """One wave: add len(streams) requests, run output_len steps; CPU seconds per part."""
    processor = release.processor_factory()
    concurrency = len(streams)
    ids = [f"cmpl-{wave_id}-{i}" for i in range(concurrency)]
    # Built outside the timing: the engine core's per-step messages, as the socket delivers them.
    frames = []
    for step in range(output_len):
        outs = [release.EngineCoreOutput(request_id=rid, new_token_ids=[streams[i][step]],
                                         finish_reason=release.LENGTH if step == output_len - 1 else None)
                for i, rid in enumerate(ids)]
        frames.append(release.encoder.encode(release.EngineCoreOutputs(outputs=outs, timestamp=time.monotonic())))
    requests = [release.engine_request(rid, output_len) for rid in ids]
    api_request = release.completion_request(output_len)
    sink: list[int] = []
    parts = dict.fromkeys(PARTS, 0.0)
    gc.collect()
    clock = time.process_time
    start = clock()
    tasks = []
    for rid, request in zip(ids, requests):
        queue = release.collector(rid)
        processor.add_request(request, "hi", None, 0, queue)
        tasks.append(asyncio.ensure_future(consume(release, api_request, queue, rid, sink)))
    await asyncio.sleep(0)
    parts["add"] = clock() - start
    chunk = release.chunk_size
    for frame in frames:
        t0 = clock()
        outputs = release.decoder.decode(frame)
        parts["decode"] += clock() - t0
        stats = release.IterationStats()
        core = outputs.outputs
        for lo in range(0, concurrency, chunk):
            t0 = clock()
            processed = processor.process_outputs(core[lo:lo + chunk], outputs.timestamp, stats)
            t1 = clock()
            assert not processed.request_outputs and not processed.reqs_to_abort
            await asyncio.sleep(0)  # between slices as `output_handler` does; after the last, its next await
            parts["process"] += t1 - t0
            parts["stream"] += clock() - t1
    t0 = clock()
    await asyncio.gather(*tasks)
    parts["stream"] += clock() - t0  # the usage chunks' tail, if any task was still running
    assert len(sink) == concurrency and not processor.has_unfinished_requests()
    return {"parts_s": parts, "bytes_per_request": statistics.mean(sink)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", help="HF tokenizer folder (the campaigns' llama-tiny-bpe)")
    parser.add_argument("--concurrency", default="64,256", help="requests streaming at once, comma-separated")
    parser.add_argument("--output-len", default="64,256", help="tokens per request, comma-separated (>= 2)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                        help="the event loop (vllm serve runs uvicorn's default, uvloop where installed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slow-detokenizer", action="store_true",
                        help="every request detokenized by SlowIncrementalDetokenizer, as V1 did before vLLM PR "
                             "#15137 (March 2025)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--one-wave", type=int, metavar="OUTPUT_LEN",
                        help="for an instruction count (valgrind --tool=callgrind): after the warm-up, run one wave at "
                             "the first concurrency and this output length (one of --output-len; the token streams are "
                             "as long as the longest), untimed; two such processes' difference is that many tokens")
    parser.add_argument("--compare", type=Path, nargs="+", metavar="RUN_JSON",
                        help="only summarize earlier runs' outputs (any releases) and print the releases' ratios")
    args = parser.parse_args()
    if args.compare:
        runs = [json.loads(path.read_text()) for path in args.compare]
        length = max(max(run["output_len"]) for run in runs)
        text = json.dumps(compare(runs, length), indent=1)
        if args.out:
            args.out.write_text(text + "\n")
        print(text)
        return 0
    if not args.tokenizer:
        parser.error("--tokenizer is required (unless --compare)")
    try:
        concurrencies = parse_int_list(args.concurrency, "--concurrency")
        lengths = parse_int_list(args.output_len, "--output-len")
    except ValueError as exc:
        parser.error(str(exc))
    if len(lengths) < 2:
        parser.error("--output-len needs two lengths or more (per request = the intercept)")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.one_wave is not None and args.one_wave not in lengths:
        parser.error(f"--one-wave {args.one_wave} is not one of --output-len {lengths}")
    if args.loop == "uvloop":
        import uvloop
        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    release = Release(args.tokenizer, args.slow_detokenizer)
    streams = token_streams(release.tokenizer, max(concurrencies), max(lengths), args.seed)
    loop.run_until_complete(wave(release, streams[:8], 4, -1))  # warm: imports, first calls
    # Both servers freeze the startup heap out of the collector's way (0.8: `vllm/entrypoints/openai/api_server.py`
    # `lifespan`, gc.collect + gc.freeze; 0.32: `freeze_gc_heap`, `vllm/entrypoints/launchers/utils/server_utils.py`).
    gc.collect()
    gc.freeze()
    if args.one_wave is not None:
        loop.run_until_complete(wave(release, streams[:concurrencies[0]], args.one_wave, 0))
        print(json.dumps({"vllm": release.version, "one_wave": [concurrencies[0], args.one_wave]}))
        return 0
    samples: dict[int, dict[int, list[dict[str, Any]]]] = {c: {n: [] for n in lengths} for c in concurrencies}
    wave_id = 0
    for _ in range(args.rounds):
        for c in concurrencies:
            for n in lengths:
                samples[c][n].append(loop.run_until_complete(wave(release, streams[:c], n, wave_id)))
                wave_id += 1
    by_concurrency: dict[str, Any] = {}
    for c in concurrencies:
        tokens = {n: c * n for n in lengths}
        per_part = {part: {n: summarize([s["parts_s"][part] / tokens[n] for s in samples[c][n]]) for n in lengths}
                    for part in PARTS}
        token_path = {n: summarize([sum(s["parts_s"][p] for p in PARTS[1:]) / tokens[n] for s in samples[c][n]])
                      for n in lengths}
        fits = [per_token_and_request({n: sum(samples[c][n][r]["parts_s"].values()) for n in lengths}, c)
                for r in range(args.rounds)]
        by_concurrency[str(c)] = {
            "per_token_s_by_part": {p: {str(n): v for n, v in d.items()} for p, d in per_part.items()},
            "per_token_s": {str(n): v for n, v in token_path.items()},
            "slope_per_token_s": summarize([f[0] for f in fits]),
            "per_request_s": summarize([f[1] for f in fits]),
            "sse_bytes_per_request": {str(n): samples[c][n][0]["bytes_per_request"] for n in lengths},
        }
    import importlib.metadata as md
    detokenizer = release.detokenizer_class()
    result = {
        "vllm": release.version,
        "label": release.version + (" slow-detokenizer" if args.slow_detokenizer else ""),
        "packages": {name: md.version(name) for name in ("tokenizers", "transformers", "pydantic", "msgspec",
                                                        "uvloop", "torch")},
        "python": platform.python_version(),
        "tokenizer_class": release.tokenizer_class,
        "detokenizer": detokenizer,
        "loop": args.loop,
        "output_proc_chunk_size": release.chunk_size,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average": os.getloadavg(),
        "concurrency": concurrencies, "output_len": lengths, "rounds": args.rounds,
        "by_concurrency": by_concurrency,
    }
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
