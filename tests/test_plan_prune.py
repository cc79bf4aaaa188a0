"""roofline.planning.prune / roofline.planning.bounds: the pruned plan gives the answer of the same searches run on every
configuration (`prune=False`), with fewer simulations; the replica search finds the smallest passing replica count;
the cost model's bounds hold against simulated saturation."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from roofline.engine_args import EngineArgs
from roofline.planning import plan as planner
from roofline.planning.backend import SimulatorBackend
from roofline.planning.bounds import uncached_prompt_tokens
from roofline.planning.executor import LocalExecutor
from roofline.planning.plan import PlanRequest
from roofline.planning.prune import ReplicaSearch, probe_task, replicas_lower_bound, run_rounds
from roofline.planning.search import NOMINAL, Config, Efficiency, RunResult, Slo, summarize
from roofline.sim.workload import RequestSpec
from tests.test_plan import PRICES, SLO, FakeBackend


@dataclass(frozen=True)
class CountingBackend(FakeBackend):
    """The fake backend, counting its simulations per configuration (in this process)."""

    runs: list[Config] = field(default_factory=list, compare=False, hash=False)

    def run(self, config: Config, efficiency: Efficiency, rate_per_s: float, num_requests: int) -> RunResult:
        self.runs.append(config)
        return super().run(config, efficiency, rate_per_s, num_requests)


def _request(**kw: object) -> PlanRequest:
    base = dict(model="llama-tiny", hardware=("big", "small"), workload="sharegpt-chat", slo=SLO,
                target_rate_per_s=40.0, tensor_parallel_sizes=(1, 2, 4), max_num_seqs=(64, 128, 256),
                sensitivity=True, num_requests=400)
    base.update(kw)
    return PlanRequest(**base)


def _answer(plan: planner.Plan) -> list[tuple]:
    """Each hardware's best: configuration, replicas, GPUs, cost, refined rate, and the sensitivity's GPUs."""
    return [(c.config, c.num_replicas, c.num_gpus, c.usd_per_hour, c.max_rate_per_s, c.gpus_range())
            for c in plan.best_per_hardware()]


@pytest.mark.parametrize("target", [3.0, 40.0, 130.0])
def test_the_pruned_plan_answers_as_the_exhaustive_one_with_fewer_simulations(target: float) -> None:
    pruned_backend, full_backend = CountingBackend(), CountingBackend()
    pruned = planner.make_plan(_request(target_rate_per_s=target), pruned_backend, PRICES, num_workers=1)
    full = planner.make_plan(_request(target_rate_per_s=target, prune=False), full_backend, PRICES, num_workers=1)
    assert pruned.best is not None and _answer(pruned) == _answer(full)
    assert pruned.best.config == full.best.config and pruned.best.usd_per_hour == full.best.usd_per_hour
    assert len(pruned_backend.runs) < len(full_backend.runs)
    # What pruning left out could not have been any hardware's best: it needs more GPUs than that best.
    for c in pruned.skipped:
        best = next(b for b in pruned.best_per_hardware() if b.config.hardware == c.config.hardware)
        twin = next(f for f in full.configs if f.config == c.config)
        assert twin.num_gpus is None or twin.num_gpus > best.num_gpus or (
            twin.num_gpus == best.num_gpus and planner._rank_key(twin) > planner._rank_key(best))


def test_the_plan_does_not_depend_on_the_number_of_workers() -> None:
    request = _request(hardware=("big",), tensor_parallel_sizes=(1, 2), max_num_seqs=(64, 256))
    assert planner.make_plan(request, FakeBackend(), PRICES, num_workers=1) == \
        planner.make_plan(request, FakeBackend(), PRICES, num_workers=2)


@pytest.mark.parametrize("target", [2.0, 9.0, 31.0, 80.0])
def test_replica_search_finds_the_fewest_replicas_that_pass(target: float) -> None:
    backend, config = FakeBackend(), Config("big", 1, 64)
    slo, n = SLO, 400

    def passes(k: int) -> bool:
        return probe_task((backend, config, NOMINAL, slo, n, target / k)).point.passes

    smallest = next(k for k in range(1, 200) if passes(k))
    bound = backend.bounds(config, NOMINAL, n, slo.percentile).passable_rate_per_s(slo.ttft_s, 500)
    k_min = replicas_lower_bound(target, bound)
    search = ReplicaSearch(config, NOMINAL, target, k_min)
    with LocalExecutor(1) as executor:
        probes = run_rounds(backend, [search], slo, n, executor)
    assert search.decided and search.pass_k == smallest and search.search().max_rate_per_s == target / smallest
    assert probes <= 7


def test_a_capped_search_stops_at_the_cap_without_an_answer() -> None:
    backend, config = FakeBackend(), Config("big", 1, 64)
    search = ReplicaSearch(config, NOMINAL, 80.0, 1, cap_k=lambda: 3)  # needs about 21 replicas
    with LocalExecutor(1) as executor:
        run_rounds(backend, [search], SLO, 400, executor)
    assert search.dominated and search.pass_k is None and [p.rate_per_s for p in search.points] == [80.0 / 1, 80.0 / 3]


def test_a_configuration_whose_latency_bound_misses_the_slo_is_never_simulated() -> None:
    backend = CountingBackend(ttft_floor_s=0.3)  # its TTFT bound: 0.3 s
    one = dict(hardware=("big",), tensor_parallel_sizes=(1,), max_num_seqs=(64,), sensitivity=False)
    plan = planner.make_plan(_request(slo=Slo(0.25, 0.05), **one), backend, PRICES, 1)
    assert backend.runs == [] and plan.best is None
    assert plan.configs[0].why_not.startswith("SLOs missed at any rate, before simulating: the TTFT percentile is "
                                              "at least 0.3 s")
    served = planner.make_plan(_request(slo=Slo(0.5, 0.05), **one), backend, PRICES, 1)
    assert served.best is not None and backend.runs


def test_uncached_prompt_tokens_subtract_what_a_cache_could_hold() -> None:
    specs = [RequestSpec("a", 0.0, 100, 10), RequestSpec("b", 0.0, 120, 10, prefix_group=0),
             RequestSpec("c", 0.0, 50, 5, session_id=1, turn=0), RequestSpec("d", 1.0, 90, 5, session_id=1, turn=1),
             RequestSpec("e", 0.0, 40, 1, block_ids=(1, 2, 3), block_tokens=16),
             RequestSpec("f", 0.0, 40, 1, block_ids=(1, 2, 4), block_tokens=16)]
    # b: 32 prefix tokens; d: its history is c's 50 + 5; f: blocks 1 and 2 seen before (32 tokens).
    assert uncached_prompt_tokens(specs, prefix_tokens=32).tolist() == [100, 88, 50, 35, 40, 8]


@pytest.mark.parametrize(("hardware", "tp", "seqs"), [("h100-sxm", 1, 64), ("a100-80gb-sxm", 1, 256),
                                                     ("h200-sxm", 2, 128)])
def test_the_rate_bound_holds_against_the_simulated_saturation(hardware: str, tp: int, seqs: int) -> None:
    backend = SimulatorBackend("llama-3.1-8b", "sharegpt-chat", EngineArgs(max_model_len=8192))
    config = Config(hardware, tp, seqs)
    slo = Slo(2.0, 0.1)
    bounds = backend.bounds(config, NOMINAL, 240, slo.percentile)
    burst = backend.run(config, NOMINAL, math.inf, 300)
    served = 300 / float(np.max(burst.finish_s))  # all requests at once: the fastest the replica serves them
    assert served < bounds.rate_per_s < 2.0 * served
    passable = bounds.passable_rate_per_s(slo.ttft_s, 300)
    assert not summarize(backend.run(config, NOMINAL, passable, 300), passable, slo).passes
    # The latency floors: no request is faster than its bound at any load.
    light = summarize(backend.run(config, NOMINAL, 0.2 * served, 300), 0.2 * served, slo)
    assert bounds.ttft_s <= light.ttft_s and bounds.tpot_s <= light.tpot_s
