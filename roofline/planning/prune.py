"""The plan's searches with pruning: branch and bound on the number of replicas, driven in rounds of probes.

The plan needs, per configuration, the replicas a target rate T takes: the smallest k whose probe at T / k meets the
SLOs (`ReplicaSearch`; latency percentiles do not fall as load rises, so every larger k passes too). The cost
model's rate bound (`roofline.planning.bounds`) gives the smallest k worth probing; a failing probe that was
overloaded measures the rate the replica serves, which sets the next guess; once one k passes, bisection between
the largest failing and the smallest passing k ends it. Only each hardware's cheapest deployment matters (the
report shows each hardware's best; the answer is the cheapest of them): once some configuration of a hardware
serves with G GPUs, no other of that hardware probes a k that needs more than G GPUs (branch and bound), and one
whose bound already needs more is never simulated. Equal GPUs are probed where the tie could go either way
(`roofline.planning.plan._rank_key`: more max_num_seqs first, then the worst SLO ratio at the target load, which each
probe at T / k measures). The configurations equal but for max_num_seqs start from the answer of the one with the
most (a warm start: its k, then one less).

The answer then has its rate refined to within `REFINE_REL_TOL` between the passing T / k and the failing T / (k - 1)
(`Refine`); the sensitivity asks the same question at -10 % and +10 % efficiency starting from the nominal k.

Every probe of a round is independent (`probe_task` on the plan's executor); a round takes the `ROUND_SIZE` cheapest
pending probes, so the probes run, and the plan, depend neither on the executor nor on its number of workers. A
configuration's own probes do not depend on the others' (a cap only cuts its search short), so the answer equals
that of the same searches without pruning (`prune=False`; tests/test_plan_prune.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from roofline.planning.executor import Executor
from roofline.planning.search import (
    MAX_HALVINGS,
    Backend,
    Config,
    Efficiency,
    Point,
    Search,
    Slo,
    _downsample,
    num_simulated_requests,
    slo_ratio,
    summarize,
)

# Probes per round: independent simulations run at once on the executor. Fixed, so that a plan does not depend on
# the number of workers; a larger round keeps more workers busy and prunes less (a round's probes do not see each
# other's results).
ROUND_SIZE = 4
# After an overloaded failing probe (its steady throughput below OVERLOADED x its rate), the next guess offers this
# fraction of the throughput it measured: the answers of the shipped workloads lie at 0.6-0.95 of saturation.
JUMP_FRACTION = 0.8
OVERLOADED = 0.95
# A failing probe that was not overloaded and whose worst SLO percentile is within this factor of its limit is a near
# miss: the next guess is one replica more (else twice the replicas).
NEAR_MISS = 1.5
# The answer's rate per replica is refined to within this fraction (its replicas and cost are exact without it: it
# only says how much of the last replica's rate is used).
REFINE_REL_TOL = 0.10


@dataclass(frozen=True)
class ProbeResult:
    """One probe: its statistics, and its KV usage over time when it passed (downsampled, for the report)."""

    point: Point
    kv_time_s: tuple[float, ...] = ()
    kv_usage: tuple[float, ...] = ()


def probe_task(args: tuple[Backend, Config, Efficiency, Slo, int, float, bool]) -> ProbeResult:
    """One simulation at one offered rate (an executor task); with `early_stop` (the last item) it ends as soon as it
    certainly misses the SLOs (`roofline.planning.early_stop`: the same pass / fail)."""
    backend, config, efficiency, slo, num_requests, rate, early_stop = args
    run = backend.run(config, efficiency, rate, num_simulated_requests(num_requests), slo if early_stop else None)
    point = summarize(run, rate, slo)
    if point.passes and math.isfinite(rate):
        return ProbeResult(point, *_downsample(run.kv_time_s, run.kv_usage))
    return ProbeResult(point)


class Job(Protocol):
    """A search that asks for one probe at a time."""

    config: Config
    efficiency: Efficiency

    def next_rate(self) -> tuple[tuple[float, ...], float] | None:
        """(priority, rate) of the next probe; None when the job is done (or cut short)."""
        ...

    def record(self, rate: float, result: ProbeResult) -> None: ...


class ReplicaSearch:
    """The smallest k >= k_min (k_min: from the rate bound) whose probe at target / k passes, probing only k up to
    `cap_k()` (None: no cap). `fail_k` / `pass_k`: the largest k known to fail and the smallest known to pass (known
    from a probe, or implied: below k_min by the bound; `implied_pass_k` from a related search)."""

    def __init__(self, config: Config, efficiency: Efficiency, target_rate_per_s: float, k_min: int,
                 cap_k: Callable[[], int | None] = lambda: None, implied_pass_k: int | None = None,
                 first_k: int | None = None, slo: Slo | None = None, leader: ReplicaSearch | None = None) -> None:
        self.config, self.efficiency, self.target = config, efficiency, target_rate_per_s
        self.k_min = max(1, k_min)
        self.fail_k = self.k_min - 1
        self.pass_k = implied_pass_k
        self.k_max = self.k_min * 2 ** MAX_HALVINGS
        self.guess = max(self.k_min, first_k or self.k_min)
        # A warm start (`first_k`, or the `leader`'s answer once it has one: the same configuration with the most
        # max_num_seqs) steps down one replica at a time from a pass, where a cold one bisects.
        self.step_down = first_k is not None or leader is not None
        self.leader = leader
        self.started = leader is None
        self.cap_k = cap_k
        self.slo = slo
        self.points: list[Point] = []
        self.results: dict[int, ProbeResult] = {}
        self.exhausted = False  # failed at k_max: the SLOs are missed at any rate

    @property
    def decided(self) -> bool:
        return self.pass_k is not None and self.pass_k == self.fail_k + 1

    @property
    def finished(self) -> bool:
        return self.started and self.next_k() is None

    def next_k(self) -> int | None:
        if self.decided or self.exhausted:
            return None
        if not self.started:
            assert self.leader is not None
            if not self.leader.finished:
                return None  # waits for its leader's answer
            self.started = True
            if self.leader.decided and self.leader.pass_k is not None:
                self.guess = max(self.k_min, self.leader.pass_k)
            return self.next_k()
        if self.pass_k is None:
            k = min(self.guess, self.k_max)
        elif self.step_down and self.pass_k - 1 not in self.results:
            k = self.pass_k - 1
        else:
            k = (self.fail_k + self.pass_k) // 2
        cap = self.cap_k()
        if cap is not None:
            k = min(k, cap)
        return k if k > self.fail_k else None

    def next_rate(self) -> tuple[tuple[float, ...], float] | None:
        k = self.next_k()
        if k is None:
            return None
        return (float(k * self.config.num_gpus), self.target / k), self.target / k

    def record(self, rate: float, result: ProbeResult) -> None:
        k = round(self.target / rate)
        point = result.point
        self.points.append(point)
        self.results[k] = result
        if point.passes:
            self.pass_k = k if self.pass_k is None else min(self.pass_k, k)
            return
        self.fail_k = max(self.fail_k, k)
        if k >= self.k_max:
            self.exhausted = True
        elif self.pass_k is None:
            served = point.throughput_per_s
            if 0 < served < OVERLOADED * rate:  # capacity-limited: aim below what it served
                self.guess = max(k + 1, math.ceil(self.target / (JUMP_FRACTION * served) * (1 - 1e-9)))
            elif self.slo is not None and slo_ratio(point, self.slo) <= NEAR_MISS:  # just missed: one more
                self.guess = k + 1
            else:  # latency-limited well above the SLO at this load: halve the rate
                self.guess = 2 * k

    @property
    def dominated(self) -> bool:
        """Cut short by the cap: no k the cap allows passes, and the search is not over."""
        return self.started and not self.decided and not self.exhausted and self.next_k() is None \
            and self.pass_k is None

    def search(self) -> Search:
        """The search as the plan reports it: the highest passing rate probed (target / pass_k)."""
        best = self.results.get(self.pass_k) if self.pass_k is not None else None
        rate = self.target / self.pass_k if self.pass_k is not None else 0.0
        return Search(self.config, self.efficiency, rate, None, tuple(self.points),
                      best.point if best is not None else None, best.kv_time_s if best else (),
                      best.kv_usage if best else ())


class Refine:
    """The highest passing rate between a passing probe `lo` and a failing rate `hi_rate` (probed: `hi`; or above
    the rate bound), to within REFINE_REL_TOL of it, by geometric bisection (a latency percentile is flat up to a knee
    and then shoots up: interpolating across the knee creeps)."""

    def __init__(self, search: ReplicaSearch, hi_rate: float) -> None:
        self.inner = search
        self.config, self.efficiency = search.config, search.efficiency
        assert search.pass_k is not None
        lo = search.results[search.pass_k]
        self.lo, self.lo_result = lo.point, lo
        self.hi_rate = hi_rate
        self.points: list[Point] = []

    def next_rate(self) -> tuple[tuple[float, ...], float] | None:
        a, b = self.lo.rate_per_s, self.hi_rate
        if b <= a * (1 + REFINE_REL_TOL):
            return None
        return (0.0,), math.sqrt(a * b)

    def record(self, rate: float, result: ProbeResult) -> None:
        self.points.append(result.point)
        if result.point.passes:
            self.lo, self.lo_result = result.point, result
        else:
            self.hi_rate = rate

    def search(self) -> Search:
        inner = self.inner.search()
        return Search(self.config, self.efficiency, self.lo.rate_per_s, None, inner.points + tuple(self.points),
                      self.lo, self.lo_result.kv_time_s, self.lo_result.kv_usage)


def run_rounds(backend: Backend, jobs: Sequence[Job], slo: Slo, num_requests: int, executor: Executor,
               on_round: Callable[[int], None] | None = None, on_done: Callable[[], None] | None = None,
               after_round: Callable[[], None] | None = None, early_stop: bool = False) -> int:
    """Drive `jobs` to their end: each round probes the ROUND_SIZE lowest-priority next probes (at most one per job),
    on `executor`, and records them, then calls `after_round()`. Returns the number of probes run. `early_stop`:
    probes end once they certainly miss the SLOs (`probe_task`)."""
    total = 0
    while True:
        pending = [(p, i, rate) for i, job in enumerate(jobs) if (nxt := job.next_rate()) is not None
                   for p, rate in (nxt,)]
        if not pending:
            return total
        # Cheapest first relative to the cheapest pending probe of the same hardware, so that every hardware finds
        # its first answer (and its cap) in the first rounds.
        least: dict[str, float] = {}
        for p, i, _ in pending:
            hw = jobs[i].config.hardware
            least[hw] = min(least.get(hw, p[0]), p[0])
        pending.sort(key=lambda x: (x[0][0] / least[jobs[x[1]].config.hardware]
                                    if least[jobs[x[1]].config.hardware] > 0 else 0.0, x[0], x[1]))
        chosen = pending[:ROUND_SIZE]
        if on_round is not None:
            on_round(len(chosen))
        results = executor.map(probe_task, [(backend, jobs[i].config, jobs[i].efficiency, slo, num_requests, rate,
                                             early_stop) for _, i, rate in chosen], on_done)
        for (_, i, rate), result in zip(chosen, results):
            jobs[i].record(rate, result)
        total += len(chosen)
        if after_round is not None:
            after_round()


def replicas_lower_bound(target_rate_per_s: float, rate_bound_per_s: float) -> int:
    """The fewest replicas that can serve the target, by the rate bound."""
    if rate_bound_per_s <= 0:
        return 1 << 30
    return max(1, math.ceil(target_rate_per_s / rate_bound_per_s * (1 - 1e-9)))
