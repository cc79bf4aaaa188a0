"""The optional C extension `engine.core._kvcore` (engine/core/_kvcore.c) and whether this process uses it.

    from engine.core.native import BUILT, COMPILED, _kvcore

`BUILT`: `pip install -e .` compiled it (setup.py builds it where a C compiler and Python's headers are found).
`COMPILED`: built, and not turned off by `ROOFLINE_PURE_PYTHON` (any value but empty, 0, false or no; read once, at
import), which selects the Python and numpy code everywhere the extension would be used: the KV cache manager and
block pool (engine.core.compiled_kv), the token id draw (engine.core.token_ids), the prompt check
(engine.core.request). Imports nothing of engine.core, so that every module can read it.
"""

from __future__ import annotations

import os

try:
    from engine.core import _kvcore
except ImportError:  # not built (no compiler at install time)
    _kvcore = None  # type: ignore[assignment]

# ROOFLINE_PURE_PYTHON not set to select the Python code (roofline.cost.native and roofline.sim.native read it here).
ALLOWED = os.environ.get("ROOFLINE_PURE_PYTHON", "").strip().lower() in ("", "0", "false", "no")
BUILT = _kvcore is not None
COMPILED = BUILT and ALLOWED
