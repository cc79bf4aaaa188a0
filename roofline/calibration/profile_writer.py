"""The one writer of fitted values into a chip or family profile YAML: an in-place edit that keeps the rest.

    write_profile_values(path, {"moe_fp4_gemm_factor": 0.447, "moe_fp4_fixed_us": 15.9},
                         {"efficiency.moe_fp4_gemm_factor": "fitted by ...", ...},
                         top={"power_limit": {"after_ms": 4.0, "clock_factor": 0.523}})

Every per-chip fit of `roofline calibrate --op-tables` (the weight-format GEMM and MoE fits, MLA, all-to-all, a
chip's clock factor) writes through it. What it does, line by line (a profile's comments, order and every value it is
not given stay as they are):

- `efficiency:` values (YAML keys, YAML units: the fit rounds them as it records them): a key already there keeps its
  line when the value reads back equal, else only its value text changes; a new key is appended at the end of the
  section (the section is created before `sources:` if the file has none).
- top-level fields (`top`): a number, or a mapping of numbers one level deep (`power_limit:`), edited the same way;
  a new one is inserted before `efficiency:`.
- `sources:` entries: an entry whose text reads back equal keeps its lines (a multi-line entry of a family file
  included); a changed one becomes one double-quoted line in place; a new one is appended at the end of `sources:`.

Numbers are written as Python's shortest round-trip text, with a decimal point before an exponent (YAML 1.1 reads
`1e-06` as a string). The same inputs give the same bytes; a second write of the same values changes nothing. The
result is read back and checked: every written value and source must parse to what was given.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

Number = float | int


def yaml_number(value: float) -> str:
    """`value` as profile YAML writes it: the shortest text that reads back to the same float."""
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {value!r}")
    text = repr(float(value))
    mantissa, e, exponent = text.partition("e")
    if e and "." not in mantissa:  # YAML 1.1 reads 1e-06 as a string, 1.0e-06 as a number
        text = f"{mantissa}.0e{exponent}"
    return text


def _top_level(lines: list[str]) -> list[int]:
    """Indices of the top-level keys (not indented, not comments, not blank)."""
    return [i for i, ln in enumerate(lines) if ln and not ln.startswith((" ", "#", "-"))]


def _section(lines: list[str], name: str) -> tuple[int, int] | None:
    """(index of `name:`, index one past its last indented line) of a top-level mapping, or None."""
    top = _top_level(lines)
    start = next((i for i in top if lines[i].split(":", 1)[0] == name), None)
    if start is None:
        return None
    end = next((i for i in top if i > start), len(lines))
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
        end -= 1  # a comment block or blank line before the next key belongs to that key
    return start, end


def _entries(lines: list[str], start: int, end: int) -> dict[str, tuple[int, int]]:
    """key -> (first line, one past its last line) of the entries indented two spaces in lines[start + 1:end]
    (an entry's continuation lines are indented deeper)."""
    out: dict[str, tuple[int, int]] = {}
    heads = [i for i in range(start + 1, end) if lines[i].startswith("  ") and not lines[i].startswith("   ")
             and not lines[i].lstrip().startswith("#")]
    for n, i in enumerate(heads):
        out[lines[i].strip().split(":", 1)[0]] = (i, heads[n + 1] if n + 1 < len(heads) else end)
    return out


def _parsed(text: str) -> Any:
    return yaml.safe_load(text)


def _same_number(old_text: str, new: Number) -> bool:
    old = _parsed(old_text)
    return isinstance(old, (int, float)) and not isinstance(old, bool) and float(old) == float(new)


def _set_entries(lines: list[str], section: str, values: Mapping[str, str], same: Any, indent: str = "  ",
                 create_before: str | None = None) -> None:
    """Set `indent + key: text` for each item of `values` in the top-level mapping `section` (in place where the
    key is, appended at its end where not; `same(old entry text, key)` True keeps an entry as it is)."""
    if not values:
        return
    bounds = _section(lines, section)
    if bounds is None:
        at = _insert_at(lines, create_before)
        lines[at:at] = [f"{section}:"]
        bounds = (at, at + 1)
    start, end = bounds
    entries = _entries(lines, start, end)
    appended: list[str] = []
    replacements: list[tuple[int, int, str]] = []
    for key, text in values.items():
        if key in entries:
            a, b = entries[key]
            old = "\n".join(lines[a:b]).strip().split(":", 1)[1]
            if not same(old, key):
                replacements.append((a, b, f"{indent}{key}: {text}"))
        else:
            appended.append(f"{indent}{key}: {text}")
    lines[end:end] = appended
    for a, b, line in sorted(replacements, reverse=True):
        lines[a:b] = [line]


def _insert_at(lines: list[str], before: str | None) -> int:
    """Where a new top-level mapping goes: before `before:` (and the comments right above it), else the end."""
    bounds = _section(lines, before) if before else None
    if bounds is None:
        return len(lines)
    at = bounds[0]
    while at > 0 and lines[at - 1].startswith("#"):
        at -= 1
    return at


def _set_top(lines: list[str], key: str, value: Number | Mapping[str, Number]) -> None:
    """A top-level number, or a mapping of numbers, set in place (inserted before `efficiency:` if absent)."""
    if isinstance(value, Mapping):
        numbers = dict(value)
        _set_entries(lines, key, {k: yaml_number(v) for k, v in numbers.items()},
                     lambda old, k: _same_number(old, numbers[k]), create_before="efficiency")
        return
    index = next((i for i in _top_level(lines) if lines[i].split(":", 1)[0] == key), None)
    if index is None:
        at = _insert_at(lines, "efficiency")
        lines[at:at] = [f"{key}: {yaml_number(value)}"]
    elif not _same_number(lines[index].split(":", 1)[1], value):
        lines[index] = f"{key}: {yaml_number(value)}"


def profile_text_with(text: str, efficiency: Mapping[str, Number], sources: Mapping[str, str],
                      top: Mapping[str, Number | Mapping[str, Number]] | None = None) -> str:
    """`text` (a profile YAML) with the values and sources set (module docstring)."""
    lines = text.splitlines()
    for key, value in (top or {}).items():
        _set_top(lines, key, value)
    _set_entries(lines, "efficiency", {k: yaml_number(v) for k, v in efficiency.items()},
                 lambda old, k: _same_number(old, efficiency[k]), create_before="sources")
    _set_entries(lines, "sources", {k: json.dumps(v, ensure_ascii=False) for k, v in sources.items()},
                 lambda old, k: _parsed(old) == sources[k])
    out = "\n".join(lines) + "\n"
    _check(out, efficiency, sources, top or {})
    return out


def _check(text: str, efficiency: Mapping[str, Number], sources: Mapping[str, str],
           top: Mapping[str, Number | Mapping[str, Number]]) -> None:
    data = yaml.safe_load(text)
    for key, value in efficiency.items():
        assert float(data["efficiency"][key]) == float(value), (key, data["efficiency"][key], value)
    for key, source in sources.items():
        assert data["sources"][key] == source, key
    for key, expected in top.items():
        got = data[key]
        if isinstance(expected, Mapping):
            assert {k: float(got[k]) for k in expected} == {k: float(v) for k, v in expected.items()}, key
        else:
            assert float(got) == float(expected), key


def write_profile_values(path: Path, efficiency: Mapping[str, Number], sources: Mapping[str, str],
                         top: Mapping[str, Number | Mapping[str, Number]] | None = None) -> bool:
    """Edit the profile YAML at `path` in place (module docstring); True if its bytes changed."""
    old = path.read_text()
    new = profile_text_with(old, efficiency, sources, top)
    if new != old:
        path.write_text(new)
    return new != old
