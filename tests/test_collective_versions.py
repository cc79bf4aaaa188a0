"""The deployment's vLLM version picks the collective parameters fitted on that version's all-reduce table
(roofline.cost.collective_versions)."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from roofline.calibration.op_tables import load_all_reduce_versions
from roofline.cost.collective_versions import for_vllm_version, parse_versions
from roofline.cost.hardware import load_profile
from roofline.cost.kernels.collectives import all_reduce_time_s
from roofline.cost.profile_yaml import read_profile_dict
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.registry import data_dir
from roofline.sim.deployment import make_deployment


def _table_s(system: str, version: str, elements: int, gpus: int) -> float:
    frame = load_all_reduce_versions(system)[version]
    row = frame[(frame.num_devices == gpus) & (frame.message_bytes == 2 * elements) & (frame.dtype == "bf16")]
    return float(row.measured_s.iloc[0])


def test_versions_pick_the_newest_table_at_or_below_else_the_oldest() -> None:
    hw = load_profile("h100-sxm")
    sets = (("0.14.0", (("nccl_step_s", 1e-6),)), ("0.19.0", (("nccl_step_s", 2e-6),)),
            ("0.24.0", (("nccl_step_s", 3e-6),)))
    hw = replace(hw, all_reduce_by_vllm_version=sets)
    picked = {v: for_vllm_version(hw, v).efficiency.nccl_step_s
              for v in ("0.11.0", "0.12.0", "0.14.0", "0.18.1", "0.19.0", "0.23.0rc1", "0.24.0", "0.32.0")}
    assert picked == {"0.11.0": 1e-6, "0.12.0": 1e-6, "0.14.0": 1e-6, "0.18.1": 1e-6, "0.19.0": 2e-6,
                      "0.23.0rc1": 2e-6, "0.24.0": 3e-6, "0.32.0": 3e-6}
    assert for_vllm_version(hw, None) is hw


def test_a_0_12_deployment_prices_tp8_large_all_reduces_at_the_0_14_tables_level() -> None:
    """H200: above vLLM's 256 KiB custom limit at TP 8 the 0.14.0 table is 1.3-1.7x the 0.24.0 one at 8-16 MiB; a
    0.12 deployment's all-reduce follows the 0.14.0 table there (within 10 %), a 0.24 deployment's the 0.24.0
    table."""
    hw = load_profile("h200-sxm")
    assert {v for v, _ in hw.all_reduce_by_vllm_version} >= {"0.14.0", "0.24.0"}
    old, new = for_vllm_version(hw, "0.12.0"), for_vllm_version(hw, "0.24.0")
    for elements in (1 << 22, 1 << 23):
        t14, t24 = _table_s("h200_sxm", "0.14.0", elements, 8), _table_s("h200_sxm", "0.24.0", elements, 8)
        p_old, p_new = all_reduce_time_s(old, 2.0 * elements, 8), all_reduce_time_s(new, 2.0 * elements, 8)
        assert p_old == pytest.approx(t14, rel=0.1)
        assert p_new == pytest.approx(t24, rel=0.1)
        assert p_old > 1.2 * p_new


def test_a_versions_own_set_is_used_only_where_it_predicts_its_held_out_rows_no_worse() -> None:
    """The family file as `roofline calibrate --op-tables --family hopper --write` wrote it: each version's set is its
    own fit where that is no worse (median and p90) on the version's held-out rows than the newest table's
    parameters, else the newest table's values; a chip whose every version has the newest's values has no
    section (H100: the 0.14.0 fit overshoots its 512 KiB-4 MiB TP 8 rows, so 0.12 deployments keep today's)."""
    family = read_profile_dict(data_dir("hardware_profiles") / "families" / "hopper.yaml")
    held_out = family["fit"]["all_reduce_by_vllm_version_held_out"]
    for pid, versions in held_out.items():
        hw = load_profile(pid)
        sets = dict(hw.all_reduce_by_vllm_version)
        for version, e in versions.items():
            no_worse = (e["after"]["median_pct"] <= e["before"]["median_pct"]
                        and e["after"]["p90_pct"] <= e["before"]["p90_pct"])
            newest = version == max(versions, key=lambda v: tuple(int(x) for x in v.split(".")))
            assert e["used"] == (newest or no_worse)
            own = for_vllm_version(hw, version).efficiency
            if not e["used"] or not sets:
                assert own == hw.efficiency
    assert load_profile("h100-sxm").all_reduce_by_vllm_version == ()
    assert held_out["h100-sxm"]["0.14.0"]["used"] is False


@pytest.mark.parametrize("pid", ["h100-sxm", "h200-sxm"])
def test_a_0_24_or_unversioned_deployment_keeps_the_profiles_parameters(pid: str) -> None:
    hw = load_profile(pid)
    assert for_vllm_version(hw, "0.24.0").efficiency == hw.efficiency
    assert for_vllm_version(hw, "0.32.0").efficiency == hw.efficiency


def test_make_deployment_uses_its_vllm_versions_collectives() -> None:
    hw = load_profile("h200-sxm")
    engine = EngineArgs(tensor_parallel_size=8)
    d12 = make_deployment("llama-3.1-8b", hw, engine, vllm_version="0.12.0")
    d24 = make_deployment("llama-3.1-8b", hw, engine, vllm_version="0.24.0")
    assert d12.hw.efficiency == for_vllm_version(hw, "0.12.0").efficiency != hw.efficiency
    assert d24.hw.efficiency == hw.efficiency
    with pytest.raises(UserError, match=r"vLLM version: expected a release such as 0.11.0, got 'latest'"):
        make_deployment("llama-3.1-8b", hw, engine, vllm_version="latest")


def test_a_bad_version_or_field_in_the_family_files_section_is_one_clear_error() -> None:
    with pytest.raises(UserError, match=r"vLLM version: expected a release such as 0.11.0, got 'zero'"):
        parse_versions({"zero": {"nccl_step_us": 1.0}}, {}, "f.yaml: per_chip.x")
    with pytest.raises(UserError, match=r"all_reduce_by_vllm_version\.0\.14\.0"):
        parse_versions({"0.14.0": {"nccl_steps_us": 1.0}}, {}, "f.yaml: per_chip.x")
    with pytest.raises(UserError, match=r"must be a mapping of vLLM version"):
        parse_versions(["0.14.0"], {}, "f.yaml: per_chip.x")


def test_every_all_reduce_table_version_is_read_oldest_first() -> None:
    versions = load_all_reduce_versions("h200_sxm")
    assert list(versions) == ["0.14.0", "0.18.0", "0.19.0", "0.24.0"]
    assert all(isinstance(f, pd.DataFrame) and len(f) and set(f.kernel) == {"vllm_graph"} for f in versions.values())
