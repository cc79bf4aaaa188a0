"""How sure a host's API-server costs are, and how much a served run varies between repeats: two optional parts of a
profile's `host:` section (`roofline.cost.host_cpu`), sampled by `roofline simulate --intervals` beside the operator
kinds (`roofline.cost.uncertainty`).

    host:
      api_server_costs_s: {...}                      # the costs (seconds), where measured on this host
      api_server_cost_uncertainty:                   # per cost term: quantiles of resample / fit (ratios)
        method: ...                                  # free text: what the numbers are
        command: python benchmarks/ground_truth/api_cost_uncertainty.py
        levels: [0.025, ..., 0.975]                  # probability levels, increasing, in (0, 1)
        resample_over_fit: {request: [...], output_pass: [...], output_token: [...]}   # one ratio per level
      served_run_to_run_noise:                       # per metric: quantiles of one run / the mean of its repeats
        method: ...
        command: ...
        levels: [...]
        run_over_mean: {ttft: [...], tpot: [...]}
      host_time_uncertainty:                         # per host term: quantiles of (true value) / (stated value)
        method: ...
        command: python benchmarks/ground_truth/host_time_uncertainty.py --yaml
        levels: [...]
        ratio_to_stated: {assumed_cpu_speed: [...], server_cpu_speed: [...], step_overhead: [...], ...}

`api_server_cost_uncertainty` multiplies the API server's cost terms (`roofline.sim.api_server.ApiServerCosts`, the
names of `host_cpu.COST_NAMES`) of a sampled cost model, one factor per term, the same for every request and step of
the run; `served_run_to_run_noise` multiplies a sampled run's TTFT and TPOT figures (the client's; a repeat of the
same load differs by it from another); `host_time_uncertainty` (names `HOST_TIME_TERMS`) the host's single-thread
speed and the executor's host terms (`roofline.sim.intervals.with_host_time`: `assumed_cpu_speed` divides the terms
measured on the reference host and scaled by the speed, `server_cpu_speed` every host term, the others multiply the
executor's term of their name). All three are drawn like the operator kinds (`OpUncertainty.sample`: Latin
hypercube over each entry's quantiles, linear in ln ratio between levels, entries independent), each from its own
seeded generator, so that adding them leaves the operator kinds' draws as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from roofline.cost.uncertainty import _levels, check_ratios
from roofline.errors import UserError, check_fields

NOISE_METRICS = ("ttft", "tpot")
# The host terms `host_time_uncertainty` may state (draw order): the speed of the CPU the family assumes against the
# speed stated for it, the spread of GPU servers' CPUs against the assumed one, and the executor's host terms
# (`roofline.cost.params.ExecutorParams`: step_overhead_us, step_overhead_per_seq_us, kernel_launch_us, step_gap_us).
HOST_TIME_TERMS = ("assumed_cpu_speed", "server_cpu_speed", "step_overhead", "step_overhead_per_seq", "kernel_launch",
                   "step_gap")
# Per host field, the key of its table of ratios.
_TABLE_KEY = {"api_server_cost_uncertainty": "resample_over_fit", "served_run_to_run_noise": "run_over_mean",
              "host_time_uncertainty": "ratio_to_stated"}
# Per section, the generator's stream after [41, seed] (the operator kinds draw from [41, seed] itself).
_STREAM = {"api_server_cost_uncertainty": 1, "served_run_to_run_noise": 2, "host_time_uncertainty": 3}


@dataclass(frozen=True)
class RatioQuantiles:
    """Per entry (a cost term, a metric), quantiles of a ratio at `levels`; `names` fixes the draw order."""

    section: str  # the host field it was read from
    names: tuple[str, ...]  # every name the section may hold, in draw order
    levels: tuple[float, ...]
    ratios: tuple[tuple[str, tuple[float, ...]], ...]
    source: str  # the command that wrote it

    def sample(self, n: int, seed: int) -> list[tuple[tuple[str, float], ...]]:
        """`n` factor sets ((name, factor) pairs): per entry the ratios at the midpoints of n equal strata of (0, 1),
        shuffled per name (one generator per section, a permutation drawn for every name in `names`)."""
        rng = np.random.default_rng([41, seed, _STREAM[self.section]])
        midpoints = (np.arange(n) + 0.5) / n
        given = dict(self.ratios)
        columns: dict[str, np.ndarray] = {}
        for name in self.names:
            order = rng.permutation(n)
            if name in given:
                columns[name] = np.exp(np.interp(midpoints[order], self.levels, np.log(given[name])))
        return [tuple((k, float(f"{v[i]:.6g}")) for k, v in columns.items()) for i in range(n)]


def read_ratio_quantiles(section: Any, field: str, names: tuple[str, ...], where: str) -> RatioQuantiles:
    """A host section's `field` (api_server_cost_uncertainty, served_run_to_run_noise or host_time_uncertainty),
    validated (UserError naming the field)."""
    where = f"{where}.{field}"
    table_key = _TABLE_KEY[field]
    check_fields(section, ["method", "command", "levels", table_key], where, ["levels", table_key])
    levels = _levels(section, where)
    table = section[table_key]
    if not isinstance(table, dict) or not table:
        raise UserError(f"{where}.{table_key}: must be a mapping of {', '.join(names)} to ratios (one per level)")
    ratios = []
    for name in names:
        if name not in table:
            continue
        ratios.append((name, check_ratios(table[name], len(levels), f"{where}.{table_key}.{name}")))
    unknown = sorted(set(table) - set(names))
    if unknown:
        raise UserError(f"{where}.{table_key}.{unknown[0]}: not allowed; allowed: {', '.join(names)}")
    return RatioQuantiles(field, names, levels, tuple(ratios), str(section.get("command", "?")))
