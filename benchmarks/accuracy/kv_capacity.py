"""KV capacity as vLLM logs it, predicted and compared case by case (the judge of `roofline.cost.kv_capacity`).

    python benchmarks/accuracy/kv_capacity.py [--cases benchmarks/data/vllm_kv_capacity_cases.yaml] [--json]

Each case of the YAML file is a (model, GPU, vLLM version, flags) whose startup log is public (the file gives the
source). The deployment is resolved as `roofline simulate` resolves it (`roofline.sim.deployment.make_deployment`'s
steps up to the KV sizing: the model's weights per rank from the cost model, vLLM's batch defaults for the device),
with the version's accounting (`KvCapacityInputs.vllm_version`; asynchronous scheduling on from vLLM 0.14, its
default on GPUs). Compared:
- the KV-cache tokens: the logged "GPU KV cache size" when the log has it, else the tokens the logged "Available KV
  cache memory" holds (whole blocks of the model's page size, which is exact arithmetic, not a model);
- the available KV memory (GiB), and whether vLLM refused to start.
Error statistics (median, p90, max of |relative token error|) are over the started cases, out-of-sample and all;
cases the simulator cannot express are listed as skipped with the reason. Nothing is fitted here.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from roofline.cost.hardware import load_profile  # noqa: E402
from roofline.cost.kv_capacity import (  # noqa: E402
    CUDA_RESERVED_BYTES,
    GIB,
    KvCapacityInputs,
    block_bytes,
    compute_kv_capacity,
    kv_cache_groups,
    parse_vllm_version,
    profiled_kv_budget_bytes,
    reported_capacity,
)
from roofline.cost.quant import QuantConfig, resolve_kv_cache_dtype  # noqa: E402
from roofline.cost.step_cost import StepCostModel  # noqa: E402
from roofline.engine_args import DEFAULT_GPU_MEMORY_UTILIZATION, EngineArgs, version_async_scheduling  # noqa: E402
from roofline.errors import UserError  # noqa: E402
from roofline.registry import load_model  # noqa: E402

DEFAULT_CASES = ROOT / "benchmarks" / "data" / "vllm_kv_capacity_cases.yaml"
FLAG_FIELDS = ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization",
               "tensor_parallel_size", "quantization", "kv_cache_dtype", "block_size", "enforce_eager", "moe_backend")


@dataclass(frozen=True)
class Prediction:
    case_id: str
    available_kv_gib: float  # the profiled budget (negative: nothing left)
    num_gpu_blocks: int  # 0 when refused
    kv_cache_tokens: int  # as the version logs it
    max_concurrency: float
    refused: bool
    weights_gib: float
    note: str


def kv_inputs(case: dict[str, Any]) -> KvCapacityInputs:
    """The KV-sizing inputs of a case, resolved as `make_deployment` resolves them."""
    spec = load_model(case["model"])
    hw = load_profile(case["hardware"])
    if "cuda_total_gib" in case:  # a GPU without a profile: the total its log states (only memory enters KV sizing)
        hw = replace(hw, memory_capacity_bytes=case["cuda_total_gib"] * GIB + CUDA_RESERVED_BYTES)
    engine = EngineArgs(**{k: case[k] for k in FLAG_FIELDS if k in case})
    engine.check_model(spec)
    version = str(case["vllm_version"])
    quant = QuantConfig.from_user(dtype=engine.dtype, quantization=engine.quantization,
                                  kv_cache_dtype=resolve_kv_cache_dtype(engine.kv_cache_dtype, spec, version),
                                  model_dtype=spec.torch_dtype, moe_backend=engine.moe_backend)
    max_num_seqs, max_num_batched_tokens = engine.batch_limits(spec, hw.memory_capacity_bytes,
                                                               f"{hw.id} {hw.name}", is_cpu=False)
    cost = StepCostModel(spec, hw, quant, engine.tensor_parallel_size)
    return KvCapacityInputs(
        spec=spec, memory_capacity_bytes=hw.memory_capacity_bytes,
        weight_bytes_per_rank=cost.loaded_weight_bytes_per_rank(version),
        kv_bytes_per_token_per_rank=cost.kv_bytes_per_token_per_rank(), act_bytes=quant.act_bytes,
        tensor_parallel_size=engine.tensor_parallel_size, block_size=engine.block_size, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, max_model_len=engine.resolved_max_model_len(spec),
        gpu_memory_utilization=(engine.gpu_memory_utilization if engine.gpu_memory_utilization is not None
                                else DEFAULT_GPU_MEMORY_UTILIZATION),
        vllm_version=version, weights_quantized=quant.quantization != "none" or quant.experts[0] != "none",
        topk_topp_sampler=case.get("topk_topp_sampler", "pytorch"),
        async_scheduling=bool(case.get("async_scheduling", version_async_scheduling(parse_vllm_version(version)))))


def predict(case: dict[str, Any]) -> Prediction:
    inputs = kv_inputs(case)
    budget = profiled_kv_budget_bytes(inputs)
    weights_gib = inputs.weight_bytes_per_rank / GIB
    try:
        cap = compute_kv_capacity(inputs)
    except UserError as exc:  # vLLM refuses: no memory left, or one max_model_len request does not fit
        return Prediction(case["id"], budget / GIB, 0, 0, 0.0, True, weights_gib, str(exc).split(";")[0])
    note = "CUDA-graph estimate not modelled (subtracted by this version)" if cap.cuda_graph_bytes_not_modelled else ""
    return Prediction(case["id"], budget / GIB, cap.num_gpu_blocks, cap.reported_num_tokens, cap.max_concurrency,
                      False, weights_gib, note)


def logged_tokens(case: dict[str, Any]) -> int | None:
    """The logged "GPU KV cache size", or the tokens the logged "Available KV cache memory" holds."""
    logged = case["logged"]
    if "kv_cache_tokens" in logged:
        return int(logged["kv_cache_tokens"])
    if logged.get("refused") or "available_kv_gib" not in logged:
        return None
    inputs = kv_inputs(case)
    # The log rounds the GiB to 0.01: the block count from it is exact to +-0.005 GiB.
    num_blocks = int(logged["available_kv_gib"] * GIB // block_bytes(inputs))
    tokens, _ = reported_capacity(inputs, num_blocks)
    return tokens


def compare(cases: list[dict[str, Any]]) -> dict[str, Any]:
    rows, skipped = [], []
    for case in cases:
        if "skip" in case:
            skipped.append({"id": case["id"], "reason": case["skip"], "source": case["source"]})
            continue
        pred = predict(case)
        logged = case["logged"]
        measured_tokens = logged_tokens(case)
        measured_refused = bool(logged.get("refused", False))
        error = (pred.kv_cache_tokens / measured_tokens - 1.0
                 if measured_tokens and not pred.refused and not measured_refused else None)
        rows.append({
            "id": case["id"], "model": case["model"], "hardware": case["hardware"],
            "vllm_version": str(case["vllm_version"]), "tp": case.get("tensor_parallel_size", 1),
            "groups": "+".join(str(n) for n in kv_cache_groups(load_model(case["model"]))[1:]),
            "logged_available_gib": logged.get("available_kv_gib"),
            "predicted_available_gib": round(pred.available_kv_gib, 2),
            "logged_weights_gib": logged.get("weights_gib"), "predicted_weights_gib": round(pred.weights_gib, 2),
            "logged_tokens": measured_tokens, "predicted_tokens": pred.kv_cache_tokens,
            "tokens_error": error, "logged_refused": measured_refused, "predicted_refused": pred.refused,
            "in_sample": bool(case.get("in_sample")), "source": case["source"], "note": pred.note,
        })
    return {"rows": rows, "skipped": skipped, "stats": {
        "all": _stats([r["tokens_error"] for r in rows]),
        "out_of_sample": _stats([r["tokens_error"] for r in rows if not r["in_sample"]]),
        "refusals_agree": sum(r["logged_refused"] == r["predicted_refused"] for r in rows),
        "num_cases": len(rows)}}


def _stats(errors: list[float | None]) -> dict[str, float | int]:
    values = np.abs([e for e in errors if e is not None])
    if not len(values):
        return {"n": 0}
    return {"n": int(len(values)), "median_pct": float(np.median(values) * 100),
            "p90_pct": float(np.percentile(values, 90) * 100), "max_pct": float(values.max() * 100)}


def _fmt(value: Any, spec: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec) if spec else str(value)


def print_report(result: dict[str, Any]) -> None:
    print("| case | vLLM | TP | groups (full+sliding) | available GiB logged / predicted | weights GiB logged / "
          "predicted | KV tokens logged / predicted | error | refused logged / predicted | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in result["rows"]:
        error = _fmt(None if r["tokens_error"] is None else r["tokens_error"] * 100, "+.1f")
        tag = " (in sample)" if r["in_sample"] else ""
        print(f"| [{r['id']}]({r['source']}){tag} | {r['vllm_version']} | {r['tp']} | {r['groups']} | "
              f"{_fmt(r['logged_available_gib'])} / {r['predicted_available_gib']:.2f} | "
              f"{_fmt(r['logged_weights_gib'])} / {r['predicted_weights_gib']:.2f} | "
              f"{_fmt(r['logged_tokens'], ',')} / {r['predicted_tokens']:,} | {error} % | "
              f"{'yes' if r['logged_refused'] else 'no'} / {'yes' if r['predicted_refused'] else 'no'} | {r['note']} |")
    for s in result["skipped"]:
        print(f"skipped: [{s['id']}]({s['source']}): {s['reason']}")
    stats = result["stats"]
    for key in ("all", "out_of_sample"):
        st = stats[key]
        if st["n"]:
            print(f"|token error| {key}: n={st['n']} median {st['median_pct']:.1f} % p90 {st['p90_pct']:.1f} % "
                  f"max {st['max_pct']:.1f} %")
    print(f"refusal agrees on {stats['refusals_agree']} of {stats['num_cases']} cases")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=Path, default=DEFAULT_CASES)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    cases = yaml.safe_load(args.cases.read_text())["cases"]
    result = compare(cases)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
