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

Left out of vLLM's scheduler, none of which the engine has: speculative decoding and lookahead slots,
encoder inputs, LoRA, structured output, KV connectors, async scheduling, pipeline parallelism, Mamba and
sliding-window KV groups, streaming-input sessions.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence

from engine.core.config import CacheConfig, SchedulerConfig
from engine.core.kv_cache_manager import KVCacheManager
from engine.core.request import Request, RequestStatus

_RUNNING = RequestStatus.RUNNING


class ScheduledSeq:
    """One request's share of a step (built on demand from the plan's columns)."""

    __slots__ = (
        "request_id",
        "token_ids",
        "num_query_tokens",
        "num_context_tokens",
        "block_ids",
        "emits_token",
        "is_prefill",
    )

    def __init__(
        self,
        request_id: str,
        token_ids: list[int],
        num_query_tokens: int,
        num_context_tokens: int,
        block_ids: tuple[int, ...],
        emits_token: bool,
        is_prefill: bool,
    ) -> None:
        self.request_id = request_id
        self.token_ids = token_ids  # the tokens computed this step: positions num_context_tokens onwards
        self.num_query_tokens = num_query_tokens
        self.num_context_tokens = num_context_tokens  # tokens whose KV is already cached
        self.block_ids = block_ids  # the whole block table, enough slots for context + query
        self.emits_token = emits_token  # the step reaches the request's last known token: sample one
        self.is_prefill = is_prefill  # computes prompt tokens, or recomputes several after a preemption

    def __repr__(self) -> str:
        return (
            f"ScheduledSeq({self.request_id!r}, query={self.num_query_tokens}, context={self.num_context_tokens}, "
            f"emits={self.emits_token}, prefill={self.is_prefill})"
        )


class StepPlan:
    """What one step computes, as parallel columns (index i is the i-th scheduled sequence, running
    requests first in queue order, then new admissions). Treat it as read-only. `seqs` gives the same as
    `ScheduledSeq` objects; the simulator reads the columns, which cost nothing to build."""

    __slots__ = (
        "step_index",
        "requests",
        "request_ids",
        "query_lens",
        "context_lens",
        "emits",
        "block_tables",
        "num_batched_tokens",
        "num_prefill_tokens",
        "num_decode_tokens",
        "preempted_request_ids",
        "admitted_request_ids",
        "num_new_prefix_hit_tokens",
        "num_kv_blocks_used",
        "num_kv_blocks_total",
        "num_running",
        "num_waiting",
        "_seqs",
    )

    def __init__(self, step_index: int) -> None:
        self.step_index = step_index
        self.requests: list[Request] = []
        self.request_ids: list[str] = []
        self.query_lens: list[int] = []  # tokens computed this step
        self.context_lens: list[int] = []  # tokens already in the KV cache before this step
        self.emits: list[bool] = []
        self.block_tables: list[tuple[int, ...]] = []
        self.num_batched_tokens = 0
        self.num_prefill_tokens = 0  # query tokens of prefill seqs
        self.num_decode_tokens = 0  # = number of decode seqs (one token each)
        self.preempted_request_ids: tuple[str, ...] = ()
        self.admitted_request_ids: tuple[str, ...] = ()  # taken from the waiting queue (new or resumed)
        self.num_new_prefix_hit_tokens = 0  # prefix-cache hit tokens of the admitted requests
        self.num_kv_blocks_used = 0  # after this step's allocations
        self.num_kv_blocks_total = 0
        self.num_running = 0
        self.num_waiting = 0
        self._seqs: tuple[ScheduledSeq, ...] | None = None

    @property
    def is_empty(self) -> bool:
        return not self.requests

    @property
    def num_seqs(self) -> int:
        return len(self.requests)

    @property
    def seqs(self) -> tuple[ScheduledSeq, ...]:
        if self._seqs is None:
            self._seqs = tuple(
                ScheduledSeq(
                    req.request_id,
                    req.all_token_ids[ctx : ctx + q],
                    q,
                    ctx,
                    table,
                    emit,
                    ctx < req.num_prompt_tokens or q > 1,
                )
                for req, q, ctx, emit, table in zip(
                    self.requests, self.query_lens, self.context_lens, self.emits, self.block_tables
                )
            )
        return self._seqs

    def _add(self, req: Request, num_new_tokens: int) -> None:
        """Schedule `num_new_tokens` of `req` and advance its computed tokens (vLLM does this right after
        scheduling too, in `_update_after_schedule`)."""
        ctx = req.num_computed_tokens
        self.requests.append(req)
        self.request_ids.append(req.request_id)
        self.query_lens.append(num_new_tokens)
        self.context_lens.append(ctx)
        self.emits.append(ctx + num_new_tokens == len(req.all_token_ids))
        self.block_tables.append(req.block_table)
        self.num_batched_tokens += num_new_tokens
        if num_new_tokens == 1 and ctx >= req.num_prompt_tokens:
            self.num_decode_tokens += 1
        else:
            self.num_prefill_tokens += num_new_tokens
        req.num_computed_tokens = ctx + num_new_tokens

    def _remove(self, req: Request) -> int:
        """Unschedule `req` (a victim of priority preemption); returns its tokens."""
        i = self.requests.index(req)
        n = self.query_lens[i]
        is_decode = n == 1 and self.context_lens[i] >= req.num_prompt_tokens
        for column in (self.requests, self.request_ids, self.query_lens, self.context_lens, self.emits,
                       self.block_tables):
            del column[i]
        self.num_batched_tokens -= n
        if is_decode:
            self.num_decode_tokens -= 1
        else:
            self.num_prefill_tokens -= n
        return n


class _FCFSQueue:
    def __init__(self) -> None:
        self._q: deque[Request] = deque()

    def __len__(self) -> int:
        return len(self._q)

    def add(self, req: Request) -> None:
        self._q.append(req)

    def prepend(self, req: Request) -> None:
        self._q.appendleft(req)

    def peek(self) -> Request:
        return self._q[0]

    def pop(self) -> Request:
        return self._q.popleft()

    def remove(self, req: Request) -> None:
        self._q.remove(req)


class _PriorityQueue:
    """Lowest (priority, arrival time, request id) first, as vLLM's `Request.__lt__` orders them."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, str, Request]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, req: Request) -> None:
        heapq.heappush(self._heap, (req.priority, req.arrival_time_s, req.request_id, req))

    prepend = add  # a preempted request goes back by its priority

    def peek(self) -> Request:
        return self._heap[0][3]

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[3]

    def remove(self, req: Request) -> None:
        self._heap = [e for e in self._heap if e[3] is not req]
        heapq.heapify(self._heap)


class Scheduler:
    def __init__(self, config: SchedulerConfig, cache: CacheConfig) -> None:
        self.config = config
        self.cache_config = cache
        self.kv = KVCacheManager(cache, config.max_model_len, config.watermark)
        self.waiting = _FCFSQueue() if config.policy == "fcfs" else _PriorityQueue()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}  # every unfinished request by id
        self.num_steps = 0
        self._pending: StepPlan | None = None  # the plan whose output is still to come
        self._pending_aborted = False  # a request of the pending plan was aborted
        # Running requests without an output token yet: only they can compute a single prompt token, which
        # counts as prefill; when there are none, the bulk path need not look for them.
        self._num_running_without_output = 0

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

    def get_request(self, request_id: str) -> Request | None:
        return self.requests.get(request_id)

    # ---- requests in and out ----
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
        stop = set(req.sampling.stop_token_ids)
        if req.eos_token_id is not None and not req.sampling.ignore_eos:
            stop.add(req.eos_token_id)
        req.stop_token_set = frozenset(stop)
        req.next_check_len = req.num_prompt_tokens + 1
        self.kv.update_block_hashes(req)
        self.waiting.add(req)
        self.requests[req.request_id] = req

    def abort_request(self, request_id: str, now_s: float | None = None) -> Request | None:
        """Finish a request early (FINISHED_ABORTED) and free its blocks; None if it is unknown or done."""
        req = self.requests.get(request_id)
        if req is None:
            return None
        if req.status is _RUNNING:
            self.running.remove(req)
            self._num_running_without_output -= req.num_output_tokens == 0
            self._pending_aborted = self._pending is not None
        else:
            self.waiting.remove(req)
        self._finish(req, RequestStatus.FINISHED_ABORTED, now_s)
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
        budget = self._schedule_running(plan, self.config.max_num_batched_tokens, threshold)
        if not plan.preempted_request_ids:
            self._schedule_waiting(plan, budget, threshold, now_s)
        plan.num_kv_blocks_used = self.kv.num_used_blocks
        plan.num_kv_blocks_total = self.kv.num_usable_blocks
        plan.num_running = len(self.running)
        plan.num_waiting = len(self.waiting)
        if plan.requests:
            self._pending = plan
            self.num_steps += 1
        return plan

    def _schedule_running(self, plan: StepPlan, budget: int, threshold: int) -> int:
        if self._schedule_running_bulk(plan, budget, threshold):
            return budget - plan.num_batched_tokens
        running = self.running
        kv = self.kv
        max_pos = self.config.max_model_len - 1
        preempted: list[str] = []
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            computed = req.num_computed_tokens
            n = len(req.all_token_ids) - computed
            if 0 < threshold < n:
                n = threshold
            n = min(n, budget, max_pos - computed)
            assert n > 0, req  # a request reaching max_model_len has stopped
            while not kv.allocate_slots(req, n):
                victim, i, budget = self._pop_victim(plan, i, budget)
                self._preempt(victim)
                preempted.append(victim.request_id)
                if victim is req:
                    break
            if req.status is not _RUNNING:
                break
            plan._add(req, n)
            budget -= n
            i += 1
        plan.preempted_request_ids = tuple(preempted)
        return budget

    def _schedule_running_bulk(self, plan: StepPlan, budget: int, threshold: int) -> bool:
        """The loop of `_schedule_running` for the common case, column by column: when every running
        request gets all its remaining tokens (within budget and threshold) and the free blocks cover all
        of them, nobody is cut or preempted, and only requests that need a new block or fill one (or
        prefill) need the KV cache manager. Returns False, having changed nothing, otherwise."""
        running = self.running
        ctx = [r.num_computed_tokens for r in running]
        ntok = [len(r.all_token_ids) for r in running]
        rem = [t - c for t, c in zip(ntok, ctx)]
        total = sum(rem)
        if total > budget or (threshold and max(rem, default=0) > threshold):
            return False
        # No max_model_len cut either: a running request has fewer than max_model_len tokens.
        kv = self.kv
        bs = kv.block_size
        # Decodes need the manager when their token opens a block (c % bs == 0) or fills one (c % bs ==
        # bs - 1), that is when (c + 1) % bs is 1 or 0.
        touched = [i for i, (c, m) in enumerate(zip(ctx, rem)) if m > 1 or (c + 1) % bs < 2]
        num_needed = sum(-(-ntok[i] // bs) - len(running[i].blocks) for i in touched)
        if num_needed > kv.num_free_blocks:
            return False
        for i in touched:
            allocated = kv.allocate_slots(running[i], rem[i])
            assert allocated
        plan.requests = running[:]
        plan.request_ids = [r.request_id for r in running]
        plan.query_lens = rem
        plan.context_lens = ctx
        plan.emits = [True] * len(running)
        plan.block_tables = [r.block_table for r in running]
        plan.num_batched_tokens = total
        # Prefill seqs: several tokens, or the single last prompt token (no output yet: t == prompt length).
        num_prefill_tokens = sum(m for m in rem if m > 1)
        if self._num_running_without_output:
            num_prefill_tokens += sum(1 for r, t, m in zip(running, ntok, rem) if m == 1 and t == r.num_prompt_tokens)
        plan.num_prefill_tokens = num_prefill_tokens
        plan.num_decode_tokens = total - num_prefill_tokens
        for r, t in zip(running, ntok):
            r.num_computed_tokens = t
        return True

    def _pop_victim(self, plan: StepPlan, i: int, budget: int) -> tuple[Request, int, int]:
        """Remove the request to preempt from the running queue; returns it, the index of the request being
        scheduled and the budget, both adjusted if the victim was already scheduled this step."""
        running = self.running
        if self.config.policy == "fcfs":
            return running.pop(), i, budget
        victim = max(running, key=lambda r: (r.priority, r.arrival_time_s))
        idx = running.index(victim)
        del running[idx]
        if idx < i:
            i -= 1
            budget += plan._remove(victim)
        return victim, i, budget

    def _preempt(self, req: Request) -> None:
        self._num_running_without_output -= req.num_output_tokens == 0
        self.kv.free(req)
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.waiting.prepend(req)

    def _schedule_waiting(self, plan: StepPlan, budget: int, threshold: int, now_s: float | None) -> None:
        cfg = self.config
        kv = self.kv
        waiting = self.waiting
        running = self.running
        admitted: list[str] = []
        while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
            req = waiting.peek()
            hit_blocks, num_hit_tokens = kv.get_computed_blocks(req)
            n = len(req.all_token_ids) - num_hit_tokens
            if 0 < threshold < n:
                n = threshold
            if not cfg.enable_chunked_prefill and n > budget:
                break
            n = min(n, budget)
            if not kv.allocate_slots(
                req,
                n,
                hit_blocks,
                full_sequence_must_fit=cfg.scheduler_reserve_full_isl,
                apply_watermark=bool(running),
            ):
                break
            waiting.pop()
            running.append(req)
            self._num_running_without_output += req.num_output_tokens == 0
            req.status = _RUNNING
            req.num_computed_tokens = num_hit_tokens
            if req.num_prefix_hit_tokens is None:
                req.num_prefix_hit_tokens = num_hit_tokens
            if now_s is not None and req.first_scheduled_time_s is None:
                req.first_scheduled_time_s = now_s
            plan._add(req, n)
            plan.num_new_prefix_hit_tokens += num_hit_tokens
            admitted.append(req.request_id)
            budget -= n
        plan.admitted_request_ids = tuple(admitted)

    def update_from_output(
        self, plan: StepPlan, sampled: dict[str, int] | Sequence[int], now_s: float | None = None
    ) -> list[Request]:
        """Append the sampled tokens, stop finished requests and free their blocks; returns them.

        `sampled` maps request id to token for every seq with `emits_token` (others are ignored), or is a
        sequence aligned with the plan's seqs (entries of non-emitting seqs are ignored). Requests aborted
        since `schedule()` are skipped.
        """
        if plan.is_empty:
            return []
        assert plan is self._pending, "update_from_output() takes the plan of the last schedule()"
        self._pending = None
        if isinstance(sampled, dict):
            sampled = [sampled[rid] if emit else 0 for rid, emit in zip(plan.request_ids, plan.emits)]
        pairs = zip(plan.requests, sampled)
        if self._pending_aborted or not all(plan.emits):
            self._pending_aborted = False
            pairs = [(r, t) for r, t, e in zip(plan.requests, sampled, plan.emits) if e and r.status is _RUNNING]
        to_check: list[tuple[Request, int]] = []
        if now_s is None:
            for req, token in pairs:
                tokens = req.all_token_ids
                tokens.append(token)
                if len(tokens) >= req.next_check_len or token in req.stop_token_set:
                    to_check.append((req, token))
        else:
            for req, token in pairs:
                tokens = req.all_token_ids
                tokens.append(token)
                req.token_times_s.append(now_s)
                if len(tokens) >= req.next_check_len or token in req.stop_token_set:
                    to_check.append((req, token))
        finished = [req for req, token in to_check if self._check(req, token, now_s)]
        if finished:
            self.running = [r for r in self.running if r.status is _RUNNING]
        return finished

    def _check(self, req: Request, token: int, now_s: float | None) -> bool:
        """The rare events of a new token: the first output, a full block to hash, a stop (vLLM's
        check_stop order: EOS unless ignore_eos and stop tokens, then the length limits). True if finished."""
        num_tokens = len(req.all_token_ids)
        if num_tokens == req.num_prompt_tokens + 1:
            self._num_running_without_output -= 1
        kv = self.kv
        bs = kv.block_size
        if kv.enable_caching and num_tokens % bs == 0:
            kv.update_block_hashes(req)
        if token in req.stop_token_set:
            self._finish(req, RequestStatus.FINISHED_STOPPED, now_s)
            return True
        if num_tokens >= req.max_num_tokens:
            self._finish(req, RequestStatus.FINISHED_LENGTH_CAPPED, now_s)
            return True
        next_block = (num_tokens // bs + 1) * bs if kv.enable_caching else req.max_num_tokens
        req.next_check_len = min(next_block, req.max_num_tokens)
        return False

    def _finish(self, req: Request, status: RequestStatus, now_s: float | None) -> None:
        req.status = status
        req.finish_time_s = now_s
        self.kv.free(req)
        del self.requests[req.request_id]
