"""The real-`vllm serve` measurement scripts refuse bad arguments with one line and exit 2, before any work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"


@pytest.mark.parametrize("script, args, needle", [
    ("vllm_serve_intake_waits.py", ["--work-dirs", "{tmp}"], "has no timeline-a1.log or runs.json"),
    ("vllm_serve_render_wait.py", ["--tokenizer", "{tmp}/none"], "is not a directory"),
    ("vllm_serve_render_wait.py", ["--tokenizer", "{tmp}", "--prompts", "5"], "--prompts must be at least 20"),
    ("vllm_serve_render_wait.py", ["--tokenizer", "{tmp}", "--gap-ms", "-1"], "--gap-ms >= 0"),
])
def test_a_bad_argument_is_one_line_and_exit_2(tmp_path: Path, script: str, args: list[str], needle: str) -> None:
    argv = [a.format(tmp=tmp_path) for a in args] + ["--out", str(tmp_path / "out.json")]
    proc = subprocess.run([sys.executable, str(SCRIPTS / script), *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not (tmp_path / "out.json").exists()
