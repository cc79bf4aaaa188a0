"""benchmarks/ground_truth/vllm_serve_process_cpu.py: per run, each API server process's CPU, wake-ups and run delay,
the engine's CPU per logged step; per cell the two-process figures over the one-process ones (exact, made-up runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"
sys.path.insert(0, str(HERE))

import vllm_serve_process_cpu as pc  # noqa: E402


def _run(name: str, count: int, api: dict[str, tuple[float, float, int]], ttft: float) -> dict:
    sched = {key: {"cpu_s": c, "run_delay_s": d, "slices": n} for key, (c, d, n) in api.items()}
    sched.update({"VLLM::EngineCor/VLLM::EngineCor/9/9": {"cpu_s": 0.2, "run_delay_s": 0.0, "slices": 5},
                  "VLLM::Worker/VLLM::Worker/8/8": {"cpu_s": 4.0, "run_delay_s": 0.0, "slices": 5},
                  "client/python/7/7": {"cpu_s": 0.99, "run_delay_s": 0.0, "slices": 5}})
    return {"name": name, "api_server_count": count, "result": {"completed": 98, "mean_ttft_ms": ttft},
            "engine_window": {"threads_sched": sched}, "engine_steps": [[i, 0, 0, 4, 4, 5.0] for i in range(100)],
            "cpus": {"cpu0": {"steal_s": 0.01}, "cpu1": {"steal_s": 0.02}}}


def test_each_process_apart_and_the_two_process_cell_over_the_one_process_one(tmp_path: Path) -> None:
    one = _run("burst100-completions-a1-r0", 1, {"api_server/python/5/5": (0.396, 0.1, 1000),
                                                 "api_server/python/5/6": (0.0, 0.0, 0)}, 400.0)
    two = _run("burst100-completions-a2-r0", 2, {"api_server/python/4/4": (0.005, 0.0, 10),  # the idle parent
                                                 "VLLM::APIServer/VLLM::APIServer/5/5": (0.297, 0.3, 1000),
                                                 "VLLM::APIServer/ZMQbg/IO/0/5/6": (0.0, 0.0, 0),
                                                 "VLLM::APIServer/VLLM::APIServer/6/6": (0.198, 0.2, 990)}, 500.0)
    row = pc.run_row(two)
    assert row["api_processes"] == 2
    # a request: the 98 completed and the client's test request
    assert row["api_cpu_ms_per_request_by_process"] == [3.0, 2.0]
    assert row["api_cpu_ms_per_request"] == pytest.approx(495 / 99)  # the idle parent's 5 ms left out
    assert row["api_run_delay_ms_per_wakeup"] == pytest.approx(1e3 * 0.5 / 1990)  # ms; the serving processes' only
    assert (row["engine_core_cpu_ms_per_step"], row["worker_cpu_ms_per_step"]) == pytest.approx((2.0, 40.0))
    assert row["steal_s"] == pytest.approx(0.03) and row["client_cpu_ms_per_request"] == pytest.approx(10.0)
    cells = {c["cell"]: c for c in pc.cell_rows([pc.run_row(one), row])}
    assert cells["burst100-completions-a2"]["mean_ttft_ms_over_a1"] == pytest.approx(1.25)
    assert cells["burst100-completions-a2"]["api_cpu_ms_per_request_over_a1"] == pytest.approx(495 / 396)
    assert "mean_ttft_ms_over_a1" not in cells["burst100-completions-a1"]
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps({"runs": [one, two]}))
    out = subprocess.run([sys.executable, str(HERE / "vllm_serve_process_cpu.py"), "--runs", str(runs),
                          "--out", str(tmp_path / "o.json")], capture_output=True, text=True, check=True)
    assert "over a1: API CPU x1.25" in out.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    out = subprocess.run([sys.executable, str(HERE / "vllm_serve_process_cpu.py"), "--runs", str(bad),
                          "--out", str(tmp_path / "o.json")], capture_output=True, text=True)
    assert (out.returncode, out.stderr.strip()) == (2, f"--runs: {bad}: not a vllm_serve_bench.py index (no 'runs' "
                                                       "list)")
