"""How many KV-cache blocks a vLLM deployment gets on one device, computed the way vLLM computes it.

vLLM (v1 `Worker.determine_available_memory`, vllm/v1/worker/gpu_worker.py; `memory_profiling` in
vllm/utils/mem_utils.py) loads the weights, runs one profiling forward pass of `max_num_batched_tokens` tokens
split into `min(max_num_seqs, max_num_batched_tokens)` requests followed by a sampler run on one logit row per
request (`GPUModelRunner.profile_run` / `_dummy_sampler_run`), and then gives the KV cache what is left of the
requested memory:

    requested      = (device memory - what the driver keeps from CUDA) x gpu_memory_utilization
    kv_cache_bytes = requested - weights - activation peak - non-torch memory
    num_gpu_blocks = kv_cache_bytes // (bytes of one block on one rank, all layers)

(vllm/v1/core/kv_cache_utils.py `get_num_blocks`: available // page_size // num_layers). The CUDA context is
created before the baseline snapshot, so it is not subtracted (it lives in the 1 - gpu_memory_utilization
margin), and CUDA graphs are captured after the KV cache is allocated (`compile_or_warm_up_model`), so their
memory is logged but not subtracted either. Both terms are reported as 0 with that reason.

Checked against vLLM's own logs of this accounting on an H100 (79.18 GiB): Llama-3.1-8B at the default
gpu_memory_utilization 0.9 gets 71.26 - 14.99 - 4.76 - 0.13 = 51.38 GiB of KV cache (llm-d/llm-d-benchmark,
config_explorer/empirical-vllm-memory-results.md); tests/test_kv_capacity.py reproduces that.

    cap = compute_kv_capacity(KvCapacityInputs(...))
    cap.num_gpu_blocks, cap.terms()    # the block count and each term in bytes, with its source

Hybrid models (gpt-oss: sliding-window and full-attention layers alternate) use vLLM's hybrid allocator
(vllm/v1/core/kv_cache_utils.py `_get_kv_cache_groups_uniform_page_size`, `get_kv_cache_config_from_groups`):
layers of one attention type are split into groups of `group_size` layers (the smaller type's layer count, or the
larger's when within 1.25x of it); all groups draw blocks from one pool, and one block id is a page in each of
`group_size` shared tensors, so

    num_gpu_blocks = kv_cache_bytes // (page bytes of one layer x group_size)

(gpt-oss-120b: 18 sliding + 18 full layers -> two groups of 18 layers: a block costs 18 layers' pages, not 36).
A request then takes blocks in every group: ceil(len / block_size) in a full group, at most
cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1 in a sliding one (twice the
batched tokens with asynchronous scheduling from vLLM 0.26 on, `max_in_flight_tokens`)
(`SlidingWindowSpec.max_memory_usage_bytes`): `_check_one_request_fits` counts both. The simulator's scheduler
charges the sliding groups' blocks in the same pool (`engine.core.kv_cache_manager`, hybrid models), with
`KvCapacity.sliding_blocks_per_request` (all groups) as its admission cap. An fp8 KV cache
(`--kv-cache-dtype fp8`) halves the page: vLLM stores fp8 K and V with per-tensor scales kept per layer, not per
block.

What vLLM logs, by version (read in vLLM 0.10.1.1, 0.11.0, 0.13.0, 0.19.1, 0.26.0 and 0.32.0's
vllm/v1/core/kv_cache_utils.py): "Maximum concurrency for L tokens per request: Cx" is
`get_max_concurrency_for_kv_cache_config`, num_gpu_blocks / the blocks one request of max_model_len takes in every
group (full groups cdiv(L, block_size), sliding groups their window as above). "GPU KV cache size: N tokens" was
num_gpu_blocks // num_kv_cache_groups x block_size up to 0.19 (`_report_kv_cache_config`), and is
int(C x L) from 0.22 (read in 0.22.0, 0.26.0 and 0.32.0; `get_kv_cache_capacity`): the same for a model of one group when L is
a multiple of the block size, not for a hybrid one. `KvCapacity.reported_num_tokens` and `.max_concurrency` are
those two numbers for `KvCapacityInputs.vllm_version`.

CUDA graphs: from vLLM 0.21 on (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1: "CUDA graph memory profiling
is enabled (default since v0.21.0)" in vLLM's own log; the env default reads "0" in 0.19.1 and "1" in 0.26.0)
`Worker.determine_available_memory` also subtracts `profile_cudagraph_memory()`, a capture of the two largest graphs
of each mode extrapolated to all of them. That estimate is not modelled here (it depends on torch.compile's
piecewise split and the capture sizes); `KvCapacity.cuda_graph_bytes_not_modelled` says when vLLM would subtract it,
and BENCHMARKS.md how large the logged "Graph capturing ... took X GiB" is next to the KV budget.

`--kv-cache-memory-bytes` replaces the profiled budget (vLLM's `kv_cache_memory_bytes`) and
`--num-gpu-blocks-override` the block count (vLLM's `num_gpu_blocks_override`). A model that does not fit, or
a KV cache too small for one request of `max_model_len`, is a `UserError` whose one line gives the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.core.model_spec import ModelSpec
from roofline.errors import UserError

GIB = 2 ** 30
FP32_BYTES = 4

# Peak bytes of vLLM's profiling sampler run per logit element (rows = min(max_num_seqs, max_num_batched_tokens),
# columns = vocab), by the sampler the version runs on the dummy batch (temperature 0.5, top-p 0.9, top-k vocab - 1;
# `_dummy_sampler_run`):
# - up to 0.16 (read in 0.10.1.1, 0.11.0, 0.13.0, 0.16.0): top-k/top-p by sorting the vocabulary (PyTorch's sampler: the
#   pip wheel without FlashInfer; with FlashInfer see below): measured, not derived. Fitted to the "Peak activation
#   memory" vLLM logged for five models on an H100 with its default max_num_seqs 1024 and max_num_batched_tokens 8192,
#   where the sampler run, not the forward pass, sets the peak (llm-d/llm-d-benchmark, config_explorer/empirical-vllm-
#   memory-results.md, vLLM 0.11 or later):
#   Llama-3.1-8B 4.76 GiB / (1024 x 128256) = 38.9 B; Qwen3-0.6B 5.56 GiB / (1024 x 151936) = 38.4 B;
#   Qwen3-32B 5.64 GiB / (1024 x 151936) = 38.9 B; gpt-oss-20b 7.38 GiB / (1024 x 201088) = 38.5 B;
#   Llama-3.3-70B-FP8 TP2 4.84 GiB / (1024 x 128256) = 39.6 B.  Median: 38.9 B (about 9.7 fp32 copies).
PROFILE_SAMPLER_BYTES_PER_LOGIT = 38.9
#   With FlashInfer installed (vLLM's Docker image; an optional extra of the pip wheel in 0.10-0.11, whose log then
#   says "Using FlashInfer for top-p & top-k sampling.", vllm/v1/sample/ops/topk_topp_sampler.py `TopKTopPSampler`)
#   the same versions sample without sorting: `flashinfer_sample` calls FlashInfer's
#   `top_k_top_p_sampling_from_logits`, whose default "top_k_first" order makes a masked fp32 copy
#   (`top_k_mask_logits`) and its softmax. Live at the peak: the logits in the model dtype (held by
#   `_dummy_sampler_run`), their fp32 copy (`Sampler.forward`; temperature is applied in place), the masked copy
#   and the probabilities: act_bytes + 3 x 4, as the Triton sampler below (`KvCapacityInputs.topk_topp_sampler`).
TOPK_TOPP_SAMPLERS = ("pytorch", "flashinfer")
# - from 0.18 on the V1 model runner (read in 0.18.0, 0.19.1, 0.22.0, 0.26.0): top-k/top-p in place by a Triton kernel
#   (vllm/v1/sample/ops/topk_topp_triton.py `apply_top_k_top_p_triton`, a buffer of at most one row per SM), so the
#   peak is the logits in the model dtype, their fp32 copy (`Sampler.forward`), the softmax probabilities and the
#   exponential noise of `random_sample`: act_bytes + 3 x 4.
TRITON_TOPK_FP32_COPIES = 3
TRITON_TOPK_SINCE = (0, 18)  # absent in 0.16.0, present in 0.18.0 (0.17 not read)
# - on model runner V2 (vllm/v1/worker/gpu/model_runner.py `_dummy_sampler_run`: the dummy batch skips top-k/top-p;
#   `Sampler.apply_sampling_params` makes one fp32 copy; the Gumbel sample is one Triton kernel): act_bytes + 4.
#   Which models it runs by default (`VllmConfig.use_v2_model_runner`): none before 0.22 (VLLM_USE_V2_MODEL_RUNNER
#   defaults to 0 in 0.19.1); Qwen3ForCausalLM unquantized in 0.22.0; Qwen3, Llama and Mistral (with a few MoE
#   architectures none of the shipped ones is) in 0.24.0; every dense model in 0.26.0; every model in 0.32.0
#   (0.20-0.21, 0.23, 0.25 and 0.27-0.31 not read: each rule holds here from the release it was read in).
MRV2_QWEN3_SINCE = (0, 22)
MRV2_ARCHITECTURES_SINCE = (0, 24)
MRV2_ARCHITECTURES = ("Qwen3ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM")
MRV2_DENSE_SINCE = (0, 26)
MRV2_ALL_SINCE = (0, 32)

# vLLM multiplies gpu_memory_utilization with the total that the CUDA runtime reports (torch.cuda.mem_get_info),
# which is less than the total nvidia-smi reports and hardware profiles record: on an H100 80GB HBM3, nvidia-smi
# shows 81559 MiB = 79.65 GiB (hardware_profiles/h100-sxm.yaml) and vLLM logs 79.18 GiB (llm-d log above).
# The 0.47 GiB difference is applied to every device (one measured point).
CUDA_RESERVED_BYTES = 81559 * 2 ** 20 - 79.18 * GIB

# Memory allocated outside torch during profiling (cuBLAS workspaces; NCCL and custom all-reduce buffers with
# tensor parallelism), from the same logs: 0.13 GiB on one GPU (Llama-3.1-8B, Qwen3-0.6B, gpt-oss-20b; 0.14
# Qwen3-32B), 0.55 GiB per GPU with TP 2 (Llama-3.3-70B-FP8). One TP > 1 point: used for every TP > 1.
NON_TORCH_BYTES_TP1 = 0.13 * GIB
NON_TORCH_BYTES_TP_GT1 = 0.55 * GIB


@dataclass(frozen=True)
class KvCapacityInputs:
    """Everything the block count depends on, in SI units (bytes)."""

    spec: ModelSpec
    memory_capacity_bytes: float  # the device's total memory as the driver reports it
    weight_bytes_per_rank: float
    kv_bytes_per_token_per_rank: float  # K and V, all layers, one rank
    act_bytes: float  # bytes per activation element (2 for bf16)
    tensor_parallel_size: int = 1
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 4096
    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: float | None = None  # vLLM's kv_cache_memory_bytes: replaces the profiled budget
    num_gpu_blocks_override: int | None = None
    auto_fit_max_model_len: bool = False  # --max-model-len -1: lower max_model_len to what fits instead of failing
    vllm_version: str = "0.32.0"  # whose accounting and log lines (see the module docstring)
    weights_quantized: bool = False  # a quantized checkpoint (decides vLLM 0.22's model runner, see above)
    async_scheduling: bool = False  # two batches in flight: a sliding group holds a second step's tokens (>= 0.26)
    # The top-k/top-p sampler of vLLM < 0.18's profiling run: "pytorch" (sorting; vLLM's pip wheel without FlashInfer,
    # or VLLM_USE_FLASHINFER_SAMPLER=0) or "flashinfer" (FlashInfer installed). From 0.18 on the version decides.
    topk_topp_sampler: str = "pytorch"


@dataclass(frozen=True)
class KvCapacity:
    """The result and every term that led to it (bytes per rank)."""

    num_gpu_blocks: int
    block_bytes: float
    kv_cache_bytes: float
    requested_bytes: float
    cuda_reserved_bytes: float
    weight_bytes: float
    activation_peak_bytes: float
    non_torch_bytes: float
    source: str  # "profiled", "kv_cache_memory_bytes" or "num_gpu_blocks_override"
    block_size: int
    num_kv_cache_groups: int = 1  # vLLM's KV-cache groups (hybrid models: > 1, sharing one pool of blocks)
    sliding_blocks_per_request: int = 0  # blocks the sliding groups hold at most per request, all groups
    max_model_len: int = 0  # the engine's max_model_len: the input's, or what auto-fit lowered it to
    blocks_per_max_len_request: int = 0  # blocks one request of max_model_len takes, all groups
    reported_num_tokens: int = 0  # vLLM's "GPU KV cache size: N tokens" for the version
    max_concurrency: float = 0.0  # vLLM's "Maximum concurrency for max_model_len tokens per request: Cx"
    cuda_graph_bytes_not_modelled: bool = False  # the version subtracts a CUDA-graph estimate this model lacks

    @property
    def num_tokens(self) -> int:
        """Tokens the cache holds with every block full."""
        return self.num_gpu_blocks * self.block_size

    def terms(self) -> dict[str, float | int | str]:
        """For summaries: each term, in bytes unless named otherwise."""
        return {
            "source": self.source,
            "cuda_reserved_bytes": self.cuda_reserved_bytes,  # not offered by the CUDA runtime at all
            "requested_bytes": self.requested_bytes,
            "weight_bytes": self.weight_bytes,
            "activation_peak_bytes": self.activation_peak_bytes,
            "non_torch_bytes": self.non_torch_bytes,
            "cuda_context_bytes": 0.0,  # before vLLM's baseline snapshot: inside the 1 - utilization margin
            "cuda_graph_bytes": 0.0,  # captured after the KV cache is sized: not subtracted by vLLM
            "kv_cache_bytes": self.kv_cache_bytes,
            "block_bytes": self.block_bytes,
            "num_gpu_blocks": self.num_gpu_blocks,
            "num_kv_cache_groups": self.num_kv_cache_groups,
            "reported_num_tokens": self.reported_num_tokens,
            "max_concurrency": self.max_concurrency,
        }


def forward_activation_peak_bytes(spec: ModelSpec, num_tokens: int, tp: int, act_bytes: float) -> float:
    """Live activations at the widest point of one layer's forward pass of `num_tokens` tokens: the residual
    stream and its normed copy (2 x hidden) next to the MLP's gate+up output and its SiLU-and-mul result
    (3 x intermediate / TP; MoE: for each token's top-k experts). Earlier layers' activations are freed."""
    inter = spec.intermediate_size * max(1, spec.num_experts_per_tok) / tp
    return num_tokens * (2 * spec.hidden_size + 3 * inter) * act_bytes


def sampler_peak_bytes(spec: ModelSpec, max_num_seqs: int, max_num_batched_tokens: int,
                       bytes_per_logit: float = PROFILE_SAMPLER_BYTES_PER_LOGIT) -> float:
    """vLLM's profiling sampler run: one full-vocabulary logit row per dummy request (logits are gathered to the
    full vocabulary on every rank before sampling)."""
    return min(max_num_seqs, max_num_batched_tokens) * spec.vocab_size * bytes_per_logit


def uses_model_runner_v2(inputs: KvCapacityInputs) -> bool:
    """Whether the version runs the model on model runner V2 by default (see MRV2_* above)."""
    version = parse_vllm_version(inputs.vllm_version)
    if version >= MRV2_ALL_SINCE:
        return True
    if version >= MRV2_DENSE_SINCE:
        return not inputs.spec.is_moe
    if version >= MRV2_ARCHITECTURES_SINCE:
        return inputs.spec.architecture in MRV2_ARCHITECTURES
    if version >= MRV2_QWEN3_SINCE:
        return inputs.spec.architecture == "Qwen3ForCausalLM" and not inputs.weights_quantized
    return False


def sampler_bytes_per_logit(inputs: KvCapacityInputs) -> float:
    """Peak bytes per logit element of the version's profiling sampler run (see the constants above)."""
    if uses_model_runner_v2(inputs):
        return inputs.act_bytes + FP32_BYTES
    if parse_vllm_version(inputs.vllm_version) >= TRITON_TOPK_SINCE or inputs.topk_topp_sampler == "flashinfer":
        return inputs.act_bytes + TRITON_TOPK_FP32_COPIES * FP32_BYTES
    return PROFILE_SAMPLER_BYTES_PER_LOGIT


def activation_peak_bytes(inputs: KvCapacityInputs) -> float:
    # The forward pass's tensors are freed before the sampler runs, so the peak is the larger of the two.
    forward = forward_activation_peak_bytes(inputs.spec, inputs.max_num_batched_tokens, inputs.tensor_parallel_size,
                                            inputs.act_bytes)
    return max(forward, sampler_peak_bytes(inputs.spec, inputs.max_num_seqs, inputs.max_num_batched_tokens,
                                           sampler_bytes_per_logit(inputs)))


def kv_cache_groups(spec: ModelSpec) -> tuple[int, int, int]:
    """(group_size, full-attention groups, sliding-window groups) as vLLM groups the layers
    (`_get_kv_cache_groups_uniform_page_size`); one group of every layer for a model without hybrid attention."""
    if not spec.is_hybrid_attention:
        return spec.num_layers, 1, 0
    sliding = spec.num_sliding_layers
    full = spec.num_layers - sliding
    group_size = min(full, sliding)
    if max(full, sliding) < group_size * 1.25:
        group_size = max(full, sliding)
    return group_size, -(-full // group_size), -(-sliding // group_size)


def block_bytes(inputs: KvCapacityInputs) -> float:
    """One block of `block_size` tokens, K and V, on one rank: of all layers, or a hybrid model's `group_size`
    layers (`kv_cache_groups`)."""
    group_size, _, _ = kv_cache_groups(inputs.spec)
    return inputs.block_size * inputs.kv_bytes_per_token_per_rank * group_size / inputs.spec.num_layers


def max_in_flight_tokens(inputs: KvCapacityInputs) -> int:
    """Tokens scheduled but not yet freed from a sliding window: one step's budget, two with asynchronous
    scheduling (`VllmConfig.max_in_flight_tokens` = max_concurrent_batches x max_num_batched_tokens, read in 0.26.0
    and 0.32.0; 0.24.0 and earlier take one step's, `SlidingWindowSpec.max_memory_usage_bytes`)."""
    batches = 2 if inputs.async_scheduling and parse_vllm_version(inputs.vllm_version) >= IN_FLIGHT_SINCE else 1
    return batches * inputs.max_num_batched_tokens


def sliding_blocks_per_request(inputs: KvCapacityInputs) -> int:
    """Blocks the sliding-window groups of a hybrid model hold at most for one request (vLLM
    `SlidingWindowSpec.max_memory_usage_bytes`: the window plus one step's tokens, and one block more)."""
    _, _, sliding_groups = kv_cache_groups(inputs.spec)
    if not sliding_groups:
        return 0
    window = inputs.spec.sliding_window
    assert window is not None
    tokens = min(window - 1 + max_in_flight_tokens(inputs), inputs.max_model_len)
    return sliding_groups * (-(-tokens // inputs.block_size) + 1)


def parse_vllm_version(version: str) -> tuple[int, int]:
    """(major, minor) of a vLLM release string ("0.11.2", "0.19.1rc1.dev8+g4b7f5ea1a"); `UserError` otherwise."""
    parts = version.strip().lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or "x")
    except (IndexError, ValueError):
        raise UserError(f"vLLM version: expected a release such as 0.11.0, got {version!r}") from None
    if (major, minor) < (0, 8):
        raise UserError(f"vLLM version: {version} is before 0.8; the KV accounting here is vLLM V1's "
                        "(its default engine from 0.8)")
    return major, minor


# The first vLLM release read whose "GPU KV cache size" is max_concurrency x max_model_len (0.19.1 still divides the
# block count by the groups, 0.22.0 multiplies; 0.20-0.21 not read; it matters only for hybrid models).
REPORT_FROM_CONCURRENCY_SINCE = (0, 22)
# The first vLLM release read whose sliding windows reserve for every batch in flight (absent in 0.24.0, present in
# 0.26.0; 0.25 not read).
IN_FLIGHT_SINCE = (0, 26)
# The first vLLM release that subtracts its CUDA-graph memory estimate from the KV budget by default.
CUDA_GRAPH_ESTIMATE_SINCE = (0, 21)


def blocks_per_max_len_request(inputs: KvCapacityInputs) -> int:
    """Blocks one request of max_model_len holds at most, all groups (`get_max_concurrency_for_kv_cache_config`)."""
    _, full_groups, _ = kv_cache_groups(inputs.spec)
    return full_groups * -(-inputs.max_model_len // inputs.block_size) + sliding_blocks_per_request(inputs)


def reported_capacity(inputs: KvCapacityInputs, num_blocks: int) -> tuple[int, float]:
    """vLLM's two log lines for `num_blocks`: ("GPU KV cache size" tokens, "Maximum concurrency" x), by version."""
    _, full_groups, sliding_groups = kv_cache_groups(inputs.spec)
    concurrency = num_blocks / blocks_per_max_len_request(inputs)
    if parse_vllm_version(inputs.vllm_version) >= REPORT_FROM_CONCURRENCY_SINCE:
        return int(concurrency * inputs.max_model_len), concurrency
    return num_blocks // (full_groups + sliding_groups) * inputs.block_size, concurrency


def _budget_terms(inputs: KvCapacityInputs) -> tuple[float, float, float, float]:
    """(requested, weights, activation peak, non-torch) bytes per rank."""
    requested = (inputs.memory_capacity_bytes - CUDA_RESERVED_BYTES) * inputs.gpu_memory_utilization
    non_torch = NON_TORCH_BYTES_TP1 if inputs.tensor_parallel_size == 1 else NON_TORCH_BYTES_TP_GT1
    return requested, inputs.weight_bytes_per_rank, activation_peak_bytes(inputs), non_torch


def profiled_kv_budget_bytes(inputs: KvCapacityInputs) -> float:
    """vLLM's "Available KV cache memory" of the profile run, in bytes per rank; negative when nothing is left (vLLM
    then refuses to start)."""
    requested, weights, activation, non_torch = _budget_terms(inputs)
    return requested - weights - activation - non_torch


def compute_kv_capacity(inputs: KvCapacityInputs) -> KvCapacity:
    """The number of KV blocks per rank (see the module docstring); `UserError` when nothing useful fits."""
    _check_inputs(inputs)
    requested, weights, activation, non_torch = _budget_terms(inputs)
    one_block = block_bytes(inputs)
    if inputs.kv_cache_memory_bytes is not None:
        kv_bytes, source = float(inputs.kv_cache_memory_bytes), "kv_cache_memory_bytes"
    else:
        kv_bytes, source = requested - weights - activation - non_torch, "profiled"
        if kv_bytes <= 0:
            raise UserError(
                f"model '{inputs.spec.name}' does not fit: {weights / GIB:.2f} GiB of weights per GPU + "
                f"{activation / GIB:.2f} GiB activation peak + {non_torch / GIB:.2f} GiB non-torch memory exceed "
                f"{requested / GIB:.2f} GiB ({(inputs.memory_capacity_bytes - CUDA_RESERVED_BYTES) / GIB:.2f} GiB x "
                f"--gpu-memory-utilization "
                f"{inputs.gpu_memory_utilization}); use a larger --tensor-parallel-size, --quantization, or a "
                f"larger device")
    num_blocks = int(kv_bytes // one_block)
    if inputs.num_gpu_blocks_override is not None:
        num_blocks, source = inputs.num_gpu_blocks_override, "num_gpu_blocks_override"
    if inputs.auto_fit_max_model_len:
        inputs = replace(inputs, max_model_len=min(inputs.max_model_len, _longest_request(inputs, num_blocks)))
        if inputs.max_model_len <= 0:
            raise UserError("--max-model-len -1: cannot auto-fit max_model_len: the KV cache holds no block for "
                            "even one token; raise --gpu-memory-utilization or --tensor-parallel-size")
    _check_one_request_fits(inputs, num_blocks, one_block)
    _, full_groups, sliding_groups = kv_cache_groups(inputs.spec)
    reported_tokens, concurrency = reported_capacity(inputs, num_blocks)
    graphs_not_modelled = (source == "profiled"
                           and parse_vllm_version(inputs.vllm_version) >= CUDA_GRAPH_ESTIMATE_SINCE)
    return KvCapacity(num_gpu_blocks=num_blocks, block_bytes=one_block, kv_cache_bytes=num_blocks * one_block,
                      requested_bytes=requested, cuda_reserved_bytes=CUDA_RESERVED_BYTES, weight_bytes=weights,
                      activation_peak_bytes=activation, non_torch_bytes=non_torch, source=source,
                      block_size=inputs.block_size, num_kv_cache_groups=full_groups + sliding_groups,
                      sliding_blocks_per_request=sliding_blocks_per_request(inputs),
                      max_model_len=inputs.max_model_len,
                      blocks_per_max_len_request=blocks_per_max_len_request(inputs),
                      reported_num_tokens=reported_tokens, max_concurrency=concurrency,
                      cuda_graph_bytes_not_modelled=graphs_not_modelled)


def _longest_request(inputs: KvCapacityInputs, num_blocks: int) -> int:
    """The longest request (tokens, whole blocks) whose KV cache fits `num_blocks`: vLLM's auto-fit
    (`_estimate_max_model_len_from_groups`: the largest max_model_len that passes the one-request check)."""
    _, full_groups, _ = kv_cache_groups(inputs.spec)
    sliding = sliding_blocks_per_request(inputs)
    return max(0, (num_blocks - sliding) // full_groups) * inputs.block_size


class KvCacheTooSmall(UserError):
    """One request of max_model_len does not fit the KV cache (vLLM refuses to start; -1 would auto-fit)."""


def _check_one_request_fits(inputs: KvCapacityInputs, num_blocks: int, one_block: float) -> None:
    # vLLM's check_enough_kv_cache_memory: one request of max_model_len must fit in the cache (in every group of a
    # hybrid model: full groups the whole length, sliding groups their window).
    _, full_groups, _ = kv_cache_groups(inputs.spec)
    sliding = sliding_blocks_per_request(inputs)
    needed_blocks = full_groups * -(-inputs.max_model_len // inputs.block_size) + sliding
    if num_blocks < needed_blocks:
        max_len = _longest_request(inputs, num_blocks)
        raise KvCacheTooSmall(
            f"KV cache too small: one request of --max-model-len {inputs.max_model_len} needs {needed_blocks} "
            f"blocks ({needed_blocks * one_block / GIB:.2f} GiB per GPU) but only {num_blocks} fit "
            f"({num_blocks * one_block / GIB:.2f} GiB); the longest that fits is {max_len} tokens: lower "
            f"--max-model-len (-1: the longest that fits), or raise --gpu-memory-utilization / "
            "--tensor-parallel-size")


def _check_inputs(inputs: KvCapacityInputs) -> None:
    if not 0 < inputs.gpu_memory_utilization <= 1:
        raise UserError(f"--gpu-memory-utilization: must be in (0, 1], got {inputs.gpu_memory_utilization}")
    for flag, value in (("--block-size", inputs.block_size), ("--max-num-seqs", inputs.max_num_seqs),
                        ("--max-num-batched-tokens", inputs.max_num_batched_tokens),
                        ("--max-model-len", inputs.max_model_len),
                        ("--tensor-parallel-size", inputs.tensor_parallel_size)):
        if value < 1:
            raise UserError(f"{flag}: must be a positive integer, got {value}")
    if inputs.kv_cache_memory_bytes is not None and inputs.kv_cache_memory_bytes <= 0:
        raise UserError(f"--kv-cache-memory-bytes: must be positive, got {inputs.kv_cache_memory_bytes}")
    parse_vllm_version(inputs.vllm_version)
    if inputs.topk_topp_sampler not in TOPK_TOPP_SAMPLERS:
        raise UserError(f"topk_topp_sampler: allowed: {', '.join(TOPK_TOPP_SAMPLERS)}, got {inputs.topk_topp_sampler}")
    if inputs.num_gpu_blocks_override is not None and inputs.num_gpu_blocks_override < 1:
        raise UserError(f"--num-gpu-blocks-override: must be a positive integer, got {inputs.num_gpu_blocks_override}")
