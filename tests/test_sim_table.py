"""The run's tables without pandas (`roofline.sim.table`): each reduction the printout uses gives pandas' float bit
for bit (NaN handling, integer columns, numpy's pairwise sums around its blocking), and the consumers read a Table
and a DataFrame of the same columns alike."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from roofline.sim.bench_metrics import BenchMetricOptions, bench_metrics, steady_state
from roofline.sim.metrics import SummaryOptions, run_figures, summarize
from roofline.sim.table import Table, between, column, skipna_max, skipna_mean, skipna_sum
from roofline.sim.timeline import load_over_time, peaks
from roofline.sim.verdict import load_verdict
from roofline.sim.workload import read_histogram

# Around numpy's pairwise summation block (8 unrolled, 128 a block) and larger: a different summation order would
# change the last bits of these sums.
SIZES = (0, 1, 7, 8, 9, 127, 128, 129, 1000, 4097, 10_001)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("size", SIZES)
def test_float_reductions_are_pandas_bit_for_bit(size: int) -> None:
    rng = np.random.default_rng(size)
    values = rng.lognormal(-3.0, 1.5, size)
    with_nan = values.copy()
    with_nan[rng.random(size) < 0.2] = math.nan
    for array in (values, with_nan):
        series = pd.Series(array)
        assert _same(skipna_mean(array), float(series.mean()))
        assert _same(float(skipna_sum(array)), float(series.sum()))
        assert _same(skipna_max(array), float(series.max()))
        assert (between(array, 0.01, 0.1) == series.between(0.01, 0.1).to_numpy()).all()


@pytest.mark.parametrize("size", SIZES)
def test_integer_reductions_are_pandas(size: int) -> None:
    rng = np.random.default_rng(size)
    counts = rng.integers(0, 9000, size)
    series = pd.Series(counts)
    assert _same(skipna_mean(counts), float(series.mean()))
    assert int(skipna_sum(counts)) == int(series.sum())
    # a ratio of an integer column (the verdict's token budget use): the same float division, the same mean
    assert _same(skipna_mean(counts / 8192), float((series / 8192).mean()))


def test_all_nan_and_empty_columns_are_nan_as_pandas_gives() -> None:
    nan = np.full(3, math.nan)
    assert math.isnan(skipna_mean(nan)) and math.isnan(pd.Series(nan).mean())
    assert math.isnan(skipna_max(nan)) and math.isnan(pd.Series(nan).max())
    assert skipna_sum(nan) == pd.Series(nan).sum() == 0.0
    assert math.isnan(skipna_mean(np.zeros(0))) and math.isnan(pd.Series(np.zeros(0)).mean())


def test_a_table_is_its_columns_and_becomes_the_dataframe_pandas_builds() -> None:
    columns = {"request_id": ["a", "b"], "ttft_s": np.array([0.5, math.nan]), "num_output_tokens": np.array([3, 4])}
    table = Table(columns)
    assert len(table) == 2 and table.columns == ("request_id", "ttft_s", "num_output_tokens")
    assert "ttft_s" in table and "tpot_s" not in table
    assert column(table, "num_output_tokens", float).dtype == np.float64
    pd.testing.assert_frame_equal(table.to_pandas(), pd.DataFrame(columns))


def _run() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A hand-made run: 40 requests over 20 s, one unfinished (NaN), one of a single token; 60 steps of which some
    have requests waiting."""
    rng = np.random.default_rng(7)
    n, m = 40, 60
    arrival = np.sort(rng.uniform(0, 20, n))
    ttft = rng.uniform(0.05, 0.5, n)
    n_out = rng.integers(1, 50, n)
    n_out[3] = 1
    finish = arrival + ttft + 0.02 * n_out
    finish[-1] = math.nan
    requests = {
        "arrival_s": arrival, "client_queue_s": np.where(np.arange(n) % 5 == 0, 0.1, 0.0),
        "num_prompt_tokens": rng.integers(10, 900, n), "num_output_tokens": n_out,
        "first_token_s": arrival + ttft, "finish_s": finish, "queueing_s": rng.uniform(0, 0.1, n),
        "ttft_s": ttft, "tpot_s": np.where(n_out > 1, 0.02, math.nan), "e2e_s": finish - arrival,
        "num_preemptions": rng.integers(0, 2, n), "num_prefix_hit_tokens": rng.integers(0, 64, n)}
    start = np.sort(rng.uniform(0, 21, m))
    steps = {
        "replica": np.zeros(m, np.int64), "start_s": start, "end_s": start + 0.01,
        "num_output_tokens": rng.integers(0, 30, m), "num_waiting": rng.integers(0, 3, m),
        "kv_usage": rng.uniform(0, 1, m), "num_running": rng.integers(1, 30, m),
        "num_batched_tokens": rng.integers(1, 8192, m), "num_preemptions": rng.integers(0, 2, m)}
    return requests, steps


def test_the_printouts_consumers_read_a_table_as_its_dataframe() -> None:
    from roofline.sim.metrics import InterTokenLatencies

    requests, steps = _run()
    itl = InterTokenLatencies(np.full(80, 0.02), np.repeat(np.arange(40), 2))
    finished = {**requests, "finish_s": np.nan_to_num(requests["finish_s"], nan=25.0)}  # (vLLM's counting: all finish)
    as_tables = Table(requests), Table(steps), Table(finished)
    as_frames = pd.DataFrame(requests), pd.DataFrame(steps), pd.DataFrame(finished)
    options = BenchMetricOptions(goodput_ms={"ttft": 300.0})
    results = []
    for req, st, done in (as_tables, as_frames):
        results.append(repr([
            summarize(req, itl, st, SummaryOptions(warmup_s=1.0, slo_ttft_s=0.3, slo_tpot_s=0.05)),
            summarize(req, itl, st, SummaryOptions(drain=True)),
            run_figures(req),
            bench_metrics(done, itl, column(req, "num_prompt_tokens"), options, None, 2.0),
            steady_state(req, itl, st, 0.1, 0.1, (50.0, 99.0)),
            load_verdict(req, st, 64, 8192, burst=False),
            peaks(load_over_time(req, st, 0.3, 0.05)),
        ]))
    assert results[0] == results[1]
    assert "nan" in results[0]  # (the unfinished request's NaN went through the reductions)


def test_a_plain_histogram_reads_as_pandas_reads_it_and_another_falls_back(tmp_path: Path) -> None:
    plain = tmp_path / "plain.csv"
    plain.write_text("count,min_tokens,max_tokens,note\r\n5,1,1,0\r\n007,2,4,1\r\n")
    assert read_histogram(plain, "x") == ((1, 1, 5.0), (2, 4, 7.0))
    fractional = tmp_path / "fractional.csv"
    fractional.write_text("min_tokens,max_tokens,count\n1,1,0.5\n\n2,3,1.25\n")  # pandas': a float, a blank line
    assert read_histogram(fractional, "x") == ((1, 1, 0.5), (2, 3, 1.25))


def test_the_trace_writers_arrays_are_pyarrows_own() -> None:
    # steps.parquet's columns built from their buffers (roofline.sim.steps_file._arrow: pa.array would import pandas)
    import pyarrow as pa

    from roofline.sim.steps_file import _arrow

    rng = np.random.default_rng(3)
    cases = [(rng.integers(-5, 2**40, 37), pa.int64()), (rng.integers(0, 9000, 37).astype(np.int32), pa.int32()),
             (np.array([0.5, math.nan, -0.0, math.inf]), pa.float64()), (rng.random(37) < 0.3, pa.bool_()),
             (np.zeros(0), pa.float64()), (np.arange(10)[::3], pa.int64()), (["r-0", "", "ü-1"], pa.string()),
             ([], pa.string())]
    for values, typ in cases:
        built, expected = _arrow(values, typ), pa.array(values, type=typ)
        # (by the values' reprs: NaN equal to NaN, -0.0 not 0.0)
        assert built.type == expected.type and repr(built.to_pylist()) == repr(expected.to_pylist()), (values, typ)
        assert built.null_count == expected.null_count == 0
        built.validate(full=True)
    mixed = _arrow(np.arange(3), pa.float64())  # another type: pa.array's conversion
    assert mixed.equals(pa.array([0.0, 1.0, 2.0]))
