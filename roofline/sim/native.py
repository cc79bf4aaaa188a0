"""The optional C extension `roofline.sim._simcore` (roofline/sim/_simcore.c: a finished request's runs of stamps,
`roofline.sim.token_times.Segments.add`'s shortcuts; the step rows; a finished request's records; the ITL gaps' sums
in order) and whether this process uses it.

    from roofline.sim.native import COMPILED, _simcore

`BUILT`: `pip install -e .` compiled it (setup.py, where a C compiler and Python's headers are found). `COMPILED`:
built, and not turned off by `ROOFLINE_PURE_PYTHON` (read by `engine.core.native`), which selects the Python
code, the reference.
"""

from __future__ import annotations

from typing import Any

from engine.core.native import ALLOWED

_simcore: Any
try:
    from roofline.sim import _simcore  # type: ignore[attr-defined,no-redef]
except ImportError:  # not built (no compiler at install time)
    _simcore = None

BUILT = _simcore is not None
COMPILED = BUILT and ALLOWED
