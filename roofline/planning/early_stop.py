"""Probes that stop as soon as they certainly miss an SLO: most of a plan's simulations are of overloaded replicas.

A probe passes when the SLO percentile of every metric over its measured requests (`roofline.planning.search`) is
within its limit. While the simulation runs, every request has a least latency it can still end with (`floors`):
its TTFT is known once its first token is sampled, and until then it is at least the time it has waited; its TPOT
is at least the time since its first token over its decode tokens still to come, its end-to-end latency at least
the time since it was sent. A percentile does not fall when any value rises, so the percentile of these floors
never exceeds the whole run's percentile: once it is over the SLO, the probe fails, whatever the rest of the run
does. The simulator ends the run there (`roofline.sim.simulator.EarlyStop`: what a run knows at a time is what the
whole run knows by then), so a stopped probe gives the same pass / fail as the whole probe; its percentiles are the
floors (lower bounds) and its throughput is that of the requests finished by then (`Point.complete` False).

    stop = slo_early_stop(slo, specs, window)          # None where no SLO metric can be decided early
    result = run_simulation(deployment, workload, options, specs=specs, early_stop=stop)

Only TTFT, TPOT and end-to-end latency decide early; an ITL SLO is judged on complete runs only (its pooled gaps
have no floor short of the whole run), and a probe that passes always runs to its end (its KV usage, throughput and
percentiles are the report's).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from roofline.planning.search import Slo, slo_percentile
from roofline.sim.simulator import EarlyStop
from roofline.sim.workload import RequestSpec

# Checks per probe: one after every 1/CHECKS_PER_ARRIVAL_SPAN of the time its requests take to arrive (and on at the
# same pace while it drains). Each costs a pass over the unfinished requests and three percentiles of a few thousand
# values, well under a millisecond.
CHECKS_PER_ARRIVAL_SPAN = 50


def floors(now_s: float, sent_s: np.ndarray, first_token_s: np.ndarray, finish_s: np.ndarray,
           num_output_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per request, the least (TTFT, TPOT, end-to-end latency) it can have in the whole run, from what is known at
    `now_s` (NaN: not yet): the value itself once known. A request not sent yet: 0. TPOT divides by the request's
    output tokens less one (`num_output_tokens`: its spec's, the most it can have); 0 for a one-token answer, as
    `roofline.planning.search.summarize` counts it."""
    sent = ~np.isnan(sent_s)
    waited = np.where(sent, np.maximum(now_s - np.where(sent, sent_s, now_s), 0.0), 0.0)
    has_first = ~np.isnan(first_token_s)
    finished = ~np.isnan(finish_s)
    ttft = np.where(has_first, first_token_s - sent_s, waited)
    decodes = num_output_tokens - 1
    last = np.where(finished, finish_s, now_s)
    with np.errstate(invalid="ignore"):
        tpot = np.where(has_first & (decodes > 0), np.maximum(last - first_token_s, 0.0) / np.maximum(decodes, 1), 0.0)
    e2e = np.where(finished, finish_s - sent_s, waited)
    return ttft, tpot, e2e


class SloMissed:
    """`EarlyStop.decided` for a probe: True once the SLO percentile of the floors of some metric over the measured
    requests (`window`) is over its limit."""

    def __init__(self, slo: Slo, num_output_tokens: np.ndarray, window: slice) -> None:
        self.slo, self.num_output_tokens, self.window = slo, num_output_tokens, window
        self.limits = [(i, limit) for i, limit in enumerate((slo.ttft_s, slo.tpot_s, slo.e2el_s)) if limit is not None]

    def missed(self, now_s: float, sent_s: np.ndarray, first_token_s: np.ndarray, finish_s: np.ndarray) -> bool:
        values = floors(now_s, sent_s, first_token_s, finish_s, self.num_output_tokens)
        return any(slo_percentile(values[i][self.window], self.slo.percentile) > limit for i, limit in self.limits)


def slo_early_stop(slo: Slo, specs: Sequence[RequestSpec], window: slice) -> EarlyStop:
    """Checks from the first measured request's arrival on, CHECKS_PER_ARRIVAL_SPAN times over the span of arrivals
    (every TTFT SLO when they all arrive at once)."""
    arrivals = np.array([s.arrival_s for s in specs], dtype=np.float64)
    span = float(arrivals[-1] - arrivals[0]) if len(arrivals) else 0.0
    every_s = span / CHECKS_PER_ARRIVAL_SPAN if span > 0 else slo.ttft_s
    first_s = float(arrivals[window][0]) if len(arrivals[window]) else 0.0
    outputs = np.array([s.num_output_tokens for s in specs], dtype=np.int64)
    return EarlyStop(first_s, every_s, SloMissed(slo, outputs, window).missed)
