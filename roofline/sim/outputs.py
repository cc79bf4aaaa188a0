"""What `roofline simulate --out DIR` writes: requests.csv (per request), steps.parquet + run.json (a step trace
as the engine writes one, `engine.core.trace`, plus the replica, the predicted time and its per-operator
breakdown), timeseries.csv (KV usage, running and waiting requests per step) and summary.json; all from the run's
numpy columns (`roofline.sim.table`), pyarrow for the Parquet file, no pandas (a column the CSV writer does not know
is handed to pandas' own writer).

Where the platform forks (Linux), steps.parquet and the CSV files are written by a child process forked when the
simulation starts (`StepTraceStream`, `_ForkedWriter`): the simulation's process hands it each part of steps and
the tables through a pipe and goes on, so that `--out` runs on the second core; the same code writes the same
bytes either way."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib.metadata
import math
import os
import pickle
import queue
import re
import signal
import struct
import sys
import threading
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from engine.core.native import ALLOWED
from engine.core.step_record import StepSequences
from engine.core.trace import (
    ROW_GROUP_STEPS,
    STEPS_FILE,
    EngineConfigRecord,
    RunMetadata,
    open_steps_file,
    step_schema,
    write_run_file,
    write_trace,
)
from engine.core.trace import STEP_COLUMNS as TRACE_STEP_COLUMNS
from roofline import __version__
from roofline.jsonable import to_json
from roofline.sim.deployment import Deployment
from roofline.sim.recorder import STEP_COLUMNS, SimulationResult
from roofline.sim.simulator import gc_paused
from roofline.sim.table import Columns, Table, column

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
    metadata = run_metadata(deployment, summary)
    if stream is not None:
        with gc_paused():
            if not stream.tables_written:
                stream.write_tables(csv_tables(result))
            (out_dir / "summary.json").write_text(to_json(summary))
            write_run_file(out_dir, metadata)
            stream.close()
        return
    with gc_paused(), ThreadPoolExecutor(max_workers=1) as pool:
        # The step trace's Parquet encoding on a second thread: it runs without the GIL, beside the CSVs' Python
        # formatting (each file is written by one thread alone, so the bytes do not depend on the interleaving). The
        # table is built first, on this thread: two threads both running Python only take turns at the GIL.
        trace = pool.submit(write_trace, out_dir, step_table(deployment, result), metadata)
        write_csv(result.request_table, out_dir / "requests.csv")
        write_csv(result.timeseries_table, out_dir / "timeseries.csv")
        (out_dir / "summary.json").write_text(to_json(summary))
        trace.result()  # (raises what the thread raised)


def csv_tables(result: SimulationResult) -> dict[str, Table]:
    """The CSV files of a run's tables: file name -> table."""
    return {"requests.csv": result.request_table, "timeseries.csv": result.timeseries_table}


_NEEDS_QUOTES = re.compile(r'[,"\r\n]')  # the fields the csv module quotes (QUOTE_MINIMAL)


def write_csv(frame: Columns, path: Path) -> None:
    """`frame.to_csv(path, index=False)` (a Table's as its DataFrame's), the same bytes, in a fraction of the time
    for frames of integer, float64 and string columns (anything else is left to pandas). pandas writes an integer
    by `str`, a float64 by numpy's `astype(str)`, which is Python's `repr` (the shortest string that reads back,
    'inf'), NaN and a missing string as an empty field, and quotes a field only if it holds a comma, a quote or a
    line break; here each distinct value is formatted once (a step's counts and KV usage repeat) and the rows
    joined; compiled (`CSV_COMPILED`), a Table's rows are written in C, the same text."""
    plain_names = all(isinstance(name, str) and not _NEEDS_QUOTES.search(name) for name in frame.columns)
    if CSV_COMPILED and plain_names and len(frame.columns) >= 2 and isinstance(frame, Table):
        rows = _csvrows.rows([frame[name] for name in frame.columns], os.linesep)
        if rows is not None:  # (None: a column the Python cells write)
            path.write_bytes((",".join(frame.columns) + os.linesep).encode() + rows)
            return
    cells = [_csv_cells(frame[name]) for name in frame.columns] if plain_names else []
    if len(cells) < 2 or any(cell is None for cell in cells):  # (one empty field alone is quoted)
        (frame.to_pandas() if isinstance(frame, Table) else frame).to_csv(path, index=False)
        return
    lines = [",".join(frame.columns)]
    lines.extend(map(",".join, zip(*cells)))
    lines.append("")
    path.write_bytes(os.linesep.join(lines).encode())


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


def step_table(deployment: Deployment, result: SimulationResult) -> pa.Table:
    """The step-trace columns, plus `replica`, `request_ids`, `predicted_s` (the time the step was charged) and
    the cost model's per-operator breakdown as `op_<name>_s`. Built column by column from arrays: the per-step
    lists as one array of values with offsets, the breakdown in bulk (`StepCostModel.breakdown_columns`); the
    same table as building every cell in Python, in a fraction of the time."""
    return steps_table(deployment, result.step_table, result.step_seqs)


def steps_table(deployment: Deployment, steps: Columns, seqs: StepSequences) -> pa.Table:
    """`step_table` of some steps: their rows of the steps table and their sequences."""
    concatenated = seqs.concatenated  # every step's query, context and emits, step after step
    breakdown = deployment.cost_model.breakdown_columns(seqs)
    columns: dict[str, object] = {name: column(steps, name) for name in TRACE_STEP_COLUMNS if name in steps.columns}
    columns["arrival_cutoff_s"] = column(steps, "start_s")  # a schedule at t sees every arrival by t
    offsets = _offsets(seqs.offsets)
    for values, name in zip(concatenated, ("query_lens", "context_lens", "emits")):
        typ = TRACE_STEP_COLUMNS[name]
        columns[name] = pa.ListArray.from_arrays(offsets, _arrow(values, typ.value_type), type=typ)
    columns["predicted_s"] = column(steps, "duration_s")
    columns["request_ids"] = pa.ListArray.from_arrays(offsets, _request_ids(seqs))
    columns["replica"] = column(steps, "replica")
    for name in sorted(breakdown):
        columns[f"op_{name}_s"] = breakdown[name]
    schema = step_schema([n for n in columns if n not in TRACE_STEP_COLUMNS])
    return pa.table({n: _array(columns[n], schema.field(n).type) for n in schema.names}, schema=schema)


def _request_ids(seqs: StepSequences) -> pa.Array:
    """Every sequence's request id, a string array: its UTF-8 bytes gathered in C (`StepSequences.request_id_utf8`),
    else each distinct id once, then taken (pyarrow.compute, imported only then); the same strings as an array
    built from every sequence's id string."""
    gathered = seqs.request_id_utf8()
    if gathered is not None:
        offsets, data = gathered
        return pa.Array.from_buffers(pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    index = seqs.request_index
    return _arrow(seqs.request_names, pa.string()).take(_arrow(index, _ARROW_TYPES.get(index.dtype, pa.int64())))


class StepTraceStream:
    """steps.parquet written as the simulation runs (`run_simulation(step_sink=stream.write)`): each part of
    `roofline.sim.simulator.STEPS_PER_PART` steps becomes its rows of the file and is dropped, so `--out` holds a
    part's sequences, not the whole run's (a sequence per request and step: 450 million for 1,000,000 ShareGPT
    requests). The parts are multiples of the file's row groups, so the file is the one the whole table written at
    once gives (one part: the same bytes). An operator absent from a part (no prefill in it, say) is 0.0 there, as
    in the whole table; one first met in a later part widens the file: what was written is copied, row group by
    row group, into a file with the column (0.0 in the earlier steps)."""

    def __init__(self, out_dir: Path, deployment: Deployment) -> None:
        self.out_dir, self.deployment = out_dir, deployment
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None
        # A part's Parquet encoding runs on a second thread (without the GIL) while the simulation goes on; one
        # part at a time, so that at most two parts' tables are alive.
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._pending: Future[None] | None = None
        self.tables_written = False
        # Where the platform forks (`FORKED`): the parts are written by a child process (`_ForkedWriter`).
        self._child = _ForkedWriter.start(self) if FORKED else None

    def write(self, steps: Columns, seqs: StepSequences) -> None:
        if self._child is not None:
            self._child.send("part", ({name: steps[name] for name in steps.columns}, seqs))
            return
        table = steps_table(self.deployment, steps, seqs)
        self._wait()
        if self._schema is None:
            self._open(table.schema)
        assert self._schema is not None and self._writer is not None
        if set(table.schema.names) - set(self._schema.names):
            self._widen(table.schema)
        self._pending = self._pool.submit(self._writer.write_table, _conform(table, self._schema),
                                          row_group_size=ROW_GROUP_STEPS)

    def write_tables(self, tables: dict[str, Table]) -> None:
        """The CSV files of `tables` (`csv_tables`) in the output folder: by the child that writes the parts where
        one does (after the last part, while the simulation's process goes on to its summary), else here."""
        if self._child is not None:
            self._child.send("tables", {name: {c: table[c] for c in table.columns} for name, table in tables.items()})
        else:
            for name, table in tables.items():
                write_csv(table, self.out_dir / name)
        self.tables_written = True

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()  # (raises what the thread raised)
            self._pending = None

    def close(self) -> None:
        """Finish the file (a run of no steps: the empty table's)."""
        if self._child is not None:
            self._child.finish()
            return
        if self._writer is None:
            self.write(Table({name: np.zeros(0) for name in STEP_COLUMNS}), StepSequences.empty())
        self._wait()
        self._pool.shutdown()
        assert self._writer is not None
        self._writer.close()

    def _open(self, schema: pa.Schema) -> None:
        self._writer = open_steps_file(self.out_dir, schema)
        self._schema = self._writer.schema

    def _widen(self, schema: pa.Schema) -> None:
        """Reopen the file with the new operator columns of `schema` too, the steps written so far copied."""
        assert self._writer is not None and self._schema is not None
        self._writer.close()
        path = self.out_dir / STEPS_FILE
        kept = path.with_name(STEPS_FILE + ".part")
        path.replace(kept)
        ops = sorted({n for n in [*self._schema.names, *schema.names] if n.startswith("op_")})
        self._open(step_schema([*[n for n in self._schema.names if n not in TRACE_STEP_COLUMNS
                                  and not n.startswith("op_")], *ops]))
        assert self._writer is not None and self._schema is not None
        source = pq.ParquetFile(kept)
        for i in range(source.num_row_groups):
            self._writer.write_table(_conform(source.read_row_group(i), self._schema), row_group_size=ROW_GROUP_STEPS)
        kept.unlink()


# steps.parquet by a forked process (`_ForkedWriter`): Linux only (a fork elsewhere is unsafe with threads or absent).
FORKED = sys.platform == "linux" and hasattr(os, "fork")


class _ForkedWriter:
    """A child process forked from the simulation's that writes a StepTraceStream's parts as the simulation hands
    them over, so that the second core builds each part's table (its sequences' request ids, the per-operator
    breakdown) and encodes it while the simulation goes on: the simulation's process only pickles the part's arrays
    into a pipe (protocol 5: the arrays' bytes written as they are, no copy of them into the pickle). The child,
    a copy of the process at `start`, holds the deployment and the stream; a thread of it reads the pipe while it
    writes, at most `QUEUED` parts ahead (then the pipe fills and the simulation waits: memory stays bounded). The
    file is the in-process writer's (the same code on the same parts). `finish` waits for the child and raises
    what it raised; the child ends with the pipe (the simulation's process gone) and on Ctrl-C."""

    QUEUED = 2

    def __init__(self, pid: int, data_fd: int, status_fd: int) -> None:
        self.pid, self._data_fd, self._status_fd = pid, data_fd, status_fd
        self._failure: str | None = None  # (once the child is reaped: None, or why it failed)
        self._reaped = False

    @classmethod
    def start(cls, stream: StepTraceStream) -> _ForkedWriter:
        data_r, data_w = os.pipe()
        status_r, status_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(data_w)
            os.close(status_r)
            _child_writes(stream, data_r, status_w)
        os.close(data_r)
        os.close(status_w)
        import fcntl  # (Linux: where FORKED)

        with contextlib.suppress(OSError, AttributeError):  # a larger pipe: fewer waits for the child's reader
            fcntl.fcntl(data_w, fcntl.F_SETPIPE_SZ, 1 << 20)  # type: ignore[attr-defined]
        return cls(pid, data_w, status_r)

    def send(self, kind: str, payload: object) -> None:
        """A part ("part": its step rows' columns and its sequences) or the CSV tables ("tables": file name ->
        columns) to the child."""
        buffers: list[pickle.PickleBuffer] = []
        header = pickle.dumps((kind, payload), protocol=5, buffer_callback=buffers.append)
        raws = [buffer.raw() for buffer in buffers]
        lengths = [len(header), *(raw.nbytes for raw in raws)]
        if self._reaped:
            self._reap()  # (raises why)
        try:
            _write_all(self._data_fd, [struct.pack(f"<{len(lengths) + 1}q", len(lengths), *lengths), header, *raws])
        except BrokenPipeError:  # the child ended: say why
            self._reap()

    def finish(self) -> None:
        if not self._reaped:
            with contextlib.suppress(BrokenPipeError):
                _write_all(self._data_fd, [struct.pack("<q", 0)])  # (no buffers: the end)
        self._reap()

    def _reap(self) -> None:
        """Wait for the child (once); raise why it failed, if it did."""
        if not self._reaped:
            self._reaped = True
            os.close(self._data_fd)
            chunks = []
            while chunk := os.read(self._status_fd, 1 << 16):
                chunks.append(chunk)
            os.close(self._status_fd)
            _, status = os.waitpid(self.pid, 0)
            message = b"".join(chunks).decode(errors="replace")
            if status != 0 or message != "ok":
                self._failure = message or f"exit status {status}"
        if self._failure is not None:
            raise RuntimeError(f"writing steps.parquet and the CSV files (a child process) failed: {self._failure}")


def _write_all(fd: int, pieces: list[Any]) -> None:
    for piece in pieces:
        view = memoryview(piece).cast("B")
        while len(view):
            view = view[os.write(fd, view):]


def _read_exact(reader: Any, n: int) -> bytearray:
    data = bytearray(n)
    view = memoryview(data)
    while len(view):
        got = reader.readinto(view)
        if not got:
            raise EOFError("the simulation's process closed the pipe before the last part")
        view = view[got:]
    return data


def _child_writes(stream: StepTraceStream, data_fd: int, status_fd: int) -> None:
    """The forked child's whole life: write the parts read from `data_fd` into the stream, then finish the file;
    b"ok" or the traceback to `status_fd`."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # (Ctrl-C reaches the process group: end as the parent does)
        gc.disable()  # (the child makes no cycles it must collect, and a collection touches every inherited page)
        # The reader thread takes the GIL between two reads of the pipe: at once, not after the 5 ms a thread
        # holding it may keep it, or the pipe stays full and the simulation's process waits.
        sys.setswitchinterval(1e-4)
        stream._child = None
        parts: queue.Queue[Any] = queue.Queue(maxsize=_ForkedWriter.QUEUED)
        threading.Thread(target=_read_parts, args=(data_fd, parts), daemon=True).start()
        while (message := parts.get()) is not None:
            if isinstance(message, BaseException):
                raise message
            kind, payload = message
            if kind == "part":
                columns, seqs = payload
                stream.write(Table(columns), seqs)
            else:
                stream.write_tables({name: Table(columns) for name, columns in payload.items()})
        stream.close()
        os.write(status_fd, b"ok")
        code = 0
    except BaseException:
        with contextlib.suppress(OSError):
            os.write(status_fd, traceback.format_exc().encode())
    finally:
        os._exit(code)


def _read_parts(data_fd: int, parts: queue.Queue[Any]) -> None:
    """The child's reader thread: each message (its pickle, then its arrays' bytes) unpickled onto `parts`, None at
    the end, an exception where reading failed."""
    try:
        with open(data_fd, "rb", buffering=0) as reader:
            while True:
                (count,) = struct.unpack("<q", _read_exact(reader, 8))
                if count == 0:
                    parts.put(None)
                    return
                lengths = struct.unpack(f"<{count}q", _read_exact(reader, 8 * count))
                header = _read_exact(reader, lengths[0])
                buffers = [_read_exact(reader, n) for n in lengths[1:]]
                parts.put(pickle.loads(header, buffers=buffers))
    except BaseException as error:  # (handed to the child's main thread, which raises it)
        parts.put(error)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table`'s columns in `schema`'s order, 0.0 for an operator it lacks."""
    zeros = None
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(table.column(field.name))
        else:
            zeros = zeros if zeros is not None else _arrow(np.zeros(table.num_rows), field.type)
            columns.append(zeros)
    return pa.Table.from_arrays(columns, schema=schema)


def _offsets(offsets: np.ndarray) -> pa.Array:
    """List offsets as `pa.list_` holds them (int32)."""
    assert offsets[-1] < 2**31, "more list values than a pa.list_ column holds"
    return _arrow(offsets.astype(np.int32), pa.int32())


def _array(column: object, typ: pa.DataType) -> pa.Array:
    return column if isinstance(column, pa.Array) else _arrow(column, typ)


# The arrow types of the trace's numbers and the numpy types that hold them alike.
_NUMPY_TYPES = {pa.int64(): np.dtype(np.int64), pa.int32(): np.dtype(np.int32), pa.float64(): np.dtype(np.float64),
                pa.bool_(): np.dtype(np.bool_)}
_ARROW_TYPES = {dtype: typ for typ, dtype in _NUMPY_TYPES.items()}


def _arrow(values: Any, typ: pa.DataType) -> pa.Array:
    """`pa.array(values, type=typ)` of a numpy array already of `typ`'s numpy type, or of a list of str, built from
    its buffers: pyarrow's `pa.array` first asks whether `values` is a pandas object, which imports pandas (~0.2 s
    of a run's start; pyarrow's pandas-shim `_PandasAPIShim._check_import`). Anything else goes to `pa.array`."""
    if isinstance(values, list) and typ == pa.string() and all(type(v) is str for v in values):
        encoded = [v.encode() for v in values]
        ends = np.cumsum([len(b) for b in encoded], dtype=np.int64)
        if not len(ends) or ends[-1] < 2**31:
            offsets = np.concatenate([np.zeros(1, np.int32), ends.astype(np.int32)])
            return pa.Array.from_buffers(typ, len(encoded), [None, pa.py_buffer(offsets),
                                                             pa.py_buffer(b"".join(encoded))])
    if isinstance(values, np.ndarray) and values.ndim == 1 and _NUMPY_TYPES.get(typ) == values.dtype:
        if typ == pa.bool_():
            data = np.packbits(values, bitorder="little")  # (arrow's booleans: a bit each, least significant first)
        else:
            data = np.ascontiguousarray(values)
        return pa.Array.from_buffers(typ, len(values), [None, pa.py_buffer(data)])
    return pa.array(values, type=typ)


def run_metadata(deployment: Deployment, summary: dict[str, object]) -> RunMetadata:
    """run.json of the step trace: what was simulated, on what, with which versions."""
    quant = deployment.quant
    record = dict(deployment.engine_record)
    typed = {name: record.pop(name) for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len",
                                                 "enable_chunked_prefill", "block_size", "enable_prefix_caching",
                                                 "dtype", "quantization", "kv_cache_dtype", "tensor_parallel_size")}
    engine_config = EngineConfigRecord.from_json(
        {**typed, "num_kv_blocks": deployment.cache_config.num_blocks, **record}, "simulator run metadata")
    seed, workload, num_replicas = summary["seed"], summary["workload"], summary["num_replicas"]
    assert isinstance(seed, int) and isinstance(workload, str) and isinstance(num_replicas, int)
    return RunMetadata(
        source="simulator",
        model=dataclasses.asdict(deployment.spec),
        dtypes={"activations": quant.act_dtype, "weights_gemm": quant.gemm_dtype, "kv_cache": quant.kv_dtype,
                "quantization": quant.quantization},
        engine_config=engine_config,
        device={"hardware_profile": deployment.hw.id, "name": deployment.hw.name},
        # (pandas' version as installed: the run imports no pandas)
        library_versions={"roofline": __version__, "numpy": np.__version__,
                          "pandas": importlib.metadata.version("pandas"), "pyarrow": pa.__version__},
        seed=seed, workload=workload, num_replicas=num_replicas,
        # the load (rate, concurrency, dataset) that was simulated, and the KV capacity's terms
        extra={"kv_cache": summary["kv_cache"], "offered_load": summary.get("offered_load")},
    )
