"""A MoE model's layers across data-parallel ranks: the expert work of the busiest rank and the dispatch / combine
around it, the correction a DP group's lockstep step makes to each rank's own step time.

    moe = DataParallelMoe(cost_model, layout, backend="deepep_low_latency", num_redundant_experts=0)
    moe.step_s(tokens_per_rank)    # per DP rank's tokens: the MoE layers' time of the group's step (all layers)
    moe.rank_moe_s(tokens)         # what the rank's own StepCostModel priced for its MoE layers (to take out)
    moe.expert_weight_bytes_saved()  # expert bytes a rank does not hold with EP (KV capacity)

How vLLM 0.32 runs it (vllm/config/parallel.py `use_all2all`, vllm/model_executor/layers/fused_moe/layer.py): with
data_parallel_size > 1 every MoE layer exchanges tokens among the DP x TP ranks through the all2all backend
(`roofline.cost.kernels.all_to_all`): dispatch before the experts, combine after. The experts are either sliced like
tensor parallelism over all DP x TP ranks (no --enable-expert-parallel: every rank runs every token on a 1/(DP x TP)
slice of each expert) or placed whole, E / (DP x TP) per rank (--enable-expert-parallel; EPLB adds
num_redundant_experts replicas). The MoE layers synchronise the ranks, so the group's MoE time is the busiest rank's:
- sliced experts: all ranks' tokens on each rank, the experts' width / (DP x TP);
- placed experts: the tokens routed to the busiest rank's experts. Under uniform routing a rank holds 1 / EP of the
  routing probability; the busiest of EP ranks exceeds the mean by about sigma * sqrt(2 ln EP) (the expected maximum
  of EP normal variables; sigma^2 = T k p (1 - p), p = 1 / EP), which EPLB's replicas do not remove (they rebalance
  skewed expert popularity, `rank_shares`). Dispatch / combine carry the busiest rank's tokens (DeepEP: per rank;
  all-gather / reduce-scatter: every rank's buffer is padded to the largest, vLLM's all_gatherv takes sizes but
  the ranks wait for the longest).
An idle rank runs a dummy batch of one token (vllm/v1/engine/core.py `DPEngineCoreProc`, `execute_dummy_batch`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from roofline.cost.kernels.all_to_all import a2a_time_s
from roofline.cost.kernels.moe import triton_masked_rows_s
from roofline.cost.op_time import op_time_s
from roofline.cost.ops import expert_shape, moe_record
from roofline.cost.quant import TRITON_MOE_BACKEND
from roofline.cost.step_cost import StepCostModel

if TYPE_CHECKING:
    from roofline.parallel_config import ParallelLayout


class CountTable:
    """f(n) for integer counts n, computed `BLOCK` counts at a time on an array and kept."""

    BLOCK = 256

    def __init__(self, fn: Callable[[np.ndarray], Any]) -> None:
        self.fn, self.blocks = fn, {}  # type: ignore[var-annotated]

    def __call__(self, n: int) -> float:
        b, i = divmod(int(n), self.BLOCK)
        values = self.blocks.get(b)
        if values is None:
            counts = np.arange(b * self.BLOCK, (b + 1) * self.BLOCK, dtype=np.float64)
            values = self.blocks[b] = np.broadcast_to(np.asarray(self.fn(counts), dtype=np.float64), counts.shape)
        return float(values[i])


def rank_shares(probs: np.ndarray, ep_size: int, num_redundant: int = 0) -> np.ndarray:
    """Each EP rank's share of the routed tokens, experts with routing probabilities `probs` placed linearly
    (vLLM's default `expert_placement_strategy` "linear": contiguous blocks). With `num_redundant` EPLB replicas
    (vllm/distributed/eplb/rebalance_algo.py, the default policy: replicate the expert with the highest load per
    replica, then pack the physical experts onto ranks, heaviest first onto the least-loaded rank with room),
    the shares of that packing."""
    e = probs.size
    if not num_redundant:
        per = -(-e // ep_size)
        return np.array([probs[i * per:(i + 1) * per].sum() for i in range(ep_size)])
    replicas = np.ones(e, dtype=np.int64)
    for _ in range(num_redundant):
        replicas[int(np.argmax(probs / replicas))] += 1
    slots = np.repeat(probs / replicas, replicas)
    per_rank = -(-slots.size // ep_size)
    loads, filled = np.zeros(ep_size), np.zeros(ep_size, dtype=np.int64)
    for load in np.sort(slots)[::-1]:
        open_ranks = np.flatnonzero(filled < per_rank)
        r = open_ranks[int(np.argmin(loads[open_ranks]))]
        loads[r] += load
        filled[r] += 1
    return loads


class DataParallelMoe:
    """The MoE layers of a DP group's step (module docstring)."""

    def __init__(self, cost_model: StepCostModel, layout: "ParallelLayout", backend: str,
                 num_redundant_experts: int = 0, probs: np.ndarray | None = None) -> None:
        spec, quant, hw = cost_model.spec, cost_model.quant, cost_model.hw
        self.hw, self.quant, self.layout, self.backend = hw, quant, layout, backend
        self.k = hw.executor.kernels_per_elementwise_op
        self.cpu_engine = cost_model.cpu_engine
        self.num_moe_layers = spec.num_moe_layers
        self.topk, self.num_experts, self.hidden = spec.num_experts_per_tok, spec.num_experts, spec.hidden_size
        self.bias = spec.expert_bias
        r = cost_model.rank
        self.rank_shape = expert_shape(r, quant)  # what the rank's cost model prices (TP-sliced experts)
        n = layout.num_gpus
        if layout.expert_parallel:
            self.group_shape = expert_shape(replace(r, inter=spec.intermediate_size), quant)
            p = np.full(self.num_experts, 1.0 / self.num_experts) if probs is None else probs
            self.busiest_share = float(rank_shares(p, n, num_redundant_experts).max())
            self.local_experts = -(-(self.num_experts + num_redundant_experts) // n)
        else:
            self.group_shape = expert_shape(replace(r, inter=max(1, spec.intermediate_size // n)), quant)
            self.busiest_share, self.local_experts = 1.0, self.num_experts
        self.num_redundant = num_redundant_experts
        _, self.expert_bytes, _ = quant.experts
        # Tabulated per token count, in blocks (the simulator asks for the same counts step after step).
        self._rank_table = CountTable(lambda t: self._moe_s(t, self.rank_shape, self.num_experts))
        self._experts_table = CountTable(self._group_experts)
        self._exchange_table = CountTable(self._exchange)

    def _moe_s(self, tokens: Any, shape: tuple[int, int], num_experts: int, call_tokens: Any = None) -> Any:
        """The experts' time (all MoE layers) for `tokens` (an array: one time per count; 0 tokens take none);
        `call_tokens`: the tokens the kernel is called with, where more than `tokens` (EP at DP 1: all of them)."""
        t = np.asarray(tokens, dtype=np.float64)
        count: Any = np.maximum(t, 1.0)  # arrays, as StepCostModel tabulates token operators
        op = moe_record("moe_experts", count, *shape, self.topk, num_experts, self.num_moe_layers, self.quant,
                        self.bias)
        if call_tokens is not None:
            calls: Any = np.maximum(np.asarray(call_tokens, dtype=np.float64), 1.0)  # (arrays, as `count`)
            op = replace(op, shape=(*op.shape[:5], calls))
        seconds, _ = op_time_s(self.hw, op, self.quant, self.k, self.cpu_engine)
        return np.where(t > 0, np.broadcast_to(seconds, t.shape), 0.0)

    def rank_moe_s(self, tokens: int) -> float:
        """The MoE experts' time (all MoE layers) the rank's own StepCostModel prices for its `tokens`."""
        return self._rank_table(tokens)

    def busiest_tokens(self, total_tokens: Any) -> Any:
        """Tokens' worth of expert work on the busiest rank: routed tokens / topk (module docstring)."""
        total = np.asarray(total_tokens, dtype=np.float64)
        if not self.layout.expert_parallel:
            return total
        n = self.layout.num_gpus
        routed = total * self.topk
        if n == 1:
            return total
        mean_share = 1.0 / n
        sigma = np.sqrt(routed * mean_share * (1 - mean_share))
        return np.minimum(routed * self.busiest_share + sigma * math.sqrt(2 * math.log(n)), routed) / self.topk

    def _group_experts(self, totals: np.ndarray) -> np.ndarray:
        if self.layout.expert_parallel and self.quant.moe_backend == TRITON_MOE_BACKEND \
                and self.layout.data_parallel_size == 1:
            # vLLM's Triton fused MoE under EP at DP 1: every rank is called with all the step's tokens (its
            # row block follows them) and runs the other ranks' routed rows through its masked kernels
            # (`triton_masked_rows_s`).
            busiest = self.busiest_tokens(totals)
            own = self._moe_s(busiest, self.group_shape, max(1, self.local_experts), call_tokens=totals)
            h, i = self.group_shape
            masked = triton_masked_rows_s(self.hw, (np.asarray(totals, dtype=np.float64) - busiest) * self.topk, h,
                                          i, self.quant.act_bytes)
            return own + self.num_moe_layers * np.where(np.asarray(totals) > 0, masked, 0.0)
        if self.layout.expert_parallel:
            return self._moe_s(self.busiest_tokens(totals), self.group_shape, max(1, self.local_experts))
        return self._moe_s(totals, self.group_shape, self.num_experts)

    def _exchange(self, largest: np.ndarray) -> np.ndarray:
        """Dispatch and combine of all MoE layers, the largest rank holding `largest` tokens. Each DP rank's tokens
        are split over its TP ranks before the exchange (sequence-parallel MoE, vLLM's use_sequence_parallel_moe)
        where TP > 1."""
        if self.layout.data_parallel_size == 1:  # EP over one rank's TP GPUs: tokens replicated, no exchange
            return np.zeros_like(largest, dtype=np.float64)
        per_gpu = np.asarray(largest, dtype=np.float64) / self.layout.tensor_parallel_size
        n = self.layout.num_gpus
        t = self.num_moe_layers * sum(
            a2a_time_s(self.hw, self.backend, phase, per_gpu, self.hidden, self.topk, self.num_experts, n)
            for phase in ("dispatch", "combine"))
        factor = self.hw.op_time_factors.all_to_all  # a sampled cost model's (`roofline.cost.uncertainty`)
        return t if factor == 1.0 else t * factor

    def experts_s(self, total_tokens: int) -> float:
        """The busiest rank's expert work (all MoE layers) when the group's ranks hold `total_tokens` in all."""
        return self._experts_table(max(int(total_tokens), 1))

    def exchange_s(self, largest_tokens: int) -> float:
        """Dispatch and combine (all MoE layers) when the largest rank holds `largest_tokens`."""
        return self._exchange_table(max(int(largest_tokens), 1))

    def step_s(self, tokens_per_rank: Any) -> float:
        """The MoE layers' time of a group step whose DP ranks hold `tokens_per_rank` tokens each (an idle rank 1):
        the busiest rank's expert work, plus dispatch and combine of the largest rank's tokens."""
        tokens = [max(int(t), 1) for t in tokens_per_rank]
        return self._experts_table(sum(tokens)) + self._exchange_table(max(tokens))

    def expert_weight_bytes_saved(self) -> float:
        """Expert weight bytes per GPU the layout saves against the rank's TP-sliced experts (KV capacity)."""
        h, i = self.rank_shape
        tp_bytes = self.num_experts * 3 * h * i * self.expert_bytes
        gh, gi = self.group_shape
        group_bytes = self.local_experts * 3 * gh * gi * self.expert_bytes
        return self.num_moe_layers * (tp_bytes - group_bytes)
