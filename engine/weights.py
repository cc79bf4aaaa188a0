"""Model weights: seeded random init, HF safetensors directories, and the engine's fused layout.

A checkpoint here is an HF model directory: `config.json` (from `ModelSpec.to_hf_config`) plus
`model.safetensors` with transformers' parameter names, so `transformers.AutoModelForCausalLM` and vLLM load the
same files the engine runs. The engine fuses q/k/v and gate/up into single matrices (`to_fused`); a Qwen3-MoE
layer's experts (`mlp.experts.{e}.{gate,up,down}_proj`, transformers' and vLLM's checkpoint names) are stacked into
[num_experts, ...] tensors, each expert's gate and up fused.

    state = random_state_dict(spec, seed=0, dtype=torch.bfloat16)   # transformers names
    save_hf_dir(spec, state, "out/llama-156m")
    spec, state = load_hf_dir("out/llama-156m")
    model = load_model(spec, state, dtype=torch.bfloat16, device=torch.device("cpu"))
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from engine.core.model_spec import ModelSpec
from engine.model import LlamaModel, can_prepack, check_supported_moe

# transformers' default `initializer_range` for Llama-family configs: weights ~ N(0, 0.02).
INIT_STD = 0.02
# Norm weights are 1 + N(0, NORM_NOISE_STD) rather than exactly 1, so that tests notice a norm weight that is
# dropped or applied in the wrong place.
NORM_NOISE_STD = 0.1

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def parse_dtype(name: str) -> torch.dtype:
    """'bfloat16' | 'float16' | 'float32' (also 'bf16', 'fp16', 'fp32', 'half', 'float') -> torch dtype."""
    aliases = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
    key = aliases.get(name, name)
    if key not in DTYPES:
        raise ValueError(f"--dtype: unknown dtype '{name}'; allowed: {', '.join(DTYPES)}")
    return DTYPES[key]


def hf_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """transformers' parameter names and shapes for this spec (MoE: Qwen3-MoE's checkpoint names only)."""
    check_supported_moe(spec)
    h, q, kv, inter, d = spec.hidden_size, spec.q_size, spec.kv_size, spec.intermediate_size, spec.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (spec.vocab_size, h), "model.norm.weight": (h,)}
    if not spec.tie_word_embeddings:
        shapes["lm_head.weight"] = (spec.vocab_size, h)
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                   p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                   p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q)}
        if spec.is_moe:  # Qwen3-MoE: the router, then each expert's SwiGLU MLP (the order of the draws)
            shapes[p + "mlp.gate.weight"] = (spec.num_experts, h)
            for e in range(spec.num_experts):
                x = f"{p}mlp.experts.{e}."
                shapes |= {x + "gate_proj.weight": (inter, h), x + "up_proj.weight": (inter, h),
                           x + "down_proj.weight": (h, inter)}
        else:
            shapes |= {p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
                       p + "mlp.down_proj.weight": (h, inter)}
        if spec.attention_bias:
            shapes |= {p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                       p + "self_attn.v_proj.bias": (kv,)}
            if spec.architecture != "Qwen2ForCausalLM":
                shapes[p + "self_attn.o_proj.bias"] = (h,)
        if spec.qk_norm:
            shapes |= {p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,)}
    return shapes


def random_state_dict(spec: ModelSpec, seed: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Seeded random weights with transformers' names: N(0, 0.02) matrices and biases, norms near 1."""
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in hf_shapes(spec).items():  # insertion order is fixed, so the draws are too
        values = torch.randn(shape, generator=generator, dtype=torch.float32)
        if name.endswith("norm.weight"):
            values = 1.0 + NORM_NOISE_STD * values
        else:
            values = INIT_STD * values
        state[name] = values.to(dtype)
    return state


def save_hf_dir(spec: ModelSpec, state: dict[str, torch.Tensor], path: str | Path) -> Path:
    """Write `config.json` and `model.safetensors` into directory `path` (created)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    dtype_name = {v: k for k, v in DTYPES.items()}[next(iter(state.values())).dtype]
    config = dataclasses.replace(spec, torch_dtype=dtype_name).to_hf_config()
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file({k: v.contiguous() for k, v in state.items()}, str(path / "model.safetensors"),
              metadata={"format": "pt"})
    return path


def load_hf_dir(path: str | Path) -> tuple[ModelSpec, dict[str, torch.Tensor]]:
    """An HF model directory with `config.json` and one or more `*.safetensors` files."""
    path = Path(path)
    spec = ModelSpec.from_path(path)
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"model: no *.safetensors file in '{path}'")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state |= load_file(str(file))
    return spec, state


def to_fused(state: dict[str, torch.Tensor], spec: ModelSpec) -> dict[str, torch.Tensor]:
    """transformers' names -> `LlamaModel`'s (q/k/v and gate/up concatenated). Missing or extra names: error."""
    expected = hf_shapes(spec)
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected) - {"lm_head.weight"})  # tied checkpoints may still carry it
    if missing or extra:
        raise ValueError(f"model '{spec.name}': checkpoint does not match config.json; "
                         f"missing {missing[:3]}, unexpected {extra[:3]}")
    for name, shape in expected.items():
        if tuple(state[name].shape) != shape:
            raise ValueError(f"model '{spec.name}': {name} has shape {tuple(state[name].shape)}, expected {shape}")
    fused = {"embed_tokens": state["model.embed_tokens.weight"], "norm": state["model.norm.weight"]}
    if not spec.tie_word_embeddings:
        fused["lm_head"] = state["lm_head.weight"]
    for i in range(spec.num_layers):
        p, a, o = f"model.layers.{i}.", f"model.layers.{i}.self_attn.", f"layers.{i}."
        fused[o + "input_layernorm"] = state[p + "input_layernorm.weight"]
        fused[o + "post_attention_layernorm"] = state[p + "post_attention_layernorm.weight"]
        fused[o + "qkv_proj"] = torch.cat([state[a + f"{x}_proj.weight"] for x in "qkv"])
        fused[o + "o_proj"] = state[a + "o_proj.weight"]
        if spec.is_moe:
            x = [f"{p}mlp.experts.{e}." for e in range(spec.num_experts)]
            fused[o + "moe.gate"] = state[p + "mlp.gate.weight"]
            fused[o + "moe.experts_gate_up_proj"] = torch.stack(
                [torch.cat([state[e + "gate_proj.weight"], state[e + "up_proj.weight"]]) for e in x])
            fused[o + "moe.experts_down_proj"] = torch.stack([state[e + "down_proj.weight"] for e in x])
        else:
            fused[o + "gate_up_proj"] = torch.cat([state[p + "mlp.gate_proj.weight"],
                                                   state[p + "mlp.up_proj.weight"]])
            fused[o + "down_proj"] = state[p + "mlp.down_proj.weight"]
        if spec.attention_bias:
            fused[o + "qkv_bias"] = torch.cat([state[a + f"{x}_proj.bias"] for x in "qkv"])
            if a + "o_proj.bias" in expected:
                fused[o + "o_bias"] = state[a + "o_proj.bias"]
        if spec.qk_norm:
            fused[o + "q_norm"] = state[a + "q_norm.weight"]
            fused[o + "k_norm"] = state[a + "k_norm.weight"]
    return fused


def load_model(spec: ModelSpec, state: dict[str, torch.Tensor], dtype: torch.dtype, device: torch.device,
               max_model_len: int | None = None) -> LlamaModel:
    """A `LlamaModel` holding `state` (transformers' names), cast to `dtype` on `device`, in eval mode, its GEMM
    weights prepacked for oneDNN where that kernel exists (bf16 on a CPU with native bf16)."""
    model = LlamaModel(spec, dtype, device, max_model_len)
    fused = {k: v.to(dtype) for k, v in to_fused(state, spec).items()}
    model.load_state_dict(fused, strict=True)
    if can_prepack(dtype, device):
        model.prepack_weights()
    return model.eval()
