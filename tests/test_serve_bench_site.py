"""benchmarks/ground_truth/timeline_site/sitecustomize.py: with VLLM_SERVE_CPU_VERSION set, every interpreter started
with the folder on its path (vLLM's spawned engine core too) answers the version lookup of "vllm" with it, and only
that lookup; without it nothing changes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SITE = Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth" / "timeline_site"
PROBE = ("import importlib.metadata as m\n"
         "try:\n    print(m.version('vllm'))\nexcept m.PackageNotFoundError:\n    print('absent')\n"
         "print(m.version('pip'))")


def _probe(**env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("VLLM_SERVE_CPU_VERSION", "VLLM_SERVE_TIMELINE")}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, "PYTHONPATH": str(SITE), **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_the_version_lookup_of_vllm_is_answered_in_a_fresh_interpreter() -> None:
    answer, pip = _probe(VLLM_SERVE_CPU_VERSION="0.11.0+cpu")
    assert answer == "0.11.0+cpu"
    assert pip == _probe()[1]  # other distributions are looked up as before


def test_without_the_variable_nothing_changes() -> None:
    import importlib.metadata

    try:
        expected = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        expected = "absent"
    assert _probe()[0] == expected
