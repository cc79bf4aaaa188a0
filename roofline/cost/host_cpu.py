"""The host CPU of a deployment: the `host:` section of a hardware profile (or of its family).

vLLM's API server and engine-core loop are Python on the host CPU, so their costs scale with the host's
single-thread speed, not with the accelerator. The costs themselves were measured once, on real vLLM 0.32, on
this project's reference host (`roofline.sim.api_server.REFERENCE_HOST`); a profile states its host CPU and how
fast one thread of it runs relative to that reference, with a source:

    host:
      cpu_model: Intel Xeon Platinum 8480C (DGX H100)
      single_thread_speed_relative: 2.0      # x the reference host's single-thread speed
    sources:
      host.single_thread_speed_relative: '...'

    HostCpu.from_dict(data["host"], where="h100-sxm.yaml: host")

A host whose API-server costs were measured on it (real `vllm serve` on that host:
benchmarks/ground_truth/vllm_serve_bench.py and vllm_serve_sim.py) states them, in seconds on that host, under
`api_server_costs_s` (keys: `roofline.sim.api_server.COST_NAMES`); they replace the reference costs divided by the
speed, the ones it does not state keep that:

    host:
      cpu_model: AMD EPYC (2-vCPU KVM, AVX2)
      single_thread_speed_relative: 1.0
      api_server_costs_s: {request: 0.006, output_pass: 0.002}

Where a request's input work runs (`roofline.sim.api_server`: the event loop, the renderer's one worker thread, the
client) is partly the host's: how the loop's share of a request's work splits at the render's await, how far apart
the client's connections arrive, on how many cores the API-server processes run and whether the client runs on them:

    host:
      api_server_before_render_fraction: 0.49  # of the loop's input work, before the render (default 0.49)
      connection_accept_gap_us: 234.5          # without the accept per turn: at most one per 234.5 us (default 0)
      api_server_num_cores: 1                  # every API-server process on one core (default: a core per thread)
      client_shares_api_server_cores: true     # the client on those cores too (default false)
      api_server_refill_after_other_us: 100    # per turn of an API-server process after another's (default 0)

The defaults and their sources: `api_server_before_render_fraction` 0.49, the loop's intake time before the render
in 4 traced 1,000-prompt bursts of real `vllm serve` on the reference host (median of 0.456-0.498 by task kind;
docs/benchmark-history/2026-11-30c-serve5.md); `connection_accept_gap_us` 0 (not measured on a GPU host; 234.5 us on
the 2026-11-30 CPU host, `vllm bench serve` on the API server's core: 2026-11-30c-serve4.md; used only where
`SimulationOptions.api_server_accept_per_turn` is off: the accept per turn and the client's starts give the
spacing); `api_server_num_cores` unset, a core per thread (an unpinned API server on a many-core GPU server);
`client_shares_api_server_cores` false (the client on its own cores or machine); `api_server_refill_after_other_us` 0
(each API-server process on a core of its own: no process resumes after another's on its core; measured only where
they share one, `roofline.sim.api_server`'s "turns": 110 us on the 2026-11-30 CPU host, 2026-12-01b-serve21.md).

A host may also state how sure those costs are, how much a served run varies between repeats and how sure its speed
and the executor's host terms are (`api_server_cost_uncertainty`, `served_run_to_run_noise`, `host_time_uncertainty`:
`roofline.cost.host_uncertainty`), which `roofline simulate --intervals` samples; `cost_factors` are a sampled cost
model's factors on the costs, `time_factors` its host-time factors (the speed and executor they were applied to:
`roofline.sim.intervals.with_host_time`).

A profile without the section describes no API server: the simulator then charges the executor's older
per-request terms (`executor.tokenize_us_per_prompt_token`, `executor.frontend_us_per_request`), if any.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roofline.cost.host_uncertainty import HOST_TIME_TERMS, NOISE_METRICS, RatioQuantiles, read_ratio_quantiles
from roofline.errors import UserError, check_fields

HOST_KEYS = ("cpu_model", "single_thread_speed_relative", "api_server_costs_s", "api_server_cost_uncertainty",
             "served_run_to_run_noise", "host_time_uncertainty", "api_server_before_render_fraction",
             "connection_accept_gap_us", "api_server_num_cores", "client_shares_api_server_cores",
             "api_server_refill_after_other_us")
REQUIRED_HOST_KEYS = ("cpu_model", "single_thread_speed_relative")
# The API server's costs a host may state (roofline.sim.api_server.ApiServerCosts, each without its "_s").
COST_NAMES = ("request", "chat_request", "prompt_token", "output_pass", "output_token", "chat_output_token",
              "chat_first_output", "latency", "output_latency", "engine_step", "engine_admit_step", "engine_new_request",
              "engine_prompt_token", "prefix_cache_token", "block_hash_token", "client_request", "client_output_token",
              "render_request", "read_wait", "render_start_wait", "render_resume_wait", "busy_engine_hop")
# The loop's share of a request's input work before the render's await, where a host does not state its own: measured
# on the reference host (module docstring).
BEFORE_RENDER_FRACTION = 0.49


@dataclass(frozen=True)
class HostCpu:
    """The host CPU: its model (text), its single-thread speed relative to the reference host (> 0), and the
    API-server costs measured on it, if any ((name, seconds) pairs, names from COST_NAMES); how sure they are and
    how much a served run varies, if stated; a sampled cost model's factors on the costs ((name, factor) pairs)."""

    cpu_model: str
    single_thread_speed_relative: float
    api_server_costs_s: tuple[tuple[str, float], ...] = ()
    cost_uncertainty: RatioQuantiles | None = None
    run_to_run_noise: RatioQuantiles | None = None
    time_uncertainty: RatioQuantiles | None = None
    cost_factors: tuple[tuple[str, float], ...] = ()
    time_factors: tuple[tuple[str, float], ...] = ()
    # Where the API server's threads run (module docstring; defaults and their sources there).
    api_server_before_render_fraction: float = BEFORE_RENDER_FRACTION
    connection_accept_gap_s: float = 0.0
    api_server_num_cores: int | None = None
    client_shares_api_server_cores: bool = False
    api_server_refill_after_other_s: float = 0.0

    @classmethod
    def from_dict(cls, section: Any, where: str) -> "HostCpu":
        check_fields(section, HOST_KEYS, where, required=REQUIRED_HOST_KEYS)
        model = section["cpu_model"]
        if not isinstance(model, str) or not model.strip():
            raise UserError(f"{where}.cpu_model: must be a non-empty text naming the CPU, got {model!r}")
        speed = section["single_thread_speed_relative"]
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not 0.05 <= speed <= 20:
            raise UserError(f"{where}.single_thread_speed_relative: must be a number in [0.05, 20] (1 = the "
                            f"reference host), got {speed!r}")
        costs = section.get("api_server_costs_s") or {}
        if not isinstance(costs, dict):
            raise UserError(f"{where}.api_server_costs_s: must be a mapping of {', '.join(COST_NAMES)} to seconds, "
                            f"got {costs!r}")
        for name, value in costs.items():
            if name not in COST_NAMES:
                raise UserError(f"{where}.api_server_costs_s.{name}: not an API-server cost; allowed: "
                                f"{', '.join(COST_NAMES)}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise UserError(f"{where}.api_server_costs_s.{name}: must be seconds in [0, 1], got {value!r}")
        before = section.get("api_server_before_render_fraction", BEFORE_RENDER_FRACTION)
        if isinstance(before, bool) or not isinstance(before, (int, float)) or not 0 <= before <= 1:
            raise UserError(f"{where}.api_server_before_render_fraction: must be a number in [0, 1] (the loop's "
                            f"share of a request's input work before the render), got {before!r}")
        gap = section.get("connection_accept_gap_us", 0.0)
        if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not 0 <= gap <= 1e6:
            raise UserError(f"{where}.connection_accept_gap_us: must be microseconds in [0, 1000000], got {gap!r}")
        cores = section.get("api_server_num_cores")
        if cores is not None and (isinstance(cores, bool) or not isinstance(cores, int) or cores < 1):
            raise UserError(f"{where}.api_server_num_cores: must be a positive integer (the cores every API-server "
                            f"process runs on; leave it out for a core per thread), got {cores!r}")
        shares = section.get("client_shares_api_server_cores", False)
        if not isinstance(shares, bool):
            raise UserError(f"{where}.client_shares_api_server_cores: must be true or false, got {shares!r}")
        if shares and cores is None:
            raise UserError(f"{where}.client_shares_api_server_cores: true needs api_server_num_cores (the cores it "
                            f"shares)")
        refill = section.get("api_server_refill_after_other_us", 0.0)
        if isinstance(refill, bool) or not isinstance(refill, (int, float)) or not 0 <= refill <= 1e5:
            raise UserError(f"{where}.api_server_refill_after_other_us: must be microseconds in [0, 100000], got "
                            f"{refill!r}")
        if refill and cores is None:
            raise UserError(f"{where}.api_server_refill_after_other_us: needs api_server_num_cores (the cores the "
                            f"processes take turns on; with a core each none resumes after another)")
        cost_unc = section.get("api_server_cost_uncertainty")
        noise = section.get("served_run_to_run_noise")
        host_time = section.get("host_time_uncertainty")
        return cls(cpu_model=model.strip(), single_thread_speed_relative=float(speed),
                   api_server_costs_s=tuple((name, float(costs[name])) for name in COST_NAMES if name in costs),
                   cost_uncertainty=None if cost_unc is None else read_ratio_quantiles(
                       cost_unc, "api_server_cost_uncertainty", COST_NAMES, where),
                   run_to_run_noise=None if noise is None else read_ratio_quantiles(
                       noise, "served_run_to_run_noise", NOISE_METRICS, where),
                   time_uncertainty=None if host_time is None else read_ratio_quantiles(
                       host_time, "host_time_uncertainty", HOST_TIME_TERMS, where),
                   api_server_before_render_fraction=float(before), connection_accept_gap_s=float(gap) * 1e-6,
                   api_server_num_cores=cores, client_shares_api_server_cores=shares,
                   api_server_refill_after_other_s=float(refill) * 1e-6)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cpu_model": self.cpu_model,
                               "single_thread_speed_relative": self.single_thread_speed_relative}
        if self.api_server_costs_s:
            out["api_server_costs_s"] = dict(self.api_server_costs_s)
        if self.api_server_before_render_fraction != BEFORE_RENDER_FRACTION:
            out["api_server_before_render_fraction"] = self.api_server_before_render_fraction
        if self.connection_accept_gap_s:
            out["connection_accept_gap_us"] = round(self.connection_accept_gap_s * 1e6, 6)
        if self.api_server_num_cores is not None:
            out["api_server_num_cores"] = self.api_server_num_cores
        if self.client_shares_api_server_cores:
            out["client_shares_api_server_cores"] = True
        if self.api_server_refill_after_other_s:
            out["api_server_refill_after_other_us"] = round(self.api_server_refill_after_other_s * 1e6, 6)
        return out
