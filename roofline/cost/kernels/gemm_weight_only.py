"""Weight-only (mixed-input) linear layers: 4- or 8-bit weights, 16-bit activations and math, the weights dequantized
inside the GEMM's main loop. vLLM runs them with one of two kernels:

- Marlin (IST-DASLab; vLLM csrc/quantization/gptq_marlin and csrc/quantization/fp8/fp8_marlin.cu): mma.sync tensor
  cores (SM80 instructions) on 16-row blocks of the input, weights streamed once with asynchronous copies,
  dequantized to fp16/bf16 in registers between the MMAs, a "striped" partition of the output over the SMs (no wave
  quantization) and its global reduction in the output buffer. Its README states it reaches "essentially ideal"
  speedups: the time of its bytes at the DRAM rate or of its FLOPs at the 16-bit tensor-core rate, whichever is
  longer (its plotting script's `ideal`: 2mk + kn/2 + 2mn + 2 (k/128) n bytes for 4-bit weights in groups of 128).
  `marlin_time_s` is that roofline at the family's fitted 16-bit efficiencies, the rows padded to its 16-row MMA
  blocks, the dequantization overlapped with the MMAs (README: "carefully order dequantization and tensor core
  instructions to ensure that both GPU pipelines are well saturated"), times `marlin_compute_factor`.
- Machete (vLLM csrc/quantization/machete, Neural Magic 2024): CUTLASS 3 wgmma and TMA on Hopper, weights pre-shuffled
  for 128-bit shared-memory loads; "matches FP16 compute-bound performance": described by the family's 16-bit GEMM
  (`roofline.cost.kernels.gemm.gemm_time_s`) at the quantized weight bytes.

Which one vLLM picks (`WeightOnlyKernels`): GPTQ (gptq_marlin) and compressed-tensors WNA16 go through
`choose_mp_linear_kernel` (vllm/model_executor/kernels/linear/mixed_precision/__init__.py: CutlassW4A8, Machete,
AllSpark, Marlin, ... in priority order), where Machete implements them on SM90 only; AWQ (awq_marlin:
`AWQMarlinLinearMethod.apply` -> `apply_awq_marlin_linear`) runs Marlin everywhere; fp8 weights on a GPU without fp8
tensor cores (capability < 8.9: `Fp8LinearMethod.use_marlin`, vllm/model_executor/layers/quantization/fp8.py; the
compressed-tensors `CompressedTensorsW8A16Fp8` scheme) run Marlin's W8A16 kernel; NVFP4 on a GPU without fp4 tensor
cores runs Marlin's FP4 kernel (`ModelOptNvFp4LinearMethod`: marlin fallback).

Unfitted: aiconfigurator-core 0.12.0's vLLM GEMM tables hold bf16, fp8, fp8-block and NVFP4 only (no Marlin,
Machete or int8 rows), so these kernels carry the family's 16-bit fits and `marlin_compute_factor`'s default (1:
Marlin's README); `UNFITTED_NOTE` says so wherever a result depends on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roofline.cost.hardware import HardwareProfile
from roofline.cost.kernels.gemm import gemm_time_s
from roofline.cost.roofline_math import _bandwidth, _ceil, _overlap

MARLIN, MACHETE = "marlin", "machete"
_MARLIN_ROWS = 16  # rows of one mma.sync m16n8k16 block: Marlin pads m to a multiple of it
# Weight-only schemes of `roofline.cost.quant` whose kernel is chosen here (the others' linear layers are not
# weight-only, or are fp8 / NVFP4 weights on a GPU without their tensor cores, which run Marlin).
INT4_SCHEMES = ("awq", "gptq", "w4a16-int4")
UNFITTED_NOTE = ("weight-only GEMM kernels (Marlin, Machete) are unfitted: no operator table times them; they run at "
                 "the family's 16-bit GEMM efficiencies (roofline.cost.kernels.gemm_weight_only)")


@dataclass(frozen=True)
class WeightOnlyKernels:
    """The mixed-input kernel vLLM runs per weight scheme on one GPU family (module docstring): `machete_schemes` on
    Machete, every other weight-only linear layer on Marlin."""

    name: str
    machete_schemes: tuple[str, ...] = ()

    def kernel(self, scheme: str) -> str:
        return MACHETE if scheme in self.machete_schemes else MARLIN


# Ampere, Ada and Blackwell: Marlin for every scheme (Machete is SM90-only: `MacheteLinearKernel.can_implement`).
MARLIN_EVERYWHERE = WeightOnlyKernels(name="marlin")
# Hopper: GPTQ and compressed-tensors WNA16 (symmetric 4-bit, groups of 128) on Machete; AWQ (zero points, its own
# linear method) on Marlin.
SM90_WEIGHT_ONLY = WeightOnlyKernels(name="machete-sm90", machete_schemes=("gptq", "w4a16-int4"))


def marlin_time_s(hw: HardwareProfile, m: Any, n: Any, k: Any, dtype: str, weight_bytes_per_param: float,
                  act_bytes: float) -> Any:
    """Marlin's y (m x n) = x (m x k) @ W (k x n): its FLOPs over ceil(m / 16) 16-row blocks at the 16-bit peak of
    `dtype` times gemm_compute_efficiency x marlin_compute_factor, against its bytes (activations in and out, the
    weights and their scales once) at memory_efficiency of the DRAM bandwidth, overlapped as every GEMM
    (`_overlap`), plus kernel_fixed_s."""
    e = hw.efficiency
    rows = _ceil(m / _MARLIN_ROWS) * _MARLIN_ROWS
    tc = 2.0 * rows * n * k / (hw.peak_flops(dtype) * e.gemm_compute_efficiency * e.marlin_compute_factor
                               * hw.sustained_clock_factor)
    moved = m * k * act_bytes + n * k * weight_bytes_per_param + m * n * act_bytes
    tm = moved / (_bandwidth(hw) * e.memory_efficiency)
    return _overlap(tc, tm, e.overlap_exponent) + e.kernel_fixed_s


def weight_only_time_s(hw: HardwareProfile, kernels: WeightOnlyKernels, scheme: str, m: Any, n: Any, k: Any,
                       dtype: str, weight_bytes_per_param: float, act_bytes: float) -> Any:
    """A weight-only linear layer of `scheme` on the kernel vLLM picks for it (`WeightOnlyKernels.kernel`)."""
    if kernels.kernel(scheme) == MACHETE:
        return gemm_time_s(hw, m, n, k, dtype, weight_bytes_per_param, act_bytes, act_bytes)
    return marlin_time_s(hw, m, n, k, dtype, weight_bytes_per_param, act_bytes)


def kernel_label(kernels: WeightOnlyKernels, scheme: str, weight_bytes_per_param: float) -> str:
    """How a report names a weight-only layer's kernel: "Marlin W4A16, unfitted", "Machete W4A16, unfitted",
    "Marlin W8A16, unfitted" (4-bit formats store under 0.75 bytes per weight with their scales)."""
    bits = 4 if weight_bytes_per_param < 0.75 else 8
    return f"{'Machete' if kernels.kernel(scheme) == MACHETE else 'Marlin'} W{bits}A16, unfitted"
