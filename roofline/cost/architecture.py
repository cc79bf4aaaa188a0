"""Per-SM facts of a chip that its kernel descriptions read (`roofline.cost.kernels`): a hardware profile's optional
`architecture` section, each field with its unit in its name and a source like every other number of the profile.

    architecture:
      shared_memory_per_sm_kib: 100     # shared memory per SM (CUTLASS 2.x CTAs resident per SM on Ada)
      shared_memory_per_block_kib: 227  # the opt-in maximum of one thread block (DeepGEMM's SM90 layout heuristic)
      sm_subpartitions: 4               # SM sub-partitions, one warp scheduler and tensor core each
      act_quant_blocks_per_sm: 2        # 1024-thread blocks of the per-tensor fp8 input quantization resident per SM

A field a profile leaves out is None; a kernel that needs it says so (`Architecture.require`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roofline.errors import UserError, check_fields

# `architecture` key -> (Architecture field, bytes or units per YAML unit).
ARCHITECTURE_KEYS: dict[str, tuple[str, int]] = {
    "shared_memory_per_sm_kib": ("shared_memory_per_sm_bytes", 1024),
    "shared_memory_per_block_kib": ("shared_memory_per_block_bytes", 1024),
    "sm_subpartitions": ("sm_subpartitions", 1),
    "act_quant_blocks_per_sm": ("act_quant_blocks_per_sm", 1),
}


@dataclass(frozen=True)
class Architecture:
    """A chip's `architecture` section in SI units; None: not given."""

    shared_memory_per_sm_bytes: int | None = None
    shared_memory_per_block_bytes: int | None = None
    sm_subpartitions: int | None = None
    act_quant_blocks_per_sm: int | None = None

    def require(self, name: str, hw_id: str, needed_by: str) -> int:
        """The field `name`, or a UserError naming the profile, the YAML key and what needs it."""
        value: int | None = getattr(self, name)
        if value is None:
            key = next(k for k, (f, _) in ARCHITECTURE_KEYS.items() if f == name)
            raise UserError(f"hardware profile {hw_id}: architecture.{key} is needed by {needed_by}; add it, with a "
                            f"source, to the profile")
        return value


def parse_architecture(section: Any, where: str) -> Architecture:
    """An `architecture` mapping (YAML units) -> `Architecture`; every value a positive integer."""
    check_fields(section, list(ARCHITECTURE_KEYS), where, [])
    values = {}
    for key, (name, unit) in ARCHITECTURE_KEYS.items():
        if key in section:
            value = section[key]
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise UserError(f"{where}: {key}: must be a positive integer, got {value!r}")
            values[name] = value * unit
    return Architecture(**values)
