"""`engine.core.step_record`: the steps' sequences recorded as the plans hold them and built into arrays at the end,
on hand-made plans (the simulator's own runs: tests/test_simulator.py::test_recorded_steps_equal_each_plan_as_it_ran)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.core.step_plan import ColumnRows
from engine.core.step_record import StepRecords


@dataclass
class _Request:
    request_id: str


@dataclass
class _Plan:
    """The two things `StepRecords.add` reads of a `StepPlan`."""

    bulk: ColumnRows | None
    tail_ids: list[str]
    query: list[int]
    context: list[int]
    emits: list[bool]

    @property
    def requests(self) -> list[_Request]:
        bulk_ids = [self.bulk.ids[i] for i in self.bulk.seq.tolist()] if self.bulk is not None else []
        return [_Request(r) for r in bulk_ids + self.tail_ids]

    def sequence_record(self) -> tuple[ColumnRows | None, list[int], list[int], list[bool]]:
        return self.bulk, self.query, self.context, self.emits

    def expected(self) -> tuple[list[int], list[int], list[bool], list[str]]:
        """(query, context, emits, request ids) as the plan's arrays give them."""
        query: list[int] = []
        context: list[int] = []
        if self.bulk is not None:
            q, c, _ = self.bulk()
            query, context = q.tolist(), c.tolist()
        emits = [True] * len(query) + self.emits
        return query + self.query, context + self.context, emits, [r.request_id for r in self.requests]


def _bulk(off: list[int], num_updates: int, seq: list[int], ids: list[str],
          prefill_rows: list[tuple[int, int, int, int]] | None = None) -> ColumnRows:
    return ColumnRows(np.array(off, dtype=np.int64), num_updates, 16, prefill_rows or [],
                      np.array(seq, dtype=np.int32), ids)


def _check(plans: list[_Plan]) -> None:
    records = StepRecords()
    for plan in plans:
        records.add(plan)  # type: ignore[arg-type]
    seqs = records.sequences()
    assert len(records) == len(seqs) == len(plans)
    query, context, emits = seqs.concatenated
    assert (query.dtype, context.dtype, emits.dtype, seqs.request_index.dtype) == (
        np.int32, np.int32, np.bool_, np.int32)
    for i, plan in enumerate(plans):
        q, c, e, ids = plan.expected()
        assert [x.tolist() for x in seqs[i]] == [q, c, e], i
        assert seqs.request_ids(i) == tuple(ids), i
    assert seqs.all_request_ids() == [tuple(p.expected()[3]) for p in plans]


def test_no_steps_give_empty_arrays() -> None:
    seqs = StepRecords().sequences()
    assert len(seqs) == 0 and seqs.offsets.tolist() == [0] and seqs.request_names == []
    assert [a.dtype for a in seqs.concatenated] == [np.int32, np.int32, np.bool_]
    assert all(len(a) == 0 for a in seqs.concatenated)


def test_one_step_of_tail_rows_only() -> None:
    _check([_Plan(None, ["a", "b"], [5, 1], [0, 7], [True, False])])


def test_one_step_of_bulk_rows_only() -> None:
    _check([_Plan(_bulk([3, 9], 2, [1, 0], ["x", "y"]), [], [], [], [])])


def test_bulk_tail_prefill_and_empty_steps_mixed() -> None:
    period_a = ["r0", "r1", "r2"]
    period_b = ["r1", "r3"]  # a request in two periods: indexed through each period's list
    _check([
        _Plan(_bulk([4, 8, 2], 1, [0, 1, 2], period_a), [], [], [], []),
        _Plan(_bulk([4, 8, 2], 2, [0, 1, 2], period_a), ["r4"], [30], [0], [False]),  # a prompt chunk after
        _Plan(None, [], [], [], []),  # a step with no sequence
        _Plan(_bulk([6, 1], 1, [1, 0], period_b, prefill_rows=[(1, 12, 4, 1)]), ["r5", "r6"], [2, 1], [3, 9],
              [True, True]),
        _Plan(None, ["r7"], [11], [0], [True]),
        _Plan(_bulk([4, 8], 5, [0, 1], period_a), [], [], [], []),  # period a again, after b
    ])
