"""The planner's real backend: probes run by the simulator (`roofline.sim`) with cost-model step times, and
the sensitivity's scaled profiles."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.core.model_spec import ModelSpec
from roofline.cost.hardware import HardwareProfile, load_profile
from roofline.cost.ops import RankShape
from roofline.cost.step_shape import StepArrays
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.planning.bounds import BatchLimits, Bounds, replica_bounds, uncached_prompt_tokens
from roofline.planning.early_stop import floors, slo_early_stop
from roofline.planning.search import (
    DRAIN_FRACTION,
    NOMINAL,
    WARMUP_FRACTION,
    Config,
    Efficiency,
    Fit,
    OpSummary,
    RunResult,
    Slo,
    StepProfile,
    measured_slice,
)
from roofline.registry import load_model
from roofline.sim.deployment import Deployment, make_deployment
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.table import between, column
from roofline.sim.workload import RequestSpec, Workload, load_workload, sample_requests

# What the sensitivity moves. Compute: the fractions of a compute peak that GEMMs and attention reach.
# Memory: the fractions of DRAM bandwidth that streaming kernels and decode attention reach. Left alone:
# moe_compute_efficiency and moe_triton_masked_row_efficiency (factors on the GEMM / memory efficiency, which already
# move) and the collectives' and all-to-all's bus efficiencies (the interconnect, neither compute nor memory).
COMPUTE_EFFICIENCIES = ("gemm_compute_efficiency", "gemm_fp8_compute_efficiency", "attention_compute_efficiency",
                        "mla_decode_compute_efficiency", "mla_decode_fp8_kv_compute_efficiency")
MEMORY_EFFICIENCIES = ("memory_efficiency", "attention_memory_efficiency", "gemm_fp8_memory_efficiency",
                       "act_quant_memory_efficiency", "act_group_quant_memory_efficiency",
                       "mla_decode_memory_efficiency", "mla_decode_fp8_kv_memory_efficiency")
UNSCALED_EFFICIENCIES = ("moe_compute_efficiency", "collective_bus_efficiency", "collective_one_stage_bus_efficiency",
                         "nccl_bus_efficiency", "deepep_ht_dispatch_bus_efficiency", "deepep_ht_combine_bus_efficiency",
                         "deepep_ll_dispatch_bus_efficiency", "deepep_ll_combine_bus_efficiency",
                         "nccl_ag_bus_efficiency", "nccl_rs_bus_efficiency", "moe_triton_masked_row_efficiency")


# What takes a decode step's time, as the report explains a layout by it.
DECODE_PARTS = ("attention", "MoE experts", "all-to-all", "TP collectives", "host", "other layers")


def _decode_part(op: str) -> str:
    if op == "moe_experts":
        return "MoE experts"
    if op in ("attention", "attention_decode", "mla_decode", "mla_w_uk", "mla_w_uv") or op.startswith("attn"):
        return "attention"
    if "all_reduce" in op or "all_gather" in op or "reduce_scatter" in op:
        return "TP collectives"
    return "host" if op == "host_overhead" else "other layers"


def scale_efficiency(hw: HardwareProfile, efficiency: Efficiency) -> HardwareProfile:
    """The profile with every operator kind's time at `efficiency.quantile` of its measured / predicted where the
    profile states its uncertainty (`roofline.cost.uncertainty`); else with its compute and memory efficiencies
    multiplied, capped at 1 (no kernel beats peak)."""
    if efficiency.quantile is not None and hw.uncertainty is not None:
        return replace(hw, op_time_factors=hw.uncertainty.factors_at(efficiency.quantile))
    e = hw.efficiency
    changes = {name: min(1.0, getattr(e, name) * efficiency.compute) for name in COMPUTE_EFFICIENCIES}
    changes.update({name: min(1.0, getattr(e, name) * efficiency.memory) for name in MEMORY_EFFICIENCIES})
    return replace(hw, efficiency=replace(e, **changes))


def workload_at_rate(workload: Workload, rate_per_s: float, num_requests: int) -> tuple[Workload, str | None]:
    """The workload with `num_requests` requests arriving at `rate_per_s` per second (inf: all at once), and
    a note when its arrival process had to be adapted. The arrival shape (Poisson, gamma, bursts, a trace's
    gaps) is kept; only its time scale changes, so every rate replays the same requests."""
    if workload.trace_path is not None:
        return replace(workload, num_requests=num_requests, trace_rate_per_s=rate_per_s), None
    arrival, note = workload.synthetic[0], None
    if arrival.process == "all_at_once":
        arrival = replace(arrival, process="poisson")
        note = f"workload {workload.name}: its all-at-once arrivals are planned as Poisson arrivals at each rate"
    if workload.sessions is not None:
        # Conversations arrive by the process; each brings num_turns requests on average.
        turns = workload.sessions.num_turns.mean_tokens()
        note = (f"workload {workload.name}: conversations arrive at the request rate / {turns:g} (mean turns); "
                f"rates are requests/s")
        rate_per_s = rate_per_s / turns
    return replace(workload, num_requests=num_requests, arrival=replace(arrival, rate_per_s=rate_per_s)), note


@dataclass(frozen=True)
class SimulatorBackend:
    """Probes by `roofline.sim.simulator` (one replica, the engine's scheduler, cost-model step times).

    `engine` holds every engine flag but those a configuration sets (tensor-parallel size, max_num_seqs,
    quantization, KV-cache dtype, max_num_batched_tokens). Hashable and picklable: workers rebuild deployments
    from it, cached per process."""

    model: str
    workload: str
    engine: EngineArgs = EngineArgs()
    extra_notes: tuple[str, ...] = ()  # what the command chose for the user, shown in the report

    def deployment(self, config: Config, efficiency: Efficiency) -> Deployment:
        return _deployment(self, config, efficiency)

    def fit(self, config: Config) -> Fit:
        """Whether the configuration fits, without simulating: its deployment (TP against the model and the
        scale-up domain, weights and activations against memory) and its KV capacity (one max_model_len
        request must fit). If not, the reason and the single changes that would make it fit (`fit_fixes`)."""
        try:
            d = self.deployment(config, NOMINAL)
        except UserError as exc:
            return Fit(None, str(exc), "; or ".join(fit_fixes(self, config)) or None)
        return Fit(d.kv.num_tokens, max_num_batched_tokens=d.scheduler_config.max_num_batched_tokens)

    def run(self, config: Config, efficiency: Efficiency, rate_per_s: float, num_requests: int,
            stop_slo: Slo | None = None) -> RunResult:
        """One replica at `rate_per_s`. With `stop_slo`, the run ends as soon as it certainly misses that SLO
        (`roofline.planning.early_stop`): then its latencies are floors and its statistics those of the part run."""
        workload, _ = workload_at_rate(_workload(self.workload), rate_per_s, num_requests)
        specs = sample_requests(workload)
        stop = slo_early_stop(stop_slo, specs, measured_slice(len(specs))) if stop_slo is not None else None
        result = run_simulation(self.deployment(config, efficiency), workload, SimulationOptions(record_steps=False),
                                specs=specs, early_stop=stop)
        req, steps = result.request_table, result.step_table  # (numpy columns: no DataFrame built for a probe)
        finish = column(req, "finish_s", float)
        # Mean batch in steady state (between the 10th and 90th percentile completion, as for the
        # throughput), weighted by step duration: what a representative decode step looks like.
        done = finish[np.isfinite(finish)]
        lo, hi = np.percentile(done, [100 * WARMUP_FRACTION, 100 * (1 - DRAIN_FRACTION)]) if len(done) \
            else (-np.inf, np.inf)
        inside = between(column(steps, "start_s", float), lo, hi)
        durations = column(steps, "duration_s", float)[inside]
        batch = column(steps, "num_seqs", float)[inside]
        mean_batch = float(np.average(batch, weights=durations)) if durations.sum() > 0 else 1.0
        kv_time, kv_usage = column(steps, "start_s", float), column(steps, "kv_usage", float)
        prompts = column(req, "num_prompt_tokens")
        if result.stopped_at_s is not None:
            outputs = np.array([s.num_output_tokens for s in specs], dtype=np.int64)
            # What the run served: the tokens it computed per second over the second half of the part it ran, in
            # requests of the workload's mean uncached prompt and output (its completions so far are mostly of the
            # short requests, and lag). Within 5 % of the whole run's steady throughput on the README plan's
            # overloaded probes (docs/benchmark-history/2026-11-29d-plan.md); a next guess's estimate only.
            start = column(steps, "start_s", float)
            half = start >= (start[0] + result.stopped_at_s) / 2 if len(start) else np.zeros(0, dtype=bool)
            prefix = _workload(self.workload).shared_prefix
            per_request = float(np.mean(uncached_prompt_tokens(specs, prefix.prefix_tokens if prefix else 0)
                                        + outputs))
            span = result.stopped_at_s - float(start[half][0]) if half.any() else 0.0
            served = float(column(steps, "num_batched_tokens")[half].sum()) / span / per_request if span > 0 \
                else None
            ttft, tpot, e2e = floors(result.stopped_at_s, column(req, "arrival_s", float),
                                     column(req, "first_token_s", float), finish, outputs)
            empty = np.zeros(0)
            return RunResult(ttft_s=ttft, tpot_s=tpot, finish_s=finish, num_prompt_tokens=prompts,
                             num_output_tokens=outputs, kv_time_s=kv_time, kv_usage=kv_usage,
                             mean_num_running=mean_batch, e2e_s=e2e, itl_s=empty,
                             itl_request_index=empty.astype(np.int64), stopped_at_s=result.stopped_at_s,
                             served_per_s=served)
        return RunResult(
            ttft_s=column(req, "ttft_s", float), tpot_s=column(req, "tpot_s", float),
            finish_s=finish, num_prompt_tokens=prompts, num_output_tokens=column(req, "num_output_tokens"),
            kv_time_s=kv_time, kv_usage=kv_usage, mean_num_running=mean_batch, e2e_s=column(req, "e2e_s", float),
            itl_s=np.asarray(result.itl.gap_s, dtype=float), itl_request_index=np.asarray(result.itl.request_index))

    def step_profile(self, config: Config, query_lens: np.ndarray, context_lens: np.ndarray,
                     label: str) -> StepProfile:
        d = self.deployment(config, NOMINAL)
        cost = d.cost_model.cost(StepArrays(query_lens, context_lens, np.ones(len(query_lens), dtype=bool)))
        ops = [OpSummary(o.name, o.flops, o.weight_bytes + o.act_bytes + o.kv_read_bytes + o.kv_write_bytes,
                      o.time_s, o.bound) for o in cost.ops]
        if cost.total_s > cost.device_s:
            ops.append(OpSummary("host_overhead", 0.0, 0.0, cost.total_s - cost.device_s, "host"))
        try:
            peak = d.hw.peak_flops(d.quant.gemm_dtype)
        except UserError:  # weight-only kernels (fp8 weights on Ampere run on Marlin): the activations' dtype computes
            peak = d.hw.peak_flops("bf16" if "bf16" in dict(d.hw.peak_flops_by_dtype) else "fp16")
        return StepProfile(label, tuple(ops), cost.total_s, peak, d.hw.memory_bandwidth_bytes_per_s)

    def bounds(self, config: Config, efficiency: Efficiency, num_requests: int, percentile: float) -> Bounds:
        """The cost model's bounds on the configuration's rate and SLO percentiles (`roofline.planning.bounds`), over
        the `num_requests` requests every probe simulates."""
        return _bounds(self, config, efficiency, num_requests, percentile)

    def decode_breakdown(self, config: Config, num_seqs: int, context: int) -> dict[str, float]:
        """Seconds of one decode step of `num_seqs` sequences of `context` tokens on every rank, by what takes them
        (`DECODE_PARTS`): a DP / EP group's MoE layers as the group runs them (the busiest rank's experts, the
        all-to-all), the rest as the rank's cost model prices it."""
        n = max(1, num_seqs)
        return self._breakdown(config, StepArrays(np.ones(n, dtype=np.int64), np.full(n, context, dtype=np.int64),
                                                  np.ones(n, dtype=bool)))

    def prefill_breakdown(self, config: Config) -> dict[str, float]:
        """As `decode_breakdown`, of one prefill chunk of max_num_batched_tokens tokens on every rank."""
        tokens = self.deployment(config, NOMINAL).scheduler_config.max_num_batched_tokens
        return self._breakdown(config, StepArrays(np.array([tokens], dtype=np.int64), np.zeros(1, dtype=np.int64),
                                                  np.ones(1, dtype=bool)))

    def _breakdown(self, config: Config, shape: StepArrays) -> dict[str, float]:
        d = self.deployment(config, NOMINAL)
        out = dict.fromkeys(DECODE_PARTS, 0.0)
        for name, seconds in d.cost_model.cost(shape).breakdown_s.items():
            out[_decode_part(name)] += seconds
        if d.moe is not None:
            tokens = shape.num_batched_tokens
            out["MoE experts"] = d.moe.experts_s(tokens * config.data_parallel_size)
            out["all-to-all"] = d.moe.exchange_s(tokens)
        return out

    def notes(self) -> tuple[str, ...]:
        _, note = workload_at_rate(_workload(self.workload), 1.0, 1)
        return self.extra_notes + (() if note is None else (note,))


@functools.lru_cache(maxsize=None)
def _workload(name: str) -> Workload:
    return load_workload(name)


@functools.lru_cache(maxsize=4)
def _specs(name: str, num_requests: int) -> list[RequestSpec]:
    # The requests every probe replays (a rate only rescales their arrivals).
    return sample_requests(workload_at_rate(_workload(name), 1.0, num_requests)[0])


@functools.lru_cache(maxsize=4096)
def _bounds(backend: SimulatorBackend, config: Config, efficiency: Efficiency, num_requests: int,
            percentile: float) -> Bounds:
    d = backend.deployment(config, efficiency)
    workload = _workload(backend.workload)
    sched = d.scheduler_config
    limits = BatchLimits(sched.max_num_seqs, sched.max_num_batched_tokens, d.kv.num_tokens)
    specs = _specs(backend.workload, num_requests)
    b = replica_bounds(rank_step_floor(d), specs, measured_slice(len(specs)), limits, percentile,
                       workload.shared_prefix.prefix_tokens if workload.shared_prefix else 0, sched.max_model_len)
    # DP ranks: each serves its own requests at no more than one rank's bound (its steps are no shorter).
    return replace(b, rate_per_s=b.rate_per_s * config.data_parallel_size)


def rank_step_floor(d: Deployment) -> Callable[[StepArrays], float]:
    """A lower bound on the step time of one rank holding `shape`: the cost model's, with a DP / EP group's MoE
    layers (`roofline.sim.data_parallel.group_step_time`) as they are when every other rank runs a dummy token."""
    time_s, moe = d.cost_model.time_s, d.moe
    if d.pipeline is not None:
        # A pipeline: every stage runs every batch one after another, so the run lasts at least its busiest stage's
        # total, which is at least the sum of each batch's fastest stage; and a batch's latency is at least any stage's.
        stages = [m.time_s for m in d.pipeline.cost_models]
        return lambda shape: min(t(shape) for t in stages)
    if moe is None:
        return time_s
    others = [1] * (d.engine.data_parallel_size - 1)

    def step_s(shape: StepArrays) -> float:
        t = shape.num_batched_tokens
        return time_s(shape) - moe.rank_moe_s(t) + moe.step_s([t, *others])
    return step_s


@functools.lru_cache(maxsize=None)
def _profile(hardware: str) -> HardwareProfile:
    return load_profile(hardware)


@functools.lru_cache(maxsize=None)
def _model(model: str) -> ModelSpec:
    return load_model(model)


def engine_for(backend: SimulatorBackend, config: Config) -> EngineArgs:
    """The backend's engine flags with the configuration's. DP ranks fill one node after another: as many per node
    as its GPUs hold at the configuration's TP (`ranks_per_node`), `--data-parallel-size-local` when that is fewer
    than all of them."""
    dp = config.data_parallel_size
    local = ranks_per_node(_profile(config.hardware), config) if dp > 1 else dp
    return replace(backend.engine, tensor_parallel_size=config.tensor_parallel_size,
                   max_num_seqs=config.max_num_seqs, quantization=config.quantization,
                   kv_cache_dtype=config.kv_cache_dtype, max_num_batched_tokens=config.max_num_batched_tokens,
                   data_parallel_size=dp, data_parallel_size_local=local if local < dp else None,
                   enable_expert_parallel=config.expert_parallel,
                   pipeline_parallel_size=config.pipeline_parallel_size)


def ranks_per_node(hw: HardwareProfile, config: Config) -> int:
    """DP ranks on one node: the node's GPUs (`scale_out.gpus_per_node`, else one scale-up domain, as
    `roofline.parallel_config.ParallelArgs.layout`) over TP, at most DP."""
    domain = hw.interconnect.max_num_gpus if hw.interconnect is not None else 8
    per_node = hw.scale_out.gpus_per_node if hw.scale_out is not None else domain
    return max(1, min(config.data_parallel_size, per_node // config.tensor_parallel_size))


@functools.lru_cache(maxsize=64)
def _deployment(backend: SimulatorBackend, config: Config, efficiency: Efficiency) -> Deployment:
    # Built once per process and configuration: the cost model caches step times inside it.
    hw = scale_efficiency(_profile(config.hardware), efficiency)
    return make_deployment(_model(backend.model), hw, engine_for(backend, config))


def _builds(backend: SimulatorBackend, config: Config, **engine_changes: Any) -> Deployment | None:
    try:
        return make_deployment(_model(backend.model), _profile(config.hardware),
                               replace(engine_for(backend, config), **engine_changes))
    except UserError:
        return None


# Weight quantizations tried, in order, when a configuration does not fit with its own.
_FIX_QUANTIZATIONS = ("none", "fp8", "int8", "awq")


def fit_fixes(backend: SimulatorBackend, config: Config) -> list[str]:
    """The single changes that make a configuration that does not fit fit, each checked by building the
    deployment (no simulation): the nearest tensor-parallel size, an fp8 KV cache, weight quantization, a
    shorter max_model_len (the longest that fits). Empty when none of them does."""
    spec, hw = _model(backend.model), _profile(config.hardware)
    tp = config.tensor_parallel_size
    engine = engine_for(backend, config)
    try:
        replace(engine, tensor_parallel_size=tp).check_hardware(hw)
        RankShape.of(spec, tp)
        tp_valid = True
    except UserError:
        tp_valid = False
    domain = 1 if hw.kind == "cpu" else (hw.interconnect.max_num_gpus if hw.interconnect is not None else 8)
    fitting_tps = [t for t in range(1, domain + 1) if t != tp and _builds(backend, config, tensor_parallel_size=t)]
    fixes = []
    larger = [t for t in fitting_tps if t > tp]
    if tp_valid and larger:
        fixes.append(f"needs TP >= {larger[0]}")
    elif not tp_valid and fitting_tps:
        near = sorted(fitting_tps, key=lambda t: (abs(t - tp), t))[:2]
        fixes.append(f"fits with TP {' or '.join(map(str, sorted(near)))}")
    if not tp_valid:
        return fixes
    if config.kv_cache_dtype != "fp8" and _builds(backend, config, kv_cache_dtype="fp8"):
        fixes.append("fits with --kv-cache-dtype fp8")
    quant = next((q for q in _FIX_QUANTIZATIONS
                  if q != config.quantization and _builds(backend, config, quantization=q)), None)
    if quant is not None:
        fixes.append(f"fits with --quantization {quant}")
    max_model_len = engine.resolved_max_model_len(spec)
    shortest = _builds(backend, config, max_model_len=engine.block_size)
    if shortest is not None:
        longest = min(shortest.kv.num_tokens, max_model_len - 1) // engine.block_size * engine.block_size
        while longest >= engine.block_size and _builds(backend, config, max_model_len=longest) is None:
            longest -= engine.block_size  # a shorter max_model_len can change the batch defaults slightly
        if longest >= engine.block_size:
            fixes.append(f"lower --max-model-len to {longest:,}")
    return fixes


@dataclass(frozen=True)
class ModelLenChoice:
    """`max_model_len` for a plan: the longest request the workload samples, rounded up to the block size."""

    max_model_len: int
    longest_request_tokens: int
    num_requests: int
    rejected_below: tuple[tuple[int, int], ...]  # (a smaller max_model_len, requests it would reject)

    def note(self) -> str:
        smaller = "; ".join(f"{length} would reject {n} of {self.num_requests} requests"
                            for length, n in self.rejected_below)
        return (f"max_model_len {self.max_model_len}: the longest request the workload samples "
                f"({self.longest_request_tokens} prompt + output tokens) rounded up to the block size"
                + (f"; {smaller}" if smaller else ""))


def choose_max_model_len(workload: str, num_requests: int, block_size: int, limit: int) -> ModelLenChoice:
    """vLLM rejects a request whose prompt reaches max_model_len and stops one at max_model_len tokens; a plan
    needs no more than the workload's longest request, and every token of max_model_len beyond it only shrinks
    what fits (the KV check asks for one request of max_model_len). Capped at what vLLM allows for the model."""
    specs = sample_requests(workload_at_rate(_workload(workload), 1.0, num_requests)[0])
    totals = np.array([s.num_prompt_tokens + s.num_output_tokens for s in specs])
    longest = int(totals.max())
    chosen = min(limit, -(-longest // block_size) * block_size)
    smaller = [length for length in (2 ** k for k in range(10, 18)) if length < chosen][-2:]
    # A request needs max_model_len > its prompt (vLLM's check) and is cut at max_model_len tokens in all.
    rejected = tuple((length, int(np.sum(totals > length))) for length in smaller)
    return ModelLenChoice(chosen, longest, len(specs), rejected)
