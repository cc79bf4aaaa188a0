"""The load verdict of `roofline simulate` / `compare --vllm-bench` (`roofline.sim.verdict`): offered against
served load, whether the queue grows, what saturates, and whether a steady state exists."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from roofline.cli import main
from roofline.sim.verdict import load_verdict

SMALL = ["--model", "llama-156m", "--hardware", "h100-sxm", "--max-model-len", "4096"]


def _requests(due: np.ndarray, wait: np.ndarray, service_s: float = 1.0) -> pd.DataFrame:
    return pd.DataFrame({"arrival_s": due, "client_queue_s": np.zeros(len(due)), "queueing_s": wait,
                         "finish_s": due + wait + service_s})


def _steps(kv: float, tokens: int, running: int, waiting: int, preemptions: int = 0) -> pd.DataFrame:
    return pd.DataFrame({"kv_usage": [kv] * 4, "num_batched_tokens": [tokens] * 4, "num_running": [running] * 4,
                         "num_waiting": [waiting] * 4, "num_preemptions": [preemptions] + [0] * 3})


def test_a_wait_growing_with_the_due_time_is_an_overload_with_no_steady_state() -> None:
    due = np.arange(100.0)  # 1 req/s offered; each request waits 0.5 s more than the one before
    v = load_verdict(_requests(due, 0.5 * due), _steps(0.5, 8000, 10, 5), 100, 8192, burst=False)
    assert v.overloaded and not v.steady and v.wait_slope == pytest.approx(0.5)
    assert v.limit == "token budget (max_num_batched_tokens)"
    assert v.line().startswith("verdict: OVERLOADED: offered 1.00 req/s")


def test_a_bounded_wait_keeps_up_and_has_a_steady_state() -> None:
    due = np.arange(100.0)
    v = load_verdict(_requests(due, np.full(100, 0.2)), _steps(0.3, 100, 10, 0), 100, 8192, burst=False)
    assert not v.overloaded and v.steady and v.served_rate_per_s == pytest.approx(1.0)
    assert v.limit == "none" and v.line().startswith("verdict: keeps up: offered 1.00 req/s, served 1.00 req/s")


def test_all_requests_due_at_once_are_a_burst_without_steady_state() -> None:
    due = np.zeros(50)
    v = load_verdict(_requests(due, np.linspace(0, 10, 50)), _steps(0.95, 100, 10, 40, preemptions=3), 100, 8192,
                     burst=False)
    assert v.burst and not v.steady and v.limit == "KV cache" and v.line().startswith("verdict: BURST")


def test_simulate_70b_readme_example_is_overloaded(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's 70B example (fewer requests: the queue already grows over 600)."""
    assert main(["simulate", "--model", "llama-3.1-70b", "--hardware", "h200-sxm", "--tensor-parallel-size", "4",
                 "--workload", "sharegpt-chat", "--request-rate", "8", "--num-requests", "600", "--slo-ttft-s", "2",
                 "--slo-tpot-s", "0.08"]) == 0
    out = capsys.readouterr().out
    assert "\nverdict: OVERLOADED: offered 8." in out and "saturated: KV cache" in out


def test_light_load_keeps_up_and_prints_the_steady_state_only_with_verbose(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", *SMALL, "--input-len", "100", "--output-len", "10", "--num-requests", "100",
            "--request-rate", "5"]
    assert main([*argv, "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    assert verdict["steady_state"] and not verdict["overloaded"] and not verdict["burst"]
    assert main([*argv, "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "Steady state (not vLLM's counting)" in out and "verdict: keeps up" in out


def test_a_burst_prints_no_steady_state_block(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *SMALL, "--input-len", "100", "--output-len", "10", "--num-requests", "100",
                 "--request-rate", "inf", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "Steady state (not" not in out and "steady state: none (a burst)" in out and "verdict: BURST" in out


@pytest.mark.parametrize("model, expected", [
    ("gpt-oss-120b", "quantization=attention/dense none (bf16), experts mxfp4"),
    ("qwen3-235b-a22b-fp8", "quantization=fp8-block,"),
])
def test_engine_line_shows_the_simulated_quantization(model: str, expected: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--model", model, "--hardware", "h200-sxm", "--tensor-parallel-size", "8",
                 "--num-requests", "20"]) == 0
    assert expected in capsys.readouterr().out


def test_a_what_if_quantization_is_announced(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *SMALL, "--input-len", "100", "--output-len", "10", "--num-requests", "20",
                 "--quantization", "awq"]) == 0
    assert "note: --quantization awq: model 'llama-156m' is an unquantized checkpoint, so this is a what-if" in \
        capsys.readouterr().out


def test_quantization_none_on_a_quantized_checkpoint_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--model", "gpt-oss-120b", "--hardware", "h200-sxm", "--quantization", "none",
                 "--num-requests", "5"]) == 2
    err = capsys.readouterr().err
    assert "--quantization none: model 'gpt-oss-120b' is a mxfp4 checkpoint" in err and "allowed:" in err


def test_compare_vllm_bench_prints_the_simulated_verdict(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """A closed loop of 8 (max_concurrency 8, every request due at once): the engine's queue stays bounded."""
    record = {"model_id": "llama-156m", "num_prompts": 40, "request_rate": "inf", "burstiness": 1.0,
              "max_concurrency": 8, "duration": 4.0, "completed": 40, "mean_ttft_ms": 40.0}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record))
    argv = ["compare", "--vllm-bench", str(path), "--hardware", "h100-sxm", "--max-model-len", "4096",
            "--random-input-len", "128", "--random-output-len", "8"]
    assert main(argv) == 0
    assert "\nsimulated verdict: closed loop of 8: offered a burst (all requests at once)" in capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    assert verdict["max_concurrency"] == 8 and verdict["steady_state"] and not verdict["overloaded"]
