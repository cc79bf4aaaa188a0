"""Reading, checking and writing the YAML of hardware profiles and family files: the field checks every section
shares (known keys, non-empty text, positive finite numbers below a typo's bound, counts), the rule that every number
names its source, and the writer that gives the same bytes for the same mapping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from roofline.errors import UserError, check_fields
from roofline.yaml_file import read_yaml

# Sections whose numbers are not datasheet facts and so need no source.
_UNSOURCED = ("sources", "measured", "calibration", "family", "operator_tables", "uncertainty")


def read_profile_dict(path: str | Path) -> dict[str, Any]:
    """The raw YAML mapping of a profile file (parsed, not validated); malformed YAML names file and line."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"--hardware: '{path}' is a directory; expected a profile .yaml file")
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: must hold a YAML mapping of profile fields, got {type(data).__name__}")
    return data


def dump_profile(profile: dict[str, Any], path: str | Path) -> None:
    """Write a profile mapping as YAML: keys in the given order, so the same mapping gives the same bytes."""
    Path(path).write_text(profile_yaml(profile))


class _ProfileDumper(yaml.SafeDumper):
    """Block style, except lists of scalars on one line (`mnk: [128, 4096, 1024]`); no anchors/aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = all(isinstance(item, (int, float, str, bool)) or item is None for item in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_ProfileDumper.add_representer(list, _represent_list)


def profile_yaml(profile: dict[str, Any]) -> str:
    """A profile mapping as YAML text, keys in the given order."""
    return yaml.dump(profile, Dumper=_ProfileDumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=120)


def check_keys(section: Any, keys: dict[str, bool] | tuple[str, ...], where: str) -> None:
    """`check_fields` with the fields given as {name: required} (a tuple: all required)."""
    required = [k for k in keys if not isinstance(keys, dict) or keys[k]]
    check_fields(section, list(keys), where, required)


def text_field(data: dict[str, Any], key: str, where: str) -> str:
    value = data[key]
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: {key}: must be a non-empty string, got {value!r}")
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Upper bounds of a profile's numbers beyond which the value is a typo, not a device (each ~100x the largest shipped
# figure: B300's 15 PFLOP/s dense fp4, 288 GB and 8 TB/s of HBM3e, NVLink 5's 900 GB/s per direction); any other
# positive field: a finite number up to 1e9.
_UPPER_BOUNDS = {"memory_capacity_gb": 1e5, "memory_bandwidth_gb_per_s": 1e6, "bandwidth_gb_per_s_per_direction": 1e6,
                 "pcie_bandwidth_gb_per_s_per_direction": 1e5, "l2_cache_mib": 1e5, "boost_clock_mhz": 1e5}


_DEFAULT_UPPER_BOUND = 1e9


def positive(data: dict[str, Any], key: str, where: str, upper: float | None = None) -> float:
    value = data[key]
    upper = upper if upper is not None else _UPPER_BOUNDS.get(key, _DEFAULT_UPPER_BOUND)
    if not is_number(value) or not 0 < value <= upper:  # (also refuses nan and inf)
        raise UserError(f"{where}: {key}: must be a positive number, got {value!r} (allowed: finite, up to "
                        f"{upper:g})")
    return float(value)


def optional_positive(data: dict[str, Any], key: str, where: str) -> float | None:
    return None if data[key] is None else positive(data, key, where)


def count_field(data: dict[str, Any], key: str, where: str) -> int:
    value = data[key]
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UserError(f"{where}: {key}: must be a positive integer, got {value!r}")
    return value


def numeric_paths(data: dict[str, Any], prefix: str = "", unsourced: tuple[str, ...] = _UNSOURCED) -> list[str]:
    """Dotted paths of every number (or list of numbers) in the sourced part of a profile."""
    paths = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if not prefix and key in unsourced:
            continue
        if isinstance(value, dict):
            paths += numeric_paths(value, f"{path}.", unsourced)
        elif is_number(value) or (isinstance(value, list) and value and all(is_number(v) for v in value)):
            paths.append(path)
    return paths


def check_sources(data: dict[str, Any], where: str, unsourced: tuple[str, ...] = _UNSOURCED) -> None:
    """Every number needs a source, keyed by its field (`tdp_w`), sub-field (`peak_tflops.fp8`) or a parent
    (`interconnect`); every source key must name a field that exists."""
    sources = data["sources"]
    if not isinstance(sources, dict):
        raise UserError(f"{where}: sources: must be a mapping of field -> source text or URL")
    for key, text in sources.items():
        if not isinstance(text, str) or not text.strip():
            raise UserError(f"{where}: sources.{key}: must be a non-empty source text or URL")
        if not path_exists(data, str(key)) or str(key).split(".")[0] in unsourced:
            raise UserError(f"{where}: sources.{key}: names no sourced field of this profile; "
                            f"allowed: a field with a number, e.g. {', '.join(numeric_paths(data, '', unsourced)[:4])}")
    for path in numeric_paths(data, "", unsourced):
        parts = path.split(".")
        if not any(".".join(parts[:i]) in sources for i in range(1, len(parts) + 1)):
            raise UserError(f"{where}: sources: no source for '{path}'; add 'sources.{path}' (or its parent)")


def path_exists(data: dict[str, Any], dotted: str) -> bool:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True

