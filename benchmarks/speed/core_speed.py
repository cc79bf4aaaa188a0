"""Speed of engine.core's scheduler: what the simulator pays per step, without any cost model.

    python benchmarks/speed/core_speed.py

1. A decode step of 256 running requests (context ~1000 tokens, prefix caching on): schedule() plus
   update_from_output(), best of several repeats of 200 steps (the machine is shared; the minimum is the
   least disturbed measurement).
2. 10,000 requests (prompt 50-1500, output 20-600 tokens, uniform; all arrive at once) through the scheduler
   with max_num_seqs 256, budget 8192 and a fake executor: total seconds and steps.
Times are CPU time of this process (`time.process_time`), which other jobs on a shared machine disturb far
less than wall time. Results go to BENCHMARKS.md, section "Scheduler speed".
"""

from __future__ import annotations

import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.core import CacheConfig, Request, SamplingParams, Scheduler, SchedulerConfig, TokenIdGenerator  # noqa: E402


def decode_step_us(num_seqs: int = 256, repeats: int = 7, steps: int = 200) -> float:
    sched = Scheduler(SchedulerConfig(max_num_seqs=num_seqs, max_num_batched_tokens=8192, max_model_len=4096),
                      CacheConfig(num_blocks=40_000, block_size=16))
    gen = TokenIdGenerator(32000, seed=0, reserved_ids=(1, 2))
    for i in range(num_seqs):
        sched.add_request(Request(f"r{i}", gen.prefix(0, 200) + gen.unique(800),
                                  SamplingParams(max_tokens=3000, ignore_eos=True)))
    plan = sched.schedule(0.0)
    while plan.num_prefill_tokens:
        sched.update_from_output(plan, [7] * plan.num_seqs, 0.0)
        plan = sched.schedule(0.0)
    sched.update_from_output(plan, [7] * plan.num_seqs, 0.0)
    best = float("inf")
    now = 1.0
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(steps):
            plan = sched.schedule(now)
            sched.update_from_output(plan, [7] * plan.num_seqs, now)
            now += 0.01
        best = min(best, (time.process_time() - t0) / steps)
        assert plan.num_seqs == num_seqs and plan.num_decode_tokens == num_seqs
    return best * 1e6


def many_requests(num_requests: int = 10_000) -> tuple[float, int]:
    rng = random.Random(0)
    gen = TokenIdGenerator(32000, seed=0, reserved_ids=(1, 2))
    sched = Scheduler(SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=4096),
                      CacheConfig(num_blocks=30_000, block_size=16))
    requests = [Request(f"r{i}", gen.prefix(i % 10, 100) + gen.unique(rng.randint(50, 1400)),
                        SamplingParams(max_tokens=rng.randint(20, 600), ignore_eos=True))
                for i in range(num_requests)]
    t0 = time.process_time()
    for req in requests:
        sched.add_request(req)
    num_steps = 0
    now = 0.0
    while sched.has_unfinished():
        plan = sched.schedule(now)
        sched.update_from_output(plan, [7] * plan.num_seqs, now)
        num_steps += 1
        now += 0.01
    return time.process_time() - t0, num_steps


def main() -> None:
    print(f"python {platform.python_version()} on {platform.processor() or platform.machine()}")
    print(f"256-seq decode step, schedule + update_from_output: {decode_step_us():.0f} us (best of 7 x 200 steps)")
    seconds, steps = many_requests()
    print(f"10,000 requests, fake executor: {seconds:.2f} s for {steps} steps ({seconds / steps * 1e6:.0f} us/step)")


if __name__ == "__main__":
    main()
