"""A run's tables as named numpy columns, and the few pandas reductions its printout needs, with pandas' floats.

`roofline simulate` prints its result from the request and step tables without pandas (`import pandas`, with the
pyarrow its string dtype imports, is ~0.25-0.45 s of the process's ~0.5 s start on the project's 2-core VM:
docs/benchmark-history/2026-11-30e-nopandas.md); a DataFrame is built only where one is written or asked for
(`Table.to_pandas`, `SimulationResult.requests`).

    table = Table({"ttft_s": ttft, "num_output_tokens": n_out})
    column(table, "ttft_s")        # the float64 array (a DataFrame's column the same way: the consumers take either)
    skipna_mean(values)             # Series.mean(): NaN left out, the same pairwise sum, the same float

pandas 3.1's reductions without bottleneck or numexpr installed (the project installs neither) are numpy's over
the column's array (pandas/core/nanops.py): `sum` of an integer column is `ndarray.sum`; `mean` of a float column
sums the column with its NaNs replaced by 0 (numpy's pairwise sum, the same order) and divides by the count of
the others, of an integer column sums in float64 and divides by the length; `max` leaves NaN out (NaN when
nothing is left). tests/test_sim_table.py checks each against pandas.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Union

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


class Table:
    """Columns of equal length by name, in order: numpy arrays, or a list (text such as request ids)."""

    __slots__ = ("_columns", "_num_rows")

    def __init__(self, columns: dict[str, Any]) -> None:
        lengths = {len(values) for values in columns.values()}
        assert len(lengths) <= 1, f"columns of different lengths: {sorted(lengths)}"
        self._columns = columns
        self._num_rows = lengths.pop() if lengths else 0

    def __getitem__(self, name: str) -> Any:
        return self._columns[name]

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __len__(self) -> int:
        """The number of rows (as a DataFrame's `len`)."""
        return self._num_rows

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self._columns)

    def to_pandas(self, copy: bool | None = None) -> pd.DataFrame:
        """The DataFrame of these columns, as `pd.DataFrame(columns, copy=copy)` (pandas imported here)."""
        import pandas as pd

        return pd.DataFrame(self._columns, copy=copy)


# A table the consumers read: a Table, or a DataFrame of the same columns (other callers' tables).
Columns = Union[Table, "pd.DataFrame"]


def column(table: Columns, name: str, dtype: Any = None) -> np.ndarray:
    """One column as a numpy array (a DataFrame's as `Series.to_numpy(dtype=dtype)`; no copy where none is
    needed)."""
    return np.asarray(table[name], dtype=dtype)


def skipna_sum(values: np.ndarray) -> Any:
    """`Series.sum()`: NaN counts as 0; an integer or bool column's own sum (a numpy scalar)."""
    if values.dtype.kind == "f":
        mask = np.isnan(values)
        if mask.any():
            values = np.where(mask, 0.0, values)
    return values.sum()


def skipna_mean(values: np.ndarray) -> float:
    """`Series.mean()`: NaN left out (NaN when nothing is left); an integer column summed in float64."""
    if values.dtype.kind != "f":
        return float(values.sum(dtype=np.float64) / len(values)) if len(values) else math.nan
    mask = np.isnan(values)
    count = len(values) - int(mask.sum())
    if count == 0:
        return math.nan
    total = np.where(mask, 0.0, values).sum() if count < len(values) else values.sum()
    return float(total / count)


def skipna_max(values: np.ndarray) -> float:
    """`Series.max()` of a float column: NaN left out (NaN when nothing is left)."""
    if values.dtype.kind == "f":
        values = values[~np.isnan(values)]
    return float(values.max()) if len(values) else math.nan


def between(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """`Series.between(low, high)`: low <= value <= high (NaN: False)."""
    return (values >= low) & (values <= high)
