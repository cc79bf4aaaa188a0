"""Collectives: all-reduce and all-gather over the chip's link, as vLLM runs them per family.

All-reduce of B bytes over n GPUs (vLLM custom all-reduce / NCCL): the faster of one-shot
(alpha + (n-1)*B/bw: every rank reads every peer's buffer) and two-shot / ring (2*alpha + 2*(n-1)/n*B/bw:
reduce-scatter then all-gather); bw = per-direction link bandwidth * collective_bus_efficiency,
alpha = interconnect latency * collective_latency_scale. All-gather: alpha + (n-1)/n*B/bw. On PCIe-only
families (`AllReduceAlgorithms`: Ada) vLLM's custom all-reduce serves 2 GPUs only; more run NCCL's ring with
its own step latency and bandwidth (nccl_step_s, nccl_bus_efficiency).
(Thakur, Rabenseifner, Gropp, "Optimization of collective communication operations in MPICH", 2005.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

import roofline.cost.kernels as kernel_families  # (the records hold this module's tables: bound at call time)
from roofline.cost.hardware import HardwareProfile
from roofline.cost.roofline_math import _where, memory_op_time_s
from roofline.errors import UserError


def _link(hw: HardwareProfile, num_devices: Any) -> tuple[float, float]:
    """(bandwidth per direction, alpha) of the link a collective over `num_devices` uses, the bandwidth at the
    two-stage (bus) efficiency."""
    e = hw.efficiency
    return _link_bandwidth(hw) * e.collective_bus_efficiency, _link_latency_s(hw) * e.collective_latency_scale


def _link_bandwidth(hw: HardwareProfile) -> float:
    ic = hw.interconnect
    if ic is not None:
        return ic.bandwidth_bytes_per_s_per_direction
    if hw.pcie_bandwidth_bytes_per_s_per_direction is None:
        raise UserError(f"hardware profile {hw.id}: collectives go over PCIe (interconnect: null), whose "
                        "pcie_bandwidth_gb_per_s_per_direction is null; give it, with a source")
    return hw.pcie_bandwidth_bytes_per_s_per_direction


def _link_latency_s(hw: HardwareProfile) -> float:
    if hw.interconnect is not None:
        return hw.interconnect.latency_s
    if hw.pcie_latency_s is None:
        raise UserError(f"hardware profile {hw.id}: collectives go over PCIe (interconnect: null); add "
                        "pcie_latency_us (a latency-bound collective's time over PCIe), with a source")
    return hw.pcie_latency_s


@dataclass(frozen=True)
class AllReduceAlgorithms:
    """Which all-reduce vLLM runs on a family's systems, by the number of GPUs and the message size
    (`all_reduce_time_s`).

    Up to `custom_max_devices` GPUs, and up to `custom_max_bytes` for that number of GPUs where the family lists
    them: vLLM's custom all-reduce (its one- or two-stage kernel over the chip's link, collective_*). Otherwise
    NCCL (pynccl) or, on NVLink systems, vLLM's symmetric-memory all-reduce, both timed as NCCL's ring: 2(n-1) steps
    of nccl_step_s each, and every rank's 2(n-1)/n of the message at nccl_bus_efficiency of the per-direction link
    (NVLink where the chip has it, else PCIe) per rank, or, with `ring_shares_link`, all n ranks' traffic (2(n-1)
    messages) through one shared link at that rate."""

    name: str
    custom_max_devices: float = math.inf
    ring_shares_link: bool = False
    custom_max_bytes: tuple[tuple[int, float], ...] = ()  # (GPUs, largest message the custom all-reduce takes)

    @property
    def runs_nccl(self) -> bool:
        return math.isfinite(self.custom_max_devices) or bool(self.custom_max_bytes)

    def custom_limit_bytes(self, num_devices: Any) -> Any:
        """The largest message the custom all-reduce takes over `num_devices` GPUs (a count or an array): the
        listed size, 0 for a count the list lacks (vLLM's custom all-reduce serves 2, 4, 6 and 8 GPUs)."""
        limits = dict(self.custom_max_bytes)
        if np.ndim(num_devices) == 0:
            return limits.get(int(num_devices), 0.0)
        return np.array([limits.get(int(n), 0.0) for n in np.ravel(num_devices)]).reshape(np.shape(num_devices))


# NVLink systems (Blackwell, A100 SXM): vLLM's custom all-reduce for every TP size and message. (vLLM caps it on
# SM100 too, at 2 MiB for 2 and 4 GPUs and 1 MiB for 8, `CUSTOM_ALL_REDUCE_MAX_SIZES["10.0"]`; above, its
# symmetric-memory all-reduce, whose time differs by GPU count (B200 tables: 2 GPUs slower per byte from 2 to 8
# MiB than NCCL above 8 MiB, 8 GPUs faster): one ring form beyond the cap fitted worse than the custom form at all
# sizes (BENCHMARKS.md, GPU profiles section, "Hopper: the custom all-reduce only up to vLLM's size limits").)
CUSTOM_ALL_REDUCE = AllReduceAlgorithms(name="custom")
# Hopper: vLLM's custom all-reduce takes at most 64 MiB on 2 GPUs, 32 MiB on 4, 512 KiB on 6 and 256 KiB on 8
# (vllm/distributed/device_communicators/all_reduce_utils.py `CUSTOM_ALL_REDUCE_MAX_SIZES["9.0"]`, applied where
# symmetric memory is available, VLLM_ALLREDUCE_USE_SYMM_MEM, on by default); larger messages go to its
# symmetric-memory all-reduce (up to 64 MiB) or NCCL. aiconfigurator's H100 / H200 tables change rate at those
# sizes (2 GPUs: 218 GB/s at 64 MiB, 286 at 128; 4 GPUs above 32 MiB; 8 GPUs above 256 KiB).
HOPPER_ALL_REDUCE = AllReduceAlgorithms(
    name="custom-up-to-vllm-size-limit-else-symmetric-memory-or-nccl",
    custom_max_bytes=((2, 64 * 2.0**20), (4, 32 * 2.0**20), (6, 512 * 1024.0), (8, 256 * 1024.0)))
# PCIe-only systems (every Ada chip: L40S, L4, RTX 4090 have no NVLink): vLLM enables its custom all-reduce on
# PCIe-only GPUs only for a world size of 2 (vllm/distributed/device_communicators/custom_all_reduce.py: "Custom
# allreduce is disabled because it's not supported on more than two PCIe-only GPUs", `world_size > 2 and not
# full_nvlink`), where it runs the one-stage kernel (csrc/custom_all_reduce.cuh: `world_size_ == 2` ->
# cross_device_reduce_1stage: each rank reads its peer's buffer over P2P); otherwise
# tensor_model_parallel_all_reduce falls back to pynccl (NCCL's ring). aiconfigurator's collector times exactly
# that call (collector/collect_all_reduce.py, `tensor_model_parallel_all_reduce` under `graph_capture`). The
# L40S tables show the two regimes: 2 GPUs 5.3 us small, 19 GB/s large; 4 and 8 GPUs 13 / 25 us small (the
# ring's 2(n-1) steps: 1.4 us each, fitted) and, at large messages, 2(n-1) messages' worth of bytes moving at one
# rate, 14.9 GB/s at 4 GPUs and 15.6 GB/s at 8 (`ring_shares_link`: the ranks' ring traffic crosses one shared
# PCIe path of the host; a per-rank link would make 8 GPUs 1.17x slower than 4, the tables show 2.2x).
PCIE_ALL_REDUCE = AllReduceAlgorithms(name="custom-2-gpus-else-nccl-ring", custom_max_devices=2,
                                      ring_shares_link=True)
def all_reduce_time_s(hw: HardwareProfile, message_bytes: Any, num_devices: Any, copy_bytes: Any = 0.0) -> Any:
    """All-reduce of `message_bytes` over `num_devices` GPUs as the family's `AllReduceAlgorithms` run it, in a CUDA
    graph. Where `copy_bytes` > 0 (a step without a CUDA graph, `roofline.cost.ops.all_reduce_record`), vLLM's custom
    all-reduce first copies its input into its registered buffer: one streaming copy kernel moving that many bytes;
    so does its symmetric-memory all-reduce and, in the tables' eager rows, the NVLink systems' NCCL path (every
    eager row of at least 16 MiB is one such copy slower than its graph row); not NCCL's ring over PCIe (the L40S
    eager rows of 4 and 8 GPUs equal their graph rows)."""
    bw, alpha = _link(hw, num_devices)
    n = num_devices
    e = hw.efficiency
    one_stage = alpha + (n - 1) * message_bytes / (_link_bandwidth(hw) * e.collective_one_stage_bus_efficiency)
    two_stage = 2 * alpha + 2 * (n - 1) / n * message_bytes / bw
    # The kernel vLLM's custom all-reduce launches (csrc/custom_all_reduce.cuh, REDUCE_CASE): one-stage on 2 GPUs,
    # and on fully connected ones below 512 KiB (up to 4 GPUs) or 256 KiB (up to 8); two-stage otherwise. (Beyond
    # 8 GPUs vLLM has no custom all-reduce; the two-stage form stands in for NCCL there where the family lists no
    # size limits.)
    small = ((n <= 4) & (message_bytes < 512 * 1024)) | ((n <= 8) & (message_bytes < 256 * 1024))
    custom = _where((n == 2) | small, one_stage, two_stage) + e.kernel_fixed_s
    copy: Any = 0.0
    if np.any(copy_bytes):
        copy = np.where(copy_bytes > 0, memory_op_time_s(hw, copy_bytes, 1), 0.0)
        copy = float(copy) if np.ndim(copy) == 0 else copy
        custom = custom + copy
    algorithms = kernel_families.kernel_family(hw.family).all_reduce
    if not algorithms.runs_nccl:
        return custom
    ring_bw = _link_bandwidth(hw) * e.nccl_bus_efficiency
    ring_bytes = 2 * (n - 1) * message_bytes if algorithms.ring_shares_link else 2 * (n - 1) / n * message_bytes
    ring = 2 * (n - 1) * e.nccl_step_s + ring_bytes / ring_bw + e.kernel_fixed_s
    if algorithms.custom_max_bytes:
        # vLLM takes the custom kernel strictly below the limit (custom_all_reduce.py should_custom_ar: inp_size <
        # max_size), but the H100 / H200 tables time a message of exactly the limit as the custom form (2 GPUs,
        # 64 MiB: 306.7 us measured, custom form 303.7, ring 196.5; 4 GPUs, 32 MiB: 191.2 / 194.5 / 149.8): the
        # symmetric-memory all-reduce that takes it runs like the custom kernel there, so the limit stays inclusive.
        return _where(message_bytes <= algorithms.custom_limit_bytes(n), custom, ring + copy)
    return _where(n <= algorithms.custom_max_devices, custom, ring)


def all_gather_time_s(hw: HardwareProfile, message_bytes: Any, num_devices: Any) -> Any:
    bw, alpha = _link(hw, num_devices)
    return alpha + (num_devices - 1) / num_devices * message_bytes / bw + hw.efficiency.kernel_fixed_s

