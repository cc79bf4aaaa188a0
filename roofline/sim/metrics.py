"""Serving metrics: from per-request times to the summary a person reads; each run-level figure defined once,
used by `simulate`, `measure` and `compare` (and under vLLM's counting by `roofline.sim.bench_metrics`).

Definitions (those of vLLM's benchmarks/benchmark_serving.py unless said otherwise):
- Per request (`engine.core.metrics`, where the engine, vLLM's recorder and the simulator take them from): TTFT,
  TPOT (undefined for one-token outputs), ITL (pooled over requests here), end-to-end, queueing.
- Throughput: input tokens (prompts of requests whose first token came in the window), output tokens (tokens
  sampled in the window) and finished requests, each divided by the window's length.
- Window: [warmup_s, end], where end is the last finish, or with `drain=True` the last arrival (the tail in which
  no request arrives any more and the load falls is left out). Latency statistics cover the requests that arrived
  inside the window.
- SLOs are per request: a request is good when its TTFT <= slo_ttft_s and its TPOT <= slo_tpot_s (a one-token
  output has no TPOT and meets that SLO). Goodput = good requests (of those that arrived in the window) per
  second of window. For each SLO the summary gives the share of requests meeting it, in percent: the highest
  percentile of the metric that is within the SLO.

    summary = summarize(requests, itl, steps, SummaryOptions(warmup_s=10, drain=True, slo_ttft_s=0.5))
    figures = run_figures(requests)   # the whole run from its requests alone: measure and compare
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from roofline.errors import UserError
from roofline.sim.table import Columns, between, column, skipna_max, skipna_sum
from roofline.sim.token_times import TokenTimes, WeightedValues

PERCENTILES = (50, 90, 99)
_all = np.logical_and.reduce  # (of a bool array; `arr.all()` goes through a Python wrapper)
LATENCY_METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queueing_s")


@dataclass(frozen=True)
class SummaryOptions:
    warmup_s: float = 0.0
    drain: bool = False
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None

    def __post_init__(self) -> None:
        if not self.warmup_s >= 0:
            raise UserError(f"--warmup-s: must be >= 0, got {self.warmup_s}")
        for flag, value in (("--slo-ttft-s", self.slo_ttft_s), ("--slo-tpot-s", self.slo_tpot_s)):
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise UserError(f"{flag}: must be a finite number > 0 (seconds), got {value}")


@dataclass(frozen=True)
class InterTokenLatencies:
    """All ITL gaps of a run: `gap_s[i]` belongs to request row `request_index[i]` of the requests table."""

    gap_s: np.ndarray
    request_index: np.ndarray

    def values(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The gaps of the requests where `rows` (a bool per request row) is True; all of them without (no copy)."""
        return self.gap_s if rows is None else self.gap_s[rows[self.request_index]]

    def values_by_request(self) -> np.ndarray:
        """Every gap, request row after request row (vLLM's client pools them so)."""
        return self.gap_s[np.argsort(self.request_index, kind="stable")]


def latency_stats(values: np.ndarray | WeightedValues) -> dict[str, float | None]:
    """mean, p50, p90, p99 of finite values (None when there are none)."""
    if isinstance(values, WeightedValues):  # a simulation's gaps (finite), pooled
        if len(values) == 0:
            return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
        return {"mean": values.mean(), **{f"p{p}": values.percentile(p) for p in PERCENTILES}}
    array = values
    finite = np.isfinite(array)
    if not _all(finite):  # (no copy when all are: the ITL gaps of a long run are millions)
        array = array[finite]
    if len(array) == 0:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    stats: dict[str, float | None] = {"mean": float(array.mean())}
    for p in PERCENTILES:
        stats[f"p{p}"] = float(percentile(array, p))
    return stats


# numpy's median and percentile (linear) of a 1-d array, the same floats, without the calls inside numpy that import
# numpy.ma on first use (`np.median`'s NaN check `np.ma.isMaskedArray`, `np.percentile`'s `np.unique` ->
# `np.ma.is_masked`): ~25 ms of a simulation's process. tests/test_metrics.py compares them with numpy's.

def median(data: np.ndarray) -> np.floating:
    """`np.median` of a non-empty 1-d array: numpy's steps (numpy/lib/_function_base_impl.py `_median`: a partition
    at the middle element(s) and the last, the mean of the middle one or two, NaN where the last is NaN)."""
    size = len(data)
    half = size // 2
    kth = [half - 1, half, -1] if size % 2 == 0 else [half, -1]
    part = np.partition(data, kth)
    result = np.mean(part[half - 1:half + 1] if size % 2 == 0 else part[half:half + 1])
    last = part[-1]
    return last if np.isnan(last) else result


def percentile(data: np.ndarray, q: float) -> float:
    """`np.percentile(data, q)` of a non-empty 1-d float array: numpy's steps (numpy/lib/_function_base_impl.py
    `_quantile`, the linear method: the virtual index, its neighbours (`_get_indexes`: -1 above the last), the
    partition at them, 0 and -1 (their distinct values sorted, as `np.unique` gives them), NaN where the last is NaN,
    `_lerp`; the same arithmetic as `weighted_percentile`)."""
    n = len(data)
    virtual = np.float64(n - 1) * np.true_divide(np.float64(q), 100)
    if virtual >= n - 1:
        below = above = -1
    elif virtual < 0:
        below = above = 0
    else:
        below = int(np.floor(virtual))
        above = below + 1
    part = np.partition(data, sorted({0, -1, below, above}))
    if np.isnan(part[-1]):
        return math.nan
    a, b = part[below], part[above]
    gamma = virtual - np.float64(below)
    diff = b - a
    if gamma >= 0.5:
        return float(b - diff * (1 - gamma))
    return float(a + diff * gamma)


def rate_per_s(count: float, window_s: tuple[float, float]) -> float:
    """A throughput: what was counted in the window, per second of window."""
    return count / (window_s[1] - window_s[0])


def meets_slos(values: dict[str, np.ndarray], slos: dict[str, float]) -> np.ndarray:
    """Per request: every given SLO met (value <= limit). An undefined value (NaN: a one-token output's TPOT)
    meets its SLO."""
    n = len(next(iter(values.values())))
    good = np.ones(n, dtype=bool)
    for name, limit in slos.items():
        good &= ~(values[name] > limit)
    return good


def measurement_window(requests: Columns, options: SummaryOptions) -> tuple[float, float]:
    """[start, end] of the statistics window in seconds of simulated time."""
    end = skipna_max(column(requests, "arrival_s" if options.drain else "finish_s", float))
    start = options.warmup_s
    if start >= end:
        raise UserError(f"--warmup-s {options.warmup_s}: leaves no time to measure; the run's "
                        f"{'last arrival' if options.drain else 'last finish'} is at {end:.3f} s")
    return start, end


def summarize(requests: Columns, itl: InterTokenLatencies | TokenTimes, steps: Columns,
              options: SummaryOptions) -> dict[str, Any]:
    """The summary of a finished run. `requests`: one row per request with arrival_s, first_token_s, finish_s,
    num_prompt_tokens, num_output_tokens, ttft_s, tpot_s, e2e_s, queueing_s, num_preemptions,
    num_prefix_hit_tokens. `steps`: one row per step with end_s and num_output_tokens (tokens sampled)."""
    start, end = measurement_window(requests, options)
    window = (start, end)
    duration = end - start
    arrived = between(column(requests, "arrival_s", float), start, end)
    first_in = between(column(requests, "first_token_s", float), start, end)
    finished_in = between(column(requests, "finish_s", float), start, end)
    step_in = between(column(steps, "end_s", float), start, end)
    measured = {m: column(requests, m, float)[arrived] for m in ("ttft_s", "tpot_s", "e2e_s", "queueing_s")}
    latency = {m: latency_stats(values) for m, values in measured.items()}
    # The gaps of the requests that arrived in the window; all of them without a window (no copy then).
    latency["itl_s"] = latency_stats(itl.values(None if _all(arrived) else arrived))
    summary: dict[str, Any] = {
        "num_requests": int(len(requests)),
        "num_measured_requests": int(np.count_nonzero(arrived)),
        "window_s": [start, end],
        "duration_s": duration,
        "input_tokens_per_s": rate_per_s(float(skipna_sum(column(requests, "num_prompt_tokens")[first_in])), window),
        "output_tokens_per_s": rate_per_s(float(skipna_sum(column(steps, "num_output_tokens")[step_in])), window),
        "requests_per_s": rate_per_s(float(finished_in.sum()), window),
        "latency": {m: latency[m] for m in LATENCY_METRICS},
        "num_preemptions": int(skipna_sum(column(requests, "num_preemptions"))),
        "prefix_hit_tokens": int(skipna_sum(column(requests, "num_prefix_hit_tokens"))),
    }
    if options.slo_ttft_s is not None or options.slo_tpot_s is not None:
        summary["slo"] = slo_summary(measured["ttft_s"], measured["tpot_s"], options, window)
    return summary


def run_figures(requests: Columns) -> dict[str, float | None]:
    """Mean TTFT, mean TPOT and the throughputs of a whole run from its requests table alone (`measure` and
    `compare`, for measured and simulated runs alike): the window is `summarize`'s default, from the start of the
    run (time 0) to the last finish, in which every token was sampled, every first token came and every request
    finished, so these equal `summarize`'s figures without --warmup-s or --drain."""
    window = measurement_window(requests, SummaryOptions())
    latency = {m: latency_stats(column(requests, m, float))["mean"] for m in ("ttft_s", "tpot_s")}
    return {
        "mean_ttft_s": latency["ttft_s"],
        "mean_tpot_s": latency["tpot_s"],
        "output_tokens_per_s": rate_per_s(float(skipna_sum(column(requests, "num_output_tokens"))), window),
        "input_tokens_per_s": rate_per_s(float(skipna_sum(column(requests, "num_prompt_tokens"))), window),
        "requests_per_s": rate_per_s(float(len(requests)), window),
    }


def slo_summary(ttft_s: np.ndarray, tpot_s: np.ndarray, options: SummaryOptions,
                window_s: tuple[float, float]) -> dict[str, object]:
    """SLO shares and goodput of the measured requests' TTFT and TPOT."""
    values = {"ttft": ttft_s, "tpot": tpot_s}
    meets_ttft = meets_slos(values, {} if options.slo_ttft_s is None else {"ttft": options.slo_ttft_s})
    meets_tpot = meets_slos(values, {} if options.slo_tpot_s is None else {"tpot": options.slo_tpot_s})
    good = meets_ttft & meets_tpot
    result: dict[str, object] = {"slo_ttft_s": options.slo_ttft_s, "slo_tpot_s": options.slo_tpot_s}
    if options.slo_ttft_s is not None:
        result["ttft_percent_meeting"] = _percent(meets_ttft)
    if options.slo_tpot_s is not None:
        result["tpot_percent_meeting"] = _percent(meets_tpot)
    result["both_percent_meeting"] = _percent(good)
    result["goodput_requests_per_s"] = rate_per_s(float(good.sum()), window_s)
    return result


def _percent(mask: np.ndarray) -> float:
    return 100.0 * float(mask.mean()) if len(mask) else math.nan


def format_summary(summary: dict[str, Any]) -> str:
    """The summary as aligned text for a terminal (times in ms)."""
    window = summary["window_s"]
    lines = [
        f"requests            {summary['num_requests']} ({summary['num_measured_requests']} measured, "
        f"window {window[0]:.2f}-{window[1]:.2f} s)",
        f"throughput          {summary['requests_per_s']:.3f} req/s, {summary['input_tokens_per_s']:.1f} input "
        f"tok/s, {summary['output_tokens_per_s']:.1f} output tok/s",
        f"preemptions         {summary['num_preemptions']}, prefix-cache hits {summary['prefix_hit_tokens']} tokens",
        f"{'latency (ms)':<20}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}",
    ]
    names = {"ttft_s": "TTFT", "tpot_s": "TPOT", "itl_s": "ITL", "e2e_s": "end-to-end", "queueing_s": "queueing"}
    for metric, stats in summary["latency"].items():
        cells = "".join(f"{'-' if v is None else f'{v * 1e3:.2f}':>10}" for v in stats.values())
        lines.append(f"  {names[metric]:<18}{cells}")
    slo = summary.get("slo")
    if slo:
        parts = []
        if slo["slo_ttft_s"] is not None:
            parts.append(f"TTFT <= {slo['slo_ttft_s'] * 1e3:g} ms: {slo['ttft_percent_meeting']:.1f}% of requests")
        if slo["slo_tpot_s"] is not None:
            parts.append(f"TPOT <= {slo['slo_tpot_s'] * 1e3:g} ms: {slo['tpot_percent_meeting']:.1f}%")
        lines.append(f"SLO                 {'; '.join(parts)}; both: {slo['both_percent_meeting']:.1f}%")
        lines.append(f"goodput             {slo['goodput_requests_per_s']:.3f} req/s")
    return "\n".join(lines)
