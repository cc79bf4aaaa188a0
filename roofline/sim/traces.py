"""Traces replayed as workloads, `--workload FILE.csv|FILE.jsonl`: a CSV of ours or a public production trace's as
published (Azure's LLM inference traces 2023/2024, BurstGPT; `roofline.sim.trace_csv`, told apart by the header), and
Mooncake's JSONL traces with the prefix reuse they record. `--trace-window START:END` replays a slice of the trace's
own clock (a peak hour), `--trace-speed K` plays it K times faster, `--request-rate` rescales it to a mean rate
(`arrange`), whatever the format.

    rows = trace_rows(path)                 # TraceRows, every request in file order (parsed once per process)
    specs = read_trace(path, window_s=(3600, 7200), speed=2.0)   # in arrival order, from 0

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

import functools
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from roofline.errors import UserError
from roofline.sim.trace_csv import TraceRows, read_csv_trace
from roofline.sim.workload import MAX_NUM_REQUESTS, MAX_TIME_S, MAX_TOKENS, RequestSpec

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


def _integer(record: dict[str, Any], key: str, lo: int, hi: int, where: str) -> int:
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise UserError(f"{where}: {key}: {value!r} is not allowed; allowed: integers from {lo} to {hi:,}")
    return value


def _mooncake_rows(path: Path) -> TraceRows:
    """Every request of a Mooncake trace in file order; every field checked, a block count other than
    ceil(input_length / 512) refused."""
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
    times = np.asarray(arrivals, dtype=float)
    return TraceRows("mooncake", times - times.min(), np.asarray(prompts, dtype=np.int64),
                     np.asarray(outputs, dtype=np.int64), block_ids=tuple(blocks), block_tokens=MOONCAKE_BLOCK_TOKENS)


def read_mooncake_trace(path: Path, num_requests: int | None = None, rate_per_s: float | None = None,
                        window_s: tuple[float, float] | None = None,
                        speed: float | None = None) -> list[RequestSpec]:
    """A Mooncake trace replayed (`read_trace`), each prompt its blocks (module docstring)."""
    if path.suffix.lower() != ".jsonl":
        raise ValueError(f"read_mooncake_trace: {path} is not a .jsonl file")
    return read_trace(path, num_requests, rate_per_s, window_s, speed)


def arrange(arrivals: np.ndarray, path: Path, num_requests: int | None = None, rate_per_s: float | None = None,
            window_s: tuple[float, float] | None = None, speed: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(rows, arrival times) of a replay: the rows in arrival order (ties in file order) whose arrival, on the trace's
    own clock from its first arrival, lies in `window_s` [start, end) (all where None), the first `num_requests`
    of them (at most `MAX_NUM_REQUESTS`: more is a UserError, as `--num-requests` above it is); times from the
    window's start (else the first arrival), divided by `speed`, or rescaled to a mean of `rate_per_s` (inf: all at
    once)."""
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
    if min(len(order), num_requests or len(order)) > MAX_NUM_REQUESTS:
        raise UserError(f"--workload {path}: {len(order):,} requests to replay, more than the {MAX_NUM_REQUESTS:,} one "
                        f"run simulates; allowed: --num-requests up to {MAX_NUM_REQUESTS:,}, or a --trace-window "
                        "holding at most that many")
    order, times = order[:num_requests], times[:num_requests] - start
    if speed is not None:
        times = times / speed
    if rate_per_s is not None:
        times = rescale_arrivals(times, rate_per_s)
    return order, times


def busiest_window(arrival_s: np.ndarray, width_s: float) -> tuple[float, float]:
    """[start, start + width_s) of a trace's own clock (`TraceRows.arrival_s`) holding the most arrivals, starting at
    an arrival, the earliest of equals (the whole trace from 0 when it is shorter): `--trace-window busiest:SECONDS`."""
    times = np.sort(arrival_s, kind="stable")
    counts = np.searchsorted(times, times + width_s, side="left") - np.arange(len(times))
    start = float(times[int(counts.argmax())])
    return start, start + width_s


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


def trace_rows(path: Path) -> TraceRows:
    """Every request of a trace file, parsed once per process and file version (the workload's request count and
    its replay read the same rows; a week of Azure's takes a minute to parse): a Mooncake JSONL trace by its
    suffix, a CSV trace by its header (`roofline.sim.trace_csv`)."""
    if not path.is_file():
        raise UserError(f"--workload: no such file '{path}'")
    stat = path.stat()
    return _cached_rows(str(path.resolve()), stat.st_mtime_ns, stat.st_size, str(path))


@functools.lru_cache(maxsize=1)
def _cached_rows(resolved: str, mtime_ns: int, size: int, shown: str) -> TraceRows:
    path = Path(shown)
    if path.suffix.lower() == ".jsonl":
        return _mooncake_rows(path)
    return read_csv_trace(path)


def read_trace(path: Path, num_requests: int | None = None, rate_per_s: float | None = None,
               window_s: tuple[float, float] | None = None, speed: float | None = None) -> list[RequestSpec]:
    """Replay a trace (`trace_rows`): the first `num_requests` requests in arrival order, arranged as `arrange`
    says; a Mooncake trace's prompts are its blocks."""
    rows = trace_rows(path)
    order, times = arrange(rows.arrival_s, path, num_requests, rate_per_s, window_s, speed)
    prompts, outputs = rows.prompt_tokens.tolist(), rows.output_tokens.tolist()
    if rows.block_ids is None:
        return [RequestSpec(f"r{j}", t, prompts[i], outputs[i]) for j, (i, t) in enumerate(zip(order.tolist(),
                                                                                               times.tolist()))]
    return [RequestSpec(f"r{j}", t, prompts[i], outputs[i], block_ids=rows.block_ids[i],
                        block_tokens=rows.block_tokens) for j, (i, t) in enumerate(zip(order.tolist(), times.tolist()))]


def rescale_arrivals(arrivals: np.ndarray, rate_per_s: float) -> np.ndarray:
    """Stretch or squeeze replayed arrival times to a mean rate (inf: all at once)."""
    if math.isinf(rate_per_s):
        return np.zeros_like(arrivals)
    span_s = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else 0.0
    if span_s <= 0:
        return arrivals
    return arrivals * ((len(arrivals) - 1) / rate_per_s / span_s)

