"""Shipped data by id: hardware profiles, model presets, workloads.

The data live in the repository's top-level folders `hardware_profiles/`, `models/` and `workloads/`, installed
as the data packages `roofline.hardware_profiles`, `roofline.models` and `roofline.workloads` (pyproject.toml),
where `importlib.resources` finds them in an installed wheel. A source checkout (the package beside
pyproject.toml: an editable install, or a tree run without installing) reads its own folders.

Ids are lowercase kebab-case and equal the file stems; they are matched case-insensitively. Every place that
takes an id also takes a path to a file (or, for models, an HF model directory). A model is also named by its
Hugging Face id, ORG/NAME, as `vllm serve` takes it (`resolve_model`, `roofline.hf_cache`).
"""

from __future__ import annotations

import importlib.resources
import json
import re
from functools import cache
from pathlib import Path

from engine.core.model_spec import ModelSpec
from roofline import hf_cache
from roofline.errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent
SOURCE_DIR = PACKAGE_DIR.parent

# kind -> (data folder = package name under roofline, file suffixes of its ids)
_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "hardware": ("hardware_profiles", (".yaml",)),
    "model": ("models", (".json",)),
    "workload": ("workloads", (".yaml",)),
}
# Shipped files that are not ids of their kind.
_NOT_IDS = {"hardware": {"prices"}}


def data_dir(folder: str) -> Path:
    """A shipped data folder: `hardware_profiles`, `models` or `workloads`."""
    assert folder in {f for f, _ in _KINDS.values()}, folder
    if (SOURCE_DIR / "pyproject.toml").is_file():  # a source checkout (editable install or none): its own data
        return SOURCE_DIR / folder
    return Path(str(importlib.resources.files(f"roofline.{folder}")))


def data_file(folder: str, name: str) -> Path:
    """A shipped file by folder and file name, e.g. `data_file("hardware_profiles", "prices.yaml")`."""
    return data_dir(folder) / name


def list_ids(kind: str) -> list[str]:
    """The shipped ids of one kind, sorted."""
    folder, suffixes = _KINDS[kind]
    skip = _NOT_IDS.get(kind, set())
    return sorted(p.stem for p in data_dir(folder).iterdir() if p.suffix in suffixes and p.stem not in skip)


def resolve(kind: str, name_or_path: str | Path) -> Path:
    """A shipped id (case-insensitive) or an existing path -> the file (or model directory) it names."""
    text = str(name_or_path).strip()
    if not text:
        raise UserError(f"--{kind}: empty value; allowed: {', '.join(list_ids(kind))} or a path")
    path = Path(text).expanduser()
    if path.exists():
        return path
    folder, suffixes = _KINDS[kind]
    if text.lower() in list_ids(kind):
        for suffix in suffixes:
            candidate = data_dir(folder) / f"{text.lower()}{suffix}"
            if candidate.exists():
                return candidate
    looks_like_path = "/" in text or text.endswith((".yaml", ".yml", ".json", ".csv", ".jsonl"))
    if looks_like_path:
        raise UserError(f"--{kind}: no such file '{text}'")
    raise UserError(f"--{kind}: unknown {kind} '{text}'; allowed: {', '.join(list_ids(kind))}, or a path to a file")


_HF_SOURCE = re.compile(r"^https://huggingface\.co/([\w.-]+/[\w.-]+)(/|$)")


@cache
def _preset_hf_ids(folder: Path) -> dict[str, str]:
    """HF id (lowercase) -> preset id, over the presets in `folder`: the repo of each preset's `_source` URL and
    the ids listed under `_hf_ids` (checkpoints with the same config.json shapes and quantization)."""
    ids: dict[str, str] = {}
    for path in sorted(folder.glob("*.json")):
        config = json.loads(path.read_text())
        match = _HF_SOURCE.match(str(config.get("_source", "")))
        for hf_id in ([match.group(1)] if match else []) + list(config.get("_hf_ids", [])):
            assert hf_id.lower() not in ids, f"{hf_id} named by presets {ids.get(hf_id.lower())} and {path.stem}"
            ids[hf_id.lower()] = path.stem
    return ids


def preset_hf_ids() -> dict[str, str]:
    """HF id (lowercase) -> the shipped preset that stands for it."""
    return _preset_hf_ids(data_dir("models"))


def resolve_model(name_or_path: str | Path) -> tuple[Path, str | None]:
    """(the config.json or model directory, the model's name or None for the config's own) of `--model`: a shipped
    id, a shipped preset by its HF id, the HF id's config.json in the local Hugging Face cache, or a path, in that
    order; never the network. A miss is one line saying where it looked and how to pass a config."""
    text = str(name_or_path).strip()
    if text.lower() in list_ids("model") or not hf_cache.looks_like_hf_id(text):
        path = resolve("model", text)
        return path, path.stem if path.suffix == ".json" else None
    preset = preset_hf_ids().get(text.lower())
    if preset is not None:
        return data_dir("models") / f"{preset}.json", preset
    cached = hf_cache.cached_config(text)
    if isinstance(cached, Path):
        return cached, text
    path = Path(text).expanduser()
    if path.exists():
        return path, None
    raise UserError(f"--model {text}: not a shipped preset (roofline models), not in the Hugging Face cache "
                    f"({cached}; HF_HUB_CACHE / HF_HOME name another) and no such path; the network is never used: "
                    f"fetch it with `huggingface-cli download {text} config.json`, or pass a config.json or model "
                    f"directory as --model")


def load_model(name_or_path: str | Path) -> ModelSpec:
    """The model spec of `--model` (`resolve_model`); a bad one is a `UserError`."""
    path, name = resolve_model(name_or_path)
    try:
        return ModelSpec.from_path(path, name=name)
    except ValueError as exc:
        raise UserError(f"--model: {exc}") from None
