"""roofline.judge.rows: silicon_sample.csv rows read right (concurrency, GPUs, quantization) and every vLLM agg
row either simulated or skipped with a reason from the closed list. Skipped without aiconfigurator-core."""

from __future__ import annotations

import math

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
    h200 = resolve_row(parse_row(record(**minimax, system="h200_sxm", backend_version="0.16.0", silicon_data_source=(
        "db-dump/2026-04-27; config_id=606; silicon_concurrency=16; measured=2026-03-01T00:00:00.000Z"))))
    assert isinstance(h200, SimCase) and h200.engine.enable_expert_parallel
    assert any("--enable-expert-parallel" in n for n in h200.notes)


def test_minimax_b200_0_17_rows_name_the_triton_moe_they_ran_as_not_modelled() -> None:
    # The 0.17.0 fp8 B200 script (2026-03-11 to 03-27) exports VLLM_USE_FLASHINFER_MOE_FP8=0 and
    # VLLM_MOE_USE_DEEP_GEMM=0: vLLM's Triton fused MoE, not the TRT-LLM-gen MoE the simulator runs; the 0.19.0
    # script (2026-04-03 on) exports neither.
    minimax = dict(model_path="MiniMaxAI/MiniMax-M2.5", precision="fp8", gemm_quant_mode="fp8_block",
                   moe_quant_mode="fp8_block", system="b200_sxm", tp_size=2.0, moe_tp_size=2.0)
    march = resolve_row(parse_row(record(**minimax, backend_version="0.17.0", silicon_data_source=(
        "source_file=2026-03-25.csv; model=MiniMax-M2.5; silicon_concurrency=16; measured=2026-03-11T18:39:31Z"))))
    april = resolve_row(parse_row(record(**minimax, backend_version="0.19.0", silicon_data_source=(
        "source_file=2026-04-06.csv; model=MiniMax-M2.5; silicon_concurrency=16; measured=2026-04-03T00:00:00.000Z"))))
    assert isinstance(march, SimCase) and isinstance(april, SimCase)
    recipe = [n for n in march.notes if n.startswith("engine flags of InferenceX's recipe")]
    assert len(recipe) == 1 and "not modelled: VLLM_USE_FLASHINFER_MOE_FP8=0 VLLM_MOE_USE_DEEP_GEMM=0" in recipe[0]
    assert march.engine.enable_expert_parallel  # the recipe's `if [ "$EP_SIZE" -ge 1 ]`
    assert not any("VLLM_USE_FLASHINFER_MOE_FP8" in n for n in april.notes)


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
    # No row is skipped for data or expert parallelism of a MoE model any more; of the 61 over two nodes, those on
    # a GPU whose profile describes the network between nodes (scale_out: H100, H200, B200) are simulated, B300's 5
    # skipped.
    assert not [o for o in outcomes if isinstance(o, Skip) and SkipReason.PARALLELISM in o.reasons]
    assert sum(isinstance(o, Skip) and o.reasons[0] == SkipReason.MULTI_NODE for o in outcomes) == 5
    assert sum(isinstance(o, SimCase) and o.engine.data_parallel_size_local is not None for o in outcomes) == 56
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
