"""CSV traces: our own columns and the public production traces' (Azure's LLM inference traces, BurstGPT), each
read from the file as published, told apart by its header (`read_csv_trace`).

    rows = read_csv_trace(path)      # TraceRows: arrival_s (from the earliest row), prompt and output tokens

Formats (the columns this reader needs; any others in the file are not read):

- ours: `arrival_s,prompt_tokens,output_tokens` (seconds; integers from 1).
- azure: `TIMESTAMP,ContextTokens,GeneratedTokens` (ISO 8601 datetimes), Azure's LLM inference traces
  (github.com/Azure/AzurePublicDataset, CC-BY 4.0): 2023 (AzureLLMInferenceDataset2023.md: one hour of
  November 16th 2023, code and conversation, `data/AzureLLMInferenceTrace_{code,conv}.csv`; Patel et al.,
  "Splitwise", ISCA'24) and 2024 (AzureLLMInferenceDataset2024.md: a week of May 2024, `..._{code,conv}_1week.csv`
  on Azure blob storage; Stojkovic et al., "DynamoLLM", HPCA'25), whose timestamps carry a UTC offset and drop
  the fraction on a whole second ("2024-05-12 00:00:00+00:00").
- burstgpt: `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type` (seconds from 0:00 of the first
  day), BurstGPT's ChatGPT and GPT-4 traces of Azure OpenAI (github.com/HPMLL/BurstGPT README, "Schema"; Wang
  et al., KDD'25); BurstGPT_3 adds `Session ID` and `Elapsed time` (read past: a replay is open loop).

A production trace records failed requests: BurstGPT's `BurstGPT_{1,2,3}.csv` keep them with `Response tokens` 0
(its README; the `_without_fails` files leave them out, as `vllm bench serve --dataset-name burstgpt` does:
vllm/benchmarks/datasets.py `BurstGPTDataset.load_data`). A row of the azure or burstgpt format with 0 output or 0
prompt tokens is a request no engine served (vLLM refuses an empty prompt and a max_tokens of 0), so it is left
out and counted (`TraceRows.num_left_out`), never silently; anything else a number cannot be (text, a fraction, a
negative, beyond `MAX_TOKENS`) is refused naming the file, line and column. The file is read in chunks, so a
week of Azure's (27.3 million rows) parses in bounded memory beside the arrays kept (24 bytes a row).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from roofline.errors import UserError
from roofline.sim.workload import MAX_TIME_S, MAX_TOKENS

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class CsvFormat:
    """A CSV trace format: the columns it is recognised by and the three it is read from."""

    name: str
    time_column: str
    prompt_column: str
    output_column: str
    header: tuple[str, ...]  # every column of the published file (all needed to recognise it)
    datetimes: bool  # time column: ISO 8601 datetimes (else seconds)
    production: bool  # rows of 0 tokens are failed requests, left out and counted (module docstring)


OURS = CsvFormat("csv", "arrival_s", "prompt_tokens", "output_tokens",
                 ("arrival_s", "prompt_tokens", "output_tokens"), datetimes=False, production=False)
AZURE = CsvFormat("azure", "TIMESTAMP", "ContextTokens", "GeneratedTokens",
                  ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), datetimes=True, production=True)
BURSTGPT = CsvFormat("burstgpt", "Timestamp", "Request tokens", "Response tokens",
                     ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"),
                     datetimes=False, production=True)
CSV_FORMATS = (OURS, AZURE, BURSTGPT)
CHUNK_ROWS = 1_000_000  # rows parsed at a time (~100 MB of pandas objects for Azure's datetimes)


@dataclass(frozen=True)
class TraceRows:
    """A trace's requests in file order: arrival times in seconds from the earliest, token counts."""

    format: str
    arrival_s: np.ndarray  # float64
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    block_ids: tuple[tuple[int, ...], ...] | None = None  # a Mooncake trace's (`roofline.sim.traces`)
    block_tokens: int = 0
    num_left_out: int = 0  # rows of failed requests (0 tokens), not replayed
    left_out_reason: str = ""

    def __len__(self) -> int:
        return len(self.arrival_s)


def csv_format(columns: list[str], path: Path) -> CsvFormat:
    """The format whose columns the header holds (ours and Azure's may carry more columns)."""
    for fmt in CSV_FORMATS:
        if all(c in columns for c in fmt.header):
            return fmt
    expected = "; ".join(f"{fmt.name}: {','.join(fmt.header)}" for fmt in CSV_FORMATS)
    raise UserError(f"--workload: '{path}' must have columns of a trace format ({expected}); found "
                    f"{','.join(map(str, columns)) or 'none'}")


def read_csv_trace(path: Path) -> TraceRows:
    """Every request of a CSV trace (module docstring), checked row by row."""
    import pandas as pd  # (here: pandas' C reader only for a CSV trace)

    try:
        columns = list(pd.read_csv(path, nrows=0).columns)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise UserError(f"--workload: '{path}' is not a readable CSV: {str(exc).splitlines()[0]}") from None
    fmt = csv_format(columns, path)
    times, prompts, outputs, kept = [], [], [], []
    first_line = 2  # the file's line of the chunk's first row (the header is line 1)
    for chunk in _chunks(path, fmt):
        time = _times(chunk[fmt.time_column], fmt, path, first_line)
        prompt = _tokens(chunk[fmt.prompt_column], fmt.prompt_column, fmt, path, first_line)
        output = _tokens(chunk[fmt.output_column], fmt.output_column, fmt, path, first_line)
        served = (prompt >= 1) & (output >= 1)
        times.append(time)
        prompts.append(prompt)
        outputs.append(output)
        kept.append(served)
        first_line += len(chunk)
    if not times or sum(len(t) for t in times) == 0:
        raise UserError(f"--workload: '{path}' holds no requests (a header and no rows)")
    served = np.concatenate(kept)
    stamps = np.concatenate(times)[served]
    if len(stamps) == 0:
        raise UserError(f"--workload: '{path}' holds no served request: every row has 0 {fmt.prompt_column} or 0 "
                        f"{fmt.output_column} (a failed request)")
    start = stamps.min()
    arrival_s = (stamps - start) / 1e9 if fmt.datetimes else stamps - start
    if fmt.datetimes and arrival_s.max() > MAX_TIME_S:
        row = int(np.flatnonzero(served)[np.argmax(arrival_s)])
        raise UserError(f"--workload: '{path}' line {row + 2} column {fmt.time_column}: {arrival_s.max():g} s after "
                        f"the first request; allowed: a trace spanning at most {MAX_TIME_S:g} s (a year)")
    num_left_out = int(len(served) - served.sum())
    reason = (f"{num_left_out:,} rows with 0 {fmt.prompt_column} or 0 {fmt.output_column} (failed requests)"
              if num_left_out else "")
    return TraceRows(fmt.name, arrival_s.astype(float), np.concatenate(prompts)[served],
                     np.concatenate(outputs)[served], num_left_out=num_left_out, left_out_reason=reason)


def _chunks(path: Path, fmt: CsvFormat) -> Iterator[pd.DataFrame]:
    import pandas as pd

    columns = [fmt.time_column, fmt.prompt_column, fmt.output_column]
    try:
        # Numbers parsed by the C reader (a column holding anything else comes as text, checked by `_numbers`), a
        # datetime as text for pandas' ISO 8601 parser; no cell read as missing, so an empty one is named as such.
        dtypes = {fmt.time_column: str} if fmt.datetimes else None
        yield from pd.read_csv(path, usecols=columns, dtype=dtypes, keep_default_na=False, chunksize=CHUNK_ROWS)
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise UserError(f"--workload: '{path}' is not a readable CSV: {str(exc).splitlines()[0]}") from None


def _bad(column: pd.Series, rows: np.ndarray, name: str, path: Path, first_line: int, allowed: str) -> UserError:
    row = int(rows[0])
    cell = column.iloc[row]  # text as written ('soon', ''), or the number the reader parsed
    shown = repr(cell) if isinstance(cell, str) else str(cell)
    return UserError(f"--workload: '{path}' line {first_line + row} column {name}: {shown} is not allowed; allowed: "
                     f"{allowed}")


def _times(column: pd.Series, fmt: CsvFormat, path: Path, first_line: int) -> np.ndarray:
    """Seconds (float64), or nanoseconds since the epoch (int64) for datetimes."""
    if fmt.datetimes:
        import pandas as pd

        # ISO 8601 in C (a tenth of format="mixed"'s time); offsets made UTC, so one file may mix them.
        stamps = pd.to_datetime(column, format="ISO8601", utc=True, errors="coerce")
        bad = np.flatnonzero(stamps.isna().to_numpy())
        if len(bad):
            raise _bad(column, bad, fmt.time_column, path, first_line,
                       "ISO 8601 datetimes such as 2023-11-16 18:15:46.6805900 or 2024-05-12 00:00:00.001163+00:00")
        return stamps.to_numpy(dtype="datetime64[ns]").view(np.int64)
    values = _numbers(column)
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0) | (values > MAX_TIME_S))
    if len(bad):
        raise _bad(column, bad, fmt.time_column, path, first_line, f"seconds from 0 to {MAX_TIME_S:g}")
    return values


def _tokens(column: pd.Series, name: str, fmt: CsvFormat, path: Path, first_line: int) -> np.ndarray:
    values = _numbers(column)
    lowest = 0 if fmt.production else 1
    with np.errstate(invalid="ignore"):  # (inf % 1 is NaN: refused as not finite)
        bad = np.flatnonzero(~np.isfinite(values) | (values < lowest) | (values % 1 != 0) | (values > MAX_TOKENS))
    if len(bad):
        raise _bad(column, bad, name, path, first_line, f"integers from {lowest} to {MAX_TOKENS:,}"
                   + (" (0: a failed request, left out)" if fmt.production else ""))
    return values.astype(np.int64)


def _numbers(column: pd.Series) -> np.ndarray:
    """float64 values; NaN where a cell is no number."""
    if column.dtype.kind in "iuf":
        return column.to_numpy(dtype=float)
    import pandas as pd

    return pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)
