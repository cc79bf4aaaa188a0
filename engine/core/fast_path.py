"""The scheduler's two hot operations in bulk, for the common case: every running request is scheduled in
full, and (the simulator's case) every sampled token is one constant id. Each has exactly the effect of the
scheduler's own loop; `Scheduler(..., fast_paths=False)` turns them off, which is how the tests compare them.

- `schedule_running`: when every running request gets all its remaining tokens (within the budget and
  long_prefill_token_threshold), only the requests that open or fill a block (or prefill) need the KV cache
  manager; the rest are counted. When the free blocks do not cover everyone (FCFS), requests are preempted
  from the tail, as the scheduler's loop does.
- `update`: `update_from_output` with one token id for every sequence. For as long as this holds, a running
  request that has sampled a token is a *decoder*: it gains one token per step, so every event of its life
  falls at an update count known in advance (`RunningColumns`), and a step costs Python work only for the
  requests whose event it is (a block to open, a block to fill, a finish), not a pass over the running queue.
  The generated tokens and their times are written into the requests lazily.

What this uses of the scheduler: `running` (the running queue, which it may replace), `kv`, `config`,
`num_running_without_output`, `preempt_request` and `finish_request`. What the scheduler calls:
`schedule_running`, `update`, and `flush` before its own loop touches a running request.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Protocol, cast

import numpy as np

from engine.core.config import SchedulerConfig
from engine.core.kv_cache_manager import KVCacheManager
from engine.core.request import Request, RequestStatus
from engine.core.step_plan import ColumnRows, StepPlan

_STOPPED, _CAPPED = RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED
_SEQ = operator.attrgetter("_col_seq")

class RunningColumns:
    """The running queue's counters while every step gives each running request all its remaining tokens and
    every sampled token is `token` (a *period*). Rows are the requests of `reqs` (the scheduler's running list),
    in its order, which is the order they joined (`_col_seq`); each is one of:

    - a decoder, which has sampled a token at every update since it joined: after `num_updates` updates it
      holds `_col_off + num_updates` tokens, of which all but the last are computed (all once scheduled, until
      the update), in ceil(computed / block_size) blocks. So at the update count u it fills a block when
      (_col_off + u) % block_size == 0 (registered at the next schedule, hashed only if a lookup walks into
      it, `BlockPool`'s lazy chains; the next schedule also opens a block
      for the next token one update later), and stops when _col_off + u reaches its max_num_tokens: decoders
      are kept by `_col_off % block_size` (`by_phase`, each in queue order) and by the update count of
      their stop (`stopping`);
    - a prefill (`_col_off` None): joined at the last update without sampling (a prompt chunk), its counters
      are the request's own; it is scheduled in full at the next step and becomes a decoder at that update.

    The generated tokens of this period and their times are not written into the requests as they come: a
    decoder's unwritten tokens (its tokens minus the prompt and its written outputs) are `token` at the last
    that many update times. `materialize` writes them out (on a read of the request, and when the request or
    the period ends). This is the one place outside `Request` that touches its storage (`_output_ids`,
    `_token_times`, `_times_array`, `_num_computed`, `_cols`, `_col_off`, `_col_seq`)."""

    def __init__(self, reqs: list[Request], token: int, block_size: int) -> None:
        self.reqs = reqs
        self.token = token
        self.block_size = block_size
        self.times: list[float | None] = []  # now_s of every update of the period
        self.times_complete = True  # no update without a time (whose tokens get none, as in the object path)
        # The same times as a float64 array, times_array[:num_updates] written while times_complete; grown by
        # doubling into a new array, so the views requests keep of it (`materialize`) never change.
        self.times_array = np.empty(1024)
        self.num_updates = 0
        self.scheduled = False  # between `schedule_running` and `update`: decoders computed all their tokens
        self.num_joined = 0
        # `_col_off` of each row (0 for prefills), for the plans' arrays; replaced, never written in place, so a
        # plan can keep the one of its step. Lists, not arrays: a step that changes the rows (a join, a finish, a
        # prefill turned decoder: ~half the steps of an overloaded run) copies and edits a list of ~160 ints for
        # ~1/8 of the instructions numpy's concatenations and masks took; `ColumnRows` makes the arrays if asked.
        self.off: list[int] = []
        # ... and its `_col_seq`, the index of its request id in `ids` (every row that joined the period, in order).
        self.seq: list[int] = []
        self.ids: list[str] = []
        self.num_decoders = 0
        self.off_sum = 0  # of the decoders
        self.by_phase: list[dict[Request, None]] = [{} for _ in range(block_size)]
        self.stopping: dict[int, list[Request]] = {}
        self.prefills: list[Request] = []  # in queue order

    def join(self, new: list[Request]) -> None:
        """Take rows for requests just appended to `reqs` (they start as prefills; `update` sorts them out)."""
        seq = self.num_joined
        self.ids.extend([r.request_id for r in new])
        for r in new:
            r._cols = self
            r._col_off = None
            r._col_seq = seq
            seq += 1
        self.num_joined = seq

    def add_decoder(self, req: Request, off: int) -> None:
        req._col_off = off
        phase = self.by_phase[off % self.block_size]
        if phase and next(reversed(phase))._col_seq > req._col_seq:
            # It joined before a decoder of its phase but decodes after it (a prompt chunk): keep queue order.
            ordered = sorted([*phase, req], key=_SEQ)
            phase.clear()
            phase.update(dict.fromkeys(ordered))
        else:
            phase[req] = None
        self.stopping.setdefault(req.max_num_tokens - off, []).append(req)
        self.num_decoders += 1
        self.off_sum += off

    def phase(self, phase: int) -> dict[Request, None]:
        """The decoders of `phase` (`_col_off % block_size`), in queue order (do not modify)."""
        return self.by_phase[phase]

    def pop_stops(self, num_updates: int) -> list[Request] | None:
        """Forget and return the decoders that stop at update count `num_updates` (None without any; the order
        among them is free: the caller sorts by `_col_seq`)."""
        return self.stopping.pop(num_updates, None)

    def remove(self, req: Request) -> None:
        """Forget a row leaving mid-period (preempted or finished); its `_col_off` stays for `detach`."""
        off = req._col_off
        if off is None:
            self.prefills.remove(req)
            return
        phase = self.by_phase[off % self.block_size]
        if req not in phase:
            return  # finished as it joined: never a decoder
        del phase[req]
        self.num_decoders -= 1
        self.off_sum -= off
        stops = self.stopping.get(req.max_num_tokens - off)
        if stops is not None and req in stops:
            stops.remove(req)

    def num_computed_of(self, req: Request) -> int:
        off = req._col_off
        if off is None:
            return req._num_computed
        return off + self.num_updates - (not self.scheduled)

    def num_tokens_of(self, req: Request) -> int:
        off = req._col_off
        if off is None:
            return req.num_prompt_tokens + len(req._output_ids)
        return off + self.num_updates

    def materialize(self, req: Request) -> None:
        """Write the unwritten tokens of `req` and their times into it."""
        off = req._col_off
        if off is None:
            return
        outputs = req._output_ids
        missing = off + self.num_updates - req.num_prompt_tokens - len(outputs)
        if missing > 0:
            outputs.extend([self.token] * missing)
            times = self.times[-missing:]
            if self.times_complete:  # then no time is None
                if not req._token_times:  # its times are these alone: the request keeps them as an array too
                    req._times_array = self.times_array[self.num_updates - missing:self.num_updates]
                req._token_times.extend(cast("list[float]", times))
            else:
                req._token_times.extend([t for t in times if t is not None])

    def detach(self, req: Request) -> None:
        """Hand the row back to its request: written tokens and computed count."""
        self.materialize(req)
        req._num_computed = self.num_computed_of(req)
        req._cols = None
        req._col_off = None

    def longest_context(self) -> Callable[[], int]:
        """The longest context of this step's rows, all decoders, before it (for the plan)."""
        off, num_updates = self.off, self.num_updates
        return lambda: max(off) + num_updates - 1

    def bulk_rows(self, prefill_rows: list[tuple[int, int, int, int]]) -> ColumnRows:
        """The plan's rows of this step, as `schedule_running` leaves them; `prefill_rows` (row, context, query,
        blocks) where the rows are prefills."""
        return ColumnRows(self.off, self.num_updates, self.block_size, prefill_rows, self.seq, self.ids)


class SchedulerState(Protocol):
    """What the fast paths use of their scheduler (`engine.core.scheduler.Scheduler`, which implements this and
    imports this module; the module docstring says how each is used)."""

    config: SchedulerConfig
    kv: KVCacheManager
    running: list[Request]
    num_running_without_output: int

    def preempt_request(self, req: Request) -> None: ...

    def finish_request(self, req: Request, status: RequestStatus, now_s: float | None) -> None: ...


class FastPath:
    """The fast paths of one scheduler (see the module docstring)."""

    # The columns a period starts (engine.core.compiled_fast's in C: `CompiledFastPath`).
    new_columns: type[RunningColumns] = RunningColumns

    def __init__(self, scheduler: SchedulerState) -> None:
        self.sched = scheduler
        self.columns: RunningColumns | None = None  # while updates go the column path

    def schedule_running(self, plan: StepPlan, budget: int, threshold: int) -> bool:
        """Schedule the whole running queue into `plan` if each request gets all its remaining tokens, as
        the scheduler's loop would: the same decision and the same calls of the KV cache manager in the same
        order, for the requests that open or fill a block or prefill; when the free blocks do not cover
        everyone (FCFS), `_allocate_or_preempt` preempts from the tail as the loop does. False, changing
        nothing but ending the column period, when someone would be cut short (budget, threshold) or
        preempted under another policy."""
        cols = self.columns
        if cols is None:
            return self._schedule_lists(plan, budget, threshold)
        sched = self.sched
        kv = sched.kv
        running = sched.running
        bs = cols.block_size
        num_updates = cols.num_updates
        prefills = cols.prefills
        total = len(running)
        num_needed = 0
        if prefills:
            max_rem = 0
            for r in prefills:
                num_tokens = r.num_prompt_tokens + len(r._output_ids)
                rem = num_tokens - r._num_computed
                total += rem - 1
                max_rem = max(max_rem, rem)
                num_needed += -(-num_tokens // bs) - len(r.block_ids)
            if total > budget or (threshold and max_rem > threshold):
                return self._decline()
        elif total > budget:
            return self._decline()
        opening = cols.phase((1 - num_updates) % bs)
        filling = cols.phase(-num_updates % bs) if kv.enable_caching else {}
        num_needed += len(opening)
        preempting = num_needed > kv.num_free_blocks
        if preempting and sched.config.policy != "fcfs":
            return self._decline()
        # Prefill rows as the plan shows them: (row, context, query, blocks held after allocation).
        prefill_rows: list[tuple[int, int, int, int]] = []
        if preempting:
            self._allocate_or_preempt(cols, plan, self._touched(opening, filling, prefills), opening, filling,
                                      num_updates)
            cols.off = cols.off[:len(running)]  # victims are the tail rows
            cols.seq = cols.seq[:len(running)]
            prefills = cols.prefills
        elif not prefills:
            kv.allocate_decode_slots(opening, filling)
        else:
            self._allocate_rows(cols, self._touched(opening, filling, prefills), opening, filling, num_updates)
        total = cols.num_decoders
        context_sum = cols.num_decoders * (num_updates - 1) + cols.off_sum
        num_prefill_tokens = 0
        for r in prefills:  # every one now scheduled in full
            num_tokens = r.num_prompt_tokens + len(r._output_ids)
            ctx = r._num_computed
            rem = num_tokens - ctx
            total += rem
            context_sum += ctx
            if rem > 1 or num_tokens == r.num_prompt_tokens:  # several tokens, or the single last prompt token
                num_prefill_tokens += rem
            prefill_rows.append((running.index(r), ctx, rem, len(r.block_ids)))
            r._num_computed = num_tokens
        plan.add_running_columns(running[:], cols.bulk_rows(prefill_rows), context_sum, total, num_prefill_tokens,
                                 None if prefill_rows else cols.longest_context())
        cols.scheduled = True
        return True

    @staticmethod
    def _touched(opening: dict[Request, None], filling: dict[Request, None], prefills: list[Request]
                 ) -> list[Request]:
        """Rows that need the KV cache manager, in queue order: a new block, a block to register, a prefill."""
        touched = dict(opening)
        touched.update(filling)
        touched.update(dict.fromkeys(prefills))
        return sorted(touched, key=_SEQ)

    def _allocate_rows(self, cols: RunningColumns, rows: list[Request], opening: dict[Request, None],
                       filling: dict[Request, None], num_updates: int) -> None:
        """Touched rows (`_touched`, or a run of them) in queue order when the free blocks cover them all: each
        prefill by `allocate`, the runs of decoders between them by one `allocate_decode_slots` each (the same
        blocks in the same order: within a run, openings take blocks in queue order and fills register in queue
        order, and the two commute)."""
        kv = self.sched.kv
        run_opening: list[Request] = []
        run_filling: list[Request] = []
        for req in rows:
            if req._col_off is None:  # a prefill
                if run_opening or run_filling:
                    kv.allocate_decode_slots(run_opening, run_filling)
                    run_opening, run_filling = [], []
                allocated = kv.allocate(req, *self._counts(cols, req, num_updates))
                assert allocated
                continue
            if req in opening:
                run_opening.append(req)
            if req in filling:  # (also opening when a block is one token)
                run_filling.append(req)
        if run_opening or run_filling:
            kv.allocate_decode_slots(run_opening, run_filling)

    @staticmethod
    def _counts(cols: RunningColumns, req: Request, num_updates: int) -> tuple[int, int, int]:
        """Computed tokens, tokens and tokens to schedule of a row before its step."""
        off = req._col_off
        if off is None:
            num_tokens = req.num_prompt_tokens + len(req._output_ids)
            return req._num_computed, num_tokens, num_tokens - req._num_computed
        return off + num_updates - 1, off + num_updates, 1

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
            kv = self.sched.kv
            cols = self.columns = self.new_columns(running, token, kv.block_size)
            new = running[:]
            new_emits = plan.emits
        else:
            new = running[len(cols.off):]  # admitted this step: the plan's sequences after the bulk rows
            new_emits = plan.emits_after_bulk
        if new:
            cols.join(new)
        return self._update_columns(cols, new, new_emits, now_s)

    def flush(self) -> None:
        """End the column period: hand every row back to its request."""
        cols = self.columns
        if cols is None:
            return
        for req in cols.reqs[:len(cols.off)]:
            cols.detach(req)
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

    def _allocate_or_preempt(self, cols: RunningColumns, plan: StepPlan, touched: list[Request],
                             opening: dict[Request, None], filling: dict[Request, None], num_updates: int) -> None:
        """The scheduler's loop (FCFS) on the columns, when the free blocks do not cover every running
        request: the requests that need the KV cache manager ask it in queue order, and a request that does
        not fit preempts from the tail of the running queue until it fits or is itself preempted. Victims
        leave the columns (their rows are the tail); the requests left running are all scheduled in full.
        The rows before the first that does not fit (and those after a preemption, up to the next) go as one run
        (`_allocate_rows`): an allocation of a running request fails exactly when it needs more blocks than are
        free, and nothing else changes the free blocks among them, so none of them would have failed."""
        sched = self.sched
        kv = sched.kv
        running = sched.running
        bs = cols.block_size
        preempted: list[str] = []
        i, num_touched = 0, len(touched)
        while i < num_touched and touched[i]._cols is cols:  # (victims come from the tail: the rest are preempted)
            free = kv.num_free_blocks
            end = i
            while end < num_touched:
                req = touched[end]
                if req._cols is not cols:
                    break
                if req._col_off is None:  # a prefill: blocks for all its tokens (fewer than max_model_len)
                    need = -(-(req.num_prompt_tokens + len(req._output_ids)) // bs) - len(req.block_ids)
                else:
                    need = req in opening
                if need > free:
                    break
                free -= need
                end += 1
            if end > i:
                self._allocate_rows(cols, touched[i:end], opening, filling, num_updates)
                i = end
                continue
            req = touched[i]
            ctx, num_tokens, rem = self._counts(cols, req, num_updates)
            while not kv.allocate(req, ctx, num_tokens, rem):
                victim = running.pop()
                cols.remove(victim)
                cols.detach(victim)
                sched.preempt_request(victim)
                preempted.append(victim.request_id)
                if victim is req:
                    break
            i += 1
        plan.preempted_request_ids = tuple(preempted)

    def _update_columns(self, cols: RunningColumns, new: list[Request], new_emits: list[bool],
                        now_s: float | None) -> list[Request]:
        """`update_from_output` on the columns: the decoders whose update count it is stop (a filled block
        waits for the next schedule, which registers it); the last step's prefills and this step's admissions
        sample their first token of the period (or not, for a prompt chunk) and become decoders. The same checks,
        in the same order, as the scheduler's `_check_stop`."""
        sched = self.sched
        num_updates = cols.num_updates = cols.num_updates + 1
        cols.scheduled = False
        cols.times.append(now_s)
        if now_s is None:
            cols.times_complete = False
        elif cols.times_complete:
            if num_updates > len(cols.times_array):
                cols.times_array = np.concatenate((cols.times_array, np.empty(len(cols.times_array))))
            cols.times_array[num_updates - 1] = now_s
        finished: list[tuple[Request, RequestStatus]] = []
        stops = cols.pop_stops(num_updates)
        if stops:
            finished = [(req, _CAPPED) for req in stops]
        # The last step's prefills (all scheduled in full, so sampling now) and this step's admissions, in queue
        # order: their first token of the period, or none (a prompt chunk: they stay prefills).
        off = cols.off
        own = False  # `off` is a list of this update's own (a copy no plan holds)
        running = sched.running
        if cols.prefills:
            joining = cols.prefills
            cols.prefills = []
            changed = [req for req in joining if self._start_decoding(cols, req, num_updates, finished)]
            if changed:  # prefills turned decoders: their rows' `off`
                off = off[:]
                own = True
                for req in changed:
                    off[running.index(req)] = cast(int, req._col_off)
        if new:
            new_off: list[int] = []
            for req, emits in zip(new, new_emits):
                if emits and self._start_decoding(cols, req, num_updates, finished):
                    new_off.append(cast(int, req._col_off))
                else:
                    new_off.append(0)
                    if not emits:
                        cols.prefills.append(req)
            seq = cols.seq + list(range(cols.num_joined - len(new), cols.num_joined))
            if own:
                off.extend(new_off)
            else:
                off = off + new_off
            own = True
            cols.seq = seq
        cols.off = off
        if not finished:
            return []
        if len(finished) > 1:
            finished.sort(key=lambda f: f[0]._col_seq)
        rows = [running.index(req) for req, _ in finished]
        for req, status in finished:
            cols.remove(req)
            cols.detach(req)
            sched.finish_request(req, status, now_s)
        if not own:
            off = off[:]
        seq = cols.seq if new else cols.seq[:]  # (a join made it anew)
        assert running is cols.reqs
        for i in sorted(rows, reverse=True):
            del running[i], off[i], seq[i]
        cols.off, cols.seq = off, seq
        return [req for req, _ in finished]

    def _start_decoding(self, cols: RunningColumns, req: Request, num_updates: int,
                        finished: list[tuple[Request, RequestStatus]]) -> bool:
        """A row's first sampled token of the period (its outputs are all written): stop it (listed in
        `finished`) or make it a decoder. True if it decodes on."""
        sched = self.sched
        num_tokens = req.num_prompt_tokens + len(req._output_ids) + 1
        req._col_off = off = num_tokens - num_updates
        if num_tokens == req.num_prompt_tokens + 1:
            sched.num_running_without_output -= 1
        if cols.token in req.stop_token_set:
            finished.append((req, _STOPPED))
        elif num_tokens >= req.max_num_tokens:
            finished.append((req, _CAPPED))
        else:
            cols.add_decoder(req, off)
            return True
        return False
