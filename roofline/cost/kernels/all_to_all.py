"""Expert parallelism's token exchange: the dispatch and combine of one MoE layer over the EP group, as vLLM's
all2all backends run it (`--all2all-backend`, vllm/config/parallel.py `All2AllBackend`).

    a2a_time_s(hw, "deepep_high_throughput", "dispatch", tokens_per_rank, hidden, topk, num_experts, ep_size)
    a2a_time_s(hw, "allgather_reducescatter", "combine", ...)

Backends (vllm/distributed/device_communicators/all2all.py):
  - allgather_reducescatter (vLLM 0.32's default): dispatch is NCCL's all-gather of every rank's tokens (its hidden
    states and routing), combine NCCL's reduce-scatter of the experts' partial outputs back to their ranks; every
    rank moves (n - 1) / n of the gathered buffer: alpha + (n - 1) step + (n - 1) / n * B / (link * efficiency).
  - deepep_high_throughput (DeepEP "normal" kernels, prefill-sized batches): each token is sent once to every
    distinct rank that holds one of its top-k experts; dispatch first exchanges the per-rank counts (a host
    synchronisation: the tables' 250-450 us floor), combine sends the same bytes back.
  - deepep_low_latency (DeepEP LL kernels, decode batches of at most a few hundred tokens per rank): each token is
    sent to each of its top-k experts (no deduplication per rank), in a fixed-size buffer, without host sync.
Per phase: time = fixed + token copies sent off-rank * time per copy + bytes sent off-rank / (per-direction link
bandwidth * efficiency) (across nodes: `_transfer_s`, unmeasured), bytes in the activations' 16-bit width (the
tables' "default" wire format; an fp8 dispatch shows as a higher efficiency).

Distinct ranks a token reaches under uniform routing of `topk` experts out of `num_experts`, placed `E / n` per
rank: n * (1 - C(E - E/n, k) / C(E, k)) (the hypergeometric chance that a rank holds none of the k).
Efficiencies and fixed times: `roofline.cost.params` group "all_to_all", fitted per chip by
`roofline calibrate --op-tables --all-to-all` (roofline.calibration.all_to_all_fit) on aiconfigurator-core's vLLM
`moe_a2a_perf` (DeepEP, EP 8 / 4 on one node) and NCCL `nccl_perf` (all-gather, reduce-scatter, all-to-all) tables.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from roofline.cost.hardware import HardwareProfile
from roofline.cost.kernels.collectives import _link_bandwidth

# vLLM 0.32's --all2all-backend choices (vllm/config/parallel.py All2AllBackend; "pplx" and "naive" were removed
# and fall back to allgather_reducescatter with a warning there) and the ones this module times.
ALL2ALL_BACKENDS = ("naive", "pplx", "deepep_high_throughput", "deepep_low_latency", "deepep_v2",
                    "mori_high_throughput", "mori_low_latency", "nixl_ep", "allgather_reducescatter",
                    "flashinfer_all2allv", "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided")
DEFAULT_ALL2ALL_BACKEND = "allgather_reducescatter"
TIMED_BACKENDS = ("allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency")
# Removed backends vLLM replaces by allgather_reducescatter (ParallelConfig._validate_parallel_config).
REMOVED_BACKENDS = ("naive", "pplx")
PHASES = ("dispatch", "combine")
# The table's backend names (aiconfigurator moe_a2a comm_backend) -> vLLM's.
TABLE_BACKENDS = {"deepep_ht": "deepep_high_throughput", "deepep_ll": "deepep_low_latency"}
ACT_BYTES = 2.0  # 16-bit activations on the wire


def distinct_ranks(topk: Any, num_experts: Any, ep_size: Any) -> Any:
    """Expected number of EP ranks holding at least one of a token's `topk` experts (uniform routing, experts
    placed num_experts / ep_size per rank)."""
    k = np.asarray(topk, dtype=np.float64)
    e = np.asarray(num_experts, dtype=np.float64)
    n = np.asarray(ep_size, dtype=np.float64)
    per_rank = e / n
    # C(E - E/n, k) / C(E, k) = prod_{i<k} (E - E/n - i) / (E - i); k <= 32 in every model served this way.
    none = np.ones(np.broadcast(k, e, n).shape)
    for i in range(int(np.max(k))):
        factor = np.clip((e - per_rank - i) / (e - i), 0.0, 1.0)
        none = none * np.where(i < k, factor, 1.0)
    out = n * (1.0 - none)
    return float(out) if out.ndim == 0 else out


def a2a_bytes(backend: str, tokens_per_rank: Any, hidden: Any, topk: Any, num_experts: Any, ep_size: Any) -> Any:
    """Bytes one rank sends off-rank in one phase of `backend` (dispatch and combine move the same amount)."""
    remote = (ep_size - 1) / ep_size
    return tokens_per_rank * token_copies(backend, topk, num_experts, ep_size) * remote * hidden * ACT_BYTES


def token_copies(backend: str, topk: Any, num_experts: Any, ep_size: Any) -> Any:
    """Copies of each token a rank sends in one phase (to distinct ranks, to experts, or to every rank)."""
    if backend == "deepep_high_throughput":
        return distinct_ranks(topk, num_experts, ep_size)
    if backend == "deepep_low_latency":
        return topk
    return ep_size  # allgather_reducescatter: every rank's tokens reach every rank, once


def _phase_params(hw: HardwareProfile, backend: str, phase: str) -> tuple[float, float, float]:
    """(bus efficiency, fixed s, s per token copy) of `backend`'s `phase`."""
    e = hw.efficiency
    key = {"deepep_high_throughput": "deepep_ht", "deepep_low_latency": "deepep_ll",
           "allgather_reducescatter": "nccl_ag" if phase == "dispatch" else "nccl_rs"}[backend]
    if key.startswith("nccl"):
        return getattr(e, f"{key}_bus_efficiency"), getattr(e, f"{key}_fixed_s"), 0.0
    return (getattr(e, f"{key}_{phase}_bus_efficiency"), getattr(e, f"{key}_{phase}_fixed_s"),
            getattr(e, f"{key}_{phase}_copy_s"))


def a2a_time_s(hw: HardwareProfile, backend: str, phase: str, tokens_per_rank: Any, hidden: Any, topk: Any,
               num_experts: Any, ep_size: Any) -> Any:
    """Seconds of one MoE layer's `phase` ("dispatch" or "combine") over `ep_size` ranks with `backend`, each rank
    holding `tokens_per_rank` tokens (the busiest rank's count where they differ: the exchange waits for it)."""
    assert backend in TIMED_BACKENDS and phase in PHASES, (backend, phase)
    efficiency, fixed, per_copy = _phase_params(hw, backend, phase)
    moved = a2a_bytes(backend, tokens_per_rank, hidden, topk, num_experts, ep_size)
    copies = tokens_per_rank * token_copies(backend, topk, num_experts, ep_size) * (ep_size - 1) / ep_size
    t = fixed + copies * per_copy + _transfer_s(hw, backend, moved, ep_size, efficiency)
    if backend == "allgather_reducescatter":
        t = t + (ep_size - 1) * hw.efficiency.nccl_ag_rs_step_s
    return np.where(np.asarray(ep_size) > 1, t, 0.0) if np.ndim(t) else (t if ep_size > 1 else 0.0)


def _transfer_s(hw: HardwareProfile, backend: str, moved: Any, ep_size: Any, efficiency: float) -> Any:
    """Seconds the bytes one rank sends off-rank take. Within one scale-up domain (`interconnect.max_num_gpus`):
    the link at the phase's efficiency. Across domains (HGX nodes, over the profile's `scale_out` NICs, one per
    GPU): the share bound for other domains, (n - G) / (n - 1) of it, goes over the rank's NIC, the rest over NVLink,
    at once (DeepEP's internode kernels; NCCL's rings, one per NIC, carry the same inter-node bytes per NIC).
    UNMEASURED: no table times an all-to-all across nodes, so the NIC is assumed to reach the phase's fitted
    efficiency."""
    link = _link_bandwidth(hw) * efficiency
    domain = hw.interconnect.max_num_gpus if hw.interconnect is not None else 8
    if np.all(np.asarray(ep_size) <= domain):
        return moved / link
    assert hw.scale_out is not None, f"{hw.id}: an all-to-all across nodes without a scale_out section"
    nic = hw.scale_out.bandwidth_bytes_per_s_per_direction * efficiency
    n = np.asarray(ep_size, dtype=np.float64)
    inter = np.clip((n - domain) / np.maximum(n - 1, 1), 0.0, 1.0)
    across = np.maximum(moved * (1 - inter) / link, moved * inter / nic)
    return np.where(n <= domain, moved / link, across)


def nccl_collective_time_s(hw: HardwareProfile, op: str, message_bytes: Any, num_devices: Any) -> Any:
    """NCCL's all-gather or reduce-scatter of a `message_bytes` buffer (the gathered whole) over `num_devices`
    ranks (the allgather_reducescatter backend's two halves; aiconfigurator's nccl_perf rows)."""
    key = {"all_gather": "nccl_ag", "reduce_scatter": "nccl_rs"}[op]
    e = hw.efficiency
    n = num_devices
    return (getattr(e, f"{key}_fixed_s") + (n - 1) * e.nccl_ag_rs_step_s
            + (n - 1) / n * message_bytes / (_link_bandwidth(hw) * getattr(e, f"{key}_bus_efficiency")))
