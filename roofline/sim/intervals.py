"""Prediction intervals: one simulation run again on cost models whose operator times are drawn from the profile's
measured uncertainty (`roofline simulate --intervals`).

    spec = IntervalSpec.from_flags("80", "8", hw, seed=0)     # level 80 %, 8 samples (UserError on bad values)
    profiles = spec.profiles(hw)                               # hw with sampled `op_time_factors`
    samples = run_samples(lambda p: metrics_of(p), profiles, spec.num_workers)
    record = interval_record(central, samples, spec, hw)       # per metric: central, low, high

What is sampled: the profile's `uncertainty` (`roofline.cost.uncertainty`: per operator kind, measured / predicted on
held-out operator-table rows), one factor per kind and sample (Latin hypercube over the kind's quantiles, kinds
independent, `OpUncertainty.sample`), each sample a whole simulation of the same requests with every operator of a
kind slower or faster by its factor. The central value is the run with the cost model as fitted (the numbers the
plain run prints); the interval is the samples' (100 - level) / 2 and (100 + level) / 2 percentiles (numpy linear).
Not sampled (`roofline.cost.uncertainty.NOT_SAMPLED`): the host's and API server's terms,
elementwise kernels; nor run-to-run noise, which no GPU profile states.

The samples run on `num_workers` forked processes (they inherit the parent's imports, model, requests and caches, so
a sample costs one simulation), in sample order whatever finishes first: the same seed gives the same bytes.
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
        if hw.uncertainty is None:
            raise UserError(f"--intervals: hardware profile {hw.id} states no operator-time uncertainty (an "
                            f"uncertainty: section, its own or its family's: roofline calibrate --op-tables --family "
                            f"F --uncertainty --write); allowed: a profile of a family fitted on operator tables "
                            f"(roofline profiles)")
        if workers is None:
            workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return cls(percent, n, seed, max(1, min(workers, n)))

    def profiles(self, hw: HardwareProfile) -> list[HardwareProfile]:
        assert hw.uncertainty is not None
        return [replace(hw, op_time_factors=f) for f in hw.uncertainty.sample(self.num_samples, self.seed)]

    def bounds(self, values: Sequence[float]) -> tuple[float, float]:
        tail = (100.0 - self.level_percent) / 2
        low, high = np.percentile(np.asarray(values, dtype=np.float64), [tail, 100.0 - tail])
        return float(low), float(high)


# ---- running the samples ------------------------------------------------------------------------------------------

_TASK: list[Any] = []  # (run_one, profiles) for the forked workers, which inherit it


def _run_index(i: int) -> dict[str, float | None]:
    run_one, profiles = _TASK
    return run_one(profiles[i])


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the group; the parent ends the workers


def run_samples(run_one: Callable[[HardwareProfile], dict[str, float | None]], profiles: list[HardwareProfile],
                num_workers: int) -> list[dict[str, float | None]]:
    """`run_one(profile)` for every profile, in order: on `num_workers` forked processes (where the platform forks),
    else here."""
    if num_workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [run_one(p) for p in profiles]
    _TASK[:] = [run_one, profiles]
    pool = multiprocessing.get_context("fork").Pool(num_workers, initializer=_ignore_sigint)
    try:
        results = pool.map(_run_index, range(len(profiles)), chunksize=1)
        pool.close()
        return results
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()
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


def _float(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def interval_record(central: dict[str, float | None], samples: list[dict[str, float | None]], spec: IntervalSpec,
                    hw: HardwareProfile) -> dict[str, Any]:
    """What --json and --save-result hold: the method and, per figure, the central value and the interval."""
    assert hw.uncertainty is not None
    metrics: dict[str, Any] = {}
    for key, value in central.items():
        values = [s.get(key) for s in samples]
        if value is None or any(v is None for v in values):
            metrics[key] = {"central": value, "low": None, "high": None}
            continue
        low, high = spec.bounds([float(v) for v in values if v is not None])
        metrics[key] = {"central": value, "low": low, "high": high}
    tail = (100.0 - spec.level_percent) / 2
    return {
        "level_percent": spec.level_percent, "num_samples": spec.num_samples, "seed": spec.seed,
        "method": f"{spec.num_samples} simulations of the same requests, each with one factor per operator kind on "
                  f"every operator's time, drawn from {hw.uncertainty.source} (Latin hypercube over each kind's "
                  f"quantiles, kinds independent); central: the cost model as fitted; interval: the samples' "
                  f"{tail:g}th and {100 - tail:g}th percentiles (numpy linear)",
        "not_sampled": list(NOT_SAMPLED) + ["run-to-run noise (no GPU profile states it)"],
        "factors": [f.as_dict() for f in hw.uncertainty.sample(spec.num_samples, spec.seed)],
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
