"""roofline.planning.prune / roofline.planning.bounds: the pruned plan gives the answer of the same searches run on every
configuration (`prune=False`), with fewer simulations; the replica search finds the smallest passing replica count;
the cost model's bounds hold against simulated saturation."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

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

    def run(self, config: Config, efficiency: Efficiency, rate_per_s: float, num_requests: int,
            stop_slo: Slo | None = None) -> RunResult:
        self.runs.append(config)
        return super().run(config, efficiency, rate_per_s, num_requests, stop_slo)


def _request(**kw: object) -> PlanRequest:
    base = dict(model="llama-tiny", hardware=("big", "small"), workload="sharegpt-chat", slo=SLO,
                target_rate_per_s=40.0, tensor_parallel_sizes=(1, 2, 4), max_num_seqs=(64, 128, 256),
                sensitivity=True, num_requests=400)
    base.update(kw)
    return PlanRequest(**base)


def _answer(plan: planner.Plan) -> list[tuple]:
    """Each hardware's best: configuration, replicas, GPUs, cost; the answer's refined rate and sensitivity."""
    assert plan.best is not None
    return [(c.config, c.num_replicas, c.num_gpus, c.usd_per_hour) for c in plan.best_per_hardware()] + [
        (plan.best.max_rate_per_s, plan.best.gpus_range())]


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
        return probe_task((backend, config, NOMINAL, slo, n, target / k, False)).point.passes

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


# ---- data / expert parallelism ---------------------------------------------------------------------------

def test_launch_lines_of_a_two_node_dp_ep_replica_name_head_and_headless_nodes() -> None:
    from roofline.engine_args import EngineArgs
    from roofline.planning.deploy import DP_RPC_PORT, HEAD_NODE_ADDRESS, launch
    from roofline.planning.plan import ConfigPlan
    from roofline.planning.search import Fit

    known = {line for line in (Path(__file__).parent / "data" / "vllm-0.32.0-engine-flags.txt").read_text().split()
             if line.startswith("--")} | {"--headless"}  # (a vllm serve flag, not an engine flag)
    one_node = ConfigPlan(Config("h200-sxm", 1, 256, data_parallel_size=8, expert_parallel=True), Fit(1000), None, 1.0)
    (line,) = launch("deepseek-r1", EngineArgs(), one_node, {})
    assert "--tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel --max-num-seqs 256" in line
    assert "--headless" not in line and "--data-parallel-size-local" not in line
    two_nodes = replace(one_node, config=replace(one_node.config, data_parallel_size=16))
    head, worker = launch("deepseek-r1", EngineArgs(all2all_backend="deepep_low_latency"), two_nodes, {})
    common = (f"--data-parallel-size-local 8 --data-parallel-address '{HEAD_NODE_ADDRESS}' --data-parallel-rpc-port "
              f"{DP_RPC_PORT}")
    assert head.endswith(common) and "--data-parallel-size 16" in head and "--headless" not in head
    assert worker.endswith(f"--headless {common} --data-parallel-start-rank 8")
    for text in (head, worker):
        assert "--enable-expert-parallel" in text and "--all2all-backend deepep_low_latency" in text
        assert {w for w in text.split() if w.startswith("--")} <= known


def test_the_search_space_holds_dp_and_ep_layouts_with_tp() -> None:
    request = PlanRequest(model="deepseek-r1", hardware=("h200-sxm",), workload="sharegpt-chat", slo=Slo(5.0, 0.2),
                          target_rate_per_s=4.0, tensor_parallel_sizes=(1, 8), data_parallel_sizes=(1, 8, 16),
                          expert_parallel=(False, True), max_num_seqs=(64,))
    labels = [c.label for c in request.configs()]
    assert len(labels) == len(set(labels)) == 2 * 3 * 2
    assert {"h200-sxm TP8 seqs64", "h200-sxm TP1 DP8 EP seqs64", "h200-sxm TP1 DP16 EP seqs64"} <= set(labels)
    assert Config("h", 1, 64, data_parallel_size=16, expert_parallel=True).num_gpus == 16


@pytest.mark.slow
def test_the_plan_searches_dp_and_ep_layouts_of_a_moe_model() -> None:
    request = PlanRequest(model="deepseek-r1", hardware=("h200-sxm",), workload="sharegpt-chat", slo=Slo(5.0, 0.2),
                          target_rate_per_s=4.0, tensor_parallel_sizes=(1, 8), data_parallel_sizes=(1, 16),
                          expert_parallel=(True,), max_num_seqs=(64,), sensitivity=False, num_requests=40)
    backend = SimulatorBackend("deepseek-r1", "sharegpt-chat", EngineArgs(max_model_len=8192))
    fits = {c.label: backend.fit(c) for c in request.configs()}
    assert not fits["h200-sxm TP1 EP seqs64"].fits  # 671B parameters on one GPU
    assert fits["h200-sxm TP1 DP16 EP seqs64"].fits  # two nodes of 8, over the profile's scale_out network
    with LocalExecutor(1) as executor:
        plan = planner.make_plan(request, backend, {"h200-sxm": None}, executor=executor)
    assert plan.best is not None
    gpus = {c.config.label: c.num_gpus for c in plan.configs}
    assert gpus[plan.best.config.label] == min(g for g in gpus.values() if g is not None)
    rows = {r.label.rsplit(" seqs", 1)[0]: r for r in plan.layouts}
    assert plan.layouts[0].label == plan.best.config.label and len(rows) == len(plan.layouts)
    for r in plan.layouts:
        assert r.limited_by and (r.num_gpus is None or set(r.decode_s) >= {"attention", "MoE experts", "all-to-all"})


def test_a_rank_with_fewer_experts_than_a_token_picks_has_all_of_them_touched() -> None:
    from roofline.cost.ops import expected_experts_touched

    # DeepSeek's 256 experts over 128 GPUs: 2 per rank, 8 picked per token.
    assert expected_experts_touched(5, 8, 2) == 2.0 and expected_experts_touched(0, 8, 2) == 0.0
    assert expected_experts_touched(np.array([0.0, 1.0, 3.0]), 8, 2).tolist() == [0.0, 2.0, 2.0]
    assert expected_experts_touched(3, 8, 256) == 256 * (1 - (1 - 8 / 256) ** 3)  # k <= E: unchanged
