"""Dense GEMM kernels: cuBLAS (16-bit) and CUTLASS (8-bit) tiles per family, the activation quantization
kernels, and the fp32 SIMT GEMM.


GEMM (m x k by k x n, `groups` independent problems): output tiles (tm, tn) run in waves of one tile per SM
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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

import roofline.cost.kernels as kernel_families  # (the records hold this module's tables: bound at call time)
from roofline.cost.hardware import HardwareProfile
from roofline.cost.quant import EIGHT_BIT_DTYPES
from roofline.cost.roofline_math import _bandwidth, _beatable, _ceil, _max, _min, _overlap

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
    # The CTAs of the 8-bit tiles: ((tile rows, tile cols), `Cta`); see `cta_occupancy` and `warp_tile_rate` (they
    # read the chip's `architecture.shared_memory_per_sm_kib` and `sm_subpartitions`). Empty: one full-rate tile per SM.
    ctas_8bit: tuple[tuple[tuple[int, int], Cta], ...] = ()
    # The CTAs of the 16-bit tiles (`Cta`: warps and warp tile only); see `warp_tile_rate`. Empty: full rate.
    ctas_16bit: tuple[tuple[tuple[int, int], Cta], ...] = ()
    # The chip's power limit caps its math rate below its SMs' combined rate (`gemm_time_s`: a wave keeping more
    # than gemm_sustained_sm_fraction of the SMs busy runs slower in proportion).
    power_limited: bool = False

    def cta_occupancy(self, tm: int, tn: int, shared_memory_per_sm_bytes: int, subpartitions: int
                      ) -> tuple[int, float]:
        """(CTAs of a tm x tn 8-bit tile resident per SM, share of the SM's tensor throughput one CTA gets).

        An SM has `subpartitions` sub-partitions (4 since Volta), each with its own tensor core, and a warp runs on one
        of them: c resident CTAs of w warps use min(1, c * w / 4) of the SM's math, shared by the c CTAs. c = how many
        CTAs' shared memory
        (CUTLASS 2.x's multistage mainloop: stages x (tm + tn) x tk bytes of 8-bit A and B tiles, plus the 1 KB the
        CUDA runtime reserves per CTA) fits in the SM's. Without an entry: one CTA per SM at full rate."""
        cta = dict(self.ctas_8bit).get((tm, tn)) if self.ctas_8bit else None
        if cta is None:
            return 1, 1.0
        ctas = max(1, shared_memory_per_sm_bytes // (cta.stages * (tm + tn) * cta.tile_k + _CTA_RESERVED_SMEM_BYTES))
        return ctas, min(1.0, ctas * cta.warps / subpartitions) / ctas

    def warp_tile_rate(self, tm: int, tn: int, eight: bool, step_overhead_mma: float,
                       shared_memory_per_sm_bytes: int, subpartitions: int) -> float:
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
        ctas = self.cta_occupancy(tm, tn, shared_memory_per_sm_bytes, subpartitions)[0] if eight else 1
        warps_per_subpartition = max(1.0, ctas * cta.warps / subpartitions)
        return min(1.0, warps_per_subpartition * mmas / (mmas + step_overhead_mma + staged))


# Hopper (and Ampere, described with the same tables): cuBLAS's SM90 tiles, split-K partials reduced in place.
SM90_GEMM_KERNELS = GemmKernels(name="cublas-sm90", tiles=GEMM_TILES,
                                tiles_8bit=tuple((m, ((math.inf, tile),)) for m, tile in GEMM_TILES_8BIT))
# Blackwell: the same tiles with the reduction kernel, described for cuBLAS on SM100: the Blackwell bf16 tables
# floor at 6-7 us for small weights (n <= 1024, m <= 256: 0.5-2 us of weight bytes), the second kernel's fixed
# cost (benchmarks/accuracy/gpu_profiles.py compares both descriptions). The reduction kernel costs kernel_fixed_s
# plus reading the partials and writing the output at memory_efficiency. Hopper's cuBLAS is described without it.
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
    # cuBLAS's SM80 kernels as CUTLASS's SM80 generator lays out their warps (tools/library/scripts/generator.py
    # GenerateSM80_TensorOp_16816, kernel view features x tokens: 256x128 [4, 2, 1] and 128x256 [2, 4, 1]: 8 warps of
    # 64x64; 256x64 and 128x128: 4 of 64x64; 128x64 / 64x128: 4 of 64x32 / 32x64; 64x64: 4 of 32x32), here as
    # (token rows, feature cols) tiles.
    ctas_16bit=(((128, 256), Cta(8, 64, 64)), ((256, 128), Cta(8, 64, 64)), ((128, 128), Cta(4, 64, 64)),
                ((64, 128), Cta(4, 64, 32)), ((64, 256), Cta(4, 64, 64)), ((64, 64), Cta(4, 32, 32))),
    power_limited=True)


def sm_facts(hw: HardwareProfile, kernels: GemmKernels) -> tuple[int, int]:
    """(shared memory per SM in bytes, SM sub-partitions) of `hw` where `kernels` describe their CTAs (`cta_occupancy`,
    `warp_tile_rate`), else (0, 0): unread."""
    if not kernels.ctas_8bit and not kernels.ctas_16bit:
        return 0, 0
    arch, needed_by = hw.architecture, f"the {kernels.name} GEMM kernels' CTAs"
    smem = arch.require("shared_memory_per_sm_bytes", hw.id, needed_by) if kernels.ctas_8bit else 0
    return smem, arch.require("sm_subpartitions", hw.id, needed_by)



_K_BLOCK = 64  # K is consumed in blocks of 64 elements (128 bytes of bf16: one TMA/cp.async stage)


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
    (`KernelFamily.gemm`: their tiles, and a second split-K reduction kernel where they have one); fused-MoE grouped
    GEMMs are other kernels and pass False (the SM90 tables). `tile_fixed_k`: another kernel's per-tile cost (default:
    the family's for the dtype). `row_tiles`: unequal groups (tokens per expert differ), tile height -> the row
    tiles of all groups together (sum over groups of ceil(m_g / tm)); default: `groups` equal groups of m rows.
    `tiles_8bit`: another 8-bit kernel's tile choice (`GemmKernels.tiles_8bit` form). Plus kernel_fixed_s."""
    e = hw.efficiency
    # fp4 GEMMs (NVFP4 on Blackwell: CUTLASS / TRT-LLM / CuteDSL) are CUTLASS-style kernels like the 8-bit ones:
    # their tile dispatch and efficiencies (benchmarks/accuracy/moe_accuracy.py judges it on the NVFP4 MoE tables).
    eight = dtype in EIGHT_BIT_DTYPES or dtype == "fp4"
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
    kernels = kernel_families.kernel_family(hw.family).gemm if cublas else SM90_GEMM_KERNELS
    reduce_kernel = kernels.split_k_reduction_kernel
    smem, subpartitions = sm_facts(hw, kernels)

    def tiled(tm: int, tn: int, s: int, beaten: Any = None) -> Any:
        """The tiling's time; None where it cannot beat `beaten` (`_beatable`)."""
        tiles = (groups * _ceil(m / tm) if row_tiles is None else row_tiles(tm)) * _ceil(n / tn) * s
        k_split = _ceil(k / (s * _K_BLOCK)) * _K_BLOCK
        ctas, rate = kernels.cta_occupancy(tm, tn, smem, subpartitions) if eight else (1, 1.0)
        # The main loop's k at the CTA's share of the SM's tensor cores and its warp tile's rate
        # (`GemmKernels.warp_tile_rate`); the per-tile fixed k (prologue, epilogue) is no MMA work, at the SM's rate.
        warp_rate = kernels.warp_tile_rate(tm, tn, eight, e.gemm_warp_step_overhead_mma, smem, subpartitions)
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
    threads each: the chip's `architecture.act_quant_blocks_per_sm` resident per SM). Its fixed latencies run at the chip's
    sustained clock (`sustained_clock_factor`), as the GEMM's."""
    e = hw.efficiency
    blocks_per_sm = hw.architecture.require("act_quant_blocks_per_sm", hw.id, "the per-tensor fp8 input quantization")
    waves = _ceil(m / (blocks_per_sm * hw.num_compute_units))
    return (m * k * (act_bytes + 1.0) / (_bandwidth(hw) * e.act_quant_memory_efficiency)
            + (waves * e.act_quant_block_s + e.kernel_fixed_s) / hw.sustained_clock_factor)



def streaming_act_quant_time_s(hw: HardwareProfile, m: Any, k: Any, in_bytes: float, out_bytes: float,
                               efficiency: float) -> Any:
    """An input quantization kernel whose grid covers the scale groups (no reduction pass over the tensor, no
    per-row waves, unlike the per-tensor fp8 kernel of `act_quant_time_s`): reads m*k values of `in_bytes` and
    writes `out_bytes` per value (quantized value and its share of the group scale) at `efficiency` of the DRAM
    bandwidth, plus kernel_fixed_s. NVFP4's `fp4_act_quant_time_s`; block-scaled fp8's vLLM `per_token_group_quant_8bit`
    (csrc/quantization/w8a8/fp8/per_token_group_quant.cu: 16 groups of 128 values per thread block, each group
    loaded once, its fp32 (or packed UE8M0) scale written column-major for DeepGEMM)."""
    return m * k * (in_bytes + out_bytes) / (_bandwidth(hw) * efficiency) + hw.efficiency.kernel_fixed_s



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

