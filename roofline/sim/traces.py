"""Traces replayed as workloads: a CSV of ours or Azure's (`read_trace`), and Mooncake's public production traces with
the prefix reuse they record (`read_mooncake_trace`); `--workload FILE.csv|FILE.jsonl`.

Mooncake (the serving traces of Moonshot AI's Kimi; Qin et al., "Mooncake: Trading More Storage for Less
Computation", FAST'25, appendix A; files at github.com/kvcache-ai/Mooncake, FAST25-release/traces/, Apache-2.0):
one JSON object per line with `timestamp` (milliseconds from the sampled hour's start), `input_length` and
`output_length` (tokens) and `hash_ids`, one id per 512-token block of the prompt: a hash of the block and of every
block before it, remapped to unique integers, so equal ids are equal prefixes. A replayed request's prompt is made of
those blocks (`RequestSpec.block_ids`, ids drawn per block by `engine.core.token_ids.TokenIdGenerator.block_array`),
so the scheduler's prefix cache finds the reuse the trace recorded, at vLLM's own block size.

    specs = read_mooncake_trace(path)       # in arrival order, timestamps shifted to start at 0
    ratio = trace_cache_ratio(specs)        # the trace's own reuse: the share of prompt tokens an unbounded
                                            # cache would hold (the paper's Table 2 "cache ratio")
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofline.errors import UserError
from roofline.sim.workload import MAX_TIME_S, MAX_TOKENS, RequestSpec, read_csv_table

MOONCAKE_BLOCK_TOKENS = 512  # the traces' block size (paper, appendix A.2)
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of each non-empty line."""
    try:
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UserError(f"--workload: '{path}' line {number}: not a JSON object ({exc.msg}); a Mooncake "
                                    f"trace has one object per line with keys {', '.join(MOONCAKE_KEYS)}") from None
                if not isinstance(record, dict):
                    raise UserError(f"--workload: '{path}' line {number}: must be a JSON object with keys "
                                    f"{', '.join(MOONCAKE_KEYS)}, got {type(record).__name__}")
                yield number, record
    except UnicodeDecodeError:
        raise UserError(f"--workload: '{path}' is not UTF-8 text; expected a Mooncake JSONL trace") from None


def count_mooncake_requests(path: Path) -> int:
    """The number of requests in the trace (its non-empty lines)."""
    count = sum(1 for _ in _records(path))
    if count == 0:
        raise UserError(f"--workload: '{path}' holds no requests; a Mooncake trace has one JSON object per line")
    return count


def _integer(record: dict[str, Any], key: str, lo: int, hi: int, where: str) -> int:
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise UserError(f"{where}: {key}: {value!r} is not allowed; allowed: integers from {lo} to {hi:,}")
    return value


def read_mooncake_trace(path: Path, num_requests: int | None = None, rate_per_s: float | None = None,
                        window_s: tuple[float, float] | None = None,
                        speed: float | None = None) -> list[RequestSpec]:
    """The trace's first `num_requests` requests in arrival order (ties in file order), arranged as `arrange` says,
    each prompt its blocks (module docstring). Every field is checked; a block count other than
    ceil(input_length / 512) is refused."""
    arrivals, prompts, outputs, blocks = [], [], [], []
    for number, record in _records(path):
        where = f"--workload: '{path}' line {number}"
        if set(record) != set(MOONCAKE_KEYS):
            raise UserError(f"{where}: keys {', '.join(sorted(map(str, record)))}; allowed: exactly "
                            f"{', '.join(MOONCAKE_KEYS)}")
        stamp = record["timestamp"]
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not 0 <= stamp <= MAX_TIME_S * 1e3:
            raise UserError(f"{where}: timestamp: {stamp!r} is not allowed; allowed: milliseconds from 0 to "
                            f"{MAX_TIME_S * 1e3:g}")
        prompt = _integer(record, "input_length", 1, MAX_TOKENS, where)
        output = _integer(record, "output_length", 1, MAX_TOKENS, where)
        ids = record["hash_ids"]
        if not isinstance(ids, list) or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 0
                                                for b in ids):
            raise UserError(f"{where}: hash_ids: must be a list of integers >= 0")
        if len(ids) != math.ceil(prompt / MOONCAKE_BLOCK_TOKENS):
            raise UserError(f"{where}: hash_ids: {len(ids)} blocks for input_length {prompt}; allowed: "
                            f"ceil({prompt} / {MOONCAKE_BLOCK_TOKENS}) = {math.ceil(prompt / MOONCAKE_BLOCK_TOKENS)}")
        arrivals.append(stamp / 1e3)
        prompts.append(prompt)
        outputs.append(output)
        blocks.append(tuple(ids))
    if not arrivals:
        raise UserError(f"--workload: '{path}' holds no requests; a Mooncake trace has one JSON object per line")
    order, times = arrange(np.asarray(arrivals, dtype=float), path, num_requests, rate_per_s, window_s, speed)
    return [RequestSpec(f"r{j}", float(times[j]), prompts[i], outputs[i], block_ids=blocks[i],
                        block_tokens=MOONCAKE_BLOCK_TOKENS) for j, i in enumerate(order)]


def arrange(arrivals: np.ndarray, path: Path, num_requests: int | None = None, rate_per_s: float | None = None,
            window_s: tuple[float, float] | None = None, speed: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(rows, arrival times) of a replay: the rows in arrival order (ties in file order) whose arrival, on the trace's
    own clock from its first arrival, lies in `window_s` [start, end) (all where None), the first `num_requests`
    of them; times from the window's start (else the first arrival), divided by `speed`, or rescaled to a mean of
    `rate_per_s` (inf: all at once)."""
    order = np.argsort(arrivals, kind="stable")
    times = arrivals[order] - arrivals[order[0]]
    start = 0.0
    if window_s is not None:
        start, end = window_s
        inside = (times >= start) & (times < end)
        if not inside.any():
            raise UserError(f"--trace-window {start:g}:{end:g}: no request of '{path}' arrives in it; allowed: a "
                            f"window within 0:{times[-1]:g} s of the trace's own clock")
        order, times = order[inside], times[inside]
    order, times = order[:num_requests], times[:num_requests] - start
    if speed is not None:
        times = times / speed
    if rate_per_s is not None:
        times = rescale_arrivals(times, rate_per_s)
    return order, times


def trace_cache_ratio(specs: Sequence[RequestSpec]) -> float:
    """The share of the prompts' tokens in blocks an earlier request already had (in arrival order): what an
    unbounded prefix cache would hit, the reuse the trace itself records."""
    seen: set[int] = set()
    hit = total = 0
    for spec in specs:
        if spec.block_ids is None:
            raise ValueError(f"trace_cache_ratio: request {spec.request_id} has no blocks")
        for i, block in enumerate(spec.block_ids):
            tokens = min(spec.block_tokens, spec.num_prompt_tokens - i * spec.block_tokens)
            total += tokens
            if block in seen:
                hit += tokens
            seen.add(block)
    return hit / total if total else 0.0


TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")


AZURE_TRACE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def read_trace(path: Path, num_requests: int | None = None, rate_per_s: float | None = None,
               window_s: tuple[float, float] | None = None, speed: float | None = None) -> list[RequestSpec]:
    """Replay a CSV trace (our columns or Azure's) or a Mooncake JSONL trace (`read_mooncake_trace`): the first
    `num_requests` rows in arrival order, arranged as `arrange` says."""
    if path.suffix.lower() == ".jsonl":
        return read_mooncake_trace(path, num_requests, rate_per_s, window_s, speed)
    frame = read_csv_table(path, "--workload")
    if all(c in frame.columns for c in TRACE_COLUMNS):
        arrivals = _numeric_column(frame, "arrival_s", path)
        prompts, outputs = _numeric_column(frame, "prompt_tokens", path), _numeric_column(frame, "output_tokens", path)
    elif all(c in frame.columns for c in AZURE_TRACE_COLUMNS):
        try:
            stamps = pd.to_datetime(frame["TIMESTAMP"], format="mixed")
        except (ValueError, TypeError) as exc:
            raise UserError(f"--workload: '{path}' column TIMESTAMP is not a datetime: {exc}") from None
        arrivals = (stamps - stamps.min()).dt.total_seconds().to_numpy()
        prompts = _numeric_column(frame, "ContextTokens", path)
        outputs = _numeric_column(frame, "GeneratedTokens", path)
    else:
        raise UserError(f"--workload: '{path}' must have columns {','.join(TRACE_COLUMNS)} or the Azure trace's "
                        f"{','.join(AZURE_TRACE_COLUMNS)}; found {','.join(map(str, frame.columns))}")
    names = ("arrival_s", "prompt_tokens", "output_tokens") if "arrival_s" in frame.columns else \
        AZURE_TRACE_COLUMNS
    for column, values, bad in (
            (names[0], arrivals, ~np.isfinite(arrivals) | (arrivals < 0) | (arrivals > MAX_TIME_S)),
            (names[1], prompts, ~np.isfinite(prompts) | (prompts < 1) | (prompts % 1 != 0) | (prompts > MAX_TOKENS)),
            (names[2], outputs, ~np.isfinite(outputs) | (outputs < 1) | (outputs % 1 != 0) | (outputs > MAX_TOKENS))):
        rows = np.flatnonzero(bad)
        if len(rows):
            allowed = (f"seconds from 0 to {MAX_TIME_S:g}" if values is arrivals
                       else f"integers from 1 to {MAX_TOKENS:,}")
            raise UserError(f"--workload: '{path}' line {rows[0] + 2} column {column}: {values[rows[0]]:g} is not "
                            f"allowed; allowed: {allowed}")
    order, times = arrange(arrivals, path, num_requests, rate_per_s, window_s, speed)
    return [RequestSpec(f"r{j}", float(times[j]), int(prompts[i]), int(outputs[i])) for j, i in enumerate(order)]


def _numeric_column(frame: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(np.isnan(values))
    if len(bad):
        raise UserError(f"--workload: '{path}' line {bad[0] + 2} column {column}: {str(frame[column].iloc[bad[0]])!r} "
                        f"is not a number; allowed: numbers")
    return values


def rescale_arrivals(arrivals: np.ndarray, rate_per_s: float) -> np.ndarray:
    """Stretch or squeeze replayed arrival times to a mean rate (inf: all at once)."""
    if math.isinf(rate_per_s):
        return np.zeros_like(arrivals)
    span_s = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else 0.0
    if span_s <= 0:
        return arrivals
    return arrivals * ((len(arrivals) - 1) / rate_per_s / span_s)

