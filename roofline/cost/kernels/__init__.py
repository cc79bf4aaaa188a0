"""The kernels vLLM runs, one module per operator family (the formulas are shared across GPU generations; what
differs per generation is tables and flags):

    gemm.py               dense GEMMs (cuBLAS 16-bit, CUTLASS 8-bit), activation quantization, fp32 SIMT
    gemm_block_scaled.py  DeepGEMM fp8 (SM90 / SM100 layouts), CuTe-DSL NVFP4
    attention.py          flash-attention work units per family; prefill and decode time
    moe.py                fused MoE: Triton / CUTLASS grouped GEMMs, TRT-LLM-gen MoE, Marlin
    collectives.py        all-reduce and all-gather per family
    mla.py                multi-head latent attention (DeepSeek-V3 family): its records and its two kernels
"""

from __future__ import annotations

from roofline.cost.kernels.collectives import all_reduce_algorithms
from roofline.cost.kernels.gemm import gemm_kernels
from roofline.cost.kernels.moe import TRTLLM_MOE_FAMILIES

# EfficiencyParams fields only the NCCL ring reads (a family whose all-reduce never runs it does not fit them).
NCCL_PARAMS = ("nccl_bus_efficiency", "nccl_step_s")


def unused_efficiency_params(family: str | None) -> frozenset[str]:
    """EfficiencyParams fields that the kernels of `family` never read (not fitted, stay at their defaults)."""
    algorithms = all_reduce_algorithms(family)
    unused = set() if algorithms.runs_nccl else set(NCCL_PARAMS)
    if algorithms.custom_max_devices <= 2:  # the custom all-reduce on 2 GPUs only: its one-stage kernel only
        unused.add("collective_bus_efficiency")
    kernels = gemm_kernels(family)
    if not kernels.ctas_8bit and not kernels.ctas_16bit:  # no warp tiles described: the tiles run at full rate
        unused.add("gemm_warp_step_overhead_mma")
    if not kernels.power_limited:
        unused.add("gemm_sustained_sm_fraction")
    if family not in TRTLLM_MOE_FAMILIES:
        unused.add("moe_trtllm_wide_tile_bandwidth_factor")
    return frozenset(unused)
