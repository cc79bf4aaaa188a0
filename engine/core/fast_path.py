"""The scheduler's two hot operations in bulk, for the common case: every running request is scheduled in
full, and (the simulator's case) every sampled token is one constant id. Each has exactly the effect of the
scheduler's own loop; `Scheduler(..., fast_paths=False)` turns them off, which is how the tests compare them.

- `schedule_running`: when every running request gets all its remaining tokens (within the budget and
  long_prefill_token_threshold), only the requests that open or fill a block (or prefill) need the KV cache
  manager; the rest are counted as columns. When the free blocks do not cover everyone (FCFS), requests are
  preempted from the tail, as the scheduler's loop does.
- `update`: `update_from_output` with one token id for every sequence. The running requests' counters live in
  numpy arrays (`RunningColumns`) for as long as this holds, and the generated tokens and their times are
  written into the requests lazily, so a pure decode step costs a few array operations plus Python work
  only for the requests that open or fill a block, or finish.

What this uses of the scheduler: `running` (the running queue, which it may replace), `kv`, `config`,
`num_running_without_output`, `preempt_request` and `finish_request`. What the scheduler calls:
`schedule_running`, `update`, and `flush` before its own loop touches a running request.
"""

from __future__ import annotations

import itertools
import operator
from typing import TYPE_CHECKING, cast

import numpy as np

from engine.core.block_hash import MASK_63, constant_block_terms
from engine.core.request import Request, RequestStatus
from engine.core.step_plan import StepPlan

if TYPE_CHECKING:  # the scheduler imports this module
    from engine.core.scheduler import Scheduler

_RUNNING = RequestStatus.RUNNING
# Reductions called as ufunc methods: `arr.sum()` and friends go through a Python wrapper each, a measurable
# share of a step of ~20 array operations on ~150 rows.
_sum = np.add.reduce
_max = np.maximum.reduce
_all = np.logical_and.reduce


class RunningColumns:
    """The running queue's per-request counters as arrays (index i is `reqs[i]`, the scheduler's running
    list), kept while every step gives each running request all its remaining tokens and every sampled
    token is `token`.

    The generated tokens of this period and their times are not written into the requests as they come:
    every running request that has sampled a token in this period has sampled one at every update since (a
    request that is cut short or preempted ends the period), so its unwritten tokens (`ntok` minus the prompt
    and its written outputs) are `token` at the last that many update times. `materialize` writes them out
    (on a read of the request, and when the request or the period ends). This is the one place outside
    `Request` that touches its storage (`_output_ids`, `_token_times`, `_num_computed`, `_cols`)."""

    def __init__(self, reqs: list[Request], token: int, num_positions: int) -> None:
        self.reqs = reqs
        self.token = token
        # What hashes a block of `token` only inline, for positions below num_positions (`constant_block_terms`).
        self.hash_terms = constant_block_terms(token, num_positions)
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

    def keep(self, mask: np.ndarray | slice) -> None:
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
            if self.times_complete:  # then no time is None
                req._token_times.extend(cast("list[float]", times))
            else:
                req._token_times.extend([t for t in times if t is not None])

    def detach(self, req: Request, i: int) -> None:
        """Hand row `i` back to its request: written tokens and computed count."""
        self.materialize(req, i)
        req._num_computed = int(self.ctx[i])
        req._cols = None


class FastPath:
    """The fast paths of one scheduler (see the module docstring)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.sched = scheduler
        self.columns: RunningColumns | None = None  # while updates go the column path

    def schedule_running(self, plan: StepPlan, budget: int, threshold: int) -> bool:
        """Schedule the whole running queue into `plan` if each request gets all its remaining tokens, as
        the scheduler's loop would: on the columns, the same decision and the same calls of the KV cache
        manager in the same order, with array operations for everyone else; when the free blocks do not
        cover everyone (FCFS), `_allocate_or_preempt` preempts from the tail as the loop does. False,
        changing nothing but ending the column period, when someone would be cut short (budget, threshold)
        or preempted under another policy."""
        cols = self.columns
        if cols is None:
            return self._schedule_lists(plan, budget, threshold)
        ctx, ntok = cols.ctx, cols.ntok
        rem = ntok - ctx
        total = int(_sum(rem))
        # Every running request has a token to compute (rem >= 1), so total == count means all are decodes.
        all_decodes = total == len(rem)
        if total > budget or (threshold and not all_decodes and int(_max(rem)) > threshold):
            return self._decline()
        sched = self.sched
        kv = sched.kv
        bs = kv.block_size
        need = (ntok + (bs - 1)) // bs - cols.num_blocks  # blocks short of ceil(ntok / bs)
        preempting = int(_sum(need)) > kv.num_free_blocks
        if preempting and sched.config.policy != "fcfs":
            return self._decline()
        running = sched.running
        if preempting:
            num_live = self._allocate_or_preempt(cols, plan, self._touched(cols, need, rem), ctx, ntok, rem)
            ctx, ntok, rem = ctx[:num_live], ntok[:num_live], rem[:num_live]
            total = int(_sum(rem))
            all_decodes = total == num_live
        elif all_decodes and (not len(need) or int(_max(need)) <= 1):
            # Decodes only, none needing more than one block: who opens a block, who fills one.
            opening = (need > 0).nonzero()[0]
            filling = (ntok // bs > cols.num_cached).nonzero()[0] if kv.enable_caching else opening[:0]
            kv.allocate_decode_slots(running, opening, filling)
            if len(opening):
                cols.num_blocks[opening] += 1
            if len(filling):
                cols.num_cached[filling] += 1
        else:
            for i in self._touched(cols, need, rem):
                req = running[i]
                allocated = kv.allocate(req, int(ctx[i]), int(ntok[i]), int(rem[i]))
                assert allocated
                cols.num_blocks[i] = len(req.block_ids)
                cols.num_cached[i] = req.num_cached_blocks
        # Prefill seqs: several tokens, or the single last prompt token (no output yet: t == prompt length).
        num_prefill_tokens = 0 if all_decodes else int(_sum(rem[rem > 1]))
        if sched.num_running_without_output:
            num_prefill_tokens += int(np.count_nonzero((rem == 1) & (ntok == cols.num_prompt)))
        plan.add_running_columns(running[:], rem, ctx, cols.num_blocks.copy(), total, num_prefill_tokens)
        cols.ctx = ntok.copy()
        return True

    def _decline(self) -> bool:
        """Leave the step to the scheduler's loop: end the column period. (`_schedule_lists` would decline
        too: it needs what the columns do, and never preempts.)"""
        self.flush()
        return False

    def update(self, plan: StepPlan, token: int, now_s: float | None) -> list[Request] | None:
        """`update_from_output` with `token` sampled by every emitting seq, on the columns (started here if
        need be); None, changing nothing, when the plan is not the running queue in order (someone was cut
        short or preempted by the scheduler's loop)."""
        cols = self.columns
        if cols is not None and cols.token != token:
            self.flush()
            cols = None
        running = self.sched.running
        if cols is None:
            if len(plan.requests) != len(running) or not all(map(operator.is_, plan.requests, running)):
                return None
            num_positions = self.sched.config.max_model_len + self.sched.kv.block_size
            cols = self.columns = RunningColumns(running, token, num_positions)
        elif len(cols.ctx) < len(running):
            cols.extend(running[len(cols.ctx):])  # admitted this step
        return self._update_columns(cols, plan, now_s)

    def flush(self) -> None:
        """End the column period: hand every row back to its request."""
        cols = self.columns
        if cols is None:
            return
        for i, req in enumerate(cols.reqs[:len(cols.ctx)]):
            cols.detach(req, i)
        self.columns = None

    def _schedule_lists(self, plan: StepPlan, budget: int, threshold: int) -> bool:
        """`schedule_running` without columns: when the free blocks cover everyone, nobody is cut or
        preempted, and only requests that need a new block or fill one (or prefill) ask the KV cache
        manager."""
        sched = self.sched
        running = sched.running
        ctx = [r.num_computed_tokens for r in running]
        ntok = [r.num_tokens for r in running]
        rem = [t - c for t, c in zip(ntok, ctx)]
        total = sum(rem)
        if total > budget or (threshold and max(rem, default=0) > threshold):
            return False
        # No max_model_len cut either: a running request has fewer than max_model_len tokens.
        kv = sched.kv
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
        # Prefill seqs: several tokens, or the single last prompt token (no output yet: t == prompt length).
        num_prefill_tokens = sum(m for m in rem if m > 1)
        if sched.num_running_without_output:
            num_prefill_tokens += sum(1 for r, t, m in zip(running, ntok, rem) if m == 1 and t == r.num_prompt_tokens)
        plan.add_running(running[:], rem, ctx, [len(r.block_ids) for r in running], total, num_prefill_tokens)
        for r, t in zip(running, ntok):
            r.num_computed_tokens = t
        return True

    def _touched(self, cols: RunningColumns, need: np.ndarray, rem: np.ndarray) -> list[int]:
        """Rows that need the KV cache manager: a new block, a prefill, a block to register."""
        touched = (need > 0) | (rem > 1)
        if self.sched.kv.enable_caching:
            touched |= cols.ntok // self.sched.kv.block_size > cols.num_cached
        return touched.nonzero()[0].tolist()

    def _allocate_or_preempt(self, cols: RunningColumns, plan: StepPlan, touched: list[int], ctx: np.ndarray,
                             ntok: np.ndarray, rem: np.ndarray) -> int:
        """The scheduler's loop (FCFS) on the columns, when the free blocks do not cover every running
        request: the requests that need the KV cache manager ask it in queue order, and a request that does
        not fit preempts from the tail of the running queue until it fits or is itself preempted. Victims
        leave the columns (their rows are the tail). Returns the number of requests left running, all of
        which are scheduled in full."""
        sched = self.sched
        kv = sched.kv
        running = sched.running
        preempted: list[str] = []
        for i in touched:
            if i >= len(running):
                break  # preempted already
            req = running[i]
            while not kv.allocate(req, int(ctx[i]), int(ntok[i]), int(rem[i])):
                victim = running.pop()
                cols.detach(victim, len(running))
                sched.preempt_request(victim)
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

    def _update_columns(self, cols: RunningColumns, plan: StepPlan, now_s: float | None) -> list[Request]:
        """`update_from_output` on the columns: count the new tokens, and look closer only at requests whose
        token is their first, fills a block or stops them (the same checks, in the same order, as the
        scheduler's `_check_stop`)."""
        sched = self.sched
        all_emit = plan.all_emit
        if all_emit:
            cols.ntok += 1
        else:
            emits = plan.seq_arrays()[2]
            cols.ntok += emits
        cols.times.append(now_s)
        if now_s is None:
            cols.times_complete = False
        ntok = cols.ntok
        kv = sched.kv
        bs = kv.block_size
        if sched.num_running_without_output:
            first = ntok == cols.num_prompt + 1
            if not all_emit:
                first &= emits
            sched.num_running_without_output -= int(np.count_nonzero(first))
        look = ntok >= cols.max_tokens
        if cols.any_stops:
            look |= cols.stops
        if kv.enable_caching:
            look |= ntok % bs == 0
        if not all_emit:
            look &= emits
        rows = look.nonzero()[0]
        if not len(rows):
            return []
        running = sched.running
        finished: list[tuple[int, Request, RequestStatus]] = []
        # The rows' counters as Python ints in one go (indexing arrays one element at a time is slow).
        caching = kv.enable_caching
        token = cols.token
        if caching:  # a block of this period's tokens only is hashed inline
            weight, sums = cols.hash_terms
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
                else:  # the written ones read directly: `token_ids` would write this period's into the request
                    p = req.num_prompt_tokens
                    if start < p:
                        tokens = req.prompt_array[start:].tolist() + req._output_ids
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
            sched.finish_request(req, status, now_s)
            keep[i] = False
        cols.keep(keep)
        assert running is cols.reqs
        for i, _, _ in reversed(finished):  # rows in increasing order
            del running[i]
        return [req for _, req, _ in finished]
