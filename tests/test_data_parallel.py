"""Data and expert parallelism (issue 40): vLLM's flags checked as vLLM checks them (`roofline.parallel_config`), a
DP group's ranks behind vLLM's load balancer stepping in lockstep (`roofline.sim.data_parallel`), and the MoE layers of
the group (`roofline.cost.expert_parallel`)."""

from __future__ import annotations

import contextlib
import io
import shlex

import numpy as np
import pytest

from engine.core.request import Request, SamplingParams
from roofline.cli import main
from roofline.cost.expert_parallel import rank_shares
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.parallel_config import ParallelArgs, parse_eplb_config
from roofline.sim.api_server import resolve_api_server_count
from roofline.sim.data_parallel import DataParallelScheduler, GroupPlan, dp_padded_tokens, group_step_time
from roofline.sim.deployment import make_deployment
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.workload import load_workload


def _run(line: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(shlex.split(line))
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, out.getvalue(), err.getvalue().strip()


BASE = "simulate --model qwen3-30b-a3b --hardware h200-sxm --dataset-name random --num-prompts 4 " \
       "--random-input-len 64 --random-output-len 4"


@pytest.mark.parametrize("flags, field", [
    ("--data-parallel-size 0", "--data-parallel-size"),
    ("-dp 2 --data-parallel-size-local 3", "--data-parallel-size-local"),
    ("-dp 4 --data-parallel-size-local 3", "--data-parallel-size-local"),  # 3 does not divide 4
    ("--hardware gb200 -dp 4 --data-parallel-size-local 2", "--data-parallel-size-local"),  # no scale_out network
    ("-dp 16", "--data-parallel-size"),  # 16 ranks on one 8-GPU node
    ("-dp 4 -tp 4", "--data-parallel-size"),
    ("-dp 2 --all2all-backend nope", "--all2all-backend"),
    ("-dp 2 --all2all-backend mori_low_latency", "--all2all-backend"),
    ("-dp 2 --enable-eplb", "--enable-eplb"),
    ("--enable-expert-parallel --enable-eplb", "--enable-eplb"),  # TP x DP = 1
    ("-dp 2 --eplb-config '{\"num_redundant_experts\": 8}'", "--eplb-config"),  # without EPLB
    ("-dp 2 -ep --enable-eplb --eplb-config '{\"num_redundant_experts\": -1}'", "--eplb-config"),
    ("-dp 2 -ep --enable-eplb --eplb-config '{\"bogus\": 1}'", "--eplb-config"),
    ("-dp 2 -ep --enable-eplb --eplb-config 'nope'", "--eplb-config"),
    ("-pp 2 -dp 2", "--pipeline-parallel-size"),  # PP with DP: vLLM runs it, not modelled yet
    ("-pp 2 -tp 2 -ep", "--pipeline-parallel-size"),
])
def test_bad_parallel_flags_are_one_line_naming_the_flag(flags: str, field: str) -> None:
    rc, out, err = _run(f"{BASE} {flags}")
    assert rc == 2 and out == "" and len(err.splitlines()) == 1 and field in err, err
    assert "allowed" in err or "must be" in err, err


def test_dense_models_refuse_expert_and_data_parallelism() -> None:
    for flags, field in (("-dp 2", "--data-parallel-size"), ("-tp 2 -ep", "--enable-expert-parallel")):
        rc, _, err = _run(f"simulate --model llama-3.1-8b --hardware h200-sxm --num-requests 2 {flags}")
        assert rc == 2 and field in err and "allowed" in err, err


def test_vllm_checks_and_defaults() -> None:
    assert ParallelArgs(all2all_backend="pplx").resolved_all2all_backend == "allgather_reducescatter"
    assert ParallelArgs().resolved_all2all_backend == "allgather_reducescatter"  # vLLM 0.32's default
    assert parse_eplb_config('{"num_redundant_experts": 32, "window_size": 100}') == 32
    with pytest.raises(UserError, match="communicator"):
        parse_eplb_config('{"communicator": "pynccl"}')  # async EPLB (the default) refuses NCCL communicators
    assert EngineArgs(data_parallel_size=2, enable_expert_parallel=True, enable_eplb=True,
                      eplb_config='{"num_redundant_experts": 16}').parallel.num_redundant_experts == 16


def test_load_balancer_scores_waiting_four_times_running_from_stale_counts() -> None:
    deployment = make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(data_parallel_size=2,
                                                                           enable_expert_parallel=True))
    group = DataParallelScheduler(deployment, 2)

    def request(i: int) -> Request:
        return Request(f"r{i}", list(range(1, 33)), SamplingParams(max_tokens=4, ignore_eos=True), arrival_time_s=0.0)

    # Fresh counts are zero; each request sent adds one to its rank's waiting count until the next read.
    for i in range(4):
        group.add_request(request(i))
    assert [s.num_waiting for s in group.ranks] == [2, 2]
    plan = group.schedule(0.0)  # counts re-read: both ranks run 2, wait 0
    assert isinstance(plan, GroupPlan) and [p.num_seqs for p in plan.plans] == [2, 2]
    group.add_request(request(4))  # scores 2, 2: the first rank
    group.add_request(request(5))  # scores 6, 2: the second
    assert [s.num_waiting for s in group.ranks] == [1, 1]


def test_each_api_server_balances_from_its_own_start_rank_adding_the_client_count() -> None:
    deployment = make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(data_parallel_size=4,
                                                                           enable_expert_parallel=True))
    group = DataParallelScheduler(deployment, 4, num_clients=2)

    def send(i: int, client: int) -> None:
        request = Request(f"r{i}", list(range(1, 33)), SamplingParams(max_tokens=4, ignore_eos=True),
                          arrival_time_s=0.0)
        group.client_of[request.request_id] = client
        group.add_request(request)

    # Client 1 scans from rank 4 * 1 // 2 = 2, client 0 from rank 0; each adds 2 (the client count) per send to
    # its own view only: client 1 fills ranks 2, 3, then wraps to 0, which client 0 also picked.
    send(0, 1)
    send(1, 0)
    send(2, 1)
    send(3, 1)
    assert [s.num_waiting for s in group.ranks] == [2, 0, 1, 1]
    assert group.lb_views[1] == [[2, 0], [0, 0], [2, 0], [2, 0]] and group.lb_views[0] == [[2, 0], [0, 0], [0, 0],
                                                                                           [0, 0]]
    assert resolve_api_server_count(None, 4, True) == 4 and resolve_api_server_count(None, 4, False) == 1
    assert resolve_api_server_count(3, 4, True) == 3 and resolve_api_server_count(None, 1, True) == 1


def test_dp_ranks_are_padded_to_the_largest_graph_size_unless_one_runs_eager() -> None:
    deployment = make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(data_parallel_size=2))
    host = deployment.cost_model.host
    top = host.max_graph
    assert top > 20 and host.padded_tokens(13) == 16  # vLLM's capture sizes 1, 2, 4, 8, 16, 24, ...
    assert dp_padded_tokens(host, [13, 1], [False, False]) == [16, 16]  # the idle rank's dummy token padded too
    assert dp_padded_tokens(host, [13, 3], [True, False]) == [16, 16]  # a piecewise-graph batch with prefills
    assert dp_padded_tokens(host, [top + 1, 3], [True, False]) == [top + 1, 3]  # one rank eager: no padding
    eager = make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(data_parallel_size=2, enforce_eager=True))
    assert dp_padded_tokens(eager.cost_model.host, [13, 1], [False, False]) == [13, 1]


def test_group_step_lasts_as_long_as_the_slowest_rank_and_idle_ranks_run_a_dummy_batch() -> None:
    deployment = make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(data_parallel_size=2,
                                                                           enable_expert_parallel=True))
    step_time = group_step_time(deployment)
    group = DataParallelScheduler(deployment, 2)
    group.ranks[0].add_request(Request("a", list(range(1, 2049)), SamplingParams(max_tokens=2, ignore_eos=True),
                                       arrival_time_s=0.0))
    plan = group.schedule(0.0)
    assert not plan.plans[0].is_empty and plan.plans[1].is_empty
    busy = step_time(0, 0, 0.0, plan)
    moe = deployment.moe
    assert moe is not None
    own = deployment.cost_model.time_s(plan.plans[0]) - moe.rank_moe_s(2048)
    assert busy == pytest.approx(own + moe.step_s([2048, 1]), rel=1e-12)


def test_before_0_17_dp_ranks_are_padded_to_the_largest_count_even_when_it_runs_eager() -> None:
    # vLLM 0.12.0-0.16.0 pad whenever the compilation config has graphs (`allow_dp_padding`), 0.17.0 on only when
    # the step's synchronised graph mode is not NONE.
    old = make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(data_parallel_size=2), vllm_version="0.12.0")
    host = old.cost_model.host
    top = host.max_graph
    assert old.dp_pads_eager_steps
    assert make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(data_parallel_size=2),
                           vllm_version="0.16.0").dp_pads_eager_steps
    assert not make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(data_parallel_size=2),
                               vllm_version="0.17.0").dp_pads_eager_steps
    assert not make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(data_parallel_size=2)).dp_pads_eager_steps
    assert not make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(enable_expert_parallel=True,
                                                                        tensor_parallel_size=2),
                               vllm_version="0.12.0").dp_pads_eager_steps  # one rank: nothing to agree on
    assert dp_padded_tokens(host, [top + 1, 3], [True, False], pad_eager=True) == [top + 1, top + 1]
    assert dp_padded_tokens(host, [13, 1], [False, False], pad_eager=True) == [16, 16]  # as from 0.17
    eager = make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(data_parallel_size=2, enforce_eager=True),
                            vllm_version="0.12.0")
    assert dp_padded_tokens(eager.cost_model.host, [top + 1, 3], [True, False], pad_eager=True) == [top + 1, 3]

    # A rank prefilling 2,048 tokens beside an idle one: the experts run 2 x 2,048 tokens on 0.12, 2,049 on 0.32.
    new = make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(data_parallel_size=2))
    times = []
    for deployment in (old, new):
        group = DataParallelScheduler(deployment, 2)
        group.ranks[0].add_request(Request("a", list(range(1, 2049)), SamplingParams(max_tokens=2, ignore_eos=True),
                                           arrival_time_s=0.0))
        plan = group.schedule(0.0)
        moe = deployment.moe
        assert moe is not None and 2048 > top
        own = deployment.cost_model.time_s(plan.plans[0]) - moe.rank_moe_s(2048)
        times.append(group_step_time(deployment)(0, 0, 0.0, plan))
        assert times[-1] == pytest.approx(own + moe.step_s([2048, 2048] if deployment is old else [2048, 1]),
                                          rel=1e-12)
    assert times[0] > times[1]


def test_busiest_rank_share_and_eplb() -> None:
    uniform = np.full(8, 1 / 8)
    assert np.allclose(rank_shares(uniform, 4), 0.25)
    zipf = np.arange(1, 9, dtype=float) ** -1.2
    zipf /= zipf.sum()
    plain = rank_shares(zipf, 4)
    assert plain[0] == pytest.approx(zipf[:2].sum())  # linear placement: the two hottest experts on rank 0
    balanced = rank_shares(zipf, 4, num_redundant=4)  # 12 slots, 3 per rank
    assert balanced.sum() == pytest.approx(1.0) and balanced.max() < plain.max()


def test_expert_parallel_frees_expert_memory_for_the_kv_cache() -> None:
    tp2 = make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(tensor_parallel_size=2))
    dp2 = make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(data_parallel_size=2, enable_expert_parallel=True))
    dp2_tp1 = make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs())
    # Per GPU: DP 2 with EP holds half the experts and all of attention; TP 1 holds everything.
    assert dp2_tp1.kv.num_gpu_blocks < dp2.kv.num_gpu_blocks
    assert tp2.kv.num_gpu_blocks > 0 and dp2.gpus_per_replica == 2


def test_same_seed_same_result_with_data_parallelism() -> None:
    deployment = make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(data_parallel_size=4,
                                                                           enable_expert_parallel=True))
    workload = load_workload("sharegpt-chat")
    from dataclasses import replace
    workload = replace(workload, num_requests=40)
    a = run_simulation(deployment, workload, SimulationOptions(max_concurrency=16))
    b = run_simulation(deployment, workload, SimulationOptions(max_concurrency=16))
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    assert set(a.steps.replica) == {0, 1, 2, 3}  # each DP rank's steps, as vLLM's engines log them


def test_across_nodes_the_inter_node_share_goes_over_the_nic() -> None:
    from dataclasses import replace as dc_replace

    from roofline.cost.hardware import load_profile
    from roofline.cost.kernels.all_to_all import a2a_bytes, a2a_time_s

    hw = load_profile("h200-sxm")
    assert hw.scale_out is not None and hw.scale_out.gpus_per_node == 8
    e = dc_replace(hw.efficiency, deepep_ll_dispatch_bus_efficiency=0.5, deepep_ll_dispatch_fixed_s=0.0,
                   deepep_ll_dispatch_copy_s=0.0)
    hw = dc_replace(hw, efficiency=e)
    moved = a2a_bytes("deepep_low_latency", 128, 7168, 8, 256, 16)
    inter = (16 - 8) / 15  # of the bytes sent off-rank, those bound for the other node
    expected = max(moved * (1 - inter) / (450e9 * 0.5), moved * inter / (50e9 * 0.5))
    assert a2a_time_s(hw, "deepep_low_latency", "dispatch", 128, 7168, 8, 256, 16) == pytest.approx(expected, rel=1e-12)
    two_nodes = make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(
        tensor_parallel_size=4, data_parallel_size=4, data_parallel_size_local=2, enable_expert_parallel=True))
    assert two_nodes.gpus_per_replica == 16 and two_nodes.moe is not None
    one_node = make_deployment("qwen3-30b-a3b", "h200-sxm", EngineArgs(
        tensor_parallel_size=2, data_parallel_size=4, enable_expert_parallel=True))
    assert one_node.moe is not None
    # 256 tokens per GPU both: across two nodes the exchange waits on the NIC.
    assert two_nodes.moe._exchange_table(1024) > one_node.moe._exchange_table(512)


def test_removed_all2all_backends_fall_back_as_vllm_does_and_say_so() -> None:
    rc, out, err = _run(f"{BASE} -dp 2 --all2all-backend pplx")
    assert rc == 0 and "--all2all-backend pplx: removed from vLLM, which falls back to allgather_reducescatter" in err
