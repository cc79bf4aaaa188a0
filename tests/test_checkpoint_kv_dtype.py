"""A ModelOpt checkpoint's declared KV-cache dtype, and --kv-cache-dtype auto resolving to it from vLLM 0.17 on
(`engine.core.checkpoint_quant`, `roofline.cost.quant.resolve_kv_cache_dtype`; vllm/utils/torch_utils.py
`get_kv_cache_quant_algo_string` / `resolve_kv_cache_dtype_string`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.core.checkpoint_quant import checkpoint_quant
from roofline.cost.quant import resolve_kv_cache_dtype
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.registry import load_model
from roofline.sim.deployment import make_deployment


@pytest.mark.parametrize("raw, kv", [
    ({"quant_method": "modelopt", "quant_algo": "NVFP4",
      "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}, "fp8"),  # nvidia/Kimi-K2.5-NVFP4
    ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}, "fp8"),  # hf_quant_config.json
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "NVFP4"}, "nvfp4"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, ""),  # declares none
    ({"quant_method": "fp8", "kv_cache_quant_algo": "FP8"}, ""),  # vLLM reads it for ModelOpt configs only
])
def test_declared_kv_dtype_is_read_as_vllm_reads_it(raw: dict, kv: str) -> None:
    ck = checkpoint_quant(raw, "model x")
    assert ck is not None and ck.kv_cache_dtype == kv
    assert checkpoint_quant(ck.to_hf_config(), "model x") == ck  # the round trip keeps it


def test_unknown_declared_kv_dtype_names_the_field() -> None:
    with pytest.raises(ValueError, match="kv_cache_scheme / kv_cache_quant_algo 'INT8' is not supported"):
        checkpoint_quant({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "INT8"}, "m")


@pytest.mark.parametrize("requested, version, resolved", [
    ("auto", "0.32.0", "fp8"),
    ("auto", "0.17.0", "fp8"),
    ("auto", "0.16.0", "auto"),  # read absent in 0.11.0 and 0.13.0; the rule holds from 0.17.0
    ("bfloat16", "0.32.0", "bfloat16"),  # an explicit value wins
])
def test_auto_takes_the_checkpoints_kv_dtype_by_version(requested: str, version: str, resolved: str) -> None:
    assert resolve_kv_cache_dtype(requested, load_model("kimi-k2.5-nvfp4"), version) == resolved
    assert resolve_kv_cache_dtype(requested, load_model("qwen3-32b"), version) == requested  # declares nothing


def test_nvfp4_kv_cache_is_refused_where_vllm_would_use_it() -> None:
    spec = load_model("kimi-k2.5-nvfp4")
    assert spec.checkpoint_quant is not None
    nvfp4 = replace(spec, checkpoint_quant=replace(spec.checkpoint_quant, kv_cache_dtype="nvfp4"))
    assert resolve_kv_cache_dtype("auto", nvfp4, "0.17.0") == "auto"  # 0.17's map has FP8 only
    with pytest.raises(UserError, match="NVFP4 KV cache.*pass --kv-cache-dtype fp8 or bfloat16"):
        resolve_kv_cache_dtype("auto", nvfp4, "0.32.0")


def test_the_deployment_sizes_the_cache_in_the_declared_dtype_and_says_so() -> None:
    engine = dict(tensor_parallel_size=4, enable_expert_parallel=True)
    auto = make_deployment("kimi-k2.5-nvfp4", "b200", EngineArgs(**engine))
    bf16 = make_deployment("kimi-k2.5-nvfp4", "b200", EngineArgs(**engine, kv_cache_dtype="bfloat16"))
    assert auto.quant.kv_bytes_per_element == 1.0 and bf16.quant.kv_bytes_per_element == 2.0
    assert auto.cost_model.kv_bytes_per_token_per_rank() * 2 == bf16.cost_model.kv_bytes_per_token_per_rank()
    assert auto.engine_record["kv_cache_dtype"] == "fp8"
    assert auto.engine_record["kv_cache_dtype_source"] == "checkpoint"
    assert bf16.engine_record["kv_cache_dtype"] == "bfloat16" and "kv_cache_dtype_source" not in bf16.engine_record
