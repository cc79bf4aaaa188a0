"""A session's host speed from a one-request-at-a-time probe (benchmarks/ground_truth/vllm_serve_speed_probe.py):
exact speeds on made-up runs, and the restated profile."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"))

import vllm_serve_speed_probe as probe  # noqa: E402


def run(load: str, api_cpu_s: float, step_ms: float, count: int = 1) -> dict:
    # [iteration, context requests, context tokens, generation requests, generation tokens, elapsed ms]
    steps = [[0, 1, 128, 0, 0, 30.0]] + [[i, 0, 0, 1, 1, step_ms] for i in range(1, 32)]
    return {"name": f"{load}-completions-a{count}-r0", "load": load, "endpoint": "completions",
            "api_server_count": count, "result": {"completed": 40}, "engine_steps": steps,
            "engine_window": {"threads_cpu_s": {"api_server/python": api_cpu_s, "VLLM::Worker/VLLM::Worker": 9.0}}}


def test_speeds_are_the_references_time_over_the_probes() -> None:
    index = {"runs": [run("closed1", 1.0, 6.0), run("closed1", 1.4, 6.0), run("rate20", 9.0, 1.0),
                      run("closed1", 9.0, 1.0, count=2)]}
    runs = probe.probe_runs(index)
    assert len(runs) == 2  # rate20 and the two-process run left out
    reference = [run("closed1", 0.96, 4.8)]
    result = probe.speeds(runs, reference)
    # core 0: 0.024 s a request over 0.030; core 1: 4.8 ms a step over 6.0 (the prefill step left out)
    assert result["core0_speed"] == pytest.approx(0.8)
    assert result["core1_speed"] == pytest.approx(0.8)
    assert result["api_cpu_per_request_ms"] == pytest.approx(30.0)


def test_no_logged_step_is_an_error_not_a_speed() -> None:
    bare = run("closed1", 1.0, 6.0)
    bare["engine_steps"] = []
    with pytest.raises(ValueError, match="no decode-only step"):
        probe.one_request_step_ms([bare])


def test_the_profile_takes_core_0s_speed_with_its_source() -> None:
    profile = {"id": "h", "host": {"cpu_model": "x", "single_thread_speed_relative": 1.0, "api_server_num_cores": 1},
               "sources": {"peak_tflops": "measured"}}
    out = probe.profile_at_speed(profile, 0.8765432, "measured: the probe")
    assert out["host"] == {"cpu_model": "x", "single_thread_speed_relative": 0.8765, "api_server_num_cores": 1}
    assert out["sources"] == {"peak_tflops": "measured", "host.single_thread_speed_relative": "measured: the probe"}
    assert profile["host"]["single_thread_speed_relative"] == 1.0  # the given profile is not changed


def test_a_missing_or_wrong_index_is_refused_in_one_line(tmp_path, monkeypatch, capsys) -> None:
    wrong = tmp_path / "sim.json"
    wrong.write_text('{"rows": []}')
    out = str(tmp_path / "out.json")
    for argv, said in ((["--probe", str(tmp_path / "none.json"), "--reference", str(wrong)],
                        "argument --probe: no such file"),
                       (["--probe", str(wrong), "--reference", str(wrong)],
                        f"--probe {wrong}: not vllm_serve_bench.py's index")):
        monkeypatch.setattr(sys, "argv", ["vllm_serve_speed_probe.py", *argv, "--out", out])
        with pytest.raises(SystemExit) as stop:
            probe.main()
        assert stop.value.code == 2
        assert said in capsys.readouterr().err.splitlines()[-1]
    assert not Path(out).exists()
