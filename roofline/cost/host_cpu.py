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

A profile without the section describes no API server: the simulator then charges the executor's older
per-request terms (`executor.tokenize_us_per_prompt_token`, `executor.frontend_us_per_request`), if any.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roofline.errors import UserError, check_fields

HOST_KEYS = ("cpu_model", "single_thread_speed_relative")


@dataclass(frozen=True)
class HostCpu:
    """The host CPU: its model (text) and its single-thread speed relative to the reference host (> 0)."""

    cpu_model: str
    single_thread_speed_relative: float

    @classmethod
    def from_dict(cls, section: Any, where: str) -> "HostCpu":
        check_fields(section, HOST_KEYS, where, required=HOST_KEYS)
        model = section["cpu_model"]
        if not isinstance(model, str) or not model.strip():
            raise UserError(f"{where}.cpu_model: must be a non-empty text naming the CPU, got {model!r}")
        speed = section["single_thread_speed_relative"]
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not 0.05 <= speed <= 20:
            raise UserError(f"{where}.single_thread_speed_relative: must be a number in [0.05, 20] (1 = the "
                            f"reference host), got {speed!r}")
        return cls(cpu_model=model.strip(), single_thread_speed_relative=float(speed))

    def to_dict(self) -> dict[str, Any]:
        return {"cpu_model": self.cpu_model, "single_thread_speed_relative": self.single_thread_speed_relative}
