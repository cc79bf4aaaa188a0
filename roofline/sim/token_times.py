"""Every output token's time of a simulation, kept compact: the run's time stamps once, each request's tokens as runs
of them.

A simulated token is stamped with the time of the step that sampled it (its end, or when the API server's client
saw that step's tokens), so the tokens of a request are runs of consecutive entries of its replica's stamps, one
run from its first token to its last unless it was preempted. `TokenTimes` keeps the stamps (`times`, 8 bytes a
step) and per run its request row, first stamp and length, instead of every gap as a float and a row (12 bytes a
token: 5.3 GB for 1,000,000 ShareGPT requests). Every gap is still there exactly: the gap between the tokens at
stamps g-1 and g is `times[g] - times[g-1]`, the same subtraction of the same floats as `np.diff` of the request's
token times; between runs, the first stamp of the next minus the last of the one before.

The ITL statistics need only the pooled gaps as a multiset (`WeightedValues`: each distinct stamp difference with
its count), so the percentiles and the median are numpy's to the bit (`weighted_percentile` repeats numpy's
linear interpolation on the order statistics); a mean or a standard deviation is a sum over the multiset
(`math.fsum` of count x value), which may differ from numpy's pairwise sum of the gaps in a given order in its
last bits (BENCHMARKS.md, "Output identity").

    series = recorder.new_series()       # one per replica (or API-server process): series.add(t) per step
    recorder.finished(req, times, series)
    token_times.values(rows_mask)        # the pooled gaps of those requests, as a WeightedValues
    token_times.gap_s, token_times.request_index    # every gap, explicitly (InterTokenLatencies' arrays)
"""

from __future__ import annotations

import math
import threading
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from roofline.sim.native import COMPILED, _simcore

_all = np.logical_and.reduce  # (of a bool array; `np.array_equal` and `arr.all()` go through Python wrappers)


class TimeSeries:
    """Time stamps in the order they are added (nondecreasing in practice; `Segments.add` checks what it uses);
    `ascending`: so far every stamp is at least the one before (no NaN)."""

    __slots__ = ("values", "num", "ascending", "_last")  # (the compiled loop's `add` writes them at their offsets)

    def __init__(self) -> None:
        self.values = np.empty(1024)
        self.num = 0
        self.ascending = True
        self._last = -math.inf

    def add(self, time_s: float) -> None:
        if self.num == len(self.values):
            self._grow()
        self.values[self.num] = time_s
        self.num += 1
        if not time_s >= self._last:  # (a step back, or a NaN)
            self.ascending = False
        self._last = time_s

    def _grow(self) -> None:
        """Double `values` into a new array (views of the old one stay as they are; the compiled event loop calls it
        too, roofline/sim/_simcore.c)."""
        self.values = np.concatenate((self.values, np.empty(self.num)))


def _runs_from_end(values: np.ndarray, num: int, times: np.ndarray) -> list[tuple[int, int]] | None:
    """The runs (first stamp, length; last run first) of `times` among ascending stamps `values[:num]`, as
    `Segments.add`'s search makes them (`where`, each time's `searchsorted` index, cut where it does not step by 1),
    found from the end: each run is the longest tail of the times left equal to the stamps ending where the run
    after it starts (the last run: at the latest stamp), the end of the one before by one `searchsorted` of its last
    time. The same runs where every stamp of a run is above the stamp before it (then each is its time's
    `searchsorted` index): checked, as the times ascending strictly and each run's first stamp above the one before;
    None where a check fails (then searched)."""
    n = len(times)
    if n > 1 and not _all(times[1:] > times[:-1]):
        return None
    runs = []
    left, end = n, num  # times[:left] still to place, before stamp `end`
    while left:
        m = min(left, end)
        differ = (times[left - m:left] != values[end - m:end])[::-1]
        k = int(differ.argmax())
        if not differ.item(k):
            k = m
        if k == 0:
            return None
        start = end - k
        if start and not values.item(start - 1) < values.item(start):
            return None
        runs.append((start, k))
        left -= k
        if left:
            end = int(values[:start].searchsorted(times.item(left - 1), side="right"))
            if end == 0 or values.item(end - 1) != times.item(left - 1):
                return None
    return runs


class Segments:
    """The runs of every finished request, in finishing order: request row, series, first stamp, length."""

    def __init__(self) -> None:
        self.series: list[TimeSeries] = []
        self._index_of: dict[int, int] = {}  # id() of a series -> its index
        self.row = array("q")
        self.series_index = array("q")
        self.start = array("q")
        self.length = array("q")

    def _series_index(self, series: TimeSeries) -> int:
        index = self._index_of.get(id(series))
        if index is None:
            index = self._index_of[id(series)] = len(self.series)
            self.series.append(series)
        return index

    def add(self, row: int, times: np.ndarray | list[float], series: TimeSeries) -> None:
        """Request `row`'s token times (an array, or the scheduler's list of floats), each an entry of `series` (else
        kept as a series of their own)."""
        n = len(times)
        if n == 0:
            return
        if COMPILED:  # the shortcuts below in C (roofline/sim/_simcore.c), on a list without converting it
            runs = _simcore.runs(series.values, series.num, series.ascending, times)
            if runs is not None:
                index = self._index_of.get(id(series))
                if index is None:
                    index = self._series_index(series)
                for start, length in runs:
                    self._append(row, index, start, length)
                return
        if not isinstance(times, np.ndarray):
            times = np.fromiter(times, np.float64, n)
        num, values, t0 = series.num, series.values, times.item(0)
        # Where the request's tokens end at the latest stamp (its last token is the step's that just ended), that
        # run's start is the first stamp of t0 (what `searchsorted` gives) when the stamps ascend and the one before
        # it is lower; else its runs found from its last token back (a preempted request's: `_runs_from_end`, whose
        # one run is the one found by the search of t0 below, and whose several runs are where that run is not the
        # times); else searched.
        first = num - n
        if not (series.ascending and first >= 0 and values.item(first) == t0
                and (first == 0 or values.item(first - 1) < t0)):
            if series.ascending and first >= 0:
                runs = _runs_from_end(values, num, times)
                if runs is not None:
                    at = self._series_index(series)
                    for start, length in reversed(runs):
                        self._append(row, at, start, length)
                    return
            first = int(values[:num].searchsorted(t0))  # (the method: a third of np.searchsorted's cost)
        if first + n <= num:  # one run (the common case)? Equal bytes are equal floats (the stamps are the
            run = values[first:first + n]  # clock's, never NaN; both float64), a sixth of `==`'s bool array's cost
            if run.tobytes() == times.tobytes() or _all(run == times):
                index = self._index_of.get(id(series))  # (`_series_index` and `_append`, inline: once a request)
                if index is None:
                    index = self._series_index(series)
                self.row.append(row)
                self.series_index.append(index)
                self.start.append(first)
                self.length.append(n)
                return
        stamps = values[:num]
        where = stamps.searchsorted(times)
        if int(where.max()) < num and _all(stamps[where] == times):  # (max: stamps that step back search unsorted)
            breaks = np.flatnonzero(np.diff(where) != 1) + 1
            bounds = [0, *breaks.tolist(), n]
            index = self._series_index(series)
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                self._append(row, index, int(where[lo]), hi - lo)
            return
        own = TimeSeries()  # times not among the stamps (not expected): kept as they are
        own.values = np.array(times, dtype=np.float64)
        own.num = n
        self._append(row, self._series_index(own), 0, n)

    def _append(self, row: int, series: int, start: int, length: int) -> None:
        self.row.append(row)
        self.series_index.append(series)
        self.start.append(start)
        self.length.append(length)

    def token_times(self, num_requests: int) -> TokenTimes:
        """The runs over one array of every series' stamps."""
        offsets = np.zeros(len(self.series) + 1, dtype=np.int64)
        np.cumsum([s.num for s in self.series], out=offsets[1:])
        times = np.concatenate([s.values[:s.num] for s in self.series]) if self.series else np.zeros(0)
        series = np.frombuffer(self.series_index, dtype=np.int64) if len(self.series_index) else \
            np.zeros(0, dtype=np.int64)
        start = (np.frombuffer(self.start, dtype=np.int64) if len(self.start) else np.zeros(0, dtype=np.int64)) \
            + offsets[series]
        row = np.frombuffer(self.row, dtype=np.int64).copy() if len(self.row) else np.zeros(0, dtype=np.int64)
        length = np.frombuffer(self.length, dtype=np.int64).copy() if len(self.length) else \
            np.zeros(0, dtype=np.int64)
        return TokenTimes(times, row, start, length, num_requests)


# Up to this many gaps a mean or standard deviation is numpy's on the gaps themselves, in the order the explicit
# gaps had them (the same bits as before the gaps were kept as runs; ~38,000 ShareGPT requests); above, `math.fsum`
# on the multiset (bounded memory: the explicit gaps and their indices take ~40 bytes a gap while made).
EXACT_ORDER_MAX_GAPS = 1 << 24


@dataclass(frozen=True)
class WeightedValues:
    """A multiset of floats: `values` ascending, each `counts` times (counts > 0); `in_order`, where given, makes
    the values one by one in the order whose numpy sum the mean and standard deviation repeat (an array to read at
    once: `std` overwrites it, `consume_in_order`)."""

    values: np.ndarray
    counts: np.ndarray
    in_order: Callable[[], np.ndarray] | None = None
    # Runs a function that may overwrite its argument (`std_in_place`) on `in_order`'s array, handed over (the one
    # made, else a new one; `in_order` makes it again when next asked), and returns its result.
    consume_in_order: Callable[[Callable[[np.ndarray], np.float64]], np.float64] | None = None
    # Compiled (roofline/sim/_simcore.c `ordered_sum`): `sum_in_order(None)` is (numpy's sum of `in_order`'s array, its
    # length), `sum_in_order(mean)` (numpy's sum of its squared deviations from `mean`, its length), the same floats
    # without making the array; None: the array is made.
    sum_in_order: Callable[[float | None], tuple[float, int]] | None = None
    # The mean by `math.fsum`, once made (the standard deviation reads it too).
    _fsum_mean: list[float] = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def of(cls, values: np.ndarray, counts: np.ndarray, in_order: Callable[[], np.ndarray] | None = None,
           consume_in_order: Callable[[Callable[[np.ndarray], np.float64]], np.float64] | None = None,
           sum_in_order: Callable[[float | None], tuple[float, int]] | None = None) -> WeightedValues:
        keep = counts > 0
        values, counts = values[keep], counts[keep]
        order = np.argsort(values, kind="stable")
        return cls(values[order], counts[order].astype(np.int64), in_order, consume_in_order, sum_in_order)

    @classmethod
    def merged(cls, values: np.ndarray, counts: np.ndarray, more_values: np.ndarray, more_counts: np.ndarray,
               in_order: Callable[[], np.ndarray] | None = None,
               consume_in_order: Callable[[Callable[[np.ndarray], np.float64]], np.float64] | None = None,
               sum_in_order: Callable[[float | None], tuple[float, int]] | None = None) -> WeightedValues:
        """`of(concatenate((values, more_values)), concatenate((counts, more_counts)))` where `values` ascend (as a
        stable sort leaves them): the same arrays, `more_values` sorted stably and each put after the values equal to
        it (where the stable sort of the two joined puts it), without sorting `values` again."""
        keep = counts > 0
        values, counts = values[keep], counts[keep]
        keep = more_counts > 0
        more_values, more_counts = more_values[keep], more_counts[keep]
        order = np.argsort(more_values, kind="stable")
        more_values, more_counts = more_values[order], more_counts[order]
        at = np.searchsorted(values, more_values, side="right")
        return cls(np.insert(values, at, more_values), np.insert(counts, at, more_counts).astype(np.int64), in_order,
                   consume_in_order, sum_in_order)

    def __len__(self) -> int:
        return int(self.counts.sum())

    def ranked(self, ranks: np.ndarray) -> np.ndarray:
        """The values at these 0-based ranks of the sorted multiset."""
        return self.values[np.searchsorted(np.cumsum(self.counts), ranks, side="right")]

    def mean(self) -> float:
        """numpy's mean of the values in order where `in_order` is given, else count x value summed by
        `math.fsum` (which may differ from a numpy sum in its last bits)."""
        if self.sum_in_order is not None:  # (np.mean: the sum divided by the count)
            total, n = self.sum_in_order(None)
            return total / n if n else math.nan
        if self.in_order is not None:
            return float(np.mean(self.in_order()))
        if not self._fsum_mean:  # (a memoryview's items are the array's floats: no list of them, 1/3 the time)
            self._fsum_mean.append(math.fsum(memoryview(self.values * self.counts)) / len(self))
        return self._fsum_mean[0]

    def std(self) -> float:
        """The population standard deviation: numpy's `std` of the values in order where `in_order` is given, else
        the root of the mean squared deviation from the mean, by `math.fsum`."""
        if self.sum_in_order is not None:  # (`std_in_place`'s steps on the sums: the same floats)
            total, n = self.sum_in_order(None)
            if not n:
                return math.nan
            squares, _ = self.sum_in_order(total / n)
            return math.sqrt(squares / n)
        if self.consume_in_order is not None:
            return float(self.consume_in_order(std_in_place))
        if self.in_order is not None:
            return float(np.std(self.in_order()))
        deviation = self.values - self.mean()
        return math.sqrt(math.fsum(memoryview(deviation * deviation * self.counts)) / len(self))

    def median(self) -> float:
        """numpy's median: the middle value, or the mean of the two middle ones ((a + b) / 2)."""
        n = len(self)
        if n % 2:
            return float(self.ranked(np.array([n // 2]))[0])
        a, b = self.ranked(np.array([n // 2 - 1, n // 2]))
        return float((a + b) / 2.0)

    def percentile(self, q: float) -> float:
        return weighted_percentile(self, q)


def std_in_place(x: np.ndarray) -> np.float64:
    """`np.std(x)` of a float64 array, the same float, computed in `x` (overwritten with the squared deviations):
    numpy's `_var` (numpy/_core/_methods.py) step by step, its pairwise sums over the same contiguous array, without
    its temporary copy of `x`. That copy is the cost: ~35 MB for the 4.4 million ITL gaps of 10,000 ShareGPT
    requests, whose fresh pages cost ~40 ms, 8x numpy's arithmetic on them (BENCHMARKS.md "Simulator speed")."""
    n = len(x)
    if x.dtype != np.float64 or x.ndim != 1 or not n or not x.flags.c_contiguous or not x.flags.writeable:
        return np.float64(np.std(x))
    mean = np.add.reduce(x, keepdims=True)  # _var: umr_sum(arr, keepdims=True), then divided by the count in place
    np.true_divide(mean, np.intp(n), out=mean, casting="unsafe")
    np.subtract(x, mean, out=x)
    np.square(x, out=x)
    total = np.add.reduce(x)
    return np.float64(np.sqrt(total.dtype.type(total / np.intp(n))))


def weighted_percentile(values: WeightedValues, q: float) -> float:
    """`np.percentile(x, q)` (linear interpolation) of the multiset x: numpy's virtual index, its neighbouring order
    statistics and its `_lerp`, on float64 as numpy computes them (tests/test_token_times.py checks equality)."""
    n = len(values)
    virtual = np.float64(n - 1) * np.true_divide(np.float64(q), 100)
    if virtual >= n - 1:
        below = above = n - 1
        gamma = virtual - np.float64(-1)  # numpy's gamma there (its index is -1); a == b, so it is unused
    elif virtual < 0:
        below = above = 0
        gamma = virtual
    else:
        below = int(np.floor(virtual))
        above = below + 1
        gamma = virtual - np.float64(below)
    a, b = values.ranked(np.array([below, above]))
    diff = b - a
    if gamma >= 0.5:
        return float(b - diff * (1 - gamma))
    return float(a + diff * gamma)


def by_row(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`values[np.argsort(rows, kind="stable")]` without sorting every element: `rows` comes in runs of one row (a
    request's gaps), so the runs are sorted (stably, by their row) and their slices joined; the same elements in the
    same order (a stable sort keeps equal rows in their order, within a run and across runs of one row)."""
    if len(rows) == 0:
        return values[:0].copy()
    bounds = np.flatnonzero(rows[1:] != rows[:-1]) + 1
    starts = np.concatenate(([0], bounds)).tolist()
    ends = np.concatenate((bounds, [len(rows)])).tolist()
    order = np.argsort(rows[starts], kind="stable").tolist()
    return np.concatenate([values[starts[i]:ends[i]] for i in order])


# `TokenTimes.presort` sorts on another thread from this many stamps on (~50,000 ShareGPT requests); below, the sort
# is a few milliseconds, less than a thread's start and join are worth.
PRESORT_MIN_STAMPS = 1 << 17


def _sort_steps(times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The stable order of the stamps' differences `times[1:] - times[:-1]`, and the differences in it."""
    steps = times[1:] - times[:-1]
    order = np.argsort(steps, kind="stable")
    return order, steps[order]


class TokenTimes:
    """Every token time of a run: the stamps (`times`) and, per run of a request's tokens in finishing order, its
    request row, first stamp (an index into `times`) and length (module docstring)."""

    def __init__(self, times: np.ndarray, row: np.ndarray, start: np.ndarray, length: np.ndarray,
                 num_requests: int) -> None:
        self.times, self.row, self.start, self.length = times, row, start, length
        self.num_requests = num_requests
        self._explicit_gaps: tuple[np.ndarray, np.ndarray] | None = None  # kept up to EXACT_ORDER_MAX_GAPS
        # An array of gaps in some order that its user overwrote and gave back (`values`' `consume_in_order`), to
        # join the next order's slices into.
        self._spare: np.ndarray | None = None
        # All rows' gaps as a multiset without an order (above EXACT_ORDER_MAX_GAPS), made once (`values`).
        self._pooled: WeightedValues | None = None
        self._steps_sorted: tuple[np.ndarray, np.ndarray] | None = None  # (`_sorted_steps`)
        self._presorting: tuple[threading.Thread, list[tuple[np.ndarray, np.ndarray]]] | None = None  # (`presort`)

    @property
    def num_gaps(self) -> int:
        # (less one a request: its distinct rows counted by `bincount`, without `np.unique`'s sort)
        return int(self.length.sum()) - (int(np.count_nonzero(np.bincount(self.row))) if len(self.row) else 0)

    def values(self, rows: np.ndarray | None = None, by_request: bool = False) -> WeightedValues:
        """The gaps between consecutive tokens of each request (of the rows where `rows` is True), pooled; their
        order for a mean (`WeightedValues.in_order`, up to EXACT_ORDER_MAX_GAPS gaps): request after request in
        finishing order (`InterTokenLatencies.values`), or by request row (`by_request`:
        `InterTokenLatencies.values_by_request`)."""
        assert rows is None or not by_request, "by request: all of them"
        if rows is None and self._pooled is not None:  # (no order kept: one multiset, whichever order was asked)
            return self._pooled
        in_order = consume_in_order = sum_in_order = None
        if COMPILED and self.num_gaps <= EXACT_ORDER_MAX_GAPS:  # the mean's and std's sums in that order, no array
            sources, is_across, lo, hi, piece_rows, piece_lengths = self._piece_bounds(rows)
            if by_request:
                order = np.argsort(piece_rows, kind="stable")
                is_across, lo, hi = is_across[order], lo[order], hi[order]
            num_in_order = int(piece_lengths.sum())
            sums: dict[float | None, float] = {}  # (the plain sum: read by the mean and the std)

            def sum_in_order(mean: float | None) -> tuple[float, int]:
                total = sums.get(mean)
                if total is None:
                    total = sums[mean] = _simcore.ordered_sum(sources, is_across, lo, hi, mean)
                return total, num_in_order
        if self.num_gaps <= EXACT_ORDER_MAX_GAPS:
            # (made once: the mean and the standard deviation both read it), with the array it lies in
            made: list[tuple[np.ndarray, np.ndarray]] = []

            def make() -> tuple[np.ndarray, np.ndarray]:
                # `_explicit`'s gaps of the kept rows (`gaps[rows[index]]`), or all of them by request row (`by_row`):
                # its slices joined in that order, without the every-gap arrays (~50 MB at 10,000 ShareGPT requests).
                pieces, piece_rows, piece_lengths = self._pieces(rows)
                if by_request:  # (a stable sort of the slices by row: the stable sort of their gaps by row)
                    order = np.argsort(piece_rows, kind="stable").tolist()
                    pieces = [pieces[i] for i in order]
                if not pieces:
                    empty = np.zeros(0)
                    return empty, empty
                # Into the array a `consume_in_order` gave back, where it is long enough: its pages are mapped
                # already (a new array of the 4.4 million gaps of 10,000 ShareGPT requests, ~35 MB, costs ~30 ms
                # of page faults here, 6x the copy; ~80 ms for the third order of a README run, which had found
                # only the second's shorter part given back). That array is given back whole, not the part used.
                spare, n = self._spare, int(piece_lengths.sum())
                if spare is not None and len(spare) >= n:
                    self._spare = None
                    return np.concatenate(pieces, out=spare[:n]), spare
                made_now = np.concatenate(pieces)
                return made_now, made_now

            def in_order() -> np.ndarray:
                if not made:
                    made.append(make())
                return made[0][0]

            def consume_in_order(use: Callable[[np.ndarray], np.float64]) -> np.float64:
                x, whole = made.pop() if made else make()
                result = use(x)
                if self._spare is None or len(self._spare) < len(whole):
                    self._spare = whole  # (overwritten: to be made into again)
                return result
        row, start, length = self.row, self.start, self.length
        if rows is not None:
            keep = rows[row]
            row, start, length = row[keep], start[keep], length[keep]
        g = len(self.times)
        inside = np.cumsum(np.bincount(start + 1, minlength=g + 1) - np.bincount(start + length, minlength=g + 1))
        counts = inside[1:g]  # gaps from stamp k to k + 1: times[k + 1] - times[k]
        same = np.flatnonzero(row[1:] == row[:-1])  # a request's next run: the gap across a preemption
        across = self.times[start[same + 1]] - self.times[start[same] + length[same] - 1]
        order, sorted_steps = self._sorted_steps()
        pooled = WeightedValues.merged(sorted_steps, counts[order], across, np.ones(len(across), dtype=np.int64),
                                       in_order, consume_in_order, sum_in_order)
        if rows is None and in_order is None and sum_in_order is None:
            self._pooled = pooled  # (above EXACT_ORDER_MAX_GAPS: the next call of all rows, in either order, takes it)
        return pooled

    def presort(self) -> None:
        """Start `_sorted_steps`' sort on a thread of its own where the stamps are many (`PRESORT_MIN_STAMPS`):
        numpy's sort runs without the GIL, so it takes the second core while this thread builds the tables and the
        printout's other figures (at 1,000,000 ShareGPT requests 0.45 s of CPU off the run's wall time); the first
        multiset waits for it. The same sort, so the same arrays; made here again where the thread left none (it
        failed, or this is a process forked meanwhile, where it never ran)."""
        if self._steps_sorted is not None or self._presorting is not None or len(self.times) < PRESORT_MIN_STAMPS:
            return
        made: list[tuple[np.ndarray, np.ndarray]] = []

        def sort() -> None:
            try:
                made.append(_sort_steps(self.times))
            except BaseException:  # (made again, and raised there, by `_sorted_steps`)
                pass
        thread = threading.Thread(target=sort, name="roofline-presort", daemon=True)
        thread.start()
        self._presorting = thread, made

    def _sorted_steps(self) -> tuple[np.ndarray, np.ndarray]:
        """The order that sorts the stamps' differences `times[k + 1] - times[k]` (a stable argsort) and those
        differences in it; made once (or by `presort`), every multiset of the run (`values`) starts from it (at
        1,000,000 ShareGPT requests the sort of 2.6 million differences took 0.3 s a multiset)."""
        if self._steps_sorted is None and self._presorting is not None:
            thread, made = self._presorting
            self._presorting = None
            thread.join()
            if made:
                self._steps_sorted = made[0]
        if self._steps_sorted is None:
            self._steps_sorted = _sort_steps(self.times)
        return self._steps_sorted

    def tokens_at_stamps(self) -> np.ndarray:
        """How many tokens were stamped with each entry of `times`."""
        g = len(self.times)
        return np.cumsum(np.bincount(self.start, minlength=g + 1) - np.bincount(self.start + self.length,
                                                                              minlength=g + 1))[:g]

    @property
    def gap_s(self) -> np.ndarray:
        """Every gap, request after request in finishing order (`InterTokenLatencies.gap_s`)."""
        return self._explicit()[0]

    @property
    def request_index(self) -> np.ndarray:
        """The request row of each of `gap_s` (int32)."""
        return self._explicit()[1]

    def _pieces(self, keep: np.ndarray | None = None) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """`_explicit`'s gaps as slices in its order, each with its request row (int64) and length; only the rows
        where `keep` (a bool per request row; a request's runs are judged against the run before whatever is kept,
        as `_explicit`'s gaps then masked). The slices made by one comprehension from `_piece_bounds`."""
        (steps, across), is_across, lo, hi, piece_rows, piece_lengths = self._piece_bounds(keep)
        pieces = [across[a:b] if c else steps[a:b]
                  for c, a, b in zip(is_across.tolist(), lo.tolist(), hi.tolist())]
        return pieces, piece_rows, piece_lengths

    def _piece_bounds(self, keep: np.ndarray | None = None) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray,
                                                                     np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`_pieces`' slices as bounds: ((steps, across), per piece whether it is of `across` (else of `steps`), its
        first and end index there, its request row, its length). Per run, in finishing order: the gap across the
        hole from the request's run before (`times[start] - times[end of that run - 1]`, where the run before is the
        same request's), then the run's own gaps (`steps[start:start + length - 1]`, where it has two tokens or
        more); the pieces' places, rows and bounds found with numpy."""
        times, row, start, length = self.times, self.row, self.start, self.length
        steps = times[1:] - times[:-1]
        num_runs = len(row)
        kept = np.ones(num_runs, dtype=bool) if keep is None else np.asarray(keep, dtype=bool)[row]
        after = np.zeros(num_runs, dtype=bool)  # the request's next run: the run before is the same request's
        after[1:] = row[1:] == row[:-1]
        cross = np.flatnonzero(after & kept)
        inner = np.flatnonzero((length > 1) & kept)
        # The gaps across holes, each the one subtraction the explicit gaps make (elementwise: the same floats).
        across = times[start[cross]] - times[start[cross - 1] + length[cross - 1] - 1]
        # Each kept run's pieces: its gap across (if any) first, then its own gaps.
        count = np.zeros(num_runs, dtype=np.int64)
        count[cross] += 1
        count[inner] += 1
        first = np.cumsum(count) - count
        num_pieces = int(count.sum())
        is_across = np.zeros(num_pieces, dtype=bool)
        lo = np.empty(num_pieces, dtype=np.int64)
        piece_rows = np.empty(num_pieces, dtype=np.int64)
        at = first[cross]
        is_across[at] = True
        lo[at] = np.arange(len(cross))
        piece_rows[at] = row[cross]
        at = first[inner] + after[inner] * kept[inner]  # (after the gap across, where the run has one)
        lo[at] = start[inner]
        piece_rows[at] = row[inner]
        piece_lengths = np.ones(num_pieces, dtype=np.int64)
        piece_lengths[at] = length[inner] - 1
        hi = lo + piece_lengths
        return (steps, across), is_across, lo, hi, piece_rows, piece_lengths

    def _explicit(self) -> tuple[np.ndarray, np.ndarray]:
        """Every gap and its row: a run's gaps are a slice of the stamps' differences (`np.diff(times)[k]` is
        `times[k + 1] - times[k]`, the subtraction `np.diff` of the request's times makes), a gap across runs one
        subtraction; slices, not an index per token (~20x faster for the planner's runs of 2,500 requests)."""
        if self._explicit_gaps is not None:
            return self._explicit_gaps
        pieces, piece_rows, piece_lengths = self._pieces()
        gaps = np.concatenate(pieces) if pieces else np.zeros(0)
        rows = np.repeat(piece_rows.astype(np.int32), piece_lengths) if pieces else np.zeros(0, dtype=np.int32)
        if len(gaps) <= EXACT_ORDER_MAX_GAPS:  # (`gap_s` and `request_index` read them again)
            self._explicit_gaps = gaps, rows
        return gaps, rows
