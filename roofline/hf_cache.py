"""`--model ORG/NAME` as `vllm serve` takes it, resolved without the network.

Order (issue 39): a shipped preset whose Hugging Face id is ORG/NAME (`preset_hf_ids`: each preset's `_source`
URL, plus the ids of identical checkpoints it lists under `_hf_ids`), then the local Hugging Face cache, then a
path. The cache is found as `huggingface_hub` finds it (huggingface_hub/constants.py): `HF_HUB_CACHE`, else the
legacy `HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`, with `HF_HOME` defaulting to `$XDG_CACHE_HOME/huggingface`
and that to `~/.cache/huggingface`. A model is cached as `models--ORG--NAME/snapshots/<commit>/config.json`,
with `refs/main` naming the commit `main` resolved to (the layout huggingface_hub's file_download.py
writes); NVIDIA ModelOpt checkpoints add `hf_quant_config.json` beside it, which `ModelSpec.from_path`
reads, as vLLM does.

    path = cached_config("Qwen/Qwen3-14B")     # .../models--Qwen--Qwen3-14B/snapshots/<commit>/config.json
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from roofline.errors import UserError

# An HF repo id as the hub accepts it (huggingface_hub/utils/_validators.py `REPO_ID_REGEX`): one slash.
HF_ID = re.compile(r"^[\w.-]{1,96}/[\w.-]{1,96}$")


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache folder this environment names (module docstring)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.path.expandvars(os.environ[var])).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def looks_like_hf_id(text: str) -> bool:
    """ORG/NAME, not a path written as one (./x, ../x, /x, x.json)."""
    return bool(HF_ID.match(text)) and not text.startswith(".") and not text.endswith((".json", ".yaml", ".yml"))


def cached_config(hf_id: str) -> Path | str:
    """The cached snapshot's config.json of `hf_id`, or (a str) where the search looked and why it missed.

    The snapshot is the one `refs/main` names; without that file, the only snapshot holding a config.json; several
    such snapshots and no `refs/main` is a `UserError` (which one vLLM would load depends on the revision asked for,
    so the user passes that snapshot's folder)."""
    repo = hub_cache_dir() / f"models--{hf_id.replace('/', '--')}"
    if not repo.is_dir():
        return f"{repo}: no such folder"
    snapshots = repo / "snapshots"
    ref = repo / "refs" / "main"
    if ref.is_file():
        commit = ref.read_text().strip()
        config = snapshots / commit / "config.json"
        if config.is_file():
            return config
    candidates = sorted(p for p in snapshots.glob("*/config.json") if p.is_file()) if snapshots.is_dir() else []
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        return f"{repo}: no snapshots/*/config.json"
    raise UserError(f"--model {hf_id}: {len(candidates)} cached snapshots under {snapshots} "
                    f"({', '.join(p.parent.name[:12] for p in candidates)}) and no refs/main; "
                    f"pass one snapshot folder as --model")
