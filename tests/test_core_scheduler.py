"""Scheduler: one behaviour per test, exact numbers (vLLM V1 semantics, see engine/core/scheduler.py)."""

import pytest

from engine.core import CacheConfig, Request, RequestStatus, SamplingParams, Scheduler, SchedulerConfig


def _sched(num_blocks=100, block_size=4, max_num_seqs=8, budget=64, max_model_len=128, **kw):
    cache_kw = {k: kw.pop(k) for k in ("enable_prefix_caching",) if k in kw}
    return Scheduler(
        SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, max_model_len=max_model_len, **kw),
        CacheConfig(num_blocks=num_blocks, block_size=block_size, **cache_kw),
    )


def _req(rid, n_prompt, max_tokens=4, start=1000, **kw):
    return Request(rid, list(range(start, start + n_prompt)), SamplingParams(max_tokens=max_tokens, ignore_eos=True), **kw)


def _step(sched, token=7, now_s=None):
    plan = sched.schedule(now_s)
    finished = sched.update_from_output(plan, {rid: token for rid in plan.request_ids}, now_s)
    return plan, finished


def test_prefill_then_decode_then_finish():
    sched = _sched()
    sched.add_request(_req("a", 10, max_tokens=3))
    plan, _ = _step(sched)
    seq = plan.seqs[0]
    assert (seq.num_query_tokens, seq.num_context_tokens, seq.emits_token, seq.is_prefill) == (10, 0, True, True)
    assert seq.token_ids == list(range(1000, 1010)) and len(seq.block_ids) == 3
    plan, _ = _step(sched, token=8)
    assert plan.seqs[0].token_ids == [7] and not plan.seqs[0].is_prefill and plan.num_decode_tokens == 1
    plan, finished = _step(sched)
    assert [r.request_id for r in finished] == ["a"]
    assert finished[0].output_token_ids == [7, 8, 7]
    assert finished[0].status is RequestStatus.FINISHED_LENGTH_CAPPED
    assert not sched.has_unfinished() and sched.num_kv_blocks_used == 0


def test_chunked_prefill_shares_the_budget_with_decodes():
    sched = _sched(budget=16)
    sched.add_request(_req("a", 4, max_tokens=10))
    _step(sched)
    sched.add_request(_req("b", 40, start=2000))
    plan, _ = _step(sched)
    assert plan.request_ids == ["a", "b"] and plan.query_lens == [1, 15] and plan.emits == [True, False]
    plan, _ = _step(sched)
    assert plan.query_lens == [1, 15] and plan.context_lens == [5, 15]
    plan, _ = _step(sched)
    assert plan.query_lens == [1, 10] and plan.emits == [True, True]
    assert (plan.num_prefill_tokens, plan.num_decode_tokens) == (10, 1)


def test_without_chunked_prefill_a_prompt_waits_for_the_whole_budget():
    sched = _sched(budget=128, max_num_seqs=8, enable_chunked_prefill=False)
    sched.add_request(_req("a", 100, max_tokens=10))
    sched.add_request(_req("b", 100, start=3000))
    plan, _ = _step(sched)
    assert plan.request_ids == ["a"]  # b's 100 tokens do not fit in the 28 left
    plan, _ = _step(sched)
    assert plan.request_ids == ["a", "b"] and plan.query_lens == [1, 100]


def test_full_prefix_hit_recomputes_the_last_block():
    sched = _sched(block_size=4)
    sched.add_request(_req("a", 8, max_tokens=1))
    _step(sched)
    sched.add_request(_req("b", 8, max_tokens=1))
    plan, _ = _step(sched)
    # 8 cached tokens, but at most 7 may hit: one whole block (4 tokens) is recomputed
    assert plan.context_lens == [4] and plan.query_lens == [4] and plan.num_new_prefix_hit_tokens == 4
    sched.add_request(_req("c", 9, max_tokens=1))
    plan, _ = _step(sched)
    assert plan.context_lens == [8] and plan.query_lens == [1]
    assert sched.requests.get("c") is None  # finished
    assert plan.seqs[0].is_prefill  # the last prompt token is still prefill


def test_requests_admitted_in_one_step_share_blocks_scheduled_in_it():
    sched = _sched(block_size=4)
    sched.add_request(_req("a", 12))
    sched.add_request(_req("b", 12))
    plan, _ = _step(sched)
    assert plan.context_lens == [0, 8] and plan.query_lens == [12, 4]
    assert plan.block_tables[0][:2] == plan.block_tables[1][:2]


def test_preemption_from_the_tail_and_no_admissions_that_step():
    # 3 requests of 8 prompt tokens (2 blocks each) fill 6 of 7 usable blocks; decodes then need 3 more
    sched = _sched(num_blocks=8, block_size=4, enable_prefix_caching=False, scheduler_reserve_full_isl=False)
    for rid, start in (("a", 100), ("b", 200), ("c", 300)):
        sched.add_request(_req(rid, 8, max_tokens=6, start=start))
    _step(sched)
    sched.add_request(_req("d", 4, start=400))
    plan, _ = _step(sched)  # a takes the last free block; b needs one: c (the tail) is preempted
    assert plan.request_ids == ["a", "b"] and plan.preempted_request_ids == ("c",)
    assert plan.admitted_request_ids == ()  # d waits, though c's blocks are free now
    c = sched.requests.get("c")
    assert c.status is RequestStatus.PREEMPTED and c.num_computed_tokens == 0 and c.num_preemptions == 1
    assert [r.request_id for r in sched.waiting] == ["c", "d"]
    while "c" not in plan.admitted_request_ids:
        plan, _ = _step(sched)
    # c recomputes its prompt and the token it had generated
    i = plan.request_ids.index("c")
    assert plan.query_lens[i] == 9 and plan.context_lens[i] == 0


def test_a_request_that_cannot_fit_preempts_itself():
    sched = _sched(num_blocks=5, block_size=2, enable_prefix_caching=False, scheduler_reserve_full_isl=False)
    sched.add_request(_req("a", 2, max_tokens=6))
    sched.add_request(_req("b", 2, max_tokens=6, start=50))
    for _ in range(3):
        plan, _ = _step(sched)
    assert plan.request_ids == ["a", "b"]
    plan, _ = _step(sched)  # a needs a 3rd block: b is the tail and is preempted
    assert plan.preempted_request_ids == ("b",)


def test_reserve_full_isl_admits_only_whole_sequences():
    sched = _sched(num_blocks=10, block_size=4, budget=8, max_num_seqs=8)  # 9 usable blocks
    sched.add_request(_req("a", 20, max_tokens=8))
    sched.add_request(_req("b", 20, max_tokens=8, start=2000))
    plan, _ = _step(sched)
    assert plan.request_ids == ["a"]  # a: 5 blocks reserved in full; b needs 5 more, only 4 remain
    plan, _ = _step(sched)
    assert plan.request_ids == ["a"] and plan.query_lens == [8]


def test_without_reserve_full_isl_only_the_chunk_must_fit():
    sched = _sched(num_blocks=10, block_size=4, budget=8, scheduler_reserve_full_isl=False)
    sched.add_request(_req("a", 4, max_tokens=8))
    sched.add_request(_req("b", 20, max_tokens=8, start=2000))
    plan, _ = _step(sched)
    assert plan.request_ids == ["a", "b"] and plan.query_lens == [4, 4]


def test_max_num_seqs_limits_running_requests():
    sched = _sched(max_num_seqs=2)
    for i in range(3):
        sched.add_request(_req(f"r{i}", 4, start=100 * i))
    plan, _ = _step(sched)
    assert plan.request_ids == ["r0", "r1"] and sched.num_waiting == 1


def test_max_model_len_stops_generation():
    sched = _sched(max_model_len=12)
    sched.add_request(_req("a", 10, max_tokens=100))
    _, finished = _step(sched)
    assert finished == []
    _, finished = _step(sched)
    assert finished[0].num_tokens == 12 and finished[0].status is RequestStatus.FINISHED_LENGTH_CAPPED


def test_prompt_of_max_model_len_is_rejected():
    sched = _sched(max_model_len=12)
    with pytest.raises(ValueError, match="max_model_len"):
        sched.add_request(_req("a", 12))


def test_request_larger_than_the_cache_is_rejected():
    sched = _sched(num_blocks=4, block_size=4)
    with pytest.raises(ValueError, match="KV blocks"):
        sched.add_request(_req("a", 10, max_tokens=8))


def test_eos_stops_unless_ignored_and_stop_tokens_always_stop():
    sched = _sched()
    sched.add_request(Request("e", [5, 6], SamplingParams(max_tokens=9), eos_token_id=2))
    sched.add_request(Request("i", [5, 6], SamplingParams(max_tokens=9, ignore_eos=True), eos_token_id=2))
    sched.add_request(Request("s", [5, 6], SamplingParams(max_tokens=9, ignore_eos=True, stop_token_ids=(3,))))
    plan = sched.schedule()
    finished = sched.update_from_output(plan, {"e": 2, "i": 2, "s": 3})
    assert sorted(r.request_id for r in finished) == ["e", "s"]
    assert all(r.status is RequestStatus.FINISHED_STOPPED for r in finished)


def test_long_prefill_threshold_caps_chunks_when_others_wait():
    sched = _sched(budget=64, long_prefill_token_threshold=8)
    sched.add_request(_req("a", 30))
    sched.add_request(_req("b", 30, start=5000))
    plan, _ = _step(sched)
    assert plan.query_lens == [8, 8]


def test_priority_policy_admits_and_preempts_by_priority():
    sched = _sched(policy="priority", max_num_seqs=1)
    sched.add_request(_req("low", 4, priority=5, arrival_time_s=0.0))
    sched.add_request(_req("high", 4, priority=1, arrival_time_s=1.0, start=3000))
    plan, _ = _step(sched)
    assert plan.request_ids == ["high"]


def test_abort_frees_blocks_and_is_skipped_by_the_pending_update():
    sched = _sched()
    sched.add_request(_req("a", 10))
    sched.add_request(_req("b", 10, start=3000))
    plan = sched.schedule()
    aborted = sched.abort_request("a", now_s=2.0)
    assert aborted.status is RequestStatus.FINISHED_ABORTED and aborted.finish_time_s == 2.0
    finished = sched.update_from_output(plan, {"a": 1, "b": 1})
    assert finished == [] and sched.num_running == 1 and sched.abort_request("a") is None
    assert aborted.num_output_tokens == 0


def test_metrics_are_stamped_from_the_callers_clock():
    sched = _sched(budget=8)
    sched.add_request(_req("a", 12, max_tokens=2, arrival_time_s=0.5))
    _step(sched, now_s=1.0)  # chunk 1: no token
    _step(sched, now_s=2.0)  # chunk 2: first token
    _, finished = _step(sched, now_s=3.0)
    req = finished[0]
    assert (req.first_scheduled_time_s, req.first_token_time_s, req.finish_time_s) == (1.0, 2.0, 3.0)
    assert req.token_times_s == [2.0, 3.0] and req.num_prefix_hit_tokens == 0


def test_column_path_hands_a_finished_request_its_times_as_a_view():
    # One token id for every sequence (the simulator's case): the fast path's columns write the times of a request
    # that decoded only within them as a view of their own array, the same floats as token_times_s.
    import numpy as np

    sched = _sched()
    sched.add_request(_req("a", 10, max_tokens=5))
    finished = []
    for step in range(6):
        plan = sched.schedule(float(step))
        finished += sched.update_from_output(plan, 7, 0.5 + step)
    req = finished[0]
    assert req.token_times_s == [0.5, 1.5, 2.5, 3.5, 4.5]
    assert req.token_times_array.tolist() == req.token_times_s
    assert np.shares_memory(req.token_times_array, sched._fast.columns.times_array)


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=128)
    with pytest.raises(ValueError, match="max_model_len"):
        SchedulerConfig(max_num_batched_tokens=2048, max_model_len=4096, enable_chunked_prefill=False)
    with pytest.raises(ValueError, match="policy"):
        SchedulerConfig(policy="lifo")
    with pytest.raises(ValueError, match="num_blocks"):
        CacheConfig(num_blocks=1)


def test_hybrid_model_runs_to_completion_and_returns_every_block():
    # A sliding-window group (window 8 tokens) beside the full group, in a pool too small for all requests at once:
    # requests are admitted, preempted and resumed, and the pool ends empty.
    cache = CacheConfig(num_blocks=40, block_size=4, num_sliding_groups=1, sliding_window=8,
                        sliding_admission_cap_blocks=20)
    sched = Scheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=128), cache)
    assert sched._fast is None  # the batched decode path knows one block table
    for i in range(6):
        sched.add_request(_req(f"r{i}", 30 + i, max_tokens=40))
    for _ in range(2000):
        if not sched.has_unfinished():
            break
        _step(sched)
        for req in sched.running:  # the full table grows with the tokens, the sliding one stays near the window
            assert len(req.sliding_block_ids) <= -(-(8 - 1 + 64) // 4) + 1
    assert not sched.has_unfinished() and sched.num_kv_blocks_used == 0
    sched.kv.pool.check_invariants()
