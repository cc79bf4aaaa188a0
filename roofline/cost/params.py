"""The fitted and executor part of a hardware profile: the `efficiency:` and `executor:` YAML sections.

Owned by the cost model (`roofline.cost.step_cost`), parsed by `roofline.cost.hardware.load_profile`. Every field has
a default so a datasheet-only profile works; `from_dict` rejects unknown keys (nothing a user wrote is
silently ignored). YAML carries units in the names (`_us`); the dataclasses hold SI seconds.

    EfficiencyParams.from_dict({"memory_efficiency": 0.8}, where="h100-sxm.yaml: efficiency")
    ExecutorParams.from_dict({"mode": "eager", "kernel_launch_us": 5}, where="cpu.yaml: executor")

The efficiency fields are the few physical parameters `roofline.calibration.fit` fits per device (see `FITTABLE`):
how close to peak the main loops run, fixed costs per kernel, per tile and per collective. The defaults are
"datasheet" guesses from public benchmark reports, the starting point and the "before fitting" baseline of
BENCHMARKS.md: achieved GEMM efficiency 0.70-0.80 of the dense BF16/FP16 peak and 0.60-0.70 of FP8 (Azure
AI-benchmarking-guide, cuBLASLt on A100/H100/H200; MAMF in stas00/ml-engineering), HBM 0.80-0.90 of the datasheet
bandwidth (STREAM-like copy/triad in the same guide), decode weight streaming 0.70-0.85, FlashAttention prefill
0.35-0.75 of peak by kernel generation (FA2 in the Azure guide, FA3 in arXiv 2407.08608).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from roofline.errors import UserError, check_fields


def _number(section: dict[str, Any], key: str, default: float, where: str, lo: float = 0.0,
            hi: float = float("inf")) -> float:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi \
            or abs(value) == float("inf"):  # (an inf bound still means a finite number)
        raise UserError(f"{where}.{key}: must be a number in [{lo}, {hi}] (finite), got {value!r}")
    return float(value)


# Each efficiency parameter is declared once, as its `EfficiencyParams` field below: `name: float = _param(default,
# unit, group, stages, ...)`. Everything else about a parameter is derived from that declaration
# (`EFFICIENCY_PARAMS`): its YAML key (the field name with its unit: `_s` -> `_us`, a rate + `_tb_per_s`), the scale
# from YAML to SI, its bounds, the fit stages that set it and its operator-family group.
#
# unit -> (YAML key suffix, scale from YAML to SI, lowest and highest allowed value in YAML units). A fraction of
# a peak is in [0.001, 1] (zero would be an infinite time); a fixed time is in microseconds; a "factor" states its
# upper bound (`hi`); a rate in TB/s is at least 1 GB/s.
UNITS: dict[str, tuple[str, float, float, float | None]] = {
    "fraction": ("", 1.0, 1e-3, 1.0),
    "factor": ("", 1.0, 0.0, None),
    "us": ("_us", 1e-6, 0.0, 1e6),
    "TB/s": ("_tb_per_s", 1e12, 1e-3, 1e3),
    "G weights/s per SM": ("_g_per_s", 1e9, 1e-3, 1e9),
    "K elements": ("", 1.0, 0.0, 1e6),
    "MMA k-steps": ("", 1.0, 0.0, 64.0),
    "rows": ("", 1.0, 0.0, 1e6),
    "FLOPs": ("", 1.0, 0.0, 1e6),
    "exponent": ("", 1.0, 1.0, 64.0),
}
# Operator-family groups (the kernels a parameter describes; `roofline.cost.kernels` reads them).
GROUPS: dict[str, str] = {
    "device": "every GPU kernel: DRAM streaming, the memory/compute soft roofline, a kernel's fixed time",
    "gemm": "dense bf16/fp16 and per-tensor 8-bit GEMMs (cuBLAS, CUTLASS) and their input quantization",
    "gemm_fp8_block": "block-scaled fp8 dense GEMMs (DeepGEMM) and their group quantization",
    "gemm_fp8_block_small": "block-scaled fp8 dense GEMMs (DeepGEMM): the decode-sized call's fixed time and "
                            "bandwidth share",
    "gemm_fp4": "NVFP4 dense GEMMs (FlashInfer CuTe-DSL)",
    "gemm_weight_only": "weight-only (mixed-input) dense GEMMs: Marlin (W4A16, W8A16 fp8, FP4), Machete",
    "cpu": "CPU executors only (roofline.cost.cpu.engine)",
    "attention": "prefill and decode attention (FlashAttention 2/3, FlashInfer TRT-LLM)",
    "mla": "multi-head latent attention (DeepSeek-V3 family): its prefill flash attention and absorbed decode kernel",
    "moe_bf16": "16-bit fused MoE",
    "moe_fp8": "per-tensor fp8 fused MoE",
    "moe_fp8_block": "block-scaled fp8 fused MoE",
    "moe_triton_fp8_block": "block-scaled fp8 experts on vLLM's Triton fused MoE where another kernel is the default",
    "moe_w4a16": "MXFP4 weight-only fused MoE (OAI Triton, FlashInfer TRT-LLM mxfp4-bf16)",
    "moe_w4a16_marlin": "MXFP4 / int4 experts on vLLM's Marlin MoE",
    "moe_mxfp4_mxfp8": "MXFP4 experts with MXFP8 activations (FlashInfer TRT-LLM)",
    "moe_fp4": "NVFP4 fused MoE",
    "moe_trtllm": "FlashInfer TRT-LLM-gen fused MoE, across formats",
    "collectives": "all-reduce and all-gather (vLLM custom all-reduce, NCCL)",
    "all_to_all": "expert parallelism's dispatch and combine (DeepEP high-throughput / low-latency, NCCL "
                  "all-gather / reduce-scatter)",
    "op_tables": "the operator tables' measurement condition only, never a serving step",
}
# Fit stages: who sets a parameter. The operator-table stages of `roofline calibrate --op-tables`
# (`roofline.calibration.calibrate.OP_TABLE_STAGES`, in this order) and the family fit's other steps
# (`roofline.calibration.family_fit`): `moe_joint` (16-bit and per-tensor fp8 MoE fitted jointly over a family's
# chips), `moe_wide_tile` (TRT-LLM's wide token tile), `moe_format` / `gemm_format` (the other weight formats, per
# chip: `roofline calibrate --op-tables --op moe-formats` / `--op gemm-formats`), `mla` (multi-head latent attention,
# per chip: `--op mla`), `all_to_all` (expert parallelism's dispatch / combine, per chip: `--op all-to-all`; the
# per-chip ops: `roofline.calibration.chip_fit`), `cpu_profile` (`roofline profile-device`); `trace`: what a step-trace
# calibration fits by default (`roofline.calibration.calibrate.DEFAULT_TRACE_PARAMS`); `unfitted`: no fit sets it (no
# operator table times its kernel): its declared default, from the kernel's documented behaviour, is what runs, and
# `roofline profiles` and `simulate` say so.
STAGES = ("gemm", "attention", "all_reduce", "moe", "moe_joint", "moe_wide_tile", "moe_format", "gemm_format",
          "mla", "all_to_all", "cpu_profile", "trace", "unfitted")


@dataclass(frozen=True)
class ParamSpec:
    """The declaration of one efficiency parameter (`EFFICIENCY_PARAMS[name]`)."""

    name: str  # the `EfficiencyParams` field (SI units)
    key: str  # its YAML key, unit in the name
    unit: str  # a key of `UNITS`
    scale: float  # YAML value * scale = SI value
    lo: float  # lowest allowed value, YAML units
    hi: float  # highest allowed value, YAML units
    default: float  # SI; "no effect" or a datasheet guess, never a fit (fits live in the YAML they were fitted into)
    group: str  # a key of `GROUPS`
    stages: tuple[str, ...]  # the fit stages that set it (`STAGES`)
    search: tuple[float, float] | None  # `moe_joint`'s search range in its coordinate (`joint_value`)


def _param(default: float, unit: str, group: str, stages: tuple[str, ...], lo: float | None = None,
           hi: float | None = None, search: tuple[float, float] | None = None) -> Any:
    """An `EfficiencyParams` field declaration (a dataclass field whose metadata `EFFICIENCY_PARAMS` reads)."""
    return field(default=default, metadata={"unit": unit, "group": group, "stages": stages, "lo": lo, "hi": hi,
                                            "search": search})


@dataclass(frozen=True)
class EfficiencyParams:
    """How close to its peaks the device runs, by kind of work (see `roofline.cost.step_cost` for the formulas)."""

    # Fraction of the dense bf16/fp16 peak a GEMM main loop reaches on full tiles (MAMF: 80 % on H100 SXM).
    gemm_compute_efficiency: float = _param(0.80, "fraction", "gemm", ("gemm", "trace"))
    # Prologue/epilogue of one output tile (pipeline fill, writing C), as extra K elements of MACs.
    gemm_tile_fixed_k: float = _param(64.0, "K elements", "gemm", ("gemm",))
    # Fraction of peak DRAM bandwidth a streaming kernel reaches (STREAM triad on H100: 89 %); also the
    # bandwidth of a 16-bit GEMM's memory-bound regime (small m: weights streamed once).
    memory_efficiency: float = _param(0.85, "fraction", "device", ("gemm", "trace"))
    # Fraction of the SMs that must stream at once to saturate DRAM (Little's law: bytes in flight per SM are
    # bounded): a kernel with fewer thread blocks reaches a proportional share of the bandwidth.
    memory_saturation_fraction: float = _param(0.5, "fraction", "device", ("gemm",))
    # Fraction of the fp8/int8 peak an 8-bit GEMM main loop reaches (Azure cuBLASLt fp8: 61-70 % on H100).
    gemm_fp8_compute_efficiency: float = _param(0.65, "fraction", "gemm", ("gemm",))
    # gemm_tile_fixed_k of 8-bit GEMMs (a CUTLASS kernel with its own pipeline depth and scaling epilogue).
    gemm_fp8_tile_fixed_k: float = _param(64.0, "K elements", "gemm", ("gemm",))
    # mma.sync kernels whose CTAs run one warp per SM sub-partition (`GemmKernels.warp_tile_rate`: Ada's cuBLAS SM80
    # kernels and CUTLASS 2.x W8A8): what each warp spends per MMA k-step besides its MMAs (fragment loads from
    # shared memory, the CTA barrier, the next stage's copies), in units of one MMA's time (16 clocks on SM89).
    # Starting value 2 (32 clocks: a few shared-memory loads' latency); read only by families whose tiles have warp
    # tiles described (`GemmKernels.ctas_8bit`, `ctas_16bit`).
    gemm_warp_step_overhead_mma: float = _param(2.0, "MMA k-steps", "gemm", ("gemm",))
    # Power-limited chips (`GemmKernels.power_limited`: Ada, e.g. the 350 W L40S): the dense GEMM math rate the chip
    # sustains with every SM busy, as a fraction of its SMs' combined rate at gemm_(fp8_)compute_efficiency; a wave
    # keeping more SMs busy than this fraction of them runs slower in proportion (the clock drops at the power
    # limit). 1 = no cap; starting value 0.8.
    gemm_sustained_sm_fraction: float = _param(0.8, "fraction", "gemm", ("gemm",))
    # memory_efficiency in the memory-bound regime of 8-bit GEMMs (a different kernel and load pipeline).
    gemm_fp8_memory_efficiency: float = _param(0.85, "fraction", "gemm", ("gemm",))
    # Bandwidth efficiency of the kernel that quantizes a W8A8 GEMM's 16-bit input to 8 bits.
    act_quant_memory_efficiency: float = _param(0.85, "fraction", "gemm", ("gemm",))
    # Time of one thread block of that kernel (vLLM's static fp8 quant launches one block of 1024 threads per
    # token row: csrc/quantization/fp8/common.cu `scaled_fp8_quant`), paid per wave of resident blocks.
    act_quant_block_s: float = _param(1e-6, "us", "gemm", ("gemm",))
    # How sharply a kernel's time switches from memory- to compute-bound: (tc^p + tm^p)^(1/p); large p -> max.
    overlap_exponent: float = _param(4.0, "exponent", "device", ("gemm",))
    # Device time of one kernel that does no work: launch latency inside a graph, ramp-up, tail.
    kernel_fixed_s: float = _param(3e-6, "us", "device", ("gemm",))
    # CPU only (`roofline.cost.cpu_timing`, no tiles or waves there): a GEMM of m rows costs as many MACs as one of
    # m + gemm_fixed_rows rows at full efficiency, i.e. efficiency m / (m + gemm_fixed_rows) (register blocking
    # and B-panel loads of the microkernel amortized over few rows). oneDNN's prepacked bf16 GEMM on this
    # project's AVX-512-BF16 EPYC, 1 thread, weights in cache: m = 4 runs at ~0.7 of the m >= 16 rate -> ~2.
    gemm_fixed_rows: float = _param(2.0, "rows", "cpu", ("cpu_profile",))
    # Fraction of the bf16 peak flash attention reaches in prefill (FA3 paper: up to 75 % on H100).
    attention_compute_efficiency: float = _param(0.55, "fraction", "attention", ("attention", "trace"))
    # Non-matmul work of one (query, key) score (exp, max, rescale), in equivalent tensor-core FLOPs: H100 SXM
    # has 989 TFLOP/s of bf16 matmul but 3.9 TFLOP/s of exponentials (FlashAttention-3 paper, Shah et al.
    # 2024, section 3), 256 FLOPs per exp; FA3 overlaps half or more of it with the matmuls (its ping-pong
    # schedule). This is why FA3 reaches fewer TFLOP/s at head_dim 64 than at 256.
    attention_softmax_flops_per_pair: float = _param(128.0, "FLOPs", "attention", ("attention",))
    # Pipeline fill of one prefill work tile (load Q and the first K/V block before any math, write O).
    attention_tile_fixed_s: float = _param(1e-6, "us", "attention", ("attention",))
    # Fraction of peak bandwidth decode attention reaches streaming the KV cache.
    attention_memory_efficiency: float = _param(0.75, "fraction", "attention", ("attention", "trace"))
    # Fixed device time of an attention call beyond one kernel's (metadata, split-KV combine).
    attention_fixed_s: float = _param(5e-6, "us", "attention", ("attention",))
    # With an fp8 KV cache the attention kernels are other instantiations (FA3 and TRT-LLM convert K/V tiles
    # before the matmuls): prefill reaches this factor of attention_compute_efficiency, decode this factor of
    # attention_memory_efficiency. 1 = as fast as with a 16-bit cache (per byte).
    attention_fp8_kv_compute_factor: float = _param(1.0, "fraction", "attention", ("attention",))
    attention_fp8_kv_bandwidth_factor: float = _param(1.0, "fraction", "attention", ("attention",))
    # Fraction of the GEMM efficiency the grouped expert GEMMs of fused MoE reach.
    moe_compute_efficiency: float = _param(0.70, "fraction", "moe_bf16", ("moe", "moe_joint"), search=(0.02, 1.0))
    # Fixed device time of a fused-MoE call: routing, token sort/align, activation, reduce kernels.
    moe_fixed_s: float = _param(20e-6, "us", "moe_bf16", ("moe", "moe_joint"), search=(0.0, 500.0))
    # The same two for W8A8 fp8 fused MoE: another kernel (FlashInfer CUTLASS / TRT-LLM grouped GEMMs with their
    # own routing and quantization kernels on Hopper and Blackwell; Triton on Ada). Its factor scales both the
    # dense fp8 GEMM's compute and memory efficiency; as another kernel it may exceed 1 (up to 1.25), the product
    # is capped at the peak (`roofline.cost.kernels.moe.moe_time_s`).
    moe_fp8_gemm_factor: float = _param(0.70, "factor", "moe_fp8", ("moe", "moe_joint"), hi=1.25, search=(0.02, 1.25))
    moe_fp8_fixed_s: float = _param(20e-6, "us", "moe_fp8", ("moe", "moe_joint"), search=(0.0, 500.0))
    # Its time per touched expert beyond the GEMM roofline: the grouped GEMM's work per group (the expert's problem
    # and per-tensor scales set up, its tiles' prologue), which the tables show at small token counts (Hopper's
    # FlashInfer CUTLASS kernel: ~1 us an expert). The default is the fit's start.
    moe_fp8_expert_fixed_s: float = _param(1e-6, "us", "moe_fp8", ("moe", "moe_joint"), search=(0.0, 50.0))
    # The rate, in bytes per second, at which its grouped GEMMs stream the touched experts' weights at most, whatever
    # the chip's DRAM: a property of the kernel, not of HBM. The tables show it on Hopper (FlashInfer CUTLASS): at one
    # token the time grows by 1.57 us per MB of touched expert weights on H100 and 1.58 on H200 (0.64 TB/s, a fifth
    # and a seventh of their HBM peaks), so the DRAM roofline with a factor relative to each chip's bandwidth cannot
    # describe both. Default 1,000 TB/s: no limit; Hopper's family file carries the joint fit of both chips
    # (`roofline.calibration.moe_fits.fit_joint`, stage moe_joint of the family fit).
    moe_fp8_weight_rate: float = _param(1e15, "TB/s", "moe_fp8", ("moe_joint",), search=(0.001, 10.0))
    # Dense linear layers in the other formats (`roofline.cost.op_time.linear_time_s`). Block-scaled fp8 (vLLM's
    # DeepGEMM kernel on Hopper and Blackwell): the factor of the per-tensor fp8 GEMM's compute efficiency it reaches;
    # its per-output-tile cost in K elements (a persistent kernel whose TMA-store epilogue overlaps the next tile's
    # loads: much less than CUTLASS's gemm_fp8_tile_fixed_k); the bandwidth efficiency of its input quantization
    # (vLLM `per_token_group_quant_8bit`: one pass, 1x128 groups). Defaults: guesses; the chip files carry the fits
    # of `roofline calibrate --op-tables --op gemm-formats` on the device-dominated rows of the eagerly timed tables.
    gemm_fp8_block_factor: float = _param(1.0, "fraction", "gemm_fp8_block", ("gemm_format",))
    gemm_fp8_block_tile_fixed_k: float = _param(64.0, "K elements", "gemm_fp8_block", ("gemm_format",))
    act_group_quant_memory_efficiency: float = _param(0.85, "fraction", "gemm_fp8_block", ("gemm_format",))
    # The decode-sized DeepGEMM call, which the eagerly timed tables above cannot time (their host floor hides it):
    # a fixed device time per GEMM call beyond kernel_fixed_s, and the fraction of the SMs whose CTAs saturate DRAM
    # (a call with fewer CTAs, e.g. a swap-AB decode GEMM over few 128-row weight tiles, draws a proportional share),
    # as gemm_fp4_fixed_s / gemm_fp4_saturation_fraction. Defaults: no effect; the Blackwell chip files carry the fit
    # of `roofline calibrate --op-tables --op gemm-formats` on the CUDA-graph-timed DeepGEMM rows of the SGLang table
    # (`roofline.calibration.gemm_format_fit.fit_small_calls`).
    gemm_fp8_block_fixed_s: float = _param(0.0, "us", "gemm_fp8_block_small", ("gemm_format",))
    gemm_fp8_block_saturation_fraction: float = _param(1e-3, "fraction", "gemm_fp8_block_small", ("gemm_format",))
    # NVFP4 (FlashInfer CuTe-DSL on Blackwell, `roofline.cost.kernels.gemm_block_scaled.cutedsl_fp4_gemm_time_s`):
    # this factor of the 8-bit GEMM's compute efficiency at the fp4 peak; a fixed device time per call beyond kernel_fixed_s (the
    # persistent kernel's prologue: tensor-memory allocation, barrier and TMA-descriptor setup, scale-factor
    # loads before the first MMA); the fraction of the SMs whose CTAs saturate DRAM (fewer CTAs, e.g. a swapped
    # decode GEMM over few weight rows, draw a proportional share). Defaults: no effect; the Blackwell chip
    # files carry the fits of `roofline calibrate --op-tables --op gemm-formats`.
    gemm_fp4_factor: float = _param(1.0, "fraction", "gemm_fp4", ("gemm_format",))
    gemm_fp4_fixed_s: float = _param(0.0, "us", "gemm_fp4", ("gemm_format",))
    gemm_fp4_saturation_fraction: float = _param(1e-3, "fraction", "gemm_fp4", ("gemm_format",))
    # The other expert formats (`roofline.cost.kernels.moe.moe_time_s`): block-scaled fp8 (Triton w8a8 block kernels
    # on Hopper, FlashInfer TRT-LLM on Blackwell), MXFP4 weight-only W4A16 (OAI Triton on Hopper, TRT-LLM mxfp4-bf16
    # on Blackwell) and NVFP4 W4A4 (FlashInfer CUTLASS / TRT-LLM). `_gemm_factor` scales the GEMM compute efficiency,
    # `_bandwidth_factor` the bandwidth the experts' weights stream at (weight-only W4A16 kernels stream at near the
    # full bandwidth but dequantize slowly), `_fixed_s` is the call's fixed device time. The bandwidth factor
    # multiplies the dense GEMMs' memory efficiency (gemm_fp8_memory_efficiency for 8-bit and fp4, else
    # memory_efficiency), not the peak, so it may exceed 1: `moe_time_s` caps the product at 1 (the DRAM peak).
    # Defaults of every MoE format here: no effect (factors 1, no fixed cost). The fits on aiconfigurator-core's
    # vLLM MoE tables (`roofline calibrate --op-tables --op moe-formats`, the tables' own routing:
    # `roofline.calibration.moe_routing`) live in the YAML they were written into: each chip file's own, and the
    # family file's (its reference chip's, for chips without tables).
    moe_fp8_block_gemm_factor: float = _param(1.0, "fraction", "moe_fp8_block", ("moe_format",))
    moe_fp8_block_fixed_s: float = _param(0.0, "us", "moe_fp8_block", ("moe_format",))
    moe_fp8_block_bandwidth_factor: float = _param(1.0, "factor", "moe_fp8_block", ("moe_format",), hi=2.0)
    # vLLM's Triton fused MoE on block-fp8 experts where it is not the family's default (`--moe-backend triton`, or
    # VLLM_USE_FLASHINFER_MOE_FP8=0 with VLLM_MOE_USE_DEEP_GEMM=0: InferenceX's MiniMax-M2.5 B200 recipes of March 2026)
    # on Blackwell, timed as `roofline.cost.kernels.moe._triton_fp8_block_moe_s` describes it (vLLM's default config's
    # row tile, no finalize kernel): the same three parameters. Where Triton is the default (Hopper, Ada, Ampere) the
    # flag runs the moe_fp8_block_* fit above. Fitted per chip on the tables that time `fused_experts`.
    moe_triton_fp8_block_gemm_factor: float = _param(1.0, "fraction", "moe_triton_fp8_block", ("moe_format",))
    moe_triton_fp8_block_fixed_s: float = _param(0.0, "us", "moe_triton_fp8_block", ("moe_format",))
    moe_triton_fp8_block_bandwidth_factor: float = _param(1.0, "factor", "moe_triton_fp8_block", ("moe_format",),
                                                          hi=2.0)
    # Under expert parallelism the Triton MoE runs every routed row of the call, its expert elsewhere or not, through
    # its zero-writing GEMM blocks, the activation, the output quantization and moe_sum
    # (`roofline.cost.kernels.moe.triton_masked_rows_s`): the fraction of memory_efficiency x the DRAM peak those
    # rows' bytes move at (many short thread blocks, not one stream). Default 1: streaming. Fitted on the tables'
    # moe_ep rows.
    moe_triton_masked_row_efficiency: float = _param(1.0, "fraction", "moe_triton_fp8_block", ("moe_format",))
    moe_w4a16_gemm_factor: float = _param(1.0, "fraction", "moe_w4a16", ("moe_format",))
    moe_w4a16_fixed_s: float = _param(0.0, "us", "moe_w4a16", ("moe_format",))
    moe_w4a16_bandwidth_factor: float = _param(1.0, "factor", "moe_w4a16", ("moe_format",), hi=2.0)
    # MXFP4 experts on vLLM's Marlin W4A16 MoE kernel instead (`--moe-backend marlin`, vLLM's VLLM_MXFP4_USE_MARLIN=1:
    # e.g. InferenceX's gpt-oss recipes on H100/H200), timed as `roofline.cost.kernels.moe.marlin_moe_gemm_time_s`
    # describes the kernel (vLLM's block_size_m rule, the persistent kernel's stripes): the same three parameters.
    # Marlin dequantizes in registers, so its compute factor is well below the 16-bit GEMM's once the experts are
    # compute-bound.
    moe_w4a16_marlin_gemm_factor: float = _param(1.0, "fraction", "moe_w4a16_marlin", ("moe_format",))
    moe_w4a16_marlin_fixed_s: float = _param(0.0, "us", "moe_w4a16_marlin", ("moe_format",))
    moe_w4a16_marlin_bandwidth_factor: float = _param(1.0, "factor", "moe_w4a16_marlin", ("moe_format",), hi=2.0)
    # Its time per slice step (`roofline.cost.kernels.moe.marlin_slice_steps`): a thread block that finishes a slice
    # (one moe block x one n tile) drains its cp.async pipeline (`cp_async_wait<0>`), and a slice shared along k is
    # reduced in fp32 through the global C_tmp buffer by its blocks one after the other (`barrier_acquire(&locks[..],
    # slice_idx)`, `global_reduce_fp32`); the busiest block's slices and the most-shared slice's serial reductions
    # are the call's critical path. Default 0: no effect. Fitted with the fixed cost over a family's chips.
    moe_w4a16_marlin_slice_s: float = _param(0.0, "us", "moe_w4a16_marlin", ("moe_format",))
    # The weights one SM dequantizes per second, per weight type (csrc/quantization/gptq_marlin/dequant.h, called
    # from the kernel's `matmul` once per weight sub-tile and moe block): int4 with a bf16 scale per group
    # (`dequant<nv_bfloat162, kU4B8>`: two lop3 with the FasterTransformer magic exponent and a bf16 subtract per
    # pair of values), FP4 e2m1 (`dequant<nv_bfloat162, kFE2M1f>`: and, shift and or per pair, the e8m0 scales
    # converted per sub-tile by `dequant_fp8_scales`); each then multiplied by its group scale (`scale`). The
    # instructions run on the SM's integer / half2 pipes beside its mma.sync, so a Marlin call moves weights no
    # faster than its busiest SM dequantizes them, whatever the DRAM: MXFP4 experts run at the same speed on H100
    # and H200 (the tables: H100 / H200 time 0.97-1.05 at every shape), int4 ones 1.1-1.2x faster on H200.
    # Defaults: no limit (1e9 G/s). Fitted per weight type over a family's chips (same SMs, same rate).
    moe_w4a16_marlin_int4_dequant_rate: float = _param(1e18, "G weights/s per SM", "moe_w4a16_marlin", ("moe_format",))
    moe_w4a16_marlin_fp4_dequant_rate: float = _param(1e18, "G weights/s per SM", "moe_w4a16_marlin", ("moe_format",))
    # How its weight stream overlaps its dequantization and MMAs (`_overlap`'s exponent for the Marlin MoE GEMMs): the
    # kernel prefetches the weight tiles `stages` (4) k tiles ahead with cp.async into shared memory
    # (csrc/moe/marlin_moe_wna16/marlin_template.h `fetch_to_shared`, `cp_async_wait<stages - 2>`) while the SM
    # dequantizes and multiplies the tile before, so the DRAM stream and the conversion run side by side and a call
    # whose two times are close costs nearly the larger one (the tables: MXFP4 experts at 1-7 tokens per expert run
    # in the same time on H100 and H200, whose DRAM times differ 1.43x), not the 16-bit GEMMs' soft sum
    # (overlap_exponent). 0 = the GEMMs' overlap_exponent (no effect). Fitted with the fixed cost over a family's chips.
    moe_w4a16_marlin_overlap_exponent: float = _param(0.0, "exponent", "moe_w4a16_marlin", ("moe_format",), lo=0.0)
    # MXFP4 experts with MXFP8 activations on FlashInfer's TRT-LLM fused MoE (`--moe-backend flashinfer-mxfp4-mxfp8`,
    # vLLM's VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1: InferenceX's gpt-oss recipes on B200), timed as
    # `roofline.cost.kernels.moe._mxfp4_mxfp8_moe_s` describes it (fp8 x fp4 math at the fp8 peak, the MXFP8 input
    # quantization, TRT-LLM's untuned token tiles `TRTLLM_MXFP8_MOE_TILES_8BIT`, each token tile re-reading its weight
    # tile). Blackwell only (`roofline.cost.quant.check_moe_backend`); then NVFP4 (see above).
    moe_mxfp4_mxfp8_gemm_factor: float = _param(1.0, "fraction", "moe_mxfp4_mxfp8", ("moe_format",))
    moe_mxfp4_mxfp8_fixed_s: float = _param(0.0, "us", "moe_mxfp4_mxfp8", ("moe_format",))
    moe_mxfp4_mxfp8_bandwidth_factor: float = _param(1.0, "factor", "moe_mxfp4_mxfp8", ("moe_format",), hi=2.0)
    moe_fp4_gemm_factor: float = _param(1.0, "fraction", "moe_fp4", ("moe_format",))
    moe_fp4_fixed_s: float = _param(0.0, "us", "moe_fp4", ("moe_format",))
    moe_fp4_bandwidth_factor: float = _param(1.0, "factor", "moe_fp4", ("moe_format",), hi=2.0)
    # FlashInfer's TRT-LLM-gen MoE on block-fp8 experts (Blackwell; `roofline.cost.kernels.moe.TRTLLM_WIDE_TILE_SCHEMES`)
    # streams the experts' weights slower once its token tile passes 8 (`roofline.cost.kernels.moe.trtllm_tile_tokens`):
    # this factor of the format's bandwidth there (the tables step up at that boundary at the same weights). Fitted
    # by `roofline calibrate --op-tables --family blackwell` (stage moe_wide_tile); 1 = no effect.
    moe_trtllm_wide_tile_bandwidth_factor: float = _param(1.0, "fraction", "moe_trtllm", ("moe_wide_tile",))
    # Fraction of the per-direction link bandwidth an all-reduce reaches (NCCL bus bandwidth / link): vLLM's
    # custom all-reduce's two-stage kernel (reduce-scatter, then all-gather).
    collective_bus_efficiency: float = _param(0.80, "fraction", "collectives", ("all_reduce",))
    # The same for its one-stage kernel (every rank reads every peer's whole buffer), which it runs on 2 GPUs at
    # every size and on fully connected 4 / 8 GPUs below 512 / 256 KiB (`roofline.cost.kernels.collectives.all_reduce_time_s`).
    # It reads from its peers with 36 thread blocks (csrc/custom_all_reduce.cuh, `block_limit`), fewer bytes in
    # flight than a link needs: fitted on aiconfigurator's tables it reaches 0.50-0.59 of the link on H100, H200,
    # B200, B300 and A100 (0.21 on GB200's NVL72), the two-stage kernel 0.57-0.68.
    collective_one_stage_bus_efficiency: float = _param(0.80, "fraction", "collectives", ("all_reduce",))
    # Multiplies the profile's interconnect latency (alpha) for the collectives the engine uses.
    collective_latency_scale: float = _param(1.0, "factor", "collectives", ("all_reduce",), hi=1000.0)
    # NCCL's ring all-reduce where vLLM runs it instead of its custom all-reduce (PCIe-only systems with more than
    # 2 GPUs: `roofline.cost.kernels.collectives.AllReduceAlgorithms`): the fraction of the per-direction PCIe bandwidth its
    # traffic moves at, and the latency of one of its 2(n-1) steps (NCCL's LL protocol over PCIe: a few us).
    nccl_bus_efficiency: float = _param(0.5, "fraction", "collectives", ("all_reduce",))
    nccl_step_s: float = _param(2e-6, "us", "collectives", ("all_reduce",))
    # Expert parallelism's dispatch / combine per MoE layer (`roofline.cost.kernels.all_to_all`): per backend and
    # phase, the fraction of the per-direction link bandwidth the bytes a rank sends off-rank move at (16-bit
    # activations counted; an fp8 wire format shows as a higher value), the fixed time of the phase (DeepEP
    # high-throughput dispatch: its host-synchronised count exchange) and the time per token copy sent (DeepEP's
    # kernels run on a few SMs, 20 for high-throughput: per-token work bounds small hidden sizes below the link).
    # Starting values are guesses; fitted per chip on aiconfigurator-core's vLLM moe_a2a tables by
    # `roofline calibrate --op-tables --all-to-all`.
    deepep_ht_dispatch_bus_efficiency: float = _param(0.5, "fraction", "all_to_all", ("all_to_all",))
    deepep_ht_dispatch_fixed_s: float = _param(100e-6, "us", "all_to_all", ("all_to_all",))
    deepep_ht_dispatch_copy_s: float = _param(0.0, "us", "all_to_all", ("all_to_all",))
    deepep_ht_combine_bus_efficiency: float = _param(0.5, "fraction", "all_to_all", ("all_to_all",))
    deepep_ht_combine_fixed_s: float = _param(50e-6, "us", "all_to_all", ("all_to_all",))
    deepep_ht_combine_copy_s: float = _param(0.0, "us", "all_to_all", ("all_to_all",))
    deepep_ll_dispatch_bus_efficiency: float = _param(0.5, "fraction", "all_to_all", ("all_to_all",))
    deepep_ll_dispatch_fixed_s: float = _param(30e-6, "us", "all_to_all", ("all_to_all",))
    deepep_ll_dispatch_copy_s: float = _param(0.0, "us", "all_to_all", ("all_to_all",))
    deepep_ll_combine_bus_efficiency: float = _param(0.5, "fraction", "all_to_all", ("all_to_all",))
    deepep_ll_combine_fixed_s: float = _param(30e-6, "us", "all_to_all", ("all_to_all",))
    deepep_ll_combine_copy_s: float = _param(0.0, "us", "all_to_all", ("all_to_all",))
    # vLLM's default backend (allgather_reducescatter): NCCL's all-gather (dispatch) and reduce-scatter (combine)
    # over the link, and the latency of each of their n - 1 ring steps; fitted on the chip's NCCL tables
    # (nccl_perf: all_gather, reduce_scatter).
    nccl_ag_bus_efficiency: float = _param(0.7, "fraction", "all_to_all", ("all_to_all",))
    nccl_ag_fixed_s: float = _param(10e-6, "us", "all_to_all", ("all_to_all",))
    nccl_rs_bus_efficiency: float = _param(0.7, "fraction", "all_to_all", ("all_to_all",))
    nccl_rs_fixed_s: float = _param(10e-6, "us", "all_to_all", ("all_to_all",))
    nccl_ag_rs_step_s: float = _param(1e-6, "us", "all_to_all", ("all_to_all",))
    # MEASUREMENT CONDITION OF THE OPERATOR TABLES ONLY, never used by the serving step model: the rate at which a
    # kernel reads a working set that the previous replay of the same call left in the L2, as a multiple of the
    # DRAM bandwidth. aiconfigurator's collectors replay one call (GEMM: six layers) on the same buffers with no
    # L2 flush, so where that working set fits in the chip's L2 (`l2_cache_mib`), its bytes come from the L2
    # (`roofline.calibration.fit.predict_table`). In serving, the bytes between two uses of a weight or KV block
    # are the whole model's: they are never L2-resident. 1 = no faster than DRAM.
    l2_bandwidth_factor: float = _param(1.0, "factor", "op_tables", ("gemm",), lo=1.0, hi=64.0)
    # Multi-head latent attention (`roofline.cost.kernels.mla`): its prefill flash attention (head 192 / 128) at this
    # factor of attention_compute_efficiency, a fixed time per wave of its work tiles and one per call of the
    # prefill path; its absorbed decode kernel (576-wide heads over the latent cache) at these fractions of the bf16
    # peak and the DRAM bandwidth, a fixed time per call and one per wave of work tiles, and the fraction of the
    # latents' repeated reads (by a sequence's other head tiles) that costs DRAM time; the `_fp8_kv` three for the
    # decode kernel vLLM runs with an fp8 KV cache (another kernel on Hopper: FlashMLA).
    mla_prefill_compute_factor: float = _param(1.0, "factor", "mla", ("mla",), hi=2.0)
    mla_decode_compute_efficiency: float = _param(0.5, "fraction", "mla", ("mla",))
    mla_decode_memory_efficiency: float = _param(0.7, "fraction", "mla", ("mla",))
    mla_decode_fixed_s: float = _param(5e-6, "us", "mla", ("mla",))
    mla_decode_fp8_kv_compute_efficiency: float = _param(0.5, "fraction", "mla", ("mla",))
    mla_decode_fp8_kv_memory_efficiency: float = _param(0.7, "fraction", "mla", ("mla",))
    mla_decode_fp8_kv_fixed_s: float = _param(5e-6, "us", "mla", ("mla",))
    mla_prefill_fixed_s: float = _param(10e-6, "us", "mla", ("mla",))
    mla_decode_tile_fixed_s: float = _param(1e-6, "us", "mla", ("mla",))
    mla_prefill_tile_fixed_s: float = _param(1e-6, "us", "mla", ("mla",))
    mla_decode_reread_fraction: float = _param(1.0, "fraction", "mla", ("mla",), lo=0.0, hi=1.0)
    # MEASUREMENT CONDITION OF THE MLA MODULE TABLES ONLY, never used by the serving step model: the time that
    # aiconfigurator's legacy MLA collector adds to a module call (`roofline.calibration.mla_fit`). Its rows ran vLLM's
    # custom ops in their native torch decompositions (the package's own B200 collection_meta.yaml; aiconfigurator
    # commit c56db49f, ai-dynamo/aiconfigurator#1423, added `custom_ops = ["all"]` to collector/vllm/utils.py
    # `create_vllm_config` and `enable_engine_fused_ops`): the RMSNorms of the q and kv latents as an eager
    # mean/pow/rsqrt/mul chain (per token: 1536 + 512 values) and the rotary embedding of the query's 64-wide rope part
    # (per token and head): a time per call, one per token and one per token and query head. The two per-token times
    # are those of chains that stream from DRAM; each eager op of a chain re-reads tensors its predecessors wrote, which
    # come from the L2 while the chain's working set fits in it (`roofline.calibration.mla_fit.legacy_spill`): the
    # part of the L2-resident time that the chain still costs is `mla_table_legacy_resident_fraction` (1: the L2 does
    # not help, the per-token times are linear in the tokens; 0: a resident chain costs nothing beyond the model's
    # own norm and RoPE records).
    mla_table_legacy_fixed_s: float = _param(0.0, "us", "mla", ("mla",), lo=0.0)
    mla_table_legacy_token_s: float = _param(0.0, "us", "mla", ("mla",), lo=0.0)
    mla_table_legacy_token_head_s: float = _param(0.0, "us", "mla", ("mla",), lo=0.0)
    mla_table_legacy_resident_fraction: float = _param(1.0, "fraction", "mla", ("mla",), lo=0.0, hi=1.0)
    # MEASUREMENT CONDITION OF THE MLA MODULE TABLES ONLY, never used by the serving step model: the time per block-fp8
    # linear layer of a module call that the chip's block-fp8 GEMM model lacks. That model is fitted on the GEMM
    # tables, which time fp8_block eagerly (`roofline.calibration.gemm_format_fit.EAGER_FORMATS`), with its host time
    # apart; the module tables replay the layer in a CUDA graph, where vLLM's block-fp8 linear
    # (`W8A8BlockFp8LinearOp`) runs the activation's group quantization (and on Blackwell DeepGEMM's UE8M0 scale
    # layout) as kernels of their own before the GEMM: B200's tables put the module of 1 head and 1 token at 45.7 us
    # with fp8_block linear layers against 29.5 us with bf16 ones (three linear layers: qkv_a, q_b, o_proj).
    mla_table_fp8_block_linear_s: float = _param(0.0, "us", "mla", ("mla",), lo=0.0)
    # Weight-only linear layers on Marlin (`roofline.cost.kernels.gemm_weight_only.marlin_time_s`): the factor of the
    # 16-bit GEMM's compute efficiency its mma.sync main loop, the dequantization interleaved, reaches. Default 1:
    # Marlin's README (IST-DASLab/marlin: "essentially ideal speedups", its Ampere/Ada kernel). Stage `unfitted`: no
    # operator table times Marlin. On Hopper and Blackwell, whose 16-bit rate is that of their wgmma / tcgen05 kernels,
    # Marlin runs SM80 mma.sync ("not yet optimized for Hopper", the same README), so 1 is optimistic there.
    marlin_compute_factor: float = _param(1.0, "fraction", "gemm_weight_only", ("unfitted",))

    @classmethod
    def from_dict(cls, section: dict[str, Any] | None, where: str) -> "EfficiencyParams":
        section = section or {}
        check_fields(section, [key for key, _, _ in _EFFICIENCY_YAML.values()], where)
        values = {}
        for name, (key, scale, hi) in _EFFICIENCY_YAML.items():
            lo = efficiency_bounds(name)[0] / scale
            values[name] = _number(section, key, getattr(cls, name) / scale, where, lo, hi) * scale
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {key: _round(getattr(self, name) / scale) for name, (key, scale, _) in _EFFICIENCY_YAML.items()}


def _declarations() -> dict[str, ParamSpec]:
    out = {}
    for f in fields(EfficiencyParams):
        m = f.metadata
        suffix, scale, lo, hi = UNITS[m["unit"]]
        stem = f.name.removesuffix("_s") if m["unit"] == "us" else f.name
        hi = m["hi"] if m["hi"] is not None else hi
        assert hi is not None and m["group"] in GROUPS and set(m["stages"]) <= set(STAGES), f.name
        assert isinstance(f.default, float), f.name
        out[f.name] = ParamSpec(name=f.name, key=stem + suffix, unit=m["unit"], scale=scale,
                                lo=m["lo"] if m["lo"] is not None else lo, hi=hi, default=f.default, group=m["group"],
                                stages=m["stages"], search=m["search"])
    return out


# Every efficiency parameter's declaration, in field order (the order the YAML is written in).
EFFICIENCY_PARAMS: dict[str, ParamSpec] = _declarations()
# EfficiencyParams field -> (YAML key, scale from YAML to SI, upper bound in YAML units), derived.
_EFFICIENCY_YAML: dict[str, tuple[str, float, float]] = {n: (p.key, p.scale, p.hi) for n, p in EFFICIENCY_PARAMS.items()}


def stage_fields(stage: str) -> tuple[str, ...]:
    """The parameters a fit stage sets, in declaration order."""
    return tuple(n for n, p in EFFICIENCY_PARAMS.items() if stage in p.stages)


def group_fields(group: str, stage: str) -> tuple[str, ...]:
    """The parameters of an operator-family group that a fit stage sets, in declaration order."""
    return tuple(n for n in stage_fields(stage) if EFFICIENCY_PARAMS[n].group == group)


def search_value(name: str, coordinate: float) -> float:
    """A search coordinate of `ParamSpec.search` -> the parameter's SI value: the coordinate is the YAML value, or
    for a rate (TB/s) its reciprocal, microseconds per MB (a time per byte, as the tables show it)."""
    p = EFFICIENCY_PARAMS[name]
    return p.scale / coordinate if p.unit == "TB/s" else coordinate * p.scale


def efficiency_bounds(name: str) -> tuple[float, float]:
    """(lowest, highest) allowed value of an `EfficiencyParams` field in SI units (what `from_dict` accepts)."""
    p = EFFICIENCY_PARAMS[name]
    return p.lo * p.scale, p.hi * p.scale


def _round(value: float) -> float:
    """Six significant digits: YAML written from fitted values stays readable and byte-stable."""
    return float(f"{value:.6g}")


# The parameters `roofline.calibration.fit` may fit, by dotted name (section.field of the dataclass, SI units).
FITTABLE = tuple(f"efficiency.{name}" for name in _EFFICIENCY_YAML) + (
    "executor.kernel_launch_s", "executor.step_overhead_s", "executor.step_overhead_per_seq_s")

_EXECUTOR_MODES = ("eager", "cuda_graphs")

# vLLM's default capture sizes (vllm/config/compilation.py, `cudagraph_capture_sizes`: 1, 2, 4, then steps
# of 8 up to 256, then 16 up to max_capture_size 512).
_VLLM_CAPTURE_SIZES = (1, 2, 4) + tuple(range(8, 257, 8)) + tuple(range(272, 513, 16))


@dataclass(frozen=True)
class ExecutorParams:
    """How the serving engine runs a step on this device (see DESIGN.md: the executor is part of the model).

    `eager`: every kernel is launched from the host at `kernel_launch_s` each. `cuda_graphs` (vLLM V1 default):
    batches of up to the largest captured size are padded up to the next captured size and replayed as
    graphs (decode-only batches as one full graph; mixed batches piecewise, attention launched eagerly per
    layer); larger batches run eagerly. `kernels_per_elementwise_op`: kernels one norm, activation or RoPE
    launches (1 for vLLM's fused custom ops; about 5 for an unfused PyTorch RMSNorm).
    """

    mode: str = "cuda_graphs"  # eager | cuda_graphs
    cuda_graph_batch_sizes: tuple[int, ...] = _VLLM_CAPTURE_SIZES
    # Defaults for a profile that states none (the GPU families state theirs, with sources: the launch time from
    # public A/B runs of vLLM's CUDA-graph modes, benchmarks/ground_truth/host_launch_evidence.py). The operator tables time
    # kernels only; `roofline calibrate --trace` on a vLLM or engine step trace is how a profile gets measured values
    # (benchmarks/ground_truth/gpu_trace.sh).
    kernel_launch_s: float = 4e-6  # host time to launch one kernel or replay one graph
    step_overhead_s: float = 2e-3  # host time per step: schedule, prepare inputs, sample, bookkeeping
    # Host time per scheduled sequence and step (per-sequence Python in schedule, prepare inputs, block tables,
    # sampling, update); 0 = folded into step_overhead_s. The GPU families state both parts with their sources.
    step_overhead_per_seq_s: float = 0.0
    host_overlaps_device: bool = False  # async scheduling: host work of step i+1 hides under device step i
    # With host_overlaps_device: device idle time between consecutive steps that overlapping does not hide (the
    # sampled tokens' handoff to the next step's inputs, the next graph's launch); added to every step.
    step_gap_s: float = 0.0
    kernels_per_elementwise_op: int = 1
    # API-server time per prompt token before a request reaches the engine core: vLLM's frontend tokenizes the
    # prompt (`serving_completion` / the renderer, HF tokenizers on the host CPU) and only then sends it to the
    # engine, so TTFT, which the client starts at the send, contains it. 0 = not modelled (CPU profiles).
    tokenize_s_per_prompt_token: float = 0.0
    # Time per request outside the engine core besides tokenization, inside the client's TTFT: the API server's HTTP
    # handling, request parsing and input processing, the IPC to the engine core process and back, the output
    # processor and the streaming of the first token. Charged before the request reaches the engine core (in a
    # closed loop the same client-side TTFT, latency and engine arrivals as splitting it into a way in and a way
    # out). 0 = not modelled (CPU profiles).
    frontend_s_per_request: float = 0.0

    @classmethod
    def from_dict(cls, section: dict[str, Any] | None, where: str) -> "ExecutorParams":
        section = section or {}
        allowed = ["mode", "cuda_graph_batch_sizes", "kernel_launch_us", "step_overhead_us",
                   "step_overhead_per_seq_us", "host_overlaps_device", "step_gap_us", "kernels_per_elementwise_op",
                   "tokenize_us_per_prompt_token", "frontend_us_per_request"]
        check_fields(section, allowed, where)
        mode = section.get("mode", cls.mode)
        if mode not in _EXECUTOR_MODES:
            raise UserError(f"{where}.mode: {mode!r} is not allowed; allowed: {', '.join(_EXECUTOR_MODES)}")
        sizes = section.get("cuda_graph_batch_sizes", list(cls.cuda_graph_batch_sizes))
        if not isinstance(sizes, list) or not sizes or not all(
                isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
            raise UserError(f"{where}.cuda_graph_batch_sizes: must be a non-empty list of positive integers")
        overlap = section.get("host_overlaps_device", cls.host_overlaps_device)
        if not isinstance(overlap, bool):
            raise UserError(f"{where}.host_overlaps_device: must be true or false, got {overlap!r}")
        per_op = section.get("kernels_per_elementwise_op", cls.kernels_per_elementwise_op)
        if not isinstance(per_op, int) or isinstance(per_op, bool) or not 1 <= per_op <= 100:
            raise UserError(f"{where}.kernels_per_elementwise_op: must be an integer in [1, 100], got {per_op!r}")
        return cls(
            mode=mode,
            cuda_graph_batch_sizes=tuple(sorted(set(sizes))),
            kernel_launch_s=_number(section, "kernel_launch_us", cls.kernel_launch_s * 1e6, where) * 1e-6,
            step_overhead_s=_number(section, "step_overhead_us", cls.step_overhead_s * 1e6, where) * 1e-6,
            step_overhead_per_seq_s=_number(section, "step_overhead_per_seq_us", cls.step_overhead_per_seq_s * 1e6,
                                            where) * 1e-6,
            host_overlaps_device=overlap,
            step_gap_s=_number(section, "step_gap_us", cls.step_gap_s * 1e6, where) * 1e-6,
            kernels_per_elementwise_op=per_op,
            tokenize_s_per_prompt_token=_number(section, "tokenize_us_per_prompt_token",
                                                cls.tokenize_s_per_prompt_token * 1e6, where) * 1e-6,
            frontend_s_per_request=_number(section, "frontend_us_per_request", cls.frontend_s_per_request * 1e6,
                                           where) * 1e-6,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "cuda_graph_batch_sizes": list(self.cuda_graph_batch_sizes),
            "kernel_launch_us": _round(self.kernel_launch_s * 1e6),
            "step_overhead_us": _round(self.step_overhead_s * 1e6),
            "step_overhead_per_seq_us": _round(self.step_overhead_per_seq_s * 1e6),
            "host_overlaps_device": self.host_overlaps_device,
            "step_gap_us": _round(self.step_gap_s * 1e6),
            "kernels_per_elementwise_op": self.kernels_per_elementwise_op,
            "tokenize_us_per_prompt_token": _round(self.tokenize_s_per_prompt_token * 1e6),
            "frontend_us_per_request": _round(self.frontend_s_per_request * 1e6),
        }
