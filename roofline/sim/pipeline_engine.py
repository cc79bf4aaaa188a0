"""One replica's engine core under pipeline parallelism: its batch queue and the pipeline's clock.

vLLM 0.32's engine core with a batch queue (vllm/v1/engine/core.py `EngineCore.step_with_batch_queue`), each call:
schedule a batch if fewer than `max_concurrent_batches` are in flight and the scheduler has requests (an empty batch
joins the queue too), and return at once while the queue is not full and there was something to schedule; otherwise
block until the oldest batch's output is back and hand it to the scheduler. The input queue is drained before every
call (`EngineCore.run_busy_loop`). The simulator makes these calls at one instant until the engine core blocks
(`roofline.sim.simulator`); this class holds the queue and times each batch on the pipeline
(`roofline.cost.pipeline.PipelineClock`): a batch's decodes wait for the sampled tokens of the batch before them,
which the last stage sends to the first.
"""

from __future__ import annotations

from collections import deque

from engine.core.pipeline_scheduler import max_concurrent_batches
from engine.core.step_plan import StepPlan
from roofline.cost.pipeline import PipelineClock, PipelineStages


class PipelineEngine:
    def __init__(self, stages: PipelineStages, async_scheduling: bool) -> None:
        self.stages = stages
        self.clock = PipelineClock(stages)
        self.max_in_flight = max_concurrent_batches(stages.num_stages, async_scheduling)
        self.queue: deque[tuple[StepPlan, float]] = deque()  # (plan, when its output is back), oldest first
        self.ready_s: dict[str, float] = {}  # request id -> when its last sampled token reaches the first stage

    @property
    def is_full(self) -> bool:
        return len(self.queue) >= self.max_in_flight

    def submit(self, plan: StepPlan, now_s: float, host_s: float = 0.0) -> float:
        """Queue `plan` (scheduled at `now_s`, handed to the workers `host_s` later); returns when its output is
        back (an empty batch's at once: the workers take it in order and run nothing)."""
        if plan.is_empty:
            self.queue.append((plan, now_s))
            return now_s
        ready = self.ready_s
        inputs_s = max([ready.get(r.request_id, 0.0) for r in plan.requests])
        done = self.clock.submit(plan, now_s + host_s, inputs_s)
        back = done + self.stages.token_broadcast_s(plan.num_emitting_seqs)
        for req, emit in zip(plan.requests, plan.emits):
            if emit:
                ready[req.request_id] = back
        self.queue.append((plan, done))
        return done

    def forget(self, request_id: str) -> None:
        """A finished request's entry."""
        self.ready_s.pop(request_id, None)
