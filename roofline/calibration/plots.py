"""Small, deterministic PNG plots shared by `compare`, `calibrate` and reports.

Three generic pictures, each from a list of labelled `Series`:

    predicted_vs_measured(path, [Series("decode", measured_s, predicted_s)], title=..., unit="s")
    error_vs(path, [Series("decode", batch_tokens, rel_err)], xlabel="batch tokens", title=...)
    over_time(path, [Series("measured", t_s, y), Series("predicted", t_s, y2)], xlabel=..., ylabel=...)

Drawn and saved by `roofline.figures` (deterministic PNGs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from roofline.figures import COLORS as _COLORS
from roofline.figures import new_figure, save_png

_SIZE_IN = (6.4, 4.8)


@dataclass(frozen=True)
class Series:
    """One labelled set of points: `x` and `y` of equal length."""

    label: str
    x: np.ndarray
    y: np.ndarray

    def __post_init__(self) -> None:
        assert len(self.x) == len(self.y), (self.label, len(self.x), len(self.y))


def _new_axes(title: str, xlabel: str, ylabel: str) -> tuple[Figure, Axes]:
    fig = new_figure(*_SIZE_IN)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


def _color(i: int) -> str:
    return _COLORS[i % len(_COLORS)]


def predicted_vs_measured(path: Path, series: list[Series], title: str, unit: str = "s",
                          band: float = 0.2) -> Path:
    """Scatter of predicted (y) against measured (x) on log axes, with y = x and a +/- `band` relative
    error band, so points above the line are over-predictions."""
    fig, ax = _new_axes(title, f"measured [{unit}]", f"predicted [{unit}]")
    values = [v for s in series for v in (s.x, s.y) if len(v)]
    positive = np.concatenate(values) if values else np.array([])
    positive = positive[positive > 0]
    for i, s in enumerate(series):
        ax.scatter(s.x, s.y, s=8, alpha=0.6, color=_color(i), label=f"{s.label} ({len(s.x)})")
    if len(positive):
        lo, hi = float(positive.min()) / 1.2, float(positive.max()) * 1.2
        line = np.array([lo, hi])
        ax.plot(line, line, color="black", linewidth=1, label="y = x")
        ax.fill_between(line, line * (1 - band), line * (1 + band), color="gray", alpha=0.15,
                        label=f"+/- {band:.0%}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.legend(loc="upper left", fontsize="small")
    return save_png(fig, path)


def error_vs(path: Path, series: list[Series], xlabel: str, title: str, log_x: bool = True) -> Path:
    """Relative error (y, a fraction, drawn in percent) against a quantity such as batch tokens."""
    fig, ax = _new_axes(title, xlabel, "relative error (predicted / measured - 1) [%]")
    for i, s in enumerate(series):
        ax.scatter(s.x, 100.0 * np.asarray(s.y, dtype=float), s=8, alpha=0.6, color=_color(i),
                   label=f"{s.label} ({len(s.x)})")
    ax.axhline(0.0, color="black", linewidth=1)
    has_points = any(len(s.x) for s in series)
    if log_x and has_points and min(float(np.min(s.x)) for s in series if len(s.x)) > 0:
        ax.set_xscale("log")
    if has_points:
        ax.legend(loc="best", fontsize="small")
    return save_png(fig, path)


def over_time(path: Path, series: list[Series], xlabel: str, ylabel: str, title: str,
              log_y: bool = False) -> Path:
    """Lines over time (x), one per series, e.g. measured and predicted step time."""
    fig, ax = _new_axes(title, xlabel, ylabel)
    for i, s in enumerate(series):
        ax.plot(s.x, s.y, linewidth=0.8, alpha=0.8, color=_color(i), label=s.label)
    if log_y and all(np.all(np.asarray(s.y) > 0) for s in series if len(s.y)):
        ax.set_yscale("log")
    if any(len(s.x) for s in series):
        ax.legend(loc="best", fontsize="small")
    return save_png(fig, path)
