"""What a simulation records while it runs (per request and per step, kept as arrays of numbers) and the result it
builds from them: the request and step tables, the inter-token gaps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.core import metrics
from engine.core.request import Request
from engine.core.step_plan import StepPlan
from engine.core.step_record import StepRecords, StepSequences
from roofline.sim.metrics import InterTokenLatencies, SummaryOptions, summarize
from roofline.sim.native import COMPILED, _simcore
from roofline.sim.table import Columns, Table
from roofline.sim.token_times import Segments, TimeSeries, TokenTimes
from roofline.sim.workload import RequestSpec

if TYPE_CHECKING:
    import pandas as pd

if _simcore is not None:  # the step rows read a StepPlan's fields at its slots (roofline/sim/_simcore.c)
    _simcore.bind_plan_type(StepPlan)
_ROWS_IN_C = COMPILED and hasattr(_simcore, "rows_of")  # (a build of this source)
_COLUMNS_IN_C = COMPILED and hasattr(_simcore, "spec_column")


@dataclass
class SimulationResult:
    """What a run produced; `request_table` in workload order, `step_table` in (start time, replica) order: numpy
    columns (`roofline.sim.table`), as DataFrames in `requests` and `steps` (built on first use: the printout reads
    the columns, and pandas is imported only for a DataFrame)."""

    request_table: Table
    step_table: Table
    itl: InterTokenLatencies | TokenTimes  # (a simulation's: TokenTimes)
    # Per step: query, context, emits (empty unless the steps were recorded), and each sequence's request id.
    step_seqs: StepSequences = field(repr=False)
    wall_time_s: float = 0.0
    # Where an early stop (`roofline.sim.simulator.EarlyStop`) ended the run, None when every request finished.
    stopped_at_s: float | None = None

    @cached_property
    def requests(self) -> pd.DataFrame:
        """The request table as a DataFrame (its own copy of the columns)."""
        return self.request_table.to_pandas()

    @cached_property
    def steps(self) -> pd.DataFrame:
        """The step table as a DataFrame (on the table's arrays)."""
        return self.step_table.to_pandas(copy=False)

    @property
    def step_request_ids(self) -> list[tuple[str, ...]]:
        """Per step, aligned with `step_seqs`: the request id of each sequence."""
        return self.step_seqs.all_request_ids()

    @property
    def timeseries_table(self) -> Table:
        """KV usage and running/waiting requests of each replica at each step start."""
        return timeseries_of(self.step_table)

    @property
    def timeseries(self) -> pd.DataFrame:
        """`timeseries_table` as a DataFrame."""
        return self.timeseries_table.to_pandas(copy=False)

    def summary(self, options: SummaryOptions = SummaryOptions()) -> dict[str, Any]:
        return summarize(self.request_table, self.itl, self.step_table, options)


def timeseries_of(steps: Columns) -> Table:
    """`SimulationResult.timeseries_table` of some steps' rows (a table of STEP_COLUMNS)."""
    return Table({"time_s": steps["start_s"], **{name: steps[name] for name in (
        "replica", "num_running", "num_waiting", "num_kv_blocks_used", "kv_usage")}})


class Recorder:
    """Per-request and per-step records, kept compact (arrays of numbers, not objects)."""

    def __init__(self, specs: Sequence[RequestSpec], record_steps: bool, step_sink: StepSink | None = None) -> None:
        n = len(specs)
        # (compiled: the dict made at its size at once, ~0.2 s less at 1,000,000 requests; the same dict)
        self.row_of = _simcore.rows_of(specs, "request_id") if _ROWS_IN_C and type(specs) is list else \
            {s.request_id: i for i, s in enumerate(specs)}
        self.first_scheduled = np.full(n, np.nan)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.num_output = np.zeros(n, np.int64)
        self.num_preemptions = np.zeros(n, np.int64)
        self.num_prefix_hits = np.zeros(n, np.int64)
        self.replica = np.zeros(n, np.int64)
        self.sent = np.full(n, np.nan)  # when the client sent it (= the arrival time in open loop)
        # Every token's time, as runs of the replicas' step stamps (`roofline.sim.token_times`): 8 bytes a step and
        # 32 a run instead of 12 bytes a token.
        self.token_runs = Segments()
        # Compiled (roofline/sim/_simcore.c): `finished` of a request the scheduler stamped in one call, where it can.
        self._finisher = _simcore.Finisher(self.first_scheduled, self.num_output, self.num_preemptions,
                                           self.num_prefix_hits, self.first_token, self.finish,
                                           self.token_runs) if COMPILED else None
        self._finish = self._finisher.record if self._finisher is not None else None
        self.record_steps = record_steps or step_sink is not None
        self.steps = StepRows()
        # Where each part's sequences are recorded: the sink's `step_records(row_of)` where it has one (the `--out`
        # writer process's shared memory, `roofline.sim.outputs.StepTraceStream`), else StepRecords of their own;
        # a part's sequences name their requests by row of the request table (the step trace's sequences.parquet
        # stores those), the run's own (no sink: `SimulationResult.step_seqs`) by request id.
        sink_records = getattr(step_sink, "step_records", None)
        self._new_records: Callable[[], Any] = (
            StepRecords if step_sink is None
            else partial(sink_records, self.row_of) if sink_records is not None
            else partial(StepRecords, row_of=self.row_of))
        self.step_seqs = self._new_records()  # the steps' sequences since the last part went to `step_sink`
        # Where the steps go in parts as they come (`roofline.sim.outputs.StepTraceStream.write`), if anywhere, and
        # how many of them went.
        self.step_sink = step_sink
        self.num_streamed_steps = 0

    def stream_steps(self, last: bool = False) -> None:
        """Hand the steps recorded since the last part to `step_sink` and drop their sequences (after the `last`
        part, records of their own: no place of the sink's is taken for none)."""
        assert self.step_sink is not None
        seqs = self.step_seqs.sequences()
        frame = self.steps.frame(self.num_streamed_steps)
        self.num_streamed_steps += len(frame)
        self.step_sink(frame, seqs)
        self.step_seqs = StepRecords() if last else self._new_records()

    def finished(self, req: Request, series: TimeSeries, times: np.ndarray | None = None) -> None:
        """Record a finished request whose tokens were stamped with entries of `series` (its replica's step times,
        or when its API-server process's client saw them); `times`: its tokens' times where they differ from those
        the scheduler stamped (the client's, behind an API server of more than one process)."""
        row = self.row_of[req.request_id]
        if times is None and self._finish is not None and self._finish(req, row, series):
            return  # (every column below and the runs, as the code below makes them: `_simcore.Finisher`)
        self.first_scheduled[row] = req.first_scheduled_time_s
        self.num_output[row] = req.num_output_tokens
        if req.num_preemptions:  # (the two columns start at 0: most requests leave them so)
            self.num_preemptions[row] = req.num_preemptions
        if req.num_prefix_hit_tokens:
            self.num_prefix_hits[row] = req.num_prefix_hit_tokens
        if times is None:
            if COMPILED:  # the scheduler's list of floats, read as it is (`Segments.add`; roofline/sim/_simcore.c)
                times_list = req.token_times_s
                self.first_token[row] = times_list[0] if times_list else None
                self.finish[row] = req.finish_time_s
                self.token_runs.add(row, times_list, series)
                return
            times = req.token_times_array  # (mostly a view of the scheduler's array of step times: no conversion)
            # (its first: `first_token_time_s`, the same float, without reading the request's times again)
            self.first_token[row] = times.item(0) if len(times) else None
            self.finish[row] = req.finish_time_s
        else:
            self.first_token[row] = times[0]
            self.finish[row] = times[-1]
        self.token_runs.add(row, times, series)


# Takes the rows of some steps (a table of STEP_COLUMNS) and their sequences (each one's request as its row of the
# request table: `StepSequences.request_names` None); a sink with a `step_records(row_of)` method gives the records
# each part's sequences are written into (`Recorder`).
StepSink = Callable[[Table, StepSequences], None]

# One row per step; the names of engine.core.trace's step columns where they exist. The columns holding times (and
# the KV usage) are float64, the others int64.
STEP_COLUMNS = ("replica", "step_index", "start_s", "end_s", "duration_s", "num_seqs", "num_batched_tokens",
                "num_prefill_tokens", "num_decode_tokens", "num_output_tokens", "num_preemptions",
                "num_new_prefix_hit_tokens", "num_kv_blocks_used", "num_kv_blocks_total", "kv_usage", "num_running",
                "num_waiting")
_FLOAT_COLUMNS = frozenset(("start_s", "end_s", "duration_s", "kv_usage"))


class StepRows:
    """The step rows (tuples of STEP_COLUMNS' values) as they come, kept compact: every `CHUNK` rows the tuples (or
    the compiled block's rows) go into one growing array per column (float64, or int64 where the column is an int:
    the counts, below 2^53, exact in a float64 and cast as `astype(np.int64)` casts), 136 bytes a step instead of ~500
    for a tuple of Python numbers (1.3 GB for the 2.8 million steps of 1,000,000 ShareGPT requests). The table at
    the end is the columns' first rows, no copy (blocks joined at the end were a second copy of every row, 353 MB
    and 2 s of the 1,000,000-request run, docs/benchmark-history/2026-11-30j-simloop.md); an array grows in place
    (`ndarray.resize`: realloc, which moves a large block's pages without copying them)."""

    CHUNK = 2048  # rows per block (a divisor of `roofline.sim.simulator.STEPS_PER_PART`: a part ends with a block)

    def __init__(self) -> None:
        self.rows: list[tuple] = []  # the latest rows, not yet in the columns (`append` is the list's)
        self.append = self.rows.append
        self._columns = [np.empty(self.CHUNK * 4, np.float64 if name in _FLOAT_COLUMNS else np.int64)
                         for name in STEP_COLUMNS]
        self._num = 0  # rows in the columns
        # Compiled (roofline/sim/_simcore.c): `record(engine_index, plan, now_s, duration_s)` writes a step's row into
        # `_array` (the tuple's values, the same doubles) and says whether it is full; `flush` copies the rows out.
        # None: the rows are tuples (`append`).
        self._array = np.empty((self.CHUNK, len(STEP_COLUMNS))) if COMPILED else None
        self._block = _simcore.StepBlock(self._array) if COMPILED else None
        self.record: Callable[[int, Any, float, float], bool] | None = \
            self._block.record if self._block is not None else None

    def __len__(self) -> int:
        return len(self.rows) + (self._block.count if self._block is not None else 0) + self._num

    def _take(self, block: np.ndarray) -> None:
        """Append a block of rows (float64, one row a step) to the columns."""
        k, at = len(block), self._num
        if at + k > len(self._columns[0]):
            capacity = max(2 * len(self._columns[0]), at + k)
            columns = self._columns
            # No view of a column is ever out (`frame` copies; `table` hands the arrays over and starts new ones), so
            # the reference check is off: a profiler or debugger holding the bound method adds a reference it counts.
            for i in range(len(columns)):
                columns[i].resize(capacity, refcheck=False)
        for i, column in enumerate(self._columns):
            column[at:at + k] = block[:, i]
        self._num = at + k

    def flush(self) -> None:
        """Move the pending rows into the columns (call every so often; `table` does at the end)."""
        if self._block is not None and self._block.count:
            self._take(self._array[:self._block.count])  # type: ignore[index]
            self._block.reset()
        if self.rows:
            # (fromiter over the flattened rows: half the time of `np.array(rows)`, the same float64 conversions)
            width = len(self.rows[0])
            self._take(np.fromiter(chain.from_iterable(self.rows), np.float64,
                                   width * len(self.rows)).reshape(-1, width))
            self.rows.clear()

    def table(self) -> Table:
        """The rows as a table of STEP_COLUMNS (float64 where `_FLOAT_COLUMNS`, else int64); the rows are
        dropped."""
        self.flush()
        columns, num = self._columns, self._num
        self._columns = [column[:0].copy() for column in columns]
        self._num = 0
        return Table({name: column[:num] for name, column in zip(STEP_COLUMNS, columns)})

    def frame(self, start: int) -> Table:
        """`table()`'s rows from row `start` on (copies), the rows kept."""
        self.flush()
        return Table({name: column[start:self._num].copy() for name, column in zip(STEP_COLUMNS, self._columns)})


def build_result(specs: Sequence[RequestSpec], rec: Recorder, wall_s: float,
                 stopped_at_s: float | None = None) -> SimulationResult:
    itl = rec.token_runs.token_times(len(specs))
    itl.presort()  # (the ITL multisets' sort, on the second core while the tables and the printout are made)
    due = _spec_column(specs, "arrival_s", np.float64)
    arrival = rec.sent  # at the server: when the client sent it
    num_output = rec.num_output
    # The last token is sampled in the step that finishes the request: finish is the last token's time.
    tpot = metrics.tpot_s_array(rec.first_token, rec.finish, num_output)
    requests = Table({
        "request_id": _simcore.spec_column(specs, "request_id", None) if _COLUMNS_IN_C and type(specs) is list
        else [s.request_id for s in specs],
        "replica": rec.replica,
        "arrival_s": arrival,
        "client_queue_s": arrival - due,
        "num_prompt_tokens": _spec_column(specs, "num_prompt_tokens", np.int64),
        "num_output_tokens": num_output,
        "first_scheduled_s": rec.first_scheduled,
        "first_token_s": rec.first_token,
        "finish_s": rec.finish,
        "queueing_s": metrics.queueing_s(arrival, rec.first_scheduled),
        "ttft_s": metrics.ttft_s(arrival, rec.first_token),
        "tpot_s": tpot,
        "e2e_s": metrics.e2e_s(arrival, rec.finish),
        "num_preemptions": rec.num_preemptions,
        "num_prefix_hit_tokens": rec.num_prefix_hits,
    })
    if rec.step_sink is not None and (len(rec.step_seqs) or not rec.num_streamed_steps):
        rec.stream_steps(last=True)
    steps = rec.steps.table()
    # (Streamed steps: their sequences went to the sink, none here.)
    return SimulationResult(requests, steps, itl, rec.step_seqs.sequences(), wall_s, stopped_at_s)


def _spec_column(specs: Sequence[RequestSpec], name: str, dtype: type) -> np.ndarray:
    """`np.array([getattr(s, name) for s in specs], dtype)`; compiled (`_simcore.spec_column`: one pass in C, ~0.05 s
    less a column at 1,000,000 requests) where every value is a float (int) as the specs hold them."""
    if _COLUMNS_IN_C and type(specs) is list:
        out: np.ndarray = np.empty(len(specs), dtype)
        if _simcore.spec_column(specs, name, out):
            return out
    return np.array([getattr(s, name) for s in specs], dtype=dtype)
