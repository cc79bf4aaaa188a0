"""The continuous-batching scheduler of vLLM V1 (`vllm/v1/core/sched/scheduler.py`), torch-free, so that the
engine runs its plans on a device and the simulator charges them modelled time.

    sched = Scheduler(SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=4096),
                      CacheConfig(num_blocks=4096, block_size=16))
    sched.add_request(req)
    while sched.has_unfinished():
        plan = sched.schedule(now_s)                 # StepPlan; may be empty (see below)
        sampled = executor(plan)                     # {request_id: token} for every seq with emits_token
        finished = sched.update_from_output(plan, sampled, now_s)

An empty plan means nothing can run now: the executor waits for the next arrival. The one exception is a
plan that only preempted (`plan.preempted_request_ids` non-empty): call `schedule()` again at once, as vLLM's
engine loop does. `now_s` is the executor's clock (wall or virtual); the scheduler only stamps it on requests
(first scheduled, token and finish times) and never reads a clock itself.

The common cases, every running request scheduled in full and (the simulator's) one token id sampled by every
sequence, go through `engine.core.fast_path` with the same effect; `fast_paths=False` keeps every step on the
loops below (for tests).

Left out of vLLM's scheduler, none of which the engine has: speculative decoding and lookahead slots,
encoder inputs, LoRA, structured output, KV connectors, async scheduling, pipeline parallelism, Mamba KV
groups, streaming-input sessions (sliding-window groups: `KVCacheManager`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from engine.core.compiled_fast import bind_step, compiled_step, new_fast_path
from engine.core.compiled_kv import new_kv_cache_manager
from engine.core.config import CacheConfig, SchedulerConfig
from engine.core.fast_path import FastPath
from engine.core.kv_cache_manager import KVCacheManager
from engine.core.request import Request, RequestStatus
from engine.core.request_queue import FCFSRequestQueue, create_request_queue
from engine.core.step_plan import StepPlan

if TYPE_CHECKING:
    from engine.core.compiled_fast import CompiledFastPath

_RUNNING = RequestStatus.RUNNING


class Scheduler:
    def __init__(self, config: SchedulerConfig, cache: CacheConfig, fast_paths: bool = True) -> None:
        self.config = config
        self.cache_config = cache
        # The compiled manager where it is built (engine.core.compiled_kv; ROOFLINE_PURE_PYTHON=1: the Python one).
        self.kv: KVCacheManager = new_kv_cache_manager(cache, config.max_model_len, config.watermark)
        self.waiting = create_request_queue(config.policy)
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}  # every unfinished request by id
        self.num_steps = 0
        # Running requests without an output token yet: only they can compute a single prompt token, which
        # counts as prefill; while there are none, the fast path need not look for them.
        self.num_running_without_output = 0
        self._pending: StepPlan | None = None  # the plan whose output is still to come
        self._pending_aborted = False  # a request of the pending plan was aborted
        # (The fast path's batched decode allocation knows one block table per request: not a hybrid model's.)
        # (In C where the KV cache manager is: engine.core.compiled_fast.)
        self._fast: FastPath | None = new_fast_path(self) if fast_paths and not cache.num_sliding_groups else None
        # The whole step in C (`schedule_step`, `update_step`, `add_request_step`: engine.core.compiled_fast) where the
        # compiled fast path serves an FCFS scheduler of exactly this class: the same statements as `schedule`,
        # `update_from_output` and `add_request` below, which stay the reference.
        self._step: CompiledFastPath | None = None
        if type(self) is Scheduler and type(self.waiting) is FCFSRequestQueue:
            self._step = compiled_step(self._fast)
        if self._step is not None:  # this scheduler's own entry points are the C methods (no Python call between)
            self.schedule = self._step.schedule_step  # type: ignore[method-assign]
            self.update_from_output = self._step.update_step  # type: ignore[method-assign]
            self.add_request = self._step.add_request_step  # type: ignore[method-assign]
        # The waiting queue's head when its blocks did not fit, with what its failure depended on (`_Blocked`).
        self._blocked: _Blocked | None = None
        # The stop tokens of a request (`add_request`) by its stop_token_ids and the EOS that stops it.
        self._stop_sets: dict[tuple[tuple[int, ...], int | None], frozenset[int]] = {}

    # ---- queries ----
    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_kv_blocks_used(self) -> int:
        return self.kv.num_used_blocks

    @property
    def num_kv_blocks_total(self) -> int:
        return self.kv.num_usable_blocks

    @property
    def kv_usage(self) -> float:
        return self.kv.num_used_blocks / self.kv.num_usable_blocks

    def has_unfinished(self) -> bool:
        return bool(self.requests)

    # ---- requests in and out ----
    def shutdown(self) -> None:
        """End of the run (vLLM's `Scheduler.shutdown`): the prefix cache's chains are released
        (`BlockPool.release_chains`), so that reference counting frees the scheduler when it is dropped."""
        self.kv.pool.release_chains()

    def add_request(self, req: Request) -> None:
        """Queue a new request. Raises ValueError for a duplicate id, a prompt of max_model_len tokens or
        more (vLLM's input check), or a request whose tokens could never fit in the whole KV cache."""
        cfg = self.config
        if req.request_id in self.requests:
            raise ValueError(f"request id {req.request_id!r} is already in the scheduler")
        if req.status is not RequestStatus.WAITING or req.num_computed_tokens or req.num_output_tokens:
            raise ValueError(f"request {req.request_id!r} was already scheduled; pass a fresh Request")
        if req.num_prompt_tokens >= cfg.max_model_len:
            raise ValueError(
                f"request {req.request_id!r}: prompt of {req.num_prompt_tokens} tokens must be shorter than "
                f"max_model_len ({cfg.max_model_len})"
            )
        max_len = min(req.num_prompt_tokens + req.sampling.max_tokens, cfg.max_model_len)
        num_blocks = -(-max_len // self.kv.block_size)
        if num_blocks > self.kv.num_usable_blocks:
            raise ValueError(
                f"request {req.request_id!r}: {max_len} tokens need {num_blocks} KV blocks but the cache has "
                f"{self.kv.num_usable_blocks}; raise num_blocks or lower max_tokens/max_model_len"
            )
        req.max_num_tokens = max_len
        eos = None if req.sampling.ignore_eos else req.eos_token_id
        key = (tuple(req.sampling.stop_token_ids), eos)
        stop = self._stop_sets.get(key)
        if stop is None:  # (one set per kind of request, not one each)
            stop = self._stop_sets[key] = frozenset(key[0]) | (set() if eos is None else {eos})
        req.stop_token_set = stop
        req.next_check_len = req.num_prompt_tokens + 1
        self.waiting.add_request(req)
        self.requests[req.request_id] = req

    def abort_request(self, request_id: str, now_s: float | None = None) -> Request | None:
        """Finish a request early (FINISHED_ABORTED) and free its blocks; None if it is unknown or done."""
        req = self.requests.get(request_id)
        if req is None:
            return None
        if self._fast is not None:
            self._fast.flush()
        if req.status is _RUNNING:
            self.running.remove(req)
            self.num_running_without_output -= req.num_output_tokens == 0
            self._pending_aborted = self._pending is not None
        else:
            self.waiting.remove_request(req)
        self.finish_request(req, RequestStatus.FINISHED_ABORTED, now_s)
        return req

    # ---- the step ----
    def schedule(self, now_s: float | None = None) -> StepPlan:
        # The algorithm (vLLM V1). There is no prefill or decode phase: each request has num_computed_tokens
        # chasing num_tokens (prompt + generated), and a step gives each request a number of tokens to
        # compute out of a token budget of max_num_batched_tokens, so prefill chunks and decodes share one
        # batch. RUNNING requests go first, in queue order: each gets min(tokens left, budget left) (capped
        # by long_prefill_token_threshold and max_model_len), which is how a long prompt is chunked. If its
        # KV blocks cannot be allocated, requests are preempted from the tail of the running queue (under
        # "priority": the lowest priority, latest arrival) - freed and sent to the front of the waiting
        # queue to be recomputed - until it fits or it was itself preempted. Then, only if nothing was
        # preempted this step, WAITING requests are admitted in queue order while the budget, max_num_seqs
        # and free blocks allow: each first takes its longest prefix-cache hit (whole blocks, at most
        # num_tokens - 1 tokens) and stops the admissions if it does not fit (whole sequence must fit with
        # scheduler_reserve_full_isl; without chunked prefill, the whole rest of the prompt must fit the
        # budget).
        assert self._pending is None, "update_from_output() must follow every non-empty schedule()"
        plan = StepPlan(self.num_steps)
        threshold = self.config.long_prefill_token_threshold
        if len(self.running) + len(self.waiting) <= 1:
            threshold = 0  # no one to starve (vLLM)
        budget = self.config.max_num_batched_tokens
        # The fast path takes the running queue when every request in it gets all its tokens (most steps).
        if self._fast is None or not self._fast.schedule_running(plan, budget, threshold):
            self._schedule_running(plan, budget, threshold)
        if not plan.preempted_request_ids:
            self._schedule_waiting(plan, budget - plan.num_batched_tokens, threshold, now_s)
        plan.num_kv_blocks_used = self.kv.num_used_blocks
        plan.num_kv_blocks_total = self.kv.num_usable_blocks
        plan.num_running = len(self.running)
        plan.num_waiting = len(self.waiting)
        if plan.requests:
            self._pending = plan
            self.num_steps += 1
        return plan

    def _schedule_running(self, plan: StepPlan, budget: int, threshold: int) -> None:
        """The running queue in order, preempting from its tail when KV blocks run out."""
        running = self.running
        max_pos = self.config.max_model_len - 1
        preempted: list[str] = []
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            computed = req.num_computed_tokens
            num_new_tokens = req.num_tokens - computed
            if 0 < threshold < num_new_tokens:
                num_new_tokens = threshold
            num_new_tokens = min(num_new_tokens, budget, max_pos - computed)
            assert num_new_tokens > 0, req  # a request reaching max_model_len has stopped
            scheduled = self._allocate_and_add(plan, req, num_new_tokens, i, budget, preempted)
            if scheduled is None:
                break
            i, budget = scheduled
        plan.preempted_request_ids = tuple(preempted)

    def _allocate_and_add(self, plan: StepPlan, req: Request, num_new_tokens: int, i: int, budget: int,
                          preempted: list[str]) -> tuple[int, int] | None:
        """Running request `req` (at index `i` of the running queue) gets slots for `num_new_tokens`, preempting
        from the tail of the queue (`_pop_victim`, their ids appended to `preempted`) until they fit or it is
        itself preempted, and is added to the plan: the index of the next request and the budget left, or None if
        it was preempted (the pass ends)."""
        while not self.kv.allocate_slots(req, num_new_tokens):
            victim, i, budget = self._pop_victim(plan, i, budget)
            self.preempt_request(victim)
            preempted.append(victim.request_id)
            if victim is req:
                break
        if req.status is not _RUNNING:
            return None
        self._add_to_plan(plan, req, num_new_tokens)
        return i + 1, budget - num_new_tokens

    def _pop_victim(self, plan: StepPlan, i: int, budget: int) -> tuple[Request, int, int]:
        """Remove the request to preempt from the running queue; returns it, the index of the request being
        scheduled and the budget, both adjusted if the victim was already scheduled this step."""
        running = self.running
        if self.config.policy == "fcfs":
            return running.pop(), i, budget
        # vLLM 0.32 `Scheduler.schedule` takes max(running, key=(priority, arrival_time)); its arrival times are
        # wall-clock floats that never tie, where a simulated burst's do. Ties are broken by request id, the
        # order of the waiting heap (vLLM `Request.__lt__`): with a partial key, two tied requests that do not
        # fit together take turns preempting each other and neither finishes.
        victim = max(running, key=lambda r: (r.priority, r.arrival_time_s, r.request_id))
        idx = running.index(victim)
        del running[idx]
        if idx < i:
            i -= 1
            budget += plan.remove_seq(victim)
        return victim, i, budget

    def preempt_request(self, req: Request) -> None:
        """Free a request taken off the running queue and send it to the front of the waiting queue (by
        priority under "priority") to be recomputed."""
        self.num_running_without_output -= req.num_output_tokens == 0
        self.kv.free(req)
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.waiting.prepend_request(req)

    def _schedule_waiting(self, plan: StepPlan, budget: int, threshold: int, now_s: float | None) -> None:
        """Admit waiting requests in queue order until one does not fit."""
        cfg = self.config
        kv = self.kv
        admitted: list[str] = []
        blocked = self._blocked
        while self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = self.waiting.peek_request()
            if blocked is not None and blocked.req is req and blocked.holds(self, budget, threshold):
                break  # the same head fails again (the usual step of a full cache: no need to look it up)
            hit_block_ids, num_hit_tokens = kv.get_computed_blocks(req)
            num_new_tokens = req.num_tokens - num_hit_tokens
            if 0 < threshold < num_new_tokens:
                num_new_tokens = threshold
            if not cfg.enable_chunked_prefill and num_new_tokens > budget:
                break
            num_new_tokens = min(num_new_tokens, budget)
            # (full_sequence_must_fit, apply_watermark) by position: keywords cost the compiled manager ~0.3 us more a
            # call to parse. vLLM keeps the watermark for running requests.
            if not kv.allocate_slots(req, num_new_tokens, hit_block_ids, cfg.scheduler_reserve_full_isl,
                                     bool(self.running)):
                if self._fast is not None:
                    self._blocked = _Blocked.of(self, req, budget, threshold)
                break
            self.waiting.pop_request()
            self._admit(req, num_hit_tokens, now_s)
            self._add_to_plan(plan, req, num_new_tokens)
            plan.num_new_prefix_hit_tokens += num_hit_tokens
            admitted.append(req.request_id)
            budget -= num_new_tokens
        plan.admitted_request_ids = tuple(admitted)

    def _admit(self, req: Request, num_hit_tokens: int, now_s: float | None) -> None:
        """Move a request from the waiting to the running queue, its prefix-cache hit computed."""
        self.running.append(req)
        self.num_running_without_output += req.num_output_tokens == 0
        req.status = _RUNNING
        req.num_computed_tokens = num_hit_tokens
        if req.num_prefix_hit_tokens is None:
            req.num_prefix_hit_tokens = num_hit_tokens
        if now_s is not None and req.first_scheduled_time_s is None:
            req.first_scheduled_time_s = now_s

    @staticmethod
    def _add_to_plan(plan: StepPlan, req: Request, num_new_tokens: int) -> None:
        """Schedule the tokens and advance the request's computed tokens (vLLM does this right after
        scheduling too, in `_update_after_schedule`)."""
        plan.add_seq(req, num_new_tokens)
        req.num_computed_tokens += num_new_tokens

    # ---- the output ----
    def update_from_output(
        self, plan: StepPlan, sampled: dict[str, int] | Sequence[int] | int, now_s: float | None = None
    ) -> list[Request]:
        """Append the sampled tokens, stop finished requests and free their blocks; returns them.

        `sampled` maps request id to token for every seq with `emits_token` (others are ignored), or is a
        sequence aligned with the plan's seqs (entries of non-emitting seqs are ignored), or is one int: the
        token every emitting seq sampled (the simulator's case, which goes the fast path). Requests aborted
        since `schedule()` are skipped.
        """
        if plan.is_empty:
            return []
        assert plan is self._pending, "update_from_output() takes the plan of the last schedule()"
        self._pending = None
        if self._fast is not None:
            if isinstance(sampled, int) and not self._pending_aborted:
                finished = self._fast.update(plan, sampled, now_s)
                if finished is not None:
                    return finished
            self._fast.flush()
        return self._update_lists(plan, sampled, now_s)

    def _update_lists(self, plan: StepPlan, sampled: dict[str, int] | Sequence[int] | int,
                      now_s: float | None) -> list[Request]:
        """`update_from_output` token by token (not the fast path's update)."""
        emits = plan.emits
        if isinstance(sampled, int):
            sampled = [sampled] * plan.num_seqs
        elif isinstance(sampled, dict):
            sampled = [sampled[r.request_id] if emit else 0 for r, emit in zip(plan.requests, emits)]
        finished = []
        for req, token, emit in zip(plan.requests, sampled, emits):
            if not emit or req.status is not _RUNNING:  # a chunk mid-prompt, or aborted since schedule()
                continue
            req.append_output_token(token, now_s)
            # Most tokens need no closer look: not the first, filling no block, stopping nothing.
            if req.num_tokens < req.next_check_len and token not in req.stop_token_set:
                continue
            if self._check_stop(req, token, now_s):
                finished.append(req)
        self._pending_aborted = False
        if finished:
            self.running = [r for r in self.running if r.status is _RUNNING]
        return finished

    def _check_stop(self, req: Request, token: int, now_s: float | None) -> bool:
        """The rare events of a new token: the first output, a stop (vLLM's
        check_stop order: EOS unless ignore_eos and stop tokens, then the length limits). True if finished."""
        num_tokens = req.num_tokens
        if num_tokens == req.num_prompt_tokens + 1:
            self.num_running_without_output -= 1
        if token in req.stop_token_set:
            self.finish_request(req, RequestStatus.FINISHED_STOPPED, now_s)
            return True
        if num_tokens >= req.max_num_tokens:
            self.finish_request(req, RequestStatus.FINISHED_LENGTH_CAPPED, now_s)
            return True
        req.next_check_len = req.max_num_tokens
        return False

    def finish_request(self, req: Request, status: RequestStatus, now_s: float | None) -> None:
        """Stamp the finish and free the request's blocks (it has left both queues)."""
        req.status = status
        req.finish_time_s = now_s
        self.kv.free(req)
        del self.requests[req.request_id]


class _Blocked:
    """A waiting request whose blocks did not fit, and the state its failure depended on. While that state holds,
    trying it again fails again (`holds`), so the scheduler skips the lookup and the allocation (a fast path:
    `fast_paths=False` tries every time). It fails again while the free blocks stay below what it needed then
    (`KVCacheManager.failed_need`), as long as what it needs cannot have dropped: evictions only shorten a
    prefix-cache hit, which never lowers the need (each lost hit block is one more to allocate and at most one
    fewer idle hit to take out of the free queue: the full-sequence check of `scheduler_reserve_full_isl`, which
    decides whenever it holds; a smaller chunk can need less, so with a hit the failure is carried over only under
    that check); a hit block returned to the free queue is one more idle hit to take out of it; no hit block is
    taken out of the free queue by anyone else, since no one is admitted past the head; a larger budget only
    schedules more tokens. What could lower the need: a longer hit (a new chain starting with one of its hashes;
    blocks registered in a chain it compares, which only an open chain takes), a lower threshold, or the watermark
    no longer applying."""

    __slots__ = ("req", "num_tokens", "need", "budget", "threshold", "watermark", "first_hash", "num_chains")

    def __init__(self, req: Request, need: int, budget: int, threshold: int, watermark: bool,
                 first_hash: int | None, num_chains: int | None) -> None:
        self.req = req
        self.num_tokens = req.num_tokens  # (the same request back at the head later holds more)
        self.need = need
        self.budget = budget
        self.threshold = threshold
        self.watermark = watermark
        self.first_hash = first_hash  # its hit was empty because no chain started with it
        self.num_chains = num_chains  # it had candidate chains, all closed: no new chain since

    @classmethod
    def of(cls, sched: Scheduler, req: Request, budget: int, threshold: int) -> _Blocked | None:
        """After `req`'s allocation failed (its lookup just done); None when its failure cannot be carried over."""
        kv = sched.kv
        pool = kv.pool
        first_hash = num_chains = None
        max_num_blocks = (req.num_tokens - 1) // kv.block_size
        if kv.enable_caching and max_num_blocks > 0:
            first_hash = req.block_hashes[0]
            if pool.may_hit(first_hash):  # then the lookup hashed all it compares
                if not (sched.config.scheduler_reserve_full_isl
                        and pool.candidates_closed(req.block_hashes, max_num_blocks)):
                    return None
                first_hash, num_chains = None, pool.num_chains_made
        return cls(req, kv.failed_need, budget, threshold, bool(sched.running), first_hash, num_chains)

    def holds(self, sched: Scheduler, budget: int, threshold: int) -> bool:
        pool = sched.kv.pool
        return (pool.num_free_blocks < self.need and self.req.num_tokens == self.num_tokens
                and budget >= self.budget and threshold == self.threshold and bool(sched.running) == self.watermark
                and (self.first_hash is None or not pool.may_hit(self.first_hash))
                and (self.num_chains is None or pool.num_chains_made == self.num_chains))


# The scheduler's step in C reads and makes `_Blocked`s (`holds` and `of` in C), and calls `add_request` for its errors
# (engine.core.compiled_fast).
bind_step(_Blocked, Scheduler.add_request)
