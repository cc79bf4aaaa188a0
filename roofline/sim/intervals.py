"""Prediction intervals: one simulation run again on cost models whose operator times are drawn from the profile's
measured uncertainty (`roofline simulate --intervals`).

    spec = IntervalSpec.from_flags("80", "8", hw, seed=0)     # level 80 %, 8 samples (UserError on bad values)
    profiles = spec.profiles(hw)                               # hw with sampled `op_time_factors`
    runs = SampleRuns(lambda p: metrics_of(p), profiles, spec.num_workers)   # started now, beside the central run
    samples = runs.results()                                   # (then runs.close())
    record = interval_record(central, samples, spec, hw)       # per metric: central, low, high

What is sampled: the profile's `uncertainty` (`roofline.cost.uncertainty`: per operator kind, measured / predicted on
held-out operator-table rows), one factor per kind and sample (Latin hypercube over the kind's quantiles, kinds
independent, `OpUncertainty.sample`), each sample a whole simulation of the same requests with every operator of a
kind slower or faster by its factor; where the host states them (`roofline.cost.host_uncertainty`), the API server's
cost terms likewise (one factor per term, `host.cost_factors`), the host's single-thread speed and the executor's
host terms (step, per-sequence, launch and gap times; `with_host_time`), and the served run-to-run noise as a factor
on the sample's TTFT and TPOT figures (`apply_noise`). The central value is the run with the cost model as fitted
(the numbers the plain run prints); the interval is the samples' (100 - level) / 2 and (100 + level) / 2 percentiles
(numpy linear). Not sampled (`not_sampled`, printed and saved with every result): elementwise kernels and sampling,
the served prefill steps' time beyond their kernels' (profiles sampled from operator tables), and whatever the profile
does not state.

The samples run on `num_workers` forked processes (`SampleRuns`; they inherit the parent's imports, model, requests,
prompts and caches, so a sample costs one simulation), started before the central run so that it runs beside them,
and are collected in sample order whatever finishes first: the same seed gives the same bytes.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from roofline.cost.hardware import HardwareProfile
from roofline.cost.host_uncertainty import NOISE_METRICS
from roofline.cost.uncertainty import NOT_SAMPLED
from roofline.errors import UserError

DEFAULT_LEVEL_PERCENT = 80.0
DEFAULT_NUM_SAMPLES = 8
LEVEL_RANGE = (50.0, 95.0)
SAMPLES_RANGE = (4, 64)


def _number(text: str, flag: str, allowed: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UserError(f"{flag}: {text!r} is not a number; allowed: {allowed}") from None
    if not math.isfinite(value):
        raise UserError(f"{flag}: {text!r} is not allowed; allowed: {allowed}")
    return value


@dataclass(frozen=True)
class IntervalSpec:
    level_percent: float  # the interval's nominal coverage
    num_samples: int
    seed: int
    num_workers: int

    @classmethod
    def from_flags(cls, level: str, samples: str | None, hw: HardwareProfile, seed: int,
                   workers: int | None = None) -> IntervalSpec:
        """`--intervals [PERCENT]`, `--interval-samples N` checked (one line, UserError) against `hw`."""
        allowed = f"a percentage in [{LEVEL_RANGE[0]:g}, {LEVEL_RANGE[1]:g}] (e.g. 80)"
        percent = _number(level, "--intervals", allowed)
        if not LEVEL_RANGE[0] <= percent <= LEVEL_RANGE[1]:
            raise UserError(f"--intervals: {level} is not allowed; allowed: {allowed}")
        n = DEFAULT_NUM_SAMPLES
        if samples is not None:
            allowed_n = f"an integer in [{SAMPLES_RANGE[0]}, {SAMPLES_RANGE[1]}]"
            value = _number(samples, "--interval-samples", allowed_n)
            if value != int(value) or not SAMPLES_RANGE[0] <= value <= SAMPLES_RANGE[1]:
                raise UserError(f"--interval-samples: {samples} is not allowed; allowed: {allowed_n}")
            n = int(value)
        host = hw.host
        if hw.uncertainty is None and (host is None or (host.cost_uncertainty is None and host.run_to_run_noise is None
                                                        and host.time_uncertainty is None)):
            raise UserError(f"--intervals: hardware profile {hw.id} states no uncertainty (an uncertainty: section, "
                            f"its own or its family's: roofline calibrate --op-tables --family F --uncertainty "
                            f"--write; or host.api_server_cost_uncertainty / served_run_to_run_noise / "
                            f"host_time_uncertainty); allowed: a profile of a family fitted on operator tables "
                            f"(roofline profiles)")
        if workers is None:
            workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return cls(percent, n, seed, max(1, min(workers, n)))

    def profiles(self, hw: HardwareProfile) -> list[HardwareProfile]:
        """The sampled cost models: the operator kinds' factors and, where the host states its API-server costs'
        uncertainty, the cost terms' factors."""
        n = self.num_samples
        out = [hw] * n if hw.uncertainty is None else \
            [replace(hw, op_time_factors=f) for f in hw.uncertainty.sample(n, self.seed)]
        host = hw.host
        if host is not None and host.cost_uncertainty is not None:
            out = [replace(p, host=replace(host, cost_factors=f))
                   for p, f in zip(out, host.cost_uncertainty.sample(n, self.seed))]
        if host is not None and host.time_uncertainty is not None:
            out = [with_host_time(p, f) for p, f in zip(out, host.time_uncertainty.sample(n, self.seed))]
        return out

    def noise(self, hw: HardwareProfile) -> list[dict[str, float]]:
        """Per sample, the run-to-run factor on its TTFT and TPOT figures (1 where the host states no noise)."""
        host = hw.host
        if host is None or host.run_to_run_noise is None:
            return [{} for _ in range(self.num_samples)]
        return [dict(f) for f in host.run_to_run_noise.sample(self.num_samples, self.seed)]

    def bounds(self, values: Sequence[float]) -> tuple[float, float]:
        tail = (100.0 - self.level_percent) / 2
        low, high = np.percentile(np.asarray(values, dtype=np.float64), [tail, 100.0 - tail])
        return float(low), float(high)


def with_host_time(hw: HardwareProfile, factors: tuple[tuple[str, float], ...]) -> HardwareProfile:
    """`hw` with the host-time factors of `roofline.cost.host_uncertainty.HOST_TIME_TERMS` applied: the host's
    single-thread speed times assumed_cpu_speed x server_cpu_speed (the API server's reference costs are divided by
    it, `roofline.sim.api_server.ApiServerCosts.for_host`); executor.step_overhead (measured on the reference host
    and divided by the assumed speed) times step_overhead / (assumed_cpu_speed x server_cpu_speed); the per-sequence
    and launch times (measured on GPU servers) times their own factor / server_cpu_speed; the step gap times its
    factor. A term without a factor keeps 1."""
    f = dict(factors)
    assumed, server = f.get("assumed_cpu_speed", 1.0), f.get("server_cpu_speed", 1.0)
    host = hw.host
    assert host is not None
    ex = hw.executor
    executor = replace(
        ex, step_overhead_s=ex.step_overhead_s * f.get("step_overhead", 1.0) / (assumed * server),
        step_overhead_per_seq_s=ex.step_overhead_per_seq_s * f.get("step_overhead_per_seq", 1.0) / server,
        kernel_launch_s=ex.kernel_launch_s * f.get("kernel_launch", 1.0) / server,
        step_gap_s=ex.step_gap_s * f.get("step_gap", 1.0))
    return replace(hw, executor=executor, host=replace(
        host, single_thread_speed_relative=host.single_thread_speed_relative * assumed * server,
        time_factors=factors))


# ---- running the samples ------------------------------------------------------------------------------------------

_TASK: list[Any] = []  # (run_one, profiles) for the forked workers, which inherit it


def _run_index(i: int) -> dict[str, float | None]:
    run_one, profiles = _TASK
    return run_one(profiles[i])


def _worker_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the group; the parent ends the workers
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (not the CLI's handler, `roofline.cli`): ended quietly


class SampleRuns:
    """`run_one(profile)` for every profile, in order: started at once on `num_workers` forked processes (where the
    platform forks), so that the caller's own simulation (the central value) runs beside them; else, one after
    another here, when `results()` is called. `close()` ends the workers (after `results()`, or on an error).

        runs = SampleRuns(run_one, spec.profiles(hw), spec.num_workers)
        try:
            central = ...                  # the plain run, in this process
            samples = runs.results()       # in profile order, whichever finished first
        finally:
            runs.close()
    """

    def __init__(self, run_one: Callable[[HardwareProfile], dict[str, float | None]],
                 profiles: list[HardwareProfile], num_workers: int) -> None:
        self._run_one, self._profiles = run_one, profiles
        self._pool: Any = None
        self._pending: Any = None
        if num_workers > 1 and "fork" in multiprocessing.get_all_start_methods():
            _TASK[:] = [run_one, profiles]
            self._pool = multiprocessing.get_context("fork").Pool(num_workers, initializer=_worker_signals)
            self._pending = self._pool.map_async(_run_index, range(len(profiles)), chunksize=1)

    def results(self) -> list[dict[str, float | None]]:
        if self._pool is None:
            return [self._run_one(p) for p in self._profiles]
        results: list[dict[str, float | None]] = self._pending.get()
        self._pool.close()  # the workers end when their queue is empty
        self._pool.join()
        self._pool = None
        _TASK.clear()
        return results

    def close(self) -> None:
        """End the workers now if `results()` has not (an error, a Ctrl-C)."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
            _TASK.clear()


# ---- the figures --------------------------------------------------------------------------------------------------

_THROUGHPUTS = ("request_throughput", "request_goodput", "output_throughput", "total_token_throughput")
_LATENCIES = ("ttft", "tpot", "itl", "e2el")


def interval_metrics(vllm: dict[str, Any], summary: dict[str, Any]) -> dict[str, float | None]:
    """The figures an interval is given for: vLLM's throughputs and goodput, mean / median / percentiles of TTFT,
    TPOT, ITL (and the other latency metrics reported), and roofline's SLO goodput where SLOs are given."""
    out: dict[str, float | None] = {k: _float(vllm[k]) for k in _THROUGHPUTS if k in vllm and vllm[k] is not None}
    for name in _LATENCIES:
        out.update({k: _float(v) for k, v in vllm.items() if k.endswith(f"_{name}_ms") and not k.startswith("std_")})
    slo = summary.get("slo")
    if slo:
        out["slo_goodput_requests_per_s"] = _float(slo["goodput_requests_per_s"])
    return out


def apply_noise(metrics: dict[str, float | None], factors: dict[str, float]) -> dict[str, float | None]:
    """A sample's figures with the run-to-run noise: every TTFT figure (mean, median, percentiles; `*_ttft_ms`, and
    the coverage judge's `ttft_s`) times the TTFT factor, every TPOT figure likewise; the others as they are."""
    out = dict(metrics)
    for metric in NOISE_METRICS:
        factor = factors.get(metric)
        if factor is None:
            continue
        for key, value in metrics.items():
            if value is not None and (key.endswith(f"_{metric}_ms") or key == f"{metric}_s"):
                out[key] = value * factor
    return out


def not_sampled(hw: HardwareProfile) -> list[str]:
    """What `--intervals` leaves at its fitted value for `hw`."""
    host = hw.host
    out = ["operator times (the profile states no operator uncertainty)"] if hw.uncertainty is None else [
        # The operator tables time kernels alone; the prefill steps as vLLM serves them run longer, by a share that
        # differs by model and GPU and that no table holds (measured end to end, not sampled: BENCHMARKS.md,
        # "Prediction intervals", its missing error source).
        "the served prefill steps' time beyond their kernels' (end to end, measured TTFT is mostly above these "
        "intervals: BENCHMARKS.md, Prediction intervals)"]
    if host is None or host.time_uncertainty is None:
        out.append("the host: its speed, executor step and launch times")
    if host is not None:
        left = [] if host.cost_uncertainty is None else [n for n, _ in host.cost_uncertainty.ratios]
        out.append("the API server's " + ("terms" if not left else "terms other than " + ", ".join(left)))
    out.append(NOT_SAMPLED[-1])
    if host is None or host.run_to_run_noise is None:
        out.append("run-to-run noise (the profile states none)")
    return out


def _float(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def interval_record(central: dict[str, float | None], samples: list[dict[str, float | None]], spec: IntervalSpec,
                    hw: HardwareProfile) -> dict[str, Any]:
    """What --json and --save-result hold: the method and, per figure, the central value and the interval."""
    metrics: dict[str, Any] = {}
    for key, value in central.items():
        values = [s.get(key) for s in samples]
        if value is None or any(v is None for v in values):
            metrics[key] = {"central": value, "low": None, "high": None}
            continue
        low, high = spec.bounds([float(v) for v in values if v is not None])
        metrics[key] = {"central": value, "low": low, "high": high}
    tail = (100.0 - spec.level_percent) / 2
    host = hw.host
    drawn = []
    if hw.uncertainty is not None:
        drawn.append(f"one factor per operator kind on every operator's time, drawn from {hw.uncertainty.source}")
    if host is not None and host.cost_uncertainty is not None:
        drawn.append(f"one factor per API-server cost term ({', '.join(n for n, _ in host.cost_uncertainty.ratios)}) "
                     f"from the host's api_server_cost_uncertainty ({host.cost_uncertainty.source})")
    if host is not None and host.time_uncertainty is not None:
        drawn.append(f"one factor per host term ({', '.join(n for n, _ in host.time_uncertainty.ratios)}) on the "
                     f"host's speed and the executor's host times from the host's host_time_uncertainty "
                     f"({host.time_uncertainty.source})")
    if host is not None and host.run_to_run_noise is not None:
        drawn.append(f"a run-to-run factor on the TTFT and TPOT figures from the host's served_run_to_run_noise "
                     f"({host.run_to_run_noise.source})")
    profiles = spec.profiles(hw)
    factors: list[dict[str, Any]] = [p.op_time_factors.as_dict() if hw.uncertainty is not None else {}
                                     for p in profiles]
    for entry, p, noise in zip(factors, profiles, spec.noise(hw)):
        if p.host is not None and p.host.cost_factors:
            entry["api_server"] = dict(p.host.cost_factors)
        if p.host is not None and p.host.time_factors:
            entry["host_time"] = dict(p.host.time_factors)
        if noise:
            entry["run_to_run"] = noise
    return {
        "level_percent": spec.level_percent, "num_samples": spec.num_samples, "seed": spec.seed,
        "method": f"{spec.num_samples} simulations of the same requests, each with " + "; ".join(drawn)
                  + f" (Latin hypercube over each entry's quantiles, entries independent); central: the cost model "
                  f"as fitted; interval: the samples' {tail:g}th and {100 - tail:g}th percentiles (numpy linear)",
        "not_sampled": not_sampled(hw),
        "factors": factors,
        "metrics": metrics,
    }


_LABELS = {"request_throughput": "Request throughput (req/s)", "request_goodput": "Request goodput (req/s)",
           "output_throughput": "Output token throughput (tok/s)",
           "total_token_throughput": "Total token throughput (tok/s)",
           "slo_goodput_requests_per_s": "SLO goodput (req/s, roofline)"}
_SHORT = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}


def _label(key: str) -> str:
    if key in _LABELS:
        return _LABELS[key]
    stat, name, _ = key.split("_", 2)
    stat = {"mean": "Mean", "median": "Median"}.get(stat, stat.upper())
    return f"{stat} {_SHORT.get(name, name)} (ms)"


def format_intervals(record: dict[str, Any]) -> str:
    """The printed block: each figure's central value and interval, then how they were made."""
    level = f"{record['level_percent']:g} %"
    lines = ["{s:{c}^{n}}".format(s=f" {level} intervals ({record['num_samples']} sampled cost models) ", n=50, c="-")]
    for key, m in record["metrics"].items():
        if m["central"] is None:
            continue
        interval = "-" if m["low"] is None else f"[{m['low']:.2f}, {m['high']:.2f}]"
        lines.append(f"{_label(key) + ':':<40} {m['central']:<10.2f} {interval}")
    lines.append(f"  {record['method']}; not sampled: {'; '.join(record['not_sampled'])}")
    return "\n".join(lines)
