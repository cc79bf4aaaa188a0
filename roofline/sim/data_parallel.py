"""A MoE model served with vLLM's data parallelism: one engine core (scheduler, KV cache) per DP rank behind vLLM's
load balancer, the ranks stepping in lockstep.

    scheduler = make_scheduler(deployment)        # engine.core.Scheduler, or a DataParallelScheduler for DP > 1
    time_fn = group_step_time(deployment)         # a StepTimeFn for the group's plans

How vLLM 0.32 runs it:
- Ranks: `--data-parallel-size N` starts N engine cores (vllm/v1/engine/core.py `DPEngineCoreProc` for a MoE model),
  each with its own `Scheduler` and KV cache sized on its own GPUs (`roofline.sim.deployment`).
- Load balancing (vllm/v1/engine/core_client.py `DPLBAsyncMPClient.get_core_engine_for_request`): the front end
  sends each request to the rank with the lowest waiting * 4 + running, scanning from rank 0 (one API server;
  ties to the lowest index), from counts the DP coordinator (vllm/v1/engine/coordinator.py) publishes about every
  100 ms; between two publications the client adds each request it sends to its rank's waiting count. Here the
  counts are re-read from the ranks' schedulers at the first group step at least `LB_STATS_INTERVAL_S` after the
  last read (the coordinator's timer runs on its own clock; an idle group keeps its last counts). `vllm serve`
  starts one API server per DP rank by default (vllm/entrypoints/cli/serve.py, `roofline.sim.api_server.
  resolve_api_server_count`); each has its own client, which scans from rank DP x its index // their number and
  adds their number per request it sends (standing in for the others' sends).
- Lockstep (`DPEngineCoreProc.run_busy_loop`, `_has_global_unfinished_reqs`): while any rank has work every rank
  steps; a rank with nothing scheduled runs a dummy batch (`execute_dummy_batch`, one token) so that its MoE layers
  join the collectives. A step lasts as long as the slowest rank's: the ranks' attention and dense parts differ,
  the MoE layers are shared (`roofline.cost.expert_parallel.DataParallelMoe`). Before each forward pass the ranks
  agree on their token counts and pad to the largest where none runs eager (`dp_padded_tokens`; releases before
  `roofline.sim.deployment.DP_PAD_BY_STEP_GRAPH_SINCE`: also where one does, unless graphs are off): the MoE layers
  carry DP x the largest count.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from engine.core.pipeline_scheduler import PipelineScheduler
from engine.core.request import Request
from engine.core.scheduler import Scheduler
from engine.core.step_plan import StepPlan
from roofline.cost.host import HostModel
from roofline.cost.step_shape import StepArrays
from roofline.sim.deployment import Deployment

LB_STATS_INTERVAL_S = 0.1  # the DP coordinator's publication interval (coordinator.py: 100 ms)
LB_WAITING_WEIGHT = 4  # score = waiting * 4 + running (core_client.py)


class GroupPlan:
    """One lockstep step of a DP group: each rank's plan (an empty one runs the dummy batch)."""

    __slots__ = ("plans",)

    def __init__(self, plans: list[StepPlan]) -> None:
        self.plans = plans

    @property
    def is_empty(self) -> bool:
        return all(p.is_empty for p in self.plans)

    @property
    def preempted_request_ids(self) -> tuple[str, ...]:
        return tuple(itertools.chain.from_iterable(p.preempted_request_ids for p in self.plans))

    @property
    def num_emitting_seqs(self) -> int:
        return sum(p.num_emitting_seqs for p in self.plans)

    @property
    def requests(self) -> list[Request]:
        return [r for p in self.plans for r in p.requests]

    @property
    def emits(self) -> list[bool]:
        return [e for p in self.plans for e in p.emits]


class DataParallelScheduler:
    """The DP ranks' schedulers behind vLLM's load balancer, as one scheduler to the event loop (module
    docstring). `num_clients`: the API-server processes, each with its own load-balancing client
    (`DPLBAsyncMPClient`); `client_of[request_id]`: the process a request came through (0 if not set)."""

    def __init__(self, deployment: Deployment, data_parallel_size: int, num_clients: int = 1) -> None:
        self.ranks = [Scheduler(deployment.scheduler_config, deployment.cache_config)
                      for _ in range(data_parallel_size)]
        self.num_clients = num_clients
        # Each client's [waiting, running] per rank, as it last heard them plus its own sends since.
        self.lb_views = [[[0, 0] for _ in self.ranks] for _ in range(num_clients)]
        self.lb_read_s = -math.inf
        self.client_of: dict[str, int] = {}

    def add_request(self, request: Request) -> None:
        """vLLM's `DPLBAsyncMPClient.get_core_engine_for_request`: the lowest waiting * 4 + running, scanning from
        the client's start index (DP x client index // clients; ties to the first scanned), then the client adds
        the number of clients to the chosen rank's waiting count (standing in for the other clients' sends until
        the coordinator's next counts)."""
        client = self.client_of.pop(request.request_id, 0)
        counts = self.lb_views[client]
        n = len(counts)
        start = n * client // self.num_clients
        rank, best = start, math.inf
        for i in range(n):
            idx = (start + i) % n
            waiting, running = counts[idx]
            score = waiting * LB_WAITING_WEIGHT + running
            if score < best:
                rank, best = idx, score
        counts[rank][0] += self.num_clients
        self.ranks[rank].add_request(request)

    def schedule(self, now_s: float) -> GroupPlan:
        if now_s >= self.lb_read_s + LB_STATS_INTERVAL_S:  # the coordinator publishes to every client
            self.lb_views = [[[s.num_waiting, s.num_running] for s in self.ranks] for _ in self.lb_views]
            self.lb_read_s = now_s
        return GroupPlan([s.schedule(now_s) for s in self.ranks])

    def update_from_output(self, plan: GroupPlan, sampled: int, now_s: float | None = None) -> list[Request]:
        return [req for s, p in zip(self.ranks, plan.plans) if not p.is_empty
                for req in s.update_from_output(p, sampled, now_s)]

    @property
    def num_waiting(self) -> int:
        return sum(s.num_waiting for s in self.ranks)

    @property
    def num_running(self) -> int:
        return sum(s.num_running for s in self.ranks)

    def has_unfinished(self) -> bool:
        return any(s.has_unfinished() for s in self.ranks)

    @property
    def requests(self) -> dict[str, Request]:
        """Every unfinished request of every rank by id, as `Scheduler.requests`."""
        return {rid: req for s in self.ranks for rid, req in s.requests.items()}

    def shutdown(self) -> None:
        for s in self.ranks:
            s.shutdown()


def make_scheduler(deployment: Deployment, num_clients: int = 1) -> Any:
    """The event loop's scheduler of one replica: vLLM's, the DP group's (behind `num_clients` API-server
    processes), or the one of a pipeline."""
    dp = deployment.engine.data_parallel_size
    if dp > 1:
        return DataParallelScheduler(deployment, dp, num_clients)
    if deployment.pipeline is not None:  # batches in flight (engine.core.pipeline_scheduler)
        return PipelineScheduler(deployment.scheduler_config, deployment.cache_config,
                                 deployment.pipeline.num_stages, deployment.hw.executor.host_overlaps_device)
    return Scheduler(deployment.scheduler_config, deployment.cache_config)


def ranks_of(index: int, plan: Any) -> list[tuple[int, StepPlan]]:
    """(engine index, plan) of each rank of replica `index`'s step: DP rank r of replica i is engine i * DP + r."""
    if isinstance(plan, GroupPlan):
        n = len(plan.plans)
        return [(index * n + r, p) for r, p in enumerate(plan.plans)]
    return [(index, plan)]


def dp_padded_tokens(host: HostModel, tokens: list[int], mixed: list[bool], pad_eager: bool = False) -> list[int]:
    """The token counts the DP ranks run, as vLLM 0.32 agrees on them before each forward pass
    (vllm/v1/worker/gpu_model_runner.py `_determine_batch_execution_and_padding`, vllm/v1/worker/dp_utils.py
    `coordinate_batch_across_dp`): each rank pads its batch to its CUDA graph's size and picks its runtime graph
    mode; one all-reduce shares both; the ranks take the least mode (`_post_process_cudagraph_mode`), and unless it
    is NONE (some rank runs eager: its batch above the largest captured size, or its kind of batch without a graph)
    every rank is padded to the largest count (`_post_process_dp_padding`), which is what the MoE layers' all-gather
    carries from each rank. An idle rank's dummy batch is one decode token (`execute_dummy_batch`).

    `pad_eager`: the releases before that rule (`roofline.sim.deployment.DP_PAD_BY_STEP_GRAPH_SINCE`) decide on the
    compilation config's graph mode instead (0.12.0 and 0.16.0 `_determine_batch_execution_and_padding`:
    `allow_dp_padding = cudagraph_mode != NONE`), so unless graphs are off altogether every rank is padded to the
    largest count even where that count runs eager (a rank decoding beside one prefilling 4,000 tokens runs 4,000)."""
    graphs = host.decode_graph is not None or host.mixed_graph is not None
    padded = []
    for t, m in zip(tokens, mixed):
        if not 0 < t <= host.max_graph or (host.mixed_graph if m else host.decode_graph) is None:
            if not (pad_eager and graphs):
                return tokens  # the least mode is NONE: no DP padding
            padded.append(t)  # eager: the rank's own count, no graph padding
        else:
            padded.append(host.padded_tokens(t, m))
    return [max(padded)] * len(tokens)


def group_step_time(deployment: Deployment) -> Callable[[int, int, float, Any], float]:
    """The step time of a DP group's plan: the slowest rank's own step without its MoE experts, plus the MoE layers
    of the group (`DataParallelMoe.step_s`) on the token counts the ranks agree on (`dp_padded_tokens`); a plain
    plan's time as the cost model gives it. (A rank's own part is priced on its own tokens: the padding's dense
    work on a rank below the largest count is not added.)"""
    cost_model = deployment.cost_model
    time_s = cost_model.time_s
    host = cost_model.host
    moe = deployment.moe
    pad_eager = deployment.dp_pads_eager_steps
    dummy = StepArrays(np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(1, dtype=bool))
    dummy_s = time_s(dummy) - moe.rank_moe_s(1) if moe is not None else 0.0

    def step_time(replica: int, step_index: int, start_s: float, plan: Any) -> float:
        if moe is None:
            return time_s(plan)
        if not isinstance(plan, GroupPlan):  # expert parallelism over one rank's TP GPUs: no exchange
            t = plan.num_batched_tokens
            return time_s(plan) - moe.rank_moe_s(t) + moe.step_s([t])
        tokens, mixed, own = [], [], []
        for p in plan.plans:
            if p.is_empty:
                tokens.append(1)
                mixed.append(False)
                own.append(dummy_s)
            else:
                t = p.num_batched_tokens
                tokens.append(t)
                mixed.append(p.num_prefill_tokens > 0)
                own.append(time_s(p) - moe.rank_moe_s(t))
        return max(own) + moe.step_s(dp_padded_tokens(host, tokens, mixed, pad_eager))
    return step_time
