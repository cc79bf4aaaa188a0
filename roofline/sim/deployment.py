"""One replica's deployment resolved once: the model, the device, the engine arguments checked against both, the cost
model and the KV block count vLLM would get (`make_deployment`); a plan reuses it across runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.core.config import CacheConfig, SchedulerConfig
from engine.core.model_spec import ModelSpec
from roofline.cost.collective_versions import for_vllm_version
from roofline.cost.cpu import DEFAULT_CPU_ENGINE
from roofline.cost.expert_parallel import DataParallelMoe
from roofline.cost.hardware import HardwareProfile, load_profile
from roofline.cost.kernels import kernel_family
from roofline.cost.kv_capacity import (
    KvCapacity,
    KvCapacityInputs,
    compute_kv_capacity,
    kv_cache_groups,
    parse_vllm_version,
)
from roofline.cost.pipeline import PipelineStages, StageCostModel
from roofline.cost.quant import QuantConfig, resolve_deepgemm_moe, resolve_kv_cache_dtype
from roofline.cost.step_cost import StepCostModel
from roofline.engine_args import DEFAULT_GPU_MEMORY_UTILIZATION, VLLM_VERSION, EngineArgs, engine_record
from roofline.errors import UserError
from roofline.registry import load_model

# The first vLLM release that decides the DP ranks' padding on the step's synchronised graph mode
# (`roofline.sim.data_parallel.dp_padded_tokens`; vllm-project/vllm#34102, "[DP] Only use DP padding when cudagraphs
# are actually used"); the releases before decide on the compilation config's (read in the 0.12.0 and 0.16.0 wheels:
# vllm/v1/worker/gpu_model_runner.py `_determine_batch_execution_and_padding`; 0.17.0 and 0.32.0: by the step).
DP_PAD_BY_STEP_GRAPH_SINCE = (0, 17)


@dataclass(frozen=True, eq=False)
class Deployment:
    """One replica's model, device and engine configuration, resolved once (a plan reuses it across runs)."""

    spec: ModelSpec
    hw: HardwareProfile
    quant: QuantConfig
    engine: EngineArgs
    scheduler_config: SchedulerConfig
    cache_config: CacheConfig
    kv: KvCapacity
    cost_model: StepCostModel
    engine_record: dict[str, Any]  # the resolved engine configuration, as summaries and run metadata show it
    # Data / expert parallelism of a MoE model (`roofline.cost.expert_parallel`): the group's MoE layers; None
    # without DP or EP.
    moe: DataParallelMoe | None = None
    # Pipeline parallelism (`roofline.cost.pipeline`): the stages and their cost models; None with one stage.
    pipeline: PipelineStages | None = None
    # The DP ranks pad to the largest count even when it runs eager (vLLM releases before
    # `DP_PAD_BY_STEP_GRAPH_SINCE`; `dp_padded_tokens`).
    dp_pads_eager_steps: bool = False
    # The vLLM release simulated (its API server's chat cost: `roofline.sim.api_server.release_chat_request_extra_s`).
    vllm_version: str = VLLM_VERSION

    @property
    def gpus_per_replica(self) -> int:
        return self.engine.tensor_parallel_size * self.engine.data_parallel_size * self.engine.pipeline_parallel_size


def make_deployment(model: str | ModelSpec, hardware: str | HardwareProfile, engine: EngineArgs,
                    cpu_engine: str = DEFAULT_CPU_ENGINE, vllm_version: str = VLLM_VERSION) -> Deployment:
    """Resolve ids/paths, check the engine arguments against the model and the device, build the cost model
    (`cpu_engine`: whose execution a CPU profile describes, `StepCostModel`) and compute the KV block count
    (with `vllm_version`'s memory profile, `roofline.cost.kv_capacity`; the scheduler is vLLM 0.32's whatever it,
    but for the DP ranks' padding rule, which is `vllm_version`'s: `roofline.sim.data_parallel.dp_padded_tokens`);
    `UserError` if it cannot run."""
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    hw = hardware if isinstance(hardware, HardwareProfile) else load_profile(hardware)
    # The all-reduce of `vllm_version`'s operator table (`roofline.cost.collective_versions`).
    hw = for_vllm_version(hw, vllm_version)
    engine.check_model(spec)
    engine.check_hardware(hw)
    hw = engine.resolve_hardware(hw)
    kv_cache_dtype = resolve_kv_cache_dtype(engine.kv_cache_dtype, spec, vllm_version)
    quant = QuantConfig.from_user(dtype=engine.dtype, quantization=engine.quantization, kv_cache_dtype=kv_cache_dtype,
                                  model_dtype=spec.torch_dtype,
                                  moe_backend=engine.moe_backend,
                                  float32_matmul_precision=engine.float32_matmul_precision)
    # The block-fp8 MoE kernel of `vllm_version` (`resolve_deepgemm_moe`); the experts' TP is vLLM's
    # `FusedMoEParallelConfig.make`: TP x DP without EP, 1 with it.
    parallel = engine.parallel
    block_fp8 = kernel_family(hw.family).block_fp8_gemm
    quant = resolve_deepgemm_moe(
        quant, block_fp8 is not None and block_fp8.contiguous_time_s is not None, vllm_version,
        1 if parallel.enable_expert_parallel else engine.tensor_parallel_size * parallel.data_parallel_size)
    max_num_seqs, max_num_batched_tokens = engine.batch_limits(spec, hw.memory_capacity_bytes,
                                                               f"{hw.id} {hw.name}", is_cpu=False)
    capture_sizes = (engine.cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens, spec.architecture)
                     if hw.kind != "cpu" and hw.executor.mode == "cuda_graphs" else None)
    cost_model = StepCostModel(spec, hw, quant, engine.tensor_parallel_size, cpu_engine=cpu_engine,
                               cudagraph_mode=engine.resolved_cudagraph_mode, capture_sizes=capture_sizes)
    max_model_len = engine.resolved_max_model_len(spec)
    cost_model.expect_max_num_tokens(max_num_batched_tokens)
    moe = None
    if spec.is_moe and (parallel.data_parallel_size > 1 or parallel.enable_expert_parallel):
        moe = DataParallelMoe(cost_model, parallel.layout(hw, engine.tensor_parallel_size),
                              parallel.resolved_all2all_backend, parallel.num_redundant_experts)
    pipeline = None
    if parallel.pipeline_parallel_size > 1:
        layout = parallel.layout(hw, engine.tensor_parallel_size)
        pipeline = PipelineStages.build(
            spec, hw, engine.tensor_parallel_size, parallel.pipeline_parallel_size, layout.stage_node,
            lambda stage, first, last: StageCostModel(
                stage, hw, quant, engine.tensor_parallel_size, first, last, cpu_engine=cpu_engine,
                cudagraph_mode=engine.resolved_cudagraph_mode, capture_sizes=capture_sizes))
    gpu_memory_utilization = (engine.gpu_memory_utilization if engine.gpu_memory_utilization is not None
                              else DEFAULT_GPU_MEMORY_UTILIZATION)

    def capacity(stage_spec: ModelSpec, model: StepCostModel, saved_bytes: float) -> KvCapacity:
        return compute_kv_capacity(KvCapacityInputs(
            spec=stage_spec, memory_capacity_bytes=hw.memory_capacity_bytes,
            weight_bytes_per_rank=model.loaded_weight_bytes_per_rank(vllm_version, saved_bytes),
            kv_bytes_per_token_per_rank=model.kv_bytes_per_token_per_rank(), act_bytes=quant.act_bytes,
            tensor_parallel_size=engine.tensor_parallel_size, block_size=engine.block_size,
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization, kv_cache_memory_bytes=engine.kv_cache_memory_bytes,
            num_gpu_blocks_override=engine.num_gpu_blocks_override,
            auto_fit_max_model_len=engine.auto_fit_max_model_len, async_scheduling=hw.executor.host_overlaps_device,
            weights_quantized=quant.quantization != "none" or quant.experts[0] != "none",
            vllm_version=vllm_version))
    if pipeline is None:
        kv = capacity(spec, cost_model, moe.expert_weight_bytes_saved() if moe is not None else 0.0)
    else:
        # Each stage's workers profile their own layers; every worker then gets the smallest block count
        # (vllm/v1/core/kv_cache_utils.py `get_kv_cache_configs`, step 5): the scarcest stage's capacity.
        kv = min((capacity(m.spec, m, 0.0) for m in pipeline.cost_models), key=lambda c: c.num_gpu_blocks)
    max_model_len = kv.max_model_len  # lowered by --max-model-len -1 to what the KV cache holds
    try:
        scheduler_config = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                           max_model_len=max_model_len,
                                           enable_chunked_prefill=engine.enable_chunked_prefill)
        # A hybrid model's sliding-window groups draw from the same pool (vLLM's hybrid allocator; the one full
        # group is the scheduler's block table, `kv_cache_groups` gives every shipped hybrid model one).
        _, full_groups, sliding_groups = kv_cache_groups(spec)
        assert full_groups == 1, f"{spec.name}: {full_groups} full-attention KV groups"
        cache_config = CacheConfig(num_blocks=kv.num_gpu_blocks, block_size=engine.block_size,
                                   enable_prefix_caching=engine.enable_prefix_caching,
                                   num_sliding_groups=sliding_groups,
                                   sliding_window=(spec.sliding_window or 0) if sliding_groups else 0,
                                   sliding_admission_cap_blocks=kv.sliding_blocks_per_request // max(sliding_groups, 1))
    except ValueError as exc:
        raise UserError(f"engine configuration: {exc}") from None
    record = engine_record(engine, max_num_seqs, max_num_batched_tokens, max_model_len, gpu_memory_utilization,
                           hw.executor.host_overlaps_device, cost_model.cudagraph_mode, cost_model.max_capture_size,
                           kv_cache_dtype)
    dp_pads_eager_steps = (parallel.data_parallel_size > 1
                           and parse_vllm_version(vllm_version) < DP_PAD_BY_STEP_GRAPH_SINCE)
    return Deployment(spec, hw, quant, engine, scheduler_config, cache_config, kv, cost_model, record, moe, pipeline,
                      dp_pads_eager_steps, vllm_version)

