"""Fit the MLA attention model's `mla_*` efficiency fields per chip on aiconfigurator-core's vLLM MLA module tables
(`roofline calibrate --op-tables --chip C --op mla`).

    fitted, values, report = fit_mla_chip("h200_sxm", reference=b200_values)

The tables (`systems/data/<gpu>/mla/vllm/<version>/mla_{context,generation}_module_perf.parquet`, read from the
installed package) time vLLM's whole `DeepseekV2MLAAttention` forward of DeepSeek-V3's shapes with 1-128 heads (one
tensor-parallel rank's share) in a CUDA graph (aiconfigurator `collector/vllm/collect_mla_module.py`): fused q/kv
down-projection, norms, q_b_proj, RoPE, the attention (prefill or absorbed decode), o_proj; context rows: `batch_size`
prompts of `isl` tokens, no cached context; generation rows: one token per sequence with `step` - 1 cached tokens.
Rows: the default kernels only (the decode backend vLLM picks for the row's KV dtype, `KernelFamily.mla`; prefill query
compute in bf16, `mla_dtype` bfloat16), linear layers bf16, block fp8 or nvfp4 (`gemm_type`).

Predicted: the sum of the layer's operators (`roofline.cost.kernels.mla.mla_records` for one layer), the GEMMs and
elementwise kernels by the chip's fitted GEMM model (`roofline.cost.step_cost.op_time_s`), the two attention kernels
by `mla_prefill_time_s` / `mla_decode_time_s`. The replay condition of the tables (no L2 flush between replays): a
row whose working set (weights, latents, activations of the module) fits in the chip's L2 moves its bytes at
`l2_bandwidth_factor` x DRAM (`roofline.calibration.fit.warm_l2_profile`).

Held out by shape: the per-rank head counts whose CRC32 is 0 mod 4 (4 and 16: TP 32 and 8 of DeepSeek-V3's 128
heads, TP 16 and 4 of Kimi-K2's 64) are never fitted on. Fitted with `roofline.calibration.fit.fit` (log residuals,
soft-L1) on the rest: the `mla_*` efficiency fields per GPU (those of the fp8 KV cache only where the tables have it).

Two collectors: B200's tables were re-collected with aiconfigurator's fused-op fix (their collection_meta.yaml:
ai-dynamo/aiconfigurator#1423, "the previous rows ran the never-in-serving native chain (+34%)"); the others are
"provenance: legacy". The legacy rows are slower than the serving path: GB300's legacy 0.24.0 rows run 1.6x its
re-collected 0.27.0 rows (median over the 8,784 shared context shapes; 35-60 us more per call at a few tokens), and
B300's and GB200's legacy rows 1.65x B200's on the same shapes, more than the chips differ. The legacy collector ran
vLLM's custom ops in their native torch decompositions (aiconfigurator commit c56db49f, which fixed it, added
`custom_ops = ["all"]` to collector/vllm/utils.py `create_vllm_config` and the vllm_c RMSNorm dispatch of
`enable_engine_fused_ops`): the q / kv latent RMSNorms as an eager mean/pow/rsqrt/mul chain, per token, and the
rotary embedding of the query's rope part, per token and head. GB300's gap grows as such: 33-60 us at 1-256 tokens,
then about 20 ns per token plus 0.57 ns per token and head (2.6 ms at 131k tokens and 1 head, 12 ms at 128 heads).
Hence (`FIT_ON`, `LEGACY_HELD`, `LEGACY_PARAMS`): every legacy table is fitted with the collector's own time
(`mla_table_legacy_*`: per call, per token, per token and head; a table condition, never used in serving). The two
eager chains re-read what their previous ops wrote; while a chain's working set fits in the L2 those reads hit it
(`legacy_spill`), and the chain costs `mla_table_legacy_resident_fraction` of its DRAM time: L40S's tables (96 MB of
L2, 864 GB/s of DRAM) run the module of 1 head at 173-188 ns a token from 2k to 8k tokens, 224 / 238 / 249 / 259 ns
at 16k / 32k / 64k / 131k (the fastest row of each, many short prompts: not the attention; 2026-11-29g-l40s.md).
B300 and GB200 (same kernel family, same kernels) take B200's kernel fields whole; of their tables only the
collector's time is fitted. The legacy tables of Hopper and Ada (no re-collected table in their family) are fitted
whole, with the serving path's times per call (`LEGACY_HELD`) held at B200's fit: a constant per call cannot be told
apart from the collector's in one table.
benchmarks/accuracy/mla_accuracy.py prints the judge (train / held-out error per GPU and phase).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import yaml

from engine.core.model_spec import ModelSpec
from roofline.calibration.fit import fit, warm_l2_profile, with_params
from roofline.calibration.op_tables import package_root
from roofline.cost.hardware import HardwareProfile, load_profile
from roofline.cost.kernels import kernel_family
from roofline.cost.kernels.mla import (
    MlaBatch,
    mla_backend,
    mla_decode_rows,
    mla_decode_time_s,
    mla_op_time_s,
    mla_prefill_time_s,
    mla_records,
)
from roofline.cost.params import EFFICIENCY_PARAMS, stage_fields
from roofline.cost.quant import QuantConfig
from roofline.cost.step_cost import op_time_s
from roofline.registry import load_model

GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200",
        "l40s": "l40s"}
GEMM_TYPES = {"bfloat16": "none", "fp8_block": "fp8-block", "nvfp4": "nvfp4"}
MLA_PARAMS = stage_fields("mla")  # declaration order is the fit order
# GPUs whose MLA fields are another GPU's fit: their tables are legacy collections of the same kernels (docstring).
FIT_ON = {"b300_sxm": "b200_sxm", "gb200": "b200_sxm"}
# The legacy collector's own time (a table condition, never used in serving: `EfficiencyParams.mla_table_legacy_*`):
# per call, per token, per token and query head; the fit starts at GB300's measured gap (module docstring).
_LEGACY_PREFIX = "mla_table_legacy_"
_LEGACY_START = {"fixed_s": 30e-6, "token_s": 20e-9, "token_head_s": 0.5e-9, "resident_fraction": 0.5}
LEGACY_PARAMS = {n: _LEGACY_START[n.removeprefix(_LEGACY_PREFIX)] for n in MLA_PARAMS if n.startswith(_LEGACY_PREFIX)}
# The L2's share of the collector's time: not fitted on a chip without an L2 size (`legacy_spill` is then 1).
LEGACY_RESIDENT = "mla_table_legacy_resident_fraction"
# The block-fp8 linear layers' time per call in the module's CUDA graph that the GEMM model lacks (a table condition,
# never used in serving: `EfficiencyParams.mla_table_fp8_block_linear_s`), fitted on the GPUs named here (a GPU in
# `FIT_ON` takes its reference's). Not on Hopper, where the fit puts it at 0.9-1.5 us a layer, moves the training
# error by at most 0.2 points and the held-out p90 up by 0.1-0.3 (docs/benchmark-history/2026-11-29f-mla.md).
FP8_BLOCK_PARAM = "mla_table_fp8_block_linear_s"
FP8_BLOCK_FITTED = ("b200_sxm", "l40s")
# The serving path's times per call (not per tile) that a legacy table's fit holds: B200's fit of them at 90e57ce
# (its re-collected tables with a 64-row decode tile). Since the TRT-LLM-gen decode tiles and the block-fp8 term,
# B200's fit leaves them at their bound (0): at one wave of tiles a per-call time and the per-wave tile time are one
# constant, which that fit gives the tile term; the legacy fits keep the values they were fitted with.
LEGACY_HELD = tuple(n for n in MLA_PARAMS if n.endswith("_fixed_s") and "_tile_" not in n and n not in LEGACY_PARAMS)
LEGACY_HELD_S = dict(zip(LEGACY_HELD, (2.062308411162023e-06, 2.274014117819397e-06, 9.723870550795357e-07)))


def _beyond_l2(working_set_bytes: np.ndarray, l2_bytes: float) -> np.ndarray:
    """The fraction of a streamed working set that the L2 does not hold: 1 - L2 / set above the L2's size (a cache
    holding L2 bytes of the set), 0 below; 1 where the L2's size is unknown (0)."""
    if l2_bytes <= 0:
        return np.ones_like(working_set_bytes)
    return np.clip(1.0 - l2_bytes / np.maximum(working_set_bytes, 1.0), 0.0, 1.0)


def legacy_spill(spec: ModelSpec, tokens: np.ndarray, heads: np.ndarray, l2_bytes: float
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The fractions of the legacy collector's per-token and per-token-and-head chains (module docstring) that
    read DRAM rather than the L2, per module call of `tokens` tokens and `heads` query heads. Each chain is eager
    torch ops, each re-reading what the previous ones wrote, so its working set is what is live between a tensor's
    write and its last read:
    per token, the latent RMSNorms (vLLM `RMSNorm.forward_native`: x.to(float32), x.pow(2).mean(-1), x *
    rsqrt(...), .to(bf16) * weight): the fp32 copy and its square, 2 x 4 bytes per value, the q latent's
    (q_lora_rank values, 12 KiB a token for DeepSeek-V3) and the kv latent's (kv_lora_rank) chains weighted by
    their values; per token and head, the query's rope part (vLLM `DeepseekScalingRotaryEmbedding.forward_native`
    and `rotate_gptj`, R = 64 values in bf16, its cos/sin cache in the model dtype): the input, q_rot * cos, -x2
    (R / 2), the stacked rotation and its product with sin, live until the sum reads them: 4.5 R x 2 bytes."""
    m = spec.mla
    assert m is not None, "an MLA model"
    q_rank, kv_rank = float(m.q_lora_rank or 0), float(m.kv_lora_rank)
    fp32_pair = 2 * 4.0
    per_token = (q_rank * _beyond_l2(tokens * q_rank * fp32_pair, l2_bytes)
                 + kv_rank * _beyond_l2(tokens * kv_rank * fp32_pair, l2_bytes)) / (q_rank + kv_rank)
    rope_live = 4.5 * m.qk_rope_head_dim * 2.0
    return per_token, _beyond_l2(tokens * heads * rope_live, l2_bytes)


def held_out(num_heads: int) -> bool:
    return zlib.crc32(str(int(num_heads)).encode()) % 4 == 0


def newest_version(gpu: str) -> str:
    root = package_root() / gpu / "mla" / "vllm"
    return max((p.name for p in root.iterdir() if p.is_dir()), key=lambda v: tuple(int(x) for x in v.split(".")))


def legacy_collector(gpu: str) -> bool:
    """Whether `gpu`'s newest MLA tables come from aiconfigurator's legacy collector (module docstring): "provenance:
    legacy" without the re-collection's `norm_dispatch` note."""
    root = package_root() / gpu / "mla" / "vllm" / newest_version(gpu)
    meta = yaml.safe_load((root / "collection_meta.yaml").read_text())
    tables = meta.get("tables") or {}
    return meta.get("provenance") == "legacy" and not any("norm_dispatch" in (t or {}) for t in tables.values())


def module_table(gpu: str) -> pd.DataFrame:
    """The newest vLLM MLA module tables of `gpu` (context and generation), default kernels, with `phase`,
    `measured_s` and `held_out`."""
    root = package_root() / gpu / "mla" / "vllm" / newest_version(gpu)
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
    tokens: np.ndarray  # the module call's tokens: batch x isl (context), batch (generation)
    heads: np.ndarray
    fp8_block_linears: np.ndarray  # linear layers (GEMM records) with block-fp8 weights, per row
    legacy: bool = False
    token_spill: np.ndarray | None = None  # `legacy_spill` per row (legacy tables)
    token_head_spill: np.ndarray | None = None


def _spec(heads: int) -> ModelSpec:
    base = load_model("deepseek-v3")
    return replace(base, name=f"deepseek-v3-h{heads}", num_heads=heads, num_kv_heads=heads, num_layers=1,
                   num_dense_layers=1, checkpoint_quant=None)


def _batches(d: pd.DataFrame, family: str | None, sms: int) -> list[MlaBatch]:
    kernels = kernel_family(family).attention
    out = []
    for row in d.itertuples():
        backend = mla_backend(family, row.kv_cache_dtype == "fp8")
        b = int(row.batch_size)
        if row.phase == "context":
            q, c = np.full(b, int(row.isl)), np.zeros(b, dtype=np.int64)
        else:
            q, c = np.ones(b, dtype=np.int64), np.full(b, int(row.step) - 1)
        rows = int(mla_decode_rows(kernels, int(row.num_heads), b, int(c.max()) + 1, sms))
        out.append(MlaBatch.from_lengths(q, c, int(row.num_heads), backend.decode_threshold, rows=rows))
    return out


def components(hw: HardwareProfile, d: pd.DataFrame, legacy: bool = False) -> Components:
    """Rows grouped by (heads, linear format, KV dtype, path): each group's operators timed at once, the batch sums
    as arrays (the cost model's functions take arrays)."""
    warm_hw = warm_l2_profile(hw)
    n = len(d)
    rest, rest_warm, warm = np.zeros(n), np.zeros(n), np.zeros(n, bool)
    dec, pre = np.zeros((n, 4)), np.zeros((n, 4))
    has_d, has_p = np.zeros(n, bool), np.zeros(n, bool)
    fp8_block_linears = np.zeros(n)
    fp8 = (d.kv_cache_dtype == "fp8").to_numpy()
    l2 = hw.l2_cache_bytes or 0.0
    batches = _batches(d, hw.family, hw.num_compute_units)
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
        if gemm_type == "fp8_block":
            fp8_block_linears[idx] = sum(1 for r in records if r.kind == "gemm")
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
    tokens = np.where(d.phase == "context", d.batch_size * d.isl, d.batch_size).astype(np.float64)
    heads = d.num_heads.to_numpy(dtype=np.float64)
    spill = legacy_spill(_spec(1), tokens, heads, l2) if legacy else (None, None)
    return Components(rest, rest_warm, warm, dec, pre, fp8, has_d, has_p, tokens, heads, fp8_block_linears, legacy,
                      *spill)


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
                flops, moved, tiles, reread = comp.decode_shape[s].T
                k = mla_decode_time_s(h, flops, moved, tiles, reread, kv_fp8=kv_fp8)
                t[np.searchsorted(idx, s)] += k
        s = idx[comp.has_prefill[idx]]
        if s.size:
            t[np.searchsorted(idx, s)] += mla_prefill_time_s(h, *comp.prefill_shape[s].T)
        out[sel] = t
    out += hw.efficiency.mla_table_fp8_block_linear_s * comp.fp8_block_linears[rows]
    if comp.legacy:
        assert comp.token_spill is not None and comp.token_head_spill is not None
        e, t, r = hw.efficiency, comp.tokens[rows], hw.efficiency.mla_table_legacy_resident_fraction
        dram_t, dram_th = comp.token_spill[rows], comp.token_head_spill[rows]
        per_token = (e.mla_table_legacy_token_s * (r + (1.0 - r) * dram_t)
                     + comp.heads[rows] * e.mla_table_legacy_token_head_s * (r + (1.0 - r) * dram_th))
        out += e.mla_table_legacy_fixed_s + t * per_token
    return out


def _stats(pred: np.ndarray, measured: np.ndarray) -> tuple[float, float, int]:
    err = np.abs(pred / measured - 1.0)
    return float(np.median(err)), float(np.percentile(err, 90)), int(err.size)


def fit_mla_chip(gpu: str, reference: dict[str, float] | None = None
            ) -> tuple[HardwareProfile, dict[str, float], list[tuple[str, str, float, float, int]]]:
    """Fit `gpu`'s mla_* fields on its training rows and judge them on all rows. `reference`: the re-collected
    table's fit (B200's), whose `LEGACY_HELD` values a legacy table's fit holds; a GPU in `FIT_ON` takes `reference`'s
    kernel fields whole, and of its legacy table only the collector's own time (`LEGACY_PARAMS`) is fitted."""
    d = module_table(gpu)
    hw = load_profile(GPUS[gpu])
    comp = components(hw, d, legacy_collector(gpu))
    train = np.flatnonzero(~d.held_out.to_numpy())
    measured = d.measured_s.to_numpy()
    names = [n for n in MLA_PARAMS if n not in LEGACY_PARAMS]
    if not d.kv_cache_dtype.eq("fp8").any():
        names = [n for n in names if "fp8_kv" not in n]
    if gpu not in FP8_BLOCK_FITTED or not d.gemm_type.eq("fp8_block").any():
        names = [n for n in names if n != FP8_BLOCK_PARAM]
    legacy_names = [n for n in LEGACY_PARAMS if n != LEGACY_RESIDENT or hw.l2_cache_bytes]
    before = hw
    samples = [("mla_module", {"row": int(i)}, float(measured[i])) for i in train]

    def run(start: HardwareProfile, fitted_names: list[str]) -> HardwareProfile:
        return fit(samples, start, [f"efficiency.{n}" for n in fitted_names],
                   predict=lambda p, _k, f: predict(p, comp, f["row"].to_numpy())).profile

    legacy_start = {f"efficiency.{n}": LEGACY_PARAMS[n] for n in legacy_names}
    if gpu in FIT_ON:
        assert reference is not None, f"{gpu} takes {FIT_ON[gpu]}'s fit: fit that first"
        kernels = {n: v for n, v in reference.items() if n not in LEGACY_PARAMS}
        fitted = with_params(hw, {f"efficiency.{n}": v for n, v in kernels.items()})
        if comp.legacy:
            fitted = run(with_params(fitted, legacy_start), legacy_names)
        values = kernels | {n: getattr(fitted.efficiency, n) for n in legacy_names if comp.legacy}
    else:
        # The fit starts from the declared defaults (`EfficiencyParams`), not from the values the chip file holds:
        # the loss is flat along some of these parameters (a per-call time against a per-tile one), so a start at
        # the file's values would move the result with every refit; from a fixed start, a refit reproduces it.
        start, held = with_params(hw, {f"efficiency.{n}": EFFICIENCY_PARAMS[n].default for n in MLA_PARAMS}), {}
        if comp.legacy:
            held = {n: LEGACY_HELD_S[n] for n in LEGACY_HELD if n in names}
            names = [n for n in names if n not in held] + legacy_names
            start = with_params(start, {f"efficiency.{n}": v for n, v in held.items()} | legacy_start)
        fitted = run(start, names)
        values = {n: getattr(fitted.efficiency, n) for n in MLA_PARAMS if n in names or n in held}
    report = []
    for split, mask in (("train", ~d.held_out), ("held-out", d.held_out)):
        for phase in ("context", "generation", "all"):
            sel = mask & ((d.phase == phase) if phase != "all" else True)
            rows = np.flatnonzero(sel.to_numpy())
            if rows.size:
                med, p90, count = _stats(predict(fitted, comp, rows), measured[rows])
                report.append((split, phase, med, p90, count))
    rows = np.flatnonzero(d.held_out.to_numpy())
    med0, p900, _ = _stats(predict(before, comp, rows), measured[rows])
    report.append(("held-out, the profile's values before this fit", "all", med0, p900, rows.size))
    return fitted, values, report




def yaml_values(values: dict[str, float]) -> dict[str, float]:
    """Fitted SI values -> {YAML key: value in YAML units to 4 significant digits}, as the chip file records them."""
    return {EFFICIENCY_PARAMS[n].key: float(f"{v / EFFICIENCY_PARAMS[n].scale:.4g}") for n, v in values.items()}
