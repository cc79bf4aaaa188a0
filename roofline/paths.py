"""Output paths, checked before any work: a command that would fail to write its results fails at once, in one
line, instead of after minutes of simulation."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from roofline.errors import UserError


def prepare_output_dir(path: Path, flag: str = "--out") -> Path:
    """Create the directory `path` (and its parents) and check that files can be written into it."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag}: '{path}' exists and is not a directory; give a directory path")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UserError(f"{flag}: cannot write into '{path}': {exc.strerror or exc}") from None
    return path


def check_output_file(path: Path, flag: str = "--out") -> Path:
    """Check that the file `path` can be written (its directory exists and is writable; it is not a directory)."""
    if path.is_dir():
        raise UserError(f"{flag}: '{path}' is a directory; give a file path")
    parent = path.parent if str(path.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise UserError(f"{flag}: '{parent}' (in '{path}') is a file, not a directory")
    if not parent.is_dir():
        raise UserError(f"{flag}: the directory '{parent}' does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"{flag}: cannot write '{path}' (permission denied)")
    return path
