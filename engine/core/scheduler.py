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
import itertools
import operator
from collections import deque
from collections.abc import Sequence

import numpy as np

from engine.core.block_hash import MASK_63, constant_block_terms
from engine.core.config import CacheConfig, SchedulerConfig
from engine.core.kv_cache_manager import KVCacheManager
from engine.core.request import Request, RequestStatus

_RUNNING = RequestStatus.RUNNING
# The column path's reductions, called as ufunc methods: `arr.sum()` and friends go through a Python wrapper
# each, a measurable share of a step of ~20 array operations on ~150 rows.
_sum = np.add.reduce
_max = np.maximum.reduce
_all = np.logical_and.reduce


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
    requests first in queue order, then new admissions). Treat it as read-only, and read `block_tables` and
    `seqs` before `update_from_output` (they are built on first access from the requests' block lists).
    `seq_arrays()` gives query lengths, context lengths and emits as numpy arrays, which is what the
    simulator reads; the list columns are built on access."""

    __slots__ = (
        "step_index",
        "requests",
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
        "_query",
        "_context",
        "_emits",
        "_num_blocks",
        "_bulk",
        "_arrays",
        "_seqs",
        "_tables",
    )

    def __init__(self, step_index: int) -> None:
        self.step_index = step_index
        self.requests: list[Request] = []
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
        # Per sequence: tokens computed this step, tokens already in the KV cache before it, whether it
        # samples a token, and the length of its block table. `_bulk` holds the same for the leading
        # sequences as arrays (the scheduler's column path), the lists those after them.
        self._query: list[int] = []
        self._context: list[int] = []
        self._emits: list[bool] = []
        self._num_blocks: list[int] = []
        self._bulk: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # query, context, num_blocks
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._seqs: tuple[ScheduledSeq, ...] | None = None
        self._tables: list[tuple[int, ...]] | None = None

    @property
    def is_empty(self) -> bool:
        return not self.requests

    @property
    def num_seqs(self) -> int:
        return len(self.requests)

    def seq_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query lengths int64, context lengths int64, emits bool), one entry per sequence."""
        if self._arrays is not None:
            return self._arrays
        if self._bulk is None:
            self._arrays = (np.array(self._query, dtype=np.int64), np.array(self._context, dtype=np.int64),
                            np.array(self._emits, dtype=bool))
            return self._arrays
        bulk_query, bulk_context, _ = self._bulk
        bulk_emits = np.ones(len(bulk_query), dtype=bool)  # the bulk rows always emit
        if not self._query:  # the running queue only
            self._arrays = (bulk_query, bulk_context, bulk_emits)
        else:  # and the requests admitted after it
            self._arrays = (np.concatenate((bulk_query, self._query)), np.concatenate((bulk_context, self._context)),
                            np.concatenate((bulk_emits, self._emits)))
        return self._arrays

    @property
    def num_emitting_seqs(self) -> int:
        """Sequences that sample a token this step."""
        num_bulk = 0 if self._bulk is None else len(self._bulk[0])  # bulk rows always do
        return num_bulk + sum(self._emits)

    @property
    def request_ids(self) -> list[str]:
        return [r.request_id for r in self.requests]

    @property
    def query_lens(self) -> list[int]:
        """Tokens computed this step."""
        return self.seq_arrays()[0].tolist() if self._bulk is not None else self._query

    @property
    def context_lens(self) -> list[int]:
        """Tokens already in the KV cache before this step."""
        return self.seq_arrays()[1].tolist() if self._bulk is not None else self._context

    @property
    def emits(self) -> list[bool]:
        return self.seq_arrays()[2].tolist() if self._bulk is not None else self._emits

    @property
    def block_tables(self) -> list[tuple[int, ...]]:
        """Each sequence's whole block table (enough slots for context + query)."""
        if self._tables is None:
            lengths = self._num_blocks if self._bulk is None else self._bulk[2].tolist() + self._num_blocks
            self._tables = [tuple(r.block_ids[:n]) for r, n in zip(self.requests, lengths)]
        return self._tables

    @property
    def seqs(self) -> tuple[ScheduledSeq, ...]:
        if self._seqs is None:
            self._seqs = tuple(
                ScheduledSeq(
                    req.request_id,
                    req.token_ids(ctx, ctx + q),
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
        scheduling too, in `_update_after_schedule`). `req` is not in the scheduler's columns."""
        ctx = req._num_computed
        self.requests.append(req)
        self._query.append(num_new_tokens)
        self._context.append(ctx)
        self._emits.append(ctx + num_new_tokens == req.num_prompt_tokens + len(req._output_ids))
        self._num_blocks.append(len(req.block_ids))
        self.num_batched_tokens += num_new_tokens
        if num_new_tokens == 1 and ctx >= req.num_prompt_tokens:
            self.num_decode_tokens += 1
        else:
            self.num_prefill_tokens += num_new_tokens
        req._num_computed = ctx + num_new_tokens

    def _remove(self, req: Request) -> int:
        """Unschedule `req` (a victim of priority preemption; plans of the object path only); returns its
        tokens."""
        i = self.requests.index(req)
        n = self._query[i]
        is_decode = n == 1 and self._context[i] >= req.num_prompt_tokens
        for column in (self.requests, self._query, self._context, self._emits, self._num_blocks):
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


class _Columns:
    """The running queue's per-request counters as arrays (index i is `reqs[i]`, the scheduler's running
    list), used while every step gives each running request all its remaining tokens and every sampled
    token is one constant id (the simulator's case). A pure decode step then costs a few array operations
    plus Python work only for the requests that fill or open a block, or finish.

    The generated tokens of this period and their times are not written into the requests as they come:
    every running request that has sampled a token in this period has sampled one at every update since (a
    request that is cut short or preempted ends the period), so its unwritten tokens (`ntok` minus the prompt
    and `_output_ids`) are `token` at the last that many update times. `materialize` writes them out (on a read of
    the request, and when the request or the period ends)."""

    def __init__(self, reqs: list[Request], token: int) -> None:
        self.reqs = reqs
        self.token = token
        self.times: list[float | None] = []  # now_s of every update of the period
        self.times_complete = True  # no update without a time (whose tokens get none, as in the object path)
        self.ctx = np.array([r._num_computed for r in reqs], dtype=np.int64)
        self.ntok = np.array([r.num_prompt_tokens + len(r._output_ids) for r in reqs], dtype=np.int64)
        self.num_prompt = np.array([r.num_prompt_tokens for r in reqs], dtype=np.int64)
        self.max_tokens = np.array([r.max_num_tokens for r in reqs], dtype=np.int64)
        self.num_blocks = np.array([len(r.block_ids) for r in reqs], dtype=np.int64)
        self.num_cached = np.array([r.num_cached_blocks for r in reqs], dtype=np.int64)
        self.stops = np.array([token in r.stop_token_set for r in reqs], dtype=bool)
        self.any_stops = bool(self.stops.any())  # False: no row's check needs `stops` (kept True once set)
        for r in reqs:
            r._cols = self

    def extend(self, new: list[Request]) -> None:
        """Add rows for requests just appended to `reqs` (admissions)."""
        self.ctx = np.concatenate((self.ctx, [r._num_computed for r in new]))
        self.ntok = np.concatenate((self.ntok, [r.num_prompt_tokens + len(r._output_ids) for r in new]))
        self.num_prompt = np.concatenate((self.num_prompt, [r.num_prompt_tokens for r in new]))
        self.max_tokens = np.concatenate((self.max_tokens, [r.max_num_tokens for r in new]))
        self.num_blocks = np.concatenate((self.num_blocks, [len(r.block_ids) for r in new]))
        self.num_cached = np.concatenate((self.num_cached, [r.num_cached_blocks for r in new]))
        new_stops = [self.token in r.stop_token_set for r in new]
        self.stops = np.concatenate((self.stops, new_stops))
        self.any_stops = self.any_stops or any(new_stops)
        for r in new:
            r._cols = self

    def keep(self, mask: np.ndarray) -> None:
        """Keep the rows where `mask` is True (the caller updates `reqs` alike)."""
        self.ctx = self.ctx[mask]
        self.ntok = self.ntok[mask]
        self.num_prompt = self.num_prompt[mask]
        self.max_tokens = self.max_tokens[mask]
        self.num_blocks = self.num_blocks[mask]
        self.num_cached = self.num_cached[mask]
        self.stops = self.stops[mask]

    def num_computed_of(self, req: Request) -> int:
        return int(self.ctx[self.reqs.index(req)])

    def num_tokens_of(self, req: Request) -> int:
        return int(self.ntok[self.reqs.index(req)])

    def materialize(self, req: Request, i: int | None = None) -> None:
        """Write the unwritten tokens of `req` (row `i`) and their times into it."""
        if i is None:
            i = self.reqs.index(req)
        outputs = req._output_ids
        missing = int(self.ntok[i]) - req.num_prompt_tokens - len(outputs)
        if missing > 0:
            outputs.extend([self.token] * missing)
            times = self.times[-missing:]
            req._token_times.extend(times if self.times_complete else [t for t in times if t is not None])

    def detach(self, req: Request, i: int) -> None:
        """Hand row `i` back to its request: written tokens and computed count."""
        self.materialize(req, i)
        req._num_computed = int(self.ctx[i])
        req._cols = None


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
        # The running requests' counters as arrays, while steps go the column path (see `_Columns`).
        self._cols: _Columns | None = None

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
        self._flush()
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
        budget = self.config.max_num_batched_tokens
        if self._cols is not None and self._schedule_running_columns(plan, budget, threshold):
            budget -= plan.num_batched_tokens
        else:
            self._flush()
            budget = self._schedule_running(plan, budget, threshold)
        if not plan.preempted_request_ids:
            num_running = len(self.running)
            self._schedule_waiting(plan, budget, threshold, now_s)
            if self._cols is not None and len(self.running) > num_running:
                self._cols.extend(self.running[num_running:])
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
        bs = kv.block_size
        max_pos = self.config.max_model_len - 1
        preempted: list[str] = []
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            computed = req._num_computed
            n = req.num_prompt_tokens + len(req._output_ids) - computed
            if 0 < threshold < n:
                n = threshold
            n = min(n, budget, max_pos - computed)
            assert n > 0, req  # a request reaching max_model_len has stopped
            # A decode that neither opens nor fills a block needs nothing of the KV cache manager (as in the
            # bulk path); every other request asks it, preempting from the tail until it fits.
            while not (n == 1 and (computed + 1) % bs >= 2) and not kv.allocate_slots(req, n):
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

    def _schedule_running_columns(self, plan: StepPlan, budget: int, threshold: int) -> bool:
        """`_schedule_running_bulk` on the columns: the same decision and the same calls of the KV cache
        manager, in the same order, with array operations for everyone else; when the free blocks do not
        cover everyone (FCFS), `_allocate_or_preempt` preempts from the tail as `_schedule_running` does.
        False, changing nothing, when someone would be cut short (budget, threshold) or preempted under
        another policy."""
        cols = self._cols
        ctx, ntok = cols.ctx, cols.ntok
        rem = ntok - ctx
        total = int(_sum(rem))
        # Every running request has a token to compute (rem >= 1), so total == count means all are decodes.
        all_decodes = total == len(rem)
        if total > budget or (threshold and not all_decodes and int(_max(rem)) > threshold):
            return False
        kv = self.kv
        bs = kv.block_size
        need = -(-ntok // bs) - cols.num_blocks
        preempting = int(_sum(need)) > kv.num_free_blocks
        if preempting and self.config.policy != "fcfs":
            return False
        running = self.running
        if preempting:
            touched = (need > 0) | (rem > 1)
            if kv.enable_caching:
                touched |= ntok // bs > cols.num_cached
            num_live = self._allocate_or_preempt(plan, touched.nonzero()[0].tolist(), ctx, ntok, rem)
            ctx, ntok, rem = ctx[:num_live], ntok[:num_live], rem[:num_live]
            total = int(_sum(rem))
            all_decodes = total == num_live
        elif all_decodes and (not len(need) or int(_max(need)) <= 1):
            # Decodes only, none needing more than one block: who opens a block, who fills one.
            filling = (ntok // bs > cols.num_cached).nonzero()[0] if kv.enable_caching else None
            self._decode_blocks((need > 0).nonzero()[0], filling)
        else:
            touched = (need > 0) | (rem > 1)
            if kv.enable_caching:
                touched |= ntok // bs > cols.num_cached
            for i in touched.nonzero()[0].tolist():
                req = running[i]
                allocated = kv.allocate(req, int(ctx[i]), int(ntok[i]), int(rem[i]))
                assert allocated
                cols.num_blocks[i] = len(req.block_ids)
                cols.num_cached[i] = req.num_cached_blocks
        plan.requests = running[:]
        plan._bulk = (rem, ctx, cols.num_blocks.copy())
        plan.num_batched_tokens = total
        # Prefill seqs: several tokens, or the single last prompt token (no output yet: t == prompt length).
        num_prefill_tokens = 0 if all_decodes else int(_sum(rem[rem > 1]))
        if self._num_running_without_output:
            num_prefill_tokens += int(np.count_nonzero((rem == 1) & (ntok == cols.num_prompt)))
        plan.num_prefill_tokens = num_prefill_tokens
        plan.num_decode_tokens = total - num_prefill_tokens
        cols.ctx = ntok.copy()
        return True

    def _allocate_or_preempt(self, plan: StepPlan, touched: list[int], ctx: np.ndarray, ntok: np.ndarray,
                             rem: np.ndarray) -> int:
        """The loop of `_schedule_running` (FCFS) on the columns, when the free blocks do not cover every
        running request: the requests that need the KV cache manager ask it in queue order, and a request
        that does not fit preempts from the tail of the running queue until it fits or is itself preempted.
        Victims leave the columns (their rows are the tail). Returns the number of requests left running,
        all of which are scheduled in full."""
        cols = self._cols
        kv = self.kv
        running = self.running
        preempted: list[str] = []
        for i in touched:
            if i >= len(running):
                break  # preempted already
            req = running[i]
            while not kv.allocate(req, int(ctx[i]), int(ntok[i]), int(rem[i])):
                victim = running.pop()
                cols.detach(victim, len(running))
                self._preempt(victim)
                preempted.append(victim.request_id)
                if victim is req:
                    break
            else:
                cols.num_blocks[i] = len(req.block_ids)
                cols.num_cached[i] = req.num_cached_blocks
        plan.preempted_request_ids = tuple(preempted)
        num_live = len(running)
        if preempted:
            cols.keep(slice(0, num_live))
        return num_live

    def _decode_blocks(self, opening: np.ndarray, filling: np.ndarray | None) -> None:
        """The KV work of decodes that open a block (rows `opening`, one new block each) or fill one (rows
        `filling`, registered in the prefix cache; None without caching), for all of them at once: the new
        blocks come off the free queue in running order, as one `allocate_slots` after another would take
        them; registering and evicting commute, since a registered block is in use and the map keeps
        registration order."""
        cols = self._cols
        kv = self.kv
        running = self.running
        if len(opening):
            for i, block_id in zip(opening.tolist(), kv.pool.allocate(len(opening))):
                running[i].block_ids.append(block_id)
            cols.num_blocks[opening] += 1
        if filling is not None and len(filling):
            ids = []
            hashes = []
            for i, k in zip(filling.tolist(), cols.num_cached[filling].tolist()):
                req = running[i]
                ids.append(req.block_ids[k])
                hashes.append(req.block_hashes[k])
                req.num_cached_blocks = k + 1
            kv.pool.register(ids, hashes)
            cols.num_cached[filling] += 1

    def _schedule_running_bulk(self, plan: StepPlan, budget: int, threshold: int) -> bool:
        """The loop of `_schedule_running` for the common case, column by column: when every running
        request gets all its remaining tokens (within budget and threshold) and the free blocks cover all
        of them, nobody is cut or preempted, and only requests that need a new block or fill one (or
        prefill) need the KV cache manager. Returns False, having changed nothing, otherwise."""
        running = self.running
        ctx = [r._num_computed for r in running]
        ntok = [r.num_prompt_tokens + len(r._output_ids) for r in running]
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
        num_needed = sum(-(-ntok[i] // bs) - len(running[i].block_ids) for i in touched)
        if num_needed > kv.num_free_blocks:
            return False
        for i in touched:
            allocated = kv.allocate_slots(running[i], rem[i])
            assert allocated
        plan.requests = running[:]
        plan._query = rem
        plan._context = ctx
        plan._emits = [True] * len(running)
        plan._num_blocks = [len(r.block_ids) for r in running]
        plan.num_batched_tokens = total
        # Prefill seqs: several tokens, or the single last prompt token (no output yet: t == prompt length).
        num_prefill_tokens = sum(m for m in rem if m > 1)
        if self._num_running_without_output:
            num_prefill_tokens += sum(1 for r, t, m in zip(running, ntok, rem) if m == 1 and t == r.num_prompt_tokens)
        plan.num_prefill_tokens = num_prefill_tokens
        plan.num_decode_tokens = total - num_prefill_tokens
        for r, t in zip(running, ntok):
            r._num_computed = t
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
        self._num_running_without_output -= not req._output_ids
        self.kv.free(req)
        req.status = RequestStatus.PREEMPTED
        req._num_computed = 0
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
            hit_ids = kv.get_computed_block_ids(req)
            num_hit_tokens = len(hit_ids) * kv.block_size
            num_tokens = req.num_prompt_tokens + len(req._output_ids)
            n = num_tokens - num_hit_tokens
            if 0 < threshold < n:
                n = threshold
            if not cfg.enable_chunked_prefill and n > budget:
                break
            n = min(n, budget)
            if not kv.allocate(
                req,
                0,  # a waiting request has no computed tokens (preemption resets them)
                num_tokens,
                n,
                hit_ids,
                full_sequence_must_fit=cfg.scheduler_reserve_full_isl,
                apply_watermark=bool(running),
            ):
                break
            waiting.pop()
            running.append(req)
            self._num_running_without_output += num_tokens == req.num_prompt_tokens
            req.status = _RUNNING
            req._num_computed = num_hit_tokens
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
        self, plan: StepPlan, sampled: dict[str, int] | Sequence[int] | int, now_s: float | None = None
    ) -> list[Request]:
        """Append the sampled tokens, stop finished requests and free their blocks; returns them.

        `sampled` maps request id to token for every seq with `emits_token` (others are ignored), or is a
        sequence aligned with the plan's seqs (entries of non-emitting seqs are ignored), or is one int: the
        token every emitting seq sampled (the simulator's case, which goes the column path). Requests
        aborted since `schedule()` are skipped.
        """
        if plan.is_empty:
            return []
        assert plan is self._pending, "update_from_output() takes the plan of the last schedule()"
        self._pending = None
        if isinstance(sampled, int):
            if not self._pending_aborted and self._use_columns(plan, sampled):
                return self._update_columns(plan, now_s)
            sampled = [sampled] * plan.num_seqs
        self._flush()
        emits = plan.emits
        if isinstance(sampled, dict):
            sampled = [sampled[r.request_id] if emit else 0 for r, emit in zip(plan.requests, emits)]
        pairs = zip(plan.requests, sampled)
        if self._pending_aborted or not all(emits):
            self._pending_aborted = False
            pairs = [(r, t) for r, t, e in zip(plan.requests, sampled, emits) if e and r.status is _RUNNING]
        to_check: list[tuple[Request, int]] = []
        if now_s is None:
            for req, token in pairs:
                outputs = req._output_ids
                outputs.append(token)
                if req.num_prompt_tokens + len(outputs) >= req.next_check_len or token in req.stop_token_set:
                    to_check.append((req, token))
        else:
            for req, token in pairs:
                outputs = req._output_ids
                outputs.append(token)
                req._token_times.append(now_s)
                if req.num_prompt_tokens + len(outputs) >= req.next_check_len or token in req.stop_token_set:
                    to_check.append((req, token))
        finished = [req for req, token in to_check if self._check(req, token, now_s)]
        if finished:
            self.running = [r for r in self.running if r.status is _RUNNING]
        return finished

    def _use_columns(self, plan: StepPlan, token: int) -> bool:
        """Whether this update can go the column path: the plan's seqs are the running queue, in order (so
        nobody was cut short or preempted), and the columns hold `token`'s period (started here if need be)."""
        cols = self._cols
        if cols is not None and cols.token != token:
            self._flush()
            cols = None
        if cols is None:
            running = self.running
            if len(plan.requests) != len(running) or not all(map(operator.is_, plan.requests, running)):
                return False
            self._cols = _Columns(running, token)
        return True

    def _update_columns(self, plan: StepPlan, now_s: float | None) -> list[Request]:
        """`update_from_output` on the columns: count the new tokens, and look closer only at requests whose
        token is their first, fills a block or stops them (the same checks, in the same order, as `_check`)."""
        cols = self._cols
        if plan._bulk is not None and all(plan._emits):  # the bulk rows all emit; so do the admitted ones
            all_emit = True
            cols.ntok += 1
        else:
            emits = plan.seq_arrays()[2]
            all_emit = bool(_all(emits))
            cols.ntok += emits
        cols.times.append(now_s)
        if now_s is None:
            cols.times_complete = False
        ntok = cols.ntok
        kv = self.kv
        bs = kv.block_size
        if self._num_running_without_output:
            first = ntok == cols.num_prompt + 1
            if not all_emit:
                first &= emits
            self._num_running_without_output -= int(np.count_nonzero(first))
        look = ntok >= cols.max_tokens
        if cols.any_stops:
            look |= cols.stops
        if kv.enable_caching:
            look |= ntok % bs == 0
        if not all_emit:
            look &= emits
        running = self.running
        finished: list[tuple[int, Request, RequestStatus]] = []
        rows = look.nonzero()[0]
        if not len(rows):
            return []
        # The rows' counters as Python ints in one go (indexing arrays one element at a time is slow).
        caching = kv.enable_caching
        token = cols.token
        if caching:  # a block of this period's tokens only is hashed inline (`block_hash.constant_block_terms`)
            weight, sums = constant_block_terms(token, self.config.max_model_len + bs)
        stops = cols.stops[rows].tolist() if cols.any_stops else itertools.repeat(False)
        for i, num_tokens, stop, cap in zip(rows.tolist(), ntok[rows].tolist(), stops, cols.max_tokens[rows].tolist()):
            req = running[i]
            if caching and num_tokens % bs == 0:
                # The block's tokens: written ones (prompt, earlier outputs), then this period's, all `token`.
                written = req.num_prompt_tokens + len(req._output_ids)
                start = num_tokens - bs
                if written <= start:  # start >= written >= 1, so the blocks before it are hashed
                    hashes = req.block_hashes
                    hashes.append((hashes[-1] + weight * (sums[num_tokens] - sums[start])) & MASK_63)
                else:
                    p = req.num_prompt_tokens
                    if start < p:
                        tokens = req._prompt[start:].tolist() + req._output_ids
                    else:
                        tokens = req._output_ids[start - p:]
                    kv.hash_next_block(req, tokens + [token] * (num_tokens - written))
            if stop:
                finished.append((i, req, RequestStatus.FINISHED_STOPPED))
            elif num_tokens >= cap:
                finished.append((i, req, RequestStatus.FINISHED_LENGTH_CAPPED))
        if not finished:
            return []
        keep = np.ones(len(running), dtype=bool)
        for i, req, status in finished:
            cols.detach(req, i)
            self._finish(req, status, now_s)
            keep[i] = False
        cols.keep(keep)
        self.running = cols.reqs = [r for r in running if r.status is _RUNNING]
        return [req for _, req, _ in finished]

    def _flush(self) -> None:
        """End the column period: hand every row back to its request."""
        cols = self._cols
        if cols is None:
            return
        for i, req in enumerate(cols.reqs):
            cols.detach(req, i)
        self._cols = None

    def _check(self, req: Request, token: int, now_s: float | None) -> bool:
        """The rare events of a new token: the first output, a full block to hash, a stop (vLLM's
        check_stop order: EOS unless ignore_eos and stop tokens, then the length limits). True if finished."""
        num_tokens = req.num_prompt_tokens + len(req._output_ids)
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
