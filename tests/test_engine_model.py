"""The engine's model against transformers on the same exported weights: logits of prefill chunks and decodes
over the paged KV cache, for every architecture feature (Llama, Llama-3 RoPE scaling, Qwen2 biases, Qwen3
QK-norm, tied embeddings, Qwen3-MoE's sparse experts), in fp32 and bf16; the MoE block against a plain loop over
tokens and their experts; the weight export round trip; unsupported models."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
transformers = pytest.importorskip("transformers")

from engine.attention import PagedKVCache, build_metadata  # noqa: E402
from engine.core.model_spec import ModelSpec, RopeScaling  # noqa: E402
from engine.model import LlamaModel, SparseMoeBlock, can_prepack  # noqa: E402
from engine.weights import hf_shapes, load_hf_dir, load_model, random_state_dict, save_hf_dir, to_fused  # noqa: E402

MODELS = Path(__file__).resolve().parents[1] / "models"
TINY = ModelSpec.from_path(MODELS / "llama-tiny.json")
MOE_TINY = ModelSpec.from_path(MODELS / "qwen3-moe-tiny.json")
CPU = torch.device("cpu")

VARIANTS = {
    "llama": TINY,
    "llama3-rope": dataclasses.replace(TINY, rope_theta=500000.0,
                                       rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 32)),
    "linear-rope": dataclasses.replace(TINY, rope_scaling=RopeScaling("linear", 2.0)),
    "qwen2-bias": dataclasses.replace(TINY, architecture="Qwen2ForCausalLM", attention_bias=True),
    "qwen3-qknorm": dataclasses.replace(TINY, architecture="Qwen3ForCausalLM", qk_norm=True, head_dim=32),
    "tied": dataclasses.replace(TINY, tie_word_embeddings=True),
    "qwen3-moe": MOE_TINY,
    "qwen3-moe-unnormalised": dataclasses.replace(MOE_TINY, norm_topk_prob=False),
}


def export(spec: ModelSpec, path: Path, dtype: torch.dtype) -> Path:
    return save_hf_dir(spec, random_state_dict(spec, seed=0, dtype=dtype), path)


def paged_logits(model: LlamaModel, ids: torch.Tensor, block_size: int = 4) -> torch.Tensor:
    """All positions' logits, computed as a prefill chunk of 20, one of 10, then one decode per token, on a
    block table that is not in order."""
    spec = model.spec
    cache = PagedKVCache(spec.num_layers, 24, block_size, spec.num_kv_heads, spec.head_dim,
                         model.embed_tokens.dtype, CPU)
    blocks = [7, 3, 20, 11, 1, 15, 9, 4, 18, 2, 13, 6]
    pieces = [(0, 20), (20, 30)] + [(p, p + 1) for p in range(30, len(ids))]
    out = []
    with torch.inference_mode():
        for lo, hi in pieces:
            decodes = [(blocks, lo)] if hi - lo == 1 else []
            prefills = [] if decodes else [(blocks, lo, hi - lo)]
            meta = build_metadata(decodes, prefills, cache, CPU)
            out.append(model.compute_logits(model(ids[lo:hi], torch.arange(lo, hi), meta, cache)))
    return torch.cat(out)


def reference_logits(path: Path, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    ref = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    with torch.inference_mode():
        return ref(ids[None]).logits[0].float()


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_fp32_logits_match_transformers(name: str, tmp_path: Path) -> None:
    path = export(VARIANTS[name], tmp_path / name, torch.float32)
    spec, state = load_hf_dir(path)
    ids = torch.randint(0, spec.vocab_size, (37,), generator=torch.Generator().manual_seed(1))
    ours = paged_logits(load_model(spec, state, torch.float32, CPU), ids)
    ref = reference_logits(path, ids, torch.float32)
    assert (ours - ref).abs().max().item() < 1e-4


@pytest.mark.parametrize("spec", [TINY, MOE_TINY], ids=["llama", "qwen3-moe"])
def test_bf16_teacher_forced_logits_within_tolerance(spec: ModelSpec, tmp_path: Path) -> None:
    # Stated tolerance: against transformers in fp32 on the same bf16 weights, the engine in bf16 is off by
    # at most twice what transformers' own bf16 forward is off by, plus 0.01 (logits here span about +-1).
    path = export(spec, tmp_path / "bf16", torch.bfloat16)
    spec, state = load_hf_dir(path)
    ids = torch.randint(0, spec.vocab_size, (37,), generator=torch.Generator().manual_seed(2))
    exact = reference_logits(path, ids, torch.float32)
    ref_err = (reference_logits(path, ids, torch.bfloat16) - exact).abs().max().item()
    our_err = (paged_logits(load_model(spec, state, torch.bfloat16, CPU), ids) - exact).abs().max().item()
    assert our_err <= 2 * ref_err + 0.01


def test_export_is_seeded_and_loads_in_transformers(tmp_path: Path) -> None:
    a = export(TINY, tmp_path / "a", torch.bfloat16)
    b = export(TINY, tmp_path / "b", torch.bfloat16)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    ref = transformers.AutoModelForCausalLM.from_pretrained(a)
    assert ref.config.num_hidden_layers == TINY.num_layers
    assert sum(p.numel() for p in ref.parameters()) == TINY.num_params()
    assert sorted(load_hf_dir(a)[1]) == sorted(hf_shapes(TINY))


def test_checkpoint_missing_a_tensor_is_rejected() -> None:
    state = random_state_dict(TINY, seed=0, dtype=torch.float32)
    del state["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(ValueError, match="missing.*up_proj"):
        to_fused(state, TINY)


def test_moe_export_has_qwen3_moe_names_and_loads_in_transformers(tmp_path: Path) -> None:
    path = export(MOE_TINY, tmp_path / "moe", torch.bfloat16)
    names = sorted(load_hf_dir(path)[1])
    assert "model.layers.1.mlp.gate.weight" in names and "model.layers.0.mlp.experts.7.down_proj.weight" in names
    assert names == sorted(hf_shapes(MOE_TINY))
    ref = transformers.AutoModelForCausalLM.from_pretrained(path)
    assert type(ref).__name__ == "Qwen3MoeForCausalLM"
    assert sum(p.numel() for p in ref.parameters()) == MOE_TINY.num_params()


def reference_moe(block: SparseMoeBlock, x: torch.Tensor) -> torch.Tensor:
    """Qwen3-MoE's sparse block written out plainly: per token, its top-k experts' SwiGLU MLPs, weighted."""
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        probs = torch.softmax(x[t].float() @ block.gate.float().T, dim=-1)
        weights, experts = probs.topk(block.top_k)
        if block.norm_topk_prob:
            weights = weights / weights.sum()
        for w, e in zip(weights.to(x.dtype), experts.tolist()):
            gate, up = (block.experts_gate_up_proj[e] @ x[t]).chunk(2)
            out[t] += w * (block.experts_down_proj[e] @ (F.silu(gate) * up))
    return out


def moe_block(dtype: torch.dtype, norm_topk_prob: bool = True) -> SparseMoeBlock:
    spec = dataclasses.replace(MOE_TINY, norm_topk_prob=norm_topk_prob)
    block = SparseMoeBlock(spec, dtype, CPU)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    return block


@pytest.mark.parametrize("norm_topk_prob", [True, False])
@pytest.mark.parametrize("num_tokens", [1, 3, 40])
def test_moe_block_matches_a_loop_over_tokens_and_experts_in_fp32(num_tokens: int, norm_topk_prob: bool) -> None:
    block = moe_block(torch.float32, norm_topk_prob)
    x = torch.randn(num_tokens, MOE_TINY.hidden_size, generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        ours, ref = block(x), reference_moe(block, x)
        # Stated tolerance: outputs here reach about 20; fp32 sums of 64 and 32 products in another order.
        assert (ours - ref).abs().max().item() < 1e-5 * ref.abs().max().item()


def test_moe_block_in_bf16_and_prepacked_is_close_to_the_loop() -> None:
    # Stated tolerance: bf16 keeps 8 bits of mantissa; outputs here are O(1), the GEMMs sum 64 or 32 products.
    block = moe_block(torch.bfloat16)
    x = torch.randn(40, MOE_TINY.hidden_size, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    with torch.inference_mode():
        ref = reference_moe(block, x).float()
        assert (block(x).float() - ref).abs().max().item() < 0.05 * ref.abs().max().item()
        if can_prepack(torch.bfloat16, CPU):
            plain = block(x)
            block.prepack_weights()
            assert torch.equal(block(x), plain)


@pytest.mark.parametrize("name", ["mixtral-8x7b", "gpt-oss-20b"])
def test_other_moe_models_are_refused_with_a_clear_error(name: str) -> None:
    spec = ModelSpec.from_path(MODELS / f"{name}.json")
    with pytest.raises(ValueError, match="mixture of experts.*not supported.*Qwen3MoeForCausalLM"):
        LlamaModel(spec, torch.bfloat16, CPU, max_model_len=64)
    with pytest.raises(ValueError, match="mixture of experts.*not supported"):
        hf_shapes(spec)


def test_sliding_window_shorter_than_context_is_refused() -> None:
    spec = dataclasses.replace(TINY, architecture="MistralForCausalLM", sliding_window=64)
    with pytest.raises(ValueError, match="sliding_window 64"):
        LlamaModel(spec, torch.float32, CPU, max_model_len=128)


def test_moe_block_issues_the_torch_ops_the_cpu_cost_model_counts() -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    from roofline.cost.cpu import engine as cpu_timing

    class Recorder(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.names.append(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    views = {"flatten", "select", "slice", "chunk", "unsqueeze", "resolve_conj", "resolve_neg"}
    block = moe_block(torch.float32)
    x = torch.randn(3, MOE_TINY.hidden_size, generator=torch.Generator().manual_seed(6))
    with torch.inference_mode(), Recorder() as recorder:
        block(x)
    touched = recorder.names.count("silu")
    computed = [n for n in recorder.names if n not in views]
    # + tolist (not a dispatched op); the router's linear is its own record in the cost model.
    assert len(computed) + 1 == 1 + cpu_timing.MOE_FIXED_OPS + cpu_timing.MOE_OPS_PER_EXPERT * touched
