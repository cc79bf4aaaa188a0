"""Fit a kernel family's efficiency parameters on the measured vLLM operator tables of all its GPUs.

    chips = {"h100_sxm": load_profile("h100-sxm"), "h200_sxm": load_profile("h200-sxm")}
    tables = {system: load_op_tables(system) for system in chips}
    result = fit_family(chips, tables)                 # FamilyFit: efficiency, per-GPU held-out errors
    logo = leave_one_gpu_out(chips, tables)            # each GPU predicted by a fit on the others

A kernel family (Hopper, Blackwell, Ampere, Ada) is the set of GPUs on which vLLM runs the same kernels (FA3,
cuBLAS and CUTLASS fp8 on Hopper; FlashInfer TRT-LLM on Blackwell; ...). Their efficiency parameters
(`roofline.cost.params.EfficiencyParams`: how close to its peaks a kernel runs, fixed costs per kernel, per
tile, per collective) are one set; the chips differ only in their datasheet numbers (peaks, bandwidth, SMs,
interconnect). So the parameters are fitted once, on the tables of every GPU of the family together, each row
predicted with its own chip's numbers.

Split: the distinct shape keys of each kind (`roofline.calibration.op_tables`: weight shape (n, k) for GEMM,
heads for attention, message size for all-reduce, MoE shape) over all GPUs of the family, halved by a seeded
permutation; a held-out shape is held out on every GPU. Fitted in the stages of
`roofline.calibration.calibrate.OP_TABLE_STAGES`, at most `MAX_TRAIN_ROWS_PER_KIND` training rows per kind in
all (a seeded subsample shared out evenly over the GPUs). Deterministic: same tables, same parameters.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from roofline.calibration.calibrate import OP_TABLE_STAGES, SPLIT_SEED, fit_stage, stage_params
from roofline.calibration.fit import Predict, Sample, predict_table
from roofline.cost.hardware import HardwareProfile
from roofline.cost.params import EfficiencyParams

MAX_TRAIN_ROWS_PER_KIND = 12000
# Operator kinds as reported (the targets of the profiles issue are per reported kind).
REPORTED_KINDS = {"gemm": ("gemm",), "attention": ("attention_prefill", "attention_decode"),
                  "all_reduce": ("all_reduce",), "moe": ("moe",)}
_SEP = "|"  # joins system and kind in the fit's sample kinds: "h100_sxm|gemm"


@dataclass(frozen=True)
class FamilyFit:
    efficiency: EfficiencyParams
    fitted_params: tuple[str, ...]  # EfficiencyParams fields the data set (others keep their starting value)
    stages: list[dict[str, Any]]  # per stage: kinds, rows, iterations, seconds
    fit_seconds: float


def split_tables(tables: Mapping[str, Mapping[str, pd.DataFrame]], seed: int = SPLIT_SEED
                 ) -> tuple[dict[str, dict[str, pd.DataFrame]], dict[str, dict[str, pd.DataFrame]]]:
    """(train, test) per system and kind: the shape keys of a kind over all systems halved by one seeded
    permutation, so a shape held out on one GPU is held out on all."""
    kinds = sorted({k for t in tables.values() for k in t})
    train: dict[str, dict[str, pd.DataFrame]] = {s: {} for s in tables}
    test: dict[str, dict[str, pd.DataFrame]] = {s: {} for s in tables}
    for kind in kinds:
        keys = np.array(sorted({key for t in tables.values() if kind in t for key in t[kind]["shape_key"]}))
        train_keys = set(np.random.default_rng(seed).permutation(keys)[: len(keys) // 2])
        for system, t in tables.items():
            if kind in t:
                frame = t[kind]
                is_train = frame["shape_key"].isin(train_keys).to_numpy()
                train[system][kind], test[system][kind] = frame[is_train], frame[~is_train]
    return train, test


def _samples(frame: pd.DataFrame, kind: str, max_rows: int) -> list[Sample]:
    if len(frame) > max_rows:
        frame = frame.sample(max_rows, random_state=SPLIT_SEED)
    cols = [c for c in frame.columns if c not in ("op", "measured_s", "shape_key", "kernel")]
    return [(kind, dict(zip(cols, row)), float(s)) for row, s in
            zip(frame[cols].itertuples(index=False), frame["measured_s"])]


def _predictor(chips: Mapping[str, HardwareProfile]) -> Predict:
    """predict(profile, "system|kind", frame): the rows of one system with that chip's numbers and the fitted
    profile's efficiency parameters."""

    def predict(profile: HardwareProfile, kind: str, frame: pd.DataFrame) -> np.ndarray:
        system, op_kind = kind.split(_SEP)
        return predict_table(replace(chips[system], efficiency=profile.efficiency), op_kind, frame)

    return predict


def fit_family(chips: Mapping[str, HardwareProfile], train: Mapping[str, Mapping[str, pd.DataFrame]],
               start: EfficiencyParams) -> FamilyFit:
    """Fit the `OP_TABLE_STAGES` parameters on the training rows of every system in `train` together (each
    predicted with `chips[system]`), stage after stage, starting from `start`."""
    systems = [s for s in train if train[s]]
    assert systems, "no training tables"
    profile = replace(chips[systems[0]], efficiency=start)
    predict = _predictor(chips)
    stages: list[dict[str, Any]] = []
    fitted: list[str] = []
    started = time.perf_counter()
    for stage, kinds, all_params in OP_TABLE_STAGES:
        params = stage_params(all_params, profile.family, any(chips[s].l2_cache_bytes is not None for s in systems))
        samples: list[Sample] = []
        for kind in kinds:
            having = [s for s in systems if kind in train[s]]
            for system in having:
                per_gpu = MAX_TRAIN_ROWS_PER_KIND // (len(having) * len(kinds))
                samples += _samples(train[system][kind], f"{system}{_SEP}{kind}", per_gpu)
        if not samples or not params:  # no rows, or nothing left to fit (`KernelFamily.fitted_elsewhere`)
            continue
        t0 = time.perf_counter()
        result = fit_stage(samples, profile, params, predict=predict)
        profile = result.profile
        fitted += [n.split(".")[1] for n in result.values]
        stages.append({"stage": stage, "num_rows": len(samples), "num_iterations": result.num_iterations,
                       "seconds": round(time.perf_counter() - t0, 1),
                       "train_median_abs_rel_err": result.train_median_abs_rel_err})
    return FamilyFit(efficiency=profile.efficiency, fitted_params=tuple(fitted), stages=stages,
                     fit_seconds=time.perf_counter() - started)


def _group(frame: pd.DataFrame, kind: str) -> pd.Series:
    group = frame["dtype"].astype(str)
    if "kv_dtype" in frame:
        group = "kv " + frame["kv_dtype"].astype(str)
    if kind == "all_reduce":
        group = frame["num_devices"].astype(int).astype(str) + " gpus"
    return group


def _stats(rel: np.ndarray) -> dict[str, Any]:
    err = np.abs(rel)
    return {"num_rows": int(len(rel)), "median_abs_rel_err": float(np.median(err)),
            "p90_abs_rel_err": float(np.percentile(err, 90)), "median_rel_err": float(np.median(rel))}


def signed_errors(hw: HardwareProfile, kind: str, frame: pd.DataFrame) -> np.ndarray:
    """predicted / measured - 1 per row."""
    return predict_table(hw, kind, frame) / frame["measured_s"].to_numpy(np.float64) - 1.0


def gpu_errors(hw: HardwareProfile, tables: Mapping[str, pd.DataFrame]) -> dict[str, Any]:
    """Error statistics of one GPU's rows (median / p90 absolute relative error, median signed error = bias):
    per reported kind (`REPORTED_KINDS`) and per (operator kind, group: dtype, KV dtype or GPU count)."""
    by_kind: dict[str, Any] = {}
    by_group: list[dict[str, Any]] = []
    for reported, kinds in REPORTED_KINDS.items():
        rels = []
        for kind in kinds:
            if kind not in tables:
                continue
            frame = tables[kind]
            rel = signed_errors(hw, kind, frame)
            rels.append(rel)
            group = _group(frame, kind).to_numpy()
            for name in sorted(set(group)):
                by_group.append({"kind": kind, "group": name, **_stats(rel[group == name])})
        if rels:
            by_kind[reported] = _stats(np.concatenate(rels))
    return {"by_kind": by_kind, "by_group": by_group}


def leave_one_gpu_out(chips: Mapping[str, HardwareProfile], train: Mapping[str, Mapping[str, pd.DataFrame]],
                      test: Mapping[str, Mapping[str, pd.DataFrame]], start: EfficiencyParams
                      ) -> dict[str, dict[str, Any]]:
    """For each system with tables (in a family of two or more): the family fitted on the other systems'
    training rows, then this system's held-out rows predicted with its own chip numbers."""
    systems = [s for s in train if train[s]]
    out: dict[str, dict[str, Any]] = {}
    if len(systems) < 2:
        return out
    for system in systems:
        others = {s: train[s] for s in systems if s != system}
        result = fit_family(chips, others, start)
        out[system] = gpu_errors(replace(chips[system], efficiency=result.efficiency), test[system])
    return out


# A chip's sustained SM clock factor (`HardwareProfile.sustained_clock_factor`) is searched in this range.
CLOCK_FACTOR_RANGE = (0.8, 1.25)


def fit_clock_factor(hw: HardwareProfile, frame: pd.DataFrame, f_scale: float = 0.1) -> float:
    """The `sustained_clock_factor` of one chip, fitted on its own GEMM table rows `frame` (at most
    `MAX_TRAIN_ROWS_PER_KIND`, a seeded subsample) with `hw`'s efficiency parameters held: the factor minimising
    the soft-L1 loss of log(predicted / measured) that `roofline.calibration.fit.fit` minimises, by golden-section
    search in log space over `CLOCK_FACTOR_RANGE` (one parameter, a unimodal loss in practice; deterministic)."""
    if len(frame) > MAX_TRAIN_ROWS_PER_KIND:
        frame = frame.sample(MAX_TRAIN_ROWS_PER_KIND, random_state=SPLIT_SEED)
    measured = frame["measured_s"].to_numpy(np.float64)

    def loss(log_factor: float) -> float:
        predicted = predict_table(replace(hw, sustained_clock_factor=float(np.exp(log_factor))), "gemm", frame)
        r = np.log(predicted / measured)
        return float(np.sum(2 * f_scale**2 * (np.sqrt(1 + (r / f_scale) ** 2) - 1)))

    lo, hi = np.log(CLOCK_FACTOR_RANGE[0]), np.log(CLOCK_FACTOR_RANGE[1])
    golden = (np.sqrt(5.0) - 1.0) / 2.0
    a, b = lo + (1 - golden) * (hi - lo), lo + golden * (hi - lo)
    loss_a, loss_b = loss(a), loss(b)
    while hi - lo > 1e-4:  # a factor to 0.01 %
        if loss_a < loss_b:
            hi, b, loss_b = b, a, loss_a
            a = lo + (1 - golden) * (hi - lo)
            loss_a = loss(a)
        else:
            lo, a, loss_a = a, b, loss_b
            b = lo + golden * (hi - lo)
            loss_b = loss(b)
    return float(np.exp((lo + hi) / 2))
