"""Where a simulated run's time goes (`roofline.sim.time_split`), as `roofline compare --vllm-bench` reports it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from roofline.cli import main
from roofline.sim.time_split import time_split, time_split_line


def _steps(durations: list[float], prefill: list[int], replica: list[int]) -> pd.DataFrame:
    n = len(durations)
    return pd.DataFrame({"replica": replica, "duration_s": durations, "num_prefill_tokens": prefill,
                         "num_batched_tokens": [p + 10 for p in prefill], "num_seqs": [10] * n,
                         "num_preemptions": ([0, 2] + [0] * n)[:n], "num_running": list(range(n)),
                         "num_kv_blocks_total": [100] * n})


def test_steps_split_by_kind_and_the_rest_is_idle() -> None:
    requests = pd.DataFrame({"arrival_s": [1.0, 1.0, 1.5], "first_scheduled_s": [1.1, 1.2, 3.0],
                             "finish_s": [4.0, 5.0, 6.0]})
    # Two replicas: steps with prefill of 0.5 + 0.3 s, decode-only of 0.1 + 0.1 + 0.2 s.
    split = time_split(requests, _steps([0.5, 0.1, 0.3, 0.1, 0.2], [100, 0, 50, 0, 0], [0, 0, 1, 1, 1]), 16,
                       num_replicas=2)
    assert split["duration_s"] == pytest.approx(5.0)
    assert split["steps_with_prefill"] == {"count": 2, "total_s": pytest.approx(0.8), "median_s": pytest.approx(0.4),
                                           "median_tokens": pytest.approx(85.0)}
    assert split["decode_only_steps"]["count"] == 3 and split["decode_only_steps"]["median_s"] == pytest.approx(0.1)
    assert split["idle_s"] == pytest.approx(2 * 5.0 - 1.2)  # two engines over the run, less their steps
    # A third engine that ran no step idles the whole run.
    three = time_split(requests, _steps([0.5, 0.1, 0.3, 0.1, 0.2], [100, 0, 50, 0, 0], [0, 0, 1, 1, 1]), 16, 3)
    assert three["idle_s"] == pytest.approx(3 * 5.0 - 1.2) and three["engines"] == 3
    assert split["last_first_scheduled_s"] == pytest.approx(2.0)
    assert split["preemptions"] == 2 and split["peak_running"] == 4 and split["kv_cache_tokens"] == 1600
    line = time_split_line(split)
    assert line.startswith("simulated 5.00 s: 2 steps with prefill 0.80 s (median 400.0 ms, 85 tokens), 3 decode-only")
    assert "last request first scheduled at 2.00 s" in line


def test_a_run_without_steps_is_all_idle() -> None:
    requests = pd.DataFrame({"arrival_s": [0.0], "first_scheduled_s": [np.nan], "finish_s": [np.nan]})
    split = time_split(requests, _steps([], [], []), 16)
    assert split["duration_s"] == 0.0 and split["steps_with_prefill"]["count"] == 0
    assert split["last_first_scheduled_s"] is None and split["kv_cache_tokens"] is None
    assert "median -" in time_split_line(split)


def test_compare_vllm_bench_reports_the_split_of_its_simulated_run(tmp_path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A burst of 40 short requests: every step is counted once, the split's duration is the simulated one."""
    record = {"model_id": "llama-156m", "num_prompts": 40, "request_rate": "inf", "burstiness": 1.0,
              "max_concurrency": None, "duration": 4.0, "completed": 40, "mean_ttft_ms": 40.0}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record))
    argv = ["compare", "--vllm-bench", str(path), "--hardware", "h100-sxm", "--max-model-len", "4096",
            "--random-input-len", "128", "--random-output-len", "8"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    split = out["simulated_time"]
    duration = next(m["predicted"] for m in out["metrics"] if m["metric"] == "duration")
    assert split["duration_s"] == pytest.approx(duration)
    assert split["steps_with_prefill"]["count"] >= 1 and split["decode_only_steps"]["count"] >= 7  # 8 tokens each
    busy = split["steps_with_prefill"]["total_s"] + split["decode_only_steps"]["total_s"]
    assert busy + split["idle_s"] == pytest.approx(split["duration_s"])
    assert main(argv) == 0
    assert "\nsimulated " + f"{split['duration_s']:.2f} s: " in capsys.readouterr().out


def test_decoding_at_once_is_output_rate_times_mean_tpot() -> None:
    from roofline.calibration.vllm_bench import decoding_at_once
    assert decoding_at_once({"output_throughput": 438.56, "mean_tpot_ms": 132.45}) == pytest.approx(58.087, abs=1e-3)
    assert decoding_at_once({"output_throughput": 438.56}) is None
    assert decoding_at_once({"output_throughput": 438.56, "mean_tpot_ms": float("nan")}) is None
