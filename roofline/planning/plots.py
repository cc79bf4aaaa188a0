"""The pictures of a capacity-planning report (`roofline plan`), each a small deterministic PNG.

    roofline_chart(path, "h100-sxm TP4", prefill_profile, decode_profile)
    latency_vs_load(path, [Curve(...)], slo)
    kv_usage(path, [("h100-sxm TP4 seqs256", t_s, usage)])
    step_breakdown(path, [("h100-sxm TP4", prefill_profile, decode_profile)])
    cost_by_config(path, [CostBar(...)])
    pareto(path, [ParetoPoint(...)], target_rate_per_s)

Drawn and saved by `roofline.figures` (deterministic PNGs). Log axes are labelled with plain numbers
(`readable_log_axis`): "0.02", "2", "500", or "1 T" for FLOP/s, never "2x10^0".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.axis import Axis, YAxis
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from roofline.figures import COLORS, new_figure, save_png
from roofline.planning.search import Slo, StepProfile

# Operators get one colour each from matplotlib's 20-colour table, in the order they run in a step.
_TAB20 = matplotlib.colormaps["tab20"]
_OP_COLORS = tuple(_TAB20(i) for i in range(_TAB20.N))  # RGBA


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _op_colors(steps: list[StepProfile]) -> dict[str, tuple[float, float, float, float]]:
    """Operator name -> colour, by first appearance across the steps (so the legend reads in step order)."""
    names: dict[str, None] = {}
    for step in steps:
        names.update((op.name, None) for op in step.ops)
    return {name: _OP_COLORS[i % len(_OP_COLORS)] for i, name in enumerate(names)}


def plain_number(value: float, _position: object = None) -> str:
    """A tick label without exponents: 3 significant digits at most, SI prefixes from 1e4 on (k, M, G, T, P)."""
    if value <= 0 or not math.isfinite(value):
        return ""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "k")):
        if value >= factor:
            return f"{value / factor:.3g} {prefix}" if prefix != "k" else f"{value / 1e3:.3g}k"
    text = f"{value:.4g}" if value >= 1 else f"{value:.3g}"
    return np.format_float_positional(value, precision=3, unique=False, fractional=False, trim="-") \
        if "e" in text else text


def readable_log_axis(axis: Axis) -> None:
    """Log-axis ticks labelled as plain numbers: every decade; also 2 and 5 when the axis spans less than two
    decades, and every integer multiple when less than one (so a narrow axis still has labels). Call it after
    the data are drawn and the limits set."""
    lo, hi = sorted(axis.axes.get_ylim() if isinstance(axis, YAxis) else axis.axes.get_xlim())
    span = math.log10(hi / lo) if lo > 0 and hi > 0 else 3.0
    subs = (1.0,) if span >= 2 else (1.0, 2.0, 5.0) if span >= 1 else tuple(float(k) for k in range(1, 10))
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(plain_number))
    axis.set_minor_locator(LogLocator(base=10, subs=tuple(range(2, 10))))
    axis.set_minor_formatter(NullFormatter())


# ---- roofline -----------------------------------------------------------------------------------------

def roofline_chart(path: Path, title: str, prefill: StepProfile, decode: StepProfile) -> Path:
    """The device roofline (peak FLOP/s, memory bandwidth) on log-log axes with each operator of a prefill
    and a decode step placed at its arithmetic intensity and the FLOP/s the cost model predicts for it."""
    fig = new_figure(7.5, 5.0)
    ax = fig.add_subplot(1, 1, 1)
    peak, bw = prefill.peak_flops_per_s, prefill.memory_bandwidth_bytes_per_s
    points = [(step, op) for step in (prefill, decode) for op in step.ops
              if op.flops > 0 and op.bytes > 0 and op.time_s > 0]
    intensities = [op.flops / op.bytes for _, op in points] or [1.0]
    x_lo = min(min(intensities), peak / bw) / 4
    x_hi = max(max(intensities), peak / bw) * 4
    x = np.geomspace(x_lo, x_hi, 200)
    ax.plot(x, np.minimum(peak, bw * x), color="black", linewidth=1.5, label="roofline (datasheet peaks)")
    ax.axvline(peak / bw, color="gray", linestyle=":", linewidth=1)
    ax.text(peak / bw * 1.15, 0.03, f"ridge {peak / bw:.0f} FLOP/byte", transform=ax.get_xaxis_transform(),
            fontsize=7, color="gray")
    colors = _op_colors([prefill, decode])
    names = [name for name in colors if any(op.name == name for _, op in points)]
    for step, marker in ((prefill, "o"), (decode, "^")):
        for op in step.ops:
            if op.flops <= 0 or op.bytes <= 0 or op.time_s <= 0:
                continue
            ax.scatter(op.flops / op.bytes, op.flops / op.time_s, marker=marker, s=36, color=colors[op.name],
                       edgecolors="black", linewidths=0.4, zorder=3)
    for name in names:
        ax.scatter([], [], marker="s", color=colors[name], label=name)
    ax.scatter([], [], marker="o", color="white", edgecolors="black", label=prefill.label)
    ax.scatter([], [], marker="^", color="white", edgecolors="black", label=decode.label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    readable_log_axis(ax.xaxis)
    readable_log_axis(ax.yaxis)
    ax.set_xlabel("arithmetic intensity [FLOP/byte]")
    ax.set_ylabel("achieved [FLOP/s] (predicted)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    return save_png(fig, path)


# ---- latency against load ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Curve:
    """Percentile latencies against offered rate for one configuration; `low`/`high` are the same search at
    -10 % / +10 % efficiency (None without sensitivity). Each is (rates, then one array per metric, NaN where
    not measured), sorted by rate. `max_rate_per_s`: the highest rate within the SLOs; `saturation_rate_per_s`:
    the highest throughput measured."""

    label: str
    nominal: tuple[np.ndarray, ...]
    max_rate_per_s: float
    low: tuple[np.ndarray, ...] | None = None
    high: tuple[np.ndarray, ...] | None = None
    low_max_rate_per_s: float | None = None
    high_max_rate_per_s: float | None = None
    saturation_rate_per_s: float | None = None


def latency_vs_load(path: Path, curves: list[Curve], slo: Slo, metrics: list[tuple[str, str]]) -> Path:
    """One panel per measured metric (`metrics`: (SLO name, title), in the order of the curves' arrays): its
    percentile against offered request rate from light load to past saturation, the SLO line where one is set,
    the highest rate within all SLOs (dotted), the saturation rate (grey) and the -10 % / +10 % efficiency
    range of the answer (shaded)."""
    shown = [(col, name, title) for col, (name, title) in enumerate(metrics, start=1)
             if any(np.isfinite(c.nominal[col]).any() for c in curves)]
    ncols = 2
    nrows = max(1, -(-len(shown) // ncols))
    fig = new_figure(11.0, 3.6 * nrows)
    pct = f"p{slo.percentile:g}"
    limits = slo.limits()
    for i_panel, (col, name, title) in enumerate(shown, start=1):
        ax = fig.add_subplot(nrows, ncols, i_panel)
        for i, curve in enumerate(curves):
            rates, values = curve.nominal[0], curve.nominal[col]
            ok = np.isfinite(values) & (values > 0)
            ax.plot(rates[ok], values[ok], marker="o", markersize=3, color=_color(i), label=curve.label)
            for other in (curve.low, curve.high):
                if other is not None:
                    keep = np.isfinite(other[col]) & (other[col] > 0)
                    ax.plot(other[0][keep], other[col][keep], marker=".", markersize=3, linestyle="--",
                            linewidth=0.7, color=_color(i), alpha=0.6)
            if curve.low_max_rate_per_s and curve.high_max_rate_per_s:
                ax.axvspan(curve.low_max_rate_per_s, curve.high_max_rate_per_s, color=_color(i), alpha=0.12,
                           linewidth=0)
            ax.axvline(curve.max_rate_per_s, color=_color(i), linestyle=":", linewidth=1)
            if curve.saturation_rate_per_s:
                ax.axvline(curve.saturation_rate_per_s, color="gray", linestyle="-", linewidth=0.8, alpha=0.6)
        if name in limits:
            ax.axhline(limits[name], color="red", linestyle="--", linewidth=1.2, label=f"SLO {limits[name]:g} s")
        ax.set_yscale("log")
        ax.set_xlim(left=0)
        readable_log_axis(ax.yaxis)
        ax.set_xlabel("offered load per replica [requests/s]")
        ax.set_ylabel(f"{title} {pct} [s]")
        ax.set_title(f"{title} {pct} against load" + ("" if name in limits else " (no SLO set)"), fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        if i_panel == 1:
            ax.legend(fontsize=7, loc="upper left")
    return save_png(fig, path)


# ---- KV usage ----------------------------------------------------------------------------------------

def kv_usage(path: Path, series: list[tuple[str, tuple[float, ...], tuple[float, ...]]]) -> Path:
    """KV-cache usage (percent of blocks) over simulated time at each configuration's highest sustained rate."""
    fig = new_figure(11.0, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    for i, (label, t, usage) in enumerate(series):
        ax.plot(t, 100.0 * np.asarray(usage), linewidth=0.9, color=_color(i), label=label)
    ax.set_ylim(0, 105)
    ax.set_xlabel("simulated time [s]")
    ax.set_ylabel("KV cache in use [%]")
    ax.set_title("KV-cache usage at the highest rate within SLO", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    if series:
        ax.legend(fontsize=7, loc="lower right")
    return save_png(fig, path)


# ---- step time by operator ---------------------------------------------------------------------------

def step_breakdown(path: Path, rows: list[tuple[str, StepProfile, StepProfile]]) -> Path:
    """Stacked bars of predicted time per operator: one panel for the prefill step, one for the decode step,
    one bar per configuration."""
    fig = new_figure(11.0, 1.6 + 0.9 * max(1, len(rows)))
    colors = _op_colors([step for _, p, d in rows for step in (p, d)])
    names = list(colors)
    for col, which in ((1, "prefill"), (2, "decode")):
        ax = fig.add_subplot(1, 2, col)
        for y, (label, prefill, decode) in enumerate(rows):
            step = prefill if which == "prefill" else decode
            left = 0.0
            for op in step.ops:
                width_ms = op.time_s * 1e3
                ax.barh(y, width_ms, left=left, color=colors[op.name], edgecolor="white", linewidth=0.3)
                left += width_ms
            ax.text(left, y, f" {step.total_s * 1e3:.3g} ms", va="center", fontsize=7)
        ax.set_yticks(range(len(rows)), [f"{label}\n{(p if which == 'prefill' else d).label}"
                                         for label, p, d in rows], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("predicted time [ms]")
        ax.set_title(f"{which} step by operator", fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
        ax.margins(x=0.15)
    handles = [Patch(color=colors[n]) for n in names]
    fig.legend(handles, names, loc="lower center", ncol=min(8, max(1, len(names))), fontsize=7, frameon=False)
    return save_png(fig, path, rect=(0, 0.12, 1, 1))


# ---- cost --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CostBar:
    label: str
    usd_per_hour: float
    low_usd_per_hour: float | None = None  # at +10 % efficiency
    high_usd_per_hour: float | None = None  # at -10 % efficiency
    is_best: bool = False


def cost_by_config(path: Path, bars: list[CostBar]) -> Path:
    """Dollars per hour of the deployment for the target rate, in the given order (best first), with the
    sensitivity range."""
    fig = new_figure(11.0, 1.2 + 0.28 * max(1, len(bars)))
    ax = fig.add_subplot(1, 1, 1)
    for y, bar in enumerate(bars):
        ax.barh(y, bar.usd_per_hour, color="tab:green" if bar.is_best else "tab:blue", alpha=0.8)
        if bar.low_usd_per_hour is not None and bar.high_usd_per_hour is not None:
            ax.plot([bar.low_usd_per_hour, bar.high_usd_per_hour], [y, y], color="black", linewidth=1.2)
            ax.plot([bar.low_usd_per_hour] * 2, [y - 0.2, y + 0.2], color="black", linewidth=1.2)
            ax.plot([bar.high_usd_per_hour] * 2, [y - 0.2, y + 0.2], color="black", linewidth=1.2)
    ax.set_yticks(range(len(bars)), [b.label for b in bars], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("deployment cost for the target rate [USD/hour] (whiskers: optimistic / pessimistic)")
    ax.set_title("cost by configuration (green: best)", fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    return save_png(fig, path)


# ---- Pareto front ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParetoPoint:
    label: str
    usd_per_hour: float
    sustained_rate_per_s: float
    on_front: bool = False
    is_cheapest: bool = False


def pareto(path: Path, points: list[ParetoPoint], target_rate_per_s: float) -> Path:
    """Deployment cost against the rate it sustains within the SLOs: every configuration a dot, the Pareto front
    a line with its points labelled, the cheapest a star, the target rate dashed."""
    fig = new_figure(11.0, 4.6)
    ax = fig.add_subplot(1, 1, 1)
    others = [p for p in points if not p.on_front]
    ax.scatter([p.usd_per_hour for p in others], [p.sustained_rate_per_s for p in others], s=14, color="tab:gray",
               alpha=0.5, label="serving configuration")
    front = sorted((p for p in points if p.on_front), key=lambda p: p.usd_per_hour)
    ax.plot([p.usd_per_hour for p in front], [p.sustained_rate_per_s for p in front], marker="o", markersize=5,
            color="tab:blue", label="Pareto front")
    for p in front:
        ax.annotate(p.label, (p.usd_per_hour, p.sustained_rate_per_s), textcoords="offset points", xytext=(5, 4),
                    fontsize=7)
    for p in points:
        if p.is_cheapest:
            ax.scatter([p.usd_per_hour], [p.sustained_rate_per_s], marker="*", s=180, color="tab:green",
                       edgecolors="black", linewidths=0.5, zorder=4, label="cheapest")
    ax.axhline(target_rate_per_s, color="red", linestyle="--", linewidth=1, label=f"target {target_rate_per_s:g} req/s")
    ax.set_xlabel("deployment cost for the target rate [USD/hour]")
    ax.set_ylabel("rate the deployment sustains within the SLOs [requests/s]")
    ax.set_title("cost against sustained rate (Pareto front: nothing is both cheaper and faster)", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.margins(x=0.12, y=0.1)
    ax.legend(fontsize=7, loc="lower right")
    return save_png(fig, path)
