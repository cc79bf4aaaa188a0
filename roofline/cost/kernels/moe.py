"""Fused-MoE kernels: Triton / CUTLASS grouped GEMMs, FlashInfer's TRT-LLM-gen MoE (token tiles, finalize,
wide tiles), Marlin, and the expected row tiles of random routing.

MoE experts: two grouped GEMMs over the touched experts (tokens per expert rows each) at
moe_compute_efficiency * GEMM efficiency, plus moe_fixed_s (routing, sort/align, combine kernels); 8-bit
experts their own moe_fp8_gemm_factor and moe_fp8_fixed_s (another kernel).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import roofline.cost.kernels as kernel_families  # (the records hold this module's tables: bound at call time)
from roofline.cost.hardware import HardwareProfile
from roofline.cost.kernels.gemm import gemm_time_s, streaming_act_quant_time_s
from roofline.cost.kernels.gemm_block_scaled import DEEPGEMM_CONTIGUOUS_BLOCK_M
from roofline.cost.quant import (
    DEEPGEMM_FP8_BLOCK_PADDED,
    EIGHT_BIT_DTYPES,
    FP8_GROUP_SCALE_BYTES,
    MXFP8_BYTES_PER_ELEMENT,
    NVFP4_BYTES_PER_ELEMENT,
    TRITON_FP8_BLOCK,
)
from roofline.cost.roofline_math import Num, _bandwidth, _ceil, _max, _overlap

# Weight-only W4A16 MXFP4 MoE (OAI Triton `matmul_ogs` on Hopper; Blackwell's TRT-LLM kernel tiles as
# `TRTLLM_MXFP4_BF16_MOE_TILES`, `_mxfp4_bf16_moe_s`): the row tile follows the
# tokens per expert down to 16 rows, no split-K (cuBLAS's 64-row minimum wastes most of a tile on the few tokens
# an expert gets in decode; benchmarks/accuracy/moe_accuracy.py judges them on the MXFP4 tables).
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
# (tokens per expert up to, ((n up to, (tm, tn)),)). The 8-bit CUTLASS tiles (64 rows at least) would pad one token
# per expert to 64 rows (benchmarks/accuracy/moe_accuracy.py judges both on the B200 tables).
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


@dataclass(frozen=True)
class MoeKernels:
    """The fused-MoE kernels vLLM runs on a family (`moe_time_s`).

    `trtllm_gen`: the fused MoE of every format the tables time there by default (bf16, per-tensor fp8, fp8-block,
    NVFP4, MXFP4) is FlashInfer's TRT-LLM-gen MoE, whose runner (csrc/trtllm_fused_moe_runner.cu `MoE::Runner::run`)
    launches PermuteGemm1, GEMM2 (bf16 out per routed token) and then a separate finalize kernel
    (`moe::dev::finalize::run`): `_trtllm_finalize_s`; block-scaled fp8 experts take its token tiles
    (`TRTLLM_MOE_TILES_8BIT`) and wide-tile bandwidth (`TRTLLM_WIDE_TILE_SCHEMES`).
    `mxfp4_bf16_trtllm`: the default MXFP4 MoE is TRT-LLM's mxfp4-bf16 kernel (vLLM `_get_priority_backends_for_gpt_oss`:
    SM100; `_mxfp4_bf16_moe_s`); otherwise OAI Triton's `matmul_ogs` (`MOE_W4A16_TILES`).
    `mxfp8_activations`: `--moe-backend flashinfer-mxfp4-mxfp8` (FlashInfer's TRT-LLM MXFP4 x MXFP8 MoE) runs here.
    `fp8_block_triton`: the family's default block-fp8 MoE (its moe_fp8_block_* fit) is vLLM's Triton fused MoE, so
    `--moe-backend triton` runs that fit; else the flag runs `_triton_fp8_block_moe_s` at moe_triton_fp8_block_*."""

    name: str
    trtllm_gen: bool = False
    fp8_block_triton: bool = True
    mxfp4_bf16_trtllm: bool = False
    mxfp8_activations: bool = False


# Hopper, Ampere, Ada: Triton fused MoE (bf16, block fp8), FlashInfer CUTLASS (per-tensor fp8), OAI Triton (MXFP4).
TRITON_MOE = MoeKernels(name="triton-cutlass")
# Blackwell (SM100): FlashInfer's TRT-LLM-gen fused MoE for every format.
TRTLLM_GEN_MOE = MoeKernels(name="flashinfer-trtllm-gen", trtllm_gen=True, mxfp4_bf16_trtllm=True,
                            mxfp8_activations=True, fp8_block_triton=False)
# vLLM's Triton fused MoE on block-fp8 experts without a tuned config for the shape (none ships for MiniMax-M2.5's
# E = 256 / 128 / 64, N = 1536 / 768 on B200 in 0.17.0 or 0.22.0): `get_default_config` (fused_moe/fused_moe.py, the
# same rule in 0.17.0 and 0.22.0) takes BLOCK_SIZE_M 16 for a call of at most 64 tokens and 64 above, BLOCK_SIZE_N
# and BLOCK_SIZE_K the 128 x 128 weight block. moe_align_block_size pads every expert's rows to whole M blocks, and
# every block streams its expert's weight tiles. The B200 tables step there: MiniMax-M2.5's experts (3072 x 1536,
# top-8 of 256, moe_tp 1) 0.62 ms at 64 tokens, 1.02 ms at 80.
TRITON_FP8_BLOCK_SMALL_M = 64
TRITON_FP8_BLOCK_TILE_M = (16, 64)  # (at most TRITON_FP8_BLOCK_SMALL_M tokens, above)
TRITON_FP8_BLOCK_TILE_N = 128
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


def moe_bandwidth_cap(hw: HardwareProfile, dtype: str) -> float:
    """The highest bandwidth factor a fused-MoE kernel in `dtype` takes (`moe_time_s`): the factor multiplies the
    dense GEMMs' memory efficiency (gemm_fp8_memory_efficiency for 8-bit and fp4, else memory_efficiency), not the
    peak, so a fused-MoE kernel may stream its weights faster than the dense GEMM kernel, never faster than the
    DRAM."""
    e = hw.efficiency
    return 1.0 / (e.gemm_fp8_memory_efficiency if dtype in EIGHT_BIT_DTYPES or dtype == "fp4" else e.memory_efficiency)


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
               weight_bytes_per_param: Num, act_bytes: float, scheme: str | None = None,
               row_tiles: Callable[[int], Any] | None = None, num_experts: Any = None, num_tokens: Any = None,
               gated: Any = True, gemm: Callable[..., Any] = gemm_time_s, marlin_int4: Any = False) -> Any:
    """Fused MoE: grouped gate_up (n = 2*inter, k = hidden) and down (n = hidden, k = inter) GEMMs over the
    touched experts, SiLU-and-mul between, plus the fixed routing/sort/combine cost. `gated` False (per row where
    arrays): experts without a gate, one up projection (n = inter) and an elementwise activation between, as vLLM
    runs Nemotron-H's relu2 experts (`is_act_and_mul` False: w13 holds one shard, not two); the SwiGLU-only
    kernels (MXFP4 on Blackwell, MXFP8 activations, Marlin) take gated experts only. Where `MoeKernels.trtllm_gen`
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
    touched expert as for the other W4A16 kernels; `marlin_int4` (per row where arrays): the Marlin kernel's weights
    are int4 with bf16 group scales (compressed-tensors W4A16), not FP4 e2m1 (MXFP4): the dequantization rate
    differs (`marlin_moe_gemm_time_s`). `gemm`: the grouped GEMMs' formula (`gemm_time_s`'s arguments;
    a CPU's, `roofline.cost.op_time.gemm_formula`)."""
    e = hw.efficiency
    kernels = kernel_families.kernel_family(hw.family).moe
    if scheme is None:
        scheme = "fp8" if dtype in EIGHT_BIT_DTYPES else "none"
    if scheme == TRITON_FP8_BLOCK and kernels.fp8_block_triton:  # the family's own block-fp8 MoE is Triton: its fit
        scheme = "fp8-block"
    if scheme == DEEPGEMM_FP8_BLOCK_PADDED:
        assert num_experts is not None and num_tokens is not None, "DeepGEMM's padded rows: num_experts, num_tokens"
        return deepgemm_padded_moe_s(hw, tokens_per_expert, touched, hidden, inter, num_experts, num_tokens,
                                     weight_bytes_per_param, act_bytes, gated) + e.moe_fp8_block_fixed_s
    triton_fp8_block = scheme == TRITON_FP8_BLOCK
    trtllm_gen = kernels.trtllm_gen and not triton_fp8_block
    eff_scale, bw_scale, fixed_s = {
        # Per-tensor fp8 experts (FlashInfer CUTLASS / TRT-LLM) may outrun the dense fp8 GEMM kernel the factor is
        # relative to, never the peaks: factor x that kernel's efficiency is at most 1.
        "fp8": (min(e.moe_fp8_gemm_factor, 1.0 / e.gemm_fp8_compute_efficiency),
                min(e.moe_fp8_gemm_factor, 1.0 / e.gemm_fp8_memory_efficiency), e.moe_fp8_fixed_s),
        "fp8-block": (e.moe_fp8_block_gemm_factor, e.moe_fp8_block_bandwidth_factor, e.moe_fp8_block_fixed_s),
        TRITON_FP8_BLOCK: (e.moe_triton_fp8_block_gemm_factor, e.moe_triton_fp8_block_bandwidth_factor,
                           e.moe_triton_fp8_block_fixed_s),
        "mxfp4": (e.moe_w4a16_gemm_factor, e.moe_w4a16_bandwidth_factor, e.moe_w4a16_fixed_s),
        "mxfp4-marlin": (e.moe_w4a16_marlin_gemm_factor, e.moe_w4a16_marlin_bandwidth_factor,
                         e.moe_w4a16_marlin_fixed_s),
        "nvfp4": (e.moe_fp4_gemm_factor, e.moe_fp4_bandwidth_factor, e.moe_fp4_fixed_s),
        "mxfp4-mxfp8": (e.moe_mxfp4_mxfp8_gemm_factor, e.moe_mxfp4_mxfp8_bandwidth_factor, e.moe_mxfp4_mxfp8_fixed_s),
    }.get(scheme, (e.moe_compute_efficiency, 1.0, e.moe_fixed_s))
    bw_scale = min(bw_scale, moe_bandwidth_cap(hw, dtype))
    # Inputs: 8-bit for W8A8; fp4 with an fp8 scale per 16 for W4A4 on a device with fp4; else 16-bit.
    in_b = 1.0 if dtype in EIGHT_BIT_DTYPES else (NVFP4_BYTES_PER_ELEMENT if dtype == "fp4" else act_bytes)
    tiles = MOE_W4A16_TILES if scheme in ("mxfp4", "mxfp4-marlin") else None
    trtllm = TRTLLM_MOE_TILES_8BIT if scheme == "fp8-block" and trtllm_gen else None
    weights_bw: Any = bw_scale
    if trtllm_gen and scheme in TRTLLM_WIDE_TILE_SCHEMES:
        assert num_experts is not None, "the TRT-LLM MoE's token tile follows the tokens per expert: num_experts"
        wide = trtllm_tile_tokens(tokens_per_expert * touched, num_experts) > 8
        weights_bw = bw_scale * np.where(wide, e.moe_trtllm_wide_tile_bandwidth_factor, 1.0)
    kw = dict(weight_bytes_per_param=weight_bytes_per_param, in_bytes=in_b, out_bytes=act_bytes, groups=touched,
              eff_scale=eff_scale, bw_scale=weights_bw, tiles=tiles, cublas=False, row_tiles=row_tiles,
              tiles_8bit=trtllm)
    swiglu_only = scheme in ("mxfp4-mxfp8", "mxfp4-marlin") or (scheme == "mxfp4"
                                                                  and kernels.mxfp4_bf16_trtllm)
    assert not swiglu_only or np.all(gated), f"{scheme} experts are gated (SwiGLU) only"
    if scheme == "mxfp4-mxfp8":
        if row_tiles is None and num_experts is not None:  # serving: each expert's own count (as for Marlin)
            kw["row_tiles"] = _poisson_row_tiles(tokens_per_expert * touched / num_experts, num_experts)
        return _mxfp4_mxfp8_moe_s(hw, tokens_per_expert, touched, hidden, inter, num_tokens, act_bytes,
                                  {**kw, "tiles": None, "tiles_8bit": TRTLLM_MXFP8_MOE_TILES_8BIT}) + fixed_s
    if scheme == "mxfp4" and kernels.mxfp4_bf16_trtllm:
        if row_tiles is None and num_experts is not None:  # serving: each expert's own count (as for MXFP8)
            kw["row_tiles"] = _poisson_row_tiles(tokens_per_expert * touched / num_experts, num_experts)
        return _mxfp4_bf16_moe_s(hw, tokens_per_expert, touched, hidden, inter, dtype, num_tokens, act_bytes,
                                 {**kw, "tiles_8bit": None}) + fixed_s
    # Up projections out (2 x inter a routed token gated, inter not) read by the activation, its inter values written.
    up_width = np.where(gated, 2.0, 1.0) if not isinstance(gated, bool) else (2.0 if gated else 1.0)
    act = tokens_per_expert * touched * (up_width + 1.0) * inter * act_bytes / (_bandwidth(hw) * e.memory_efficiency)
    if scheme == "mxfp4-marlin" and num_experts is not None:
        return (_marlin_gemms_s(hw, tokens_per_expert, touched, hidden, inter, dtype, num_experts, kw, marlin_int4)
                + act + fixed_s)
    if triton_fp8_block:
        return _triton_fp8_block_gemms_s(hw, tokens_per_expert, up_width * inter, hidden, inter, dtype, num_tokens,
                                         gemm, kw) + act + fixed_s
    up = gemm(hw, tokens_per_expert, up_width * inter, hidden, dtype, **kw)
    down = gemm(hw, tokens_per_expert, hidden, inter, dtype, **kw)
    if trtllm_gen:  # FlashInfer's TRT-LLM fused MoE: its finalize kernel after GEMM2
        assert num_tokens is not None, "the TRT-LLM MoE's finalize pass sums per token: num_tokens is needed"
        act = act + _trtllm_finalize_s(hw, tokens_per_expert * touched, num_tokens, hidden, act_bytes)
    if scheme == "fp8":  # per-tensor fp8's grouped GEMMs: weights streamed at most at moe_fp8_weight_rate, and a
        # time per touched expert (moe_fp8_expert_fixed_s)
        weights_s = touched * (up_width + 1.0) * hidden * inter * weight_bytes_per_param / e.moe_fp8_weight_rate
        return _max(up + down, weights_s) + act + fixed_s + touched * e.moe_fp8_expert_fixed_s
    return up + down + act + fixed_s


def _triton_fp8_block_gemms_s(hw: HardwareProfile, tokens_per_expert: Any, up_n: Any, hidden: Any, inter: Any,
                              dtype: str, num_tokens: Any, gemm: Callable[..., Any], kw: dict[str, Any]) -> Any:
    """vLLM's Triton fused MoE's two grouped GEMMs on block-fp8 experts (`TRITON_FP8_BLOCK`): gate_up (n = `up_n`)
    and down, each expert's rows in blocks of vLLM's default BLOCK_SIZE_M for the call's `num_tokens`
    (`TRITON_FP8_BLOCK_TILE_M`), 128 weight rows a tile; no finalize kernel (the top-k sum is vLLM's moe_sum, a
    streaming pass the activation's bytes carry)."""
    assert num_tokens is not None, "the Triton MoE's row block follows the call's tokens: num_tokens is needed"

    def at(tm: int) -> Any:
        a = {**kw, "tiles": None, "tiles_8bit": ((math.inf, ((math.inf, (tm, TRITON_FP8_BLOCK_TILE_N)),)),)}
        return gemm(hw, tokens_per_expert, up_n, hidden, dtype, **a) + gemm(hw, tokens_per_expert, hidden, inter,
                                                                           dtype, **a)

    small, large = TRITON_FP8_BLOCK_TILE_M
    tm = np.where(np.asarray(num_tokens) <= TRITON_FP8_BLOCK_SMALL_M, float(small), float(large))
    return _at_tile_heights(float(tm) if tm.ndim == 0 else tm, at)


# The kernels of one `deep_gemm_moe_fp8` call (`deepgemm_padded_moe_s`): topk softmax, the input quantization,
# count_expert_num_tokens, the block ids' zero fill, ep_scatter's two kernels, gate_up, the activation, its
# quantization, down, ep_gather.
DEEPGEMM_PADDED_MOE_KERNELS = 11


def deepgemm_padded_moe_s(hw: HardwareProfile, tokens_per_expert: Any, touched: Any, hidden: Any, inter: Any,
                          num_experts: Any, num_tokens: Any, weight_bytes_per_param: Any, act_bytes: float,
                          gated: Any = True) -> Any:
    """Block-fp8 experts as vLLM 0.11.1-0.12.x runs them on Hopper (`roofline.cost.quant.resolve_deepgemm_moe`):
    `deep_gemm_moe_fp8` (vllm/model_executor/layers/fused_moe/deep_gemm_moe.py `DeepGemmExperts.apply`), less the
    routing and launches (the family's moe_fp8_block_fixed_s, added by `moe_time_s`). The call's rows are
    `compute_aligned_M`: routed = tokens_per_expert x touched rows plus 127 for each of the rank's `num_experts`,
    rounded up to 128, since the experts' counts are not on the host; `deepgemm_moe_permute` gives each expert's rows
    whole 128-row blocks and the rest expert id 0, so DeepGEMM's contiguous GEMM (`deepgemm_sm90_contiguous_time_s`)
    computes all of them: at decode about num_experts x 128 rows whatever the batch (128 experts: 16,384 rows for 16
    tokens or 1). Passes, in order: the input's 1x128-group fp8 quantization (`num_tokens` x hidden, in the modular
    kernel's prepare); `ep_scatter` copying the routed rows (fp8 values and scales) into their blocks; gate_up over
    all rows (the touched experts' weights and expert 0's, bf16 out); SiLU-and-mul over all rows (`activation`);
    their 1x128-group quantization (`per_token_group_quant_fp8`); down over all rows; `ep_gather` reading the routed
    rows and writing each token's weighted sum. The streaming passes at the DRAM rate times memory_efficiency, the
    quantizations at act_group_quant_memory_efficiency (the same kernel as the block-fp8 linear layers'). `gated`
    False: one up projection (no gate; its activation reads and writes `inter` values a row)."""
    block_fn = kernel_families.kernel_family(hw.family).block_fp8_gemm
    assert block_fn is not None and block_fn.contiguous_time_s is not None, \
        f"{hw.id}: no DeepGEMM contiguous grouped GEMM described on family {hw.family}"
    e = hw.efficiency
    align = DEEPGEMM_CONTIGUOUS_BLOCK_M
    routed = tokens_per_expert * touched
    rows = _ceil((routed + num_experts * (align - 1)) / align) * align
    up_width = np.where(gated, 2.0, 1.0) if not isinstance(gated, bool) else (2.0 if gated else 1.0)
    fp8_in = 1.0 + FP8_GROUP_SCALE_BYTES
    # Weights read: every touched expert's and expert 0's (the padding blocks'), each once per call.
    weights = weight_bytes_per_param * np.minimum(touched + 1.0, num_experts)
    up = block_fn.contiguous_time_s(hw, rows, up_width * inter, hidden, weights, fp8_in, act_bytes)
    down = block_fn.contiguous_time_s(hw, rows, hidden, inter, weights, fp8_in, act_bytes)
    quant_eff = e.act_group_quant_memory_efficiency
    quant = (streaming_act_quant_time_s(hw, num_tokens, hidden, act_bytes, fp8_in, quant_eff)
             + streaming_act_quant_time_s(hw, rows, inter, act_bytes, fp8_in, quant_eff))
    bw = _bandwidth(hw) * e.memory_efficiency
    streamed = (2.0 * routed * hidden * fp8_in  # ep_scatter: the routed rows read and written
                + rows * (up_width + 1.0) * inter * act_bytes  # the activation over every row
                + (routed + num_tokens) * hidden * act_bytes)  # ep_gather
    return up + down + quant + streamed / bw + 3.0 * e.kernel_fixed_s


def triton_masked_rows_s(hw: HardwareProfile, rows: Any, hidden: Any, inter: Any, act_bytes: float) -> Any:
    """What `rows` routed rows whose experts sit on other expert-parallel ranks cost vLLM's Triton fused MoE on this
    one (`fused_experts` with an `expert_map`, vLLM 0.17.0-0.32 fused_moe.py): moe_align_block_size maps their
    blocks to expert -1, for which both grouped GEMMs write zero rows (`write_zeros_to_output`: 2 x inter and hidden
    values a row); the SiLU-and-mul reads and writes every row, the block-fp8 quantization of its output
    (`moe_kernel_quantize_input`) reads `inter` values and writes fp8 ones, and moe_sum reads the hidden row: all at
    the streaming bandwidth times moe_triton_masked_row_efficiency (fitted on the tables' moe_ep rows, which time
    `fused_experts` on all the tokens with the rank's experts)."""
    per_row = (2.0 * inter + 3.0 * inter + hidden) * act_bytes + inter * (act_bytes + 1.0) + hidden * act_bytes
    e = hw.efficiency
    return rows * per_row / (_bandwidth(hw) * e.memory_efficiency * e.moe_triton_masked_row_efficiency)


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
    (8 -> 12 per expert, one tile -> two) 2.00 -> 2.82 ms at the same weight bytes (benchmarks/accuracy/moe_accuracy.py
    `run_mxfp8` judges the description)."""
    assert num_tokens is not None, "the MXFP8 path quantizes the layer's input: num_tokens is needed"
    e = hw.efficiency
    routed = tokens_per_expert * touched
    quant = streaming_act_quant_time_s(hw, num_tokens, hidden, act_bytes, MXFP8_BYTES_PER_ELEMENT,
                                       e.memory_efficiency)
    args = {**kw, "in_bytes": MXFP8_BYTES_PER_ELEMENT}
    # Every token tile streams its expert's weight tile again (the first read from DRAM, the others wherever they
    # are): weights moved = the experts' token tiles x their weights, at the fitted bandwidth.
    tiles_per_expert = _token_tiles(kw["row_tiles"], touched, tokens_per_expert) / _max(touched, 1e-30)
    args["weight_bytes_per_param"] = kw["weight_bytes_per_param"] * tiles_per_expert
    up = gemm_time_s(hw, tokens_per_expert, 2 * inter, hidden, "fp8",
                     **{**args, "out_bytes": MXFP8_BYTES_PER_ELEMENT / 2})  # SwiGLU: 2 x inter in, inter out
    down = gemm_time_s(hw, tokens_per_expert, hidden, inter, "fp8", **args)
    return quant + up + down + _trtllm_finalize_s(hw, routed, num_tokens, hidden, act_bytes)


def _trtllm_finalize_s(hw: HardwareProfile, routed: Any, num_tokens: Any, hidden: Any, act_bytes: float) -> Any:
    """The TRT-LLM-gen fused MoE's finalize kernel (`MoeKernels.trtllm_gen`): each token's top-k GEMM2 rows (bf16,
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
    activation kernel); finalize sums each token's top-k outputs (benchmarks/accuracy/moe_accuracy.py judges it
    against the one-pass `MOE_W4A16_TILES` description)."""
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
                    num_experts: Any, kw: dict[str, Any], int4: Any = False) -> Any:
    """Marlin's gate_up and down grouped GEMMs (`marlin_moe_gemm_time_s`) at vLLM's block_size_m
    (`marlin_moe_block_size_m` of the routed tokens over all the layer's experts); each row its own height; `int4`:
    int4 weights (else FP4 e2m1), whose dequantization rate the chip states."""
    routed_per_expert = tokens_per_expert * touched / num_experts
    block_m = marlin_moe_block_size_m(routed_per_expert)
    args = {name: kw[name] for name in ("weight_bytes_per_param", "in_bytes", "out_bytes", "eff_scale", "bw_scale",
                                        "row_tiles")}
    e = hw.efficiency
    args["dequant_rate"] = np.where(int4, e.moe_w4a16_marlin_int4_dequant_rate, e.moe_w4a16_marlin_fp4_dequant_rate) \
        if not isinstance(int4, bool) else (e.moe_w4a16_marlin_int4_dequant_rate if int4
                                           else e.moe_w4a16_marlin_fp4_dequant_rate)
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
                           bw_scale: float, row_tiles: Callable[[int], Any] | None = None,
                           dequant_rate: Any = math.inf) -> Any:
    """One Marlin MoE GEMM (vLLM csrc/moe/marlin_moe_wna16, `moe_wna16_marlin_gemm`) over `groups` experts of m
    tokens each (or `row_tiles`), in moe blocks of `block_m` rows.

    The kernel is persistent: sms * blocks_per_sm thread blocks share the problem's tile iterations (moe blocks x
    n tiles x k tiles of thread_n x thread_k: `small_batch_thread_configs` 128 x 128 for block_m <= 16, k 64 where
    k is not a multiple of 128; `large_batch_thread_configs` 256 x 64, n 128 where n is not a multiple of 256) in
    equal stripes along k, partial sums reduced in global memory. blocks_per_sm: at most 4 (block_m <= 16) or 2,
    and at most n_tiles * routed tokens * 4 / SMs (`determine_exec_config`). Compute: the busiest SM's share of
    the tile iterations plus, per slice (moe block x n tile), the family's per-tile cost gemm_tile_fixed_k, at
    the compute factor; bytes: each touched expert's weights once, the activations in and out, at the bandwidth
    factor; the two overlap (`_overlap`, at moe_w4a16_marlin_overlap_exponent where the chip states it); plus
    kernel_fixed_s. Every moe block is computed in full, so a token alone on its expert costs block_m rows, and a
    call's slices grow with the moe blocks (top-k x tokens at decode), not with its bytes. Every moe block also
    dequantizes its weight tiles again, in registers beside the MMAs: the busiest SM's tile iterations x thread_n x
    thread_k weights at `dequant_rate` (weights per second an SM, the weight type's: `_marlin_gemms_s`) bound the
    compute time from below. Plus the call's slice steps on its critical path (`marlin_slice_steps`) at
    moe_w4a16_marlin_slice_s each."""
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
    # Every tile iteration dequantizes its thread_k x thread_n weights once per moe block (the kernel's `matmul`
    # converts each weight fragment, then runs the block's MMAs on it): the SM's thread blocks together convert
    # iters x blocks_per_sm tiles at `dequant_rate` weights per second, beside the MMAs (interleaved, "the m
    # dimension as the inner loop in order to encourage overlapping dequantization and matmul").
    tc = _max(tc, iters * per_sm_blocks * tn * tk / dequant_rate)
    bw = _bandwidth(hw) * e.memory_efficiency * bw_scale
    moved = groups * n * k * weight_bytes_per_param + routed * (k * in_bytes + n * out_bytes)
    steps = marlin_slice_steps(units, _ceil(k / tk), sms * per_sm_blocks)
    overlap = e.moe_w4a16_marlin_overlap_exponent or e.overlap_exponent  # 0: the GEMMs' (params.py)
    return _overlap(tc, moved / bw, overlap) + e.kernel_fixed_s + steps * e.moe_w4a16_marlin_slice_s


def marlin_slice_steps(units: Any, k_tiles: Any, blocks: Any) -> Any:
    """The slice steps on one Marlin MoE call's critical path (csrc/moe/marlin_moe_wna16/marlin_template.h): each of
    `blocks` persistent thread blocks runs iters = ceil(units / blocks) consecutive tile iterations of the flattened
    (slice, k tile) sequence, a slice being one moe block x one n tile of `k_tiles` k tiles. A block pays a step per
    slice it works on (the pipeline drained and refilled, `start_pipes`), and the blocks sharing a slice along k
    hand its fp32 partial sums on one after another in slice order (`barrier_acquire(&locks[locks_off],
    slice_idx)`, `global_reduce_fp32`). With g = gcd(iters, k_tiles): the busiest block touches
    floor((k_tiles - g + iters - 1) / k_tiles) + 1 slices, and a slice is shared by at most
    floor((k_tiles - g + iters - 1) / iters) + 1 blocks, each but the first waiting for the one before."""
    iters = np.maximum(_ceil(units / blocks), 1.0)
    it = np.asarray(iters, dtype=np.int64)
    kt = np.asarray(k_tiles, dtype=np.int64)
    g = np.gcd(it, kt).astype(np.float64)
    span = k_tiles - g + iters - 1.0
    out = np.floor(span / k_tiles) + 1.0 + np.floor(span / iters)
    return float(out) if np.ndim(out) == 0 else out

