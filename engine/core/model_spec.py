"""Model architecture specs from HF `config.json`.

A `ModelSpec` is the frozen, validated shape of a decoder-only transformer: what the engine builds and what
the cost model counts. It loads the `config.json` of LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
Qwen3ForCausalLM, MixtralForCausalLM and the MoE architectures GptOssForCausalLM (`gpt_oss`),
Qwen3MoeForCausalLM (`qwen3_moe`), MiniMaxM2ForCausalLM (`minimax_m2`) and DeepseekV3ForCausalLM (`deepseek_v3`:
DeepSeek-V3 / R1 and Kimi-K2, whose text model is the same architecture; Kimi-K2.5's KimiK25ForConditionalGeneration
is read as its `text_config`, the vision tower left out); anything else is a `ValueError` naming the architecture
and the supported ones. DeepSeek-V3.2 (`DeepseekV32ForCausalLM`, sparse attention through an indexer) is refused
by name. A checkpoint's own `quantization_config` (and NVIDIA's
`hf_quant_config.json` next to the config) is kept as `CheckpointQuant`; `roofline.cost.quant` resolves it per
module.

Parameter counting (`num_params`, `num_active_params`): every tensor vLLM loads for serving (embedding, LM head
unless tied, decoder layers with biases, norms, attention sinks, router and its correction bias, final norm;
not the multi-token-prediction modules of MiniMax-M2 and DeepSeek-V3, which vLLM loads only for speculative
decoding: `num_mtp_params` counts DeepSeek's).
Active = what one token touches: everything but the experts it is not routed to; `include_embedding=False`
leaves the embedding table out (a lookup, not a matmul), the convention of OpenAI's gpt-oss model card.

    spec = ModelSpec.from_path("path/to/config.json")   # or a directory holding one
    spec.num_params()                                    # 8_030_261_248 for Llama-3.1-8B

Torch-free: both `engine` and `roofline` import it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.core.checkpoint_quant import (  # noqa: F401 - re-exported: the checkpoint's quantization, read here
    CHECKPOINT_QUANT_METHODS,
    CheckpointQuant,
    checkpoint_quant,
)

SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "MixtralForCausalLM",
    "GptOssForCausalLM",
    "Qwen3MoeForCausalLM",
    "MiniMaxM2ForCausalLM",
    "DeepseekV3ForCausalLM",
    "Glm4MoeForCausalLM",
    "Gemma3ForCausalLM",
    "Phi3ForCausalLM",
    "Llama4ForCausalLM",
)
# Wrappers whose text model is a supported architecture: read from their `text_config` (the vision tower left out);
# the text model's architecture where its text_config names none (HF's multimodal configs: Gemma 3 4B-27B,
# Mistral-Small-3.1 / 3.2).
_TEXT_CONFIG_WRAPPERS = {"KimiK25ForConditionalGeneration": "DeepseekV3ForCausalLM",
                         "Gemma3ForConditionalGeneration": "Gemma3ForCausalLM",
                         "Mistral3ForConditionalGeneration": "MistralForCausalLM",
                         "Llama4ForConditionalGeneration": "Llama4ForCausalLM"}
# Architectures refused by the layer they add, named (issue 39): their per-request state or attention pattern is not
# what the cost model and the KV-cache manager describe.
_REFUSED_ARCHITECTURES = {
    "Qwen3NextForCausalLM": "gated DeltaNet linear-attention layers with a per-request recurrent state (vLLM "
                            "qwen3_next.py GatedDeltaNet, MambaSpec state) among its full-attention layers",
    "NemotronHForCausalLM": "Mamba-2 state-space layers with a per-request SSM state (vLLM nemotron_h.py "
                            "MambaMixer2) among its attention layers",
    "Qwen3_5ForConditionalGeneration": "Qwen3.5: gated DeltaNet linear-attention layers (layer_types "
                                       "linear_attention) with a per-request recurrent state",
    "Qwen3_5MoeForConditionalGeneration": "Qwen3.5 MoE: gated DeltaNet linear-attention layers (layer_types "
                                          "linear_attention) with a per-request recurrent state",
    "KimiLinearForCausalLM": "Kimi Delta Attention linear-attention layers with a per-request recurrent state",
    "KimiK3ForConditionalGeneration": "its text model KimiLinearForCausalLM: Kimi Delta Attention linear-attention "
                                      "layers with a per-request recurrent state",
}
# Gemma 3's text config as transformers' Gemma3TextConfig defaults it (transformers 5.x
# models/gemma3/configuration_gemma3.py): HF's multimodal Gemma 3 configs leave these out of text_config.
_GEMMA3_TEXT_DEFAULTS = {"vocab_size": 262208, "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
                         "rope_theta": 1_000_000.0, "tie_word_embeddings": True, "head_dim": 256,
                         "sliding_window": 4096, "sliding_window_pattern": 6}
_MODEL_TYPES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
                "Qwen3ForCausalLM": "qwen3", "MixtralForCausalLM": "mixtral", "GptOssForCausalLM": "gpt_oss",
                "Qwen3MoeForCausalLM": "qwen3_moe", "MiniMaxM2ForCausalLM": "minimax_m2",
                "DeepseekV3ForCausalLM": "deepseek_v3", "Glm4MoeForCausalLM": "glm4_moe",
                "Gemma3ForCausalLM": "gemma3_text", "Phi3ForCausalLM": "phi3", "Llama4ForCausalLM": "llama4_text"}
LAYER_TYPES = ("full_attention", "sliding_attention")

_ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")


@dataclass(frozen=True)
class RopeScaling:
    """`rope_scaling` of an HF config. Only `llama3` and `linear` change the frequencies the engine uses;
    the others are carried for the record."""

    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class MlaDims:
    """Multi-head latent attention (DeepSeek-V2 paper, section 2.1; HF `DeepseekV3Config`; vLLM
    `DeepseekV2MLAAttention`, model_executor/models/deepseek_v2.py). Per token: q = W_qb(norm(W_qa x)) gives each
    head a `qk_nope_head_dim` part and a `qk_rope_head_dim` part (RoPE); W_kva x gives the `kv_lora_rank`-wide
    latent c (normed) and one shared `qk_rope_head_dim`-wide rotated key k_pe; W_kvb c gives each head's key (nope
    part) and its `v_head_dim`-wide value. The KV cache holds c and k_pe only: `latent_width` values per token and
    layer, one "head" for all query heads. `q_lora_rank` None: q = W_q x directly (DeepSeek-V2-Lite)."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_width(self) -> int:
        """Values cached per token and layer: the latent and the rotated key (512 + 64 = 576 for DeepSeek-V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


# ModelSpec fields under their HF config.json names, for messages about a config's values.
_HF_NAMES = {"num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
             "num_kv_heads": "num_key_value_heads"}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    architecture: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width, or each expert's width for MoE
    vocab_size: int
    tie_word_embeddings: bool = False
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    max_position_embeddings: int = 4096
    rms_norm_eps: float = 1e-5
    qk_norm: bool = False  # Qwen3: RMSNorm over each head's q and k before RoPE
    attention_bias: bool = False  # Qwen2: biases on the q, k and v projections
    sliding_window: int | None = None
    num_experts: int = 0  # 0 = dense MLP
    num_experts_per_tok: int = 0
    # Qwen3-MoE: renormalise the top-k router probabilities to sum to 1 (transformers' default false; Qwen3-30B-A3B
    # sets it). Mixtral's softmax over the top-k logits is the same renormalisation; gpt-oss likewise.
    norm_topk_prob: bool = True
    torch_dtype: str = "bfloat16"
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    # Per-layer attention types (gpt-oss alternates sliding and full layers); None: every layer the same, with
    # `sliding_window` (or without one).
    layer_types: tuple[str, ...] | None = None
    attention_sinks: bool = False  # gpt-oss: a learned sink logit per head
    o_proj_bias: bool = False  # gpt-oss: a bias on o_proj too
    qk_norm_per_layer: bool = False  # MiniMax-M2: one RMSNorm over all heads' q (and k): a TP all-reduce
    rotary_dim: int | None = None  # partial rotary (MiniMax-M2: 64 of 128); None = head_dim
    expert_bias: bool = False  # gpt-oss: biases on every expert's gate_up and down
    router_bias: bool = False  # gpt-oss: a bias on the router; MiniMax-M2: e_score_correction_bias
    checkpoint_quant: CheckpointQuant | None = None
    # DeepSeek-V3 family (`deepseek_v3`): latent attention, the first `num_dense_layers` layers with a dense MLP of
    # `dense_intermediate_size` (first_k_dense_replace, intermediate_size), then MoE layers, each with
    # `num_shared_experts` experts every token passes through besides its routed top-k (n_shared_experts; vLLM
    # builds them as one MLP `num_shared_experts` times as wide), routed in `num_expert_groups` groups of which the
    # best `topk_expert_groups` are searched (n_group, topk_group; the grouped top-k costs no GEMM), and
    # `num_mtp_layers` multi-token-prediction modules (num_nextn_predict_layers: counted by `num_mtp_params`, not run).
    mla: MlaDims | None = None
    num_dense_layers: int = 0
    dense_intermediate_size: int = 0
    num_shared_experts: int = 0
    num_expert_groups: int = 1
    topk_expert_groups: int = 1
    num_mtp_layers: int = 0
    # Gemma 3: RMSNorms before and after both attention and the MLP (input, post_attention, pre_feedforward,
    # post_feedforward; vLLM gemma3.py `Gemma3DecoderLayer`): four per layer, not two.
    sandwich_norms: bool = False
    # Llama 4: its "sliding_attention" layers attend within chunks of `sliding_window` tokens (attention_chunk_size;
    # vLLM ChunkedLocalAttention: a query at position p sees the p mod chunk + 1 keys of its chunk), its
    # "full_attention" layers (NoPE, every fourth) every key.
    chunked_local_attention: bool = False

    def __post_init__(self) -> None:
        where = f"model '{self.name}'"
        for field in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                      "intermediate_size", "vocab_size", "max_position_embeddings"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{where}: {_HF_NAMES.get(field, field)} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{where}: num_attention_heads ({self.num_heads}) must be a multiple of "
                             f"num_key_value_heads ({self.num_kv_heads})")
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise ValueError(f"{where}: sliding_window must be positive or null, got {self.sliding_window}")
        if self.num_experts < 0 or (self.num_experts > 0) != (self.num_experts_per_tok > 0):
            raise ValueError(f"{where}: num_local_experts and num_experts_per_tok must both be set for MoE")
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(f"{where}: num_experts_per_tok ({self.num_experts_per_tok}) exceeds "
                             f"num_local_experts ({self.num_experts})")
        if self.rms_norm_eps <= 0 or self.rope_theta <= 0:
            raise ValueError(f"{where}: rms_norm_eps and rope_theta must be positive")
        if self.layer_types is not None:
            if len(self.layer_types) != self.num_layers or not set(self.layer_types) <= set(LAYER_TYPES):
                raise ValueError(f"{where}: layer_types must name one of {', '.join(LAYER_TYPES)} for each of the "
                                 f"{self.num_layers} layers")
            if "sliding_attention" in self.layer_types and self.sliding_window is None:
                raise ValueError(f"{where}: sliding_attention layers need a sliding_window")
        if self.chunked_local_attention and not self.is_hybrid_attention:
            raise ValueError(f"{where}: chunked local attention needs both chunked and global layers (no_rope_layers)")
        if self.rotary_dim is not None and not 0 < self.rotary_dim <= self.head_dim:
            raise ValueError(f"{where}: rotary_dim must be in (0, head_dim], got {self.rotary_dim}")
        if self.mla is not None:
            for field in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                value = getattr(self.mla, field)
                if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                    raise ValueError(f"{where}: {field} must be a positive integer, got {value!r}")
            if self.mla.q_lora_rank is not None and (not isinstance(self.mla.q_lora_rank, int)
                                                     or self.mla.q_lora_rank <= 0):
                raise ValueError(f"{where}: q_lora_rank must be a positive integer or null, got "
                                 f"{self.mla.q_lora_rank!r}")
        if not 0 <= self.num_dense_layers <= self.num_layers:
            raise ValueError(f"{where}: first_k_dense_replace must be in [0, num_hidden_layers], got "
                             f"{self.num_dense_layers}")
        if self.num_dense_layers and self.dense_intermediate_size <= 0:
            raise ValueError(f"{where}: dense layers need a positive intermediate_size")
        if self.num_expert_groups < 1 or self.num_experts % self.num_expert_groups or \
                not 1 <= self.topk_expert_groups <= self.num_expert_groups:
            raise ValueError(f"{where}: n_group must divide n_routed_experts and topk_group be in [1, n_group], got "
                             f"n_group {self.num_expert_groups}, topk_group {self.topk_expert_groups}")
        if self.num_shared_experts < 0 or self.num_mtp_layers < 0:
            raise ValueError(f"{where}: n_shared_experts and num_nextn_predict_layers must be >= 0")

    # ---- shapes -----------------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def router_fp32(self) -> bool:
        """Whether vLLM runs the router in fp32: MiniMax-M2's gate is a `ReplicatedLinear` with fp32 weights fed
        the hidden states cast to fp32 (`router_logits_dtype=torch.float32`; vllm/model_executor/models/
        minimax_m2.py, 0.19.0 and 0.32.0 alike), so its GEMM runs at the float32 matmul precision vLLM sets
        (`VLLM_FLOAT32_MATMUL_PRECISION`, default "highest": true fp32, no tensor cores). Other architectures
        route in the activation dtype."""
        # GLM-4.x MoE likewise: its gate is an fp32 nn.Linear fed `hidden_states.to(torch.float32)` (vLLM
        # models/glm4_moe.py `Glm4MoE`).
        return self.architecture in ("MiniMaxM2ForCausalLM", "Glm4MoeForCausalLM")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def is_mla(self) -> bool:
        return self.mla is not None

    @property
    def num_moe_layers(self) -> int:
        """Layers with MoE experts (all of an MoE model's but its first `num_dense_layers`)."""
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    def attention_params(self) -> int:
        """One layer's attention parameters."""
        h = self.hidden_size
        if self.mla is not None:
            m, heads = self.mla, self.num_heads
            # q_a_proj + q_a_layernorm + q_b_proj (or q_proj), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj
            q = (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * heads * m.qk_head_dim if m.q_lora_rank
                 else h * heads * m.qk_head_dim)
            return (q + h * m.latent_width + m.kv_lora_rank + m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
                    + heads * m.v_head_dim * h)
        attn = h * (self.q_size + 2 * self.kv_size) + self.q_size * h
        if self.attention_bias:
            attn += self.q_size + 2 * self.kv_size
        if self.o_proj_bias:
            attn += h
        if self.qk_norm:
            attn += self.q_size + self.kv_size if self.qk_norm_per_layer else 2 * self.head_dim
        if self.attention_sinks:
            attn += self.num_heads
        return attn

    def layer_params(self, dense: bool = False) -> dict[str, int]:
        """Parameters of one decoder layer, by part; `dense`: one of an MoE model's first dense layers."""
        h = self.hidden_size
        if not self.is_moe:
            mlp = self.expert_params()  # dense: gate, up, down
        elif dense:
            mlp = 3 * h * self.dense_intermediate_size
        else:
            mlp = self.num_experts * self.expert_params() + h * self.num_experts  # experts + router
            mlp += 3 * h * self.intermediate_size * self.num_shared_experts
            if self.router_bias:
                mlp += self.num_experts
        return {"attention": self.attention_params(), "mlp": mlp, "norms": (4 if self.sandwich_norms else 2) * h}

    def expert_params(self) -> int:
        """One expert's (or the dense MLP's) gate, up and down projections, with their biases."""
        h, i = self.hidden_size, self.intermediate_size
        return 3 * h * i + ((2 * i + h) if self.expert_bias else 0)

    @property
    def num_sliding_layers(self) -> int:
        """Layers with sliding-window attention."""
        if self.sliding_window is None:
            return 0
        if self.layer_types is None:
            return self.num_layers
        return self.layer_types.count("sliding_attention")

    @property
    def is_hybrid_attention(self) -> bool:
        """Some layers slide and some attend fully (vLLM's hybrid KV-cache allocator)."""
        return 0 < self.num_sliding_layers < self.num_layers

    def num_params(self) -> int:
        """All parameters, counting the LM head once more when it is not tied to the embedding."""
        embed = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else embed
        return (embed + lm_head + self.hidden_size + (self.num_layers - self.num_dense_layers)
                * sum(self.layer_params().values()) + self.num_dense_layers * sum(self.layer_params(dense=True).values()))

    def num_mtp_params(self) -> int:
        """The multi-token-prediction modules' parameters as the checkpoint stores them (DeepSeek-V3 report, section
        2.2; vLLM `DeepSeekMultiTokenPredictorLayer`, models/deepseek_mtp.py): per module its own embedding and
        output head copies, two input norms (enorm, hnorm), the projection of the two concatenated (eh_proj, 2h ->
        h), one MoE decoder layer and the head's norm."""
        h = self.hidden_size
        per = 2 * self.vocab_size * h + 3 * h + 2 * h * h + sum(self.layer_params().values())
        return self.num_mtp_layers * per

    def num_active_params(self, include_embedding: bool = True) -> int:
        """Parameters a token touches (MoE: only its top-k experts); without the embedding table if asked."""
        embed = 0 if include_embedding else self.vocab_size * self.hidden_size
        if not self.is_moe:
            return self.num_params() - embed
        inactive = (self.num_experts - self.num_experts_per_tok) * self.expert_params()
        return self.num_params() - self.num_moe_layers * inactive - embed

    def kv_bytes_per_token(self, kv_bytes_per_element: float) -> float:
        """K and V of one token over all layers (unsharded); MLA: the latent and rotated key (`MlaDims.latent_width`)."""
        if self.mla is not None:
            return self.num_layers * self.mla.latent_width * kv_bytes_per_element
        return 2 * self.num_layers * self.kv_size * kv_bytes_per_element

    # ---- HF config --------------------------------------------------------------------------------
    @classmethod
    def from_hf_config(cls, config: dict[str, Any], name: str) -> "ModelSpec":
        where = f"model '{name}'"
        archs = config.get("architectures") or []
        arch = archs[0] if archs else None
        if arch in _TEXT_CONFIG_WRAPPERS and isinstance(config.get("text_config"), dict):
            text = _text_model_config(config)
            text.setdefault("architectures", [_TEXT_CONFIG_WRAPPERS[arch]])
            return cls.from_hf_config(text, name)
        if arch == "Gemma3ForCausalLM":
            config = {**_GEMMA3_TEXT_DEFAULTS, **{k: v for k, v in config.items() if v is not None or
                                                  k == "rope_scaling"}}
        if arch == "DeepseekV32ForCausalLM":
            raise ValueError(f"{where}: architecture 'DeepseekV32ForCausalLM' (DeepSeek-V3.2's sparse attention: an "
                             f"indexer selecting {config.get('index_topk', 2048)} keys per query) is not modelled; "
                             f"allowed: {', '.join(SUPPORTED_ARCHITECTURES)}")
        if arch in _REFUSED_ARCHITECTURES:
            raise ValueError(f"{where}: architecture {arch!r} ({_REFUSED_ARCHITECTURES[arch]}) is not modelled; "
                             f"allowed: {', '.join(SUPPORTED_ARCHITECTURES)}")
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ValueError(f"{where}: architecture {arch!r} is not supported; "
                             f"allowed: {', '.join(SUPPORTED_ARCHITECTURES)}")

        def need(key: str) -> Any:
            if key not in config:
                raise ValueError(f"{where}: config.json is missing '{key}'")
            return config[key]

        hidden = need("hidden_size")
        heads = need("num_attention_heads")
        head_dim: Any = config.get("head_dim") or (hidden // heads if isinstance(hidden, int) and isinstance(heads, int)
                                              and heads > 0 else None)
        rope_scaling = None
        raw = config.get("rope_scaling")
        if raw:
            rope_type = raw.get("rope_type", raw.get("type", "default"))
            if rope_type not in _ROPE_TYPES:
                raise ValueError(f"{where}: rope_scaling.rope_type {rope_type!r} not supported; "
                                 f"allowed: {', '.join(_ROPE_TYPES)}")
            rope_scaling = RopeScaling(
                rope_type=rope_type,
                factor=float(raw.get("factor", 1.0)),
                low_freq_factor=float(raw.get("low_freq_factor", 1.0)),
                high_freq_factor=float(raw.get("high_freq_factor", 4.0)),
                original_max_position_embeddings=int(raw.get("original_max_position_embeddings", 8192)),
            )
        sliding = config.get("sliding_window")
        if arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM") and \
                not config.get("use_sliding_window", False):
            sliding = None  # Qwen configs carry a window they do not use
        layer_types = config.get("layer_types")
        if arch == "GptOssForCausalLM":
            # vLLM's gpt_oss.py slides on even layers (`layer_idx % 2 == 0`); the config's layer_types say the same.
            layer_types = layer_types or ["sliding_attention" if i % 2 == 0 else "full_attention"
                                          for i in range(need("num_hidden_layers"))]
        elif arch == "Gemma3ForCausalLM":
            # vLLM gemma3.py: a layer slides when config.layer_types says so; older configs give
            # sliding_window_pattern instead: every pattern-th layer is global (transformers' Gemma3TextConfig).
            pattern = int(config.get("sliding_window_pattern") or 6)
            layer_types = layer_types or ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                                          for i in range(need("num_hidden_layers"))]
        elif arch == "Llama4ForCausalLM":
            # vLLM llama4.py: a layer whose no_rope_layers entry is 0 is a NoPE global layer, the others (RoPE) attend
            # within chunks of attention_chunk_size; transformers' Llama4TextConfig default: every fourth layer NoPE.
            nope = config.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(need("num_hidden_layers"))]
            layer_types = ["sliding_attention" if use_rope else "full_attention" for use_rope in nope]
            sliding = need("attention_chunk_size")
        elif layer_types is not None and arch not in ("MistralForCausalLM",):
            layer_types = None  # other architectures apply one attention type to every layer in vLLM
        eos = config.get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        moe = arch in ("MixtralForCausalLM", "GptOssForCausalLM", "Qwen3MoeForCausalLM", "MiniMaxM2ForCausalLM",
                       "DeepseekV3ForCausalLM", "Glm4MoeForCausalLM", "Llama4ForCausalLM")
        deepseek = arch == "DeepseekV3ForCausalLM"
        # GLM-4.5 / 4.6 (vLLM models/glm4_moe.py): DeepSeek-V3's MoE layout (first_k_dense_replace dense layers,
        # shared experts, sigmoid routing with e_score_correction_bias, grouped top-k) under GQA attention with
        # optional qkv bias (attention_bias), optional per-head q/k RMSNorm (use_qk_norm) and RoPE on
        # partial_rotary_factor of each head (0.5).
        glm = arch == "Glm4MoeForCausalLM"
        deepseek_moe = deepseek or glm
        # Llama 4 (vLLM models/llama4.py): MoE on every interleave_moe_layer_step-th layer (top-k of
        # num_local_experts experts of intermediate_size, plus one shared expert of that width), dense MLPs of
        # intermediate_size_mlp on the others; counted as num_dense_layers dense layers (the order does not change a
        # step's cost). Its q/k L2 norm has no weights (use_qk_norm: `L2Norm`), not counted.
        llama4 = arch == "Llama4ForCausalLM"
        moe_step = int(config.get("interleave_moe_layer_step") or 1) if llama4 else 1
        mla = None
        if deepseek:
            if config.get("moe_layer_freq", 1) != 1:
                raise ValueError(f"{where}: moe_layer_freq {config.get('moe_layer_freq')} is not supported; allowed: 1")
            mla = MlaDims(q_lora_rank=config.get("q_lora_rank"), kv_lora_rank=need("kv_lora_rank"),
                          qk_nope_head_dim=need("qk_nope_head_dim"), qk_rope_head_dim=need("qk_rope_head_dim"),
                          v_head_dim=need("v_head_dim"))
            head_dim = mla.qk_head_dim
        if arch == "Qwen3MoeForCausalLM":
            if config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1:
                raise ValueError(f"{where}: dense layers among MoE layers (mlp_only_layers, decoder_sparse_step "
                                 f"!= 1) are not supported")
            inter = need("moe_intermediate_size")
        elif deepseek_moe:
            inter = need("moe_intermediate_size")
        else:
            inter = need("intermediate_size")
        if arch == "MiniMaxM2ForCausalLM" and config.get("shared_intermediate_size", 0):
            raise ValueError(f"{where}: shared experts (shared_intermediate_size > 0) are not supported")
        num_experts = ({"Qwen3MoeForCausalLM": config.get("num_experts"), "DeepseekV3ForCausalLM":
                        config.get("n_routed_experts"), "Glm4MoeForCausalLM": config.get("n_routed_experts")}
                       .get(arch, config.get("num_local_experts"))) if moe else 0
        topk = (config.get("num_experts_per_tok") or config.get("experts_per_token")) if moe else 0
        gpt_oss = arch == "GptOssForCausalLM"
        minimax = arch == "MiniMaxM2ForCausalLM"
        return cls(
            name=name,
            architecture=arch,
            num_layers=need("num_hidden_layers"),
            hidden_size=hidden,
            num_heads=heads,
            # Absent or null: as many KV heads as query heads (HF's default); 0 is an error, never a default.
            # (DeepSeek's MLA caches one latent per token: its query heads stand in, as before.)
            num_kv_heads=heads if deepseek or config.get("num_key_value_heads") is None
            else config["num_key_value_heads"],
            head_dim=head_dim,
            intermediate_size=inter,
            vocab_size=need("vocab_size"),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            rope_theta=float(config.get("rope_theta", 10000.0)),
            rope_scaling=rope_scaling,
            max_position_embeddings=config.get("max_position_embeddings", 4096),
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-5)),
            qk_norm=arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Gemma3ForCausalLM")
            or ((minimax or glm) and bool(config.get("use_qk_norm"))),
            attention_bias=arch == "Qwen2ForCausalLM" or bool(config.get("attention_bias", False)),
            sliding_window=sliding,
            num_experts=num_experts or 0,
            num_experts_per_tok=topk or 0,
            norm_topk_prob=bool(config.get("norm_topk_prob", False)) if arch in ("Qwen3MoeForCausalLM",
                                                                                  "DeepseekV3ForCausalLM",
                                                                                  "Glm4MoeForCausalLM") else True,
            torch_dtype=str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"),
            bos_token_id=config.get("bos_token_id"),
            eos_token_id=eos,
            layer_types=tuple(layer_types) if layer_types is not None else None,
            attention_sinks=gpt_oss,
            o_proj_bias=gpt_oss and bool(config.get("attention_bias", False)),
            qk_norm_per_layer=minimax and config.get("qk_norm_type", "per_layer") == "per_layer",
            rotary_dim=config.get("rotary_dim") if minimax else
            int(head_dim * float(config.get("partial_rotary_factor", 0.5))) if glm else None,
            expert_bias=gpt_oss,
            router_bias=gpt_oss or (minimax and bool(config.get("use_routing_bias", False)))
            or (deepseek and config.get("topk_method") == "noaux_tc") or glm,  # e_score_correction_bias
            checkpoint_quant=checkpoint_quant(config.get("quantization_config"), where),
            mla=mla,
            num_dense_layers=int(config.get("first_k_dense_replace") or 0) if deepseek_moe else
            need("num_hidden_layers") - need("num_hidden_layers") // moe_step if llama4 else 0,
            dense_intermediate_size=need("intermediate_size") if deepseek_moe else
            need("intermediate_size_mlp") if llama4 and moe_step > 1 else 0,
            num_shared_experts=int(config.get("n_shared_experts") or 0) if deepseek_moe else 1 if llama4 else 0,
            num_expert_groups=int(config.get("n_group") or 1) if deepseek_moe else 1,
            topk_expert_groups=int(config.get("topk_group") or 1) if deepseek_moe else 1,
            num_mtp_layers=int(config.get("num_nextn_predict_layers") or 0) if deepseek_moe else 0,
            sandwich_norms=arch == "Gemma3ForCausalLM",
            chunked_local_attention=llama4,
        )

    @classmethod
    def from_path(cls, path: str | Path, name: str | None = None) -> "ModelSpec":
        """A `config.json` file or a directory holding one (an HF model directory)."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise ValueError(f"model: no config.json at '{path}'")
        try:
            config = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"model: '{path}' is not valid JSON: {exc.msg} at line {exc.lineno}") from None
        if not isinstance(config, dict):
            raise ValueError(f"model: '{path}' must hold a JSON object")
        default_name = path.parent.name if path.name == "config.json" else path.stem
        # NVIDIA ModelOpt checkpoints: vLLM reads the quantization from hf_quant_config.json next to config.json
        # (for a file named "<name>_config.json", as aiconfigurator-core ships them: "<name>_hf_quant_config.json").
        modelopt = path.parent / ("hf_quant_config.json" if path.name == "config.json"
                                  else path.name.removesuffix("config.json") + "hf_quant_config.json")
        if path.name.endswith("config.json") and modelopt.exists() and "quantization_config" not in config:
            config = {**config, "quantization_config": {**json.loads(modelopt.read_text()).get("quantization", {}),
                                                        "quant_method": "modelopt"}}
        return cls.from_hf_config(config, name or config.get("_name_or_path") or default_name)

    def to_hf_config(self) -> dict[str, Any]:
        """An HF `config.json` that `transformers` (and vLLM) load as this architecture."""
        model_type = _MODEL_TYPES[self.architecture]
        config: dict[str, Any] = {
            "architectures": [self.architecture],
            "model_type": model_type,
            "_name_or_path": self.name,
            "num_hidden_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "tie_word_embeddings": self.tie_word_embeddings,
            "rope_theta": self.rope_theta,
            "rope_scaling": None if self.rope_scaling is None else asdict(self.rope_scaling),
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "hidden_act": "silu",
            "attention_bias": self.attention_bias and self.architecture != "Qwen2ForCausalLM",
            "sliding_window": self.sliding_window,
            "torch_dtype": self.torch_dtype,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
        }
        if self.architecture in ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM"):
            config["use_sliding_window"] = self.sliding_window is not None
        if self.is_moe:
            config["num_local_experts"] = self.num_experts
            config["num_experts_per_tok"] = self.num_experts_per_tok
        if self.architecture == "Qwen3MoeForCausalLM":
            config.update(num_experts=self.num_experts, moe_intermediate_size=self.intermediate_size,
                          decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=self.norm_topk_prob)
        if self.architecture == "GptOssForCausalLM":
            config["attention_bias"] = self.attention_bias
        if self.architecture == "MiniMaxM2ForCausalLM":
            config.update(use_qk_norm=self.qk_norm, qk_norm_type="per_layer" if self.qk_norm_per_layer else
                          "per_head", rotary_dim=self.rotary_dim, use_routing_bias=self.router_bias,
                          shared_intermediate_size=0, scoring_func="sigmoid")
        if self.architecture == "Llama4ForCausalLM":
            assert self.layer_types is not None
            config.update(interleave_moe_layer_step=self.num_layers // self.num_moe_layers,
                          intermediate_size_mlp=self.dense_intermediate_size, attention_chunk_size=self.sliding_window,
                          no_rope_layers=[int(t == "sliding_attention") for t in self.layer_types])
        if self.architecture == "Glm4MoeForCausalLM":
            del config["num_local_experts"]
            config.update(n_routed_experts=self.num_experts, moe_intermediate_size=self.intermediate_size,
                          intermediate_size=self.dense_intermediate_size, first_k_dense_replace=self.num_dense_layers,
                          n_shared_experts=self.num_shared_experts, n_group=self.num_expert_groups,
                          topk_group=self.topk_expert_groups, num_nextn_predict_layers=self.num_mtp_layers,
                          norm_topk_prob=self.norm_topk_prob, use_qk_norm=self.qk_norm,
                          partial_rotary_factor=(self.rotary_dim or self.head_dim) / self.head_dim)
        if self.mla is not None:
            del config["num_local_experts"], config["head_dim"]
            config.update(q_lora_rank=self.mla.q_lora_rank, kv_lora_rank=self.mla.kv_lora_rank,
                          qk_nope_head_dim=self.mla.qk_nope_head_dim, qk_rope_head_dim=self.mla.qk_rope_head_dim,
                          v_head_dim=self.mla.v_head_dim, n_routed_experts=self.num_experts,
                          moe_intermediate_size=self.intermediate_size, intermediate_size=self.dense_intermediate_size,
                          first_k_dense_replace=self.num_dense_layers, n_shared_experts=self.num_shared_experts,
                          n_group=self.num_expert_groups, topk_group=self.topk_expert_groups,
                          num_nextn_predict_layers=self.num_mtp_layers, norm_topk_prob=self.norm_topk_prob,
                          topk_method="noaux_tc" if self.router_bias else "greedy", scoring_func="sigmoid",
                          moe_layer_freq=1)
        if self.layer_types is not None:
            config["layer_types"] = list(self.layer_types)
        if self.checkpoint_quant is not None:
            config["quantization_config"] = self.checkpoint_quant.to_hf_config()
        return config


def _text_model_config(config: dict[str, Any]) -> dict[str, Any]:
    """A multimodal wrapper's text model config (Kimi-K2.5: `text_config`, a DeepseekV3ForCausalLM), with the
    wrapper's quantization_config, its ignore patterns renamed from the wrapper's module names
    ("language_model.model.layers...") to the text model's ("model.layers...")."""
    text = dict(config["text_config"])
    quant = config.get("quantization_config") or text.get("quantization_config")
    if quant:
        quant = dict(quant)
        for key in ("ignore", "modules_to_not_convert", "exclude_modules", "ignored_layers"):
            if quant.get(key):
                quant[key] = [p.replace("language_model.", "", 1) for p in quant[key]]
        text["quantization_config"] = quant
    for key in ("torch_dtype", "dtype"):
        text.setdefault(key, config.get(key))
    return text


def format_params(n: float) -> str:
    """8.03e9 -> '8.03B'."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.{max(0, 2 - int(math.log10(abs(n) / scale)))}f}{unit}"
    return str(int(n))
