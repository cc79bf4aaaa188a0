"""Numeric helpers of the cost model's formulas, which run unchanged on Python floats (the simulator's scalar
path: `_ceil`/`_max` avoid numpy calls on floats) and on float64 arrays (fitting thousands of measured shapes,
tabulating a count's operators): the soft roofline `_overlap`, its pruning `_beatable`, the exact summation and
power helpers that keep the array paths bit-identical to the scalar one."""

from __future__ import annotations

import math
import sys
from typing import Any, TypeAlias, cast

import numpy as np
from numpy.typing import NDArray

from roofline.cost.hardware import HardwareProfile

# A formula's scalar-or-array value: a Python float on the simulator's scalar path, a float64 array where many
# shapes are evaluated at once.
Num: TypeAlias = float | NDArray[np.float64]


def _ceil(x: Num) -> Num:
    """Ceiling of a Python float (the simulator's scalar path: no numpy call) or of an array."""
    return math.ceil(x) if isinstance(x, (int, float)) else np.ceil(x)


def _max(a: Num, b: Num) -> Num:
    return max(a, b) if isinstance(a, (int, float)) and isinstance(b, (int, float)) else np.maximum(a, b)


_min = np.minimum
_sum = np.add.reduce  # `arr.sum()` without its Python wrapper (the simulator sums every step's contexts)


def _where(condition: bool | np.bool_ | NDArray[np.bool_], a: Num, b: Num) -> Num:
    """`np.where`, and a plain choice (a float stays a float) where the condition is one bool."""
    if isinstance(condition, (bool, np.bool_)):
        return a if condition else b
    return np.where(condition, a, b)


def row_sums(values: np.ndarray) -> np.ndarray:
    """`[sum(row) for row in values.tolist()]` as an array, the same floats: Python's `sum` of floats up to 3.11
    adds left to right (`0 + v0 + v1 + ...`), which column-wise additions repeat; from 3.12 on it is compensated
    (Neumaier), so there each row is summed by `sum` itself."""
    if sys.version_info >= (3, 12):
        return np.array([sum(row) for row in values.tolist()], dtype=np.float64)
    values = np.asarray(values, dtype=np.float64).view(np.ndarray)
    total = np.zeros(len(values), dtype=np.float64)
    for j in range(values.shape[1]):
        total += values[:, j]
    return total


_BEATEN = 1.0 - 1e-9  # `_beatable`: a tiling's lower bound, shrunk by far more than rounding, at least the best


def _any(flags: bool | NDArray[np.bool_]) -> bool:
    """`np.any`, without a numpy call for the scalar path's Python bool."""
    return flags if isinstance(flags, bool) else bool(np.any(flags))


def _overlap(tc: Num, tm: Num, p: float) -> Num:
    """Soft maximum of compute and memory time: (tc^p + tm^p)^(1/p), computed stably as
    hi * ((tc / hi)^p + (tm / hi)^p)^(1/p), hi = max(tc, tm) + 1e-30.

    Where the larger time over hi is exactly 1.0 (hi rounds to it: any finite time above ~1e-14 s) and 1.0^p is
    1.0 (C99 pow, and numpy's SIMD pow on this machine, BENCHMARKS.md), the sum is 1.0 + (smaller / hi)^p:
    computed so, the same floats with one pow fewer (the larger ratio's; a third of the cost model's pow calls)."""
    if isinstance(tc, float) and isinstance(tm, float):
        big, small = (tc, tm) if tc >= tm else (tm, tc)
        hi = big + 1e-30
        if big / hi == 1.0:
            return hi * (1.0 + (small / hi) ** p) ** (1.0 / p)
        return hi * ((tc / hi) ** p + (tm / hi) ** p) ** (1.0 / p)
    big_a = np.maximum(tc, tm)
    hi_a = big_a + 1e-30
    if (big_a / hi_a == 1.0).all():
        return hi_a * (1.0 + (np.minimum(tc, tm) / hi_a) ** p) ** (1.0 / p)
    return hi_a * ((tc / hi_a) ** p + (tm / hi_a) ** p) ** (1.0 / p)


def _beatable(tc: Num, tm: Num, adds: tuple[Num, ...], p: float, beaten: Num | None) -> Num | None:
    """`_overlap(tc, tm, p)` plus each of `adds` in order (a GEMM tiling's time), where it can be below `beaten`
    (the best time so far; None: everywhere); None if nowhere. The soft maximum is at least the larger of tc and
    tm (hi times a power >= 1 of a sum >= 1, up to the pow's and the product's last bits) and the additions are
    monotone, so where that bound, shrunk by `_BEATEN` (far more than those bits), is at least `beaten`, the time
    is too and `_min(beaten, time)` is `beaten`. Where only some elements of an array can win, the time is computed
    on those and the others hold `beaten`'s: the same `_min`, without the pow calls of the rest (most of a count
    table's tilings and split-K factors)."""
    if beaten is None:
        time = _overlap(tc, tm, p)
        for add in adds:
            time = time + add
        return time
    bound = _max(tc, tm)
    for add in adds:
        bound = bound + add
    can_win = bound * _BEATEN < beaten
    if not _any(can_win):
        return None
    if isinstance(can_win, bool) or can_win.all():
        return _beatable(tc, tm, adds, p, None)
    shape = can_win.shape
    if not all(np.ndim(x) == 0 or np.shape(x) == shape for x in (tc, tm, beaten, *adds)):
        return _beatable(tc, tm, adds, p, None)
    rows = np.flatnonzero(can_win)

    def pick(x: Any) -> Any:
        return x if np.ndim(x) == 0 else x.reshape(-1)[rows]

    time = cast(NDArray[np.float64], beaten).copy()  # (an array here: `can_win` is)
    time.reshape(-1)[rows] = _beatable(pick(tc), pick(tm), tuple(pick(a) for a in adds), p, None)
    return time


def _bandwidth(hw: HardwareProfile) -> float:
    return hw.memory_bandwidth_bytes_per_s


def memory_op_time_s(hw: HardwareProfile, bytes_moved: Num, num_kernels: int) -> Num:
    return bytes_moved / (_bandwidth(hw) * hw.efficiency.memory_efficiency) + num_kernels * hw.efficiency.kernel_fixed_s



class _ExactPowArray(np.ndarray):
    """A float64 array whose `**` is computed element by element by C `pow` (Python's `**` on floats,
    `math.pow` and numpy's on scalars call it too), every other ufunc as usual, results staying of this class.
    numpy's `power` on float64 arrays is vectorized (SIMD: SVML on AVX-512) and differs from C `pow` in the last
    bit for about 5 % of inputs; `float_power` has no SIMD loop and calls `npy_pow`, which is C `pow`, per
    element (checked equal to `math.pow` bit for bit on 4 M random bit patterns and exponents, 0, -0, inf,
    NaN and subnormals; 3.5-10x faster than mapping `math.pow`). So the formulas evaluated on arrays give the floats
    of `step_cost`'s scalar evaluation (`StepCostModel.breakdown_columns`)."""

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        plain = [x.view(np.ndarray) if isinstance(x, _ExactPowArray) else x for x in inputs]
        if ufunc is np.power and method == "__call__" and not kwargs:
            ufunc = np.float_power  # (float64 for any real input, as C pow takes)
        out = getattr(ufunc, method)(*plain, **kwargs)
        return out.view(_ExactPowArray) if isinstance(out, np.ndarray) else out


def _segment_sums(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """`np.add.reduceat(values, starts, dtype=np.int64)` of an integer array's non-empty segments (`lengths`
    long), without its int64 copy of `values` (4.4 M int32 contexts: 34 MB of fresh memory, which on the
    project's VM costs more than the sum): summed in `values`' own type where no segment's sum can overflow it."""
    if len(values) and values.dtype.itemsize < 8 and int(lengths.max()) * max(
            int(values.max()), -int(values.min())) <= np.iinfo(values.dtype).max:
        return np.add.reduceat(values, starts, dtype=values.dtype).astype(np.int64)
    return np.add.reduceat(values, starts, dtype=np.int64)


def _distinct_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)` of non-negative integer columns, by
    one sort of each row's columns as one mixed-radix int64 (unique over rows sorts them as byte strings, ~10x
    slower): the distinct rows (ascending) and each row's index among them."""
    radices = [int(column.max()) + 1 if len(column) else 1 for column in columns]
    assert all(int(column.min()) >= 0 for column in columns if len(column)), "non-negative integers"
    assert math.prod(radices) < 2**63, "rows beyond one int64"
    code = np.zeros(len(columns[0]), dtype=np.int64)
    for column, radix in zip(columns, radices):
        code = code * radix + column
    codes, inverse = np.unique(code, return_inverse=True)
    rows = np.empty((len(codes), len(columns)), dtype=np.int64)
    for j in range(len(columns) - 1, -1, -1):
        codes, rows[:, j] = np.divmod(codes, radices[j])
    return rows, inverse

