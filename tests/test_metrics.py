"""`roofline.sim.metrics`' median and percentile: numpy's floats, without importing numpy.ma."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from roofline.sim.metrics import median, percentile


def _arrays(rng: np.random.Generator) -> list[np.ndarray]:
    # Odd and even lengths, repeated values, signed zeros, infinities and NaNs.
    arrays = []
    for size in [*range(1, 40), 1000, 1001]:
        data = rng.uniform(-1, 1, size)
        arrays.append(data)
        arrays.append(np.round(data, 1))
        arrays.append(np.where(data < 0, -0.0, 0.0))
        with_inf = data.copy()
        with_inf[rng.integers(0, size)] = np.inf
        arrays.append(with_inf)
        with_nan = data.copy()
        with_nan[rng.integers(0, size)] = np.nan
        arrays.append(with_nan)
    return arrays


def _same(got: float, expected: float) -> bool:
    return bool(np.array_equal(got, expected, equal_nan=True) and np.signbit(got) == np.signbit(expected))


def test_median_is_numpys_median_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    for data in _arrays(rng):
        got, expected = median(data), np.median(data)
        assert type(got) is type(expected) and _same(got, expected)
    for size in (1, 2, 5, 6):
        ints = rng.integers(-5, 5, size)
        assert median(ints) == np.median(ints)


# Arrays holding inf: inf - inf between two neighbours warns in numpy's interpolation and in the same steps here.
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_percentile_is_numpys_percentile_bit_for_bit() -> None:
    rng = np.random.default_rng(8)
    for data in _arrays(rng):
        for q in (0, 1, 25, 37.3, 50, 90, 99, 99.9, 100):
            assert _same(percentile(data, q), float(np.percentile(data, q)))


def test_they_leave_numpy_ma_unimported() -> None:
    # (in a fresh process: what a simulation's printout pays on first use)
    code = ("import sys, numpy as np; from roofline.sim.metrics import median, percentile; "
            "x = np.arange(11.0); median(x); percentile(x, 90); print('numpy.ma' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
