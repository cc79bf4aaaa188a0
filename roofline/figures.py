"""The one way this project draws a PNG: matplotlib's Agg canvas without pyplot (no global figure state, no GUI
backend), one resolution, and no "Software" metadata (Agg writes no date), so the same data give byte-identical
files with the same matplotlib version. Used by `roofline.calibration.plots` and `roofline.planning.plots`."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 100
# One fixed colour per series position, so a series keeps its colour across the plots of one report.
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:gray", "tab:olive",
          "tab:cyan", "tab:pink")


def new_figure(width_in: float, height_in: float) -> Figure:
    fig = Figure(figsize=(width_in, height_in), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: Path, rect: tuple[float, float, float, float] = (0, 0, 1, 1)) -> Path:
    """Lay out within `rect` (figure fractions) and write `path`, creating its directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=rect)
    fig.savefig(path, format="png", dpi=DPI, metadata={"Software": None})
    return path
