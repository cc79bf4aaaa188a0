"""The sequences of many steps, recorded cheaply as the steps run and turned into arrays once at the end.

    records = StepRecords()
    records.add(plan)                                  # after each schedule: a few references, no arrays
    seqs = records.sequences()                         # at the end: every step's arrays in one pass
    query, context, emits = seqs.concatenated          # all steps' sequences, step after step
    query_i, context_i, emits_i = seqs[i]              # step i's (views): `plan.seq_arrays()`'s values, int32

A step's record is its plan's bulk rows as the fast path's columns left them (`ColumnRows`: the rows' offsets and
update count, their request ids as indices into the period's list) and the sequences added after them (lists,
with their request ids). A decode step of 150 requests is thus kept as two array references and an int instead
of three 150-row arrays and 150 strings; the arrays are built for all steps at once by a few numpy passes.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np

from engine.core.step_plan import StepPlan

_REQUEST_ID = operator.attrgetter("request_id")

# (the bulk rows' off, seq, num_updates, period (the index of their ids list in `StepRecords._periods`) and
# prefill rows (None without), then the request ids after them, their query lengths, context lengths and emits).
# Flat and without the `ColumnRows`, its ids list and its (mostly empty) prefill list, so that a decode step's
# record holds no container: the garbage collector untracks it, where every container kept alive is traversed
# until it is old (sharegpt 10,000 requests: the collections took 0.13-0.145 s with `ColumnRows` kept, 0.05 s
# without recording; BENCHMARKS.md "`--out`, issue 20 item 1, fifth pass").
_Record = tuple[np.ndarray | None, np.ndarray | None, int, int, list[tuple[int, int, int, int]] | None,
                tuple[str, ...], Sequence[int], Sequence[int], Sequence[bool]]
_Bulk = tuple[np.ndarray | None, np.ndarray | None, int, int, list[tuple[int, int, int, int]] | None]
_NO_BULK: _Bulk = (None, None, 1, -1, None)


class StepRecords:
    """The sequences of every step added, in order (see the module docstring)."""

    def __init__(self) -> None:
        self._records: list[_Record] = []
        self._periods: list[list[str]] = []  # the bulk rows' ids lists, each once (they only grow)
        self._period_of: dict[int, int] = {}  # id() of one of them -> its index

    def __len__(self) -> int:
        return len(self._records)

    def add(self, plan: StepPlan) -> None:
        """Record `plan`'s sequences (after `schedule`, before `update_from_output`)."""
        bulk, query, context, emits = plan.sequence_record()
        rows: _Bulk
        if bulk is None:
            rows = _NO_BULK
        else:
            ids = bulk.ids
            period = self._period_of.get(id(ids))
            if period is None:
                period = self._period_of[id(ids)] = len(self._periods)
                self._periods.append(ids)
            rows = (bulk.off, bulk.seq, bulk.num_updates, period, bulk.prefill_rows or None)
        if not query:  # the bulk rows only (a decode step of the running queue): keeps none of the plan's lists
            self._records.append((*rows, (), (), (), ()))
            return
        requests = plan.requests
        tail = requests[len(requests) - len(query):] if bulk is not None else requests
        self._records.append((*rows, tuple(map(_REQUEST_ID, tail)), query, context, emits))

    def sequences(self) -> StepSequences:
        """Every step's query lengths, context lengths, emits and request ids, built in one pass: the bulk rows'
        offsets and request indices concatenated (a step's tail rows as zeros, written afterwards) and each step's
        update count and id base added by one `repeat`."""
        records = self._records
        n = len(records)
        # Request ids: one list of names (each period's ids once, then every tail's), each sequence an index in it.
        names: list[str] = []
        base_of: dict[int, int] = {}  # a period -> where its ids start in `names`
        lengths: list[int] = []
        num_updates: list[int] = []  # each step's bulk rows' context is off + num_updates - 1
        bases: list[int] = []  # ... and their request index seq + base
        offs: list[np.ndarray] = []
        seqs: list[np.ndarray] = []
        tails: list[int] = []  # steps with tail rows
        patches: list[tuple[int, list[tuple[int, int, int, int]]]] = []  # steps with prefill rows
        max_tail = max((len(r[6]) for r in records), default=0)
        zeros = np.zeros(max_tail, dtype=np.int32)
        period, base = -1, 0
        for i, (off, seq, updates, rows_period, prefill_rows, _, tail_query, _, _) in enumerate(records):
            num_tail = len(tail_query)
            if off is not None and seq is not None:
                offs.append(off)
                seqs.append(seq)
                lengths.append(len(off) + num_tail)
                num_updates.append(updates)
                if rows_period != period:
                    period = rows_period
                    base = base_of.get(period, -1)
                    if base < 0:
                        base = base_of[period] = len(names)
                        names.extend(self._periods[period])
                bases.append(base)
                if prefill_rows:
                    patches.append((i, prefill_rows))
            else:
                lengths.append(num_tail)
                num_updates.append(1)
                bases.append(0)
            if num_tail:
                tails.append(i)
                offs.append(zeros[:num_tail])
                seqs.append(zeros[:num_tail])
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        total = int(starts[-1])
        # Every array here is as large as all steps' sequences together: int32 (lengths are below max_model_len,
        # indices below the number of requests), as the step trace stores them, and no temporaries of that size
        # (the contexts' repeat becomes `query`), since fresh memory costs as much as the arithmetic.
        context = np.concatenate(offs, dtype=np.int32) if offs else np.zeros(0, dtype=np.int32)
        query = np.repeat(np.array(num_updates, dtype=np.int32) - 1, lengths)
        context += query
        query.fill(1)
        index = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int32)
        edges = np.flatnonzero(np.diff(bases, prepend=0, append=0)).tolist()  # runs of steps of one id base
        for lo, hi in zip(edges[:-1], edges[1:]):
            if bases[lo]:
                index[starts[lo]:starts[hi]] += bases[lo]
        emits = np.ones(total, dtype=bool)
        if tails:  # the rows after the bulk rows: written where they are
            tail_records = [records[i] for i in tails]
            tail_counts = np.array([len(r[6]) for r in tail_records], dtype=np.int64)
            num_tail = int(tail_counts.sum())
            tail_start = np.zeros(len(tails), dtype=np.int64)
            np.cumsum(tail_counts[:-1], out=tail_start[1:])
            steps = np.array(tails, dtype=np.int64)
            where = np.repeat(starts[steps + 1] - tail_counts - tail_start, tail_counts) + np.arange(num_tail)
            query[where] = np.fromiter(itertools.chain.from_iterable(r[6] for r in tail_records), np.int32, num_tail)
            context[where] = np.fromiter(itertools.chain.from_iterable(r[7] for r in tail_records), np.int32, num_tail)
            emits[where] = np.fromiter(itertools.chain.from_iterable(r[8] for r in tail_records), bool, num_tail)
            index[where] = np.arange(len(names), len(names) + num_tail, dtype=np.int32)
            names.extend(itertools.chain.from_iterable(r[5] for r in tail_records))
        for i, prefill_rows in patches:
            start = int(starts[i])
            for row, ctx, num_query, _ in prefill_rows:
                context[start + row], query[start + row] = ctx, num_query
        return StepSequences(query, context, emits, starts, names, index)


class StepSequences(Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]):
    """Every step's (query lengths, context lengths, emits), read-only, int32, int32 and bool (the values of
    `plan.seq_arrays()`, which are int64; the step trace's types): `concatenated` all of
    them step after step, `offsets` where each step starts (n + 1 entries), item i step i's (views); and the
    request id of every sequence, `request_names[request_index[j]]` for sequence j (`request_ids(i)` of step i)."""

    def __init__(self, query: np.ndarray, context: np.ndarray, emits: np.ndarray, offsets: np.ndarray,
                 request_names: list[str], request_index: np.ndarray) -> None:
        for array in (query, context, emits, offsets, request_index):
            array.flags.writeable = False
        self.concatenated = (query, context, emits)
        self.offsets = offsets
        self.request_names = request_names
        self.request_index = request_index

    @classmethod
    def empty(cls) -> StepSequences:
        return StepRecords().sequences()

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]: ...

    def __getitem__(self, i: int | slice) -> tuple[np.ndarray, np.ndarray, np.ndarray] | list[
            tuple[np.ndarray, np.ndarray, np.ndarray]]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        q, c, e = self.concatenated
        return q[lo:hi], c[lo:hi], e[lo:hi]

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        q, c, e = self.concatenated
        bounds = self.offsets.tolist()
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            yield q[lo:hi], c[lo:hi], e[lo:hi]

    def request_ids(self, i: int) -> tuple[str, ...]:
        """The request id of each of step i's sequences."""
        names = self.request_names
        return tuple(names[j] for j in self.request_index[self.offsets[i]:self.offsets[i + 1]].tolist())

    def all_request_ids(self) -> list[tuple[str, ...]]:
        """`request_ids(i)` of every step."""
        names = self.request_names
        flat = [names[j] for j in self.request_index.tolist()]
        bounds = self.offsets.tolist()
        return [tuple(flat[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]
