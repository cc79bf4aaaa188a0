"""Block-scaled GEMM kernels: DeepGEMM's fp8 GEMMs (SM90 and SM100 layouts) and FlashInfer's CuTe-DSL NVFP4
GEMM with its input quantization."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from roofline.cost.hardware import HardwareProfile
from roofline.cost.kernels.gemm import _K_BLOCK, streaming_act_quant_time_s
from roofline.cost.quant import NVFP4_BYTES_PER_ELEMENT
from roofline.cost.roofline_math import _bandwidth, _overlap

# DeepGEMM's SM90 fp8 GEMM (`fp8_gemm_nt` with fp32 scales and 128x128 weight blocks: the 1D2D kernel, bf16 output)
# picks its layout on the host, csrc/jit_kernels/heuristics/sm90.hpp `SM90ArchSpec` (DeepGEMM 891d57b, the commit
# vLLM's tools/install_deepgemm.sh pinned for 0.24): block_m in (64, 128, 16 if m <= 16, 32 if m <= 32, 256), block_n
# 16..192 in steps of 16 (above 128 only 144, 160, 192: the 1D2D unroll rule), not both above 128, clusters 1x1, 1x2
# and 2x1 (multicast only with more than one wave), at least 3 pipeline stages in the SM90 opt-in shared memory of one
# block, `SM90ArchSpec::smem_capacity` = 232448 bytes (the chip's `architecture.shared_memory_per_block_kib`; 4
# for tiles under 128x192); of these the one with the fewest modelled L1/L2 cycles / wave efficiency
# (`get_layout_info`), the first on ties. The persistent kernel then runs the tiles in waves over the SMs.
_DEEPGEMM_SM90_BLOCK_N = tuple(range(16, 129, 16)) + (144, 160, 192)


def deepgemm_sm90_layout(m: Any, n: Any, k: Any, sms: int, shared_memory_bytes: int,
                         block_ms: tuple[int, ...] = (64, 128, 16, 32, 256)) -> tuple[Any, Any]:
    """(block_m, block_n) DeepGEMM's SM90 heuristic picks for an fp8 1D2D GEMM, per element, on a chip whose one
    block may hold `shared_memory_bytes`; `block_ms`: its block_m candidates (an m-grouped contiguous GEMM has one,
    `DEEPGEMM_CONTIGUOUS_BLOCK_M`)."""
    m, n, k = (np.asarray(x, dtype=np.float64) for x in (m, n, k))
    shape = np.broadcast(m, n, k).shape
    l2_bw = math.floor(min(64.0 * sms, 8e6 / 1.3e3))  # bytes per cycle, as the heuristic models them
    l1_bw = 128.0 * sms
    best = np.full(shape, np.inf)
    block_m, block_n = np.full(shape, 128.0), np.full(shape, 128.0)
    for cluster_m, cluster_n in ((1, 1), (1, 2), (2, 1)):
        for bm in block_ms:
            allowed_m = (m <= 16) if bm == 16 else (m <= 32) if bm == 32 else np.full(shape, True)
            for bn in _DEEPGEMM_SM90_BLOCK_N:
                if bm > 128 and bn > 128:
                    continue
                uniform_sfb = 1 if 128 % bn == 0 else 2
                smem_extra = (math.ceil(bm * bn * 2 / 1024) * 1024 + 16 * 8 * 2
                              + np.ceil(np.ceil(k / 128) * 4 * uniform_sfb / 8) * 8)
                stages = np.minimum((shared_memory_bytes - smem_extra)
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
    gemm_fp8_block_factor of the fp8 peak; bytes at gemm_fp8_memory_efficiency, a call with fewer tiles than
    gemm_fp8_block_saturation_fraction of the SMs drawing a proportional share; overlapped as `_overlap`; plus
    kernel_fixed_s and gemm_fp8_block_fixed_s (the decode-sized call's terms: no effect at their defaults, fitted
    on Blackwell). On a chip with a `power_limit` (GB200), math longer than its after_s runs at its clock_factor."""
    smem = hw.architecture.require("shared_memory_per_block_bytes", hw.id, "DeepGEMM's SM90 layout heuristic")
    block_m, block_n = deepgemm_sm90_layout(m, n, k, hw.num_compute_units, smem)
    return _deepgemm_gemm_time_s(hw, m, n, k, block_m, block_n, _K_BLOCK, weight_bytes_per_param, in_bytes,
                                 out_bytes)


# DeepGEMM's m-grouped contiguous GEMM (`m_grouped_fp8_gemm_nt_contiguous`: the MoE experts' rows one after another,
# each expert's padded to whole blocks of this many rows, `get_mk_alignment_for_contiguous_layout`) runs the same
# SM90 1D2D kernel with block_m fixed at the alignment (csrc/jit_kernels/heuristics/common.hpp `get_best_config`:
# "if (gemm_type == GemmType::MGroupedContiguous) block_ms = std::vector{get_mk_alignment_for_contiguous_layout()}").
DEEPGEMM_CONTIGUOUS_BLOCK_M = 128


def deepgemm_sm90_contiguous_time_s(hw: HardwareProfile, m: Any, n: Any, k: Any, weight_bytes_per_param: Any,
                                    in_bytes: float, out_bytes: float) -> Any:
    """DeepGEMM's SM90 m-grouped contiguous fp8 GEMM over `m` rows (all the groups' padded rows together): every
    128-row block is computed against its group's weights, as `deepgemm_sm90_gemm_time_s` with block_m 128;
    `weight_bytes_per_param` counts every group's weights the call reads (the groups' count times one's bytes per
    parameter of n x k)."""
    smem = hw.architecture.require("shared_memory_per_block_bytes", hw.id, "DeepGEMM's SM90 layout heuristic")
    block_m, block_n = deepgemm_sm90_layout(m, n, k, hw.num_compute_units, smem, (DEEPGEMM_CONTIGUOUS_BLOCK_M,))
    return _deepgemm_gemm_time_s(hw, m, n, k, block_m, block_n, _K_BLOCK, weight_bytes_per_param, in_bytes,
                                 out_bytes)


def _deepgemm_gemm_time_s(hw: HardwareProfile, m: Any, n: Any, k: Any, block_m: Any, block_n: Any, k_block: int,
                          weight_bytes_per_param: Any, in_bytes: float, out_bytes: float) -> Any:
    """A persistent DeepGEMM kernel with (block_m, block_n) output tiles, K padded to `k_block`: see
    `deepgemm_sm90_gemm_time_s`."""
    e = hw.efficiency
    sms = hw.num_compute_units
    per_sm = hw.peak_flops("fp8") * e.gemm_fp8_compute_efficiency * e.gemm_fp8_block_factor / sms
    k_blocks = np.ceil(np.asarray(k, dtype=np.float64) / k_block) * k_block
    tiles = np.ceil(m / block_m) * np.ceil(n / block_n)
    tc = np.ceil(tiles / sms) * 2.0 * block_m * block_n * (k_blocks + e.gemm_fp8_block_tile_fixed_k) / per_sm
    if hw.power_limit is not None:  # a long call's math runs at the clock the chip's power limit holds it to
        tc = np.where(tc > hw.power_limit.after_s, tc / hw.power_limit.clock_factor, tc)
    share = np.minimum(tiles / (e.gemm_fp8_block_saturation_fraction * sms), 1.0)
    tm = (m * k * in_bytes + n * k * weight_bytes_per_param + m * n * out_bytes) / (
        _bandwidth(hw) * e.gemm_fp8_memory_efficiency * share)
    t = _overlap(tc, tm, e.overlap_exponent) + e.kernel_fixed_s + e.gemm_fp8_block_fixed_s
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
    moved = m * k * NVFP4_BYTES_PER_ELEMENT + n * k * weight_bytes_per_param + m * n * out_bytes
    share = np.minimum(ctas / (e.gemm_fp4_saturation_fraction * sms), 1.0)
    tm = moved / (_bandwidth(hw) * e.gemm_fp8_memory_efficiency * share)
    t = _overlap(tc, tm, e.overlap_exponent) + e.kernel_fixed_s + e.gemm_fp4_fixed_s
    return float(t) if np.ndim(t) == 0 else t


def fp4_act_quant_time_s(hw: HardwareProfile, m: Any, k: Any, act_bytes: float) -> Any:
    """NVFP4's input quantization (vLLM `scaled_fp4_quant` -> `invokeFP4Quantization`, static global scale): one
    grid-stride kernel (min(m, SMs * 2048 / block) blocks of min(k/8, 512) threads, 8 values per thread) that
    reads the 16-bit input once and writes E2M1 values and one E4M3 scale per 16 (`streaming_act_quant_time_s`)."""
    return streaming_act_quant_time_s(hw, m, k, act_bytes, NVFP4_BYTES_PER_ELEMENT, hw.efficiency.memory_efficiency)


@dataclass(frozen=True)
class BlockScaledGemmKernels:
    """The kernel a family runs for a block-scaled fp8 linear layer (1x128 activation groups, 128x128 weight blocks;
    vLLM's DeepGemmFp8BlockScaledMMKernel where vllm/utils/deep_gemm.py `is_deep_gemm_supported`: Hopper and Blackwell
    datacenter GPUs): its time with K-major fp8 operands (`time_s(hw, m, n, k, weight bytes per parameter, input bytes
    per element, output bytes per element)`). `contiguous_time_s`: the same library's m-grouped contiguous GEMM (the
    MoE experts' rows one after another, `m_grouped_fp8_gemm_nt_contiguous`) where described, same arguments (the
    weight bytes per parameter counting every group the call reads); None: not described on the family."""

    name: str
    time_s: Callable[[HardwareProfile, Any, Any, Any, float, float, float], Any]
    contiguous_time_s: Callable[[HardwareProfile, Any, Any, Any, Any, float, float], Any] | None = None


DEEPGEMM_SM90 = BlockScaledGemmKernels("deepgemm-sm90", deepgemm_sm90_gemm_time_s, deepgemm_sm90_contiguous_time_s)
DEEPGEMM_SM100 = BlockScaledGemmKernels("deepgemm-sm100", deepgemm_sm100_gemm_time_s)
