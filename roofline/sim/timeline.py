"""The load of a run over time: the run cut into bins of one width chosen from its span (at most `MAX_BINS`), and per
bin the offered load, what was served, the KV cache, the queue and the latency and SLO attainment of the requests
that arrived in it. A replayed day of a production trace shows its peak hours here, where the run's summary averages
them away.

    table = load_over_time(result.request_table, result.step_table, slo_ttft_s=2.0, slo_tpot_s=0.08)  # a bin a row
    print(format_peaks(table))          # one line: the busiest bin and the peaks of KV usage, queue and SLO misses
    draw_load_over_time(table, path)    # four panels, PNG

Columns (times in seconds of the run's clock; a bin is [start_s, end_s)):
- `arrivals_per_s`, `offered_prompt_tokens_per_s`, `offered_output_tokens_per_s`: the requests arriving in the bin
  (at the server), their prompts and outputs, per second of bin: the offered load.
- `finished_per_s`, `output_tokens_per_s`: requests finished and tokens sampled in the bin (steps by their end).
- `kv_usage_mean`, `num_running_mean`, `num_waiting_mean`: time averages over the bin of each replica's KV-cache
  usage (the share of its blocks in use, as vLLM's `kv_cache_usage`; averaged over replicas), running and waiting
  requests (summed over replicas); each step holds the values it was scheduled with from its start to its end,
  an idle replica none. `kv_usage_max`, `num_waiting_max`: the highest of any replica's steps running in the bin.
- `ttft_p50_s`, `ttft_p90_s`, `tpot_p50_s`: of the requests that arrived in the bin (empty: none arrived);
  `ttft_slo_percent`, `tpot_slo_percent`, `slo_percent` with SLOs: the share of them meeting the TTFT, the TPOT
  and both SLOs (`roofline.sim.metrics.meets_slos`).

Computed from the requests and steps tables the simulation keeps, in a few vectorised passes (no per-request Python);
the table is numpy columns (`roofline.sim.table.Table`: `.to_pandas()` for a DataFrame).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from roofline.sim.metrics import meets_slos, percentile
from roofline.sim.table import Columns, Table, column

MAX_BINS = 60
# Bin widths a person reads without arithmetic: sub-second to a week.
BIN_WIDTHS_S = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0,
                7200.0, 10800.0, 21600.0, 43200.0, 86400.0, 172800.0, 604800.0)


def bin_width_s(span_s: float) -> float:
    """The narrowest width of `BIN_WIDTHS_S` that cuts [0, span_s] into at most MAX_BINS bins."""
    for width in BIN_WIDTHS_S:
        if span_s <= width * MAX_BINS:
            return width
    return math.ceil(span_s / MAX_BINS / BIN_WIDTHS_S[-1]) * BIN_WIDTHS_S[-1]


def load_over_time(requests: Columns, steps: Columns, slo_ttft_s: float | None = None,
                   slo_tpot_s: float | None = None, width_s: float | None = None) -> Table:
    """The table of the module docstring, bins from 0 to past the run's last arrival and last step."""
    arrival = column(requests, "arrival_s", float)
    start, end = column(steps, "start_s", float), column(steps, "end_s", float)
    span = max(float(arrival.max(initial=0.0)), float(end.max(initial=0.0)))
    width = width_s if width_s is not None else bin_width_s(span)
    num_bins = max(1, math.ceil(span / width))  # (a time at the span's end falls in the last bin)
    edges = np.arange(num_bins + 1) * width
    table: dict[str, np.ndarray] = {"start_s": edges[:-1], "end_s": edges[1:]}

    # offered load: requests by arrival bin
    arrived_bin = np.minimum((arrival // width).astype(np.int64), num_bins - 1)
    table["arrivals_per_s"] = np.bincount(arrived_bin, minlength=num_bins) / width
    for source, name in (("num_prompt_tokens", "offered_prompt_tokens_per_s"),
                         ("num_output_tokens", "offered_output_tokens_per_s")):
        table[name] = np.bincount(arrived_bin, column(requests, source, float), num_bins) / width

    # served: finishes, and tokens sampled by the end of their step
    finish = column(requests, "finish_s", float)
    finished = np.isfinite(finish)
    table["finished_per_s"] = np.bincount(_bins(finish[finished], width, num_bins), minlength=num_bins) / width
    table["output_tokens_per_s"] = np.bincount(_bins(end, width, num_bins), column(steps, "num_output_tokens", float),
                                               num_bins) / width

    # the engines: time averages and maxima of per-step values
    replica = column(steps, "replica")
    # (the distinct replicas ascending, as np.unique gives them, without its call that imports numpy.ma)
    replicas = np.flatnonzero(np.bincount(replica)) if len(replica) else replica[:0]
    # (each replica's steps in start order once, for the three signals)
    mine = [replica == r for r in replicas]
    ordered = [_StepOrder(start[m], end[m]) for m in mine]
    for name, how in (("kv_usage", "mean"), ("num_running", "sum"), ("num_waiting", "sum")):
        signal = column(steps, name, float)
        total = np.zeros(num_bins)
        for m, steps_of in zip(mine, ordered):
            total += np.diff(steps_of.integral(signal[m], edges)) / width
        table[f"{name}_mean"] = total / len(replicas) if how == "mean" and len(replicas) else total
        if name != "num_running":
            table[f"{name}_max"] = _max_per_bin(start, end, signal, mine, ordered, edges)

    # the requests that arrived in each bin: latency, SLOs
    ttft, tpot = column(requests, "ttft_s", float), column(requests, "tpot_s", float)
    table["ttft_p50_s"] = _per_bin(ttft, arrived_bin, num_bins, _median)
    table["ttft_p90_s"] = _per_bin(ttft, arrived_bin, num_bins, _p90)
    table["tpot_p50_s"] = _per_bin(tpot, arrived_bin, num_bins, _median)
    values = {"ttft": ttft, "tpot": tpot}
    slos = {name: limit for name, limit in (("ttft", slo_ttft_s), ("tpot", slo_tpot_s)) if limit is not None}
    for name, limit in slos.items():
        table[f"{name}_slo_percent"] = _share(meets_slos(values, {name: limit}), arrived_bin, num_bins)
    if slos:
        table["slo_percent"] = _share(meets_slos(values, slos), arrived_bin, num_bins)
    return Table(table)


def _median(values: np.ndarray) -> float:
    return float(percentile(values, 50))


def _p90(values: np.ndarray) -> float:
    return float(percentile(values, 90))


def _bins(times: np.ndarray, width: float, num_bins: int) -> np.ndarray:
    return np.minimum((times // width).astype(np.int64), num_bins - 1)


class _StepOrder:
    """One replica's steps in start order, for the integrals of its step signals (`integral`): the order and the
    breaks (each step's start and end, interleaved) made once for all its signals."""

    def __init__(self, start: np.ndarray, end: np.ndarray) -> None:
        self.order = np.argsort(start, kind="stable")
        self.times = np.empty(2 * len(start))  # (np.column_stack((start, end)).ravel() in that order, one array)
        self.times[0::2], self.times[1::2] = start[self.order], end[self.order]

    def integral(self, values: np.ndarray, at: np.ndarray) -> np.ndarray:
        """The integral from 0 to each time of `at` of the step signal `values` (in the steps' order as given):
        values[i] over [start[i], end[i]), 0 between the steps (which do not overlap); piecewise linear, so
        interpolated exactly between its breaks."""
        if len(self.order) == 0:
            return np.zeros(len(at))
        area = values[self.order]
        area *= self.times[1::2] - self.times[0::2]  # (value x (end - start): the same products, in place)
        after = np.cumsum(area)
        levels = np.empty(len(self.times))  # (each step's level at its start, then at its end)
        levels[1::2] = after
        levels[0::2] = np.subtract(after, area, out=area)
        return np.interp(at, self.times, levels, left=0.0, right=float(after[-1]))


def _max_per_bin(start: np.ndarray, end: np.ndarray, values: np.ndarray, mine: list[np.ndarray],
                 ordered: list[_StepOrder], edges: np.ndarray) -> np.ndarray:
    """Per bin, the highest value of any step running in it: those starting in it and the one each replica was
    running at its start (`mine`: each replica's steps, `ordered`: their start order)."""
    num_bins = len(edges) - 1
    width = edges[1] - edges[0]
    best = np.zeros(num_bins)
    if len(start) == 0:
        return best
    np.maximum.at(best, _bins(start, width, num_bins), values)
    for m, steps_of in zip(mine, ordered):
        order = np.flatnonzero(m)[steps_of.order]  # (the replica's rows by start)
        running = np.searchsorted(start[order], edges[:-1], side="right") - 1  # the last step started by the edge
        has = running >= 0
        step = order[running[has]]
        inside = end[step] > edges[:-1][has]
        bins = np.flatnonzero(has)[inside]
        best[bins] = np.maximum(best[bins], values[step[inside]])
    return best


def _per_bin(values: np.ndarray, bins: np.ndarray, num_bins: int,
             statistic: Callable[[np.ndarray], float]) -> np.ndarray:
    """`statistic` of each bin's finite values (NaN for a bin with none)."""
    keep = np.isfinite(values)
    values, bins = values[keep], bins[keep]
    order = np.argsort(bins, kind="stable")
    bounds = np.searchsorted(bins[order], np.arange(num_bins + 1))
    sorted_values = values[order]
    return np.array([float(statistic(sorted_values[lo:hi])) if hi > lo else math.nan
                     for lo, hi in zip(bounds[:-1], bounds[1:])])


def _share(good: np.ndarray, bins: np.ndarray, num_bins: int) -> np.ndarray:
    """Percent of each bin's requests that are good (NaN for a bin without requests)."""
    count = np.bincount(bins, minlength=num_bins).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, 100.0 * np.bincount(bins, good.astype(float), num_bins) / count, math.nan)


def peaks(table: Columns) -> dict[str, Any]:
    """The bins a reader looks for: the busiest (arrivals), the fullest KV cache, the longest queue and, with SLOs,
    the lowest attainment; each with its bin's start."""
    start = column(table, "start_s", float)
    width = float(column(table, "end_s", float)[0] - start[0])
    result: dict[str, Any] = {"bin_s": width, "num_bins": len(table)}
    for name, key in (("arrivals_per_s", "peak_arrivals_per_s"), ("kv_usage_max", "peak_kv_usage"),
                      ("num_waiting_max", "peak_num_waiting")):
        values = column(table, name)
        row = int(values.argmax())
        result[key] = {"value": float(values[row]), "at_s": float(start[row])}
    slo = column(table, "slo_percent", float) if "slo_percent" in table.columns else None
    if slo is not None and not np.isnan(slo).all():
        row = int(np.nanargmin(slo))
        result["lowest_slo_percent"] = {"value": float(slo[row]), "at_s": float(start[row])}
    return result


def format_peaks(summary: dict[str, Any]) -> str:
    """`peaks` as one line for the printed summary."""
    busy, kv, queue = summary["peak_arrivals_per_s"], summary["peak_kv_usage"], summary["peak_num_waiting"]
    text = (f"over time ({_duration(summary['bin_s'])} bins; --out: load_over_time.csv): busiest "
            f"{busy['value']:.2f} req/s at {_clock(busy['at_s'])}, KV cache up to {kv['value']:.0%} at "
            f"{_clock(kv['at_s'])}, up to {queue['value']:.0f} waiting at {_clock(queue['at_s'])}")
    if "lowest_slo_percent" in summary:
        low = summary["lowest_slo_percent"]
        text += f"; lowest SLO attainment {low['value']:.1f}% (requests arriving at {_clock(low['at_s'])})"
    return text


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _clock(seconds: float) -> str:
    """A bin's start as h:mm:ss of the run's clock (s below a minute)."""
    if seconds < 60:
        return f"{seconds:g} s"
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def draw_load_over_time(table: Columns, path: Path, title: str) -> Path:
    """Four panels sharing the time axis: offered and served requests per second; KV usage; waiting requests; SLO
    attainment (or TTFT percentiles without SLOs)."""
    from roofline.figures import COLORS, new_figure, save_png

    if isinstance(table, Table):
        table = table.to_pandas()

    span = float(table["end_s"].iloc[-1])
    unit, scale = ("h", 3600.0) if span > 3 * 3600 else ("min", 60.0) if span > 180 else ("s", 1.0)
    mid = (table["start_s"] + table["end_s"]).to_numpy() / 2 / scale
    fig = new_figure(9, 9)
    axes = fig.subplots(4, 1, sharex=True)
    axes[0].plot(mid, table["arrivals_per_s"], color=COLORS[0], label="arrived (offered)")
    axes[0].plot(mid, table["finished_per_s"], color=COLORS[1], label="finished")
    axes[0].set_ylabel("requests / s")
    axes[1].plot(mid, 100 * table["kv_usage_mean"], color=COLORS[0], label="mean")
    axes[1].plot(mid, 100 * table["kv_usage_max"], color=COLORS[3], label="max")
    axes[1].set_ylabel("KV cache used (%)")
    axes[1].set_ylim(0, 105)
    axes[2].plot(mid, table["num_waiting_mean"], color=COLORS[0], label="mean")
    axes[2].plot(mid, table["num_waiting_max"], color=COLORS[3], label="max")
    axes[2].set_ylabel("waiting requests")
    if "slo_percent" in table.columns:
        for i, column in enumerate(c for c in ("ttft_slo_percent", "tpot_slo_percent", "slo_percent")
                                   if c in table.columns):
            axes[3].plot(mid, table[column], color=COLORS[i], label=column.replace("_percent", "").replace("_", " "))
        axes[3].set_ylabel("requests meeting (%)")
        axes[3].set_ylim(0, 105)
    else:
        axes[3].plot(mid, 1e3 * table["ttft_p50_s"], color=COLORS[0], label="TTFT p50")
        axes[3].plot(mid, 1e3 * table["ttft_p90_s"], color=COLORS[3], label="TTFT p90")
        axes[3].set_ylabel("TTFT of arrivals (ms)")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    axes[3].set_xlabel(f"time ({unit}), bins of {_duration(float(table['end_s'].iloc[0]))}")
    fig.suptitle(title)
    return save_png(fig, path, rect=(0, 0, 1, 0.97))
