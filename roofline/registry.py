"""Shipped data by id: hardware profiles, model presets, workloads.

Ids are lowercase kebab-case and equal the file stems; they are matched case-insensitively. Every place that
takes an id also takes a path to a file (or, for models, an HF model directory).
"""

from __future__ import annotations

from pathlib import Path

from roofline.errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent

# kind -> (folder inside the package, file suffixes)
_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "hardware": ("hardware_profiles", (".yaml",)),
    "model": ("models", (".json",)),
    "workload": ("workloads", (".yaml",)),
}


def data_dir(kind: str) -> Path:
    assert kind in _KINDS, kind
    return PACKAGE_DIR / _KINDS[kind][0]


def list_ids(kind: str) -> list[str]:
    """The shipped ids of one kind, sorted."""
    folder, suffixes = _KINDS[kind]
    return sorted(p.stem for p in (PACKAGE_DIR / folder).iterdir() if p.suffix in suffixes)


def resolve(kind: str, name_or_path: str | Path) -> Path:
    """A shipped id (case-insensitive) or an existing path -> the file (or model directory) it names."""
    text = str(name_or_path).strip()
    if not text:
        raise UserError(f"--{kind}: empty value; allowed: {', '.join(list_ids(kind))} or a path")
    path = Path(text).expanduser()
    if path.exists():
        return path
    folder, suffixes = _KINDS[kind]
    for suffix in suffixes:
        candidate = PACKAGE_DIR / folder / f"{text.lower()}{suffix}"
        if candidate.exists():
            return candidate
    looks_like_path = "/" in text or text.endswith((".yaml", ".yml", ".json", ".csv"))
    if looks_like_path:
        raise UserError(f"--{kind}: no such file '{text}'")
    raise UserError(f"--{kind}: unknown {kind} '{text}'; allowed: {', '.join(list_ids(kind))}, or a path to a file")
