"""Dense NVFP4 and block-scaled fp8 linear layers as vLLM runs them (issue 17): FlashInfer's untuned CuTe-DSL
tactic, the grid-stride fp4 quantization kernel, the per-chip fitted parameters."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from roofline.cost.hardware import load_profile
from roofline.cost.kernels.gemm import streaming_act_quant_time_s
from roofline.cost.kernels.gemm_block_scaled import (
    cutedsl_fp4_gemm_time_s,
    cutedsl_fp4_tactic,
    deepgemm_sm90_gemm_time_s,
    deepgemm_sm90_layout,
    deepgemm_sm100_gemm_time_s,
    deepgemm_sm100_layout,
    fp4_act_quant_time_s,
)
from roofline.cost.op_time import linear_time_s

NVFP4_WEIGHT_BYTES = 0.5 + 1.0 / 16


def test_small_batches_swap_a_and_b_and_take_a_narrow_tile() -> None:
    tile_m, tile_n, swap = cutedsl_fp4_tactic(np.array([1.0, 16.0, 64.0]), 4096.0, 4096.0, 148)
    assert list(swap) == [True, True, False]
    assert tile_n[0] == 8 and tile_n[1] == 16  # the kernel's columns are the tokens, bucketed to a power of two
    assert tile_m[2] >= 128


def test_tactic_is_chosen_for_the_power_of_two_bucket_of_m() -> None:
    same = cutedsl_fp4_tactic(np.array([33.0, 64.0]), 7168.0, 2048.0, 148)
    assert all(a[0] == a[1] for a in same)


def test_no_swap_when_n_is_not_a_multiple_of_8() -> None:
    assert not cutedsl_fp4_tactic(4.0, 4100.0, 4096.0, 148)[2]


def test_narrow_tiles_only_where_they_hold_every_column() -> None:
    m = np.array([2.0 ** i for i in range(13)])
    tile_m, tile_n, swap = cutedsl_fp4_tactic(m, 8192.0, 8192.0, 148)
    cols = np.where(swap, m, 8192.0)
    assert np.all((tile_n >= 64) | (tile_n >= cols))


def test_one_row_tile_costs_the_same_compute_for_65_to_128_tokens() -> None:
    hw = load_profile("b200")
    hw = replace(hw, efficiency=replace(hw.efficiency, gemm_fp8_memory_efficiency=1e3))  # compute-bound only
    t65, t128 = (cutedsl_fp4_gemm_time_s(hw, m, 16384.0, 16384.0, NVFP4_WEIGHT_BYTES, 2.0) for m in (65.0, 128.0))
    assert t65 == pytest.approx(t128, rel=1e-3)


def test_few_ctas_draw_a_share_of_the_bandwidth() -> None:
    hw = load_profile("b200")
    full = replace(hw, efficiency=replace(hw.efficiency, gemm_fp4_saturation_fraction=1e-3))
    # m = 1 swaps A and B: 1024 weight rows are 8 CTAs of 128 rows, far from the SMs that saturate DRAM.
    assert cutedsl_fp4_gemm_time_s(hw, 1.0, 1024.0, 65536.0, NVFP4_WEIGHT_BYTES, 2.0) > \
        1.5 * cutedsl_fp4_gemm_time_s(full, 1.0, 1024.0, 65536.0, NVFP4_WEIGHT_BYTES, 2.0)


def test_fp4_quantization_streams_its_bytes_without_row_waves() -> None:
    hw = load_profile("b200")
    fixed = hw.efficiency.kernel_fixed_s
    small, large = (fp4_act_quant_time_s(hw, m, 4096.0, 2.0) - fixed for m in (1024.0, 4096.0))
    assert large == pytest.approx(4.0 * small)
    assert small == pytest.approx(1024 * 4096 * (2.0 + NVFP4_WEIGHT_BYTES)
                                  / (hw.memory_bandwidth_bytes_per_s * hw.efficiency.memory_efficiency))


def test_nvfp4_linear_is_the_quantization_plus_the_gemm_on_scalars_and_arrays() -> None:
    hw = load_profile("b200")
    t = linear_time_s(hw, 256.0, 4096.0, 4096.0, "fp4", NVFP4_WEIGHT_BYTES, 2.0, "nvfp4")
    assert isinstance(t, float)
    assert t == pytest.approx(cutedsl_fp4_gemm_time_s(hw, 256.0, 4096.0, 4096.0, NVFP4_WEIGHT_BYTES, 2.0)
                              + fp4_act_quant_time_s(hw, 256.0, 4096.0, 2.0))
    many = linear_time_s(hw, np.array([256.0, 512.0]), 4096.0, 4096.0, "fp4", NVFP4_WEIGHT_BYTES, 2.0, "nvfp4")
    assert many[0] == pytest.approx(t)


@pytest.mark.parametrize("chip", ["b200", "gb200", "b300"])
def test_blackwell_chips_carry_their_fitted_nvfp4_parameters(chip: str) -> None:
    e = load_profile(chip).efficiency
    assert e.gemm_fp4_factor < 1.0 and e.gemm_fp4_fixed_s > 0.0 and e.gemm_fp4_saturation_fraction > 0.1


def test_block_fp8_is_one_streaming_quantization_pass_plus_the_gemm() -> None:
    hw = load_profile("b200")
    e = hw.efficiency
    group_bytes = 1.0 + 4.0 / 128  # fp8 value and its share of the fp32 scale of a 1x128 group
    quant = streaming_act_quant_time_s(hw, 8192.0, 8192.0, 2.0, group_bytes, e.act_group_quant_memory_efficiency)
    assert quant == pytest.approx(8192 * 8192 * (2.0 + group_bytes)
                                  / (hw.memory_bandwidth_bytes_per_s * e.act_group_quant_memory_efficiency)
                                  + e.kernel_fixed_s)
    gemm = deepgemm_sm100_gemm_time_s(hw, 8192.0, 64.0, 8192.0, 1.0, group_bytes, 2.0)
    assert linear_time_s(hw, 8192.0, 64.0, 8192.0, "fp8", 1.0, 2.0, "fp8-block") == pytest.approx(gemm + quant)


def test_block_fp8_tile_cost_is_deepgemms_not_cutlasss() -> None:
    hw = load_profile("h100-sxm")
    cheap = replace(hw, efficiency=replace(hw.efficiency, gemm_fp8_block_tile_fixed_k=0.0))
    per_tensor = replace(hw, efficiency=replace(hw.efficiency, gemm_fp8_block_tile_fixed_k=0.0,
                                                gemm_fp8_tile_fixed_k=1e5))
    args = (4096.0, 4096.0, 512.0, "fp8", 1.0, 2.0, "fp8-block")
    assert linear_time_s(cheap, *args) == pytest.approx(linear_time_s(per_tensor, *args))
    assert linear_time_s(hw, *args) > linear_time_s(cheap, *args)


def test_block_fp8_off_hopper_and_blackwell_is_the_per_tensor_path_scaled() -> None:
    hw = load_profile("l40s")
    slow = replace(hw, efficiency=replace(hw.efficiency, gemm_fp8_block_factor=0.5))
    args = (4096.0, 4096.0, 4096.0, "fp8", 1.0, 2.0)
    assert linear_time_s(hw, *args, "fp8-block") == pytest.approx(linear_time_s(hw, *args, "fp8"))
    assert linear_time_s(slow, *args, "fp8-block") > linear_time_s(slow, *args, "fp8")


@pytest.mark.parametrize("chip", ["h100-sxm", "h200-sxm", "b200", "gb200", "b300"])
def test_hopper_and_blackwell_chips_carry_their_fitted_block_fp8_parameters(chip: str) -> None:
    e = load_profile(chip).efficiency
    assert 0.5 < e.gemm_fp8_block_factor < 1.0 and 0.2 < e.act_group_quant_memory_efficiency < 0.6


def test_deepgemm_takes_16_and_32_row_blocks_only_for_that_few_tokens() -> None:
    m = np.array([8.0, 16.0, 32.0, 33.0, 64.0, 4096.0])
    block_m, block_n = deepgemm_sm90_layout(m, 7168.0, 16384.0, 132, 232448)
    assert np.all((block_m >= 64) | (m <= block_m))
    assert np.all(block_m[3:] >= 64)


def test_deepgemm_tiles_never_exceed_128_on_both_sides() -> None:
    m, n = np.meshgrid([1.0, 100.0, 1000.0, 10000.0], [64.0, 1000.0, 7168.0, 65536.0])
    block_m, block_n = deepgemm_sm90_layout(m.ravel(), n.ravel(), 4096.0, 132, 232448)
    assert not np.any((block_m > 128) & (block_n > 128))
    assert set(np.unique(block_n)) <= set(range(16, 129, 16)) | {144, 160, 192}


def test_hopper_block_fp8_runs_deepgemms_layout() -> None:
    hw = load_profile("h100-sxm")
    e = hw.efficiency
    group_bytes = 1.0 + 4.0 / 128
    quant = streaming_act_quant_time_s(hw, 160.0, 8192.0, 2.0, group_bytes, e.act_group_quant_memory_efficiency)
    assert linear_time_s(hw, 160.0, 8192.0, 8192.0, "fp8", 1.0, 2.0, "fp8-block") == pytest.approx(
        deepgemm_sm90_gemm_time_s(hw, 160.0, 8192.0, 8192.0, 1.0, group_bytes, 2.0) + quant)


# DeepGEMM's SM100 heuristic (csrc/jit_kernels/heuristics/sm100.hpp at 891d57b), picks worked out by hand from its
# comparator: one wave first, then a 2-CTA cluster, then fewer waves, a fuller last wave, the smaller tile.
@pytest.mark.parametrize("m, n, k, pick", [
    # decode: every candidate with one block along m; swap-AB's 56 weight blocks are even, so its 2-CTA cluster
    # wins, and of those the smallest tile (16 tokens)
    (1.0, 7168.0, 16384.0, (16, 128, True, 2)),
    # 4096^3: unswapped 128 x 192 / 224 take 5 waves, swapped 240 x 128 (18 x 32 = 576 tiles) 4
    (4096.0, 4096.0, 4096.0, (240, 128, True, 2)),
    # one wave of 128 CTAs either way (128 x 128 unswapped, or swapped): equal keys, the first candidate stays
    (256.0, 8192.0, 8192.0, (128, 128, False, 2)),
    # swapped 224-token tiles cover 32768 rows in 147 tiles, one wave; one weight block: no cluster
    (32768.0, 64.0, 4096.0, (224, 128, True, 1)),
    # unswapped 32 x 16: four tiles fill more SMs than the one swapped tile
    (1.0, 64.0, 51200.0, (32, 16, False, 1)),
    # swapped 32-token tiles: 4 x 32 = 128 CTAs in one wave (16 tokens would take two)
    (128.0, 4096.0, 4096.0, (32, 128, True, 2)),
])
def test_deepgemm_sm100_reproduces_hand_checked_picks(m: float, n: float, k: float, pick: tuple) -> None:
    block_m, block_n, swap_ab, cluster = deepgemm_sm100_layout(m, n, k, 148)
    assert (int(block_m), int(block_n), bool(swap_ab), int(cluster)) == pick


def test_deepgemm_sm100_picks_only_legal_layouts() -> None:
    m, n, k = (x.ravel() for x in np.meshgrid([1.0, 17.0, 33.0, 64.0, 65.0, 129.0, 1000.0, 4097.0, 32768.0],
                                              [64.0, 200.0, 1024.0, 7168.0, 51200.0], [128.0, 256.0, 512.0, 7168.0]))
    block_m, block_n, swap_ab, cluster = deepgemm_sm100_layout(m, n, k, 148)
    swapped, plain = swap_ab.astype(bool), ~swap_ab.astype(bool)
    # swap-AB: the weights are the UMMA's 128 rows; the tokens 16..240 columns (256 overflows tensor memory)
    assert np.all(block_n[swapped] == 128)
    assert set(np.unique(block_m[swapped])) <= set(range(16, 241, 16))
    # as given: block_m by m, block_n 16 or a multiple of 32 up to 224, above 128 only when k > 256
    assert np.all(block_m[plain] == np.where(m <= 32, 32, np.where(m <= 64, 64, 128))[plain])
    assert set(np.unique(block_n[plain])) <= {16, 32, 64, 96, 128, 160, 192, 224}
    assert not np.any(plain & (block_n > 128) & (k <= 256))
    umma_n = np.where(swapped, block_m, block_n)
    scale_columns = (np.ceil(block_m / 128) * 128 + np.ceil(block_n / 128) * 128) / 32
    assert np.all(2 * umma_n + scale_columns <= 512)
    # multicast pairs two CTAs along m (as given) or n (swapped): the blocks along that side must pair up
    paired = np.where(swapped, np.ceil(n / block_n), np.ceil(m / block_m))
    assert np.all(paired[cluster == 2] % 2 == 0)


def test_blackwell_block_fp8_runs_deepgemms_sm100_layout_and_hopper_keeps_sm90s() -> None:
    group_bytes = 1.0 + 4.0 / 128
    for chip, gemm in (("b200", deepgemm_sm100_gemm_time_s), ("h100-sxm", deepgemm_sm90_gemm_time_s)):
        hw = load_profile(chip)
        quant = streaming_act_quant_time_s(hw, 3000.0, 7168.0, 2.0, group_bytes,
                                           hw.efficiency.act_group_quant_memory_efficiency)
        assert linear_time_s(hw, 3000.0, 4096.0, 7168.0, "fp8", 1.0, 2.0, "fp8-block") == pytest.approx(
            gemm(hw, 3000.0, 4096.0, 7168.0, 1.0, group_bytes, 2.0) + quant)



def _small_calls(hw, fixed_s: float, saturation: float):  # noqa: ANN001, ANN202 - a HardwareProfile
    return replace(hw, efficiency=replace(hw.efficiency, gemm_fp8_block_fixed_s=fixed_s,
                                          gemm_fp8_block_saturation_fraction=saturation))


def test_deepgemm_small_call_terms_have_no_effect_at_their_defaults() -> None:
    hw = _small_calls(load_profile("b200"), 0.0, 1e-3)
    e = hw.efficiency
    # m = 4 swaps A and B: 4096 weight rows are 32 tiles of 128 on 148 SMs, one wave of pure streaming
    block_m, block_n, swap, _ = deepgemm_sm100_layout(4.0, 4096.0, 3072.0, hw.num_compute_units)
    assert swap and block_n == 128.0
    moved = 4 * 3072 * (1.0 + 4.0 / 128) + 4096 * 3072 * 1.0 + 4 * 4096 * 2.0
    stream = moved / (hw.memory_bandwidth_bytes_per_s * e.gemm_fp8_memory_efficiency)
    t = deepgemm_sm100_gemm_time_s(hw, 4.0, 4096.0, 3072.0, 1.0, 1.0 + 4.0 / 128, 2.0)
    # the weight stream at the full rate, the little math mostly hidden under it (the soft overlap adds ~1.5 %)
    assert stream + e.kernel_fixed_s < t < 1.03 * (stream + e.kernel_fixed_s)


def test_deepgemm_small_call_adds_its_fixed_time_and_few_tiles_draw_a_bandwidth_share() -> None:
    base = _small_calls(load_profile("b200"), 0.0, 1e-3)
    args = (4.0, 4096.0, 3072.0, 1.0, 1.0 + 4.0 / 128, 2.0)
    t0 = deepgemm_sm100_gemm_time_s(base, *args)
    assert deepgemm_sm100_gemm_time_s(_small_calls(base, 2e-6, 1e-3), *args) == pytest.approx(t0 + 2e-6)
    # 32 tiles against a saturating 0.5 x 148 = 74: the weights stream at 32 / 74 of the rate
    slow = deepgemm_sm100_gemm_time_s(_small_calls(base, 0.0, 0.5), *args)
    assert slow - base.efficiency.kernel_fixed_s == pytest.approx((t0 - base.efficiency.kernel_fixed_s) * 74 / 32,
                                                                  rel=5e-2)
    # a call over enough tiles is unchanged
    big = (4096.0, 4096.0, 3072.0, 1.0, 1.0 + 4.0 / 128, 2.0)
    assert deepgemm_sm100_gemm_time_s(_small_calls(base, 0.0, 0.5), *big) == deepgemm_sm100_gemm_time_s(base, *big)


@pytest.mark.parametrize("chip", ["b200", "gb200", "b300"])
def test_blackwell_chips_carry_fitted_deepgemm_small_call_terms_and_hopper_none(chip: str) -> None:
    e = load_profile(chip).efficiency
    assert 1e-6 < e.gemm_fp8_block_fixed_s < 4e-6 and 0.1 < e.gemm_fp8_block_saturation_fraction < 0.5
    h = load_profile("h200-sxm").efficiency
    assert h.gemm_fp8_block_fixed_s == 0.0 and h.gemm_fp8_block_saturation_fraction == 1e-3
