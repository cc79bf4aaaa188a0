"""The Llama-family decoder the engine runs over a paged KV cache.

Covers LlamaForCausalLM, MistralForCausalLM (without a sliding window shorter than the context),
Qwen2ForCausalLM (q/k/v biases), Qwen3ForCausalLM (RMSNorm over each head's q and k before RoPE) and
Qwen3MoeForCausalLM (Qwen3 with a sparse mixture-of-experts block in place of every MLP, `SparseMoeBlock`):
RMSNorm, RoPE (default, linear and Llama-3 frequency scaling), grouped-query attention, SwiGLU MLP. Anything else,
the other MoE architectures (Mixtral, gpt-oss, MiniMax-M2) included, is a `ValueError` from `check_supported`.

The math follows transformers' `modeling_llama.py` (the reference the tests compare against): RMSNorm in fp32
cast back before the weight, RoPE as rotate-half on cos/sin tables built in fp32, softmax scale head_dim**-0.5.
Each is written with as few torch ops as give bit-identical results (checked in fp32 and bf16): on this CPU a
decode step's elementwise work is small and its cost is mostly per-op overhead.
The q/k/v projections are one fused matrix and the gate/up projections another (two GEMMs instead of five per
layer, as vLLM does); `engine.weights` splits and joins them at the HF checkpoint boundary. On a CPU with native
bf16, `prepack_weights` moves the GEMM weights into oneDNN's blocked layout once, after loading.

    model = LlamaModel(spec, dtype=torch.bfloat16, device=torch.device("cpu"))
    model.load_state_dict(engine.weights.to_fused(hf_state_dict, spec))
    hidden = model(input_ids, positions, meta, kv_cache)      # [num_tokens, hidden]
    logits = model.compute_logits(hidden[last_token_rows])    # [n, vocab], fp32
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from engine.attention import AttentionMetadata, PagedKVCache, paged_attention
from engine.core.model_spec import ModelSpec

# rope_scaling types whose frequencies this engine computes; "dynamic" and "yarn" change them with the
# sequence length or rescale attention, which the engine does not implement.
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")
# The mixture-of-experts architectures the engine runs (`SparseMoeBlock`).
SUPPORTED_MOE_ARCHITECTURES = ("Qwen3MoeForCausalLM",)


def check_supported_moe(spec: ModelSpec) -> None:
    """A `ValueError` for multi-head latent attention (DeepSeek-V3 family: the engine has no MLA layers or latent KV
    cache; the simulator models it) or a mixture-of-experts architecture whose experts the engine has no layout for."""
    if spec.is_mla:
        raise ValueError(f"model '{spec.name}': multi-head latent attention ({spec.architecture}) is not supported by "
                         f"the engine; it runs dense Llama, Mistral, Qwen2 and Qwen3 models and the mixture of experts "
                         f"{', '.join(SUPPORTED_MOE_ARCHITECTURES)}; `roofline simulate` models this model")
    if spec.is_moe and spec.architecture not in SUPPORTED_MOE_ARCHITECTURES:
        raise ValueError(f"model '{spec.name}': {spec.architecture} (mixture of experts) is not supported by the "
                         f"engine; it runs dense Llama, Mistral, Qwen2 and Qwen3 models and the mixture of experts "
                         f"{', '.join(SUPPORTED_MOE_ARCHITECTURES)}")


# Dense architectures whose layers this engine builds (Llama's layer; Qwen2's qkv bias, Qwen3's q/k norm).
SUPPORTED_DENSE_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")


def check_supported(spec: ModelSpec, max_model_len: int) -> None:
    """A `ValueError` naming what the engine cannot run for this model."""
    check_supported_moe(spec)
    if not spec.is_moe and spec.architecture not in SUPPORTED_DENSE_ARCHITECTURES:
        raise ValueError(f"model '{spec.name}': {spec.architecture} is not supported by the engine; it runs "
                         f"{', '.join(SUPPORTED_DENSE_ARCHITECTURES)} and the mixture of experts "
                         f"{', '.join(SUPPORTED_MOE_ARCHITECTURES)}; `roofline simulate` models this model")
    if spec.rope_scaling is not None and spec.rope_scaling.rope_type not in SUPPORTED_ROPE_TYPES:
        raise ValueError(f"model '{spec.name}': rope_scaling type '{spec.rope_scaling.rope_type}' is not supported "
                         f"by the engine; allowed: {', '.join(SUPPORTED_ROPE_TYPES)}")
    if spec.sliding_window is not None and spec.sliding_window < max_model_len:
        raise ValueError(f"model '{spec.name}': sliding_window {spec.sliding_window} is shorter than max_model_len "
                         f"{max_model_len}; the engine has no sliding-window attention; lower --max-model-len")


def rope_inv_freq(spec: ModelSpec) -> torch.Tensor:
    """[head_dim / 2] fp32 inverse frequencies, scaled as transformers' modeling_rope_utils does."""
    dim = spec.head_dim
    inv_freq = 1.0 / (spec.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scaling = spec.rope_scaling
    if scaling is None or scaling.rope_type == "default":
        return inv_freq
    if scaling.rope_type == "linear":
        return inv_freq / scaling.factor
    # Llama 3.1: long wavelengths divided by `factor`, short ones kept, a smooth blend in between
    # (transformers `_compute_llama3_parameters`; Meta's llama-models `apply_scaling`).
    old_len = scaling.original_max_position_embeddings
    low_freq_wavelen = old_len / scaling.low_freq_factor
    high_freq_wavelen = old_len / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (old_len / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def can_prepack(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether oneDNN's prepacked bf16 GEMM is available: CPU with native bf16 (AVX-512 BF16 or AMX)."""
    return (device.type == "cpu" and dtype == torch.bfloat16 and torch.backends.mkldnn.is_available()
            and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def prepack(weight: torch.Tensor) -> torch.Tensor:
    # oneDNN's blocked layout for the weight, done once, as vLLM-CPU and inductor's CPU freezing do: measured
    # 1.3-2x less CPU time than F.linear on the same bf16 weight for 1-2048 rows, with identical results.
    return torch.ops.mkldnn._reorder_linear_weight(weight)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, or oneDNN's GEMM for a weight from `prepack`; x: [T, in] -> [T, out]."""
    if weight.is_mkldnn:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return F.linear(x, weight, bias)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # As transformers' LlamaRMSNorm: normalise in fp32, cast back to the input dtype, then scale. torch's fused
    # F.rms_norm gives the same bits as HF's pow/mean/add/rsqrt/mul in fp32 (one op instead of five).
    return weight * F.rms_norm(x.float(), x.shape[-1:], eps=eps).to(x.dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x: [T, heads, D]; cos, signed_sin: [T, 1, D]. HF's rotate-half x*cos + cat(-x2, x1)*sin, with the sign
    moved into the table (signed_sin = cat(-sin1, sin2), exact) so the rotation is one `roll`."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * signed_sin


class SparseMoeBlock(nn.Module):
    """Qwen3-MoE's sparse MLP, as transformers' `Qwen3MoeSparseMoeBlock` computes it: router logits (a linear
    hidden -> num_experts in the activation dtype), softmax in fp32, top-k, renormalised when `norm_topk_prob`,
    cast back; each chosen expert a SwiGLU MLP on its tokens, weighted, summed per token in expert order.

    Written for a CPU, where every torch op costs host time: the (token, expert) pairs are sorted by expert once
    and the tokens gathered in that order, so each expert that received tokens runs on one contiguous slice
    (fused gate_up GEMM, silu, mul, down GEMM: 4 ops) and experts with no tokens cost nothing; one multiply by
    the routing weights and one `index_add_` put the results back. The ops outside the expert loop:
    `MOE_FIXED_OPS`, mirrored by `roofline.cost.cpu.engine`. The `index_add_` adds each token's contributions in
    ascending expert order, as transformers does, so its bf16 sums round the same way."""

    def __init__(self, spec: ModelSpec, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        h, inter, e = spec.hidden_size, spec.intermediate_size, spec.num_experts

        def param(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)

        self.gate = param(e, h)  # the router
        self.experts_gate_up_proj = param(e, 2 * inter, h)  # per expert rows: gate_proj, up_proj
        self.experts_down_proj = param(e, h, inter)
        # After `prepack_weights`: one oneDNN-packed (gate_up, down) pair per expert, replacing the two above.
        self.packed: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.num_experts = e
        self.top_k = spec.num_experts_per_tok
        self.norm_topk_prob = spec.norm_topk_prob

    def expert_weights(self, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.packed is not None:
            return self.packed[e]
        return self.experts_gate_up_proj[e], self.experts_down_proj[e]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, hidden] (normed) -> [T, hidden]."""
        probs = torch.softmax(linear(x, self.gate), dim=-1, dtype=torch.float32)  # [T, E]
        weights, experts = probs.topk(self.top_k, dim=-1)  # [T, k] each
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        # (token, choice) pairs in expert order; stable, so each expert's tokens stay in token order.
        order = experts.flatten().argsort(stable=True)  # [T*k]
        counts = torch.bincount(experts.flatten(), minlength=self.num_experts).tolist()
        tokens = order // self.top_k  # the token of each sorted pair
        xs = x[tokens]  # [T*k, hidden], grouped by expert
        outs = []
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            gate_up, down = self.expert_weights(e)
            gate, up = linear(xs[start:start + n], gate_up).chunk(2, dim=-1)
            outs.append(linear(F.silu(gate) * up, down))
            start += n
        scaled = torch.cat(outs) * weights.to(x.dtype).flatten()[order, None]
        return torch.zeros_like(x).index_add_(0, tokens, scaled)

    def prepack_weights(self) -> None:
        self.packed = [(prepack(gu), prepack(d)) for gu, d in zip(self.experts_gate_up_proj, self.experts_down_proj)]
        packed_gate = prepack(self.gate)
        for name in ("gate", "experts_gate_up_proj", "experts_down_proj"):
            delattr(self, name)  # parameters no more: opaque oneDNN tensors
        setattr(self, "gate", packed_gate)


# Torch ops (views not counted) of one `SparseMoeBlock.forward` outside its expert loop: router linear, softmax,
# topk, argsort, bincount, tolist, //, gather x[tokens], cat, to(dtype), [order] index, mul, zeros_like,
# index_add_ = 14; sum and div when norm_topk_prob = 2; per expert that received tokens: gate_up GEMM, silu, mul,
# down GEMM = 4. roofline.cost.cpu.engine counts the same (it does not import engine).
MOE_FIXED_OPS = 14
MOE_NORM_TOPK_OPS = 2
MOE_OPS_PER_EXPERT = 4


class DecoderLayer(nn.Module):
    def __init__(self, spec: ModelSpec, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        h, q, kv, inter = spec.hidden_size, spec.q_size, spec.kv_size, spec.intermediate_size

        def param(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)

        self.input_layernorm = param(h)
        self.qkv_proj = param(q + 2 * kv, h)  # rows: q_proj, k_proj, v_proj
        self.qkv_bias = param(q + 2 * kv) if spec.attention_bias else None
        self.q_norm = param(spec.head_dim) if spec.qk_norm else None
        self.k_norm = param(spec.head_dim) if spec.qk_norm else None
        self.o_proj = param(h, q)
        # transformers' Llama/Mistral put `attention_bias` on o_proj too; Qwen2 has biases on q/k/v only.
        self.o_bias = param(h) if spec.attention_bias and spec.architecture != "Qwen2ForCausalLM" else None
        self.post_attention_layernorm = param(h)
        # Qwen3-MoE: a sparse MoE block in place of every dense MLP (decoder_sparse_step 1, no mlp_only_layers).
        self.moe = SparseMoeBlock(spec, dtype, device) if spec.is_moe else None
        if self.moe is None:
            self.gate_up_proj = param(2 * inter, h)  # rows: gate_proj, up_proj
            self.down_proj = param(h, inter)
        self.spec = spec

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: AttentionMetadata,
                k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        spec = self.spec
        num_tokens = x.shape[0]
        qkv = linear(rms_norm(x, self.input_layernorm, spec.rms_norm_eps), self.qkv_proj, self.qkv_bias)
        q, k, v = qkv.split([spec.q_size, spec.kv_size, spec.kv_size], dim=-1)
        q = q.view(num_tokens, spec.num_heads, spec.head_dim)
        k = k.view(num_tokens, spec.num_kv_heads, spec.head_dim)
        v = v.view(num_tokens, spec.num_kv_heads, spec.head_dim)
        # q and k side by side in qkv's columns: RoPE on both heads at once, one set of ops.
        qk = qkv[:, :spec.q_size + spec.kv_size].view(num_tokens, spec.num_heads + spec.num_kv_heads, spec.head_dim)
        if self.q_norm is not None and self.k_norm is not None:  # set together (qk_norm)
            qk = torch.cat((rms_norm(q, self.q_norm, spec.rms_norm_eps), rms_norm(k, self.k_norm, spec.rms_norm_eps)),
                           dim=1)
        q, k = apply_rope(qk, cos, sin).split([spec.num_heads, spec.num_kv_heads], dim=1)
        attn = paged_attention(q, k, v, k_cache, v_cache, meta, spec.head_dim ** -0.5)
        x = x + linear(attn, self.o_proj, self.o_bias)
        normed = rms_norm(x, self.post_attention_layernorm, spec.rms_norm_eps)
        if self.moe is not None:
            return x + self.moe(normed)
        gate, up = linear(normed, self.gate_up_proj).chunk(2, dim=-1)
        return x + linear(F.silu(gate) * up, self.down_proj)

    def prepack_weights(self) -> None:
        if self.moe is not None:
            self.moe.prepack_weights()
        for name in ("qkv_proj", "o_proj") + (("gate_up_proj", "down_proj") if self.moe is None else ()):
            packed = prepack(getattr(self, name))
            delattr(self, name)  # a parameter no more: an opaque oneDNN tensor
            setattr(self, name, packed)


class LlamaModel(nn.Module):
    """Embedding, decoder layers, final norm and LM head. Parameters start uninitialised: load them."""

    rope_table: torch.Tensor  # a buffer: per position (cos, signed sin) [max_positions, 2, D]

    def __init__(self, spec: ModelSpec, dtype: torch.dtype, device: torch.device,
                 max_model_len: int | None = None) -> None:
        super().__init__()
        max_len = max_model_len or spec.max_position_embeddings
        check_supported(spec, max_len)
        self.spec = spec
        self.embed_tokens = nn.Parameter(torch.empty(spec.vocab_size, spec.hidden_size, dtype=dtype,
                                                     device=device), requires_grad=False)
        self.layers = nn.ModuleList(DecoderLayer(spec, dtype, device) for _ in range(spec.num_layers))
        self.norm = nn.Parameter(torch.empty(spec.hidden_size, dtype=dtype, device=device), requires_grad=False)
        self.lm_head = None if spec.tie_word_embeddings else nn.Parameter(
            torch.empty(spec.vocab_size, spec.hidden_size, dtype=dtype, device=device), requires_grad=False)
        self.lm_head_packed: torch.Tensor | None = None
        # cos and signed sin (see apply_rope) [max_len, 2, D], computed once in fp32 and cast as transformers
        # does per step; one table so that a step indexes it once.
        positions = torch.arange(max_len, dtype=torch.float32)
        freqs = torch.outer(positions, rope_inv_freq(spec))
        emb = torch.cat((freqs, freqs), dim=-1)
        half = spec.head_dim // 2
        signed_sin = torch.cat((-emb[:, :half].sin(), emb[:, half:].sin()), dim=-1)
        self.register_buffer("rope_table", torch.stack((emb.cos(), signed_sin), dim=1).to(dtype=dtype, device=device),
                             persistent=False)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                kv_cache: PagedKVCache) -> torch.Tensor:
        """input_ids, positions: [num_tokens] -> final-normed hidden states [num_tokens, hidden]."""
        x = F.embedding(input_ids, self.embed_tokens)
        rope = self.rope_table[positions]  # [num_tokens, 2, D]
        cos, sin = rope[:, 0:1], rope[:, 1:2]
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, meta, kv_cache.k[i], kv_cache.v[i])
        return rms_norm(x, self.norm, self.spec.rms_norm_eps)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[n, hidden] -> [n, vocab] in fp32 (only the rows that sample a token)."""
        if self.lm_head_packed is not None:
            return linear(hidden, self.lm_head_packed).float()
        weight = self.embed_tokens if self.lm_head is None else self.lm_head
        return F.linear(hidden, weight).float()

    def prepack_weights(self) -> None:
        """Switch every GEMM to oneDNN's prepacked kernel (call after loading; see `can_prepack`). The LM head
        gets a packed copy: the embedding lookup still needs the plain table when they are tied."""
        for layer in self.layers:
            assert isinstance(layer, DecoderLayer)
            layer.prepack_weights()
        self.lm_head_packed = prepack(self.embed_tokens if self.lm_head is None else self.lm_head)
        if self.lm_head is not None:
            del self.lm_head  # the packed copy replaces it
            self.lm_head = None
