"""Each efficiency parameter is declared once (`roofline.cost.params.EfficiencyParams`), and shipped profiles parse
to the values they had when the fitted code defaults moved into the YAML (commit e697551)."""

from __future__ import annotations

import ast
import json
from dataclasses import fields
from pathlib import Path

import yaml

from roofline.calibration.calibrate import DEFAULT_TRACE_PARAMS, OP_TABLE_STAGES
from roofline.cost.hardware import load_profile
from roofline.cost.kernels import kernel_family
from roofline.cost.params import (
    EFFICIENCY_PARAMS,
    GROUPS,
    STAGES,
    UNITS,
    EfficiencyParams,
    group_fields,
    stage_fields,
)
from roofline.registry import data_dir, list_ids

ROOT = Path(__file__).resolve().parents[1]
PARAMS_PY = ROOT / "roofline" / "cost" / "params.py"
# Literal collections that still name two or more parameters, each with why it is not a second declaration.
ALLOWED_LISTS = {
    # helper `cost` moves it into the KernelFamily records (issue 36, item 2): which families read NCCL's ring
    ("roofline/cost/kernels/__init__.py", "NCCL_PARAMS"),
    # the plan sensitivity's choice of what "compute" and "memory" efficiency mean: a selection, not a declaration
    ("roofline/planning/backend.py", "COMPUTE_EFFICIENCIES"),
    ("roofline/planning/backend.py", "MEMORY_EFFICIENCIES"),
    ("roofline/planning/backend.py", "UNSCALED_EFFICIENCIES"),
    # the values `roofline profile-device` writes into a new profile (what it measured), not a declaration
    ("roofline/commands/profile_device.py", None),
}


def _names() -> set[str]:
    return set(EFFICIENCY_PARAMS) | {p.key for p in EFFICIENCY_PARAMS.values()}


def _listed(node: ast.AST) -> list[str]:
    """The parameter names (field names or YAML keys, with or without `efficiency.`) among the string constants of
    an assignment's value."""
    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
        return []
    names = _names()
    return [n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and n.value.removeprefix("efficiency.") in names]


def _assigned_name(node: ast.Assign | ast.AnnAssign) -> str | None:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return next((t.id for t in targets if isinstance(t, ast.Name)), None)


def test_every_efficiency_field_is_declared_once_with_param() -> None:
    tree = ast.parse(PARAMS_PY.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "EfficiencyParams")
    declared = [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                and isinstance(n.value, ast.Call) and getattr(n.value.func, "id", "") == "_param"]
    assert declared == [f.name for f in fields(EfficiencyParams)]
    assert sorted(declared) == sorted(set(declared))


def test_no_other_module_lists_parameters_a_second_time() -> None:
    """No assignment in roofline/ or benchmarks/ spells two parameter names (as the old YAML key table, the fit-stage
    lists and JOINT_FIELDS did): such a table is derived from the declarations instead."""
    found = []
    for path in sorted([*ROOT.glob("roofline/**/*.py"), *ROOT.glob("benchmarks/**/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if len(_listed(node)) >= 2:
                assert isinstance(node, (ast.Assign, ast.AnnAssign))
                name = _assigned_name(node)
                if (rel, name) not in ALLOWED_LISTS and (rel, None) not in ALLOWED_LISTS:
                    found.append(f"{rel}:{node.lineno} {name}: {_listed(node)}")
    assert found == []


def test_declarations_are_complete_and_consistent() -> None:
    keys = [p.key for p in EFFICIENCY_PARAMS.values()]
    assert len(keys) == len(set(keys))
    for p in EFFICIENCY_PARAMS.values():
        suffix, scale, _, _ = UNITS[p.unit]
        assert p.key.endswith(suffix) and p.scale == scale and p.lo <= p.default / p.scale <= p.hi, p.name
        assert p.group in GROUPS and p.stages and set(p.stages) <= set(STAGES), p.name
        assert (p.search is not None) == ("moe_joint" in p.stages), p.name
    # every stage some parameter names, and the derived op-table stages are the declarations'
    assert all(stage_fields(s) for s in STAGES)
    assert [(stage, params) for stage, _, params in OP_TABLE_STAGES] == [
        (s, stage_fields(s)) for s in ("gemm", "attention", "all_reduce", "moe")]
    assert DEFAULT_TRACE_PARAMS[:len(stage_fields("trace"))] == tuple(f"efficiency.{p}" for p in stage_fields("trace"))


def _profile_yamls() -> list[Path]:
    folder = data_dir("hardware_profiles")
    return [*sorted(folder.glob("*.yaml")), *sorted((folder / "families").glob("*.yaml")),
            ROOT / "tests" / "data" / "cpu-profile.yaml"]


def test_every_yaml_efficiency_key_is_declared() -> None:
    keys = {p.key for p in EFFICIENCY_PARAMS.values()}
    seen = 0
    for path in _profile_yamls():
        data = yaml.safe_load(path.read_text())
        if not isinstance(data, dict) or "id" not in data:
            continue  # prices.yaml
        sections = [data.get("efficiency") or {}] + [c.get("efficiency") or {}
                                                     for c in (data.get("per_chip") or {}).values()]
        for section in sections:
            assert set(section) <= keys, (path.name, set(section) - keys)
            seen += len(section)
    assert seen > 100


BASELINE = json.loads((ROOT / "tests" / "data" / "efficiency-e697551.json").read_text())
# Deliberate refits since e697551, each with its held-out errors in its history note: chip -> the fields it changed.
REFITTED = {
    # H200's own block-fp8 and MXFP4 MoE fits (it ran H100's): docs/benchmark-history/2026-11-29c-fits.md
    "h200-sxm": {f"{prefix}_{p}" for prefix in ("moe_fp8_block", "moe_w4a16")
                 for p in ("gemm_factor", "bandwidth_factor", "fixed_s")},
    # the Blackwell family file as its command writes it: the wide-tile factor to six digits, 0.764 -> 0.76436 (the
    # file held the fit rounded by hand); same note
    **{chip: {"moe_trtllm_wide_tile_bandwidth_factor"} for chip in ("b200", "b300", "gb200")},
}
# Marlin MoE refitted with its slice step and per-weight-type dequantization rates (the Hopper and Blackwell family
# fits; h100-pcie reads the Hopper family file's): docs/benchmark-history/2026-11-29d-moe.md
for _chip in ("h100-sxm", "h100-pcie", "h200-sxm", "b200", "b300", "gb200"):
    REFITTED[_chip] = REFITTED.get(_chip, set()) | {f"moe_w4a16_marlin_{p}" for p in ("gemm_factor", "bandwidth_factor",
                                                                                     "fixed_s")}


def test_shipped_profiles_parse_to_the_values_of_e697551() -> None:
    """Exactly, except where e697551's defaults were fits that no longer apply and nothing reads them: MXFP4 x
    MXFP8 MoE outside Blackwell (`check_moe_backend` refuses it there), and a CPU profile's GPU MoE formats (the CPU
    engines time MoE with their own model, `roofline.cost.cpu.engine.moe_time_s`); those take the no-effect
    defaults."""
    cpu = "tests/data/cpu-profile.yaml"  # benchmarks/results/cpu-profile.yaml at e697551
    assert sorted(BASELINE) == sorted([*list_ids("hardware"), cpu])
    for pid, before in BASELINE.items():
        hw = load_profile(ROOT / pid if pid == cpu else pid)
        after = {f.name: getattr(hw.efficiency, f.name) for f in fields(hw.efficiency)}
        unread = set()
        if not kernel_family(hw.family).moe.mxfp8_activations:
            unread |= set(stage_fields("moe_format")) & {n for n in after if n.startswith("moe_mxfp4_mxfp8")}
        if hw.kind == "cpu":
            unread |= set(stage_fields("moe_format"))
        # fields declared after e697551 (the MLA module's, the all-to-all's, the unfitted weight-only GEMMs') are
        # new, not changed: they keep no-effect defaults unless the profile states them
        assert {n for n in after if n not in before} <= set(stage_fields("mla")) | set(stage_fields("all_to_all")) \
            | set(stage_fields("unfitted")) | set(group_fields("moe_w4a16_marlin", "moe_format")) \
            | set(group_fields("moe_triton_fp8_block", "moe_format")) \
            | {"gemm_fp8_block_fixed_s", "gemm_fp8_block_saturation_fraction"}, pid  # DeepGEMM's small calls
        changed = {n for n in after if n in before and after[n] != before[n]} - REFITTED.get(pid, set())
        assert changed <= unread, (pid, sorted(changed - unread))
        assert all(after[n] == EFFICIENCY_PARAMS[n].default for n in changed), pid
