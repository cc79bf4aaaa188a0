"""vLLM 0.32's data, expert and pipeline parallelism flags, checked as vLLM checks them, and the node layout they give.

    p = ParallelArgs(data_parallel_size=8, enable_expert_parallel=True, all2all_backend="deepep_low_latency")
    p.check_model(spec); layout = p.layout(hw, tensor_parallel_size=1)    # UserError naming the flag, or the layout
    layout.ep_size, layout.num_nodes, layout.gpus_per_node

Sources: vllm/config/parallel.py (`ParallelConfig`: field bounds; `_validate_parallel_config`: data_parallel_size_local
<= data_parallel_size, EPLB needs --enable-expert-parallel and TP x DP > 1, num_redundant_experts only with EPLB, "pplx"
and "naive" fall back to allgather_reducescatter; `All2AllBackend`, default "allgather_reducescatter";
`use_all2all`: the all2all backend runs only where data_parallel_size > 1; `use_sequence_parallel_moe`; `EPLBConfig`),
vllm/engine/arg_utils.py `create_engine_config` (data_parallel_size_local defaults to data_parallel_size: every rank on
this node; with `--nnodes N` the world size TP x PP x DP must divide by N, and the multiprocessing executor puts ranks
world_size / N per node in order, rank = PP rank x TP + TP rank: vllm/v1/executor/multiproc_executor.py), vllm/v1/engine/
core.py (a MoE model's DP ranks run `DPEngineCoreProc`: lockstep steps; a dense model's ranks are independent engines).
Pipeline parallelism (`roofline.cost.pipeline`) is modelled with tensor parallelism; with data or expert parallelism
(which vLLM runs) it is refused as not modelled yet.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from engine.core.model_spec import ModelSpec
from roofline.cost.hardware import HardwareProfile
from roofline.cost.kernels.all_to_all import (
    ALL2ALL_BACKENDS,
    DEFAULT_ALL2ALL_BACKEND,
    REMOVED_BACKENDS,
    TIMED_BACKENDS,
)
from roofline.errors import UserError

# vLLM's EPLBConfig fields (vllm/config/parallel.py) -> a check of the value (True = allowed).
_EPLB_FIELDS: dict[str, Any] = {
    "window_size": lambda v: _is_int(v) and v > 0, "step_interval": lambda v: _is_int(v) and v > 0,
    "num_redundant_experts": lambda v: _is_int(v) and v >= 0, "log_balancedness": lambda v: isinstance(v, bool),
    "log_balancedness_interval": lambda v: _is_int(v) and v > 0, "use_async": lambda v: isinstance(v, bool),
    "policy": lambda v: v == "default",
    "communicator": lambda v: v in (None, "torch_nccl", "torch_gloo", "nixl", "pynccl")}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_eplb_config(text: str) -> int:
    """`--eplb-config` JSON -> its num_redundant_experts (the only field that changes a step's time here); every key
    and value checked as vLLM's EPLBConfig checks it."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise UserError(f"--eplb-config: {text!r} is not JSON; allowed: a JSON object of EPLBConfig fields, e.g. "
                        '\'{"num_redundant_experts": 32}\'') from None
    if not isinstance(data, dict):
        raise UserError(f"--eplb-config: must be a JSON object; allowed keys: {', '.join(_EPLB_FIELDS)}")
    for key, value in data.items():
        if key not in _EPLB_FIELDS:
            raise UserError(f"--eplb-config: unknown field {key!r}; allowed: {', '.join(_EPLB_FIELDS)}")
        if not _EPLB_FIELDS[key](value):
            raise UserError(f"--eplb-config: {key} = {value!r} is not allowed (vLLM's EPLBConfig: window_size, "
                            "step_interval, log_balancedness_interval > 0; num_redundant_experts >= 0; policy "
                            "'default'; communicator torch_nccl, torch_gloo, nixl, pynccl or null)")
    if data.get("use_async", True) and data.get("communicator") in ("torch_nccl", "pynccl"):
        raise UserError(f"--eplb-config: communicator {data['communicator']!r} is incompatible with async EPLB "
                        "(vLLM); allowed: torch_gloo, nixl or null, or use_async false")
    return int(data.get("num_redundant_experts", 0))


@dataclass(frozen=True)
class ParallelLayout:
    """Where a deployment's GPUs are: DP ranks of TP GPUs each, `ranks_per_node` of them on each node."""

    data_parallel_size: int
    tensor_parallel_size: int
    ranks_per_node: int
    gpus_per_node: int  # the profile's `scale_out.gpus_per_node`, else its scale-up domain
    expert_parallel: bool
    pipeline_parallel_size: int = 1

    @property
    def num_gpus(self) -> int:
        return self.data_parallel_size * self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def ep_size(self) -> int:
        """Ranks the experts are spread over: DP x TP with --enable-expert-parallel (vLLM's EP group spans the
        TP x DP ranks), else 1 (experts sliced by TP)."""
        return self.num_gpus if self.expert_parallel else 1

    @property
    def num_nodes(self) -> int:
        if self.pipeline_parallel_size > 1:  # (no DP with PP: `ParallelArgs.check`)
            return math.ceil(self.num_gpus / self.gpus_per_node)
        return math.ceil(self.data_parallel_size / self.ranks_per_node)

    def stage_node(self, stage: int) -> int:
        """The node of pipeline stage `stage`: vLLM's multiprocessing executor gives node r the world ranks
        r x world / nodes onwards, and stage s holds ranks s x TP to (s + 1) x TP - 1 (`layout` checks that no
        TP group straddles two nodes)."""
        return stage * self.tensor_parallel_size // (self.num_gpus // self.num_nodes)


@dataclass(frozen=True)
class ParallelArgs:
    """vLLM's parallelism flags other than -tp (None: vLLM's default)."""

    data_parallel_size: int = 1
    data_parallel_size_local: int | None = None
    enable_expert_parallel: bool = False
    all2all_backend: str = DEFAULT_ALL2ALL_BACKEND
    enable_eplb: bool = False
    num_redundant_experts: int = 0  # --eplb-config's
    pipeline_parallel_size: int = 1

    def check(self, tensor_parallel_size: int) -> None:
        """Each value, and the combinations vLLM refuses, as vLLM's ParallelConfig does."""
        for flag, value in (("--data-parallel-size", self.data_parallel_size),
                            ("--pipeline-parallel-size", self.pipeline_parallel_size)):
            if not _is_int(value) or value < 1:
                raise UserError(f"{flag}: must be a positive integer, got {value!r}")
        local = self.data_parallel_size_local
        if local is not None and (not _is_int(local) or not 1 <= local <= self.data_parallel_size):
            raise UserError(f"--data-parallel-size-local: must be an integer from 1 to --data-parallel-size "
                            f"({self.data_parallel_size}), got {local!r} (vLLM: data_parallel_size_local must be <= "
                            "data_parallel_size; 0, a node without engines, is not modelled)")
        if self.all2all_backend not in ALL2ALL_BACKENDS:
            raise UserError(f"--all2all-backend: {self.all2all_backend!r} is not allowed; allowed: "
                            f"{', '.join(ALL2ALL_BACKENDS)}")
        if self.all2all_backend not in TIMED_BACKENDS + REMOVED_BACKENDS:
            raise UserError(f"--all2all-backend: {self.all2all_backend} is a vllm serve choice the simulator does "
                            f"not model yet; allowed: {', '.join(TIMED_BACKENDS)}")
        if self.pipeline_parallel_size > 1 and (self.data_parallel_size > 1 or self.enable_expert_parallel):
            given = "--data-parallel-size" if self.data_parallel_size > 1 else "--enable-expert-parallel"
            raise UserError(f"--pipeline-parallel-size (-pp): {self.pipeline_parallel_size} with {given}: pipeline "
                            "parallelism combined with data or expert parallelism is a vllm serve setting the "
                            "simulator does not model yet; allowed: -pp 1 with DP / EP, or -pp N with -tp only")
        if self.enable_eplb and not self.enable_expert_parallel:
            raise UserError("--enable-eplb: enable_expert_parallel must be True to use EPLB (vLLM); allowed: with "
                            "--enable-expert-parallel")
        if self.enable_eplb and tensor_parallel_size * self.data_parallel_size <= 1:
            raise UserError(f"--enable-eplb: EPLB requires tensor or data parallelism (vLLM), got TP="
                            f"{tensor_parallel_size}, DP={self.data_parallel_size}; allowed: TP x DP > 1")
        if not self.enable_eplb and self.num_redundant_experts:
            raise UserError(f"--eplb-config: num_redundant_experts is set to {self.num_redundant_experts} but EPLB "
                            "is not enabled (vLLM); allowed: with --enable-eplb, or num_redundant_experts 0")

    @property
    def resolved_all2all_backend(self) -> str:
        """vLLM's backend: "pplx" and "naive" were removed and fall back to allgather_reducescatter."""
        return DEFAULT_ALL2ALL_BACKEND if self.all2all_backend in REMOVED_BACKENDS else self.all2all_backend

    @property
    def is_default(self) -> bool:
        return self == ParallelArgs()

    def check_model(self, spec: ModelSpec) -> None:
        if self.enable_expert_parallel and not spec.is_moe:
            raise UserError(f"--enable-expert-parallel: model '{spec.name}' has no MoE layers, so there are no "
                            "experts to place; allowed: leave it out")
        if self.pipeline_parallel_size > spec.num_layers:
            raise UserError(f"--pipeline-parallel-size (-pp): {self.pipeline_parallel_size} stages for the "
                            f"{spec.num_layers} layers of model '{spec.name}' leave a stage without layers, which the "
                            f"simulator does not model; allowed: 1 to {spec.num_layers}")
        if self.data_parallel_size > 1 and not spec.is_moe:
            raise UserError(f"--data-parallel-size: model '{spec.name}' is dense, whose DP ranks vLLM runs as "
                            "independent engines behind its load balancer, which the simulator does not model yet; "
                            "allowed: 1 (give --num-replicas N for N independent engines)")

    def layout(self, hw: HardwareProfile, tensor_parallel_size: int) -> ParallelLayout:
        """The node layout, checked against the device: a node holds the profile's `scale_out.gpus_per_node` GPUs
        (else one scale-up domain, `interconnect.max_num_gpus`: HGX 8, NVL72 72), TP stays within it, and so do
        this node's ranks (--data-parallel-size-local, default all of them, as vLLM's create_engine_config); more
        nodes than one need the profile's scale_out network."""
        domain = hw.interconnect.max_num_gpus if hw.interconnect is not None else 8
        per_node = hw.scale_out.gpus_per_node if hw.scale_out is not None else domain
        local = self.data_parallel_size_local or self.data_parallel_size
        if self.data_parallel_size > 1 and hw.kind == "cpu":
            raise UserError(f"--data-parallel-size: {hw.id} is a CPU profile, which models one device; allowed: 1")
        if self.pipeline_parallel_size > 1:
            return self._pipeline_layout(hw, tensor_parallel_size, per_node)
        if local * tensor_parallel_size > per_node:
            given = "--data-parallel-size-local" if self.data_parallel_size_local else "--data-parallel-size"
            raise UserError(f"{given}: {local} ranks x TP {tensor_parallel_size} on one node exceed its "
                            f"{per_node} GPUs ({hw.id}); allowed: ranks per node (--data-parallel-size-local) x TP "
                            f"<= {per_node}")
        if local < self.data_parallel_size:
            if hw.scale_out is None:
                raise UserError(f"--data-parallel-size-local: {local} of {self.data_parallel_size} ranks per node "
                                f"puts the MoE layers' all-to-all across nodes, and profile {hw.id} describes no "
                                "network between nodes (scale_out:); allowed: --data-parallel-size-local "
                                f"{self.data_parallel_size}, or a profile with a scale_out section")
            if self.data_parallel_size % local:
                raise UserError(f"--data-parallel-size-local: {local} must divide --data-parallel-size "
                                f"({self.data_parallel_size}): the same number of ranks on every node; allowed: a "
                                "divisor")
        return ParallelLayout(self.data_parallel_size, tensor_parallel_size, local, per_node,
                              self.enable_expert_parallel)

    def _pipeline_layout(self, hw: HardwareProfile, tp: int, per_node: int) -> ParallelLayout:
        """TP x PP GPUs on as few nodes as hold them, checked as vLLM's `--nnodes` launch checks them
        (vllm/engine/arg_utils.py `create_engine_config`: the world size divisible by the nodes), and no TP group
        split between two nodes (tensor parallelism across nodes is not modelled)."""
        pp = self.pipeline_parallel_size
        if hw.kind == "cpu":
            raise UserError(f"--pipeline-parallel-size (-pp): {hw.id} is a CPU profile, which models one device; "
                            "allowed: 1")
        world = tp * pp
        nodes = math.ceil(world / per_node)
        if nodes > 1:
            if hw.scale_out is None:
                raise UserError(f"--pipeline-parallel-size (-pp): TP {tp} x PP {pp} = {world} GPUs exceed one node "
                                f"of {hw.id} ({per_node} GPUs), and the profile describes no network between nodes "
                                f"(scale_out:); allowed: TP x PP <= {per_node}, or a profile with a scale_out section")
            if world % nodes or (world // nodes) % tp:
                raise UserError(f"--pipeline-parallel-size (-pp): TP {tp} x PP {pp} = {world} GPUs on {nodes} nodes "
                                f"of {per_node} GPUs split a TP group between two nodes (vLLM --nnodes {nodes}: "
                                f"{world / nodes:g} ranks per node); allowed: TP x PP a multiple of the nodes' GPUs, "
                                "or within one node")
        return ParallelLayout(1, tp, 1, per_node, False, pp)
