"""Who measured a row of aiconfigurator-core's `silicon_sample.csv` and with which client: InferenceX's public
serving recipes (the engine flags of the rows they cover), the rows whose recorded concurrency is not the run's, and
a row's origin (InferenceX's harness or aiconfigurator's own campaigns)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from roofline.judge.rows import SiliconRow


# InferenceX's public serving recipes (github.com/SemiAnalysisAI/InferenceX, benchmarks/), the harness of the rows
# whose silicon_data_source names its exports or its database (`source_file=2026-..csv; model=...`, `db-dump/...`),
# at the version of each script that ran them: the last commit to it on or before the row's `measured=` date. What
# the simulator can express is applied over the version's defaults; the rest is listed as not modelled. Values
# "CONC" and "2*ISL": the row's concurrency (`--max-num-seqs=$CONC`) and twice its isl (`$((ISL * 2))`).
@dataclass(frozen=True)
class Harness:
    model_path: str
    system: str
    version: str | None
    measured: tuple[str, str]  # first and last `measured=` date (ISO) the recipe version covers
    flags: dict[str, object]
    source: str
    not_modelled: str = ""
    # --enable-expert-parallel as the script passes it: None where the row's moe_ep_size > 1 decides (the scripts'
    # `if [ "$EP_SIZE" -gt 1 ]`: InferenceX's EP_SIZE is the row's ep), True where the script passes it whatever
    # the row says (`if [ "$EP_SIZE" -ge 1 ]`), False where it never passes it.
    expert_parallel: bool | None = None
    # Only the rows of this precision (None: every precision the recipe covers, as when one script serves both).
    precision: str | None = None
    # The rows' InferenceX configurations (`config_id=` of the db-dump rows) that ran the script's DP_ATTENTION
    # branch: `--tensor-parallel-size=1 --data-parallel-size=$TP --enable-expert-parallel` (`launch_layout`).
    dp_attention_configs: tuple[int, ...] = ()


@dataclass(frozen=True)
class Launch:
    """The parallel layout a recipe's script launched a row with (`launch_layout`)."""

    tensor_parallel_size: int
    data_parallel_size: int
    expert_parallel: bool


# InferenceX's MiniMax-M2.5 recipes for vLLM 0.19.0 on B200 and B300 (`_minimax_0_19`); the fp8 scripts also pass
# --block-size=32, the fp4 scripts do not (minimaxm2.5_fp4_b200.sh at 79bd988e9 / 13962fcfa, _b300.sh at 22d0f12f7 /
# 633fd2377: vLLM's default block).
_MINIMAX_0_19_FLAGS: dict[str, object] = dict(kv_cache_dtype="fp8", max_num_batched_tokens="2*ISL",
                                              enable_prefix_caching=False, gpu_memory_utilization=0.90,
                                              max_cudagraph_capture_size=2048)


_STREAM_INTERVAL = "--stream-interval 20 (the API server's output batching)"


_MINIMAX_0_19_NOT_MODELLED = _STREAM_INTERVAL


# Before 2026-04-21 the fp8 scripts (and the nightly's) also exported FlashInfer's MNNVL all-reduce backend.
_MNNVL = "VLLM_FLASHINFER_ALLREDUCE_BACKEND=mnnvl (FlashInfer's all-reduce backend)"


# The nightly's recipe (08bcde8f1) kept vLLM's capture sizes.
_MINIMAX_NIGHTLY_NOT_MODELLED = _STREAM_INTERVAL + "; " + _MNNVL


def _minimax_0_19(system: str, precision: str, first: str, last: str, before: str, after: str,
                  dp_attention_configs: tuple[int, ...] = ()) -> tuple[Harness, Harness]:
    """The recipes of InferenceX's MiniMax-M2.5 `precision` rows of vLLM 0.19.0 on `system`, measured `first` to
    `last`: the script `before` 2026-04-21, and from then on `after`, which exports VLLM_FLOAT32_MATMUL_PRECISION=high
    (TF32 for MiniMax-M2's fp32 router GEMM, vllm-project/recipes#353; before, vLLM's default "highest": true fp32).
    Both pass --enable-expert-parallel where EP_SIZE > 1 (`if [ "$EP_SIZE" -gt 1 ]`); the fp4 ones run
    `dp_attention_configs` on their DP_ATTENTION branch."""
    flags = dict(_MINIMAX_0_19_FLAGS, block_size=32) if precision == "fp8" else _MINIMAX_0_19_FLAGS
    return (Harness("MiniMaxAI/MiniMax-M2.5", system, "0.19.0", (first, "2026-04-20"), flags, before,
                    _MINIMAX_0_19_NOT_MODELLED + ("; " + _MNNVL if precision == "fp8" else ""), precision=precision,
                    dp_attention_configs=dp_attention_configs),
            Harness("MiniMaxAI/MiniMax-M2.5", system, "0.19.0", ("2026-04-21", last),
                    dict(flags, float32_matmul_precision="high"),
                    after + ": VLLM_FLOAT32_MATMUL_PRECISION=high", _MINIMAX_0_19_NOT_MODELLED, precision=precision,
                    dp_attention_configs=dp_attention_configs))


# Kimi-K2.5 NVFP4 on B200, vLLM 0.17.0 (benchmarks/single_node/kimik2.5_fp4_b200.sh): `--tensor-parallel-size=$TP`
# and never --enable-expert-parallel nor --data-parallel-size at any version of the rows' dates, whatever the rows'
# moe_ep_size / attention_dp_size say (the sweep's `{ tp: 4, ep: 4 }` of .github/configs/nvidia-master.yaml at
# a58dedd5a .. 626932a11 sets EP_SIZE, which the script never reads); --max-num-seqs $CONC, --gpu-memory-utilization
# 0.90 and the all-reduce + RMSNorm fusion pass (`--compilation_config.pass_config.fuse_allreduce_rms true`) throughout.
_KIMI_B200_FLAGS: dict[str, object] = dict(max_num_seqs="CONC", gpu_memory_utilization=0.90)


_KIMI_B200_SCRIPT = "benchmarks/single_node/kimik2.5_fp4_b200.sh at "


_FUSE_ALLREDUCE_RMS = "the all-reduce + RMSNorm fusion pass"


# The 0.17.0 fp8 B200 script exports VLLM_USE_FLASHINFER_MOE_FP8=0 and VLLM_MOE_USE_DEEP_GEMM=0 (f342df18e to
# 626932a11; gone from bddbf4031, 2026-04-03): vLLM 0.17.0's `select_fp8_moe_backend` (fused_moe/oracle/fp8.py) then
# drops FlashInfer TRT-LLM / CUTLASS and DeepGEMM, `Fp8MoEMethod` passes allow_vllm_cutlass=False, and the block-fp8
# experts run on the Triton fused MoE (`TritonExperts`): what vLLM 0.32's `--moe-backend triton` selects
# (docs/benchmark-history/2026-11-29f-dpep.md).
_MINIMAX_0_17_B200_TRITON_MOE = ("VLLM_USE_FLASHINFER_MOE_FP8=0 VLLM_MOE_USE_DEEP_GEMM=0: vLLM's Triton fused MoE "
                                 "for the block-fp8 experts (--moe-backend triton)")


# Their config.yaml's `cuda-graph-sizes: 2048` (vLLM 0.11's one-value form: the largest capture size) is
# --max-cudagraph-capture-size 2048; vLLM 0.11.0 (the release of the rows' date) caps it at 992 where FlashAttention
# 3 runs the full graphs, i.e. on Hopper (SemiAnalysisAI/InferenceX#117, quoting vllm/model_executor/models/config.py
# at 6c728f777; the cap went with vllm-project/vllm#27840, 2025-11).
_GPT_OSS_2025_11_SOURCE = "cuda-graph-sizes 2048 (992 on Hopper: vLLM 0.11.0's FlashAttention-3 cap)"


INFERENCEX_HARNESS: tuple[Harness, ...] = (
    Harness("meta-llama/Llama-3.1-70B", "h100_sxm", None, ("2025-10-29", "2025-10-29"),
            dict(kv_cache_dtype="fp8", async_scheduling=True, enable_prefix_caching=False,
                 max_num_batched_tokens=8192, max_num_seqs="CONC"),
            "benchmarks/70b_fp8_h100_slurm.sh at 2582bce40^ (the recipe was removed on 2025-10-29, the rows' date)"),
    Harness("meta-llama/Llama-3.1-70B", "h200_sxm", None, ("2025-10-29", "2025-10-29"),
            dict(kv_cache_dtype="fp8", async_scheduling=True, enable_prefix_caching=False,
                 max_num_batched_tokens=8192, max_num_seqs="CONC"),
            "benchmarks/70b_fp8_h200_slurm.sh at 2582bce40^ (2025-10-29)"),
    Harness("meta-llama/Llama-3.1-70B", "b200_sxm", None, ("2025-10-29", "2025-10-29"),
            dict(kv_cache_dtype="fp8", async_scheduling=True, enable_prefix_caching=False,
                 max_num_batched_tokens=8192, max_num_seqs=512, cudagraph_mode="FULL_DECODE_ONLY"),
            "benchmarks/70b_fp8_b200_docker.sh and 70b_fp4_b200_docker.sh at 2582bce40^ (2025-10-29): "
            "--compilation-config cudagraph_mode FULL_DECODE_ONLY",
            "the FlashInfer all-reduce / attention fusion passes (with no splitting ops: one compiled graph)"),
    Harness("openai/gpt-oss-120b", "h100_sxm", None, ("2025-11-02", "2025-11-02"),
            dict(async_scheduling=True, enable_prefix_caching=False, max_num_batched_tokens=8192,
                 max_num_seqs="CONC", max_cudagraph_capture_size=992),
            "benchmarks/gptoss_fp4_h100_slurm.sh and _docker.sh at e06929c70 (2025-11-01): " + _GPT_OSS_2025_11_SOURCE),
    Harness("openai/gpt-oss-120b", "h200_sxm", None, ("2025-11-02", "2025-11-02"),
            dict(async_scheduling=True, enable_prefix_caching=False, max_num_batched_tokens=8192,
                 max_num_seqs="CONC", max_cudagraph_capture_size=992),
            "benchmarks/gptoss_fp4_h200_slurm.sh at e06929c70 (2025-11-01): " + _GPT_OSS_2025_11_SOURCE),
    Harness("openai/gpt-oss-120b", "b200_sxm", None, ("2025-11-02", "2025-11-02"),
            dict(async_scheduling=True, enable_prefix_caching=False, max_num_batched_tokens=8192, max_num_seqs=512,
                 moe_backend="flashinfer-mxfp4-mxfp8", max_cudagraph_capture_size=2048),
            "benchmarks/gptoss_fp4_b200_docker.sh at e06929c70 (2025-11-01): VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1, "
            "cuda-graph-sizes 2048",
            "the FlashInfer all-reduce / attention fusion passes"),
    Harness("openai/gpt-oss-120b", "h100_sxm", "0.18.0", ("2026-03-27", "2026-03-27"),
            dict(moe_backend="marlin", enable_prefix_caching=False, max_num_batched_tokens=8192,
                 max_num_seqs="CONC"),
            "benchmarks/single_node/gptoss_fp4_h100.sh at cec542a9a (2026-03-27, image v0.18.0): "
            "VLLM_MXFP4_USE_MARLIN=1"),
    Harness("openai/gpt-oss-120b", "h200_sxm", "0.18.0", ("2026-03-27", "2026-03-27"),
            dict(moe_backend="marlin", enable_prefix_caching=False, max_num_batched_tokens=8192,
                 max_num_seqs="CONC"),
            "benchmarks/single_node/gptoss_fp4_h200.sh at cec542a9a (2026-03-27, image v0.18.0): "
            "VLLM_MXFP4_USE_MARLIN=1"),
    Harness("openai/gpt-oss-120b", "b200_sxm", "0.15.1", ("2026-02-25", "2026-02-25"),
            dict(kv_cache_dtype="fp8", enable_prefix_caching=False, max_num_batched_tokens=8192, max_num_seqs=512,
                 moe_backend="flashinfer-mxfp4-mxfp8"),
            "benchmarks/single_node/gptoss_fp4_b200.sh at d2c2acb19 (2026-02-25, image v0.15.1): "
            "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1",
            "the all-reduce + RMSNorm fusion pass"),
    Harness("MiniMaxAI/MiniMax-M2.5", "b200_sxm", "0.17.0", ("2026-03-11", "2026-03-28"),
            dict(block_size=32, gpu_memory_utilization=0.95, moe_backend="triton"),
            "benchmarks/single_node/minimaxm2.5_fp8_b200.sh at 64c20b6b5 / 626932a11 (2026-03-11 / 03-27): "
            + _MINIMAX_0_17_B200_TRITON_MOE, expert_parallel=True),
    Harness("MiniMaxAI/MiniMax-M2.5", "b200_sxm", "nightly-5b8c30d62b754b57", ("2026-04-03", "2026-04-03"),
            dict(kv_cache_dtype="fp8", block_size=32, enable_prefix_caching=False, gpu_memory_utilization=0.95),
            "benchmarks/single_node/minimaxm2.5_fp4_b200.sh at 08bcde8f1 (2026-04-02, image "
            "vllm/vllm-openai:nightly-5b8c30d62b754b575e043ce2fc0dcbf8a64f6306)", _MINIMAX_NIGHTLY_NOT_MODELLED),
    *_minimax_0_19("b200_sxm", "fp8", "2026-04-03", "2026-04-22",
                   "benchmarks/single_node/minimaxm2.5_fp8_b200.sh at bddbf4031 (2026-04-03; the rows of 04-03 02:34 "
                   "UTC ran its pull request's d172646bd, the same script)",
                   "benchmarks/single_node/minimaxm2.5_fp8_b200.sh at 41ed82dc1 (2026-04-21)"),
    # DP_ATTENTION=true: config 707 (`{ tp: 2, ep: 2, dp-attn: true }`, concurrency 256-1024 of the 1k/1k sweep at
    # 13962fcfa's nvidia-master.yaml); 706 and 703 are `{ tp: 2, ep: 2 }` and `{ tp: 4, ep: 4 }`.
    *_minimax_0_19("b200_sxm", "fp4", "2026-04-08", "2026-04-22",
                   "benchmarks/single_node/minimaxm2.5_fp4_b200.sh at 79bd988e9 (2026-04-08)",
                   "benchmarks/single_node/minimaxm2.5_fp4_b200.sh at 13962fcfa (2026-04-21)", dp_attention_configs=(707,)),
    # The fp8 B300 script has no DP_ATTENTION branch: config 827 (the sweep's `{ tp: 2, ep: 2, dp-attn: true }` at
    # 0c2467c15) ran as `--tensor-parallel-size=2 --enable-expert-parallel`, as 735 did.
    *_minimax_0_19("b300_sxm", "fp8", "2026-04-17", "2026-04-21",
                   "benchmarks/single_node/minimaxm2.5_fp8_b300.sh at 340d7854c (2026-04-17)",
                   "benchmarks/single_node/minimaxm2.5_fp8_b300.sh at 0c2467c15 (2026-04-21)"),
    # DP_ATTENTION=true: config 727 (`{ tp: 2, ep: 2, dp-attn: true }` at 633fd2377: 1k/1k 256-2048, 8k/1k 512);
    # 726 and 729 are `{ tp: 2, ep: 2 }` and `{ tp: 4, ep: 4 }`.
    *_minimax_0_19("b300_sxm", "fp4", "2026-04-17", "2026-04-21",
                   "benchmarks/single_node/minimaxm2.5_fp4_b300.sh at 22d0f12f7 (2026-04-17)",
                   "benchmarks/single_node/minimaxm2.5_fp4_b300.sh at 633fd2377 (2026-04-21)", dp_attention_configs=(727,)),
    # The first H200 script passes no --enable-expert-parallel (EP came with 4db963a28 / 5e2c705d3, 2026-03-13).
    Harness("MiniMaxAI/MiniMax-M2.5", "h200_sxm", "0.16.0", ("2026-03-01", "2026-03-01"),
            dict(gpu_memory_utilization=0.95),
            "benchmarks/single_node/minimaxm2.5_fp8_h200.sh at a36346339 (2026-03-01): --tensor-parallel-size=$TP, "
            "no --enable-expert-parallel", expert_parallel=False),
    # The rows of 03-27 07:59 UTC ran 1d5cae141 (merged then); those dated 03-28, 0f78cf4eb (2026-03-27 19:17 -0700:
    # --no-enable-prefix-caching) / 626932a11.
    Harness("MiniMaxAI/MiniMax-M2.5", "h200_sxm", "0.18.0", ("2026-03-27", "2026-03-27"),
            dict(gpu_memory_utilization=0.95),
            "benchmarks/single_node/minimaxm2.5_fp8_h200.sh at 1d5cae141 (2026-03-27): `if [ \"$EP_SIZE\" -ge 1 ]`",
            expert_parallel=True),
    Harness("MiniMaxAI/MiniMax-M2.5", "h200_sxm", "0.18.0", ("2026-03-28", "2026-03-28"),
            dict(gpu_memory_utilization=0.95, enable_prefix_caching=False),
            "benchmarks/single_node/minimaxm2.5_fp8_h200.sh at 0f78cf4eb / 626932a11 (2026-03-27 PDT): "
            "`if [ \"$EP_SIZE\" -ge 1 ]`, --no-enable-prefix-caching", expert_parallel=True),
    Harness("MiniMaxAI/MiniMax-M2.5", "h100_sxm", "0.18.0", ("2026-03-27", "2026-03-27"),
            dict(max_num_seqs=256, gpu_memory_utilization=0.90, cudagraph_mode="PIECEWISE"),
            "benchmarks/single_node/minimaxm2.5_fp8_h100.sh at 1d5cae141 (2026-03-27): "
            "--compilation-config cudagraph_mode PIECEWISE"),
    Harness("MiniMaxAI/MiniMax-M2.5", "h100_sxm", "0.18.0", ("2026-03-28", "2026-03-28"),
            dict(max_num_seqs=256, gpu_memory_utilization=0.90, enable_prefix_caching=False,
                 cudagraph_mode="PIECEWISE"),
            "benchmarks/single_node/minimaxm2.5_fp8_h100.sh at 0f78cf4eb / 626932a11 (2026-03-27 PDT): "
            "--compilation-config cudagraph_mode PIECEWISE, --no-enable-prefix-caching"),
    # Kimi-K2.5 B200 (`_KIMI_B200_FLAGS`). The rows of 03-11 16:59 UTC ran a58dedd5a (merged then), those of 03-24
    # 64c20b6b5 (GPU monitoring only); those dated 03-27 were the sweep 79a42e20a's perf-changelog entry started
    # (kimik2.5-fp4-b200-vllm, "Disable prefix caching").
    Harness("moonshotai/Kimi-K2.5", "b200_sxm", "0.17.0", ("2026-03-11", "2026-03-26"), _KIMI_B200_FLAGS,
            _KIMI_B200_SCRIPT + "a58dedd5a / 64c20b6b5 (2026-03-11): --tensor-parallel-size=$TP --max-num-seqs $CONC, "
            "no --enable-expert-parallel", _FUSE_ALLREDUCE_RMS, expert_parallel=False),
    Harness("moonshotai/Kimi-K2.5", "b200_sxm", "0.17.0", ("2026-03-27", "2026-04-19"),
            dict(_KIMI_B200_FLAGS, enable_prefix_caching=False),
            _KIMI_B200_SCRIPT + "79a42e20a / 626932a11 (2026-03-27): --tensor-parallel-size=$TP --max-num-seqs $CONC "
            "--no-enable-prefix-caching, no --enable-expert-parallel", _FUSE_ALLREDUCE_RMS, expert_parallel=False),
    Harness("moonshotai/Kimi-K2.5", "b200_sxm", "0.17.0", ("2026-04-20", "2026-05-16"),
            dict(_KIMI_B200_FLAGS, enable_prefix_caching=False, kv_cache_dtype="fp8", max_cudagraph_capture_size=2048,
                 max_num_batched_tokens="2*ISL"),
            _KIMI_B200_SCRIPT + "6c3acebfa (2026-04-20): --tensor-parallel-size=$TP --max-num-seqs $CONC "
            "--kv-cache-dtype fp8 --max-cudagraph-capture-size 2048 --max-num-batched-tokens $((ISL * 2)) "
            "--no-enable-prefix-caching, no --enable-expert-parallel",
            _FUSE_ALLREDUCE_RMS + "; " + _STREAM_INTERVAL, expert_parallel=False),
    # Kimi-K2.5 INT4 (W4A16 experts) on B200, vLLM 0.15.1: the rows of 03-24 20:03 UTC are the run 79ea3651a's merge
    # started (its perf-changelog entry, kimik2.5-int4-b200-vllm).
    Harness("moonshotai/Kimi-K2.5", "b200_sxm", "0.15.1", ("2026-03-24", "2026-05-11"),
            dict(max_num_seqs="CONC", gpu_memory_utilization=0.95, enable_prefix_caching=False),
            "benchmarks/single_node/kimik2.5_int4_b200.sh at 79ea3651a / 626932a11 (2026-03-24 / 03-27): "
            "--tensor-parallel-size $TP --max-num-seqs $CONC --no-enable-prefix-caching",
            "VLLM_USE_FLASHINFER_MOE_INT4=1 (FlashInfer's INT4 MoE for the W4A16 experts; simulated: vLLM's Marlin "
            "W4A16 MoE); " + _FUSE_ALLREDUCE_RMS, expert_parallel=False),
)


@dataclass(frozen=True)
class UnrecordedClient:
    """InferenceX rows whose recorded concurrency is not the run's: the recipe at the rows' dates sent a client
    concurrency other than the server's --max-num-seqs and --num-prompts, whose value the row does not record."""

    model_path: str
    system: str
    concurrency: int
    measured: tuple[str, str]  # measured= dates covered, inclusive
    reason: str


UNRECORDED_CLIENT: tuple[UnrecordedClient, ...] = (
    UnrecordedClient("openai/gpt-oss-120b", "h100_sxm", 512, ("2025-11-21", "2025-12-08"),
                     "InferenceX's benchmarks/gptoss_fp4_h100_docker.sh from d22bf9ca9 (2025-11-21) until its fix "
                     "4e135fd3f (2025-12-08, 'fix h100 docker error') passed the client --max-concurrency 512 (hard-"
                     "coded) with the server's --max-num-seqs $CONC and --num-prompts 10 x $CONC, CONC one of the "
                     "sweep's 4-64 (.github/configs/nvidia-master.yaml, gptoss-fp4-h100-vllm): the file records the "
                     "512, not the run's CONC, so the run cannot be reproduced"),
)


def measured_date(row: SiliconRow) -> str | None:
    """The ISO date of the row's `measured=` field in silicon_data_source, if it has one."""
    match = re.search(r"measured=(\d{4}-\d{2}-\d{2})", row.source)
    return None if match is None else match.group(1)


def unrecorded_client(row: SiliconRow) -> UnrecordedClient | None:
    """The `UNRECORDED_CLIENT` entry covering `row`, if any."""
    date = measured_date(row)
    return None if date is None else next(
        (u for u in UNRECORDED_CLIENT if (u.model_path, u.system, u.concurrency) == (
            row.model_path, row.system, row.concurrency) and u.measured[0] <= date <= u.measured[1]), None)


# Where a row's measurement comes from, by its silicon_data_source (`row_origin`): InferenceX's public harness
# (dated source files naming the model, or its dashboard's database dump), or one of aiconfigurator's own gap-analysis
# campaigns (a local path such as .../aic-auto-gap-analysis/data/<gpu>/vllm/<version>/<model>.csv), whose client
# (number of prompts, length distribution) the file does not record and whose scripts are not public.
ORIGIN_INFERENCEX = "InferenceX (public harness)"


ORIGIN_AIC_CAMPAIGN = "aiconfigurator's campaigns (client not recorded)"


def row_origin(row: SiliconRow) -> str:
    """`ORIGIN_INFERENCEX` or `ORIGIN_AIC_CAMPAIGN` for `row`."""
    inferencex = "source_file=20" in row.source and "model=" in row.source or row.source.startswith("db-dump/")
    return ORIGIN_INFERENCEX if inferencex else ORIGIN_AIC_CAMPAIGN


# A campaign row whose mean TTFT and TPOT are those of InferenceX rows of the same model, GPU, version, precision,
# TP, lengths and client concurrency to this relative difference is their measurement (the campaign file records 5
# significant digits; two runs of one configuration differ by far more: `roofline.judge.checks.repeat_spread`).
COPY_TOLERANCE = 5e-4


def _copy_key(row: SiliconRow) -> tuple:
    return (row.model_path, row.system, row.backend_version, row.precision, row.tp_size, row.isl, row.osl,
            row.concurrency)


@functools.lru_cache(maxsize=1)
def _inferencex_rows() -> dict[tuple, tuple[SiliconRow, ...]]:
    """The file's dated InferenceX rows by `_copy_key`."""
    from roofline.judge.rows import read_silicon_rows  # rows imports this module

    index: dict[tuple, list[SiliconRow]] = {}
    for row in read_silicon_rows():
        if row_origin(row) == ORIGIN_INFERENCEX and measured_date(row) is not None:
            index.setdefault(_copy_key(row), []).append(row)
    return {key: tuple(rows) for key, rows in index.items()}


def copied_from(row: SiliconRow) -> SiliconRow | None:
    """For a row of aiconfigurator's campaigns, the dated InferenceX row whose measurement it repeats (TTFT and TPOT
    within COPY_TOLERANCE at the same `_copy_key`; the first in file order), if exactly one measurement date matches:
    aiconfigurator's kimi-k2.5-gap-analysis.csv repeats InferenceX's Kimi-K2.5 rows of 2026-03-24 / 03-27 without
    their date or recipe."""
    if row_origin(row) == ORIGIN_INFERENCEX:
        return None
    matches = [o for o in _inferencex_rows().get(_copy_key(row), ())
               if abs(o.measured_ttft_s / row.measured_ttft_s - 1) <= COPY_TOLERANCE
               and abs(o.measured_tpot_s / row.measured_tpot_s - 1) <= COPY_TOLERANCE]
    return matches[0] if len({measured_date(o) for o in matches}) == 1 else None


def harness_of(row: SiliconRow) -> Harness | None:
    """The InferenceX recipe that measured `row`, if one of `INFERENCEX_HARNESS` covers it (for a campaign row that
    repeats an InferenceX row's measurement, `copied_from`, that row's)."""
    if row_origin(row) != ORIGIN_INFERENCEX:
        original = copied_from(row)
        return None if original is None else harness_of(original)
    date = measured_date(row)
    return None if date is None else next(
        (h for h in INFERENCEX_HARNESS if (h.model_path, h.system, h.version) == (
            row.model_path, row.system, row.backend_version) and h.precision in (None, row.precision)
         and h.measured[0] <= date <= h.measured[1]), None)


def config_id(row: SiliconRow) -> int | None:
    """The InferenceX configuration of a db-dump row (`config_id=N` in silicon_data_source), if it names one."""
    match = re.search(r"config_id=(\d+)", row.source)
    return None if match is None else int(match.group(1))


def launch_layout(row: SiliconRow, harness: Harness) -> Launch:
    """The layout `harness`'s script launched `row` with. Every recipe of INFERENCEX_HARNESS is a single-node script
    that passes `--tensor-parallel-size=$TP` and no --data-parallel-size, except the DP_ATTENTION branch of the
    MiniMax-M2.5 fp4 scripts (`--tensor-parallel-size=1 --data-parallel-size=$TP --enable-expert-parallel`), so a
    row's attention_dp_size never names the launch: the file's rows of a `{ tp: T, ep: T }` sweep entry read
    attention_dp T and moe_ep T x T (e.g. Kimi-K2.5 B200 config 635, whose `tp4_ep4` rows are the same measurements
    as the campaign's one-node `tp4_ep4` rows). TP is the row's, DP 1; expert parallelism as the script passes it
    (`Harness.expert_parallel`), where EP_SIZE decides: the row's moe_ep_size > 1."""
    if config_id(row) in harness.dp_attention_configs:
        return Launch(1, row.tp_size, True)
    expert_parallel = harness.expert_parallel
    if expert_parallel is None:
        expert_parallel = (row.moe_ep_size or 1) > 1
    return Launch(row.tp_size, 1, expert_parallel)

