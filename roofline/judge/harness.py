"""Who measured a row of aiconfigurator-core's `silicon_sample.csv` and with which client: InferenceX's public
serving recipes (the engine flags of the rows they cover), the rows whose recorded concurrency is not the run's, and
a row's origin (InferenceX's harness or aiconfigurator's own campaigns)."""

from __future__ import annotations

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
    # The recipe passes --enable-expert-parallel whatever the row's moe_ep_size says (`if [ "$EP_SIZE" -ge 1 ]`).
    expert_parallel: bool = False


# InferenceX's MiniMax-M2.5 recipes for vLLM 0.19.0 on B200 and B300 (`_minimax_0_19`).
_MINIMAX_0_19_FLAGS: dict[str, object] = dict(kv_cache_dtype="fp8", block_size=32, max_num_batched_tokens="2*ISL",
                                              enable_prefix_caching=False, gpu_memory_utilization=0.90,
                                              max_cudagraph_capture_size=2048)


_STREAM_INTERVAL = "--stream-interval 20 (the API server's output batching)"


_MINIMAX_0_19_NOT_MODELLED = _STREAM_INTERVAL


# Before 2026-04-21 the fp8 scripts (and the nightly's) also exported FlashInfer's MNNVL all-reduce backend.
_MNNVL = "VLLM_FLASHINFER_ALLREDUCE_BACKEND=mnnvl (FlashInfer's all-reduce backend)"


# The nightly's recipe (08bcde8f1) kept vLLM's capture sizes.
_MINIMAX_NIGHTLY_NOT_MODELLED = _STREAM_INTERVAL + "; " + _MNNVL


def _minimax_0_19(system: str, first: str, last: str, before: str, after: str) -> tuple[Harness, Harness]:
    """The recipes of InferenceX's MiniMax-M2.5 rows of vLLM 0.19.0 on `system`, measured `first` to `last`: the
    scripts `before` 2026-04-21, and from then on `after`, which export VLLM_FLOAT32_MATMUL_PRECISION=high (TF32 for
    MiniMax-M2's fp32 router GEMM, vllm-project/recipes#353; before, vLLM's default "highest": true fp32)."""
    return (Harness("MiniMaxAI/MiniMax-M2.5", system, "0.19.0", (first, "2026-04-20"), _MINIMAX_0_19_FLAGS, before,
                    _MINIMAX_0_19_NOT_MODELLED + "; in the fp8 script " + _MNNVL),
            Harness("MiniMaxAI/MiniMax-M2.5", system, "0.19.0", ("2026-04-21", last),
                    dict(_MINIMAX_0_19_FLAGS, float32_matmul_precision="high"),
                    after + ": VLLM_FLOAT32_MATMUL_PRECISION=high", _MINIMAX_0_19_NOT_MODELLED))


# The 0.17.0 fp8 B200 script exports VLLM_USE_FLASHINFER_MOE_FP8=0 and VLLM_MOE_USE_DEEP_GEMM=0 (f342df18e to
# 626932a11; gone from bddbf4031, 2026-04-03): vLLM 0.17.0's `select_fp8_moe_backend` (fused_moe/oracle/fp8.py) then
# drops FlashInfer TRT-LLM / CUTLASS and DeepGEMM, `Fp8MoEMethod` passes allow_vllm_cutlass=False, and the block-fp8
# experts run on the Triton fused MoE (`TritonExperts`). The simulator runs FlashInfer's TRT-LLM-gen MoE on
# Blackwell; aiconfigurator's B200 vLLM 0.19.0 MoE table times the Triton kernel (its collector calls `fused_experts`),
# against TRT-LLM-gen in its 0.24.0 table: docs/benchmark-history/2026-11-29f-dpep.md.
_MINIMAX_0_17_B200_TRITON_MOE = ("VLLM_USE_FLASHINFER_MOE_FP8=0 VLLM_MOE_USE_DEEP_GEMM=0 (vLLM's Triton fused MoE "
                                 "for the block-fp8 experts; simulated: FlashInfer TRT-LLM-gen)")


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
            dict(block_size=32, gpu_memory_utilization=0.95),
            "benchmarks/single_node/minimaxm2.5_fp8_b200.sh at 64c20b6b5 / 626932a11 (2026-03-11 / 03-27)",
            _MINIMAX_0_17_B200_TRITON_MOE, expert_parallel=True),
    Harness("MiniMaxAI/MiniMax-M2.5", "b200_sxm", "nightly-5b8c30d62b754b57", ("2026-04-03", "2026-04-03"),
            dict(kv_cache_dtype="fp8", block_size=32, enable_prefix_caching=False, gpu_memory_utilization=0.95),
            "benchmarks/single_node/minimaxm2.5_fp4_b200.sh at 08bcde8f1 (2026-04-02, image "
            "vllm/vllm-openai:nightly-5b8c30d62b754b575e043ce2fc0dcbf8a64f6306)", _MINIMAX_NIGHTLY_NOT_MODELLED),
    *_minimax_0_19("b200_sxm", "2026-04-03", "2026-04-22",
                   "benchmarks/single_node/minimaxm2.5_fp8_b200.sh at bddbf4031 (2026-04-03) and minimaxm2.5_fp4_b200.sh "
                   "at 79bd988e9 (2026-04-08)",
                   "benchmarks/single_node/minimaxm2.5_fp8_b200.sh at 41ed82dc1 and minimaxm2.5_fp4_b200.sh at 13962fcfa "
                   "(2026-04-21)"),
    *_minimax_0_19("b300_sxm", "2026-04-17", "2026-04-21",
                   "benchmarks/single_node/minimaxm2.5_fp8_b300.sh at 340d7854c and minimaxm2.5_fp4_b300.sh at 22d0f12f7 "
                   "(2026-04-17)",
                   "benchmarks/single_node/minimaxm2.5_fp8_b300.sh at 0c2467c15 and minimaxm2.5_fp4_b300.sh at 633fd2377 "
                   "(2026-04-21)"),
    Harness("MiniMaxAI/MiniMax-M2.5", "h200_sxm", "0.16.0", ("2026-03-01", "2026-03-01"),
            dict(gpu_memory_utilization=0.95),
            "benchmarks/single_node/minimaxm2.5_fp8_h200.sh at a36346339 (2026-03-01)", expert_parallel=True),
    Harness("MiniMaxAI/MiniMax-M2.5", "h200_sxm", "0.18.0", ("2026-03-27", "2026-03-28"),
            dict(gpu_memory_utilization=0.95),
            "benchmarks/single_node/minimaxm2.5_fp8_h200.sh at 1d5cae141 (2026-03-27)", expert_parallel=True),
    Harness("MiniMaxAI/MiniMax-M2.5", "h100_sxm", "0.18.0", ("2026-03-27", "2026-03-28"),
            dict(max_num_seqs=256, gpu_memory_utilization=0.90, enable_prefix_caching=False,
                 cudagraph_mode="PIECEWISE"),
            "benchmarks/single_node/minimaxm2.5_fp8_h100.sh at 1d5cae141 / 626932a11 (2026-03-27): "
            "--compilation-config cudagraph_mode PIECEWISE"),
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


def harness_of(row: SiliconRow) -> Harness | None:
    """The InferenceX recipe that measured `row`, if one of `INFERENCEX_HARNESS` covers it."""
    if row_origin(row) != ORIGIN_INFERENCEX:
        return None
    date = measured_date(row)
    return None if date is None else next(
        (h for h in INFERENCEX_HARNESS if (h.model_path, h.system, h.version) == (
            row.model_path, row.system, row.backend_version) and h.measured[0] <= date <= h.measured[1]), None)

