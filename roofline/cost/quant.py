"""Quantization: the user's `--dtype`, `--quantization`, `--kv-cache-dtype` -> bytes and the GEMM compute dtype.

    q = QuantConfig.from_user(dtype="auto", quantization="fp8", kv_cache_dtype="auto", model_dtype="bfloat16")
    q.weight_bytes_per_param   # 1.0
    q.gemm_dtype               # "fp8": the peak (`HardwareProfile.peak_flops`) a linear layer runs at
    q.kv_bytes_per_element     # 2.0 (bf16 KV cache)

One table (`_SCHEMES`) maps a quantization scheme to the stored weight bytes per parameter and the dtype the
GEMM computes in. Weight-only schemes (AWQ, GPTQ: W4A16) dequantize in the kernel and run at the activation
dtype's peak; W8A8 schemes (fp8, int8) run at their own peak. Only the linear layers of the decoder are
quantized; embedding, LM head and norms stay in the activation dtype (vLLM's default for these schemes).

Per module: a checkpoint's own quantization (`ModelSpec.checkpoint_quant`, from its `quantization_config` or
`hf_quant_config.json`) says which modules are quantized, as vLLM reads it; `resolve_for_model` applies it:
the attention / dense linear layers and the MoE experts each get the checkpoint's scheme unless its ignore list
names them (gpt-oss: experts MXFP4, attention bf16). `--quantization` may repeat the checkpoint's method (vLLM
accepts `fp8` for a block-scaled fp8 checkpoint); any other value contradicts it: a `UserError`, as vLLM's
"Quantization method specified in the model config ... does not match" (vllm/config/model.py).

FP4 formats: MXFP4 (OCP microscaling: 4-bit E2M1 values, one E8M0 scale per 32) and NVFP4 (E2M1, one FP8 E4M3
scale per 16, plus a per-tensor fp32 scale). vLLM 0.32 runs MXFP4 MoE as W4A16 by default on Hopper (OAI Triton
kernels) and on Blackwell (`FLASHINFER_TRTLLM_MXFP4_BF16` is first in `_get_priority_backends_for_gpt_oss`,
vllm/model_executor/layers/fused_moe/oracle/mxfp4.py), so MXFP4 computes at the activation dtype's peak. NVFP4 is
W4A4 at the fp4 peak on Blackwell; a device without fp4 runs it at the activation dtype (vLLM's Marlin fallback).

MoE kernel (`--moe-backend`, vLLM's flag of the same name; `MOE_BACKEND_CHOICES`): `auto` is the device's default
above; `marlin` runs MXFP4 experts on vLLM's Marlin W4A16 MoE kernel (what `VLLM_MXFP4_USE_MARLIN=1` selected
before the flag existed), which pads the experts as vLLM's `mxfp4_round_up_hidden_size_and_intermediate_size`
does for it (hidden to 256, per-rank intermediate to 128). `flashinfer-mxfp4-mxfp8` runs MXFP4 experts on
FlashInfer's TRT-LLM fused MoE with MXFP8 activations (W4A8: the input quantized to E4M3 with one E8M0 scale per
32, fp8 x fp4 tensor-core math at the fp8 peak), what `VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1` selects on SM100 in
vLLM 0.11-0.18 (`get_mxfp4_backend`: `Mxfp4Backend.SM100_FI_MXFP4_MXFP8_TRTLLM`, mxfp4.py). vLLM 0.32 has no
`--moe-backend` value for it (its oracle maps the alias `flashinfer_trtllm_afp8`, which `MoEBackend` does not
list), hence a name after the environment variable. It pads hidden and the per-rank intermediate size to 256
(vLLM 0.18 `Mxfp4MoEMethod.create_weights`; the vLLM 0.24 operator tables time 64-, 128- and 256-wide experts
alike). Only on Blackwell (`TrtLlmMxfp4ExpertsBase._supports_current_device`: SM100 family). Other formats on
these kernels are not modelled (a `UserError`, `check_moe_backend`). `triton` (vLLM 0.32's `--moe-backend triton`,
`Fp8MoeBackend.TRITON` / `UnquantizedMoeBackend.TRITON`; before the flag, VLLM_USE_FLASHINFER_MOE_FP8=0 with
VLLM_MOE_USE_DEEP_GEMM=0 made vLLM 0.17's `select_fp8_moe_backend` fall through to it) runs the experts on vLLM's
Triton fused MoE (`fused_experts`): block-fp8 experts on any GPU with fp8 (on Blackwell its own fit,
`TRITON_FP8_BLOCK`), and 16-bit experts where Triton is already the family's default
(Hopper, Ada, Ampere). Per-tensor fp8, NVFP4 and MXFP4 experts on it are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from engine.core.model_spec import ModelSpec
from roofline.cost.kv_capacity import parse_vllm_version
from roofline.errors import UserError

if TYPE_CHECKING:  # (the kernels import the formats' byte sizes from here)
    from roofline.cost.kernels.moe import MoeKernels

# --dtype value -> (activation dtype name in `roofline.cost.hardware.DTYPES`, bytes per element).
# "auto" takes the model's torch_dtype; vLLM runs float32 checkpoints in bfloat16 on GPUs
# (vllm/config/model.py `_resolve_auto_dtype`: "float32 -> use the default float16/bfloat16").
_ACT_DTYPES: dict[str, tuple[str, float]] = {
    "bfloat16": ("bf16", 2.0), "bf16": ("bf16", 2.0),
    "float16": ("fp16", 2.0), "fp16": ("fp16", 2.0), "half": ("fp16", 2.0),
    "float32": ("fp32", 4.0), "fp32": ("fp32", 4.0), "float": ("fp32", 4.0),
}
DTYPE_CHOICES = ("auto", "bfloat16", "float16", "float32")

# --quantization -> (weight bytes per parameter or None = the activation dtype's, GEMM compute dtype or
# None = the activation dtype). Scale overheads: fp8-block keeps one fp32 scale per 128x128 block
# (DeepSeek-V3 layout); AWQ/GPTQ 4-bit keep an fp16 scale and a 4-bit zero point per group of 128
# (AutoAWQ / GPTQ default group_size=128): 0.5 + (2 + 0.5) / 128 bytes.
_SCHEMES: dict[str, tuple[float | None, str | None]] = {
    "none": (None, None),
    "fp8": (1.0, "fp8"),
    "fp8-block": (1.0 + 4.0 / (128 * 128), "fp8"),
    "int8": (1.0, "int8"),
    "awq": (0.5 + 2.5 / 128, None),
    "gptq": (0.5 + 2.5 / 128, None),
    "mxfp4": (0.5 + 1.0 / 32, None),  # E2M1 + one E8M0 byte per 32 values; W4A16 in vLLM (module docstring)
    "nvfp4": (0.5 + 1.0 / 16, "fp4"),  # E2M1 + one E4M3 byte per 16 values (the per-tensor scale is negligible)
    # compressed-tensors W4A16: 4-bit integers with a bf16 scale per group of 32 (Kimi-K2.5's experts), dequantized
    # in the kernel (vLLM `CompressedTensorsWNA16`; its MoE `CompressedTensorsWNA16MarlinMoEMethod`: Marlin).
    "w4a16-int4": (0.5 + 2.0 / 32, None),
}
QUANTIZATION_CHOICES = tuple(_SCHEMES)
# --moe-backend values the cost model describes (module docstring).
MXFP8_MOE_BACKEND = "flashinfer-mxfp4-mxfp8"
TRITON_MOE_BACKEND = "triton"
# The scheme name (`QuantConfig.expert_kernel`, `roofline.cost.kernels.moe.moe_time_s`) of block-fp8 experts on it.
TRITON_FP8_BLOCK = "fp8-block-triton"
# The scheme name of block-fp8 experts on DeepGEMM's contiguous grouped GEMM as vLLM 0.11.1-0.12.x runs it on Hopper
# (`resolve_deepgemm_moe`; `roofline.cost.kernels.moe.deepgemm_padded_moe_s`).
DEEPGEMM_FP8_BLOCK_PADDED = "fp8-block-deepgemm-padded"
MOE_BACKEND_CHOICES = ("auto", "marlin", MXFP8_MOE_BACKEND, TRITON_MOE_BACKEND)
# vLLM's VLLM_FLOAT32_MATMUL_PRECISION (vllm/envs.py, default "highest"; the GPU worker passes it to
# `torch.set_float32_matmul_precision`, vllm/v1/worker/gpu_worker.py) -> the dtype an fp32 GEMM computes in:
# "highest" true fp32 (no tensor cores), "high" TF32 tensor cores, "medium" bf16 tensor cores (PyTorch's meaning of
# the three), applied by the cost model to every fp32 GEMM (`roofline.cost.op_time._as_run`): MiniMax-M2's router
# (`ModelSpec.router_fp32`) and the linear layers of `--dtype float32`.
FLOAT32_MATMUL_PRECISION_DTYPES = {"highest": "fp32", "high": "tf32", "medium": "bf16"}
FLOAT32_MATMUL_PRECISION_CHOICES = tuple(FLOAT32_MATMUL_PRECISION_DTYPES)
KV_CACHE_DTYPE_CHOICES = ("auto", "fp8", "bfloat16", "float16")

# Compute dtypes that run at an 8-bit peak (W8A8), and the bytes per element of the block-scaled formats with their
# scales (OCP microscaling spec v1.0; NVIDIA NVFP4: one E4M3 scale per 16 values).
EIGHT_BIT_DTYPES = ("fp8", "int8")
MXFP8_BYTES_PER_ELEMENT = 1.0 + 1.0 / 32  # E4M3 values and one E8M0 scale per 32
NVFP4_BYTES_PER_ELEMENT = 0.5 + 1.0 / 16  # E2M1 values and one E4M3 scale per 16
FP8_GROUP_SCALE_BYTES = 4.0 / 128  # block-scaled fp8 activations: one fp32 scale per 1x128 group


@dataclass(frozen=True)
class QuantConfig:
    """Bytes and compute dtypes of one deployment. Dtype names are `roofline.cost.hardware.DTYPES` names."""

    act_dtype: str  # activations, norms, attention math, embedding and LM head
    act_bytes: float
    gemm_dtype: str  # the peak the decoder's linear layers run at
    weight_bytes_per_param: float  # decoder linear layers (incl. MoE experts)
    kv_dtype: str
    kv_bytes_per_element: float
    quantization: str = "none"  # the scheme of the attention / dense linear layers
    # MoE experts: their scheme, bytes per parameter and GEMM dtype (None: the same as the linear layers').
    expert_quantization: str | None = None
    expert_weight_bytes_per_param: float | None = None
    expert_gemm_dtype: str | None = None
    # The shared experts and first dense layers of a DeepSeek-V3-family model (`ModelSpec.num_shared_experts`,
    # `num_dense_layers`): their scheme, bytes per parameter and GEMM dtype (None: the linear layers'); a checkpoint
    # may quantize them and leave the attention unquantized (NVIDIA's Kimi-K2.5-NVFP4: `ignore` lm_head and
    # self_attn only) or the reverse.
    mlp_quantization: str | None = None
    mlp_weight_bytes_per_param: float | None = None
    mlp_gemm_dtype: str | None = None
    # MoE kernels that pad the experts' (hidden, per-rank intermediate) sizes up to these multiples
    # (`resolve_for_hardware`); (1, 1) = none.
    expert_alignment: tuple[int, int] = (1, 1)
    moe_backend: str = "auto"  # --moe-backend (module docstring)
    float32_matmul_precision: str = "highest"  # --float32-matmul-precision (FLOAT32_MATMUL_PRECISION_DTYPES)
    # Block-fp8 experts run DeepGEMM's contiguous grouped GEMM over the padded rows of every expert, as the
    # deployment's vLLM release does on this family (`resolve_deepgemm_moe`).
    deepgemm_padded_moe: bool = False

    @property
    def fp32_gemm_dtype(self) -> str:
        """The dtype an fp32 GEMM computes in (`FLOAT32_MATMUL_PRECISION_DTYPES`)."""
        return FLOAT32_MATMUL_PRECISION_DTYPES[self.float32_matmul_precision]

    @property
    def expert_kernel(self) -> str:
        """The experts' kernel as `roofline.cost.kernels.moe.moe_time_s` names it: their scheme, "mxfp4-marlin" for
        MXFP4 experts on Marlin, "mxfp4-mxfp8" for MXFP4 experts with MXFP8 activations."""
        scheme = self.experts[0]
        if scheme == "fp8-block" and self.moe_backend == TRITON_MOE_BACKEND:  # vLLM's Triton fused MoE
            return TRITON_FP8_BLOCK
        if scheme == "fp8-block" and self.deepgemm_padded_moe:
            return DEEPGEMM_FP8_BLOCK_PADDED
        if scheme == "w4a16-int4":  # vLLM's Marlin W4A16 MoE, the kernel `--moe-backend marlin` runs MXFP4 on
            return "mxfp4-marlin"
        if scheme != "mxfp4":
            return scheme
        return {"marlin": "mxfp4-marlin", MXFP8_MOE_BACKEND: "mxfp4-mxfp8"}.get(self.moe_backend, scheme)

    @property
    def experts(self) -> tuple[str, float, str]:
        """(scheme, weight bytes per parameter, GEMM dtype) of the MoE experts."""
        if self.expert_quantization is None:
            return self.quantization, self.weight_bytes_per_param, self.gemm_dtype
        assert self.expert_weight_bytes_per_param is not None and self.expert_gemm_dtype is not None
        return self.expert_quantization, self.expert_weight_bytes_per_param, self.expert_gemm_dtype

    @property
    def mlp(self) -> tuple[str, float, str]:
        """(scheme, weight bytes per parameter, GEMM dtype) of the shared experts and first dense layers."""
        if self.mlp_quantization is None:
            return self.quantization, self.weight_bytes_per_param, self.gemm_dtype
        assert self.mlp_weight_bytes_per_param is not None and self.mlp_gemm_dtype is not None
        return self.mlp_quantization, self.mlp_weight_bytes_per_param, self.mlp_gemm_dtype

    def with_scheme(self, linear: str, experts: str, mlp: str | None = None) -> "QuantConfig":
        """This config with the linear layers in scheme `linear`, the experts in `experts`, and the shared experts
        and first dense layers in `mlp` (None: the linear layers')."""
        lw, lg = _scheme_bytes(linear, self.act_bytes, self.act_dtype)
        ew, eg = _scheme_bytes(experts, self.act_bytes, self.act_dtype)
        mw, mg = _scheme_bytes(mlp, self.act_bytes, self.act_dtype) if mlp is not None else (None, None)
        return replace(self, quantization=linear, weight_bytes_per_param=lw, gemm_dtype=lg,
                       expert_quantization=experts, expert_weight_bytes_per_param=ew, expert_gemm_dtype=eg,
                       mlp_quantization=mlp, mlp_weight_bytes_per_param=mw, mlp_gemm_dtype=mg)

    @classmethod
    def from_user(cls, dtype: str = "auto", quantization: str = "none", kv_cache_dtype: str = "auto",
                  model_dtype: str = "bfloat16", moe_backend: str = "auto",
                  float32_matmul_precision: str = "highest") -> "QuantConfig":
        if dtype not in DTYPE_CHOICES and dtype not in _ACT_DTYPES:
            raise UserError(f"--dtype: {dtype!r} is not allowed; allowed: {', '.join(DTYPE_CHOICES)}")
        if quantization not in _SCHEMES:
            raise UserError(f"--quantization: {quantization!r} is not allowed; "
                            f"allowed: {', '.join(QUANTIZATION_CHOICES)}")
        if kv_cache_dtype not in KV_CACHE_DTYPE_CHOICES:
            raise UserError(f"--kv-cache-dtype: {kv_cache_dtype!r} is not allowed; "
                            f"allowed: {', '.join(KV_CACHE_DTYPE_CHOICES)}")
        if moe_backend not in MOE_BACKEND_CHOICES:
            raise UserError(f"--moe-backend: {moe_backend!r} is not allowed; allowed: {', '.join(MOE_BACKEND_CHOICES)}")
        if float32_matmul_precision not in FLOAT32_MATMUL_PRECISION_CHOICES:
            raise UserError(f"--float32-matmul-precision: {float32_matmul_precision!r} is not allowed; "
                            f"allowed: {', '.join(FLOAT32_MATMUL_PRECISION_CHOICES)}")
        act_dtype, act_bytes = _resolve_act_dtype(dtype, model_dtype)
        weight_bytes, gemm_dtype = _SCHEMES[quantization]
        if kv_cache_dtype == "fp8":
            kv_dtype, kv_bytes = "fp8", 1.0
        elif kv_cache_dtype == "auto":
            kv_dtype, kv_bytes = act_dtype, act_bytes
        else:
            kv_dtype, kv_bytes = _ACT_DTYPES[kv_cache_dtype]
        return cls(act_dtype=act_dtype, act_bytes=act_bytes, gemm_dtype=gemm_dtype or act_dtype,
                   weight_bytes_per_param=weight_bytes if weight_bytes is not None else act_bytes,
                   kv_dtype=kv_dtype, kv_bytes_per_element=kv_bytes, quantization=quantization,
                   moe_backend=moe_backend, float32_matmul_precision=float32_matmul_precision)


def _scheme_bytes(scheme: str, act_bytes: float, act_dtype: str) -> tuple[float, str]:
    weight_bytes, gemm_dtype = _SCHEMES[scheme]
    return (weight_bytes if weight_bytes is not None else act_bytes), (gemm_dtype or act_dtype)


# Module names (as vLLM names them) whose ignore-list membership decides each group's scheme; MLA models: the
# query up-projection (NVIDIA's DeepSeek NVFP4 checkpoints leave q_a/q_b/kv_a/kv_b in bf16 and quantize o_proj).
_ATTENTION_MODULE = "model.layers.0.self_attn.qkv_proj"
_MLA_ATTENTION_MODULE = "model.layers.0.self_attn.q_b_proj"
_DENSE_MLP_MODULE = "model.layers.0.mlp.gate_up_proj"
_SHARED_EXPERTS_MODULE = "model.layers.1.mlp.shared_experts.gate_up_proj"
_EXPERT_MODULES = {"MiniMaxM2ForCausalLM": "model.layers.0.block_sparse_moe.experts",
                   "MixtralForCausalLM": "model.layers.0.block_sparse_moe.experts"}


# vLLM resolves --kv-cache-dtype auto to the KV-cache dtype a ModelOpt checkpoint declares
# (`EngineArgs.create_engine_config` -> `resolve_kv_cache_dtype_string`, vllm/utils/torch_utils.py; vllm-project/vllm
# PR 29980): read in 0.17.0 and 0.32.0, absent in 0.11.0 and 0.13.0 (0.14-0.16 not read: the rule holds from 0.17).
# Its map takes FP8 in 0.17.0 and FP8 and NVFP4 in 0.32.0 (an unmapped value falls back to the model dtype).
CHECKPOINT_KV_DTYPE_SINCE = (0, 17)
CHECKPOINT_NVFP4_KV_SINCE = (0, 32)


def resolve_kv_cache_dtype(requested: str, spec: ModelSpec, vllm_version: str) -> str:
    """--kv-cache-dtype as vLLM `vllm_version` resolves it for this checkpoint: `requested` unless it is "auto" and
    the version takes the checkpoint's declared KV dtype (see above); `UserError` for an NVFP4 KV cache (not
    modelled)."""
    declared = spec.checkpoint_quant.kv_cache_dtype if spec.checkpoint_quant is not None else ""
    version = parse_vllm_version(vllm_version)
    if requested != "auto" or not declared or version < CHECKPOINT_KV_DTYPE_SINCE:
        return requested
    if declared == "nvfp4":
        if version < CHECKPOINT_NVFP4_KV_SINCE:
            return requested
        raise UserError(f"model '{spec.name}': its checkpoint declares an NVFP4 KV cache, which vLLM "
                        f"{vllm_version} uses for --kv-cache-dtype auto and the simulator does not model; pass "
                        "--kv-cache-dtype fp8 or bfloat16")
    return declared


# Block-fp8 experts on Hopper, vLLM 0.11.1-0.12.x (read in the 0.11.0, 0.11.1, 0.12.0 and 0.13.0 wheels): with
# DeepGEMM installed (the release images install it: docker/Dockerfile, tools/install_deepgemm.sh) the fp8 MoE
# backend is DeepGEMM (vllm/model_executor/layers/quantization/fp8.py `get_fp8_moe_backend`: VLLM_USE_DEEP_GEMM and
# VLLM_MOE_USE_DEEP_GEMM default to 1; from 0.12.0 not when the experts' TP, TP x DP without EP, is 8 or more and
# the variable is unset, vllm-project/vllm#29346), and DeepGEMM's E8M0 scales are on by default on Hopper
# (vllm/utils/deep_gemm.py `is_deep_gemm_e8m0_used`, vllm-project/vllm#26197; 0.11.0 still gated them behind
# VLLM_USE_DEEP_GEMM_E8M0_HOPPER=0), which makes `fused_experts` (fused_moe.py) call `deep_gemm_moe_fp8` at every
# token count ("is_deep_gemm_e8m0_used() or _valid_deep_gemm(...)"), decode included. Its grouped GEMMs run over
# `compute_aligned_M` rows (deep_gemm_utils.py: M x topk + local experts x 127, rounded up to 128; the experts'
# counts are not on the host) and `deepgemm_moe_permute` fills the block ids with zeros, so the blocks no expert
# needs are computed as expert 0's: `roofline.cost.kernels.moe.deepgemm_padded_moe_s`. 0.13.0 fills them with -1,
# which DeepGEMM's scheduler skips (`deepgemm_moe_permute`: "DeepGEMM uses negative values in m_indices ... to mark
# completely invalid / padded blocks that should be skipped"); from there the family's block-fp8 MoE fit holds as
# before (not re-read). 0.11.1 and 0.11.2 pad too, but a release is read as (major, minor) here and 0.11.0 does not.
DEEPGEMM_PADDED_MOE_SINCE = (0, 12)
DEEPGEMM_PADDED_MOE_UNTIL = (0, 13)
DEEPGEMM_MOE_MAX_EXPERT_TP = 8  # experts' TP from which 0.12 falls back to Triton (`get_fp8_moe_backend`)


def resolve_deepgemm_moe(quant: QuantConfig, family_has_contiguous_deepgemm: bool, vllm_version: str,
                         expert_tp_size: int) -> QuantConfig:
    """`quant` with `deepgemm_padded_moe` set where vLLM `vllm_version` runs block-fp8 experts on DeepGEMM's padded
    contiguous GEMM (see above): --moe-backend auto, a family whose DeepGEMM grouped kernel is described
    (`BlockScaledGemmKernels.contiguous_time_s`: Hopper), a release in [DEEPGEMM_PADDED_MOE_SINCE,
    DEEPGEMM_PADDED_MOE_UNTIL), the experts' TP (`expert_tp_size`: TP x DP without EP, 1 with EP) under
    DEEPGEMM_MOE_MAX_EXPERT_TP. It applies only to experts the checkpoint quantizes block-wise
    (`QuantConfig.expert_kernel`)."""
    version = parse_vllm_version(vllm_version)
    if (quant.moe_backend != "auto" or not family_has_contiguous_deepgemm
            or not DEEPGEMM_PADDED_MOE_SINCE <= version < DEEPGEMM_PADDED_MOE_UNTIL
            or expert_tp_size >= DEEPGEMM_MOE_MAX_EXPERT_TP):
        return quant
    return replace(quant, deepgemm_padded_moe=True)


def resolve_for_model(quant: QuantConfig, spec: ModelSpec) -> QuantConfig:
    """The deployment's quantization per module: the checkpoint's (`spec.checkpoint_quant`) unless it has
    none, `--quantization` (`quant.quantization`) otherwise; `UserError` when the two contradict."""
    ck = spec.checkpoint_quant
    if ck is None:
        return quant
    user = quant.quantization
    if user not in ("none", ck.method) and not (user == "fp8" and ck.method == "fp8-block"):
        raise UserError(f"--quantization {user} contradicts model '{spec.name}': its checkpoint is quantized "
                        f"with {ck.method} (quantization_config); leave --quantization out or pass {ck.method}")
    expert_module = _EXPERT_MODULES.get(spec.architecture, "model.layers.0.mlp.experts")
    linear = "none" if ck.ignores(_MLA_ATTENTION_MODULE if spec.is_mla else _ATTENTION_MODULE) else ck.method
    experts = "none" if (not spec.is_moe or ck.ignores(expert_module)) else ck.method
    mlp = None
    if spec.is_moe and (spec.num_shared_experts or spec.num_dense_layers):
        # DeepSeek-V3 family (vLLM deepseek_v2.py): layer 0 dense (`first_k_dense_replace`), later layers' shared
        # experts; each checked only where the model has it.
        modules = ([_DENSE_MLP_MODULE] if spec.num_dense_layers else []) \
            + ([_SHARED_EXPERTS_MODULE] if spec.num_shared_experts else [])
        schemes = {"none" if ck.ignores(m) else ck.method for m in modules}
        if len(schemes) > 1:
            raise UserError(f"model '{spec.name}': its quantization_config quantizes one of {' and '.join(modules)} "
                            f"but not the other; modelled: both quantized or both left unquantized")
        mlp = schemes.pop()
    return quant.with_scheme(linear, experts, mlp)


def resolve_for_hardware(quant: QuantConfig, moe: MoeKernels) -> QuantConfig:
    """Padding the device's default MXFP4 MoE kernel applies to the experts (vLLM 0.32
    `mxfp4_round_up_hidden_size_and_intermediate_size`, layers/fused_moe/oracle/mxfp4.py): TRT-LLM mxfp4-bf16 on
    Blackwell rounds hidden and the per-rank intermediate size up to 256 as vLLM 0.18 does (`Mxfp4MoEMethod.
    create_weights`; 0.32 rounds the intermediate to 128): the vLLM 0.24 operator tables time gpt-oss's 90- and
    180-wide per-rank experts alike and its 360-wide ones as 512, not 384 (gpt-oss: 2880 -> 3072 and 3072, 14 % more
    expert bytes and FLOPs); the OAI Triton kernels on Hopper (and others) round the intermediate size
    up to 64 (gpt-oss at TP 8: 360 -> 384); Marlin (`--moe-backend marlin`) rounds hidden up to 256 and the
    intermediate size up to 128 on every GPU. MXFP8 activations (`--moe-backend flashinfer-mxfp4-mxfp8`) round both
    up to 256 (module docstring; gpt-oss at TP 8: 360 -> 512) and compute in fp8."""
    scheme, weight_bytes, _ = quant.experts
    if scheme != "mxfp4":
        return quant
    if quant.moe_backend == MXFP8_MOE_BACKEND:
        return replace(quant, expert_quantization=scheme, expert_weight_bytes_per_param=weight_bytes,
                       expert_gemm_dtype="fp8", expert_alignment=(256, 256))
    if quant.moe_backend == "auto" and moe.mxfp4_bf16_trtllm:  # TRT-LLM mxfp4-bf16: 256 wide, as vLLM 0.18 pads it
        return replace(quant, expert_alignment=(256, 256))
    marlin = quant.moe_backend == "marlin"
    return replace(quant, expert_alignment=(256, 128) if moe.mxfp4_bf16_trtllm or marlin else (1, 64))


# vLLM's OAI Triton MXFP4 MoE (the default MXFP4 experts' kernel where it is not TRT-LLM's: Hopper) swizzles the
# experts' block scales into its precision configs; before vLLM 0.25 the checkpoint's scale parameters stayed
# registered beside them (vLLM 0.11.0 `Mxfp4MoEMethod.process_weights_after_loading`, TRITON branch: deletes
# w13_weight / w2_weight only; 0.24.0 the same after `convert_gpt_oss_weight_to_mxfp4_moe_kernel_format`), so the
# loaded weights hold the experts' scales twice. 0.25.0's converter deletes them (fused_moe/oracle/mxfp4.py: "The
# original mxfp4 block scales have been swizzled into the precision configs ... drop the now-dead weight/scale
# Parameters"; vLLM PR #46549, merged 2026-06-24, "~6 GB"). Read in the 0.11.0, 0.24.0 and 0.25.0 wheels.
TRITON_MXFP4_SCALES_FREED_SINCE = (0, 25)
MXFP4_SCALE_BYTES_PER_PARAM = 1.0 / 32  # one E8M0 byte per 32 values (`_WEIGHT_BYTES["mxfp4"]`)


def kept_scale_copy_bytes(expert_weight_bytes: float, quant: QuantConfig, moe: MoeKernels, vllm_version: str) -> float:
    """Bytes per rank that vLLM `vllm_version` keeps loaded beyond the kernel's weights: a second copy of the MXFP4
    experts' block scales under the OAI Triton MoE before 0.25 (above); `expert_weight_bytes`: the rank's experts'
    bytes (values and scales), 0 elsewhere."""
    scheme, bytes_per_param, _ = quant.experts
    if (scheme != "mxfp4" or quant.moe_backend != "auto" or moe.mxfp4_bf16_trtllm
            or parse_vllm_version(vllm_version) >= TRITON_MXFP4_SCALES_FREED_SINCE):
        return 0.0
    return expert_weight_bytes * MXFP4_SCALE_BYTES_PER_PARAM / bytes_per_param


# Formats vLLM runs weight-only on Marlin where the device lacks their tensor cores
# (`roofline.cost.kernels.gemm_weight_only`): fp8 below compute capability 8.9 (Ampere), NVFP4 below 10.0.
MARLIN_FALLBACK_DTYPES = ("fp8", "fp4")


def resolve_for_device(quant: QuantConfig, spec: ModelSpec, supported_dtypes: tuple[str, ...],
                       device: str = "") -> QuantConfig:
    """Linear layers whose 8-bit float or FP4 weights the device cannot multiply (`MARLIN_FALLBACK_DTYPES` not among
    `supported_dtypes`) computed in the activation dtype: weight-only, as vLLM runs them on Marlin (`Fp8LinearMethod`
    `use_marlin` below capability 8.9; NVFP4's Marlin fallback). A `UserError`, as vLLM refuses it, for a ModelOpt
    FP8 checkpoint there (`ModelOptFp8Config.get_min_capability` 89), and for MoE experts in such a format (vLLM's
    Marlin MoE for them is not modelled)."""
    fallback = quant.gemm_dtype in MARLIN_FALLBACK_DTYPES and quant.gemm_dtype not in supported_dtypes
    scheme, expert_bytes, expert_dtype = quant.experts
    if spec.is_moe and scheme != "none" and expert_dtype in MARLIN_FALLBACK_DTYPES \
            and expert_dtype not in supported_dtypes:
        raise UserError(f"model '{spec.name}': its MoE experts in {scheme} need {expert_dtype} tensor cores, which "
                        f"device '{device}' lacks; vLLM's Marlin MoE for them there is not modelled; allowed: a "
                        f"device with {expert_dtype} ({', '.join(supported_dtypes)} here)")
    if not fallback:
        return quant
    ck = spec.checkpoint_quant
    if ck is not None and ck.producer == "modelopt" and quant.quantization == "fp8":
        raise UserError(f"model '{spec.name}': a ModelOpt FP8 checkpoint, which vLLM loads only on GPUs with fp8 "
                        f"tensor cores (ModelOptFp8Config: compute capability >= 8.9); device '{device}' has none; "
                        f"allowed there: an fp8 checkpoint in vLLM's own format (quant_method fp8, compressed-tensors) "
                        f"or --quantization fp8 on an unquantized one, which vLLM runs weight-only on Marlin")
    return replace(quant, gemm_dtype=quant.act_dtype, expert_quantization=scheme,
                   expert_weight_bytes_per_param=expert_bytes, expert_gemm_dtype=expert_dtype)


def check_moe_backend(quant: QuantConfig, spec: ModelSpec, moe: MoeKernels, device: str = "",
                      family: str | None = None) -> None:
    """`--moe-backend` other than auto only for a model whose experts are MXFP4 (after `resolve_for_model`);
    `flashinfer-mxfp4-mxfp8` only where the device's MoE kernels run it (`moe`: its family's; `device`: its id,
    `family`: its kernel family)."""
    if quant.moe_backend == "auto":
        return
    if quant.moe_backend == TRITON_MOE_BACKEND and spec.is_moe:
        scheme = quant.experts[0]
        if scheme == "fp8-block" or (scheme == "none" and not moe.trtllm_gen):
            return
        what = "16-bit" if scheme == "none" else scheme
        raise UserError(f"--moe-backend triton: modelled for block-fp8 experts, and for 16-bit experts where Triton "
                        f"is the device's default MoE (not {family or 'this family'}); model '{spec.name}' runs its "
                        f"experts in {what} on device '{device}'; allowed: auto")
    if quant.moe_backend == MXFP8_MOE_BACKEND and not moe.mxfp8_activations:
        raise UserError(f"--moe-backend {MXFP8_MOE_BACKEND}: FlashInfer's TRT-LLM MXFP4 x MXFP8 MoE runs on "
                        f"Blackwell (SM100) only; device '{device}' is {family or 'not a Blackwell GPU'}; "
                        f"allowed: auto, marlin")
    if not spec.is_moe:
        raise UserError(f"--moe-backend {quant.moe_backend}: model '{spec.name}' has no MoE experts; allowed: auto")
    if quant.experts[0] != "mxfp4":
        scheme = quant.experts[0] if quant.experts[0] != "none" else "the activation dtype (unquantized)"
        raise UserError(f"--moe-backend {quant.moe_backend}: modelled for MXFP4 experts only; model "
                        f"'{spec.name}' runs its experts in {scheme}; allowed: auto")


def _resolve_act_dtype(dtype: str, model_dtype: str) -> tuple[str, float]:
    if dtype != "auto":
        return _ACT_DTYPES[dtype]
    if model_dtype not in _ACT_DTYPES:
        raise UserError(f"--dtype auto: the model's torch_dtype {model_dtype!r} is not supported; "
                        f"pass --dtype, one of: {', '.join(DTYPE_CHOICES[1:])}")
    name, size = _ACT_DTYPES[model_dtype]
    return ("bf16", 2.0) if name == "fp32" else (name, size)
