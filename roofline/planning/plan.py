"""Capacity planning: which hardware, how configured, how many GPUs, at what cost, for a traffic and SLOs.

The search space is every engine knob the simulator models: hardware x tensor-parallel size x quantization x
KV-cache dtype x `max_num_batched_tokens` x `max_num_seqs`. Every configuration is first checked for fit
without simulating (`Backend.fit`: weights and one `max_model_len` request's KV cache against device memory,
TP against the model's heads and the scale-up domain); those that cannot fit are pruned with their reason and
the change that would make them fit. For each one that fits, a search over the offered request rate finds the
highest rate one replica sustains with the chosen percentile of every SLO (TTFT, TPOT, and optionally ITL and
end-to-end latency) within its limit. Each probe is one simulation of the workload at that rate (a `Backend`
runs it: the real one is `roofline.planning.backend.SimulatorBackend`, fakes in the tests). From the rate
follow the replicas and GPUs for the target rate, dollars per hour and per million output tokens, the KV-cache
headroom, the cheapest configuration and the Pareto front of cost against the rate a deployment sustains.
Sensitivity repeats every search with the profile's compute and memory efficiencies both 10 % lower and both
10 % higher, which gives bands on the curves and a range on the answer.

    request = PlanRequest(model="llama-3.1-70b", hardware=("h100-sxm", "h200-sxm"), workload="sharegpt-chat",
                          slo=Slo(ttft_s=2.0, tpot_s=0.1), target_rate_per_s=20.0, quantizations=("none", "fp8"))
    backend = SimulatorBackend("llama-3.1-70b", "sharegpt-chat", EngineArgs())
    with LocalExecutor(num_workers=2) as executor:          # or RayExecutor("auto")
        plan = make_plan(request, backend, prices_for(request.hardware, {}), executor=executor)
    roofline.planning.report.write_report(plan, out_dir)

Searches are independent tasks on an `Executor` (`roofline.planning.executor`: local spawned processes, so a
script using more than one worker needs the `if __name__ == "__main__":` guard, or Ray). Each search is a pure
function of its inputs and the results are collected in task order, so the plan does not depend on the
executor, the number of workers or the scheduling.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from roofline.cost.quant import KV_CACHE_DTYPE_CHOICES, QUANTIZATION_CHOICES
from roofline.errors import UserError
from roofline.planning.executor import Executor, LocalExecutor
from roofline.planning.prices import Price
from roofline.planning.search import (
    NOMINAL,
    OPTIMISTIC,
    PESSIMISTIC,
    Backend,
    Config,
    Efficiency,
    Fit,
    Point,
    Search,
    Slo,
    StepProfile,
    probe_point,
    search_max_rate,
)

# Defaults of `roofline plan`: the candidates, and how many requests each probe measures.
DEFAULT_TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
DEFAULT_MAX_NUM_SEQS = (64, 128, 256)
DEFAULT_NUM_REQUESTS = 2000
# The latency-against-load curve of each hardware's best configuration adds probes at these fractions of its
# saturation rate: light load (where latency is the lone request's) and past saturation (where queues grow).
LOAD_CURVE_FRACTIONS = (0.05, 0.2, 0.4, 1.1, 1.3)


@dataclass(frozen=True)
class PlanRequest:
    model: str
    hardware: tuple[str, ...]
    workload: str
    slo: Slo
    target_rate_per_s: float
    tensor_parallel_sizes: tuple[int, ...] = DEFAULT_TENSOR_PARALLEL_SIZES
    max_num_seqs: tuple[int, ...] = DEFAULT_MAX_NUM_SEQS
    sensitivity: bool = True
    num_requests: int = DEFAULT_NUM_REQUESTS  # measured per probe, after warm-up and drain are excluded
    quantizations: tuple[str, ...] = ("none",)
    kv_cache_dtypes: tuple[str, ...] = ("auto",)
    max_num_batched_tokens: tuple[int | None, ...] = (None,)  # None: vLLM's default for the device
    # How the model's checkpoint stores its weights (`CheckpointQuant.method`), None when unquantized: what the
    # quantization "none" (no --quantization flag) serves.
    checkpoint_quantization: str | None = None

    def __post_init__(self) -> None:
        if not (self.target_rate_per_s > 0 and math.isfinite(self.target_rate_per_s)):
            raise UserError(f"--target-qps: must be a positive number of requests/s, got {self.target_rate_per_s}")
        if not self.hardware:
            raise UserError("--hardware: give at least one hardware id or path")
        for flag, values in (("--tensor-parallel-sizes", self.tensor_parallel_sizes),
                             ("--max-num-seqs", self.max_num_seqs),
                             ("--max-num-batched-tokens-list", tuple(v for v in self.max_num_batched_tokens
                                                                     if v is not None) or (1,))):
            if not values or any(v <= 0 for v in values):
                raise UserError(f"{flag}: must be a comma-separated list of positive integers, got {values}")
        for flag, names, choices in (("--quantizations", self.quantizations, QUANTIZATION_CHOICES),
                                     ("--kv-cache-dtypes", self.kv_cache_dtypes, KV_CACHE_DTYPE_CHOICES)):
            bad = [v for v in names if v not in choices] or ([] if names else ["(empty)"])
            if bad:
                raise UserError(f"{flag}: '{bad[0]}' is not allowed; allowed: {', '.join(choices)}")
        if not self.max_num_batched_tokens:
            raise UserError("--max-num-batched-tokens-list: give at least one positive integer")
        if self.num_requests < 1:
            raise UserError(f"--num-requests: must be positive, got {self.num_requests}")

    def configs(self) -> list[Config]:
        """Every combination, in a fixed order; per (hardware, TP, quantization, KV dtype, token budget) the
        max_num_seqs ascend (the plan's warm starts rely on it)."""
        tokens = sorted(set(self.max_num_batched_tokens), key=lambda v: -1 if v is None else v)
        return [Config(h, tp, seqs, q, kv, n) for h in dict.fromkeys(self.hardware)
                for tp in sorted(set(self.tensor_parallel_sizes)) for q in dict.fromkeys(self.quantizations)
                for kv in dict.fromkeys(self.kv_cache_dtypes) for n in tokens for seqs in sorted(set(self.max_num_seqs))]


@dataclass(frozen=True)
class ConfigPlan:
    """A configuration's answer for the target rate, with its sensitivity range when computed."""

    config: Config
    fit: Fit
    price: Price | None  # None: no shipped price and no --price; ranked by GPUs instead
    target_rate_per_s: float
    nominal: Search | None = None
    pessimistic: Search | None = None
    optimistic: Search | None = None

    @property
    def meets_slo(self) -> bool:
        return self.nominal is not None and self.nominal.max_rate_per_s > 0

    @property
    def search(self) -> Search:
        """The nominal search, which every configuration that was simulated (not pruned) has."""
        assert self.nominal is not None, f"{self.config.label}: not simulated"
        return self.nominal

    @property
    def best_point(self) -> Point:
        """The probe at the highest rate within the SLOs, of a configuration that meets them."""
        best = self.search.best
        assert best is not None, f"{self.config.label}: misses the SLOs"
        return best

    def cost_and_rate(self) -> tuple[float, float]:
        """(USD/hour, sustained rate) of a serving configuration with a price."""
        usd, rate = self.usd_per_hour, self.sustained_rate_per_s
        assert usd is not None and rate is not None, f"{self.config.label}: not a priced serving configuration"
        return usd, rate

    @property
    def max_rate_per_s(self) -> float | None:
        return self.nominal.max_rate_per_s if self.nominal else None

    @property
    def num_replicas(self) -> int | None:
        return replicas_needed(self.target_rate_per_s, self.nominal)

    @property
    def num_gpus(self) -> int | None:
        return gpus_needed(self.target_rate_per_s, self.nominal)

    @property
    def usd_per_hour(self) -> float | None:
        n = self.num_gpus
        return None if n is None or self.price is None else n * self.price.usd_per_gpu_hour

    @property
    def sustained_rate_per_s(self) -> float | None:
        """The highest rate the deployment for the target sustains within the SLOs: replicas x rate per replica."""
        n = self.num_replicas
        return None if n is None else n * self.search.max_rate_per_s

    @property
    def usd_per_million_output_tokens(self) -> float | None:
        """The deployment's hourly cost over the output tokens it serves at the target rate in that hour."""
        if not self.meets_slo or self.price is None:
            return None
        usd_per_hour, _ = self.cost_and_rate()
        tokens_per_hour = self.target_rate_per_s * self.best_point.mean_output_tokens * 3600.0
        return usd_per_hour / tokens_per_hour * 1e6

    @property
    def kv_headroom(self) -> float | None:
        """Fraction of the KV cache never used at the highest sustained rate."""
        return 1.0 - self.best_point.peak_kv_usage if self.meets_slo else None

    def gpus_range(self) -> tuple[int | None, int | None] | None:
        """(GPUs if efficiencies are 10 % higher, GPUs if 10 % lower); None without sensitivity."""
        if self.pessimistic is None or self.optimistic is None:
            return None
        return (gpus_needed(self.target_rate_per_s, self.optimistic),
                gpus_needed(self.target_rate_per_s, self.pessimistic))

    @property
    def why_not(self) -> str | None:
        """Why this configuration cannot serve, or None."""
        if not self.fit.fits:
            return self.fit.reason
        if not self.meets_slo:
            assert self.nominal is not None
            lowest = min(p.rate_per_s for p in self.nominal.points)
            return f"SLOs missed even at {lowest:.3g} req/s: the latency of a lone request exceeds them"
        return None


@dataclass(frozen=True)
class Plan:
    request: PlanRequest
    configs: tuple[ConfigPlan, ...]
    profiles: dict[str, tuple[StepProfile, StepProfile]] = field(default_factory=dict)  # hw -> (prefill, decode)
    notes: tuple[str, ...] = ()  # what the backend adapted (e.g. the arrival process), shown in the report
    load_curves: dict[Config, tuple[Point, ...]] = field(default_factory=dict)  # extra probes, by rate

    @property
    def serving(self) -> list[ConfigPlan]:
        return [c for c in self.configs if c.meets_slo]

    @property
    def pruned(self) -> list[ConfigPlan]:
        """The configurations that cannot fit, rejected before any simulation."""
        return [c for c in self.configs if not c.fit.fits]

    def ranked(self) -> list[ConfigPlan]:
        """The configurations that serve the target, best first: those with a price by cost, then those
        without one by GPUs."""
        return sorted(self.serving, key=_rank_key)

    @property
    def cheapest(self) -> ConfigPlan | None:
        """The configuration with the lowest USD/hour for the target (None when none with a price serves)."""
        priced = [c for c in self.ranked() if c.price is not None]
        return priced[0] if priced else None

    def pareto_front(self) -> list[ConfigPlan]:
        """The serving configurations with a price that no other beats on both cost for the target (USD/hour,
        lower is better) and the rate that deployment sustains within all SLOs (higher is better), by cost.
        Among equal points the better-ranked one stands for them."""
        priced = sorted((c for c in self.serving if c.price is not None),
                        key=lambda c: (c.cost_and_rate()[0], -c.cost_and_rate()[1], _rank_key(c)))
        front: list[ConfigPlan] = []
        for c in priced:
            if not front or c.cost_and_rate()[1] > front[-1].cost_and_rate()[1]:
                front.append(c)
        return front

    @property
    def unpriced_hardware(self) -> list[str]:
        return [h for h in dict.fromkeys(c.config.hardware for c in self.configs if c.price is None)]

    @property
    def best(self) -> ConfigPlan | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def best_per_hardware(self) -> list[ConfigPlan]:
        best: dict[str, ConfigPlan] = {}
        for c in self.ranked():
            best.setdefault(c.config.hardware, c)
        return [best[h] for h in self.request.hardware if h in best]

    @property
    def num_simulations(self) -> int:
        searches = [s for c in self.configs for s in (c.nominal, c.pessimistic, c.optimistic) if s]
        return sum(len(s.points) for s in searches) + sum(len(p) for p in self.load_curves.values())


def _rank_key(c: ConfigPlan) -> tuple[bool, float, int, float, str]:
    # Priced first, cheapest deployment first; then fewer GPUs; then more headroom per GPU; then name, for
    # determinism. Without a price only the GPUs rank.
    num_gpus = c.num_gpus
    assert num_gpus is not None, f"{c.config.label}: ranked but not serving"
    return (c.price is None, c.usd_per_hour or 0.0, num_gpus, -c.search.max_rate_per_s / c.config.tensor_parallel_size,
            c.config.label)


def replicas_needed(target_rate_per_s: float, search: Search | None) -> int | None:
    if search is None or search.max_rate_per_s <= 0:
        return None
    # A tiny relative slack keeps 20 / (20 / 3) at 3 replicas instead of 4 from floating-point noise.
    return max(1, math.ceil(target_rate_per_s / search.max_rate_per_s * (1 - 1e-9)))


def gpus_needed(target_rate_per_s: float, search: Search | None) -> int | None:
    n = replicas_needed(target_rate_per_s, search)
    return None if n is None or search is None else n * search.config.tensor_parallel_size


# ---- the plan ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Task:
    """One search: a configuration at an efficiency, optionally warm-started from a related answer."""

    config: Config
    efficiency: Efficiency
    start_rate_per_s: float | None = None


def _search_task(args: tuple[Backend, Task, Slo, int]) -> Search:
    backend, task, slo, num_requests = args
    return search_max_rate(backend, task.config, task.efficiency, slo, num_requests, task.start_rate_per_s)


def _probe_task(args: tuple[Backend, Config, Slo, int, float]) -> Point:
    backend, config, slo, num_requests, rate = args
    return probe_point(backend, config, NOMINAL, slo, num_requests, rate)


def run_searches(backend: Backend, tasks: list[Task], slo: Slo, num_requests: int,
                 executor: Executor | int = 1, on_done: Callable[[], None] | None = None) -> list[Search]:
    """Every search, in task order, on `executor` (an int: that many local worker processes); `on_done()` after
    each."""
    args = [(backend, t, slo, num_requests) for t in tasks]
    if isinstance(executor, int):
        with LocalExecutor(executor) as local:
            return local.map(_search_task, args, on_done)
    return executor.map(_search_task, args, on_done)


def _answer(search: Search | None) -> float | None:
    return search.max_rate_per_s if search is not None and search.max_rate_per_s > 0 else None


def _scaled(rate: float | None, factor: float) -> float | None:
    return None if rate is None else rate * factor


def _family(c: Config) -> tuple[str, int, str, str, int | None]:
    """The configurations that differ only in max_num_seqs share a family (and warm starts)."""
    return (c.hardware, c.tensor_parallel_size, c.quantization, c.kv_cache_dtype, c.max_num_batched_tokens)


class PlanProgress(Protocol):
    """What `make_plan` reports as it goes (`roofline.commands.plan` prints it)."""

    def planned(self, fitting: list[Config], num_configs: int, num_cold: int, num_warm: int,
                num_probes: int) -> None: ...

    def round(self, name: str, num_tasks: int) -> None: ...

    def task_done(self) -> None: ...


def num_searches(num_fitting: int, num_families: int, sensitivity: bool) -> tuple[int, int]:
    """(cold, warm) searches `make_plan` runs: one cold per family, every other configuration and every
    sensitivity search warm."""
    return num_families, num_fitting * (3 if sensitivity else 1) - num_families


def num_families(fitting: list[Config]) -> int:
    """The families (configurations equal but for max_num_seqs) among `fitting`: one cold search each."""
    return len({_family(c) for c in fitting})


def make_plan(request: PlanRequest, backend: Backend, prices: dict[str, Price | None], num_workers: int = 2,
              executor: Executor | None = None, progress: PlanProgress | None = None) -> Plan:
    """Fit every configuration (pruning those that cannot fit), search the rest (and their sensitivity), pick
    the best, and probe the load curve of each hardware's best. On `executor`, else `num_workers` local processes.

    Rounds of independent tasks, so that most searches start warm from a related answer:
    1. per family (all but max_num_seqs equal), the fitting configuration with the most max_num_seqs, cold;
    2. the family's other max_num_seqs from round 1's answer; round 1's sensitivity from its nominal answer;
    3. round 2's sensitivity from its nominal answers;
    4. the extra load-curve probes of each hardware's best configuration.
    """
    if executor is None:
        with LocalExecutor(num_workers) as local:
            return make_plan(request, backend, prices, executor=local, progress=progress)
    assert all(h in prices for h in request.hardware), "prices_for() gives every planned hardware an entry"
    configs = request.configs()
    fits = {c: backend.fit(c) for c in configs}
    fitting = [c for c in configs if fits[c].fits]
    anchors: dict[tuple[str, int, str, str, int | None], Config] = {}
    for c in fitting:  # configs() sorts max_num_seqs ascending: the last one per family wins
        anchors[_family(c)] = c
    searches: dict[tuple[Config, Efficiency], Search] = {}
    num_chosen = len({c.hardware for c in fitting})  # one load curve per hardware that has a fitting config
    if progress is not None:
        progress.planned(fitting, len(configs), *num_searches(len(fitting), len(anchors), request.sensitivity),
                         num_chosen * len(LOAD_CURVE_FRACTIONS))
    round_names = iter(("1/4 cold searches", "2/4 warm searches", "3/4 sensitivity searches"))

    def run_round(tasks: list[Task]) -> None:
        name = next(round_names)
        if progress is not None:
            progress.round(name, len(tasks))
        results = run_searches(backend, tasks, request.slo, request.num_requests, executor,
                               progress.task_done if progress is not None else None)
        searches.update(((t.config, t.efficiency), s) for t, s in zip(tasks, results))

    def sensitivity(cs: list[Config]) -> list[Task]:
        if not request.sensitivity:
            return []
        return [Task(c, e, _scaled(_answer(searches[(c, NOMINAL)]), e.compute))
                for c in cs for e in (PESSIMISTIC, OPTIMISTIC)]

    others = [c for c in fitting if c not in anchors.values()]
    run_round([Task(c, NOMINAL) for c in anchors.values()])
    run_round([Task(c, NOMINAL, _answer(searches[(anchors[_family(c)], NOMINAL)])) for c in others]
              + sensitivity(list(anchors.values())))
    run_round(sensitivity(others))
    plans = tuple(
        ConfigPlan(c, fits[c], prices[c.hardware], request.target_rate_per_s,
                   searches.get((c, NOMINAL)), searches.get((c, PESSIMISTIC)), searches.get((c, OPTIMISTIC)))
        for c in configs
    )
    plan = Plan(request, plans)
    chosen = plan.best_per_hardware()
    saturation = {c.config: _saturation(c, searches.get((anchors[_family(c.config)], NOMINAL))) for c in chosen}
    probes = [(c.config, f * saturation[c.config]) for c in chosen for f in LOAD_CURVE_FRACTIONS]
    if progress is not None:
        progress.round("4/4 load-curve probes", len(probes))
    points = executor.map(_probe_task, [(backend, cfg, request.slo, request.num_requests, rate)
                                        for cfg, rate in probes], progress.task_done if progress is not None else None)
    curves: dict[Config, tuple[Point, ...]] = {c.config: () for c in chosen}
    for (cfg, _), point in zip(probes, points):
        curves[cfg] += (point,)
    profiles = {c.config.hardware: representative_steps(backend, c) for c in chosen}
    return Plan(request, plans, profiles, backend.notes(), curves)


def _saturation(c: ConfigPlan, anchor: Search | None) -> float:
    """The configuration's saturation rate: its own cold search's, else its family anchor's (a warm search
    does not measure it), else above every rate probed."""
    for search in (c.nominal, anchor):
        if search is not None and search.saturation_rate_per_s:
            return search.saturation_rate_per_s
    return max(p.rate_per_s for p in c.search.points if math.isfinite(p.rate_per_s)) * 1.25


def representative_steps(backend: Backend, c: ConfigPlan) -> tuple[StepProfile, StepProfile]:
    """A prefill step of one mean-length prompt, and a decode step of the mean running batch at the highest
    sustained rate, each sequence halfway through a mean-length answer."""
    best = c.best_point
    prompt = max(1, round(best.mean_prompt_tokens))
    batch = int(min(c.config.max_num_seqs, max(1, round(best.mean_num_running))))
    context = prompt + max(0, round(best.mean_output_tokens / 2))
    prefill = backend.step_profile(c.config, np.array([prompt]), np.array([0]), f"prefill: 1 x {prompt} tokens")
    decode = backend.step_profile(c.config, np.ones(batch, dtype=np.int64), np.full(batch, context),
                                  f"decode: {batch} seqs x {context} context")
    return prefill, decode
