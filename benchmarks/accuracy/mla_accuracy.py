"""Held-out accuracy of the MLA attention model on aiconfigurator-core's vLLM MLA module tables, and its fit.

    python benchmarks/accuracy/mla_accuracy.py                    # fit the mla_* fields per GPU on the training shapes,
                                                         # report train / held-out median and p90 per GPU and phase
    python benchmarks/accuracy/mla_accuracy.py --gpus h200_sxm --print-yaml   # the fitted values as efficiency YAML lines

The tables (`systems/data/<gpu>/mla/vllm/<version>/mla_{context,generation}_module_perf.parquet`, read from the
installed package) time vLLM's whole `DeepseekV2MLAAttention` forward of DeepSeek-V3's shapes with 1-128 heads (one
tensor-parallel rank's share) in a CUDA graph (aiconfigurator `collector/vllm/collect_mla_module.py`): fused q/kv
down-projection, norms, q_b_proj, RoPE, the attention (prefill or absorbed decode), o_proj; context rows: `batch_size`
prompts of `isl` tokens, no cached context; generation rows: one token per sequence with `step` - 1 cached tokens.
Rows: the default kernels only (the decode backend vLLM picks for the row's KV dtype, `MLA_BACKENDS`; prefill query
compute in bf16, `mla_dtype` bfloat16), linear layers bf16, block fp8 or nvfp4 (`gemm_type`).

Predicted: the sum of the layer's operators (`roofline.cost.kernels.mla.mla_records` for one layer), the GEMMs and
elementwise kernels by the chip's fitted GEMM model (`roofline.cost.step_cost.op_time_s`), the two attention kernels
by `mla_prefill_time_s` / `mla_decode_time_s`. The replay condition of the tables (no L2 flush between replays): a
row whose working set (weights, latents, activations of the module) fits in the chip's L2 moves its bytes at
`l2_bandwidth_factor` x DRAM (`roofline.calibration.fit.warm_l2_profile`).

Held out by shape: the per-rank head counts whose CRC32 is 0 mod 4 (4 and 16: TP 32 and 8 of DeepSeek-V3's 128
heads, TP 16 and 4 of Kimi-K2's 64) are never fitted on. Fitted with `roofline.calibration.fit.fit` (log residuals,
soft-L1) on the rest: the nine `mla_*` efficiency fields per GPU (six where the tables have no fp8 KV cache).
"""

from __future__ import annotations

import argparse
import glob
import sys
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.core.model_spec import ModelSpec  # noqa: E402
from roofline.calibration.fit import fit, warm_l2_profile  # noqa: E402
from roofline.cost.hardware import HardwareProfile, load_profile  # noqa: E402
from roofline.cost.kernels.mla import (  # noqa: E402
    MlaBatch,
    mla_backend,
    mla_decode_time_s,
    mla_op_time_s,
    mla_prefill_time_s,
    mla_records,
)
from roofline.cost.params import _EFFICIENCY_YAML, stage_fields  # noqa: E402
from roofline.cost.quant import QuantConfig  # noqa: E402
from roofline.cost.step_cost import op_time_s  # noqa: E402
from roofline.registry import load_model  # noqa: E402

GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200",
        "l40s": "l40s"}
GEMM_TYPES = {"bfloat16": "none", "fp8_block": "fp8-block", "nvfp4": "nvfp4"}
MLA_PARAMS = stage_fields("mla")  # declaration order is the fit order
TARGET_MEDIAN, TARGET_P90 = 0.10, 0.25


def held_out(num_heads: int) -> bool:
    return zlib.crc32(str(int(num_heads)).encode()) % 4 == 0


def newest_version(gpu: str) -> str:
    import aiconfigurator_core
    root = Path(aiconfigurator_core.__file__).parent / "systems" / "data" / gpu / "mla" / "vllm"
    return max((Path(p).name for p in glob.glob(str(root / "*"))), key=lambda v: tuple(int(x) for x in v.split(".")))


def module_table(gpu: str) -> pd.DataFrame:
    """The newest vLLM MLA module tables of `gpu` (context and generation), default kernels, with `phase`,
    `measured_s` and `held_out`."""
    import aiconfigurator_core
    root = Path(aiconfigurator_core.__file__).parent / "systems" / "data" / gpu / "mla" / "vllm" / newest_version(gpu)
    frames = []
    for phase in ("context", "generation"):
        d = pd.read_parquet(root / f"mla_{phase}_module_perf.parquet")
        d = d[(d.mla_dtype == "bfloat16") & d.gemm_type.isin(list(GEMM_TYPES))].copy()
        d["phase"] = phase
        frames.append(d)
    d = pd.concat(frames, ignore_index=True)
    d["measured_s"] = d.latency.astype(float) * 1e-3
    d["held_out"] = [held_out(h) for h in d.num_heads]
    return d.reset_index(drop=True)


@dataclass(frozen=True)
class Components:
    """Per table row: the time of everything but the two MLA attention kernels (cold and L2-warm), the kernels'
    shapes, and whether the row's working set fits in the L2."""

    rest_s: np.ndarray
    rest_warm_s: np.ndarray
    warm: np.ndarray
    decode_shape: np.ndarray  # rows x 4, zeros where the row has no decode part
    prefill_shape: np.ndarray
    kv_fp8: np.ndarray
    has_decode: np.ndarray
    has_prefill: np.ndarray


def _spec(heads: int) -> ModelSpec:
    base = load_model("deepseek-v3")
    return replace(base, name=f"deepseek-v3-h{heads}", num_heads=heads, num_kv_heads=heads, num_layers=1,
                   num_dense_layers=1, checkpoint_quant=None)


def _batches(d: pd.DataFrame, family: str | None) -> list[MlaBatch]:
    out = []
    for row in d.itertuples():
        backend = mla_backend(family, row.kv_cache_dtype == "fp8")
        b = int(row.batch_size)
        if row.phase == "context":
            q, c = np.full(b, int(row.isl)), np.zeros(b, dtype=np.int64)
        else:
            q, c = np.ones(b, dtype=np.int64), np.full(b, int(row.step) - 1)
        out.append(MlaBatch.from_lengths(q, c, int(row.num_heads), backend.decode_threshold))
    return out


def components(hw: HardwareProfile, d: pd.DataFrame) -> Components:
    """Rows grouped by (heads, linear format, KV dtype, path): each group's operators timed at once, the batch sums
    as arrays (the cost model's functions take arrays)."""
    warm_hw = warm_l2_profile(hw)
    n = len(d)
    rest, rest_warm, warm = np.zeros(n), np.zeros(n), np.zeros(n, bool)
    dec, pre = np.zeros((n, 4)), np.zeros((n, 4))
    has_d, has_p = np.zeros(n, bool), np.zeros(n, bool)
    fp8 = (d.kv_cache_dtype == "fp8").to_numpy()
    l2 = hw.l2_cache_bytes or 0.0
    batches = _batches(d, hw.family)
    paths = np.array([(b.decode_tokens > 0, b.prefill_tokens > 0) for b in batches])
    keys = pd.DataFrame({"h": d.num_heads.to_numpy(), "g": d.gemm_type.to_numpy(), "kv": fp8,
                         "pd": paths[:, 0], "pp": paths[:, 1]})
    for (heads, gemm_type, kv_fp8, _, _), group in keys.groupby(["h", "g", "kv", "pd", "pp"]):
        idx = group.index.to_numpy()
        fields = {f: np.array([getattr(batches[i], f) for i in idx], dtype=np.float64)
                  for f in MlaBatch.__dataclass_fields__}
        batch = MlaBatch(**fields)  # type: ignore[arg-type]
        quant = QuantConfig.from_user(quantization=GEMM_TYPES[gemm_type], kv_cache_dtype="fp8" if kv_fp8 else "auto")
        records = mla_records(_spec(int(heads)), quant, 1, batch)
        working_set = sum(r.weight_bytes + r.kv_read_bytes + r.act_bytes for r in records)
        warm[idx] = working_set <= l2
        for r in records:
            if r.kind == "mla_decode":
                dec[idx], has_d[idx] = np.column_stack([np.broadcast_to(x, idx.shape) for x in r.shape]), True
            elif r.kind == "mla_prefill":
                pre[idx], has_p[idx] = np.column_stack([np.broadcast_to(x, idx.shape) for x in r.shape]), True
            elif r.kind == "mla_bmm":
                rest[idx] += r.count * mla_op_time_s(hw, r, bool(kv_fp8))
                rest_warm[idx] += r.count * mla_op_time_s(warm_hw, r, bool(kv_fp8))
            else:
                rest[idx] += op_time_s(hw, r, quant, 1)[0]
                rest_warm[idx] += op_time_s(warm_hw, r, quant, 1)[0]
    return Components(rest, rest_warm, warm, dec, pre, fp8, has_d, has_p)


def predict(hw: HardwareProfile, comp: Components, rows: np.ndarray) -> np.ndarray:
    """Module seconds of the selected rows under `hw`'s mla_* fields."""
    out = np.zeros(len(rows))
    for warm in (False, True):
        sel = comp.warm[rows] == warm
        if not sel.any():
            continue
        idx = rows[sel]
        h = warm_l2_profile(hw) if warm else hw
        t = (comp.rest_warm_s if warm else comp.rest_s)[idx].copy()
        for kv_fp8 in (False, True):
            s = idx[(comp.kv_fp8[idx] == kv_fp8) & comp.has_decode[idx]]
            if s.size:
                k = mla_decode_time_s(h, *comp.decode_shape[s].T, kv_fp8=kv_fp8)
                t[np.searchsorted(idx, s)] += k
        s = idx[comp.has_prefill[idx]]
        if s.size:
            t[np.searchsorted(idx, s)] += mla_prefill_time_s(h, *comp.prefill_shape[s].T)
        out[sel] = t
    return out


def _stats(pred: np.ndarray, measured: np.ndarray) -> tuple[float, float, int]:
    err = np.abs(pred / measured - 1.0)
    return float(np.median(err)), float(np.percentile(err, 90)), int(err.size)


def run_gpu(gpu: str) -> tuple[HardwareProfile, dict[str, float], list[tuple[str, str, float, float, int]]]:
    d = module_table(gpu)
    hw = load_profile(GPUS[gpu])
    comp = components(hw, d)
    train = np.flatnonzero(~d.held_out.to_numpy())
    measured = d.measured_s.to_numpy()
    samples = [("mla_module", {"row": int(i)}, float(measured[i])) for i in train]
    names = [f"efficiency.{p}" for p in MLA_PARAMS]
    if not d.kv_cache_dtype.eq("fp8").any():
        names = [n for n in names if "fp8_kv" not in n]
    result = fit(samples, hw, names, predict=lambda p, _k, f: predict(p, comp, f["row"].to_numpy()))
    fitted = result.profile
    report = []
    for split, mask in (("train", ~d.held_out), ("held-out", d.held_out)):
        for phase in ("context", "generation", "all"):
            sel = mask & ((d.phase == phase) if phase != "all" else True)
            rows = np.flatnonzero(sel.to_numpy())
            if rows.size:
                med, p90, count = _stats(predict(fitted, comp, rows), measured[rows])
                report.append((split, phase, med, p90, count))
    before = np.flatnonzero(d.held_out.to_numpy())
    med0, p900, _ = _stats(predict(hw, comp, before), measured[before])
    report.append(("held-out, the profile's values before this fit", "all", med0, p900, before.size))
    return fitted, {n.split(".", 1)[1]: v for n, v in result.values.items()}, report


def yaml_lines(values: dict[str, float]) -> list[str]:
    lines = []
    for name, value in values.items():
        key, scale, _ = _EFFICIENCY_YAML[name]
        text = f"{value / scale:.4g}"
        if "e" in text and "." not in text.split("e")[0]:  # YAML 1.1 reads 1e-06 as a string, 1.0e-06 as a number
            text = text.replace("e", ".0e", 1)
        lines.append(f"  {key}: {text}")
    return lines


def write_profile(gpu: str, values: dict[str, float], version: str, held: tuple[float, float]) -> None:
    """Insert the fitted values (and their sources) into the chip's hardware profile YAML, replacing earlier ones."""
    path = Path(__file__).resolve().parents[2] / "hardware_profiles" / f"{GPUS[gpu]}.yaml"
    lines = [ln for ln in path.read_text().splitlines() if not any(
        ln.strip().startswith((f"{_EFFICIENCY_YAML[n][0]}:", f"efficiency.{_EFFICIENCY_YAML[n][0]}:")) for n in MLA_PARAMS)]
    source = (f"fitted by benchmarks/accuracy/mla_accuracy.py on aiconfigurator-core 0.12.0 systems/data/{gpu}/mla/vllm/"
              f"{version}/mla_context_module_perf.parquet and mla_generation_module_perf.parquet (vLLM's default MLA "
              f"kernels, bf16 prefill queries), the per-rank head counts whose CRC32 is not 0 mod 4; held-out "
              f"(heads 4 and 16) median error {100 * held[0]:.1f} % (p90 {100 * held[1]:.1f} %)")
    new = [f"  {line.strip()}" for line in yaml_lines(values)]
    top = [i for i, ln in enumerate(lines) if ln and not ln.startswith((" ", "#"))]
    eff = next((i for i in top if lines[i].startswith("efficiency:")), None)
    src = next(i for i in top if lines[i].startswith("sources:"))
    if eff is None:
        lines[src:src] = ["efficiency:"] + new
    else:
        end = next(i for i in top if i > eff)
        lines[end:end] = new
    lines += [f'  efficiency.{ln.split(":")[0].strip()}: "{source}"' for ln in new]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", default=",".join(GPUS))
    ap.add_argument("--print-yaml", action="store_true", help="print the fitted values as efficiency YAML lines")
    ap.add_argument("--write", action="store_true", help="write the fitted values into the chips' profile YAML")
    args = ap.parse_args()
    print("| GPU | split | phase | median | p90 | rows |")
    print("|---|---|---|---|---|---|")
    fits = {}
    for gpu in args.gpus.split(","):
        _, values, report = run_gpu(gpu)
        fits[gpu] = values
        for split, phase, med, p90, count in report:
            print(f"| {gpu} | {split} | {phase} | {100 * med:.1f} % | {100 * p90:.1f} % | {count} |")
        if args.write:
            held = next((med, p90) for split, phase, med, p90, _ in report if (split, phase) == ("held-out", "all"))
            write_profile(gpu, values, newest_version(gpu), held)
    if args.print_yaml:
        for gpu, values in fits.items():
            print(f"# {GPUS[gpu]}")
            print("\n".join(yaml_lines(values)))


if __name__ == "__main__":
    main()
