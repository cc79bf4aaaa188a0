"""The optional C extension `roofline.cost._stepcost` (roofline/cost/_stepcost.c: the step cost's GPU full-attention
paths) and whether this process uses it.

    from roofline.cost.native import COMPILED, _stepcost

`BUILT`: `pip install -e .` compiled it (setup.py builds it where a C compiler and Python's headers are found).
`COMPILED`: built, and not turned off by `ROOFLINE_PURE_PYTHON` (any value but empty, 0, false or no; read once, at
import, by `engine.core.native`), which selects the Python code of `roofline.cost.step_cost`, the reference.
"""

from __future__ import annotations

from typing import Any

from engine.core.native import ALLOWED

_stepcost: Any
try:
    from roofline.cost import _stepcost  # type: ignore[attr-defined,no-redef]
except ImportError:  # not built (no compiler at install time)
    _stepcost = None

BUILT = _stepcost is not None
COMPILED = BUILT and ALLOWED
