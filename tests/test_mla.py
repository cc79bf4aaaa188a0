"""Multi-head latent attention (DeepSeek-V3 family): the step cost's records, the latent KV cache and its capacity."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from roofline.cost.hardware import load_profile
from roofline.cost.kernels.mla import MlaBatch, mla_backend, mla_records
from roofline.cost.ops import BatchStats
from roofline.cost.quant import QuantConfig
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepArrays
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.registry import load_model
from roofline.sim.deployment import make_deployment

FP8_BLOCK = 1.0 + 4.0 / (128 * 128)  # bytes per fp8 parameter with one fp32 scale per 128 x 128 block


def _r1_tp8() -> StepCostModel:
    return StepCostModel(load_model("deepseek-r1"), load_profile("h200-sxm"), QuantConfig.from_user(), 8)


def test_latent_cache_is_not_split_by_tensor_parallelism() -> None:
    spec, hw = load_model("deepseek-r1"), load_profile("h200-sxm")
    per_rank = [StepCostModel(spec, hw, QuantConfig.from_user(), tp).kv_bytes_per_token_per_rank() for tp in (1, 8)]
    assert per_rank == [61 * 576 * 2.0] * 2  # 61 layers x (512 latent + 64 rope) x bf16, on every rank
    fp8 = StepCostModel(spec, hw, QuantConfig.from_user(kv_cache_dtype="fp8"), 8)
    assert fp8.kv_bytes_per_token_per_rank() == 61 * 576 * 1.0


def test_deepseek_r1_weights_per_rank_by_hand() -> None:
    # TP 8: 16 of 128 heads, experts 2048 / 8 = 256 wide, dense layers 18432 / 8 = 2304, vocabulary 129280 / 8.
    h = 7168
    attn_fp8 = h * (1536 + 576) + 1536 * 16 * 192 + 512 * 16 * 256 + 16 * 128 * h
    attn_bf16 = (1536 + 512) * 2 + 16 * 512 * 256 * 2  # latent norms, W_UK_T and W_UV kept in bf16
    moe = (256 * 3 * h * 256 + 3 * h * 256) * FP8_BLOCK + 256 * h * 2 + 256 * 2  # experts, shared, router, bias
    dense = 3 * h * 2304 * FP8_BLOCK
    layers = 61 * (attn_fp8 * FP8_BLOCK + attn_bf16 + 2 * h * 2) + 58 * moe + 3 * dense
    expected = layers + 2 * 16160 * h * 2 + h * 2  # embedding and LM head rows of this rank, final norm
    assert _r1_tp8().weight_bytes_per_rank() == pytest.approx(expected, rel=1e-12)


def test_simulate_deepseek_r1_on_h200_tp8_kv_capacity_equals_hand_calculation() -> None:
    # `roofline simulate --model deepseek-r1 --hardware h200-sxm --tensor-parallel-size 8`'s deployment
    kv = make_deployment("deepseek-r1", "h200-sxm", EngineArgs(tensor_parallel_size=8)).kv
    # The MLA parts by hand (the weights: test_deepseek_r1_weights_per_rank_by_hand); the requested memory, the
    # activation peak and the non-torch memory are vLLM's version-dependent terms (roofline.cost.kv_capacity).
    assert kv.weight_bytes == _r1_tp8().weight_bytes_per_rank()
    budget = kv.requested_bytes - kv.weight_bytes - kv.activation_peak_bytes - kv.non_torch_bytes
    block = 16 * 61 * 576 * 2  # 16 tokens x 61 layers x 576 values x 2 bytes: 1,124,352 bytes, per rank
    assert kv.block_bytes == block
    assert kv.num_gpu_blocks == math.floor(budget / block)


def test_short_queries_take_the_decode_path_up_to_the_backend_threshold() -> None:
    assert mla_backend("hopper", False).decode_threshold == 512  # FLASH_ATTN_MLA
    assert mla_backend("hopper", True).decode_threshold == 128  # FLASHMLA
    b = MlaBatch.from_lengths([1, 300, 600], [100, 0, 50], heads=16, threshold=512)
    assert (b.decode_seqs, b.decode_tokens, b.prefill_seqs, b.prefill_tokens) == (2, 301, 1, 600)
    # 16 heads x 1 token: one 64-row tile; 16 heads x 300 tokens: 75 tiles of the 301 + 300 keys... as written
    assert b.decode_tiles == 1 + 75
    assert b.decode_latent_reads == 1 * 101 + 75 * 300
    assert b.prefill_context_tokens == 50


def test_unknown_family_is_refused() -> None:
    with pytest.raises(UserError, match="multi-head latent attention is modelled on the kernel families"):
        mla_backend("cdna3", False)


def test_decode_batch_from_stats_equals_the_exact_one() -> None:
    context = np.array([10, 500, 4000])
    stats = BatchStats.from_arrays(np.ones(3, dtype=int), context, np.ones(3, dtype=int))
    assert MlaBatch.from_stats(stats, 16) == MlaBatch.from_lengths(np.ones(3, dtype=int), context, 16, 512)


def test_records_up_project_cached_context_in_prefill_and_absorb_in_decode() -> None:
    spec = replace(load_model("deepseek-v3"), num_layers=1, num_dense_layers=1)
    quant = QuantConfig.from_user()
    prefill = {r.name: r for r in mla_records(spec, quant, 8, MlaBatch.from_lengths([1000], [3000], 16, 512))}
    assert prefill["mla_kv_b_proj"].shape[:3] == (4000, 16 * 256, 512)  # new and cached latents, 16 heads x 256
    assert "mla_w_uk" not in prefill
    decode = {r.name: r for r in mla_records(spec, quant, 8, MlaBatch.from_lengths([1], [3000], 16, 512))}
    assert decode["mla_decode"].kv_read_bytes == 3001 * 576 * 2.0  # the latent cache, read once for 16 heads
    assert decode["mla_w_uk"].shape == (1, 512, 128, 16) and "mla_kv_b_proj" not in decode


def test_step_time_paths_agree_for_mla() -> None:
    model = _r1_tp8()
    q, c, e = np.array([1, 1, 700]), np.array([100, 2000, 0]), np.array([1, 1, 1])
    assert model.time_s(StepArrays(q, c, e)) == model.cost(StepArrays(q, c, e)).total_s
    contexts = np.array([100, 2000])
    decodes = StepArrays(np.ones(2, int), contexts, np.ones(2, int))
    assert model.time_s(decodes) == model._arrays_time_s(*decodes.seq_arrays()) == model.cost(decodes).total_s


def test_decode_tiles_follow_the_family_kernel_rows() -> None:
    # 128 heads, one decode token over 999 cached: Triton MLA (Ada, BLOCK_H 16) 8 tiles, FlashMLA / FA3 (64 rows) 2
    triton = MlaBatch.from_lengths([1], [999], heads=128, threshold=1, rows=16)
    hopper = MlaBatch.from_lengths([1], [999], heads=128, threshold=512)
    assert (triton.decode_tiles, hopper.decode_tiles) == (8, 2)
    assert (triton.decode_latent_reads, hopper.decode_latent_reads) == (8 * 1000, 2 * 1000)
    assert triton.decode_latent_tokens == hopper.decode_latent_tokens == 1000
    assert triton.decode_row_keys == hopper.decode_row_keys == 128 * 1000
    spec = replace(load_model("deepseek-v3"), num_layers=1, num_dense_layers=1)
    rec = next(r for r in mla_records(spec, QuantConfig.from_user(), 1, triton) if r.name == "mla_decode")
    assert rec.kv_read_bytes == 1000 * 576 * 2.0  # from DRAM once
    assert rec.shape[3] == 7 * 1000 * 576 * 2.0  # read again by the 7 other tiles (mla_decode_reread_fraction)


def test_legacy_collector_time_is_a_table_condition_only() -> None:
    spec = load_model("deepseek-r1")
    steps = StepArrays(np.array([1, 1, 700]), np.array([100, 2000, 0]), np.array([1, 1, 1]))
    names = ("mla_table_legacy_fixed_s", "mla_table_legacy_token_s", "mla_table_legacy_token_head_s")
    for chip in ("h200-sxm", "b300"):  # a fitted legacy table; B200's kernel fields with the collector's terms
        hw = load_profile(chip)
        assert all(getattr(hw.efficiency, n) > 0 for n in names), chip  # fitted on the chip's legacy MLA tables
        times = [StepCostModel(spec, replace(hw, efficiency=replace(hw.efficiency, **dict.fromkeys(names, v))),
                               QuantConfig.from_user(), 8).time_s(steps) for v in (0.0, 1.0)]
        assert times[0] == times[1], chip


def test_shared_experts_and_dense_layers_take_their_checkpoint_scheme() -> None:
    # Kimi-K2.5-NVFP4 leaves only lm_head and self_attn unquantized: its shared experts and dense layer 0 are NVFP4
    # GEMMs; Kimi-K2.5 (compressed-tensors W4A16) ignores them: bf16.
    stats = BatchStats.from_arrays(np.ones(4, dtype=int), np.full(4, 100), np.ones(4, dtype=int))
    hw = load_profile("b200")
    for model, dtype, wb in (("kimi-k2.5-nvfp4", "fp4", 0.5625), ("kimi-k2.5", "bf16", 2.0)):
        cost = StepCostModel(load_model(model), hw, QuantConfig.from_user(), 8)
        ops = {o.name: o for o in cost._step_ops(stats)}
        for name in ("shared_gate_up_proj", "shared_down_proj", "dense_gate_up_proj", "dense_down_proj"):
            assert ops[name].dtype == dtype, (model, name)
        shared = ops["shared_down_proj"]
        assert shared.weight_bytes == 60 * 7168 * 2048 // 8 * wb  # 60 MoE layers x hidden x shared width / TP


def test_a_checkpoint_quantizing_only_one_of_shared_experts_and_dense_layers_is_refused() -> None:
    from roofline.cost.quant import resolve_for_model
    spec = load_model("kimi-k2.5-nvfp4")
    assert spec.checkpoint_quant is not None
    odd = replace(spec, checkpoint_quant=replace(spec.checkpoint_quant,
                                                 ignore=spec.checkpoint_quant.ignore + ("re:.*shared_experts.*",)))
    with pytest.raises(UserError, match="quantizes one of model.layers.0.mlp.gate_up_proj and"):
        resolve_for_model(QuantConfig.from_user(), odd)
