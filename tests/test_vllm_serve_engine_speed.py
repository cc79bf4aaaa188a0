"""A session's engine speed against the campaign's (benchmarks/ground_truth/vllm_serve_engine_speed.py): exact
ratios on made-up engine steps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"))

import vllm_serve_engine_speed as speed  # noqa: E402


def test_decode_only_steps_by_batch_and_the_mean_ratio_over_shared_sizes() -> None:
    # [iteration, context requests, context tokens, generation requests, generation tokens, elapsed ms]
    run = {"engine_steps": [[1, 1, 128, 0, 0, 12.0]] + [[i, 0, 0, 1, 1, 6.0] for i in range(5)]
           + [[i, 0, 0, 2, 2, 9.0] for i in range(5)] + [[9, 1, 128, 2, 2, 20.0]] + [[i, 0, 0, 3, 3, 1.0]
                                                                                     for i in range(4)]}
    steps = speed.decode_steps(run)
    assert sorted(steps) == [1, 2, 3] and steps[2] == [9.0] * 5  # the mixed step (a prefill in it) is left out
    reference = {1: [5.0] * 5, 2: [10.0] * 6, 3: [1.0] * 9}
    # sizes 1 and 2 (3 has only 4 steps here): (6/5 + 9/10) / 2
    assert speed.speed_ratio(steps, reference) == pytest.approx(1.05)
    assert speed.speed_ratio({}, reference) is None
    assert speed.cell("rate20-completions-a1-r0-s1") == "rate20-completions-a1"


def test_correlation_line() -> None:
    fit = speed.correlation([1.0, 1.1, 1.2], [-10.0, -20.0, -30.0])
    assert fit is not None
    assert (fit["pearson"], fit["slope"], fit["intercept"]) == pytest.approx((-1.0, -100.0, 90.0))
    assert speed.correlation([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None


def test_the_scaled_profile_is_the_engine_alone_made_slower() -> None:
    import vllm_serve_engine_scaled as scaled

    profile = {"name": "host", "peak_tflops": {"bf16": 0.8, "fp32": 0.2}, "memory_bandwidth_gb_per_s": 40.0,
               "weight_streaming": {"vllm-cpu": {"rows": [1, 2], "gb_per_s": [20.0, 10.0]}},
               "executor": {"mode": "eager", "kernel_launch_us": 1.0, "step_overhead_us": 500.0,
                            "step_overhead_per_seq_us": 30.0}, "host": {"api_server_num_cores": 1}}
    out = scaled.scaled_hardware(profile, 1.25)
    assert out["peak_tflops"] == pytest.approx({"bf16": 0.64, "fp32": 0.16})
    assert out["memory_bandwidth_gb_per_s"] == pytest.approx(32.0)
    assert out["weight_streaming"]["vllm-cpu"]["gb_per_s"] == pytest.approx([16.0, 8.0])
    assert (out["executor"]["step_overhead_us"], out["executor"]["step_overhead_per_seq_us"]) == pytest.approx(
        (625.0, 37.5))
    assert out["host"] == profile["host"] and profile["peak_tflops"]["bf16"] == 0.8  # the API side, the input kept


def test_the_api_servers_cpu_per_request_over_the_engine_window() -> None:
    run = {"result": {"completed": 200}, "engine_window": {"threads_cpu_s": {
        "api_server/python": 2.0, "api_server/ZMQbg/IO/1": 0.2, "client/python": 8.0, "VLLM::Worker/VLLM::Worker": 9.0}}}
    assert speed.api_cpu_per_request(run) == pytest.approx(0.011)  # the API server's threads only
    assert speed.api_cpu_per_request({"result": {"completed": 200}}) is None


def test_two_process_runs_count_both_api_servers_and_take_the_one_process_reference() -> None:
    run = {"result": {"completed": 100}, "engine_window": {"threads_cpu_s": {
        "VLLM::APIServer/VLLM::APIServer": 0.6, "VLLM::APIServer/ZMQbg/IO/0": 0.1, "api_server/python": 0.05,
        "VLLM::EngineCor/VLLM::EngineCor": 3.0}}}
    # both spawned API servers (process name VLLM::APIServer) and the idle parent (api_server)
    assert speed.api_cpu_per_request(run) == pytest.approx(0.0075)
    assert speed.one_process("burst100-chat-a2") == "burst100-chat-a1"


def test_a_two_process_sessions_runs_are_scaled_by_their_own_steps(tmp_path: Path) -> None:
    import json
    import subprocess

    import yaml

    runs = tmp_path / "runs.json"
    names = ["rate20-chat-a2-r1", "burst100-chat-a2-r1", "rate20-chat-a1-r1"]
    runs.write_text(json.dumps({"runs": [{"name": n, "api_server_count": int(n[-4])} for n in names]}))
    rows = [{"run": n, "session": str(runs), "engine_step_ratio": r, "api_cpu_ratio": 1.5}
            for n, r in zip(names, (1.2, 1.4, 9.0))]
    (tmp_path / "speed.json").write_text(json.dumps({"rows": rows}))
    (tmp_path / "hw.yaml").write_text(yaml.safe_dump({"name": "host", "peak_tflops": {"fp32": 0.2},
                                                      "memory_bandwidth_gb_per_s": 40.0, "executor": {}}))
    (tmp_path / "costs.json").write_text(json.dumps({"costs": {"engine_step_s": 1e-3, "request_s": 2e-3}}))
    here = Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"
    out = subprocess.run([sys.executable, str(here / "vllm_serve_engine_scaled.py"), "--runs", str(runs), "--suffix=-a2-r1",
                          "--speed", str(tmp_path / "speed.json"), "--hardware", str(tmp_path / "hw.yaml"),
                          "--costs", str(tmp_path / "costs.json"), "--out-dir", str(tmp_path / "o")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "-a2-r1: 2 runs, engine x1.300 (2 ratios), core 0 x1.000"
    costs = json.loads((tmp_path / "o" / "costs.json").read_text())["costs"]
    assert costs == pytest.approx({"engine_step_s": 1.3e-3, "request_s": 2e-3})
    scaled = [r["name"] for r in json.loads((tmp_path / "o" / "runs.json").read_text())["runs"]]
    assert scaled == names[:2]
