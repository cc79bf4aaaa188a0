"""Capacity planning: which hardware, how configured, how many GPUs, at what cost, for a traffic and SLOs.

The search space is every engine knob the simulator models: hardware x tensor-parallel size x pipeline-parallel size x
data-parallel size x expert parallelism x quantization x KV-cache dtype x `max_num_batched_tokens` x `max_num_seqs`.
Every configuration is first checked for fit without simulating (`Backend.fit`: weights and one `max_model_len`
request's KV cache against device memory, TP against the model's heads and the scale-up domain); those that cannot fit
are pruned with their reason and the change that would make them fit. The others are bounded by the cost model
(`roofline.planning.bounds`: a replica's highest rate, its lowest SLO percentiles) and searched for the fewest
replicas that serve the target with the chosen percentile of every SLO (TTFT, TPOT, and optionally ITL and end-to-end
latency) within its limit, by branch and bound per hardware (`roofline.planning.prune`): what a bound shows cannot
meet the SLOs or cannot beat its hardware's best is never simulated. Each probe is one simulation of the workload at a
rate (a `Backend` runs it: the real one is `roofline.planning.backend.SimulatorBackend`, fakes in the tests). From the
replicas follow the GPUs, dollars per hour and per million output tokens, the KV-cache headroom, the cheapest
configuration and the Pareto front of cost against the rate a deployment sustains (among those searched). The answer's
rate is refined, and its sensitivity searched pessimistically and optimistically: every operator kind's time at the
90th and at the 10th percentile of its measured / predicted on held-out operator-table rows, where the profile states
them (`roofline.cost.uncertainty`), else compute and memory efficiency 10 % lower and higher; it gives a range on the
answer (GPUs, USD per hour and per million output tokens).

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from roofline.cost.quant import KV_CACHE_DTYPE_CHOICES, QUANTIZATION_CHOICES
from roofline.errors import UserError
from roofline.planning.bounds import Bounds
from roofline.planning.executor import Executor, LocalExecutor
from roofline.planning.prices import Price
from roofline.planning.prune import Refine, ReplicaSearch, probe_task, replicas_lower_bound, run_rounds
from roofline.planning.search import (
    NOMINAL,
    OPTIMISTIC,
    PESSIMISTIC,
    SENSITIVITY_DELTA,
    Backend,
    Config,
    Efficiency,
    Fit,
    Point,
    Search,
    Slo,
    StepProfile,
    num_simulated_requests,
    slo_ratio,
)

# Defaults of `roofline plan`: the candidates, and how many requests each probe measures.
DEFAULT_TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
DEFAULT_MAX_NUM_SEQS = (64, 128, 256)
DEFAULT_NUM_REQUESTS = 2000
# The latency-against-load curve of the best configuration adds a probe at light load (where latency is the lone
# request's), at these fractions of its highest rate within the SLOs; its search's probes, passing and failing, give
# the rest of the curve.
LOAD_CURVE_FRACTIONS = (0.25,)
# ... each probe measuring this fraction of the requests a search's probe measures (a lone request's latency needs few).
LOAD_CURVE_REQUEST_FRACTION = 0.25


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
    # Data-parallel sizes and expert parallelism off / on (a MoE model's layouts: `Config.data_parallel_size`).
    data_parallel_sizes: tuple[int, ...] = (1,)
    expert_parallel: tuple[bool, ...] = (False,)
    pipeline_parallel_sizes: tuple[int, ...] = (1,)  # pipeline stages (`Config.pipeline_parallel_size`)
    max_num_batched_tokens: tuple[int | None, ...] = (None,)  # None: vLLM's default for the device
    # How the model's checkpoint stores its weights (`CheckpointQuant.method`), None when unquantized: what the
    # quantization "none" (no --quantization flag) serves.
    checkpoint_quantization: str | None = None
    # Prune with the cost model's bounds and branch and bound (`roofline.planning.prune`), and end each probe once it
    # certainly misses the SLOs (`roofline.planning.early_stop`); False: search every configuration that fits to its
    # answer with whole probes (`--exhaustive`), the reference the pruned plan's answer equals.
    prune: bool = True

    def __post_init__(self) -> None:
        if not (self.target_rate_per_s > 0 and math.isfinite(self.target_rate_per_s)):
            raise UserError(f"--target-qps: must be a positive number of requests/s, got {self.target_rate_per_s}")
        if not self.hardware:
            raise UserError("--hardware: give at least one hardware id or path")
        for flag, values in (("--tensor-parallel-sizes", self.tensor_parallel_sizes),
                             ("--data-parallel-sizes", self.data_parallel_sizes),
                             ("--pipeline-parallel-sizes", self.pipeline_parallel_sizes),
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
        return [Config(h, tp, seqs, q, kv, n, dp, ep, pp) for h in dict.fromkeys(self.hardware)
                for tp in sorted(set(self.tensor_parallel_sizes)) for pp in sorted(set(self.pipeline_parallel_sizes))
                for dp in sorted(set(self.data_parallel_sizes))
                for ep in dict.fromkeys(self.expert_parallel) for q in dict.fromkeys(self.quantizations)
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
    bounds: Bounds | None = None  # the cost model's bounds (None: it does not fit)
    # Why the search was not run or was cut short (`roofline.planning.prune`): an SLO bound missed, or it cannot
    # serve with as few GPUs as its hardware's best. None: searched to its answer.
    skipped: str | None = None
    refined: bool = False  # its rate refined to within RATE_REL_TOL (else: the target / replicas it passed at)
    # Its worst SLO percentile over its limit at the target rate / its replicas (<= 1): equal cost and GPUs rank by it.
    load_ratio: float | None = None

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
        """(GPUs needed optimistically, pessimistically: `OPTIMISTIC`, `PESSIMISTIC`); None without sensitivity."""
        if self.pessimistic is None or self.optimistic is None:
            return None
        return (gpus_needed(self.target_rate_per_s, self.optimistic),
                gpus_needed(self.target_rate_per_s, self.pessimistic))

    def usd_per_million_range(self) -> tuple[float | None, float | None] | None:
        """USD per million output tokens with the optimistic and the pessimistic GPUs (`gpus_range`)."""
        span, nominal, gpus = self.gpus_range(), self.usd_per_million_output_tokens, self.num_gpus
        if span is None or nominal is None or not gpus:
            return None
        low, high = span
        return (None if low is None else nominal * low / gpus, None if high is None else nominal * high / gpus)

    @property
    def why_not(self) -> str | None:
        """Why this configuration cannot serve, or None."""
        if not self.fit.fits:
            return self.fit.reason
        if self.skipped is not None and not self.meets_slo:
            return self.skipped
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
    layouts: tuple[Any, ...] = ()  # what limits each parallel layout (`roofline.planning.layouts.LayoutRow`)

    @property
    def serving(self) -> list[ConfigPlan]:
        return [c for c in self.configs if c.meets_slo]

    @property
    def pruned(self) -> list[ConfigPlan]:
        """The configurations that cannot fit, rejected before any simulation."""
        return [c for c in self.configs if not c.fit.fits]

    @property
    def skipped(self) -> list[ConfigPlan]:
        """The configurations that fit but whose search the bounds left out or cut short (`ConfigPlan.skipped`)."""
        return [c for c in self.configs if c.fit.fits and c.skipped is not None and not c.meets_slo]

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


def _rank_key(c: ConfigPlan) -> tuple[bool, float, int, int, float, str]:
    # Priced first, cheapest deployment first; then fewer GPUs; then more max_num_seqs (room for bursts); then more
    # headroom at the target load (the lower worst SLO ratio at the rate each replica gets); then name, for
    # determinism. Without a price only the GPUs rank.
    num_gpus = c.num_gpus
    assert num_gpus is not None, f"{c.config.label}: ranked but not serving"
    return (c.price is None, c.usd_per_hour or 0.0, num_gpus, -c.config.max_num_seqs, c.load_ratio or 0.0,
            c.config.label)


def sensitivity_band(hardware: Sequence[str]) -> str:
    """What the pessimistic and optimistic searches of a plan over `hardware` (ids or paths) change, in words."""
    from roofline.cost.hardware import load_profile

    def has_uncertainty(h: str) -> bool:
        try:
            return load_profile(h).uncertainty is not None
        except UserError:  # a backend's own hardware (tests' fakes): no profile, so efficiencies are what moves
            return False

    measured = [h for h in hardware if has_uncertainty(h)]
    texts = []
    if measured:
        texts.append(f"every operator kind's time at the 90th (pessimistic) and the 10th (optimistic) percentile of its "
                     f"measured / predicted on held-out operator-table rows ({', '.join(measured)}: the profile's "
                     f"uncertainty section); an 80 % band if the kinds' errors move together, wider if they are "
                     f"independent; host and API-server times are not in it")
    if len(measured) < len(hardware):
        rest = [h for h in hardware if h not in measured]
        texts.append(f"compute and memory efficiency {100 * SENSITIVITY_DELTA:g} % lower (pessimistic) and higher "
                     f"(optimistic), capped at 1 ({', '.join(rest)}: no measured uncertainty)")
    return "; ".join(texts)


def replicas_needed(target_rate_per_s: float, search: Search | None) -> int | None:
    if search is None or search.max_rate_per_s <= 0:
        return None
    # A tiny relative slack keeps 20 / (20 / 3) at 3 replicas instead of 4 from floating-point noise.
    return max(1, math.ceil(target_rate_per_s / search.max_rate_per_s * (1 - 1e-9)))


def gpus_needed(target_rate_per_s: float, search: Search | None) -> int | None:
    n = replicas_needed(target_rate_per_s, search)
    return None if n is None or search is None else n * search.config.num_gpus


# ---- the plan ----------------------------------------------------------------------------------------

class PlanProgress(Protocol):
    """What `make_plan` reports as it goes (`roofline.commands.plan` prints it)."""

    def planned(self, num_configs: int, num_fitting: int, num_slo_bound: int) -> None: ...

    def round(self, phase: str, num_probes: int) -> None: ...

    def task_done(self) -> None: ...


class _Caps:
    """Per hardware, the fewest GPUs a configuration was seen to serve the target with, and the most max_num_seqs
    among those that do: no search of that hardware probes a replica count that needs more GPUs, nor as many unless
    it could win the tie (`_rank_key`: no fewer max_num_seqs). Branch and bound."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.best_gpus: dict[str, int] = {}
        self.best_seqs: dict[str, int] = {}
        self.searches: list[ReplicaSearch] = []

    def update(self) -> None:
        for s in self.searches:
            if s.pass_k is not None:
                gpus, hw = s.pass_k * s.config.num_gpus, s.config.hardware
                if gpus < self.best_gpus.get(hw, gpus + 1):
                    self.best_gpus[hw], self.best_seqs[hw] = gpus, s.config.max_num_seqs
                elif gpus == self.best_gpus[hw]:
                    self.best_seqs[hw] = max(self.best_seqs[hw], s.config.max_num_seqs)

    def cap_for(self, config: Config) -> Callable[[], int | None]:
        def cap() -> int | None:
            best = self.best_gpus.get(config.hardware) if self.enabled else None
            if best is None:
                return None
            can_tie = config.max_num_seqs >= self.best_seqs[config.hardware]
            return (best if can_tie else best - 1) // config.num_gpus
        return cap


def make_plan(request: PlanRequest, backend: Backend, prices: dict[str, Price | None], num_workers: int = 2,
              executor: Executor | None = None, progress: PlanProgress | None = None) -> Plan:
    """Fit every configuration (pruning those that cannot fit), bound the rest with the cost model, search the
    replicas each needs with branch and bound per hardware (`roofline.planning.prune`), refine the rate of each
    hardware's best, and ask the sensitivity and the load curve of the best. On `executor`, else `num_workers` local
    processes. With `request.prune` False every fitting configuration is searched to its answer (the reference
    the pruned plan equals)."""
    if executor is None:
        with LocalExecutor(num_workers) as local:
            return make_plan(request, backend, prices, executor=local, progress=progress)
    assert all(h in prices for h in request.hardware), "prices_for() gives every planned hardware an entry"
    target, slo, n = request.target_rate_per_s, request.slo, request.num_requests
    configs = request.configs()
    # Fit and bounds of every configuration, on the executor (a thousand configurations take a minute of CPU).
    checked = executor.map(_check_task, [(backend, c, n, slo.percentile) for c in configs])
    fits = {c: fit for c, (fit, _) in zip(configs, checked)}
    fitting = [c for c in configs if fits[c].fits]
    bounds = {c: b for c, (_, b) in zip(configs, checked) if b is not None}
    skipped: dict[Config, str] = {}
    if request.prune:
        skipped = {c: why for c in fitting if (why := bounds[c].misses(slo.limits())) is not None}
    if progress is not None:
        progress.planned(len(configs), len(fitting), len(skipped))

    def rounds(phase: str, jobs: list[Any], after_round: Callable[[], None] | None = None) -> None:
        run_rounds(backend, jobs, slo, n, executor, (lambda k: progress.round(phase, k)) if progress else None,
                   progress.task_done if progress is not None else None, after_round, early_stop=request.prune)

    # 1. Replicas per configuration, branch and bound per hardware.
    caps = _Caps(request.prune)
    num_simulated = num_simulated_requests(n)

    def k_min(b: Bounds) -> int:
        return replicas_lower_bound(target, b.passable_rate_per_s(slo.ttft_s, num_simulated))

    # The configurations equal but for max_num_seqs form a family: its member with the most max_num_seqs searches
    # first (`configs()` puts it last), the others start from its answer.
    nominal: dict[Config, ReplicaSearch] = {}
    leaders: dict[tuple, ReplicaSearch] = {}
    for c in reversed(fitting):
        if c not in skipped:
            family = (c.hardware, c.tensor_parallel_size, c.pipeline_parallel_size, c.data_parallel_size,
                      c.expert_parallel, c.quantization, c.kv_cache_dtype, c.max_num_batched_tokens)
            nominal[c] = ReplicaSearch(c, NOMINAL, target, k_min(bounds[c]), caps.cap_for(c), slo=slo,
                                       leader=leaders.get(family))
            leaders.setdefault(family, nominal[c])
    nominal = {c: nominal[c] for c in fitting if c in nominal}
    caps.searches = list(nominal.values())
    rounds("search", list(nominal.values()), caps.update)
    for c, s in nominal.items():
        if s.dominated or (s.pass_k is not None and not s.decided):
            gpus = caps.best_gpus.get(c.hardware)
            skipped[c] = (f"cannot serve with as few GPUs as the best of {c.hardware} ({gpus}): it needs "
                          f"{s.fail_k + 1} replicas or more ({'probed' if s.points else 'cost-model bound'})")
    # 2. The rate of each hardware's best refined (ranked by cost, GPUs and the SLO ratio at the target load, which
    # every passing configuration has measured).
    load_ratio = {c: slo_ratio(s.results[s.pass_k].point, slo) for c, s in nominal.items() if s.pass_k is not None}
    searches = {c: s.search() for c, s in nominal.items() if s.points}
    refines: dict[Config, Refine] = {}

    def config_plans(sens: dict[tuple[Config, Efficiency], Search]) -> tuple[ConfigPlan, ...]:
        return tuple(ConfigPlan(c, fits[c], prices[c.hardware], target, searches.get(c),
                                sens.get((c, PESSIMISTIC)), sens.get((c, OPTIMISTIC)), bounds.get(c), skipped.get(c),
                                c in refines, load_ratio.get(c)) for c in configs)

    first = Plan(request, config_plans({})).best
    to_refine = ([first.config] if first is not None else []) if request.prune else \
        [c for c, s in nominal.items() if s.decided]
    refines = {c: _refine(nominal[c], bounds[c].passable_rate_per_s(slo.ttft_s, num_simulated)) for c in to_refine}
    rounds("refine", list(refines.values()))
    searches.update({c: r.search() for c, r in refines.items()})
    best_now = Plan(request, config_plans({})).best
    # 3. Sensitivity of the best: the replicas at -10 % and +10 % efficiency, from the nominal answer.
    sensitivity: list[ReplicaSearch] = []
    if request.sensitivity and best_now is not None:
        for cp in (best_now,):
            c, k = cp.config, nominal[cp.config].pass_k
            assert k is not None
            sensitivity.append(ReplicaSearch(c, PESSIMISTIC, target, k, slo=slo))  # less efficient: no fewer replicas
            k_opt = k_min(backend.bounds(c, OPTIMISTIC, n, slo.percentile))
            sensitivity.append(ReplicaSearch(c, OPTIMISTIC, target, min(k, k_opt), implied_pass_k=k,
                                             first_k=k - 1 if k > 1 else None, slo=slo))
        rounds("sensitivity", list(sensitivity))
    sens = {(s.config, s.efficiency): s.search() for s in sensitivity}
    plans = config_plans(sens)
    plan = Plan(request, plans)
    # 4. The load curve of the best configuration: light load, and past the highest rate within the SLOs.
    curves: dict[Config, tuple[Point, ...]] = {}
    best = plan.best
    if best is not None:
        probes = [f * best.search.max_rate_per_s for f in LOAD_CURVE_FRACTIONS]
        if progress is not None:
            progress.round("load curve", len(probes))
        light = max(1, round(n * LOAD_CURVE_REQUEST_FRACTION))
        results = executor.map(probe_task, [(backend, best.config, NOMINAL, slo, light, r, False) for r in probes],
                               progress.task_done if progress is not None else None)
        curves[best.config] = tuple(r.point for r in results)
    profiles = {c.config.hardware: representative_steps(backend, c) for c in plan.best_per_hardware()}
    from roofline.planning.layouts import layout_rows  # (it reads plans: imported here, not at the top)

    return Plan(request, plans, profiles, backend.notes(), curves, layout_rows(plan, backend))


def _check_task(args: tuple[Backend, Config, int, float]) -> tuple[Fit, Bounds | None]:
    """Whether a configuration fits, and if it does its bounds (an executor task)."""
    backend, config, num_requests, percentile = args
    fit = backend.fit(config)
    return fit, (backend.bounds(config, NOMINAL, num_requests, percentile) if fit.fits else None)


def _refine(search: ReplicaSearch, passable_rate_per_s: float) -> Refine:
    """The bracket above a decided search's answer: its failing probe at target / (k - 1), else (k at the bound's
    smallest) the rate bound, above which no probe passes."""
    k = search.pass_k
    assert k is not None
    if k - 1 in search.results:
        return Refine(search, search.target / (k - 1))
    hi = passable_rate_per_s if k == 1 else min(passable_rate_per_s, search.target / (k - 1))
    return Refine(search, max(hi, search.target / k))


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
