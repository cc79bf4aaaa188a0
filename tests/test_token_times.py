"""A simulation's token times kept as runs of step stamps (`roofline.sim.token_times`): the gaps, their pooled
statistics and the peaks are those of the explicit gaps."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from roofline.sim import native, token_times
from roofline.sim.token_times import Segments, TimeSeries, WeightedValues, weighted_percentile


def _series(times: np.ndarray) -> TimeSeries:
    series = TimeSeries()
    for t in times.tolist():
        series.add(t)
    return series


def _runs() -> tuple[Segments, list[np.ndarray], list[int]]:
    """Requests on two replicas: one run each, runs split by a preemption, equal stamps (a step whose client saw
    its tokens when it saw the step before's) and times that are no stamps."""
    rng = np.random.default_rng(3)
    stamps = [np.cumsum(rng.uniform(0.01, 0.05, 400)), np.cumsum(rng.uniform(0.01, 0.05, 300))]
    stamps[0][50:53] = stamps[0][49]  # repeated stamps
    series = [_series(s) for s in stamps]
    segments = Segments()
    times_of: list[np.ndarray] = []
    rows = []
    for row in range(60):
        replica = row % 2
        s = stamps[replica]
        first = int(rng.integers(0, len(s) - 40))
        n = int(rng.integers(1, 40))
        picks = np.arange(first, first + n)
        if row % 7 == 3 and n > 5:  # preempted: a hole in its steps
            picks = np.concatenate((picks[:3], picks[3:] + 20))
        times = s[picks]
        if row == 11:
            times = times + 1e-3  # not stamps
        segments.add(row, times, series[replica])
        times_of.append(times)
        rows.append(row)
    return segments, times_of, rows


def test_gaps_are_the_explicit_gaps_in_finishing_order() -> None:
    segments, times_of, rows = _runs()
    tt = segments.token_times(len(rows))
    expected = np.concatenate([np.diff(t) for t in times_of])
    expected_rows = np.concatenate([np.full(len(t) - 1, r) for t, r in zip(times_of, rows)])
    assert np.array_equal(tt.gap_s, expected)  # bit for bit: the same subtractions
    assert np.array_equal(tt.request_index, expected_rows)
    assert tt.request_index.dtype == np.int32
    assert tt.num_gaps == len(expected)
    assert len(segments.row) > len(rows)  # the preempted requests have more than one run


@pytest.mark.parametrize("order", ["in-order", "in-order-compiled", "multiset"])
def test_pooled_values_and_statistics_equal_numpys_on_the_gaps(order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Up to EXACT_ORDER_MAX_GAPS gaps the mean and std are numpy's on the gaps in finishing order, bit for bit (made
    # as an array, or compiled: summed in that order without it); above, math.fsum's on the multiset (to 1e-14 here).
    exact_order = order != "multiset"
    if not exact_order:
        monkeypatch.setattr(token_times, "EXACT_ORDER_MAX_GAPS", 0)
    elif order == "in-order-compiled" and not native.BUILT:
        pytest.skip("roofline.sim._simcore is not built")
    monkeypatch.setattr(token_times, "COMPILED", order == "in-order-compiled")
    segments, times_of, rows = _runs()
    tt = segments.token_times(len(rows))
    for mask in (None, np.arange(len(rows)) % 3 != 0):
        chosen = [t for r, t in zip(rows, times_of) if mask is None or mask[r]]
        gaps = np.concatenate([np.diff(t) for t in chosen])
        pooled = tt.values(mask)
        assert len(pooled) == len(gaps)
        assert np.array_equal(np.repeat(pooled.values, pooled.counts), np.sort(gaps))
        for q in (0, 1, 25, 50, 90, 99, 99.9, 100, 37.3):
            assert pooled.percentile(q) == np.percentile(gaps, q)
        assert pooled.median() == np.median(gaps)
        if exact_order:
            assert pooled.mean() == np.mean(gaps) and pooled.std() == np.std(gaps)
        else:
            assert pooled.mean() == pytest.approx(np.mean(gaps), rel=1e-14)
            assert pooled.std() == pytest.approx(np.std(gaps), rel=1e-12)
        assert (pooled.sum_in_order is not None) == (order == "in-order-compiled")
    by_request = tt.values(by_request=True)
    in_rows = np.concatenate([np.diff(t) for _, t in sorted(zip(rows, times_of), key=lambda p: p[0])])
    if exact_order:
        assert by_request.mean() == np.mean(in_rows) and by_request.std() == np.std(in_rows)


def test_the_multiset_of_all_gaps_is_made_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Above EXACT_ORDER_MAX_GAPS no order is kept: all rows' gaps, asked in finishing order or by request, are one
    # multiset made once, its fsum mean made once (the std reads it); the same figures as a multiset made afresh.
    monkeypatch.setattr(token_times, "EXACT_ORDER_MAX_GAPS", 0)
    segments, _, rows = _runs()
    tt = segments.token_times(len(rows))
    pooled = tt.values()
    assert tt.values(by_request=True) is pooled and tt.values() is pooled
    assert tt.values(np.arange(len(rows)) % 3 != 0) is not pooled
    fresh = WeightedValues.of(pooled.values.copy(), pooled.counts.copy())
    calls: list[int] = []
    fsum = math.fsum

    def counted(values: Any) -> float:
        calls.append(1)
        return fsum(values)
    monkeypatch.setattr(token_times.math, "fsum", counted)
    assert pooled.mean() == fresh.mean() and pooled.std() == fresh.std()
    assert pooled.mean() == fresh.mean()
    assert len(calls) == 4  # each: the mean once, the std's squared deviations once


@pytest.mark.skipif(not native.BUILT, reason="roofline.sim._simcore is not built")
def test_ordered_sum_is_numpys_sum_of_the_pieces_joined() -> None:
    # `_simcore.ordered_sum`: numpy's add.reduce of the pieces joined (its pairwise sum: lengths around its blocks
    # of 8 and 128 and its splits), and of their squared deviations from numpy's mean (np.std's sum), bit for bit;
    # pieces of both sources, empty ones, one long one.
    rng = np.random.default_rng(11)
    lengths = [0, 1, 7, 8, 9, 127, 128, 129, 136, 255, 256, 1000, 8192, 8193, 100_003]
    for trial in range(160):
        steps = rng.uniform(0, 1, int(rng.integers(1, 4000))) * 10.0 ** int(rng.integers(-6, 3))
        across = rng.uniform(0, 1, int(rng.integers(1, 60)))
        if trial < len(lengths):  # one piece of a given length
            steps = rng.uniform(0, 1, max(lengths[trial], 1))
            which, lo, hi = np.zeros(1, dtype=bool), np.zeros(1, np.int64), np.full(1, lengths[trial], np.int64)
        else:
            k = int(rng.integers(0, 80))
            which = rng.uniform(0, 1, k) < 0.3
            lo, hi = np.zeros(k, np.int64), np.zeros(k, np.int64)
            for i in range(k):
                size = len(across) if which[i] else len(steps)
                lo[i] = rng.integers(0, size + 1)
                hi[i] = rng.integers(lo[i], min(size, lo[i] + int(rng.integers(0, 500))) + 1)
        joined = np.concatenate([np.zeros(0)] + [(across if w else steps)[a:b] for w, a, b in zip(which, lo, hi)])
        total = native._simcore.ordered_sum((steps, across), which, lo, hi, None)
        assert total == np.add.reduce(joined)
        if len(joined):
            mean = total / len(joined)
            assert mean == np.mean(joined)
            squares = native._simcore.ordered_sum((steps, across), which, lo, hi, mean)
            assert math.sqrt(squares / len(joined)) == np.std(joined)
    with pytest.raises(ValueError):  # a piece out of its source
        native._simcore.ordered_sum((np.zeros(3), np.zeros(1)), np.zeros(1, dtype=bool), np.zeros(1, np.int64),
                                    np.full(1, 4, np.int64), None)


def test_by_row_is_the_stable_argsort_order() -> None:
    # Runs of one row in any order (a row's runs apart, as well as together): the elements a stable argsort of the
    # rows gives, in its order; and the by-request pooled values read it once for the mean and the std.
    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 50, 3000):
        rows = np.repeat(rng.integers(0, max(n // 8, 1), max(n // 4, 1)).astype(np.int32),
                         rng.integers(1, 8, max(n // 4, 1)))[:n]
        values = rng.uniform(0, 1, len(rows))
        expected = values[np.argsort(rows, kind="stable")]
        got = token_times.by_row(values, rows)
        assert got.dtype == expected.dtype and np.array_equal(got, expected)
    segments, times_of, rows_of = _runs()
    tt = segments.token_times(len(rows_of))
    pooled = tt.values(by_request=True)
    assert pooled.in_order is not None and pooled.in_order() is pooled.in_order()
    # The orders the mean and std read are the explicit gaps' (by row: their stable sort; masked: their mask), made
    # from the runs without the explicit arrays; preempted requests' runs (gaps across them) included.
    gaps, index = tt.gap_s, tt.request_index
    assert np.array_equal(pooled.in_order(), gaps[np.argsort(index, kind="stable")])
    for mask in (None, np.arange(len(rows_of)) % 3 != 0, np.zeros(len(rows_of), dtype=bool)):
        order = tt.values(mask).in_order
        assert order is not None
        got = order()
        expected = gaps if mask is None else gaps[mask[index]]
        assert got.dtype == expected.dtype and np.array_equal(got, expected)


def test_std_in_place_is_numpys_std() -> None:
    # The same float as np.std (numpy's pairwise sums over the same array), computed in the array given.
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 8, 9, 127, 128, 129, 1000, 100_003):
        x = rng.exponential(0.05, n) + rng.integers(0, 2, n)
        expected = np.std(x)
        got = token_times.std_in_place(x.copy())
        assert got == expected and isinstance(got, np.float64), n
    readonly = rng.uniform(0, 1, 10)
    readonly.flags.writeable = False
    assert token_times.std_in_place(readonly) == np.std(readonly)  # (not overwritten: numpy's own)
    assert readonly.flags.writeable is False


def test_pooled_std_consumes_its_order_and_the_next_order_reuses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The by-request values' std overwrites their order (made again if asked), the same std as numpy's of it; the
    # next order made is joined into that array, and holds the gaps it should (the Python code's: compiled, the
    # sums are taken without the array, `test_ordered_sum_is_numpys_sum_of_the_pieces_joined`).
    monkeypatch.setattr(token_times, "COMPILED", False)
    segments, times_of, rows_of = _runs()
    tt = segments.token_times(len(rows_of))
    gaps, index = tt.gap_s, tt.request_index
    by_row = gaps[np.argsort(index, kind="stable")]
    pooled = tt.values(by_request=True)
    assert pooled.mean() == np.mean(by_row)
    assert pooled.std() == np.std(by_row)
    assert pooled.in_order is not None and np.array_equal(pooled.in_order(), by_row)  # made again
    assert pooled.std() == np.std(by_row)
    spare = tt._spare
    assert spare is not None
    mask = np.arange(len(rows_of)) % 2 == 0
    masked = tt.values(mask)
    assert masked.in_order is not None
    order = masked.in_order()
    assert np.array_equal(order, gaps[mask[index]]) and np.shares_memory(order, spare)
    assert masked.std() == np.std(gaps[mask[index]])
    # A longer order after that shorter one: the whole array given back, not the shorter one's part of it.
    assert tt._spare is spare
    everything = tt.values()
    assert everything.in_order is not None
    order = everything.in_order()
    assert len(order) > len(gaps[mask[index]]) and np.shares_memory(order, spare)
    assert np.array_equal(order, gaps) and everything.mean() == np.mean(gaps) and everything.std() == np.std(gaps)


def test_weighted_percentile_is_numpys_on_random_multisets() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 7, 100, 1001):
        values = np.round(rng.exponential(1.0, n), int(rng.integers(1, 4)))  # ties
        pooled = WeightedValues.of(values, np.ones(n, dtype=np.int64))
        for q in rng.uniform(0, 100, 20).tolist() + [0.0, 50.0, 99.0, 100.0]:
            assert weighted_percentile(pooled, q) == np.percentile(values, q), (n, q)
        assert pooled.median() == np.median(values)


def test_tokens_at_stamps_count_every_token_once() -> None:
    segments, times_of, rows = _runs()
    tt = segments.token_times(len(rows))
    counts = tt.tokens_at_stamps()
    assert counts.sum() == sum(len(t) for t in times_of)
    stamped = np.repeat(tt.times, counts)
    assert np.array_equal(np.sort(stamped), np.sort(np.concatenate(times_of)))


def _searched_runs(row: int, stamps: np.ndarray, times: np.ndarray) -> list[tuple[int, str, int, int]]:
    """A request's runs as `Segments.add`'s search found them before its shortcuts: (row, "stamps", first, n) for
    each run of `times` that are consecutive stamps (cut where the `searchsorted` index does not step by 1), else
    the whole request as its own times, (row, "own", 0, n)."""
    n = len(times)
    first = int(np.searchsorted(stamps, times[0]))
    where = np.searchsorted(stamps, times)
    if np.array_equal(stamps[first:first + n], times):
        return [(row, "stamps", first, n)]
    if where.max() < len(stamps) and np.array_equal(stamps[where], times):
        bounds = [0, *(np.flatnonzero(np.diff(where) != 1) + 1).tolist(), n]
        return [(row, "stamps", int(where[lo]), hi - lo) for lo, hi in zip(bounds[:-1], bounds[1:])]
    return [(row, "own", 0, n)]


# `Segments.add` in Python (the reference), and with its shortcuts compiled (roofline/sim/_simcore.c) on the times as
# an array and as the scheduler's list of floats.
ADD_MODES = ["python", "compiled-array", "compiled-list"]


def _add_mode(mode: str, monkeypatch: pytest.MonkeyPatch) -> Callable[[np.ndarray], Any]:
    if mode == "python":
        monkeypatch.setattr(token_times, "COMPILED", False)
    elif not native.BUILT:
        pytest.skip("roofline.sim._simcore is not built")
    else:
        monkeypatch.setattr(token_times, "COMPILED", True)
    return (lambda times: times.tolist()) if mode == "compiled-list" else (lambda times: times)


@pytest.mark.parametrize("mode", ADD_MODES)
@pytest.mark.parametrize("step_back", [False, True], ids=["ascending", "a-step-back"])
def test_a_run_ending_at_the_latest_stamp_starts_where_searchsorted_says(step_back: bool, mode: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests finishing as the simulator records them (their last token at the stamp just added): each run starts
    at the stamp `searchsorted` gives for its first token, with repeated stamps at a run's start (the first of them,
    not the run's own), one-token requests, and stamps that step back (which `Segments.add` then searches)."""
    given = _add_mode(mode, monkeypatch)
    rng = np.random.default_rng(11)
    series = TimeSeries()
    segments = Segments()
    expected = []
    t = 0.0
    for step in range(600):
        t += float(rng.choice([0.0, 0.02, 0.03]))  # (0.0: a stamp repeated)
        if step_back and step == 300:
            t -= 0.5
        series.add(t)
        if step % 3 == 0:
            n = int(rng.integers(1, min(step, 40) + 2))
            times = series.values[series.num - n:series.num].copy()
            segments.add(step, given(times), series)
            expected += _searched_runs(step, series.values[:series.num], times)
    assert series.ascending is not step_back
    kinds = ["stamps" if s is series else "own" for s in segments.series]
    assert [(row, kinds[i], first, n) for row, i, first, n in zip(segments.row, segments.series_index,
                                                                    segments.start, segments.length)] == expected
    assert any(n == 1 for _, _, _, n in expected) and any(first < 500 for _, _, first, _ in expected)


@pytest.mark.parametrize("mode", ADD_MODES)
@pytest.mark.parametrize("step_back", [False, True])
def test_a_preempted_requests_runs_are_those_its_search_gives(step_back: bool, mode: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests with holes in their tokens (preempted), finishing at the stamp just added: their runs are those of
    each token's `searchsorted` index (cut where it does not step by 1), with stamps repeated inside and at the
    start of runs, a token time that is no stamp, times that repeat, and stamps that step back."""
    given = _add_mode(mode, monkeypatch)
    rng = np.random.default_rng(12)
    series = TimeSeries()
    segments = Segments()
    expected = []
    t = 0.0
    for step in range(900):
        t += float(rng.choice([0.0] + [0.02] * 10 + [0.03] * 10))  # (0.0: a stamp repeated)
        if step_back and step == 450:
            t -= 0.5
        series.add(t)
        if step % 3 == 0 and step > 4:
            stamps = series.values[:series.num]
            picked = np.flatnonzero(rng.random(series.num) < float(rng.choice([0.05, 0.5, 0.9])))
            picked = np.union1d(picked[picked > series.num - 60], [series.num - 1])  # (ends at the latest stamp)
            times = stamps[picked].copy()
            if step % 27 == 0:
                times[len(times) // 2] += 0.001  # no stamp
            if step % 33 == 0 and len(times) > 2:
                times[1] = times[0]  # a time repeated
            segments.add(step, given(times), series)
            expected += _searched_runs(step, stamps, times)
    assert series.ascending is not step_back
    kinds = ["stamps" if s is series else "own" for s in segments.series]
    got = [(row, kinds[i], first, n) for row, i, first, n in zip(segments.row, segments.series_index,
                                                                segments.start, segments.length)]
    assert got == expected
    runs_of = {}
    for row, kind, _, _ in expected:
        runs_of[row] = runs_of.get(row, 0) + (kind == "stamps")
    assert sum(r > 1 for r in runs_of.values()) > 50 and any(kind == "own" for _, kind, _, _ in expected)


def test_merged_is_the_stable_sort_of_the_two_joined() -> None:
    # `WeightedValues.merged`: the arrays `of` makes of the two joined (ties: the first's values before the second's,
    # each in its order), zero counts left out, without sorting the first again.
    rng = np.random.default_rng(5)
    for n, m in ((0, 0), (0, 5), (7, 0), (300, 40), (2000, 600)):
        values = rng.integers(0, 50, n) / 8.0  # (many ties, within and across the two)
        counts = rng.integers(0, 4, n)
        more_values, more_counts = rng.integers(0, 50, m) / 8.0, rng.integers(0, 3, m)
        order = np.argsort(values, kind="stable")
        # (counts made unique per position, so that an order of ties that differs shows)
        counts = np.where(counts > 0, np.arange(n) + 1, 0)
        more_counts = np.where(more_counts > 0, n + np.arange(m) + 1, 0)
        merged = WeightedValues.merged(values[order], counts[order], more_values, more_counts)
        made = WeightedValues.of(np.concatenate((values, more_values)), np.concatenate((counts, more_counts)))
        assert np.array_equal(merged.values, made.values) and np.array_equal(merged.counts, made.counts)
        assert merged.counts.dtype == np.int64


def test_the_multisets_of_a_run_sort_its_stamps_differences_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every multiset (all rows, some rows) starts from one stable sort of the stamps' differences; the same arrays as
    # the sort of its own gaps joined.
    monkeypatch.setattr(token_times, "EXACT_ORDER_MAX_GAPS", 0)
    segments, times_of, rows = _runs()
    tt = segments.token_times(len(rows))
    sorts: list[int] = []
    argsort = np.argsort

    def counted(a: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        if len(a) == len(tt.times) - 1:
            sorts.append(1)
        return argsort(a, *args, **kwargs)
    monkeypatch.setattr(token_times.np, "argsort", counted)
    for mask in (None, np.arange(len(rows)) % 3 != 0, np.arange(len(rows)) % 2 == 0):
        pooled = tt.values(mask)
        chosen = [t for r, t in zip(rows, times_of) if mask is None or mask[r]]
        gaps = np.concatenate([np.diff(t) for t in chosen])
        assert np.array_equal(np.repeat(pooled.values, pooled.counts), np.sort(gaps))
    assert len(sorts) == 1


def test_the_fsum_mean_and_std_read_the_products_as_floats() -> None:
    rng = np.random.default_rng(9)
    values = np.sort(rng.lognormal(-3, 2, 5000))
    counts = rng.integers(1, 1000, 5000)
    pooled = WeightedValues(values, counts)
    assert pooled.mean() == math.fsum((values * counts).tolist()) / counts.sum()
    deviation = values - pooled.mean()
    assert pooled.std() == math.sqrt(math.fsum((deviation * deviation * counts).tolist()) / counts.sum())


def test_presort_sorts_on_another_thread_the_same_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # `presort` (from PRESORT_MIN_STAMPS stamps on) sorts the stamps' differences on a thread of its own; the first
    # multiset takes that sort: the same arrays as a run's without it. Below the threshold no thread starts.
    monkeypatch.setattr(token_times, "EXACT_ORDER_MAX_GAPS", 0)
    segments, _, rows = _runs()
    plain = segments.token_times(len(rows))
    tt = segments.token_times(len(rows))
    tt.presort()
    assert tt._presorting is None  # (few stamps: sorted where asked)
    monkeypatch.setattr(token_times, "PRESORT_MIN_STAMPS", 2)
    threads: list[str] = []
    sort_steps = token_times._sort_steps

    def on_a_thread(times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        threads.append(threading.current_thread().name)
        return sort_steps(times)
    monkeypatch.setattr(token_times, "_sort_steps", on_a_thread)
    tt.presort()
    assert tt._presorting is not None
    thread = tt._presorting[0]
    for mask in (None, np.arange(len(rows)) % 3 != 0):
        made, expected = tt.values(mask), plain.values(mask)
        assert np.array_equal(made.values, expected.values) and np.array_equal(made.counts, expected.counts)
    assert threads[0] == "roofline-presort" and not thread.is_alive() and tt._presorting is None
    assert len(threads) == 2  # (and the plain run's own, on this thread)


def test_a_failed_presort_sorts_again_where_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(token_times, "EXACT_ORDER_MAX_GAPS", 0)
    monkeypatch.setattr(token_times, "PRESORT_MIN_STAMPS", 2)
    segments, _, rows = _runs()
    expected = segments.token_times(len(rows)).values()
    tt = segments.token_times(len(rows))
    sort_steps = token_times._sort_steps

    def fails_on_its_thread(times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if threading.current_thread().name == "roofline-presort":
            raise MemoryError
        return sort_steps(times)
    monkeypatch.setattr(token_times, "_sort_steps", fails_on_its_thread)
    tt.presort()
    made = tt.values()
    assert np.array_equal(made.values, expected.values) and np.array_equal(made.counts, expected.counts)
