"""The measurement protocol for a host whose speed drifts: repeats of one workload, interleaved in time with other
measurements, pooled per shape, and the noise floor left one repeat out.

    roofline measure --out traces/a --repeats 3 ...            # three repeats of workload A in one engine session
    roofline measure --out traces/a --append ...               # one more repeat of A, e.g. after one of B
    traces = load_traces("traces/a")                           # [Trace] of every repeat (a plain trace: [it])
    floor, _ = noise_floor_of_repeats(traces)                  # leave-one-repeat-out, pooled per shape

A host like this project's CI machine changes speed by 10-35 % between runs a minute apart (memory-bandwidth
contention from its neighbours), so one run's per-shape medians predict a repeat a minute later no better than a
cost model does. What a model can be held to is the error of a perfect deterministic model of step time judged on
data it did not see: each repeat's steps predicted by the median time of the steps of the same shape in the
other repeats, pooled (leave one repeat out). Repeats taken back to back share one drift level and understate
it; repeats interleaved in time with other workloads (`--append` between measurements of another workload, or
of the other engine) sample the drift the held-out judgement meets.

A repeat set is a directory with `protocol.json` (what was repeated and when each repeat started, UTC) and one
step trace per repeat (`repeat-1/`, `repeat-2/`, ...: docs/step_trace.md). `noise_floor.json` beside them holds
the leave-one-repeat-out floor per step kind and the spread of the end-to-end figures across repeats; `measure`
rewrites it after every repeat, and `compare` and `calibrate` compute it again from the traces they read.

A step's shape (`shape_keys`): its kind (prefill, decode, mixed), its number of sequences, and its batched,
prefill and context tokens in buckets of 1/16 octave (about 4.4 % wide) above 64 tokens, exact below: fine
enough that shapes within one bucket differ in predicted time by a few percent at most, coarse enough that an
open-loop workload's steps recur across repeats. A shape needs `MIN_OTHER_REPEAT_STEPS` steps in the other
repeats to predict a step; the floor reports how many steps were covered.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofline.calibration.traces import Trace, load_trace
from roofline.errors import UserError
from roofline.jsonable import to_json
from roofline.sim.metrics import run_figures

PROTOCOL_FILE = "protocol.json"
NOISE_FLOOR_FILE = "noise_floor.json"
REPEAT_PREFIX = "repeat-"
SCHEMA_VERSION = 1
STEP_KINDS = ("prefill", "decode", "mixed")
EXACT_BELOW_TOKENS = 64
BUCKETS_PER_OCTAVE = 16
MIN_GROUP_STEPS = 3  # a shape's steps for a median that includes the step predicted (the floor within one run)
MIN_OTHER_REPEAT_STEPS = 2  # ... and in the other repeats, which never hold the step predicted
# The end-to-end figures whose spread across repeats bounds an end-to-end comparison.
E2E_FIGURES = ("output_tokens_per_s", "mean_tpot_s", "mean_ttft_s")


# ---- step shapes and pooled medians ---------------------------------------------------------------------------


def step_kinds(steps: pd.DataFrame) -> np.ndarray:
    """`prefill`, `decode` or `mixed` per step, from its prefill and decode token counts."""
    prefill = steps["num_prefill_tokens"].to_numpy() > 0
    decode = steps["num_decode_tokens"].to_numpy() > 0
    return np.where(prefill & decode, "mixed", np.where(prefill, "prefill", "decode"))


def _bucket(tokens: np.ndarray) -> np.ndarray:
    """Exact below EXACT_BELOW_TOKENS, then 1/BUCKETS_PER_OCTAVE octave buckets (offset so the two never meet)."""
    tokens = np.asarray(tokens, np.int64)
    logs = np.floor(np.log2(np.maximum(tokens, 1)) * BUCKETS_PER_OCTAVE).astype(np.int64)
    return np.where(tokens < EXACT_BELOW_TOKENS, tokens, EXACT_BELOW_TOKENS + logs)


def shape_keys(steps: pd.DataFrame) -> list[tuple[str, int, int, int, int]]:
    """(kind, sequences, batched-token bucket, prefill-token bucket, context-token bucket) per step."""
    context = np.array([int(np.sum(c)) for c in steps["context_lens"]], dtype=np.int64)
    return list(zip(step_kinds(steps).tolist(), steps["num_seqs"].astype(int).tolist(),
                    _bucket(steps["num_batched_tokens"].to_numpy()).tolist(),
                    _bucket(steps["num_prefill_tokens"].to_numpy()).tolist(), _bucket(context).tolist()))


def per_shape_medians(traces: Sequence[Trace], min_steps: int = MIN_GROUP_STEPS) -> dict[tuple, float]:
    """The median duration of each shape over the steps of `traces` pooled, for shapes with `min_steps` steps."""
    groups: dict[tuple, list[float]] = {}
    for trace in traces:
        for key, d in zip(shape_keys(trace.steps), trace.steps["duration_s"].tolist()):
            groups.setdefault(key, []).append(d)
    return {k: float(np.median(v)) for k, v in groups.items() if len(v) >= min_steps}


def oracle_pairs(medians: dict[tuple, float], trace: Trace) -> pd.DataFrame:
    """`trace`'s steps that have a shape in `medians`: step row, kind, oracle prediction and measured seconds."""
    rows = [(i, key[0], medians[key], d) for i, (key, d) in
            enumerate(zip(shape_keys(trace.steps), trace.steps["duration_s"].tolist())) if key in medians]
    return pd.DataFrame(rows, columns=["row", "kind", "predicted_s", "measured_s"])


def error_stats(predicted_s: Any, measured_s: Any) -> dict[str, float | int | None]:
    """Median, p90 and max absolute relative error and the mean signed error (bias) of paired times."""
    rel = np.asarray(predicted_s, np.float64) / np.asarray(measured_s, np.float64) - 1.0
    if len(rel) == 0:
        return {"num_steps": 0, "median_abs_rel_err": None, "p90_abs_rel_err": None, "max_abs_rel_err": None,
                "mean_rel_err": None}
    err = np.abs(rel)
    return {"num_steps": int(len(rel)), "median_abs_rel_err": float(np.median(err)),
            "p90_abs_rel_err": float(np.percentile(err, 90)), "max_abs_rel_err": float(err.max()),
            "mean_rel_err": float(rel.mean())}


def stats_by_kind(frame: pd.DataFrame) -> dict[str, Any]:
    """error_stats of a frame with kind, predicted_s and measured_s columns: overall, then `by_kind`."""
    stats: dict[str, Any] = dict(error_stats(frame["predicted_s"], frame["measured_s"]))
    stats["by_kind"] = {kind: error_stats(frame.loc[frame["kind"] == kind, "predicted_s"],
                                          frame.loc[frame["kind"] == kind, "measured_s"]) for kind in STEP_KINDS}
    return stats


# ---- the noise floor -------------------------------------------------------------------------------------------


def leave_one_repeat_out(traces: Sequence[Trace]) -> tuple[dict[str, Any], list[pd.DataFrame]]:
    """The floor pooled over the repeats (each predicted by the others' per-shape medians), with the steps it
    covered, and the per-repeat pairs (`oracle_pairs` frames, in repeat order)."""
    pairs = []
    for k, trace in enumerate(traces):
        others = [t for j, t in enumerate(traces) if j != k]
        pairs.append(oracle_pairs(per_shape_medians(others, MIN_OTHER_REPEAT_STEPS), trace))
    pooled = pd.concat(pairs, ignore_index=True)
    stats = stats_by_kind(pooled)
    stats["num_steps_in_repeats"] = int(sum(len(t.steps) for t in traces))
    stats["per_repeat"] = [{"repeat": t.name, **error_stats(p["predicted_s"], p["measured_s"])}
                           for t, p in zip(traces, pairs)]
    return stats, pairs


def end_to_end_spread(traces: Sequence[Trace]) -> dict[str, Any]:
    """Per figure of E2E_FIGURES: each repeat's measured value, their median and the spread (max - min) / median:
    how far two measurements of the same workload on this host differ end to end."""
    figures = [run_figures(t.requests) if t.requests is not None and len(t.requests) else None for t in traces]
    out: dict[str, Any] = {}
    for name in E2E_FIGURES:
        values = [None if f is None else f[name] for f in figures]
        known = [v for v in values if v is not None and math.isfinite(v)]
        median = float(np.median(known)) if known else None
        spread = (max(known) - min(known)) / median if len(known) >= 2 and median else None
        out[name] = {"per_repeat": values, "median": median, "spread": spread}
    return out


def noise_floor_of_repeats(traces: Sequence[Trace]) -> tuple[dict[str, Any], list[pd.DataFrame]]:
    """The leave-one-repeat-out step-time floor and the end-to-end spread of a repeat set (two repeats at least),
    and the per-repeat pairs the floor was computed on (`leave_one_repeat_out`)."""
    if len(traces) < 2:
        raise UserError(f"{traces[0].path if traces else 'the trace'}: the noise floor across repeats needs at least "
                        "two repeats of the workload (roofline measure --repeats N, or --append)")
    check_same_workload(traces)
    steps, pairs = leave_one_repeat_out(traces)
    return {"method": "leave one repeat out: each repeat's steps predicted by the median time of the steps of "
                      "the same shape in the other repeats pooled (roofline.calibration.protocol)",
            "num_repeats": len(traces), "repeats": [t.name for t in traces],
            "min_group_steps": MIN_OTHER_REPEAT_STEPS, "buckets_per_octave": BUCKETS_PER_OCTAVE,
            "steps": steps, "end_to_end": end_to_end_spread(traces)}, pairs


def format_noise_floor(floor: dict[str, Any], indent: str = "  ") -> list[str]:
    """Human lines: the floor overall and per kind, then the end-to-end spread."""
    s = floor["steps"]
    lines = [f"noise floor, leave one of {floor['num_repeats']} repeats out ({s['num_steps']} of "
             f"{s['num_steps_in_repeats']} steps have a shape in the other repeats):"]
    for label, stats in [("all steps", s)] + [(k, s["by_kind"][k]) for k in STEP_KINDS]:
        if stats["num_steps"]:
            lines.append(f"{indent}{label:<10} median |err| {100 * stats['median_abs_rel_err']:5.1f} %  "
                         f"p90 {100 * stats['p90_abs_rel_err']:5.1f} %  bias {100 * stats['mean_rel_err']:+5.1f} %")
    spread = floor["end_to_end"]
    parts = [f"{name} {100 * spread[name]['spread']:.1f} %" for name in E2E_FIGURES
             if spread[name]["spread"] is not None]
    if parts:
        lines.append(f"{indent}end to end, (max - min) / median across repeats: " + ", ".join(parts))
    return lines


# ---- repeat sets on disk ---------------------------------------------------------------------------------------


def is_repeat_set(path: Path) -> bool:
    return (Path(path) / PROTOCOL_FILE).is_file()


def read_protocol(path: Path, flag: str = "--trace") -> dict[str, Any]:
    """protocol.json of a repeat set, validated: a UserError naming the flag, the file and the field."""
    where = f"{flag} {path}: {PROTOCOL_FILE}"
    try:
        data = json.loads((Path(path) / PROTOCOL_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{where}: not readable JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise UserError(f"{where}: schema_version must be {SCHEMA_VERSION}")
    repeats = data.get("repeats")
    if not isinstance(repeats, list) or not all(isinstance(r, dict) and isinstance(r.get("dir"), str) and
                                                r["dir"].startswith(REPEAT_PREFIX) for r in repeats):
        raise UserError(f"{where}: repeats must be a list of {{\"dir\": \"{REPEAT_PREFIX}<n>\", ...}}")
    return data


def load_traces(path: str | Path, flag: str = "--trace") -> list[Trace]:
    """The repeats of a repeat set in the order they were measured, or a plain trace directory as a list of one."""
    path = Path(path)
    if not is_repeat_set(path):
        return [load_trace(path, flag)]
    protocol = read_protocol(path, flag)
    if not protocol["repeats"]:
        raise UserError(f"{flag} {path}: {PROTOCOL_FILE} lists no repeat yet")
    traces = [load_trace(path / r["dir"], flag) for r in protocol["repeats"]]
    check_same_workload(traces, flag)
    return traces


def _run_identity(trace: Trace) -> dict[str, Any]:
    meta = trace.metadata
    return {"source": meta.source, "model": trace.spec.name, "workload": meta.workload,
            "engine_config": meta.engine_config.to_json(), "dtypes": meta.dtypes}


def check_same_workload(traces: Sequence[Trace], flag: str = "--trace") -> None:
    """Repeats of one set ran the same engine, model, workload and engine configuration."""
    first = _run_identity(traces[0])
    for trace in traces[1:]:
        other = _run_identity(trace)
        for key, value in first.items():
            if other[key] != value:
                if isinstance(value, dict) and isinstance(other[key], dict):
                    diff = sorted(k for k in value.keys() | other[key].keys() if value.get(k) != other[key].get(k))
                    what = ", ".join(f"{key}.{k} {other[key].get(k)!r} (not {value.get(k)!r})" for k in diff)
                else:
                    what = f"{key} {other[key]!r} (not {value!r})"
                raise UserError(f"{flag} {trace.path}: {what} as in {traces[0].path}; repeats of a set must "
                                "measure the same run")


def prepare_repeat_set(path: Path, append: bool, num_repeats: int, expected: dict[str, Any]) -> list[Path]:
    """The directories the next `num_repeats` repeats go to. A new set needs a missing or empty directory; with
    `append` an existing set grows (a plain trace directory cannot become one) if its first repeat ran what
    `expected` says (source, model and workload, checked before anything runs; the rest after)."""
    path = Path(path)
    if is_repeat_set(path):
        if not append:
            raise UserError(f"--out {path}: is a repeat set already; pass --append to add repeats to it, or "
                            "another directory")
        repeats = read_protocol(path, "--out")["repeats"]
        if repeats:
            first = _run_identity(load_trace(path / repeats[0]["dir"], "--out"))
            for key, value in expected.items():
                if first[key] != value:
                    raise UserError(f"--out {path}: its repeats ran {key} {first[key]!r}, this run would be "
                                    f"{value!r}; --append adds repeats of the same run")
        existing = len(repeats)
    else:
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise UserError(f"--out {path}: exists and is not a repeat set; repeats go to a new or empty directory")
        path.mkdir(parents=True, exist_ok=True)
        (path / PROTOCOL_FILE).write_text(to_json({"schema_version": SCHEMA_VERSION, "repeats": []}))
        existing = 0
    return [path / f"{REPEAT_PREFIX}{existing + i + 1}" for i in range(num_repeats)]


def record_repeat(path: Path, repeat_dir: Path, started: datetime) -> dict[str, Any] | None:
    """Add a written repeat to the set's protocol.json (checked against the earlier ones) and rewrite
    noise_floor.json; returns the floor once the set has two repeats."""
    protocol = read_protocol(path, "--out")
    protocol["repeats"].append({"dir": repeat_dir.name,
                                "started_utc": started.astimezone(timezone.utc).isoformat(timespec="seconds")})
    traces = [load_trace(path / r["dir"], "--out") for r in protocol["repeats"]]
    try:
        check_same_workload(traces, "--out")
    except UserError:
        shutil.rmtree(repeat_dir)  # not a repeat of this set: leave the set as it was
        raise
    (path / PROTOCOL_FILE).write_text(to_json(protocol))
    if len(traces) < 2:
        return None
    floor, _ = noise_floor_of_repeats(traces)
    (path / NOISE_FLOOR_FILE).write_text(to_json(floor))
    return floor
