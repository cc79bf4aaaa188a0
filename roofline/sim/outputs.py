"""What `roofline simulate --out DIR` writes: requests.csv (per request), steps.parquet + sequences.parquet +
run.json (a step trace, `engine.core.trace`'s schema version 2, plus the replica, the predicted time and its
per-operator breakdown: `roofline.sim.steps_file`), timeseries.csv (KV usage, running and waiting requests per step) and
summary.json; all from the run's numpy columns (`roofline.sim.table`), pyarrow for the Parquet file (imported only
by what writes it), no pandas (a column the CSV writer does not know is handed to pandas' own writer).

Where the platform forks (Linux), steps.parquet and the CSV files are written by a child process forked when the
simulation starts (`StepTraceStream`, `_ForkedWriter`): the simulation's process hands it each part of steps and
the tables through a pipe and goes on, so that `--out` runs on the second core; the same code writes the same
bytes either way."""

from __future__ import annotations

import atexit
import contextlib
import gc
import math
import mmap
import os
import pickle
import re
import select
import signal
import struct
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from engine.core import step_record
from engine.core.native import ALLOWED
from engine.core.step_record import StepRecords, StepSequences, received_buffer
from roofline.jsonable import to_json
from roofline.sim import simulator
from roofline.sim.deployment import Deployment
from roofline.sim.recorder import SimulationResult, timeseries_of
from roofline.sim.simulator import gc_paused
from roofline.sim.table import Columns, Table

if TYPE_CHECKING:
    import queue

# (`concurrent.futures`, `queue` and `traceback` are imported where used: the in-process writer and the forked
# writer need them, the simulation's process does not; with the `logging` and `string` modules they bring, ~3 ms
# of its start. The forked writer imports `queue` alone: `traceback` only where it fails, `concurrent.futures` never.)

try:
    from roofline.sim import _csvrows  # type: ignore[attr-defined]
except ImportError:  # not built (no compiler at install time)
    _csvrows = None
# The CSV rows in C (roofline/sim/_csvrows.c: `_csv_cells`' text, joined), unless `ROOFLINE_PURE_PYTHON` is set.
CSV_COMPILED = _csvrows is not None and ALLOWED


def write_outputs(out_dir: Path, deployment: Deployment, result: SimulationResult, summary: dict[str, object],
                  stream: StepTraceStream | None = None) -> None:
    """requests.csv, steps.parquet + run.json (a step trace, `engine.core.trace`), timeseries.csv and
    summary.json; the same run gives the same bytes.

    The cyclic garbage collector is paused meanwhile, as for the simulation's loop: the writing makes tens of
    thousands of containers that live until written (the CSVs' rows), enough to start a collection of every
    generation, which traverses the whole simulation's objects again (0.05-0.07 s for sharegpt's 10,000
    requests: BENCHMARKS.md, "`--out`, issue 20 item 1, fifth session") and finds the cycles that the
    collection at exit finds anyway.

    `stream`: the StepTraceStream the simulation wrote steps.parquet into (finished here), instead of the result's
    step sequences."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if stream is not None:
        with gc_paused():
            if not stream.tables_written:
                stream.write_tables(csv_tables(result))
            (out_dir / "summary.json").write_text(to_json(summary))
            stream.close(summary)
        return
    from concurrent.futures import ThreadPoolExecutor

    from roofline.sim.steps_file import step_tables, write_steps_file  # (pyarrow: imported only here)

    with gc_paused(), ThreadPoolExecutor(max_workers=1) as pool:
        # The step trace's Parquet encoding on a second thread: it runs without the GIL, beside the CSVs' Python
        # formatting (each file is written by one thread alone, so the bytes do not depend on the interleaving). The
        # table is built first, on this thread: two threads both running Python only take turns at the GIL.
        trace = pool.submit(write_steps_file, out_dir, deployment, step_tables(deployment, result), summary)
        write_csv(result.request_table, out_dir / "requests.csv")
        write_csv(result.timeseries_table, out_dir / "timeseries.csv")
        (out_dir / "summary.json").write_text(to_json(summary))
        trace.result()  # (raises what the thread raised)


TIMESERIES_FILE = "timeseries.csv"


def csv_tables(result: SimulationResult) -> dict[str, Table]:
    """The CSV files of a run's tables: file name -> table."""
    return {"requests.csv": result.request_table, TIMESERIES_FILE: result.timeseries_table}


_NEEDS_QUOTES = re.compile(r'[,"\r\n]')  # the fields the csv module quotes (QUOTE_MINIMAL)


# A Table's CSV rows made and written this many at a time (`write_csv`): ~13 MB of requests.csv's text, not the
# whole file's (~200 MB at 1,000,000 requests, and a second copy of it where header and rows were joined).
CSV_BLOCK_ROWS = 1 << 16


def write_csv(frame: Columns, path: Path) -> None:
    """`frame.to_csv(path, index=False)` (a Table's as its DataFrame's), the same bytes, in a fraction of the time
    for frames of integer, float64 and string columns (`csv_rows`; anything else is left to pandas); a Table's
    rows `CSV_BLOCK_ROWS` at a time."""
    if isinstance(frame, Table) and len(frame) > CSV_BLOCK_ROWS and _write_csv_blocks(frame, path):
        return
    rows = csv_rows(frame)
    if rows is None:
        (frame.to_pandas() if isinstance(frame, Table) else frame).to_csv(path, index=False)
        return
    with open(path, "wb") as out:
        out.write(csv_header(frame))
        out.write(rows)


def _write_csv_blocks(table: Table, path: Path) -> bool:
    """`write_csv` of `table` a block of rows at a time; False where a block is left to pandas (then the caller
    writes the file again, whole)."""
    with open(path, "wb") as out:
        out.write(csv_header(table))
        for start in range(0, len(table), CSV_BLOCK_ROWS):
            rows = csv_rows(Table({name: table[name][start:start + CSV_BLOCK_ROWS] for name in table.columns}))
            if rows is None:
                return False
            out.write(rows)
    return True


def csv_header(frame: Columns) -> bytes:
    """The header line `to_csv` writes of `frame` (names `csv_rows` writes: no quotes)."""
    return (",".join(frame.columns) + os.linesep).encode()


def csv_rows(frame: Columns) -> bytes | None:
    """The lines after `to_csv`'s header of `frame`, or None where pandas' own writer must write it (a field it
    quotes, a column of another kind, a single column). pandas writes an integer by `str`, a float64 by numpy's
    `astype(str)`, which is Python's `repr` (the shortest string that reads back, 'inf'), NaN and a missing string
    as an empty field, and quotes a field only if it holds a comma, a quote or a line break; here each distinct
    value is formatted once (a step's counts and KV usage repeat) and the rows joined; compiled (`CSV_COMPILED`), a
    Table's rows are written in C, the same text."""
    if len(frame.columns) < 2 or not all(isinstance(name, str) and not _NEEDS_QUOTES.search(name)
                                         for name in frame.columns):  # (one empty field alone is quoted)
        return None
    if CSV_COMPILED and isinstance(frame, Table):
        rows = _csvrows.rows([frame[name] for name in frame.columns], os.linesep)
        if rows is not None:  # (None: a column the Python cells write)
            return rows
    cells = [_csv_cells(frame[name]) for name in frame.columns]
    if any(cell is None for cell in cells):
        return None
    lines = list(map(",".join, zip(*cells)))
    lines.append("")
    return os.linesep.join(lines).encode()


def _csv_cells(values: Any) -> list[str] | None:
    """Each value of a column (a DataFrame's Series; a Table's array, or list of text) as pandas' `to_csv` writes it,
    or None for a column left to pandas."""
    if isinstance(values, list):  # (a Table's text)
        text = True
    elif isinstance(values, np.ndarray):
        text = values.dtype == object
    else:  # a Series: pandas is imported
        import pandas as pd

        text = isinstance(values.dtype, pd.StringDtype) or values.dtype == object
        values = values.to_numpy()
    if text:
        strings = values if isinstance(values, list) else values.tolist()
        if all(type(v) is str and not _NEEDS_QUOTES.search(v) for v in strings):
            return strings
        return None
    if values.dtype.kind in "iu":
        distinct, index = np.unique(values, return_inverse=True)
        return np.array(list(map(str, distinct.tolist())), dtype=object)[index].tolist()
    if values.dtype == np.float64:  # by bit pattern: -0.0 is not 0.0, and every NaN is written empty
        bits, index = np.unique(values.view(np.int64), return_inverse=True)
        return np.array(["" if math.isnan(v) else repr(v) for v in bits.view(np.float64).tolist()],
                        dtype=object)[index].tolist()
    return None


class StepTraceStream:
    """steps.parquet written as the simulation runs (`run_simulation(step_sink=stream.write)`), in parts of
    `roofline.sim.simulator.STEPS_PER_PART` steps (`roofline.sim.steps_file.StepsFileWriter`: a part's sequences
    are dropped once written, and the file is the one the whole table written at once gives), then the CSV files
    (`write_tables`) and run.json (`close`). Where the platform forks (`FORKED`) all of it is written by a child
    process (`_ForkedWriter`), which imports pyarrow; else here."""

    def __init__(self, out_dir: Path, deployment: Deployment) -> None:
        self.out_dir, self.deployment = out_dir, deployment
        self.tables_written = False
        self._in_child = False  # (set in the forked writer process)
        self._local: Any = None  # the in-process writer (a StepsFileWriter), made on first use
        # timeseries.csv, its rows appended part by part (the parts' step rows, in order, are the step table's): the
        # file, and how many rows it holds.
        self._timeseries: BinaryIO | None = None
        self._timeseries_rows = 0
        self._child = _ForkedWriter.start(self) if FORKED else None

    def write(self, steps: Columns, seqs: StepSequences) -> None:
        if self._child is not None:
            self._child.send("part", ({name: steps[name] for name in steps.columns}, seqs))
            return
        self._append_timeseries(timeseries_of(steps))
        self._writer().write(steps, seqs)

    __call__ = write  # (the simulation's step sink: `run_simulation(step_sink=stream)`)

    def step_records(self, row_of: dict[str, int]) -> Any:
        """The records the simulation writes a part's sequences into (`roofline.sim.recorder.Recorder`), each
        sequence's request as its row of the request table (`row_of`: request id -> row; requests.csv's rows, which
        sequences.parquet's `request_index` names): compiled, where a child writes the parts, in memory shared with it
        (`_ForkedWriter.arenas`), so that the part's arrays are handed over where they lie; else records of their
        own."""
        if self._child is not None and step_record.COMPILED:
            return StepRecords(self._child.arenas(), row_of)
        return StepRecords(row_of=row_of)

    def _append_timeseries(self, table: Table) -> None:
        rows = csv_rows(table)
        if rows is None:  # (a column `csv_rows` leaves to pandas: its writer's text of these rows, as in the whole file)
            rows = table.to_pandas().to_csv(index=False, header=False).encode()
        if self._timeseries is None:
            self._timeseries = open(self.out_dir / TIMESERIES_FILE, "wb")  # noqa: SIM115 (closed in _finish_timeseries)
            self._timeseries.write(csv_header(table))
        self._timeseries.write(rows)
        self._timeseries_rows += len(table)

    def _finish_timeseries(self, columns: list[str], num_rows: int) -> None:
        """Close timeseries.csv, whose rows came with the parts (a run without steps: its header alone), once the
        whole table is known to have `num_rows` rows."""
        if self._timeseries is None:
            self._timeseries = open(self.out_dir / TIMESERIES_FILE, "wb")  # noqa: SIM115 (closed here)
            self._timeseries.write(csv_header(Table(dict.fromkeys(columns, np.zeros(0)))))
        self._timeseries.close()
        assert self._timeseries_rows == num_rows, (self._timeseries_rows, num_rows)

    def write_tables(self, tables: dict[str, Table]) -> None:
        """The CSV files of `tables` (`csv_tables`) in the output folder, here while a child that writes the parts
        finishes the last one; timeseries.csv's rows came with the parts (where a child writes them, it is told
        only the table's columns and length, not handed the table: 134 MB at 1,000,000 requests)."""
        timeseries = tables.get(TIMESERIES_FILE)
        if timeseries is not None:
            shape = (list(timeseries.columns), len(timeseries))
            if self._child is not None:
                self._child.send("tables", shape)
            else:
                self._finish_timeseries(*shape)
        for name, table in tables.items():
            if name != TIMESERIES_FILE:
                write_csv(table, self.out_dir / name)
        self.tables_written = True

    def close(self, summary: dict[str, object] | None = None) -> None:
        """Finish steps.parquet (a run of no steps: the empty table's) and, given the run's `summary`, write
        run.json; where a child writes them, wait for it (raising what it raised)."""
        if self._child is not None:
            self._child.send("close", summary)
            self._child.finish()
            return
        self._writer().close()
        if summary is not None:
            from roofline.sim.steps_file import write_run_json

            write_run_json(self.out_dir, self.deployment, summary)

    def _writer(self) -> Any:
        if self._local is None:
            from roofline.sim.steps_file import StepsFileWriter

            self._local = StepsFileWriter(self.out_dir, self.deployment, threaded=not self._in_child)
        return self._local


# steps.parquet by a forked process (`_ForkedWriter`): Linux only (a fork elsewhere is unsafe with threads or absent).
FORKED = sys.platform == "linux" and hasattr(os, "fork")


class _ForkedWriter:
    """A child process forked from the simulation's that writes a StepTraceStream's parts as the simulation hands
    them over, so that the second core builds each part's table (its sequences' request ids, the per-operator
    breakdown) and encodes it while the simulation goes on: the simulation's process only copies the part's
    pickle (protocol 5: the arrays' bytes out of band, as they are) into memory shared with the child (`RING_BYTES`
    of it, used round and round) and tells the child where, through a pipe; the child reads the arrays where they
    lie and says when it is done with them (a message larger than the shared memory goes through the pipe). The
    child, a copy of the process at `start`, holds the deployment and the stream; a thread of it reads the pipe
    while it writes, at most `QUEUED` parts ahead (then the shared memory fills and the simulation waits: memory
    stays bounded). The file is the in-process writer's (the same code on the same parts). `finish` waits for the
    child and raises what it raised; the child ends with the pipe (the simulation's process gone) and on Ctrl-C.

    Why shared memory: through the pipe alone a part of 8,192 steps of sharegpt (~20 MB) is copied twice, a pipe's
    worth (1 MB) at a time, each wait a wake-up of the other process: 0.015-0.04 s in which the simulation waited,
    a part (docs/benchmark-history/2026-12-01a-outspeed3.md); a copy into memory already touched is ~0.003 s.

    The part's per-sequence arrays (query, context, emits, request index: nearly all of its bytes) are not copied
    at all: the simulation records them in the shared memory (`arenas`: `NUM_SLOTS` places of a part's arrays after
    the ring, `SharedLayout`), and the message names where they lie; a slot is taken again once the child has freed
    the message that named it. Only the rest (the pickle, the step rows, the steps' offsets) is copied into the
    ring."""

    QUEUED = 2
    # The ring: the parts' pieces other than the arrays in the slots (~0.3 MB a part of sharegpt's 2,048 steps), and
    # a part whose arrays outgrew their slot (a piece is placed whole; one that does not fit before the end starts
    # again at the beginning, a message larger than the whole goes through the pipe).
    RING_BYTES = 4 << 20
    # ... where there are no slots (records not compiled): whole parts, five of sharegpt's (~4.4 MB each).
    RING_BYTES_ALONE = 24 << 20
    # Places of a part's arrays: one the simulation writes into, up to four handed over and not yet freed (the child
    # writing one, two queued, its reader holding one), as the ring held five parts of sharegpt before.
    NUM_SLOTS = 5
    # A slot's sequences (None: the most a part can hold, `STEPS_PER_PART` steps of `max_num_seqs` each).
    SLOT_SEQS: int | None = None
    # The sequences of a slot whose pages the child makes before the first part (slots 0 and 1; the others where first
    # used): a part of 2,048 steps of 192 sequences (sharegpt's at 10 requests/s: ~165).
    PREPARED_SEQS = 2048 * 192

    def __init__(self, pid: int, data_fd: int, status_fd: int, ring: mmap.mmap, release_fd: int,
                 layout: SharedLayout) -> None:
        self.pid, self._data_fd, self._status_fd = pid, data_fd, status_fd
        self._failure: BaseException | None = None  # (once the child is reaped: None, or why it failed)
        self._reaped = False
        self._shared, self._layout = ring, layout  # (the ring, then the slots)
        self._ring_view = memoryview(ring)[:layout.ring_bytes]
        self._shared_view = memoryview(ring)
        self._shared_at = int(np.frombuffer(ring, np.uint8).__array_interface__["data"][0])  # (its address here)
        # Per slot, the ring's end (bytes ever placed) that frees it: 0 free, `_FILLING` while being written.
        self._slot_end = [0] * layout.num_slots
        self._release_fd = release_fd  # the child's word: the ring's bytes up to here are free again
        self._placed = 0  # the ring's bytes ever placed (or skipped at its end), and of them those freed again
        self._released = 0
        self._release_rest = b""  # (a part of the child's next 8-byte word)
        self._pages_made = self._pages_mapped = False  # (the child's word that the ring's pages exist; `_map_pages`)

    @classmethod
    def start(cls, stream: StepTraceStream) -> _ForkedWriter:
        data_r, data_w = os.pipe()
        status_r, status_w = os.pipe()
        release_r, release_w = os.pipe()
        slot_seqs = cls.SLOT_SEQS or min(simulator.STEPS_PER_PART * stream.deployment.scheduler_config.max_num_seqs,
                                         MAX_SLOT_SEQS)
        layout = SharedLayout(cls.RING_BYTES, cls.NUM_SLOTS, slot_seqs) if step_record.COMPILED and cls.NUM_SLOTS \
            else SharedLayout(cls.RING_BYTES_ALONE, 0, slot_seqs)
        # (anonymous and shared: the child sees the same pages; its pages made only where touched)
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_NORESERVE", 0)
        try:
            ring = mmap.mmap(-1, layout.total_bytes, flags=flags)
        except OSError:  # (a machine that commits every byte mapped, and has not that many: the ring alone)
            layout = SharedLayout(cls.RING_BYTES_ALONE, 0, slot_seqs)
            ring = mmap.mmap(-1, layout.total_bytes, flags=flags)
        prepared = layout.prepared(cls.PREPARED_SEQS)
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(data_w)
            os.close(status_r)
            os.close(release_r)
            _child_writes(stream, data_r, status_w, ring, release_w, prepared)
        os.close(data_r)
        os.close(status_w)
        os.close(release_w)
        os.set_blocking(release_r, False)  # (read as it comes: `_read_releases`)
        import fcntl  # (Linux: where FORKED)

        with contextlib.suppress(OSError, AttributeError):  # a larger pipe: fewer waits for the child's reader
            fcntl.fcntl(data_w, fcntl.F_SETPIPE_SZ, 1 << 20)  # type: ignore[attr-defined]
        return cls(pid, data_w, status_r, ring, release_r, layout)

    def arenas(self) -> tuple[memoryview, memoryview, memoryview, memoryview] | None:
        """A free slot's places of a part's query, context, emits and index arrays, for the records the simulation
        writes the next part into (`StepTraceStream.step_records`); the slot is taken until a message that names it
        is freed by the child. Waits for the child where every slot is taken (memory stays bounded); None where the
        child has ended (the part is refused where it is handed over: `send`) or there are no slots."""
        if not self._layout.num_slots:
            return None
        alive = self._read_releases()
        while True:
            free = [k for k, end in enumerate(self._slot_end) if end <= self._released]
            if free:
                break
            if not alive:
                return None
            select.select([self._release_fd], [], [])
            alive = self._read_releases()
        slot = free[0]  # (the lowest: a run whose writer keeps up takes two, whose pages the child made)
        self._slot_end[slot] = _FILLING
        room = [self._layout.slot_seqs * width for width in self._layout.WIDTHS]
        return tuple(self._shared_view[at:at + n] for (at, _), n in zip(self._layout.regions(slot), room))  # type: ignore[return-value]

    def send(self, kind: str, payload: object) -> None:
        """A part ("part": its step rows' columns and its sequences), timeseries.csv's columns and number of rows
        ("tables") or the run's summary ("close") to the child. The pieces that lie in the shared memory already (a
        part's arrays in a slot, `arenas`) are named where they are, the others copied into the ring."""
        buffers: list[pickle.PickleBuffer] = []
        header = pickle.dumps((kind, payload), protocol=5, buffer_callback=buffers.append)
        pieces = [memoryview(header), *(buffer.raw() for buffer in buffers)]
        lengths = [piece.nbytes for piece in pieces]
        lying = self._lying(pieces[1:])  # (their places in the shared memory, or None)
        if self._reaped:
            self._reap()  # (raises why)
        try:
            copied = [n for n, at in zip(lengths, [None, *lying]) if at is None]
            places = self._places(copied)
            if places is not None:
                self._place(pieces, lengths, [None, *lying], *places)
            else:  # (through the pipe: the pieces' lengths, then the pieces)
                _write_all(self._data_fd, [struct.pack(f"<{len(lengths) + 1}q", len(lengths), *lengths), *pieces])
                places = [], 0  # (the slots' pieces are in the pipe: free at once)
        except BrokenPipeError:  # the child ended: say why
            self._reap()
            return
        if kind == "part":  # the slot it was recorded in: free once the child frees this message (at once where
            # nothing of it lies there: the arrays outgrew it, or went through the pipe)
            for k, end in enumerate(self._slot_end):
                if end == _FILLING:
                    there = any(at is not None and self._layout.slot_of(at) == k for at in lying)
                    self._slot_end[k] = places[1] if there else 0

    def _lying(self, pieces: list[memoryview]) -> list[int | None]:
        """Of each piece, its offset in the shared memory where it lies in one of the slots, else None."""
        if not self._layout.num_slots:
            return [None] * len(pieces)
        lo, hi = self._shared_at + self._layout.ring_bytes, self._shared_at + self._layout.total_bytes
        found: list[int | None] = []
        for piece in pieces:
            at = int(np.frombuffer(piece, np.uint8).__array_interface__["data"][0]) if piece.nbytes else 0
            found.append(at - self._shared_at if lo <= at and at + piece.nbytes <= hi else None)
        return found

    def _places(self, lengths: list[int]) -> tuple[list[int], int] | None:
        """Where the next pieces of `lengths` bytes go in the ring: one after the other from where the last ended,
        each at a multiple of 64 bytes and whole (one that would pass the ring's end starts at its beginning), and
        the end of the last in bytes ever placed; None where they take more than the ring."""
        size = self._layout.ring_bytes
        at = self._placed
        offsets = []
        for n in lengths:
            if at % size + n > size:
                at += size - at % size
            offsets.append(at % size)
            at += _aligned(n)
        return (offsets, at) if at - self._placed <= size else None

    def _read_releases(self) -> bool:
        """The child's words so far, without waiting (of the ends of places freed, the last is the one that counts:
        they only grow; `PAGES_MADE`: the ring's pages exist); False once the child has closed its end."""
        while True:
            try:
                words = os.read(self._release_fd, 1 << 12)
            except BlockingIOError:
                return True
            if not words:
                return False
            words = self._release_rest + words
            whole = len(words) // 8 * 8
            for (word,) in struct.iter_unpack("<q", words[:whole]):
                if word == PAGES_MADE:
                    self._pages_made = True
                else:
                    self._released = word
            self._release_rest = words[whole:]

    def _place(self, pieces: list[memoryview], lengths: list[int], lying: list[int | None], offsets: list[int],
               end: int) -> None:
        """The pieces not `lying` in the shared memory into the ring at `offsets` (`_places`), once the child has
        freed their place; then to the pipe: -(the pieces' number), the end of their place in bytes ever placed (what
        the child frees once it is done with them), every piece's offset in the shared memory, their lengths."""
        alive = self._read_releases()
        if self._pages_made and not self._pages_mapped:
            self._map_pages()
        while end - self._released > self._layout.ring_bytes:  # wait for the child to be done with earlier parts
            if not alive:
                raise BrokenPipeError  # (the child ended)
            select.select([self._release_fd], [], [])
            alive = self._read_releases()
        where = []
        copied = iter(offsets)
        for piece, at, n in zip(pieces, lying, lengths):
            if at is None:
                at = next(copied)
                self._ring_view[at:at + n] = piece
            where.append(at)
        self._placed = end
        _write_all(self._data_fd, [struct.pack(f"<{2 * len(pieces) + 2}q", -len(pieces), end, *where, *lengths)])

    def _map_pages(self) -> None:
        """Map the pages the child has made (the ring's, the first slots', `SharedLayout.prepared`) into this process
        in one call each (MADV_POPULATE_READ, Linux 5.14 on), instead of a fault a page as the copies and the records
        first touch them: 48 MB ~3.8 ms instead of ~13 ms on this project's VM
        (docs/benchmark-history/2026-12-01c-outspeed4.md). Elsewhere the faults map them."""
        self._pages_mapped = True
        with contextlib.suppress(OSError, ValueError):
            for at, n in self._layout.prepared(_ForkedWriter.PREPARED_SEQS):
                self._shared.madvise(getattr(mmap, "MADV_POPULATE_READ", 22), at, n)

    def finish(self) -> None:
        if not self._reaped:
            with contextlib.suppress(BrokenPipeError):
                _write_all(self._data_fd, [struct.pack("<q", 0)])  # (no buffers: the end)
        self._reap()

    def _reap(self) -> None:
        """Wait for the child's word (once); raise why it failed, if it did. Its b"ok" comes after its last file is
        closed, and its exit (the kernel taking back its ~100-200 MB: 0.01-0.02 s) is waited for at the process's
        exit, beside what the simulation's process does meanwhile: compiled, at the very end of the interpreter's
        finalization (`engine.core._steprec.reap_at_exit`), else by `atexit`, before it; a failed child is waited for
        here."""
        if not self._reaped:
            self._reaped = True
            os.close(self._data_fd)
            chunks = []
            while chunk := os.read(self._status_fd, 1 << 16):
                chunks.append(chunk)
            os.close(self._status_fd)
            os.close(self._release_fd)  # (the ring is unmapped with the process, not here)
            message = b"".join(chunks)
            if message == b"ok":
                if not (step_record.COMPILED and step_record._steprec.reap_at_exit(self.pid)):
                    atexit.register(_wait_for, self.pid)
                return
            status = _wait_for(self.pid)
            if message.startswith(b"oserror:"):  # the machine refused a write (a full disk, ...): that error
                self._failure = pickle.loads(message[len(b"oserror:"):])
            else:
                why = message.decode(errors="replace") or f"exit status {status}"
                self._failure = RuntimeError(f"writing steps.parquet and the CSV files (a child process) failed: {why}")
        if self._failure is not None:
            raise self._failure


# The child's word on the release pipe that the ring's pages exist (`_while_idle`); its other words are ends of places.
PAGES_MADE = -1
# `_ForkedWriter._slot_end` of a slot the simulation writes into: freed by no end.
_FILLING = 1 << 62
# The most sequences a slot holds (~200 MB of address space; a part with more moves its arrays out, `arenas`).
MAX_SLOT_SEQS = 1 << 24


class SharedLayout:
    """The memory the simulation's process shares with the writer process (`_ForkedWriter`): the ring, then
    `num_slots` slots, each the places of one part's arrays of `slot_seqs` sequences: query, context and index
    (int32) and emits (a byte), each at a page's start.

        0            ring_bytes         + slot_bytes            + 2 * slot_bytes
        | ring ...   | q | c | e | i    | q | c | e | i         | ...

    Anonymous memory whose pages exist only where touched: the slots' sizes are bounds, not what a run uses."""

    WIDTHS = (4, 4, 1, 4)  # bytes a sequence: query, context, emits, index (`StepRecords(arenas)`'s order)

    def __init__(self, ring_bytes: int, num_slots: int, slot_seqs: int) -> None:
        self.ring_bytes, self.num_slots, self.slot_seqs = ring_bytes, num_slots, slot_seqs
        self.region_bytes = [_paged(slot_seqs * width) for width in self.WIDTHS]
        self.slot_bytes = sum(self.region_bytes)
        self.total_bytes = ring_bytes + num_slots * self.slot_bytes

    def regions(self, slot: int, num_seqs: int | None = None) -> list[tuple[int, int]]:
        """The offsets and sizes of `slot`'s four places (their first `num_seqs` sequences' bytes, if given)."""
        at = self.ring_bytes + slot * self.slot_bytes
        places = []
        for width, size in zip(self.WIDTHS, self.region_bytes):
            places.append((at, size if num_seqs is None else min(size, _paged(num_seqs * width))))
            at += size
        return places

    def slot_of(self, offset: int) -> int | None:
        """The slot that `offset` lies in, None in the ring."""
        return None if offset < self.ring_bytes else (offset - self.ring_bytes) // self.slot_bytes

    def prepared(self, num_seqs: int) -> list[tuple[int, int]]:
        """The places whose pages the writer process makes before the first part (`_while_idle`): slot 0's first
        `num_seqs` sequences (the first part's, which the simulation writes meanwhile), the ring, slot 1's."""
        places = self.regions(0, num_seqs) if self.num_slots else []
        places.append((0, self.ring_bytes))
        if self.num_slots > 1:
            places += self.regions(1, num_seqs)
        return places


def _paged(nbytes: int) -> int:
    """`nbytes` rounded up to a multiple of 4,096 (a page), at least one."""
    return max(1, -(-nbytes // 4096)) * 4096


def _aligned(nbytes: int) -> int:
    """`nbytes` rounded up to a multiple of 64 (where the next piece in the shared memory starts)."""
    return -(-nbytes // 64) * 64


def _wait_for(pid: int) -> int:
    """The exit status of the child `pid`, once it has ended."""
    return os.waitpid(pid, 0)[1]


def _write_all(fd: int, pieces: list[Any]) -> None:
    for piece in pieces:
        view = memoryview(piece).cast("B")
        while len(view):
            view = view[os.write(fd, view):]


def _read_exact(reader: Any, n: int) -> memoryview:
    data = memoryview(np.empty(n, dtype=np.uint8))  # type: ignore[arg-type]  # (not zeroed first, as a bytearray is)
    view = data
    while len(view):
        got = reader.readinto(view)
        if not got:
            raise EOFError("the simulation's process closed the pipe before the last part")
        view = view[got:]
    return data


def _child_writes(stream: StepTraceStream, data_fd: int, status_fd: int, ring: mmap.mmap, release_fd: int,
                  prepared: list[tuple[int, int]]) -> None:
    """The forked child's whole life: write the parts read from `data_fd` (and the shared memory `ring`) into the
    stream, then finish the file; b"ok", an OSError (pickled: the parent raises it, one line at the command line)
    or the traceback to `status_fd`. After each message read from the ring, the end of its place there (bytes ever
    placed) to `release_fd`: the parent may place the next ones over it."""
    import queue

    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # (Ctrl-C reaches the process group: end as the parent does)
        gc.disable()  # (the child makes no cycles it must collect, and a collection touches every inherited page)
        _off_the_parents_cpu()
        _choose_arrow_pool(os.environ)  # (before pyarrow's import, `_while_idle`)
        # The reader thread takes the GIL between two reads of the pipe: at once, not after the 5 ms a thread
        # holding it may keep it, or the pipe stays full and the simulation's process waits.
        sys.setswitchinterval(1e-4)
        stream._child, stream._in_child = None, True
        parts: queue.Queue[Any] = queue.Queue(maxsize=_ForkedWriter.QUEUED)
        threading.Thread(target=_read_parts, args=(data_fd, parts, ring), daemon=True).start()
        idle: Iterator[bool] | None = _while_idle(ring, release_fd, prepared)
        while True:
            try:
                item = parts.get() if idle is None else parts.get_nowait()
            except queue.Empty:  # (nothing to write yet: a piece of the work that can be done now)
                if not next(idle, False):  # type: ignore[arg-type]
                    idle = None
                continue
            if item is None:
                break
            if isinstance(item, BaseException):
                raise item
            (kind, payload), release = item
            if kind == "part":
                columns, seqs = payload
                stream.write(Table(columns), seqs)
                del columns, seqs
            elif kind == "tables":  # (timeseries.csv's columns and number of rows)
                stream._finish_timeseries(*payload)
            else:  # "close", with the run's summary or None
                stream.close(payload)
            del item, payload  # (its arrays, views of the ring's memory: written, not read again)
            if release is not None:
                with contextlib.suppress(BrokenPipeError):  # (the parent gone: it places nothing more)
                    os.write(release_fd, struct.pack("<q", release))
        os.write(status_fd, b"ok")
        os.close(status_fd)  # (every file closed: the parent goes on, while this process's memory is given back)
        code = 0
    except BaseException as exc:
        import traceback  # (only for a failure)

        failure = (b"oserror:" + pickle.dumps(exc) if isinstance(exc, OSError) and exc.errno is not None
                   else traceback.format_exc().encode())
        with contextlib.suppress(OSError):
            _write_all(status_fd, [failure])
    finally:
        os._exit(code)


# Arrow's memory pool of the writer process, where the user chose none (`_choose_arrow_pool`).
WRITER_ARROW_POOL = "jemalloc"


def _choose_arrow_pool(environ: Any) -> None:
    """Arrow's memory pool for the writer process: `WRITER_ARROW_POOL` where this pyarrow was built with it (its
    headers' arrow/util/config.h says so; Arrow would warn of a pool it lacks) and `ARROW_DEFAULT_MEMORY_POOL`
    names none (a user's choice stays), set in `environ` before pyarrow is imported (Arrow reads it once, then).
    Parquet's encoders grow their buffers (the levels of the list columns, the encoded pages) by reallocation from
    Arrow's default pool whatever pool the writer is given; jemalloc grows them in place where mimalloc (Arrow's
    default) copies them, and the writer's work beside the simulation slows it less (alternated runs:
    docs/benchmark-history/2026-12-01d-outspeed5.md). The file's bytes are the same."""
    if environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import importlib.util

    try:
        spec = importlib.util.find_spec("pyarrow")  # (found, not imported)
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        config = Path(folders[0], "include", "arrow", "util", "config.h").read_text() if folders else ""
    except (OSError, ValueError, ImportError):
        return
    if re.search(rf"^#define ARROW_{WRITER_ARROW_POOL.upper()}$", config, flags=re.M):
        environ["ARROW_DEFAULT_MEMORY_POOL"] = WRITER_ARROW_POOL


def _off_the_parents_cpu() -> None:
    """Keep this process (the writer) off the CPU the simulation's process runs on, where it may run elsewhere
    (Linux's affinity; the simulation's process stays free to move): with another session's process busy on the
    second core (even at nice 19: autogroups share the CPUs by session), the scheduler put the writer beside the
    simulation, which then ran at half speed (docs/benchmark-history/2026-12-01c-outspeed4.md, section 4)."""
    try:
        with open(f"/proc/{os.getppid()}/stat") as stat:
            cpu = int(stat.read().rsplit(")", 1)[1].split()[36])  # (field 39, `processor`: the CPU it last ran on)
        others = os.sched_getaffinity(0) - {cpu}
        if others:
            os.sched_setaffinity(0, others)
    except (OSError, ValueError, IndexError, AttributeError):  # (no /proc, no affinity: as it is)
        pass


def _while_idle(ring: mmap.mmap, release_fd: int, prepared: list[tuple[int, int]]) -> Iterator[bool]:
    """What the child does while no message waits (the simulation's first part: ~0.2 s at 10,000 requests), a piece
    a step, so that a message waits for one piece at most: first make the pages of the shared memory's `prepared`
    places (`SharedLayout.prepared`: the first part's arrays, the ring, the second part's), 1 MB at a time (Linux
    5.14 on; elsewhere the first write into each page makes it), and say so (`PAGES_MADE` to `release_fd`: the
    simulation's process then maps them in one call each, `_ForkedWriter._map_pages`), so that it records and
    copies each part into pages that exist: a page it makes itself is a fault, an allocation and a page of zeros on
    its critical path (on this project's VM up to ~13 us a page where the guest's memory is fresh: 48 MB of them
    ~0.16 s, docs/benchmark-history/2026-12-01c-outspeed4.md); then import the table's writer (pyarrow, ~0.1 s) and
    read the installed versions run.json names (~0.004 s the first time: at the end otherwise), which the first part
    needs. A short run's writer never idles that long: it makes no more pages than its messages fill."""
    advice = getattr(mmap, "MADV_POPULATE_WRITE", 23)
    made = True
    for at, size in prepared:
        for start in range(at, at + size, 1 << 20):
            try:
                ring.madvise(advice, start, min(1 << 20, at + size - start))
            except (OSError, ValueError):  # (an older kernel: the pages are made as they are written)
                made = False
                break
            yield True
        if not made:
            break
    if made:
        with contextlib.suppress(BrokenPipeError):  # (the parent gone: it places nothing more)
            os.write(release_fd, struct.pack("<q", PAGES_MADE))
    from roofline.sim.steps_file import installed_version

    yield True
    installed_version("pandas")


def _read_parts(data_fd: int, parts: queue.Queue[Any], ring: mmap.mmap) -> None:
    """The child's reader thread: each message (its pickle, then its arrays' bytes; in the ring or through the pipe:
    `_ForkedWriter.send`) unpickled onto `parts` with the end of its place in the ring (None: through the pipe),
    None at the end, an exception where reading failed."""
    shared = memoryview(ring)
    try:
        with open(data_fd, "rb", buffering=0) as reader:
            while True:
                (count,) = struct.unpack("<q", _read_exact(reader, 8))
                if count == 0:
                    parts.put(None)
                    return
                if count < 0:  # in the ring: read where they lie
                    end, *fields = struct.unpack(f"<{1 - 2 * count}q", _read_exact(reader, 8 * (1 - 2 * count)))
                    pieces = [shared[at:at + n] for at, n in zip(fields[:-count], fields[-count:])]
                    parts.put((pickle.loads(pieces[0], buffers=pieces[1:]), end))
                    continue
                lengths = struct.unpack(f"<{count}q", _read_exact(reader, 8 * count))
                header = _read_exact(reader, lengths[0])
                # (the k-th array of each part into the memory of the last part's k-th, once that one is written)
                buffers = [memoryview(received_buffer(n, slot, data_fd)) for slot, n in enumerate(lengths[1:])]
                parts.put((pickle.loads(header, buffers=buffers), None))
    except BaseException as error:  # (handed to the child's main thread, which raises it)
        parts.put(error)
