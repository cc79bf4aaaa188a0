"""The judge's data-parallel rows whose measurement is a one-node row's (`roofline.judge.twins`)."""

from __future__ import annotations

import pytest

pytest.importorskip("aiconfigurator_core")

from roofline.judge.twins import EXACT, find_twins, main  # noqa: E402


@pytest.mark.slow  # resolves every row of the file (~9 s CPU)
def test_no_data_parallel_row_repeats_a_one_node_measurement_once_launched_as_its_recipe_ran_it() -> None:
    twins, alone = find_twins()
    # The Kimi-K2.5 B200 rows labelled TP 4 x DP 4 (two nodes) carry the TTFT and TPOT of the TP 4 one-node rows to
    # the digits recorded: their script (kimik2.5_fp4_b200.sh) launched TP 4 on one node, and so are they simulated
    # (`roofline.judge.harness.launch_layout`), as every InferenceX row labelled attention_dp T of a `{ tp: T, ep: T }`
    # sweep entry. What remains data-parallel: aiconfigurator's Qwen3-235B rows and the MiniMax-M2.5 fp4 rows of the
    # scripts' DP_ATTENTION branch, none a copy of a one-node row.
    assert not [t for t in twins if "Kimi-K2.5" in t.row.model_path]
    assert sum(t.distance <= EXACT for t in twins) == 0 and len(twins) + len(alone) == 27


def test_bad_within_is_one_line() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--within", "2"])
    assert exc.value.code == 2
