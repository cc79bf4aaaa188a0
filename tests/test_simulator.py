"""The discrete-event simulator: fidelity to an engine loop on the same core, determinism, routing, metrics."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from profiles import gpu_profile_without_tokenizer

from engine.core.scheduler import Scheduler
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.sim.deployment import make_deployment
from roofline.sim.metrics import InterTokenLatencies, SummaryOptions, summarize
from roofline.sim.simulator import SimulationOptions, run_simulation, sampled_token_id
from roofline.sim.workload import (
    ArrivalProcess,
    LengthDistribution,
    RequestFactory,
    RequestSpec,
    SharedPrefix,
    Workload,
    sample_requests,
)

SMALL_ENGINE = EngineArgs(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=512, num_gpu_blocks_override=40)


def small_workload(num_requests: int = 40, rate: float = 200.0, seed: int = 0,
                   shared_prefix: SharedPrefix | None = SharedPrefix(num_groups=2, prefix_tokens=32)) -> Workload:
    return Workload(name="small", seed=seed, num_requests=num_requests, arrival=ArrivalProcess("poisson", rate),
                    prompt_tokens=LengthDistribution("uniform", min_tokens=20, max_tokens=120),
                    output_tokens=LengthDistribution("uniform", min_tokens=1, max_tokens=60),
                    shared_prefix=shared_prefix)


@pytest.fixture(scope="module")
def deployment():  # noqa: ANN201 - a Deployment
    return make_deployment("llama-156m", "h100-sxm", SMALL_ENGINE)


def engine_loop_trace(deployment, workload: Workload, durations: np.ndarray) -> list[tuple]:  # noqa: ANN001
    """What an engine does with the core: at each step add the requests that arrived by now, schedule, run
    the step for its (here: recorded) duration, feed back the sampled tokens; idle until the next arrival."""
    specs = sample_requests(workload)
    make = RequestFactory(deployment.spec.vocab_size, workload.seed, deployment.spec.bos_token_id,
                          deployment.spec.eos_token_id)
    prefix_tokens = workload.shared_prefix.prefix_tokens if workload.shared_prefix else 0
    sched = Scheduler(deployment.scheduler_config, deployment.cache_config)
    token = sampled_token_id(deployment.spec)
    now, next_spec, trace = 0.0, 0, []
    while next_spec < len(specs) or sched.has_unfinished():
        while next_spec < len(specs) and specs[next_spec].arrival_s <= now:
            sched.add_request(make(specs[next_spec], prefix_tokens))
            next_spec += 1
        plan = sched.schedule(now)
        if plan.is_empty:
            if not plan.preempted_request_ids:
                now = specs[next_spec].arrival_s
            continue
        trace.append((now, tuple(plan.request_ids), tuple(plan.query_lens), tuple(plan.context_lens),
                      len(plan.preempted_request_ids)))
        now += durations[len(trace) - 1]
        sched.update_from_output(plan, [token] * plan.num_seqs, now)
    return trace


def test_replaying_measured_durations_reproduces_the_engine_batches() -> None:
    # The engine's loop above schedules synchronously; with asynchronous scheduling arrivals are seen a step later.
    # The engine loop takes requests directly (no API server): no tokenization before they reach it.
    deployment = make_deployment("llama-156m", gpu_profile_without_tokenizer("h100-sxm"),
                                 replace(SMALL_ENGINE, async_scheduling=False))
    workload = small_workload(num_requests=60, rate=300.0)
    durations = np.random.default_rng(7).uniform(0.002, 0.03, size=5000)
    engine = engine_loop_trace(deployment, workload, durations)
    result = run_simulation(deployment, workload, step_time_fn=lambda replica, step, start, plan: float(durations[step]))
    simulated = [(row.start_s, ids, tuple(q.tolist()), tuple(c.tolist()), row.num_preemptions)
                 for row, ids, (q, c, _) in zip(result.steps.itertuples(), result.step_request_ids,
                                                result.step_seqs)]
    assert sum(step[4] for step in engine) > 0, "the case should exercise preemption"
    assert len(simulated) == len(engine)
    for sim_step, engine_step in zip(simulated, engine):
        assert sim_step[0] == pytest.approx(engine_step[0], abs=1e-9)
        assert sim_step[1:] == engine_step[1:]


def test_every_request_finishes_with_its_output_tokens(deployment) -> None:  # noqa: ANN001
    workload = small_workload()
    result = run_simulation(deployment, workload)
    specs = sample_requests(workload)
    assert result.requests["num_output_tokens"].tolist() == [s.num_output_tokens for s in specs]
    assert (result.requests["finish_s"] >= result.requests["first_token_s"]).all()
    assert (result.requests["first_token_s"] > result.requests["arrival_s"]).all()
    assert result.requests["num_prefix_hit_tokens"].sum() > 0  # requests of a group share 32 prefix tokens


def test_same_seed_same_result_other_seed_differs(deployment) -> None:  # noqa: ANN001
    first = run_simulation(deployment, small_workload(seed=1))
    again = run_simulation(deployment, small_workload(seed=1))
    other = run_simulation(deployment, small_workload(seed=2))
    pd.testing.assert_frame_equal(first.requests, again.requests)
    pd.testing.assert_frame_equal(first.steps, again.steps)
    assert not first.requests["ttft_s"].equals(other.requests["ttft_s"])


def test_prefix_caching_off_means_no_hits() -> None:
    deployment = make_deployment("llama-156m", "h100-sxm",
                                 EngineArgs(**{**SMALL_ENGINE.__dict__, "enable_prefix_caching": False}))
    result = run_simulation(deployment, small_workload())
    assert result.requests["num_prefix_hit_tokens"].sum() == 0


def test_round_robin_alternates_replicas(deployment) -> None:  # noqa: ANN001
    result = run_simulation(deployment, small_workload(num_requests=10),
                            SimulationOptions(num_replicas=3, router="round_robin"))
    assert result.requests["replica"].tolist() == [i % 3 for i in range(10)]


def test_least_outstanding_balances_a_burst(deployment) -> None:  # noqa: ANN001
    workload = small_workload(num_requests=9, rate=math.inf)
    result = run_simulation(deployment, workload, SimulationOptions(num_replicas=3, router="least_outstanding"))
    assert result.requests["replica"].value_counts().tolist() == [3, 3, 3]
    assert set(result.steps["replica"]) == {0, 1, 2}


def test_two_replicas_finish_a_burst_sooner(deployment) -> None:  # noqa: ANN001
    workload = small_workload(num_requests=30, rate=math.inf)
    one = run_simulation(deployment, workload)
    two = run_simulation(deployment, workload, SimulationOptions(num_replicas=2))
    assert two.requests["finish_s"].max() < one.requests["finish_s"].max()


def test_prompt_longer_than_max_model_len_is_a_user_error() -> None:
    deployment = make_deployment("llama-156m", "h100-sxm",
                                 EngineArgs(**{**SMALL_ENGINE.__dict__, "max_model_len": 100}))
    with pytest.raises(UserError, match="--max-model-len 100: request r"):
        run_simulation(deployment, small_workload())


@pytest.mark.parametrize("options, message", [
    (dict(num_replicas=0), "--num-replicas"), (dict(router="random"), "--router: 'random'")])
def test_bad_options_are_user_errors(options: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        SimulationOptions(**options)


# ---- metrics on hand-made numbers ----------------------------------------------------------------------------

def toy_run() -> tuple[pd.DataFrame, InterTokenLatencies, pd.DataFrame]:
    requests = pd.DataFrame({
        "arrival_s": [0.0, 1.0, 2.0, 3.0],
        "first_token_s": [0.5, 1.2, 3.0, 3.1],
        "finish_s": [1.5, 1.2, 4.0, 5.1],
        "num_prompt_tokens": [10, 20, 30, 40],
        "num_output_tokens": [3, 1, 5, 3],
        "num_preemptions": [0, 0, 1, 0],
        "num_prefix_hit_tokens": [0, 16, 0, 0],
    })
    requests["ttft_s"] = requests["first_token_s"] - requests["arrival_s"]
    requests["e2e_s"] = requests["finish_s"] - requests["arrival_s"]
    requests["queueing_s"] = requests["ttft_s"] / 2
    n = requests["num_output_tokens"]
    requests["tpot_s"] = np.where(n > 1, (requests["finish_s"] - requests["first_token_s"]) / (n - 1), np.nan)
    itl = InterTokenLatencies(np.array([0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 1.0, 1.0]),
                              np.array([0, 0, 2, 2, 2, 2, 3, 3]))
    steps = pd.DataFrame({"end_s": [0.5, 1.0, 2.5, 4.0, 5.1], "num_output_tokens": [1, 2, 3, 4, 2]})
    return requests, itl, steps


def test_summary_statistics_and_throughput() -> None:
    requests, itl, steps = toy_run()
    summary = summarize(requests, itl, steps, SummaryOptions())
    assert summary["window_s"] == [0.0, 5.1]
    assert summary["requests_per_s"] == pytest.approx(4 / 5.1)
    assert summary["input_tokens_per_s"] == pytest.approx(100 / 5.1)
    assert summary["output_tokens_per_s"] == pytest.approx(12 / 5.1)
    assert summary["latency"]["ttft_s"]["mean"] == pytest.approx((0.5 + 0.2 + 1.0 + 0.1) / 4)
    assert summary["latency"]["tpot_s"]["p50"] == pytest.approx(0.5)  # of 0.5, 0.25, 1.0; one-token output left out
    assert summary["latency"]["itl_s"]["mean"] == pytest.approx(4.0 / 8)
    assert summary["num_preemptions"] == 1 and summary["prefix_hit_tokens"] == 16


def test_warmup_and_drain_narrow_the_window() -> None:
    requests, itl, steps = toy_run()
    summary = summarize(requests, itl, steps, SummaryOptions(warmup_s=0.9, drain=True))
    assert summary["window_s"] == [0.9, 3.0]
    assert summary["num_measured_requests"] == 3  # arrivals at 1, 2 and 3 s
    assert summary["latency"]["ttft_s"]["mean"] == pytest.approx((0.2 + 1.0 + 0.1) / 3)
    assert summary["latency"]["itl_s"]["mean"] == pytest.approx((4 * 0.25 + 2 * 1.0) / 6)
    assert summary["output_tokens_per_s"] == pytest.approx((2 + 3) / 2.1)


def test_latency_stats_leave_out_undefined_values_and_copy_only_then() -> None:
    # All finite (the ITL gaps of a run): the statistics of the array itself, the same floats as of a copy.
    from roofline.sim.metrics import latency_stats

    values = np.random.default_rng(0).exponential(0.02, size=100_001)
    copied = values[np.isfinite(values)]
    assert latency_stats(values) == {"mean": float(copied.mean()),
                                     **{f"p{p}": float(v) for p, v in zip((50, 90, 99), np.percentile(copied,
                                                                                                  (50, 90, 99)))}}
    with_nan = values.copy()
    with_nan[::3] = np.nan
    finite = values[np.ones(len(values), dtype=bool) & (np.arange(len(values)) % 3 != 0)]
    assert latency_stats(with_nan) == latency_stats(finite)
    assert latency_stats(np.array([np.nan, np.inf])) == {"mean": None, "p50": None, "p90": None, "p99": None}


def test_recorded_itl_gaps_are_each_requests_token_time_differences() -> None:
    # The recorder keeps each finished request's tokens as runs of stamps (roofline.sim.token_times); its gaps are,
    # in finishing order, np.diff of each request's token times (engine.core.metrics.itl_s), bit for bit, none for
    # a request with fewer than two tokens.
    from types import SimpleNamespace

    from engine.core.metrics import itl_s
    from roofline.sim.recorder import Recorder
    from roofline.sim.token_times import TimeSeries

    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 40, size=700).tolist() + [900]
    specs = [RequestSpec(f"r{i}", 0.0, 10, max(n, 1)) for i, n in enumerate(lengths)]
    recorder = Recorder(specs, record_steps=False)
    order = rng.permutation(len(specs)).tolist()
    stamps = np.cumsum(rng.exponential(0.01, size=3000))
    series = TimeSeries()
    for t in stamps.tolist():
        series.add(t)
    times = {}
    for i in order:  # each request's tokens at some of the stamps, in order (runs and holes)
        picks = np.sort(rng.choice(len(stamps), size=lengths[i], replace=False))
        times[i] = stamps[picks].tolist()
    for i in order:
        recorder.finished(SimpleNamespace(request_id=f"r{i}", first_scheduled_time_s=0.0, first_token_time_s=0.0,
                                          finish_time_s=1.0, num_output_tokens=lengths[i], num_preemptions=0,
                                          num_prefix_hit_tokens=0, token_times_s=times[i],
                                          token_times_array=np.array(times[i], dtype=np.float64)), series)
    token_times = recorder.token_runs.token_times(len(specs))
    gaps, rows = token_times.gap_s, token_times.request_index
    expected = [itl_s(times[i]) for i in order if lengths[i] > 1]
    np.testing.assert_array_equal(gaps, np.concatenate(expected))  # bit for bit
    np.testing.assert_array_equal(rows, np.concatenate([[i] * (lengths[i] - 1) for i in order if lengths[i] > 1]))
    assert rows.dtype == np.int32 and gaps.dtype == np.float64
    assert len(token_times.times) == len(stamps)  # the stamps once: no request kept times of its own


def test_slo_percentages_and_goodput() -> None:
    requests, itl, steps = toy_run()
    slo = summarize(requests, itl, steps, SummaryOptions(slo_ttft_s=0.5, slo_tpot_s=0.5))["slo"]
    # TTFT 0.5, 0.2, 1.0, 0.1 -> 3 of 4 meet; TPOT 0.5, none, 0.25, 1.0 -> 3 of 4 (a one-token output meets it).
    assert slo["ttft_percent_meeting"] == pytest.approx(75.0)
    assert slo["tpot_percent_meeting"] == pytest.approx(75.0)
    assert slo["both_percent_meeting"] == pytest.approx(50.0)  # requests 0 and 1
    assert slo["goodput_requests_per_s"] == pytest.approx(2 / 5.1)


def test_warmup_past_the_end_is_a_user_error() -> None:
    requests, itl, steps = toy_run()
    with pytest.raises(UserError, match="--warmup-s 10"):
        summarize(requests, itl, steps, SummaryOptions(warmup_s=10.0))


def test_replaying_a_real_engine_trace_reproduces_its_batches() -> None:
    """The real engine (llama-tiny on the CPU, wall-clock arrivals) against the simulator fed the engine's own
    step boundaries: each simulated step lasts until the engine's next step began, and each request arrives
    when the engine first saw it (the arrival cut-off of the first recorded step at or after its arrival), so
    a loaded machine's late wake-ups change what both see alike instead of making the test flaky."""
    pytest.importorskip("torch")
    from engine.llm_engine import EngineConfig, LLMEngine
    from roofline.sim.workload import build_requests

    # A cache of 8 blocks of 16 tokens (one is the null block) for up to 70-token requests. The first eight
    # requests arrive together, so preemptions and prefix hits happen however fast the engine runs (simulated
    # with steps of 10 us to 1 s: 3 to 7 preemptions); the other six arrive 10 ms apart, during the run.
    limits = dict(max_num_seqs=4, max_num_batched_tokens=32, max_model_len=96)
    deployment = make_deployment("llama-tiny", gpu_profile_without_tokenizer("h100-sxm"),
                                 EngineArgs(**limits, num_gpu_blocks_override=8))
    workload = Workload(name="tiny", seed=3, num_requests=14, arrival=ArrivalProcess("constant", 100.0),
                        prompt_tokens=LengthDistribution("uniform", min_tokens=5, max_tokens=40),
                        output_tokens=LengthDistribution("uniform", min_tokens=1, max_tokens=30),
                        shared_prefix=SharedPrefix(num_groups=2, prefix_tokens=16))
    specs = [dataclasses.replace(s, arrival_s=0.0) if i < 8 else s for i, s in enumerate(sample_requests(workload))]
    spec = deployment.spec
    engine = LLMEngine(spec, EngineConfig(deployment.scheduler_config, block_size=16, num_blocks=8, num_threads=1,
                                          dtype="float32"))
    trace = engine.run(build_requests(workload, specs, spec.vocab_size, spec.bos_token_id, spec.eos_token_id)).steps
    cutoffs = trace["arrival_cutoff_s"].tolist()
    assert trace["num_preemptions"].sum() > 0 and trace["num_new_prefix_hit_tokens"].sum() > 0

    def engine_step_time(replica: int, step: int, start_s: float, plan: object) -> float:
        # Until the engine's next iteration looked for arrivals (the last step: its measured duration).
        return cutoffs[step + 1] - start_s if step + 1 < len(cutoffs) else float(trace["duration_s"].iloc[-1])

    # Iterations that scheduled nothing are not recorded and changed nothing, so the first recorded cut-off at
    # or after an arrival is when the engine's scheduler first acted with that request queued.
    seen = np.searchsorted(np.array(cutoffs), [s.arrival_s for s in specs], side="left")
    assert (seen < len(cutoffs)).all()
    replayed = [dataclasses.replace(s, arrival_s=cutoffs[k]) for s, k in zip(specs, seen.tolist())]
    result = run_simulation(deployment, workload, specs=replayed, step_time_fn=engine_step_time)
    assert len(result.steps) == len(trace)
    for k, (ids, (q, c, _)) in enumerate(zip(result.step_request_ids, result.step_seqs)):
        assert list(ids) == list(trace["request_ids"].iloc[k]), k
        assert q.tolist() == trace["query_lens"].iloc[k].tolist(), k
        assert c.tolist() == trace["context_lens"].iloc[k].tolist(), k


def test_event_loop_makes_no_reference_cycles() -> None:
    """The event loop runs with the cyclic garbage collector paused, which is only free if the loop leaves
    no cyclic garbage: with preemptions, prefix hits and finishes, everything it drops is freed by reference
    counting alone."""
    import gc

    from roofline.sim.simulator import _cost_model_time, _Simulation

    deployment = make_deployment("llama-tiny", "h100-sxm", EngineArgs(max_num_seqs=4, max_num_batched_tokens=32,
                                                                       max_model_len=96,
                                                                       num_gpu_blocks_override=8))
    workload = Workload(name="tiny", seed=3, num_requests=30, arrival=ArrivalProcess("constant", 1e5),
                        prompt_tokens=LengthDistribution("uniform", min_tokens=20, max_tokens=40),
                        output_tokens=LengthDistribution("uniform", min_tokens=1, max_tokens=30),
                        shared_prefix=SharedPrefix(num_groups=2, prefix_tokens=16))
    sim = _Simulation(deployment, workload, sample_requests(workload), SimulationOptions(),
                      _cost_model_time(deployment.cost_model), None)
    gc.collect()
    sim.run()
    assert gc.isenabled()
    assert sim.recorder.num_preemptions.sum() > 0 and sim.recorder.num_prefix_hits.sum() > 0
    assert gc.collect() == 0


def test_a_finished_simulation_frees_its_requests_by_reference_counting() -> None:
    """The requests a run drops (with their token lists) are freed by reference counting when it returns, while the
    collector is still paused: the schedulers release their prefix-cache chains (`Scheduler.shutdown`), whose lazy
    hashers call back into the KV cache manager (a cycle that held every cached request). What cyclic garbage is
    left is the schedulers' few objects (scheduler, fast path, block pool and its views), not the requests."""
    import gc

    deployment = make_deployment("llama-tiny", "h100-sxm", EngineArgs(max_num_seqs=4, max_num_batched_tokens=32,
                                                                       max_model_len=96))
    workload = Workload(name="tiny", seed=3, num_requests=30, arrival=ArrivalProcess("constant", 1e5),
                        prompt_tokens=LengthDistribution("uniform", min_tokens=20, max_tokens=40),
                        output_tokens=LengthDistribution("uniform", min_tokens=1, max_tokens=30),
                        shared_prefix=SharedPrefix(num_groups=2, prefix_tokens=16))
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        result = run_simulation(deployment, workload)
        assert gc.isenabled() and int(result.requests["num_prefix_hit_tokens"].sum()) > 0
        gc.collect()
        garbage = [type(o).__name__ for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert "Request" not in garbage and "_Chain" not in garbage and len(garbage) < 50, garbage


@pytest.mark.parametrize("engine", [SMALL_ENGINE, replace(SMALL_ENGINE, enable_prefix_caching=False),
                                    replace(SMALL_ENGINE, max_num_batched_tokens=32, num_gpu_blocks_override=34)],
                         ids=["caching", "no-caching", "chunks-preemptions"])
def test_recorded_steps_equal_each_plan_as_it_ran(engine: EngineArgs) -> None:
    # The recorder keeps each step compactly (the columns' offsets, request indices) and builds every step's
    # arrays at the end (engine.core.step_record): the same arrays, dtypes and ids as each plan gave at its step.
    deployment = make_deployment("llama-156m", "h100-sxm", engine)
    seen: list[tuple] = []

    def step_time(replica: int, step: int, start: float, plan) -> float:  # noqa: ANN001
        q, c, e = plan.seq_arrays()
        seen.append((q.copy(), c.copy(), e.copy(), tuple(plan.request_ids)))
        return 0.01

    options = SimulationOptions(num_replicas=2, router="least_outstanding")
    result = run_simulation(deployment, small_workload(num_requests=80, rate=400.0), options, step_time_fn=step_time)
    assert len(result.step_seqs) == len(seen) == len(result.steps)
    if engine.num_gpu_blocks_override == 34:
        assert result.steps["num_preemptions"].sum() > 0, "the case should exercise preemption"
    for k, ((q, c, e, ids), (rq, rc, re), rids) in enumerate(zip(seen, result.step_seqs, result.step_request_ids)):
        assert (rq.dtype, rc.dtype, re.dtype) == (np.int32, np.int32, np.bool_)  # the step trace's types
        for mine, theirs in ((rq, q), (rc, c), (re, e)):
            assert np.array_equal(mine, theirs), k
        assert rids == ids, k
    query, context, emits = result.step_seqs.concatenated
    assert np.array_equal(query, np.concatenate([s[0] for s in seen]))
    assert np.array_equal(context, np.concatenate([s[1] for s in seen]))


def test_the_api_server_tokenizes_a_prompt_before_the_engine_sees_it() -> None:
    """A request reaches the engine core `executor.tokenize_s_per_prompt_token` x its prompt tokens after the client
    sent it; TTFT, counted from the send, grows by exactly that on an idle engine, and decoding does not move."""
    instant = gpu_profile_without_tokenizer("h100-sxm")
    slow = replace(instant, executor=replace(instant.executor, tokenize_s_per_prompt_token=1e-3))
    one = Workload(name="one", seed=0, num_requests=1, arrival=ArrivalProcess("all_at_once"),
                   prompt_tokens=LengthDistribution("fixed", value=50), output_tokens=LengthDistribution("fixed", value=4))
    at_once = run_simulation(make_deployment("llama-156m", instant, SMALL_ENGINE), one)
    tokenized = run_simulation(make_deployment("llama-156m", slow, SMALL_ENGINE), one)
    assert tokenized.requests.arrival_s[0] == at_once.requests.arrival_s[0] == 0.0
    assert tokenized.steps.start_s[0] == pytest.approx(at_once.steps.start_s[0] + 50 * 1e-3)
    assert tokenized.requests.ttft_s[0] == pytest.approx(at_once.requests.ttft_s[0] + 50 * 1e-3)
    assert tokenized.requests.tpot_s[0] == pytest.approx(at_once.requests.tpot_s[0])


def test_the_frontend_time_adds_to_every_request_before_the_engine_core() -> None:
    """`executor.frontend_s_per_request` is a fixed time per request on top of the tokenization: a request reaches
    the engine core that much later whatever its length; TTFT grows by it on an idle engine, decoding does not
    move, and with neither a request reaches the engine at the send."""
    instant = gpu_profile_without_tokenizer("h100-sxm")
    both = replace(instant, executor=replace(instant.executor, tokenize_s_per_prompt_token=1e-3,
                                             frontend_s_per_request=7e-3))
    for prompt in (50, 300):
        one = Workload(name="one", seed=0, num_requests=1, arrival=ArrivalProcess("all_at_once"),
                       prompt_tokens=LengthDistribution("fixed", value=prompt),
                       output_tokens=LengthDistribution("fixed", value=4))
        at_once = run_simulation(make_deployment("llama-156m", instant, SMALL_ENGINE), one)
        later = run_simulation(make_deployment("llama-156m", both, SMALL_ENGINE), one)
        assert at_once.steps.start_s[0] == 0.0
        assert later.steps.start_s[0] == pytest.approx(7e-3 + prompt * 1e-3)
        assert later.requests.ttft_s[0] == pytest.approx(at_once.requests.ttft_s[0] + 7e-3 + prompt * 1e-3)
        assert later.requests.tpot_s[0] == pytest.approx(at_once.requests.tpot_s[0])


def test_shipped_gpu_profiles_tokenize_at_the_published_rate() -> None:
    """About 1 us per prompt token: vLLM issue #19012's 'about 1k tokens/ms' on a DGX H100 CPU, which the families'
    host section states as 2x the reference host's single-thread speed (2.1 us per token there); the executor's older
    per-request terms are gone (the API server replaces them)."""
    from roofline.cost.hardware import load_profile
    from roofline.sim.api_server import ApiServerCosts

    for profile_id in ("h100-sxm", "h200-sxm", "b200", "a100-80gb-sxm", "l40s"):
        hw = load_profile(profile_id)
        assert hw.host is not None and hw.host.single_thread_speed_relative == 2.0
        assert ApiServerCosts.for_host(hw.host).prompt_token_s == pytest.approx(1.05e-6)
        assert hw.executor.tokenize_s_per_prompt_token == 0 and hw.executor.frontend_s_per_request == 0


def test_a_freed_table_is_in_the_prefix_cache_from_its_front(deployment, monkeypatch) -> None:  # noqa: ANN001
    # KVCacheManager.free tells the pool how many of a request's blocks (tail first) hold no prefix-cache hash, the
    # others holding one (`BlockPool.free`'s num_uncached, which spares reading the hashes): checked against the
    # hashes on runs that preempt and hit shared prefixes and preempted requests' own blocks. (The Python classes: the
    # compiled ones give the same results, tests/test_core_properties.py.)
    from engine.core import compiled_kv
    from engine.core.block_pool import NO_HASH, BlockPool

    monkeypatch.setattr(compiled_kv, "COMPILED", False)

    checked: list[tuple[int, int]] = []  # (uncached, cached) blocks of each checked free
    original = BlockPool.free

    def free(self: BlockPool, ordered_ids, num_uncached: int | None = None) -> None:  # noqa: ANN001
        if num_uncached is not None:
            hashed = self.block_hash[np.asarray(ordered_ids, dtype=np.int64)] != NO_HASH
            assert not hashed[:num_uncached].any() and hashed[num_uncached:].all()
            checked.append((num_uncached, len(hashed) - num_uncached))
        original(self, ordered_ids, num_uncached)

    monkeypatch.setattr(BlockPool, "free", free)
    result = run_simulation(deployment, small_workload(num_requests=60, rate=400.0), SimulationOptions())
    assert result.requests["num_preemptions"].sum() > 0 and result.requests["num_prefix_hit_tokens"].sum() > 0
    assert len(checked) >= 60 and any(uncached and cached for uncached, cached in checked)
