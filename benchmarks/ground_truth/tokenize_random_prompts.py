"""How fast an HF fast tokenizer encodes the random-dataset prompts of InferenceX's benchmark client, per token,
against the string vLLM's maintainers timed on a DGX H100 host (vLLM issue #19012: `tokenizer("hi " * 10000)`,
10.7 ms, "about 1k tokens/ms"), which `executor.tokenize_us_per_prompt_token: 1` is taken from.

    python benchmarks/ground_truth/tokenize_random_prompts.py --out benchmarks/results/tokenize-random-prompts/this-host.json

No production tokenizer is on this machine (no model hub), so it trains one: a byte-level BPE of 131,072 tokens
(`tokenizers`, GPT-2's byte-level pre-tokenizer) on the first ~80 MB of .md/.rst/.txt/.py files of this Python's
site-packages, in sorted order (deterministic). The prompts are built as InferenceX's
`utils/bench_serving/benchmark_serving.py` `sample_random_requests` builds them (cec542a9a): consecutive token ids
from a random offset, decoded to text, re-encoded and cut or padded to the target length up to 10 times; the server
receives that text and tokenizes it. Each string is encoded 7 times, interleaved; the median is reported, per
token of its own encoding. The question it answers: does such text tokenize slower per token than the reference
string, i.e. does 1 us per token under-state the tokenization of the judge's rows? (Per-token costs are this host's;
the ratio to the reference string is what carries over.) Then how often vLLM's detokenizer would be primed with a
whole prompt (`detokenizer_priming`).

A production tokenizer instead of the trained one: `--tokenizer FILE` (a tokenizer.json). gpt-oss's o200k vocabulary,
rebuilt from the npm registry (js-tiktoken 1.0.21 ships OpenAI's o200k_base ranks; the file written below is
byte-identical to OpenAI's o200k_base.tiktoken, sha256 446a9538...1a2d, tiktoken's expected hash):

    npm pack js-tiktoken@1.0.21 && tar xzf js-tiktoken-1.0.21.tgz
    node -e 'const r=require("./package/dist/ranks/o200k_base.cjs"); const fs=require("fs"); let o=[];
      for (const x of r.bpe_ranks.split("\n").filter(Boolean)) { const [_,off,...t]=x.split(" ");
      t.forEach((b,i)=>o.push(b+" "+(+off+i))); } fs.writeFileSync("o200k_base.tiktoken", o.join("\n")+"\n");
      fs.writeFileSync("o200k_pat.txt", r.pat_str)'
    pip install tiktoken && python -c 'from transformers.convert_slow_tokenizer import TikTokenConverter as C; C(
    vocab_file="o200k_base.tiktoken", pattern=open("o200k_pat.txt").read()).converted().save("o200k.json")'
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CORPUS_BYTES = 80e6
VOCAB_SIZE = 131_072
REPEATS = 7


def train_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    site = Path(np.__file__).resolve().parents[1]
    files: list[str] = []
    total = 0
    for ext in ("md", "rst", "txt", "py"):
        for f in sorted(glob.glob(f"{site}/**/*.{ext}", recursive=True)):
            size = os.path.getsize(f)
            if 2000 <= size <= 2_000_000 and total <= CORPUS_BYTES:
                files.append(f)
                total += size
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train(files, trainers.BpeTrainer(vocab_size=VOCAB_SIZE, show_progress=False,
                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(path))
    print(f"trained on {len(files)} files, {total / 1e6:.1f} MB", file=sys.stderr)


def random_prompt(tok, length: int, index: int, offset: int, rng: np.random.Generator) -> str:  # noqa: ANN001
    vocab = tok.vocab_size
    ids = [(offset + index + j) % vocab for j in range(length)]
    prompt = tok.decode(ids)
    for _ in range(10):
        ids = tok.encode(prompt, add_special_tokens=False)
        if len(ids) < length:
            ids.extend(rng.integers(0, vocab, size=length - len(ids)).tolist())
        elif len(ids) > length:
            ids = ids[:length]
        else:
            break
        prompt = tok.decode(ids)
    return prompt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--tokenizer", type=Path, default=Path(tempfile.gettempdir()) / "roofline-bpe131k.json",
                        help="trained tokenizer file (trained here if absent)")
    args = parser.parse_args()
    from transformers import PreTrainedTokenizerFast

    if not args.tokenizer.exists():
        train_tokenizer(args.tokenizer)
    tok = PreTrainedTokenizerFast(tokenizer_file=str(args.tokenizer))
    rng = np.random.default_rng(0)
    cases = {"reference: 'hi ' x 10000": "hi " * 10000}
    for length in (1024, 8192):
        for k in range(3):
            cases[f"random {length} #{k}"] = random_prompt(tok, length, k, int(rng.integers(0, tok.vocab_size)), rng)
    tokens = {name: len(tok(text)["input_ids"]) for name, text in cases.items()}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(REPEATS):
        for name, text in cases.items():
            started = time.perf_counter()
            tok(text)
            times[name].append(time.perf_counter() - started)
    reference = statistics.median(times["reference: 'hi ' x 10000"]) / tokens["reference: 'hi ' x 10000"]
    rows = {}
    for name in cases:
        per_token = statistics.median(times[name]) / tokens[name]
        rows[name] = {"tokens": tokens[name], "chars": len(cases[name]), "median_s": statistics.median(times[name]),
                      "us_per_token": per_token * 1e6, "relative_to_reference": per_token / reference}
        print(f"{name:28s} {tokens[name]:6d} tokens {len(cases[name]):6d} chars  "
              f"{per_token * 1e6:5.2f} us/token  x{per_token / reference:.2f} the reference")
    priming = detokenizer_priming(tok, rng)
    for length, r in priming.items():
        print(f"vLLM's detokenizer primed with the whole prompt: {r['whole_prompt']} of {r['prompts']} random "
              f"{length}-token prompts; DecodeStream {r['us_per_token']:.2f} us/token")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python "
                                               f"{platform.python_version()}", "vocab_size": tok.vocab_size,
                                    "repeats": REPEATS, "cases": rows, "detokenizer_priming": priming},
                                   indent=1) + "\n")


PRIMING_PROMPTS = 40


def detokenizer_priming(tok, rng: np.random.Generator) -> dict[str, dict[str, float]]:  # noqa: ANN001
    """vLLM's FastIncrementalDetokenizer (vllm/v1/engine/detokenizer.py, V1 since 2025) primes a request's
    DecodeStream, when the output processor adds the request (before the engine core gets it, so inside TTFT),
    with the shortest prompt suffix of 4-23 tokens that decodes without U+FFFD, or with the whole prompt where
    none does: a step per prompt token. Per prompt length: how many of `PRIMING_PROMPTS` random prompts (built as
    above, tokenized as the server does) take the whole-prompt path, and the median DecodeStream time per token."""
    from tokenizers.decoders import DecodeStream

    inner = tok._tokenizer
    out = {}
    for length in (1024, 8192):
        whole, per_token = 0, []
        for k in range(PRIMING_PROMPTS):
            ids = tok.encode(random_prompt(tok, length, k, int(rng.integers(0, tok.vocab_size)), rng),
                             add_special_tokens=False)
            whole += all("\ufffd" in inner.decode(ids[-i:]) for i in range(4, min(len(ids) + 1, 24)))
            stream = DecodeStream(skip_special_tokens=True)
            started = time.perf_counter()
            for tid in ids:
                stream.step(inner, tid)
            per_token.append((time.perf_counter() - started) / len(ids))
        out[str(length)] = {"prompts": PRIMING_PROMPTS, "whole_prompt": whole,
                            "us_per_token": statistics.median(per_token) * 1e6}
    return out


if __name__ == "__main__":
    main()
