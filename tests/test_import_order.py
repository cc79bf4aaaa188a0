"""Every module of roofline/ and engine/core/ imports first, in a fresh process: an import cycle shows only when a
module of it is the first one imported (as in a spawned pool worker or a Ray task, which import a task's module
before any other), so each module is imported with every project module removed from sys.modules first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = r"""
import importlib, pkgutil, sys, traceback
import roofline, engine.core
names = sorted({m.name for pkg in (roofline, engine.core)
                for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")} - {"roofline.__main__"})
failed = []
for name in names:
    for loaded in [m for m in sys.modules if m.split(".")[0] in ("roofline", "engine")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ImportError as exc:
        if "torch" in str(exc) or "ray" in str(exc):  # the engine extra's and the Ray extra's modules
            continue
        failed.append(f"{name}: {exc}")
print(len(names))
print("\n".join(failed))
"""


def test_every_module_imports_first() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, check=True).stdout
    count, *failed = out.splitlines()
    assert int(count) > 100
    assert not [f for f in failed if f], failed
