"""Pipeline parallelism as vLLM 0.32 runs it: the layers split over stages, each stage's step time, the activations
sent between stages, and the clock of a pipeline with several batches in flight.

    stages = PipelineStages.build(spec, hw, tp, pp, layout.stage_node, make_stage_cost_model)
    times = stages.stage_times_s(plan)              # each stage's own step time (its layers, first / last extras)
    clock = PipelineClock(stages)
    done_s = clock.submit(plan, now_s, inputs_ready_s)   # when the batch's last stage is done (its tokens sampled)

How vLLM runs it (sources read in vLLM 0.32.0's wheel):
- The split (vllm/distributed/utils.py `get_pp_indices`): L // PP layers per stage; the L % PP left over go one each
  to the stages before the last, from the second-to-last backwards (the last also holds the final norm and the LM
  head). `VLLM_PP_LAYER_PARTITION` (an environment variable) overrides it; not modelled.
- What each stage runs (vllm/model_executor/models/llama.py `LlamaModel.forward`, and every decoder of the same
  shape): the first stage the embedding, every stage its layers, the last the final norm, the LM head and the
  sampler (`PPMissingLayer` elsewhere). A stage's step time is the cost model's step of a model of its own layers
  (`stage_spec`), without the operators it does not run (`StageCostModel`).
- What is sent (vllm/v1/worker/gpu_worker.py `Worker.execute_model`: `isend_tensor_dict(output.tensors,
  all_gather_group=get_tp_group())`; llama.py `make_empty_intermediate_tensors_factory(["hidden_states",
  "residual"], hidden_size)`): two tensors of tokens x hidden in the activation dtype, each TP rank sending its 1/TP
  slice to its peer of the next stage, which all-gathers them over its TP group (vllm/distributed/parallel_state.py
  `send_tensor_dict` / `irecv_tensor_dict`). The send is NCCL point-to-point; no operator table measures one
  (aiconfigurator-core 0.12.0's NCCL tables hold all_gather, all_reduce, alltoall, reduce_scatter), so it is timed
  as NCCL's two-GPU all-gather, which is one exchange of half the buffer each way (fitted per chip on those tables:
  `nccl_collective_time_s`), over NVLink within a node and over the profile's `scale_out` NIC (one per GPU) between
  nodes (the NIC at NVLink's fitted efficiency: UNMEASURED, as the multi-node all-to-all).
- Batches in flight (vllm/config/vllm.py `VllmConfig.max_concurrent_batches`): PP + 1 with asynchronous scheduling
  on the V2 model runner (0.32's default), PP without it; the engine core keeps scheduling until that many are in
  flight and then blocks on the oldest (vllm/v1/engine/core.py `EngineCore.step_with_batch_queue`). The sampled
  tokens go from the last stage straight to the first (vllm/v1/worker/gpu/pp_utils.py `PPHandler`: a broadcast on
  its own NCCL communicator), so a batch whose decodes need the tokens of an earlier batch starts its first stage
  only once that batch is done (`PipelineClock.submit`'s `inputs_ready_s`).
- KV cache (vllm/v1/core/kv_cache_utils.py `get_kv_cache_configs`, step 5): each stage's workers profile their own
  layers' memory, and every worker gets the smallest block count of all (`roofline.sim.deployment`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.core.model_spec import ModelSpec
from roofline.cost.hardware import HardwareProfile
from roofline.cost.kernels.all_to_all import nccl_collective_time_s
from roofline.cost.kernels.collectives import all_gather_time_s
from roofline.cost.ops import OpRecord, RankShape
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepShape
from roofline.errors import UserError

# vLLM's IntermediateTensors between stages: hidden_states and residual, each tokens x hidden (llama.py).
NUM_INTERMEDIATE_TENSORS = 2
# The operators only the first stage runs, and those only the last runs (besides `emit_ops`, all the last's).
FIRST_STAGE_OPS = frozenset({"embedding", "embedding_all_reduce"})
LAST_STAGE_OPS = frozenset({"final_norm"})
EMIT_OPS = frozenset({"lm_head", "logits_gather", "sampling"})  # `roofline.cost.ops.emit_ops`'s records
SAMPLED_TOKEN_BYTES = 8  # one int64 token id per sequence in the last stage's broadcast (pp_utils.py)


def pp_layer_partition(num_layers: int, pp_size: int) -> tuple[int, ...]:
    """Layers per stage as vLLM's `get_pp_indices` (vllm/distributed/utils.py) splits them by default."""
    partitions = [num_layers // pp_size] * pp_size
    for i in range(2, num_layers % pp_size + 2):
        partitions[-i] += 1
    return tuple(partitions)


def stage_spec(spec: ModelSpec, start: int, end: int) -> ModelSpec:
    """The model of layers [start, end): its per-layer facts sliced (attention types, DeepSeek's first dense
    layers)."""
    layer_types = spec.layer_types[start:end] if spec.layer_types is not None else None
    num_dense = max(0, min(spec.num_dense_layers, end) - start)
    try:
        return replace(spec, num_layers=end - start, layer_types=layer_types, num_dense_layers=num_dense)
    except ValueError as exc:  # e.g. Llama 4's chunked layers without a global one in the stage
        raise UserError(f"--pipeline-parallel-size (-pp): layers {start}-{end - 1} of model '{spec.name}' as one "
                        f"stage: {exc}; the simulator models this split no further; allowed: another -pp") from None


class StageCostModel(StepCostModel):
    """The step time of one pipeline stage: the cost model of its layers (`stage_spec`) without the operators the
    stage does not run (module docstring): the embedding unless it is the first, the final norm, the LM head and
    the sampler unless it is the last."""

    def __init__(self, spec: ModelSpec, hw: HardwareProfile, quant: Any, tp: int, first: bool, last: bool,
                 **kwargs: Any) -> None:
        self.first, self.last = first, last
        super().__init__(spec, hw, quant, tp, **kwargs)

    def _keep(self, ops: list[OpRecord]) -> list[OpRecord]:
        return [op for op in ops if (self.first or op.name not in FIRST_STAGE_OPS)
                and (self.last or op.name not in LAST_STAGE_OPS)]

    def _token_part(self, num_tokens: np.ndarray, graph_max_tokens: float | None = None) -> tuple[np.ndarray, int]:
        from roofline.cost.ops import token_ops
        graph_max = self._graph_max_tokens if graph_max_tokens is None else graph_max_tokens
        return self._parts_cost(self._keep(token_ops(self.spec, self.quant, self.tp, num_tokens, graph_max)))

    def _emit_part(self, num_emits: np.ndarray) -> tuple[np.ndarray, int]:
        return super()._emit_part(num_emits) if self.last else (np.zeros(np.shape(num_emits)), 0)

    def _step_ops(self, s: Any) -> list[OpRecord]:
        ops = self._keep(super()._step_ops(s))
        return ops if self.last else [op for op in ops if op.name not in EMIT_OPS]

    def _count_columns(self, ops_of: Any, counts: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
        from roofline.cost.ops import emit_ops
        if ops_of is emit_ops and not self.last:
            return [], np.zeros((len(counts), 0)), np.zeros(len(counts), dtype=np.int64)
        return super()._count_columns(lambda *args, **kw: self._keep(ops_of(*args, **kw)), counts)

    def weight_bytes_per_rank(self) -> float:
        """The stage's layers, plus the embedding on the first stage and the final norm and LM head on the last
        (the LM head loaded there even where tied to the embedding: vLLM's last rank builds its own
        `ParallelLMHead`)."""
        r = RankShape.of(self.spec, self.tp)
        a = self.quant.act_bytes
        embed = r.vocab * r.hidden * a
        whole = super().weight_bytes_per_rank()  # the layers + embedding + untied LM head + final norm
        layers = whole - embed - (0.0 if self.spec.tie_word_embeddings else embed) - r.hidden * a
        return layers + (embed if self.first else 0.0) + ((embed + r.hidden * a) if self.last else 0.0)


@dataclass(frozen=True)
class PipelineStages:
    """The stages of one pipeline: their layer ranges, cost models, and the links of the sends between them."""

    layers: tuple[tuple[int, int], ...]  # [start, end) of each stage
    cost_models: tuple[StageCostModel, ...]
    across_nodes: tuple[bool, ...]  # the send after stage s crosses to another node (len PP - 1)
    hw: HardwareProfile
    tp: int
    hidden: int
    act_bytes: float

    @classmethod
    def build(cls, spec: ModelSpec, hw: HardwareProfile, tp: int, pp: int, stage_node: Callable[[int], int],
              make_cost_model: Callable[[ModelSpec, bool, bool], StageCostModel]) -> PipelineStages:
        """`make_cost_model(stage spec, first, last)` builds a stage's cost model; `stage_node(s)`: the node of
        stage s (`roofline.parallel_config.ParallelLayout.stage_node`)."""
        bounds, start = [], 0
        for n in pp_layer_partition(spec.num_layers, pp):
            bounds.append((start, start + n))
            start += n
        models = tuple(make_cost_model(stage_spec(spec, lo, hi), s == 0, s == pp - 1)
                       for s, (lo, hi) in enumerate(bounds))
        across = tuple(stage_node(s) != stage_node(s + 1) for s in range(pp - 1))
        return cls(tuple(bounds), models, across, hw, tp, spec.hidden_size, models[0].quant.act_bytes)

    @property
    def num_stages(self) -> int:
        return len(self.cost_models)

    def stage_times_s(self, shape: StepShape) -> list[float]:
        return [m.time_s(shape) for m in self.cost_models]

    def send_s(self, num_tokens: int, stage: int) -> float:
        """Seconds the activations of `num_tokens` tokens take from stage `stage` to the next: each TP rank's slice
        of hidden_states and residual to its peer (NCCL's two-GPU all-gather of twice the slice, over NVLink or the
        NIC), then the receiver's all-gather of each tensor over its TP group (module docstring)."""
        tensor_bytes = float(num_tokens) * self.hidden * self.act_bytes
        slice_bytes = NUM_INTERMEDIATE_TENSORS * tensor_bytes / self.tp
        t = self._p2p_s(slice_bytes, self.across_nodes[stage])
        if self.tp > 1:
            t += NUM_INTERMEDIATE_TENSORS * float(all_gather_time_s(self.hw, tensor_bytes, self.tp))
        return t

    def token_broadcast_s(self, num_emits: int) -> float:
        """The last stage's sampled tokens to the first (pp_utils.py `PPHandler`): one point-to-point message."""
        return self._p2p_s(float(num_emits) * SAMPLED_TOKEN_BYTES, any(self.across_nodes))

    def _p2p_s(self, num_bytes: float, across_nodes: bool) -> float:
        """NCCL send of `num_bytes` between two GPUs: the two-GPU all-gather of 2 x num_bytes (each GPU sends its
        half: fixed + step + num_bytes / (link x efficiency)), over the NIC instead of NVLink across nodes."""
        hw = self.hw
        if not across_nodes:
            return float(nccl_collective_time_s(hw, "all_gather", 2.0 * num_bytes, 2))
        assert hw.scale_out is not None, f"{hw.id}: a pipeline across nodes without a scale_out section"
        e = hw.efficiency
        return e.nccl_ag_fixed_s + e.nccl_ag_rs_step_s + num_bytes / (
            hw.scale_out.bandwidth_bytes_per_s_per_direction * e.nccl_ag_bus_efficiency)


class PipelineClock:
    """When each stage is free, and when a batch submitted now is done (module docstring):

        stage 0 starts at max(submitted, stage 0 free, the batch's inputs ready)
        stage s starts at max(stage s-1's end + the send, stage s free)
        done = the last stage's end

    Batches go through the stages in submission order (each stage runs one batch at a time, FIFO)."""

    def __init__(self, stages: PipelineStages) -> None:
        self.stages = stages
        self.free_s = [0.0] * stages.num_stages

    def submit(self, shape: StepShape, now_s: float, inputs_ready_s: float = 0.0,
               stage_times_s: Sequence[float] | None = None) -> float:
        times = self.stages.stage_times_s(shape) if stage_times_s is None else stage_times_s
        num_tokens = shape.num_batched_tokens
        start = max(now_s, self.free_s[0], inputs_ready_s)
        end = start + times[0]
        self.free_s[0] = end
        for s in range(1, len(times)):
            start = max(end + self.stages.send_s(num_tokens, s - 1), self.free_s[s])
            end = start + times[s]
            self.free_s[s] = end
        return end
