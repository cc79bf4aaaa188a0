"""vLLM's engine flags, defined once: the argparse flags, one validated `EngineArgs`, and vLLM's defaults.

`roofline simulate`, `roofline measure` and `roofline plan` add the flags with `add_engine_args(parser, command)`
(each command gets the flags that mean something to it; argparse refuses the others) and build the arguments
with `engine_args_from(args)`. Names, choices, defaults and checks follow vLLM 0.32.0 (`VLLM_VERSION`):

- counts (`max_num_seqs`, `max_num_batched_tokens`, `max_model_len`, `tensor_parallel_size`,
  `num_gpu_blocks_override`) are positive integers; 0 is an error, never "use the default";
- `block_size` is a positive multiple of 16: the kernel block sizes of vLLM's dense attention backends on NVIDIA
  GPUs (FlashAttention and Triton attention: `get_supported_kernel_block_sizes` -> `MultipleOf(16)`); the default
  is vLLM's `CacheConfig.DEFAULT_BLOCK_SIZE`, 16;
- `max_model_len` is at most what vLLM derives from the model's config (`derived_max_model_len`, see there);
- `tensor_parallel_size` stays within one scale-up domain of the hardware (`interconnect.max_num_gpus`; a
  PCIe-only device: `PCIE_HOST_MAX_NUM_GPUS`), since multi-node serving is not modelled; a CPU runs on one device;
- `--dtype`, `--quantization`, `--kv-cache-dtype`, `--moe-backend` take `roofline.cost.quant`'s choices everywhere.

A value left unset is vLLM's default for the device (`batch_limits`); a value the user set is used or refused.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace
from typing import Any

from engine.core.model_spec import ModelSpec
from roofline.cost.hardware import HardwareProfile
from roofline.cost.host import CUDAGRAPH_MODE_CHOICES, DEFAULT_CUDAGRAPH_MODE
from roofline.cost.kernels.all_to_all import ALL2ALL_BACKENDS, DEFAULT_ALL2ALL_BACKEND
from roofline.cost.quant import (
    DTYPE_CHOICES,
    FLOAT32_MATMUL_PRECISION_CHOICES,
    KV_CACHE_DTYPE_CHOICES,
    MOE_BACKEND_CHOICES,
    QUANTIZATION_CHOICES,
)
from roofline.errors import UserError
from roofline.parallel_config import ParallelArgs, parse_eplb_config
from roofline.vllm_flags import (
    CHECKPOINT_QUANTIZATIONS,
    DTYPE_ALIASES,
    KV_CACHE_DTYPE_ALIASES,
    QUANTIZATION_ALIASES,
    UNMODELLED_QUANTIZATIONS,
    alias_type,
    human_readable_int,
    human_readable_int_or_auto,
)

VLLM_VERSION = "0.32.0"
GIB = 2 ** 30
BLOCK_SIZE_MULTIPLE = 16
DEFAULT_BLOCK_SIZE = 16
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
# vLLM's default ceiling of the CUDA-graph capture sizes (`EngineArgs.cudagraph_capture_sizes`).
DEFAULT_MAX_CUDAGRAPH_CAPTURE_SIZE = 512
# Architectures whose vLLM model config sets the ceiling when the user does not (vllm/model_executor/models/config.py).
_CAPTURE_SIZE_OF_ARCHITECTURE = {"GptOssForCausalLM": 1024}
# A host without a scale-up link joins its GPUs over PCIe: a standard server holds up to 8. Beyond one host,
# tensor parallelism crosses the network, which is not modelled.
PCIE_HOST_MAX_NUM_GPUS = 8
# RoPE types whose `factor` vLLM does not apply to max_position_embeddings, which these configs already scale
# (vllm/config/model.py `_get_and_verify_max_len`).
_PRESCALED_ROPE_TYPES = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")

# Which flags each command takes. simulate: all. plan searches tensor_parallel_size and max_num_seqs over lists
# of its own, and sizes the KV cache per device, not by a fixed byte count or block count. measure runs the
# project's engine on one device, unquantized, with the KV cache in the activation dtype.
AUTO_FIT_MAX_MODEL_LEN = -1  # vLLM's --max-model-len -1

_ALL = ("max_num_seqs", "max_num_batched_tokens", "block_size", "max_model_len", "gpu_memory_utilization",
        "enable_chunked_prefill", "enable_prefix_caching", "tensor_parallel_size", "dtype", "quantization",
        "kv_cache_dtype", "kv_cache_memory_bytes", "num_gpu_blocks_override", "async_scheduling", "moe_backend",
        "float32_matmul_precision", "cudagraph_mode", "enforce_eager", "max_cudagraph_capture_size")
# Data / expert / pipeline parallelism: simulate (plan searches data_parallel_size and enable_expert_parallel over
# lists of its own and takes all2all_backend; measure refuses them as vllm serve flags it does not model,
# `roofline.vllm_flags`).
_PARALLEL = ("data_parallel_size", "data_parallel_size_local", "enable_expert_parallel", "all2all_backend",
             "enable_eplb", "eplb_config", "pipeline_parallel_size")
COMMAND_FLAGS: dict[str, tuple[str, ...]] = {
    "simulate": _ALL + _PARALLEL,
    "plan": tuple(f for f in _ALL if f not in ("max_num_seqs", "tensor_parallel_size", "kv_cache_memory_bytes",
                                               "num_gpu_blocks_override")) + ("all2all_backend",),
    "measure": tuple(f for f in _ALL if f not in ("tensor_parallel_size", "quantization", "kv_cache_dtype",
                                                  "async_scheduling", "moe_backend",
                                                  "float32_matmul_precision", "cudagraph_mode", "enforce_eager",
                                                  "max_cudagraph_capture_size")),
}


# Asynchronous scheduling became vLLM's default in 0.14.0 (release notes; PR #27614,
# https://github.com/vllm-project/vllm/pull/27614); before, the host's scheduling, input preparation and output
# processing ran between the GPU's steps (the GPU profiles' executor describes both: roofline.cost.params).
ASYNC_SCHEDULING_DEFAULT_SINCE = (0, 14)


def version_async_scheduling(major_minor: tuple[int, int]) -> bool:
    """Whether `vllm serve` of that release schedules asynchronously when --async-scheduling is not given."""
    return major_minor >= ASYNC_SCHEDULING_DEFAULT_SINCE


# The CUDA-graph mode `vllm serve` runs when none is given: FULL_AND_PIECEWISE from 0.11.0 (vllm/config/__init__.py
# `VllmConfig.__post_init__`: "default to full and piecewise for most models", PIECEWISE for pooling and
# encoder-decoder models, read in the 0.11.0 wheel), PIECEWISE before (the same place in 0.10.2: PIECEWISE under
# V1's piecewise compilation; 0.8-0.9 had no mode flag and captured piecewise graphs only): a batch of decodes
# then replays piecewise graphs with attention launched from the host, as a batch with prefills does.
FULL_AND_PIECEWISE_DEFAULT_SINCE = (0, 11)


def version_cudagraph_mode(major_minor: tuple[int, int]) -> str:
    """The CUDA-graph mode of `vllm serve` of that release when neither --cudagraph-mode nor --enforce-eager is
    given (a model vLLM serves with piecewise graphs only, pooling or encoder-decoder, is not modelled here)."""
    return DEFAULT_CUDAGRAPH_MODE if major_minor >= FULL_AND_PIECEWISE_DEFAULT_SINCE else "PIECEWISE"


@dataclass(frozen=True)
class EngineArgs:
    """The serving engine's configuration under vLLM's flag names; None = vLLM's default for the device.

    Construction checks every value on its own (a `UserError` names the flag and the allowed values);
    `check_model` and `check_hardware` check it against a model and a device."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int = DEFAULT_BLOCK_SIZE
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    tensor_parallel_size: int = 1
    dtype: str = "auto"
    quantization: str = "none"
    kv_cache_dtype: str = "auto"
    kv_cache_memory_bytes: float | None = None
    num_gpu_blocks_override: int | None = None
    # vLLM's --async-scheduling: the scheduler plans step i+1 while the device runs step i. None: the device
    # profile's `executor.host_overlaps_device` (its family's description of vLLM >= 0.14, where it is the default).
    async_scheduling: bool | None = None
    # vLLM's --moe-backend (`roofline.cost.quant.MOE_BACKEND_CHOICES`): auto = the device's default MoE kernel.
    moe_backend: str = "auto"
    # vLLM's VLLM_FLOAT32_MATMUL_PRECISION (`roofline.cost.quant.FLOAT32_MATMUL_PRECISION_DTYPES`): the dtype of
    # the GEMMs vLLM runs in fp32 (MiniMax-M2's router); vLLM's default "highest" = true fp32.
    float32_matmul_precision: str = "highest"
    # vLLM's -cc.cudagraph_mode (`CUDAGRAPH_MODE_CHOICES`); None: vLLM's default, FULL_AND_PIECEWISE. --enforce-eager:
    # no CUDA graphs (NONE); with another mode given it is a contradiction, refused.
    cudagraph_mode: str | None = None
    enforce_eager: bool = False
    # vLLM's --max-cudagraph-capture-size: the largest batch (in tokens) that replays a graph; None: vLLM's default,
    # min(2 x max_num_seqs, 512) (`cudagraph_capture_sizes`).
    max_cudagraph_capture_size: int | None = None
    # Data, expert and pipeline parallelism (`roofline.parallel_config`, vLLM's names and defaults): DP ranks, this
    # node's share of them, experts placed whole over DP x TP ranks, their all2all backend, EPLB and its JSON config.
    data_parallel_size: int = 1
    data_parallel_size_local: int | None = None
    enable_expert_parallel: bool = False
    all2all_backend: str = DEFAULT_ALL2ALL_BACKEND
    enable_eplb: bool = False
    eplb_config: str | None = None
    pipeline_parallel_size: int = 1

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "num_gpu_blocks_override",
                     "max_cudagraph_capture_size"):
            value = getattr(self, name)
            if value is not None and not (name == "max_model_len" and value == AUTO_FIT_MAX_MODEL_LEN):
                _check_positive_int(name, value, " or -1 (auto-fit)" if name == "max_model_len" else "")
        _check_positive_int("tensor_parallel_size", self.tensor_parallel_size)
        self.parallel.check(self.tensor_parallel_size)
        _check_positive_int("block_size", self.block_size)
        if self.block_size % BLOCK_SIZE_MULTIPLE:
            raise UserError(f"--block-size: must be a positive multiple of {BLOCK_SIZE_MULTIPLE} (vLLM "
                            f"{VLLM_VERSION}'s attention kernels: 16, 32, 48, ...), got {self.block_size}")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise UserError(f"--gpu-memory-utilization: must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.kv_cache_memory_bytes is not None and not (
                self.kv_cache_memory_bytes > 0 and math.isfinite(self.kv_cache_memory_bytes)):
            raise UserError(f"--kv-cache-memory-bytes: must be a positive number of bytes, "
                            f"got {self.kv_cache_memory_bytes}")
        for name, choices in (("dtype", DTYPE_CHOICES), ("quantization", QUANTIZATION_CHOICES),
                              ("kv_cache_dtype", KV_CACHE_DTYPE_CHOICES), ("moe_backend", MOE_BACKEND_CHOICES),
                              ("float32_matmul_precision", FLOAT32_MATMUL_PRECISION_CHOICES)):
            if getattr(self, name) not in choices:
                raise UserError(f"{_flag(name)}: {getattr(self, name)!r} is not allowed; "
                                f"allowed: {', '.join(choices)}")
        if self.cudagraph_mode is not None and self.cudagraph_mode not in CUDAGRAPH_MODE_CHOICES:
            raise UserError(f"--cudagraph-mode: {self.cudagraph_mode!r} is not allowed; allowed: "
                            f"{', '.join(CUDAGRAPH_MODE_CHOICES)} (FULL is not modelled: whether its graphs take "
                            f"a batch with prefills depends on vLLM's attention backend)")
        if self.enforce_eager and self.cudagraph_mode not in (None, "NONE"):
            raise UserError(f"--enforce-eager: runs without CUDA graphs, which contradicts --cudagraph-mode "
                            f"{self.cudagraph_mode}; allowed with --enforce-eager: --cudagraph-mode NONE or unset")
        if self.max_cudagraph_capture_size is not None and self.resolved_cudagraph_mode == "NONE":
            given = "--enforce-eager" if self.enforce_eager else "--cudagraph-mode NONE"
            raise UserError(f"--max-cudagraph-capture-size: {given} captures no CUDA graphs, so a capture size "
                            f"would be ignored; allowed with {given}: --max-cudagraph-capture-size unset")

    @property
    def parallel(self) -> ParallelArgs:
        """The data / expert / pipeline parallelism flags as one checked record."""
        return ParallelArgs(data_parallel_size=self.data_parallel_size,
                            data_parallel_size_local=self.data_parallel_size_local,
                            enable_expert_parallel=self.enable_expert_parallel, all2all_backend=self.all2all_backend,
                            enable_eplb=self.enable_eplb,
                            num_redundant_experts=parse_eplb_config(self.eplb_config) if self.eplb_config else 0,
                            pipeline_parallel_size=self.pipeline_parallel_size)

    @property
    def resolved_cudagraph_mode(self) -> str:
        """The CUDA-graph mode the engine runs: NONE under --enforce-eager, else the given one or vLLM's default."""
        if self.enforce_eager:
            return "NONE"
        return self.cudagraph_mode or DEFAULT_CUDAGRAPH_MODE

    def cudagraph_capture_sizes(self, max_num_seqs: int, max_num_batched_tokens: int,
                                architecture: str = "") -> tuple[int, ...]:
        """The batch sizes, in tokens, that vLLM 0.32 captures CUDA graphs for (`VllmConfig._set_cudagraph_sizes`,
        one token per decode): up to a ceiling of --max-cudagraph-capture-size, else min(2 x max_num_seqs, 512)
        (1,024 for gpt-oss, `GptOssForCausalLMConfig.verify_and_update_config`, as if given), at most
        max_num_batched_tokens: 1, 2, 4, multiples of 8 below 256, multiples of 16 from 256; then
        max_num_batched_tokens where the ceiling reaches it, and max_num_seqs where the ceiling is the default and
        reaches it. (Since vLLM PR #49390 the default is 1,024 on data-center Blackwell: not modelled.)"""
        given = self.max_cudagraph_capture_size
        if given is None and architecture in _CAPTURE_SIZE_OF_ARCHITECTURE:
            given = _CAPTURE_SIZE_OF_ARCHITECTURE[architecture]
        ceiling = min(given if given is not None else min(2 * max_num_seqs, DEFAULT_MAX_CUDAGRAPH_CAPTURE_SIZE),
                      max_num_batched_tokens)
        sizes = {n for n in (1, 2, 4) if n <= ceiling}
        sizes.update(range(8, min(ceiling + 1, 256), 8))
        sizes.update(range(256, ceiling + 1, 16))
        if max_num_batched_tokens <= ceiling:
            sizes.add(max_num_batched_tokens)
        if given is None and max_num_seqs <= ceiling:
            sizes.add(max_num_seqs)
        return tuple(sorted(sizes))

    def check_model(self, spec: ModelSpec) -> None:
        """`max_model_len` within what vLLM derives from the model's config; DP / EP on a MoE model."""
        self.parallel.check_model(spec)
        limit = derived_max_model_len(spec)
        if self.max_model_len is not None and self.max_model_len != AUTO_FIT_MAX_MODEL_LEN and self.max_model_len > limit:
            raise UserError(f"--max-model-len: {self.max_model_len} exceeds the {limit} tokens vLLM derives from "
                            f"model '{spec.name}' (max_position_embeddings and RoPE scaling); allowed: 1 to {limit}")

    def check_hardware(self, hw: HardwareProfile) -> None:
        """Tensor parallelism within one scale-up domain of `hw` (one device on a CPU)."""
        tp = self.tensor_parallel_size
        if hw.kind == "cpu":
            if self.async_scheduling:
                raise UserError(f"--async-scheduling: {hw.id} is a CPU profile; its engines (the project's and "
                                f"vLLM-CPU) schedule synchronously; allowed: --no-async-scheduling or unset")
            if self.moe_backend != "auto":
                raise UserError(f"--moe-backend: {hw.id} is a CPU profile, whose engines run their own MoE loop; "
                                f"allowed: auto, got {self.moe_backend}")
            if self.float32_matmul_precision != "highest":
                raise UserError(f"--float32-matmul-precision: {hw.id} is a CPU profile, whose engines compute in "
                                f"fp32 as they are; allowed: highest, got {self.float32_matmul_precision}")
            if self.cudagraph_mode is not None or self.enforce_eager or self.max_cudagraph_capture_size is not None:
                given = ("--enforce-eager" if self.enforce_eager else f"--cudagraph-mode {self.cudagraph_mode}"
                         if self.cudagraph_mode is not None else "--max-cudagraph-capture-size")
                raise UserError(f"{given}: {hw.id} is a CPU profile, whose engines run without CUDA graphs; "
                                f"allowed: --cudagraph-mode, --enforce-eager and --max-cudagraph-capture-size unset")
            if tp != 1:
                raise UserError(f"--tensor-parallel-size: {hw.id} is a CPU profile, which models one device; "
                                f"allowed: 1, got {tp}")
            self.parallel.layout(hw, tp)
            return
        domain, link = ((hw.interconnect.max_num_gpus, hw.interconnect.name) if hw.interconnect is not None
                        else (PCIE_HOST_MAX_NUM_GPUS, "PCIe within one host"))
        if tp > domain:
            raise UserError(f"--tensor-parallel-size: {tp} GPUs exceed one {link} domain of {hw.id} ({domain} "
                            f"GPUs); multi-node tensor parallelism is not modelled; allowed: 1 to {domain}")
        self.parallel.layout(hw, tp)

    def resolve_hardware(self, hw: HardwareProfile) -> HardwareProfile:
        """`hw` with the host/device overlap of `--async-scheduling` when it is given."""
        if self.async_scheduling is None or self.async_scheduling == hw.executor.host_overlaps_device:
            return hw
        return replace(hw, executor=replace(hw.executor, host_overlaps_device=self.async_scheduling))

    @property
    def auto_fit_max_model_len(self) -> bool:
        """`--max-model-len -1`: vLLM lowers the model's length to the longest one request the KV cache holds
        (vllm/v1/core/kv_cache_utils.py `_auto_fit_max_model_len`; `roofline.cost.kv_capacity`)."""
        return self.max_model_len == AUTO_FIT_MAX_MODEL_LEN

    def resolved_max_model_len(self, spec: ModelSpec) -> int:
        """The length the engine is configured with before its KV cache is sized: the user's, or what vLLM
        derives from the model's config (also for -1, which the KV-cache sizing may then lower)."""
        if self.max_model_len is None or self.auto_fit_max_model_len:
            return derived_max_model_len(spec)
        return self.max_model_len

    def batch_limits(self, spec: ModelSpec, device_memory_bytes: float, device_name: str,
                     is_cpu: bool) -> tuple[int, int]:
        """(max_num_seqs, max_num_batched_tokens): the user's, or the defaults of `vllm serve` 0.32 for the
        device (vllm/engine/arg_utils.py `get_batch_defaults`, OPENAI_API_SERVER context, and
        `_set_default_max_num_seqs_and_batched_tokens_args`)."""
        default_seqs, default_tokens = default_batch_limits(device_memory_bytes, device_name, is_cpu,
                                                            self.tensor_parallel_size)
        max_model_len = self.resolved_max_model_len(spec)
        max_num_seqs = self.max_num_seqs if self.max_num_seqs is not None else default_seqs
        if self.max_num_batched_tokens is not None:
            max_num_batched_tokens = self.max_num_batched_tokens
        else:
            max_num_batched_tokens = default_tokens if self.enable_chunked_prefill else max(max_model_len,
                                                                                           default_tokens)
            max_num_batched_tokens = min(max_num_seqs * max_model_len, max_num_batched_tokens)
        if self.max_num_seqs is None:
            max_num_seqs = min(max_num_seqs, max_num_batched_tokens)
        return max_num_seqs, max_num_batched_tokens


def default_batch_limits(device_memory_bytes: float, device_name: str, is_cpu: bool,
                         world_size: int = 1) -> tuple[int, int]:
    """`vllm serve`'s (max_num_seqs, max_num_batched_tokens) for a device: CPU 128 and 2048 per rank; GPUs with
    at least 160 GiB 1024 and 16384; at least 70 GiB (A100s excepted, vLLM PR #17885) 1024 and 8192; others
    256 and 2048."""
    if is_cpu:
        return 128 * world_size, 2048 * world_size
    if device_memory_bytes >= 160 * GIB:
        return 1024, 16384
    if device_memory_bytes >= 70 * GIB and "a100" not in device_name.lower():
        return 1024, 8192
    return 256, 2048


def derived_max_model_len(spec: ModelSpec) -> int:
    """The longest context vLLM 0.32 allows for a model (vllm/config/model.py `_get_and_verify_max_len`): its
    max_position_embeddings, times the RoPE scaling factor for RoPE types that do not already include it
    (linear, dynamic). vLLM also caps it at a sliding window only when `--disable-sliding-window` is given, a
    flag not modelled here. Gemma 3's linear scaling is left out (`"gemma3" not in hf_config.model_type` there: its
    factor scales the global layers' RoPE, not the context)."""
    scaling = spec.rope_scaling
    factor = 1.0
    if scaling is not None and scaling.rope_type not in _PRESCALED_ROPE_TYPES and scaling.rope_type != "default" \
            and spec.architecture != "Gemma3ForCausalLM":
        factor = scaling.factor
    return int(spec.max_position_embeddings * factor)


def add_engine_args(parser: argparse.ArgumentParser, command: str) -> None:
    """The engine flags `command` takes (`COMMAND_FLAGS`), in one group, under vLLM's names."""
    flags = COMMAND_FLAGS[command]
    group = parser.add_argument_group(f"engine (vLLM {VLLM_VERSION}'s flag names; unset = vLLM's default)")
    help_for: dict[str, tuple[str, dict[str, Any]]] = {
        "max_num_seqs": ("--max-num-seqs", dict(type=int, metavar="N", help="max sequences per step (default: "
                         "vLLM's for the device: 1024 on GPUs with >= 70 GiB except A100s, else 256; CPU 128)")),
        "max_num_batched_tokens": ("--max-num-batched-tokens", dict(type=human_readable_int, metavar="N", help="token budget per "
                                   "step (default: vLLM's: 16384 on >= 160 GiB GPUs, 8192 on >= 70 GiB except "
                                   "A100s, else 2048; CPU 2048)")),
        "block_size": ("--block-size", dict(type=int, default=None, metavar="N", help=(
            "tokens per KV block, a multiple of 16 (default: 16; measure --engine vllm on a CPU: vLLM-CPU's 128, "
            "and a multiple of 32)"))),
        "max_model_len": ("--max-model-len", dict(type=human_readable_int_or_auto, metavar="N", help=(
            "max prompt + output tokens, as vLLM reads it: 32k = 32000, 32K = 32768 (default: what vLLM derives "
            "from the model's config; -1 or auto: that, lowered to the longest request the KV cache holds, as "
            "vLLM's auto-fit)"))),
        "gpu_memory_utilization": ("--gpu-memory-utilization", dict(type=float, metavar="FRACTION", help=(
            "fraction of device memory for weights, activations and KV cache (default: 0.9; measure on a CPU: "
            "a 4 GiB KV cache, as vLLM-CPU)"))),
        "enable_chunked_prefill": ("--enable-chunked-prefill", dict(
            action=argparse.BooleanOptionalAction, default=True, help="split long prompts over steps (default: on)")),
        "enable_prefix_caching": ("--enable-prefix-caching", dict(
            action=argparse.BooleanOptionalAction, default=True,
            help="reuse KV blocks of shared prefixes (default: on)")),
        "tensor_parallel_size": ("--tensor-parallel-size", dict(type=int, default=1, metavar="N",
                                                                help="GPUs per replica (default: 1)")),
        "dtype": ("--dtype", dict(type=alias_type(DTYPE_CHOICES, DTYPE_ALIASES, "--dtype"), default="auto",
                                  metavar="{" + ",".join(DTYPE_CHOICES) + "}", help=(
            "activation dtype (default: auto = the checkpoint's, bf16 for fp32; vLLM's half and float too)"))),
        "quantization": ("--quantization", dict(
            type=alias_type(QUANTIZATION_CHOICES, QUANTIZATION_ALIASES, "--quantization", CHECKPOINT_QUANTIZATIONS,
                            UNMODELLED_QUANTIZATIONS), default=None,
            metavar="{" + ",".join(QUANTIZATION_CHOICES + CHECKPOINT_QUANTIZATIONS) + "}", help=(
                "weight quantization (default: the checkpoint's own, else none; another scheme on an unquantized "
                "checkpoint is a what-if, announced; vLLM's names too: awq_marlin, gptq_marlin, modelopt, "
                "modelopt_fp4, fbgemm_fp8, ptpc_fp8, compressed-tensors = the checkpoint's)"))),
        "kv_cache_dtype": ("--kv-cache-dtype", dict(
            type=alias_type(KV_CACHE_DTYPE_CHOICES, KV_CACHE_DTYPE_ALIASES, "--kv-cache-dtype"), default="auto",
            metavar="{" + ",".join(KV_CACHE_DTYPE_CHOICES) + "}",
            help="KV cache dtype (default: auto = the activation dtype; vLLM's fp8_e4m3 and fp8_e5m2 are fp8)")),
        "kv_cache_memory_bytes": ("--kv-cache-memory-bytes", dict(type=human_readable_int, metavar="BYTES", help=(
            "KV cache size per device in bytes, instead of vLLM's profiled budget (vLLM's suffixes: 40G = 40 x "
            "2^30, 40g = 40 x 10^9)"))),
        "num_gpu_blocks_override": ("--num-gpu-blocks-override", dict(type=int, metavar="N", help=(
            "KV blocks per device, instead of the computed number"))),
        "async_scheduling": ("--async-scheduling", dict(
            action=argparse.BooleanOptionalAction, default=None, help=(
                "overlap the host's scheduling with the device's step (default: the profile's executor, on for "
                "GPUs as in vLLM >= 0.14; give --no-async-scheduling for older vLLM; a CPU: off)"))),
        "moe_backend": ("--moe-backend", dict(choices=MOE_BACKEND_CHOICES, default="auto", help=(
            "MoE expert kernel (default: auto = the device's default; triton: vLLM's Triton fused MoE, for block-fp8 "
            "experts on any GPU and 16-bit ones where it is the default, as vLLM's --moe-backend triton or "
            "VLLM_USE_FLASHINFER_MOE_FP8=0 VLLM_MOE_USE_DEEP_GEMM=0; marlin: MXFP4 experts on Marlin W4A16, "
            "as vLLM's --moe-backend marlin or VLLM_MXFP4_USE_MARLIN=1; flashinfer-mxfp4-mxfp8: MXFP4 experts with "
            "MXFP8 activations on FlashInfer's TRT-LLM MoE, Blackwell only, as VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1)"
            ))),
        "float32_matmul_precision": ("--float32-matmul-precision", dict(
            choices=FLOAT32_MATMUL_PRECISION_CHOICES, default="highest", help=(
                "vLLM's VLLM_FLOAT32_MATMUL_PRECISION: the dtype of the GEMMs vLLM runs in fp32, e.g. MiniMax-M2's "
                "router (default: highest = true fp32 on the CUDA cores; high: TF32; medium: bf16)"))),
        "cudagraph_mode": ("--cudagraph-mode", dict(choices=CUDAGRAPH_MODE_CHOICES, default=None, help=(
            "vLLM's -cc.cudagraph_mode (default: FULL_AND_PIECEWISE: a full graph for a batch of decodes, piecewise "
            "graphs with attention launched from the host for a batch with prefills; FULL_DECODE_ONLY: a batch "
            "with prefills without graphs; PIECEWISE: piecewise graphs for every batch; NONE: no graphs). A batch "
            "without a graph launches every kernel from the host at the profile's executor.kernel_launch_us (40 us "
            "on the GPU profiles, from public A/B runs of vLLM's modes, not a GPU trace of this host), overlapping "
            "the kernels already launched"))),
        "enforce_eager": ("--enforce-eager", dict(action="store_true", default=None, help=(
            "vLLM's --enforce-eager: no CUDA graphs, every kernel launched from the host (as --cudagraph-mode "
            "NONE)"))),
        "max_cudagraph_capture_size": ("--max-cudagraph-capture-size", dict(type=int, default=None, help=(
            "vLLM's --max-cudagraph-capture-size: the largest batch, in tokens, that replays a CUDA graph (default: "
            "min(2 x max_num_seqs, 512), 1,024 for gpt-oss; at most max_num_batched_tokens, as vLLM truncates it; "
            "larger batches launch every kernel from the host)"))),
        "data_parallel_size": ("--data-parallel-size", dict(type=int, default=None, metavar="N", help=(
            "vLLM's data-parallel ranks of a MoE model, each with its own scheduler and KV cache behind vLLM's load "
            "balancer, stepping in lockstep (default: 1)"))),
        "data_parallel_size_local": ("--data-parallel-size-local", dict(type=int, default=None, metavar="N", help=(
            "DP ranks on this node (default: all of them); fewer puts the all-to-all across nodes, not modelled "
            "yet"))),
        "enable_expert_parallel": ("--enable-expert-parallel", dict(action="store_true", default=None, help=(
            "place whole experts over the DP x TP ranks instead of slicing them (default: off)"))),
        "all2all_backend": ("--all2all-backend", dict(default=None, metavar="BACKEND", help=(
            f"the MoE token exchange with DP > 1 (default: {DEFAULT_ALL2ALL_BACKEND}; vLLM's choices: "
            f"{', '.join(ALL2ALL_BACKENDS)}; timed: allgather_reducescatter, deepep_high_throughput, "
            "deepep_low_latency; pplx and naive fall back to allgather_reducescatter, as in vLLM)"))),
        "enable_eplb": ("--enable-eplb", dict(action="store_true", default=None, help=(
            "vLLM's expert-parallel load balancer (with --enable-expert-parallel): redundant experts from "
            "--eplb-config rebalance the ranks' expert load"))),
        "eplb_config": ("--eplb-config", dict(default=None, metavar="JSON", help=(
            "vLLM's EPLBConfig as JSON, e.g. '{\"num_redundant_experts\": 32}'"))),
        "pipeline_parallel_size": ("--pipeline-parallel-size", dict(type=int, default=None, metavar="N", help=(
            "pipeline stages, vLLM's layer split, with -tp (default: 1; with -dp or -ep not modelled yet)"))),
    }
    for name in flags:
        flag, kwargs = help_for[name]
        group.add_argument(flag, dest=name, **kwargs)


def engine_args_from(args: argparse.Namespace, command: str) -> EngineArgs:
    """The `EngineArgs` of the flags `add_engine_args(parser, command)` added; the others keep their defaults."""
    # An unset flag (None) keeps the dataclass default: vLLM's default, resolved where the device is known;
    # compressed-tensors, too: the checkpoint's own scheme (`check_quantization_flag` refuses it without one).
    given = {name: getattr(args, name) for name in COMMAND_FLAGS[command]
             if getattr(args, name) is not None and getattr(args, name) not in CHECKPOINT_QUANTIZATIONS}
    return EngineArgs(**given)


def check_quantization_flag(given: str | None, spec: ModelSpec) -> None:
    """`--quantization none` given for a quantized checkpoint: vLLM always serves a checkpoint in the scheme of its
    `quantization_config` (vllm/config/model.py `_verify_quantization`), so an unquantized run of it cannot be asked
    for; refused rather than ignored. (Other contradictions are refused by `roofline.cost.quant.resolve_for_model`.)"""
    ck = spec.checkpoint_quant
    if given in CHECKPOINT_QUANTIZATIONS and ck is None:
        raise UserError(f"--quantization {given}: reads the scheme from the checkpoint's quantization_config, and "
                        f"model '{spec.name}' has none (an unquantized checkpoint); allowed: leave it out, or a "
                        f"scheme to price as a what-if: {', '.join(QUANTIZATION_CHOICES)}")
    if given == "none" and ck is not None:
        raise UserError(f"--quantization none: model '{spec.name}' is a {ck.method} checkpoint (its "
                        f"quantization_config), which vLLM always serves as {ck.method}; allowed: leave "
                        f"--quantization out, or {ck.method}")


def engine_record(engine: EngineArgs, max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int,
                  gpu_memory_utilization: float | None, async_scheduling: bool, cudagraph_mode: str,
                  max_cudagraph_capture_size: int, kv_cache_dtype: str | None = None) -> dict[str, object]:
    """The resolved engine configuration as written into summaries and run metadata (`async_scheduling`: the
    device's resolved host/device overlap; `cudagraph_mode`: the one the cost model prices, NONE on a device
    whose executor runs eagerly; `max_cudagraph_capture_size`: the largest batch that replays a graph, 0
    without graphs; `kv_cache_dtype`: --kv-cache-dtype auto resolved to a checkpoint's declared KV dtype, recorded
    with `kv_cache_dtype_source` "checkpoint", `roofline.cost.quant.resolve_kv_cache_dtype`)."""
    from_checkpoint = kv_cache_dtype is not None and kv_cache_dtype != engine.kv_cache_dtype
    return {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
            "max_model_len": max_model_len, "block_size": engine.block_size,
            "enable_chunked_prefill": engine.enable_chunked_prefill,
            "enable_prefix_caching": engine.enable_prefix_caching,
            "tensor_parallel_size": engine.tensor_parallel_size, "gpu_memory_utilization": gpu_memory_utilization,
            "dtype": engine.dtype, "quantization": engine.quantization,
            "kv_cache_dtype": kv_cache_dtype if from_checkpoint else engine.kv_cache_dtype,
            **({"kv_cache_dtype_source": "checkpoint"} if from_checkpoint else {}),
            "async_scheduling": async_scheduling, "moe_backend": engine.moe_backend,
            "float32_matmul_precision": engine.float32_matmul_precision, "cudagraph_mode": cudagraph_mode,
            "max_cudagraph_capture_size": max_cudagraph_capture_size,
            **({} if engine.parallel.is_default else {
                "data_parallel_size": engine.data_parallel_size,
                "data_parallel_size_local": engine.data_parallel_size_local or engine.data_parallel_size,
                "enable_expert_parallel": engine.enable_expert_parallel,
                "all2all_backend": engine.parallel.resolved_all2all_backend, "enable_eplb": engine.enable_eplb,
                "num_redundant_experts": engine.parallel.num_redundant_experts}),
            **({"pipeline_parallel_size": engine.pipeline_parallel_size} if engine.pipeline_parallel_size > 1 else {})}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_positive_int(name: str, value: object, alternative: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{_flag(name)}: must be a positive integer{alternative}, got {value!r}")
