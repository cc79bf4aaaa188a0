"""The scheduler with batches in flight (engine/core/pipeline_scheduler.py) and the simulator's pipeline: exact steps
and times, vLLM 0.32 semantics."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from engine.core import CacheConfig, Request, SamplingParams, SchedulerConfig
from engine.core.pipeline_scheduler import PipelineScheduler, max_concurrent_batches
from roofline.cost.step_shape import StepArrays
from roofline.engine_args import EngineArgs
from roofline.sim.deployment import make_deployment
from roofline.sim.simulator import run_simulation
from roofline.sim.workload import ArrivalProcess, LengthDistribution, RequestSpec, Workload
from tests.profiles import gpu_profile_without_tokenizer


def _sched(pp: int = 2, async_scheduling: bool = True, budget: int = 64) -> PipelineScheduler:
    return PipelineScheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=budget, max_model_len=128),
                             CacheConfig(num_blocks=100, block_size=4), pp, async_scheduling)


def _req(rid: str, n_prompt: int, max_tokens: int = 4) -> Request:
    return Request(rid, list(range(1000, 1000 + n_prompt)), SamplingParams(max_tokens=max_tokens, ignore_eos=True))


def test_batches_in_flight_are_vllms_max_concurrent_batches() -> None:
    assert max_concurrent_batches(2, True) == 3 and max_concurrent_batches(4, False) == 4
    sched = _sched(pp=2, async_scheduling=False)
    sched.add_request(_req("a", 8))
    sched.schedule()
    sched.add_request(_req("b", 8))
    sched.schedule()
    with pytest.raises(AssertionError):
        sched.schedule()


def test_without_async_scheduling_a_request_in_flight_waits_for_its_output() -> None:
    sched = _sched(async_scheduling=False)
    sched.add_request(_req("a", 8))
    first = sched.schedule()
    sched.add_request(_req("b", 6))
    second = sched.schedule()  # "a" has all its tokens in flight: passed over, "b" admitted
    assert first.request_ids == ["a"] and second.request_ids == ["b"] and second.emits == [True]
    assert sched.update_from_output(first, 7) == [] and sched.requests["a"].output_token_ids == [7]
    third = sched.schedule()
    assert third.request_ids == ["a"] and third.num_decode_tokens == 1


def test_next_chunk_of_a_prompt_is_scheduled_while_the_first_is_in_flight() -> None:
    sched = _sched(async_scheduling=False, budget=16)
    sched.add_request(_req("a", 40))
    first, second = sched.schedule(), sched.schedule()
    assert (first.num_prefill_tokens, second.num_prefill_tokens) == (16, 16)
    assert first.emits == [False] and second.emits == [False]


def test_async_scheduling_decodes_every_pp_steps_on_a_placeholder() -> None:
    """PP 2: "a" prefills in step 1 (a placeholder for its first token), is passed over in step 2, and decodes in step
    3 before that token is back; the step after its last token is scheduled schedules nothing more for it."""
    sched = _sched(pp=2, async_scheduling=True)
    sched.add_request(_req("a", 8, max_tokens=3))
    s1 = sched.schedule()
    s2 = sched.schedule()
    s3 = sched.schedule()
    assert s1.request_ids == ["a"] and s1.emits == [True] and s2.is_empty
    assert s3.request_ids == ["a"] and s3.emits == [True] and s3.num_decode_tokens == 1
    assert s3.seq_arrays()[1].tolist() == [8]  # its context: the prompt; its input: the token still in flight
    assert sched.update_from_output(s1, 5) == []
    s4 = sched.schedule()  # step 4 < 3 + 2: not yet eligible
    assert s4.is_empty
    s5 = sched.schedule()
    assert s5.request_ids == ["a"] and s5.seq_arrays()[1].tolist() == [9]
    assert sched.update_from_output(s3, 6) == []
    assert sched.schedule().is_empty  # 3 tokens scheduled: nothing more
    finished = sched.update_from_output(s5, 7)
    assert [r.request_id for r in finished] == ["a"] and finished[0].output_token_ids == [5, 6, 7]
    assert not sched.has_unfinished() and sched.num_kv_blocks_used == 0


def test_one_request_through_two_stages_by_hand() -> None:
    """One request, PP 2 with asynchronous scheduling (3 batches in flight, decodes every 2nd step): its tokens come
    at d1 (prefill), d3 = d1 + b + decode latency, d5 = d3 + b + decode latency, where a batch's latency is stage 0 +
    the send + stage 1 and b the sampled token's way back to the first stage (pipeline_engine's order of events)."""
    hw = gpu_profile_without_tokenizer("h100-sxm")
    engine = EngineArgs(pipeline_parallel_size=2, max_num_seqs=8, max_num_batched_tokens=512, max_model_len=512,
                        num_gpu_blocks_override=64)
    d = make_deployment("llama-3.1-8b", hw, engine)
    assert d.pipeline is not None and hw.executor.host_overlaps_device
    spec = RequestSpec("r0", 0.0, 100, 3)
    workload = Workload(name="one", seed=0, num_requests=1, arrival=ArrivalProcess("constant", 1.0),
                        prompt_tokens=LengthDistribution("fixed", value=100),
                        output_tokens=LengthDistribution("fixed", value=3))
    result = run_simulation(d, workload, specs=[spec])
    stages = d.pipeline

    def latency(query: int, context: int) -> float:
        shape = StepArrays(np.array([query]), np.array([context]), np.array([True]))
        t0, t1 = stages.stage_times_s(shape)
        return t0 + stages.send_s(query, 0) + t1

    b = stages.token_broadcast_s(1)
    d1 = latency(100, 0)
    d3 = d1 + b + latency(1, 100)
    d5 = d3 + b + latency(1, 101)
    row = result.requests.iloc[0]
    assert row["ttft_s"] == pytest.approx(d1, rel=1e-12)
    assert row["e2e_s"] == pytest.approx(d5, rel=1e-12)


def test_pipeline_simulation_is_deterministic_and_finishes_every_request() -> None:
    hw = gpu_profile_without_tokenizer("h100-sxm")
    workload = Workload(name="w", seed=4, num_requests=60, arrival=ArrivalProcess("poisson", 40.0),
                        prompt_tokens=LengthDistribution("uniform", min_tokens=20, max_tokens=300),
                        output_tokens=LengthDistribution("uniform", min_tokens=1, max_tokens=40))
    for overlap in (True, False):
        hw_o = replace(hw, executor=replace(hw.executor, host_overlaps_device=overlap))
        d = make_deployment("llama-3.1-8b", hw_o, EngineArgs(pipeline_parallel_size=3, max_model_len=1024,
                                                             max_num_batched_tokens=256))
        a, b = run_simulation(d, workload), run_simulation(d, workload)
        assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
        assert (a.requests["num_output_tokens"] == [s.num_output_tokens for s in _specs(workload)]).all()


def _specs(workload: Workload) -> list[RequestSpec]:
    from roofline.sim.workload import sample_requests
    return sample_requests(workload)
