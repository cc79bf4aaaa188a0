"""Time of operators and of whole engine steps on a hardware profile: a roofline with shape-aware efficiencies.

    m = StepCostModel(spec, hw, quant, tp=1)
    c = m.step_cost(query_lens, context_lens, emits)    # StepCost: total_s, breakdown_s, ops (OpCost)
    m.step_time_s(query_lens, context_lens, emits)      # the same total, fast (tabulated per token count)

Per operator (the formulas; parameters are `hw.efficiency`, see `roofline.cost.params`):

- GEMM (m x k by k x n, `groups` independent problems): output tiles (tm, tn) run in waves of one tile per SM
  (`num_compute_units`). Compute time = waves * 2*tm*tn*(k/s + tile fixed k) / (peak * eff / num_sms): tile
  padding, wave quantization and the per-tile prologue/epilogue are the small-matrix penalties (NVIDIA
  "Matrix Multiplication Background User's Guide"). Memory time = (inputs + weights + outputs + split-K fp32
  partials) / (bandwidth * memory efficiency), a 16-bit kernel with few thread blocks drawing a proportional
  share of the bandwidth (memory_saturation_fraction). Compute and memory overlap imperfectly:
  t = (tc^p + tm^p)^(1/p), p = overlap_exponent (p -> inf is the classic max roofline). 16-bit GEMMs (cuBLAS)
  take the fastest (tile, split-K) of the family's tiles (`GemmKernels`: cuBLAS's SM90 tiles on Hopper and
  Blackwell, its SM80 mma.sync tiles on Ada) x `GEMM_SPLITS`; 8-bit GEMMs (vLLM CUTLASS fp8) use the family's
  fixed dispatch on m (and on n on Ada), with their own efficiency, tile cost and memory efficiency, and
  their 16-bit input is quantized first by one more kernel (`act_quant_time_s`). Block-scaled fp8 linear layers
  run DeepGEMM (its host layout heuristic: SM90's on Hopper, `deepgemm_sm90_layout`; SM100's, with swap-AB, on
  Blackwell, `deepgemm_sm100_layout`) after a one-pass group quantization (`streaming_act_quant_time_s`). NVFP4 linear layers run
  FlashInfer's CuTe-DSL kernel with its untuned tactic (`cutedsl_fp4_tactic`) after a grid-stride fp4
  quantization kernel (`fp4_act_quant_time_s`). Plus kernel_fixed_s. On
  Blackwell and Ada a 16-bit split-K GEMM is followed by a reduction kernel
  (`GemmKernels.split_k_reduction_kernel`). On Ada the 8-bit CTAs run as many per SM as their shared memory allows,
  at the share of the SM's tensor cores their warps occupy (`GemmKernels.cta_occupancy`); the main loop of every
  tile (16- and 8-bit) at the rate its warp tile sustains (`GemmKernels.warp_tile_rate`: a per-k-step overhead,
  staged accumulation); and the chip's power limit slows a wave that keeps more than gemm_sustained_sm_fraction of
  its SMs busy (`GemmKernels.power_limited`). The family's dense GEMM kernels run their math and fixed latencies at the chip's
  `sustained_clock_factor` (B300 against B200).
- Attention prefill: work tiles run in waves over the SMs, as the family's kernels cut them
  (`roofline.cost.ops.AttentionKernels`: FA3 varlen on Hopper, (sequence, KV head, 128 or 192 packed query
  rows); TRT-LLM's context kernel on Blackwell, (sequence, query head, 256 query rows); FA2's split-KV kernel
  on Ada, (sequence, query head, 64 query rows)); every computed
  (query, key) pair (causal pairs plus the masked half of the diagonal blocks and the padding rows) costs
  4*head_dim FLOPs plus the softmax's attention_softmax_flops_per_pair (divided by the chip's
  exp_throughput_factor where the softmax runs on the SFU), at attention_compute_efficiency of the peak; each
  wave after the first pays attention_tile_fixed_s; bytes at memory_efficiency; plus kernel_fixed_s +
  attention_fixed_s (`attention_prefill_time_s`).
- Attention decode: KV bytes at attention_memory_efficiency (split-KV kernels fill the SMs when
  seqs * kv_heads is small); FLOPs at attention_compute_efficiency; plus the fixed costs; on Blackwell (TRT-LLM
  generation kernels) and Ada (FA2's split-KV kernel, one CTA per SM) each wave of work units after the first
  pays attention_tile_fixed_s.
- Elementwise, embedding, sampling: bytes at memory_efficiency, plus kernel_fixed_s per kernel.
- MoE experts: two grouped GEMMs over the touched experts (tokens per expert rows each) at
  moe_compute_efficiency * GEMM efficiency, plus moe_fixed_s (routing, sort/align, combine kernels); 8-bit
  experts their own moe_fp8_gemm_factor and moe_fp8_fixed_s (another kernel).
- All-reduce of B bytes over n GPUs (vLLM custom all-reduce / NCCL): the faster of one-shot
  (alpha + (n-1)*B/bw: every rank reads every peer's buffer) and two-shot / ring (2*alpha + 2*(n-1)/n*B/bw:
  reduce-scatter then all-gather); bw = per-direction link bandwidth * collective_bus_efficiency,
  alpha = interconnect latency * collective_latency_scale. All-gather: alpha + (n-1)/n*B/bw. On PCIe-only
  families (`AllReduceAlgorithms`: Ada) vLLM's custom all-reduce serves 2 GPUs only; more run NCCL's ring with
  its own step latency and bandwidth (nccl_step_s, nccl_bus_efficiency).
  (Thakur, Rabenseifner, Gropp, "Optimization of collective communication operations in MPICH", 2005.)

A step's device time is the sum over its operators; the executor (`hw.executor`) adds host time: eager
launches cost kernel_launch_s per kernel, CUDA graphs one replay per graph and pad the batch up to the next
captured size; step_overhead_s per step; with host_overlaps_device the host work hides under the device time
(total = max, plus the idle gap step_gap_s between steps that overlapping leaves); otherwise the rest of the host
work adds, and on a GPU the launches overlap the kernels already launched (total = rest + max(device, launches));
on a CPU everything adds.

The formulas run unchanged on Python floats (the simulator's scalar path: `_ceil`/`_max` avoid numpy calls on
floats) and on numpy arrays (fitting thousands of measured shapes). `step_time_s` equals `step_cost().total_s`
(tests/test_cost_model.py checks it to 1e-12 relative on random batches).
"""

from __future__ import annotations

import bisect
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from engine.core.model_spec import ModelSpec
from engine.core.step_record import StepSequences
from roofline.cost import cpu_timing, vllm_cpu_timing
from roofline.cost.hardware import STREAMING_ENGINES, HardwareProfile
from roofline.cost.ops import (
    BatchStats,
    OpRecord,
    RankShape,
    attention_kernels,
    attention_pairs,
    attention_q_tile_tokens,
    attention_records,
    decode_attention_shape,
    emit_ops,
    expected_experts_touched,
    kv_bytes_per_token_per_rank,
    prefill_attention_shape,
    step_ops,
    token_ops,
    weight_bytes_per_rank,
)
from roofline.cost.quant import QuantConfig, check_moe_backend, resolve_for_hardware, resolve_for_model
from roofline.errors import UserError

# 16-bit GEMMs (cuBLAS via torch.nn.functional.linear): output tiles (rows, cols) its heuristic chooses among
# (CUTLASS 3 SM90 cluster tiles 128x128 / 128x256 / 256x128 and the 64-row tiles of skinny problems), with
# split-K (cuBLAS splits K when the output has too few tiles to fill the SMs); a split keeps >= 256 of K.
GEMM_TILES: tuple[tuple[int, int], ...] = ((128, 256), (256, 128), (128, 128), (64, 128), (64, 256))
GEMM_SPLITS: tuple[int, ...] = (1, 2, 4, 8, 16)
# 8-bit GEMMs (vLLM `cutlass_scaled_mm`, csrc/quantization/.../scaled_mm_c3x_sm90_fp8_dispatch.cuh): a fixed
# dispatch on m alone, no split-K: m <= 64 -> 64x64 tiles, m <= 128 -> 64x128, else 128x128.
# (largest m, (tile rows, tile cols)), in order.
GEMM_TILES_8BIT: tuple[tuple[float, tuple[int, int]], ...] = ((64, (64, 64)), (128, (64, 128)),
                                                             (math.inf, (128, 128)))
_MIN_SPLIT_K = 256
_SM_SUBPARTITIONS = 4  # SM sub-partitions (warp schedulers, one tensor core each) per SM since Volta
_CTA_RESERVED_SMEM_BYTES = 1024  # shared memory the CUDA runtime reserves per CTA (SM8x and later)
# SM89's mma.sync: m16n8k16 for 16-bit and m16n8k32 for 8-bit inputs, 16 clocks each on one sub-partition (L40S:
# 362 bf16 / 733 fp8 dense TFLOPS / (142 SMs x 4 sub-partitions x 2.52 GHz boost) = 253 / 512 FLOP per clock; 4096 /
# 8192 FLOP per MMA); its FP32 pipe issues one warp instruction per clock (91.6 TFLOPS = 142 x 128 lanes x 2 x 2.52
# GHz).
_MMA_M, _MMA_N = 16, 8
_MMA_8BIT_K = 32
_MMA_CLOCKS = 16


class Cta(NamedTuple):
    """A GEMM kernel's CTA: `warps` warps of warp_m x warp_n output each (in the kernel's own view for the 8-bit
    CUTLASS configs: rows of m; for cuBLAS's column-major kernels the count of MMAs is the same either way); for the
    8-bit CUTLASS 2.x configs also GemmShape<tm, tn, tile_k> and MainLoopStages, with warps = (tm / warp_m) x
    (tn / warp_n) x (tile_k / wk) (CUTLASS 2.x splits the tile's k among warps where wk < tile_k). `staged`: its
    math operator is OpMultiplyAdd (not OpMultiplyAddFastAccum), which CUTLASS runs on SM89 fp8 with staged
    accumulation (cutlass/arch/mma_sm89.h `is_sm89_staged_policy_v`; gemm/threadblock/mma_multistage.h: each
    main-loop iteration's MMAs accumulate into a cleared temporary that is then added to the accumulators)."""

    warps: int
    warp_m: int
    warp_n: int
    tile_k: int = 0
    stages: int = 0
    staged: bool = False


@dataclass(frozen=True)
class GemmKernels:
    """The kernels a family runs for a dense linear layer (`gemm_time_s` with `cublas=True`).

    `tiles`: the 16-bit (cuBLAS) output tiles (rows of m, columns of n) its heuristic chooses among, each with the
    split-K factors of `GEMM_SPLITS`. `split_k_reduction_kernel`: a split-K GEMM writes fp32 partials that a second
    kernel sums (cuBLASLt's out-of-place reduction schemes, `cublasLtReductionScheme_t`
    CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE / OUTPUT_TYPE: partials in a workspace, reduced by a separate kernel).
    `tiles_8bit`: vLLM's CUTLASS W8A8 dispatch, no split-K: ((largest m, ((largest n, (tile rows, tile cols)),
    ...)), ...), both in order."""

    name: str
    tiles: tuple[tuple[int, int], ...]
    tiles_8bit: tuple[tuple[float, tuple[tuple[float, tuple[int, int]], ...]], ...]
    split_k_reduction_kernel: bool = False
    # The CTAs of the 8-bit tiles: ((tile rows, tile cols), `Cta`), with the SM's shared memory; see `cta_occupancy`
    # and `warp_tile_rate`. Empty: one full-rate tile per SM.
    ctas_8bit: tuple[tuple[tuple[int, int], Cta], ...] = ()
    shared_memory_per_sm_bytes: int = 0
    # The CTAs of the 16-bit tiles (`Cta`: warps and warp tile only); see `warp_tile_rate`. Empty: full rate.
    ctas_16bit: tuple[tuple[tuple[int, int], Cta], ...] = ()
    # The chip's power limit caps its math rate below its SMs' combined rate (`gemm_time_s`: a wave keeping more
    # than gemm_sustained_sm_fraction of the SMs busy runs slower in proportion).
    power_limited: bool = False

    def cta_occupancy(self, tm: int, tn: int) -> tuple[int, float]:
        """(CTAs of a tm x tn 8-bit tile resident per SM, share of the SM's tensor throughput one CTA gets).

        An SM has 4 sub-partitions, each with its own tensor core, and a warp runs on one of them: c resident CTAs
        of w warps use min(1, c * w / 4) of the SM's math, shared by the c CTAs. c = how many CTAs' shared memory
        (CUTLASS 2.x's multistage mainloop: stages x (tm + tn) x tk bytes of 8-bit A and B tiles, plus the 1 KB the
        CUDA runtime reserves per CTA) fits in the SM's. Without an entry: one CTA per SM at full rate."""
        cta = dict(self.ctas_8bit).get((tm, tn)) if self.ctas_8bit else None
        if cta is None:
            return 1, 1.0
        ctas = max(1, self.shared_memory_per_sm_bytes // (cta.stages * (tm + tn) * cta.tile_k
                                                           + _CTA_RESERVED_SMEM_BYTES))
        return ctas, min(1.0, ctas * cta.warps / _SM_SUBPARTITIONS) / ctas

    def warp_tile_rate(self, tm: int, tn: int, eight: bool, step_overhead_mma: float) -> float:
        """Share of its tensor cores' rate a tm x tn tile's warps sustain in the main loop. Per k-step (16 of k for
        16-bit, 32 for 8-bit inputs) a warp issues (warp_m / 16) x (warp_n / 8) MMAs of its warp tile and spends
        besides `step_overhead_mma` MMA times (loading its fragments from shared memory, the CTA barrier, issuing the
        next stage's copies). A lone warp on its sub-partition cannot hide it: a 32x32 or 16x64 warp tile (8 MMAs
        per step) runs at 8 / (8 + overhead), a 64x64 one (32) at 32 / (32 + overhead); two warps per sub-partition
        (8-warp CTAs) cover each other's overhead, up to the full rate. A staged-accumulation CTA (`Cta.staged`)
        also adds, once per main-loop iteration, its MMAs' fresh partial sums into its accumulators and clears them:
        2 x warp_m x warp_n / 32 FP32 instructions per thread, at one warp instruction per clock against an MMA's
        `_MMA_CLOCKS`. Without an entry: 1."""
        cta = dict(self.ctas_8bit if eight else self.ctas_16bit).get((tm, tn))
        if cta is None:
            return 1.0
        mmas = (cta.warp_m // _MMA_M) * (cta.warp_n // _MMA_N)
        staged = 0.0
        if cta.staged:
            k_steps = cta.tile_k // (cta.warps // ((tm // cta.warp_m) * (tn // cta.warp_n))) // _MMA_8BIT_K
            staged = 2.0 * cta.warp_m * cta.warp_n / 32 / k_steps / _MMA_CLOCKS
        ctas = self.cta_occupancy(tm, tn)[0] if eight else 1
        warps_per_subpartition = max(1.0, ctas * cta.warps / _SM_SUBPARTITIONS)
        return min(1.0, warps_per_subpartition * mmas / (mmas + step_overhead_mma + staged))


# Hopper (and Ampere, described with the same tables): cuBLAS's SM90 tiles, split-K partials reduced in place.
SM90_GEMM_KERNELS = GemmKernels(name="cublas-sm90", tiles=GEMM_TILES,
                                tiles_8bit=tuple((m, ((math.inf, tile),)) for m, tile in GEMM_TILES_8BIT))
# Blackwell: the same tiles with the reduction kernel, described for cuBLAS on SM100: the Blackwell bf16 tables
# floor at 6-7 us for small weights (n <= 1024, m <= 256: 0.5-2 us of weight bytes), which the one-kernel model
# predicted 40-45 % fast; with the reduction kernel the held-out bf16 GEMM error on B200 drops from 9.3 to 6.9 %
# (benchmarks/accuracy/gpu_profiles.py). The reduction kernel costs kernel_fixed_s plus reading the partials and writing
# the output at memory_efficiency. Hopper's cuBLAS fit is left as it was.
SM100_GEMM_KERNELS = replace(SM90_GEMM_KERNELS, name="cublas-sm100", split_k_reduction_kernel=True)
# Ada (SM89: no wgmma, no TMA, 99 KB of shared memory per block): cuBLAS runs the SM80 mma.sync kernels
# (`ampere_bf16_s16816gemm_bf16_{256x128,128x256,128x128,128x64,64x64}_..._tn` and
# `cutlass_80_tensorop_bf16_s16816gemm_..._{256x64,64x64}` in public nsys traces of torch bf16 linears on SM8x GPUs),
# named in cuBLAS's column-major view (rows = output features, columns = tokens): as (token rows, feature
# columns) 128x256, 256x128, 128x128, 64x128, 64x256 and 64x64. Their split-K partials are summed by
# `cublasLt::splitKreduce_kernel` (same traces). 8-bit: vLLM's SM89 CUTLASS 2.x fp8 dispatch
# (csrc/quantization/cutlass_w8a8/c2x/scaled_mm_c2x_sm89_fp8_dispatch.cuh, `cutlass_gemm_sm89_fp8_dispatch`):
# by next_pow_2(m) (at least 16) the configs M16 / M32 / M64 / M128 / M256 / default, each choosing its
# GemmShape<M, N, K> tile by np2 = next_pow_2(n) (np2 <= 24576 is n <= 16384, np2 <= 8196 is n <= 8192).
SM89_GEMM_KERNELS = GemmKernels(
    name="cublas-sm80-kernels-on-sm89",
    tiles=((128, 256), (256, 128), (128, 128), (64, 128), (64, 256), (64, 64)),
    tiles_8bit=(
        (16, ((8192, (16, 64)), (16384, (16, 128)), (math.inf, (32, 64)))),
        (32, ((8192, (32, 64)), (16384, (32, 128)), (math.inf, (32, 64)))),
        (64, ((8192, (64, 64)), (16384, (64, 128)), (math.inf, (64, 64)))),
        (128, ((8192, (64, 128)), (16384, (128, 128)), (math.inf, (128, 64)))),
        (256, ((4096, (64, 128)), (math.inf, (128, 128)))),
        (math.inf, ((4096, (128, 128)), (8192, (256, 128)), (math.inf, (128, 128))))),
    split_k_reduction_kernel=True,
    # The same file's configs (`Cta`): warps, warp tile, tile k, stages, math operator.
    ctas_8bit=(((16, 64), Cta(2, 16, 64, 128, 5)),    # 16x64x128, warp 16x64x64 (M16)
               ((16, 128), Cta(2, 16, 64, 64, 5)),    # 16x128x64, warp 16x64x64 (M16)
               ((32, 64), Cta(4, 16, 64, 128, 5)),    # 32x64x128, warp 16x64x64 (M16, M32)
               ((32, 128), Cta(4, 32, 64, 128, 4)),   # 32x128x128, warp 32x64x64 (M32)
               ((64, 64), Cta(4, 32, 64, 128, 5, staged=True)),  # 64x64x128, warp 32x64x64, OpMultiplyAdd (M64)
               ((64, 128), Cta(4, 64, 64, 128, 3)),   # 64x128x128, warp 64x64x64 (M64, M128, M256)
               ((128, 64), Cta(4, 64, 64, 128, 3)),   # 128x64x128, warp 64x64x64 (M128)
               ((128, 128), Cta(4, 64, 64, 64, 5)),   # 128x128x64, warp 64x64x64 (M128, M256, default)
               ((256, 128), Cta(8, 64, 64, 64, 3))),  # 256x128x64, warp 64x64x64 (default)
    # CUDA C++ Programming Guide, compute capability 8.9: 100 KB of shared memory per SM.
    shared_memory_per_sm_bytes=100 * 1024,
    # cuBLAS's SM80 kernels as CUTLASS's SM80 generator lays out their warps (tools/library/scripts/generator.py
    # GenerateSM80_TensorOp_16816, kernel view features x tokens: 256x128 [4, 2, 1] and 128x256 [2, 4, 1]: 8 warps of
    # 64x64; 256x64 and 128x128: 4 of 64x64; 128x64 / 64x128: 4 of 64x32 / 32x64; 64x64: 4 of 32x32), here as
    # (token rows, feature cols) tiles.
    ctas_16bit=(((128, 256), Cta(8, 64, 64)), ((256, 128), Cta(8, 64, 64)), ((128, 128), Cta(4, 64, 64)),
                ((64, 128), Cta(4, 64, 32)), ((64, 256), Cta(4, 64, 64)), ((64, 64), Cta(4, 32, 32))),
    power_limited=True)
_GEMM_KERNELS = {"blackwell": SM100_GEMM_KERNELS, "ada": SM89_GEMM_KERNELS}


def gemm_kernels(family: str | None) -> GemmKernels:
    """The dense GEMM kernels vLLM runs on a kernel family (`HardwareProfile.family`); SM90's by default."""
    return _GEMM_KERNELS.get(family or "", SM90_GEMM_KERNELS)


# Weight-only W4A16 MXFP4 MoE (OAI Triton `matmul_ogs` on Hopper; Blackwell's TRT-LLM kernel tiles as
# `TRTLLM_MXFP4_BF16_MOE_TILES`, `_mxfp4_bf16_moe_s`): the row tile follows the
# tokens per expert down to 16 rows, no split-K (cuBLAS's 64-row minimum wastes most of a tile on the few tokens
# an expert gets in decode). With these tiles the held-out error on the MXFP4 tables drops from 15-22 % to 9-16 %
# (benchmarks/accuracy/moe_accuracy.py).
MOE_W4A16_TILES: tuple[tuple[int, int], ...] = ((16, 128), (32, 128), (64, 128), (128, 128), (128, 256))
# vLLM's Marlin MoE (`--moe-backend marlin`; vllm/model_executor/layers/fused_moe/fused_marlin_moe.py
# `fused_marlin_moe` in 0.18.0, experts/marlin_moe.py in 0.32: "M block size selection logic"): ONE row-block
# height per call, block_size_m = the first of 8, 16, 32, 48, 64 with M * topk / E / block_size_m < 0.9 (M tokens,
# E the layer's experts), else 64. moe_align_block_size pads every expert's tokens to whole blocks of that height
# and the kernel (csrc/moe/marlin_moe_wna16) computes each block in full against its expert's weights, thread_n 128
# for one 16-row MMA block (block_size_m <= 16, `small_batch_thread_configs`) or 256 (`large_batch_thread_configs`,
# 128 where n is not a multiple of 256). The height therefore follows the batch's MEAN tokens per expert, T k / E,
# not each expert's own count: top-16 of 896 experts and top-4 of 128 reach a height at different token counts.
MARLIN_MOE_BLOCK_SIZES_M: tuple[int, ...] = (8, 16, 32, 48, 64)
_MARLIN_BLOCK_FILL = 0.9  # the rule's threshold on tokens per expert / block_size_m


def marlin_moe_block_size_m(routed_per_expert: Any) -> Any:
    """vLLM's Marlin MoE block_size_m (rows per moe block) for M * topk / E routed tokens per expert (scalar or
    array; see MARLIN_MOE_BLOCK_SIZES_M)."""
    x = np.asarray(routed_per_expert, dtype=np.float64)
    sizes = MARLIN_MOE_BLOCK_SIZES_M
    out = np.select([x / b < _MARLIN_BLOCK_FILL for b in sizes[:-1]], list(sizes[:-1]), sizes[-1])
    return int(out) if out.ndim == 0 else out


# FlashInfer's TRT-LLM fused MoE, vLLM's block-scaled fp8 experts on Blackwell: the tokens are the narrow side of its
# batched GEMMs, tiled by tile_tokens_dim = the next power of 2 of the tokens per expert, clamped to [8, 64]
# (FlashInfer `calculate_tile_tokens_dim`: "Cap to 8-64 tokens per CTA tile as it's the range supported by the
# kernel"; computed from the batch's mean tokens per expert), 128 weight rows per tile. In `tiles_8bit` form
# (tokens per expert up to, ((n up to, (tm, tn)),)). With the 8-bit CUTLASS tiles (64 rows at least) the held-out
# B200 error was 15.5 / 18.1 / 17.4 % (balanced / power law 1.01 / 1.2; 1.4-1.6x slow at 16-256 tokens, one token
# per expert padded to 64 rows), with these 10.5 / 9.7 / 10.2 % (benchmarks/accuracy/moe_accuracy.py, BENCHMARKS.md issue 17).
TRTLLM_MOE_TILES_8BIT: tuple[tuple[float, tuple[tuple[float, tuple[int, int]], ...]], ...] = tuple(
    (hi, ((math.inf, (tm, 128)),)) for hi, tm in ((8, 8), (16, 16), (32, 32), (math.inf, 64)))
# The same TRT-LLM fused MoE on MXFP4 weights with MXFP8 activations (`--moe-backend flashinfer-mxfp4-mxfp8`;
# FlashInfer `trtllm_fp4_block_scale_moe` / `_routed_moe`, csrc/trtllm_fused_moe_kernel_launcher.cu
# `FP4BlockScaleLauncher::getSupportedTileNums`: 8, 16, 32, 64 and, for non-bf16 activations, 128 and 256 tokens
# per tile since FlashInfer PR #2014, 2025-11). Untuned (no autotuner profile: the operator tables) the launcher
# takes `selectDefaultTileN`, the smallest of its candidates around clamp(next power of 2 of ceil(T k / E), 8, 256),
# i.e. one step below it: 8 tokens up to 16 per expert, then 16, 32, 64, and 128 above 128. The B200 table shows the
# steps (DeepSeek-V4's experts, top-6 of 256: 320 -> 384 tokens, 7.5 -> 9 per expert, 114 -> 154 us: one 8-token
# tile per expert -> two; 4096 -> 6144 tokens, 96 -> 144 per expert, 267 -> 392 us: tiles of 64 -> 128).
TRTLLM_MXFP8_MOE_TILES_8BIT: tuple[tuple[float, tuple[tuple[float, tuple[int, int]], ...]], ...] = tuple(
    (hi, ((math.inf, (tm, 128)),)) for hi, tm in ((16, 8), (32, 16), (64, 32), (128, 64), (math.inf, 128)))
# vLLM's default MXFP4 MoE on Blackwell, the same TRT-LLM fused MoE with bf16 activations (W4A16:
# `FLASHINFER_TRTLLM_MXFP4_BF16`, FlashInfer `trtllm_fp4_block_scale_moe` with bf16 hidden states, routing inside
# the kernel): its tile candidates stop at 64 tokens (128 and 256 are for non-bf16 activations only), so the untuned
# default, one step below clamp(next power of 2 of T k / E, 8, 64), is 8 tokens up to 16 per expert, 16 up to 32,
# then 32. The B200 table shows the steps (gpt-oss, top-4 of 32 and of 128 experts, moe_tp 1): 8 -> 10 tokens per
# expert (one 8-token tile -> two) 0.122 -> 0.194 ms and 0.394 -> 0.691 ms; 64 -> 96 (two 32-token tiles -> three)
# 0.224 -> 0.317 ms; 16 -> 20 and 32 -> 48 (the tile doubles with the tokens) no step; above 64 the time grows with
# the 32-token tiles (2048 tokens per expert: 64 tiles, 6.0 ms; weights streamed 64 times at ~5.1 TB/s).
TRTLLM_MXFP4_BF16_MOE_TILES: tuple[tuple[float, tuple[tuple[float, tuple[int, int]], ...]], ...] = tuple(
    (hi, ((math.inf, (tm, 128)),)) for hi, tm in ((16, 8), (32, 16), (math.inf, 32)))
# Kernel families whose default MXFP4 MoE is that kernel (vLLM `_get_priority_backends_for_gpt_oss`: SM100).
MXFP4_BF16_TRTLLM_FAMILIES = ("blackwell",)
# Kernel families whose fused MoE (every format the tables time there by default: bf16, per-tensor fp8, fp8-block,
# NVFP4, MXFP4) is FlashInfer's TRT-LLM-gen MoE, whose runner (csrc/trtllm_fused_moe_runner.cu `MoE::Runner::run`)
# launches PermuteGemm1, GEMM2 (bf16 out per routed token) and then a separate finalize kernel
# (`moe::dev::finalize::run`): `_trtllm_finalize_s`.
TRTLLM_MOE_FAMILIES = ("blackwell",)
# Its formats whose weights stream at `moe_trtllm_wide_tile_bandwidth_factor` of their bandwidth once the token tile
# passes 8 (`trtllm_tile_tokens`): block fp8 (DeepSeek FP8: the B200 table steps up 1.29-1.31x there at the same
# weights, median over shapes; per-tensor fp8 1.11-1.12x, NVFP4 1.12-1.20x and bf16 1.11-1.14x, what their own
# growth with the tokens explains).
TRTLLM_WIDE_TILE_SCHEMES = ("fp8-block",)


def trtllm_tile_tokens(routed: Any, num_experts: Any) -> Any:
    """The token tile FlashInfer's TRT-LLM-gen MoE takes for a call (FlashInfer `calculate_tile_tokens_dim`): the
    next power of 2 of the tokens per expert assuming a perfect spread, routed // experts (integer division),
    clamped to [8, 64]."""
    per_expert = np.floor(np.asarray(routed, dtype=np.float64) / num_experts + 1e-9)
    return np.clip(2.0 ** np.ceil(np.log2(np.maximum(per_expert, 1.0))), 8.0, 64.0)
_MXFP8_BYTES_PER_ELEMENT = 1.0 + 1.0 / 32  # E4M3 values and one E8M0 scale per 32
_K_BLOCK = 64  # K is consumed in blocks of 64 elements (128 bytes of bf16: one TMA/cp.async stage)
_EIGHT_BIT = ("fp8", "int8")
_NVFP4_BYTES_PER_ELEMENT = 0.5 + 1.0 / 16  # E2M1 values and one E4M3 scale per 16
_FP8_GROUP_SCALE_BYTES = 4.0 / 128  # block-scaled fp8 activations: one fp32 scale per 1x128 group
# Kernel families on which vLLM runs block-scaled fp8 linear layers with DeepGEMM (vllm/utils/deep_gemm.py
# `is_deep_gemm_supported`: Hopper and Blackwell datacenter GPUs); Ada falls through to CUTLASS / Triton / Marlin.
DEEPGEMM_FAMILIES = ("hopper", "blackwell")
_QUANT_BLOCKS_PER_SM = 2  # 1024-thread blocks resident per SM (2048 threads per SM on Hopper/Ampere)
# Without a scale-up interconnect, collectives go over PCIe; its latency (NCCL over PCIe, small messages).
_PCIE_COLLECTIVE_LATENCY_S = 20e-6
_ATTENTION_ELEMENT_BYTES = 2.0  # Q and O of flash attention are bf16/fp16


class CpuExecutor(NamedTuple):
    """How one engine runs a step on a CPU (a `kind: cpu` profile): its attention records and operator times."""

    attention_records: Callable[[RankShape, BatchStats, QuantConfig], list[OpRecord]]
    op_time_s: Callable[[HardwareProfile, OpRecord, QuantConfig], tuple[Any, int]]
    handled_kinds: tuple[str, ...]  # record kinds it times; the others (collectives) take the GPU formulas


# The engines a CPU profile can predict (`StepCostModel(cpu_engine=...)`): this project's eager engine
# (`roofline.cost.cpu_timing`) and real vLLM-CPU's compiled graph (`roofline.cost.vllm_cpu_timing`).
CPU_ENGINES: dict[str, CpuExecutor] = {
    cpu_timing.ENGINE: CpuExecutor(cpu_timing.attention_records, cpu_timing.op_time_s, cpu_timing.HANDLED_KINDS),
    vllm_cpu_timing.ENGINE: CpuExecutor(vllm_cpu_timing.attention_records, vllm_cpu_timing.op_time_s,
                                        vllm_cpu_timing.HANDLED_KINDS),
}
assert tuple(CPU_ENGINES) == STREAMING_ENGINES  # the engines a profile's weight_streaming curves may name
DEFAULT_CPU_ENGINE = "roofline-engine"


def check_cpu_engine(name: str) -> str:
    """`name` if it is one of `CPU_ENGINES`, else a UserError naming it and the allowed ones."""
    if name not in CPU_ENGINES:
        raise UserError(f"cpu engine {name!r} is not allowed; allowed: {', '.join(CPU_ENGINES)}")
    return name


def _ceil(x: Any) -> Any:
    """Ceiling of a Python float (the simulator's scalar path: no numpy call) or of an array."""
    return math.ceil(x) if isinstance(x, (int, float)) else np.ceil(x)


def _max(a: Any, b: Any) -> Any:
    return max(a, b) if isinstance(a, (int, float)) and isinstance(b, (int, float)) else np.maximum(a, b)


_min = np.minimum
_sum = np.add.reduce  # `arr.sum()` without its Python wrapper (the simulator sums every step's contexts)


def _where(condition: Any, a: Any, b: Any) -> Any:
    """`np.where`, and a plain choice (a float stays a float) where the condition is one bool."""
    if isinstance(condition, (bool, np.bool_)):
        return a if condition else b
    return np.where(condition, a, b)


def row_sums(values: np.ndarray) -> np.ndarray:
    """`[sum(row) for row in values.tolist()]` as an array, the same floats: Python's `sum` of floats up to 3.11
    adds left to right (`0 + v0 + v1 + ...`), which column-wise additions repeat; from 3.12 on it is compensated
    (Neumaier), so there each row is summed by `sum` itself."""
    if sys.version_info >= (3, 12):
        return np.array([sum(row) for row in values.tolist()], dtype=np.float64)
    values = np.asarray(values, dtype=np.float64).view(np.ndarray)
    total = np.zeros(len(values), dtype=np.float64)
    for j in range(values.shape[1]):
        total += values[:, j]
    return total


_BEATEN = 1.0 - 1e-9  # `_beatable`: a tiling's lower bound, shrunk by far more than rounding, at least the best


def _any(flags: Any) -> bool:
    """`np.any`, without a numpy call for the scalar path's Python bool."""
    return flags if isinstance(flags, bool) else bool(np.any(flags))


def _overlap(tc: Any, tm: Any, p: float) -> Any:
    """Soft maximum of compute and memory time: (tc^p + tm^p)^(1/p), computed stably as
    hi * ((tc / hi)^p + (tm / hi)^p)^(1/p), hi = max(tc, tm) + 1e-30.

    Where the larger time over hi is exactly 1.0 (hi rounds to it: any finite time above ~1e-14 s) and 1.0^p is
    1.0 (C99 pow, and numpy's SIMD pow on this machine, BENCHMARKS.md), the sum is 1.0 + (smaller / hi)^p:
    computed so, the same floats with one pow fewer (the larger ratio's; a third of the cost model's pow calls)."""
    if isinstance(tc, float) and isinstance(tm, float):
        big, small = (tc, tm) if tc >= tm else (tm, tc)
        hi = big + 1e-30
        if big / hi == 1.0:
            return hi * (1.0 + (small / hi) ** p) ** (1.0 / p)
        return hi * ((tc / hi) ** p + (tm / hi) ** p) ** (1.0 / p)
    big = np.maximum(tc, tm)
    hi = big + 1e-30
    if (big / hi == 1.0).all():
        return hi * (1.0 + (np.minimum(tc, tm) / hi) ** p) ** (1.0 / p)
    return hi * ((tc / hi) ** p + (tm / hi) ** p) ** (1.0 / p)


def _beatable(tc: Any, tm: Any, adds: tuple[Any, ...], p: float, beaten: Any) -> Any:
    """`_overlap(tc, tm, p)` plus each of `adds` in order (a GEMM tiling's time), where it can be below `beaten`
    (the best time so far; None: everywhere); None if nowhere. The soft maximum is at least the larger of tc and
    tm (hi times a power >= 1 of a sum >= 1, up to the pow's and the product's last bits) and the additions are
    monotone, so where that bound, shrunk by `_BEATEN` (far more than those bits), is at least `beaten`, the time
    is too and `_min(beaten, time)` is `beaten`. Where only some elements of an array can win, the time is computed
    on those and the others hold `beaten`'s: the same `_min`, without the pow calls of the rest (most of a count
    table's tilings and split-K factors)."""
    if beaten is None:
        time = _overlap(tc, tm, p)
        for add in adds:
            time = time + add
        return time
    bound = _max(tc, tm)
    for add in adds:
        bound = bound + add
    can_win = bound * _BEATEN < beaten
    if not _any(can_win):
        return None
    if isinstance(can_win, bool) or can_win.all():
        return _beatable(tc, tm, adds, p, None)
    shape = can_win.shape
    if not all(np.ndim(x) == 0 or np.shape(x) == shape for x in (tc, tm, beaten, *adds)):
        return _beatable(tc, tm, adds, p, None)
    rows = np.flatnonzero(can_win)

    def pick(x: Any) -> Any:
        return x if np.ndim(x) == 0 else x.reshape(-1)[rows]

    time = beaten.copy()
    time.reshape(-1)[rows] = _beatable(pick(tc), pick(tm), tuple(pick(a) for a in adds), p, None)
    return time


def _bandwidth(hw: HardwareProfile) -> float:
    return hw.memory_bandwidth_bytes_per_s


def gemm_time_s(hw: HardwareProfile, m: Any, n: Any, k: Any, dtype: str, weight_bytes_per_param: float,
                in_bytes: float, out_bytes: float, groups: Any = 1, eff_scale: float = 1.0,
                bw_scale: float = 1.0, tiles: tuple[tuple[int, int], ...] | None = None, cublas: bool = True,
                tile_fixed_k: float | None = None, row_tiles: Callable[[int], Any] | None = None,
                tiles_8bit: tuple[tuple[float, tuple[tuple[float, tuple[int, int]], ...]], ...] | None = None) -> Any:
    """One GEMM kernel (or one grouped GEMM of `groups` equal problems): y (m x n) = x (m x k) @ W (k x n).

    Tiles run in waves of one per SM (`num_compute_units`); compute time = waves * 2*tm*tn*(k/s + tile fixed
    k) / (peak * efficiency / SMs): tile padding, wave quantization and the per-tile prologue/epilogue are the
    small-matrix penalties (NVIDIA "Matrix Multiplication Background User's Guide": tile and wave
    quantization). Memory time = (inputs + weights + outputs + split-K fp32 partials) / bandwidth, where a
    16-bit kernel draws a share min(1, thread blocks / (memory_saturation_fraction * SMs)) of the bandwidth
    (Little's law: each SM keeps a bounded number of bytes in flight); the 8-bit CUTLASS kernels are TMA
    warp-specialized with deep K pipelines and showed no such effect on the H100 tables (the fit drove the
    fraction to its lower bound), so they draw the full bandwidth. The two overlap as `_overlap`. 16-bit and 8-bit
    GEMMs are different libraries (cuBLAS, CUTLASS) with their own tile choice (`GemmKernels.tiles`,
    `GemmKernels.tiles_8bit`), compute efficiency, per-tile cost and memory efficiency. `tiles`: another kernel's
    tile choice (16-bit path, no split-K). `cublas`: a dense linear layer, run by the family's kernels
    (`gemm_kernels`: their tiles, and a second split-K reduction kernel where they have one); fused-MoE grouped
    GEMMs are other kernels and pass False (the SM90 tables). `tile_fixed_k`: another kernel's per-tile cost (default:
    the family's for the dtype). `row_tiles`: unequal groups (tokens per expert differ), tile height -> the row
    tiles of all groups together (sum over groups of ceil(m_g / tm)); default: `groups` equal groups of m rows.
    `tiles_8bit`: another 8-bit kernel's tile choice (`GemmKernels.tiles_8bit` form). Plus kernel_fixed_s."""
    if hw.kind == "cpu":  # no tiles or waves on a CPU (roofline.cost.cpu_timing)
        return cpu_timing.gemm_time_s(hw, m, n, k, dtype, weight_bytes_per_param, in_bytes, out_bytes, groups,
                                      eff_scale)
    e = hw.efficiency
    # fp4 GEMMs (NVFP4 on Blackwell: CUTLASS / TRT-LLM / CuteDSL) are CUTLASS-style kernels like the 8-bit ones:
    # their tile dispatch and efficiencies (held-out NVFP4 MoE error on B200 16 -> 13 %, benchmarks/accuracy/moe_accuracy.py).
    eight = dtype in _EIGHT_BIT or dtype == "fp4"
    eff = (e.gemm_fp8_compute_efficiency if eight else e.gemm_compute_efficiency) * eff_scale
    fixed_k = tile_fixed_k if tile_fixed_k is not None else e.gemm_fp8_tile_fixed_k if eight else e.gemm_tile_fixed_k
    sms = hw.num_compute_units
    # The chip's sustained SM clock against the family's base chip (`sustained_clock_factor`, fitted on the chip's
    # own tables of these kernels): the math and the fixed latencies of the family's dense GEMM kernels, not HBM.
    clock = hw.sustained_clock_factor if cublas else 1.0
    per_sm = hw.peak_flops(dtype) * eff * clock / sms
    fixed_s = e.kernel_fixed_s / clock
    bw = _bandwidth(hw) * (e.gemm_fp8_memory_efficiency if eight else e.memory_efficiency) * bw_scale
    saturating = sms * e.memory_saturation_fraction
    base_bytes = groups * (m * k * in_bytes + n * k * weight_bytes_per_param + m * n * out_bytes)
    # Dense linear layers run the family's kernels (`GemmKernels`); fused-MoE grouped GEMMs (cublas False) are other
    # kernels, described by the SM90 tables.
    kernels = gemm_kernels(hw.family) if cublas else SM90_GEMM_KERNELS
    reduce_kernel = kernels.split_k_reduction_kernel

    def tiled(tm: int, tn: int, s: int, beaten: Any = None) -> Any:
        """The tiling's time; None where it cannot beat `beaten` (`_beatable`)."""
        tiles = (groups * _ceil(m / tm) if row_tiles is None else row_tiles(tm)) * _ceil(n / tn) * s
        k_split = _ceil(k / (s * _K_BLOCK)) * _K_BLOCK
        ctas, rate = kernels.cta_occupancy(tm, tn) if eight else (1, 1.0)
        # The main loop's k at the CTA's share of the SM's tensor cores and its warp tile's rate
        # (`GemmKernels.warp_tile_rate`); the per-tile fixed k (prologue, epilogue) is no MMA work, at the SM's rate.
        warp_rate = kernels.warp_tile_rate(tm, tn, eight, e.gemm_warp_step_overhead_mma)
        waves = _ceil(tiles / (sms * ctas))
        tc = waves * 2.0 * tm * tn * (k_split / (warp_rate * rate) + fixed_k) / per_sm
        if kernels.power_limited:
            # The chip's power limit sustains gemm_sustained_sm_fraction of its SMs' combined math rate: every wave
            # but the last keeps all SMs busy, the last one those its CTAs occupy; a wave with more busy SMs than
            # the limit sustains runs slower in proportion (the clock drops).
            busy = _min(_ceil((tiles - (waves - 1) * sms * ctas) / ctas), sms)
            sustained = sms * e.gemm_sustained_sm_fraction
            tc = tc / waves * ((waves - 1) * _max(1.0, sms / sustained) + _max(1.0, busy / sustained))
        share = 1.0 if eight else _min(tiles / saturating, 1.0)
        if s > 1 and reduce_kernel:  # the GEMM writes s fp32 partials; a second kernel reads them, writes y
            partials = groups * m * n * 4.0 * s
            tm_s = (base_bytes + partials) / (bw * share)
            adds: tuple[Any, ...] = (fixed_s, (partials + groups * m * n * out_bytes) / _bandwidth(hw)
                                     / e.memory_efficiency)
        else:
            extra = 0.0 if s == 1 else groups * 2.0 * m * n * 4.0 * s  # fp32 partials written and read back
            tm_s = (base_bytes + extra) / (bw * share)
            adds = ()
        return _beatable(tc, tm_s, adds, e.overlap_exponent, beaten)

    best: Any = None  # the fastest tiling so far, per element of m, n, k
    if eight:
        lo = 0.0
        for hi, by_n in tiles_8bit or kernels.tiles_8bit:
            n_lo = 0.0
            for n_hi, (tm, tn) in by_n:
                t = np.where((m > lo) & (m <= hi) & (n > n_lo) & (n <= n_hi), tiled(tm, tn, 1), np.inf)
                best = t if best is None else _min(best, t)
                n_lo = n_hi
            lo = hi
        return best + fixed_s
    # A tiling is evaluated only where it can beat the best so far (`_beatable`): the same floats.
    for tm, tn in tiles or kernels.tiles:
        for s in (1,) if tiles else GEMM_SPLITS:
            if s > 1 and np.all(k < s * _MIN_SPLIT_K):
                continue
            t = tiled(tm, tn, s, best)
            if t is None:
                continue
            if s > 1:
                t = np.where(k < s * _MIN_SPLIT_K, np.inf, t)  # this split is not allowed for this k
            best = t if best is None else _min(best, t)
    return best + fixed_s


def act_quant_time_s(hw: HardwareProfile, m: Any, k: Any, act_bytes: float) -> Any:
    """Quantizing a W8A8 GEMM's input to 8 bits, one kernel: read m*k 16-bit, write m*k 8-bit values at
    act_quant_memory_efficiency, plus act_quant_block_s per wave of its m thread blocks (one per row, 1024
    threads each: 2 resident per SM, as an H100 SM holds 2048 threads). Its fixed latencies run at the chip's
    sustained clock (`sustained_clock_factor`), as the GEMM's."""
    e = hw.efficiency
    waves = _ceil(m / (_QUANT_BLOCKS_PER_SM * hw.num_compute_units))
    return (m * k * (act_bytes + 1.0) / (_bandwidth(hw) * e.act_quant_memory_efficiency)
            + (waves * e.act_quant_block_s + e.kernel_fixed_s) / hw.sustained_clock_factor)


def linear_time_s(hw: HardwareProfile, m: Any, n: Any, k: Any, dtype: str, weight_bytes_per_param: float,
                  act_bytes: float, scheme: str = "none") -> Any:
    """A linear layer as vLLM runs it: a 16-bit GEMM; or, for W8A8 (`dtype` fp8/int8), the input quantized by one
    kernel (`act_quant_time_s`) and the CUTLASS 8-bit GEMM. Block-scaled fp8 (`scheme` "fp8-block": vLLM's
    DeepGemmFp8BlockScaledMMKernel, 1x128 activation groups and 128x128 weight blocks, fp32 scales) quantizes its
    input in one streaming pass (`streaming_act_quant_time_s` at act_group_quant_memory_efficiency) and runs the
    8-bit GEMM at gemm_fp8_block_factor of its compute efficiency with gemm_fp8_block_tile_fixed_k per tile on
    `DEEPGEMM_FAMILIES` (tiles: DeepGEMM's own layout, its SM90 heuristic on Hopper, `deepgemm_sm90_gemm_time_s`,
    its SM100 heuristic with swap-AB on Blackwell, `deepgemm_sm100_gemm_time_s`); elsewhere it is described as the
    per-tensor path at gemm_fp8_block_factor. NVFP4
    W4A4 (`dtype` fp4: E2M1 values with an E4M3 scale per 16, 0.5625 bytes per element) runs FlashInfer's CuTe-DSL
    kernel (`cutedsl_fp4_gemm_time_s`) after `fp4_act_quant_time_s`."""
    if dtype in _EIGHT_BIT and scheme == "fp8-block" and hw.family in DEEPGEMM_FAMILIES:
        e = hw.efficiency
        quant = streaming_act_quant_time_s(hw, m, k, act_bytes, 1.0 + _FP8_GROUP_SCALE_BYTES,
                                           e.act_group_quant_memory_efficiency)
        if hw.family == "hopper":
            return deepgemm_sm90_gemm_time_s(hw, m, n, k, weight_bytes_per_param, 1.0 + _FP8_GROUP_SCALE_BYTES,
                                             act_bytes) + quant
        return deepgemm_sm100_gemm_time_s(hw, m, n, k, weight_bytes_per_param, 1.0 + _FP8_GROUP_SCALE_BYTES,
                                          act_bytes) + quant
    if dtype in _EIGHT_BIT:
        scale = hw.efficiency.gemm_fp8_block_factor if scheme == "fp8-block" else 1.0
        return gemm_time_s(hw, m, n, k, dtype, weight_bytes_per_param, 1.0, act_bytes, eff_scale=scale) \
            + act_quant_time_s(hw, m, k, act_bytes)
    if dtype == "fp4":
        return cutedsl_fp4_gemm_time_s(hw, m, n, k, weight_bytes_per_param, act_bytes) \
            + fp4_act_quant_time_s(hw, m, k, act_bytes)
    return gemm_time_s(hw, m, n, k, dtype, weight_bytes_per_param, act_bytes, act_bytes)


# DeepGEMM's SM90 fp8 GEMM (`fp8_gemm_nt` with fp32 scales and 128x128 weight blocks: the 1D2D kernel, bf16 output)
# picks its layout on the host, csrc/jit_kernels/heuristics/sm90.hpp `SM90ArchSpec` (DeepGEMM 891d57b, the commit
# vLLM's tools/install_deepgemm.sh pinned for 0.24): block_m in (64, 128, 16 if m <= 16, 32 if m <= 32, 256), block_n
# 16..192 in steps of 16 (above 128 only 144, 160, 192: the 1D2D unroll rule), not both above 128, clusters 1x1, 1x2
# and 2x1 (multicast only with more than one wave), at least 3 pipeline stages in 232448 bytes of shared memory (4
# for tiles under 128x192); of these the one with the fewest modelled L1/L2 cycles / wave efficiency
# (`get_layout_info`), the first on ties. The persistent kernel then runs the tiles in waves over the SMs.
_DEEPGEMM_SM90_SMEM_BYTES = 232448
_DEEPGEMM_SM90_BLOCK_N = tuple(range(16, 129, 16)) + (144, 160, 192)


def deepgemm_sm90_layout(m: Any, n: Any, k: Any, sms: int) -> tuple[Any, Any]:
    """(block_m, block_n) DeepGEMM's SM90 heuristic picks for an fp8 1D2D GEMM, per element."""
    m, n, k = (np.asarray(x, dtype=np.float64) for x in (m, n, k))
    shape = np.broadcast(m, n, k).shape
    l2_bw = math.floor(min(64.0 * sms, 8e6 / 1.3e3))  # bytes per cycle, as the heuristic models them
    l1_bw = 128.0 * sms
    best = np.full(shape, np.inf)
    block_m, block_n = np.full(shape, 128.0), np.full(shape, 128.0)
    for cluster_m, cluster_n in ((1, 1), (1, 2), (2, 1)):
        for bm in (64, 128, 16, 32, 256):
            allowed_m = (m <= 16) if bm == 16 else (m <= 32) if bm == 32 else np.full(shape, True)
            for bn in _DEEPGEMM_SM90_BLOCK_N:
                if bm > 128 and bn > 128:
                    continue
                uniform_sfb = 1 if 128 % bn == 0 else 2
                smem_extra = (math.ceil(bm * bn * 2 / 1024) * 1024 + 16 * 8 * 2
                              + np.ceil(np.ceil(k / 128) * 4 * uniform_sfb / 8) * 8)
                stages = np.minimum((_DEEPGEMM_SM90_SMEM_BYTES - smem_extra)
                                    // (bm * 128 + bn * 128 + math.ceil(bm * 4 / 128) * 128), 16)
                legal = allowed_m & (stages >= (4 if bm * bn < 128 * 192 else 3))
                blocks = np.ceil(m / bm) * np.ceil(n / bn)
                waves = np.ceil(blocks / sms)
                cd = bm * bn * 2.0
                l2 = np.floor((k * (bm // cluster_n + bn // cluster_m) + cd) * blocks / l2_bw)
                l1 = np.floor((k * (bm + bn) + k * (max(64, bm) + bn) + cd + cd) * blocks / l1_bw)
                cycles = np.floor(np.maximum(l1, l2) / (blocks / (waves * sms)))
                if cluster_m * cluster_n > 1:
                    cycles = np.where(waves <= 1, np.inf, cycles)
                better = legal & (cycles < best)
                best = np.where(better, cycles, best)
                block_m, block_n = np.where(better, bm, block_m), np.where(better, bn, block_n)
    return block_m, block_n


def deepgemm_sm90_gemm_time_s(hw: HardwareProfile, m: Any, n: Any, k: Any, weight_bytes_per_param: float,
                              in_bytes: float, out_bytes: float) -> Any:
    """DeepGEMM's SM90 fp8 GEMM with the layout of `deepgemm_sm90_layout`: ceil(tiles / SMs) waves of
    2*block_m*block_n*(k + gemm_fp8_block_tile_fixed_k) FLOPs per SM at gemm_fp8_compute_efficiency *
    gemm_fp8_block_factor of the fp8 peak; bytes at gemm_fp8_memory_efficiency; overlapped as `_overlap`; plus
    kernel_fixed_s. On a chip with a `power_limit` (GB200), math longer than its after_s runs at its clock_factor."""
    block_m, block_n = deepgemm_sm90_layout(m, n, k, hw.num_compute_units)
    return _deepgemm_gemm_time_s(hw, m, n, k, block_m, block_n, _K_BLOCK, weight_bytes_per_param, in_bytes,
                                 out_bytes)


def _deepgemm_gemm_time_s(hw: HardwareProfile, m: Any, n: Any, k: Any, block_m: Any, block_n: Any, k_block: int,
                          weight_bytes_per_param: float, in_bytes: float, out_bytes: float) -> Any:
    """A persistent DeepGEMM kernel with (block_m, block_n) output tiles, K padded to `k_block`: see
    `deepgemm_sm90_gemm_time_s`."""
    e = hw.efficiency
    sms = hw.num_compute_units
    per_sm = hw.peak_flops("fp8") * e.gemm_fp8_compute_efficiency * e.gemm_fp8_block_factor / sms
    k_blocks = np.ceil(np.asarray(k, dtype=np.float64) / k_block) * k_block
    waves = np.ceil(np.ceil(m / block_m) * np.ceil(n / block_n) / sms)
    tc = waves * 2.0 * block_m * block_n * (k_blocks + e.gemm_fp8_block_tile_fixed_k) / per_sm
    if hw.power_limit is not None:  # a long call's math runs at the clock the chip's power limit holds it to
        tc = np.where(tc > hw.power_limit.after_s, tc / hw.power_limit.clock_factor, tc)
    tm = (m * k * in_bytes + n * k * weight_bytes_per_param + m * n * out_bytes) / (
        _bandwidth(hw) * e.gemm_fp8_memory_efficiency)
    t = _overlap(tc, tm, e.overlap_exponent) + e.kernel_fixed_s
    return float(t) if np.ndim(t) == 0 else t


# DeepGEMM's SM100 fp8 GEMM (`fp8_gemm_nt` with packed UE8M0 scales, as vLLM passes them on Blackwell: the 1D1D
# kernel `sm100_fp8_fp4_gemm_1d1d`, K-major A and B, bf16 output, block_k 128) picks its layout on the host,
# csrc/jit_kernels/heuristics/sm100.hpp `SM100ArchSpec` (DeepGEMM 891d57b, as the SM90 one above). Candidates, in
# this order:
# - A and B as given: block_m 32 if m <= 32, 64 if m <= 64, else 128 (one per problem); block_n 16, then 32 to 256
#   in steps of 32 (to 128 only when k <= 256); clusters 1x1, then 2x1 (two CTAs along m share the weight tile by
#   multicast; only when ceil(m / block_m) is even).
# - swap-AB (the UMMA's 128 rows are the weights' n, its columns the m tokens): block_n 128, block_m 16 to 256 in
#   steps of 16; clusters 1x1, then 1x2 (along n; only when ceil(n / 128) is even).
# Tensor memory (512 columns) must hold two accumulators of the UMMA's N (block_n, or block_m when swapped) plus the
# UE8M0 scale columns (block_m and block_n rounded up to 128, over 32): this drops block_n 256 and block_m 256
# (2*256 + 12 > 512). With K-major A and B the 128-byte swizzle always fits. No cycle model (`get_layout_info`
# leaves it at 0): `compare` prefers one wave, then a 2-CTA cluster, then fewer waves, then a fuller last wave,
# then the smaller block_m + block_n, then the smaller block_m * block_n; the first of equal candidates stays
# (`get_best_config`, common.hpp). The persistent kernel runs one CTA per SM over the tiles.
_DEEPGEMM_SM100_BLOCK_K = 128  # 128 bytes of fp8 per stage: block_k = 128 / element size
_DEEPGEMM_SM100_TMEM_COLUMNS = 512
_DEEPGEMM_SM100_UMMA_M = 128  # swap-AB's block_n: the UMMA's M of layout A/D


def _deepgemm_sm100_candidates() -> list[tuple[bool, int, int, int, int]]:
    """(swap_ab, block_m, block_n, cluster_m, cluster_n) in the order SM100ArchSpec enumerates them; block_m 0 for
    the unswapped layouts: it is 32, 64 or 128 by m. Tensor-memory capacity is checked here; the shape-dependent
    rules (block_n > 128 only when k > 256, even block counts for multicast) by `deepgemm_sm100_layout`."""
    def tmem_ok(block_m: int, block_n: int, umma_n: int) -> bool:
        scale_columns = (math.ceil(block_m / 128) * 128 + math.ceil(block_n / 128) * 128) // 32
        return 2 * umma_n + scale_columns <= _DEEPGEMM_SM100_TMEM_COLUMNS

    out = []
    for cluster_m in (1, 2):
        for bn in (16,) + tuple(range(32, 257, 32)):
            if tmem_ok(128, bn, bn):  # block_m <= 128 takes 128 scale rows whatever it is
                out.append((False, 0, bn, cluster_m, 1))
    for cluster_n in (1, 2):
        for bm in range(16, 257, 16):
            if tmem_ok(bm, _DEEPGEMM_SM100_UMMA_M, bm):
                out.append((True, bm, _DEEPGEMM_SM100_UMMA_M, 1, cluster_n))
    return out


_DEEPGEMM_SM100_CANDIDATES = _deepgemm_sm100_candidates()


def deepgemm_sm100_layout(m: Any, n: Any, k: Any, sms: int) -> tuple[Any, Any, Any, Any]:
    """(block_m, block_n, swap_ab, cluster size) DeepGEMM's SM100 heuristic picks for an fp8 1D1D GEMM, per
    element (block_m tiles the m tokens and block_n the n weight rows, swapped or not)."""
    m, n, k = (np.asarray(x, dtype=np.float64) for x in (m, n, k))
    shape = np.broadcast(m, n, k).shape
    if sms % 2:
        raise ValueError("DeepGEMM's SM100 kernels need an even SM count")
    unswapped_bm = np.where(m <= 32, 32.0, np.where(m <= 64, 64.0, 128.0))
    # the comparator's key, lexicographic: (more than one wave, -cluster size, waves, -last wave's CTAs, bm + bn,
    # bm * bn); a candidate replaces the best so far only when its key is smaller
    best = [np.full(shape, np.inf) for _ in range(6)]
    block_m, block_n = np.full(shape, 128.0), np.full(shape, 128.0)
    swap_ab, cluster = np.full(shape, False), np.full(shape, 1.0)
    for swap, bm_fixed, bn, cluster_m, cluster_n in _DEEPGEMM_SM100_CANDIDATES:
        bm = float(bm_fixed) if swap else unswapped_bm
        legal = np.full(shape, True) if bn <= 128 else np.broadcast_to(k > 256, shape)
        if cluster_m > 1:
            legal = legal & (np.ceil(m / bm) % cluster_m == 0)
        if cluster_n > 1:
            legal = legal & (np.ceil(n / bn) % cluster_n == 0)
        blocks = np.ceil(m / bm) * np.ceil(n / bn)
        waves = np.ceil(blocks / sms)
        last = blocks % sms
        key = (np.where(waves > 1, 1.0, 0.0), np.full(shape, -float(cluster_m * cluster_n)), waves,
               -np.where(last == 0, sms, last), bm + bn, bm * bn)
        better, tied = np.full(shape, False), np.full(shape, True)
        for new, old in zip(key, best):
            better = better | (tied & (new < old))
            tied = tied & (new == old)
        better = better & legal
        best = [np.where(better, new, old) for new, old in zip(key, best)]
        block_m, block_n = np.where(better, bm, block_m), np.where(better, float(bn), block_n)
        swap_ab, cluster = np.where(better, swap, swap_ab), np.where(better, cluster_m * cluster_n, cluster)
    return block_m, block_n, swap_ab, cluster


def deepgemm_sm100_gemm_time_s(hw: HardwareProfile, m: Any, n: Any, k: Any, weight_bytes_per_param: float,
                               in_bytes: float, out_bytes: float) -> Any:
    """DeepGEMM's SM100 fp8 GEMM with the layout of `deepgemm_sm100_layout` (K padded to its block_k of 128), timed
    as `deepgemm_sm90_gemm_time_s` times the SM90 kernel."""
    block_m, block_n, _, _ = deepgemm_sm100_layout(m, n, k, hw.num_compute_units)
    return _deepgemm_gemm_time_s(hw, m, n, k, block_m, block_n, _DEEPGEMM_SM100_BLOCK_K, weight_bytes_per_param,
                                 in_bytes, out_bytes)


# NVFP4 dense GEMM as vLLM runs it on SM100 (FlashInferCuteDslNvFp4LinearKernel, first in vLLM's NVFP4 kernel order ->
# flashinfer.mm_fp4(backend="cute-dsl"), Sm100BlockScaledPersistentDenseGemmKernel). Untuned (the operator tables;
# vLLM's warm-up skips FlashInfer's autotuner for cute-dsl mm_fp4, `_flashinfer_autotune_skip_ops`), FlashInfer
# picks the tactic analytically,
# flashinfer/gemm/kernels/utils.py `_compute_tactic_for_m` (FlashInfer PR #2940 and #3667, 2026-04/06): m is
# bucketed to the next power of two (at most 4096); for m <= 32 with n % 8 == 0 A and B are swapped (the kernel's
# rows are n, its columns the m tokens); among these (tile rows, tile cols) MMA tilers the one with the best score
# m_tiles*n_tiles * n_eff * tile_tp / (tile_m * waves) wins (n_eff: column padding; tile_tp = sqrt(area / 256^2) *
# (short / long side)^0.25, times 0.5 for tiles larger than 128x128 when k <= 1024, 0.8 when k <= 2048; tiles
# narrower than 64 columns only where they hold all columns). 256-row tilers are 2-CTA MMAs: two SMs of 128 rows.
# FlashInfer PR #3948 (2026-07-14) revised this heuristic after the tables were measured; not described.
CUTEDSL_FP4_TILES: tuple[tuple[int, int], ...] = ((128, 8), (128, 16), (128, 32), (128, 64), (256, 64), (128, 128),
                                                   (256, 128), (128, 192), (256, 192), (128, 256), (256, 256))
_CUTEDSL_FP4_MAX_M_BUCKET = 4096


def cutedsl_fp4_tactic(m: Any, n: Any, k: Any, sms: int) -> tuple[Any, Any, Any]:
    """(tile rows, tile cols, swap_ab) FlashInfer's untuned mm_fp4 cute-dsl heuristic picks, per element (the
    rows and columns are the kernel's: n and m when swapped)."""
    m, n, k = (np.asarray(x, dtype=np.float64) for x in (m, n, k))
    rep_m = np.minimum(2.0 ** np.ceil(np.log2(np.maximum(m, 1.0))), _CUTEDSL_FP4_MAX_M_BUCKET)
    swap = (n % 8 == 0) & (rep_m <= 32) & (n > rep_m)
    prob_m, prob_n = np.where(swap, n, rep_m), np.where(swap, rep_m, n)
    penalty = np.where(k <= 1024, 0.5, np.where(k <= 2048, 0.8, 1.0))
    best = np.full(np.broadcast(m, n, k).shape, -1.0)
    tile_m, tile_n = np.full(best.shape, 128.0), np.full(best.shape, 128.0)
    for tm, tn in CUTEDSL_FP4_TILES:
        n_tiles = np.ceil(prob_n / tn)
        tile_tp = math.sqrt(tm * tn / 256.0 ** 2) * (min(tm, tn) / max(tm, tn)) ** 0.25
        ns = prob_n / (n_tiles * tn) * tile_tp * (penalty if tm * tn > 128 * 128 else 1.0)
        ctas = np.ceil(prob_m / tm) * n_tiles
        score = prob_m * ctas * ns / (tm * np.ceil(ctas / sms) * sms)
        score = np.where((tn < 64) & (prob_n > tn), -np.inf, score)
        better = score > best  # strict: the first of equal scores wins, as in FlashInfer's loop
        best, tile_m, tile_n = np.where(better, score, best), np.where(better, tm, tile_m), np.where(better, tn, tile_n)
    return tile_m, tile_n, swap


def cutedsl_fp4_gemm_time_s(hw: HardwareProfile, m: Any, n: Any, k: Any, weight_bytes_per_param: float,
                            out_bytes: float) -> Any:
    """The NVFP4 GEMM kernel (tactic: `cutedsl_fp4_tactic`): a persistent kernel whose 128-row CTA tiles (a
    256-row tiler is two) run in waves over the SMs, each 2*128*tile_cols*(k + gemm_fp8_tile_fixed_k) FLOPs at
    gemm_fp8_compute_efficiency * gemm_fp4_factor of the fp4 peak per SM; bytes (fp4 activations and weights with
    their scales, the 16-bit output) at gemm_fp8_memory_efficiency, a kernel with fewer CTAs than
    gemm_fp4_saturation_fraction of the SMs drawing a proportional share; overlapped as `_overlap`; plus
    kernel_fixed_s and gemm_fp4_fixed_s (the persistent kernel's prologue)."""
    e = hw.efficiency
    sms = hw.num_compute_units
    tile_m, tile_n, swap = cutedsl_fp4_tactic(m, n, k, sms)
    rows, cols = np.where(swap, n, m), np.where(swap, m, n)
    ctas = np.ceil(rows / tile_m) * np.ceil(cols / tile_n) * (tile_m / 128.0)
    per_sm = hw.peak_flops("fp4") * e.gemm_fp8_compute_efficiency * e.gemm_fp4_factor / sms
    k_blocks = np.ceil(np.asarray(k, dtype=np.float64) / _K_BLOCK) * _K_BLOCK
    tc = np.ceil(ctas / sms) * 2.0 * 128.0 * tile_n * (k_blocks + e.gemm_fp8_tile_fixed_k) / per_sm
    moved = m * k * _NVFP4_BYTES_PER_ELEMENT + n * k * weight_bytes_per_param + m * n * out_bytes
    share = np.minimum(ctas / (e.gemm_fp4_saturation_fraction * sms), 1.0)
    tm = moved / (_bandwidth(hw) * e.gemm_fp8_memory_efficiency * share)
    t = _overlap(tc, tm, e.overlap_exponent) + e.kernel_fixed_s + e.gemm_fp4_fixed_s
    return float(t) if np.ndim(t) == 0 else t


def fp4_act_quant_time_s(hw: HardwareProfile, m: Any, k: Any, act_bytes: float) -> Any:
    """NVFP4's input quantization (vLLM `scaled_fp4_quant` -> `invokeFP4Quantization`, static global scale): one
    grid-stride kernel (min(m, SMs * 2048 / block) blocks of min(k/8, 512) threads, 8 values per thread) that
    reads the 16-bit input once and writes E2M1 values and one E4M3 scale per 16 (`streaming_act_quant_time_s`)."""
    return streaming_act_quant_time_s(hw, m, k, act_bytes, _NVFP4_BYTES_PER_ELEMENT, hw.efficiency.memory_efficiency)


def streaming_act_quant_time_s(hw: HardwareProfile, m: Any, k: Any, in_bytes: float, out_bytes: float,
                               efficiency: float) -> Any:
    """An input quantization kernel whose grid covers the scale groups (no reduction pass over the tensor, no
    per-row waves, unlike the per-tensor fp8 kernel of `act_quant_time_s`): reads m*k values of `in_bytes` and
    writes `out_bytes` per value (quantized value and its share of the group scale) at `efficiency` of the DRAM
    bandwidth, plus kernel_fixed_s. NVFP4's `fp4_act_quant_time_s`; block-scaled fp8's vLLM `per_token_group_quant_8bit`
    (csrc/quantization/w8a8/fp8/per_token_group_quant.cu: 16 groups of 128 values per thread block, each group
    loaded once, its fp32 (or packed UE8M0) scale written column-major for DeepGEMM)."""
    return m * k * (in_bytes + out_bytes) / (_bandwidth(hw) * efficiency) + hw.efficiency.kernel_fixed_s


def attention_prefill_time_s(hw: HardwareProfile, pairs: Any, bytes_moved: Any, work_units: Any, head_dim: Any,
                             dtype: str, kv_fp8: Any = False) -> Any:
    """One varlen flash-attention call's prefill part (arguments: `roofline.cost.ops.prefill_attention_shape`).

    Each computed (query, key) pair costs 4*head_dim matmul FLOPs plus attention_softmax_flops_per_pair of
    softmax work. The work tiles run on the SMs in waves (FA3's persistent scheduler): compute time =
    ceil(tiles / SMs) waves of the mean tile at attention_compute_efficiency of the peak per SM. Each wave
    after the first also pays attention_tile_fixed_s (a tile's pipeline fill: load Q and the first K/V block,
    write O; the first wave's is part of the call's fixed latency, attention_fixed_s). Bytes at
    memory_efficiency; overlap as `_overlap`; plus kernel_fixed_s + attention_fixed_s. With an fp8 KV cache
    (`kv_fp8`, a bool or an array of them) the compute efficiency is scaled by attention_fp8_kv_compute_factor.
    Where the family's kernels run the softmax on the SFU (`AttentionKernels.softmax_on_sfu`), its cost is
    divided by the chip's `exp_throughput_factor` (Blackwell Ultra: 2)."""
    e = hw.efficiency
    sms = hw.num_compute_units
    units = _max(work_units, 1.0)
    eff = e.attention_compute_efficiency * np.where(kv_fp8, e.attention_fp8_kv_compute_factor, 1.0) \
        if _any(kv_fp8) else e.attention_compute_efficiency
    per_sm = hw.peak_flops(dtype) * eff / sms
    waves = _ceil(units / sms)
    softmax = e.attention_softmax_flops_per_pair
    if attention_kernels(hw.family).softmax_on_sfu:
        softmax = softmax / hw.exp_throughput_factor
    tc = waves * pairs / units * (4.0 * head_dim + softmax) / per_sm + (waves - 1) * e.attention_tile_fixed_s
    tm = bytes_moved / (_bandwidth(hw) * e.memory_efficiency)
    return _overlap(tc, tm, e.overlap_exponent) + e.kernel_fixed_s + e.attention_fixed_s


def attention_decode_time_s(hw: HardwareProfile, flops: Any, bytes_moved: Any, work_units: Any, key_bytes: Any,
                            dtype: str, kv_fp8: Any = False) -> Any:
    """Decode attention: streams each sequence's KV cache once (split-KV kernels keep all SMs busy); each
    work unit (`roofline.cost.ops.decode_work_heads`) also pays a prologue worth `gemm_tile_fixed_k` keys of
    `key_bytes`. With an fp8 KV cache the bandwidth efficiency is scaled by attention_fp8_kv_bandwidth_factor.
    Where the family's decode kernel runs its work units in waves (`AttentionKernels.decode_waves`: TRT-LLM's
    persistent generation kernels once the units fill the SMs; FA2's split-KV kernel, one CTA per SM), each wave
    after the first pays
    attention_tile_fixed_s, as prefill tiles do."""
    return attention_decode_time_of_terms_s(attention_decode_terms(hw, work_units, key_bytes, dtype, kv_fp8), flops,
                                            bytes_moved)


class DecodeAttentionTerms(NamedTuple):
    """The parts of `attention_decode_time_s` that depend on the device, the dtypes and the work units alone (not on
    the FLOPs and bytes of the contexts), so that a caller timing many steps of one batch size computes them once."""

    compute_flops_per_s: Any  # peak at the attention compute efficiency
    prologue_bytes: Any  # the work units' prologues
    bandwidth_bytes_per_s: Any  # at the attention memory efficiency (fp8-scaled)
    overlap_exponent: float
    kernel_fixed_s: float
    attention_fixed_s: float
    waves_s: Any  # the waves after the first (`AttentionKernels.decode_waves`), else None


def attention_decode_terms(hw: HardwareProfile, work_units: Any, key_bytes: Any, dtype: str,
                           kv_fp8: Any = False) -> DecodeAttentionTerms:
    e = hw.efficiency
    eff = e.attention_memory_efficiency * np.where(kv_fp8, e.attention_fp8_kv_bandwidth_factor, 1.0) \
        if _any(kv_fp8) else e.attention_memory_efficiency
    kernels = attention_kernels(hw.family)
    prologue = work_units * e.gemm_tile_fixed_k * key_bytes if kernels.decode_unit_prologue else 0.0
    waves = (_ceil(_max(work_units, 1.0) / hw.num_compute_units) - 1) * e.attention_tile_fixed_s \
        if kernels.decode_waves else None
    return DecodeAttentionTerms(hw.peak_flops(dtype) * e.attention_compute_efficiency, prologue, _bandwidth(hw) * eff,
                                e.overlap_exponent, e.kernel_fixed_s, e.attention_fixed_s, waves)


def attention_decode_time_of_terms_s(terms: DecodeAttentionTerms, flops: Any, bytes_moved: Any) -> Any:
    """`attention_decode_time_s` from its `attention_decode_terms`: the same floats."""
    compute_rate, prologue, bandwidth, p, kernel_fixed_s, attention_fixed_s, waves_s = terms
    tc = flops / compute_rate
    tm = (bytes_moved + prologue) / bandwidth
    t = _overlap(tc, tm, p) + kernel_fixed_s + attention_fixed_s
    if waves_s is not None:
        t = t + waves_s
    return t


def simt_gemm_time_s(hw: HardwareProfile, m: Any, n: Any, k: Any, weight_bytes_per_param: float) -> Any:
    """An fp32 GEMM at PyTorch's "highest" float32 matmul precision (cuBLAS SGEMM on the CUDA cores, fp32 in and
    out): a roofline of its FLOPs at the fp32 peak and its bytes at the DRAM rate, at the family's fitted GEMM
    compute and memory efficiencies, plus kernel_fixed_s. No tensor-core tile padding: cuBLAS runs small-m fp32
    problems as GEMV or small SIMT tiles. An assumption: no operator table times fp32 GEMMs (aiconfigurator-core
    0.12.0's vLLM GEMM tables hold bf16, fp8, fp8-block and NVFP4 only)."""
    e = hw.efficiency
    tc = 2.0 * m * n * k / (hw.peak_flops("fp32") * e.gemm_compute_efficiency)
    tm = (4.0 * m * k + weight_bytes_per_param * n * k + 4.0 * m * n) / (_bandwidth(hw) * e.memory_efficiency)
    return _overlap(tc, tm, e.overlap_exponent) + e.kernel_fixed_s


def memory_op_time_s(hw: HardwareProfile, bytes_moved: Any, num_kernels: int) -> Any:
    return bytes_moved / (_bandwidth(hw) * hw.efficiency.memory_efficiency) + num_kernels * hw.efficiency.kernel_fixed_s


def moe_bandwidth_cap(hw: HardwareProfile, dtype: str) -> float:
    """The highest bandwidth factor a fused-MoE kernel in `dtype` takes (`moe_time_s`): the factor multiplies the
    dense GEMMs' memory efficiency (gemm_fp8_memory_efficiency for 8-bit and fp4, else memory_efficiency), not the
    peak, so a fused-MoE kernel may stream its weights faster than the dense GEMM kernel, never faster than the
    DRAM."""
    e = hw.efficiency
    return 1.0 / (e.gemm_fp8_memory_efficiency if dtype in _EIGHT_BIT or dtype == "fp4" else e.memory_efficiency)


def moe_row_tiles(loads: np.ndarray) -> tuple[np.ndarray, Callable[[int], np.ndarray]]:
    """For per-expert token loads (rows x experts): the experts each row touches, and `moe_time_s`'s `row_tiles`
    (tile height -> the row tiles of all experts together, sum over experts of ceil(load / tm); computed once per
    height)."""
    tiles: dict[int, np.ndarray] = {}

    def row_tiles(tm: int) -> np.ndarray:
        if tm not in tiles:
            tiles[tm] = np.ceil(loads / tm).sum(axis=1)
        return tiles[tm]

    return (loads > 0).sum(axis=1).astype(np.float64), row_tiles


def moe_time_s(hw: HardwareProfile, tokens_per_expert: Any, touched: Any, hidden: Any, inter: Any, dtype: str,
               weight_bytes_per_param: float, act_bytes: float, scheme: str | None = None,
               row_tiles: Callable[[int], Any] | None = None, num_experts: Any = None, num_tokens: Any = None,
               gated: Any = True) -> Any:
    """Fused MoE: grouped gate_up (n = 2*inter, k = hidden) and down (n = hidden, k = inter) GEMMs over the
    touched experts, SiLU-and-mul between, plus the fixed routing/sort/combine cost. `gated` False (per row where
    arrays): experts without a gate, one up projection (n = inter) and an elementwise activation between, as vLLM
    runs Nemotron-H's relu2 experts (`is_act_and_mul` False: w13 holds one shard, not two); the SwiGLU-only
    kernels (MXFP4 on Blackwell, MXFP8 activations, Marlin) take gated experts only. On `TRTLLM_MOE_FAMILIES`
    (FlashInfer's TRT-LLM-gen MoE, every format but Marlin) its finalize pass is added (`_trtllm_finalize_s`):
    `num_tokens`, the layer's tokens, is needed there; its block-fp8 experts (`TRTLLM_WIDE_TILE_SCHEMES`) stream
    their weights at `moe_trtllm_wide_tile_bandwidth_factor` of their bandwidth once the token tile passes 8
    (`trtllm_tile_tokens`, which needs `num_experts`).

    Each weight format runs other kernels in vLLM 0.32 (the fused-MoE oracles, layers/fused_moe/oracle/):
    `scheme` (`roofline.cost.quant` names; None: fp8 for an 8-bit dtype, else bf16) picks the factor of the GEMM
    efficiency and bandwidth they reach and their fixed cost (`roofline.cost.params`):
    bf16 (Triton / FlashInfer) moe_compute_efficiency (compute only) and moe_fixed_s; per-tensor fp8
    (FlashInfer CUTLASS / TRT-LLM) moe_fp8_*, its grouped GEMMs no faster than streaming the touched experts'
    weights at moe_fp8_weight_rate, plus moe_fp8_expert_fixed_s per touched expert; block-scaled fp8
    (Triton w8a8 block on Hopper, FlashInfer TRT-LLM on Blackwell with its token tiles, `TRTLLM_MOE_TILES_8BIT`)
    moe_fp8_block_*; MXFP4 W4A16 (OAI Triton on
    Hopper; TRT-LLM mxfp4-bf16 on Blackwell, `_mxfp4_bf16_moe_s`, which needs `num_tokens`: 4-bit weights
    dequantized in the kernel, bf16 math) moe_w4a16_*;
    NVFP4 W4A4 (FlashInfer CUTLASS / TRT-LLM at the fp4 peak on Blackwell) moe_fp4_*; MXFP4 on Marlin
    ("mxfp4-marlin", `--moe-backend marlin`: W4A16, `marlin_moe_gemm_time_s` given `num_experts`) moe_w4a16_marlin_*;
    MXFP4 with MXFP8 activations ("mxfp4-mxfp8", `--moe-backend flashinfer-mxfp4-mxfp8`, `dtype` fp8:
    `_mxfp4_mxfp8_moe_s`, which needs `num_tokens`) moe_mxfp4_mxfp8_* (each: a compute factor, a bandwidth factor
    and a fixed cost).
    `row_tiles` (`gemm_time_s`): the experts' unequal token counts, as the operator tables route them
    (`roofline.calibration.moe_routing`); the serving model spreads a step's tokens evenly over the touched experts.
    `num_experts` (the layer's experts on the rank; Marlin only): Marlin's row blocks are one height per call chosen
    from the mean tokens per expert (`marlin_moe_block_size_m`); without it the tile follows the tokens per
    touched expert as for the other W4A16 kernels."""
    e = hw.efficiency
    if scheme is None:
        scheme = "fp8" if dtype in _EIGHT_BIT else "none"
    eff_scale, bw_scale, fixed_s = {
        # Per-tensor fp8 experts (FlashInfer CUTLASS / TRT-LLM) may outrun the dense fp8 GEMM kernel the factor is
        # relative to, never the peaks: factor x that kernel's efficiency is at most 1.
        "fp8": (min(e.moe_fp8_gemm_factor, 1.0 / e.gemm_fp8_compute_efficiency),
                min(e.moe_fp8_gemm_factor, 1.0 / e.gemm_fp8_memory_efficiency), e.moe_fp8_fixed_s),
        "fp8-block": (e.moe_fp8_block_gemm_factor, e.moe_fp8_block_bandwidth_factor, e.moe_fp8_block_fixed_s),
        "mxfp4": (e.moe_w4a16_gemm_factor, e.moe_w4a16_bandwidth_factor, e.moe_w4a16_fixed_s),
        "mxfp4-marlin": (e.moe_w4a16_marlin_gemm_factor, e.moe_w4a16_marlin_bandwidth_factor,
                         e.moe_w4a16_marlin_fixed_s),
        "nvfp4": (e.moe_fp4_gemm_factor, e.moe_fp4_bandwidth_factor, e.moe_fp4_fixed_s),
        "mxfp4-mxfp8": (e.moe_mxfp4_mxfp8_gemm_factor, e.moe_mxfp4_mxfp8_bandwidth_factor, e.moe_mxfp4_mxfp8_fixed_s),
    }.get(scheme, (e.moe_compute_efficiency, 1.0, e.moe_fixed_s))
    bw_scale = min(bw_scale, moe_bandwidth_cap(hw, dtype))
    # Inputs: 8-bit for W8A8; fp4 with an fp8 scale per 16 for W4A4 on a device with fp4; else 16-bit.
    in_b = 1.0 if dtype in _EIGHT_BIT else (0.5 + 1.0 / 16 if dtype == "fp4" else act_bytes)
    tiles = MOE_W4A16_TILES if scheme in ("mxfp4", "mxfp4-marlin") else None
    trtllm = TRTLLM_MOE_TILES_8BIT if scheme == "fp8-block" and hw.family in TRTLLM_MOE_FAMILIES else None
    weights_bw: Any = bw_scale
    if hw.family in TRTLLM_MOE_FAMILIES and scheme in TRTLLM_WIDE_TILE_SCHEMES:
        assert num_experts is not None, "the TRT-LLM MoE's token tile follows the tokens per expert: num_experts"
        wide = trtllm_tile_tokens(tokens_per_expert * touched, num_experts) > 8
        weights_bw = bw_scale * np.where(wide, e.moe_trtllm_wide_tile_bandwidth_factor, 1.0)
    kw = dict(weight_bytes_per_param=weight_bytes_per_param, in_bytes=in_b, out_bytes=act_bytes, groups=touched,
              eff_scale=eff_scale, bw_scale=weights_bw, tiles=tiles, cublas=False, row_tiles=row_tiles,
              tiles_8bit=trtllm)
    swiglu_only = scheme in ("mxfp4-mxfp8", "mxfp4-marlin") or (scheme == "mxfp4"
                                                                  and hw.family in MXFP4_BF16_TRTLLM_FAMILIES)
    assert not swiglu_only or np.all(gated), f"{scheme} experts are gated (SwiGLU) only"
    if scheme == "mxfp4-mxfp8":
        if row_tiles is None and num_experts is not None:  # serving: each expert's own count (as for Marlin)
            kw["row_tiles"] = _poisson_row_tiles(tokens_per_expert * touched / num_experts, num_experts)
        return _mxfp4_mxfp8_moe_s(hw, tokens_per_expert, touched, hidden, inter, num_tokens, act_bytes,
                                  {**kw, "tiles": None, "tiles_8bit": TRTLLM_MXFP8_MOE_TILES_8BIT}) + fixed_s
    if scheme == "mxfp4" and hw.family in MXFP4_BF16_TRTLLM_FAMILIES:
        if row_tiles is None and num_experts is not None:  # serving: each expert's own count (as for MXFP8)
            kw["row_tiles"] = _poisson_row_tiles(tokens_per_expert * touched / num_experts, num_experts)
        return _mxfp4_bf16_moe_s(hw, tokens_per_expert, touched, hidden, inter, dtype, num_tokens, act_bytes,
                                 {**kw, "tiles_8bit": None}) + fixed_s
    # Up projections out (2 x inter a routed token gated, inter not) read by the activation, its inter values written.
    up_width = np.where(gated, 2.0, 1.0) if not isinstance(gated, bool) else (2.0 if gated else 1.0)
    act = tokens_per_expert * touched * (up_width + 1.0) * inter * act_bytes / (_bandwidth(hw) * e.memory_efficiency)
    if scheme == "mxfp4-marlin" and num_experts is not None:
        return _marlin_gemms_s(hw, tokens_per_expert, touched, hidden, inter, dtype, num_experts, kw) + act + fixed_s
    up = gemm_time_s(hw, tokens_per_expert, up_width * inter, hidden, dtype, **kw)
    down = gemm_time_s(hw, tokens_per_expert, hidden, inter, dtype, **kw)
    if hw.family in TRTLLM_MOE_FAMILIES:  # FlashInfer's TRT-LLM fused MoE: its finalize kernel after GEMM2
        assert num_tokens is not None, "the TRT-LLM MoE's finalize pass sums per token: num_tokens is needed"
        act = act + _trtllm_finalize_s(hw, tokens_per_expert * touched, num_tokens, hidden, act_bytes)
    if scheme == "fp8":  # per-tensor fp8's grouped GEMMs: weights streamed at most at moe_fp8_weight_rate, and a
        # time per touched expert (moe_fp8_expert_fixed_s)
        weights_s = touched * (up_width + 1.0) * hidden * inter * weight_bytes_per_param / e.moe_fp8_weight_rate
        return _max(up + down, weights_s) + act + fixed_s + touched * e.moe_fp8_expert_fixed_s
    return up + down + act + fixed_s


def _mxfp4_mxfp8_moe_s(hw: HardwareProfile, tokens_per_expert: Any, touched: Any, hidden: Any, inter: Any,
                       num_tokens: Any, act_bytes: float, kw: dict[str, Any]) -> Any:
    """FlashInfer's TRT-LLM fused MoE on MXFP4 weights with MXFP8 activations (vLLM `SM100_FI_MXFP4_MXFP8_TRTLLM`,
    `TrtLlmMxfp4Experts*`), less its fixed cost: vLLM quantizes the layer's input to MXFP8 (FlashInfer
    `mxfp8_quantize`: one pass over the `num_tokens` x hidden bf16 input, E4M3 values and an E8M0 scale per 32
    out); the kernel's GEMM1 (gate_up, E4M3 x E2M1 block-scaled MMA at the fp8 peak) applies the SwiGLU in its
    epilogue and writes the intermediate as MXFP8 (per routed token `inter` values, not 2 x inter 16-bit ones: no
    separate activation kernel); GEMM2 (down) writes bf16 per routed token; finalize sums each token's top-k
    outputs (reads the routed rows, writes the tokens). Tokens tile by `TRTLLM_MXFP8_MOE_TILES_8BIT` (serving: each
    expert's own Poisson count padded to whole tiles, `_poisson_row_tiles`, not an even spread, which at exactly 8.002
    tokens per expert would count two 8-token tiles for every expert), and each
    token tile streams its expert's weight tile (128 weight rows x k) again: an expert of 9 tokens, two 8-token
    tiles, moves its weights twice. The B200 table shows it: DeepSeek-V4's 7168 x 3072 experts, 512 -> 768 tokens
    (8 -> 12 per expert, one tile -> two) 2.00 -> 2.82 ms at the same weight bytes. Without the re-reads the
    held-out median error was 12.5-16.4 % (B200, B300, GB200; each distribution), the two-tile rows predicted
    0.65-0.8x and the one-tile rows of large experts 1.15-1.27x; with them 6.4-10.2 % (benchmarks/accuracy/moe_accuracy.py
    `run_mxfp8`)."""
    assert num_tokens is not None, "the MXFP8 path quantizes the layer's input: num_tokens is needed"
    e = hw.efficiency
    routed = tokens_per_expert * touched
    quant = streaming_act_quant_time_s(hw, num_tokens, hidden, act_bytes, _MXFP8_BYTES_PER_ELEMENT,
                                       e.memory_efficiency)
    args = {**kw, "in_bytes": _MXFP8_BYTES_PER_ELEMENT}
    # Every token tile streams its expert's weight tile again (the first read from DRAM, the others wherever they
    # are): weights moved = the experts' token tiles x their weights, at the fitted bandwidth.
    tiles_per_expert = _token_tiles(kw["row_tiles"], touched, tokens_per_expert) / _max(touched, 1e-30)
    args["weight_bytes_per_param"] = kw["weight_bytes_per_param"] * tiles_per_expert
    up = gemm_time_s(hw, tokens_per_expert, 2 * inter, hidden, "fp8",
                     **{**args, "out_bytes": _MXFP8_BYTES_PER_ELEMENT / 2})  # SwiGLU: 2 x inter in, inter out
    down = gemm_time_s(hw, tokens_per_expert, hidden, inter, "fp8", **args)
    return quant + up + down + _trtllm_finalize_s(hw, routed, num_tokens, hidden, act_bytes)


def _trtllm_finalize_s(hw: HardwareProfile, routed: Any, num_tokens: Any, hidden: Any, act_bytes: float) -> Any:
    """The TRT-LLM-gen fused MoE's finalize kernel (`TRTLLM_MOE_FAMILIES`): each token's top-k GEMM2 rows (bf16,
    `routed` of them) read, weighted and summed into its output row (`num_tokens` written), a streaming pass. It is
    a cost per routed token that does not shrink with the experts' width: on B200's NVFP4 table (hidden 4096, top-8
    of 256, 16,384 tokens) the layer takes 581 us at intermediate 128 a rank and 579 us at 64."""
    return (routed + num_tokens) * hidden * act_bytes / (_bandwidth(hw) * hw.efficiency.memory_efficiency)


def _mxfp4_bf16_moe_s(hw: HardwareProfile, tokens_per_expert: Any, touched: Any, hidden: Any, inter: Any,
                      dtype: str, num_tokens: Any, act_bytes: float, kw: dict[str, Any]) -> Any:
    """FlashInfer's TRT-LLM fused MoE on MXFP4 weights with bf16 activations (vLLM's default MXFP4 MoE on
    Blackwell, `FLASHINFER_TRTLLM_MXFP4_BF16`, `TrtLlmMxfp4ExpertsMonolithic`), less its fixed cost: as
    `_mxfp4_mxfp8_moe_s` without the input quantization, the math at the 16-bit peak (E2M1 weights converted in
    the kernel), the tokens in `TRTLLM_MXFP4_BF16_MOE_TILES` tiles, each token tile streaming its expert's weight
    tile again; GEMM1's epilogue applies the SwiGLU and writes `inter` bf16 values per routed token (no separate
    activation kernel); finalize sums each token's top-k outputs. Without the re-reads (the 16-128-row tiles of
    `MOE_W4A16_TILES`, one pass over the weights, fitted per chip) the held-out median error on B200 was 15.2-16.9 %
    (+9 % bias; benchmarks/accuracy/moe_accuracy.py)."""
    assert num_tokens is not None, "the TRT-LLM MoE's finalize pass sums per token: num_tokens is needed"
    bands = TRTLLM_MXFP4_BF16_MOE_TILES
    tiles_per_expert = _token_tiles(kw["row_tiles"], touched, tokens_per_expert, bands) / _max(touched, 1e-30)
    args = {**kw, "weight_bytes_per_param": kw["weight_bytes_per_param"] * tiles_per_expert}

    def at(tm: int) -> Any:  # the 16-bit path takes the best of `tiles`: one tile, the kernel's
        a = {**args, "tiles": ((tm, 128),)}
        return (gemm_time_s(hw, tokens_per_expert, 2 * inter, hidden, dtype, **{**a, "out_bytes": act_bytes / 2})
                + gemm_time_s(hw, tokens_per_expert, hidden, inter, dtype, **a))

    return (_at_tile_heights(trtllm_mxfp4_moe_tile_tokens(tokens_per_expert, bands), at)
            + _trtllm_finalize_s(hw, tokens_per_expert * touched, num_tokens, hidden, act_bytes))


def trtllm_mxfp4_moe_tile_tokens(tokens_per_expert: Any, bands: tuple[tuple[float, tuple[tuple[float, tuple[int, int]],
                                                                                 ...]], ...]
                          = TRTLLM_MXFP8_MOE_TILES_8BIT) -> Any:
    """The TRT-LLM MXFP4 MoE's token tile height for `tokens_per_expert`: with MXFP8 activations
    (`TRTLLM_MXFP8_MOE_TILES_8BIT`) or the `bands` of another activation (`TRTLLM_MXFP4_BF16_MOE_TILES`)."""
    x = np.asarray(tokens_per_expert, dtype=np.float64)
    out = np.select([x <= hi for hi, _ in bands[:-1]], [float(by_n[0][1][0]) for _, by_n in bands[:-1]],
                    float(bands[-1][1][0][1][0]))
    return float(out) if out.ndim == 0 else out


def _token_tiles(row_tiles: Callable[[int], Any] | None, touched: Any, tokens_per_expert: Any,
                 bands: tuple[tuple[float, tuple[tuple[float, tuple[int, int]], ...]], ...]
                 = TRTLLM_MXFP8_MOE_TILES_8BIT) -> Any:
    """Token tiles of all touched experts at the TRT-LLM MXFP4 MoE's tile height (`trtllm_mxfp4_moe_tile_tokens` of
    `bands`): `row_tiles` (the tables' loads) or `touched` experts of `tokens_per_expert` each."""
    tm = trtllm_mxfp4_moe_tile_tokens(tokens_per_expert, bands)
    if row_tiles is None:
        return touched * _ceil(tokens_per_expert / tm)
    return _at_tile_heights(tm, row_tiles)


def _at_tile_heights(tm: Any, at: Callable[[int], Any]) -> Any:
    """`at(tile height)` for each element's own tile height `tm` (a float: one height), each height evaluated once."""
    if isinstance(tm, float):
        return at(int(tm))
    out = np.zeros(np.shape(tm))
    for b in np.unique(tm):
        out = np.where(tm == b, at(int(b)), out)
    return out


def _marlin_gemms_s(hw: HardwareProfile, tokens_per_expert: Any, touched: Any, hidden: Any, inter: Any, dtype: str,
                    num_experts: Any, kw: dict[str, Any]) -> Any:
    """Marlin's gate_up and down grouped GEMMs (`marlin_moe_gemm_time_s`) at vLLM's block_size_m
    (`marlin_moe_block_size_m` of the routed tokens over all the layer's experts); each row its own height."""
    routed_per_expert = tokens_per_expert * touched / num_experts
    block_m = marlin_moe_block_size_m(routed_per_expert)
    args = {name: kw[name] for name in ("weight_bytes_per_param", "in_bytes", "out_bytes", "eff_scale", "bw_scale",
                                        "row_tiles")}
    if args["row_tiles"] is None:  # serving: each expert's own random count, padded to whole blocks
        args["row_tiles"] = _poisson_row_tiles(routed_per_expert, num_experts)

    def at(b: int) -> Any:
        return (marlin_moe_gemm_time_s(hw, tokens_per_expert, 2 * inter, hidden, dtype, touched, b, **args)
                + marlin_moe_gemm_time_s(hw, tokens_per_expert, hidden, inter, dtype, touched, b, **args))

    return _at_tile_heights(float(block_m) if isinstance(block_m, int) else block_m, at)


def _poisson_row_tiles(routed_per_expert: Any, num_experts: Any) -> Callable[[int], Any]:
    """Serving's row tiles (`gemm_time_s` `row_tiles`): each of `num_experts` experts gets its own Poisson count of
    mean `routed_per_expert` (uniform random routing), padded to whole tiles: tile height b -> E * E[ceil(X / b)]
    (computed once per height). moe_align_block_size pads every expert's own count, so spreading the tokens evenly
    would undercount the blocks where the mean is near a multiple of b: top-4 of 128 at 2048 / 4096 / 8192 tokens,
    64-row blocks, 1.47 / 1.24 / 1.12x the blocks of the even spread."""
    x, pmf = _poisson_pmf(routed_per_expert)
    blocks: dict[int, Any] = {}

    def row_tiles(b: int) -> Any:
        if b not in blocks:
            blocks[b] = num_experts * (pmf * np.ceil(x / b)).sum(axis=-1)
        return blocks[b]

    return row_tiles


def _poisson_pmf(mean: Any) -> tuple[np.ndarray, np.ndarray]:
    """(x, Poisson pmf at x for each mean: shape mean.shape + x.shape) over a window of x holding all but ~1e-20 of
    every mean's mass (12 standard deviations either side)."""
    lam = np.asarray(mean, dtype=np.float64)
    lo_mean, hi_mean = (float(lam.min()), float(lam.max())) if lam.size else (0.0, 0.0)
    lo = max(0, int(lo_mean - 12.0 * math.sqrt(hi_mean) - 20.0))
    x = np.arange(lo, int(np.ceil(hi_mean + 12.0 * math.sqrt(hi_mean) + 20.0)) + 1, dtype=np.float64)
    log_factorial = np.cumsum(np.log(np.maximum(np.arange(1.0, x[-1] + 1.0), 1.0)))[x.astype(np.int64) - 1] \
        if x[-1] >= 1 else np.zeros_like(x)
    log_factorial = np.where(x == 0, 0.0, log_factorial)
    lam_ = np.maximum(lam, 1e-300)[..., None]
    return x, np.exp(x * np.log(lam_) - lam_ - log_factorial)


# Thread blocks per SM the Marlin MoE kernel launches at most (csrc/moe/marlin_moe_wna16/ops.cu
# `determine_exec_config`: 4 for one 16-row MMA block, else 2; fewer for a small problem).
_MARLIN_BLOCKS_PER_SM = {True: 4, False: 2}


def marlin_moe_gemm_time_s(hw: HardwareProfile, m: Any, n: Any, k: Any, dtype: str, groups: Any, block_m: int,
                           weight_bytes_per_param: float, in_bytes: float, out_bytes: float, eff_scale: float,
                           bw_scale: float, row_tiles: Callable[[int], Any] | None = None) -> Any:
    """One Marlin MoE GEMM (vLLM csrc/moe/marlin_moe_wna16, `moe_wna16_marlin_gemm`) over `groups` experts of m
    tokens each (or `row_tiles`), in moe blocks of `block_m` rows.

    The kernel is persistent: sms * blocks_per_sm thread blocks share the problem's tile iterations (moe blocks x
    n tiles x k tiles of thread_n x thread_k: `small_batch_thread_configs` 128 x 128 for block_m <= 16, k 64 where
    k is not a multiple of 128; `large_batch_thread_configs` 256 x 64, n 128 where n is not a multiple of 256) in
    equal stripes along k, partial sums reduced in global memory. blocks_per_sm: at most 4 (block_m <= 16) or 2,
    and at most n_tiles * routed tokens * 4 / SMs (`determine_exec_config`). Compute: the busiest SM's share of
    the tile iterations plus, per slice (moe block x n tile), the family's per-tile cost gemm_tile_fixed_k, at
    the compute factor; bytes: each touched expert's weights once, the activations in and out, at the bandwidth
    factor; the two overlap (`_overlap`); plus kernel_fixed_s. Every moe block is computed in full, so a token
    alone on its expert costs block_m rows, and a call's slices grow with the moe blocks (top-k x tokens at
    decode), not with its bytes."""
    e = hw.efficiency
    sms = hw.num_compute_units
    one_block = block_m <= 16
    tn = np.where(one_block | (n % 256 != 0), 128.0, 256.0)
    tk = np.where(one_block & (k % 128 == 0), 128.0, 64.0)
    moe_blocks = groups * _ceil(m / block_m) if row_tiles is None else row_tiles(block_m)
    units = moe_blocks * _ceil(n / tn) * _ceil(k / tk)
    routed = m * groups
    cap = _MARLIN_BLOCKS_PER_SM[one_block]
    per_sm_blocks = np.clip(np.floor(_ceil(n / tn) * routed * 4.0 / sms), 1.0, cap)
    iters = _ceil(units / (sms * per_sm_blocks))
    per_sm = hw.peak_flops(dtype) * e.gemm_compute_efficiency * eff_scale / sms
    # Each slice (one moe block x one n tile) also pays the family's per-tile cost (gemm_tile_fixed_k: prologue,
    # epilogue and, split along k, the reduction of its partial sums), shared out over the thread blocks.
    slices = moe_blocks * _ceil(n / tn)
    k_work = iters * tk + _ceil(slices / (sms * per_sm_blocks)) * e.gemm_tile_fixed_k
    tc = k_work * per_sm_blocks * 2.0 * block_m * tn / per_sm
    bw = _bandwidth(hw) * e.memory_efficiency * bw_scale
    moved = groups * n * k * weight_bytes_per_param + routed * (k * in_bytes + n * out_bytes)
    return _overlap(tc, moved / bw, e.overlap_exponent) + e.kernel_fixed_s


def _link(hw: HardwareProfile, num_devices: Any) -> tuple[float, float]:
    """(bandwidth per direction, alpha) of the link a collective over `num_devices` uses, the bandwidth at the
    two-stage (bus) efficiency."""
    e = hw.efficiency
    return _link_bandwidth(hw) * e.collective_bus_efficiency, _link_latency_s(hw) * e.collective_latency_scale


def _link_bandwidth(hw: HardwareProfile) -> float:
    ic = hw.interconnect
    if ic is not None:
        return ic.bandwidth_bytes_per_s_per_direction
    return hw.pcie_bandwidth_bytes_per_s_per_direction or 16e9  # PCIe 3 x16 when the profile has none


def _link_latency_s(hw: HardwareProfile) -> float:
    return hw.interconnect.latency_s if hw.interconnect is not None else _PCIE_COLLECTIVE_LATENCY_S


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
_ALL_REDUCE_ALGORITHMS = {"ada": PCIE_ALL_REDUCE, "hopper": HOPPER_ALL_REDUCE}
# EfficiencyParams fields only the NCCL ring reads (a family whose all-reduce never runs it does not fit them).
NCCL_PARAMS = ("nccl_bus_efficiency", "nccl_step_s")


def all_reduce_algorithms(family: str | None) -> AllReduceAlgorithms:
    """The all-reduce algorithms vLLM runs on a kernel family's systems; the custom all-reduce by default."""
    return _ALL_REDUCE_ALGORITHMS.get(family or "", CUSTOM_ALL_REDUCE)


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
    algorithms = all_reduce_algorithms(hw.family)
    if not algorithms.runs_nccl:
        return custom
    ring_bw = _link_bandwidth(hw) * e.nccl_bus_efficiency
    ring_bytes = 2 * (n - 1) * message_bytes if algorithms.ring_shares_link else 2 * (n - 1) / n * message_bytes
    ring = 2 * (n - 1) * e.nccl_step_s + ring_bytes / ring_bw + e.kernel_fixed_s
    if algorithms.custom_max_bytes:
        return _where(message_bytes <= algorithms.custom_limit_bytes(n), custom, ring + copy)
    return _where(n <= algorithms.custom_max_devices, custom, ring)


def all_gather_time_s(hw: HardwareProfile, message_bytes: Any, num_devices: Any) -> Any:
    bw, alpha = _link(hw, num_devices)
    return alpha + (num_devices - 1) / num_devices * message_bytes / bw + hw.efficiency.kernel_fixed_s


# ---- one operator record -> seconds ------------------------------------------------------------------------


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
        if op.dtype in _EIGHT_BIT or op.dtype == "fp4":
            kernels = 2
    elif op.kind == "attention_prefill":
        pairs, moved, tiles, head_dim = op.shape
        t = attention_prefill_time_s(hw, pairs, moved, tiles, head_dim, op.dtype, quant.kv_dtype == "fp8")
    elif op.kind == "attention_decode":
        flops, moved, units, key_bytes = op.shape
        t = attention_decode_time_s(hw, flops, moved, units, key_bytes, op.dtype, quant.kv_dtype == "fp8")
    elif op.kind == "moe":
        tpe, touched, hidden, inter, num_experts, num_tokens = op.shape
        w_param = op.weight_bytes / (c * _max(touched, 1e-30) * 3 * hidden * inter)
        t = moe_time_s(hw, tpe, touched, hidden, inter, op.dtype, w_param, quant.act_bytes, quant.expert_kernel,
                       num_experts=num_experts, num_tokens=num_tokens)
        kernels = 6  # topk softmax, align/sort, gate_up, act, down, combine (vLLM fused_moe)
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
    return c * t, kernels


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
            (e.gemm_fp8_compute_efficiency if dtype in _EIGHT_BIT else e.gemm_compute_efficiency)
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


# ---- a whole step ------------------------------------------------------------------------------------------


class _ExactPowArray(np.ndarray):
    """A float64 array whose `**` is computed element by element by C `pow` (Python's `**` on floats,
    `math.pow` and numpy's on scalars call it too), every other ufunc as usual, results staying of this class.
    numpy's `power` on float64 arrays is vectorized (SIMD: SVML on AVX-512) and differs from C `pow` in the last
    bit for about 5 % of inputs; `float_power` has no SIMD loop and calls `npy_pow`, which is C `pow`, per
    element (checked equal to `math.pow` bit for bit on 4 M random bit patterns and exponents, 0, -0, inf,
    NaN and subnormals; 3.5-10x faster than mapping `math.pow`). So the formulas evaluated on arrays give the floats
    of `step_cost`'s scalar evaluation (`StepCostModel.breakdown_columns`)."""

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        plain = [x.view(np.ndarray) if isinstance(x, _ExactPowArray) else x for x in inputs]
        if ufunc is np.power and method == "__call__" and not kwargs:
            ufunc = np.float_power  # (float64 for any real input, as C pow takes)
        out = getattr(ufunc, method)(*plain, **kwargs)
        return out.view(_ExactPowArray) if isinstance(out, np.ndarray) else out


def _segment_sums(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """`np.add.reduceat(values, starts, dtype=np.int64)` of an integer array's non-empty segments (`lengths`
    long), without its int64 copy of `values` (4.4 M int32 contexts: 34 MB of fresh memory, which on the
    project's VM costs more than the sum): summed in `values`' own type where no segment's sum can overflow it."""
    if len(values) and values.dtype.itemsize < 8 and int(lengths.max()) * max(
            int(values.max()), -int(values.min())) <= np.iinfo(values.dtype).max:
        return np.add.reduceat(values, starts, dtype=values.dtype).astype(np.int64)
    return np.add.reduceat(values, starts, dtype=np.int64)


def _distinct_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)` of non-negative integer columns, by
    one sort of each row's columns as one mixed-radix int64 (unique over rows sorts them as byte strings, ~10x
    slower): the distinct rows (ascending) and each row's index among them."""
    radices = [int(column.max()) + 1 if len(column) else 1 for column in columns]
    assert all(int(column.min()) >= 0 for column in columns if len(column)), "non-negative integers"
    assert math.prod(radices) < 2**63, "rows beyond one int64"
    code = np.zeros(len(columns[0]), dtype=np.int64)
    for column, radix in zip(columns, radices):
        code = code * radix + column
    codes, inverse = np.unique(code, return_inverse=True)
    rows = np.empty((len(codes), len(columns)), dtype=np.int64)
    for j in range(len(columns) - 1, -1, -1):
        codes, rows[:, j] = np.divmod(codes, radices[j])
    return rows, inverse


class _OpParts(NamedTuple):
    """Names, times (`OpCost.time_s`) and kernels (`OpCost.num_kernels`) of a list of operator records."""

    names: tuple[str, ...]
    times: tuple[float, ...]
    kernels: tuple[int, ...]


@dataclass(frozen=True)
class StepCost:
    total_s: float
    device_s: float
    host_s: float
    breakdown_s: dict[str, float]  # operator name -> seconds; plus "host_overhead" (host time not hidden)
    ops: tuple[OpCost, ...] = field(default=())
    num_kernels: int = 0
    padded_num_tokens: int = 0


# vLLM's CompilationConfig.cudagraph_mode (vllm/config/compilation.py `CUDAGraphMode`; the flag --cudagraph-mode):
# the graph a batch of decodes and a batch with prefills replays up to the largest captured size
# (vllm/v1/cudagraph_dispatcher.py: the mode's `decode_mode()` and `mixed_mode()`), "full" (one launch), "piecewise"
# (the pieces between the layers' attention calls, attention launched from the host) or None (every kernel launched
# from the host; also every batch above the largest captured size). FULL_AND_PIECEWISE is vLLM's default;
# NONE is also --enforce-eager. FULL is left out: whether its graphs take a batch with prefills depends on the
# attention backend (vLLM lowers the mode where the backend cannot).
_GRAPHS_OF_MODE: dict[str, tuple[str | None, str | None]] = {
    "FULL_AND_PIECEWISE": ("full", "piecewise"),
    "FULL_DECODE_ONLY": ("full", None),
    "PIECEWISE": ("piecewise", "piecewise"),
    "NONE": (None, None),
}
CUDAGRAPH_MODE_CHOICES = tuple(_GRAPHS_OF_MODE)
DEFAULT_CUDAGRAPH_MODE = "FULL_AND_PIECEWISE"


class StepCostModel:
    """Predicted time of engine steps for one model, device, quantization and TP degree."""

    def __init__(self, spec: ModelSpec, hw: HardwareProfile, quant: QuantConfig, tp: int = 1,
                 cpu_engine: str = DEFAULT_CPU_ENGINE, cudagraph_mode: str = DEFAULT_CUDAGRAPH_MODE,
                 capture_sizes: tuple[int, ...] | None = None) -> None:
        """`cpu_engine` (one of `CPU_ENGINES`): whose execution a `kind: cpu` profile describes; GPU profiles
        ignore it. `cudagraph_mode` (`CUDAGRAPH_MODE_CHOICES`): which batches replay CUDA graphs on a device whose
        executor captures them (`_host_time_s`); `capture_sizes`: the batch sizes they are captured for (None: the
        profile's `executor.cuda_graph_batch_sizes`; `roofline.engine_args.EngineArgs.cudagraph_capture_sizes`)."""
        # The checkpoint's per-module quantization (or --quantization), and the device's MoE kernel padding.
        quant = resolve_for_model(quant, spec)
        check_moe_backend(quant, spec, hw.id, hw.family)
        quant = resolve_for_hardware(quant, hw.family)
        self.spec, self.hw, self.quant, self.tp = spec, hw, quant, tp
        self.cpu_engine = check_cpu_engine(cpu_engine)
        if hw.kind == "cpu":
            cpu_timing.check_profile(hw)
        self.rank = RankShape.of(spec, tp)
        for dtype in {quant.act_dtype, quant.gemm_dtype}:
            hw.peak_flops(dtype)  # a dtype the device lacks is a UserError now, not mid-simulation
        # Token-count and emit-count operators tabulated in blocks of _TABLE_BLOCK counts (`_CountTable`).
        self._token_table = _CountTable(self._token_part)
        self._emit_table = _CountTable(self._emit_part)
        ex = hw.executor
        self._graph_sizes = tuple(ex.cuda_graph_batch_sizes if capture_sizes is None else capture_sizes)
        # The mode this device runs: NONE where its executor launches every kernel (`executor.mode: eager`).
        self.cudagraph_mode = cudagraph_mode if ex.mode == "cuda_graphs" else "NONE"
        graphs = _GRAPHS_OF_MODE[self.cudagraph_mode]
        # The graph that runs a batch of decodes and one with prefills, up to the largest captured size: "full",
        # "piecewise" or None (launched from the host).
        self._decode_graph, self._mixed_graph = graphs
        self._max_graph = self._graph_sizes[-1] if graphs != (None, None) else 0
        # Steps of more tokens than this replay no CUDA graph: their all-reduces take the eager path
        # (`roofline.cost.ops.all_reduce_record`); a CPU runs no CUDA all-reduce. A batch with prefills in a mode
        # without a graph for it (FULL_DECODE_ONLY) is eager at every size: its token operators are tabulated apart.
        self._graph_max_tokens = math.inf if hw.kind == "cpu" else self._max_graph
        self._mixed_eager = hw.kind != "cpu" and self._mixed_graph is None and self._max_graph > 0
        self._mixed_token_table = _CountTable(partial(self._token_part, graph_max_tokens=0)) \
            if self._mixed_eager else self._token_table
        self._attn_kernels = attention_kernels(hw.family)
        self._q_tile = attention_q_tile_tokens(spec.head_dim, self.rank.heads, self.rank.kv_heads, self._attn_kernels)
        r = self.rank
        # Per-layer constants of the attention records (`roofline.cost.ops.attention_records`), for the fast path.
        self._kv_token = 2 * r.kv_heads * r.head_dim * quant.kv_bytes_per_element
        self._q_token = r.heads * r.head_dim * quant.act_bytes
        self._kv_fp8 = quant.kv_dtype == "fp8"
        # `decode_step_time_s`'s shortcut applies (`_attention_s` takes its scalar formulas).
        self._plain_decode = hw.kind != "cpu" and not spec.sliding_window
        # `decode_sum_time_s`'s parts that depend on the number of sequences alone, by that number.
        self._decode_parts: dict[int, tuple[float, float, float]] = {}
        # `_decode_layer_s`'s, by number of decodes: their bytes of Q and O, and the time's terms.
        self._decode_terms: dict[int, tuple[float, DecodeAttentionTerms]] = {}
        self._decode_flops_per_pair = 4.0 * self.rank.heads * self.rank.head_dim  # (decode_attention_shape's order)

    # -- public API --
    @property
    def max_capture_size(self) -> int:
        """The largest batch, in tokens, that replays a CUDA graph (0: none does)."""
        return self._max_graph

    def weight_bytes_per_rank(self) -> float:
        return weight_bytes_per_rank(self.spec, self.quant, self.tp)

    def kv_bytes_per_token_per_rank(self) -> float:
        return kv_bytes_per_token_per_rank(self.spec, self.quant, self.tp)

    def step_cost(self, query_lens: np.ndarray, context_lens: np.ndarray, emits: np.ndarray) -> StepCost:
        """Every operator of the step with its FLOPs, bytes, time and bound, and the step total."""
        stats = self._stats(query_lens, context_lens, emits)
        padded = self._padded_tokens(stats.num_tokens, stats.num_prefill_seqs > 0)
        ops = self._step_ops(replace(stats, num_tokens=padded))
        k = self.hw.executor.kernels_per_elementwise_op
        costs = tuple(op_cost(self.hw, op, self.quant, k, self.cpu_engine) for op in ops)
        device_s = sum(c.time_s for c in costs)
        num_kernels = sum(c.num_kernels for c in costs)
        host_s, launch_s = self._host_s(stats, num_kernels)
        total_s = self._combine(device_s, host_s, launch_s)
        breakdown = {c.name: c.time_s for c in costs}
        breakdown["host_overhead"] = total_s - device_s
        return StepCost(total_s=total_s, device_s=device_s, host_s=host_s, breakdown_s=breakdown, ops=costs,
                        num_kernels=num_kernels, padded_num_tokens=padded)

    def step_time_s(self, query_lens: np.ndarray, context_lens: np.ndarray, emits: np.ndarray) -> float:
        """`step_cost(...).total_s`, fast (the simulator calls it once per step): the batch is aggregated once
        (`BatchStats`), the token- and emit-dependent operators are cached per count, and attention is the
        same scalar formulas on the aggregates, without building records."""
        return self._stats_time_s(self._stats(query_lens, context_lens, emits))

    def decode_step_time_s(self, context_lens: np.ndarray) -> float:
        """`step_time_s` of a step of decodes only, from their context lengths. On a GPU without sliding windows
        the step depends on the number of sequences and the sum of their contexts only: `_stats_time_s`'s
        arithmetic on those two, in its order, without building a `BatchStats` (the simulator's most common call)."""
        if not self._plain_decode:
            return self._stats_time_s(BatchStats.from_decode_contexts(context_lens, self.spec.sliding_window,
                                                                      self.spec.is_hybrid_attention))
        n = int(context_lens.size)
        if not n:
            return self._stats_time_s(BatchStats.from_decode_contexts(context_lens))
        return self.decode_sum_time_s(n, int(_sum(context_lens)))

    @property
    def rows_suffice(self) -> bool:
        """Whether `step_time_s_of_rows` applies: a model without sliding windows (its decodes enter a step's
        `BatchStats` as a count, a context sum and a context maximum)."""
        return not self.spec.sliding_window

    def step_time_s_of_rows(self, num_tokens: int, num_emits: int, num_decodes: int, decode_context_sum: int,
                            decode_context_max: int, prefill_query: list[int], prefill_context: list[int]) -> float:
        """`step_time_s` of a step given as its token and emit counts, the count, context sum and longest context
        of its sequences of one query token, and the query and context lengths of the others in order
        (`StepPlan.seq_sums`), where `rows_suffice`: the `BatchStats` that `BatchStats.from_arrays` builds, field
        for field, without the arrays."""
        prefill = BatchStats._prefill_sums(prefill_query, prefill_context, None, self._q_tile) if prefill_query else {}
        stats = BatchStats(num_tokens=num_tokens, num_emits=num_emits, num_decode_seqs=num_decodes,
                           decode_pairs=float(decode_context_sum) + num_decodes,
                           decode_max_keys=float(decode_context_max) + 1.0 if num_decodes else 0.0, **prefill)
        return self._stats_time_s(stats)

    @property
    def decode_depends_on_sums(self) -> bool:
        """Whether a step of decodes only depends on its number of sequences and the sum of their contexts alone
        (`decode_sum_time_s`)."""
        return self._plain_decode

    def expect_max_num_tokens(self, max_num_tokens: int) -> None:
        """A hint, which changes no result: steps will have at most `max_num_tokens` tokens (the scheduler's
        budget), so the token counts above the first table block are tabulated together at their first lookup
        (`_CountTable`). Only where every token operator is elementwise in the count: a dense model on a GPU. (An
        MoE layer's expected row tiles sum a Poisson window chosen from the block's smallest and largest count,
        `_poisson_row_tiles`, so its counts keep the floats of their own blocks only when tabulated block by block;
        a CPU's formulas are not checked for it.)"""
        if not self.spec.is_moe and self.hw.kind != "cpu":
            self._token_table.span_end = self._padded_tokens(max_num_tokens) + 1

    def decode_sum_time_s(self, n: int, context_sum: int) -> float:
        """`decode_step_time_s` of `n` >= 1 decodes whose contexts sum to `context_sum`, where
        `decode_depends_on_sums`."""
        r = self.rank
        parts = self._decode_parts.get(n)
        if parts is None:
            # What depends on n alone: the token and emit operators' seconds summed first, as `_stats_time_s`'s
            # left-to-right sum does, and the host time (the attention's: `_decode_layer_s`).
            token_s, token_k = self._token_table.lookup(self._padded_tokens(n))
            emit_s, emit_k = self._emit_table.lookup(n)
            parts = self._decode_parts[n] = (token_s + emit_s,
                                             *self._host_time_s(n, 0, n, token_k + emit_k + r.layers))
        # As `_attention_s`: t = 0.0 + float(...), which is float(...) itself.
        attn_s = float(r.layers * self._decode_layer_s(n, float(context_sum) + n))
        return self._combine(parts[0] + attn_s, parts[1], parts[2])

    def breakdown_columns(self, steps: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
        """`step_cost(q, c, e).breakdown_s` of many steps (query, context, emits arrays each) as columns:
        operator name -> seconds per step, 0.0 where a step lacks the operator; the same floats.

        In bulk: the steps are aggregated into columns of `BatchStats` fields (`_stats_columns`); the operators
        are evaluated on arrays (`_ExactPowArray`): those of the token count and of the emit count once per
        distinct count, attention once for all steps (`_attention_columns`); each step's total is `step_cost`'s `sum`
        (`row_sums`: the same rounding; an absent operator adds 0.0, which changes no sum). A `StepSequences`
        (the simulator's records) is read as its concatenated arrays, not step by step."""
        if not len(steps):
            return {}
        cols, stats = self._stats_columns(steps)
        distinct, inverse = np.unique(cols["num_tokens"].astype(np.int64), return_inverse=True)
        padded = np.array([self._padded_tokens(n) for n in distinct.tolist()], dtype=np.int64)[inverse]
        if self._mixed_graph != self._decode_graph:  # batches with prefills padded as their own graph pads them
            mixed = cols["num_prefill_seqs"] > 0
            padded[mixed] = np.array([self._padded_tokens(n, True) for n in distinct.tolist()],
                                     dtype=np.int64)[inverse][mixed]
        token_names, token_s, token_k = self._count_columns(
            partial(token_ops, graph_max_tokens=self._graph_max_tokens), padded)
        if self._mixed_eager and (cols["num_prefill_seqs"] > 0).any():  # batches with prefills: eager at any size
            mixed = cols["num_prefill_seqs"] > 0
            token_s[mixed] = self._count_columns(partial(token_ops, graph_max_tokens=0), padded[mixed])[1]
        emit_names, emit_s, emit_k = self._count_columns(emit_ops, cols["num_emits"].astype(np.int64))
        attn_names, attn_s, attn_k = self._attention_columns(cols, stats)
        names = token_names + attn_names + emit_names  # step_cost's order
        times = np.concatenate([token_s, attn_s, emit_s], axis=1)
        kernels = (token_k + attn_k + emit_k).tolist()
        # The host time of each distinct (tokens, prefill seqs, decode seqs, kernels), once.
        distinct_keys, key_of = _distinct_rows([distinct[inverse], cols["num_prefill_seqs"].astype(np.int64),
                                                cols["num_decode_seqs"].astype(np.int64),
                                                np.asarray(kernels, dtype=np.int64)])
        host_s, launch_s = np.array([self._host_time_s(t, p, d, k) for t, p, d, k in distinct_keys.tolist()],
                                    dtype=np.float64).reshape(-1, 2)[key_of].T
        device_s = row_sums(times)
        total_s = self._combine(device_s, host_s, launch_s)  # elementwise: the same IEEE operations
        columns = {name: times[:, j].copy() for j, name in enumerate(names)}
        columns["host_overhead"] = total_s - device_s
        return columns

    # BatchStats fields aggregated per step (`_stats_columns`).
    _STATS_FIELDS = ("num_tokens", "num_emits", "num_prefill_seqs", "prefill_tokens", "prefill_pairs",
                     "prefill_q_tiles", "prefill_kv_tokens", "prefill_pad_pairs", "prefill_masked_pairs",
                     "num_decode_seqs", "decode_pairs")

    def _stats_columns(self, steps: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]
                       ) -> tuple[dict[str, np.ndarray], list[BatchStats] | None]:
        """`_stats` of every step as columns (float64) of `_STATS_FIELDS`, and on a CPU the `BatchStats` too.

        The sequences of all steps are concatenated (a `StepSequences` holds them so) and each step's sums taken
        with `BatchStats.from_arrays`'s arithmetic: decodes (query length 1) by integer sums converted to float
        once; prefill chunks (longer queries) by `_prefill_columns` (exact integer sums) or else by its own Python
        loop (`_prefill_sums`, the same float order), step by step."""
        n = len(steps)
        records = steps if isinstance(steps, StepSequences) else None
        lengths = np.diff(records.offsets) if records is not None else np.array([len(q) for q, _, _ in steps], dtype=np.int64)
        # CPU attention reads every field, a hybrid model's stats have two windows; reduceat needs rows.
        if self.hw.kind == "cpu" or self.spec.is_hybrid_attention or not lengths.all():
            stats = [self._stats(q, c, e) for q, c, e in steps]
            values = np.array([[getattr(s, f) for f in self._STATS_FIELDS] for s in stats], dtype=np.float64)
            return {name: values[:, j] for j, name in enumerate(self._STATS_FIELDS)}, stats
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        q, c, e = records.concatenated if records is not None else (np.concatenate([q for q, _, _ in steps]),
                                                        np.concatenate([c for _, c, _ in steps]),
                                                        np.concatenate([e for _, _, e in steps]))
        window = self.spec.sliding_window
        cols: dict[str, np.ndarray] = {name: np.zeros(n) for name in self._STATS_FIELDS}
        # Most sequences are decodes (query 1) that emit: each step's counts are its length less a count of the
        # few others (integers, exact in float64), and one sum over every sequence is left (the decodes' contexts).
        other = np.flatnonzero(q != 1)
        other_step = np.searchsorted(starts, other, side="right") - 1
        num_decodes = lengths - np.bincount(other_step, minlength=n)
        cols["num_tokens"] = num_decodes + np.bincount(other_step, weights=q[other], minlength=n)
        silent = np.flatnonzero(e == 0)
        cols["num_emits"] = (lengths - np.bincount(np.searchsorted(starts, silent, side="right") - 1, minlength=n)
                             ).astype(np.float64)
        cols["num_decode_seqs"] = num_decodes.astype(np.float64)
        if window:  # from_arrays' decode_pairs
            keys = np.where(q == 1, np.minimum(c + 1, window), 0)
            cols["decode_pairs"] = _segment_sums(keys, starts, lengths).astype(np.float64)
        else:
            context_sums = _segment_sums(c, starts, lengths)
            context_sums -= np.bincount(other_step, weights=c[other], minlength=n).astype(np.int64)
            cols["decode_pairs"] = context_sums.astype(np.float64) + cols["num_decode_seqs"]
        prefill = other[q[other] > 1]
        step_of = other_step[q[other] > 1]
        exact = self._prefill_columns(q[prefill], c[prefill], step_of, n)
        if exact is not None:
            cols.update(exact)
            return cols, None
        qs, cs = q[prefill].tolist(), c[prefill].tolist()
        bounds = np.flatnonzero(np.diff(step_of, prepend=-1, append=n + 1)).tolist()
        sums = [BatchStats._prefill_sums(qs[lo:hi], cs[lo:hi], window, self._q_tile)
                for lo, hi in zip(bounds[:-1], bounds[1:])]
        if sums:
            rows = step_of[bounds[:-1]]
            for name in sums[0]:
                cols[name][rows] = [step[name] for step in sums]
        return cols, None

    def _prefill_columns(self, q: np.ndarray, c: np.ndarray, step_of: np.ndarray, n: int
                         ) -> dict[str, np.ndarray] | None:
        """The prefill fields of `_stats_columns` from each prefill chunk's query and context length and step:
        `_prefill_sums`' terms as arrays, summed per step by `bincount`. Every term is a non-negative integer, so
        where the sum of all of them is below 2^53 every partial sum is exact and any order of addition gives
        `_prefill_sums`' floats; None where that fails (a work tile of a fractional number of tokens, or sums too
        large), for `_prefill_sums` to do."""
        q_tile = self._q_tile
        if not float(q_tile).is_integer() or (len(q) and max(int(q.max()), int(c.max())) >= 2**26):
            return None
        window = self.spec.sliding_window
        w = float(window) if window else math.inf
        qf, cf = q.astype(np.float64), c.astype(np.float64)
        tiles = np.ceil(qf / q_tile)
        terms = {"num_prefill_seqs": np.ones_like(qf), "prefill_tokens": qf,
                 "prefill_pairs": attention_pairs(qf, cf, w), "prefill_q_tiles": tiles,
                 "prefill_kv_tokens": np.minimum(cf, w) + qf,
                 "prefill_pad_pairs": (tiles * q_tile - qf) * np.minimum(cf + qf, w),
                 "prefill_masked_pairs": np.where(cf != 0, qf * (qf - 1) / 2, 0.0)}
        if any(float(values.sum()) >= 2**53 for values in terms.values()):
            return None
        return {name: np.bincount(step_of, weights=values, minlength=n) for name, values in terms.items()}

    def _count_columns(self, ops_of: Any, counts: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Names, seconds (steps x operators) and kernels per step of the operators `ops_of(spec, quant, tp,
        count)` of each step's count (none for a count of 0), evaluated once on the array of distinct counts."""
        distinct, inverse = np.unique(counts, return_inverse=True)
        positive = distinct > 0
        if not positive.any():
            return [], np.zeros((len(counts), 0)), np.zeros(len(counts), dtype=np.int64)
        array = distinct[positive].astype(np.float64).view(_ExactPowArray)
        k = self.hw.executor.kernels_per_elementwise_op
        names, columns, kernels = [], [], 0
        for op in ops_of(self.spec, self.quant, self.tp, array):
            t, op_kernels = op_time_s(self.hw, op, self.quant, k, self.cpu_engine)
            column = np.zeros(len(distinct))
            column[positive] = np.broadcast_to(np.asarray(t, dtype=np.float64), array.shape)
            columns.append(column)
            names.append(op.name)
            kernels += op.count * op_kernels
        table = np.stack(columns, axis=1)
        return names, table[inverse], np.where(positive, kernels, 0)[inverse]

    def _attention_columns(self, cols: dict[str, np.ndarray], stats: list[BatchStats] | None
                           ) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Names, seconds (steps x records) and kernels per step of the attention records. On a GPU each record
        is evaluated once for all steps that have it: the record of the first such step, with the shape of all
        (`prefill_attention_shape`, `decode_attention_shape`, as `_attention_s` computes them). On a CPU step by
        step (`roofline.cost.cpu_timing.attention_records`)."""
        n = len(cols["num_tokens"])
        if stats is not None:
            names = list(dict.fromkeys(op.name for s in stats for op in self._attention_records(s)))
            times, kernels = np.zeros((n, len(names))), np.zeros(n, dtype=np.int64)
            for i, s in enumerate(stats):
                parts = self._op_parts(self._attention_records(s))
                for name, t in zip(parts.names, parts.times):
                    times[i, names.index(name)] = t
                kernels[i] = sum(parts.kernels)
            return names, times, kernels
        r = self.rank
        prefill = np.flatnonzero(cols["num_prefill_seqs"])
        decode = np.flatnonzero(cols["num_decode_seqs"])

        def field(rows: np.ndarray, name: str) -> np.ndarray:
            return cols[name][rows].view(_ExactPowArray)

        records = [("attention_prefill", prefill, lambda: prefill_attention_shape(
            r.heads, r.kv_heads, r.head_dim, self._q_tile, field(prefill, "prefill_tokens"),
            field(prefill, "prefill_pairs"), field(prefill, "prefill_q_tiles"), field(prefill, "prefill_pad_pairs"),
            field(prefill, "prefill_kv_tokens"), self._q_token, self._kv_token, self._attn_kernels)),
            ("attention_decode", decode, lambda: decode_attention_shape(
                r.heads, r.kv_heads, r.head_dim, field(decode, "num_decode_seqs"), field(decode, "decode_pairs"),
                self._q_token, self._kv_token, self._attn_kernels))]
        names, columns, kernels = [], [], np.zeros(n, dtype=np.int64)
        for kind, rows, shape in records:
            if not len(rows):
                continue
            first = int(rows[0])
            s = BatchStats(**{f: cols[f][first].item() for f in self._STATS_FIELDS})
            record = next(op for op in attention_records(r, s, self.quant, self._attn_kernels) if op.kind == kind)
            t, op_kernels = op_time_s(self.hw, replace(record, shape=shape()), self.quant,
                                      self.hw.executor.kernels_per_elementwise_op)
            column = np.zeros(n)
            column[rows] = np.broadcast_to(np.asarray(t, dtype=np.float64), rows.shape)
            names.append(record.name)
            columns.append(column)
            kernels[rows] += record.count * op_kernels
        times = np.stack(columns, axis=1) if columns else np.zeros((n, 0))
        return names, times, kernels

    def _op_parts(self, ops: list[OpRecord]) -> _OpParts:
        """Names, `op_cost(...).time_s` and `op_cost(...).num_kernels` of records, in order."""
        k = self.hw.executor.kernels_per_elementwise_op
        names, times, kernels = [], [], []
        for op in ops:
            t, op_kernels = op_time_s(self.hw, op, self.quant, k, self.cpu_engine)
            names.append(op.name)
            times.append(float(t))
            kernels.append(op.count * op_kernels)
        return _OpParts(tuple(names), tuple(times), tuple(kernels))

    def _stats_time_s(self, stats: BatchStats) -> float:
        padded = self._padded_tokens(stats.num_tokens, stats.num_prefill_seqs > 0)
        token_s, token_k = (self._mixed_token_table if stats.num_prefill_seqs else self._token_table).lookup(padded)
        emit_s, emit_k = self._emit_table.lookup(stats.num_emits)
        attn_s, attn_k = self._attention_s(stats)
        device_s = token_s + emit_s + attn_s
        return self._combine(device_s, *self._host_s(stats, token_k + emit_k + attn_k))

    # -- internals --
    def _stats(self, query_lens: np.ndarray, context_lens: np.ndarray, emits: np.ndarray) -> BatchStats:
        return BatchStats.from_arrays(query_lens, context_lens, emits, self.spec.sliding_window, self._q_tile,
                                      self.spec.is_hybrid_attention)

    def _attention_s(self, s: BatchStats) -> tuple[float, int]:
        """Time and kernels of the attention records of `s`, as `op_cost` computes them (same formulas, same
        arguments: `roofline.cost.ops.attention_records`)."""
        if self.hw.kind == "cpu":
            return self._records_attention_s(s)
        r, hw, dtype = self.rank, self.hw, self.quant.act_dtype
        # A hybrid model's full layers (`s`'s own fields), then its sliding layers (`s.sliding`): the records' order.
        parts = [(r.layers - r.sliding_layers, s), (r.sliding_layers, s.sliding)] \
            if s.sliding is not None and r.sliding_layers else [(r.layers, s)]
        t, kernels = 0.0, 0
        for layers, p in parts:
            if p.num_prefill_seqs:
                shape = prefill_attention_shape(r.heads, r.kv_heads, r.head_dim, self._q_tile, p.prefill_tokens,
                                                p.prefill_pairs, p.prefill_q_tiles, p.prefill_pad_pairs,
                                                p.prefill_kv_tokens, self._q_token, self._kv_token, self._attn_kernels)
                t += float(layers * attention_prefill_time_s(hw, *shape, dtype, self.quant.kv_dtype == "fp8"))
                kernels += layers
            if p.num_decode_seqs:
                t += float(layers * self._decode_layer_s(p.num_decode_seqs, p.decode_pairs))
                kernels += layers
        return t, kernels

    def _decode_layer_s(self, num_seqs: int, pairs: float) -> float:
        """`attention_decode_time_s` of one layer's decode attention over `num_seqs` sequences and `pairs` keys
        (a GPU's kernels) at its `decode_attention_shape`, with what depends on the number of sequences alone computed
        once per number: the shape's bytes of Q and O, and the time's terms."""
        batch = self._decode_terms.get(num_seqs)
        if batch is None:
            r = self.rank
            _, _, work_units, key_bytes = decode_attention_shape(r.heads, r.kv_heads, r.head_dim, num_seqs, 0.0,
                                                                 self._q_token, self._kv_token, self._attn_kernels)
            batch = self._decode_terms[num_seqs] = (2 * num_seqs * self._q_token, attention_decode_terms(
                self.hw, work_units, key_bytes, self.quant.act_dtype, self._kv_fp8))
        # decode_attention_shape's FLOPs and bytes moved, the same operations
        flops = self._decode_flops_per_pair * pairs
        moved = batch[0] + (pairs + num_seqs) * self._kv_token
        return attention_decode_time_of_terms_s(batch[1], flops, moved)

    def _padded_tokens(self, num_tokens: int, mixed: bool = False) -> int:
        """CUDA graphs: a batch of up to the largest captured size runs the graph of the next size up (`mixed`: a
        batch with prefills, unpadded where such a batch runs without graphs)."""
        if num_tokens == 0 or num_tokens > self._max_graph or (self._mixed_graph is None if mixed
                                                                 else self._decode_graph is None):
            return num_tokens
        return self._graph_sizes[bisect.bisect_left(self._graph_sizes, num_tokens)]

    def _host_s(self, stats: BatchStats, num_kernels: int) -> tuple[float, float]:
        """Host time (per-step overhead plus launches) and the launches' part of it. Up to the largest captured
        size, a batch replays the graph its kind runs in the CUDA-graph mode (vLLM's default FULL_AND_PIECEWISE:
        one full graph for a batch of decodes; piecewise graphs between the layers' attention calls, which launch
        from the host, for a batch with prefills); a batch without a graph launches every kernel."""
        return self._host_time_s(stats.num_tokens, stats.num_prefill_seqs, stats.num_decode_seqs, num_kernels)

    def _host_time_s(self, num_tokens: int, num_prefill_seqs: int, num_decode_seqs: int, num_kernels: int
                     ) -> tuple[float, float]:
        """`_host_s` from the counts it reads."""
        ex = self.hw.executor
        graph = None  # above the largest captured size: no graph
        if 0 < num_tokens <= self._max_graph:
            graph = self._mixed_graph if num_prefill_seqs else self._decode_graph
        if graph == "full":
            launches = 1
        elif graph == "piecewise":
            launches = 2 * self.rank.layers + 1
        else:
            launches = num_kernels
        launch_s = launches * ex.kernel_launch_s
        return ex.step_overhead_s + launch_s + ex.step_overhead_per_seq_s * (num_decode_seqs + num_prefill_seqs), \
            launch_s

    def _step_ops(self, s: BatchStats) -> list[OpRecord]:
        """`roofline.cost.ops.step_ops`; on a CPU with the attention shapes of `cpu_engine` (`CPU_ENGINES`)."""
        if self.hw.kind != "cpu":
            graph_max = 0 if self._mixed_eager and s.num_prefill_seqs else self._graph_max_tokens
            return step_ops(self.spec, self.quant, self.tp, s, self._attn_kernels, graph_max)
        return (token_ops(self.spec, self.quant, self.tp, s.num_tokens)
                + CPU_ENGINES[self.cpu_engine].attention_records(self.rank, s, self.quant)
                + emit_ops(self.spec, self.quant, self.tp, s.num_emits))

    def _attention_records(self, s: BatchStats) -> list[OpRecord]:
        """The attention records of `s` as `step_cost` builds them (on a CPU: those of `cpu_engine`)."""
        if self.hw.kind == "cpu":
            return CPU_ENGINES[self.cpu_engine].attention_records(self.rank, s, self.quant)
        return attention_records(self.rank, s, self.quant, self._attn_kernels)

    def _records_attention_s(self, s: BatchStats) -> tuple[float, int]:
        """`_attention_s` from the records (a CPU's engine kernels): the same records and formulas as `step_cost`."""
        t, kernels = 0.0, 0
        k = self.hw.executor.kernels_per_elementwise_op
        for op in self._attention_records(s):
            op_t, op_kernels = op_time_s(self.hw, op, self.quant, k, self.cpu_engine)
            t += float(op_t)
            kernels += op.count * op_kernels
        return t, kernels

    def _combine(self, device_s: Any, host_s: Any, launch_s: Any) -> Any:
        """Step time from device time, host time and the launches' part of the host time. Async scheduling: the
        host work of the next step overlaps this step's device time, so the slower of the two, plus the device idle
        gap between steps that overlapping leaves (`step_gap_s`). Otherwise on a GPU the host prepares the step,
        then launches its kernels while the device runs those already launched (a CUDA launch returns at once), so
        the launches and the device time overlap: the rest of the host time plus the slower of the two. On a CPU the
        ops run on the host one after another: the sum. Floats or arrays (`breakdown_columns`), elementwise."""
        ex = self.hw.executor
        if ex.host_overlaps_device:
            return _max(device_s, host_s) + ex.step_gap_s
        if self.hw.kind == "cpu":
            return device_s + host_s
        return (host_s - launch_s) + _max(device_s, launch_s)

    def _parts_cost(self, ops: list[OpRecord]) -> tuple[np.ndarray, int]:
        """Summed time (in `op_cost`'s order, so it equals the full path's floats) and kernels of records whose
        shapes hold arrays of counts."""
        k = self.hw.executor.kernels_per_elementwise_op
        total_s: Any = 0  # an array of times once an op is added
        kernels = 0
        for op in ops:
            t, op_kernels = op_time_s(self.hw, op, self.quant, k, self.cpu_engine)
            total_s = total_s + t
            kernels += op.count * op_kernels
        return total_s, kernels

    def _token_part(self, num_tokens: np.ndarray, graph_max_tokens: float | None = None) -> tuple[np.ndarray, int]:
        graph_max = self._graph_max_tokens if graph_max_tokens is None else graph_max_tokens
        return self._parts_cost(token_ops(self.spec, self.quant, self.tp, num_tokens, graph_max))

    def _emit_part(self, num_emits: np.ndarray) -> tuple[np.ndarray, int]:
        return self._parts_cost(emit_ops(self.spec, self.quant, self.tp, num_emits))


_TABLE_BLOCK = 512  # counts per tabulated block: one block covers every decode batch up to 511 sequences


class _CountTable:
    """(seconds, kernels) of the operators that depend on one count (tokens or emitted tokens) of a step, for
    every count, computed lazily in blocks of `_TABLE_BLOCK` counts by one vectorized evaluation of the same
    formulas (`part(counts array)`); a count of 0 has no operators. A mixed prefill+decode step has a token
    count seldom seen before, so evaluating one count at a time would cost a full GEMM tile search per step.

    `span_end` (`StepCostModel.expect_max_num_tokens`, where the formulas are elementwise in the count, so that
    each count gets the float it gets in its own block): the first lookup of a count in [_TABLE_BLOCK, span_end)
    fills every block of that range not yet filled in one evaluation, whose fixed cost (~2.5 ms of Python and
    numpy calls on this machine) is then paid once instead of once per block (16 blocks up to 8,192 tokens,
    which a long simulation fills anyway)."""

    def __init__(self, part: Any) -> None:
        self._part = part
        self._blocks: dict[int, list[float]] = {}
        self._kernels = -1  # kernels of any count >= 1 (the same operators for every count); set with a block
        self.span_end = 0

    def lookup(self, count: int) -> tuple[float, int]:
        if count <= 0:
            return 0.0, 0
        block = self._blocks.get(count // _TABLE_BLOCK)
        if block is None:
            block = self._fill(count // _TABLE_BLOCK)
        return block[count % _TABLE_BLOCK], self._kernels

    def _fill(self, index: int) -> list[float]:
        first = last = index
        if 0 < index * _TABLE_BLOCK < self.span_end:
            first, last = 1, (self.span_end - 1) // _TABLE_BLOCK
            while first in self._blocks:
                first += 1
            while last in self._blocks:
                last -= 1
        # Count 0 of block 0 is never looked up; evaluate 1 there instead so every formula sees a count >= 1.
        counts = np.arange(first * _TABLE_BLOCK, (last + 1) * _TABLE_BLOCK, dtype=np.float64)
        counts[0] = max(counts[0], 1.0)
        seconds, self._kernels = self._part(counts)
        rows = np.broadcast_to(seconds, counts.shape).astype(np.float64).reshape(-1, _TABLE_BLOCK).tolist()
        for i, row in enumerate(rows, first):
            self._blocks.setdefault(i, row)
        return self._blocks[index]


# ---- single operators, vectorized (`roofline predict-ops`, fitting on measured operator tables) ------------

# Columns each single-operator kind needs (the `roofline predict-ops` input schema).
SINGLE_OP_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k", "dtype"),
    "attention_prefill": ("batch_size", "seq_len", "num_heads", "num_kv_heads", "head_dim", "dtype", "kv_dtype"),
    "attention_decode": ("batch_size", "seq_len", "num_heads", "num_kv_heads", "head_dim", "dtype", "kv_dtype"),
    "all_reduce": ("message_bytes", "num_devices", "dtype"),
    "moe": ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "dtype"),
}
# Columns a kind may have (true or false; `roofline predict-ops`): absent, the value in the comment. moe `gated`:
# gate and up projections with SiLU-and-mul between (true, SwiGLU experts), or one up projection and an elementwise
# activation (false, Nemotron-H's relu2 experts; `moe_time_s`).
OPTIONAL_OP_COLUMNS: dict[str, tuple[str, ...]] = {"moe": ("gated",)}  # gated: true
# predict-ops dtype names -> (peak dtype, bytes per element).
OP_DTYPES: dict[str, tuple[str, float]] = {"bf16": ("bf16", 2.0), "fp16": ("fp16", 2.0), "fp8": ("fp8", 1.0),
                                           "int8": ("int8", 1.0), "fp32": ("fp32", 4.0)}


def predict_single_ops(hw: HardwareProfile, kind: str, cols: dict[str, np.ndarray]) -> np.ndarray:
    """Seconds for each row of one operator kind; `cols` maps the kind's `SINGLE_OP_COLUMNS` to arrays
    (numbers as floats, dtypes as strings), already validated."""
    n_rows = len(next(iter(cols.values())))
    out = np.zeros(n_rows)
    for dtype in sorted(set(cols["dtype"])):
        sel = cols["dtype"] == dtype
        part = {k: v[sel] for k, v in cols.items()}
        out[sel] = _PREDICTORS[kind](hw, part, dtype)
    return out


def _predict_gemm(hw: HardwareProfile, c: dict[str, np.ndarray], dtype: str) -> np.ndarray:
    peak, size = OP_DTYPES[dtype]
    m, n, k = c["m"], c["n"], c["k"]
    # W8A8 (vLLM static per-tensor fp8 / int8): bf16 output, the bf16 input is quantized by a kernel first.
    t = gemm_time_s(hw, m, n, k, peak, size, size, max(size, 2.0))
    if peak in _EIGHT_BIT:
        t = t + act_quant_time_s(hw, m, k, 2.0)
    return t


def _attention_shape(c: dict[str, np.ndarray], dtype: str) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """(peak dtype, kv bytes per element, q/o bytes per token, kv bytes per token) of attention rows. The math
    runs at the activation dtype's peak also with an fp8 KV cache (see `roofline.cost.ops.attention_records`)."""
    kvb = np.where(c["kv_dtype"] == "fp8", 1.0, OP_DTYPES[dtype][1])
    qo_token = c["num_heads"] * c["head_dim"] * _ATTENTION_ELEMENT_BYTES
    kv_token = 2 * c["num_kv_heads"] * c["head_dim"] * kvb
    return OP_DTYPES[dtype][0], kvb, qo_token, kv_token


def _predict_attention_prefill(hw: HardwareProfile, c: dict[str, np.ndarray], dtype: str) -> np.ndarray:
    """`batch_size` prompts of `seq_len` tokens each, no earlier context."""
    peak, _, qo_token, kv_token = _attention_shape(c, dtype)
    b, s, d, h, kv = c["batch_size"], c["seq_len"], c["head_dim"], c["num_heads"], c["num_kv_heads"]
    kernels = attention_kernels(hw.family)
    q_tile = np.array([attention_q_tile_tokens(int(x), int(y), int(z), kernels) for x, y, z in zip(d, h, kv)])
    tiles = np.ceil(s / q_tile)
    shape = prefill_attention_shape(h, kv, d, q_tile, b * s, b * attention_pairs(s, 0.0, np.inf), b * tiles,
                                    b * (tiles * q_tile - s) * s, b * s, qo_token, kv_token, kernels)
    return attention_prefill_time_s(hw, *shape, peak, c["kv_dtype"] == "fp8")


def _predict_attention_decode(hw: HardwareProfile, c: dict[str, np.ndarray], dtype: str) -> np.ndarray:
    """`batch_size` sequences of one new token each, attending `seq_len` keys (the cache and itself)."""
    peak, _, qo_token, kv_token = _attention_shape(c, dtype)
    b, s = c["batch_size"], c["seq_len"]
    shape = decode_attention_shape(c["num_heads"], c["num_kv_heads"], c["head_dim"], b, b * s, qo_token, kv_token,
                                   attention_kernels(hw.family))
    return attention_decode_time_s(hw, *shape, peak, c["kv_dtype"] == "fp8")


def _predict_all_reduce(hw: HardwareProfile, c: dict[str, np.ndarray], dtype: str) -> np.ndarray:
    return all_reduce_time_s(hw, c["message_bytes"], c["num_devices"])


def _predict_moe(hw: HardwareProfile, c: dict[str, np.ndarray], dtype: str) -> np.ndarray:
    """Uniform random routing (the serving model's assumption), unless `c` carries `expert_loads` (rows x experts,
    tokens per expert): the operator tables' own routing, a measurement condition only
    `roofline.calibration.fit.predict_table` passes (`roofline.calibration.moe_routing`)."""
    peak, size = OP_DTYPES[dtype]
    t, e, topk = c["num_tokens"], c["num_experts"], c["topk"]
    gated = c.get("gated", True)
    if "expert_loads" not in c:
        touched = expected_experts_touched(t, topk, e)
        return moe_time_s(hw, t * topk / touched, touched, c["hidden_size"], c["inter_size"], peak, size, 2.0,
                          num_experts=e, num_tokens=t, gated=gated)
    touched, row_tiles = moe_row_tiles(c["expert_loads"])
    return moe_time_s(hw, t * topk / touched, touched, c["hidden_size"], c["inter_size"], peak, size, 2.0,
                      row_tiles=row_tiles, num_experts=e, num_tokens=t, gated=gated)


_PREDICTORS = {
    "gemm": _predict_gemm,
    "attention_prefill": _predict_attention_prefill,
    "attention_decode": _predict_attention_decode,
    "all_reduce": _predict_all_reduce,
    "moe": _predict_moe,
}
