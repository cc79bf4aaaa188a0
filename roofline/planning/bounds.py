"""Bounds from the cost model, before any simulation: the highest rate a replica could sustain and the lowest SLO
percentiles its requests could see. The planner prunes with them (`roofline.planning.prune`): a configuration whose
latency bound already misses an SLO, or whose rate bound already needs more replicas than the cheapest answer found
pays for, is never simulated.

    b = replica_bounds(step_s, specs, window, limits)    # Bounds: rate_per_s, ttft_s, tpot_s, e2el_s, limited_by

Both hold for any schedule the simulator can run, given two properties of the cost model that its formulas have
(and tests/test_plan_bounds.py checks on the shipped GPUs): a step takes no less time when a sequence, a query token
or a context token is added to it; and a decode step's time grows at least linearly with its context tokens at
the smallest slope measured over a grid of batch sizes and contexts (the attention kernels read every context
token's K and V: `roofline.cost.kernels.attention`).

The rate bound. Let the workload's n requests have prompts p_i (of which p_i - c_i are not in any prefix a cache
could hold, `uncached_prompt_tokens`) and outputs o_i. Serving them takes at least the sum of the step times, and
every step is at least as long as the decode-only step of its own decoding sequences (adding a prefill chunk adds
time). Over all steps:
- the o_i - 1 decode iterations of request i read contexts of at least p_i, ..., p_i + o_i - 2 tokens, in all
  S = sum_i (o_i - 1) p_i + (o_i - 1)(o_i - 2) / 2 context tokens, each costing at least `kappa` seconds beyond a
  one-token context (the attention's KV reads, a kernel of its own in every step);
- what remains of each step (weights, activations, the per-step host time) is at least f(B) = t(B decodes of one
  context token), and B <= max_num_seqs: at least g = min_B f(B) / B per decode token, and at least f(1) per step,
  of which there are at least S / kv_tokens (a step's decodes hold their contexts in the KV cache at once);
- every token, prompt or output, costs at least `token_s` = min_T t(one prefill chunk of T tokens) / T of GEMM
  compute (T up to max_num_batched_tokens), whatever else the step holds.
So the n requests take at least T = max(D * g, S / kv_tokens * f(1), (sum_i (p_i - c_i) + D) * token_s) + kappa
* (S - D) with D = sum_i (o_i - 1), and no rate above n / T is sustained (`Bounds.rate_per_s`). A finite probe can
pass its SLOs above that rate while its queue has not yet grown past the TTFT SLO: offered (1 + e) times what it
serves, a run of n requests at rate r queues about e x t at time t, and the SLO percentile's request arrives after
about 0.8 n / r, so it passes only while e <= S_ttft r / (0.8 n); `Bounds.passable_rate_per_s` allows
QUEUE_FACTOR times that, and RATE_MARGIN beyond it for what the cost model's monotonicity holds only nearly.

The latency bounds, per request: TTFT >= its uncached prompt's compute ((p_i - c_i) * token_s, and one step per
chunk of max_num_batched_tokens); TPOT >= a one-sequence decode step at its prompt's context; end-to-end >= TTFT
+ (o_i - 1) TPOT. Their SLO percentile over the measured requests bounds the probe's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from roofline.cost.step_shape import StepArrays
from roofline.sim.workload import RequestSpec

# The rate bound a probe's pass is checked against is raised by RATE_MARGIN (the cost model's monotonicity in
# context holds on a grid, not everywhere) and by QUEUE_FACTOR times the overload a finite run can hide in its
# queue within the TTFT SLO (module docstring).
RATE_MARGIN = 0.10
QUEUE_FACTOR = 2.5

StepTimeFn = Callable[[StepArrays], float]


@dataclass(frozen=True)
class BatchLimits:
    """What bounds one step of a replica: sequences, tokens, and the KV cache's tokens."""

    max_num_seqs: int
    max_num_batched_tokens: int
    kv_tokens: int


@dataclass(frozen=True)
class Bounds:
    """No rate above `rate_per_s` is sustained (a finite probe may pass a little above it:
    `passable_rate_per_s`); no probe's SLO percentiles are below the latency bounds (seconds). `limited_by`: the
    term of the rate bound that binds (decode, KV capacity, compute)."""

    rate_per_s: float
    ttft_s: float
    tpot_s: float
    e2el_s: float
    limited_by: str

    def passable_rate_per_s(self, ttft_slo_s: float, num_simulated: int) -> float:
        """No probe of `num_simulated` requests passes a TTFT SLO of `ttft_slo_s` above this rate (module
        docstring)."""
        queue = QUEUE_FACTOR * ttft_slo_s * self.rate_per_s / (0.8 * max(num_simulated, 1))
        return self.rate_per_s * (1 + RATE_MARGIN + queue)

    def misses(self, limits: dict[str, float]) -> str | None:
        """Why the SLOs cannot be met at any rate (one bound above its SLO), or None."""
        for name, bound in (("ttft", self.ttft_s), ("tpot", self.tpot_s), ("e2el", self.e2el_s)):
            if name in limits and bound > limits[name]:
                return (f"SLOs missed at any rate, before simulating: the {name.upper()} percentile is at least "
                        f"{bound:.3g} s (cost-model bound), over the SLO's {limits[name]:g} s")
        return None


def uncached_prompt_tokens(specs: Sequence[RequestSpec], prefix_tokens: int) -> np.ndarray:
    """Per request, the prompt tokens no prefix cache could serve: those after the longest prefix it may share
    with an earlier request (a shared prefix group's prefix, a conversation's history of earlier turns, a replayed
    trace's blocks seen before). Full prompt where nothing is shared."""
    out = np.empty(len(specs), dtype=np.int64)
    history: dict[int, int] = {}
    seen_blocks: set[int] = set()
    for i, s in enumerate(specs):
        shared = prefix_tokens if s.prefix_group is not None else 0
        if s.session_id is not None:
            shared = max(shared, history.get(s.session_id, 0))
            history[s.session_id] = s.num_prompt_tokens + s.num_output_tokens
        if s.block_ids is not None and s.block_tokens > 0:
            hit = 0
            for block in s.block_ids:
                if block not in seen_blocks:
                    break
                hit += 1
            seen_blocks.update(s.block_ids)
            shared = max(shared, hit * s.block_tokens)
        out[i] = max(0, s.num_prompt_tokens - min(shared, s.num_prompt_tokens))
    return out


def _decode(n: int, context: int) -> StepArrays:
    return StepArrays(np.ones(n, dtype=np.int64), np.full(n, context, dtype=np.int64), np.ones(n, dtype=bool))


def _prefill(tokens: int) -> StepArrays:
    return StepArrays(np.array([tokens], dtype=np.int64), np.zeros(1, dtype=np.int64), np.ones(1, dtype=bool))


def _grid(top: int) -> list[int]:
    """1, 2, ..., 16 and then steps of about 1/16 up to `top` (included): where a per-token minimum is taken."""
    values = set(range(1, min(top, 16) + 1))
    v = 16.0
    while v < top:
        v *= 1.0625
        values.add(min(top, int(v)))
    values.add(top)
    return sorted(values)


def step_terms(step_s: StepTimeFn, limits: BatchLimits, max_context: int) -> tuple[float, float, float, float]:
    """(f1, g, kappa, token_s) of the module docstring: a one-sequence decode step at a one-token context; the
    least time per decode token at one-token contexts over batch sizes up to max_num_seqs; the least time per
    context token a decode step adds; the least time per token of a prefill chunk up to the token budget."""
    f1 = step_s(_decode(1, 1))
    # t(B) is nondecreasing in B, so between two grid points B_a < B_b, t(B) / B >= t(B_a) / B_b.
    sizes = _grid(limits.max_num_seqs)
    times = [step_s(_decode(b, 1)) for b in sizes]
    g = min([times[0] / sizes[0]] + [t / b for t, b in zip(times[:-1], sizes[1:])] + [times[-1] / sizes[-1]])
    kappa = math.inf
    for b in sorted({1, 8, 64, limits.max_num_seqs} & set(range(1, limits.max_num_seqs + 1))):
        base = step_s(_decode(b, 1))
        for context in (16, 64, 256, 1024, 4096, 16384, max_context):
            if 1 < context <= max_context:
                kappa = min(kappa, (step_s(_decode(b, context)) - base) / (b * (context - 1)))
    kappa = max(0.0, kappa)
    chunks = _grid(limits.max_num_batched_tokens)
    chunk_times = [step_s(_prefill(t)) for t in chunks]
    token_s = min([t / c for t, c in zip(chunk_times[:-1], chunks[1:])] + [chunk_times[-1] / chunks[-1]])
    return f1, g, kappa, token_s


def replica_bounds(step_s: StepTimeFn, specs: Sequence[RequestSpec], window: slice, limits: BatchLimits,
                   percentile: float, prefix_tokens: int = 0, max_context: int | None = None) -> Bounds:
    """The module docstring's bounds for one replica serving `specs` (the probes' requests, in arrival order;
    `window`: those whose latencies count)."""
    prompt = np.array([s.num_prompt_tokens for s in specs], dtype=np.float64)
    output = np.array([s.num_output_tokens for s in specs], dtype=np.float64)
    uncached = uncached_prompt_tokens(specs, prefix_tokens).astype(np.float64)
    longest = int(max(prompt + output)) if len(specs) else 1
    f1, g, kappa, token_s = step_terms(step_s, limits, max(2, max_context or longest))
    decodes = np.maximum(output - 1, 0)
    num_decode = float(decodes.sum())
    context_sum = float(np.sum(decodes * prompt + decodes * np.maximum(decodes - 1, 0) / 2))
    terms = {"decode": num_decode * g, "KV capacity": context_sum / max(limits.kv_tokens, 1) * f1,
             "compute": (float(uncached.sum()) + num_decode) * token_s}
    limited_by = max(terms, key=lambda k: terms[k])
    total_s = terms[limited_by] + kappa * max(0.0, context_sum - num_decode)
    rate = len(specs) / total_s if total_s > 0 else math.inf
    # Per-request latency floors.
    chunks = np.ceil(uncached / limits.max_num_batched_tokens)
    ttft = np.maximum(uncached * token_s, chunks * f1)
    tpot_step = np.array([step_s(_decode(1, int(p))) for p in prompt[window]]) if len(specs) else np.zeros(0)
    tpot = np.where(output[window] > 1, tpot_step, 0.0)
    e2el = ttft[window] + decodes[window] * tpot_step
    return Bounds(rate, _percentile(ttft[window], percentile), _percentile(tpot, percentile),
                  _percentile(e2el, percentile), limited_by)


def _percentile(values: np.ndarray, percentile: float) -> float:
    # As `roofline.planning.search.slo_percentile`: a request count meets the SLO exactly when this value does.
    return float(np.percentile(values, percentile, method="inverted_cdf")) if len(values) else 0.0
