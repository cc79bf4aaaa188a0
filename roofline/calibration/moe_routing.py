"""The token distributions of aiconfigurator's fused-MoE tables: a MEASUREMENT CONDITION of those tables only.

    loads = table_expert_loads("power_law_1.2", num_tokens=8192, num_experts=128, topk=8)  # (draws, experts)
    rows, loads, weights = table_routing(dists, num_tokens, num_experts, topk)  # one entry per (row, draw)
    seconds = mean_over_draws(rows, weights, time_of_each_entry, len(dists))

The serving step model routes a step's tokens uniformly at random (`roofline.cost.ops.expected_experts_touched`,
`moe_record`); the tables do not. Their collector (github.com/ai-dynamo/aiconfigurator, commit 095f58a51,
`collector/vllm/collect_moe.py` with `collector/helper.py`; this construction since #876, 13dadba3, 2026-04-19)
hands the layer router logits that are one-hot over experts it picked itself, so vLLM's top-k selects exactly
those experts. Per row of `num_tokens` tokens, `topk` of `num_experts` experts (expert parallelism 1):

- `balanced` (`balanced_logits`): a fixed round robin, no randomness. stride = ceil(E / k); token t picks experts
  (t + j * stride) mod E for j < k when T >= stride, else (t * stride / T + j * stride) mod E (float, truncated).
  So at T = 16, E = 128, k = 8 every expert gets exactly one token: 128 experts touched, where uniform random
  routing touches 82 in expectation. One distribution, timed as the mean of 6 replays.
- `power_law_<alpha>` (`_generate_power_law_distribution`, `sample_power_law`): each expert's count is drawn from
  a power law with exponent alpha bounded to [1, 0.8 T] (inverse CDF of a float32 uniform; [0.01, 2] when T k <= E),
  scaled to sum T k and rounded (half to even); counts above T (a token picks an expert at most once) are capped
  at T and the overflow handed out one token at a time to the least-loaded expert still below T
  (`_round_robin_adjust_per_rank`: argmin, +1); a remaining rounding difference is added to the least-loaded or
  taken from the most-loaded expert the same way. At T = 8192, E = 128, k = 8, alpha 1.2 the hottest expert
  holds ~7.5k of the 8192 tokens (the mean of 16 draws; 4.5k at alpha 1.01); at small T nearly every routed token
  lands on its own expert (more experts touched than any Zipf routing). `collect_moe.py` builds 5 such
  distributions per row (`num_iter = 5`), runs them back to back and records their mean time.

`table_expert_loads` gives the per-expert load vectors (tokens per expert, sorted descending), deterministic: the
balanced one exactly, the power laws as `NUM_POWER_LAW_DRAWS` draws of a generator seeded from the row's
(distribution, T, E, k), an estimate of the expectation the 5 random draws of the table sample. A grouped GEMM
over such a vector reads the weights of every touched expert (m_e > 0) and runs sum_e ceil(m_e / tm) row tiles of
height tm (`roofline.cost.kernels.moe.moe_time_s`, `row_tiles`): at 1-4k tokens under a power law many cold experts
hold a few tokens each and pad a tile apiece, 1.1-1.8x the tiles of the same tokens spread evenly over the touched
experts (top-8 of 128, tm 64-128). A table row's time is the mean over its draws' times, as the collector's is.
Only `roofline.calibration` (`fit.predict_table` for MoE rows with a `distribution`) and
benchmarks/accuracy/moe_accuracy.py read this module; serving never does (tests/test_table_condition.py).
"""

from __future__ import annotations

import math
import zlib
from functools import lru_cache

import numpy as np

# Draws per power-law row: the collector times 5 random distributions per row; more draws estimate their expectation.
NUM_POWER_LAW_DRAWS = 16
DISTRIBUTIONS = ("balanced", "power_law_1.01", "power_law_1.2")


def balanced_loads(num_tokens: int, num_experts: int, topk: int) -> np.ndarray:
    """Tokens per expert of the collector's `balanced_logits` (module docstring), indexed by expert."""
    stride = math.ceil(num_experts / topk)
    t = np.arange(num_tokens, dtype=np.int64)[:, None]
    j = np.arange(topk, dtype=np.int64)[None, :]
    if num_tokens >= stride:
        experts = (t + j * stride) % num_experts
    else:  # torch: int * int / int is a float32 true division; % on floats; .long() truncates
        pos = (t.astype(np.float32) * np.float32(stride) / np.float32(num_tokens)
               + (j * stride).astype(np.float32))
        experts = np.fmod(pos, np.float32(num_experts)).astype(np.int64)
    return np.bincount(experts.ravel(), minlength=num_experts)


def _raise_lowest(counts: np.ndarray, amount: int, cap: int) -> np.ndarray:
    """`amount` single tokens, each to the least-loaded expert below `cap` (the collector's argmin loop): the same
    multiset of counts as water-filling the lowest experts up to a level."""
    c = np.sort(counts)
    for _ in range(c.size):
        if amount <= 0 or c[0] >= cap:
            break
        low = c[0]
        n_low = int(np.searchsorted(c, low, side="right"))  # experts at the lowest level
        nxt = min(int(c[n_low]) if n_low < c.size else cap, cap)
        if (nxt - low) * n_low <= amount:
            amount -= int((nxt - low) * n_low)
            c[:n_low] = nxt
        else:
            full, rest = divmod(amount, n_low)
            c[:n_low] += full
            c[:rest] += 1
            amount = 0
        c.sort()
    return c


def _lower_highest(counts: np.ndarray, amount: int) -> np.ndarray:
    """`amount` single tokens, each taken from the most-loaded expert (the collector's argmax loop)."""
    return -_raise_lowest(-counts, amount, 0)


def power_law_loads(num_tokens: int, num_experts: int, topk: int, alpha: float,
                    rng: np.random.Generator) -> np.ndarray:
    """One per-expert load vector of the collector's `_generate_power_law_distribution` (ep = 1), sorted ascending."""
    lo, hi = (1.0, num_tokens * 0.8) if num_tokens * topk > num_experts else (0.01, 2.0)
    u = rng.random(num_experts, dtype=np.float32).astype(np.float64)
    a = 1.0 - alpha
    x = ((hi ** a - lo ** a) * u + lo ** a) ** (1.0 / a)
    target = num_tokens * topk
    counts = np.round(x / x.sum() * target).astype(np.int64)
    overflow = int(np.clip(counts - num_tokens, 0, None).sum())
    counts = _raise_lowest(np.minimum(counts, num_tokens), overflow, num_tokens)
    delta = target - int(counts.sum())
    if delta > 0:
        counts = _raise_lowest(counts, delta, num_tokens)
    elif delta < 0:
        counts = _lower_highest(counts, -delta)
    assert int(counts.sum()) == target and counts.max() <= num_tokens
    return np.sort(counts)


@lru_cache(maxsize=4096)
def table_expert_loads(distribution: str, num_tokens: int, num_experts: int, topk: int) -> np.ndarray:
    """(draws, experts) tokens per expert, each row sorted descending: one draw for `balanced`,
    `NUM_POWER_LAW_DRAWS` seeded draws for `power_law_<alpha>` (module docstring)."""
    if distribution == "balanced":
        return np.sort(balanced_loads(num_tokens, num_experts, topk))[None, ::-1].copy()
    if not distribution.startswith("power_law_"):
        raise ValueError(f"distribution {distribution!r}: allowed: balanced, power_law_<alpha>")
    alpha = float(distribution.removeprefix("power_law_"))
    rng = np.random.default_rng(zlib.crc32(f"{distribution}/{num_tokens}/{num_experts}/{topk}".encode()))
    return np.stack([power_law_loads(num_tokens, num_experts, topk, alpha, rng)[::-1]
                     for _ in range(NUM_POWER_LAW_DRAWS)])


def table_routing(distribution: np.ndarray, num_tokens: np.ndarray, num_experts: np.ndarray,
                  topk: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (table row, draw): (row index, tokens per expert (entries x the most experts of any row, hottest first,
    zero-padded), weight 1 / draws of that row). A row's time is sum(weight * time(loads)) over its entries
    (`mean_over_draws`)."""
    keys = list(zip(distribution, num_tokens, num_experts, topk))
    vectors = [table_expert_loads(str(d), int(t), int(e), int(k)) for d, t, e, k in keys]
    rows = np.concatenate([np.full(v.shape[0], i) for i, v in enumerate(vectors)])
    loads = np.zeros((rows.size, max((v.shape[1] for v in vectors), default=0)))
    at = 0
    for v in vectors:
        loads[at:at + v.shape[0], :v.shape[1]] = v
        at += v.shape[0]
    weights = np.concatenate([np.full(v.shape[0], 1.0 / v.shape[0]) for v in vectors])
    return rows, loads, weights


def mean_over_draws(rows: np.ndarray, weights: np.ndarray, seconds: np.ndarray, num_rows: int) -> np.ndarray:
    """Each table row's time: the mean of its draws' times (`table_routing`)."""
    return np.bincount(rows, weights=weights * seconds, minlength=num_rows)
