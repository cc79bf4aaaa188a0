"""Multi-head latent attention (DeepSeek-V3 family): the step cost's records, the latent KV cache and its capacity."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from roofline.cost.hardware import load_profile
from roofline.cost.kernels.attention import FA3_KERNELS, TRTLLM_GEN_KERNELS
from roofline.cost.kernels.mla import MlaBatch, mla_backend, mla_decode_rows, mla_records
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


def test_trtllm_gen_mla_decode_tile_rows_follow_its_kernel_choice() -> None:
    # FlashInfer fmhaKernels.cuh selectMlaGenerationKernel on 148 SMs: SwapsMmaAb with 8 / 16 heads a CTA up to 32
    # heads; above, while sequences x ceil(heads / 16) CTAs fit the SMs and a split holds at most 1024 keys.
    rows = [mla_decode_rows(TRTLLM_GEN_KERNELS, h, 16, 8192, 148) for h in (1, 8, 16, 32)]
    assert rows == [8, 8, 16, 16]
    assert mla_decode_rows(TRTLLM_GEN_KERNELS, 64, 37, 8192, 148) == 64  # 148 CTAs, 1 split: 8192 keys > 1024
    assert mla_decode_rows(TRTLLM_GEN_KERNELS, 64, 37, 1024, 148) == 16  # 148 CTAs, 1 split of 1024 keys
    assert mla_decode_rows(TRTLLM_GEN_KERNELS, 64, 38, 1024, 148) == 64  # 152 CTAs > 148: KeepsMmaAb, 64 heads
    assert mla_decode_rows(TRTLLM_GEN_KERNELS, 128, 2, 9216, 148) == 16  # 16 CTAs, 9 splits of 1024 keys
    assert mla_decode_rows(TRTLLM_GEN_KERNELS, 128, 2, 9217, 148) == 128  # 1025 keys a split: the 2-CTA kernel
    assert list(mla_decode_rows(TRTLLM_GEN_KERNELS, 128, np.array([1, 64]), np.array([100, 100]), 148)) == [16, 128]
    assert mla_decode_rows(FA3_KERNELS, 128, 64, 100, 132) == 64  # a fixed tile elsewhere
    # The step model cuts B200's decodes the same way: 32 heads (DeepSeek-R1 at TP 4), two 16-head tiles a sequence.
    spec, hw = load_model("deepseek-r1"), load_profile("b200")
    stats = BatchStats.from_arrays(np.ones(3, dtype=int), np.array([10, 500, 4000]), np.ones(3, dtype=int))
    model = StepCostModel(spec, hw, QuantConfig.from_user(), 4)
    dec = next(r for r in model._attention_records(stats) if r.kind == "mla_decode")
    assert dec.shape[2] == 3 * 2  # work tiles


def test_fp8_block_linear_term_is_a_table_condition_only() -> None:
    spec = load_model("deepseek-r1")
    steps = StepArrays(np.array([1, 1, 700]), np.array([100, 2000, 0]), np.array([1, 1, 1]))
    hw = load_profile("b200")
    assert hw.efficiency.mla_table_fp8_block_linear_s > 0  # fitted on B200's MLA module tables
    times = [StepCostModel(spec, replace(hw, efficiency=replace(hw.efficiency, mla_table_fp8_block_linear_s=v)),
                           QuantConfig.from_user(), 8).time_s(steps) for v in (0.0, 1.0)]
    assert times[0] == times[1]


def test_legacy_collector_time_is_a_table_condition_only() -> None:
    spec = load_model("deepseek-r1")
    steps = StepArrays(np.array([1, 1, 700]), np.array([100, 2000, 0]), np.array([1, 1, 1]))
    names = ("mla_table_legacy_fixed_s", "mla_table_legacy_token_s", "mla_table_legacy_token_head_s",
             "mla_table_legacy_resident_fraction")
    for chip in ("h200-sxm", "b300", "l40s"):  # fitted legacy tables; B200's kernel fields with the collector's terms
        hw = load_profile(chip)
        assert all(getattr(hw.efficiency, n) > 0 for n in names), chip  # fitted on the chip's legacy MLA tables
        times = [StepCostModel(spec, replace(hw, efficiency=replace(hw.efficiency, **dict.fromkeys(names, v))),
                               QuantConfig.from_user(), 8).time_s(steps) for v in (0.0, 1.0)]
        assert times[0] == times[1], chip


def test_legacy_chains_read_dram_for_the_part_of_their_working_set_beyond_the_l2() -> None:
    # DeepSeek-V3: the q latent's norm chain holds 1536 x 8 bytes a token (its fp32 copy and square), the kv latent's
    # 512 x 8, the rope chain 4.5 x 64 x 2 = 576 bytes a token and head; L40S's L2 is 96 MiB.
    from roofline.calibration.mla_fit import legacy_spill
    l2 = load_profile("l40s").l2_cache_bytes
    assert l2 == 96 * 2**20
    tokens, heads = np.array([4096.0, 16384.0, 65536.0]), np.array([1.0, 16.0, 4.0])
    per_token, per_head = legacy_spill(load_model("deepseek-v3"), tokens, heads, l2)
    # 4096 tokens: 48 MiB and 16 MiB, both in the L2; 16384: 192 MiB (half beyond) and 64 MiB; 65536: 768 and 256 MiB
    assert per_token.tolist() == pytest.approx([0.0, 1536 * 0.5 / 2048, (1536 * 0.875 + 512 * 0.625) / 2048])
    # 4096 x 1 x 576 bytes = 2.25 MiB; 16384 x 16 = 144 MiB (a third beyond); 65536 x 4 = 144 MiB
    assert per_head.tolist() == pytest.approx([0.0, 1 / 3, 1 / 3])
    # No L2 size (B300's file): all from DRAM, the collector's time linear in the tokens.
    assert [a.tolist() for a in legacy_spill(load_model("deepseek-v3"), tokens, heads, 0.0)] == [[1.0] * 3] * 2


def test_legacy_collector_time_with_its_l2_resident_fraction() -> None:
    # The collector's time of a module call (`mla_fit.predict`): its per-token chains cost their DRAM time on the
    # part beyond the L2 and `mla_table_legacy_resident_fraction` of it on the rest.
    from roofline.calibration.mla_fit import Components, predict
    hw = load_profile("l40s")
    tokens, heads, spill_t, spill_h = np.array([100.0, 20000.0]), np.array([2.0, 8.0]), np.array([0.0, 0.4]), \
        np.array([0.25, 1.0])
    zeros, no = np.zeros(2), np.zeros(2, bool)
    comp = Components(zeros, zeros, no, np.zeros((2, 4)), np.zeros((2, 4)), no, no, no, tokens, heads, zeros,
                      legacy=True, token_spill=spill_t, token_head_spill=spill_h)
    # r = 1: linear in the tokens whatever the L2 holds (the form before the L2 term), 40 us + t (80 ns + h 6 ns);
    # r = 0: 40 us + t (80 ns x 0 + 2 x 6 ns x 0.25) and 40 us + t (80 ns x 0.4 + 8 x 6 ns x 1).
    for r, expected in ((1.0, [49.2e-6, 2.6e-3]), (0.0, [40.3e-6, 1.64e-3])):
        e = replace(hw.efficiency, mla_table_legacy_fixed_s=40e-6, mla_table_legacy_token_s=80e-9,
                    mla_table_legacy_token_head_s=6e-9, mla_table_legacy_resident_fraction=r,
                    mla_table_fp8_block_linear_s=0.0)
        assert predict(replace(hw, efficiency=e), comp, np.arange(2)).tolist() == pytest.approx(expected, rel=1e-12)


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
