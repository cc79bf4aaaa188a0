"""The `uncertainty:` section of a family file: how far the written parameters miss on held-out operator-table rows.

    roofline calibrate --op-tables --family hopper --uncertainty            # print the quantiles per chip and kind
    roofline calibrate --op-tables --family hopper --uncertainty --write    # write the section into the family file

    section = family_uncertainty("hopper", chips_by_family()["hopper"])       # the section (YAML units)
    write_uncertainty("hopper", section)

For every chip of the family that names operator tables (`operator_tables:`): its tables as the family fit reads them
(`roofline.calibration.op_tables.load_op_tables`), split as the fit splits them (`roofline.calibration.families.
split_tables`, the family's chips together, seed `SPLIT_SEED`), and each held-out row predicted with the chip as
`load_profile` reads it (the family's written parameters, its per-chip values and clock factor); and the held-out
rows of its MLA module tables and its all-to-all tables, split as their own fits split them (`mla_fit`,
`all_to_all_fit`). Per chip and operator
kind the section holds the quantiles of measured / predicted at `LEVELS`; `without_tables` pools every chip's rows
(for a chip of the family without tables: a lower bound). Nothing is fitted here, and nothing is read from the
end-to-end judge (`silicon_sample.csv`). `roofline.cost.uncertainty` reads the section; `roofline simulate
--intervals` samples from it. Deterministic: the same tables and parameters give the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from roofline.calibration.calibrate import SPLIT_SEED
from roofline.calibration.families import split_tables
from roofline.calibration.fit import predict_table
from roofline.calibration.op_tables import load_op_tables
from roofline.cost.hardware import HardwareProfile, load_profile
from roofline.cost.profile_yaml import profile_yaml, read_profile_dict
from roofline.cost.uncertainty import KINDS, check_section, chip_uncertainty

# Probability levels of the written quantiles: the tails finely (an 80 % interval reads 0.1 and 0.9; 8 Latin-hypercube
# samples read 0.0625 ... 0.9375).
LEVELS = (0.025, 0.05) + tuple(round(0.05 * i, 2) for i in range(2, 19)) + (0.95, 0.975)
DIGITS = 4  # significant digits of a written ratio


def command(family: str) -> str:
    return f"roofline calibrate --op-tables --family {family} --uncertainty --write"


def _entry(ratios: np.ndarray) -> dict[str, Any]:
    q = np.quantile(ratios, LEVELS)
    return {"num_rows": int(len(ratios)), "measured_over_predicted": [float(f"{v:.{DIGITS}g}") for v in q]}


def _mla_ratios(system: str) -> np.ndarray | None:
    """Measured / predicted of the held-out rows of vLLM's MLA module tables (`roofline.calibration.mla_fit`'s
    split), the chip's fit as it is written. A chip whose fit is another's (`mla_fit.FIT_ON`: its own tables are a
    legacy collection that runs slower than the serving path) takes that chip's rows: the same kernels, the same
    values."""
    from roofline.calibration import mla_fit
    system = mla_fit.FIT_ON.get(system, system)
    if system not in mla_fit.GPUS:
        return None
    d = mla_fit.module_table(system)
    hw = load_profile(mla_fit.GPUS[system])
    rows = np.flatnonzero(d.held_out.to_numpy())
    comp = mla_fit.components(hw, d, mla_fit.legacy_collector(system))
    return d.measured_s.to_numpy(np.float64)[rows] / mla_fit.predict(hw, comp, rows)


def _all_to_all_ratios(hw: HardwareProfile, system: str) -> np.ndarray | None:
    """Measured / predicted of the held-out rows of the chip's DeepEP and NCCL all-gather / reduce-scatter tables
    (`roofline.calibration.all_to_all_fit`'s split; the backends pooled)."""
    from roofline.calibration import all_to_all_fit
    d = all_to_all_fit.load_a2a_tables(system)
    if d.empty:
        return None
    held = d[d.held_out].reset_index(drop=True)
    return held.measured_s.to_numpy(np.float64) / all_to_all_fit.predict(hw, held)


def family_uncertainty(family: str, members: dict[str, str], log: Callable[[str], None] = lambda _: None
                       ) -> dict[str, Any]:
    """The `uncertainty:` section of `family` (members: chip id -> aiconfigurator system, "" without tables)."""
    with_tables = {pid: system for pid, system in members.items() if system}
    tables = {system: load_op_tables(system) for system in with_tables.values()}
    _, test = split_tables(tables)
    versions = sorted({f.attrs["vllm_version"] for t in tables.values() for f in t.values()})
    per_chip: dict[str, dict[str, Any]] = {}
    pooled: dict[str, list[np.ndarray]] = {}
    for pid, system in with_tables.items():
        hw = load_profile(pid)
        per_chip[pid] = {}
        for kind in KINDS:
            frame = test[system].get(kind)
            if frame is None or not len(frame):
                continue
            ratios = frame["measured_s"].to_numpy(np.float64) / predict_table(hw, kind, frame)
            per_chip[pid][kind] = _entry(ratios)
            pooled.setdefault(kind, []).append(ratios)
        for kind, ratios in (("mla", _mla_ratios(system)), ("all_to_all", _all_to_all_ratios(hw, system))):
            if ratios is not None and len(ratios):
                per_chip[pid][kind] = _entry(ratios)
                pooled.setdefault(kind, []).append(ratios)
        log(f"{family}: {pid} " + ", ".join(f"{k} {v['num_rows']}" for k, v in per_chip[pid].items()))
    from importlib.metadata import version
    return {
        "method": "measured / predicted of every held-out row of the family fit's shape split (seed "
                  f"{SPLIT_SEED}), each chip as load_profile reads it (written parameters, per-chip values, clock "
                  "factor); quantiles (numpy linear) at levels, per chip and operator kind; without_tables pools the "
                  "chips (a lower bound for a chip without tables). Never the end-to-end judge",
        "command": command(family),
        "fitted_on": f"aiconfigurator-core {version('aiconfigurator-core')}, vLLM {'/'.join(versions)} tables of "
                     f"{', '.join(with_tables.values())}",
        "levels": list(LEVELS),
        "per_chip": per_chip,
        "without_tables": {kind: _entry(np.concatenate(pooled[kind])) for kind in KINDS if kind in pooled},
    }


_SECTION = re.compile(r"^uncertainty:\n(?:(?: .*)?\n)*", re.M)


def section_text(section: dict[str, Any]) -> str:
    return profile_yaml({"uncertainty": section})


def write_uncertainty(path: Path, section: dict[str, Any]) -> Path:
    """Replace (or append) the family file's `uncertainty:` section, every other byte as it was; checked by reading
    it back."""
    text = path.read_text()
    new = section_text(section)
    text = _SECTION.sub(lambda _: new, text, count=1) if _SECTION.search(text) else text + new
    path.write_text(text)
    check_section(read_profile_dict(path)["uncertainty"], str(path))
    return path


def uncertainty_report(family: str, section: dict[str, Any]) -> str:
    """Per chip and kind: held-out rows and the 10th / 50th / 90th percentile of measured / predicted."""
    lines = [f"family {family}: measured / predicted on held-out operator-table rows (p10 / p50 / p90)"]
    for pid, kinds in [*section["per_chip"].items(), ("without tables (pooled)", section["without_tables"])]:
        u = chip_uncertainty({"levels": section["levels"], "without_tables": kinds}, pid, "report")
        assert u is not None
        cells = [f"{kind} {u.ratio_at(kind, np.array([0.1]))[0]:.3f} / {u.ratio_at(kind, np.array([0.5]))[0]:.3f} / "
                 f"{u.ratio_at(kind, np.array([0.9]))[0]:.3f} ({kinds[kind]['num_rows']} rows)" for kind in kinds]
        lines.append(f"  {pid}: " + "; ".join(cells))
    return "\n".join(lines)
