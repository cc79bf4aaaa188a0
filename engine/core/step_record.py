"""The sequences of many steps, recorded cheaply as the steps run and turned into arrays once at the end.

    records = StepRecords()
    records.add(plan)                                  # after each schedule: a few references, no arrays
    seqs = records.sequences()                         # at the end: every step's arrays in one pass
    query, context, emits = seqs.concatenated          # all steps' sequences, step after step
    query_i, context_i, emits_i = seqs[i]              # step i's (views): `plan.seq_arrays()`'s values, int32

A step's record is its plan's bulk rows as the fast path's columns left them (`ColumnRows`: the rows' offsets and
update count, their request ids as indices into the period's list) and the sequences added after them (their
values and request ids, appended to flat lists). A decode step of 150 requests is thus kept as two array
references and an int instead of three 150-row arrays and 150 strings; the arrays are built for all steps at once
by a few numpy passes.

Compiled (engine/core/_steprec.c, where built and `ROOFLINE_PURE_PYTHON` is not set), `StepRecords` is
`CompiledStepRecords`: each step's rows written into C arrays as it is added (the same values, the same request
names and indices), which `sequences()` hands over without a copy; `PythonStepRecords` is the reference.

`StepRecords(row_of=...)` (a dict: request id -> its row of the run's requests, requests.csv's): the sequences
carry each name's row there instead of the names (`request_rows`; `request_names` None), so that a sequence's
request is `request_rows[request_index[j]]` (`sequence_rows()`): what the step trace's schema version 2 stores
(`engine.core.trace`, sequences.parquet's `request_index`), taken by the `--out` writer process, and no names
handed to it.
"""

from __future__ import annotations

import itertools
import operator
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

import numpy as np

from engine.core.native import ALLOWED
from engine.core.step_plan import ColumnRows, StepPlan

try:
    from engine.core import _steprec  # type: ignore[attr-defined]
except ImportError:  # not built (no compiler at install time)
    _steprec = None

_REQUEST_ID = operator.attrgetter("request_id")


class PythonStepRecords:
    """The sequences of every step added, in order (see the module docstring).

    Kept as columns, one entry per step: the bulk rows' `off` and `seq` arrays (empty without bulk rows), update
    count, period (the index of their ids list in `_periods`; -1 without) and prefill rows (None without), and
    the number of rows after them, whose query lengths, context lengths, emits and request ids are appended to
    four flat lists. So a step adds no container of its own: the records hold a few dozen objects, not one tuple
    per step and the plan's lists, which the garbage collector's first collection after the simulation's loop
    traversed (0.035 s of sharegpt's 10,000 requests: docs/benchmark-history/2026-11-24.md, "`--out`, issue
    20 item 1, fifth session")."""

    def __init__(self, arenas: tuple[Any, Any, Any, Any] | None = None, row_of: dict[str, int] | None = None) -> None:
        # (`arenas`: memory `CompiledStepRecords` may write its arrays into; the reference builds its own)
        self._row_of = row_of
        self._off: list[np.ndarray] = []
        self._seq: list[np.ndarray] = []
        self._num_updates: list[int] = []
        self._period: list[int] = []
        self._prefill_rows: list[list[tuple[int, int, int, int]] | None] = []
        self._num_tail: list[int] = []
        self._tail_ids: list[str] = []
        self._tail_query: list[int] = []
        self._tail_context: list[int] = []
        self._tail_emits: list[bool] = []
        self._periods: list[list[str]] = []  # the bulk rows' ids lists, each once (they only grow)
        self._period_of: dict[int, int] = {}  # id() of one of them -> its index
        # The last bulk rows' `off` and `seq` as the plan gave them (the fast path's lists, which a step that changes
        # the rows replaces) and as the arrays recorded for them.
        self._last_off: object = None
        self._last_seq: object = None
        self._last_arrays = (_NO_ROWS64, _NO_ROWS32)

    def __len__(self) -> int:
        return len(self._num_tail)

    def add(self, plan: StepPlan) -> None:
        """Record `plan`'s sequences (after `schedule`, before `update_from_output`)."""
        bulk, query, context, emits = plan.sequence_record()
        if bulk is None:
            self._off.append(_NO_ROWS64)
            self._seq.append(_NO_ROWS32)
            self._num_updates.append(1)
            self._period.append(-1)
            self._prefill_rows.append(None)
        else:
            ids = bulk.ids
            period = self._period_of.get(id(ids))
            if period is None:
                period = self._period_of[id(ids)] = len(self._periods)
                self._periods.append(ids)
            if bulk.off is not self._last_off or bulk.seq is not self._last_seq:  # (a change makes new lists)
                self._last_off, self._last_seq = bulk.off, bulk.seq
                self._last_arrays = (np.asarray(bulk.off, dtype=np.int64), np.asarray(bulk.seq, dtype=np.int32))
            self._off.append(self._last_arrays[0])
            self._seq.append(self._last_arrays[1])
            self._num_updates.append(bulk.num_updates)
            self._period.append(period)
            self._prefill_rows.append(bulk.prefill_rows or None)
        self._num_tail.append(len(query))
        if query:  # rows after the bulk rows (all rows without bulk rows)
            requests = plan.requests
            self._tail_ids.extend(map(_REQUEST_ID, requests[len(requests) - len(query):]))
            self._tail_query.extend(query)
            self._tail_context.extend(context)
            self._tail_emits.extend(emits)

    def sequences(self) -> StepSequences:
        """Every step's query lengths, context lengths, emits and request ids, built in one pass: the bulk rows'
        offsets and request indices concatenated (a step's tail rows as zeros, written afterwards) and each step's
        update count and id base added by one `repeat`."""
        n = len(self)
        num_tail = np.array(self._num_tail, dtype=np.int64)
        lengths = np.fromiter(map(len, self._off), np.int64, n) + num_tail
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        total = int(starts[-1])
        tails = np.flatnonzero(num_tail)  # steps with tail rows
        # Request ids: one list of names (of each period's ids the stretch its rows point into, from the least index
        # to the greatest, then every tail's), each sequence an index in it. A period's list only grows, with every
        # request that joined it: whole, each part's names would be as many as the run's requests so far. A step's
        # bulk rows index their period's list from `names`' position of its index 0 (the period's base).
        names: list[str] = []
        periods = self._period
        runs = np.flatnonzero(np.diff(periods, prepend=-2)).tolist() if n else []  # each run of one period
        stretch: dict[int, tuple[int, int]] = {}  # a period -> its least and greatest index, in first-step order
        for lo, hi in zip(runs, runs[1:] + [n]):
            period = periods[lo]
            if period < 0:
                continue
            least, most = stretch.get(period, (2**31, -1))
            rows = np.concatenate(self._seq[lo:hi])
            if len(rows):
                least, most = min(least, int(rows.min())), max(most, int(rows.max()))
            stretch[period] = least, most
        base_of: dict[int, int] = {-1: 0}  # a period -> its base (no bulk rows: none to index)
        for period, (least, most) in stretch.items():
            base_of[period] = len(names) - least if most >= least else 0
            names.extend(self._periods[period][least:most + 1])
        run_bases = [base_of[periods[i]] for i in runs]
        # A step's tail rows as zeros after its bulk rows, in the contexts and the request indices alike.
        offs, seqs = self._off, self._seq
        if len(tails):
            zeros = np.zeros(int(num_tail.max()), dtype=np.int32)
            gaps = [_NO_ROWS32] * n
            for i, k in zip(tails.tolist(), num_tail[tails].tolist()):
                gaps[i] = zeros[:k]
            offs = list(itertools.chain.from_iterable(zip(offs, gaps)))
            seqs = list(itertools.chain.from_iterable(zip(seqs, gaps)))
        # Every array here is as large as all steps' sequences together: int32 (lengths are below max_model_len,
        # indices below the number of requests), as the step trace stores them, and no temporaries of that size
        # (the contexts' repeat becomes `query`), since fresh memory costs as much as the arithmetic.
        context = np.concatenate(offs, dtype=np.int32) if n else np.zeros(0, dtype=np.int32)
        query = np.repeat(np.array(self._num_updates, dtype=np.int32) - 1, lengths)
        context += query
        query.fill(1)
        index = np.concatenate(seqs, dtype=np.int32) if n else np.zeros(0, dtype=np.int32)
        for lo, hi, base in zip(runs, runs[1:] + [n], run_bases):
            if base:
                index[starts[lo]:starts[hi]] += base
        emits = np.ones(total, dtype=bool)
        if len(tails):  # the rows after the bulk rows: written where they are
            tail_counts = num_tail[tails]
            count = int(tail_counts.sum())
            tail_start = np.zeros(len(tails), dtype=np.int64)
            np.cumsum(tail_counts[:-1], out=tail_start[1:])
            where = np.repeat(starts[tails + 1] - tail_counts - tail_start, tail_counts) + np.arange(count)
            query[where] = self._tail_query
            context[where] = self._tail_context
            emits[where] = self._tail_emits
            index[where] = np.arange(len(names), len(names) + count, dtype=np.int32)
            names.extend(self._tail_ids)
        for i, prefill_rows in enumerate(self._prefill_rows):
            if prefill_rows:
                start = int(starts[i])
                for row, ctx, num_query, _ in prefill_rows:
                    context[start + row], query[start + row] = ctx, num_query
        if self._row_of is not None:  # each name's row of the run's requests, in place of the names
            row_of = self._row_of
            rows = np.fromiter((row_of[name] for name in names), np.int32, len(names))
            return StepSequences(query, context, emits, starts, None, index, rows)
        return StepSequences(query, context, emits, starts, names, index)


class CompiledStepRecords:
    """`PythonStepRecords` in C (`_steprec.StepLog`): `add` writes the step's rows into C arrays; `sequences()` (the
    same values and layout) closes the records: no step is added after it. `arenas`: four writable buffers lent for
    the query, context, emits and index arrays (the `--out` writer process's shared memory, which it then reads
    where the arrays lie: `roofline.sim.outputs`), each array moved to memory of its own where it outgrows its
    arena; the arrays `sequences()` gives are views of them."""

    def __init__(self, arenas: tuple[Any, Any, Any, Any] | None = None, row_of: dict[str, int] | None = None) -> None:
        self._log = _steprec.StepLog(arenas, row_of)
        self.add: Callable[[StepPlan], None] = self._log.add
        self._sequences: StepSequences | None = None

    def __len__(self) -> int:
        return len(self._log)

    def sequences(self) -> StepSequences:
        if self._sequences is None:
            query, context, emits, starts, names, index = self._log.finish()
            rows = np.frombuffer(names, np.int32) if isinstance(names, bytes) else None  # (`row_of`: names' rows)
            self._sequences = StepSequences(
                np.frombuffer(query, np.int32), np.frombuffer(context, np.int32), np.frombuffer(emits, np.bool_),
                np.frombuffer(starts, np.int64), None if rows is not None else names, np.frombuffer(index, np.int32),
                rows)
        return self._sequences


COMPILED = _steprec is not None and ALLOWED
if COMPILED:  # (`add` reads a StepPlan's `sequence_record()` and its ColumnRows' fields at their slots)
    _steprec.bind_record_types(StepPlan, ColumnRows)


def received_buffer(nbytes: int, slot: int, fd: int) -> Any:
    """The next `nbytes` of the pipe `fd`, the `slot`-th buffer of a message (the writer process's parts,
    `roofline.sim.outputs`), in memory not zeroed first: compiled, a block whose memory is kept when it is freed and
    given to the next message's buffer of the same slot (a part's arrays then fill pages already touched, not fresh
    ones), read without the GIL (engine/core/_steprec.c); else a numpy array. EOFError if the pipe ends first."""
    if COMPILED:
        return _steprec.received_block(nbytes, slot, fd)
    data = np.empty(nbytes, dtype=np.uint8)
    view = memoryview(data)  # type: ignore[arg-type]
    while len(view):
        got = os.readv(fd, [view])
        if not got:
            raise EOFError("the simulation's process closed the pipe before the last part")
        view = view[got:]
    return data


StepRecords: type[PythonStepRecords] | type[CompiledStepRecords] = \
    CompiledStepRecords if COMPILED else PythonStepRecords


_NO_ROWS64 = np.zeros(0, dtype=np.int64)  # the bulk rows of a step without any
_NO_ROWS32 = np.zeros(0, dtype=np.int32)


class StepSequences(Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]):
    """Every step's (query lengths, context lengths, emits), read-only, int32, int32 and bool (the values of
    `plan.seq_arrays()`, which are int64; the step trace's types): `concatenated` all of
    them step after step, `offsets` where each step starts (n + 1 entries), item i step i's (views); and the
    request id of every sequence, `request_names[request_index[j]]` for sequence j (`request_ids(i)` of step i),
    or, where the records were given `row_of`, its request's row of the run's requests,
    `request_rows[request_index[j]]` (`sequence_rows()`; `request_names` None)."""

    def __init__(self, query: np.ndarray, context: np.ndarray, emits: np.ndarray, offsets: np.ndarray,
                 request_names: list[str] | None, request_index: np.ndarray,
                 request_rows: np.ndarray | None = None) -> None:
        assert (request_names is None) != (request_rows is None), "names or their rows"
        for array in (query, context, emits, offsets, request_index, *(() if request_rows is None else (request_rows,))):
            array.flags.writeable = False
        self.concatenated = (query, context, emits)
        self.offsets = offsets
        self.request_names = request_names
        self.request_index = request_index
        self.request_rows = request_rows

    def sequence_rows(self) -> np.ndarray:
        """Each sequence's request as its row of the run's requests (int32), where recorded with `row_of`."""
        assert self.request_rows is not None, "sequences recorded with request names, not rows"
        return self.request_rows.take(self.request_index)  # (`take`: `[]` is numpy's slower general path)

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
        assert names is not None, "sequences recorded with request rows, not names"
        return tuple(names[j] for j in self.request_index[self.offsets[i]:self.offsets[i + 1]].tolist())

    def all_request_ids(self) -> list[tuple[str, ...]]:
        """`request_ids(i)` of every step."""
        names = self.request_names
        assert names is not None, "sequences recorded with request rows, not names"
        flat = [names[j] for j in self.request_index.tolist()]
        bounds = self.offsets.tolist()
        return [tuple(flat[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]
