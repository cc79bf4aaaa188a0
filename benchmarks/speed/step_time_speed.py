"""Speed of `StepCostModel.time_s`, the simulator's per-step call (target: <= 30 us per call).

    python benchmarks/speed/step_time_speed.py          # Llama-3.1-8B shapes on h100-sxm, bf16, TP 1

Batches are drawn like a serving run's steps (seeded): mostly decode-only steps of 1-256 sequences, and
mixed steps where one or two sequences prefill a chunk of up to 2048 tokens. The token-count cache is warmed
first (a simulation reaches steady state after its first thousand steps), then every batch is timed once.
Also checks that the fast path equals `cost().total_s` on every batch.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from engine.core.model_spec import ModelSpec
from roofline.cost.hardware import load_profile
from roofline.cost.quant import QuantConfig
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepArrays

SEED = 0
NUM_BATCHES = 5000
# Llama-3.1-8B (meta-llama/Llama-3.1-8B config.json).
SPEC = ModelSpec(name="llama-3.1-8b", architecture="LlamaForCausalLM", num_layers=32, hidden_size=4096,
                 num_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336, vocab_size=128256)


def batches(rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    out = []
    for i in range(NUM_BATCHES):
        n = int(rng.integers(1, 257))
        q = np.ones(n, dtype=np.int64)
        if i % 5 == 0:  # a mixed step: one or two prefill chunks
            q[: int(rng.integers(1, 3))] = rng.integers(2, 2049)
        c = rng.integers(0, 4000, n).astype(np.int64)
        out.append((q, c, np.ones(n, dtype=bool)))
    return out


def main() -> int:
    model = StepCostModel(SPEC, load_profile("h100-sxm"), QuantConfig.from_user(model_dtype="bfloat16"))
    data = batches(np.random.default_rng(SEED))
    for q, c, e in data:  # warm the token/emit caches, check equality
        assert abs(model.time_s(StepArrays(q, c, e)) / model.cost(StepArrays(q, c, e)).total_s - 1.0) <= 1e-12
    for name, subset in (("all", data), ("decode-only", [b for b in data if b[0].max() == 1]),
                         ("mixed", [b for b in data if b[0].max() > 1])):
        t0 = time.perf_counter()
        for q, c, e in subset:
            model.time_s(StepArrays(q, c, e))
        per_call_us = (time.perf_counter() - t0) / len(subset) * 1e6
        print(f"{name}: {len(subset)} calls, {per_call_us:.1f} us per call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
