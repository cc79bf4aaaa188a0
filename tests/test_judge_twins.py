"""The judge's data-parallel rows whose measurement is a one-node row's (`roofline.judge.twins`)."""

from __future__ import annotations

import pytest

pytest.importorskip("aiconfigurator_core")

from roofline.judge.twins import EXACT, find_twins, main  # noqa: E402


@pytest.mark.slow  # resolves every row of the file (~9 s CPU)
def test_kimi_two_node_rows_repeat_the_one_node_measurements() -> None:
    twins, alone = find_twins()
    kimi = [t for t in twins if "Kimi-K2.5" in t.row.model_path and t.data_parallel_size == 4]
    # Every Kimi-K2.5 B200 row labelled TP 4 x DP 4 (two nodes) carries the TTFT and TPOT of the TP 4 one-node row
    # of its lengths and concurrency, to the 5 significant digits that row records (its rounding: < 5e-4).
    assert len(kimi) == 30 and all(t.distance < 5e-4 for t in kimi)
    assert all(t.twin.tp_size == 4 and t.twin.attention_dp_size == 1 for t in kimi)
    assert sum(t.distance <= EXACT for t in twins) == 38 and len(twins) + len(alone) == 111


def test_bad_within_is_one_line() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--within", "2"])
    assert exc.value.code == 2
