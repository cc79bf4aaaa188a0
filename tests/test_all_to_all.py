"""Expert parallelism's dispatch / combine kernels (`roofline.cost.kernels.all_to_all`), their fit on
aiconfigurator-core's tables (`roofline.calibration.all_to_all_fit`) and `roofline calibrate --op-tables --all-to-all`'s
refusals."""

from __future__ import annotations

from dataclasses import replace
from math import comb

import numpy as np
import pytest
from test_bad_input import run_cli

from roofline.calibration.all_to_all_fit import BACKEND_LABELS, NCCL_OPS, load_a2a_tables, predict
from roofline.cost.hardware import load_profile
from roofline.cost.kernels.all_to_all import a2a_bytes, a2a_time_s, distinct_ranks, nccl_collective_time_s


def test_distinct_ranks_is_the_hypergeometric_expectation() -> None:
    assert distinct_ranks(8, 256, 8) == pytest.approx(8 * (1 - comb(224, 8) / comb(256, 8)), rel=1e-12)
    assert distinct_ranks(1, 256, 8) == pytest.approx(1.0)
    assert distinct_ranks(8, 8, 8) == pytest.approx(8.0)  # one expert per rank: every top-8 reaches 8 ranks
    assert np.allclose(distinct_ranks(np.array([6, 8]), 256, 8),
                       [8 * (1 - comb(224, k) / comb(256, k)) for k in (6, 8)], rtol=1e-12)


def test_bytes_per_backend() -> None:
    # 100 tokens of hidden 4096 over 8 ranks, 16-bit: the low-latency kernels send every top-k copy, the
    # high-throughput ones one per distinct rank, all-gather every token to every other rank.
    per_copy = 100 * 4096 * 2 * 7 / 8
    assert a2a_bytes("deepep_low_latency", 100, 4096, 8, 256, 8) == pytest.approx(8 * per_copy)
    assert a2a_bytes("deepep_high_throughput", 100, 4096, 8, 256, 8) == pytest.approx(
        distinct_ranks(8, 256, 8) * per_copy)
    assert a2a_bytes("allgather_reducescatter", 100, 4096, 8, 256, 8) == pytest.approx(8 * per_copy)


def test_time_is_the_fixed_term_plus_copies_plus_bytes_and_zero_without_ep() -> None:
    hw = load_profile("h200-sxm")
    e = replace(hw.efficiency, deepep_ll_dispatch_bus_efficiency=0.5, deepep_ll_dispatch_fixed_s=40e-6,
                deepep_ll_dispatch_copy_s=1e-9)
    hw = replace(hw, efficiency=e)
    link = hw.interconnect.bandwidth_bytes_per_s_per_direction  # type: ignore[union-attr]
    copies = 64 * 8 * 7 / 8
    expected = 40e-6 + copies * 1e-9 + copies * 7168 * 2 / (link * 0.5)
    assert a2a_time_s(hw, "deepep_low_latency", "dispatch", 64, 7168, 8, 256, 8) == pytest.approx(expected, rel=1e-12)
    assert a2a_time_s(hw, "deepep_low_latency", "dispatch", 64, 7168, 8, 256, 1) == 0.0
    t = a2a_time_s(hw, "allgather_reducescatter", "combine", np.array([1.0, 10.0, 100.0]), 7168, 8, 256,
                   np.array([1.0, 8.0, 8.0]))
    assert t[0] == 0.0 and 0 < t[1] < t[2]


def test_all_gather_half_of_the_backend_equals_nccl_all_gather_of_the_gathered_buffer() -> None:
    hw = load_profile("h200-sxm")
    gathered = 512 * 8 * 7168 * 2.0
    assert a2a_time_s(hw, "allgather_reducescatter", "dispatch", 512, 7168, 8, 256, 8) == pytest.approx(
        nccl_collective_time_s(hw, "all_gather", gathered, 8), rel=1e-12)


@pytest.mark.parametrize("chip, system", [("h200-sxm", "h200_sxm"), ("b200", "b200_sxm")])
def test_shipped_values_predict_the_held_out_rows_within_15_percent_per_backend(chip: str, system: str) -> None:
    # Measured data (aiconfigurator-core's tables), the rows the fit never saw; issue 40's target: median <= 15 %.
    d = load_a2a_tables(system)
    d = d[d.held_out].reset_index(drop=True)
    err = np.abs(predict(load_profile(chip), d) / d.measured_s.to_numpy() - 1.0)
    backend = d.op.where(~d.op.isin(NCCL_OPS), "allgather_reducescatter").to_numpy()
    for label in BACKEND_LABELS:
        assert (backend == label).sum() >= 20, label
        assert np.median(err[backend == label]) <= 0.15, (chip, label, np.median(err[backend == label]))


def _run(argv: list[str]) -> tuple[int, str]:
    rc, _, err = run_cli(argv)
    return rc, err.strip()


@pytest.mark.parametrize("argv, field", [
    (["calibrate", "--op-tables", "h200_sxm", "--all-to-all"], "--all-to-all"),
    (["calibrate", "--trace", "x", "--all-to-all"], "--all-to-all"),
    (["calibrate", "--op-tables", "--all-to-all", "--hardware", "h200-sxm"], "--hardware"),
    (["calibrate", "--op-tables", "--all-to-all", "--family", "hopper"], "--family"),
])
def test_calibrate_all_to_all_refuses_in_one_line(argv: list[str], field: str) -> None:
    rc, message = _run(argv)
    assert rc == 2 and len(message.splitlines()) == 1 and field in message, message
