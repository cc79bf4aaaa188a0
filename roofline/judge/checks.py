"""What the end-to-end judge (`benchmarks/accuracy/e2e_accuracy.py`) derives from a silicon_sample.csv row besides
the simulation: the benchmark client it assumes, the checks of a measured row against its stated lengths, and the
file's own repeat spread.

The client is InferenceX's benchmark_serving.py random dataset (`rows.ASSUMPTIONS`): all requests due at t = 0,
lengths uniform integers in [int(L x RANGE_RATIO), L]; on the rows InferenceX measured, its per-request connection
(`client_costs`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np
import pandas as pd

from roofline.cost.step_shape import StepArrays
from roofline.judge.harness import ORIGIN_INFERENCEX, copied_from, harness_of, row_origin
from roofline.judge.rows import SiliconRow
from roofline.sim.api_server import ApiServerCosts
from roofline.sim.deployment import Deployment
from roofline.sim.workload import ArrivalProcess, LengthDistribution, Workload

RANGE_RATIO = 0.8  # the assumed --random-range-ratio (rows.ASSUMPTIONS)
SEED = 0  # the simulated client's seed
# InferenceX's client (`utils/bench_serving/backend_request_func.py` `async_request_openai_completions`, ef01c2205,
# the version of its 2026 runs) opens a new aiohttp session, hence a new connection, per request and JSON-encodes the
# prompt after starting the TTFT clock; the client the API server's costs were measured with
# (benchmarks/ground_truth/vllm_frontend_overhead.py, whose share `ApiServerCosts.latency_s` holds) reuses
# keep-alive connections and posts a body encoded before the clock, as `vllm bench serve` 0.32 shares its session.
# The difference is the client's CPU time inside the TTFT clock: 2.32 ms with 1,024-token and 2.65 ms with
# 8,192-token prompts, InferenceX's pattern against that client's, on the project's VM
# (benchmarks/ground_truth/client_overhead.py, BENCHMARKS.md "vLLM frontend overhead"; the VM taken at the reference
# host's speed, as the served campaign's costs are). Reference-host seconds, divided by the profile's host speed as
# the API server's costs are. The server's own CPU for the new connection (0.75 ms a request there, accept and
# teardown, when in the clock not measured) is left out.
INFERENCEX_CLIENT_S = 2.5e-3


def client_workload(row: SiliconRow, num_prompts: int, range_ratio: float) -> Workload:
    """`num_prompts` requests due at t = 0 (`--request-rate inf`); lengths uniform integers in
    [int(L x range_ratio), L] (the random dataset of InferenceX's benchmark_serving.py), or exactly L at 1.0."""

    def lengths(tokens: int) -> LengthDistribution:
        if range_ratio >= 1.0:
            return LengthDistribution("fixed", value=tokens)
        return LengthDistribution("uniform", min_tokens=max(1, int(tokens * range_ratio)), max_tokens=tokens)

    return Workload(name=f"silicon-{row.isl}x{row.osl}", seed=SEED, num_requests=num_prompts,
                    arrival=ArrivalProcess("all_at_once"), prompt_tokens=lengths(row.isl),
                    output_tokens=lengths(row.osl))


def client_costs(row: SiliconRow) -> ApiServerCosts | None:
    """The API server's costs (reference host) the judge simulates `row` with: for a row InferenceX measured (or a
    campaign row repeating one, `copied_from`), the reference costs with its client's per-request time on the way in
    (`INFERENCEX_CLIENT_S`, charged as latency: it delays the request, it does not occupy the API server); None (the
    profile's own) for the others, whose client is not recorded."""
    if row_origin(row) != ORIGIN_INFERENCEX and copied_from(row) is None:
        return None
    costs = ApiServerCosts()
    return replace(costs, latency_s=costs.latency_s + INFERENCEX_CLIENT_S)


def prefill_linear_s_per_token(deployment: Deployment, row: SiliconRow) -> float:
    """The cost model's GEMM and fused-MoE time per prompt token of one prefill chunk of min(isl,
    max_num_batched_tokens) tokens: the least device time a prompt token takes (no attention, norms,
    collectives, sampling, host), for the measured-load check (`measured_prefill_load`)."""
    chunk = min(row.isl, int(deployment.scheduler_config.max_num_batched_tokens))
    one = np.ones(1, dtype=np.int64)
    cost = deployment.cost_model.cost(StepArrays(one * chunk, one * chunk, one))
    return sum(op.time_s for op in cost.ops if op.kind in ("gemm", "moe")) / chunk


def decode_read_floor_s(deployment: Deployment, row: SiliconRow, mean_batch: float | None) -> float:
    """The bytes one decode step must read from DRAM (weights, the experts uniform routing touches, the KV cache at
    mid-output context), at the chip's datasheet bandwidth, for a batch of the row's N sequences or, where the
    simulated engine's KV cache held fewer, its mean decode batch (`mean_batch`): no decode step of that batch,
    hence no mean TPOT, can be shorter (`measured_decode_load`)."""
    n = max(1, min(row.concurrency, round(mean_batch))) if mean_batch else row.concurrency
    context = np.full(n, row.isl + row.osl // 2, dtype=np.int64)
    cost = deployment.cost_model.cost(StepArrays(np.ones(n, dtype=np.int64), context, np.ones(n, dtype=np.int64)))
    return sum(op.weight_bytes + op.kv_read_bytes for op in cost.ops) / deployment.hw.memory_bandwidth_bytes_per_s


def _mean_length(tokens: int) -> float:
    """Mean of the assumed lengths: uniform integers in [int(RANGE_RATIO x L), L] (`client_workload`)."""
    return (int(tokens * RANGE_RATIO) + tokens) / 2.0


def measured_prefill_load(frame: pd.DataFrame) -> np.ndarray:
    """Per row, the share of the measured run's wall time the GPUs must have spent in the prompts' GEMMs and
    experts alone, at the cost model's per-token time (`prefill_linear_s_per_token`): the closed loop of N clients
    completes N / (TTFT + (mean osl - 1) x TPOT) requests a second (the file's means), each with a mean prompt of
    the assumed lengths. Above 1 the measured means cannot come from prompts of the stated lengths all prefilled
    (a client re-sending prompts that the prefix cache then serves, or shorter prompts, would explain it)."""
    osl = frame.osl.map(_mean_length).to_numpy(float)
    isl = frame.isl.map(_mean_length).to_numpy(float)
    duration = frame.measured_ttft_s.to_numpy(float) + (osl - 1.0) * frame.measured_tpot_s.to_numpy(float)
    return frame.concurrency.to_numpy(float) / duration * isl * frame.prefill_linear_s_per_token.to_numpy(float)


def repeat_spread(rows: list[SiliconRow]) -> dict[str, dict[str, float]]:
    """The file's own noise floor: rows of one configuration (model, GPU, version, precision, parallelism, lengths,
    concurrency, recipe) measured more than once with different results; per group the spread max / min - 1 of
    TTFT and of TPOT; median and p90 over the groups, overall and per GPU."""
    groups: dict[tuple, set[tuple[float, float]]] = defaultdict(set)
    for r in rows:
        harness = harness_of(r)
        key = (r.model_path, r.system, r.backend_version, r.precision, r.tp_size, r.attention_dp_size, r.moe_tp_size,
               r.moe_ep_size, r.isl, r.osl, r.concurrency, harness.source if harness else "")
        groups[key].add((round(r.measured_ttft_s, 9), round(r.measured_tpot_s, 9)))  # copies differ in the last bits
    spreads: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for key, values in groups.items():
        if len(values) > 1:
            ttft, tpot = (np.array(v) for v in zip(*values))
            for group in ("all", key[1]):
                spreads[group].append((ttft.max() / ttft.min() - 1.0, tpot.max() / tpot.min() - 1.0))
    out: dict[str, dict[str, float]] = {}
    for group, pairs in sorted(spreads.items(), key=lambda kv: kv[0] != "all"):
        a = np.array(pairs)
        out[group] = {"groups": len(a), "ttft_median": float(np.median(a[:, 0])),
                      "ttft_p90": float(np.percentile(a[:, 0], 90)), "tpot_median": float(np.median(a[:, 1])),
                      "tpot_p90": float(np.percentile(a[:, 1], 90))}
    return out
