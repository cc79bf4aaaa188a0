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


SWITCH_PROBE = ("import sys\nprint(sys.getswitchinterval())\n"
                "from vllm.v1.engine.core import EngineCoreProc\nprint(sys.getswitchinterval())\n"
                "EngineCoreProc()\nprint(sys.getswitchinterval())")


def _switch_probe(tmp_path: Path, **env: str) -> list[float]:
    """A stand-in `vllm.v1.engine.core` (the hook wraps whatever EngineCoreProc the module defines): the switch interval
    at start, after the import, after an EngineCoreProc is constructed."""
    pkg = tmp_path / "vllm" / "v1" / "engine"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "vllm", tmp_path / "vllm" / "v1", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "core.py").write_text("class EngineCoreProc:\n    def __init__(self):\n        self.ok = True\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_SERVE_")}
    out = subprocess.run([sys.executable, "-c", SWITCH_PROBE], cwd=tmp_path, capture_output=True, text=True, check=True,
                         env={**clean, "PYTHONPATH": os.pathsep.join([str(SITE), str(tmp_path)]), **env})
    return [float(x) for x in out.stdout.split()]


def test_the_switch_interval_is_set_in_every_server_process_or_the_engine_core_alone(tmp_path: Path) -> None:
    assert _switch_probe(tmp_path / "a") == [0.005, 0.005, 0.005]  # without the variable: Python's default
    assert _switch_probe(tmp_path / "b", VLLM_SERVE_SWITCH_INTERVAL_S="0.0005",
                         VLLM_SERVE_SWITCH_INTERVAL_IN="server") == [0.0005] * 3
    # Only where an EngineCoreProc is constructed (vLLM's engine-core process), not where the module is merely imported
    # (the API server imports it too).
    assert _switch_probe(tmp_path / "c", VLLM_SERVE_SWITCH_INTERVAL_S="0.0005",
                         VLLM_SERVE_SWITCH_INTERVAL_IN="engine-core") == [0.005, 0.005, 0.0005]


def test_the_bench_refuses_a_switch_interval_out_of_range(tmp_path: Path) -> None:
    bench = SITE.parent / "vllm_serve_bench.py"
    out = subprocess.run([sys.executable, str(bench), "--work-dir", str(tmp_path), "--out", str(tmp_path / "r.json"),
                          "--switch-interval-s", "0"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip() == "--switch-interval-s: 0.0: must be > 0 and <= 1 (seconds)"
    assert not list(tmp_path.iterdir())  # refused before anything was built
