"""Whether a simulated deployment keeps up with its load, and what limits it: one verdict per run.

    v = load_verdict(result.requests, result.steps, max_num_seqs=1024, max_num_batched_tokens=8192,
                     burst=False)
    v.line()        # "verdict: OVERLOADED: offered 8.00 req/s, served 5.58 req/s; the queue grows ..."
    v.steady        # False: no steady state, so no steady-state figures are worth printing

Definitions (each from the run's own records, so the same run gives the same verdict):
- offered load: requests per second over the span the client made them due (first to last due time; a request's
  due time is when it was sent plus its wait for a slot in the closed loop); a burst (every request due at once)
  offers an unbounded rate;
- served load: completions per second between the 10th and the 90th percentile completion (as `roofline plan`
  and the steady-state block measure it);
- the queue grows without bound when the wait before a request is first scheduled (the client's wait for a slot
  plus the engine's queueing) rises with the due time: the least-squares slope of wait against due time over the
  requests 10 %-90 % by send order above `GROWTH_SLOPE` seconds per second. A stable queue has slope ~0; a
  deployment offered a rate L that serves only M < L has slope ~L/M - 1 (the backlog at t is (L - M) t, which
  takes (L/M - 1) t to serve). The served/offered ratio alone would flag a short run's ramp-up;
- the resource that limits the batch, over the steps in the busiest stretch (those while requests wait): the KV
  cache (mean use >= `KV_FULL` of the blocks, or any preemption), the token budget (mean tokens per step >=
  `BUDGET_FULL` of max_num_batched_tokens), max_num_seqs (mean running >= `BUDGET_FULL` of it), else the device
  itself (compute and memory: every step is as large as the queue allows and takes as long as the cost model says).

In the closed loop (`--max-concurrency N`) the engine never holds more than N requests: the queue that can grow is
the client's (requests due but waiting for a slot), and the engine runs at a steady concurrency of N whatever the
offered rate, so a steady state exists unless the engine's own queue grows.

A steady state exists when the load is not a burst and the queue does not grow: only then are the steady-state
figures (the 10 %-90 % window) a property of the deployment rather than of the run's length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from roofline.sim.bench_metrics import DRAIN_FRACTION, WARMUP_FRACTION
from roofline.sim.table import Columns, column, skipna_mean, skipna_sum

# The wait grows by more than this many seconds per second of due time: the queue grows without bound (a 5 %
# shortfall of served against offered load; below it the run's own noise, e.g. a burst of long prompts, dominates).
GROWTH_SLOPE = 0.05
# Shares of the limit at which the KV cache, the token budget and max_num_seqs count as the saturated resource.
KV_FULL = 0.9
BUDGET_FULL = 0.9


@dataclass(frozen=True)
class Verdict:
    """The load verdict of one run (module docstring)."""

    offered_rate_per_s: float  # inf for a burst
    served_rate_per_s: float | None  # None: too few completions for a window
    wait_slope: float | None  # seconds of extra wait per second of due time; None: too few requests
    burst: bool
    closed_loop: int | None  # max_concurrency of a closed loop, else None
    engine_wait_slope: float | None  # the same slope of the engine's queueing alone (against the send time)
    limit: str  # "KV cache", "token budget (max_num_batched_tokens)", "max_num_seqs", "compute" or "none"
    mean_kv_usage: float
    mean_budget_usage: float
    mean_seqs_usage: float
    num_preemptions: int
    over: str  # which steps the usage figures average: "while requests wait" or "of the run"

    @property
    def overloaded(self) -> bool:
        """The queue grows without bound: the client's (open loop: the offered load exceeds the served one) or,
        in a closed loop, the engine's."""
        slope = self.engine_wait_slope if self.closed_loop is not None else self.wait_slope
        return slope is not None and slope > GROWTH_SLOPE

    @property
    def steady(self) -> bool:
        """Whether the run has a steady state (not an open-loop burst, the queue bounded, enough requests)."""
        if self.closed_loop is not None:
            return not self.overloaded and self.engine_wait_slope is not None and self.served_rate_per_s is not None
        return not self.burst and not self.overloaded and self.wait_slope is not None \
            and self.served_rate_per_s is not None

    def as_dict(self) -> dict[str, object]:
        return {"overloaded": self.overloaded, "steady_state": self.steady, "burst": self.burst,
                "offered_request_rate": self.offered_rate_per_s, "served_request_rate": self.served_rate_per_s,
                "wait_growth_s_per_s": self.wait_slope, "max_concurrency": self.closed_loop,
                "engine_wait_growth_s_per_s": self.engine_wait_slope, "limit": self.limit,
                "mean_kv_cache_usage": self.mean_kv_usage, "mean_token_budget_usage": self.mean_budget_usage,
                "mean_max_num_seqs_usage": self.mean_seqs_usage, "num_preemptions": self.num_preemptions,
                "text": self.line()}

    def line(self) -> str:
        offered = "a burst (all requests at once)" if self.burst else f"{self.offered_rate_per_s:.2f} req/s"
        served = (f"{self.served_rate_per_s:.2f} req/s" if self.served_rate_per_s is not None
                  else "too few completions to measure")
        usage = (f"KV cache {self.mean_kv_usage:.0%}, token budget {self.mean_budget_usage:.0%}, max_num_seqs "
                 f"{self.mean_seqs_usage:.0%} used on average over the steps {self.over}"
                 + (f", {self.num_preemptions} preemptions" if self.num_preemptions else ""))
        if self.closed_loop is not None and not self.overloaded:
            grows = self.wait_slope is not None and self.wait_slope > GROWTH_SLOPE
            client = ("the client's queue grows: the offered load exceeds what "
                      f"{self.closed_loop} concurrent requests are served at" if grows and not self.burst
                      else "requests wait for a slot by design" if self.burst else "the client's queue stays bounded")
            return (f"verdict: closed loop of {self.closed_loop}: offered {offered}, served {served}; {client}; the "
                    f"engine's queue stays bounded ({usage})")
        if self.burst:
            return (f"verdict: BURST: offered {offered}, served {served} (10-90 % completions); no steady state; "
                    f"limited by {self.limit} ({usage})")
        if self.overloaded:
            assert self.wait_slope is not None
            return (f"verdict: OVERLOADED: offered {offered}, served {served}; the queue grows without bound (each "
                    f"request waits {self.wait_slope:.2f} s longer per second of the run), so the latencies depend "
                    f"on the run's length and no steady state exists; saturated: {self.limit} ({usage}); lower "
                    f"--request-rate or add replicas")
        if self.wait_slope is None or self.served_rate_per_s is None:
            return f"verdict: too few requests to judge the load (offered {offered}, served {served})"
        return f"verdict: keeps up: offered {offered}, served {served}; the queue stays bounded ({usage})"


def load_verdict(requests: Columns, steps: Columns, max_num_seqs: int, max_num_batched_tokens: int,
                 burst: bool, max_concurrency: int | None = None) -> Verdict:
    """The verdict of a run from its requests and steps tables (`roofline.sim.recorder.SimulationResult`);
    `burst`: every request was made due at once (an infinite request rate); `max_concurrency`: the closed loop's
    number of slots, None in open loop."""
    n = len(requests)
    sent = column(requests, "arrival_s", float)
    client_wait = column(requests, "client_queue_s", float)
    due = sent - client_wait
    queueing = column(requests, "queueing_s", float)
    wait = client_wait + queueing
    order = np.argsort(due, kind="stable")
    lo, hi = int(n * WARMUP_FRACTION), n - int(n * DRAIN_FRACTION)
    span = float(due.max() - due.min()) if n else 0.0
    burst = burst or (n > 1 and span == 0.0)
    offered = math.inf if burst or span <= 0 else (n - 1) / span
    kept = order[lo:hi]
    slope = _slope(due[kept], wait[kept])
    engine_slope = _slope(sent[kept], queueing[kept])
    done = np.sort(column(requests, "finish_s", float))
    first, last = int(n * WARMUP_FRACTION), n - 1 - int(n * DRAIN_FRACTION)
    served = (last - first) / float(done[last] - done[first]) if last > first and done[last] > done[first] else None
    # The steps while requests wait (the engine's queue or the client's): where a limit binds, if one does.
    queued = column(steps, "num_waiting") > 0
    busy, over = (queued, "while requests wait") if queued.any() else (slice(None), "of the run")
    num_busy = int(np.count_nonzero(queued)) if queued.any() else len(steps)
    kv = skipna_mean(column(steps, "kv_usage")[busy]) if num_busy else 0.0
    budget = skipna_mean(column(steps, "num_batched_tokens")[busy] / max_num_batched_tokens) if num_busy else 0.0
    seqs = skipna_mean(column(steps, "num_running")[busy] / max_num_seqs) if num_busy else 0.0
    preemptions = int(skipna_sum(column(steps, "num_preemptions"))) if len(steps) else 0
    waiting = bool(queued.any()) or bool(np.any(client_wait > 0))
    if kv >= KV_FULL or preemptions:
        limit = "KV cache"
    elif budget >= BUDGET_FULL:
        limit = "token budget (max_num_batched_tokens)"
    elif seqs >= BUDGET_FULL:
        limit = "max_num_seqs"
    elif waiting:
        limit = "compute (the device's step time)"
    else:
        limit = "none"
    return Verdict(offered, served, slope, burst, max_concurrency, engine_slope, limit, kv, budget, seqs, preemptions,
                   over)


def _slope(x: np.ndarray, y: np.ndarray) -> float | None:
    """The least-squares slope of y against x; None with fewer than 3 points or no spread in x."""
    if len(x) < 3 or not np.ptp(x) > 0 or not np.all(np.isfinite(y)):
        return None
    return float(np.polyfit(x, y, 1)[0])
