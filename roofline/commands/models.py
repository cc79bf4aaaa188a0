"""`roofline models`: the shipped model presets (a table, or JSON with --json): architecture, parameters (total and
active per token), KV-cache bytes per token, attention layout, the checkpoint's quantization per module, and whether
the kernels that quantization runs on were fitted on measured operator tables.

`fitted`: "tables" when every kernel the preset runs by default has been fitted on aiconfigurator-core's vLLM operator
tables (16-bit, fp8, fp8-block and NVFP4 GEMMs; the MoE formats of `roofline.cost.kernels.moe`; MLA; attention), else
what is not: weight-only linear layers (AWQ / GPTQ: Marlin or Machete, `roofline.cost.kernels.gemm_weight_only`) and
INT8 W8A8 (CUTLASS int8, priced with the fp8 kernels' fit) have no table. The HF id column is the checkpoint the
preset stands for (`--model ORG/NAME` resolves to it).
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from engine.core.model_spec import ModelSpec, format_params
from roofline.commands import HELP
from roofline.commands.profiles import format_table
from roofline.cost.quant import QuantConfig, resolve_for_model
from roofline.registry import data_dir, list_ids, load_model, preset_hf_ids

# Linear-layer schemes whose kernels no operator table times (module docstring).
_UNFITTED_LINEAR = {"awq": "AWQ int4 (Marlin)", "gptq": "GPTQ int4 (Machete on Hopper, else Marlin)",
                    "w4a16-int4": "W4A16 int4 (Machete on Hopper, else Marlin)",
                    "int8": "INT8 W8A8 (CUTLASS int8: the fp8 kernels' fit)"}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("models", help=HELP["models"],
                                   description="List the shipped model presets (HF config.json files) with their "
                                   "architecture, parameters, KV bytes per token, quantization and whether its "
                                   "kernels are fitted on operator tables.")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.set_defaults(run=run)
    return parser


def quantization(spec: ModelSpec) -> str:
    """The checkpoint's scheme per module ("-" unquantized; "attention bf16, experts mxfp4" where they differ)."""
    if spec.checkpoint_quant is None:
        return "-"
    q = resolve_for_model(QuantConfig.from_user(model_dtype=spec.torch_dtype), spec)
    linear = q.quantization if q.quantization != "none" else q.act_dtype
    experts = q.experts[0] if q.experts[0] != "none" else q.act_dtype
    return linear if not spec.is_moe or experts == linear else f"attention {linear}, experts {experts}"


def fitted(spec: ModelSpec) -> str:
    """"tables", or the linear layers' format whose kernel no operator table times (module docstring)."""
    if spec.checkpoint_quant is None:
        return "tables"
    q = resolve_for_model(QuantConfig.from_user(model_dtype=spec.torch_dtype), spec)
    return f"no: {_UNFITTED_LINEAR[q.quantization]}" if q.quantization in _UNFITTED_LINEAR else "tables"


def attention(spec: ModelSpec) -> str:
    if spec.is_mla:
        return "MLA"
    if spec.is_hybrid_attention:
        return f"{spec.num_sliding_layers} sliding ({spec.sliding_window}) + {spec.num_layers - spec.num_sliding_layers} full"
    return f"sliding ({spec.sliding_window})" if spec.sliding_window is not None else "full"


def summary(model_id: str, spec: ModelSpec) -> dict[str, Any]:
    hf_ids = sorted(h for h, p in preset_hf_ids().items() if p == model_id)
    source = json.loads((data_dir("models") / f"{model_id}.json").read_text()).get("_source", "")
    match = re.match(r"^https://huggingface\.co/([\w.-]+/[\w.-]+)", source)
    kv_dtype_bytes = 2.0  # the KV cache in the 16-bit activation dtype (--kv-cache-dtype auto)
    return {
        "id": model_id,
        "hf_id": match.group(1) if match else None,
        "also_hf_ids": [h for h in hf_ids if not match or h != match.group(1).lower()],
        "architecture": spec.architecture,
        "num_layers": spec.num_layers,
        "hidden_size": spec.hidden_size,
        "num_heads": spec.num_heads,
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "intermediate_size": spec.intermediate_size,
        "vocab_size": spec.vocab_size,
        "num_experts": spec.num_experts,
        "num_experts_per_tok": spec.num_experts_per_tok,
        "num_params": spec.num_params(),
        "num_active_params": spec.num_active_params(),
        "kv_bytes_per_token_16bit": spec.kv_bytes_per_token(kv_dtype_bytes),
        "attention": attention(spec),
        "quantization": quantization(spec),
        "fitted": fitted(spec),
        "max_position_embeddings": spec.max_position_embeddings,
    }


def _kib(n: float) -> str:
    return f"{n / 1024:.0f}" if n >= 10 * 1024 else f"{n / 1024:.1f}"


def run(args: argparse.Namespace) -> int:
    rows = [summary(mid, load_model(mid)) for mid in list_ids("model")]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ["id", "architecture", "layers", "params", "active", "KV KiB/token", "attention", "quantization",
              "fitted", "context"]
    table = [[str(r["id"]), str(r["architecture"]), str(r["num_layers"]), format_params(r["num_params"]),
              format_params(r["num_active_params"]), _kib(r["kv_bytes_per_token_16bit"]), str(r["attention"]),
              str(r["quantization"]), str(r["fitted"]), str(r["max_position_embeddings"])] for r in rows]
    print(format_table(header, table))
    print("\nactive: parameters one token runs through (MoE: its top-k experts), embedding and LM head included; KV "
          "KiB/token: K and V of one token over all layers in a 16-bit cache (fp8: half), unsharded; fitted: tables = "
          "every kernel the preset runs by default is fitted on measured vLLM operator tables (aiconfigurator-core) "
          "on the GPUs whose tables hold its format (roofline profiles: per GPU), else the format that is not; fp8 / "
          "NVFP4 on a GPU without their tensor cores run weight-only on Marlin, unfitted; --model also takes each "
          "preset's HF id (--json: hf_id, also_hf_ids).")
    return 0
