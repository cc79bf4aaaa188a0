"""`roofline calibrate`: fit a hardware profile's efficiency and executor parameters on measurements.

    roofline calibrate --hardware cpu.yaml --out cpu-calibrated.yaml --trace traces/a --test-trace traces/b
    roofline calibrate --hardware h100-sxm --out h100-calibrated.yaml --op-tables h100_sxm
    roofline calibrate --op-tables --family hopper [--write]
    roofline calibrate --op-tables --all-to-all [--write]
    roofline calibrate --op-tables --op gemm-formats|moe-formats|mla|all-to-all [--chip C | --family F] [--write]

`--trace DIR ...`: engine step traces to fit on; `--test-trace DIR ...`: held-out traces of a different
workload (other lengths, arrival rate) to judge the fit on - never a split of one trace's steps. Either may be a
repeat set (`roofline measure --repeats N`, `--append`): every repeat is used, and a held-out set's noise floor
(left one repeat out, `roofline.calibration.protocol`) is reported next to the error on the same steps.
`--op-tables DIR`: measured vLLM operator tables in the aiconfigurator-core layout (a system folder such as
.../systems/data/h100_sxm, or the name of one in the installed package), split by weight shape into a fitted
and a held-out half. The calibrated profile is the input profile with the fitted values and a `calibration:`
record: what it was fitted on, when (UTC date; SOURCE_DATE_EPOCH pins it), the method, the parameters before
and after, and the train and held-out error before and after.

`--op-tables --family F`: fit kernel family F on the operator tables of all its chips together (each chip's
`operator_tables:`), every stage of `roofline.calibration.family_fit` (the op-table stages, per-chip collectives and
clock factors, the family's joint MoE fits); print the fitted values against the shipped family file and the held-out
errors; `--write` rewrites hardware_profiles/families/F.yaml (and the fitted chips' clock factors), the one writer of
a family's fitted values.

`--op-tables --family F --uncertainty`: no fit; the family's written parameters on the held-out rows of its chips'
tables, measured / predicted per chip and operator kind (`roofline.calibration.uncertainty`); `--write` writes their
quantiles into the family file's `uncertainty:` section, which `roofline simulate --intervals` samples (a family fit
with `--write` rewrites the section too).

`--op-tables --all-to-all`: fit expert parallelism's dispatch and combine (`roofline.cost.kernels.all_to_all`: DeepEP
high-throughput and low-latency, NCCL all-gather / reduce-scatter) per chip on the tables each chip profile names,
held out by shape (`roofline.calibration.all_to_all_fit`); `--write` writes the values into the chips' profiles.

`--op-tables --op OP`: one operator family's per-chip fit (`roofline.calibration.chip_fit`): `gemm-formats` (block
fp8 and NVFP4 dense GEMMs, a declared power limit), `moe-formats` (block fp8, NVFP4, MXFP4, MXFP4 x MXFP8, Marlin
MoE), `mla` (MLA attention), `all-to-all`; of one chip (`--chip C`), the chips of a family (`--family F`; for
moe-formats also the family file's values, its reference chip's), or every chip with the tables; `--write` edits
the fitted values and their sources into the profiles in place (`roofline.calibration.profile_writer`).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from roofline.calibration.calibrate import (
    DEFAULT_MAX_FIT_STEPS,
    DEFAULT_TRACE_PARAMS,
    EXERCISED_MIN_STEPS,
    EXERCISED_SENSITIVITY,
    TRACE_PRIOR_SCALE,
    CalibrationReport,
    calibrate_on_op_tables,
    calibrate_on_traces,
    write_calibrated_profile,
)
from roofline.calibration.op_tables import load_op_tables
from roofline.calibration.protocol import load_traces
from roofline.commands import HELP
from roofline.cost.hardware import load_profile
from roofline.errors import UserError
from roofline.jsonable import jsonable
from roofline.paths import check_output_file
from roofline.registry import resolve


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "calibrate", help=HELP["calibrate"],
        description=__doc__.split("\n\n")[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hardware", help="hardware profile id or path to start from (not with --family)")
    parser.add_argument("--out", type=Path, metavar="CALIBRATED.yaml",
                        help="calibrated profile to write (not with --family)")
    data = parser.add_mutually_exclusive_group(required=True)
    data.add_argument("--trace", type=Path, nargs="+", action="extend", metavar="DIR",
                      help="step traces to fit on")
    data.add_argument("--op-tables", metavar="DIR", nargs="?", const="",
                      help="aiconfigurator-core system folder (or system name, e.g. h100_sxm) to fit on; with "
                           "--family, no value (the family's chips name their tables)")
    parser.add_argument("--family", help="with --op-tables: fit this kernel family (hardware_profiles/families)")
    parser.add_argument("--all-to-all", action="store_true",
                        help="with --op-tables (no value): fit expert parallelism's dispatch / combine per chip on "
                             "the DeepEP and NCCL tables of every chip that names them")
    parser.add_argument("--op", help="with --op-tables (no value): the per-chip fit to run: "
                                     "gemm-formats, moe-formats, mla or all-to-all")
    parser.add_argument("--chip", help="with --op: fit this chip only (a shipped profile id)")
    parser.add_argument("--format", dest="moe_format",
                        help="with --op moe-formats: fit this weight format only (fp8-block, nvfp4, mxfp4, "
                             "mxfp4-mxfp8, mxfp4-marlin)")
    parser.add_argument("--write", action="store_true",
                        help="with --family: write the family file and the fitted chips' clock factors; with "
                             "--all-to-all: write the fitted values into the chips' profiles")
    parser.add_argument("--uncertainty", action="store_true",
                        help="with --op-tables --family F: only the written parameters' measured / predicted quantiles "
                             "on the held-out rows per chip and kind (no fit); --write writes them into the family "
                             "file's uncertainty: section (roofline simulate --intervals samples from it)")
    parser.add_argument("--test-trace", type=Path, nargs="+", action="extend", default=[], metavar="DIR",
                        help="held-out step traces (a different workload) to report the error on")
    parser.add_argument("--params", default=None,
                        help=f"comma-separated parameters to fit on traces, all of them (default: those of "
                             f"{','.join(DEFAULT_TRACE_PARAMS)} that the fitted steps exercise; the others are held "
                             f"and reported)")
    parser.add_argument("--max-fit-steps", type=int, default=None,
                        help=f"steps the trace fit uses at most, sampled per trace (default: {DEFAULT_MAX_FIT_STEPS})")
    parser.add_argument("--prior-scale", type=float, default=None,
                        help=f"weight of the log-normal prior around the starting profile in a trace fit; 0 fits the "
                             f"data alone (default: {TRACE_PRIOR_SCALE:.4f} = noise 0.1 / one decade)")
    parser.add_argument("--json", action="store_true", help="print the calibration report as JSON")
    parser.set_defaults(run=run)
    return parser


def _op_tables(value: str) -> tuple[dict, str]:
    path = Path(value).expanduser()
    if path.is_dir():
        return load_op_tables(path.name, root=path.parent), str(path)
    return load_op_tables(value), value


def run(args: argparse.Namespace) -> int:
    if args.op is not None:
        return run_op(args)
    if args.chip is not None:
        raise UserError("--chip: only with --op (gemm-formats, moe-formats, mla or all-to-all)")
    if args.moe_format is not None:
        raise UserError("--format: only with --op moe-formats")
    if args.all_to_all:
        return run_all_to_all(args)
    if args.family is not None:
        return run_family(args)
    if args.uncertainty:
        raise UserError("--uncertainty: only with --op-tables --family F (a family's held-out operator-table rows)")
    if args.write:
        raise UserError("--write: only with --op-tables --family F, --op-tables --op OP or --op-tables --all-to-all "
                        "(a calibrated profile is written to --out)")
    if args.op_tables == "":
        raise UserError("--op-tables: name the system folder or name to fit on (no value only with --family F)")
    for flag, value in (("--hardware", args.hardware), ("--out", args.out)):
        if value is None:
            raise UserError(f"{flag}: required (except with --op-tables --family F)")
    check_output_file(args.out, "--out")  # before the fit, which can take minutes
    profile_path = resolve("hardware", args.hardware)
    hw = load_profile(profile_path)
    if args.op_tables is not None:
        for flag, value in (("--test-trace", args.test_trace), ("--params", args.params),
                            ("--max-fit-steps", args.max_fit_steps), ("--prior-scale", args.prior_scale)):
            if value is not None and value != []:
                raise UserError(f"{flag}: only with --trace (operator tables are fitted in fixed stages on half "
                                f"of their shapes; the other half is held out)")
        tables, source = _op_tables(args.op_tables)
        report = calibrate_on_op_tables(hw, tables, source, progress=progress_printer())
    else:
        params = None if args.params is None else [p.strip() for p in args.params.split(",")]
        max_fit_steps = DEFAULT_MAX_FIT_STEPS if args.max_fit_steps is None else args.max_fit_steps
        prior_scale = TRACE_PRIOR_SCALE if args.prior_scale is None else args.prior_scale
        if not prior_scale >= 0:
            raise UserError(f"--prior-scale: must be a number >= 0, got {args.prior_scale}")
        report = calibrate_on_traces(hw, [r for t in args.trace for r in load_traces(t)],
                                     [r for t in args.test_trace for r in load_traces(t, "--test-trace")], params,
                                     max_fit_steps, prior_scale, progress=progress_printer())
    write_calibrated_profile(profile_path, report, args.out, command_line(args))
    if args.json:
        print(json.dumps(jsonable(report.to_dict()), indent=2))
    else:
        print(format_report(report))
        print(f"wrote {args.out}")
    return 0


def run_family(args: argparse.Namespace) -> int:
    """`--op-tables --family F [--write]`: fit the family, print its values against the file's, write on --write."""
    from roofline.calibration.family_fit import (
        chips_by_family,
        family_report,
        fit_one_family,
        write_chip_clock,
        write_family,
    )

    if args.op_tables != "":
        raise UserError("--family: takes --op-tables without a value" + ("" if args.op_tables is not None else
                        " (fits a family on the operator tables its chips name)"))
    for flag, value in (("--hardware", args.hardware), ("--out", args.out), ("--trace", args.trace),
                        ("--test-trace", args.test_trace or None), ("--params", args.params),
                        ("--max-fit-steps", args.max_fit_steps), ("--prior-scale", args.prior_scale),
                        ("--json", args.json or None)):
        if value is not None:
            raise UserError(f"{flag}: not with --family (a family is fitted on its chips' operator tables)")
    families = chips_by_family()
    if args.family not in families:
        raise UserError(f"--family: {args.family!r} is not allowed; allowed: {', '.join(sorted(families))}")
    if not any(families[args.family].values()):
        raise UserError(f"--family: no {args.family} chip profile names operator tables (operator_tables:); "
                        "nothing to fit")
    if not args.uncertainty:
        r = fit_one_family(args.family, families[args.family], log=progress_printer())
        print(family_report(r))
        if args.write:
            print(f"wrote {write_family(r)}")
            for pid in r["clock"]:
                print(f"wrote {write_chip_clock(r, pid)}")
    if args.uncertainty or args.write:  # a written fit's held-out ratios are rewritten with it, never left stale
        _uncertainty(args.family, families[args.family], args.write)
    return 0


def _uncertainty(family: str, members: dict[str, str], write: bool) -> None:
    """Print (and with `write`, write) family `family`'s `uncertainty:` section from its written parameters."""
    from roofline.calibration.family_fit import family_file
    from roofline.calibration.uncertainty import family_uncertainty, uncertainty_report, write_uncertainty

    section = family_uncertainty(family, members, log=progress_printer())
    print(uncertainty_report(family, section))
    if write:
        print(f"wrote {write_uncertainty(family_file(family), section)} (uncertainty)")


def refresh_uncertainty(targets: list[str]) -> None:
    """After a per-chip fit wrote `targets` (chip ids, or `families/<id>`): rewrite the `uncertainty:` section of
    every family they belong to, from the values just written, so that no written fit leaves its family's held-out
    ratios stale (a family whose chips name no tables has no section to rewrite)."""
    from roofline.calibration.family_fit import chips_by_family
    from roofline.cost.hardware import FAMILIES_DIR
    from roofline.cost.profile_yaml import read_profile_dict

    families = chips_by_family()
    touched = set()
    for target in targets:
        if target.startswith(f"{FAMILIES_DIR}/"):
            touched.add(target.split("/", 1)[1])
        else:
            touched.add(str(read_profile_dict(resolve("hardware", target)).get("family") or ""))
    for family in sorted(f for f in touched if any(families.get(f, {}).values())):
        _uncertainty(family, families[family], write=True)


def run_op(args: argparse.Namespace) -> int:
    """`--op-tables --op OP [--chip C | --family F] [--write]` (roofline.calibration.chip_fit)."""
    from roofline.calibration.chip_fit import fit_op, select_chips, write

    if args.op_tables != "":
        raise UserError("--op: takes --op-tables without a value (each chip profile names its tables)")
    for flag, value in (("--hardware", args.hardware), ("--out", args.out), ("--trace", args.trace),
                        ("--all-to-all", args.all_to_all or None), ("--uncertainty", args.uncertainty or None),
                        ("--test-trace", args.test_trace or None),
                        ("--params", args.params), ("--max-fit-steps", args.max_fit_steps),
                        ("--prior-scale", args.prior_scale), ("--json", args.json or None)):
        if value is not None:
            raise UserError(f"{flag}: not with --op (fitted per chip on the tables its profile names)")
    if args.chip is not None and args.family is not None:
        raise UserError("--chip: not with --family (name one chip, or a family for all its chips)")
    chips = select_chips(args.op, args.chip, args.family)
    formats = None
    if args.moe_format is not None:
        from roofline.calibration.moe_fits import FITTED
        if args.op != "moe-formats":
            raise UserError("--format: only with --op moe-formats")
        if args.moe_format not in FITTED:
            raise UserError(f"--format: {args.moe_format!r} is not allowed; allowed: {', '.join(FITTED)}")
        formats = frozenset({args.moe_format})
    written = []
    for w in fit_op(args.op, chips, args.family, log=progress_printer(), formats=formats):
        print("\n".join(w.report))
        if args.write:
            print(f"wrote {write(w)}")
            written.append(w.target)
    refresh_uncertainty(written)
    return 0


def run_all_to_all(args: argparse.Namespace) -> int:
    """`--op-tables --all-to-all [--write]`: fit the all-to-all kernels per chip, print held-out errors, write on
    --write (roofline.calibration.all_to_all_fit)."""
    from roofline.calibration.all_to_all_fit import chips_with_tables, fit_chip, report_lines, write_chip

    if args.op_tables != "":
        raise UserError("--all-to-all: takes --op-tables without a value (each chip profile names its tables)")
    if args.uncertainty:
        raise UserError("--uncertainty: only with --op-tables --family F, not with --all-to-all")
    for flag, value in (("--hardware", args.hardware), ("--out", args.out), ("--trace", args.trace),
                        ("--family", args.family), ("--test-trace", args.test_trace or None),
                        ("--params", args.params), ("--max-fit-steps", args.max_fit_steps),
                        ("--prior-scale", args.prior_scale), ("--json", args.json or None)):
        if value is not None:
            raise UserError(f"{flag}: not with --all-to-all (fitted per chip on the tables its profile names)")
    written = []
    for chip, system in chips_with_tables().items():
        r = fit_chip(chip, system)
        print("\n".join(report_lines(r)))
        if args.write:
            print(f"wrote {write_chip(r)}")
            written.append(chip)
    refresh_uncertainty(written)
    return 0


def progress_printer(min_interval_s: float = 2.0) -> Callable[[str], None]:
    """Progress lines on stderr, each with the time since the first: a fit's stage lines and first iteration always,
    its later iterations at most every `min_interval_s` (a fit can take minutes; nothing else says it is running)."""
    started = time.perf_counter()
    last = [-math.inf]

    def show(line: str) -> None:
        now = time.perf_counter()
        if line.startswith("iteration") and not line.startswith("iteration 1/") and now - last[0] < min_interval_s:
            return
        last[0] = now
        elapsed = int(now - started)
        print(f"roofline calibrate: [{elapsed // 60}m{elapsed % 60:02d}s] {line}", file=sys.stderr, flush=True)
    return show


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this calibration (recorded in the profile)."""
    words = ["roofline", "calibrate", "--hardware", str(args.hardware), "--out", str(args.out)]
    if args.op_tables is not None:
        words += ["--op-tables", args.op_tables]
    else:
        words += ["--trace", *map(str, args.trace)]
        if args.test_trace:
            words += ["--test-trace", *map(str, args.test_trace)]
        for flag, value in (("--params", args.params), ("--max-fit-steps", args.max_fit_steps),
                            ("--prior-scale", args.prior_scale)):
            if value is not None:
                words += [flag, str(value)]
    return shlex.join(words)


def format_report(report: CalibrationReport) -> str:
    fitted = [n for n, v in report.parameters.items() if v.get("fitted", True)]
    lines = [f"fitted {len(fitted)} parameters on {report.source} in {report.fit_seconds:.1f} s:"]
    for name, v in report.parameters.items():
        if v.get("fitted", True):
            lines.append(f"  {name:<45} {v['before']:.4g} -> {v['after']:.4g}")
        elif "held" in v:
            lines.append(f"  {name:<45} {v['before']:.4g} held: {v['held']}")
        else:
            lines.append(f"  {name:<45} {v['before']:.4g} held: moves >= {EXERCISED_SENSITIVITY:.0%} of the step "
                         f"time in {v['exercised_steps']:.1%} of the fitted steps (< {EXERCISED_MIN_STEPS:.0%})")
    executors = sorted({t["executor"] for t in report.fitted_on + report.held_out if "executor" in t})
    if executors:
        lines.append(f"executor description: {', '.join(executors)}")
    lines += sorted({t["weight_streaming"] for t in report.fitted_on + report.held_out if t.get("weight_streaming")})
    lines.append("error (median / p90 / max |predicted / measured - 1|):")
    for part in ("train", "test"):
        if part in report.error:
            lines.append(f"  {'held out' if part == 'test' else 'train':<9} before {_stats(report.error[part]['before'])}"
                         f"   after {_stats(report.error[part]['after'])}")
    test = report.error.get("test", {})
    if len(test.get("per_trace", [])) > 1:
        for row in test["per_trace"]:
            lines.append(f"    {row['trace']}: before {_stats(row['before'])}   after {_stats(row['after'])}")
    for floor in test.get("noise_floor", []):
        f = floor["floor"]
        lines.append(f"  held-out repeat set {floor['repeat_set']}, on the {f['num_steps']} of {f['num_steps_in_repeats']} "
                     f"steps its noise floor covers:")
        lines.append(f"    before {_stats(floor['before'])}   after {_stats(floor['after'])}   "
                     f"noise floor (leave one repeat out) {_stats(f)}")
    return "\n".join(lines)


def _stats(s: dict[str, Any]) -> str:
    if s["median_abs_rel_err"] is None:
        return "no steps"
    return (f"{100 * s['median_abs_rel_err']:5.1f} / {100 * s['p90_abs_rel_err']:5.1f} / "
            f"{100 * s['max_abs_rel_err']:6.1f} %")
