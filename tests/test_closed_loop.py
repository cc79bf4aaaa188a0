"""The closed loop of vLLM's benchmark client (`SimulationOptions(max_concurrency=N)`): at most N requests in
flight, a waiting request sent the instant one finishes, first come first served, combined with the arrival
rate as `vllm bench serve --request-rate R --max-concurrency N` combines them."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from profiles import gpu_profile_without_tokenizer

from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.sim.deployment import make_deployment
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.workload import ArrivalProcess, LengthDistribution, Workload, sample_requests

ENGINE = EngineArgs(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=512, num_gpu_blocks_override=40)


def workload(num_requests: int = 30, rate: float = math.inf, seed: int = 0) -> Workload:
    return Workload(name="closed", seed=seed, num_requests=num_requests, arrival=ArrivalProcess("poisson", rate),
                    prompt_tokens=LengthDistribution("uniform", min_tokens=20, max_tokens=120),
                    output_tokens=LengthDistribution("uniform", min_tokens=1, max_tokens=40))


@pytest.fixture(scope="module")
def deployment():  # noqa: ANN201 - a Deployment
    return make_deployment("llama-156m", "h100-sxm", ENGINE)


def max_in_flight(requests: pd.DataFrame) -> int:
    """The most requests between their send and their finish at any instant (a finish at t frees its slot
    before a send at t)."""
    events = sorted([(t, 1) for t in requests["arrival_s"]] + [(t, -1) for t in requests["finish_s"]],
                    key=lambda e: (e[0], e[1]))
    return int(np.max(np.cumsum([delta for _, delta in events])))


@pytest.mark.parametrize("limit", [1, 3, 5])
def test_never_more_than_n_in_flight_and_n_reached(deployment, limit: int) -> None:  # noqa: ANN001
    result = run_simulation(deployment, workload(), SimulationOptions(max_concurrency=limit))
    assert max_in_flight(result.requests) == limit
    assert max_in_flight(run_simulation(deployment, workload()).requests) > limit  # the open loop is not capped


def test_a_waiting_request_is_sent_when_one_finishes(deployment) -> None:  # noqa: ANN001
    requests = run_simulation(deployment, workload(), SimulationOptions(max_concurrency=3)).requests
    finishes = set(requests["finish_s"])
    waited = requests[requests["client_queue_s"] > 0]
    assert len(waited) == len(requests) - 3  # all due at 0: the first three go at once, the rest wait
    assert all(t in finishes for t in waited["arrival_s"])
    # First come first served: sends in due order, and the k-th waiting request takes the k-th freed slot.
    assert requests["arrival_s"].is_monotonic_increasing
    assert waited["arrival_s"].tolist() == sorted(requests["finish_s"])[:len(waited)]


def test_one_at_a_time_runs_back_to_back(deployment) -> None:  # noqa: ANN001
    requests = run_simulation(deployment, workload(num_requests=6), SimulationOptions(max_concurrency=1)).requests
    assert requests["arrival_s"].iloc[1:].tolist() == requests["finish_s"].iloc[:-1].tolist()
    assert requests["arrival_s"].iloc[0] == 0.0


def test_latency_starts_at_the_send_and_the_wait_is_client_queue(deployment) -> None:  # noqa: ANN001
    wl = workload()
    requests = run_simulation(deployment, wl, SimulationOptions(max_concurrency=2)).requests
    due = np.array([s.arrival_s for s in sample_requests(wl)])
    np.testing.assert_array_equal(requests["arrival_s"] - requests["client_queue_s"], due)
    np.testing.assert_array_equal(requests["ttft_s"], requests["first_token_s"] - requests["arrival_s"])
    np.testing.assert_array_equal(requests["e2e_s"], requests["finish_s"] - requests["arrival_s"])


def test_with_a_rate_requests_are_not_sent_before_they_are_due(deployment) -> None:  # noqa: ANN001
    wl = workload(num_requests=40, rate=400.0)
    requests = run_simulation(deployment, wl, SimulationOptions(max_concurrency=4)).requests
    due = np.array([s.arrival_s for s in sample_requests(wl)])
    assert (requests["arrival_s"].to_numpy() >= due).all()
    assert (requests["client_queue_s"] == 0).any() and (requests["client_queue_s"] > 0).any()
    assert max_in_flight(requests) <= 4


def test_a_cap_that_never_binds_changes_nothing(deployment) -> None:  # noqa: ANN001
    wl = workload(num_requests=20, rate=5.0)
    open_loop = run_simulation(deployment, wl)
    capped = run_simulation(deployment, wl, SimulationOptions(max_concurrency=1000))
    pd.testing.assert_frame_equal(open_loop.requests, capped.requests)
    assert (open_loop.requests["client_queue_s"] == 0).all()


def test_closed_loop_spans_replicas_and_is_deterministic(deployment) -> None:  # noqa: ANN001
    options = SimulationOptions(num_replicas=2, router="least_outstanding", max_concurrency=4)
    first = run_simulation(deployment, workload(seed=3), options)
    again = run_simulation(deployment, workload(seed=3), options)
    pd.testing.assert_frame_equal(first.requests, again.requests)
    assert max_in_flight(first.requests) == 4  # the cap is the client's, over all replicas
    assert set(first.requests["replica"]) == {0, 1}


@pytest.mark.parametrize("value", [0, -1, 2.5, True])
def test_bad_max_concurrency_is_a_user_error(value: object) -> None:
    with pytest.raises(UserError, match="--max-concurrency: must be a positive integer"):
        SimulationOptions(max_concurrency=value)


def steps_before_first(result) -> dict[str, int]:  # noqa: ANN001 - a SimulationResult
    """Per request: the steps that started at or after its send and before the first step that ran it."""
    starts = result.steps["start_s"].to_numpy()
    first: dict[str, int] = {}
    for i, ids in enumerate(result.step_request_ids):
        for request_id in ids:
            first.setdefault(request_id, i)
    return {row.request_id: int(np.sum(starts[:first[row.request_id]] >= row.arrival_s))
            for row in result.requests.itertuples()}


# Admission as the engine core sees it: the request reaches it the instant it is sent (no API-server tokenization).
NO_TOKENIZER = gpu_profile_without_tokenizer("h100-sxm")
# Every step replays a graph (vLLM's default ceiling, 2 x max_num_seqs, would launch the larger prefill steps kernel by
# kernel, host-bound on this small model: steps long enough to queue requests past max_num_seqs).
ROOMY = EngineArgs(max_num_seqs=16, max_num_batched_tokens=512, max_model_len=512, num_gpu_blocks_override=400,
                   max_cudagraph_capture_size=512)


@pytest.mark.parametrize("async_scheduling,lag", [(False, 0), (True, 1)])
def test_a_request_sent_on_a_steps_outputs_joins_a_later_step(async_scheduling: bool, lag: int) -> None:
    """vLLM's engine core schedules step k+1 as soon as step k's outputs are out, before the request sent in
    answer arrives: it joins step k+2, or k+3 when step k+1 was already planned (asynchronous scheduling); an
    engine with nothing to run takes it at once."""
    deployment = make_deployment("llama-156m", NO_TOKENIZER, replace(ROOMY, async_scheduling=async_scheduling))
    result = run_simulation(deployment, workload(num_requests=40), SimulationOptions(max_concurrency=3))
    offsets = steps_before_first(result)
    replacements = result.requests[result.requests["client_queue_s"] > 0]["request_id"]
    assert {offsets[r] for r in replacements} <= {0, lag + 1}  # 0: the engine was idle when it was sent
    assert sum(offsets[r] == lag + 1 for r in replacements) > len(replacements) / 2
    first_wave = result.requests[result.requests["client_queue_s"] == 0]["request_id"]
    assert all(offsets[r] == 0 for r in first_wave)


@pytest.mark.parametrize("async_scheduling,lag", [(False, 0), (True, 1)])
def test_an_arrival_during_a_step_waits_for_the_planned_one_when_scheduling_is_asynchronous(
        async_scheduling: bool, lag: int) -> None:
    deployment = make_deployment("llama-156m", NO_TOKENIZER, replace(ROOMY, async_scheduling=async_scheduling))
    # 100 requests/s: with the synchronous step's host time (about 2 ms a step) at most ~8 in flight, fewer than
    # max_num_seqs, so no arrival waits for room
    result = run_simulation(deployment, workload(num_requests=60, rate=100.0))
    offsets = steps_before_first(result)
    starts = set(result.steps["start_s"])
    during = [r.request_id for r in result.requests.itertuples() if r.arrival_s not in starts]
    assert {offsets[r] for r in during} <= {0, lag}  # 0: the engine was idle when it arrived
    assert sum(offsets[r] == lag for r in during) > len(during) / 2
