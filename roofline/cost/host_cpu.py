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
             "served_run_to_run_noise", "host_time_uncertainty")
REQUIRED_HOST_KEYS = ("cpu_model", "single_thread_speed_relative")
# The API server's costs a host may state (roofline.sim.api_server.ApiServerCosts, each without its "_s").
COST_NAMES = ("request", "chat_request", "prompt_token", "output_pass", "output_token", "chat_output_token",
              "latency", "output_latency", "engine_step")


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
                       host_time, "host_time_uncertainty", HOST_TIME_TERMS, where))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cpu_model": self.cpu_model,
                               "single_thread_speed_relative": self.single_thread_speed_relative}
        if self.api_server_costs_s:
            out["api_server_costs_s"] = dict(self.api_server_costs_s)
        return out
