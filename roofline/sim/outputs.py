"""What `roofline simulate --out DIR` writes: requests.csv (per request), steps.parquet + run.json (a step trace
as the engine writes one, `engine.core.trace`, plus the replica, the predicted time and its per-operator
breakdown), timeseries.csv (KV usage, running and waiting requests per step) and summary.json; all from the run's
numpy columns (`roofline.sim.table`), pyarrow for the Parquet file, no pandas (a column the CSV writer does not know
is handed to pandas' own writer)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import math
import os
import re
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
            write_csv(result.request_table, out_dir / "requests.csv")
            write_csv(result.timeseries_table, out_dir / "timeseries.csv")
            (out_dir / "summary.json").write_text(to_json(summary))
            stream.close()
            write_run_file(out_dir, metadata)
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

    def write(self, steps: Columns, seqs: StepSequences) -> None:
        table = steps_table(self.deployment, steps, seqs)
        self._wait()
        if self._schema is None:
            self._open(table.schema)
        assert self._schema is not None and self._writer is not None
        if set(table.schema.names) - set(self._schema.names):
            self._widen(table.schema)
        self._pending = self._pool.submit(self._writer.write_table, _conform(table, self._schema),
                                          row_group_size=ROW_GROUP_STEPS)

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()  # (raises what the thread raised)
            self._pending = None

    def close(self) -> None:
        """Finish the file (a run of no steps: the empty table's)."""
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
