"""roofline.judge.rows: silicon_sample.csv rows read right (concurrency, GPUs, quantization) and every vLLM agg
row either simulated or skipped with a reason from the closed list. Skipped without aiconfigurator-core."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

pytest.importorskip("aiconfigurator_core")

from roofline.judge.harness import ORIGIN_AIC_CAMPAIGN, ORIGIN_INFERENCEX, row_origin
from roofline.judge.rows import (
    RowError,
    SimCase,
    Skip,
    SkipReason,
    checkpoint_quantization,
    parse_row,
    read_silicon_rows,
    resolve_row,
)

NAN = math.nan


def record(**overrides: object) -> dict:
    """A vLLM agg row as pandas reads it: Llama-3.1-70B fp8 on 4 H100s, concurrency 16."""
    base = {"id": "r1", "silicon_data_source": "x.csv; silicon_concurrency=16", "backend": "vllm",
            "backend_version": "0.18.0", "model_path": "meta-llama/Llama-3.1-70B", "system": "h100_sxm",
            "precision": "fp8", "mode": "agg", "isl": 1024, "osl": 1024, "gemm_quant_mode": "fp8",
            "moe_quant_mode": "fp8", "batch_size": 16.0, "tp_size": 4.0, "pp_size": 1.0, "attention_dp_size": 1.0,
            "moe_tp_size": 1.0, "moe_ep_size": 1.0, "silicon_ttft_ms": 120.0, "silicon_tpot_ms": 13.0}
    base.update(overrides)
    if "moe_tp_size" not in overrides:  # experts over all tp x dp GPUs, as vLLM runs them
        dp = base["attention_dp_size"]
        base["moe_tp_size"] = base["tp_size"] * (1.0 if dp != dp else dp)
    return base


def test_concurrency_is_batch_size_times_attention_dp_and_gpus_multiply() -> None:
    row = parse_row(record(batch_size=16.0, attention_dp_size=4.0, tp_size=2.0,
                           silicon_data_source="silicon_concurrency=64"))
    assert (row.concurrency, row.num_gpus) == (64, 8)
    assert (row.measured_ttft_s, row.measured_tpot_s) == (0.12, 0.013)


def test_empty_attention_dp_is_one() -> None:
    row = parse_row(record(attention_dp_size=NAN))
    assert (row.attention_dp_size, row.concurrency) == (1, 16)


def test_concurrency_disagreeing_with_the_source_is_a_row_error() -> None:
    with pytest.raises(RowError, match="silicon_concurrency=32"):
        parse_row(record(silicon_data_source="silicon_concurrency=32"))


def test_non_positive_measurement_is_a_row_error() -> None:
    with pytest.raises(RowError, match="silicon_ttft_ms"):
        parse_row(record(silicon_ttft_ms=NAN))


def test_dense_fp8_row_on_h100_is_simulated_with_its_version_defaults() -> None:
    case = resolve_row(parse_row(record()))
    assert isinstance(case, SimCase)
    assert case.hardware_id == "h100-sxm" and case.concurrency == 16
    assert case.engine.tensor_parallel_size == 4 and case.engine.quantization == "fp8"
    assert (case.engine.max_num_batched_tokens, case.engine.max_num_seqs) == (8192, 1024)
    assert case.config_path.name == "meta-llama--Meta-Llama-3.1-70B_config.json"  # the renamed checkpoint


@pytest.mark.parametrize("version,expected", [("0.12.0", False), ("0.11.2", False), (NAN, False), ("0.15.1", True),
                                              ("0.19.0", True), ("nightly-5b8c30d62b754b57", True)])
def test_async_scheduling_follows_the_version_default(version: object, expected: bool) -> None:
    case = resolve_row(parse_row(record(backend_version=version)))
    assert isinstance(case, SimCase) and case.engine.async_scheduling is expected


def test_inferencex_rows_take_their_recipes_flags() -> None:
    # InferenceX's gpt-oss recipe on H100 at vLLM 0.18.0 sets VLLM_MXFP4_USE_MARLIN=1 and --max-num-seqs=$CONC;
    # its Llama-3.1-70B recipe (2025-10-29) an fp8 KV cache and --async-scheduling; other sources keep the defaults.
    source = "source_file=2026-03-25.csv; model=GPT-OSS-120B; silicon_concurrency=16; measured=2026-03-27T08:01:51Z"
    gpt_oss = resolve_row(parse_row(record(model_path="openai/gpt-oss-120b", precision="fp4", gemm_quant_mode=NAN,
                                           moe_quant_mode=NAN, silicon_data_source=source)))
    assert isinstance(gpt_oss, SimCase)
    assert (gpt_oss.engine.moe_backend, gpt_oss.engine.max_num_seqs) == ("marlin", 16)
    assert not gpt_oss.engine.enable_prefix_caching and any("InferenceX" in n for n in gpt_oss.notes)
    llama = resolve_row(parse_row(record(backend_version=NAN, silicon_data_source=(
        "source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=16; measured=2025-10-29T00:00:00.000Z"))))
    assert isinstance(llama, SimCase)
    assert (llama.engine.kv_cache_dtype, llama.engine.async_scheduling) == ("fp8", True)
    early = source.replace("2026-03-25", "2026-04-06").replace("2026-03-27T08:01:51Z", "2025-11-02T00:00:00.000Z")
    gpt_oss_early = resolve_row(parse_row(record(model_path="openai/gpt-oss-120b", precision="fp4", backend_version=NAN,
                                                 gemm_quant_mode=NAN, moe_quant_mode=NAN, silicon_data_source=early)))
    assert isinstance(gpt_oss_early, SimCase)  # the 2025-11-01 recipe: async scheduling, no Marlin yet
    assert (gpt_oss_early.engine.async_scheduling, gpt_oss_early.engine.moe_backend,
            gpt_oss_early.engine.max_num_seqs) == (True, "auto", 16)
    other = resolve_row(parse_row(record(backend_version=NAN)))
    assert isinstance(other, SimCase)
    assert (other.engine.kv_cache_dtype, other.engine.async_scheduling, other.engine.moe_backend) == (
        "auto", False, "auto")


@pytest.mark.parametrize("version,measured", [("0.15.1", "2026-02-25T08:00:00Z"), (NAN, "2025-11-02T00:00:00.000Z")])
def test_gpt_oss_b200_recipes_run_mxfp8_activations(version: object, measured: str) -> None:
    # InferenceX's gpt-oss B200 recipes (2025-11-01 and 0.15.1 of 2026-02-25) export
    # VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1: FlashInfer's TRT-LLM MoE with MXFP8 activations, not the default W4A16.
    source = f"source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=16; measured={measured}"
    case = resolve_row(parse_row(record(model_path="openai/gpt-oss-120b", precision="fp4", system="b200_sxm",
                                        backend_version=version, tp_size=1.0, gemm_quant_mode=NAN,
                                        moe_quant_mode=NAN, silicon_data_source=source)))
    assert isinstance(case, SimCase)
    assert case.engine.moe_backend == "flashinfer-mxfp4-mxfp8"
    assert not any("MXFP8 activations: simulated with the default" in n for n in case.notes)


def test_minimax_recipes_set_their_flags_or_force_expert_parallelism() -> None:
    # B200 at 0.19.0 (2026-04-03 on): fp8 KV, block 32, --max-num-batched-tokens $((ISL * 2)); H200: the recipe's
    # `if [ "$EP_SIZE" -ge 1 ]` passes --enable-expert-parallel whatever the row's moe_ep_size says.
    minimax = dict(model_path="MiniMaxAI/MiniMax-M2.5", precision="fp8", gemm_quant_mode="fp8_block",
                   moe_quant_mode="fp8_block", isl=8192)
    b200 = resolve_row(parse_row(record(**minimax, system="b200_sxm", backend_version="0.19.0", silicon_data_source=(
        "db-dump/2026-04-27; config_id=691; silicon_concurrency=16; measured=2026-04-22T00:00:00.000Z"))))
    assert isinstance(b200, SimCase)
    assert (b200.engine.kv_cache_dtype, b200.engine.block_size, b200.engine.max_num_batched_tokens) == ("fp8", 32,
                                                                                                      16384)
    h200 = resolve_row(parse_row(record(**minimax, system="h200_sxm", backend_version="0.18.0", tp_size=8.0,
                                        silicon_data_source=(
        "db-dump/2026-04-27; config_id=606; silicon_concurrency=16; measured=2026-03-28T00:00:00.000Z"))))
    assert isinstance(h200, SimCase) and h200.engine.enable_expert_parallel
    assert any("--enable-expert-parallel" in n for n in h200.notes) and not h200.engine.enable_prefix_caching
    # The first H200 script (a36346339, 2026-03-01, vLLM 0.16.0) passed no --enable-expert-parallel.
    first = resolve_row(parse_row(record(**minimax, system="h200_sxm", backend_version="0.16.0", silicon_data_source=(
        "db-dump/2026-04-27; config_id=606; silicon_concurrency=16; measured=2026-03-01T00:00:00.000Z"))))
    assert isinstance(first, SimCase) and not first.engine.enable_expert_parallel


def test_minimax_b200_0_17_rows_run_the_triton_moe_their_recipe_forced() -> None:
    # The 0.17.0 fp8 B200 script (2026-03-11 to 03-27) exports VLLM_USE_FLASHINFER_MOE_FP8=0 and
    # VLLM_MOE_USE_DEEP_GEMM=0: vLLM's Triton fused MoE (--moe-backend triton), not the default TRT-LLM-gen MoE; the
    # 0.19.0 script (2026-04-03 on) exports neither.
    minimax = dict(model_path="MiniMaxAI/MiniMax-M2.5", precision="fp8", gemm_quant_mode="fp8_block",
                   moe_quant_mode="fp8_block", system="b200_sxm", tp_size=2.0, moe_tp_size=2.0)
    march = resolve_row(parse_row(record(**minimax, backend_version="0.17.0", silicon_data_source=(
        "source_file=2026-03-25.csv; model=MiniMax-M2.5; silicon_concurrency=16; measured=2026-03-11T18:39:31Z"))))
    april = resolve_row(parse_row(record(**minimax, backend_version="0.19.0", silicon_data_source=(
        "source_file=2026-04-06.csv; model=MiniMax-M2.5; silicon_concurrency=16; measured=2026-04-03T00:00:00.000Z"))))
    assert isinstance(march, SimCase) and isinstance(april, SimCase)
    recipe = [n for n in march.notes if n.startswith("engine flags of InferenceX's recipe")]
    assert len(recipe) == 1 and "VLLM_USE_FLASHINFER_MOE_FP8=0 VLLM_MOE_USE_DEEP_GEMM=0" in recipe[0]
    assert "not modelled" not in recipe[0]
    assert (march.engine.moe_backend, april.engine.moe_backend) == ("triton", "auto")
    assert march.engine.enable_expert_parallel  # the recipe's `if [ "$EP_SIZE" -ge 1 ]`
    assert not any("VLLM_USE_FLASHINFER_MOE_FP8" in n for n in april.notes)


def test_the_judges_reuse_groups_split_recipes_and_versions_but_not_loads() -> None:
    """`e2e_accuracy.reuse_group`: rows of one model, GPU and layout run by another vLLM version or other flags (the
    0.17.0 MiniMax-M2.5 B200 recipe's Triton MoE) are different groups, so sampled rows of one never vouch for the
    other's cached results; a recipe's rows at other concurrencies (`--max-num-seqs $CONC`) share one."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "accuracy"))
    from e2e_accuracy import reuse_group  # type: ignore[import-not-found]

    minimax = dict(model_path="MiniMaxAI/MiniMax-M2.5", precision="fp8", gemm_quant_mode="fp8_block",
                   moe_quant_mode="fp8_block", system="b200_sxm", tp_size=2.0, moe_tp_size=2.0)
    cases = [resolve_row(parse_row(record(**minimax, backend_version=version))) for version in ("0.17.0", "0.19.0")]
    assert isinstance(cases[0], SimCase) and isinstance(cases[1], SimCase)
    old, new = cases
    assert reuse_group(old) != reuse_group(new) and "/vllm-0.17.0/" in reuse_group(old)
    triton = replace(old, engine=replace(old.engine, moe_backend="triton"))
    assert reuse_group(triton) != reuse_group(old)
    busier = replace(old, engine=replace(old.engine, max_num_seqs=64, max_num_batched_tokens=2048), concurrency=64)
    assert reuse_group(busier) == reuse_group(old)


KIMI_B200 = dict(model_path="moonshotai/Kimi-K2.5", precision="fp4", gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4",
                 system="b200_sxm", backend_version="0.17.0", tp_size=4.0, isl=1024)


@pytest.mark.parametrize("measured,prefix_caching", [("2026-03-11T16:59:40Z", True),
                                                     ("2026-03-27T00:00:00.000Z", False)])
def test_kimi_b200_march_rows_ran_tensor_parallel_only_whatever_their_labels(measured: str,
                                                                            prefix_caching: bool) -> None:
    # kimik2.5_fp4_b200.sh (a58dedd5a .. 626932a11): --tensor-parallel-size=$TP --max-num-seqs $CONC, never
    # --enable-expert-parallel or --data-parallel-size; 79a42e20a (2026-03-27) added --no-enable-prefix-caching.
    labelled_ep = resolve_row(parse_row(record(**KIMI_B200, moe_tp_size=1.0, moe_ep_size=4.0, silicon_data_source=(
        f"source_file=2026-03-25.csv; model=Kimi-K2.5; silicon_concurrency=16; measured={measured}"))))
    assert isinstance(labelled_ep, SimCase)
    engine = labelled_ep.engine
    assert (engine.tensor_parallel_size, engine.data_parallel_size, engine.enable_expert_parallel) == (4, 1, False)
    assert (engine.max_num_seqs, engine.enable_prefix_caching, engine.kv_cache_dtype) == (16, prefix_caching, "auto")
    assert any("no --enable-expert-parallel (the row reads tp 4, attention_dp 1, moe_tp 1, moe_ep 4)" in n
               for n in labelled_ep.notes)
    # The rows of config 635 read attention_dp 4 and moe_ep 16 (16 GPUs, two nodes): one node, TP 4, the client's
    # concurrency batch_size x 4 = the run's CONC.
    two_node_label = resolve_row(parse_row(record(**KIMI_B200, batch_size=4.0, attention_dp_size=4.0, moe_tp_size=1.0,
                                                  moe_ep_size=16.0, silicon_data_source=(
        f"db-dump/2026-04-27; config_id=635; silicon_concurrency=16; measured={measured}"))))
    assert isinstance(two_node_label, SimCase) and two_node_label.concurrency == 16
    engine = two_node_label.engine
    assert (engine.tensor_parallel_size, engine.data_parallel_size, engine.data_parallel_size_local,
            engine.enable_expert_parallel, engine.max_num_seqs) == (4, 1, None, False, 16)
    assert two_node_label.api_server_count == 1


def test_kimi_b200_april_rows_take_the_april_flags() -> None:
    # 6c3acebfa (2026-04-20): --kv-cache-dtype fp8 --max-cudagraph-capture-size 2048
    # --max-num-batched-tokens $((ISL * 2)) --stream-interval 20 --no-enable-prefix-caching.
    case = resolve_row(parse_row(record(**KIMI_B200, silicon_data_source=(
        "db-dump/2026-04-27; config_id=811; silicon_concurrency=16; measured=2026-04-20T00:00:00.000Z"))))
    assert isinstance(case, SimCase)
    engine = case.engine
    assert (engine.kv_cache_dtype, engine.max_cudagraph_capture_size, engine.max_num_batched_tokens,
            engine.max_num_seqs, engine.enable_prefix_caching, engine.enable_expert_parallel) == (
        "fp8", 2048, 2048, 16, False, False)
    recipe = [n for n in case.notes if n.startswith("engine flags of InferenceX's recipe")]
    assert len(recipe) == 1 and "6c3acebfa" in recipe[0] and "--stream-interval 20" in recipe[0]


def test_campaign_rows_repeating_an_inferencex_measurement_take_its_recipe() -> None:
    # aiconfigurator's kimi-k2.5-gap-analysis.csv repeats InferenceX's Kimi-K2.5 B200 rows of 2026-03-27 (config 635,
    # labelled tp 4, attention_dp 4) under the labels tp 4, moe_ep 4 and no date: the March recipe, TP 4 only.
    rows = {r.row_id: r for r in read_silicon_rows()}
    copy = rows["kimi_k2_5_gap_analysis_kimi_k2_5_gap_analysis_b200_sxm_vllm_fp4_agg_1024x1024_c4_tp4_ep4_3"]
    assert row_origin(copy) == ORIGIN_AIC_CAMPAIGN and copy.moe_ep_size == 4
    case = resolve_row(copy)
    assert isinstance(case, SimCase)
    engine = case.engine
    assert (engine.tensor_parallel_size, engine.data_parallel_size, engine.enable_expert_parallel,
            engine.max_num_seqs, engine.enable_prefix_caching) == (4, 1, False, 4, False)
    assert any(n.startswith("the measurement of InferenceX's row") and "measured 2026-03-27" in n for n in case.notes)
    # A campaign row no InferenceX row repeats keeps its labels and vLLM's defaults.
    other = resolve_row(replace(copy, measured_ttft_s=0.2))
    assert isinstance(other, SimCase) and not any("InferenceX" in n for n in other.notes)
    assert (other.engine.enable_expert_parallel, other.engine.max_num_seqs) == (True, 1024)


def test_kimi_b200_int4_rows_take_their_recipes_flags_and_name_the_flashinfer_moe() -> None:
    # kimik2.5_int4_b200.sh at 79ea3651a (2026-03-24): --max-num-seqs $CONC --gpu-memory-utilization 0.95
    # --no-enable-prefix-caching, VLLM_USE_FLASHINFER_MOE_INT4=1 (not modelled).
    case = resolve_row(parse_row(record(**dict(KIMI_B200, precision="int4", gemm_quant_mode="int4_wo",
                                               moe_quant_mode="int4_wo", backend_version="0.15.1", tp_size=8.0),
                                        silicon_data_source=("source_file=2026-03-25.csv; model=Kimi-K2.5; "
                                                             "silicon_concurrency=16; measured=2026-03-24T20:03:09Z"))))
    assert isinstance(case, SimCase)
    engine = case.engine
    assert (engine.max_num_seqs, engine.gpu_memory_utilization, engine.enable_prefix_caching,
            engine.enable_expert_parallel) == (16, 0.95, False, False)
    assert any("not modelled: VLLM_USE_FLASHINFER_MOE_INT4=1" in n for n in case.notes)


MINIMAX_FP4 = dict(model_path="MiniMaxAI/MiniMax-M2.5", precision="fp4", gemm_quant_mode="nvfp4",
                   moe_quant_mode="nvfp4", backend_version="0.19.0", tp_size=2.0, batch_size=128.0,
                   attention_dp_size=2.0, moe_tp_size=1.0, moe_ep_size=4.0)


@pytest.mark.parametrize("system,config,measured,launch", [
    ("b200_sxm", 707, "2026-04-22", (1, 2, True)),  # `{ tp: 2, ep: 2, dp-attn: true }`: the DP_ATTENTION branch
    ("b200_sxm", 706, "2026-04-08", (2, 1, True)),  # `{ tp: 2, ep: 2 }`
    ("b300_sxm", 727, "2026-04-21", (1, 2, True)),
    ("b300_sxm", 726, "2026-04-17", (2, 1, True)),
])
def test_minimax_fp4_rows_run_the_scripts_data_parallel_attention_branch_only_where_configured(
        system: str, config: int, measured: str, launch: tuple[int, int, bool]) -> None:
    # minimaxm2.5_fp4_b200.sh / _b300.sh: DP_ATTENTION=true -> --tensor-parallel-size=1 --data-parallel-size=$TP
    # --enable-expert-parallel; EP_SIZE > 1 -> --tensor-parallel-size=$TP --enable-expert-parallel; no --block-size.
    case = resolve_row(parse_row(record(**MINIMAX_FP4, system=system, silicon_data_source=(
        f"db-dump/2026-04-27; config_id={config}; silicon_concurrency=256; measured={measured}T00:00:00.000Z"))))
    assert isinstance(case, SimCase) and case.concurrency == 256
    engine = case.engine
    assert (engine.tensor_parallel_size, engine.data_parallel_size, engine.enable_expert_parallel) == launch
    assert (engine.data_parallel_size_local, engine.block_size, engine.kv_cache_dtype) == (None, 16, "fp8")
    assert case.api_server_count == launch[1]  # vLLM's default: one API server per DP rank from 0.17.0


def test_minimax_fp8_rows_labelled_data_parallel_ran_tensor_parallel_with_experts_parallel() -> None:
    # The fp8 scripts have no DP_ATTENTION branch: `{ tp: 4, ep: 4 }` (config 691, read attention_dp 4, moe_ep 16)
    # is --tensor-parallel-size=4 --enable-expert-parallel on one node, block 32; H100's (2026-03-28) likewise.
    minimax = dict(model_path="MiniMaxAI/MiniMax-M2.5", precision="fp8", gemm_quant_mode="fp8_block",
                   moe_quant_mode="fp8_block", tp_size=4.0, batch_size=16.0, attention_dp_size=4.0,
                   moe_tp_size=1.0, moe_ep_size=16.0)
    b200 = resolve_row(parse_row(record(**minimax, system="b200_sxm", backend_version="0.19.0", silicon_data_source=(
        "db-dump/2026-04-27; config_id=691; silicon_concurrency=64; measured=2026-04-03T00:00:00.000Z"))))
    h100 = resolve_row(parse_row(record(**minimax, system="h100_sxm", backend_version="0.18.0", silicon_data_source=(
        "source_file=2026-04-06.csv; model=MiniMax-M2.5; silicon_concurrency=64; measured=2026-03-28T00:00:00.000Z"))))
    for case in (b200, h100):
        assert isinstance(case, SimCase) and case.concurrency == 64
        engine = case.engine
        assert (engine.tensor_parallel_size, engine.data_parallel_size, engine.data_parallel_size_local,
                engine.enable_expert_parallel) == (4, 1, None, True)
    assert isinstance(b200, SimCase) and b200.engine.block_size == 32
    assert isinstance(h100, SimCase) and (h100.engine.max_num_seqs, h100.engine.enable_prefix_caching) == (256, False)


def test_empty_precision_is_the_checkpoint_dtype() -> None:
    case = resolve_row(parse_row(record(model_path="Qwen/Qwen3-32B", precision=NAN, gemm_quant_mode=NAN,
                                        moe_quant_mode=NAN)))
    assert isinstance(case, SimCase) and case.engine.quantization == "none"


@pytest.mark.parametrize("overrides, reason", [
    ({"precision": "int4", "gemm_quant_mode": "int4_wo"}, SkipReason.PRECISION),
    ({"model_path": "deepseek-ai/DeepSeek-V3.2", "precision": "fp8"}, SkipReason.ARCHITECTURE),
    ({"system": "b60"}, SkipReason.GPU),
    ({"attention_dp_size": 2.0, "silicon_data_source": "silicon_concurrency=32"}, SkipReason.PARALLELISM),  # dense
    ({"tp_size": 16.0}, SkipReason.MULTI_NODE),
])
def test_skip_reasons(overrides: dict, reason: SkipReason) -> None:
    skip = resolve_row(parse_row(record(**overrides)))
    assert isinstance(skip, Skip) and skip.reasons[0] == reason


def test_several_reasons_are_all_listed_in_closed_list_order() -> None:
    skip = resolve_row(parse_row(record(model_path="deepseek-ai/DeepSeek-V3.2", precision="int4", tp_size=16.0)))
    assert isinstance(skip, Skip)
    assert skip.reasons == (SkipReason.ARCHITECTURE, SkipReason.PRECISION, SkipReason.MULTI_NODE)


def test_fp4_precision_on_an_fp8_checkpoint_serves_nvidias_nvfp4_checkpoint() -> None:
    case = resolve_row(parse_row(record(model_path="MiniMaxAI/MiniMax-M2.5", precision="fp4", gemm_quant_mode="nvfp4",
                                        moe_quant_mode="nvfp4", system="b200_sxm", tp_size=4.0, moe_tp_size=4.0)))
    assert isinstance(case, SimCase)
    assert case.config_path.name == "nvidia--MiniMax-M2.5-NVFP4_config.json" and case.engine.quantization == "nvfp4"


def test_checkpoint_quantization_reads_the_checkpoint_config() -> None:
    assert checkpoint_quantization("MiniMaxAI/MiniMax-M2.5",
                                   {"quantization_config": {"quant_method": "fp8",
                                                            "weight_block_size": [128, 128]}}) == "fp8-block"
    assert checkpoint_quantization("x/y", {"quantization_config": {"quant_method": "fp8"}}) == "fp8"
    assert checkpoint_quantization("nvidia/Llama-3.1-70B-Instruct-FP8", {}) == "fp8"  # ModelOpt hf_quant_config
    assert checkpoint_quantization("x/y", {"quantization_config": {"quant_method": "mxfp4"}}) == "mxfp4"
    assert checkpoint_quantization("Qwen/Qwen3-32B", {}) is None


def test_experts_over_a_multiple_of_attention_tp_are_unrecorded_data_parallelism() -> None:
    # vLLM flattens the experts' TP across data-parallel ranks (FusedMoEParallelConfig.flatten_tp_across_dp): moe_tp 4
    # over tp 2 with attention_dp empty is --data-parallel-size 2, simulated so (issue 40).
    outcome = resolve_row(parse_row(record(model_path="Qwen/Qwen3-235B-A22B-FP8", system="h200_sxm", tp_size=2.0,
                                           moe_tp_size=4.0, moe_ep_size=1.0)))
    assert isinstance(outcome, SimCase)
    assert (outcome.engine.data_parallel_size, outcome.engine.enable_expert_parallel) == (2, False)
    with pytest.raises(RowError, match="moe_tp 3 x moe_ep 1 = 3 GPUs"):  # not a multiple of tp: unreadable
        resolve_row(parse_row(record(model_path="Qwen/Qwen3-235B-A22B-FP8", system="h200_sxm", tp_size=2.0,
                                     moe_tp_size=3.0, moe_ep_size=1.0)))


def test_every_vllm_agg_row_is_simulated_skipped_or_a_named_miss() -> None:
    rows = read_silicon_rows()
    assert len(rows) == 1328  # aiconfigurator-core 0.12.0
    outcomes, misses = [], []
    for row in rows:
        try:
            outcomes.append(resolve_row(row))
        except RowError as exc:
            misses.append(str(exc))
    client = [m for m in misses if "not recorded" in m]  # gpt-oss-120b H100 rows of a recipe's hard-coded 512
    assert (len(client), len(misses)) == (9, 9)
    # Qwen3-235B-A22B-FP8 H200 rows of aiconfigurator's own campaign whose experts span more GPUs than attention's
    # TP: the unrecorded --data-parallel-size vLLM needs for them, simulated (issue 40).
    implied_dp = [o for o in outcomes if isinstance(o, SimCase) and o.row.attention_dp_size == 1
                  and o.engine.data_parallel_size > 1]
    assert len(implied_dp) == 19
    # No row is skipped for data or expert parallelism of a MoE model any more. The 61 whose labels span two nodes
    # (tp T x attention_dp T) are all InferenceX rows of a single-node script's `{ tp: T, ep: T }`: one node each,
    # as launched (`launch_layout`); 8 MiniMax-M2.5 fp4 rows ran its DP_ATTENTION branch (TP 1 x DP 2).
    assert not [o for o in outcomes if isinstance(o, Skip) and SkipReason.PARALLELISM in o.reasons]
    assert not [o for o in outcomes if isinstance(o, Skip) and SkipReason.MULTI_NODE in o.reasons]
    assert not [o for o in outcomes if isinstance(o, SimCase) and o.engine.data_parallel_size_local is not None]
    assert sum(isinstance(o, SimCase) and o.engine.data_parallel_size > 1 and o.engine.tensor_parallel_size == 1
               and "MiniMax" in o.row.model_path for o in outcomes) == 8
    assert all(isinstance(o, (SimCase, Skip)) for o in outcomes)
    assert all(o.reasons and set(o.reasons) <= set(SkipReason) for o in outcomes if isinstance(o, Skip))
    assert sum(isinstance(o, SimCase) for o in outcomes) > 0


def test_inferencex_rows_whose_recorded_concurrency_is_not_the_runs_are_misses() -> None:
    source = ("source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=512; "
              "measured=2025-12-08T00:00:00.000Z; wip=False")
    gpt_oss = dict(model_path="openai/gpt-oss-120b", precision="fp4", gemm_quant_mode="", moe_quant_mode="",
                   backend_version="0.11.2", batch_size=512.0, tp_size=2.0)
    with pytest.raises(RowError, match="hard-coded"):
        resolve_row(parse_row(record(silicon_data_source=source, **gpt_oss)))
    later = source.replace("2025-12-08", "2025-12-09")
    assert isinstance(resolve_row(parse_row(record(silicon_data_source=later, **gpt_oss))), SimCase)


def test_rows_are_told_apart_by_where_they_were_measured() -> None:
    """InferenceX's dated source files and dashboard dumps against aiconfigurator's own gap-analysis campaigns (a local
    path in silicon_data_source, client not recorded): every H100 Qwen3-32B row is a campaign row, every H100
    Llama-3.1-70B row InferenceX's."""
    rows = [r for r in read_silicon_rows() if r.system == "h100_sxm"]
    origins = {(r.model_path, row_origin(r)) for r in rows}
    assert ("Qwen/Qwen3-32B", ORIGIN_AIC_CAMPAIGN) in origins
    assert ("Qwen/Qwen3-32B", ORIGIN_INFERENCEX) not in origins
    assert {o for m, o in origins if m == "meta-llama/Llama-3.1-70B"} == {ORIGIN_INFERENCEX}
    assert row_origin(parse_row(record(silicon_data_source="db-dump/2026-04-27; config_id=1; silicon_concurrency=16"))
                      ) == ORIGIN_INFERENCEX


def test_the_judge_adds_inferencex_clients_connection_per_request_only_to_its_rows() -> None:
    """roofline.judge.checks.client_costs: a row InferenceX measured, and a campaign row repeating one, get the
    reference API-server costs with INFERENCEX_CLIENT_S more latency; a campaign row of its own keeps the profile's."""
    from roofline.judge.checks import INFERENCEX_CLIENT_S, client_costs
    from roofline.sim.api_server import ApiServerCosts

    reference = ApiServerCosts()
    inferencex = client_costs(parse_row(record(
        silicon_data_source="db-dump/2026-04-27; config_id=1; silicon_concurrency=16")))
    assert inferencex is not None
    assert inferencex.latency_s == reference.latency_s + INFERENCEX_CLIENT_S == 3.77e-3 + 2.5e-3
    assert inferencex.request_s == reference.request_s and inferencex.output_pass_s == reference.output_pass_s
    rows = {r.row_id: r for r in read_silicon_rows()}
    copy = rows["kimi_k2_5_gap_analysis_kimi_k2_5_gap_analysis_b200_sxm_vllm_fp4_agg_1024x1024_c4_tp4_ep4_3"]
    assert client_costs(copy) == inferencex
    campaign = next(r for r in rows.values() if r.model_path == "Qwen/Qwen3-32B" and r.system == "h100_sxm")
    assert client_costs(campaign) is None
