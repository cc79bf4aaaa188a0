"""`engine.core.step_record`: the steps' sequences recorded as the plans hold them and built into arrays at the end,
on hand-made plans (the simulator's own runs: tests/test_simulator.py::test_recorded_steps_equal_each_plan_as_it_ran);
the compiled records (engine/core/_steprec.c) against the Python ones, the reference."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from engine.core import step_record
from engine.core.step_plan import ColumnRows, StepPlan
from engine.core.step_record import CompiledStepRecords, PythonStepRecords

REPO = Path(__file__).resolve().parents[1]
KINDS = [PythonStepRecords, pytest.param(CompiledStepRecords, marks=pytest.mark.skipif(
    step_record._steprec is None, reason="engine.core._steprec not built"))]


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
        bulk_ids = [self.bulk.ids[i] for i in np.asarray(self.bulk.seq).tolist()] if self.bulk is not None else []
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


def _check(plans: list[_Plan], kind: type = PythonStepRecords) -> None:
    records = kind()
    for plan in plans:
        records.add(plan)
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
    if kind is not PythonStepRecords:  # the reference's layout too: the same names, the same indices
        reference = PythonStepRecords()
        for plan in plans:
            reference.add(plan)  # type: ignore[arg-type]
        expected = reference.sequences()
        assert seqs.request_names == expected.request_names
        assert np.array_equal(seqs.request_index, expected.request_index)
        assert np.array_equal(seqs.offsets, expected.offsets) and seqs.offsets.dtype == np.int64
    # Recorded by row (`row_of`: every id's row of the run's requests, as --out's parts are): the same values, each
    # sequence's index its request's row, no names.
    names = sorted({name for p in plans for name in [*p.tail_ids, *(p.bulk.ids if p.bulk is not None else [])]})
    row_of = {name: 7 * k + 3 for k, name in enumerate(names)}
    records = kind(row_of=row_of)
    for plan in plans:
        records.add(plan)
    by_row = records.sequences()
    assert by_row.request_names is None and by_row.sequence_rows().dtype == np.int32
    assert by_row.sequence_rows().tolist() == [row_of[name] for p in plans for name in p.expected()[3]]
    assert np.array_equal(by_row.request_index, seqs.request_index)
    assert all(np.array_equal(a, b) for a, b in zip(by_row.concatenated, seqs.concatenated))
    assert np.array_equal(by_row.offsets, seqs.offsets)


@pytest.mark.parametrize("kind", KINDS)
def test_no_steps_give_empty_arrays(kind: type) -> None:
    seqs = kind().sequences()
    assert len(seqs) == 0 and seqs.offsets.tolist() == [0] and seqs.request_names == []
    assert [a.dtype for a in seqs.concatenated] == [np.int32, np.int32, np.bool_]
    assert all(len(a) == 0 for a in seqs.concatenated)


@pytest.mark.parametrize("kind", KINDS)
def test_one_step_of_tail_rows_only(kind: type) -> None:
    _check([_Plan(None, ["a", "b"], [5, 1], [0, 7], [True, False])], kind)


@pytest.mark.parametrize("kind", KINDS)
def test_one_step_of_bulk_rows_only(kind: type) -> None:
    _check([_Plan(_bulk([3, 9], 2, [1, 0], ["x", "y"]), [], [], [], [])], kind)


@pytest.mark.parametrize("kind", KINDS)
def test_bulk_tail_prefill_and_empty_steps_mixed(kind: type) -> None:
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
    ], kind)


@pytest.mark.parametrize("kind", KINDS)
def test_bulk_rows_as_the_fast_path_lists_them(kind: type) -> None:
    """The compiled fast path's rows are lists, kept from step to step until the rows change (then new lists); a
    period's id list grows after its first step."""
    ids = ["a", "b", "c"]
    off, seq = [5, 9, 2], [2, 0, 1]
    plans = [_Plan(ColumnRows(off, n, 16, [], seq, ids), [], [], [], []) for n in (1, 2, 3)]
    ids.append("d")  # (a request joins: new lists, the same period)
    off2, seq2 = [5, 9, 2, 40], [2, 0, 1, 3]
    plans.append(_Plan(ColumnRows(off2, 4, 16, [(3, 40, 8, 3)], seq2, ids), ["t"], [7], [0], [True]))
    plans.append(_Plan(ColumnRows(off2, 5, 16, [], seq2, ids), [], [], [], []))
    _check(plans, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_names_hold_only_the_stretch_of_a_period_the_rows_point_into(kind: type) -> None:
    """A period's id list only grows (every request that joined it): a part's names take of it only the stretch its
    rows point into, from the least index to the greatest, so a part of a long run hands over the ids of the
    requests about it, not of the whole run so far; the ids of every sequence the same."""
    joined = [f"r{i}" for i in range(1000)]  # (a long run's period: 1,000 requests joined so far)
    other = [f"q{i}" for i in range(50)]
    plans = [
        _Plan(_bulk([4, 8, 2], 1, [997, 990, 995], joined), [], [], [], []),
        _Plan(_bulk([6, 1], 3, [12, 40], other), ["t0"], [9], [0], [False]),
        _Plan(_bulk([4, 8], 2, [998, 992], joined), [], [], [], []),
        _Plan(None, ["t1"], [3], [5], [True]),
        _Plan(_bulk([], 1, [], other), [], [], [], []),  # (a period's step without rows)
    ]
    _check(plans, kind)
    records = kind()
    for plan in plans:
        records.add(plan)
    assert records.sequences().request_names == [f"r{i}" for i in range(990, 999)] + \
        [f"q{i}" for i in range(12, 41)] + ["t0", "t1"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_request_missing_from_row_of_is_a_key_error(kind: type) -> None:
    records = kind(row_of={"a": 0})
    records.add(_Plan(None, ["a", "b"], [5, 1], [0, 7], [True, False]))
    with pytest.raises(KeyError, match="b"):
        records.sequences()


@pytest.mark.skipif(not step_record.COMPILED, reason="engine.core._steprec not built (or ROOFLINE_PURE_PYTHON)")
def test_a_freed_part_leaves_its_memory_to_the_next_and_the_next_holds_its_own_values() -> None:
    """A part's arrays, once freed, leave their memory to the next log's (engine/core/_steprec.c: pages already
    touched); the next part, smaller, written over what the first left there, holds exactly its own values."""
    def part(base: int, n: int) -> list[_Plan]:  # (n int32 rows a column: above the 64 KB kept at the least)
        ids = [f"r{base + i}" for i in range(n)]
        return [_Plan(_bulk(list(range(base, base + n)), 1 + base % 3, list(range(n))[::-1], ids), [], [], [], []),
                _Plan(None, ["t"], [7], [base], [True]),
                _Plan(_bulk(list(range(n // 2)), 2, list(range(n // 2)), ids, prefill_rows=[(0, 99, 5, 1)]),
                      [], [], [], [])]

    _check(part(0, 30_000), CompiledStepRecords)
    assert step_record._steprec.kept_bytes() >= 4 * 30_000
    _check(part(7, 20_000), CompiledStepRecords)


@pytest.mark.skipif(not step_record.COMPILED, reason="engine.core._steprec not built (or ROOFLINE_PURE_PYTHON)")
@pytest.mark.parametrize("num_seqs", [1_000, 100, 0])
def test_records_in_lent_memory_lie_there_and_outgrown_move_out_with_their_values(num_seqs: int) -> None:
    """`CompiledStepRecords(arenas)` writes the query, context, emits and index arrays into the memory lent (the
    `--out` writer's shared memory, roofline/sim/outputs.py), the arrays views of it; an array that outgrows its
    arena (here 100 or 0 sequences' room for 203 sequences) moves to memory of its own; the values are the
    reference's either way."""
    import functools

    lent = [np.full(width * num_seqs + 64, 0x55, dtype=np.uint8) for width in (4, 4, 1, 4)]
    arenas = tuple(memoryview(a)[64:] for a in lent)  # type: ignore[arg-type]  # (anywhere: a view too)
    ids = [f"r{i}" for i in range(200)]
    plans = [_Plan(_bulk(list(range(100)), 3, list(range(100))[::-1], ids), ["t0"], [7], [5], [True]),
             _Plan(None, [], [], [], []),
             _Plan(_bulk(list(range(100)), 4, list(range(100, 200)), ids, prefill_rows=[(1, 99, 5, 1)]),
                   ["t1", "t2"], [1, 2], [3, 4], [False, True])]
    records = functools.partial(CompiledStepRecords, arenas)
    _check(plans, records)
    seqs = records()
    for plan in plans:
        seqs.add(plan)  # type: ignore[arg-type]
    done = seqs.sequences()
    arrays = [*done.concatenated, done.request_index]
    inside = [lent[k].ctypes.data <= a.ctypes.data < lent[k].ctypes.data + len(lent[k]) for k, a in enumerate(arrays)]
    assert inside == [num_seqs >= 203] * 4
    if num_seqs >= 203:  # the bytes of the lent memory are the arrays'
        assert lent[0][64:64 + 4 * 203].view(np.int32).tolist() == done.concatenated[0].tolist()
        assert lent[3][64:64 + 4 * 203].view(np.int32).tolist() == done.request_index.tolist()
    else:  # (the lent memory past what was written before the move is as it was)
        assert lent[0][64 + 4 * num_seqs:].tolist() == [0x55] * (len(lent[0]) - 64 - 4 * num_seqs)


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.skipif(
    not step_record.COMPILED, reason="engine.core._steprec not built (or ROOFLINE_PURE_PYTHON)"))])
def test_a_received_buffer_is_the_pipes_next_bytes_in_the_memory_its_slot_last_freed(
        monkeypatch: pytest.MonkeyPatch, compiled: bool) -> None:
    monkeypatch.setattr(step_record, "COMPILED", compiled)
    sent = np.arange(200_010, dtype=np.uint32).astype(np.uint8).tobytes()
    read_fd, write_fd = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(write_fd, sent), os.close(write_fd)))
    writer.start()  # (more than a pipe holds: written while read)
    try:
        first = np.frombuffer(step_record.received_buffer(100_000, 3, read_fd), dtype=np.uint8)
        assert first.tobytes() == sent[:100_000]
        address = first.ctypes.data
        del first
        again = np.frombuffer(step_record.received_buffer(100_000, 3, read_fd), dtype=np.uint8)
        assert again.tobytes() == sent[100_000:200_000]
        if compiled:  # the freed one's memory, for the same slot; another slot's elsewhere
            assert again.ctypes.data == address
        other = np.frombuffer(step_record.received_buffer(10, 4, read_fd), dtype=np.uint8)
        assert other.tobytes() == sent[200_000:] and other.ctypes.data != again.ctypes.data
        writer.join()
        with pytest.raises(EOFError):
            step_record.received_buffer(1, 4, read_fd)
    finally:
        writer.join()
        os.close(read_fd)


@pytest.mark.parametrize("kind", KINDS)
def test_rows_that_change_by_a_few_keep_the_others_values(kind: type) -> None:
    """The fast path's lists change a few rows at a time and keep the other rows' int objects: the compiled records
    take those rows' values from the last lists' (engine/core/_steprec.c `read_ints`); every step the reference's
    values, whether rows leave or join at the start, the middle or the end, all change, or the lists empty."""
    ids = [f"r{i}" for i in range(60)]
    off = [1000 + 7 * i for i in range(40)]  # (ints above 256: objects of their own)
    seq = [59 - i for i in range(40)]
    changes = [
        (off, seq),
        (off[:13] + off[14:], seq[:13] + seq[14:]),  # a row leaves the middle
        (off[:13] + [5000, 5001] + off[14:], seq[:13] + [41, 42] + seq[14:]),  # two join there
        (off[1:] + [6000], seq[1:] + [43]),  # the first leaves, one joins at the end
        ([o + 0 for o in map(int, map(str, off))], [s + 0 for s in map(int, map(str, seq))]),  # equal values, new ints
        (off[:20] + off[:20], seq[20:] + seq[:20]),  # the same objects elsewhere
        ([], []),
        (off[:5], seq[:5]),
        (off[5:] + off[:5], seq[5:] + seq[:5]),
    ]
    plans = []
    for n, (o, s) in enumerate(changes):
        plans.append(_Plan(ColumnRows(list(o), 1 + n, 16, [], list(s), ids), [], [], [], []))
        plans.append(_Plan(ColumnRows(plans[-1].bulk.off, 2 + n, 16, [], plans[-1].bulk.seq, ids), [], [], [], []))
    _check(plans, kind)


def _running(requests: list[str], plan_type: type = StepPlan) -> StepPlan:
    plan = plan_type(0)
    plan.add_running([_Request(r) for r in requests], [1] * len(requests), [5 + i for i in range(len(requests))],
                     [1] * len(requests), len(requests), 0)
    return plan


def _columns(requests: list[str]) -> StepPlan:
    plan = StepPlan(1)
    plan.add_running_columns([_Request(r) for r in requests], ColumnRows([3, 8, 1], 2, 16, [(1, 20, 6, 2)],
                                                                         [2, 0, 1], requests), 12, 10, 6)
    return plan


@pytest.mark.skipif(not step_record.COMPILED, reason="engine.core._steprec not built (or ROOFLINE_PURE_PYTHON)")
def test_a_step_plan_is_read_at_its_slots_and_a_subclass_by_its_own_sequence_record() -> None:
    """`StepLog.add` reads a StepPlan's record and its ColumnRows' fields at their slots (`bind_record_types`), the
    values `sequence_record()` gives; a plan of another class, a subclass included, by its `sequence_record()`."""

    class Tailless(StepPlan):
        __slots__ = ()

        def sequence_record(self) -> tuple[ColumnRows | None, list[int], list[int], list[bool]]:
            return None, [], [], []

    plans = [_running(["a", "b"]), _columns(["x", "y", "z"]), _running(["c"], Tailless)]
    compiled, reference = CompiledStepRecords(), PythonStepRecords()
    for plan in plans:
        compiled.add(plan)
        reference.add(plan)
    got, expected = compiled.sequences(), reference.sequences()
    assert [[a.tolist() for a in got[i]] for i in range(3)] == [[a.tolist() for a in expected[i]] for i in range(3)]
    assert got.all_request_ids() == expected.all_request_ids() == [("a", "b"), ("z", "x", "y"), ()]
    assert got[1][1].tolist() == [2 + 3 - 1, 20, 2 + 1 - 1]  # (a decode's context: off + num_updates - 1)


@pytest.mark.skipif(not step_record.COMPILED, reason="engine.core._steprec not built (or ROOFLINE_PURE_PYTHON)")
def test_a_step_adder_adds_a_step_that_fills_no_block_and_leaves_the_others_to_its_fallback() -> None:
    calls: list[tuple[object, ...]] = []

    class Records:
        def add(self, plan: object) -> None:
            calls.append(("add", plan))

    class Owner:
        step_seqs = Records()

    adder = step_record._steprec.StepAdder(lambda owner, plan, full: calls.append(("fallback", owner, plan, full)),
                                           "step_seqs")
    owner = Owner()
    assert adder(owner, "p1", False) is None
    adder(owner, "p2", True)
    assert calls == [("add", "p1"), ("fallback", owner, "p2", True)]
    with pytest.raises(TypeError):
        adder(owner, "p3")


@pytest.mark.skipif(not step_record.COMPILED or not hasattr(os, "fork"),
                    reason="engine.core._steprec not built (or ROOFLINE_PURE_PYTHON), or no fork")
def test_a_child_reaped_at_exit_is_waited_for_before_the_process_ends(tmp_path: Path) -> None:
    """`reap_at_exit(pid)`: the process's end (a normal exit, after its finalization) waits for the child: what the
    child does after its parent's last statement is done when the parent's process is gone; its status is taken."""
    done = tmp_path / "done"
    script = f"""
import os, time
from engine.core import step_record
pid = os.fork()
if pid == 0:
    time.sleep(0.3)
    open({str(done)!r}, "w").close()
    os._exit(0)
assert step_record._steprec.reap_at_exit(pid) is True
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert done.exists()
