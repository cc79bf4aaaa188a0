"""What `roofline simulate --out DIR` writes: requests.csv (per request), steps.parquet + run.json (a step trace
as the engine writes one, `engine.core.trace`, plus the replica, the predicted time and its per-operator
breakdown), timeseries.csv (KV usage, running and waiting requests per step) and summary.json."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from engine.core.trace import STEP_COLUMNS as TRACE_STEP_COLUMNS
from engine.core.trace import EngineConfigRecord, RunMetadata, step_schema, write_trace
from roofline import __version__
from roofline.jsonable import to_json
from roofline.sim.deployment import Deployment
from roofline.sim.recorder import SimulationResult
from roofline.sim.simulator import gc_paused


def write_outputs(out_dir: Path, deployment: Deployment, result: SimulationResult, summary: dict[str, object]) -> None:
    """requests.csv, steps.parquet + run.json (a step trace, `engine.core.trace`), timeseries.csv and
    summary.json; the same run gives the same bytes.

    The cyclic garbage collector is paused meanwhile, as for the simulation's loop: the writing makes tens of
    thousands of containers that live until written (the CSVs' rows), enough to start a collection of every
    generation, which traverses the whole simulation's objects again (0.05-0.07 s for sharegpt's 10,000
    requests: BENCHMARKS.md, "`--out`, issue 20 item 1, fifth session") and finds the cycles that the
    collection at exit finds anyway."""
    out_dir.mkdir(parents=True, exist_ok=True)
    metadata = run_metadata(deployment, summary)
    with gc_paused(), ThreadPoolExecutor(max_workers=1) as pool:
        # The step trace's Parquet encoding on a second thread: it runs without the GIL, beside the CSVs' Python
        # formatting (each file is written by one thread alone, so the bytes do not depend on the interleaving). The
        # table is built first, on this thread: two threads both running Python only take turns at the GIL.
        trace = pool.submit(write_trace, out_dir, step_table(deployment, result), metadata)
        write_csv(result.requests, out_dir / "requests.csv")
        write_csv(result.timeseries, out_dir / "timeseries.csv")
        (out_dir / "summary.json").write_text(to_json(summary))
        trace.result()  # (raises what the thread raised)


_NEEDS_QUOTES = re.compile(r'[,"\r\n]')  # the fields the csv module quotes (QUOTE_MINIMAL)


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """`frame.to_csv(path, index=False)`, the same bytes, in a fraction of the time for frames of integer, float64
    and string columns (anything else is left to pandas). pandas writes an integer by `str`, a float64 by numpy's
    `astype(str)`, which is Python's `repr` (the shortest string that reads back, 'inf'), NaN and a missing string
    as an empty field, and quotes a field only if it holds a comma, a quote or a line break; here each distinct
    value is formatted once (a step's counts and KV usage repeat) and the rows joined."""
    cells = [_csv_cells(frame[name]) for name in frame.columns] if all(
        isinstance(name, str) and not _NEEDS_QUOTES.search(name) for name in frame.columns) else []
    if len(cells) < 2 or any(column is None for column in cells):  # (one empty field alone is quoted)
        frame.to_csv(path, index=False)
        return
    lines = [",".join(frame.columns)]
    lines.extend(map(",".join, zip(*cells)))
    lines.append("")
    path.write_bytes(os.linesep.join(lines).encode())


def _csv_cells(column: pd.Series) -> list[str] | None:
    """Each value of `column` as pandas' `to_csv` writes it, or None for a column left to pandas."""
    values = column.to_numpy()
    if values.dtype.kind in "iu":
        distinct, index = np.unique(values, return_inverse=True)
        return np.array(list(map(str, distinct.tolist())), dtype=object)[index].tolist()
    if values.dtype == np.float64:  # by bit pattern: -0.0 is not 0.0, and every NaN is written empty
        bits, index = np.unique(values.view(np.int64), return_inverse=True)
        return np.array(["" if math.isnan(v) else repr(v) for v in bits.view(np.float64).tolist()],
                        dtype=object)[index].tolist()
    if isinstance(column.dtype, pd.StringDtype) or column.dtype == object:
        strings = values.tolist()
        if all(type(v) is str and not _NEEDS_QUOTES.search(v) for v in strings):
            return strings
    return None


def step_table(deployment: Deployment, result: SimulationResult) -> pa.Table:
    """The step-trace columns, plus `replica`, `request_ids`, `predicted_s` (the time the step was charged) and
    the cost model's per-operator breakdown as `op_<name>_s`. Built column by column from arrays: the per-step
    lists as one array of values with offsets, the breakdown in bulk (`StepCostModel.breakdown_columns`); the
    same table as building every cell in Python, in a fraction of the time."""
    steps = result.steps
    seqs = result.step_seqs
    concatenated = seqs.concatenated  # every step's query, context and emits, step after step
    breakdown = deployment.cost_model.breakdown_columns(seqs)
    columns: dict[str, object] = {name: steps[name].to_numpy() for name in TRACE_STEP_COLUMNS
                                  if name in steps.columns}
    columns["arrival_cutoff_s"] = steps["start_s"].to_numpy()  # a schedule at t sees every arrival by t
    offsets = _offsets(seqs.offsets)
    for values, name in zip(concatenated, ("query_lens", "context_lens", "emits")):
        typ = TRACE_STEP_COLUMNS[name]
        columns[name] = pa.ListArray.from_arrays(offsets, pa.array(values, type=typ.value_type), type=typ)
    columns["predicted_s"] = steps["duration_s"].to_numpy()
    # Each distinct id once, then taken: the same string array as one built from every sequence's id string.
    ids = pa.array(seqs.request_names, type=pa.string()).take(pa.array(seqs.request_index))
    columns["request_ids"] = pa.ListArray.from_arrays(offsets, ids)
    columns["replica"] = steps["replica"].to_numpy()
    for name in sorted(breakdown):
        columns[f"op_{name}_s"] = breakdown[name]
    schema = step_schema([n for n in columns if n not in TRACE_STEP_COLUMNS])
    return pa.table({n: _array(columns[n], schema.field(n).type) for n in schema.names}, schema=schema)


def _offsets(offsets: np.ndarray) -> pa.Array:
    """List offsets as `pa.list_` holds them (int32)."""
    assert offsets[-1] < 2**31, "more list values than a pa.list_ column holds"
    return pa.array(offsets.astype(np.int32))


def _array(column: object, typ: pa.DataType) -> pa.Array:
    return column if isinstance(column, pa.Array) else pa.array(column, type=typ)


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
        library_versions={"roofline": __version__, "numpy": np.__version__, "pandas": pd.__version__,
                          "pyarrow": pa.__version__},
        seed=seed, workload=workload, num_replicas=num_replicas,
        # the load (rate, concurrency, dataset) that was simulated, and the KV capacity's terms
        extra={"kv_cache": summary["kv_cache"], "offered_load": summary.get("offered_load")},
    )
