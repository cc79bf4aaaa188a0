"""The engine core's host work for one new request, by prompt length, on vLLM's own V1 code (no model, no GPU).

What a request costs the engine-core process before and in the step that prefills it, besides the model: the
`Request` built in the input thread with its prefix-cache block hashes (`EngineCoreProc.preprocess_add_request` ->
`Request.from_engine_core_request`, `vllm/v1/core/kv_cache_utils.py` `get_request_block_hasher`: SHA-256 of the
pickled (parent hash, block tokens, extra keys), vLLM's default `prefix_caching_hash_algo`), then
`Scheduler.schedule()` admitting it (prefix-cache lookup, `KVCacheManager.allocate_slots` for every block of its
prompt, caching the full blocks) and `update_from_output` after its prefill, each against the same calls on a step
that admits no request (the request's marginal cost). The scheduler, the KV cache manager and the request are the
same Python on a GPU host as here (only the Worker's model runner differs), so the CPU time carries over divided by
the host's single-thread speed (`host.single_thread_speed_relative`). Not measured here: the GPU model runner's
share (adding the request to its input batch: a copy of the prompt's ids into a numpy row, its block-table row) and
the scheduler output's broadcast to the TP workers (pickling the new request's prompt ids): served, on the CPU host,
`timeline_engine_parts.py --by-step` measures them. `--prefix-caching off`: no block hasher and no caching, as `vllm
serve --no-enable-prefix-caching` runs.

Run from the repo root under vLLM's venv (see vllm_scheduler_equivalence.py for its setup):

    $VLLM_VENV/bin/python benchmarks/ground_truth/engine_core_new_request.py --out $OUT/new-request.json

Per prompt length, `--repeats` interleaved rounds; each round builds a fresh scheduler with `--running` requests
decoding (the judge's concurrency 4: three others running), times (CPU time, `time.process_time_ns`) the request's
construction, the schedule() that admits it and the update_from_output after it, and the same two calls of the
next decode-only step; medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import numpy as np  # noqa: E402
import torch  # noqa: E402  (vLLM's KV spec takes a torch dtype)
from vllm.config import CacheConfig as VCacheConfig  # noqa: E402
from vllm.config import ModelConfig, VllmConfig  # noqa: E402
from vllm.config import SchedulerConfig as VSchedulerConfig  # noqa: E402
from vllm.sampling_params import SamplingParams as VSamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler as VScheduler  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request as VRequest  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

BLOCK_SIZE = 16  # vLLM's default on GPUs
MAX_NUM_BATCHED_TOKENS = 8192  # vLLM's default for `vllm serve` on a GPU
MAX_MODEL_LEN = 16384
NUM_BLOCKS = 40_000
VOCAB = 150_000
MODEL_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
                "num_hidden_layers": 1, "vocab_size": VOCAB, "max_position_embeddings": MAX_MODEL_LEN,
                "torch_dtype": "float32"}


def make_scheduler(model_dir: str, prefix_caching: bool) -> VScheduler:
    sched_cfg = VSchedulerConfig(max_num_seqs=256, max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
                                 max_model_len=MAX_MODEL_LEN, is_encoder_decoder=False, enable_chunked_prefill=True,
                                 async_scheduling=False)
    model_cfg = ModelConfig(model=model_dir, skip_tokenizer_init=True, max_model_len=MAX_MODEL_LEN, dtype="float32",
                            seed=0)
    cache_cfg = VCacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=prefix_caching)
    vllm_config = VllmConfig(scheduler_config=sched_cfg, model_config=model_cfg, cache_config=cache_cfg)
    # The CPU platform adjusts these in VllmConfig; pin a GPU server's defaults.
    vllm_config.scheduler_config.max_num_batched_tokens = MAX_NUM_BATCHED_TOKENS
    vllm_config.scheduler_config.max_num_scheduled_tokens = None
    vllm_config.scheduler_config.enable_chunked_prefill = True
    vllm_config.cache_config.enable_prefix_caching = prefix_caching
    vllm_config.cache_config.block_size = BLOCK_SIZE
    vllm_config.cache_config.num_gpu_blocks = NUM_BLOCKS
    kv_cfg = KVCacheConfig(num_blocks=NUM_BLOCKS, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=1, head_size=1,
                                                      dtype=torch.float32))])
    return VScheduler(vllm_config=vllm_config, kv_cache_config=kv_cfg,
                      structured_output_manager=StructuredOutputManager(vllm_config), block_size=BLOCK_SIZE,
                      log_stats=False)


def make_request(rid: str, prompt: list[int], hasher) -> VRequest:  # noqa: ANN001 - vLLM's block hasher
    params = VSamplingParams(max_tokens=1024, ignore_eos=True)
    params.update_from_generation_config({}, eos_token_id=2)
    return VRequest(request_id=rid, prompt_token_ids=prompt, sampling_params=params, pooling_params=None,
                    arrival_time=0.0, block_hasher=hasher)


def step(sched: VScheduler) -> tuple[int, int]:
    """One schedule() + update_from_output with a fake sampled token per finished prefill; CPU ns of each."""
    t0 = time.process_time_ns()
    out = sched.schedule()
    t1 = time.process_time_ns()
    reqs = [sched.requests[rid] for rid in out.num_scheduled_tokens]
    sampled = [[7] if r.num_computed_tokens >= r.num_tokens else [] for r in reqs]
    runner_out = ModelRunnerOutput(req_ids=[r.request_id for r in reqs],
                                   req_id_to_index={r.request_id: i for i, r in enumerate(reqs)},
                                   sampled_token_ids=sampled)
    t2 = time.process_time_ns()
    sched.update_from_output(out, runner_out)
    t3 = time.process_time_ns()
    return t1 - t0, t3 - t2


def one_round(model_dir: str, prompt_len: int, running: int, rng: np.random.Generator, hasher) -> dict[str, int]:  # noqa: ANN001
    sched = make_scheduler(model_dir, prefix_caching=hasher is not None)
    for i in range(running):  # requests already decoding, as in a closed loop at concurrency running + 1
        sched.add_request(make_request(f"old{i}", rng.integers(3, VOCAB, 256).tolist(), hasher))
    for _ in range(4):
        step(sched)
    prompt = rng.integers(3, VOCAB, prompt_len).tolist()  # random ids: no prefix-cache hit
    t0 = time.process_time_ns()
    request = make_request("new", prompt, hasher)
    t1 = time.process_time_ns()
    sched.add_request(request)
    admit_schedule, admit_update = 0, 0
    while request.num_computed_tokens < prompt_len:  # its prefill (one step up to the token budget)
        s, u = step(sched)
        admit_schedule, admit_update = admit_schedule + s, admit_update + u
    decode_schedule, decode_update = step(sched)  # the next step: decodes only
    return {"request_ns": t1 - t0, "schedule_ns": admit_schedule, "update_ns": admit_update,
            "decode_schedule_ns": decode_schedule, "decode_update_ns": decode_update}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt-lens", default="1024,4096,8192")
    parser.add_argument("--running", type=int, default=3, help="requests decoding beside the new one")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--prefix-caching", choices=("on", "off"), default="on",
                        help="off: no block hasher (`EngineCore.__init__` builds one only with prefix caching or a KV "
                             "connector) and the KV cache manager without caching, as `vllm serve "
                             "--no-enable-prefix-caching` (the served campaign's servers)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    init_none_hash(sha256)
    hasher = get_request_block_hasher(BLOCK_SIZE, sha256) if args.prefix_caching == "on" else None
    lens = [int(x) for x in args.prompt_lens.split(",")]
    rng = np.random.default_rng(0)
    rounds: dict[int, list[dict[str, int]]] = {n: [] for n in lens}
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    with tempfile.TemporaryDirectory() as model_dir:
        (Path(model_dir) / "config.json").write_text(json.dumps(MODEL_CONFIG))
        one_round(model_dir, lens[0], args.running, rng, hasher)  # warm-up
        for r in range(args.repeats):
            for n in (lens if r % 2 == 0 else lens[::-1]):  # interleaved, order reversed every other round
                rounds[n].append(one_round(model_dir, n, args.running, rng, hasher))
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[:3]
    result: dict = {"vllm": __import__("vllm").__version__, "python": platform.python_version(),
                    "machine": platform.processor() or platform.machine(), "running": args.running,
                    "repeats": args.repeats, "block_size": BLOCK_SIZE,
                    "prefix_caching": args.prefix_caching, "hash": "sha256" if hasher else None,
                    "loadavg_before": load_before, "loadavg_after": load_after, "per_prompt_len": {}}
    for n, rs in rounds.items():
        med = {k: statistics.median(x[k] for x in rs) / 1e6 for k in rs[0]}
        marginal = med["request_ns"] + med["schedule_ns"] + med["update_ns"] \
            - med["decode_schedule_ns"] - med["decode_update_ns"]
        result["per_prompt_len"][str(n)] = {**{k.replace("_ns", "_ms"): round(v, 4) for k, v in med.items()},
                                            "marginal_ms": round(marginal, 4),
                                            "marginal_us_per_token": round(marginal * 1e3 / n, 4)}
        print(f"prompt {n:5d}: request (block hashes) {med['request_ns']:.3f} ms, admitting schedule "
              f"{med['schedule_ns']:.3f} + update {med['update_ns']:.3f} ms vs decode step {med['decode_schedule_ns']:.3f}"
              f" + {med['decode_update_ns']:.3f} ms: marginal {marginal:.3f} ms ({marginal * 1e3 / n:.3f} us/token)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
