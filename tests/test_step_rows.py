"""The step rows' growing columns (roofline/sim/recorder.py `StepRows`)."""
import cProfile

import numpy as np

from roofline.sim.recorder import STEP_COLUMNS, StepRows


def _rows(n: int) -> list[tuple[float, ...]]:
    return [tuple(float(i * len(STEP_COLUMNS) + j) for j in range(len(STEP_COLUMNS))) for i in range(n)]


def test_the_columns_grow_under_a_profiler_and_keep_every_row() -> None:
    # cProfile holds the bound `resize` while it runs: a reference ndarray.resize's check would count (it raised
    # "cannot resize an array that references or is referenced by another array" under `python -m cProfile`).
    rows = StepRows()
    expected = _rows(StepRows.CHUNK * 9)
    profile = cProfile.Profile()
    profile.enable()
    try:
        for row in expected:
            rows.append(row)
            if len(rows.rows) == StepRows.CHUNK:
                rows.flush()
        table = rows.table()
    finally:
        profile.disable()
    assert len(table["start_s"]) == len(expected)
    for j, name in enumerate(STEP_COLUMNS):
        np.testing.assert_array_equal(np.asarray(table[name], dtype=np.float64), [row[j] for row in expected])


def test_a_table_handed_over_is_not_moved_by_later_rows() -> None:
    rows = StepRows()
    first = _rows(StepRows.CHUNK * 5)
    for row in first:
        rows.append(row)
    table = rows.table()
    before = np.asarray(table["end_s"]).copy()
    for row in _rows(StepRows.CHUNK * 9):  # the new columns grow past their first capacity
        rows.append(row)
    rows.flush()
    np.testing.assert_array_equal(np.asarray(table["end_s"]), before)
    assert len(rows) == StepRows.CHUNK * 9
