"""benchmarks/accuracy/judge_split.py: a file that is not e2e_accuracy.py's rows.csv ends in one line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "accuracy" / "judge_split.py"


def _run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60)


def test_a_missing_or_foreign_file_is_refused_in_one_line(tmp_path: Path) -> None:
    foreign = tmp_path / "other.csv"
    foreign.write_text("a,b\n1,2\n")
    for path, words in ((tmp_path / "absent.csv", "cannot read"), (foreign, "no column")):
        done = _run(path)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("judge_split.py: error: rows_csv: ")
        assert words in done.stderr
