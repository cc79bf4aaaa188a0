"""One operator record -> seconds: the dispatch by record kind (and, for a linear layer, by weight format) to
the kernel formulas of `roofline.cost.kernels`; on a CPU profile the engine's own executor (`roofline.cost.cpu`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from roofline.cost.cpu import CPU_ENGINES, DEFAULT_CPU_ENGINE
from roofline.cost.cpu import engine as cpu_engine
from roofline.cost.hardware import HardwareProfile
from roofline.cost.kernels import kernel_family
from roofline.cost.kernels.attention import attention_decode_time_s, attention_prefill_time_s
from roofline.cost.kernels.collectives import all_gather_time_s, all_reduce_time_s
from roofline.cost.kernels.gemm import act_quant_time_s, gemm_time_s, simt_gemm_time_s, streaming_act_quant_time_s
from roofline.cost.kernels.gemm_block_scaled import cutedsl_fp4_gemm_time_s, fp4_act_quant_time_s
from roofline.cost.kernels.gemm_weight_only import weight_only_time_s
from roofline.cost.kernels.mla import MLA_OP_KINDS, mla_op_time_s
from roofline.cost.kernels.moe import DEEPGEMM_PADDED_MOE_KERNELS, moe_time_s
from roofline.cost.ops import OpRecord
from roofline.cost.quant import DEEPGEMM_FP8_BLOCK_PADDED, EIGHT_BIT_DTYPES, FP8_GROUP_SCALE_BYTES, QuantConfig
from roofline.cost.roofline_math import _bandwidth, _max, memory_op_time_s


@dataclass(frozen=True)
class OpCost:
    """An operator record with its time: the fields of `OpRecord` plus `time_s`, `bound` and `num_kernels`."""

    name: str
    kind: str
    count: int
    flops: float
    weight_bytes: float
    act_bytes: float
    kv_read_bytes: float
    kv_write_bytes: float
    comm_bytes: float
    num_kernels: int
    time_s: float
    bound: str  # compute | memory | communication | latency (fixed costs dominate)


def gemm_formula(hw: HardwareProfile) -> Callable[..., Any]:
    """The GEMM formula of `hw` (`gemm_time_s`'s arguments): a GPU's tiles and waves, or on a CPU (`kind: cpu`) this
    project's engine's GEMM (`roofline.cost.cpu.engine.gemm_time_s`: no tiles or waves; a GPU kernel's tile
    arguments do not apply there). The fused MoE of a CPU engine that leaves MoE to these formulas (vLLM-CPU) and
    predict-ops on a CPU profile take it."""
    return _cpu_gemm_time_s if hw.kind == "cpu" else gemm_time_s


def _cpu_gemm_time_s(hw: HardwareProfile, m: Any, n: Any, k: Any, dtype: str, weight_bytes_per_param: float,
                     in_bytes: float, out_bytes: float, groups: Any = 1, eff_scale: float = 1.0,
                     **gpu_kernel_args: Any) -> Any:
    return cpu_engine.gemm_time_s(hw, m, n, k, dtype, weight_bytes_per_param, in_bytes, out_bytes, groups, eff_scale)


def linear_time_s(hw: HardwareProfile, m: Any, n: Any, k: Any, dtype: str, weight_bytes_per_param: float,
                  act_bytes: float, scheme: str = "none") -> Any:
    """A linear layer as vLLM runs it: a 16-bit GEMM; or, for W8A8 (`dtype` fp8/int8), the input quantized by one
    kernel (`act_quant_time_s`) and the CUTLASS 8-bit GEMM. Block-scaled fp8 (`scheme` "fp8-block": vLLM's
    DeepGemmFp8BlockScaledMMKernel, 1x128 activation groups and 128x128 weight blocks, fp32 scales) quantizes its
    input in one streaming pass (`streaming_act_quant_time_s` at act_group_quant_memory_efficiency) and runs the
    8-bit GEMM at gemm_fp8_block_factor of its compute efficiency with gemm_fp8_block_tile_fixed_k per tile where
    the family runs DeepGEMM (`KernelFamily.block_fp8_gemm`: its SM90 heuristic on Hopper, `deepgemm_sm90_gemm_time_s`,
    its SM100 heuristic with swap-AB on Blackwell, `deepgemm_sm100_gemm_time_s`); elsewhere it is described as the
    per-tensor path at gemm_fp8_block_factor. NVFP4
    W4A4 (`dtype` fp4: E2M1 values with an E4M3 scale per 16, 0.5625 bytes per element) runs FlashInfer's CuTe-DSL
    kernel (`cutedsl_fp4_gemm_time_s`) after `fp4_act_quant_time_s`. A 16-bit GEMM whose weights are narrower than
    its activations is weight-only (AWQ / GPTQ int4, fp8 or NVFP4 on a GPU without their tensor cores): the mixed-input
    kernel vLLM picks for `scheme` on the family (`KernelFamily.weight_only`: Marlin or Machete,
    `roofline.cost.kernels.gemm_weight_only`)."""
    block_fp8 = kernel_family(hw.family).block_fp8_gemm if scheme == "fp8-block" else None
    if dtype in EIGHT_BIT_DTYPES and block_fp8 is not None:
        quant = streaming_act_quant_time_s(hw, m, k, act_bytes, 1.0 + FP8_GROUP_SCALE_BYTES,
                                           hw.efficiency.act_group_quant_memory_efficiency)
        return block_fp8.time_s(hw, m, n, k, weight_bytes_per_param, 1.0 + FP8_GROUP_SCALE_BYTES, act_bytes) + quant
    if dtype in EIGHT_BIT_DTYPES:
        scale = hw.efficiency.gemm_fp8_block_factor if scheme == "fp8-block" else 1.0
        return gemm_time_s(hw, m, n, k, dtype, weight_bytes_per_param, 1.0, act_bytes, eff_scale=scale) \
            + act_quant_time_s(hw, m, k, act_bytes)
    if dtype == "fp4":
        return cutedsl_fp4_gemm_time_s(hw, m, n, k, weight_bytes_per_param, act_bytes) \
            + fp4_act_quant_time_s(hw, m, k, act_bytes)
    if weight_bytes_per_param < act_bytes:
        return weight_only_time_s(hw, kernel_family(hw.family).weight_only, scheme, m, n, k, dtype,
                                  weight_bytes_per_param, act_bytes)
    return gemm_time_s(hw, m, n, k, dtype, weight_bytes_per_param, act_bytes, act_bytes)


# DeepGEMM's SM90 fp8 GEMM (`fp8_gemm_nt` with fp32 scales and 128x128 weight blocks: the 1D2D kernel, bf16 output)
# picks its layout on the host, csrc/jit_kernels/heuristics/sm90.hpp `SM90ArchSpec` (DeepGEMM 891d57b, the commit
# vLLM's tools/install_deepgemm.sh pinned for 0.24): block_m in (64, 128, 16 if m <= 16, 32 if m <= 32, 256), block_n
# 16..192 in steps of 16 (above 128 only 144, 160, 192: the 1D2D unroll rule), not both above 128, clusters 1x1, 1x2
# and 2x1 (multicast only with more than one wave), at least 3 pipeline stages in 232448 bytes of shared memory (4
# for tiles under 128x192); of these the one with the fewest modelled L1/L2 cycles / wave efficiency


def _as_run(hw: HardwareProfile, op: OpRecord, quant: QuantConfig) -> OpRecord:
    """`op` in the dtype its kernel computes in: an fp32 GEMM at vLLM's float32 matmul precision
    (`QuantConfig.fp32_gemm_dtype`: true fp32 by default, TF32 or bf16 as VLLM_FLOAT32_MATMUL_PRECISION says), and
    a dtype the device lacks replaced by the activation dtype."""
    if op.kind == "gemm" and op.dtype == "fp32" and quant.fp32_gemm_dtype != "fp32":
        op = replace(op, dtype=quant.fp32_gemm_dtype)
    if op.dtype not in hw.supported_dtypes:
        op = replace(op, dtype=quant.act_dtype)
    return op


def op_time_s(hw: HardwareProfile, op: OpRecord, quant: QuantConfig, kernels_per_elementwise: int,
              cpu_engine: str = DEFAULT_CPU_ENGINE) -> tuple[Any, int]:
    """Seconds of one record (all its `count` instances) and the kernels of one instance. The record's shape
    may hold arrays (`StepCostModel` tabulates the token-count operators for many counts at once). On a CPU,
    `cpu_engine` (one of `CPU_ENGINES`) says whose execution is described."""
    if hw.kind == "cpu" and op.kind in CPU_ENGINES[cpu_engine].handled_kinds:  # the engine's ops on a CPU
        return CPU_ENGINES[cpu_engine].op_time_s(hw, op, quant)
    c = op.count
    op = _as_run(hw, op, quant)
    kernels = 1
    if op.kind == "gemm" and op.dtype == "fp32":  # true fp32: no tensor cores
        m, n, k, _ = op.shape
        t = simt_gemm_time_s(hw, m, n, k, op.weight_bytes / (c * n * k))
    elif op.kind == "gemm":
        m, n, k, _ = op.shape
        w_param = op.weight_bytes / (c * n * k)
        t = linear_time_s(hw, m, n, k, op.dtype, w_param, quant.act_bytes, quant.quantization)
        if op.dtype in EIGHT_BIT_DTYPES or op.dtype == "fp4":
            kernels = 2
    elif op.kind == "attention_prefill":
        pairs, moved, tiles, head_dim = op.shape
        t = attention_prefill_time_s(hw, pairs, moved, tiles, head_dim, op.dtype, quant.kv_dtype == "fp8")
    elif op.kind == "attention_decode":
        flops, moved, units, key_bytes = op.shape
        t = attention_decode_time_s(hw, flops, moved, units, key_bytes, op.dtype, quant.kv_dtype == "fp8")
    elif op.kind == "moe":
        tpe, touched, hidden, inter, num_experts, num_tokens = op.shape
        w_expert = op.weight_bytes / (c * _max(touched, 1e-30) * 3 * hidden * inter)
        t = moe_time_s(hw, tpe, touched, hidden, inter, op.dtype, w_expert, quant.act_bytes, quant.expert_kernel,
                       num_experts=num_experts, num_tokens=num_tokens, gemm=gemm_formula(hw),
                       marlin_int4=quant.experts[0] == "w4a16-int4")
        kernels = DEEPGEMM_PADDED_MOE_KERNELS if quant.expert_kernel == DEEPGEMM_FP8_BLOCK_PADDED \
            else 6  # topk softmax, align/sort, gate_up, act, down, combine (vLLM fused_moe)
    elif op.kind in MLA_OP_KINDS:
        t = mla_op_time_s(hw, op, quant.kv_dtype == "fp8")
    elif op.kind == "all_reduce":
        t = all_reduce_time_s(hw, *op.shape)
    elif op.kind == "all_gather":
        t = all_gather_time_s(hw, *op.shape)
    elif op.kind == "sampling":
        kernels = 3
        t = memory_op_time_s(hw, _moved_bytes(op) / c, kernels)
    else:
        assert op.kind == "elementwise", op.kind
        kernels = kernels_per_elementwise
        t = memory_op_time_s(hw, _moved_bytes(op) / c, kernels)
    factor = hw.op_time_factors.of(op.kind)  # a sampled cost model's (`roofline.cost.uncertainty`); 1 as fitted
    return (c * t if factor == 1.0 else c * t * factor), kernels


def _moved_bytes(op: OpRecord) -> Any:
    return op.weight_bytes + op.act_bytes + op.kv_read_bytes + op.kv_write_bytes


def op_cost(hw: HardwareProfile, op: OpRecord, quant: QuantConfig, kernels_per_elementwise: int,
            cpu_engine: str = DEFAULT_CPU_ENGINE) -> OpCost:
    """Time of one record (all its `count` instances) and what bounds it."""
    e = hw.efficiency
    time_s, kernels = op_time_s(hw, op, quant, kernels_per_elementwise, cpu_engine)
    time_s = float(time_s)
    dtype = _as_run(hw, op, quant).dtype
    bw = _bandwidth(hw)
    moved = _moved_bytes(op)
    if op.kind.startswith("attention"):
        compute_s = op.flops / (hw.peak_flops(dtype) * e.attention_compute_efficiency)
    else:
        compute_s = op.flops / hw.peak_flops(dtype) / \
            (e.gemm_fp8_compute_efficiency if dtype in EIGHT_BIT_DTYPES else e.gemm_compute_efficiency)
    memory_s = moved / (bw * (e.attention_memory_efficiency if op.kind == "attention_decode" else e.memory_efficiency))
    return OpCost(name=op.name, kind=op.kind, count=op.count, flops=op.flops, weight_bytes=op.weight_bytes,
                  act_bytes=op.act_bytes, kv_read_bytes=op.kv_read_bytes, kv_write_bytes=op.kv_write_bytes,
                  comm_bytes=op.comm_bytes, num_kernels=op.count * kernels, time_s=time_s,
                  bound=_bound(op.kind, compute_s, memory_s, time_s))


def _bound(kind: str, compute_s: float, memory_s: float, time_s: float) -> str:
    if kind in ("all_reduce", "all_gather"):
        return "communication"
    if max(compute_s, memory_s) < 0.5 * time_s:
        return "latency"
    return "compute" if compute_s >= memory_s else "memory"

