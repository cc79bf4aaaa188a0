"""Every GPU family fitted on measured vLLM operator tables; held-out, leave-one-GPU-out and other-kernel errors.

    python benchmarks/accuracy/gpu_profiles.py                     # fit every family, print the tables
    python benchmarks/accuracy/gpu_profiles.py --family hopper     # one family
    python benchmarks/accuracy/gpu_profiles.py --write             # also write hardware_profiles/families/<family>.yaml
                                                          # (what the fit does not set kept from the file it replaces)
    python benchmarks/accuracy/gpu_profiles.py --json out.json     # every number as JSON

Ground truth: PyPI `aiconfigurator-core` (0.12.0), the vLLM operator tables of each shipped chip profile that
names them (`operator_tables:`), newest vLLM version per GPU and operator, rows of the kernel vLLM selects by
default (`roofline.calibration.op_tables`). Chips are grouped by their `family:`; each family's efficiency
parameters are fitted once on the training shapes of all its GPUs (`roofline.calibration.families`), the
collective parameters also per chip (they describe the chip's own link). Reported per GPU and operator kind:
the median and p90 absolute relative error and the bias (median signed error) on the held-out shapes; for
families with two or more GPUs with tables, leave-one-GPU-out (the family fitted without that GPU, its held-out
shapes predicted); the other kernels of the tables (never fitted on) with the family's parameters.
Deterministic: seeded split and subsample, deterministic fit; the same tables give the same YAML bytes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from roofline.calibration.calibrate import FITTED_ELSEWHERE, L2_PARAMS, OP_TABLE_STAGES, SPLIT_SEED, stage_params
from roofline.calibration.families import (
    MAX_TRAIN_ROWS_PER_KIND,
    REPORTED_KINDS,
    fit_clock_factor,
    fit_family,
    gpu_errors,
    leave_one_gpu_out,
    split_tables,
)
from roofline.calibration.fit import fit, get_param
from roofline.calibration.op_tables import load_op_tables
from roofline.cost.hardware import FAMILIES_DIR, load_profile, profile_yaml, read_profile_dict
from roofline.cost.params import EfficiencyParams
from roofline.registry import data_dir, list_ids, resolve

PACKAGE = "aiconfigurator-core"
CLOCK_DECIMALS = 4  # a fitted sustained_clock_factor as written to the chip profile (and used for its errors)
TARGETS = {"gemm": 0.08, "attention": 0.15, "all_reduce": 0.20, "moe": 0.15}
LOGO_TARGET = 0.15

# What each family runs in vLLM (the kernels its parameters describe), and its executor. Executor values are
# vLLM V1 on a GPU host with CUDA graphs and asynchronous scheduling, the same for every family.
_VLLM_KERNELS = {
    "hopper": {"gemm_bf16": "cuBLAS (torch.nn.functional.linear)", "gemm_fp8": "CUTLASS SM90 W8A8 per-tensor "
               "(CutlassFP8ScaledMMLinearKernel)", "attention": "FlashAttention 3 (vllm_flash_attn_fa3), bf16 and "
               "fp8 KV", "all_reduce": "vLLM custom all-reduce in a CUDA graph", "moe": "bf16: Triton fused MoE; "
               "fp8: FlashInfer CUTLASS (modelopt fp8)"},
    "blackwell": {"gemm_bf16": "cuBLAS (torch.nn.functional.linear); split-K partials reduced by a second kernel",
                  "gemm_fp8": "CUTLASS SM100 W8A8 per-tensor (CutlassFP8ScaledMMLinearKernel)",
                  "attention": "FlashInfer TRT-LLM (trtllm-gen) prefill/decode kernels (vLLM's default backend on "
                  "SM100), bf16 and fp8 KV: context work tiles of 256 query rows of one query head (no GQA "
                  "packing), persistent; decode work units of one KV head's query heads (up to 32) in waves; "
                  "softmax on the SFU (roofline.cost.ops.TRTLLM_GEN_KERNELS)", "all_reduce": "vLLM custom "
                  "all-reduce in a CUDA graph", "moe": "FlashInfer TRT-LLM fused MoE (bf16 and modelopt fp8)"},
    "ampere": {"gemm_bf16": "cuBLAS (vllm_default)", "gemm_fp8": "none (no fp8 tensor cores)",
               "attention": "FlashAttention 2 (vllm_flash_attn), bf16 KV", "all_reduce": "vLLM custom all-reduce "
               "in a CUDA graph", "moe": "Triton fused MoE (no balanced-routing table: not fitted)"},
    "ada": {"gemm_bf16": "cuBLAS (torch.nn.functional.linear): SM80 mma.sync tiles, split-K partials reduced by "
            "a second kernel (roofline.cost.step_cost.SM89_GEMM_KERNELS)", "gemm_fp8": "CUTLASS 2.x SM89 W8A8 "
            "per-tensor (CutlassFP8ScaledMMLinearKernel), vLLM's SM89 dispatch on m and n",
            "attention": "FlashAttention 2 (vllm_flash_attn_fa2) with a bf16 KV cache, FlashInfer with an fp8 KV "
            "cache: FA2's split-KV kernel (paged KV), prefill tiles of 64 query rows of one query head, decode "
            "one CTA per (sequence, KV head) in waves of one per SM (roofline.cost.ops.FA2_SPLITKV_KERNELS)",
            "all_reduce": "PCIe only: vLLM custom all-reduce (one-shot, P2P) for 2 GPUs; NCCL ring (pynccl) for "
            "more, in a CUDA graph (roofline.cost.step_cost.PCIE_ALL_REDUCE)",
            "moe": "Triton fused MoE (bf16 and modelopt fp8)"},
}
_FAMILY_NAMES = {"hopper": "NVIDIA Hopper (SM90): H100 SXM/PCIe, H200",
                 "blackwell": "NVIDIA Blackwell (SM100/SM103): B200, B300, GB200",
                 "ampere": "NVIDIA Ampere (SM80/SM86): A100 40/80 GB, A10G",
                 "ada": "NVIDIA Ada Lovelace (SM89): L40S, L4, RTX 4090"}
EXECUTOR = {
    "mode": "cuda_graphs",
    "host_overlaps_device": True,
    "step_gap_us": 160,
    "step_overhead_us": 0,
    "step_overhead_per_seq_us": 21,
    "kernel_launch_us": 4,
    "tokenize_us_per_prompt_token": 1,
}
EXECUTOR_SOURCES = {
    "executor.step_gap_us": "device idle gap between decode steps of vLLM V1 with asynchronous scheduling and "
    "CUDA graphs: 150-170 us at batch 256 (down from 5-6 ms without), vllm-project/vllm PR #11133 "
    "(https://github.com/vllm-project/vllm/pull/11133; design in issue #10634); midpoint 160 us",
    "executor.step_overhead_us": "no fixed part published separately: the only public per-step host figure is per "
    "batch (step_overhead_per_seq_us), so the whole host time is carried per sequence",
    "executor.step_overhead_per_seq_us": "host time of a synchronous vLLM V1 step (schedule, prepare inputs, "
    "sample, update): the GPU idled 5-6 ms between decode steps at batch 256 (Llama-2-7B, ShareGPT), "
    "vllm-project/vllm issue #10634 and PR #11133 -> 5.5 ms / 256 = 21 us per sequence; with async scheduling "
    "it overlaps the device (host_overlaps_device) and only bounds a step when larger than the device time",
    "executor.kernel_launch_us": "host time of one launch or graph replay from Python (CUDA launch latency of a "
    "few microseconds plus PyTorch dispatch; the per-step gap above already contains the full-graph replay of "
    "decode steps); overlapped with the device under async scheduling, so it matters only when the host bounds "
    "a step (assumed, the same value as before this fit)",
    "executor.tokenize_us_per_prompt_token": "vLLM's API server tokenizes a prompt on the host CPU before the "
    "request reaches the engine core (in TTFT): 'for concurrency=1, DGX H100's CPU can do about only about 1k "
    "tokens/ms', vllm-project/vllm issue #19012 (https://github.com/vllm-project/vllm/issues/19012, 2025-06-02, "
    "HF tokenizers; its example, tokenizer('hi ' * 10000), 10.7 ms) -> 1 us per prompt token; one request at a "
    "time (no tokenizer queue); the CPU of other hosts is taken to be the DGX H100's",
}
EXECUTOR_OVERLAP_SOURCE = ("vLLM v0.14.0 release notes: asynchronous scheduling enabled by default (PR #27614, "
                           "https://github.com/vllm-project/vllm/pull/27614): the scheduler plans step i+1 while "
                           "the GPU runs step i; PR #23569 (https://github.com/vllm-project/vllm/pull/23569) "
                           "overlaps input preparation and sampling with the forward pass as well")


def chips_by_family() -> dict[str, dict[str, str]]:
    """family -> {chip id: aiconfigurator system or ""} of the shipped chip profiles, from their YAML."""
    out: dict[str, dict[str, str]] = {}
    for pid in list_ids("hardware"):
        raw = read_profile_dict(resolve("hardware", pid))
        if raw.get("family"):
            out.setdefault(raw["family"], {})[pid] = raw.get("operator_tables") or ""
    return out


def _pct(x: float) -> float:
    return round(100 * x, 1)


def _kind_record(stats: dict[str, Any]) -> dict[str, Any]:
    return {"median_pct": _pct(stats["median_abs_rel_err"]), "p90_pct": _pct(stats["p90_abs_rel_err"]),
            "bias_pct": _pct(stats["median_rel_err"]), "num_rows": stats["num_rows"]}


def fit_one_family(family: str, members: dict[str, str]) -> dict[str, Any]:
    """Fit `family` on the tables of its members that have them; every number the report and YAML need."""
    with_tables = {pid: system for pid, system in members.items() if system}
    # The family is fitted, and left-one-GPU-out, with every chip at its base clock: a chip's sustained clock
    # factor is its own, fitted after the family on its own tables (below), and unknown for a GPU without tables.
    chips = {system: replace(load_profile(pid), sustained_clock_factor=1.0) for pid, system in with_tables.items()}
    tables = {system: load_op_tables(system) for system in chips}
    others = {system: load_op_tables(system, kernels="other") for system in chips}
    train, test = split_tables(tables)
    # The parameters another fit gives the family (`FITTED_ELSEWHERE`) start, and stay, at the family profile's values.
    kept = FITTED_ELSEWHERE.get(family, ())
    start = replace(EfficiencyParams(), **{p: getattr(next(iter(chips.values())).efficiency, p) for p in kept})
    t0 = time.perf_counter()
    result = fit_family(chips, train, start)
    print(f"{family}: fit {result.fit_seconds:.1f} s on {', '.join(chips)}", file=sys.stderr)
    # Collectives ride on each chip's own link: fitted per chip (from the family value) on its own table.
    collective = stage_params(next(params for stage, _, params in OP_TABLE_STAGES if stage == "all_reduce"), family)
    per_chip: dict[str, dict[str, float]] = {}
    for pid, system in with_tables.items():
        if "all_reduce" not in train[system]:
            continue
        hw = replace(chips[system], efficiency=result.efficiency)
        samples = [("all_reduce", dict(zip(cols, row)), float(s)) for cols in
                   [["message_bytes", "num_devices", "dtype"]] for row, s in
                   zip(train[system]["all_reduce"][cols].itertuples(index=False),
                       train[system]["all_reduce"]["measured_s"])]
        fitted = fit(samples, hw, [f"efficiency.{p}" for p in collective]).profile
        per_chip[pid] = {p: get_param(fitted, f"efficiency.{p}") for p in collective}
    # A chip whose profile declares `sustained_clock_factor` gets it fitted on its own GEMM training rows, the
    # family's parameters held (its GEMM error at the base clock kept for the record).
    clock: dict[str, dict[str, Any]] = {}
    for pid, system in with_tables.items():
        if "sustained_clock_factor" in read_profile_dict(resolve("hardware", pid)) and "gemm" in train[system]:
            hw = replace(chips[system], efficiency=replace(result.efficiency, **per_chip.get(pid, {})))
            factor = round(fit_clock_factor(hw, train[system]["gemm"]), CLOCK_DECIMALS)
            clock[pid] = {"factor": factor, "num_train_rows": int(min(len(train[system]["gemm"]),
                                                                    MAX_TRAIN_ROWS_PER_KIND)),
                          "table": f"systems/data/{system}/gemm/vllm/{tables[system]['gemm'].attrs['vllm_version']}",
                          "at_base_clock": gpu_errors(hw, {"gemm": test[system]["gemm"]})["by_kind"]["gemm"]}
    held_out, other_kernels = {}, {}
    for pid, system in with_tables.items():
        hw = replace(chips[system], efficiency=replace(result.efficiency, **per_chip.get(pid, {})),
                     sustained_clock_factor=clock.get(pid, {}).get("factor", 1.0))
        held_out[pid] = gpu_errors(hw, test[system])
        if others[system]:
            other_kernels[pid] = _other_kernel_errors(hw, others[system])
    logo = leave_one_gpu_out(chips, train, test, start)
    logo_by_id = {pid: logo[system] for pid, system in with_tables.items() if system in logo}
    return {"family": family, "members": members, "systems": list(chips), "efficiency": result.efficiency,
            "fitted_params": result.fitted_params, "stages": result.stages, "per_chip": per_chip, "clock": clock,
            "l2_known": any(chip.l2_cache_bytes is not None for chip in chips.values()),
            "held_out": held_out, "leave_one_gpu_out": logo_by_id, "other_kernels": other_kernels,
            "versions": {system: sorted({f.attrs["vllm_version"] for f in t.values()}) for system, t in tables.items()},
            "fp8_kinds": sorted({kind for t in train.values() for kind, f in t.items()
                                 if (f.get("kv_dtype", f["dtype"]) == "fp8").any()}),
            "train_rows": {system: {k: int(len(f)) for k, f in t.items()} for system, t in train.items()},
            "seconds": time.perf_counter() - t0}


def _other_kernel_errors(hw: Any, tables: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (kind, kernel, group): error of the family's parameters on a kernel vLLM does not pick by default."""
    rows = []
    for kind, frame in tables.items():
        for kernel in sorted(frame["kernel"].unique()):
            part = frame[frame["kernel"] == kernel]
            for g in gpu_errors(hw, {kind: part})["by_group"]:
                rows.append({**g, "kernel": kernel})
    return rows


# ---- the family file --------------------------------------------------------------------------------------


def family_document(r: dict[str, Any]) -> dict[str, Any]:
    family = r["family"]
    eff = r["efficiency"].to_dict()
    versions = sorted({v for vs in r["versions"].values() for v in vs})
    fitted_on = (f"{PACKAGE} {_package_version()}, vLLM {'/'.join(versions)} tables of {', '.join(r['systems'])}"
                 if r["systems"] else "")
    stage_of = {p: (stage, kinds) for stage, kinds, params in OP_TABLE_STAGES for p in params}
    sources: dict[str, str] = {}
    fitted = set(r["fitted_params"])
    for field, (key, _, _) in _yaml_fields().items():
        # An fp8-only parameter is set by the data only where the stage's tables have fp8 rows (A100: none).
        fp8_only = "fp8" in field or field.startswith("act_quant")
        if field in fitted and fp8_only and not set(stage_of[field][1]) & set(r["fp8_kinds"]):
            sources[f"efficiency.{key}"] = (f"assumed: the EfficiencyParams default (roofline/cost/params.py): the "
                                            f"{family} tables have no fp8 rows for it")
        elif field in L2_PARAMS and field in fitted:
            sources[f"efficiency.{key}"] = (f"fitted (stage '{stage_of[field][0]}', benchmarks/accuracy/gpu_profiles.py) on the "
                                            f"training rows of the gemm tables whose replay working set fits in the "
                                            f"chip's L2 (roofline.calibration.fit.l2_resident_rows): {fitted_on}; "
                                            "applied to those rows of the attention tables too. The "
                                            "tables' measurement condition only (aiconfigurator's collectors replay "
                                            "one call on the same buffers, no L2 flush: collector/helper.py "
                                            "benchmark_with_power); never used by the serving step model, where "
                                            "each layer's weights and KV cache differ and are not L2-resident")
        elif field in L2_PARAMS and r["l2_known"]:
            sources[f"efficiency.{key}"] = ("the default, 1 = no L2 term: fitted on the gemm tables' rows whose "
                                            "replay working set fits in the chip's L2, it ended at 1 (no warm-L2 "
                                            "speedup in these tables) and was dropped (roofline.calibration."
                                            "calibrate.fit_stage); the tables' measurement condition only, never "
                                            "used in serving")
        elif field in L2_PARAMS:
            sources[f"efficiency.{key}"] = (f"not fitted (the default, 1 = no L2 term): no {family} chip profile "
                                            "has an L2 capacity (l2_cache_mib) to tell which table rows stay in "
                                            "the L2; the tables' measurement condition only, never used in serving")
        elif field in fitted:
            stage, kinds = stage_of[field]
            sources[f"efficiency.{key}"] = (f"fitted (stage '{stage}', benchmarks/accuracy/gpu_profiles.py) on the "
                                            f"training shapes of the {'/'.join(kinds)} tables: {fitted_on}; "
                                            "held-out error in fit.held_out")
        elif field == "gemm_fixed_rows":
            sources[f"efficiency.{key}"] = "CPU-only parameter (roofline.cost.cpu_timing); unused on GPUs"
        else:
            sources[f"efficiency.{key}"] = (f"assumed: the EfficiencyParams default (roofline/cost/params.py): no "
                                            f"{family} table exercises it (see kernels)")
    sources.update(EXECUTOR_SOURCES)
    sources["executor.host_overlaps_device"] = EXECUTOR_OVERLAP_SOURCE
    sources["executor.mode"] = ("vLLM V1 default: CUDA graphs (FULL_AND_PIECEWISE), capture sizes "
                                "roofline.cost.params._VLLM_CAPTURE_SIZES")
    doc: dict[str, Any] = {
        "id": family, "name": _FAMILY_NAMES[family], "kernels": _VLLM_KERNELS[family],
        "efficiency": eff, "executor": dict(EXECUTOR)}
    if r["per_chip"]:
        yaml_fields = _yaml_fields()  # field -> (YAML key, scale from YAML to SI, bound)
        doc["per_chip"] = {pid: {"efficiency": {yaml_fields[k][0]: float(f"{v / yaml_fields[k][1]:.6g}")
                                                for k, v in values.items()}}
                           for pid, values in r["per_chip"].items()}
        names = sorted({yaml_fields[k][0] for values in r["per_chip"].values() for k in values})
        sources["per_chip"] = (f"{', '.join(names[:-1])} and {names[-1]} fitted per chip on the "
                               "training message sizes of its own vLLM custom all-reduce table (the collectives "
                               "ride on the chip's link); chips without tables use the family value")
    fit_record: dict[str, Any] = {
        "status": "fitted" if r["systems"] else "assumed",
        "fitted_on": fitted_on,
        "split": f"distinct shape keys over all GPUs of the family, halved by a seeded permutation (seed "
                 f"{SPLIT_SEED}); at most {MAX_TRAIN_ROWS_PER_KIND} training rows per operator kind",
        "command": "python benchmarks/accuracy/gpu_profiles.py --write",
        "held_out": {pid: {k: _kind_record(v) for k, v in e["by_kind"].items()} for pid, e in r["held_out"].items()},
    }
    if r["clock"]:
        fit_record["note_held_out"] = "; ".join(
            f"{pid}: with its sustained_clock_factor {c['factor']} ({pid}.yaml; at 1: GEMM median "
            f"{_pct(c['at_base_clock']['median_abs_rel_err'])} %, bias {_pct(c['at_base_clock']['median_rel_err'])} %)"
            for pid, c in r["clock"].items()) + "; leave_one_gpu_out predicts every chip at 1 (unknown without tables)"
    if r["leave_one_gpu_out"]:
        fit_record["leave_one_gpu_out"] = {pid: {k: _kind_record(v) for k, v in e["by_kind"].items()}
                                           for pid, e in r["leave_one_gpu_out"].items()}
        fit_record["expected_without_tables"] = _logo_median(r["leave_one_gpu_out"])
        fit_record["note_without_tables"] = ("the median over this family's GPUs of the leave-one-GPU-out error; "
                                             "all-reduce: another chip's link")
    elif r["systems"]:
        fit_record["expected_without_tables"] = {k: _kind_record(v) for k, v in
                                                 next(iter(r["held_out"].values()))["by_kind"].items()}
        fit_record["note_without_tables"] = (f"the held-out error of {r['systems'][0]}, this family's one GPU "
                                             "with tables: a lower bound")
    doc["fit"] = fit_record
    doc["sources"] = sources
    return doc


def _logo_median(logo: dict[str, Any]) -> dict[str, Any]:
    """Per kind, the median over the left-out GPUs of their median / p90 / bias."""
    out = {}
    for kind in REPORTED_KINDS:
        rows = [e["by_kind"][kind] for e in logo.values() if kind in e["by_kind"]]
        if rows:
            out[kind] = {"median_pct": _pct(float(np.median([x["median_abs_rel_err"] for x in rows]))),
                         "p90_pct": _pct(float(np.median([x["p90_abs_rel_err"] for x in rows]))),
                         "bias_pct": _pct(float(np.median([x["median_rel_err"] for x in rows]))),
                         "num_rows": int(sum(x["num_rows"] for x in rows))}
    return out


def _yaml_fields() -> dict[str, tuple[str, float, float]]:
    from roofline.cost.params import _EFFICIENCY_YAML
    return _EFFICIENCY_YAML


def _package_version() -> str:
    from importlib.metadata import version
    return version(PACKAGE)


HEADER = ("# Kernel family {family}: efficiency and executor parameters shared by the chips that name it\n"
          "# (`family: {family}`). Schema: roofline/cost/hardware.py (kernel families). Written by\n"
          "# `python benchmarks/accuracy/gpu_profiles.py --write`: do not edit the numbers by hand; every parameter's\n"
          "# provenance is in `sources`, the fit and its held-out / leave-one-GPU-out errors in `fit`.\n")


def write_family(r: dict[str, Any]) -> Path:
    path = data_dir("hardware_profiles") / FAMILIES_DIR / f"{r['family']}.yaml"
    path.parent.mkdir(exist_ok=True)
    doc = family_document(r)
    if path.exists():
        doc = keep_unfitted(doc, read_profile_dict(path), r)
    path.write_text(HEADER.format(family=r["family"]) + profile_yaml(doc))
    return path


def keep_unfitted(doc: dict[str, Any], existing: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    """`doc` (the fit's family document) with what this fit does not set taken from the family file it replaces:
    its executor section and those parameters' sources (sourced elsewhere: BENCHMARKS.md, host_launch_evidence.py),
    and each efficiency parameter the fit did not fit (`FITTED_ELSEWHERE`'s, by benchmarks/accuracy/moe_accuracy.py) with its
    value and source as the file has them. An efficiency parameter neither fitted nor in the file is left out (its
    `EfficiencyParams` default applies), as is its source."""
    yaml_key = {field: key for field, (key, _, _) in _yaml_fields().items()}
    fitted = {yaml_key[f] for f in r["fitted_params"]}
    old_eff, old_sources = existing.get("efficiency") or {}, existing.get("sources") or {}
    eff = {k: (v if k in fitted else old_eff[k]) for k, v in doc["efficiency"].items() if k in fitted or k in old_eff}
    old_executor = {name: text for name, text in old_sources.items() if name.startswith("executor.")}
    sources = {}
    for name, text in doc["sources"].items():
        section, _, key = name.partition(".")
        if section == "efficiency" and key not in fitted:
            if key in old_eff and name in old_sources:
                sources[name] = old_sources[name]
        elif section == "executor":  # the file's executor sources, in its order, where the fit's would go
            sources.update(old_executor or {name: text})
        else:
            sources[name] = text
    return {**doc, "efficiency": eff, "executor": existing.get("executor", doc["executor"]), "sources": sources}


def clock_source(r: dict[str, Any], pid: str) -> str:
    """The provenance of a chip's fitted sustained_clock_factor: its tables, how, and its held-out error."""
    c, held = r["clock"][pid], r["held_out"][pid]["by_kind"]["gemm"]
    base = c["at_base_clock"]
    return (f"fitted: {PACKAGE} {_package_version()} {c['table']}/gemm_perf.parquet, its bf16 and per-tensor fp8 "
            f"rows (cuBLAS, CUTLASS W8A8) of the {r['family']} family's training shapes ({c['num_train_rows']} rows), "
            f"with the family's fitted parameters held (benchmarks/accuracy/gpu_profiles.py, roofline.calibration.families."
            f"fit_clock_factor); held-out GEMM median error {_pct(held['median_abs_rel_err'])} % (p90 "
            f"{_pct(held['p90_abs_rel_err'])} %, bias {_pct(held['median_rel_err']):+} %), at 1: "
            f"{_pct(base['median_abs_rel_err'])} % (p90 {_pct(base['p90_abs_rel_err'])} %, bias "
            f"{_pct(base['median_rel_err']):+} %). The sustained SM clock against the family's base chip of the same "
            f"datasheet peaks, which NVIDIA does not publish for either; a GPU without tables cannot know it "
            f"(leave-one-GPU-out predicts this chip at 1)")


def write_chip_clock(r: dict[str, Any], pid: str) -> Path:
    """Rewrite the `sustained_clock_factor` value and its source line in the chip's profile, nothing else."""
    path = resolve("hardware", pid)
    text = path.read_text()
    value = re.compile(r"^sustained_clock_factor: .*$", re.M)
    source = re.compile(r"^  sustained_clock_factor: .*$", re.M)
    assert len(value.findall(text)) == 1 and len(source.findall(text)) == 1, f"{path}: no one-line clock factor"
    text = value.sub(f"sustained_clock_factor: {r['clock'][pid]['factor']}", text)
    text = source.sub(lambda _: f"  sustained_clock_factor: {json.dumps(clock_source(r, pid))}", text)
    path.write_text(text)
    assert load_profile(pid).sustained_clock_factor == r["clock"][pid]["factor"]
    return path


# ---- printing ---------------------------------------------------------------------------------------------


def _mark(value: float, target: float) -> str:
    return "met" if value <= target else "MISSED"


def print_report(results: list[dict[str, Any]]) -> None:
    print("\n### Held-out shapes, per GPU and operator kind (default kernels)\n")
    print("| family | GPU | kind | rows | median | p90 | bias | target (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        for pid, e in r["held_out"].items():
            for kind, s in e["by_kind"].items():
                print(f"| {r['family']} | {pid} | {kind} | {s['num_rows']} | {s['median_abs_rel_err']:.1%} | "
                      f"{s['p90_abs_rel_err']:.1%} | {s['median_rel_err']:+.1%} | <= {TARGETS[kind]:.0%}: "
                      f"{_mark(s['median_abs_rel_err'], TARGETS[kind])} |")
    print("\n### Chip sustained clock factors (fitted on the chip's own GEMM training rows)\n")
    print("| GPU | factor | GEMM held out at 1: median | p90 | bias |\n|---|---|---|---|---|")
    for r in results:
        for pid, c in r["clock"].items():
            b = c["at_base_clock"]
            print(f"| {pid} | {c['factor']} | {b['median_abs_rel_err']:.1%} | {b['p90_abs_rel_err']:.1%} | "
                  f"{b['median_rel_err']:+.1%} |")
    print("\n### Held-out shapes by group\n")
    print("| GPU | kind | group | rows | median | p90 | bias |\n|---|---|---|---|---|---|---|")
    for r in results:
        for pid, e in r["held_out"].items():
            for g in e["by_group"]:
                print(f"| {pid} | {g['kind']} | {g['group']} | {g['num_rows']} | {g['median_abs_rel_err']:.1%} | "
                      f"{g['p90_abs_rel_err']:.1%} | {g['median_rel_err']:+.1%} |")
    print("\n### Leave one GPU out (family fitted without it; its held-out shapes)\n")
    print("| family | GPU left out | kind | median | p90 | bias | target |\n|---|---|---|---|---|---|---|")
    for r in results:
        for pid, e in r["leave_one_gpu_out"].items():
            for kind, s in e["by_kind"].items():
                target = "reported" if kind == "all_reduce" else (
                    f"<= {LOGO_TARGET:.0%}: {_mark(s['median_abs_rel_err'], LOGO_TARGET)}")
                print(f"| {r['family']} | {pid} | {kind} | {s['median_abs_rel_err']:.1%} | "
                      f"{s['p90_abs_rel_err']:.1%} | {s['median_rel_err']:+.1%} | {target} |")
    print("\n### Other kernels in the tables (never fitted on; the family's parameters)\n")
    print("| GPU | kind | kernel | group | rows | median | p90 | bias |\n|---|---|---|---|---|---|---|---|")
    for r in results:
        for pid, rows in r["other_kernels"].items():
            for g in rows:
                print(f"| {pid} | {g['kind']} | {g['kernel']} | {g['group']} | {g['num_rows']} | "
                      f"{g['median_abs_rel_err']:.1%} | {g['p90_abs_rel_err']:.1%} | {g['median_rel_err']:+.1%} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", help="fit only this family (repeatable)")
    parser.add_argument("--write", action="store_true", help="write hardware_profiles/families/<family>.yaml")
    parser.add_argument("--json", help="write every number to this JSON file")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    families = chips_by_family()
    chosen = args.family or sorted(families)
    results = []
    for family in chosen:
        if family not in families:
            parser.error(f"--family: {family!r} is not allowed; allowed: {', '.join(sorted(families))}")
        members = families[family]
        if not any(members.values()):
            print(f"{family}: no chip with operator tables; not fitted", file=sys.stderr)
            continue
        r = fit_one_family(family, members)
        results.append(r)
        if args.write:
            print(f"wrote {write_family(r)}", file=sys.stderr)
            for pid in r["clock"]:
                print(f"wrote {write_chip_clock(r, pid)}", file=sys.stderr)
    print_report(results)
    elapsed = time.perf_counter() - t0
    print(f"\nelapsed {elapsed:.0f} s")
    if args.json:
        out = [{**{k: v for k, v in r.items() if k != "efficiency"}, "efficiency": r["efficiency"].to_dict()}
               for r in results]
        Path(args.json).write_text(json.dumps({"results": out, "elapsed_s": elapsed}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
