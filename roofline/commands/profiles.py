"""`roofline profiles`: the shipped hardware profiles, their key numbers and where their efficiency parameters come
from (a table, or JSON with --json).

The `parameters` column: `fitted <family>` (the family's parameters were fitted on this chip's measured vLLM
operator tables), `family <family>` (no tables for this chip: the family's parameters, fitted on its other GPUs)
or `datasheet-only`; `median error` is the held-out median error per operator kind (GEMM / attention /
all-reduce / MoE) of a fitted chip, or the error to expect for a family member without tables. `unfitted` (JSON,
and the table's footnote): the parameters no fit sets, because no operator table times their kernel (fit stage
`unfitted` of `roofline.cost.params`: the weight-only GEMMs' Marlin factor), with the value every profile runs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from roofline.commands import HELP
from roofline.cost.hardware import HardwareProfile, load_profile
from roofline.cost.params import EFFICIENCY_PARAMS, stage_fields
from roofline.registry import list_ids


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("profiles", help=HELP["profiles"],
                                   description="List the shipped hardware profiles with their key numbers.")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.set_defaults(run=run)
    return parser


def summary(hw: HardwareProfile) -> dict[str, Any]:
    """Key numbers of one profile, in the units of the YAML field names."""
    link = hw.interconnect
    return {
        "id": hw.id,
        "name": hw.name,
        "kind": hw.kind,
        "peak_tflops": {dtype: round(flops / 1e12, 3) for dtype, flops in hw.peak_flops_by_dtype},
        "memory_capacity_gb": round(hw.memory_capacity_bytes / 1e9, 2),
        "memory_bandwidth_gb_per_s": round(hw.memory_bandwidth_bytes_per_s / 1e9, 1),
        "interconnect": None if link is None else {
            "name": link.name,
            "bandwidth_gb_per_s_per_direction": round(link.bandwidth_bytes_per_s_per_direction / 1e9, 1),
            "max_num_gpus": link.max_num_gpus,
        },
        "family": hw.family,
        "provenance": {
            "status": hw.provenance.status,
            "fitted_on": hw.provenance.fitted_on,
            "median_error_pct": {kind: round(100 * median, 1) for kind, median, _, _ in hw.provenance.held_out},
            "line": hw.provenance_line(),
        },
        "unfitted": {EFFICIENCY_PARAMS[name].key: getattr(hw.efficiency, name) / EFFICIENCY_PARAMS[name].scale
                     for name in stage_fields("unfitted")},
    }


def _peak(row: dict[str, Any], dtype: str) -> str:
    value = row["peak_tflops"].get(dtype)
    return "-" if value is None else f"{value:g}"


def _link(row: dict[str, Any]) -> str:
    link = row["interconnect"]
    if link is None:
        return "PCIe only"
    return f"{link['name']} {link['bandwidth_gb_per_s_per_direction']:g}/dir x{link['max_num_gpus']}"


def _parameters(row: dict[str, Any]) -> str:
    status = row["provenance"]["status"]
    return f"{status} {row['family']}" if status in ("fitted", "family") and row["family"] else status


_KINDS = ("gemm", "attention", "all_reduce", "moe")


def _errors(row: dict[str, Any]) -> str:
    errors = row["provenance"]["median_error_pct"]
    if not errors:
        return "-"
    return "/".join(f"{errors[k]:.0f}" if k in errors else "-" for k in _KINDS) + " %"


def format_table(header: list[str], rows: list[list[str]]) -> str:
    """Left-aligned text columns (numbers right-aligned), two spaces apart."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        out = []
        for cell, width in zip(cells, widths):
            numeric = cell == "-" or cell.replace(".", "", 1).replace("/", "").isdigit()
            out.append(cell.rjust(width) if numeric else cell.ljust(width))
        return "  ".join(out).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def run(args: argparse.Namespace) -> int:
    rows = [summary(load_profile(pid)) for pid in list_ids("hardware")]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ["id", "name", "bf16 TFLOP/s", "fp8 TFLOP/s", "memory GB", "bandwidth GB/s", "interconnect GB/s",
              "parameters", "median error G/A/C/M"]
    table = [[str(r["id"]), str(r["name"]), _peak(r, "bf16"), _peak(r, "fp8"), f"{r['memory_capacity_gb']:g}",
              f"{r['memory_bandwidth_gb_per_s']:g}", _link(r), _parameters(r), _errors(r)] for r in rows]
    print(format_table(header, table))
    print("\nparameters: fitted = on this chip's measured vLLM operator tables (aiconfigurator-core); family = "
          "shared from its kernel family, fitted on other GPUs; median error G/A/C/M: held-out (fitted) or "
          "expected (family) median error of GEMM / attention / all-reduce / MoE.")
    unfitted = sorted({f"{key} = {value:g}" for r in rows for key, value in r["unfitted"].items()})
    print(f"unfitted (no operator table times the kernel; the value from its documented behaviour): "
          f"{', '.join(unfitted)} (weight-only GEMMs on Marlin: AWQ / GPTQ int4, fp8 and NVFP4 without their tensor "
          f"cores; roofline.cost.kernels.gemm_weight_only)")
    return 0
