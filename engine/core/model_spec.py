"""Model architecture specs from HF `config.json`.

A `ModelSpec` is the frozen, validated shape of a decoder-only transformer: what the engine builds and what
the cost model counts. It loads the `config.json` of LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
Qwen3ForCausalLM and MixtralForCausalLM; anything else is a `ValueError` naming the architecture.

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

SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "MixtralForCausalLM",
)

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
    torch_dtype: str = "bfloat16"
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    def __post_init__(self) -> None:
        where = f"model '{self.name}'"
        for field in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                      "intermediate_size", "vocab_size", "max_position_embeddings"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{where}: {field} must be a positive integer, got {value!r}")
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

    # ---- shapes -----------------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def layer_params(self) -> dict[str, int]:
        """Parameters of one decoder layer, by part."""
        h = self.hidden_size
        attn = h * (self.q_size + 2 * self.kv_size) + self.q_size * h
        if self.attention_bias:
            attn += self.q_size + 2 * self.kv_size
        if self.qk_norm:
            attn += 2 * self.head_dim
        mlp_one = 3 * h * self.intermediate_size  # gate, up, down
        if self.is_moe:
            mlp = self.num_experts * mlp_one + h * self.num_experts  # experts + router
        else:
            mlp = mlp_one
        return {"attention": attn, "mlp": mlp, "norms": 2 * h}

    def num_params(self) -> int:
        """All parameters, counting the LM head once more when it is not tied to the embedding."""
        embed = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else embed
        return embed + lm_head + self.hidden_size + self.num_layers * sum(self.layer_params().values())

    def num_active_params(self) -> int:
        """Parameters a token touches (MoE: only its top-k experts)."""
        if not self.is_moe:
            return self.num_params()
        inactive = (self.num_experts - self.num_experts_per_tok) * 3 * self.hidden_size * self.intermediate_size
        return self.num_params() - self.num_layers * inactive

    def kv_bytes_per_token(self, kv_bytes_per_element: float) -> float:
        """K and V of one token over all layers (unsharded)."""
        return 2 * self.num_layers * self.kv_size * kv_bytes_per_element

    # ---- HF config --------------------------------------------------------------------------------
    @classmethod
    def from_hf_config(cls, config: dict[str, Any], name: str) -> "ModelSpec":
        where = f"model '{name}'"
        archs = config.get("architectures") or []
        arch = archs[0] if archs else None
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ValueError(f"{where}: architecture {arch!r} is not supported; "
                             f"allowed: {', '.join(SUPPORTED_ARCHITECTURES)}")

        def need(key: str) -> Any:
            if key not in config:
                raise ValueError(f"{where}: config.json is missing '{key}'")
            return config[key]

        hidden = need("hidden_size")
        heads = need("num_attention_heads")
        head_dim = config.get("head_dim") or (hidden // heads if isinstance(hidden, int) and isinstance(heads, int)
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
        if arch == "Qwen2ForCausalLM" and not config.get("use_sliding_window", False):
            sliding = None  # Qwen2 configs carry a window they do not use
        if arch == "Qwen3ForCausalLM" and not config.get("use_sliding_window", False):
            sliding = None
        eos = config.get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        return cls(
            name=name,
            architecture=arch,
            num_layers=need("num_hidden_layers"),
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            intermediate_size=need("intermediate_size"),
            vocab_size=need("vocab_size"),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            rope_theta=float(config.get("rope_theta", 10000.0)),
            rope_scaling=rope_scaling,
            max_position_embeddings=config.get("max_position_embeddings", 4096),
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-5)),
            qk_norm=arch == "Qwen3ForCausalLM",
            attention_bias=arch == "Qwen2ForCausalLM" or bool(config.get("attention_bias", False)),
            sliding_window=sliding,
            num_experts=config.get("num_local_experts", 0) if arch == "MixtralForCausalLM" else 0,
            num_experts_per_tok=config.get("num_experts_per_tok", 0) if arch == "MixtralForCausalLM" else 0,
            torch_dtype=str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"),
            bos_token_id=config.get("bos_token_id"),
            eos_token_id=eos,
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
        return cls.from_hf_config(config, name or config.get("_name_or_path") or default_name)

    def to_hf_config(self) -> dict[str, Any]:
        """An HF `config.json` that `transformers` (and vLLM) load as this architecture."""
        model_type = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
                      "Qwen3ForCausalLM": "qwen3", "MixtralForCausalLM": "mixtral"}[self.architecture]
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
        if self.architecture in ("Qwen2ForCausalLM", "Qwen3ForCausalLM"):
            config["use_sliding_window"] = self.sliding_window is not None
        if self.is_moe:
            config["num_local_experts"] = self.num_experts
            config["num_experts_per_tok"] = self.num_experts_per_tok
        return config


def format_params(n: float) -> str:
    """8.03e9 -> '8.03B'."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.{max(0, 2 - int(math.log10(abs(n) / scale)))}f}{unit}"
    return str(int(n))
