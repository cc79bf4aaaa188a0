"""The kernels vLLM runs, one module per operator family (the formulas are shared across GPU generations; what
differs per generation is tables and flags, one `KernelFamily` record each):

    gemm.py               dense GEMMs (cuBLAS 16-bit, CUTLASS 8-bit), activation quantization, fp32 SIMT
    gemm_block_scaled.py  DeepGEMM fp8 (SM90 / SM100 layouts), CuTe-DSL NVFP4
    gemm_weight_only.py   weight-only (mixed-input) GEMMs: Marlin, Machete
    attention.py          flash-attention work units per family; prefill and decode time
    moe.py                fused MoE: Triton / CUTLASS grouped GEMMs, TRT-LLM-gen MoE, Marlin
    collectives.py        all-reduce and all-gather per family
    mla.py                multi-head latent attention (DeepSeek-V3 family): its records and its two kernels

A hardware profile's `family:` id (its family file, `hardware_profiles/families/<id>.yaml`, holds the efficiency and
executor parameters) selects its record in `KERNEL_FAMILIES`; a profile without a family runs `DEFAULT_FAMILY`.
Adding a kernel family is one record here plus its family file.
"""

from __future__ import annotations

from dataclasses import dataclass

from roofline.cost.hardware import HardwareProfile
from roofline.cost.kernels.attention import FA2_SPLITKV_KERNELS, FA3_KERNELS, TRTLLM_GEN_KERNELS, AttentionKernels
from roofline.cost.kernels.collectives import (
    CUSTOM_ALL_REDUCE,
    HOPPER_ALL_REDUCE,
    PCIE_ALL_REDUCE,
    AllReduceAlgorithms,
)
from roofline.cost.kernels.gemm import (
    SM89_GEMM_KERNELS,
    SM90_GEMM_KERNELS,
    SM100_GEMM_KERNELS,
    GemmKernels,
    sm_facts,
)
from roofline.cost.kernels.gemm_block_scaled import DEEPGEMM_SM90, DEEPGEMM_SM100, BlockScaledGemmKernels
from roofline.cost.kernels.gemm_weight_only import MARLIN_EVERYWHERE, SM90_WEIGHT_ONLY, WeightOnlyKernels
from roofline.cost.kernels.mla_backends import ADA_MLA, BLACKWELL_MLA, HOPPER_MLA, MlaBackend
from roofline.cost.kernels.moe import TRITON_MOE, TRTLLM_GEN_MOE, MoeKernels
from roofline.cost.params import stage_fields
from roofline.errors import UserError

# EfficiencyParams fields only the NCCL ring reads (a family whose all-reduce never runs it does not fit them).
NCCL_PARAMS = ("nccl_bus_efficiency", "nccl_step_s")


@dataclass(frozen=True)
class KernelFamily:
    """Which kernels vLLM runs on one GPU generation, and which efficiency parameters they read.

    `gemm`: dense linear layers (16-bit cuBLAS, 8-bit CUTLASS); `block_fp8_gemm`: block-scaled fp8 linear layers
    (None: described as the per-tensor fp8 path at gemm_fp8_block_factor, `roofline.cost.op_time.linear_time_s`);
    `weight_only`: the mixed-input kernel of weight-only linear layers per scheme (Marlin, Machete); `mla`: the
    multi-head latent attention backends with a bf16 and with an fp8 KV cache (None: MLA not modelled there);
    `attention`, `moe`, `all_reduce`: as named. `fitted_elsewhere`: efficiency parameters the family's
    operator-table fit leaves at the family profile's values because another fit gives them, and `fitted_why` says
    which (`roofline.calibration.calibrate.stage_params`)."""

    id: str
    gemm: GemmKernels
    attention: AttentionKernels
    moe: MoeKernels
    all_reduce: AllReduceAlgorithms
    block_fp8_gemm: BlockScaledGemmKernels | None = None
    weight_only: WeightOnlyKernels = MARLIN_EVERYWHERE
    mla: tuple[MlaBackend, MlaBackend] | None = None
    fitted_elsewhere: tuple[str, ...] = ()
    fitted_why: str = ""

    def unused_params(self) -> frozenset[str]:
        """EfficiencyParams fields that the family's kernels never read (not fitted, stay at their defaults)."""
        algorithms = self.all_reduce
        unused = set() if algorithms.runs_nccl else set(NCCL_PARAMS)
        if algorithms.custom_max_devices <= 2:  # the custom all-reduce on 2 GPUs only: its one-stage kernel only
            unused.add("collective_bus_efficiency")
        if not self.gemm.ctas_8bit and not self.gemm.ctas_16bit:  # no warp tiles described: tiles run at full rate
            unused.add("gemm_warp_step_overhead_mma")
        if not self.gemm.power_limited:
            unused.add("gemm_sustained_sm_fraction")
        if not self.moe.trtllm_gen:
            unused.add("moe_trtllm_wide_tile_bandwidth_factor")
        if self.moe.fp8_block_triton:  # `--moe-backend triton` runs the family's own block-fp8 fit
            unused.update(("moe_triton_fp8_block_gemm_factor", "moe_triton_fp8_block_fixed_s",
                           "moe_triton_fp8_block_bandwidth_factor"))
        return frozenset(unused)

    def check_profile(self, hw: HardwareProfile) -> None:
        """A UserError now, not mid-simulation, where `hw` lacks an `architecture` fact the family's kernels read
        (those of W8A8 input quantization and DeepGEMM's SM90 layout only when such a layer is timed)."""
        sm_facts(hw, self.gemm)


# The bf16 and per-tensor fp8 fused MoE of Hopper (Triton, FlashInfer CUTLASS) and Blackwell (FlashInfer TRT-LLM) are
# fitted jointly over the family's GPUs (stage `moe_joint`, `roofline.calibration.moe_fits.fit_joint`, run by
# `roofline calibrate --op-tables --family F`) on the tables' TP-sliced (narrow) experts too, which the MoE stage's
# rows (TP = 1) lack; Blackwell's TRT-LLM wide-tile factor (stage `moe_wide_tile`) likewise.
_JOINT_MOE = stage_fields("moe_joint")


def _joint_moe_why(family: str, chips: str) -> str:
    return (f"the family profile's value, fitted jointly over {chips} on the MoE tables' TP-sliced experts too "
            f"(roofline calibrate --op-tables --family {family}); the MoE stage's rows cannot separate it")


# A profile without a family (datasheet only): cuBLAS's SM90 tables, FA3, the Triton MoE, the custom all-reduce.
DEFAULT_FAMILY = KernelFamily(id="default", gemm=SM90_GEMM_KERNELS, attention=FA3_KERNELS, moe=TRITON_MOE,
                              all_reduce=CUSTOM_ALL_REDUCE)
# Ampere (A100, A10G): described with Hopper's tables (FA2 with FA3's tiles, cuBLAS's SM90 tiles); no DeepGEMM.
AMPERE = KernelFamily(id="ampere", gemm=SM90_GEMM_KERNELS, attention=FA3_KERNELS, moe=TRITON_MOE,
                      all_reduce=CUSTOM_ALL_REDUCE)
# Ada (L40S, L4, RTX 4090): cuBLAS's SM80 kernels and CUTLASS 2.x SM89 fp8, FA2's split-KV kernel, PCIe only.
ADA = KernelFamily(id="ada", gemm=SM89_GEMM_KERNELS, attention=FA2_SPLITKV_KERNELS, moe=TRITON_MOE,
                   all_reduce=PCIE_ALL_REDUCE, mla=ADA_MLA)
HOPPER = KernelFamily(id="hopper", gemm=SM90_GEMM_KERNELS, attention=FA3_KERNELS, moe=TRITON_MOE,
                      all_reduce=HOPPER_ALL_REDUCE, block_fp8_gemm=DEEPGEMM_SM90, weight_only=SM90_WEIGHT_ONLY,
                      mla=HOPPER_MLA,
                      fitted_elsewhere=_JOINT_MOE,
                      fitted_why=_joint_moe_why("hopper", "H100 and H200"))
BLACKWELL = KernelFamily(id="blackwell", gemm=SM100_GEMM_KERNELS, attention=TRTLLM_GEN_KERNELS, moe=TRTLLM_GEN_MOE,
                         all_reduce=CUSTOM_ALL_REDUCE, block_fp8_gemm=DEEPGEMM_SM100, mla=BLACKWELL_MLA,
                         fitted_elsewhere=_JOINT_MOE + stage_fields("moe_wide_tile"),
                         fitted_why=_joint_moe_why("blackwell", "B200, GB200 and B300"))
# Family id (`HardwareProfile.family`) -> its record.
KERNEL_FAMILIES: dict[str, KernelFamily] = {f.id: f for f in (AMPERE, ADA, HOPPER, BLACKWELL)}


def kernel_family(family: str | None) -> KernelFamily:
    """The record of a profile's family id (`HardwareProfile.family`); `DEFAULT_FAMILY` for None. A family file
    without a record is a UserError naming the known ones."""
    if family is None:
        return DEFAULT_FAMILY
    record = KERNEL_FAMILIES.get(family)
    if record is None:
        raise UserError(f"family: {family!r} has no kernel record (roofline.cost.kernels.KERNEL_FAMILIES); known: "
                        f"{', '.join(KERNEL_FAMILIES)}")
    return record
