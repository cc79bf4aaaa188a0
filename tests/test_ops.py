"""Closed-form FLOP and byte counts of the per-operator records, TP sharding, quantization table."""

import numpy as np
import pytest

from engine.core.model_spec import ModelSpec
from roofline.cost.kernels import kernel_family
from roofline.cost.kernels.attention import (
    FA2_SPLITKV_KERNELS,
    FA3_KERNELS,
    TRTLLM_GEN_KERNELS,
    attention_q_tile_tokens,
    decode_work_heads,
)
from roofline.cost.ops import (
    BatchStats,
    attention_pairs,
    decode_attention_shape,
    kv_bytes_per_token_per_rank,
    prefill_attention_shape,
    step_ops,
    weight_bytes_per_rank,
)
from roofline.cost.quant import QuantConfig
from roofline.errors import UserError

BF16 = QuantConfig.from_user(model_dtype="bfloat16")


def tiny(**overrides) -> ModelSpec:
    base = dict(name="t", architecture="LlamaForCausalLM", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
                head_dim=16, intermediate_size=128, vocab_size=512)
    return ModelSpec(**{**base, **overrides})


def ops_by_name(spec, quant, tp, q, c, e):
    stats = BatchStats.from_arrays(np.array(q), np.array(c), np.array(e, bool), spec.sliding_window)
    return {op.name: op for op in step_ops(spec, quant, tp, stats)}


def test_gemm_flops_and_bytes_closed_form():
    ops = ops_by_name(tiny(), BF16, 1, [3], [0], [True])
    qkv = ops["qkv_proj"]  # m=3, n=(4+2*2)*16=128, k=64, 2 layers
    assert qkv.flops == 2 * 2 * 3 * 128 * 64
    assert qkv.weight_bytes == 2 * 128 * 64 * 2
    assert qkv.act_bytes == 2 * (3 * 64 + 3 * 128) * 2
    assert ops["gate_up_proj"].flops == 2 * 2 * 3 * 256 * 64
    assert ops["down_proj"].flops == 2 * 2 * 3 * 64 * 128
    assert ops["lm_head"].flops == 2 * 1 * 512 * 64


def test_prefill_attention_causal_with_context():
    ops = ops_by_name(tiny(), BF16, 1, [4], [6], [True])
    att = ops["attention_prefill"]
    pairs = 7 + 8 + 9 + 10  # query i sees 6 + i + 1 keys
    assert att.flops == 2 * 4 * 4 * 16 * pairs  # layers * (2 MACs * 2 FLOPs) * heads * head_dim * pairs
    kv_token = 2 * 2 * 16 * 2  # K and V, 2 KV heads, head_dim 16, bf16
    assert att.kv_read_bytes == 2 * 10 * kv_token
    assert att.kv_write_bytes == 2 * 4 * kv_token


def test_decode_attention_reads_whole_context():
    ops = ops_by_name(tiny(), BF16, 1, [1, 1], [9, 99], [True, True])
    att = ops["attention_decode"]
    assert att.flops == 2 * 4 * 4 * 16 * (10 + 100)
    assert att.kv_read_bytes == 2 * (10 + 100) * 2 * 2 * 16 * 2
    assert "attention_prefill" not in ops


def test_prefill_work_tiles_pack_query_heads():
    # FA3 varlen packs the 4 query heads of a KV head into a 128-row tile: 32 tokens per tile
    assert attention_q_tile_tokens(128, 32, 8) == 32
    assert attention_q_tile_tokens(64, 8, 8) == 192  # head_dim <= 96: 192-row tiles, no grouping
    s = BatchStats.from_arrays(np.array([100, 1, 40]), np.array([10, 7, 0]), np.ones(3, bool), q_tile=32)
    assert (s.num_prefill_seqs, s.prefill_tokens, s.num_decode_seqs) == (2, 140, 1)
    assert s.prefill_q_tiles == 4 + 2
    assert s.prefill_pad_pairs == (128 - 100) * 110 + (64 - 40) * 40  # padding tokens x keys of the last row
    assert s.prefill_pairs == sum(10 + i + 1 for i in range(100)) + 40 * 41 / 2
    assert s.prefill_kv_tokens == 110 + 40 and s.decode_pairs == 8


def test_decode_only_stats_match_general_path():
    c = np.array([5, 0, 17])
    fast = BatchStats.from_arrays(np.ones(3, int), c, np.ones(3, bool))
    assert (fast.num_tokens, fast.num_decode_seqs, fast.decode_pairs, fast.num_prefill_seqs) == (3, 3, 25.0, 0)
    windowed = BatchStats.from_arrays(np.array([1, 0, 1]), c, np.array([True, False, True]), sliding_window=4)
    assert (windowed.num_decode_seqs, windowed.decode_pairs, windowed.num_emits) == (2, 4 + 4, 2)


def test_sliding_window_limits_pairs():
    assert attention_pairs(np.array([4.0]), np.array([6.0]), 8.0)[0] == 7 + 8 + 8 + 8
    assert attention_pairs(np.array([5.0]), np.array([0.0]), np.inf)[0] == 15
    ops = ops_by_name(tiny(sliding_window=4), BF16, 1, [1], [100], [True])
    assert ops["attention_decode"].kv_read_bytes == 2 * 4 * 2 * 2 * 16 * 2


def test_lm_head_only_for_emitting_sequences():
    ops = ops_by_name(tiny(), BF16, 1, [8, 1], [0, 5], [False, True])
    assert ops["lm_head"].shape[0] == 1
    assert "lm_head" not in ops_by_name(tiny(), BF16, 1, [8], [0], [False])


def test_tensor_parallel_shards_and_replicates_kv_heads():
    one = ops_by_name(tiny(), BF16, 1, [4], [0], [True])
    four = ops_by_name(tiny(), BF16, 4, [4], [0], [True])
    assert four["gate_up_proj"].flops * 4 == one["gate_up_proj"].flops
    assert four["o_proj"].weight_bytes * 4 == one["o_proj"].weight_bytes
    # 2 KV heads over 4 ranks: one KV head per rank (replicated), one query head per rank
    assert four["qkv_proj"].shape[1] == (1 + 2 * 1) * 16
    assert kv_bytes_per_token_per_rank(tiny(), BF16, 4) == kv_bytes_per_token_per_rank(tiny(), BF16, 2)
    assert four["attn_all_reduce"].comm_bytes == 2 * 4 * 64 * 2
    assert "attn_all_reduce" not in one
    assert four["lm_head"].shape[1] == 512 / 4


def test_tp_must_divide_heads():
    with pytest.raises(UserError, match="tensor-parallel-size"):
        ops_by_name(tiny(), BF16, 3, [1], [0], [True])


def test_qk_norm_only_for_qwen3():
    assert "qk_norm" in ops_by_name(tiny(architecture="Qwen3ForCausalLM", qk_norm=True), BF16, 1, [2], [0], [True])
    assert "qk_norm" not in ops_by_name(tiny(), BF16, 1, [2], [0], [True])


def test_moe_touches_expected_experts():
    spec = tiny(architecture="MixtralForCausalLM", num_experts=8, num_experts_per_tok=2)
    ops = ops_by_name(spec, BF16, 1, [1], [0], [True])
    moe = ops["moe_experts"]
    assert moe.weight_bytes == pytest.approx(2 * 2 * 3 * 64 * 128 * 2)  # one token touches 2 experts
    big = ops_by_name(spec, BF16, 1, [1000], [0], [True])["moe_experts"]
    assert big.weight_bytes == pytest.approx(2 * 8 * 3 * 64 * 128 * 2)
    touched = 8 * (1 - (1 - 2 / 8) ** 3)
    three = ops_by_name(spec, BF16, 1, [3], [0], [True])["moe_experts"]
    assert three.weight_bytes == pytest.approx(2 * touched * 3 * 64 * 128 * 2)
    assert "router" in ops and "gate_up_proj" not in ops


def test_weight_and_kv_bytes_per_rank():
    spec = tiny()
    params = spec.num_params()
    assert weight_bytes_per_rank(spec, BF16, 1) == params * 2
    assert kv_bytes_per_token_per_rank(spec, BF16, 1) == 2 * 2 * 2 * 16 * 2


def test_quant_table():
    fp8 = QuantConfig.from_user(quantization="fp8", kv_cache_dtype="fp8", model_dtype="bfloat16")
    assert (fp8.weight_bytes_per_param, fp8.gemm_dtype, fp8.kv_bytes_per_element) == (1.0, "fp8", 1.0)
    awq = QuantConfig.from_user(quantization="awq", model_dtype="float16")
    assert awq.gemm_dtype == "fp16" and 0.5 < awq.weight_bytes_per_param < 0.55
    assert QuantConfig.from_user(model_dtype="float32").act_dtype == "bf16"
    assert QuantConfig.from_user(dtype="float32").act_bytes == 4.0
    with pytest.raises(UserError, match="--quantization"):
        QuantConfig.from_user(quantization="nf4")
    with pytest.raises(UserError, match="--kv-cache-dtype"):
        QuantConfig.from_user(kv_cache_dtype="int4")
    fp8_ops = ops_by_name(tiny(), fp8, 1, [2], [0], [True])
    assert fp8_ops["qkv_proj"].weight_bytes == 2 * 128 * 64 * 1.0
    assert fp8_ops["lm_head"].weight_bytes == 512 * 64 * 2.0  # LM head stays in the activation dtype


def test_family_picks_its_attention_kernels():
    assert kernel_family("blackwell").attention is TRTLLM_GEN_KERNELS
    assert kernel_family("ada").attention is FA2_SPLITKV_KERNELS
    assert kernel_family("hopper").attention is FA3_KERNELS and kernel_family(None).attention is FA3_KERNELS


def test_trtllm_context_tiles_are_256_rows_of_one_query_head():
    # TRT-LLM's context kernel does not pack GQA heads: a tile is 256 tokens of one query head, whatever the grouping
    assert attention_q_tile_tokens(128, 32, 8, TRTLLM_GEN_KERNELS) == 256
    assert attention_q_tile_tokens(64, 8, 8, TRTLLM_GEN_KERNELS) == 256
    # 300 tokens, 32 query heads, 8 KV heads: 2 token tiles per head -> 64 work tiles (FA3 packs: 8 x 2 = 16)
    args = (32, 8, 128, 256, 300, 300 * 301 / 2, 2, 0.0, 300, 1.0, 1.0)
    assert prefill_attention_shape(*args, TRTLLM_GEN_KERNELS)[2] == 64
    assert prefill_attention_shape(*args)[2] == 16


def test_trtllm_decode_units_group_up_to_32_query_heads():
    assert decode_work_heads(32, 8, TRTLLM_GEN_KERNELS) == 8  # 4 query heads per KV head: one unit per KV head
    assert decode_work_heads(64, 1, TRTLLM_GEN_KERNELS) == 2  # 64 heads per KV head: two CTAs of 32
    assert decode_work_heads(64, 1) == 1  # FA3: one unit per (sequence, KV head)
    assert decode_attention_shape(64, 1, 128, 5, 50, 1.0, 1.0, TRTLLM_GEN_KERNELS)[2] == 10


def test_fa2_splitkv_prefill_tiles_are_64_rows_of_one_query_head():
    # FA2's split-KV kernel (paged KV on Ada): kBlockM = 64 for every head_dim, no GQA packing in prefill
    assert attention_q_tile_tokens(128, 32, 8, FA2_SPLITKV_KERNELS) == 64
    assert attention_q_tile_tokens(256, 8, 1, FA2_SPLITKV_KERNELS) == 64
    # 300 tokens, 32 query heads, 8 KV heads: 5 token tiles per head -> 160 work tiles
    args = (32, 8, 128, 64, 300, 300 * 301 / 2, 5, 0.0, 300, 1.0, 1.0)
    assert prefill_attention_shape(*args, FA2_SPLITKV_KERNELS)[2] == 160


def test_fa2_decode_units_are_one_per_kv_head_up_to_64_query_heads():
    # seqlenq_ngroups_swapped: a KV head's query heads fill the 64 rows of one CTA
    assert decode_work_heads(32, 8, FA2_SPLITKV_KERNELS) == 8
    assert decode_work_heads(64, 1, FA2_SPLITKV_KERNELS) == 1
    assert decode_work_heads(128, 1, FA2_SPLITKV_KERNELS) == 2
    assert FA2_SPLITKV_KERNELS.decode_waves and not FA2_SPLITKV_KERNELS.packs_gqa
