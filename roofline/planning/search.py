"""The search for the highest request rate one configuration sustains within the SLOs.

Each probe is one simulation of the workload at an offered rate, run by a `Backend` (the real one is
`roofline.planning.backend.SimulatorBackend`; fakes in the tests). The statistics of a probe leave out warm-up and
drain; the search brackets the answer and refines it to within RATE_REL_TOL (see `search_max_rate`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from roofline.errors import UserError
from roofline.planning.bounds import Bounds
from roofline.sim.bench_metrics import DRAIN_FRACTION, WARMUP_FRACTION

# Statistics exclude the first and the last tenth of the requests by arrival (`WARMUP_FRACTION`, `DRAIN_FRACTION`,
# defined with the steady state they cut, in roofline.sim.bench_metrics). Each probe simulates enough requests that
# `num_requests` remain measured.
# The search stops when the bracket [passing, failing] is within this fraction of the passing rate.
RATE_REL_TOL = 0.05
# Below saturation / 2**MAX_HALVINGS a configuration is declared unable to meet the SLOs at any rate.
MAX_HALVINGS = 6
# The first probe below saturation, as a fraction of it: the answers of the shipped workloads mostly lie
# between 0.5 and 0.95 of saturation, below the knee of the latency curve.
FIRST_PROBE_FRACTION = 0.75
# While no probe above the passing rate has failed, the next one goes this fraction of the way to saturation.
UPWARD_FRACTION = 0.6
# The search interpolates once the failing rate is within this factor of the passing one, and bisects before.
INTERPOLATE_BELOW = 1.25
# A search started from a related configuration's answer (the same device and TP with more max_num_seqs, or
# the nominal efficiency for a sensitivity search) steps by this factor, at most WALK_STEPS times.
WALK_FACTOR = 1 + 2 * RATE_REL_TOL
WALK_STEPS = 3
SENSITIVITY_DELTA = 0.10
DEFAULT_SLO_PERCENTILE = 90.0


@dataclass(frozen=True)
class Slo:
    """Per-request latency targets; `percentile` of the measured requests must meet each of them (of the pooled
    inter-token gaps for ITL). TTFT and TPOT are required, ITL and end-to-end latency optional (None)."""

    ttft_s: float
    tpot_s: float
    percentile: float = DEFAULT_SLO_PERCENTILE
    itl_s: float | None = None
    e2el_s: float | None = None

    def __post_init__(self) -> None:
        for flag, value in (("--slo-ttft-s", self.ttft_s), ("--slo-tpot-s", self.tpot_s),
                            ("--slo-itl-s", self.itl_s), ("--slo-e2el-s", self.e2el_s)):
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise UserError(f"{flag}: must be a positive number of seconds, got {value}")
        if not 0 < self.percentile <= 100:
            raise UserError(f"--slo-percentile: must be in (0, 100], got {self.percentile}")

    def limits(self) -> dict[str, float]:
        """The SLOs that are set, under vLLM's `--goodput` names (ttft, tpot, e2el) and itl, in seconds."""
        named = {"ttft": self.ttft_s, "tpot": self.tpot_s, "itl": self.itl_s, "e2el": self.e2el_s}
        return {name: value for name, value in named.items() if value is not None}


@dataclass(frozen=True)
class Config:
    """One replica's shape: the device, how many of them share the model, how its weights and KV cache are
    stored, how many sequences and tokens one step may hold (`max_num_batched_tokens` None: vLLM's default
    for the device)."""

    hardware: str
    tensor_parallel_size: int
    max_num_seqs: int
    quantization: str = "none"
    kv_cache_dtype: str = "auto"
    max_num_batched_tokens: int | None = None
    # vLLM's data parallelism (a MoE model's DP ranks step in lockstep as one replica) and expert parallelism
    # (`roofline.parallel_config`); the ranks fill one node after another (`roofline.planning.backend.engine_for`).
    data_parallel_size: int = 1
    expert_parallel: bool = False
    # vLLM's pipeline parallelism: stages of TP GPUs each, on as few nodes as hold them (`roofline.cost.pipeline`).
    pipeline_parallel_size: int = 1

    @property
    def num_gpus(self) -> int:
        """GPUs of one replica: TP x DP x PP."""
        return self.tensor_parallel_size * self.data_parallel_size * self.pipeline_parallel_size

    @property
    def label(self) -> str:
        parts = [self.hardware, f"TP{self.tensor_parallel_size}"]
        if self.pipeline_parallel_size > 1:
            parts.append(f"PP{self.pipeline_parallel_size}")
        if self.data_parallel_size > 1:
            parts.append(f"DP{self.data_parallel_size}")
        if self.expert_parallel:
            parts.append("EP")
        if self.quantization != "none":
            parts.append(self.quantization)
        if self.kv_cache_dtype != "auto":
            parts.append(f"kv-{self.kv_cache_dtype}")
        parts.append(f"seqs{self.max_num_seqs}")
        if self.max_num_batched_tokens is not None:
            parts.append(f"tokens{self.max_num_batched_tokens}")
        return " ".join(parts)

    def sort_key(self) -> tuple[str, int, int, int, bool, str, str, int, int]:
        return (self.hardware, self.tensor_parallel_size, self.pipeline_parallel_size, self.data_parallel_size,
                self.expert_parallel, self.quantization, self.kv_cache_dtype, self.max_num_batched_tokens or 0,
                self.max_num_seqs)


@dataclass(frozen=True)
class Efficiency:
    """How a search's profile is changed: with `quantile` and a profile that states its operator-time uncertainty
    (`roofline.cost.uncertainty`), every operator kind's time at that probability of its measured / predicted on
    held-out operator-table rows; otherwise multipliers on its compute and memory efficiencies (1.0 = as is)."""

    compute: float = 1.0
    memory: float = 1.0
    quantile: float | None = None

    @property
    def label(self) -> str:
        if self.compute == self.memory == 1.0 and self.quantile is None:
            return "nominal"
        scaled = f"compute x{self.compute:g}, memory x{self.memory:g}"
        return scaled if self.quantile is None else f"operator times at p{100 * self.quantile:g} (or {scaled})"


NOMINAL = Efficiency()
# The sensitivity's two searches: each operator kind's time at the 90th (10th) percentile of its measured / predicted,
# where the profile states them; else compute and memory efficiency SENSITIVITY_DELTA lower (higher).
PESSIMISTIC = Efficiency(1 - SENSITIVITY_DELTA, 1 - SENSITIVITY_DELTA, 0.9)
OPTIMISTIC = Efficiency(1 + SENSITIVITY_DELTA, 1 + SENSITIVITY_DELTA, 0.1)


@dataclass(frozen=True, eq=False)
class RunResult:
    """One simulation of one replica, per request in arrival order (seconds; `tpot_s` is NaN for requests
    with a single output token), plus the KV-cache usage over time as a fraction of the blocks."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    finish_s: np.ndarray
    num_prompt_tokens: np.ndarray
    num_output_tokens: np.ndarray
    kv_time_s: np.ndarray
    kv_usage: np.ndarray
    mean_num_running: float
    e2e_s: np.ndarray | None = None  # arrival to finish, per request (None: the backend does not measure it)
    itl_s: np.ndarray | None = None  # every gap between two output tokens of a request, pooled
    itl_request_index: np.ndarray | None = None  # the request (row) of each gap
    # Where the run ended once it certainly missed an SLO (`roofline.planning.early_stop`), None when it ran to the end:
    # then the latencies above are floors (lower bounds), the ITL gaps none, and finish_s NaN for the unfinished.
    stopped_at_s: float | None = None
    # A stopped run's estimate of the rate it serves (requests/s), for the search's next guess; None: from finish_s.
    served_per_s: float | None = None


@dataclass(frozen=True)
class Fit:
    """Whether a configuration fits on its devices: the KV capacity in tokens, or why not and what change would
    make it fit (`fix`, None when no single change tried does). `max_num_batched_tokens`: the token budget the
    configuration resolves to (vLLM's device default when the configuration leaves it unset)."""

    num_kv_tokens: int | None
    reason: str | None = None
    fix: str | None = None
    max_num_batched_tokens: int | None = None

    @property
    def fits(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class OpSummary:
    """One operator of one step, as the cost model sees it; `bound` is compute, memory, comm or overhead."""

    name: str
    flops: float
    bytes: float
    time_s: float
    bound: str


@dataclass(frozen=True)
class StepProfile:
    """The operators of one representative step on one device (per rank under tensor parallelism)."""

    label: str
    ops: tuple[OpSummary, ...]
    total_s: float
    peak_flops_per_s: float
    memory_bandwidth_bytes_per_s: float


class Backend(Protocol):
    """What the planner needs from a simulator and a cost model. Must pickle (it runs in workers)."""

    def fit(self, config: Config) -> Fit: ...

    def run(self, config: Config, efficiency: Efficiency, rate_per_s: float, num_requests: int,
            stop_slo: Slo | None = None) -> RunResult:
        """One simulation of one replica. With `stop_slo` it may end as soon as it certainly misses that SLO
        (`RunResult.stopped_at_s`); a backend that cannot stop early runs to the end."""
        ...

    def bounds(self, config: Config, efficiency: Efficiency, num_requests: int, percentile: float) -> Bounds:
        """The highest rate one replica could sustain and the lowest SLO percentiles a probe of `num_requests`
        measured requests could see, from the cost model alone (`roofline.planning.bounds`)."""
        ...

    def step_profile(self, config: Config, query_lens: np.ndarray, context_lens: np.ndarray,
                     label: str) -> StepProfile: ...

    def notes(self) -> tuple[str, ...]:
        """What the report should say about how the backend ran (e.g. an arrival process it adapted)."""
        ...


@dataclass(frozen=True)
class Point:
    """One probe of the search: the offered rate and what the measured requests saw."""

    rate_per_s: float  # offered; inf = all requests at once (the saturation probe)
    ttft_s: float  # the SLO percentile of TTFT
    tpot_s: float  # the SLO percentile of TPOT
    throughput_per_s: float  # completed requests per second in steady state
    passes: bool
    mean_prompt_tokens: float
    mean_output_tokens: float
    peak_kv_usage: float
    mean_num_running: float
    itl_s: float | None = None  # the SLO percentile of the pooled inter-token gaps (None: not measured)
    e2e_s: float | None = None  # the SLO percentile of end-to-end latency (None: not measured)
    # False: the probe stopped once it certainly missed an SLO (`roofline.planning.early_stop`); its percentiles are
    # lower bounds and its throughput that of the requests finished by then.
    complete: bool = True


@dataclass(frozen=True)
class Search:
    """The search for one configuration at one efficiency."""

    config: Config
    efficiency: Efficiency
    max_rate_per_s: float  # 0.0 when the SLOs are missed even at the lowest probed rate
    saturation_rate_per_s: float | None  # None when a warm start bracketed the answer without it
    points: tuple[Point, ...]  # in the order they ran
    best: Point | None  # the probe at max_rate_per_s
    kv_time_s: tuple[float, ...] = ()  # KV usage over time at max_rate_per_s (downsampled)
    kv_usage: tuple[float, ...] = ()


# ---- one probe ---------------------------------------------------------------------------------------

def num_simulated_requests(num_measured: int) -> int:
    """How many requests a probe simulates so that `num_measured` remain after warm-up and drain."""
    return math.ceil(num_measured / (1.0 - WARMUP_FRACTION - DRAIN_FRACTION))


def measured_slice(num_total: int) -> slice:
    """The requests (in arrival order) that count: neither warm-up nor drain."""
    return slice(int(num_total * WARMUP_FRACTION), num_total - int(num_total * DRAIN_FRACTION))


def steady_throughput_per_s(finish_s: np.ndarray) -> float:
    """Completions per second between the 10th and 90th percentile completion: the steady state, without
    the ramp-up of an empty system and the drain after the last arrival."""
    done = np.sort(finish_s[np.isfinite(finish_s)])
    n = len(done)
    lo, hi = int(n * WARMUP_FRACTION), n - 1 - int(n * DRAIN_FRACTION)
    if hi <= lo or done[hi] <= done[lo]:
        return n / float(done[-1]) if n and done[-1] > 0 else 0.0
    return (hi - lo) / float(done[hi] - done[lo])


def slo_percentile(values: np.ndarray, percentile: float) -> float:
    """The smallest measured value that `percentile` % of the values do not exceed (numpy's inverted_cdf):
    it is within an SLO exactly when at least `percentile` % of the requests meet the SLO, which is how
    `roofline simulate` counts requests meeting it."""
    return float(np.percentile(values, percentile, method="inverted_cdf")) if len(values) else 0.0


def summarize(run: RunResult, rate_per_s: float, slo: Slo) -> Point:
    """The probe's statistics over the measured requests. A one-token answer has no TPOT and meets the TPOT
    SLO (as in `roofline simulate`): it counts as 0 s. ITL pools the gaps of the measured requests."""
    n = len(run.ttft_s)
    window = measured_slice(n)
    ttft_p = slo_percentile(run.ttft_s[window], slo.percentile)
    tpot_p = slo_percentile(np.nan_to_num(run.tpot_s[window], nan=0.0), slo.percentile)
    itl_p = e2e_p = None
    if run.itl_s is not None and run.itl_request_index is not None:
        measured = np.zeros(n, dtype=bool)
        measured[window] = True
        itl_p = slo_percentile(run.itl_s[measured[run.itl_request_index]], slo.percentile)
    if run.e2e_s is not None:
        e2e_p = slo_percentile(run.e2e_s[window], slo.percentile)
    point = Point(
        rate_per_s=rate_per_s,
        ttft_s=ttft_p,
        tpot_s=tpot_p,
        throughput_per_s=run.served_per_s if run.served_per_s is not None else steady_throughput_per_s(run.finish_s),
        passes=True,
        mean_prompt_tokens=float(np.mean(run.num_prompt_tokens[window])),
        mean_output_tokens=float(np.mean(run.num_output_tokens[window])),
        peak_kv_usage=float(np.max(run.kv_usage)) if len(run.kv_usage) else 0.0,
        mean_num_running=run.mean_num_running,
        itl_s=itl_p,
        e2e_s=e2e_p,
        complete=run.stopped_at_s is None,
    )
    point = replace(point, passes=meets_slo(point, slo))
    assert point.complete or not point.passes, "a run stops early only once it certainly misses an SLO"
    return point


def probe_point(backend: Backend, config: Config, efficiency: Efficiency, slo: Slo, num_requests: int,
                rate_per_s: float) -> Point:
    """One simulation at one offered rate, outside any search (the report's latency-against-load curve)."""
    run = backend.run(config, efficiency, rate_per_s, num_simulated_requests(num_requests))
    return summarize(run, rate_per_s, slo)


# ---- the search --------------------------------------------------------------------------------------

def search_max_rate(backend: Backend, config: Config, efficiency: Efficiency, slo: Slo, num_requests: int,
                    start_rate_per_s: float | None = None) -> Search:
    """The highest offered rate at which the SLO percentiles hold, to within RATE_REL_TOL.

    Assumption: the percentile latencies do not decrease as the offered rate grows (more load never makes
    a request faster). Every probe uses the same workload seed, so a higher rate replays the same requests
    with arrival gaps scaled down (common random numbers): that makes the measured curve monotone up to
    scheduling effects, not only in expectation.

    Cold (no `start_rate_per_s`):
    1. Saturation: all requests at once; the steady completion rate R bounds any sustainable rate.
    2. Probe FIRST_PROBE_FRACTION x R; halve while it fails (at most MAX_HALVINGS times; if none passes,
       the SLOs cannot be met at any rate).
    3. While nothing above the passing rate has failed, step UPWARD_FRACTION of the way to R (ending
       within RATE_REL_TOL of R when even that passes).
    4. Shrink [passing, failing] to within RATE_REL_TOL of the passing rate (`refine`).
    Typically 4 to 7 simulations. Warm (from a related configuration's answer): walk from the start by
    WALK_FACTOR until a bracket forms (`walk`), then step 4; typically 3 simulations. A walk that brackets
    nothing in WALK_STEPS probes continues as a cold search from what it found.
    """
    n_total = num_simulated_requests(num_requests)
    points: list[Point] = []
    runs: dict[float, RunResult] = {}

    def probe(rate: float) -> Point:
        run = backend.run(config, efficiency, rate, n_total)
        point = summarize(run, rate, slo)
        points.append(point)
        # Keep only the highest passing run's KV series (the answer's). Not the saturation probe's: all requests
        # at once can pass loose SLOs, yet the answer is a finite rate.
        if point.passes and math.isfinite(rate) and all(rate > r for r in runs):
            runs.clear()
            runs[rate] = run
        return point

    lo: Point | None = None
    hi: Point | None = None
    saturation: float | None = None
    if start_rate_per_s is not None and start_rate_per_s > 0:
        lo, hi = walk(probe, start_rate_per_s)
    if lo is None or hi is None:
        saturation = probe(math.inf).throughput_per_s
        rate = FIRST_PROBE_FRACTION * saturation if hi is None else min(hi.rate_per_s / 2,
                                                                          FIRST_PROBE_FRACTION * saturation)
        for _ in range(MAX_HALVINGS + 1 if lo is None and saturation > 0 else 0):
            point = probe(rate)
            if point.passes:
                lo = point
                break
            hi, rate = point, rate / 2
        if lo is None:
            return Search(config, efficiency, 0.0, saturation, tuple(points), None)
        while hi is None and saturation > lo.rate_per_s * (1 + RATE_REL_TOL):
            point = probe(lo.rate_per_s + UPWARD_FRACTION * (saturation - lo.rate_per_s))
            lo, hi = (point, hi) if point.passes else (lo, point)
    if hi is not None:
        lo = refine(probe, lo, hi, slo)
    kv_t, kv_u = _downsample(runs[lo.rate_per_s].kv_time_s, runs[lo.rate_per_s].kv_usage)
    return Search(config, efficiency, lo.rate_per_s, saturation, tuple(points), lo, kv_t, kv_u)


def walk(probe: Callable[[float], Point], start_rate_per_s: float) -> tuple[Point | None, Point | None]:
    """(passing, failing) probes from stepping by WALK_FACTOR from a guess: up while it passes, down while it
    fails, at most WALK_STEPS probes; either may be None when no bracket formed."""
    point = probe(start_rate_per_s)
    lo, hi = (point, None) if point.passes else (None, point)
    for _ in range(WALK_STEPS - 1):
        if lo is not None and hi is not None:
            break
        if hi is None:
            assert lo is not None  # the first probe set one of the two
            point = probe(lo.rate_per_s * WALK_FACTOR)
        else:
            point = probe(hi.rate_per_s / WALK_FACTOR)
        lo, hi = (point, hi) if point.passes else (lo, point)
    return lo, hi


def point_value(point: Point, name: str) -> float:
    """A probe's percentile of one SLO metric, by its name in `Slo.limits`."""
    value = {"ttft": point.ttft_s, "tpot": point.tpot_s, "itl": point.itl_s, "e2el": point.e2e_s}[name]
    assert value is not None, f"the backend does not measure {name}, which an SLO needs"
    return value


def meets_slo(point: Point, slo: Slo) -> bool:
    """Every SLO percentile within its limit (compared directly, not through a rounded ratio)."""
    return all(point_value(point, name) <= limit for name, limit in slo.limits().items())


def slo_ratio(point: Point, slo: Slo) -> float:
    """How far the worst of the SLO percentiles is from its SLO: <= 1 passes."""
    return max(point_value(point, name) / limit for name, limit in slo.limits().items())


def refine(probe: Callable[[float], Point], lo: Point, hi: Point, slo: Slo) -> Point:
    """The highest passing probe once [lo passing, hi failing] is within RATE_REL_TOL of lo.

    A wide bracket is bisected: a latency percentile is often flat up to a knee and then shoots up, and
    interpolating across the knee creeps. Within INTERPOLATE_BELOW, regula falsi on f = log(SLO ratio),
    which crosses 0 at the answer, with the Illinois rule: when the same end moves twice in a row, the
    other end's f is halved, so a convex f cannot stall the search at one end. Each probe keeps
    RATE_REL_TOL / 2 of lo away from both ends, so a good estimate closes the bracket at once: landing just
    above lo it fails, just below hi it passes.
    """
    f_lo, f_hi = _log_ratio(lo, slo), _log_ratio(hi, slo)
    moved_last: str | None = None
    while hi.rate_per_s > lo.rate_per_s * (1 + RATE_REL_TOL):
        a, b = lo.rate_per_s, hi.rate_per_s
        interpolate = b <= a * INTERPOLATE_BELOW and math.isfinite(f_hi - f_lo) and f_hi > f_lo
        x = a + (b - a) * -f_lo / (f_hi - f_lo) if interpolate else 0.5 * (a + b)
        margin = 0.5 * RATE_REL_TOL * a
        point = probe(min(max(x, a + margin), b - margin))
        if point.passes:
            lo, f_lo = point, _log_ratio(point, slo)
            f_hi = f_hi / 2 if moved_last == "lo" else f_hi
            moved_last = "lo"
        else:
            hi, f_hi = point, _log_ratio(point, slo)
            f_lo = f_lo / 2 if moved_last == "hi" else f_lo
            moved_last = "hi"
    return lo


def _log_ratio(point: Point, slo: Slo) -> float:
    return math.log(max(slo_ratio(point, slo), 1e-9))


def _downsample(t: np.ndarray, y: np.ndarray, num_points: int = 400) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """At most `num_points` samples, keeping each bin's maximum so peaks survive the thinning."""
    if len(t) <= num_points:
        return tuple(map(float, t)), tuple(map(float, y))
    edges = np.linspace(0, len(t), num_points + 1).astype(int)
    t_out = [float(t[a]) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    y_out = [float(np.max(y[a:b])) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    return tuple(t_out), tuple(y_out)
