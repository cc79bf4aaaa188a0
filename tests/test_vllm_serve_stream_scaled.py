"""vllm_serve_stream_scaled.py (the diagnostic of docs/benchmark-history/2026-12-01b-serve21.md, section 5): the
streaming costs scaled, the others kept; the runs split by API-server count; a bad factor one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth" / "vllm_serve_stream_scaled.py"


def test_the_streaming_costs_are_scaled_and_the_runs_split(tmp_path: Path) -> None:
    costs = tmp_path / "sim.json"
    costs.write_text(json.dumps({"costs": {"output_pass_s": 1e-3, "output_token_s": 1e-4, "request_s": 2e-3}}))
    runs = [tmp_path / "r1.json", tmp_path / "r2.json"]
    runs[0].write_text(json.dumps({"server_flags": [], "runs": [{"name": "x-a1", "api_server_count": 1},
                                                                {"name": "x-a2", "api_server_count": 2}]}))
    runs[1].write_text(json.dumps({"server_flags": [], "runs": [{"name": "y-a2", "api_server_count": 2}]}))
    out = tmp_path / "out"
    subprocess.run([sys.executable, str(SCRIPT), "--costs", str(costs), "--factor", "1.5", "--runs",
                    f"c={runs[0]}+{runs[1]}", "--out-dir", str(out)], check=True)
    scaled = json.loads((out / "costs-scaled.json").read_text())["costs"]
    assert scaled == {"output_pass_s": 1e-3 * 1.5, "output_token_s": 1e-4 * 1.5, "request_s": 2e-3}
    assert [r["name"] for r in json.loads((out / "c-a1.json").read_text())["runs"]] == ["x-a1"]
    assert [r["name"] for r in json.loads((out / "c-a2.json").read_text())["runs"]] == ["x-a2", "y-a2"]


def test_a_bad_factor_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--costs", str(tmp_path / "x.json"), "--factor", "0",
                           "--out-dir", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip() == "--factor: must be a number in (0, 10], got 0.0"
