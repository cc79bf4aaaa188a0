"""Property tests of the scheduler and KV cache under random arrivals, lengths, budgets, cache sizes and
prefix sharing: blocks are conserved, reference counts never go negative and match their holders, no block
is freed twice (BlockPool asserts it), every request finishes with exactly its tokens, none is lost or
duplicated, and the budget and max_num_seqs are never exceeded. The KV cache manager and block pool are the Python
classes or, where built, the compiled ones (`impl`, engine.core.compiled_kv), which must give the same plans."""

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core import CacheConfig, Request, RequestStatus, SamplingParams, Scheduler, SchedulerConfig, compiled_kv
from engine.core.block_pool import NO_HASH, BlockPool
from engine.core.fast_path import FastPath
from engine.core.kv_cache_manager import KVCacheManager

EOS = 1
IMPLS = ["python"] + (["compiled"] if compiled_kv.BUILT else [])
KV_IMPLS = pytest.mark.parametrize("impl", IMPLS)


def _token(request_id: str, position: int) -> int:
    """The fake model: a fixed token per (request, output position); EOS now and then."""
    h = (sum(map(ord, request_id)) * 31 + position * 7) % 97
    return EOS if h == 0 else 2 + h


@st.composite
def workloads(draw):
    block_size = draw(st.sampled_from([1, 2, 4, 8, 16]))
    max_model_len = draw(st.integers(8, 96))
    chunked = draw(st.booleans())
    max_num_seqs = draw(st.integers(1, 8))
    low = max(max_num_seqs, 1 if chunked else max_model_len)
    budget = draw(st.integers(low, max(low, 128)))
    config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        max_model_len=max_model_len,
        enable_chunked_prefill=chunked,
        policy=draw(st.sampled_from(["fcfs", "priority"])),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 4])),
        scheduler_reserve_full_isl=draw(st.booleans()),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.1])),
    )
    min_blocks = -(-max_model_len // block_size) + 1
    cache = CacheConfig(
        num_blocks=draw(st.integers(min_blocks, min_blocks * 4)),
        block_size=block_size,
        enable_prefix_caching=draw(st.booleans()),
    )
    prefixes = [draw(st.lists(st.integers(2, 50), min_size=1, max_size=40)) for _ in range(2)]
    requests = []
    for i in range(draw(st.integers(1, 12))):
        prefix = draw(st.sampled_from([[], prefixes[0], prefixes[1]]))
        suffix = draw(st.lists(st.integers(2, 50), min_size=1, max_size=40))
        prompt = (prefix + suffix)[: max_model_len - 1]
        sampling = SamplingParams(max_tokens=draw(st.integers(1, 24)), ignore_eos=draw(st.booleans()))
        arrival_step = draw(st.integers(0, 20))
        requests.append((arrival_step, Request(f"r{i}", prompt, sampling, float(arrival_step), EOS,
                                               priority=draw(st.integers(0, 2)))))
    return config, cache, requests


def _expected_output(req: Request, max_model_len: int) -> list[int]:
    out = []
    while True:
        token = _token(req.request_id, len(out))
        out.append(token)
        if token == EOS and not req.sampling.ignore_eos:
            return out
        if len(out) >= req.sampling.max_tokens or req.num_prompt_tokens + len(out) >= max_model_len:
            return out


def _check_step(sched: Scheduler, plan, config: SchedulerConfig) -> None:
    assert plan.num_batched_tokens == sum(plan.query_lens) <= config.max_num_batched_tokens
    assert plan.num_seqs <= config.max_num_seqs and sched.num_running <= config.max_num_seqs
    assert len(set(plan.request_ids)) == plan.num_seqs
    assert plan.num_prefill_tokens + plan.num_decode_tokens == plan.num_batched_tokens
    if plan.preempted_request_ids:
        assert plan.admitted_request_ids == ()
    bs = sched.kv.block_size
    for seq in plan.seqs:
        assert seq.num_query_tokens > 0
        assert len(seq.block_ids) * bs >= seq.num_context_tokens + seq.num_query_tokens
        assert seq.num_context_tokens + seq.num_query_tokens < config.max_model_len
    pool = sched.kv.pool
    pool.check_invariants()  # free + used = total, ref_cnt >= 0 and == 0 exactly for free blocks
    holders = Counter(b for r in sched.running for b in r.block_ids)
    assert all(pool.blocks[i].ref_cnt == n for i, n in holders.items())
    assert sum(1 for b in pool.blocks[1:] if b.ref_cnt > 0) == len(holders) == pool.num_used_blocks
    assert sched.num_running_without_output == sum(r.num_output_tokens == 0 for r in sched.running)
    for r in sched.running:
        assert len(r.block_ids) == -(-r.num_computed_tokens // bs) and r.block_table == tuple(r.block_ids)
        assert r.block_ids_head.tolist() == r.block_ids[:len(r.block_ids_head)]  # the KV manager's array of them


def _run(config, cache, requests, check=True, constant=None, fast_paths=True, impl="python"):
    """Drive the scheduler step by step; the fake model samples `_token`, or the int `constant` for every
    seq (passed as one int, as the simulator does, which takes the fast path's columns). `impl`: the KV cache
    manager's ("python" or "compiled")."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(compiled_kv, "COMPILED", impl == "compiled")
        sched = Scheduler(config, cache, fast_paths=fast_paths)
    compiled_class = getattr(compiled_kv, "CompiledKVCacheManager", ())  # (none where the extension is not built)
    assert isinstance(sched.kv, compiled_class) == (impl == "compiled") or cache.num_sliding_groups
    pending = sorted(requests, key=lambda x: x[0])
    finished: list[Request] = []
    plans = []
    step = 0
    while pending or sched.has_unfinished():
        while pending and pending[0][0] <= step:
            sched.add_request(pending.pop(0)[1])
        plan = sched.schedule(float(step))
        if check:
            _check_step(sched, plan, config)
        assert plan.num_emitting_seqs == sum(plan.emits) and plan.num_seqs == len(plan.requests)
        sums = plan.seq_sums()  # what the simulator costs a step by, where the fast path can tell without arrays
        q, c, _ = plan.seq_arrays()
        assert plan.num_context_tokens == int(c.sum())
        if sums is not None:
            dec = c[q == 1]
            assert sums == (int(dec.size), int(dec.sum()), int(dec.max()) if dec.size else 0, q[q > 1].tolist(),
                            c[q > 1].tolist())
        plans.append((plan.request_ids[:], plan.query_lens[:], plan.context_lens[:], plan.block_tables[:],
                      plan.preempted_request_ids, plan.emits[:], plan.num_prefill_tokens,
                      plan.num_new_prefix_hit_tokens, plan.num_kv_blocks_used))
        if constant is None:
            sampled = {rid: _token(rid, sched.requests.get(rid).num_output_tokens) for rid in plan.request_ids}
        else:
            sampled = constant
        finished += sched.update_from_output(plan, sampled, float(step))
        step += 1
        assert step < 5000, "no progress"
    return finished, plans, sched


@KV_IMPLS
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_scheduler_invariants(impl, workload):
    config, cache, requests = workload
    finished, _, sched = _run(config, cache, _fresh(requests), impl=impl)
    assert sorted(r.request_id for r in finished) == sorted(r.request_id for _, r in requests)
    for req in finished:
        assert req.status in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)
        assert req.output_token_ids == _expected_output(req, config.max_model_len)
        assert req.block_ids == []
    assert sched.kv.num_used_blocks == 0 and sched.num_waiting == 0 and sched.num_running == 0
    sched.kv.pool.check_invariants()


@KV_IMPLS
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_bulk_running_path_equals_the_loop(impl, workload):
    config, cache, requests = workload
    _, fast, _ = _run(config, cache, _fresh(requests), check=False, impl=impl)
    _, slow, _ = _run(config, cache, _fresh(requests), check=False, fast_paths=False, impl=impl)
    assert fast == slow


@pytest.mark.skipif(not compiled_kv.BUILT, reason="the compiled KV cache manager is not built")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from([None, 7, EOS]), st.booleans())
def test_compiled_kv_cache_manager_gives_the_python_plans(workload, token, fast_paths):
    """The compiled KV cache manager and block pool (engine.core.compiled_kv) give the plans (block tables
    included), outcomes and free blocks of the Python ones, step by step."""
    config, cache, requests = workload
    py_finished, py, py_sched = _run(config, cache, _fresh(requests), constant=token, fast_paths=fast_paths)
    c_finished, c, c_sched = _run(config, cache, _fresh(requests), constant=token, fast_paths=fast_paths,
                                  impl="compiled")
    assert c == py
    assert _outcome(c_finished) == _outcome(py_finished)
    assert c_sched.kv.pool.block_hash.tolist() == py_sched.kv.pool.block_hash.tolist()
    assert c_sched.kv.pool.num_chains_made == py_sched.kv.pool.num_chains_made


def _fresh(requests):
    return [(step, Request(r.request_id, r.prompt_token_ids, r.sampling, r.arrival_time_s, r.eos_token_id,
                           r.priority)) for step, r in requests]


def _outcome(finished):
    return sorted((r.request_id, r.status, r.output_token_ids, r.token_times_s, r.first_scheduled_time_s,
                   r.finish_time_s, r.num_preemptions, r.num_prefix_hit_tokens) for r in finished)


@KV_IMPLS
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from([7, EOS]))
def test_column_path_equals_token_lists(impl, workload, token):
    """One int for every sampled token (the scheduler's column path, lazily written tokens and times) gives
    the same plans, tokens, times and outcomes as the same token passed per sequence, and keeps every
    invariant at every step."""
    config, cache, requests = workload
    fast_finished, fast, sched = _run(config, cache, _fresh(requests), check=False, constant=token, impl=impl)
    checked_finished, checked, _ = _run(config, cache, _fresh(requests), constant=token, impl=impl)  # reads write tokens
    slow_finished, slow, _ = _run(config, cache, _fresh(requests), constant=token, fast_paths=False, impl=impl)
    assert fast == slow == checked
    assert _outcome(fast_finished) == _outcome(slow_finished) == _outcome(checked_finished)
    assert sched.kv.num_used_blocks == 0 and sched.num_running == 0
    for req in fast_finished + checked_finished + slow_finished:  # (the columns' views, or a conversion)
        assert req.token_times_array.tolist() == req.token_times_s


def _staggered(count: int, per_arrival: int) -> list:
    """`count` requests of 12-16 distinct-ish tokens and 30 outputs, `per_arrival` of them arriving at each whole
    second (the small-cache tests below)."""
    return [(i // per_arrival, Request(f"r{i}", [2 + (i * 7 + k) % 40 for k in range(12 + i % 5)],
                                       SamplingParams(max_tokens=30, ignore_eos=True), float(i // per_arrival), EOS))
            for i in range(count)]


@KV_IMPLS
def test_preempting_steps_stay_on_the_column_path(impl, monkeypatch):
    """FCFS steps that preempt (a cache too small for all running requests) run on the columns, never the
    scheduler's loop, and give the plans and outcomes of the loops alone."""
    config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=64)
    cache = CacheConfig(num_blocks=24, block_size=4, enable_prefix_caching=True)

    declined = []  # plans whose running requests the fast path left to the scheduler's loop
    original = FastPath.schedule_running

    def recorded(self, plan, budget, threshold):
        handled = original(self, plan, budget, threshold)
        if not handled:
            declined.append(plan)
        return handled

    monkeypatch.setattr(FastPath, "schedule_running", recorded)
    fast_finished, fast, _ = _run(config, cache, _staggered(10, 2), constant=7, impl=impl)
    slow_finished, slow, _ = _run(config, cache, _staggered(10, 2), constant=7, fast_paths=False, impl=impl)
    assert sum(len(p[4]) for p in fast) > 0  # preemptions happened
    assert not any(p.preempted_request_ids for p in declined)
    assert fast == slow
    assert _outcome(fast_finished) == _outcome(slow_finished)


def _eager(monkeypatch):
    """Every registration hashed at once (what the prefix cache did before its chains were hashed lazily)."""
    register_chain, register_ends = BlockPool.register_chain, BlockPool.register_ends

    def chain_now(self, *args, **kwargs):
        chain = register_chain(self, *args, **kwargs)
        self._materialize(chain)
        return chain

    def ends_now(self, chains, ids):
        register_ends(self, chains, ids)
        for chain in dict.fromkeys(chains):
            self._materialize(chain)

    monkeypatch.setattr(BlockPool, "register_chain", chain_now)
    monkeypatch.setattr(BlockPool, "register_ends", ends_now)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from([None, 7]))
def test_lazy_hashes_give_the_plans_of_eager_ones(workload, token):
    """Chains registered under placeholders and hashed when a lookup walks into them hit the same blocks, in the
    same order, and evict the same ones as chains hashed when registered: the same plans and outcomes."""
    config, cache, requests = workload
    lazy_finished, lazy, _ = _run(config, cache, _fresh(requests), constant=token)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _eager(monkeypatch)
        eager_finished, eager, sched = _run(config, cache, _fresh(requests), constant=token)
        assert not (sched.kv.pool.block_hash < NO_HASH).any()  # nothing left unhashed
    assert lazy == eager
    assert _outcome(lazy_finished) == _outcome(eager_finished)


def test_blocked_head_is_not_looked_up_at_every_step(monkeypatch):
    """A waiting request whose blocks do not fit is looked up again only after something that could make it fit
    (blocks returned, a chain it could hit, another head), not at every step as the scheduler's loop does; the plans
    and outcomes are the loop's."""
    config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=64)
    cache = CacheConfig(num_blocks=24, block_size=4, enable_prefix_caching=True)

    lookups = Counter()
    original = KVCacheManager.get_computed_blocks

    def counted(self, req):
        lookups[mode] += 1
        return original(self, req)

    monkeypatch.setattr(KVCacheManager, "get_computed_blocks", counted)
    for mode, token in (("fast", 7), ("slow", 7), ("fast-lists", None), ("slow-lists", None)):
        results = _run(config, cache, _staggered(12, 3), constant=token, fast_paths=not mode.startswith("slow"))
        if mode.startswith("fast"):
            fast_finished, fast, _ = results
        else:
            assert results[1] == fast
            assert _outcome(results[0]) == _outcome(fast_finished)
    assert lookups["fast"] < lookups["slow"] and lookups["fast-lists"] < lookups["slow-lists"]


@KV_IMPLS
def test_priority_preemption_between_tied_requests_makes_progress(impl):
    """Two priority-0 requests arriving at the same step that do not fit the cache together (prompts chunked by
    long_prefill_token_threshold), among lower-priority ones: the victim is chosen by (priority, arrival, request
    id), the order vLLM's requests sort by, so the same one yields each time and all finish (a key without the id
    let the two preempt each other in turn forever: the case hypothesis found)."""
    config = SchedulerConfig(max_num_seqs=7, max_num_batched_tokens=67, max_model_len=27, enable_chunked_prefill=False,
                             policy="priority", long_prefill_token_threshold=4, scheduler_reserve_full_isl=False,
                             watermark=0.1)
    cache = CacheConfig(num_blocks=8, block_size=4, enable_prefix_caching=False)
    shared = [20, 41, 24, 46, 29, 47, 21, 20, 36]
    rows = [  # arrival step, id, prompt, max_tokens, ignore_eos, priority
        (4, "r0", shared + [27, 45, 30, 35, 43, 4, 20, 47], 3, False, 1),
        (18, "r1", shared + [27, 45, 30, 35, 43, 4, 20, 47], 5, False, 2),
        (16, "r2", shared + [27, 45, 30, 30, 43, 4, 20, 47], 7, False, 0),
        (13, "r3", shared + [24, 33, 18, 25], 7, False, 2),
        (11, "r4", [20, 35, 25, 19, 10, 28, 38], 21, False, 1),
        (4, "r5", shared + [42], 12, True, 1),
        (16, "r6", [20, 35, 35, 47, 10, 21, 44, 12, 49, 4, 5, 23, 21, 17], 7, True, 0),
        (6, "r7", shared + [20, 35], 19, False, 1)]
    requests = [(step, Request(rid, prompt, SamplingParams(max_tokens=n, ignore_eos=ignore), float(step), EOS,
                               priority=priority)) for step, rid, prompt, n, ignore, priority in rows]
    for fast_paths in (True, False):
        finished, _, sched = _run(config, cache, _fresh(requests), fast_paths=fast_paths, impl=impl)
        assert sorted(r.request_id for r in finished) == [f"r{i}" for i in range(8)]
        assert sched.kv.num_used_blocks == 0
