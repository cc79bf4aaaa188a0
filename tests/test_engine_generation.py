"""Greedy generation by the engine (its scheduler, paged KV cache and model, fp32) is token-identical to
transformers' LlamaForCausalLM with the same weights: (a) a plain batch of prompts of different lengths,
(b) chunked prefill under a small token budget, (c) preemption forced by a tiny KV cache, (d) prefix-cache hits."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from engine.core.config import SchedulerConfig  # noqa: E402
from engine.core.model_spec import ModelSpec  # noqa: E402
from engine.core.request import Request, SamplingParams  # noqa: E402
from engine.llm_engine import EngineConfig, LLMEngine, RunResult  # noqa: E402
from engine.weights import load_hf_dir, random_state_dict, save_hf_dir  # noqa: E402

TINY = ModelSpec.from_path(Path(__file__).resolve().parents[1] / "models" / "llama-tiny.json")
NUM_OUTPUT_TOKENS = 12


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_hf_dir(TINY, random_state_dict(TINY, seed=3, dtype=torch.float32),
                       tmp_path_factory.mktemp("ckpt") / "llama-tiny")


@pytest.fixture(scope="module")
def reference(checkpoint: Path) -> transformers.PreTrainedModel:
    return transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()


def prompts(lengths: list[int], seed: int, prefix: list[int] | None = None) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [(prefix or []) + torch.randint(3, TINY.vocab_size, (n,), generator=g).tolist() for n in lengths]


def hf_greedy(model: transformers.PreTrainedModel, prompt: list[int]) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        for _ in range(NUM_OUTPUT_TOKENS):
            ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids[0, len(prompt):].tolist()


def engine_greedy(checkpoint: Path, all_prompts: list[list[int]], **engine_args: object) -> tuple[RunResult,
                                                                                                      list[list[int]]]:
    sched = {k: engine_args.pop(k) for k in ("max_num_seqs", "max_num_batched_tokens") if k in engine_args}
    spec, state = load_hf_dir(checkpoint)
    engine = LLMEngine(spec, EngineConfig(SchedulerConfig(max_model_len=256, **sched), dtype="float32",
                                          **engine_args), state)
    params = SamplingParams(max_tokens=NUM_OUTPUT_TOKENS, temperature=0.0, ignore_eos=True)
    result = engine.run([Request(f"r{i}", p, params) for i, p in enumerate(all_prompts)])
    by_id = {r.request_id: r.output_token_ids for r in result.requests}
    return result, [by_id[f"r{i}"] for i in range(len(all_prompts))]


def test_a_plain_batch_matches_transformers(checkpoint: Path, reference: transformers.PreTrainedModel) -> None:
    batch = prompts([5, 17, 33, 9, 24], seed=0)
    _, outputs = engine_greedy(checkpoint, batch, max_num_batched_tokens=512, block_size=8, num_blocks=64)
    assert outputs == [hf_greedy(reference, p) for p in batch]


def test_b_chunked_prefill_matches_transformers(checkpoint: Path, reference: transformers.PreTrainedModel) -> None:
    batch = prompts([40, 7, 29, 18], seed=1)
    result, outputs = engine_greedy(checkpoint, batch, max_num_seqs=4, max_num_batched_tokens=8, block_size=4,
                                    num_blocks=128)
    steps = result.steps
    chunks_after_context = [(q, c) for qs, cs in zip(steps.query_lens, steps.context_lens) for q, c in zip(qs, cs)
                            if q > 1 and c > 0]
    assert chunks_after_context, "the budget should have split prompts into chunks"
    assert ((steps.num_prefill_tokens > 0) & (steps.num_decode_tokens > 0)).any(), "no mixed step"
    assert outputs == [hf_greedy(reference, p) for p in batch]


def test_c_preemption_matches_transformers(checkpoint: Path, reference: transformers.PreTrainedModel) -> None:
    batch = prompts([14, 15, 13, 16, 12], seed=2)
    # Each request ends with 26-28 tokens = 7 blocks of 4; 16 usable blocks hold two of them.
    result, outputs = engine_greedy(checkpoint, batch, max_num_seqs=8, max_num_batched_tokens=64, block_size=4,
                                    num_blocks=17, enable_prefix_caching=False)
    assert result.steps.num_preemptions.sum() > 0, "the tiny cache should have forced preemptions"
    assert outputs == [hf_greedy(reference, p) for p in batch]


def test_d_prefix_cache_hits_match_transformers(checkpoint: Path, reference: transformers.PreTrainedModel) -> None:
    shared = prompts([21], seed=3)[0]
    batch = prompts([6, 11, 3], seed=4, prefix=shared)
    batch.append(list(batch[0]))  # a full hit: only the last prompt token is recomputed
    # A budget of 32 admits one prompt per step, so later ones find the shared blocks already cached.
    result, outputs = engine_greedy(checkpoint, batch, max_num_seqs=8, max_num_batched_tokens=32, block_size=4,
                                    num_blocks=64)
    assert result.steps.num_new_prefix_hit_tokens.sum() >= 3 * 20
    assert outputs == [hf_greedy(reference, p) for p in batch]


def test_qwen3_moe_chunked_batch_matches_transformers(tmp_path: Path) -> None:
    # The sparse MoE block through the whole engine: chunked prefills and mixed steps route tokens of several
    # requests to the experts together; greedy outputs equal transformers' Qwen3MoeForCausalLM (fp32).
    spec = ModelSpec.from_path(Path(__file__).resolve().parents[1] / "models" / "qwen3-moe-tiny.json")
    checkpoint = save_hf_dir(spec, random_state_dict(spec, seed=3, dtype=torch.float32), tmp_path / "moe")
    reference = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    batch = prompts([30, 7, 19], seed=5)
    result, outputs = engine_greedy(checkpoint, batch, max_num_seqs=4, max_num_batched_tokens=16, block_size=4,
                                    num_blocks=64)
    assert ((result.steps.num_prefill_tokens > 0) & (result.steps.num_decode_tokens > 0)).any(), "no mixed step"
    assert outputs == [hf_greedy(reference, p) for p in batch]
