"""The fast path with its columns in C (engine.core.compiled_fast, engine/core/_kvcore.c): in use where built, the
Python `FastPath` under ROOFLINE_PURE_PYTHON=1, and the same plans, tokens, times and outcomes as the Python fast
path on long periods, preemptions, prompt chunks, steps without a clock and request subclasses, with the common
steps run in C. (Random workloads, step by step: tests/test_core_properties.py.)"""

import functools
import gc
import os
import subprocess
import sys

import numpy as np
import pytest

from engine.core import CacheConfig, Request, SamplingParams, Scheduler, SchedulerConfig, compiled_fast, compiled_kv
from engine.core import request as request_module
from engine.core.fast_path import FastPath
from engine.core.pipeline_scheduler import PipelineScheduler
from engine.core.scheduler import Scheduler as _Scheduler

_built = pytest.mark.skipif(not compiled_fast.FAST_PATH_BUILT, reason="engine.core._kvcore is not built")


class _Sub(Request):
    """Not exactly `Request`: the extension reaches its fields through the generic attribute calls."""


def _requests(n, prompt_len, max_tokens, cls=Request, per_step=2):
    return [(i // per_step, cls(f"r{i}", [2 + (i * 7 + k) % 40 for k in range(prompt_len + i % 7)],
                               SamplingParams(max_tokens=max_tokens + (i * 13) % 17, ignore_eos=i % 5 != 0),
                               float(i // per_step), eos_token_id=1 if i % 3 else 9))
            for i in range(n)]


def _run(config, cache, requests, compiled, clock=True, token=9, monkeypatch=None):
    """Drive a scheduler as the simulator does (one token id for every sequence); its plans, finished requests and the
    number of steps the Python fast path took (`FastPath`'s methods counted)."""
    counts = {"schedule_running": 0, "update": 0}
    in_python = []  # the plans `FastPath.schedule_running` (Python) scheduled
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compiled_kv, "COMPILED", compiled)
        for name in counts:
            original = getattr(FastPath, name)

            def counted(self, *args, _original=original, _name=name):
                counts[_name] += 1
                if _name == "schedule_running":
                    in_python.append(args[0])
                return _original(self, *args)

            mp.setattr(FastPath, name, counted)
        sched = Scheduler(config, cache)
        assert isinstance(sched._fast, compiled_fast.CompiledFastPath) == compiled
        pending = sorted(requests, key=lambda x: x[0])
        plans, finished, objects = [], [], []
        step = 0
        while pending or sched.has_unfinished():
            while pending and pending[0][0] <= step:
                sched.add_request(pending.pop(0)[1])
            now = float(step) if clock else None
            plan = sched.schedule(now)
            objects.append(plan)
            sums = plan.seq_sums()
            plans.append((plan.request_ids, plan.query_lens, plan.context_lens, plan.block_tables,
                          plan.preempted_request_ids, plan.emits, plan.num_prefill_tokens, plan.num_decode_tokens,
                          plan.num_context_tokens, sums, plan.num_kv_blocks_used))
            if not plan.is_empty:
                finished += sched.update_from_output(plan, token, now)
            step += 1
            assert step < 20000
    outcome = sorted((r.request_id, r.status, r.output_token_ids, r.token_times_s, r.token_times_array.tolist(),
                      r.finish_time_s, r.num_preemptions, r.num_prefix_hit_tokens) for r in finished)
    return plans, outcome, counts, step, in_python, objects


def _same(config, cache, make, **kw):
    py = _run(config, cache, make(), compiled=False, **kw)
    c = _run(config, cache, make(), compiled=True, **kw)
    assert c[0] == py[0] and c[1] == py[1]
    return py, c


def test_the_compiled_fast_path_is_in_use_where_built():
    probe = ("from engine.core import CacheConfig, Scheduler, SchedulerConfig; "
             "s = Scheduler(SchedulerConfig(max_model_len=64), CacheConfig(num_blocks=16, block_size=4)); "
             "print(type(s._fast).__name__)")
    for value, expected in (("", "CompiledFastPath" if compiled_fast.FAST_PATH_BUILT else "FastPath"),
                            ("1", "FastPath")):
        run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                             env={**os.environ, "ROOFLINE_PURE_PYTHON": value})
        assert run.stdout.strip() == expected


@_built
def test_a_long_period_in_c_gives_the_python_plans():
    """~3,000 updates in one period (the times array grown past 1,024 twice), with joins, stops by EOS and by length,
    and every step but the period's first few in C."""
    config = SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=4096, max_model_len=4096)
    cache = CacheConfig(num_blocks=4096, block_size=16, enable_prefix_caching=True)
    py, c = _same(config, cache, lambda: _requests(120, 20, 200, per_step=5) + [(0, Request(
        "long", [5] * 30, SamplingParams(max_tokens=3000, ignore_eos=True)))])
    steps = c[3]
    assert steps >= 3000
    assert c[2]["schedule_running"] + c[2]["update"] < 20 < steps  # the Python methods: hardly ever
    assert py[2]["update"] > steps - 5  # (the reference ran them all)


@_built
@pytest.mark.parametrize("clock", [True, False])
@pytest.mark.parametrize("cls", [Request, _Sub])
def test_preemptions_and_prompt_chunks_on_c_columns(clock, cls):
    """A cache too small for everyone (FCFS preemptions) and a budget that chunks prompts: those steps go to the
    Python methods on the C columns, the others to C; steps without a clock (no token times) and a Request subclass
    (generic attribute calls) too."""
    config = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=48, max_model_len=256)
    cache = CacheConfig(num_blocks=40, block_size=4, enable_prefix_caching=True)
    py, c = _same(config, cache, lambda: _requests(40, 30, 40, cls=cls), clock=clock)
    assert any(p[4] for p in c[0])  # preemptions happened
    assert any(not all(p[5]) for p in c[0])  # prompt chunks happened
    assert 0 < c[2]["schedule_running"] < c[3] / 2


@_built
def test_preempting_steps_run_in_c():
    """FCFS steps that preempt, in a period without prompt chunks (a budget above every prompt), are the C path's."""
    config = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=512, max_model_len=256)
    cache = CacheConfig(num_blocks=40, block_size=4, enable_prefix_caching=True)
    py, c = _same(config, cache, lambda: _requests(40, 30, 40, per_step=1))
    assert sum(len(p[4]) for p in c[0]) > 10  # preemptions
    assert not any(plan.preempted_request_ids for plan in c[4])  # none of them in Python
    assert any(plan.preempted_request_ids for plan in py[4])  # (the reference's)


@_built
@pytest.mark.parametrize("threshold", [0, 8])
def test_prompt_chunks_run_in_c(threshold):
    """Prompt chunks (a budget below the prompts, a long-prefill threshold) in a cache that holds everyone: the chunked
    admissions join as prefill rows and the steps that finish them run in C too."""
    config = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=24, max_model_len=256,
                             long_prefill_token_threshold=threshold)
    cache = CacheConfig(num_blocks=600, block_size=4, enable_prefix_caching=True)
    py, c = _same(config, cache, lambda: _requests(30, 30, 40))
    assert sum(not all(p[5]) for p in c[0]) > 10  # steps with a prompt chunk
    c_plans = {id(plan) for plan in c[5]} - {id(plan) for plan in c[4]}  # scheduled in C
    chunked = [plan for plan in c[5] if id(plan) in c_plans and plan.sequence_record()[0].prefill_rows]
    assert len(chunked) > (5 if threshold == 0 else 0)  # steps with prefill rows, in C (a threshold cuts most)
    assert c[2]["update"] < c[3] / 2 if threshold == 0 else c[2]["update"] < c[3]


@_built
def test_no_prefix_caching_and_a_block_of_one_token():
    for block_size, caching in ((1, True), (4, False), (16, False)):
        config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=128)
        cache = CacheConfig(num_blocks=400 // block_size, block_size=block_size, enable_prefix_caching=caching)
        _same(config, cache, lambda: _requests(30, 10, 30))


@_built
def test_the_c_columns_leak_no_request():
    """Every reference the C columns and fast path take is given back: a finished request is held the same number
    of times after either run (and its scheduler's collection)."""
    config = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=48, max_model_len=256)
    cache = CacheConfig(num_blocks=40, block_size=4, enable_prefix_caching=True)
    counts = []
    for compiled in (False, True):
        made = _requests(40, 30, 40)
        _run(config, cache, made, compiled=compiled)
        gc.collect()
        counts.append([sys.getrefcount(r) for _, r in made])
    assert counts[0] == counts[1]


def test_the_whole_step_is_in_c_for_an_fcfs_scheduler_where_built():
    """`Scheduler.schedule` / `update_from_output` / `add_request` are the compiled fast path's (`schedule_step`,
    `update_step`, `add_request_step`) for an FCFS `Scheduler` where built, whose plans are made at StepPlan's slots
    directly, and `Request.lazy` is made in C; not under ROOFLINE_PURE_PYTHON=1, the priority policy, without fast
    paths, or for a subclass (PipelineScheduler)."""
    probe = ("from engine.core import CacheConfig, Scheduler, SchedulerConfig; "
             "s = Scheduler(SchedulerConfig(max_model_len=64), CacheConfig(num_blocks=16, block_size=4)); "
             "import engine.core.request as r; print(s._step is not None and s._step is s._fast, r._new_lazy is not None)")
    built = str(compiled_fast.STEP_BUILT)
    for value, expected in (("", f"{built} {built}"), ("1", "False False")):
        run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                             env={**os.environ, "ROOFLINE_PURE_PYTHON": value})
        assert run.stdout.strip() == expected
    assert compiled_fast.STEP_PLANS_DIRECT == compiled_fast.STEP_BUILT
    cache = CacheConfig(num_blocks=64, block_size=4)
    assert Scheduler(SchedulerConfig(max_model_len=64, policy="priority"), cache)._step is None
    assert Scheduler(SchedulerConfig(max_model_len=64), cache, fast_paths=False)._step is None
    assert PipelineScheduler(SchedulerConfig(max_model_len=64), cache, 2, False)._step is None


@_built
@pytest.mark.parametrize("chunked, threshold, full_isl, watermark, caching", [
    (True, 0, True, 0.0, True), (False, 0, True, 0.0, True), (True, 8, False, 0.1, True), (False, 0, False, 0.1, False),
    (True, 8, True, 0.0, False)])
def test_admissions_in_c_give_the_python_plans(monkeypatch, chunked, threshold, full_isl, watermark, caching):
    """The waiting queue's admissions in C (`schedule_step`: prefix hits of shared prompts and of preempted requests'
    own blocks, a blocked head carried over, chunked prefill on and off, a long-prefill threshold, the full-sequence
    check, the watermark): the plans, tokens, times and outcomes of the Python scheduler, which never runs its
    `_schedule_waiting` there."""
    calls = {"waiting": 0}
    original = _Scheduler._schedule_waiting

    def counted(self, *args):
        calls["waiting"] += 1
        return original(self, *args)

    monkeypatch.setattr(_Scheduler, "_schedule_waiting", counted)
    config = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=64, max_model_len=64,
                             enable_chunked_prefill=chunked, long_prefill_token_threshold=threshold,
                             scheduler_reserve_full_isl=full_isl, watermark=watermark)
    cache = CacheConfig(num_blocks=48, block_size=4, enable_prefix_caching=caching)
    def make():  # a 16-token system prompt shared by all, then their own
        return [(step, Request(r.request_id, [5 + k % 30 for k in range(16)] + r.prompt_token_ids[:20], r.sampling,
                               r.arrival_time_s, r.eos_token_id)) for step, r in _requests(90, 30, 40, per_step=3)]

    py = _run(config, cache, make(), compiled=False)
    in_python = calls["waiting"]
    c = _run(config, cache, make(), compiled=True)
    assert c[0] == py[0] and c[1] == py[1]
    assert any(p[4] for p in c[0])  # preemptions happened
    assert in_python > 0 and calls["waiting"] == in_python  # (none in the compiled run)
    if caching:
        assert sum(r[7] for r in c[1]) > 0  # prefix hits (shared prompts) happened


@_built
def test_an_abort_between_schedule_and_update_in_c():
    """A request aborted after `schedule_step`: `update_step` skips it as `update_from_output` does (the token-list
    update), and the step after runs in C again, with the same plans and outcomes as the Python scheduler."""
    config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=128)
    cache = CacheConfig(num_blocks=64, block_size=4)
    results = []
    for compiled in (False, True):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(compiled_kv, "COMPILED", compiled)
            sched = Scheduler(config, cache)
        assert (sched._step is not None) == compiled
        for _, req in _requests(6, 10, 20):
            sched.add_request(req)
        plans, finished = [], []
        for step in range(60):
            plan = sched.schedule(float(step))
            if step == 5:
                assert sched.abort_request("r2", float(step)) is not None
            if not plan.is_empty:
                plans.append((plan.request_ids, plan.query_lens, plan.context_lens, plan.block_tables))
                finished += sched.update_from_output(plan, 7 if step != 8 else {r: 3 for r in plan.request_ids},
                                                     float(step))
        results.append((plans, sorted((r.request_id, r.status, r.output_token_ids, r.token_times_s)
                                      for r in finished)))
        assert not sched.has_unfinished()
    assert results[0] == results[1]


def _slots(req):
    """Every slot of a request (arrays by their ids: the same shared NO_BLOCK_IDS)."""
    return [(name, type(v).__name__, v.tolist() if hasattr(v, "tolist") else v)
            for name in Request.__slots__ for v in [getattr(req, name)]]


@pytest.mark.skipif(request_module._new_lazy is None, reason="engine.core._kvcore is not built or not selected")
def test_a_lazy_request_made_in_c_is_the_python_ones():
    """`Request.lazy` in C (`new_lazy_request`) sets every slot as the Python code does (`__init__`, `_init_fields`):
    the same values and types, the shared empty block-id array; a subclass and a bad length go the Python way."""
    source = functools.partial(np.arange, 5)
    sampling = SamplingParams(max_tokens=3)
    c = Request.lazy("r", 5, source, sampling, 1.5, 2, 1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(request_module, "_new_lazy", None)
        py = Request.lazy("r", 5, source, sampling, 1.5, 2, 1)
    assert _slots(c) == _slots(py)
    assert c.block_ids_head is py.block_ids_head and c._prompt_source is source
    assert c.block_ids is not py.block_ids and c.prompt_array.tolist() == [0, 1, 2, 3, 4]
    assert type(_Sub.lazy("s", 5, source, sampling)) is _Sub
    with pytest.raises(ValueError, match="num_prompt_tokens"):
        Request.lazy("r", 0, source, sampling)


@_built
def test_add_request_in_c_gives_the_python_state_and_errors():
    """`Scheduler.add_request` in C (`add_request_step`): the stop rules, the queue and the index of the Python method,
    one stop set per kind of request; each of the method's errors, with its message (the Python method raises them)."""
    config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=64)
    cache = CacheConfig(num_blocks=8, block_size=4)
    states, errors = [], []
    for compiled in (False, True):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(compiled_kv, "COMPILED", compiled)
            sched = Scheduler(config, cache)
        assert (sched._step is not None) == compiled
        reqs = [Request(f"r{i}", [5] * (3 + i), SamplingParams(max_tokens=4 + i, ignore_eos=i % 2 == 1,
                                                                   stop_token_ids=(7, 8) if i % 3 else ()), 0.0, 2)
                for i in range(6)]
        for r in reqs:
            sched.add_request(r)
        states.append([(r.max_num_tokens, r.stop_token_set, r.next_check_len) for r in sched.waiting])
        assert [r.request_id for r in sched.waiting] == list(sched.requests) == [r.request_id for r in reqs]
        assert len({id(r.stop_token_set) for r in reqs}) == len(sched._stop_sets) == 4
        bad = [reqs[0], Request("long", [5] * 64, SamplingParams()), Request("big", [5] * 20, SamplingParams(40))]
        scheduled = Request("done", [5] * 3, SamplingParams())
        scheduled.num_computed_tokens = 1
        caught = []
        for r in bad + [scheduled]:
            with pytest.raises(ValueError) as info:
                sched.add_request(r)
            caught.append(str(info.value))
        errors.append(caught)
        assert len(sched.waiting) == len(sched.requests) == 6
    assert states[0] == states[1] and errors[0] == errors[1]
    assert "already in the scheduler" in errors[1][0] and "KV blocks" in errors[1][2]


def _blocked_state(sched):
    b = sched._blocked
    return None if b is None else (b.req.request_id, b.num_tokens, b.need, b.budget, b.threshold, b.watermark,
                                   b.first_hash, b.num_chains)


@_built
@pytest.mark.parametrize("full_isl", [True, False])
def test_a_blocked_head_in_c_is_the_python_ones(full_isl):
    """The `_Blocked` the step in C makes when the waiting queue's head does not fit (`_Blocked.of` in C, its slots
    filled directly): the Python scheduler's, field for field, after every step (a small cache: heads blocked, preempted
    requests back at the head with their own chains cached)."""
    config = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=64, max_model_len=128,
                             scheduler_reserve_full_isl=full_isl)
    cache = CacheConfig(num_blocks=40, block_size=4, enable_prefix_caching=True)
    scheds = []
    for compiled in (False, True):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(compiled_kv, "COMPILED", compiled)
            scheds.append(Scheduler(config, cache))
    assert scheds[1]._step is not None and scheds[0]._step is None
    pending = [_requests(40, 30, 40) for _ in scheds]
    num_blocked = 0
    for step in range(2000):
        states = []
        for sched, reqs in zip(scheds, pending):
            while reqs and reqs[0][0] <= step:
                sched.add_request(reqs.pop(0)[1])
            plan = sched.schedule(float(step))
            states.append((plan.request_ids, plan.query_lens, _blocked_state(sched)))
            if not plan.is_empty:
                sched.update_from_output(plan, 9, float(step))
        assert states[0] == states[1]
        num_blocked += states[0][2] is not None
        if not (pending[0] or scheds[0].has_unfinished()):
            break
    assert not scheds[1].has_unfinished() and num_blocked > 20


@pytest.mark.skipif(request_module._ready_prompt is None, reason="engine.core._kvcore is not built or not selected")
def test_a_lazy_prompt_checked_in_c_loads_as_in_python():
    """`Request._load_prompt` with its checks in C (`ready_prompt`: an exact read-only int64 array of the length, no id
    below 0, kept as it is) and without: the same prompt for every kind of source, the same errors."""
    ro = np.arange(6, dtype=np.int64)
    ro.flags.writeable = False
    strided = np.arange(12, dtype=np.int64)[::2]
    strided.flags.writeable = False
    negative = np.array([3, -1, 4], dtype=np.int64)
    negative.flags.writeable = False
    sources = {"read-only": ro, "writeable": np.arange(6, dtype=np.int64), "list": [0, 1, 2, 3, 4, 5],
               "int32": np.arange(6, dtype=np.int32), "float": np.arange(6.0), "strided": strided,
               "short": ro[:5], "negative": negative}
    results = []
    for ready in (request_module._ready_prompt, None):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(request_module, "_ready_prompt", ready)
            got = {}
            for name, ids in sources.items():
                req = Request.lazy(name, 3 if name == "negative" else 6, lambda ids=ids: ids, SamplingParams())
                try:
                    prompt = req.prompt_array
                    got[name] = (prompt.tolist(), prompt.dtype.name, prompt.flags.writeable, prompt is ids)
                except ValueError as error:
                    got[name] = str(error)
            results.append(got)
    assert results[0] == results[1]
    assert results[0]["read-only"][3] and not results[0]["writeable"][2]
    assert "prompt source" in results[0]["negative"] and "prompt source" in results[0]["short"]


def _finished_unread(config, cache, requests, compiled):
    """A scheduler driven as `_run` drives it; its finished requests, none of their token lists read yet."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compiled_kv, "COMPILED", compiled)
        sched = Scheduler(config, cache)
        pending = sorted(requests, key=lambda x: x[0])
        finished, step = [], 0
        while pending or sched.has_unfinished():
            while pending and pending[0][0] <= step:
                sched.add_request(pending.pop(0)[1])
            plan = sched.schedule(float(step))
            if not plan.is_empty:
                finished += sched.update_from_output(plan, 9, float(step))
            step += 1
            assert step < 20000
    return sorted(finished, key=lambda r: r.request_id)


@_built
@pytest.mark.parametrize("cls", [Request, _Sub])
@pytest.mark.parametrize("small", [False, True])
def test_a_finished_requests_last_tokens_are_written_when_first_read(cls, small):
    """A request of exactly `Request`'s class that finishes in a C step leaves its last tokens and their times
    unwritten (`FinishedTokens`, its `_cols`) until something reads them: its counts read as the Python run's before
    that, and its tokens, times and times array are the Python run's when read, written once (then `_cols` is None).
    A small cache: preemptions and prompt chunks between (most of those steps the Python methods', which write at
    once)."""
    if small:
        config = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=48, max_model_len=256)
        cache = CacheConfig(num_blocks=40, block_size=4, enable_prefix_caching=True)
    else:
        config = SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=4096, max_model_len=4096)
        cache = CacheConfig(num_blocks=4096, block_size=16, enable_prefix_caching=True)
    py = _finished_unread(config, cache, _requests(60, 30, 40, cls=cls, per_step=5), compiled=False)
    c = _finished_unread(config, cache, _requests(60, 30, 40, cls=cls, per_step=5), compiled=True)
    unwritten = [r for r in c if type(r._cols).__name__ == "FinishedTokens"]
    if cls is _Sub:  # (another class than Request: written at once, as before)
        assert not unwritten
    else:
        assert len(unwritten) > (0 if small else len(c) // 2)
    for p, r in zip(py, c):
        assert (r.request_id, r.num_tokens, r.num_output_tokens, r.num_computed_tokens, r.status, r.finish_time_s) \
            == (p.request_id, p.num_tokens, p.num_output_tokens, p.num_computed_tokens, p.status, p.finish_time_s)
    for r in unwritten:
        assert r._cols.missing == len(r._cols.times) > 0 and not r._token_times
    for p, r in zip(py, c):
        assert r.token_times_s == p.token_times_s and r.output_token_ids == p.output_token_ids
        assert r._cols is None
        assert r.token_times_array.tolist() == p.token_times_array.tolist() == p.token_times_s
        assert r.token_times_s == p.token_times_s and r.num_tokens == p.num_tokens  # (read again: the same)
    for r in unwritten:
        assert r.token_times_array is r._times_array  # the columns' view, as an eager write keeps it
