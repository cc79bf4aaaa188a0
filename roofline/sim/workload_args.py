"""The workload flags `simulate` and `measure` share (`vllm bench serve`'s spellings where it has them), and the
workload they describe: a shipped or given workload with the flags' values in place of the file's."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from typing import Any

from roofline.errors import UserError
from roofline.sim.workload import (
    DEFAULT_WORKLOAD,
    MAX_NUM_REQUESTS,
    MAX_RATE_PER_S,
    MAX_SEED,
    MAX_TOKENS,
    LengthDistribution,
    Workload,
    fixed_workload,
    load_workload,
)


def add_workload_args(parser: argparse.ArgumentParser, default_num_requests: int | None = None) -> None:
    """`--workload --num-requests (= --num-prompts) --request-rate --input-len --output-len --seed --trace-window
    --trace-speed`."""
    group = parser.add_argument_group("workload")
    group.add_argument("--workload", default=None, metavar="ID|PATH",
                       help=f"workload id, YAML file or CSV trace (default: {DEFAULT_WORKLOAD}, or the fixed-length "
                            "workload when --input-len/--output-len are given); the formats, with an example each: "
                            "docs/workload-formats.md")
    group.add_argument("--num-requests", "--num-prompts", type=int, default=default_num_requests, metavar="N",
                       help="number of requests (vllm bench serve's --num-prompts; default: the workload's "
                            "num_requests)")
    group.add_argument("--request-rate", type=str, default=None, metavar="RPS",
                       help="mean request rate per second, a number or 'inf' (all at once); overrides the workload's")
    group.add_argument("--input-len", type=int, default=None, metavar="TOKENS",
                       help="fixed prompt length in tokens (replaces the workload's prompt distribution)")
    group.add_argument("--output-len", type=int, default=None, metavar="TOKENS",
                       help="fixed output length in tokens (replaces the workload's output distribution)")
    group.add_argument("--seed", type=int, default=None, help="random seed (default: the workload's seed)")
    group.add_argument("--trace-window", default=None, metavar="START:END|busiest:SECONDS",
                       help="replay only a trace's requests arriving from START to END seconds of its own clock (0 = "
                            "its first arrival), e.g. 3600:7200, or in its busiest stretch of SECONDS: busiest:3600 "
                            "(a peak hour); the window starts at 0")
    group.add_argument("--trace-speed", type=float, default=None, metavar="K",
                       help="replay a trace K times faster (0.5: at half speed); instead of --request-rate")


def check_seed(seed: int | None, flag: str = "--seed") -> None:
    """A seed numpy's and vLLM's client's legacy `np.random.seed` accept: 0 to 2**32 - 1."""
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise UserError(f"{flag}: must be an integer from 0 to {MAX_SEED}, got {seed}")


def parse_rate(text: str, flag: str = "--request-rate") -> float:
    """'8', '0.5' or 'inf' -> requests per second."""
    try:
        rate = float(text)
    except ValueError:
        raise UserError(f"{flag}: must be a positive number or 'inf', got {text!r}") from None
    if math.isnan(rate) or rate <= 0 or (math.isfinite(rate) and rate > MAX_RATE_PER_S):
        raise UserError(f"{flag}: must be a positive number up to {MAX_RATE_PER_S:g} or 'inf', got {text!r}")
    return rate


def workload_from_args(args: argparse.Namespace) -> Workload:
    """The workload the shared flags describe (see `add_workload_args`)."""
    for flag, value, hi in (("--num-requests", args.num_requests, MAX_NUM_REQUESTS),
                            ("--input-len", args.input_len, MAX_TOKENS), ("--output-len", args.output_len, MAX_TOKENS)):
        if value is not None and not 1 <= value <= hi:
            raise UserError(f"{flag}: must be a positive integer up to {hi:,}, got {value}")
    check_seed(args.seed)
    rate = None if args.request_rate is None else parse_rate(args.request_rate)
    fixed_lengths = args.input_len is not None or args.output_len is not None
    if args.workload is None and fixed_lengths:
        if args.input_len is None or args.output_len is None:
            raise UserError("--input-len/--output-len: give both for a fixed-length workload, or a --workload")
        return fixed_workload(args.input_len, args.output_len, args.num_requests or 1000,
                              math.inf if rate is None else rate, args.seed or 0)
    workload = load_workload(args.workload or DEFAULT_WORKLOAD)
    workload = override_workload(workload, num_requests=args.num_requests, rate_per_s=rate, input_len=args.input_len,
                                 output_len=args.output_len, seed=args.seed)
    return with_trace_replay(workload, args.trace_window, args.trace_speed,
                             rate is not None)


def with_trace_replay(workload: Workload, window: str | None, speed: float | None, rate_given: bool) -> Workload:
    """The workload with `--trace-window START:END` and `--trace-speed K` applied (trace replays only)."""
    if window is None and speed is None:
        return workload
    flag = "--trace-window" if window is not None else "--trace-speed"
    if workload.trace_path is None:
        raise UserError(f"{flag}: only with a trace (--workload FILE.csv or FILE.jsonl); {workload.name} is synthetic")
    changes: dict[str, Any] = {}
    if window is not None:
        changes["trace_window_s"] = _trace_window(window, workload)
    if speed is not None:
        if rate_given:
            raise UserError("--trace-speed: not with --request-rate (both set the replay's rate); give one")
        if not (math.isfinite(speed) and 0 < speed <= MAX_RATE_PER_S):
            raise UserError(f"--trace-speed: {speed!r} is not allowed; allowed: a factor above 0, up to "
                            f"{MAX_RATE_PER_S:g}")
        changes["trace_speed"] = speed
    return replace(workload, **changes)


def _trace_window(window: str, workload: Workload) -> tuple[float, float]:
    """START:END, or busiest:SECONDS (the trace's busiest stretch of that length: `traces.busiest_window`)."""
    allowed = "START:END in seconds (e.g. 3600:7200) or busiest:SECONDS (e.g. busiest:3600)"
    first, _, rest = window.partition(":")
    if first.strip().lower() == "busiest":
        try:
            width = float(rest)
        except ValueError:
            raise UserError(f"--trace-window: {window!r} is not allowed; allowed: {allowed}") from None
        if not (math.isfinite(width) and width > 0):
            raise UserError(f"--trace-window: {window!r} is not allowed; allowed: busiest:SECONDS with SECONDS > 0, "
                            "finite")
        from roofline.sim.traces import busiest_window, trace_rows  # (traces builds on workload)
        assert workload.trace_path is not None
        return busiest_window(trace_rows(workload.trace_path).arrival_s, width)
    try:
        start, end = float(first), float(rest)
    except ValueError:
        raise UserError(f"--trace-window: {window!r} is not allowed; allowed: {allowed}") from None
    if not (math.isfinite(start) and math.isfinite(end) and 0 <= start < end):
        raise UserError(f"--trace-window: {window!r} is not allowed; allowed: 0 <= START < END, finite seconds")
    return start, end


def override_workload(workload: Workload, num_requests: int | None = None, rate_per_s: float | None = None,
                      input_len: int | None = None, output_len: int | None = None,
                      seed: int | None = None) -> Workload:
    """A copy with the flags' values in place of the file's (None = keep)."""
    changes: dict[str, Any] = {}
    if num_requests is not None:
        changes["num_requests"] = num_requests
    if seed is not None:
        changes["seed"] = seed
    if workload.trace_path is not None:
        if input_len is not None or output_len is not None:
            raise UserError("--input-len/--output-len: cannot change the lengths of a replayed trace")
        if rate_per_s is not None:
            changes["trace_rate_per_s"] = rate_per_s
        return replace(workload, **changes)
    if rate_per_s is not None:
        arrival, _, _ = workload.synthetic
        process = arrival.process if arrival.process != "all_at_once" else "poisson"
        changes["arrival"] = replace(arrival, process=process, rate_per_s=rate_per_s)
    if input_len is not None:
        changes["prompt_tokens"] = LengthDistribution("fixed", value=input_len)
    if output_len is not None:
        changes["output_tokens"] = LengthDistribution("fixed", value=output_len)
    return replace(workload, **changes)

