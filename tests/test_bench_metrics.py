"""A simulated run counted as vllm bench serve counts it (roofline.sim.bench_metrics), on hand-made numbers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from roofline.cost.params import ExecutorParams
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.sim import bench_metrics as bench_metrics_module
from roofline.sim import simulator, token_times
from roofline.sim.bench_metrics import (
    BenchMetricOptions,
    bench_metrics,
    parse_goodput,
    result_filename,
    steady_state,
    unmodelled,
)
from roofline.sim.deployment import make_deployment
from roofline.sim.metrics import InterTokenLatencies
from roofline.sim.workload import fixed_workload


def toy() -> tuple[pd.DataFrame, InterTokenLatencies]:
    """r0: sent 0, tokens at 0.5, 1.0, 1.5. r1: due 0, sent 0.2 (waited for a slot), one token at 0.4.
    r2: due 0.5, sent 1.5, tokens at 2.0, 2.25, 2.5, 2.75, 3.0."""
    requests = pd.DataFrame({"arrival_s": [0.0, 0.2, 1.5], "client_queue_s": [0.0, 0.2, 1.0],
                             "first_token_s": [0.5, 0.4, 2.0], "finish_s": [1.5, 0.4, 3.0],
                             "num_output_tokens": [3, 1, 5], "num_prompt_tokens": [11, 21, 31]})
    requests["ttft_s"] = requests["first_token_s"] - requests["arrival_s"]
    requests["e2e_s"] = requests["finish_s"] - requests["arrival_s"]
    # Gaps in the order requests finished (r1, r0, r2 here: the simulator's order), not request order.
    itl = InterTokenLatencies(np.array([0.5, 0.5, 0.25, 0.25, 0.25, 0.25]), np.array([0, 0, 2, 2, 2, 2]))
    return requests, itl


def metrics(options: BenchMetricOptions = BenchMetricOptions(), max_concurrency: int | None = None,
            rate: float = math.inf, **kwargs: object) -> dict[str, object]:
    requests, itl = toy()
    return bench_metrics(requests, itl, np.array([10, 20, 30]), options, max_concurrency, rate, **kwargs)


def test_counts_every_request_over_first_send_to_last_completion() -> None:
    m = metrics()
    assert (m["completed"], m["failed"], m["duration"]) == (3, 0, 3.0)
    assert (m["total_input_tokens"], m["total_output_tokens"]) == (60, 9)  # the client's prompt counts
    assert m["request_throughput"] == 1.0 and m["output_throughput"] == 3.0 and m["total_token_throughput"] == 23.0
    assert m["request_goodput"] is None


def test_latency_statistics_as_numpy_computes_them() -> None:
    m = metrics()
    assert m["mean_ttft_ms"] == pytest.approx(400.0) and m["median_ttft_ms"] == pytest.approx(500.0)
    assert m["std_ttft_ms"] == pytest.approx(math.sqrt(0.02) * 1000)  # population std
    assert m["mean_tpot_ms"] == pytest.approx(375.0)  # (0.5 + 0.25) / 2: the one-token request has no TPOT
    assert m["mean_itl_ms"] == pytest.approx(1000 / 3)  # every gap pooled
    assert m["median_itl_ms"] == pytest.approx(250.0) and m["p99_itl_ms"] == pytest.approx(500.0)
    assert "mean_e2el_ms" not in m  # not in vLLM's default --percentile-metrics


def test_selected_metrics_and_percentiles_name_keys_as_vllm() -> None:
    m = metrics(BenchMetricOptions(("ttft", "e2el"), (50.0, 99.9)))
    assert {"p50_ttft_ms", "p99.9_ttft_ms", "p50_e2el_ms", "p99.9_e2el_ms"} <= set(m)
    assert "mean_itl_ms" not in m
    assert m["p50_e2el_ms"] == pytest.approx(1500.0)


def test_client_queue_metrics_only_in_the_closed_loop() -> None:
    selected = BenchMetricOptions(("ttft", "client_queue_time", "e2el_including_client_queue"))
    assert "mean_client_queue_time_ms" not in metrics(selected)
    closed = metrics(selected, max_concurrency=2)
    assert closed["mean_client_queue_time_ms"] == pytest.approx(400.0)
    assert "mean_e2el_including_client_queue_ms" not in closed  # vLLM: only with a finite --request-rate
    assert metrics(selected, max_concurrency=2, rate=2.0)["mean_e2el_including_client_queue_ms"] == \
        pytest.approx((1.5 + 0.4 + 2.5) / 3 * 1000)


@pytest.mark.parametrize("slos, good", [({"ttft": 300}, 1), ({"tpot": 300}, 2), ({"e2el": 1000}, 1),
                                        ({"ttft": 500, "tpot": 300}, 2), ({"tpot": 100}, 1)])
def test_goodput_counts_requests_meeting_every_slo(slos: dict, good: int) -> None:
    # r1 has one output token: its TPOT counts as 0 and meets any TPOT SLO.
    assert metrics(BenchMetricOptions(goodput_ms=slos))["request_goodput"] == pytest.approx(good / 3.0)


def test_peak_tokens_and_requests_per_one_second_bucket() -> None:
    m = metrics()
    # Tokens per second from the first send: [0.4, 0.5], [1.0, 1.5], [2.0 .. 2.75], [3.0] -> 2, 2, 4, 1.
    assert m["max_output_tokens_per_s"] == 4.0
    assert m["max_concurrent_requests"] == 2


def test_detailed_lists_are_per_request_in_request_order() -> None:
    m = metrics(detailed=True)
    assert m["input_lens"] == [10, 20, 30] and m["output_lens"] == [3, 1, 5]
    assert m["itls"] == [[0.5, 0.5], [], [0.25] * 4]
    assert m["start_times"] == [0.0, 0.2, 1.5] and m["queue_times"] == [0.0, 0.2, 1.0]
    assert "input_lens" not in metrics() and "latencies" in metrics()


def test_without_latency_lists_the_same_keys_less_the_two_lists() -> None:
    with_lists, without = metrics(), metrics(latency_lists=False)
    assert with_lists["latencies"] == pytest.approx([1.5, 0.2, 1.5]) and len(with_lists["queue_times"]) == 3
    assert "latencies" not in without and "queue_times" not in without
    assert without == {k: v for k, v in with_lists.items() if k not in ("latencies", "queue_times")}
    assert list(without) == [k for k in with_lists if k not in ("latencies", "queue_times")]
    assert "latencies" in metrics(detailed=True, latency_lists=False)  # (--save-detailed writes them)


def test_steady_state_leaves_out_warmup_and_drain() -> None:
    n = 20
    requests = pd.DataFrame({"arrival_s": np.arange(n, dtype=float), "finish_s": np.arange(n) + 1.0,
                             "num_output_tokens": [2] * n})
    requests["first_token_s"] = requests["finish_s"] - 0.5
    requests["ttft_s"] = np.where(np.arange(n) < 2, 9.0, 0.5)  # slow warm-up requests
    requests["e2e_s"] = requests["finish_s"] - requests["arrival_s"]
    itl = InterTokenLatencies(np.full(n, 0.5), np.arange(n))
    steps = pd.DataFrame({"end_s": requests["finish_s"], "num_output_tokens": [2] * n})
    steady = steady_state(requests, itl, steps, 0.1, 0.1, (99.0,))
    assert steady["num_requests"] == 16 and steady["mean_ttft_ms"] == pytest.approx(500.0)
    assert steady["request_throughput"] == pytest.approx(1.0)


def test_steady_state_computes_no_std(monkeypatch: pytest.MonkeyPatch) -> None:
    # It reports none: no ITL multiset's std (a 0.1 s fsum at 1,000,000 requests), no numpy std.
    deployment = make_deployment("llama-3.1-8b", "h100-sxm", EngineArgs())
    result = simulator.run_simulation(deployment, fixed_workload(64, 8, 40, 20.0, 0))

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("std computed")
    monkeypatch.setattr(token_times.WeightedValues, "std", refused)
    monkeypatch.setattr(bench_metrics_module.np, "std", refused)
    steady = steady_state(result.request_table, result.itl, result.step_table, 0.1, 0.1, (50.0, 99.0))
    assert steady["num_requests"] == 32 and steady["mean_itl_ms"] > 0 and "std_itl_ms" not in steady


def test_result_filename_is_vllms() -> None:
    assert result_filename("vllm", math.inf, None, "meta-llama/Llama-3.1-8B", "20250101-000000") == \
        "vllm-infqps-Llama-3.1-8B-20250101-000000.json"
    assert result_filename("x", 4, 8, "m", "d") == "x-4.0qps-concurrency8-m-d.json"
    assert result_filename("x", math.inf, None, "m", "d", ("linear", 1, 9)) == "x-ramp-up-linear-1qps-9qps-m-d.json"


@pytest.mark.parametrize("pairs, message", [(["ttft"], "--goodput"), (["ttft:x"], "--goodput")])
def test_bad_goodput_is_a_user_error(pairs: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_goodput(pairs)


@pytest.mark.parametrize("kwargs, flag", [(dict(goodput_ms={"itl": 5.0}), "--goodput"),
                                          (dict(goodput_ms={"ttft": -1.0}), "--goodput"),
                                          (dict(percentile_metrics=("foo",)), "--percentile-metrics"),
                                          (dict(percentiles=(101.0,)), "--metric-percentiles")])
def test_bad_metric_options_are_user_errors(kwargs: dict, flag: str) -> None:
    with pytest.raises(UserError, match=flag):
        BenchMetricOptions(**kwargs)


def test_unmodelled_names_what_the_profile_leaves_out_of_the_api_server():
    """A GPU profile's API server tokenizes prompts and spends a fixed time per request inside the simulated TTFT
    (executor.tokenize_us_per_prompt_token, executor.frontend_us_per_request); the "not modelled" list says so, and
    lists each part where the profile has none."""
    from dataclasses import replace

    from roofline.cost.hardware import load_profile

    hw = load_profile("h100-sxm")
    assert not any("API server" in part for part in unmodelled(hw))  # its host section: the API server simulated
    bare = replace(hw, host=None)
    neither = unmodelled(replace(bare, executor=ExecutorParams()))[0]
    assert "prompt tokenization" in neither and "way to the engine core" in neither and "simulated TTFT" not in neither
    with_tokenizer = unmodelled(replace(bare, executor=ExecutorParams(tokenize_s_per_prompt_token=1e-6)))[0]
    assert "prompt tokenization" not in with_tokenizer and "tokenize_us_per_prompt_token" in with_tokenizer
    both = unmodelled(replace(bare, executor=ExecutorParams(tokenize_s_per_prompt_token=1e-6,
                                                            frontend_s_per_request=3e-3)))[0]
    assert "way to the engine core" not in both and "frontend_us_per_request" in both
