"""The per-chip fits of `roofline calibrate --op-tables --op OP [--chip C | --family F] [--write]`: each fits one
operator family's parameters of a chip on the tables its profile names and writes them, with their sources, into
the chip's profile through `roofline.calibration.profile_writer` (the one writer).

    roofline calibrate --op-tables --op gemm-formats --chip gb200            # print the fit and held-out errors
    roofline calibrate --op-tables --op moe-formats --family hopper --write  # write every hopper chip's values

    writes = fit_op("moe-formats", ["b200"])     # [ChipWrite]: values as written, sources, report lines
    write(writes[0])                             # into hardware_profiles/b200.yaml (or write(w, path))

Ops (`OPS`): `gemm-formats` (block fp8 and NVFP4 dense GEMMs, the power limit where a chip declares one:
`roofline.calibration.gemm_format_fit`), `moe-formats` (block fp8, NVFP4, MXFP4, MXFP4 x MXFP8 and Marlin MoE:
`roofline.calibration.moe_format_fit`), `mla` (`roofline.calibration.mla_fit`), `all-to-all`
(`roofline.calibration.all_to_all_fit`). With `--family F`, `moe-formats` also writes the family file's MoE format
values: those of the family's first chip in `moe_fits.GPUS` (its reference chip), for the family's chips without
tables. Deterministic: hash splits, fixed starts; the same tables give the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from roofline.calibration.profile_writer import write_profile_values
from roofline.cost.hardware import FAMILIES_DIR, load_profile
from roofline.cost.profile_yaml import read_profile_dict
from roofline.errors import UserError
from roofline.registry import data_dir, resolve

OPS = ("gemm-formats", "moe-formats", "mla", "all-to-all")
PACKAGE = "aiconfigurator-core"


def command(op: str, chip: str) -> str:
    """The command that writes `op`'s values of `chip` (recorded in their sources)."""
    return f"roofline calibrate --op-tables --op {op} --chip {chip} --write"


@dataclass(frozen=True)
class ChipWrite:
    """What one op's fit writes into one profile: `target` a chip id, or `families/<id>` for a family file."""

    target: str
    efficiency: dict[str, float]  # YAML key -> YAML units, as written
    sources: dict[str, str]  # source key -> text
    top: dict[str, Any] = field(default_factory=dict)  # top-level fields (power_limit)
    report: tuple[str, ...] = ()


def profile_path(target: str) -> Path:
    if target.startswith(f"{FAMILIES_DIR}/"):
        return data_dir("hardware_profiles") / f"{target}.yaml"
    return resolve("hardware", target)


def write(w: ChipWrite, path: Path | None = None) -> Path:
    """Write `w` into its profile (or the copy at `path`) and check the profile still loads."""
    path = path or profile_path(w.target)
    write_profile_values(path, w.efficiency, w.sources, w.top)
    if not w.target.startswith(f"{FAMILIES_DIR}/"):
        load_profile(path)
    return path


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _bias(x: float) -> str:
    return f"{100 * x:+.1f} %"


# ---- gemm-formats ---------------------------------------------------------------------------------------------

# What a fitted power limit describes, per chip (the evidence beyond the fit).
POWER_LIMIT_EVIDENCE = {
    "": ("What it describes: the chip's DeepGEMM calls of more than a few ms of math run at a lower clock than "
         "shorter ones in the collector's back-to-back loop; the tables record no power or clock, so the limit is "
         "inferred, not read, and a GPU without tables cannot know it"),
    "gb200": ("What it describes: GB200's DeepGEMM calls of more than ~4 ms of math run at 1.6-1.8 PFLOP/s against "
              "3.0-3.3 for shorter ones, slower than B200's on the same shapes although its TDP is higher (GB200 "
              "1200 W per GPU, 2700 W per superchip with Grace, HGX B200 1000 W: NVIDIA Blackwell Architecture "
              "Technical Brief as tabulated at https://weekly.ascii.jp/elem/000/004/191/4191715/4, and "
              "https://glennklockwood.com/garden/processors/B200); the tables record no power or clock, so the power "
              "limit is inferred, not read. Leave-one-GPU-out cannot know it (no other chip's tables show this step)"),
}


def _gemm_writes(chip: str) -> ChipWrite:
    from roofline.calibration.gemm_format_fit import (
        EAGER_DEVICE_ROWS_FLOOR_MULTIPLE,
        POWER_THROTTLE_CALL_S,
        fit_gemm_formats,
    )

    hw = load_profile(chip)
    system = _system(chip)
    efficiency: dict[str, float] = {}
    sources: dict[str, str] = {}
    top: dict[str, Any] = {}
    report = []
    cmd = command("gemm-formats", chip)
    for f in fit_gemm_formats(hw, system):
        keys = ", ".join(f.values)
        e = f.held_out
        held = f"held-out median error {_pct(e['median_err'])} % (p90 {_pct(e['p90_err'])} %, bias {_bias(e['bias'])})"
        rows = (f"measured at >= {EAGER_DEVICE_ROWS_FLOOR_MULTIPLE:g}x the eager host floor of {f.host_floor_us} us "
                f"({f.judged_rows} of {f.rows} rows) " if f.host_floor_us is not None else "")
        if f.rows_note:  # the decode-sized DeepGEMM calls, on another framework's table of the same call
            rows = f"{f.rows_note}, "
        if f.vllm_held_out is not None:
            v = f.vllm_held_out
            held += (f"; the vLLM table's held-out fp8_block rows with every value as written {_pct(v['median_err'])} "
                     f"% (p90 {_pct(v['p90_err'])} %, bias {_bias(v['bias'])})")
        timed = "the collector times them eagerly" if f.host_floor_us is not None else "timed in a CUDA graph"
        limit = ""
        if f.power_limit is not None and f.held_out_without_limit is not None:
            w = f.held_out_without_limit
            without = (f"the same parameters without the power limit {_pct(w['median_err'])} % (p90 "
                       f"{_pct(w['p90_err'])} %, bias {_bias(w['bias'])})")
            limit = ", with this chip's power_limit fitted after them and held (they refitted with it)"
            held += f"; {without}"
            top["power_limit"] = f.power_limit
            sources["power_limit"] = (
                f"fitted by `{cmd}` (roofline.calibration.gemm_format_fit.fit_power_limit: the threshold on a 0.25 ms "
                f"grid from 2 to 8 ms, the clock factor minimizing the mean absolute log error with the format's "
                f"parameters held, then those refitted) on {PACKAGE} {version(PACKAGE)} systems/data/{f.table}, its "
                f"{f.gemm_dtype} rows ({f.kernel}, timed eagerly: 3 + 3 warm-up and 6 timed back-to-back calls) "
                f"{rows}whose (n, k) CRC32 is not 0 mod 5 ({f.train_rows} rows); held-out median error of the "
                f"chip's fp8-block GEMMs {_pct(e['median_err'])} % (p90 {_pct(e['p90_err'])} %, bias "
                f"{_bias(e['bias'])}; {f.held_out_rows} rows), {without}. "
                + POWER_LIMIT_EVIDENCE.get(chip, POWER_LIMIT_EVIDENCE[""]))
        text = (f"fitted with {keys} by `{cmd}` (roofline.calibration.gemm_format_fit) on {PACKAGE} "
                f"{version(PACKAGE)} systems/data/{f.table}, its {f.gemm_dtype} rows ({f.kernel}; {timed}) {rows}"
                f"whose (n, k) CRC32 is not 0 mod 5{limit}; {held}")
        efficiency.update(f.values)
        sources.update({f"efficiency.{k}": text for k in f.values})
        report.append(f"{chip} {f.gemm_dtype}: {f.values}" + (f" power_limit {f.power_limit}" if f.power_limit else "")
                      + f"; held out ({f.held_out_rows} rows) {_pct(e['median_err'])} / {_pct(e['p90_err'])} % "
                      f"(bias {_bias(e['bias'])})" + (f"; calls < {POWER_THROTTLE_CALL_S * 1e3:g} ms: "
                                                    f"{_pct(f.held_out_short['median_err'])} % "
                                                    f"({f.held_out_short_rows} rows)" if f.held_out_short else ""))
    return ChipWrite(chip, efficiency, sources, top, tuple(report))


# ---- moe-formats ----------------------------------------------------------------------------------------------

# What each format's fit describes (the kernel vLLM runs and how roofline.cost.kernels.moe times it).
MOE_FORMAT_NOTES = {
    "fp8-block": "block-scaled fp8 experts, timed as roofline.cost.kernels.moe describes the family's kernel",
    "fp8-block-triton": "block-scaled fp8 experts on vLLM's Triton fused MoE (--moe-backend triton), timed as "
                        "roofline.cost.kernels.moe._triton_fp8_block_gemms_s describes it (vLLM's default config's "
                        "row block of 16 up to 64 tokens and 64 above, no finalize kernel)",
    "nvfp4": "NVFP4 experts (FlashInfer TRT-LLM with its token tiles and finalize pass, roofline.cost.kernels.moe)",
    "mxfp4": "MXFP4 experts with bf16 activations (gpt-oss's), timed as roofline.cost.kernels.moe describes the "
             "family's kernel (OAI Triton; or FlashInfer TRT-LLM mxfp4-bf16: bf16 math on 4-bit weights, its token "
             "tiles each re-reading its weight tile, experts padded to 256)",
    "mxfp4-mxfp8": "MXFP4 experts with MXFP8 activations (FlashInfer TRT-LLM: MXFP8 input quantization, fp8 x fp4 "
                   "math at the fp8 peak, its token tiles each re-reading its weight tile, experts padded to 256)",
    "mxfp4-marlin": "vLLM's Marlin MoE kernel (csrc/moe/marlin_moe_wna16) on MXFP4 and int4 experts, timed as "
                    "roofline.cost.kernels.moe describes it (vLLM's block_size_m rule, the kernel's stripes, its "
                    "slice steps, the weights dequantized per moe block at the weight type's rate per SM, streamed "
                    "beside the conversion at its own overlap exponent)",
}


def _moe_writes(chip: str, formats: frozenset[str] | None = None) -> ChipWrite:
    from roofline.calibration.moe_format_fit import fit_moe_formats

    efficiency: dict[str, float] = {}
    sources: dict[str, str] = {}
    report = []
    cmd = command("moe-formats", chip)
    for scheme, f in fit_moe_formats(chip, formats=formats).items():
        what = (f"{PACKAGE} {version(PACKAGE)} systems/data/{f.table}, its {' and '.join(f.dtypes)} rows "
                f"({', '.join(f.kernels)}; no expert parallelism)")
        if f.ep_rows:
            what += (f", and moe_triton_masked_row_efficiency with the other three held on its balanced moe_ep rows "
                     f"of the same shapes ({f.ep_rows} rows: the rank's experts of the collector's expert map, every "
                     f"routed row through roofline.cost.kernels.moe.triton_masked_rows_s)")
        if f.how == "per_chip":
            held = "; ".join(f"{dist} {_pct(e['median_err'])} % (p90 {_pct(e['p90_err'])} %, bias {_bias(e['bias'])})"
                             for dist, e in f.held_out.items())
            text = (f"fitted by `{cmd}` (roofline.calibration.moe_format_fit: this chip alone, median absolute log "
                    f"error) on {what}, the balanced rows of the shapes whose CRC32 is not 0 mod 5 ({f.fit_rows} "
                    f"rows, {f.fit_shapes} shapes), routed as the collector routes them (roofline.calibration."
                    f"moe_routing), the bandwidth factor capped at the DRAM peak; {MOE_FORMAT_NOTES[scheme]}; "
                    f"held-out median error by routing: {held}")
            report.append(f"{chip} {scheme}: {f.values}; held out: {held}")
        else:
            loss = "median" if scheme == "mxfp4-marlin" else "mean"
            shared = ("the fixed cost, the slice step, the int4 / fp4 dequantization rates per SM and the overlap "
                      "exponent of the weight stream with the conversion"
                      if scheme == "mxfp4-marlin" else "the fixed cost")
            text = (f"fitted by `{cmd}` (roofline.calibration.moe_format_fit.fit_family_format: {shared} "
                    f"shared by {', '.join(f.family_systems)}, fitted on their rows together, the two factors on "
                    f"this chip's; {loss} absolute log error) on {what}, every balanced row ({f.fit_rows} rows, "
                    f"{f.fit_shapes} shapes), routed as the collector routes them (roofline.calibration.moe_routing); "
                    f"{MOE_FORMAT_NOTES[scheme]}; held-out (leave one shape out) error: BENCHMARKS.md 'MoE "
                    "operators' (benchmarks/accuracy/moe_accuracy.py)")
            report.append(f"{chip} {scheme}: {f.values} (family fit on every shape)")
        efficiency.update(f.values)
        sources.update({f"efficiency.{k}": text for k in f.values})
    return ChipWrite(chip, efficiency, sources, {}, tuple(report))


def _moe_family_write(family: str, reference: ChipWrite) -> ChipWrite:
    """The family file's MoE format values: its reference chip's (module docstring)."""
    sources = {k: f"the fit of {reference.target}, the {family} family's reference chip, for the family's chips "
                  f"without tables: {text}" for k, text in reference.sources.items()}
    return ChipWrite(f"{FAMILIES_DIR}/{family}", dict(reference.efficiency), sources, {},
                     (f"{family} (family file): {reference.target}'s values",))


# ---- mla ------------------------------------------------------------------------------------------------------


def _mla_writes(chips: list[str]) -> list[ChipWrite]:
    from roofline.calibration.mla_fit import (
        FIT_ON,
        GPUS,
        LEGACY_HELD,
        LEGACY_PARAMS,
        fit_mla_chip,
        legacy_collector,
        newest_version,
        yaml_values,
    )

    systems = {pid: system for system, pid in GPUS.items()}
    reference: dict[str, float] | None = None
    out = []
    todo = [systems[c] for c in chips]
    needs_b200 = any(s in FIT_ON or legacy_collector(s) for s in todo)
    order = (["b200_sxm"] if needs_b200 else []) + [s for s in todo if s != "b200_sxm"]
    for system in order:
        _, values, report = fit_mla_chip(system, reference)
        if system == "b200_sxm":
            reference = values
        if GPUS[system] not in chips:
            continue
        chip = GPUS[system]
        med, p90 = next((m, p) for split, phase, m, p, _ in report if (split, phase) == ("held-out", "all"))
        version_ = newest_version(system)
        tables = (f"{PACKAGE} {version(PACKAGE)} systems/data/{system}/mla/vllm/{version_}/"
                  "mla_context_module_perf.parquet and mla_generation_module_perf.parquet (vLLM's default MLA "
                  "kernels, bf16 prefill queries)")
        error = f"held-out (heads 4 and 16) median error {100 * med:.1f} % (p90 {100 * p90:.1f} %)"
        cmd = command("mla", chip)
        collector = (f"the legacy collector's own time (its native custom ops: aiconfigurator commit c56db49f) "
                     f"fitted as {', '.join(n for n in LEGACY_PARAMS if n in values)} (a table condition, never used "
                     "in serving)")
        if system in FIT_ON:
            source = (f"{GPUS[FIT_ON[system]]}'s kernel fields, written by `{cmd}` (roofline.calibration.mla_fit "
                      f"FIT_ON: the same kernels; this chip's tables are legacy collections): of {tables}, the "
                      f"per-rank head counts whose CRC32 is not 0 mod 4 fit only {collector}; {error}")
        else:
            legacy = (f"; legacy collector: {', '.join(LEGACY_HELD)} held at b200's fit at 90e57ce "
                      f"(roofline.calibration.mla_fit LEGACY_HELD_S), {collector}"
                      if legacy_collector(system) else "")
            source = (f"fitted by `{cmd}` (roofline.calibration.mla_fit) on {tables}, the per-rank head counts "
                      f"whose CRC32 is not 0 mod 4{legacy}; {error}")
        eff = yaml_values(values)
        lines = tuple(f"{chip} mla {split} {phase}: median {100 * m:.1f} % p90 {100 * p:.1f} % ({n} rows)"
                      for split, phase, m, p, n in report)
        out.append(ChipWrite(chip, eff, {f"efficiency.{k}": source for k in eff}, {}, (f"{chip} mla: {eff}",) + lines))
    return out


# ---- all-to-all -----------------------------------------------------------------------------------------------


def _a2a_writes(chip: str) -> ChipWrite:
    from roofline.calibration.all_to_all_fit import _yaml_value, fit_chip, report_lines, source_text
    from roofline.cost.params import EFFICIENCY_PARAMS

    r = fit_chip(chip)
    source = source_text(r).replace('"', "'")
    eff = {EFFICIENCY_PARAMS[n].key: float(_yaml_value(n, v)) for n, v in r.values.items()}
    return ChipWrite(chip, eff, {f"efficiency.{k}": source for k in eff}, {}, tuple(report_lines(r)))


# ---- dispatch -------------------------------------------------------------------------------------------------


def _system(chip: str) -> str:
    system = read_profile_dict(resolve("hardware", chip)).get("operator_tables")
    if not system:
        raise UserError(f"--chip: {chip} names no operator_tables in its profile; nothing to fit")
    return str(system)


def chips_for(op: str) -> dict[str, str]:
    """chip id -> family, of the shipped chips `op` fits (in the order the op's fits run)."""
    if op in ("gemm-formats", "moe-formats"):
        from roofline.calibration.moe_fits import GPUS
        chips = list(GPUS.values())
    elif op == "mla":
        from roofline.calibration.mla_fit import GPUS as MLA_GPUS
        chips = list(MLA_GPUS.values())
    else:
        from roofline.calibration.all_to_all_fit import chips_with_tables
        chips = list(chips_with_tables())
    return {c: str(read_profile_dict(resolve("hardware", c)).get("family") or "") for c in chips}


def select_chips(op: str, chip: str | None, family: str | None) -> list[str]:
    """The chips `--op op` with `--chip` / `--family` (or neither: every one) fits; one line naming the allowed
    values otherwise."""
    if op not in OPS:
        raise UserError(f"--op: {op!r} is not allowed; allowed: {', '.join(OPS)}")
    chips = chips_for(op)
    if chip is not None:
        if chip not in chips:
            raise UserError(f"--chip: {chip!r} has no tables for --op {op}; allowed: {', '.join(chips)}")
        return [chip]
    if family is not None:
        members = [c for c, f in chips.items() if f == family]
        if not members:
            families = sorted({f for f in chips.values() if f})
            raise UserError(f"--family: {family!r} has no chip with tables for --op {op}; allowed: "
                            f"{', '.join(families)}")
        return members
    return list(chips)


def fit_op(op: str, chips: list[str], family: str | None = None,
           log: Callable[[str], None] = lambda _: None, formats: frozenset[str] | None = None) -> list[ChipWrite]:
    """The writes of `op`'s fit of `chips` (and, for moe-formats with `family`, the family file's); `formats`:
    moe-formats only, these formats (`moe_fits.FITTED`'s keys) only."""
    if op == "mla":
        return _mla_writes(chips)
    fitters: dict[str, Callable[[str], ChipWrite]] = {
        "gemm-formats": _gemm_writes, "moe-formats": lambda chip: _moe_writes(chip, formats),
        "all-to-all": _a2a_writes}
    fitter = fitters[op]
    out = []
    for chip in chips:
        log(f"{op}: fitting {chip}")
        out.append(fitter(chip))
    if op == "moe-formats" and family is not None:
        out.append(_moe_family_write(family, out[0]))
    return out
