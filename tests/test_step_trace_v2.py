"""The step trace's schema version 2 (steps.parquet without list columns + sequences.parquet, written by the
simulator): read into the same DataFrame as version 1, and each bad file one clear line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.core.trace import (
    FLAT_SCHEMA_VERSION,
    SEQUENCES_FILE,
    STEPS_FILE,
    read_trace,
    read_trace_table,
    sequence_schema,
)
from roofline.cli import main

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--model", "llama-156m", "--hardware", "h100-sxm", "--workload", "multi-turn-chat", "--num-requests", "40",
         "--request-rate", "20", "--output-len", "12", "--max-model-len", "4096", "--num-gpu-blocks-override", "2000"]


@pytest.fixture(scope="module")
def flat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulator's `--out` folder: a schema version 2 trace."""
    out = tmp_path_factory.mktemp("v2") / "out"
    assert main(["simulate", *SMALL, "--num-replicas", "2", "--out", str(out), "--json"]) == 0
    return out


@pytest.fixture
def copy(flat: Path, tmp_path: Path) -> Path:
    """A copy of `flat` to spoil."""
    return Path(shutil.copytree(flat, tmp_path / "trace"))


def test_the_simulator_writes_version_2_in_both_files_and_run_json(flat: Path) -> None:
    key = b"roofline.step_trace.schema_version"
    assert json.loads((flat / "run.json").read_text())["schema_version"] == FLAT_SCHEMA_VERSION == 2
    steps, seqs = pq.read_schema(flat / STEPS_FILE), pq.read_schema(flat / SEQUENCES_FILE)
    assert steps.metadata[key] == seqs.metadata[key] == b"2"
    assert not any(pa.types.is_list(field.type) for field in steps)
    assert seqs.equals(sequence_schema()) and not any(field.nullable for field in seqs)
    assert pq.read_metadata(flat / SEQUENCES_FILE).num_rows == int(pq.read_table(flat / STEPS_FILE)["num_seqs"]
                                                                   .to_numpy().sum())


def test_version_2_reads_as_version_1_lists_with_the_request_ids_of_requests_csv(flat: Path, tmp_path: Path) -> None:
    """The lists rebuilt at each step's num_seqs; written back as version 1 (the list columns), the same table."""
    from engine.core.trace import write_trace

    table, meta = read_trace_table(flat)
    steps = pq.read_table(flat / STEPS_FILE)
    seqs = pq.read_table(flat / SEQUENCES_FILE)
    ids = (flat / "requests.csv").read_text().splitlines()[1:]
    ids = [line.split(",", 1)[0] for line in ids]
    ends = np.cumsum(steps["num_seqs"].to_numpy())
    k = len(ends) // 2  # a step in the middle
    lo, hi = int(ends[k - 1]), int(ends[k])
    row = table.slice(k, 1).to_pylist()[0]
    assert row["query_lens"] == seqs["query_len"].to_pylist()[lo:hi]
    assert row["context_lens"] == seqs["context_len"].to_pylist()[lo:hi]
    assert row["emits"] == seqs["emits"].to_pylist()[lo:hi]
    assert row["request_ids"] == [ids[i] for i in seqs["request_index"].to_pylist()[lo:hi]]
    write_trace(tmp_path / "v1", table, meta)
    again, meta_again = read_trace_table(tmp_path / "v1")
    assert json.loads((tmp_path / "v1" / "run.json").read_text())["schema_version"] == 1
    assert again.equals(table) and meta_again == meta
    frame, _ = read_trace(flat)
    assert list(frame.columns) == table.column_names and len(frame) == len(steps)


def test_version_1_is_still_read() -> None:
    """A committed real vLLM trace (version 1, list columns)."""
    steps, meta = read_trace(REPO / "tests" / "data" / "vllm-0.32.0-cpu-trace")
    assert meta.source == "vllm" and len(steps) > 0
    assert all(len(q) == n for q, n in zip(steps["query_lens"], steps["num_seqs"]))


def _rewrite_sequences(trace: Path, table: pa.Table) -> None:
    pq.write_table(table, trace / SEQUENCES_FILE)


def test_a_missing_sequences_file_is_one_line_naming_it(copy: Path) -> None:
    (copy / SEQUENCES_FILE).unlink()
    with pytest.raises(ValueError, match=r"sequences.parquet: missing; a schema version 2 trace") as err:
        read_trace(copy)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("spoil, message", [
    ("version", r"sequences.parquet: schema version b'1', expected 2"),
    ("type", r"sequences.parquet: column 'request_index' has type int64, expected int32"),
    ("missing", r"sequences.parquet: missing column 'emits' \(expected bool\)"),
    ("extra", r"sequences.parquet: unknown column 'replica'"),
    ("rows", r"sequences.parquet: \d+ rows, but steps.parquet's num_seqs sum to \d+"),
    ("index", r"sequences.parquet: request_index 40 is not a row of requests.csv \(40 rows\)"),
    ("nulls", r"sequences.parquet: column 'query_len' has null values"),
])
def test_a_bad_sequences_file_is_one_line_naming_the_field(copy: Path, spoil: str, message: str) -> None:
    table = pq.read_table(copy / SEQUENCES_FILE)
    key = b"roofline.step_trace.schema_version"
    if spoil == "version":
        table = table.replace_schema_metadata({key: b"1"})
    elif spoil == "type":
        table = table.set_column(3, "request_index", table["request_index"].cast(pa.int64()))
    elif spoil == "missing":
        table = table.drop_columns(["emits"])
    elif spoil == "extra":
        table = table.append_column("replica", pa.array(np.zeros(len(table), np.int32)))
    elif spoil == "rows":
        table = table.slice(0, len(table) - 1)
    elif spoil == "index":
        index = table["request_index"].to_numpy().copy()
        index[len(index) // 2] = 40
        table = table.set_column(3, pa.field("request_index", pa.int32(), nullable=False), pa.array(index))
    else:
        query = table["query_len"].to_pylist()
        query[0] = None
        table = pa.table({**{n: table[n] for n in table.column_names}, "query_len": pa.array(query, pa.int32())},
                         metadata={key: b"2"}).select(table.column_names)
    _rewrite_sequences(copy, table)
    with pytest.raises(ValueError, match=message) as err:
        read_trace(copy)
    assert "\n" not in str(err.value)


def test_a_version_2_steps_file_with_list_columns_or_version_1_metadata_is_refused(copy: Path) -> None:
    steps = pq.read_table(copy / STEPS_FILE)
    pq.write_table(steps.replace_schema_metadata({b"roofline.step_trace.schema_version": b"1"}), copy / STEPS_FILE)
    with pytest.raises(ValueError, match=r"steps.parquet: schema version b'1', expected 2 \(run.json's\)"):
        read_trace(copy)
    lists = steps.append_column("query_lens", pa.array([[1]] * len(steps), pa.list_(pa.int32())))
    pq.write_table(lists, copy / STEPS_FILE)
    with pytest.raises(ValueError, match=r"steps.parquet: list column 'query_lens' in a schema version 2 trace"):
        read_trace(copy)


def test_a_version_2_trace_without_requests_csv_is_refused(copy: Path) -> None:
    (copy / "requests.csv").unlink()
    with pytest.raises(ValueError, match=r"requests.csv: missing; a schema version 2 trace's request_index"):
        read_trace(copy)


def test_cli_a_bad_version_2_trace_is_one_line_and_exit_2(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (copy / SEQUENCES_FILE).unlink()
    assert main(["compare", "--trace", str(copy), "--hardware", "h100-sxm"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "sequences.parquet: missing" in err and "Traceback" not in err


def test_the_writer_imports_no_pandas(tmp_path: Path) -> None:
    """The writer (here in process) builds and writes both files from numpy arrays: pyarrow imports pandas (and
    pyarrow.compute) where handed anything else (a ChunkedArray's `to_numpy`), most of a short run's writer."""
    import subprocess
    import sys

    code = ("import sys\nfrom roofline.sim import outputs\noutputs.FORKED = False\nfrom roofline.cli import main\n"
            f"assert main(['simulate', *{SMALL!r}, '--out', {str(tmp_path)!r}, '--json']) == 0\n"
            "assert 'pandas' not in sys.modules and 'pyarrow.compute' not in sys.modules, 'imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / SEQUENCES_FILE).is_file()
