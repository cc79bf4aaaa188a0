"""How sure a profile's operator times are: the `uncertainty:` section of a family (or chip) profile, and the
per-kind time factors a sampled cost model runs with.

    u = load_profile("h100-sxm").uncertainty          # OpUncertainty: per operator kind, quantiles of
    u.quantiles["gemm"]                                #   measured / predicted on held-out operator-table rows
    factors = u.sample(8, seed=0)                      # 8 OpTimeFactors (Latin hypercube per kind)
    replace(hw, op_time_factors=factors[0])            # every GEMM x factors[0].gemm, attention ..., in the cost model

The section is written by `roofline calibrate --op-tables --family F --uncertainty --write`
(`roofline.calibration.uncertainty`): for each chip of the family with operator tables and each operator kind, the
ratio measured / predicted of every held-out row of the family fit's shape split (the written parameters), given as
its quantiles at `levels`; `without_tables` pools the chips with tables (what a chip of the family without tables
gets: a lower bound, its own error is larger). YAML:

    uncertainty:
      method: ...                        # free text: what the numbers are
      command: roofline calibrate --op-tables --family hopper --uncertainty --write
      fitted_on: ...                     # free text: the tables
      levels: [0.025, 0.05, ...]         # probability levels, increasing, in (0, 1)
      per_chip:
        h100-sxm:
          gemm: {num_rows: 35816, measured_over_predicted: [0.77, ...]}   # one ratio per level, non-decreasing
      without_tables: {gemm: {...}, ...}

A sample draws one factor per operator kind (`KINDS`), the same for every operator of that kind in every step of a
run (an error of a kind at a model's shapes is shared by its layers and steps), independently between kinds: the
inverse of the kind's quantile function (linear in ln ratio between levels, held at the outermost levels) at one
point of each of `n` equal strata of (0, 1), the strata's midpoints shuffled per kind by a seeded generator (Latin
hypercube: n samples cover every kind's distribution evenly). Kinds not in the section (and elementwise kernels and
sampling) keep factor 1; the host's terms are sampled from the host's own fields (`roofline.cost.host_uncertainty`).
`mla` is the whole-module error of vLLM's MLA attention (`roofline.calibration.mla_fit`'s held-out rows), applied to
the MLA records only (the module's projections are GEMMs, sampled as such); `all_to_all` is expert parallelism's
dispatch and combine (`roofline.calibration.all_to_all_fit`'s held-out rows).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from roofline.errors import UserError, check_fields

# The operator kinds sampled: those the operator tables time (`roofline.calibration.families.REPORTED_KINDS`'s kinds,
# then the MLA module and all-to-all tables'; appended, so that the earlier kinds' draws stay as they were).
KINDS = ("gemm", "attention_prefill", "attention_decode", "moe", "all_reduce", "mla", "all_to_all")
# Operator-record kind (`roofline.cost.ops.OpRecord.kind`) -> the sampled kind whose factor it takes.
_RECORD_KIND = {"gemm": "gemm", "attention_prefill": "attention_prefill", "attention_decode": "attention_decode",
                "moe": "moe", "all_reduce": "all_reduce", "all_gather": "all_reduce",
                "mla_prefill": "mla", "mla_decode": "mla", "mla_bmm": "mla"}
NOT_SAMPLED = ("the host: its speed, executor step and launch times, the API server's terms, unless the host states "
               "their uncertainty (roofline.cost.host_uncertainty)", "elementwise kernels and sampling")
_SECTION_KEYS = ("method", "command", "fitted_on", "levels", "per_chip", "without_tables")
_KIND_KEYS = ("num_rows", "measured_over_predicted")


@dataclass(frozen=True)
class OpTimeFactors:
    """A multiplicative factor on the time of every operator of a kind (1: the cost model as fitted)."""

    gemm: float = 1.0
    attention_prefill: float = 1.0
    attention_decode: float = 1.0
    moe: float = 1.0
    all_reduce: float = 1.0
    mla: float = 1.0
    all_to_all: float = 1.0

    def of(self, record_kind: str) -> float:
        """The factor of an operator record's kind (1 for kinds that are not sampled)."""
        name = _RECORD_KIND.get(record_kind)
        return 1.0 if name is None else float(getattr(self, name))

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


NOMINAL = OpTimeFactors()


@dataclass(frozen=True)
class OpUncertainty:
    """Per operator kind, quantiles of measured / predicted at `levels` (`ratios[kind]`, one per level)."""

    levels: tuple[float, ...]
    ratios: tuple[tuple[str, tuple[float, ...]], ...]  # (kind, ratios) in `KINDS` order
    num_rows: tuple[tuple[str, int], ...]
    source: str  # which chip's rows, or "without_tables", and the command that wrote them

    @property
    def quantiles(self) -> dict[str, tuple[float, ...]]:
        return dict(self.ratios)

    def ratio_at(self, kind: str, u: np.ndarray) -> np.ndarray:
        """The kind's measured / predicted at probabilities `u` (linear in ln ratio between levels)."""
        return np.exp(np.interp(u, self.levels, np.log(self.quantiles[kind])))

    def factors_at(self, level: float) -> OpTimeFactors:
        """Every kind at the same probability `level` of its measured / predicted (e.g. 0.9: each kind as slow as
        its 90th percentile at once, as if the kinds' errors were fully correlated)."""
        return OpTimeFactors(**{k: float(f"{self.ratio_at(k, np.array([level]))[0]:.6g}") for k in self.quantiles})

    def sample(self, n: int, seed: int) -> list[OpTimeFactors]:
        """`n` factor sets: per kind the ratios at the midpoints of n equal strata of (0, 1), shuffled per kind
        (one seeded generator, kinds in `KINDS` order), independent between kinds."""
        assert n >= 1
        rng = np.random.default_rng([41, seed])
        midpoints = (np.arange(n) + 0.5) / n
        columns: dict[str, np.ndarray] = {}
        for kind in KINDS:
            order = rng.permutation(n)  # drawn for every kind, so a kind's draws do not depend on which others exist
            if kind in self.quantiles:
                columns[kind] = self.ratio_at(kind, midpoints[order])
        return [OpTimeFactors(**{k: float(f"{v[i]:.6g}") for k, v in columns.items()}) for i in range(n)]


def _ratios(section: Any, levels: tuple[float, ...], where: str) -> tuple[tuple[tuple[str, tuple[float, ...]], ...],
                                                                         tuple[tuple[str, int], ...]]:
    check_fields(section, list(KINDS), where)
    ratios, rows = [], []
    for kind in KINDS:
        if kind not in section:
            continue
        entry = check_fields(section[kind], list(_KIND_KEYS), f"{where}.{kind}", list(_KIND_KEYS))
        values = entry["measured_over_predicted"]
        count = entry["num_rows"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise UserError(f"{where}.{kind}.num_rows: must be a positive integer, got {count!r}")
        ratios.append((kind, check_ratios(values, len(levels), f"{where}.{kind}.measured_over_predicted")))
        rows.append((kind, count))
    return tuple(ratios), tuple(rows)


def check_ratios(values: Any, num_levels: int, where: str) -> tuple[float, ...]:
    """A list of `num_levels` positive, non-decreasing ratios (one per quantile level), or one line naming `where`."""
    if not isinstance(values, list) or len(values) != num_levels or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e3 for v in values) \
            or any(b < a for a, b in zip(values, values[1:])):
        raise UserError(f"{where}: must be {num_levels} positive ratios (one per level), non-decreasing, "
                        f"got {values!r}")
    return tuple(float(v) for v in values)


def _levels(section: dict[str, Any], where: str) -> tuple[float, ...]:
    levels = section.get("levels")
    if not isinstance(levels, list) or len(levels) < 2 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1 for v in levels) \
            or any(b <= a for a, b in zip(levels, levels[1:])):
        raise UserError(f"{where}.levels: must be a list of at least 2 increasing probabilities in (0, 1), "
                        f"got {levels!r}")
    return tuple(float(v) for v in levels)


def check_section(section: Any, where: str) -> None:
    """Validate an `uncertainty:` section (UserError naming the field)."""
    where = f"{where}: uncertainty"
    check_fields(section, list(_SECTION_KEYS), where, ["levels"])
    levels = _levels(section, where)
    per_chip = section.get("per_chip") or {}
    if not isinstance(per_chip, dict):
        raise UserError(f"{where}.per_chip: must be a mapping of chip id -> {{kind: {{...}}}}")
    for chip, kinds in per_chip.items():
        _ratios(kinds, levels, f"{where}.per_chip.{chip}")
    if "without_tables" in section:
        _ratios(section["without_tables"], levels, f"{where}.without_tables")
    if not per_chip and "without_tables" not in section:
        raise UserError(f"{where}: needs per_chip or without_tables (the ratios)")


def chip_uncertainty(section: Any, chip_id: str, where: str) -> OpUncertainty | None:
    """The uncertainty of chip `chip_id` from an `uncertainty:` section (its own entry, else `without_tables`);
    None without a section or an entry that applies."""
    if section is None:
        return None
    check_section(section, where)
    levels = _levels(section, f"{where}: uncertainty")
    command = str(section.get("command", "?"))
    own = (section.get("per_chip") or {}).get(chip_id)
    if own is not None:
        ratios, rows = _ratios(own, levels, f"{where}: uncertainty.per_chip.{chip_id}")
        return OpUncertainty(levels, ratios, rows, f"{chip_id}'s held-out operator-table rows ({command})")
    if "without_tables" in section:
        ratios, rows = _ratios(section["without_tables"], levels, f"{where}: uncertainty.without_tables")
        return OpUncertainty(levels, ratios, rows, f"the family's chips with tables, pooled: {chip_id} has none of "
                                                   f"its own, so a lower bound ({command})")
    return None
