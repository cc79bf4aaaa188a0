"""The collective (all-reduce) parameters of the vLLM release a deployment runs.

A family file's `per_chip.<chip>.all_reduce_by_vllm_version: {"0.14.0": {collective_bus_efficiency: ...}, ...}`
holds the chip's collective parameters fitted on each version's all-reduce table (aiconfigurator-core's
`systems/data/<system>/comm/vllm/<version>/custom_allreduce_perf.parquet`), written only by
`roofline calibrate --op-tables --family F --write` (`roofline.calibration.family_fit`). `for_vllm_version(hw, v)`
gives the profile whose efficiency carries the set of the newest table version <= v, or the oldest table's for a
release older than every table: the tables are the only measurement of each release's all-reduce, and the nearest
older one runs the same code (vLLM's choice of all-reduce on SM90, `cuda_communicator.py` `CudaCommunicator.all_reduce`
with `all_reduce_utils.py` `CUSTOM_ALL_REDUCE_MAX_SIZES` / `SYMM_MEM_ALL_REDUCE_MAX_SIZES`, is the same from 0.12.0 to
0.19.0 at the default environment); what differs is beneath vLLM (the torch / NCCL the release pins, the collection
machine), which the tables measure and the model cannot derive. Without a version the profile's own efficiency
(fitted on the newest table) applies.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from roofline.cost.kv_capacity import parse_vllm_version
from roofline.cost.params import EFFICIENCY_PARAMS, EfficiencyParams
from roofline.errors import UserError

if TYPE_CHECKING:
    from roofline.cost.hardware import HardwareProfile

SECTION = "all_reduce_by_vllm_version"


Versions = tuple[tuple[str, tuple[tuple[str, float], ...]], ...]


def parse_versions(section: Any, efficiency_section: dict[str, Any], where: str) -> Versions:
    """`per_chip.<chip>.all_reduce_by_vllm_version` -> ((version, ((EfficiencyParams field, SI value), ...)), ...)
    oldest first; a UserError names a bad version or field."""
    if section is None:
        return ()
    if not isinstance(section, dict) or not section:
        raise UserError(f"{where}: {SECTION}: must be a mapping of vLLM version -> {{collective parameters}}")
    out = []
    for version, values in section.items():
        parse_vllm_version(str(version))
        if not isinstance(values, dict):
            raise UserError(f"{where}: {SECTION}.{version}: must be a mapping of efficiency fields")
        parsed = EfficiencyParams.from_dict({**efficiency_section, **values}, f"{where}: {SECTION}.{version}")
        fields = sorted(n for n, spec in EFFICIENCY_PARAMS.items() if spec.key in values)
        out.append((str(version), tuple((n, float(getattr(parsed, n))) for n in fields)))
    return tuple(sorted(out, key=lambda item: _release(item[0])))


def _release(version: str) -> tuple[int, ...]:
    """(major, minor, patch) of a table's version folder name ("0.14.0")."""
    major, minor = parse_vllm_version(version)
    parts = version.strip().lstrip("v").split(".")
    patch = int("".join(ch for ch in parts[2] if ch.isdigit()) or 0) if len(parts) > 2 else 0
    return major, minor, patch


def for_vllm_version(hw: HardwareProfile, version: str | None) -> HardwareProfile:
    """`hw` with the collective parameters of vLLM `version` (the newest table version <= it, else the oldest
    table's; see the module docstring); `hw` itself when it has no per-version sets or `version` is None. A
    malformed `version` is a UserError."""
    if version is None:
        return hw
    wanted = _release(version)
    sets = hw.all_reduce_by_vllm_version
    if not sets:
        return hw
    chosen = sets[0][1]
    for table_version, values in sets:
        if _release(table_version) <= wanted:
            chosen = values
    return replace(hw, efficiency=replace(hw.efficiency, **dict(chosen)))
