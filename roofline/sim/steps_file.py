"""steps.parquet and sequences.parquet of a simulation (`roofline simulate --out`): the step trace's schema version 2
(`engine.core.trace.FLAT_SCHEMA_VERSION`): the step rows (the engine's columns without the per-sequence lists, plus the
replica, the predicted time and its per-operator breakdown) and one row per sequence of every step (its query and
context lengths, whether it emits, its request's row of requests.csv), built in bulk from the run's numpy columns,
their writer in parts, and run.json; pyarrow, no pandas. Imported only where the file
is written (`roofline.sim.outputs`: by the writer process where the platform forks), so that the simulation's
process need not import pyarrow."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from engine.core.step_record import StepSequences
from engine.core.trace import (
    FLAT_SCHEMA_VERSION,
    STEPS_FILE,
    EngineConfigRecord,
    RunMetadata,
    open_sequences_file,
    open_steps_file,
    sequence_schema,
    step_lists_table,
    step_schema,
    write_run_file,
)
from engine.core.trace import STEP_COLUMNS as TRACE_STEP_COLUMNS
from roofline import __version__
from roofline.sim.deployment import Deployment
from roofline.sim.recorder import STEP_COLUMNS, SimulationResult
from roofline.sim.table import Columns, Table, column

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

# Steps per Parquet row group of a simulation's steps.parquet, a part of the steps as the writer gets them
# (`roofline.sim.simulator.STEPS_PER_PART`): the writer encodes a row group at once (pyarrow's `write_table`), so what
# is left to encode when the simulation ends is at most one; 2,048 steps of sharegpt ~0.015 s, 8,192 (the engine's
# traces' row groups, `engine.core.trace.ROW_GROUP_STEPS`) ~0.06 s, which the simulation's process waited for at
# the end of a 10,000-request run. Smaller row groups cost the encoding more: 1,024 steps +20 % CPU, 2,048 +5 %, the
# file +1.5 % (docs/benchmark-history/2026-12-01c-outspeed4.md).
ROW_GROUP_STEPS = 2048


def step_table(deployment: Deployment, result: SimulationResult) -> pa.Table:
    """The run's steps as `engine.core.trace.read_trace_table` reads them back from its files: the step-trace
    columns with the per-sequence lists, plus `replica`, `request_ids`, `predicted_s` (the time the step was charged)
    and the cost model's per-operator breakdown as `op_<name>_s` (`step_tables`, joined: `step_lists_table`)."""
    steps, seqs, _ = step_tables(deployment, result)
    return step_lists_table(steps, seqs, _arrow(_request_id_list(result), pa.string()))


def step_tables(deployment: Deployment, result: SimulationResult) -> tuple[pa.Table, pa.Table, np.ndarray]:
    """The run's steps.parquet and sequences.parquet tables (`steps_table`, `sequences_table`), each sequence's
    request its row of the request table, and where each step's sequences start (n + 1)."""
    seqs = result.step_seqs
    return (steps_table(deployment, result.step_table, seqs),
            sequences_table(seqs, request_rows(seqs, _request_id_list(result))), seqs.offsets)


def _request_id_list(result: SimulationResult) -> list[str]:
    ids = result.request_table["request_id"]
    return ids if isinstance(ids, list) else list(ids)


def steps_table(deployment: Deployment, steps: Columns, seqs: StepSequences) -> pa.Table:
    """steps.parquet's rows of some steps (schema version 2: no per-sequence lists): their rows of the steps table,
    `replica`, `predicted_s` and the per-operator breakdown of their sequences, built column by column from arrays
    (the breakdown in bulk: `StepCostModel.breakdown_columns`)."""
    breakdown = deployment.cost_model.breakdown_columns(seqs)
    columns: dict[str, object] = {name: column(steps, name) for name in TRACE_STEP_COLUMNS if name in steps.columns}
    columns["arrival_cutoff_s"] = column(steps, "start_s")  # a schedule at t sees every arrival by t
    columns["predicted_s"] = column(steps, "duration_s")
    columns["replica"] = column(steps, "replica")
    for name in sorted(breakdown):
        columns[f"op_{name}_s"] = breakdown[name]
    schema = step_schema([n for n in columns if n not in TRACE_STEP_COLUMNS], FLAT_SCHEMA_VERSION)
    return pa.table({n: _array(columns[n], schema.field(n).type) for n in schema.names}, schema=schema)


_SEQUENCE_SCHEMA = sequence_schema()


def sequences_table(seqs: StepSequences, rows: np.ndarray) -> pa.Table:
    """sequences.parquet's rows of some steps: every sequence, step after step (query, context, emits: `seqs`'
    arrays as they are), `rows` each one's request as its row of requests.csv (`request_rows`)."""
    query, context, emits = seqs.concatenated
    return pa.Table.from_arrays([_arrow(query, pa.int32()), _arrow(context, pa.int32()), _arrow(emits, pa.bool_()),
                                 _arrow(rows, pa.int32())], schema=_SEQUENCE_SCHEMA)


def request_rows(seqs: StepSequences, request_ids: list[str] | None = None) -> np.ndarray:
    """Each sequence's request as its row of the request table (int32): as the sequences were recorded
    (`StepRecords(row_of=...)`: their names' rows), else each name's position in `request_ids`."""
    if seqs.request_names is None:
        return seqs.sequence_rows()
    assert request_ids is not None, "sequences recorded by name: the run's request ids are needed"
    row_of = {request_id: row for row, request_id in enumerate(request_ids)}
    rows = np.fromiter((row_of[name] for name in seqs.request_names), np.int32, len(seqs.request_names))
    return rows[seqs.request_index]


@contextlib.contextmanager
def _system_errors() -> Iterator[None]:
    """pyarrow's OSError of a write the machine refused ("Error writing bytes to file. Detail: [errno 27] File too
    large") raised as the system's (its errno and `os.strerror`), as Python's own writes raise it: the command line
    prints that one line (`roofline.cli`), whichever file's write failed first."""
    try:
        yield
    except OSError as exc:
        if exc.errno is None or exc.strerror == os.strerror(exc.errno):
            raise
        raise OSError(exc.errno, os.strerror(exc.errno), exc.filename) from exc


class StepsFileWriter:
    """steps.parquet and sequences.parquet written in parts as the simulation runs
    (`roofline.sim.outputs.StepTraceStream`): each part of `roofline.sim.simulator.STEPS_PER_PART` steps becomes its
    rows of the files and is dropped, so `--out` holds a part's sequences, not the whole run's (a sequence per
    request and step: 450 million for 1,000,000 ShareGPT requests). The parts are multiples of the files' row groups
    (`write_sequences`: the sequences of a row group's steps), so the files are the ones the whole tables written at
    once give (one part: the same bytes). A part's sequences name their requests by row (`StepRecords(row_of=...)`).
    An operator absent from a part (no prefill in it, say) is 0.0 there, as in the whole table; one first met in a
    later part widens steps.parquet: what was written is copied, row group by row group, into a file with the
    column (0.0 in the earlier steps)."""

    def __init__(self, out_dir: Path, deployment: Deployment, threaded: bool = True) -> None:
        self.out_dir, self.deployment = out_dir, deployment
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None
        self._sequences: pq.ParquetWriter | None = None
        # A part's Parquet encoding runs on a second thread (without the GIL) while the simulation goes on; one
        # part at a time, so that at most two parts' tables are alive. Not `threaded` (the forked writer process,
        # which has a core of its own beside the simulation's): encoded at once, no third busy thread.
        self._pool: ThreadPoolExecutor | None = None
        if threaded:  # (imported here: the forked writer, which writes unthreaded, need not import it)
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1)
        self._pending: Future[None] | None = None

    @_system_errors()
    def write(self, steps: Columns, seqs: StepSequences) -> None:
        table = steps_table(self.deployment, steps, seqs)
        sequences = sequences_table(seqs, request_rows(seqs))
        self._wait()
        if self._schema is None:
            self._open(table.schema)
        assert self._schema is not None and self._writer is not None and self._sequences is not None
        if set(table.schema.names) - set(self._schema.names):
            self._widen(table.schema)
        if self._pool is None:
            _write_part(self._writer, _conform(table, self._schema), self._sequences, sequences, seqs.offsets)
            return
        self._pending = self._pool.submit(_write_part, self._writer, _conform(table, self._schema), self._sequences,
                                          sequences, seqs.offsets)

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()  # (raises what the thread raised)
            self._pending = None

    @_system_errors()
    def close(self) -> None:
        """Finish the file (a run of no steps: the empty table's)."""
        if self._writer is None:
            self.write(Table({name: np.zeros(0) for name in STEP_COLUMNS}), StepSequences.empty())
        self._wait()
        if self._pool is not None:
            self._pool.shutdown()
        assert self._writer is not None and self._sequences is not None
        self._writer.close()
        self._sequences.close()

    def _open(self, schema: pa.Schema) -> None:
        self._writer = open_steps_file(self.out_dir, schema, FLAT_SCHEMA_VERSION)
        self._schema = self._writer.schema
        if self._sequences is None:
            self._sequences = open_sequences_file(self.out_dir)

    def _widen(self, schema: pa.Schema) -> None:
        """Reopen the file with the new operator columns of `schema` too, the steps written so far copied."""
        assert self._writer is not None and self._schema is not None
        self._writer.close()
        path = self.out_dir / STEPS_FILE
        kept = path.with_name(STEPS_FILE + ".part")
        path.replace(kept)
        ops = sorted({n for n in [*self._schema.names, *schema.names] if n.startswith("op_")})
        self._open(step_schema([*[n for n in self._schema.names if n not in TRACE_STEP_COLUMNS
                                  and not n.startswith("op_")], *ops], FLAT_SCHEMA_VERSION))
        assert self._writer is not None and self._schema is not None
        source = pq.ParquetFile(kept)
        for i in range(source.num_row_groups):
            self._writer.write_table(_conform(source.read_row_group(i), self._schema), row_group_size=ROW_GROUP_STEPS)
        kept.unlink()


def _write_part(steps_writer: pq.ParquetWriter, steps: pa.Table, sequences_writer: pq.ParquetWriter,
                sequences: pa.Table, offsets: np.ndarray) -> None:
    """A part's rows of both files (the steps in row groups of `ROW_GROUP_STEPS`, the sequences of the same steps in
    theirs: `write_sequences`; `offsets`: where each step's sequences start, n + 1)."""
    steps_writer.write_table(steps, row_group_size=ROW_GROUP_STEPS)
    write_sequences(sequences_writer, sequences, offsets)


def write_sequences(writer: pq.ParquetWriter, sequences: pa.Table, offsets: np.ndarray) -> None:
    """sequences.parquet's rows of some steps (`offsets`: where each step's start, n + 1), a row group for the
    sequences of each `ROW_GROUP_STEPS` steps, as steps.parquet's row groups: so the parts (multiples of them) give
    the file of the whole table (a part's ~320,000 sequences of sharegpt: pyarrow's default row groups hold
    1,048,576). (The offsets, not the table's num_seqs: a ChunkedArray's `to_numpy` imports pandas.)"""
    ends = np.asarray(offsets)[ROW_GROUP_STEPS::ROW_GROUP_STEPS].tolist()
    start = 0
    for end in [*ends, len(sequences)]:
        if end > start or not start:  # (no sequences at all: an empty row group, as steps.parquet's)
            writer.write_table(sequences.slice(start, end - start), row_group_size=max(1, end - start))
        start = end


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table`'s columns in `schema`'s order, 0.0 for an operator it lacks. (Its columns by name in one pass:
    `Table.column_names` and `Table.column(name)` each wrap every field of the schema again, ~2 ms a part of 35
    columns looked up one by one.)"""
    by_name = dict(zip(table.column_names, table.columns))
    zeros = None
    columns = []
    for field in schema:
        column = by_name.get(field.name)
        if column is None:
            zeros = zeros if zeros is not None else _arrow(np.zeros(table.num_rows), field.type)
            column = zeros
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _array(column: object, typ: pa.DataType) -> pa.Array:
    return column if isinstance(column, pa.Array) else _arrow(column, typ)


# The arrow types of the trace's numbers and the numpy types that hold them.
_NUMPY_TYPES = {pa.int64(): np.dtype(np.int64), pa.int32(): np.dtype(np.int32), pa.float64(): np.dtype(np.float64),
                pa.bool_(): np.dtype(np.bool_)}


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
                          "pandas": installed_version("pandas"), "pyarrow": pa.__version__},
        seed=seed, workload=workload, num_replicas=num_replicas,
        # the load (rate, concurrency, dataset) that was simulated, and the KV capacity's terms
        extra={"kv_cache": summary["kv_cache"], "offered_load": summary.get("offered_load")},
    )


@functools.cache
def installed_version(distribution: str) -> str:
    """The installed version of `distribution`, `importlib.metadata.version(distribution)` (read by the writer
    process while it waits for the first part, not at the run's end: `roofline.sim.outputs`). Where the first folder
    on `sys.path` that holds the distribution's metadata holds one `<name>-<version>.dist-info` folder of it and
    nothing else of it, its METADATA file's `Version` header is read here, as importlib.metadata finds and reads it
    (its discovery: the folders in path order, names compared normalized), without importing importlib.metadata and
    the `email` package it parses the file with (docs/benchmark-history/2026-12-01d-outspeed5.md); any other case
    (an egg, a zip, two candidates, an unusual file) by `importlib.metadata.version`."""
    version = _dist_info_version(distribution)
    if version is not None:
        return version
    import importlib.metadata

    return importlib.metadata.version(distribution)


def _normalized(name: str) -> str:
    """A distribution name as importlib.metadata compares them (`Prepared.normalize`)."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def _dist_info_version(distribution: str) -> str | None:
    """`installed_version`'s plain case, or None."""
    wanted = _normalized(distribution)
    for entry in sys.path:
        folder = entry or "."
        if not os.path.isdir(folder):
            if os.path.exists(folder):
                return None  # (a zip on the path: importlib.metadata's)
            continue
        try:
            children = os.listdir(folder)
        except OSError:
            return None
        found = [child for child in children if child.lower().endswith((".dist-info", ".egg-info"))
                 and _normalized(child.lower().rpartition(".")[0].partition("-")[0]) == wanted]
        if not found:
            continue
        if len(found) != 1 or not found[0].lower().endswith(".dist-info"):
            return None
        try:
            with open(os.path.join(folder, found[0], "METADATA"), encoding="utf-8") as metadata:
                header = metadata.read().split("\n\n", 1)[0]
        except OSError:
            return None
        versions = re.findall(r"^Version:[ \t]*(\S+)[ \t]*$", header, flags=re.M | re.I)
        return versions[0] if len(versions) == 1 else None
    return None


def write_steps_file(out_dir: Path, deployment: Deployment, tables: tuple[pa.Table, pa.Table, np.ndarray],
                     summary: dict[str, object]) -> None:
    """steps.parquet and sequences.parquet of a whole run's `tables` (`step_tables`: with where each step's sequences
    start), the files `StepsFileWriter` writes in parts (the same row groups), and run.json."""
    steps, sequences, offsets = tables
    with _system_errors(), open_steps_file(out_dir, steps.schema, FLAT_SCHEMA_VERSION) as writer, \
            open_sequences_file(out_dir) as sequences_writer:
        _write_part(writer, steps.replace_schema_metadata(writer.schema.metadata), sequences_writer, sequences, offsets)
    write_run_json(out_dir, deployment, summary)


def write_run_json(out_dir: Path, deployment: Deployment, summary: dict[str, object]) -> None:
    """run.json of the step trace in `out_dir` (`run_metadata`), schema version 2."""
    write_run_file(out_dir, run_metadata(deployment, summary), FLAT_SCHEMA_VERSION)
