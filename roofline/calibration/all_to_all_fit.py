"""Fit expert parallelism's dispatch / combine kernels (`roofline.cost.kernels.all_to_all`) per chip on
aiconfigurator-core's measured tables, held out by shape, and write the fitted values into the chip profiles.

    roofline calibrate --op-tables --all-to-all            # fit every chip whose tables have them; print the errors
    roofline calibrate --op-tables --all-to-all --write    # and write them into hardware_profiles/<chip>.yaml

    r = fit_chip("h200-sxm")     # values, train / held-out error per backend and phase

Tables (read from the installed package, newest version each): `systems/data/<gpu>/comm/vllm/<v>/moe_a2a_perf.parquet`
(vLLM's DeepEP high-throughput and low-latency dispatch and combine, one node: EP 8, GB200 EP 4; per-rank token
counts 1-65536; hidden 3072-7168, top-6/8 of 256/384 experts; columns `latency` in us) and
`systems/data/<gpu>/comm/nccl/<v>/nccl_perf.parquet` (NCCL all-gather and reduce-scatter of fp16 buffers over 2, 4
and 8 GPUs, `message_size` in elements, `latency` in ms): the two halves of vLLM's default allgather_reducescatter
backend. Held out: DeepEP rows of the (hidden, topk, num_experts) shapes whose CRC32 is 0 mod 3, NCCL rows of the
message sizes whose CRC32 is 0 mod 3; never fitted on. Fit: `roofline.calibration.fit.fit` (log residuals, soft-L1).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofline.calibration.fit import fit
from roofline.calibration.op_tables import package_root
from roofline.calibration.profile_writer import write_profile_values
from roofline.cost.hardware import HardwareProfile, load_profile, read_profile_dict
from roofline.cost.kernels.all_to_all import TABLE_BACKENDS, a2a_time_s, nccl_collective_time_s
from roofline.cost.params import EFFICIENCY_PARAMS, stage_fields
from roofline.errors import UserError
from roofline.registry import list_ids, resolve

PARAMS = stage_fields("all_to_all")
NCCL_OPS = ("all_gather", "reduce_scatter")
BACKEND_LABELS = ("allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency")


def _newest(folder: Path, name: str) -> Path | None:
    found = [p for p in folder.glob(f"*/{name}")]
    if not found:
        return None
    return max(found, key=lambda p: tuple(int(x) if x.isdigit() else 0 for x in p.parent.name.split(".")))


def _held_out(key: str) -> bool:
    return zlib.crc32(key.encode()) % 3 == 0


def load_a2a_tables(system: str, root: Path | None = None) -> pd.DataFrame:
    """One frame of the chip's DeepEP and NCCL rows: columns op (a timed backend, or nccl's op), phase, tokens,
    hidden, topk, num_experts, ep_size, message_bytes, measured_s, held_out, table."""
    base = (root or package_root()) / system / "comm"
    frames = []
    a2a = _newest(base / "vllm", "moe_a2a_perf.parquet")
    if a2a is not None:
        d = pd.read_parquet(a2a)
        d = d[d.comm_backend.isin(list(TABLE_BACKENDS)) & (d.node_num == 1)]
        shape = d.hidden_size.astype(str) + "-" + d.topk.astype(str) + "-" + d.num_experts.astype(str)
        frames.append(pd.DataFrame({
            "op": d.comm_backend.map(TABLE_BACKENDS), "phase": d.phase, "tokens": d.num_tokens.astype(float),
            "hidden": d.hidden_size.astype(float), "topk": d.topk.astype(float),
            "num_experts": d.num_experts.astype(float), "ep_size": d.ep_size.astype(float), "message_bytes": 0.0,
            "measured_s": d.latency * 1e-6, "held_out": shape.map(_held_out),
            "table": str(a2a.relative_to(base.parent.parent))}))
    nccl = _newest(base / "nccl", "nccl_perf.parquet")
    if nccl is not None:
        d = pd.read_parquet(nccl)
        d = d[d.op_name.isin(NCCL_OPS) & (d.nccl_dtype == "half")]
        frames.append(pd.DataFrame({
            "op": d.op_name, "phase": "", "tokens": 0.0, "hidden": 0.0, "topk": 0.0, "num_experts": 0.0,
            "ep_size": d.num_gpus.astype(float), "message_bytes": d.message_size.astype(float) * 2.0,
            "measured_s": d.latency * 1e-3, "held_out": d.message_size.astype(str).map(_held_out),
            "table": str(nccl.relative_to(base.parent.parent))}))
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def predict(hw: HardwareProfile, frame: pd.DataFrame) -> np.ndarray:
    out = np.zeros(len(frame))
    for (op, phase), part in frame.groupby(["op", "phase"], sort=True):
        rows = frame.index.get_indexer(part.index)
        if op in NCCL_OPS:
            out[rows] = nccl_collective_time_s(hw, str(op), part.message_bytes.to_numpy(), part.ep_size.to_numpy())
        else:
            out[rows] = a2a_time_s(hw, str(op), str(phase), part.tokens.to_numpy(), part.hidden.to_numpy(),
                                   part.topk.to_numpy(), part.num_experts.to_numpy(), part.ep_size.to_numpy())
    return out


def _stats(pred: np.ndarray, measured: np.ndarray) -> dict[str, Any]:
    err = pred / measured - 1.0
    return {"median_pct": round(100 * float(np.median(np.abs(err))), 1),
            "p90_pct": round(100 * float(np.percentile(np.abs(err), 90)), 1),
            "bias_pct": round(100 * float(np.median(err)), 1), "num_rows": int(err.size)}


@dataclass(frozen=True)
class ChipFit:
    chip: str
    system: str
    tables: tuple[str, ...]
    values: dict[str, float]  # SI
    errors: list[dict[str, Any]]  # per (op, phase, split)
    held_out_by_group: dict[str, dict[str, Any]]  # "deepep_high_throughput dispatch" -> stats


def chips_with_tables() -> dict[str, str]:
    """chip id -> aiconfigurator system, for the shipped chips whose system has an all-to-all or NCCL table."""
    out = {}
    for pid in list_ids("hardware"):
        system = read_profile_dict(resolve("hardware", pid)).get("operator_tables")
        if system and not load_a2a_tables(system).empty:
            out[pid] = system
    return out


def fit_chip(chip: str, system: str | None = None) -> ChipFit:
    hw = load_profile(chip)
    system = system or read_profile_dict(resolve("hardware", chip)).get("operator_tables")
    if not system:
        raise UserError(f"{chip}: its profile names no operator_tables")
    d = load_a2a_tables(system)
    if d.empty:
        raise UserError(f"{chip}: {system} has no moe_a2a or nccl table")
    present = set(d.op) | {f"{o}_{p}" for o, p in zip(d.op, d.phase)}
    names = [n for n in PARAMS if _exercised(n, present)]
    train = d[~d.held_out].reset_index(drop=True)
    samples = [("a2a", {"row": i}, float(m)) for i, m in enumerate(train.measured_s)]
    result = fit(samples, hw, [f"efficiency.{n}" for n in names],
                 predict=lambda p, _k, f: predict(p, train.iloc[f["row"].to_numpy()].reset_index(drop=True)))
    fitted = result.profile
    errors, held = [], {}
    pred_all, measured = predict(fitted, d), d.measured_s.to_numpy()
    # Per backend (both phases pooled; NCCL's all-gather and reduce-scatter are allgather_reducescatter's), then
    # per phase.
    backend = d.op.where(~d.op.isin(NCCL_OPS), "allgather_reducescatter")
    groups = [(b, (backend == b).to_numpy()) for b in sorted(set(backend))]
    groups += [(f"{o} {p}".strip(), ((d.op == o) & (d.phase == p)).to_numpy())
               for o, p in sorted(set(zip(d.op, d.phase)))]
    for label, sel in groups:
        for split, mask in (("train", ~d.held_out.to_numpy()), ("held-out", d.held_out.to_numpy())):
            rows = sel & mask
            if rows.any():
                stats = _stats(pred_all[rows], measured[rows])
                errors.append({"op": label, "split": split, **stats})
                if split == "held-out" and label in BACKEND_LABELS:
                    held[label] = stats
    return ChipFit(chip=chip, system=system, tables=tuple(sorted(set(d.table))),
                   values={n.split(".", 1)[1]: v for n, v in result.values.items()}, errors=errors,
                   held_out_by_group=held)


def _exercised(name: str, present: set[str]) -> bool:
    if name.startswith("deepep_ht"):
        return any(f"deepep_high_throughput_{p}" in present and f"_{p}_" in name for p in ("dispatch", "combine"))
    if name.startswith("deepep_ll"):
        return any(f"deepep_low_latency_{p}" in present and f"_{p}_" in name for p in ("dispatch", "combine"))
    if name.startswith("nccl_ag_rs"):
        return bool({"all_gather", "reduce_scatter"} & present)
    if name.startswith("nccl_ag"):
        return "all_gather" in present
    return "reduce_scatter" in present


def _yaml_value(name: str, value: float) -> str:
    spec = EFFICIENCY_PARAMS[name]
    text = f"{value / spec.scale:.4g}"
    if "e" in text and "." not in text.split("e")[0]:  # YAML 1.1 reads 1e-06 as a string, 1.0e-06 as a number
        text = text.replace("e", ".0e", 1)
    return text


def source_text(r: ChipFit) -> str:
    held = "; ".join(f"{k} {v['median_pct']} % (p90 {v['p90_pct']} %)" for k, v in r.held_out_by_group.items())
    from importlib.metadata import version
    return (f"fitted by roofline calibrate --op-tables --all-to-all on aiconfigurator-core {version('aiconfigurator-core')} "
            f"systems/data/{' and '.join(r.tables)} (DeepEP rows: the (hidden, topk, experts) shapes whose CRC32 is "
            f"not 0 mod 3; NCCL rows: the message sizes whose CRC32 is not 0 mod 3); held-out median error {held}")


def write_chip(r: ChipFit, path: Path | None = None) -> Path:
    """Write the fitted values and their sources into the chip's profile YAML (`path`: another copy of it), in
    place (`roofline.calibration.profile_writer`)."""
    path = path or resolve("hardware", r.chip)
    source = source_text(r).replace('"', "'")
    write_profile_values(path, {EFFICIENCY_PARAMS[n].key: float(_yaml_value(n, v)) for n, v in r.values.items()},
                         {f"efficiency.{EFFICIENCY_PARAMS[n].key}": source for n in r.values})
    load_profile(path)  # the written file reads back
    return path


def report_lines(r: ChipFit) -> list[str]:
    lines = [f"{r.chip} ({r.system}): " + ", ".join(f"{EFFICIENCY_PARAMS[n].key}={_yaml_value(n, v)}"
                                                   for n, v in r.values.items())]
    for e in r.errors:
        lines.append(f"  {e['op']:36} {e['split']:9} median {e['median_pct']:5.1f} %  p90 {e['p90_pct']:5.1f} %  "
                     f"bias {e['bias_pct']:+6.1f} %  rows {e['num_rows']}")
    return lines
