"""Model architecture specs from HF `config.json`.

A `ModelSpec` is the frozen, validated shape of a decoder-only transformer: what the engine builds and what
the cost model counts. It loads the `config.json` of LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
Qwen3ForCausalLM, MixtralForCausalLM and the MoE architectures GptOssForCausalLM (`gpt_oss`),
Qwen3MoeForCausalLM (`qwen3_moe`) and MiniMaxM2ForCausalLM (`minimax_m2`); anything else is a `ValueError`
naming the architecture and the supported ones. A checkpoint's own `quantization_config` (and NVIDIA's
`hf_quant_config.json` next to the config) is kept as `CheckpointQuant`; `roofline.cost.quant` resolves it per
module.

Parameter counting (`num_params`, `num_active_params`): every tensor vLLM loads for serving (embedding, LM head
unless tied, decoder layers with biases, norms, attention sinks, router and its correction bias, final norm;
not the multi-token-prediction modules of MiniMax-M2, which vLLM loads only for speculative decoding).
Active = what one token touches: everything but the experts it is not routed to; `include_embedding=False`
leaves the embedding table out (a lookup, not a matmul), the convention of OpenAI's gpt-oss model card.

    spec = ModelSpec.from_path("path/to/config.json")   # or a directory holding one
    spec.num_params()                                    # 8_030_261_248 for Llama-3.1-8B

Torch-free: both `engine` and `roofline` import it.
"""

from __future__ import annotations

import fnmatch
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
    "GptOssForCausalLM",
    "Qwen3MoeForCausalLM",
    "MiniMaxM2ForCausalLM",
)
_MODEL_TYPES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
                "Qwen3ForCausalLM": "qwen3", "MixtralForCausalLM": "mixtral", "GptOssForCausalLM": "gpt_oss",
                "Qwen3MoeForCausalLM": "qwen3_moe", "MiniMaxM2ForCausalLM": "minimax_m2"}
LAYER_TYPES = ("full_attention", "sliding_attention")
# quant_method of a checkpoint's quantization_config (or hf_quant_config.json's quant_algo) -> our scheme name
# (`roofline.cost.quant`). fp8 with weight_block_size [128, 128] is "fp8-block".
CHECKPOINT_QUANT_METHODS = ("fp8", "fp8-block", "mxfp4", "nvfp4")

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
class CheckpointQuant:
    """How a checkpoint's weights are stored, as its config says (vLLM reads the same fields):
    `method` one of CHECKPOINT_QUANT_METHODS; `ignore` the module-name patterns left unquantized
    (`modules_to_not_convert`, `ignore`, `exclude_modules`), as written there."""

    method: str
    ignore: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.method not in CHECKPOINT_QUANT_METHODS:
            raise ValueError(f"quantization method {self.method!r} is not supported; "
                             f"allowed: {', '.join(CHECKPOINT_QUANT_METHODS)}")

    def to_hf_config(self) -> dict[str, Any]:
        """A `quantization_config` that `checkpoint_quant` reads back as this."""
        if self.method in ("fp8", "fp8-block"):
            raw: dict[str, Any] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
            if self.method == "fp8-block":
                raw["weight_block_size"] = [128, 128]
        elif self.method == "nvfp4":
            raw = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
        else:
            raw = {"quant_method": self.method}
        return {**raw, "modules_to_not_convert": list(self.ignore)}

    def ignores(self, module: str) -> bool:
        """Whether a module (its name in vLLM, e.g. "model.layers.0.self_attn.qkv_proj") is left unquantized:
        a pattern matches when it is a dotted prefix of the name or fnmatch-matches it (vLLM's `is_layer_skipped`
        prefix test; `*` wildcards of modelopt's exclude_modules)."""
        return any(fnmatch.fnmatch(module, p) or fnmatch.fnmatch(module, p + ".*")
                   or f".{p}." in f".{module}." for p in self.ignore)


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
        if self.layer_types is not None:
            if len(self.layer_types) != self.num_layers or not set(self.layer_types) <= set(LAYER_TYPES):
                raise ValueError(f"{where}: layer_types must name one of {', '.join(LAYER_TYPES)} for each of the "
                                 f"{self.num_layers} layers")
            if "sliding_attention" in self.layer_types and self.sliding_window is None:
                raise ValueError(f"{where}: sliding_attention layers need a sliding_window")
        if self.rotary_dim is not None and not 0 < self.rotary_dim <= self.head_dim:
            raise ValueError(f"{where}: rotary_dim must be in (0, head_dim], got {self.rotary_dim}")

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
        return self.architecture == "MiniMaxM2ForCausalLM"

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
        if self.o_proj_bias:
            attn += h
        if self.qk_norm:
            attn += self.q_size + self.kv_size if self.qk_norm_per_layer else 2 * self.head_dim
        if self.attention_sinks:
            attn += self.num_heads
        mlp = self.expert_params()  # dense: gate, up, down
        if self.is_moe:
            mlp = self.num_experts * mlp + h * self.num_experts  # experts + router
            if self.router_bias:
                mlp += self.num_experts
        return {"attention": attn, "mlp": mlp, "norms": 2 * h}

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
        return embed + lm_head + self.hidden_size + self.num_layers * sum(self.layer_params().values())

    def num_active_params(self, include_embedding: bool = True) -> int:
        """Parameters a token touches (MoE: only its top-k experts); without the embedding table if asked."""
        embed = 0 if include_embedding else self.vocab_size * self.hidden_size
        if not self.is_moe:
            return self.num_params() - embed
        inactive = (self.num_experts - self.num_experts_per_tok) * self.expert_params()
        return self.num_params() - self.num_layers * inactive - embed

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
        elif layer_types is not None and arch not in ("MistralForCausalLM",):
            layer_types = None  # other architectures apply one attention type to every layer in vLLM
        eos = config.get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        moe = arch in ("MixtralForCausalLM", "GptOssForCausalLM", "Qwen3MoeForCausalLM", "MiniMaxM2ForCausalLM")
        if arch == "Qwen3MoeForCausalLM":
            if config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1:
                raise ValueError(f"{where}: dense layers among MoE layers (mlp_only_layers, decoder_sparse_step "
                                 f"!= 1) are not supported")
            inter = need("moe_intermediate_size")
        else:
            inter = need("intermediate_size")
        if arch == "MiniMaxM2ForCausalLM" and config.get("shared_intermediate_size", 0):
            raise ValueError(f"{where}: shared experts (shared_intermediate_size > 0) are not supported")
        num_experts = (config.get("num_experts") if arch == "Qwen3MoeForCausalLM"
                       else config.get("num_local_experts")) if moe else 0
        topk = (config.get("num_experts_per_tok") or config.get("experts_per_token")) if moe else 0
        gpt_oss = arch == "GptOssForCausalLM"
        minimax = arch == "MiniMaxM2ForCausalLM"
        return cls(
            name=name,
            architecture=arch,
            num_layers=need("num_hidden_layers"),
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            intermediate_size=inter,
            vocab_size=need("vocab_size"),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            rope_theta=float(config.get("rope_theta", 10000.0)),
            rope_scaling=rope_scaling,
            max_position_embeddings=config.get("max_position_embeddings", 4096),
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-5)),
            qk_norm=arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM") or (minimax and
                                                                            bool(config.get("use_qk_norm"))),
            attention_bias=arch == "Qwen2ForCausalLM" or bool(config.get("attention_bias", False)),
            sliding_window=sliding,
            num_experts=num_experts or 0,
            num_experts_per_tok=topk or 0,
            norm_topk_prob=bool(config.get("norm_topk_prob", False)) if arch == "Qwen3MoeForCausalLM" else True,
            torch_dtype=str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"),
            bos_token_id=config.get("bos_token_id"),
            eos_token_id=eos,
            layer_types=tuple(layer_types) if layer_types is not None else None,
            attention_sinks=gpt_oss,
            o_proj_bias=gpt_oss and bool(config.get("attention_bias", False)),
            qk_norm_per_layer=minimax and config.get("qk_norm_type", "per_layer") == "per_layer",
            rotary_dim=config.get("rotary_dim") if minimax else None,
            expert_bias=gpt_oss,
            router_bias=gpt_oss or (minimax and bool(config.get("use_routing_bias", False))),
            checkpoint_quant=checkpoint_quant(config.get("quantization_config"), where),
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
        if self.layer_types is not None:
            config["layer_types"] = list(self.layer_types)
        if self.checkpoint_quant is not None:
            config["quantization_config"] = self.checkpoint_quant.to_hf_config()
        return config


def checkpoint_quant(raw: dict[str, Any] | None, where: str) -> CheckpointQuant | None:
    """A config's `quantization_config` (or hf_quant_config.json's "quantization", marked quant_method
    "modelopt") -> CheckpointQuant; None when the checkpoint is not quantized; ValueError for a method not
    supported. As vLLM reads them: fp8 (`Fp8Config`: `weight_block_size` [128, 128] = block-scaled,
    `ignored_layers` / `modules_to_not_convert`), mxfp4 (`Mxfp4Config`: `modules_to_not_convert`), ModelOpt
    (`quant_algo` FP8 / NVFP4, `exclude_modules`)."""
    if not raw:
        return None
    method = str(raw.get("quant_method", "")).lower()
    ignore = tuple(raw.get("modules_to_not_convert") or raw.get("ignored_layers") or raw.get("ignore")
                   or raw.get("exclude_modules") or ())
    if method == "modelopt":
        algo = str(raw.get("quant_algo", "")).upper()
        method = {"FP8": "fp8", "NVFP4": "nvfp4"}.get(algo, f"modelopt {algo}")
    elif method == "fp8":
        block = raw.get("weight_block_size")
        if block is not None:
            if list(block) != [128, 128]:
                raise ValueError(f"{where}: fp8 weight_block_size {block} is not supported; allowed: [128, 128]")
            method = "fp8-block"
    if method not in CHECKPOINT_QUANT_METHODS:
        raise ValueError(f"{where}: quantization_config quant_method {method!r} is not supported; "
                         f"allowed: fp8 (per-tensor or weight_block_size [128, 128]), mxfp4, modelopt FP8 / NVFP4")
    return CheckpointQuant(method=method, ignore=ignore)


def format_params(n: float) -> str:
    """8.03e9 -> '8.03B'."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.{max(0, 2 - int(math.log10(abs(n) / scale)))}f}{unit}"
    return str(int(n))
