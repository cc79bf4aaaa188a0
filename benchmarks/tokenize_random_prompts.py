"""How fast an HF fast tokenizer encodes the random-dataset prompts of InferenceX's benchmark client, per token,
against the string vLLM's maintainers timed on a DGX H100 host (vLLM issue #19012: `tokenizer("hi " * 10000)`,
10.7 ms, "about 1k tokens/ms"), which `executor.tokenize_us_per_prompt_token: 1` is taken from.

    python benchmarks/tokenize_random_prompts.py --out benchmarks/results/tokenize-random-prompts/this-host.json

No production tokenizer is on this machine (no model hub), so it trains one: a byte-level BPE of 131,072 tokens
(`tokenizers`, GPT-2's byte-level pre-tokenizer) on the first ~80 MB of .md/.rst/.txt/.py files of this Python's
site-packages, in sorted order (deterministic). The prompts are built as InferenceX's
`utils/bench_serving/benchmark_serving.py` `sample_random_requests` builds them (cec542a9a): consecutive token ids
from a random offset, decoded to text, re-encoded and cut or padded to the target length up to 10 times; the server
receives that text and tokenizes it. Each string is encoded 7 times, interleaved; the median is reported, per
token of its own encoding. The question it answers: does such text tokenize slower per token than the reference
string, i.e. does 1 us per token under-state the tokenization of the judge's rows? (Per-token costs are this host's;
the ratio to the reference string is what carries over.)
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import statistics
import sys
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
    parser.add_argument("--tokenizer", type=Path, default=Path("/tmp/roofline-bpe131k.json"),
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
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python "
                                               f"{platform.python_version()}", "vocab_size": tok.vocab_size,
                                    "repeats": REPEATS, "cases": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
