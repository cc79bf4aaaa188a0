"""vLLM V1's scheduler with several batches in flight, as pipeline parallelism runs it (torch-free, so that the
simulator can drive it).

    sched = PipelineScheduler(SchedulerConfig(...), CacheConfig(...), pipeline_parallel_size=2, async_scheduling=True)
    plan_a = sched.schedule(now_s)            # up to `max_concurrent_batches` plans may be in flight
    plan_b = sched.schedule(now_s)
    finished = sched.update_from_output(plan_a, sampled, now_s)     # outputs come back oldest first

What differs from `engine.core.scheduler.Scheduler` (vLLM 0.32, read in its wheel):
- The engine core keeps up to `max_concurrent_batches` batches in flight (vllm/config/vllm.py: PP + 1 with
  asynchronous scheduling on the V2 model runner, 0.32's default; PP without it) and takes their outputs oldest first
  (vllm/v1/engine/core.py `step_with_batch_queue`): `schedule` may be called again before `update_from_output`.
- A request's computed tokens advance when it is scheduled, so a request whose tokens are all scheduled gets none
  until its output is back (vllm/v1/core/sched/scheduler.py `schedule`: "num_new_tokens == 0 ... PP>1 and we have
  already scheduled all prompt tokens but they are not finished yet": skipped, not a reason to stop). The next chunk
  of a prompt is scheduled while the previous one is in flight.
- With asynchronous scheduling (vllm/v1/core/sched/async_scheduler.py `AsyncScheduler`): a step that samples a token
  leaves an output placeholder, so the request's next decode is scheduled before that token is known (its input
  reaches the first stage from the last one, `roofline.cost.pipeline`), but only `PP` scheduler steps later
  (`next_decode_eligible_step = current_step + decode_stagger`, decode_stagger = PP; `current_step` counts every
  `schedule` call, empty ones too); no step is scheduled once the known tokens + 1 reach the length limit
  (`num_computed_tokens + 2 - num_output_placeholders >= num_prompt_tokens + max_tokens`, vLLM's check, which can
  still schedule one decode more than needed when two are in flight: its token is dropped, as vLLM drops it).
- A preempted request's outputs still in flight are dropped when they arrive (vLLM: `num_stale_output_tokens`); while
  any are in flight it is not re-admitted. vLLM then admits the requests behind it (`skip_request`); here admission
  stops at it for that step (a deviation, only under preemption with batches in flight).

Everything else (token budget, chunked prefill, prefix caching, preemption by recompute) is the base class's; the
scheduler's fast path is off (it assumes one step in flight).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from engine.core.config import CacheConfig, SchedulerConfig
from engine.core.request import Request, RequestStatus
from engine.core.scheduler import Scheduler
from engine.core.step_plan import StepPlan

_RUNNING = RequestStatus.RUNNING


def max_concurrent_batches(pipeline_parallel_size: int, async_scheduling: bool) -> int:
    """Batches the engine core keeps in flight (vllm/config/vllm.py `VllmConfig.max_concurrent_batches`, the V2
    model runner: PP + 1 with asynchronous scheduling, else PP; one stage with asynchronous scheduling: 2)."""
    if async_scheduling:
        return pipeline_parallel_size + 1
    return pipeline_parallel_size


class PipelineScheduler(Scheduler):
    def __init__(self, config: SchedulerConfig, cache: CacheConfig, pipeline_parallel_size: int,
                 async_scheduling: bool) -> None:
        super().__init__(config, cache, fast_paths=False)
        self.pipeline_parallel_size = pipeline_parallel_size
        self.async_scheduling = async_scheduling
        self.max_in_flight = max_concurrent_batches(pipeline_parallel_size, async_scheduling)
        self.current_step = 0  # every schedule() call, empty ones too (vLLM's Scheduler.current_step)
        self.in_flight: deque[StepPlan] = deque()
        self._placeholders: dict[str, int] = {}  # request id -> outputs scheduled, not yet back
        self._eligible_step: dict[str, int] = {}  # request id -> first step its next decode may be scheduled in
        self._stale: dict[str, int] = {}  # a preempted request's outputs still in flight

    def schedule(self, now_s: float | None = None) -> StepPlan:
        # The base class's algorithm (its `schedule` comment), with the running queue's pass below.
        assert len(self.in_flight) < self.max_in_flight, "more batches in flight than the engine core allows"
        self.current_step += 1
        plan = StepPlan(self.num_steps)
        threshold = self.config.long_prefill_token_threshold
        if len(self.running) + len(self.waiting) <= 1:
            threshold = 0
        budget = self.config.max_num_batched_tokens
        self._schedule_running(plan, budget, threshold)
        if not plan.preempted_request_ids:
            self._schedule_waiting(plan, budget - plan.num_batched_tokens, threshold, now_s)
        plan.num_kv_blocks_used = self.kv.num_used_blocks
        plan.num_kv_blocks_total = self.kv.num_usable_blocks
        plan.num_running = len(self.running)
        plan.num_waiting = len(self.waiting)
        if plan.requests:
            self.in_flight.append(plan)
            self.num_steps += 1
        return plan

    def _schedule_running(self, plan: StepPlan, budget: int, threshold: int) -> None:
        """The running queue in order; a request with nothing to compute now is passed over (module docstring)."""
        running = self.running
        max_pos = self.config.max_model_len - 1
        placeholders, eligible = self._placeholders, self._eligible_step
        preempted: list[str] = []
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            rid = req.request_id
            computed = req.num_computed_tokens
            pending = placeholders.get(rid, 0)
            if (pending and computed + 2 - pending >= req.max_num_tokens) or self.current_step < eligible.get(rid, 0):
                i += 1
                continue
            num_new_tokens = req.num_tokens + pending - computed
            if 0 < threshold < num_new_tokens:
                num_new_tokens = threshold
            num_new_tokens = min(num_new_tokens, budget, max_pos - computed)
            if num_new_tokens <= 0:
                i += 1
                continue
            scheduled = self._allocate_and_add(plan, req, num_new_tokens, i, budget, preempted)
            if scheduled is None:
                break
            i, budget = scheduled
        plan.preempted_request_ids = tuple(preempted)

    def _add_to_plan(self, plan: StepPlan, req: Request, num_new_tokens: int) -> None:  # type: ignore[override]
        rid = req.request_id
        pending = self._placeholders.get(rid, 0)
        plan.add_seq(req, num_new_tokens, pending)
        req.num_computed_tokens += num_new_tokens
        if self.async_scheduling and req.num_computed_tokens >= req.num_tokens + pending:  # samples a token
            self._placeholders[rid] = pending + 1
            self._eligible_step[rid] = self.current_step + self.pipeline_parallel_size

    def _schedule_waiting(self, plan: StepPlan, budget: int, threshold: int, now_s: float | None) -> None:
        if self.waiting and self._stale.get(self.waiting.peek_request().request_id):
            return  # its old outputs are still in flight (module docstring)
        super()._schedule_waiting(plan, budget, threshold, now_s)

    def preempt_request(self, req: Request) -> None:
        rid = req.request_id
        in_flight = sum(1 for p in self.in_flight for r, e in zip(p.requests, p.emits) if e and r is req)
        if in_flight:
            self._stale[rid] = in_flight
        self._placeholders.pop(rid, None)
        self._eligible_step.pop(rid, None)
        super().preempt_request(req)

    def update_from_output(self, plan: StepPlan, sampled: dict[str, int] | Sequence[int] | int,
                           now_s: float | None = None) -> list[Request]:
        """The oldest batch in flight's sampled tokens (an int: every emitting sequence's token, the simulator's
        case; a sequence aligned with the plan's sequences; or a dict by request id); returns the requests that
        finished."""
        if plan.is_empty:
            return []
        assert self.in_flight and plan is self.in_flight[0], "outputs come back oldest batch first"
        self.in_flight.popleft()
        if isinstance(sampled, int):
            tokens: Sequence[int] = [sampled] * plan.num_seqs
        elif isinstance(sampled, dict):
            tokens = [sampled.get(r.request_id, 0) for r in plan.requests]
        else:
            tokens = sampled
        finished = []
        for req, token, emit in zip(plan.requests, tokens, plan.emits):
            if not emit:
                continue
            rid = req.request_id
            stale = self._stale.get(rid)
            if stale:  # an output of its run before it was preempted
                if stale == 1:
                    del self._stale[rid]
                else:
                    self._stale[rid] = stale - 1
                continue
            if req.status is not _RUNNING:  # finished while this batch was in flight (its extra decode)
                continue
            if self.async_scheduling:
                self._placeholders[rid] -= 1
            req.append_output_token(token, now_s)
            if req.num_tokens < req.next_check_len and token not in req.stop_token_set:
                continue
            if self._check_stop(req, token, now_s):
                finished.append(req)
                self._placeholders.pop(rid, None)
                self._eligible_step.pop(rid, None)
        if finished:
            self.running = [r for r in self.running if r.status is _RUNNING]
        return finished
