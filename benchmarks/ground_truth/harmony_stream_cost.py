"""CPU time of vLLM's chat streaming generator per output token: gpt-oss (harmony) against a plain model.

vLLM's chat endpoint streams every request through `OpenAIServingChat.chat_completion_stream_generator`, on the API
server's one event loop, once per engine step that gives the request a token. For gpt-oss (hf_config.model_type
"gpt_oss") the generator also runs the harmony parser on every output token:
- vLLM 0.32 (`vllm/entrypoints/openai/chat_completion/serving.py`): gpt-oss gets the reasoning parser
  "openai_gptoss" by default (`vllm/model_executor/models/config.py` `GptOssForCausalLMConfig.verify_and_update_config`),
  so `ParserManager.get_parser(..., is_harmony=True)` gives `vllm/parser/harmony.py` `HarmonyParser`, whose
  `parse_delta` -> `process_chunk` calls openai_harmony's `StreamableParser.process` per token, reads its
  `current_channel`, `current_recipient`, `last_content_delta`, and polls `StreamableParser.messages` (openai_harmony
  serializes every completed message to JSON in Rust and rebuilds them as Python objects on each read), and the
  generator keeps the request's token ids for the reasoning-token count;
- vLLM 0.11.0 (`vllm/entrypoints/openai/serving_chat.py`): `use_harmony`: `StreamableParser.process` per token and the
  same three reads, a `DeltaMessage` by channel; the default reasoning parser ("openai_gptoss",
  `vllm/model_executor/models/config.py`) also makes the generator keep `previous_token_ids + output.token_ids`, a
  new list per token.
A plain model (a jinja chat template, no reasoning or tool parser) takes `output.text` as the delta.

This drives the installed vLLM's own generator in-process (no server, no engine, no model): a fake result
generator yields one `RequestOutput` per token, as the output processor does at one token per step, and the
generator's chunks are consumed as the HTTP response would. The token stream is a gpt-oss reply in harmony form
(`<|channel|>analysis<|message|>` reasoning `<|end|><|start|>assistant<|channel|>final<|message|>` answer
`<|return|>`), its text English words (seeded), tokenized with gpt-oss's o200k_harmony encoding. The plain model is
given the same tokens and texts (its own tokenizer does not enter the generator's per-token work: the text arrives
detokenized). The request is what `vllm bench serve --endpoint /v1/chat/completions` sends (stream, include_usage).

Per configuration (plain, harmony) and output length: the median over `--rounds` interleaved rounds of the CPU time
(process_time) of `--requests` requests' streams, less the fake generator's own time (the "floor": the same
RequestOutputs consumed without the chat generator), per request; the per-token cost is the slope between lengths.

Runs under a vLLM virtual environment (it imports no `roofline`); the tokenizer is built offline from the o200k
vocabulary that openai_harmony itself loads (vLLM 0.32's openai_harmony 0.0.11 has it; for 0.11.0's 0.0.8 write the
file with --write-vocab under 0.32 and point TIKTOKEN_ENCODINGS_BASE at its folder):

    "$VLLM_VENV/bin/python" benchmarks/ground_truth/harmony_stream_cost.py --write-vocab $OUT/vocab
    "$VLLM_VENV/bin/python" benchmarks/ground_truth/harmony_stream_cost.py --out $OUT/harmony-0.32.json
    TIKTOKEN_ENCODINGS_BASE=$OUT/vocab "$VLLM011_VENV/bin/python" benchmarks/ground_truth/harmony_stream_cost.py \
        --out $OUT/harmony-0.11.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import importlib.metadata
import inspect
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"  # tiktoken's expected hash
WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an "
         "they you were her she there one all we their been has when who will more no if out so said what up its "
         "about into than them can only other new some could time these two may then do first any my now such like "
         "our over man me even most made after also did many before must through back years where much your way "
         "well down should because each just those people how too little state good very make world still own see "
         "men work long get here between both life being under never day same another know while last might us "
         "great old year off come since against go came right used take three model tokens request server latency "
         "answer question reasoning user assistant compute memory batch cache step").split()


def harmony_encoding() -> Any:
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def write_vocab(folder: Path) -> None:
    """o200k_base.tiktoken (TIKTOKEN_ENCODINGS_BASE's file) from the ranks openai_harmony has loaded."""
    inner = harmony_encoding()._inner
    data = "".join(f"{base64.b64encode(bytes(inner.decode_bytes([rank]))).decode()} {rank}\n"
                   for rank in range(199998)).encode()
    digest = hashlib.sha256(data).hexdigest()
    if digest != O200K_SHA256:
        raise SystemExit(f"o200k_base: sha256 {digest}, expected {O200K_SHA256}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "o200k_base.tiktoken").write_bytes(data)


def hf_tokenizer(encoding: Any) -> Any:
    """gpt-oss's tokenizer as a transformers fast tokenizer: o200k_base's ranks and pattern, harmony's special tokens
    at their ids (199998-201088); checked against openai_harmony's encode. The parsers take it at construction."""
    import tempfile

    import tiktoken_ext.openai_public as public
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    def no_download(*_: Any, **__: Any) -> dict[bytes, int]:
        return {}
    public.load_tiktoken_bpe = no_download  # only the pattern is read from tiktoken's definition
    pattern = public.o200k_base()["pat_str"]
    with tempfile.TemporaryDirectory() as folder:
        write_vocab(Path(folder))
        converted = TikTokenConverter(vocab_file=str(Path(folder) / "o200k_base.tiktoken"), pattern=pattern,
                                       additional_special_tokens=[]).converted()  # transformers 4.5x needs the list
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=converted)
    specials = sorted((encoding.encode(s, allowed_special="all")[0], s) for s in encoding._inner.special_tokens())
    tokenizer.add_special_tokens({"additional_special_tokens": [s for _, s in specials]})
    tokenizer.eos_token = "<|return|>"
    probe = "<|channel|>final<|message|>It's 2026, naive words."
    if tokenizer.encode(probe, add_special_tokens=False) != encoding.encode(probe, allowed_special="all"):
        raise SystemExit("the rebuilt tokenizer does not match openai_harmony's o200k_harmony encoding")
    return tokenizer


def reply_tokens(encoding: Any, num_tokens: int, seed: int) -> list[int]:
    """A gpt-oss reply of exactly `num_tokens` tokens: half reasoning (analysis channel), then the answer."""
    rng = random.Random(seed)

    def text(n: int) -> list[int]:
        ids: list[int] = []
        while len(ids) < n:
            ids += encoding.encode(" " + " ".join(rng.choice(WORDS) for _ in range(64)) + ".", allowed_special=set())
        return ids[:n]
    head = encoding.encode("<|channel|>analysis<|message|>", allowed_special="all")
    mid = encoding.encode("<|end|><|start|>assistant<|channel|>final<|message|>", allowed_special="all")
    tail = encoding.encode("<|return|>", allowed_special="all")
    body = num_tokens - len(head) - len(mid) - len(tail)
    return head + text(body // 2) + mid + text(body - body // 2) + tail


class Harness:
    """The installed vLLM's OpenAIServingChat, built without an engine: only what the stream generator reads."""

    def __init__(self, harmony: bool, tokenizer: Any, reasoning_parser: bool = True) -> None:
        from vllm.outputs import CompletionOutput, RequestOutput
        self.CompletionOutput, self.RequestOutput = CompletionOutput, RequestOutput
        self.tokenizer = tokenizer
        try:  # vLLM 0.32
            from vllm.entrypoints.generate.base.protocol import RequestResponseMetadata
            from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
            from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
            self.v032 = True
        except ImportError:  # vLLM 0.11
            from vllm.entrypoints.openai.protocol import (  # type: ignore[no-redef]
                ChatCompletionRequest,
                RequestResponseMetadata,
            )
            from vllm.entrypoints.openai.serving_chat import OpenAIServingChat  # type: ignore[no-redef]
            self.v032 = False
        self.Metadata = RequestResponseMetadata
        serving = object.__new__(OpenAIServingChat)
        serving.response_role = "assistant"
        serving.request_logger = None
        serving.enable_log_outputs = False
        serving.enable_force_include_usage = False
        serving.enable_prompt_tokens_details = False
        model_config = SimpleNamespace(hf_config=SimpleNamespace(model_type="gpt_oss" if harmony else "llama"),
                                       model="gpt-oss" if harmony else "plain")
        if self.v032:
            from vllm.parser import ParserManager
            serving.__dict__["model_config"] = model_config
            serving.enable_log_deltas = True
            serving.system_fingerprint = None
            serving.enable_per_request_metrics = False
            # As `OpenAIServingChat.__init__` does, with the reasoning parser vLLM sets for gpt-oss by default
            # (without one 0.32 streams gpt-oss as a plain model: `ParserManager._compose_parser` gives no parser).
            if harmony and not reasoning_parser:
                raise SystemExit("--no-reasoning-parser: vLLM 0.32 streams gpt-oss without parsers as a plain model")
            serving.parser_cls = ParserManager.get_parser(
                reasoning_parser_name="openai_gptoss" if harmony else None, is_harmony=harmony,
                model_name=model_config.model, tokenizer=tokenizer)
            serving._include_reasoning_tokens_details = harmony
        else:
            from vllm.reasoning import ReasoningParserManager
            serving.use_harmony = harmony
            serving.enable_auto_tools = False
            serving.tool_parser = None
            serving.tool_call_id_type = "random"
            serving.reasoning_parser = (ReasoningParserManager.get_reasoning_parser("openai_gptoss")
                                        if harmony and reasoning_parser else None)
        self.serving = serving
        self.request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "Hi"}], stream=True,
                                             stream_options={"include_usage": True}, max_completion_tokens=4096)
        self.generator_args = inspect.signature(serving.chat_completion_stream_generator).parameters

    def outputs(self, token_ids: list[int], texts: list[str]) -> list[Any]:
        """One RequestOutput per token, as the output processor gives a stream at one token per step (delta)."""
        outs = []
        last = len(token_ids) - 1
        for k, (token, text) in enumerate(zip(token_ids, texts)):
            completion = self.CompletionOutput(index=0, text=text, token_ids=[token], cumulative_logprob=None,
                                               logprobs=None, finish_reason="stop" if k == last else None,
                                               stop_reason=None)
            outs.append(self.RequestOutput(request_id="r", prompt=None, prompt_token_ids=[1] * 128,
                                           prompt_logprobs=None, outputs=[completion], finished=k == last))
        return outs

    async def stream(self, outs: list[Any], through_chat: bool) -> int:
        async def results() -> Any:
            for out in outs:
                yield out
        if not through_chat:
            return sum([1 async for _ in results()])
        kwargs: dict[str, Any] = {}
        if "enable_force_include_usage" in self.generator_args:
            kwargs["enable_force_include_usage"] = False
        chunks = 0
        async for chunk in self.serving.chat_completion_stream_generator(
                self.request, results(), "chatcmpl-r", "m", [], self.tokenizer, self.Metadata(request_id="r"),
                **kwargs):
            chunks += 1
            if chunk.startswith('data: {"error'):
                raise SystemExit(f"the generator failed: {chunk[:400]}")
        return chunks


def vllm_version() -> str:
    import vllm
    return str(vllm.__version__)


def harmony_version() -> str:
    for name in ("openai-harmony", "oss-harmony"):  # vLLM 0.32's wheel pulls the latter, same module
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            pass
    return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="64,256,1024", help="output tokens per request, comma-separated")
    parser.add_argument("--requests", type=int, default=20, help="requests per measurement")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-reasoning-parser", action="store_true",
                        help="vLLM 0.11 only: harmony without the default reasoning parser, as vLLM 0.10.2 streams "
                             "gpt-oss (its chat server takes only the --reasoning-parser flag, "
                             "`vllm/entrypoints/openai/api_server.py` `init_app_state`)")
    parser.add_argument("--write-vocab", type=Path, help="only write o200k_base.tiktoken into this folder")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.write_vocab:
        write_vocab(args.write_vocab)
        return 0
    if args.out is None:
        parser.error("--out is required")
    lengths = [int(x) for x in args.lengths.split(",")]
    encoding = harmony_encoding()
    tokenizer = hf_tokenizer(encoding)
    harnesses = {"plain": Harness(False, tokenizer), "harmony": Harness(True, tokenizer, not args.no_reasoning_parser)}
    streams = {n: reply_tokens(encoding, n, seed=n) for n in lengths}
    texts = {n: [encoding.decode([t]) for t in ids] for n, ids in streams.items()}
    loop = asyncio.new_event_loop()
    chunks: dict[str, dict[int, int]] = {name: {} for name in harnesses}

    def run(name: str, n: int) -> float:
        harness = harnesses["plain" if name == "floor" else name]
        batches = [harness.outputs(streams[n], texts[n]) for _ in range(args.requests)]  # built outside the timing
        start = time.process_time()
        for outs in batches:
            count = loop.run_until_complete(harness.stream(outs, through_chat=name != "floor"))
        elapsed = time.process_time() - start
        if name != "floor":
            chunks[name][n] = count
        return elapsed / args.requests

    for name in ("floor", *harnesses):  # warm: imports, the parsers' first use
        run(name, lengths[0])
    samples: dict[str, dict[int, list[float]]] = {name: {n: [] for n in lengths} for name in ("floor", *harnesses)}
    for _ in range(args.rounds):
        for n in lengths:
            for name in ("floor", "plain", "harmony"):
                samples[name][n].append(run(name, n))
    median = {name: {n: statistics.median(v) for n, v in by_n.items()} for name, by_n in samples.items()}
    per_request = {name: {n: median[name][n] - median["floor"][n] for n in lengths} for name in harnesses}

    def slope(values: dict[int, float], a: int, b: int) -> float:
        return (values[b] - values[a]) / (b - a)
    pairs = list(zip(lengths, lengths[1:]))
    result = {
        "vllm": vllm_version(),
        "openai_harmony": harmony_version(),
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average": os.getloadavg(),
        "requests": args.requests, "rounds": args.rounds,
        "harmony_reasoning_parser": "none" if args.no_reasoning_parser else "openai_gptoss",
        "chunks": chunks,
        "median_s_per_request": median,
        "generator_s_per_request": per_request,
        "per_token_s": {name: {f"{a}-{b}": slope(per_request[name], a, b) for a, b in pairs}
                        for name in harnesses},
        "per_token_s_at_length": {name: {n: per_request[name][n] / n for n in lengths} for name in harnesses},
        "harmony_extra_per_token_s": {f"{a}-{b}": slope(per_request["harmony"], a, b)
                                      - slope(per_request["plain"], a, b) for a, b in pairs},
        "spread_s": {name: {n: [min(v), max(v)] for n, v in by_n.items()} for name, by_n in samples.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("vllm", "per_token_s", "harmony_extra_per_token_s", "chunks")},
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
