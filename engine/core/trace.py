"""The step trace: what a run executed, step by step, written by the engine (measured) and the simulator
(predicted), read by `roofline compare` and `calibrate`. Schema documented in docs/step_trace.md.

    writer = StepTraceWriter()
    writer.add_plan(plan, start_s=t0, duration_s=dt, arrival_cutoff_s=t0, execute_s=...)   # one per step
    write_trace(out_dir, writer, RunMetadata(...), requests=finished_requests)
    steps, metadata = read_trace(out_dir)          # pandas DataFrame, RunMetadata; ValueError on a wrong schema
    per_request = read_requests(out_dir)           # pandas DataFrame

A trace directory holds `steps.parquet` (one row per executed step), `run.json` (run metadata: `RunMetadata`,
the same fields whichever of the engine, the simulator or real vLLM wrote it) and `requests.csv` (per-request
metrics). The same content gives the same bytes: columns in a fixed order, no timestamps beyond the ones in the
data, JSON with sorted keys, floats written by `repr` (shortest round-trip).

Two layouts of the steps' sequences (docs/step_trace.md), both read into the same DataFrame:

- schema version 1 (`SCHEMA_VERSION`; `write_trace`: the engine's and real vLLM's traces): every step's sequences
  as list columns of steps.parquet (`query_lens`, `context_lens`, `emits`, optionally `request_ids`);
- schema version 2 (`FLAT_SCHEMA_VERSION`; the simulator's `roofline simulate --out`, `roofline.sim.steps_file`):
  steps.parquet without list columns, and `sequences.parquet`, one row per sequence of every step in step order (a
  step's sequences are the next `num_seqs` rows), whose `request_index` is the request's row of requests.csv. A
  list column's values cost Parquet repetition and definition levels, built and encoded per column (most of a
  simulation's `--out` writer: docs/benchmark-history/2026-12-01f-outspeed7.md); flat columns have none.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from engine.core import metrics
from engine.core.request import Request
from engine.core.scheduler import StepPlan

if TYPE_CHECKING:
    import pandas as pd

SCHEMA_VERSION = 1  # the list layout (`write_trace`)
FLAT_SCHEMA_VERSION = 2  # steps.parquet + sequences.parquet (`open_steps_file(..., FLAT_SCHEMA_VERSION)`)
SCHEMA_VERSIONS = (SCHEMA_VERSION, FLAT_SCHEMA_VERSION)
STEPS_FILE = "steps.parquet"
SEQUENCES_FILE = "sequences.parquet"
RUN_FILE = "run.json"
REQUESTS_FILE = "requests.csv"
_VERSION_KEY = b"roofline.step_trace.schema_version"

# Every trace has these columns, in this order.
STEP_COLUMNS: dict[str, pa.DataType] = {
    "step_index": pa.int64(),
    "start_s": pa.float64(),  # step start, seconds since the run started
    "duration_s": pa.float64(),  # the whole iteration: schedule + execute + sample + bookkeeping
    "arrival_cutoff_s": pa.float64(),  # requests that arrived by then were visible to this step's schedule
    "num_seqs": pa.int64(),
    "num_batched_tokens": pa.int64(),
    "num_prefill_tokens": pa.int64(),
    "num_decode_tokens": pa.int64(),
    "query_lens": pa.list_(pa.int32()),  # per sequence: tokens computed this step
    "context_lens": pa.list_(pa.int32()),  # per sequence: tokens already in the KV cache
    "emits": pa.list_(pa.bool_()),  # per sequence: a token was sampled (logits computed)
    "num_kv_blocks_used": pa.int64(),  # after this step's allocations
    "num_kv_blocks_total": pa.int64(),
    "num_preemptions": pa.int64(),
    "num_new_prefix_hit_tokens": pa.int64(),
    "num_running": pa.int64(),  # after scheduling this step
    "num_waiting": pa.int64(),
}
# Columns a trace may add (after the required ones); any `op_<name>_s` (float64) is allowed as well.
OPTIONAL_STEP_COLUMNS: dict[str, pa.DataType] = {
    "schedule_s": pa.float64(),  # engine: the parts of duration_s
    "execute_s": pa.float64(),
    "sample_s": pa.float64(),
    "bookkeeping_s": pa.float64(),
    "frontend_s": pa.float64(),  # vLLM: output processing after update_from_output, outside duration_s
    "predicted_s": pa.float64(),  # simulator: the cost model's step time
    "request_ids": pa.list_(pa.string()),
    "replica": pa.int64(),  # simulator: which replica ran the step (step_index counts per replica)
}
_OP_COLUMN = re.compile(r"^op_[a-z0-9_]+_s$")
# Schema version 2's sequences.parquet: one row per sequence, step after step, all non-null; what each list column of
# version 1 is made of (`request_ids`: requests.csv's `request_id` at `request_index`, a row of that file).
SEQUENCE_COLUMNS: dict[str, pa.DataType] = {
    "query_len": pa.int32(),
    "context_len": pa.int32(),
    "emits": pa.bool_(),
    "request_index": pa.int32(),
}
LIST_COLUMNS = {"query_lens": "query_len", "context_lens": "context_len", "emits": "emits",
                "request_ids": "request_index"}
REQUIRED_METADATA_KEYS = ("schema_version", "source", "model", "dtypes", "engine_config", "device",
                          "library_versions", "seed")
SOURCES = ("engine", "simulator", "vllm")  # who wrote the trace: this project's engine, the simulator, real vLLM

REQUEST_COLUMNS = (
    "request_id",
    "arrival_s",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
    "num_prompt_tokens",
    "num_output_tokens",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "num_preemptions",
    "num_prefix_hit_tokens",
)
_REQUEST_INT_COLUMNS = ("num_prompt_tokens", "num_output_tokens", "num_preemptions", "num_prefix_hit_tokens")


@dataclass(frozen=True)
class EngineConfigRecord:
    """The engine settings a run used, under vLLM's flag names: the same keys from every source. `extra` holds
    what only one source knows (the engine's scheduler policy, vLLM's async scheduling, the simulator's memory
    utilization); run.json writes it flat, next to these fields."""

    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_chunked_prefill: bool
    block_size: int  # tokens per KV block
    enable_prefix_caching: bool
    num_kv_blocks: int  # vLLM's num_gpu_blocks: counts the null block 0 (steps' num_kv_blocks_total + 1)
    dtype: str  # --dtype, --quantization, --kv-cache-dtype as the run was given or resolved them
    quantization: str = "none"
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**self.extra, **{f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}}

    @classmethod
    def from_json(cls, record: Mapping[str, Any], where: str) -> EngineConfigRecord:
        typed = {f.name: f for f in fields(cls) if f.name != "extra"}
        missing = [name for name, f in typed.items() if name not in record and f.default is dataclasses.MISSING]
        if missing:
            raise ValueError(f"{where}: engine_config: missing key(s) {', '.join(missing)}")
        values = {name: record[name] for name in typed if name in record}
        for name, value in values.items():
            expected = _ENGINE_CONFIG_TYPES[name]
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise ValueError(f"{where}: engine_config.{name}: {value!r} is not a {expected.__name__}")
        return cls(**values, extra={k: v for k, v in record.items() if k not in typed})


_ENGINE_CONFIG_TYPES: dict[str, type] = {
    "max_num_seqs": int, "max_num_batched_tokens": int, "max_model_len": int, "enable_chunked_prefill": bool,
    "block_size": int, "enable_prefix_caching": bool, "num_kv_blocks": int, "dtype": str, "quantization": str,
    "kv_cache_dtype": str, "tensor_parallel_size": int,
}


@dataclass(frozen=True)
class RunMetadata:
    """run.json: what ran, on what, with which versions; one record for engine, simulator and vLLM traces.
    `extra` holds the keys only some sources write (the engine's threads, vLLM's version and warm-up, the
    simulator's offered load and KV-capacity terms); run.json writes it flat, next to these fields."""

    source: str  # one of SOURCES
    model: dict[str, Any]  # the model spec's fields (dataclasses.asdict of engine.core.model_spec.ModelSpec)
    dtypes: dict[str, Any]  # what the run computed in: activations, kv_cache, and weights or the GEMM dtype
    engine_config: EngineConfigRecord
    device: dict[str, Any]  # NVML name, memory, clocks; CPU model and threads; the simulator's hardware profile
    library_versions: dict[str, Any]
    seed: int
    workload: str | None = None
    num_replicas: int = 1  # the simulator's replicas (a step's `replica` column); 1 for measured runs
    duration_s: float | None = None  # measured runs: the whole run's wall time
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"run metadata: source {self.source!r} is not allowed; allowed: {', '.join(SOURCES)}")
        if not isinstance(self.model, dict) or not isinstance(self.model.get("name"), str):
            raise ValueError("run metadata: model must be the model spec's fields (a JSON object with a name)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"run metadata: seed {self.seed!r} is not an integer")
        if isinstance(self.num_replicas, bool) or not isinstance(self.num_replicas, int) or self.num_replicas < 1:
            raise ValueError(f"run metadata: num_replicas {self.num_replicas!r} is not a positive integer")
        for name in ("dtypes", "device", "library_versions"):
            if not isinstance(getattr(self, name), dict):
                raise ValueError(f"run metadata: {name} must be a JSON object")
        clash = set(self.extra) & {f.name for f in fields(self)} | ({"schema_version"} & set(self.extra))
        if clash:
            raise ValueError(f"run metadata: extra key(s) {', '.join(sorted(clash))} are fields")

    @property
    def model_name(self) -> str:
        return str(self.model["name"])

    def with_extra(self, **values: Any) -> RunMetadata:
        """This record with `values` set: a field by its name, anything else into `extra`."""
        names = {f.name for f in fields(self)}
        known = {k: v for k, v in values.items() if k in names}
        return dataclasses.replace(self, **known, extra={**self.extra, **{k: v for k, v in values.items()
                                                                          if k not in names}})

    def to_json(self) -> dict[str, Any]:
        """The run.json object (without schema_version, which the writer adds)."""
        out = {**self.extra, **{f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}}
        out["engine_config"] = self.engine_config.to_json()
        return out

    @classmethod
    def from_json(cls, meta: Mapping[str, Any], where: str = "run metadata") -> RunMetadata:
        """Validate a run.json object (old traces upgraded first: `_upgrade_legacy`); ValueError naming `where`."""
        meta = _upgrade_legacy(meta)
        missing = [key for key in REQUIRED_METADATA_KEYS if key not in meta and key != "schema_version"]
        if missing:
            raise ValueError(f"{where}: missing key(s) {', '.join(missing)}")
        if not isinstance(meta["engine_config"], Mapping):
            raise ValueError(f"{where}: engine_config must be a JSON object")
        names = {f.name for f in fields(cls)} - {"extra"}
        values = {k: v for k, v in meta.items() if k in names}
        values["engine_config"] = EngineConfigRecord.from_json(meta["engine_config"], where)
        extra = {k: v for k, v in meta.items() if k not in names and k != "schema_version"}
        try:
            return cls(**values, extra=extra)
        except ValueError as exc:
            raise ValueError(f"{where}: {str(exc).removeprefix('run metadata: ')}") from None


def _upgrade_legacy(meta: Mapping[str, Any]) -> dict[str, Any]:
    """run.json as written before `RunMetadata` (same schema_version 1), in today's keys:
    the simulator's `kind: "simulation"` and model id -> `source: "simulator"` and `{"name": id}` (the calibration
    loader resolves a name-only model by its id); engine and vLLM engine_config without dtype -> the weights'
    torch dtype, `quantization: none`, `kv_cache_dtype: auto`; the simulator's engine_config without
    num_kv_blocks -> its `kv_cache.num_gpu_blocks`."""
    out = dict(meta)
    if "source" not in out and out.get("kind") == "simulation":
        out.pop("kind")
        out["source"] = "simulator"
    if isinstance(out.get("model"), str):
        out["model"] = {"name": out["model"]}
    config = out.get("engine_config")
    if isinstance(config, Mapping):
        config = dict(config)
        dtypes = out.get("dtypes")
        dtypes = dtypes if isinstance(dtypes, Mapping) else {}
        if "dtype" not in config and isinstance(dtypes.get("weights"), str):
            config.update(dtype=dtypes["weights"], quantization="none", kv_cache_dtype="auto")
        kv = out.get("kv_cache")
        if "num_kv_blocks" not in config and isinstance(kv, Mapping) and "num_gpu_blocks" in kv:
            config["num_kv_blocks"] = kv["num_gpu_blocks"]
        out["engine_config"] = config
    return out


def _column_type(name: str) -> pa.DataType | None:
    if name in STEP_COLUMNS:
        return STEP_COLUMNS[name]
    if name in OPTIONAL_STEP_COLUMNS:
        return OPTIONAL_STEP_COLUMNS[name]
    return pa.float64() if _OP_COLUMN.match(name) else None


def step_schema(extra_columns: Sequence[str] = (), version: int = SCHEMA_VERSION) -> pa.Schema:
    """The Arrow schema of a steps table with the given optional columns: schema version 1's (with the list columns)
    or version 2's (`FLAT_SCHEMA_VERSION`: without them, `LIST_COLUMNS`; the sequences are `sequence_schema()`'s)."""
    flat = version == FLAT_SCHEMA_VERSION
    fields = [pa.field(name, typ, nullable=False) for name, typ in STEP_COLUMNS.items()
              if not (flat and name in LIST_COLUMNS)]
    for name in extra_columns:
        typ = _column_type(name)
        if typ is None or name in STEP_COLUMNS or (flat and name in LIST_COLUMNS):
            raise ValueError(
                f"step trace: unknown column {name!r}; allowed extras: {', '.join(_extras(version))}, op_<name>_s"
            )
        fields.append(pa.field(name, typ, nullable=False))
    return pa.schema(fields, metadata={_VERSION_KEY: str(version).encode()})


def _extras(version: int) -> list[str]:
    """The optional columns of steps.parquet in schema `version`."""
    return [name for name in OPTIONAL_STEP_COLUMNS if not (version == FLAT_SCHEMA_VERSION and name in LIST_COLUMNS)]


def sequence_schema() -> pa.Schema:
    """The Arrow schema of schema version 2's sequences.parquet (`SEQUENCE_COLUMNS`, all non-null)."""
    return pa.schema([pa.field(name, typ, nullable=False) for name, typ in SEQUENCE_COLUMNS.items()],
                     metadata={_VERSION_KEY: str(FLAT_SCHEMA_VERSION).encode()})


class StepTraceWriter:
    """Collects step rows column by column. Every row must carry the same optional columns."""

    def __init__(self) -> None:
        self._columns: dict[str, list[Any]] = {name: [] for name in STEP_COLUMNS}
        self._extra: tuple[str, ...] | None = None

    @property
    def num_rows(self) -> int:
        return len(self._columns["step_index"])

    def add_plan(
        self, plan: StepPlan, *, start_s: float, duration_s: float, arrival_cutoff_s: float, **extra: Any
    ) -> None:
        """One executed step: its plan, when it started, how long it took, and optional columns."""
        self.add_row(
            {
                "step_index": plan.step_index,
                "start_s": start_s,
                "duration_s": duration_s,
                "arrival_cutoff_s": arrival_cutoff_s,
                "num_seqs": plan.num_seqs,
                "num_batched_tokens": plan.num_batched_tokens,
                "num_prefill_tokens": plan.num_prefill_tokens,
                "num_decode_tokens": plan.num_decode_tokens,
                "query_lens": plan.query_lens,
                "context_lens": plan.context_lens,
                "emits": plan.emits,
                "num_kv_blocks_used": plan.num_kv_blocks_used,
                "num_kv_blocks_total": plan.num_kv_blocks_total,
                "num_preemptions": len(plan.preempted_request_ids),
                "num_new_prefix_hit_tokens": plan.num_new_prefix_hit_tokens,
                "num_running": plan.num_running,
                "num_waiting": plan.num_waiting,
                **extra,
            }
        )

    def add_row(self, row: Mapping[str, Any]) -> None:
        extra = tuple(name for name in row if name not in STEP_COLUMNS)
        if self._extra is None:
            step_schema(extra)  # validates the names
            self._extra = extra
            for name in extra:
                self._columns[name] = []
        elif set(extra) != set(self._extra):
            raise ValueError(f"step trace row {self.num_rows}: columns {sorted(extra)} differ from {sorted(self._extra)}")
        missing = [name for name in STEP_COLUMNS if name not in row]
        if missing:
            raise ValueError(f"step trace row {self.num_rows}: missing column(s) {', '.join(missing)}")
        for name, column in self._columns.items():
            value = row[name]
            column.append(list(value) if isinstance(value, (list, tuple)) else value)

    def table(self) -> pa.Table:
        schema = step_schema(self._extra or ())
        return pa.table({name: pa.array(self._columns[name], type=schema.field(name).type) for name in schema.names},
                        schema=schema)


def _check_schema(schema: pa.Schema, where: str, version: int = SCHEMA_VERSION) -> None:
    names = schema.names
    flat = version == FLAT_SCHEMA_VERSION
    for name, typ in STEP_COLUMNS.items():
        if name not in names and not (flat and name in LIST_COLUMNS):
            raise ValueError(f"{where}: missing column {name!r} (expected {typ})")
    for field in schema:
        expected = _column_type(field.name)
        if flat and field.name in LIST_COLUMNS:
            raise ValueError(f"{where}: list column {field.name!r} in a schema version 2 trace (its sequences are "
                             f"{SEQUENCES_FILE}'s rows)")
        if expected is None:
            raise ValueError(
                f"{where}: unknown column {field.name!r}; allowed extras: {', '.join(_extras(version))}, op_<name>_s"
            )
        if not field.type.equals(expected):
            raise ValueError(f"{where}: column {field.name!r} has type {field.type}, expected {expected}")


ROW_GROUP_STEPS = 8192  # steps per Parquet row group of steps.parquet (`write_trace`)


def write_trace(
    out_dir: str | Path,
    steps: StepTraceWriter | pa.Table,
    metadata: RunMetadata,
    requests: Sequence[Request] | Sequence[Mapping[str, Any]] | None = None,
) -> None:
    """Write `steps.parquet`, `run.json` (with schema_version added) and, if given, `requests.csv`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = steps.table() if isinstance(steps, StepTraceWriter) else steps
    with open_steps_file(out, table.schema) as writer:
        writer.write_table(table.replace_schema_metadata(writer.schema.metadata), row_group_size=ROW_GROUP_STEPS)
    write_run_file(out, metadata)
    if requests is not None:
        write_requests(out, requests)


def open_steps_file(out_dir: Path, schema: pa.Schema, version: int = SCHEMA_VERSION) -> pq.ParquetWriter:
    """A writer of `steps.parquet` in `out_dir` for tables of `schema` (checked against schema `version`; the version
    set), which `write_trace` writes with, so that a table written in parts of `ROW_GROUP_STEPS` steps (a simulation's
    steps as they come, `roofline.sim.outputs.StepTraceStream`) gives the file of the table written at once.

    No dictionary pages (a dictionary tried on the times is dropped page after page; on the per-sequence lists it
    costs more to build than it saves: the ids and lengths write in two thirds of the time plain), the contexts
    delta-encoded (bit-packed differences: 1.5 MB against 7.8 MB with a dictionary), no min/max statistics: for a
    simulator's long trace 0.28 -> 0.20 s and 10.3 -> 4.0 MB, the same table (docs/benchmark-history/2026-11-25.md,
    "`--out`, issue 20, ninth session"). Row groups of `ROW_GROUP_STEPS` steps: the writer's buffers are a row
    group's, reused from one to the next, so a long trace touches less fresh memory (first-touched pages are most
    of the write's cost on this project's VMs)."""
    _check_schema(schema, "step trace", version)
    schema = schema.with_metadata({_VERSION_KEY: str(version).encode()})
    encoding = {"context_lens.list.element": "DELTA_BINARY_PACKED"} if "context_lens" in schema.names else None
    return pq.ParquetWriter(Path(out_dir) / STEPS_FILE, schema, compression="zstd", use_dictionary=False,
                            write_statistics=False, column_encoding=encoding)


def open_sequences_file(out_dir: Path) -> pq.ParquetWriter:
    """A writer of schema version 2's `sequences.parquet` in `out_dir` (`sequence_schema()`), with steps.parquet's
    options (`open_steps_file`): the contexts delta-encoded, no dictionary, no statistics."""
    return pq.ParquetWriter(Path(out_dir) / SEQUENCES_FILE, sequence_schema(), compression="zstd",
                            use_dictionary=False, write_statistics=False,
                            column_encoding={"context_len": "DELTA_BINARY_PACKED"})


def write_run_file(out_dir: Path, metadata: RunMetadata, version: int = SCHEMA_VERSION) -> None:
    """`run.json` of a trace: the run metadata with the schema version."""
    assert isinstance(metadata, RunMetadata), "write_trace takes a RunMetadata"
    assert version in SCHEMA_VERSIONS, version
    meta = {**metadata.to_json(), "schema_version": version}
    (Path(out_dir) / RUN_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def read_trace(trace_dir: str | Path) -> tuple[pd.DataFrame, RunMetadata]:
    """The steps (one row per step; list columns hold numpy arrays) and the run metadata of a trace, of either
    schema version (`read_trace_table`)."""
    table, metadata = read_trace_table(trace_dir)
    return table.to_pandas(), metadata  # (pyarrow imports pandas for it)


def read_trace_table(trace_dir: str | Path) -> tuple[pa.Table, RunMetadata]:
    """The steps as an Arrow table in schema version 1's layout, and the run metadata: a version 2 trace's lists
    rebuilt from sequences.parquet (`_with_lists`), so that both versions of the same steps give equal tables."""
    trace = Path(trace_dir)
    run_path = trace / RUN_FILE
    steps_path = trace / STEPS_FILE
    for path in (run_path, steps_path):
        if not path.is_file():
            raise ValueError(f"{trace}: not a step trace directory (no {path.name}); expected a directory that "
                             f"roofline measure --out wrote")
    meta = json.loads(run_path.read_text())
    version = meta.get("schema_version")
    if version not in SCHEMA_VERSIONS or isinstance(version, bool):
        raise ValueError(f"{run_path}: schema_version is {version!r}, this reader reads "
                         f"{' and '.join(map(str, SCHEMA_VERSIONS))}")
    metadata = RunMetadata.from_json(meta, str(run_path))
    schema = pq.read_schema(steps_path)
    file_version = (schema.metadata or {}).get(_VERSION_KEY)
    if file_version != str(version).encode():
        raise ValueError(f"{steps_path}: schema version {file_version!r}, expected {version} (run.json's)")
    _check_schema(schema, str(steps_path), version)
    table = pq.read_table(steps_path)
    return (_with_lists(table, trace) if version == FLAT_SCHEMA_VERSION else table), metadata


def _with_lists(steps: pa.Table, trace: Path) -> pa.Table:
    """A schema version 2 trace's steps with version 1's list columns: sequences.parquet's rows split at each step's
    `num_seqs`, the request ids requests.csv's `request_id` at `request_index`; columns in `step_schema`'s order
    (the optional ones in `OPTIONAL_STEP_COLUMNS`' order, then the operators'), as the simulator wrote version 1."""
    path = trace / SEQUENCES_FILE
    if not path.is_file():
        raise ValueError(f"{path}: missing; a schema version 2 trace (run.json) holds its steps' sequences there")
    schema = pq.read_schema(path)
    file_version = (schema.metadata or {}).get(_VERSION_KEY)
    if file_version != str(FLAT_SCHEMA_VERSION).encode():
        raise ValueError(f"{path}: schema version {file_version!r}, expected {FLAT_SCHEMA_VERSION} (run.json's)")
    for name, typ in SEQUENCE_COLUMNS.items():
        if name not in schema.names:
            raise ValueError(f"{path}: missing column {name!r} (expected {typ})")
        if not schema.field(name).type.equals(typ):
            raise ValueError(f"{path}: column {name!r} has type {schema.field(name).type}, expected {typ}")
    unknown = [name for name in schema.names if name not in SEQUENCE_COLUMNS]
    if unknown:
        raise ValueError(f"{path}: unknown column {unknown[0]!r}; its columns: {', '.join(SEQUENCE_COLUMNS)}")
    seqs = pq.read_table(path, columns=list(SEQUENCE_COLUMNS))
    for name in SEQUENCE_COLUMNS:
        if seqs.column(name).null_count:
            raise ValueError(f"{path}: column {name!r} has null values")
    return step_lists_table(steps, seqs, _request_ids(trace, path), str(path))


def step_lists_table(steps: pa.Table, seqs: pa.Table, request_ids: pa.Array, where: str = SEQUENCES_FILE) -> pa.Table:
    """Schema version 2's steps (no list columns) and sequences (`seqs`: `sequence_schema()`'s columns), with the
    run's request ids (requests.csv's, in its rows' order), as version 1's one table: the sequences split at each
    step's `num_seqs`; columns in `step_schema`'s order (the optional ones in `OPTIONAL_STEP_COLUMNS`' order, then the
    operators' as in `steps`), as the simulator wrote version 1. ValueError naming `where` where they do not fit."""
    import numpy as np

    num_seqs = steps.column("num_seqs").to_numpy()
    if len(num_seqs) and num_seqs.min() < 0:
        raise ValueError(f"{where}: a step's num_seqs is negative")
    ends = np.cumsum(num_seqs, dtype=np.int64)
    total = int(ends[-1]) if len(ends) else 0
    if total != seqs.num_rows:
        raise ValueError(f"{where}: {seqs.num_rows} rows, but steps.parquet's num_seqs sum to {total}")
    if total >= 2**31:
        raise ValueError(f"{where}: {total} sequences, more than a list column holds (2**31 - 1)")
    offsets = pa.array(np.concatenate([np.zeros(1, np.int64), ends]).astype(np.int32), pa.int32())
    lists = {name: pa.ListArray.from_arrays(offsets, seqs.column(LIST_COLUMNS[name]).combine_chunks(),
                                            type=STEP_COLUMNS[name]) for name in ("query_lens", "context_lens", "emits")}
    index = seqs.column("request_index").combine_chunks()
    if seqs.num_rows:
        import pyarrow.compute as pc

        least, most = (v.as_py() for v in pc.min_max(index).values())
        if least < 0 or most >= len(request_ids):
            raise ValueError(f"{where}: request_index {least if least < 0 else most} is not a row of requests.csv "
                             f"({len(request_ids)} rows)")
    lists["request_ids"] = pa.ListArray.from_arrays(offsets, request_ids.take(index),
                                                    type=OPTIONAL_STEP_COLUMNS["request_ids"])
    order = list(OPTIONAL_STEP_COLUMNS)
    extras = sorted([n for n in steps.column_names if n not in STEP_COLUMNS] + ["request_ids"],
                    key=lambda n: order.index(n) if n in order else len(order))  # (stable: the operators as written)
    schema = step_schema(extras)
    by_name = dict(zip(steps.column_names, steps.columns))
    return pa.Table.from_arrays([pa.chunked_array([lists[n]]) if n in lists else by_name[n] for n in schema.names],
                                schema=schema)


def _request_ids(trace: Path, where: Path) -> pa.Array:
    """requests.csv's `request_id` column (as written: text), in its rows' order."""
    import pyarrow.csv as pcsv

    path = trace / REQUESTS_FILE
    if not path.is_file():
        raise ValueError(f"{path}: missing; a schema version 2 trace's request_index ({where.name}) are its rows")
    try:
        return pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(
            include_columns=["request_id"], column_types={"request_id": pa.string()})).column(0).combine_chunks()
    except pa.ArrowInvalid as exc:
        raise ValueError(f"{path}: no request_id column ({str(exc).splitlines()[0]})") from None


def request_metrics(req: Request) -> dict[str, Any]:
    """The per-request row of `requests.csv` (times in seconds on the run's clock; None where undefined), by the
    definitions of `engine.core.metrics`."""
    first_token = req.first_token_time_s
    n_out = req.num_output_tokens
    times = req.token_times_s
    arrival = req.arrival_time_s
    return {
        "request_id": req.request_id,
        "arrival_s": arrival,
        "first_scheduled_s": req.first_scheduled_time_s,
        "first_token_s": first_token,
        "finish_s": req.finish_time_s,
        "num_prompt_tokens": req.num_prompt_tokens,
        "num_output_tokens": n_out,
        "ttft_s": None if first_token is None else metrics.ttft_s(arrival, first_token),
        "tpot_s": metrics.tpot_s(times[0], times[-1], n_out) if len(times) == n_out > 0 else None,
        "e2e_s": None if req.finish_time_s is None else metrics.e2e_s(arrival, req.finish_time_s),
        "num_preemptions": req.num_preemptions,
        "num_prefix_hit_tokens": req.num_prefix_hit_tokens,
    }


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"requests.csv: non-finite value {value!r}")
        return repr(value)
    return str(value)


def write_requests(out_dir: str | Path, requests: Sequence[Request] | Sequence[Mapping[str, Any]]) -> None:
    """Write `requests.csv`: the standard columns first, then any extra keys of the rows (sorted)."""
    rows = [request_metrics(r) if isinstance(r, Request) else dict(r) for r in requests]
    extra = sorted({key for row in rows for key in row} - set(REQUEST_COLUMNS))
    header = list(REQUEST_COLUMNS) + extra
    with open(Path(out_dir) / REQUESTS_FILE, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        for i, row in enumerate(rows):
            missing = [c for c in REQUEST_COLUMNS if c not in row]
            if missing:
                raise ValueError(f"requests.csv row {i}: missing column(s) {', '.join(missing)}")
            writer.writerow([_format(row.get(c)) for c in header])


def read_requests(trace_dir: str | Path) -> pd.DataFrame:
    """Per-request metrics of a trace directory; empty cells are NaN (counts that can be empty: <NA>)."""
    path = Path(trace_dir) / REQUESTS_FILE
    if not path.is_file():
        raise ValueError(f"{trace_dir}: no {REQUESTS_FILE}")
    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
    if tuple(header[: len(REQUEST_COLUMNS)]) != REQUEST_COLUMNS:
        raise ValueError(f"{path}: header must start with {','.join(REQUEST_COLUMNS)}")
    import pandas as pd  # (here: a writer of traces, `roofline simulate --out`, imports no pandas)

    dtypes = {c: "Int64" for c in _REQUEST_INT_COLUMNS} | {"request_id": str}
    return pd.read_csv(path, dtype=dtypes, keep_default_na=False, na_values=[""])
