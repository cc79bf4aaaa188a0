"""`roofline simulate --out`'s per-step table built in bulk (`roofline.sim.outputs.step_table`,
`StepCostModel.breakdown_columns`): exactly the floats and the table of costing and building every step one by one."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from engine.core import step_record
from engine.core.trace import STEP_COLUMNS, step_schema
from roofline.cost.hardware import parse_profile
from roofline.cost.ops import BatchStats
from roofline.cost.roofline_math import _distinct_rows, _ExactPowArray, _segment_sums
from roofline.cost.step_shape import StepArrays
from roofline.engine_args import EngineArgs
from roofline.sim import outputs
from roofline.sim.deployment import Deployment, make_deployment
from roofline.sim.outputs import write_csv
from roofline.sim.recorder import SimulationResult
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.steps_file import step_table
from roofline.sim.table import Table
from roofline.sim.workload import ArrivalProcess, LengthDistribution, SharedPrefix, Workload
from tests.profiles import TEST_CPU_PROFILE


def workload(num_requests: int, prompt: tuple[int, int], output: tuple[int, int]) -> Workload:
    return Workload(name="small", seed=3, num_requests=num_requests, arrival=ArrivalProcess("poisson", 50.0),
                    prompt_tokens=LengthDistribution("uniform", min_tokens=prompt[0], max_tokens=prompt[1]),
                    output_tokens=LengthDistribution("uniform", min_tokens=output[0], max_tokens=output[1]),
                    shared_prefix=SharedPrefix(num_groups=2, prefix_tokens=64))


# (model, hardware, engine, workload): each a few hundred steps, prefill chunks mixed with decodes.
CASES = {
    # TP 2 (all-reduces, logits all-gather); decode batches below and above the CUDA-graph sizes.
    "llama-3.1-8b-tp2": ("llama-3.1-8b", "h100-sxm",
                         EngineArgs(tensor_parallel_size=2, max_num_seqs=48, max_num_batched_tokens=512,
                                    max_model_len=4096),
                         workload(80, (50, 900), (1, 120))),
    # Sliding window (4096 keys): contexts past it.
    "mistral-sliding-window": ("mistral-7b-v0.1", "h100-sxm",
                               EngineArgs(max_num_seqs=16, max_num_batched_tokens=2048, max_model_len=8192),
                               workload(16, (3000, 6000), (30, 200))),
    # MoE experts with fp8 weights (8-bit GEMM dispatch, activation quantization), TP 4 on H200.
    "mixtral-fp8-tp4": ("mixtral-8x7b", "h200-sxm",
                        EngineArgs(tensor_parallel_size=4, quantization="fp8", max_num_seqs=32,
                                   max_num_batched_tokens=384, max_model_len=4096),
                        workload(40, (50, 700), (1, 80))),
    # A CPU profile: the engine's attention records (roofline.cost.cpu.engine), eager launches.
    "cpu": ("llama-156m", parse_profile(TEST_CPU_PROFILE, where="test"),
            EngineArgs(max_num_seqs=8, max_num_batched_tokens=128, max_model_len=1024, num_gpu_blocks_override=64),
            workload(40, (20, 300), (1, 60))),
}


def simulate(case: str) -> tuple[Deployment, SimulationResult]:
    model, hardware, engine, load = CASES[case]
    deployment = make_deployment(model, hardware, engine)
    return deployment, run_simulation(deployment, load, SimulationOptions(record_steps=True))


@pytest.mark.parametrize("case", sorted(CASES))
def test_bulk_breakdown_equals_step_cost_of_every_step(case: str) -> None:
    deployment, result = simulate(case)
    model, seqs = deployment.cost_model, result.step_seqs
    assert 100 <= len(seqs) <= 1500
    prefill = result.steps["num_prefill_tokens"] > 0
    assert prefill.any() and (prefill & (result.steps["num_decode_tokens"] > 0)).any() and not prefill.all()
    columns = model.breakdown_columns(seqs)
    names: set[str] = set()
    for i, (q, c, e) in enumerate(seqs):
        expected = model.cost(StepArrays(q, c, e)).breakdown_s
        names |= expected.keys()
        assert {name: columns[name][i] for name in columns} == {name: expected.get(name, 0.0) for name in columns}, i
    assert names == set(columns)


def test_bulk_breakdown_of_no_steps_is_empty() -> None:
    assert make_deployment("llama-3.1-8b", "h100-sxm", EngineArgs()).cost_model.breakdown_columns([]) == {}


def cell_by_cell_table(deployment: Deployment, result: SimulationResult) -> pa.Table:
    """`step_table` as it was first written: every list and every breakdown built per step in Python."""
    steps, seqs = result.steps, result.step_seqs
    breakdowns = [deployment.cost_model.cost(StepArrays(q, c, e)).breakdown_s for q, c, e in seqs]
    columns: dict[str, object] = {name: steps[name].to_numpy() for name in STEP_COLUMNS if name in steps.columns}
    columns["arrival_cutoff_s"] = steps["start_s"].to_numpy()
    columns["query_lens"] = [q.tolist() for q, _, _ in seqs]
    columns["context_lens"] = [c.tolist() for _, c, _ in seqs]
    columns["emits"] = [e.tolist() for _, _, e in seqs]
    columns["predicted_s"] = steps["duration_s"].to_numpy()
    columns["request_ids"] = [list(ids) for ids in result.step_request_ids]
    columns["replica"] = steps["replica"].to_numpy()
    for name in sorted({name for b in breakdowns for name in b}):
        columns[f"op_{name}_s"] = np.array([b.get(name, 0.0) for b in breakdowns])
    schema = step_schema([n for n in columns if n not in STEP_COLUMNS])
    return pa.table({n: pa.array(columns[n], type=schema.field(n).type) for n in schema.names}, schema=schema)


def test_step_table_equals_the_cell_by_cell_table() -> None:
    deployment, result = simulate("llama-3.1-8b-tp2")
    table = step_table(deployment, result)
    assert table.equals(cell_by_cell_table(deployment, result), check_metadata=True)


def test_exact_pow_array_rounds_as_python_floats() -> None:
    base = np.random.default_rng(0).random(2000)
    exponents = np.linspace(0.5, 9.0, 2000)
    got = np.asarray(base.view(_ExactPowArray) ** exponents)
    assert got.tolist() == [b ** x for b, x in zip(base.tolist(), exponents.tolist())]
    assert np.asarray(0.75 ** np.arange(5.0).view(_ExactPowArray)).tolist() == [0.75 ** n for n in range(5)]
    grid = base.reshape(40, 50).view(_ExactPowArray)  # one exponent for all (the formulas' case)
    assert np.asarray(grid ** 1.7).tolist() == [[b ** 1.7 for b in row] for row in base.reshape(40, 50).tolist()]
    ones = np.array([1.0, 0.5, 1.0, 0.0]).view(_ExactPowArray)  # C pow(1, y) is 1, even for y NaN
    for y in (1.7, math.nan, -2.0):
        assert np.array_equal(np.asarray(ones[:3] ** y), [math.pow(b, y) for b in (1.0, 0.5, 1.0)], equal_nan=True)
    assert float(np.asarray(np.float64(0.5).view(_ExactPowArray) ** 3.0)) == 0.125  # 0-d
    assert type(base.view(_ExactPowArray) + 1.0) is _ExactPowArray  # stays exact through other ufuncs
    assert math.isclose(float(np.asarray(base.view(_ExactPowArray) ** 2.0)[0]), base[0] ** 2)


def test_exact_pow_array_is_c_pow_bit_for_bit() -> None:
    # np.float_power (C pow per element) against math.pow on random bit patterns and the special values; numpy's
    # `power` on arrays (SIMD) differs in the last bit for some of these.
    rng = np.random.default_rng(1)
    special = np.array([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 5e-324, 1e308, -2.0, 0.5, 3.0])
    bases = np.concatenate([np.repeat(special, len(special)), rng.integers(0, 2**63, 20_000).view(np.float64),
                            rng.random(20_000) * 50.0])
    exponents = np.concatenate([np.tile(special, len(special)), rng.normal(0.0, 3.0, 20_000),
                                rng.normal(1.0, 0.5, 20_000)])
    with np.errstate(all="ignore"):
        got = np.asarray(bases.view(_ExactPowArray) ** exponents)
    for b, y, g in zip(bases.tolist(), exponents.tolist(), got.tolist()):
        try:
            want = math.pow(b, y)
        except (OverflowError, ValueError):  # where C pow gives inf or NaN, Python raises
            continue
        assert math.isnan(want) and math.isnan(g) or np.float64(want).tobytes() == np.float64(g).tobytes(), (b, y)


def test_segment_sums_equal_reduceat_in_int64() -> None:
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 300, 500)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    for values in (rng.integers(0, 131_072, lengths.sum(), dtype=np.int32),  # summed in int32
                   rng.integers(-2**31, 2**31 - 1, lengths.sum(), dtype=np.int32),  # would overflow: in int64
                   rng.integers(0, 2**40, lengths.sum(), dtype=np.int64)):
        got = _segment_sums(values, starts, lengths)
        assert got.dtype == np.int64
        assert np.array_equal(got, np.add.reduceat(values, starts, dtype=np.int64))


@pytest.mark.parametrize("block_rows", [outputs.CSV_BLOCK_ROWS, 7])  # (a Table's rows in blocks: the same bytes)
def test_write_csv_writes_the_bytes_of_pandas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              block_rows: int) -> None:
    monkeypatch.setattr(outputs, "CSV_BLOCK_ROWS", block_rows)
    rng = np.random.default_rng(0)
    floats = np.concatenate([rng.random(200) * 10.0 ** rng.integers(-20, 20, 200), [np.nan, np.inf, -np.inf, -0.0,
                             0.0, 1e16, 1e15, 1e-4, 1e-5, 5e-324, 0.1, 0.1, 3.0, np.nan]])
    n = len(floats)
    frames = {
        "numbers and ids": pd.DataFrame({"id": [f"req-{i % 50}" for i in range(n)], "x": floats,
                                         "count": rng.integers(-5, 10**12, n), "small": rng.integers(0, 3, n),
                                         "u": rng.integers(0, 9, n).astype(np.uint8)}),
        "no rows": pd.DataFrame({"a": np.zeros(0), "b": np.zeros(0, dtype=np.int64)}),
        # left to pandas: fields it quotes, a missing string, booleans, float32, one column
        "comma": pd.DataFrame({"id": ["a,b", "c"], "x": [1.0, 2.0]}),
        "quote in a name": pd.DataFrame({'say "x"': [1, 2], "y": [1.5, 2.5]}),
        "missing id": pd.DataFrame({"id": ["a", None], "x": [1.0, 2.0]}),
        "bool": pd.DataFrame({"flag": [True, False], "x": [1.0, 2.0]}),
        "float32": pd.DataFrame({"x": np.array([0.1, 2.5], dtype=np.float32), "y": [1, 2]}),
        "one column": pd.DataFrame({"id": ["", "a"]}),
    }
    frames["int32 and uint64"] = pd.DataFrame({"a": np.array([-(2**31), 7, 2**31 - 1], dtype=np.int32),
                                               "b": np.array([0, 2**64 - 1, 5], dtype=np.uint64),
                                               "c": np.array([-128, 0, 127], dtype=np.int8),
                                               "d": np.array([-(2**63), -1, 2**63 - 1], dtype=np.int64)})
    frames["strided"] = pd.DataFrame({"x": floats[::2], "y": np.arange(len(floats[::2]))})
    frames["a later comma"] = pd.DataFrame({"id": [f"r{i}" if i != 12 else "r,12" for i in range(20)],
                                            "x": floats[:20]})  # (a later block left to pandas: the file whole)
    for name, frame in frames.items():
        frame.to_csv(tmp_path / "pandas.csv", index=False)
        # a DataFrame, and a Table of its columns (text as a list: the rows written in C where built)
        table = Table({k: frame[k].tolist() if frame[k].dtype == object else frame[k].to_numpy() for k in frame})
        for kind, written in (("frame", frame), ("table", table)):
            write_csv(written, tmp_path / "fast.csv")
            assert (tmp_path / "fast.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes(), (name, kind)


def test_timeseries_appended_part_by_part_is_the_whole_tables_file(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """timeseries.csv written part by part (`StepTraceStream`) is `write_csv` of the whole table, also where a part's
    rows are left to pandas (`csv_rows` None: pandas' text of those rows); a run without steps writes the header."""
    rng = np.random.default_rng(3)
    whole = Table({"time_s": rng.random(30) * 100, "replica": rng.integers(0, 3, 30), "kv_usage": rng.random(30)})
    write_csv(whole, tmp_path / "whole.csv")
    monkeypatch.setattr(outputs, "FORKED", False)
    real_rows = outputs.csv_rows
    calls = []

    def rows_or_none(frame: Table) -> bytes | None:  # (the second part left to pandas)
        calls.append(len(frame))
        return None if len(calls) == 2 else real_rows(frame)

    monkeypatch.setattr(outputs, "csv_rows", rows_or_none)
    for name, cuts in (("parts", [0, 11, 20, 30]), ("none", [0])):
        (tmp_path / name).mkdir()
        stream = outputs.StepTraceStream(tmp_path / name, None)  # type: ignore[arg-type]
        for lo, hi in zip(cuts, cuts[1:]):
            stream._append_timeseries(Table({c: whole[c][lo:hi] for c in whole.columns}))
        stream._finish_timeseries(list(whole.columns), cuts[-1])
    assert (tmp_path / "parts" / outputs.TIMESERIES_FILE).read_bytes() == (tmp_path / "whole.csv").read_bytes()
    assert (tmp_path / "none" / outputs.TIMESERIES_FILE).read_bytes() == b"time_s,replica,kv_usage" + \
        os.linesep.encode()


@pytest.mark.skipif(not outputs.CSV_COMPILED, reason="roofline.sim._csvrows not built (or ROOFLINE_PURE_PYTHON)")
def test_compiled_csv_rows_are_the_python_cells() -> None:
    """The C rows (`_csvrows.rows`) of number and text columns are the Python cells joined; a text that needs
    quotes, an object array or a bool column is left to them (None)."""
    rng = np.random.default_rng(5)
    floats = np.concatenate([rng.random(300) * 10.0 ** rng.integers(-30, 30, 300), [np.nan, -np.nan, np.inf, -np.inf,
                             -0.0, 0.0, 1e16, 9999999999999998.0, 1e-4, 1e-5, 5e-324, 2.0**-1074, 1.7976931348623157e308,
                             0.1, 0.1, 123456789.125]])
    n = len(floats)
    columns = [[f"r{i}" for i in range(n)], floats, rng.integers(-(2**62), 2**62, n), np.repeat(floats[:4], n // 4 + 1)[:n]]
    expected = "".join(",".join(row) + "\n" for row in zip(*[outputs._csv_cells(c) for c in columns]))
    assert outputs._csvrows.rows(columns, "\n") == expected.encode()
    assert outputs._csvrows.rows([["a"], np.zeros(1)], "\r\n") == b"a,0.0\r\n"
    for other in (["a,b"], ['q"'], ["x\ny"], np.array(["a"], dtype=object), np.array([True]), [1]):
        assert outputs._csvrows.rows([other, np.zeros(1)], "\n") is None


@pytest.mark.skipif(not outputs.CSV_COMPILED, reason="roofline.sim._csvrows not built (or ROOFLINE_PURE_PYTHON)")
def test_compiled_csv_floats_are_pythons_repr_everywhere() -> None:
    """The C rows' floats (Ryu's digits, laid out as repr lays them out: roofline/sim/_csvrows.c `shortest_repr`) are
    `repr` on random bit patterns (every exponent, subnormals), powers of two and ten and their neighbours (the
    asymmetric bounds), rounded decimals, integers and the layout's thresholds (1e16, 1e-4), signs included. (A
    20,000,000-value run of the same check: docs/benchmark-history/2026-11-30j-outspeed2.md.)"""
    rng = np.random.default_rng(42)
    powers_of_two = np.array([2.0**k for k in range(-1074, 1024)])
    powers_of_ten = np.array([float(f"1e{k}") for k in range(-323, 309)])
    values = np.concatenate([
        rng.integers(0, 2**64, 100_000, dtype=np.uint64).view(np.float64),
        rng.integers(0, 2**52, 10_000, dtype=np.uint64).view(np.float64),  # subnormals
        powers_of_two, np.nextafter(powers_of_two, 0), np.nextafter(powers_of_two, np.inf),
        powers_of_ten, np.nextafter(powers_of_ten, 0), np.nextafter(powers_of_ten, np.inf),
        [round(x, int(k)) for x, k in zip((rng.random(10_000) * 10.0 ** rng.integers(-8, 20, 10_000)).tolist(),
                                          rng.integers(0, 12, 10_000))],
        rng.integers(-(2**53), 2**53, 10_000).astype(np.float64),
        [1e16, 9999999999999998.0, 1e15, 1e-4, 9.999999999999999e-05, 1e-5, 0.0, -0.0, 5e-324, 1.7976931348623157e308],
    ])
    values = values[np.isfinite(values)]
    values = np.concatenate([values, -values])
    rows = outputs._csvrows.rows([values, np.zeros(len(values), dtype=np.int8)], "\n")
    assert rows.decode().split("\n")[:-1] == [repr(v) + ",0" for v in values.tolist()]


def test_distinct_rows_are_numpys_unique_rows() -> None:
    rng = np.random.default_rng(1)
    columns = [rng.integers(0, hi, 500) for hi in (3, 1, 40, 10**6)]
    rows, inverse = _distinct_rows(columns)
    expected, expected_inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    assert rows.tolist() == expected.tolist() and inverse.tolist() == expected_inverse.reshape(-1).tolist()


@pytest.mark.parametrize("model", ["llama-3.1-8b", "mistral-7b-v0.1"])  # no window, a 4096-key window
def test_prefill_columns_are_prefill_sums_per_step(model: str) -> None:
    cost_model = make_deployment(model, "h100-sxm", EngineArgs()).cost_model
    rng = np.random.default_rng(2)
    num_steps, num_chunks = 50, 400
    q = rng.integers(2, 9000, num_chunks)
    c = np.where(rng.random(num_chunks) < 0.3, 0, rng.integers(0, 20000, num_chunks))
    step_of = np.sort(rng.integers(0, num_steps, num_chunks))
    columns = cost_model._prefill_columns(q, c, step_of, num_steps)
    assert columns is not None
    window = cost_model.spec.sliding_window
    for i in range(num_steps):
        rows = step_of == i
        expected = BatchStats._prefill_sums(q[rows].tolist(), c[rows].tolist(), window, cost_model._q_tile) \
            if rows.any() else dict.fromkeys(columns, 0.0)
        assert {name: columns[name][i] for name in columns} == expected, i
    cost_model._q_tile = 128 / 6  # a tile of a fractional number of tokens: left to _prefill_sums
    assert cost_model._prefill_columns(q, c, step_of, num_steps) is None


def test_streamed_step_trace_is_the_whole_tables_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--out`'s steps.parquet written in parts as the simulation runs (`StepTraceStream`) is the file of the whole
    table written at once, byte for byte, with parts and row groups shrunk to one step (a part per step; the first
    steps, prefill chunks of long prompts, sample no token), each part's all-zero operator columns left out as
    `breakdown_columns` leaves out an operator no step of it has (a later part with the column widens the file)."""
    from roofline.sim import recorder, simulator, steps_file

    monkeypatch.setattr(steps_file, "ROW_GROUP_STEPS", 1)
    monkeypatch.setattr(recorder.StepRows, "CHUNK", 1)
    monkeypatch.setattr(simulator, "STEPS_PER_PART", 1)
    model, hardware, engine, load = CASES["mistral-sliding-window"]
    deployment = make_deployment(model, hardware, engine)
    whole = run_simulation(deployment, load, SimulationOptions(record_steps=True))
    summary = {"seed": 3, "workload": "small", "num_replicas": 1, "kv_cache": {}}
    outputs.write_outputs(tmp_path / "whole", deployment, whole, summary)

    original = steps_file.steps_table
    widened = []

    def sparse_table(deployment: Deployment, steps: pd.DataFrame, seqs: object) -> pa.Table:
        table = original(deployment, steps, seqs)  # type: ignore[arg-type]
        zero = [n for n in table.column_names if n.startswith("op_") and not np.any(table.column(n).to_numpy())]
        return table.drop_columns(zero)

    def widen(self: steps_file.StepsFileWriter, schema: pa.Schema) -> None:
        widened.append(schema)
        original_widen(self, schema)

    original_widen = steps_file.StepsFileWriter._widen
    monkeypatch.setattr(outputs, "FORKED", False)  # (in this process: `widened` is seen here)
    monkeypatch.setattr(steps_file, "steps_table", sparse_table)
    monkeypatch.setattr(steps_file.StepsFileWriter, "_widen", widen)
    (tmp_path / "parts").mkdir()
    stream = outputs.StepTraceStream(tmp_path / "parts", deployment)
    parts = run_simulation(deployment, load, SimulationOptions(), step_sink=stream)
    outputs.write_outputs(tmp_path / "parts", deployment, parts, summary, stream)
    assert len(whole.steps) > 100 and len(parts.step_seqs) == 0  # many parts; no sequences kept
    assert widened  # some part lacked an operator a later one had
    for name in ("steps.parquet", "sequences.parquet", "requests.csv", "timeseries.csv", "run.json"):
        assert (tmp_path / "parts" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_row_groups_of_a_simulation_read_back_as_the_engines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulation's step trace (schema version 2: steps.parquet and sequences.parquet, in its own row groups,
    `steps_file.ROW_GROUP_STEPS`, a row group of sequences per row group of steps) reads back as the same table as
    the run's steps written by the engine's writer (schema version 1, its list columns, its row groups): the same
    schema and the same values; only the files differ."""
    import pyarrow.parquet as pq

    from engine.core.trace import read_trace_table, write_trace
    from roofline.sim import steps_file

    monkeypatch.setattr(steps_file, "ROW_GROUP_STEPS", 16)  # (several row groups of this small run)
    model, hardware, engine, load = CASES["mistral-sliding-window"]
    deployment = make_deployment(model, hardware, engine)
    result = run_simulation(deployment, load, SimulationOptions(record_steps=True))
    summary = {"seed": 3, "workload": "small", "num_replicas": 1, "kv_cache": {}}
    outputs.write_outputs(tmp_path / "sim", deployment, result, summary)
    write_trace(tmp_path / "engine", step_table(deployment, result), steps_file.run_metadata(deployment, summary))
    steps_file_, seqs_file, engine_file = (pq.ParquetFile(tmp_path / name / file) for name, file in (
        ("sim", "steps.parquet"), ("sim", "sequences.parquet"), ("engine", "steps.parquet")))
    num_groups = -(-len(result.steps) // 16)
    assert steps_file_.metadata.num_row_groups == seqs_file.metadata.num_row_groups == num_groups > 1
    assert engine_file.metadata.num_row_groups == 1
    num_seqs = result.step_table["num_seqs"]
    assert [seqs_file.metadata.row_group(i).num_rows for i in range(num_groups)] == \
        [int(num_seqs[16 * i:16 * (i + 1)].sum()) for i in range(num_groups)]
    ours, theirs = (read_trace_table(tmp_path / name)[0] for name in ("sim", "engine"))
    assert ours.schema.equals(theirs.schema)
    assert ours.equals(theirs)
    assert ours.column("request_ids").to_pylist() == [list(ids) for ids in result.step_request_ids]


@pytest.mark.skipif(not outputs.FORKED, reason="steps.parquet by a forked process: Linux only")
def test_forked_writer_writes_the_in_process_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--out` by a child process (`_ForkedWriter`: the parts and the CSV tables through a pipe) writes the files the
    in-process writer writes, byte for byte, in several parts; a failure in the child is raised here with its
    traceback, and a part handed over after it ends is refused the same way."""
    from roofline.sim import recorder, simulator, steps_file

    monkeypatch.setattr(steps_file, "ROW_GROUP_STEPS", 64)  # (several parts; a multiple of the row groups)
    monkeypatch.setattr(recorder.StepRows, "CHUNK", 64)
    monkeypatch.setattr(simulator, "STEPS_PER_PART", 64)
    model, hardware, engine, load = CASES["mistral-sliding-window"]
    deployment = make_deployment(model, hardware, engine)
    summary = {"seed": 3, "workload": "small", "num_replicas": 1, "kv_cache": {}}
    # The parts through the shared memory: their arrays recorded in its slots (compiled) and the rest copied into the
    # ring (`_ForkedWriter.RING_BYTES`) as it is; slots so small that the arrays outgrow them (then copied into the
    # ring); one slot (each part waits for the child to free it); a sink without `step_records` (`stream.write`: the
    # arrays copied into the ring too), with the ring as it is, so small that each part waits for the child to free the
    # last one's place and wraps round, and so small that the larger parts go through the pipe.
    variants: dict[str, dict[str, int]] = {"in-process": {}, "forked": {}, "slots-small": {"SLOT_SEQS": 20},
                                           "one-slot": {"NUM_SLOTS": 1}, "no-slots": {"NUM_SLOTS": 0},
                                           "sink-write": {},
                                           "sink-write-ring-32k": {"RING_BYTES": 32 << 10, "RING_BYTES_ALONE": 32 << 10},
                                           "sink-write-ring-16k": {"RING_BYTES": 16 << 10, "RING_BYTES_ALONE": 16 << 10}}
    # (`no-slots`, as where the records are not compiled: the whole parts through the ring of `RING_BYTES_ALONE`)
    lying: dict[str, int] = {}
    sizes = {attr: getattr(outputs._ForkedWriter, attr) for attr in ("RING_BYTES", "NUM_SLOTS", "SLOT_SEQS")}
    sizes["RING_BYTES_ALONE"] = outputs._ForkedWriter.RING_BYTES_ALONE
    for name, changes in variants.items():
        monkeypatch.setattr(outputs, "FORKED", name != "in-process")
        for attr, size in sizes.items():
            monkeypatch.setattr(outputs._ForkedWriter, attr, changes.get(attr, size))
        out = tmp_path / name
        out.mkdir()
        stream = outputs.StepTraceStream(out, deployment)
        assert (stream._child is not None) == (name != "in-process")
        if stream._child is not None:  # (how many bytes each part named where they lie)
            counted = stream._child._lying

            def count(pieces: list[memoryview], counted: Any = counted, name: str = name) -> list[int | None]:
                found = counted(pieces)
                lying[name] = lying.get(name, 0) + sum(p.nbytes for p, at in zip(pieces, found) if at is not None)
                return found

            monkeypatch.setattr(stream._child, "_lying", count)
        result = run_simulation(deployment, load, SimulationOptions(),
                                step_sink=stream.write if name.startswith("sink-write") else stream)
        stream.write_tables(outputs.csv_tables(result))
        placed = stream._child._placed if stream._child is not None else 0  # (bytes placed in the ring)
        outputs.write_outputs(out, deployment, result, summary, stream)
        if name.endswith("ring-32k"):  # (round the ring and again)
            assert placed > 1.5 * (32 << 10)
        elif name.endswith("ring-16k"):  # (the larger parts through the pipe)
            assert placed < 2 * (16 << 10)
    if step_record.COMPILED:  # the arrays where they were recorded, unless they outgrew their slot
        assert lying["forked"] > 10 * lying["slots-small"] and lying["forked"] == lying["one-slot"] > 0
    assert not any(lying.get(name, 0) for name in variants if name.startswith("sink-write") or name == "no-slots")
    for name in list(variants)[1:]:
        for file in ("steps.parquet", "sequences.parquet", "requests.csv", "timeseries.csv", "summary.json",
                     "run.json"):
            assert (tmp_path / name / file).read_bytes() == (tmp_path / "in-process" / file).read_bytes(), (file, name)

    def failing_table(*args: object) -> pa.Table:
        raise ValueError("no table today")

    monkeypatch.setattr(outputs, "FORKED", True)
    monkeypatch.setattr(outputs._ForkedWriter, "NUM_SLOTS", 1)  # (the next part's slot waits for the failed child)
    monkeypatch.setattr(steps_file, "steps_table", failing_table)  # (the child is a copy: it fails there)
    (tmp_path / "failing").mkdir()
    stream = outputs.StepTraceStream(tmp_path / "failing", deployment)
    with pytest.raises(RuntimeError, match="no table today"):  # (at the next part handed over, or at the end)
        run_simulation(deployment, load, SimulationOptions(), step_sink=stream)
        stream.close()
    with pytest.raises(RuntimeError, match="no table today"):  # (and again: the child is gone)
        stream.close()


@pytest.mark.parametrize("name", ["pandas", "numpy", "pyarrow", "PyYAML", "pyyaml"])
def test_an_installed_version_is_importlib_metadatas(name: str) -> None:
    import importlib.metadata

    from roofline.sim import steps_file

    steps_file.installed_version.cache_clear()
    assert steps_file.installed_version(name) == importlib.metadata.version(name)


def test_an_installed_version_beside_an_egg_or_a_second_dist_info_is_importlib_metadatas(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder on the path with an egg of the distribution, or two dist-info folders of it: importlib.metadata's
    answer (here: read by it); a plain dist-info folder: its METADATA's Version header, as importlib.metadata reads
    it; a folder before them without the distribution is passed over."""
    import importlib.metadata

    from roofline.sim import steps_file

    def dist_info(folder: Path, name: str, version: str, suffix: str = ".dist-info") -> None:
        info = folder / f"{name}-{version}{suffix}"
        info.mkdir(parents=True)
        (info / ("METADATA" if suffix == ".dist-info" else "PKG-INFO")).write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nVersion: 9.9 (the description)\n")

    empty, plain, egg, two = tmp_path / "empty", tmp_path / "plain", tmp_path / "egg", tmp_path / "two"
    empty.mkdir()
    dist_info(plain, "Some_Dist", "1.2.3")
    dist_info(egg, "some_dist", "2.0", ".egg-info")
    dist_info(two, "some-dist", "3.0")
    dist_info(two, "Some.Dist", "3.1")
    for folder in (plain, egg, two):
        monkeypatch.setattr("sys.path", [str(empty), str(folder)])
        steps_file.installed_version.cache_clear()
        assert steps_file.installed_version("some-dist") == importlib.metadata.version("some-dist")
    monkeypatch.setattr("sys.path", [str(empty), str(plain)])
    assert steps_file._dist_info_version("some-dist") == "1.2.3"
    monkeypatch.setattr("sys.path", [str(egg)])
    assert steps_file._dist_info_version("some-dist") is None
    steps_file.installed_version.cache_clear()


def test_the_writer_takes_jemalloc_where_pyarrow_has_it_and_the_user_chose_no_pool(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`_choose_arrow_pool` (the forked writer, before pyarrow's import): jemalloc where pyarrow's build has it (its
    arrow/util/config.h), nothing where it lacks it (Arrow would warn) or where ARROW_DEFAULT_MEMORY_POOL is set."""
    import importlib.machinery
    import importlib.util

    def pyarrow_with(config: str | None) -> None:
        package = tmp_path / f"site-{len(list(tmp_path.iterdir()))}" / "pyarrow"
        (package / "include" / "arrow" / "util").mkdir(parents=True)
        if config is not None:
            (package / "include" / "arrow" / "util" / "config.h").write_text(f"#define ARROW_MIMALLOC\n{config}\n")
        spec = importlib.machinery.ModuleSpec("pyarrow", None, is_package=True)
        spec.submodule_search_locations = [str(package)]
        monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)

    pyarrow_with("#define ARROW_JEMALLOC")
    environ: dict[str, str] = {}
    outputs._choose_arrow_pool(environ)
    assert environ == {"ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}
    environ = {"ARROW_DEFAULT_MEMORY_POOL": "system"}
    outputs._choose_arrow_pool(environ)
    assert environ == {"ARROW_DEFAULT_MEMORY_POOL": "system"}
    for config in ("#define ARROW_JEMALLOC_VENDORED", "/* #undef ARROW_JEMALLOC */", None):
        pyarrow_with(config)
        environ = {}
        outputs._choose_arrow_pool(environ)
        assert environ == {}, config
