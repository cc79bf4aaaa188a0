"""A checkpoint's own quantization, read from its config as vLLM reads it: `quantization_config` (fp8, ModelOpt,
compressed-tensors, AWQ, GPTQ, MXFP4) or NVIDIA's `hf_quant_config.json` -> `CheckpointQuant` (the scheme name of
`roofline.cost.quant` and the modules left unquantized). Torch-free; `engine.core.model_spec` re-exports it.

    checkpoint_quant({"quant_method": "fp8", "weight_block_size": [128, 128]}, "model x").method   # "fp8-block"
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

# quant_method of a checkpoint's quantization_config (or hf_quant_config.json's quant_algo) -> our scheme name
# (`roofline.cost.quant`). fp8 with weight_block_size [128, 128] is "fp8-block".
# compressed-tensors 4-bit integer weights with a bf16 scale per group of 32, 16-bit activations (Kimi-K2.5's experts)
# is "w4a16-int4".
# AutoAWQ / GPTQ 4-bit weights in groups of 128 (vLLM awq_marlin / gptq_marlin) are "awq" / "gptq";
# compressed-tensors 8-bit integer weights and activations (W8A8, vLLM `CompressedTensorsW8A8Int8`) "int8", its 8-bit
# float weights and activations (`CompressedTensorsW8A8Fp8`) "fp8".
CHECKPOINT_QUANT_METHODS = ("fp8", "fp8-block", "mxfp4", "nvfp4", "w4a16-int4", "awq", "gptq", "int8")
_INT4_GROUP_SIZE = 128


@dataclass(frozen=True)
class CheckpointQuant:
    """How a checkpoint's weights are stored, as its config says (vLLM reads the same fields):
    `method` one of CHECKPOINT_QUANT_METHODS; `ignore` the module-name patterns left unquantized
    (`modules_to_not_convert`, `ignore`, `exclude_modules`), as written there."""

    method: str
    ignore: tuple[str, ...] = ()
    # "modelopt" for NVIDIA ModelOpt's FP8 checkpoints (quant_method modelopt, or hf_quant_config.json): vLLM loads
    # them only on GPUs with fp8 tensor cores (`ModelOptFp8Config.get_min_capability` 89), unlike its own fp8 format,
    # which it runs weight-only on Marlin there; "" otherwise.
    producer: str = ""
    # The KV-cache dtype a ModelOpt checkpoint declares (`kv_cache_scheme` {dynamic: false, num_bits: 8, type: float}
    # or `kv_cache_quant_algo` "FP8" -> "fp8"; "NVFP4" -> "nvfp4"), read as vLLM's `get_kv_cache_quant_algo_string`
    # (vllm/utils/torch_utils.py) reads it; "" when the checkpoint declares none or is not ModelOpt. Whether vLLM
    # uses it for --kv-cache-dtype auto depends on its version (`roofline.cost.quant.resolve_kv_cache_dtype`).
    kv_cache_dtype: str = ""

    def __post_init__(self) -> None:
        if self.method not in CHECKPOINT_QUANT_METHODS:
            raise ValueError(f"quantization method {self.method!r} is not supported; "
                             f"allowed: {', '.join(CHECKPOINT_QUANT_METHODS)}")

    def to_hf_config(self) -> dict[str, Any]:
        """A `quantization_config` that `checkpoint_quant` reads back as this."""
        if self.method == "fp8" and self.producer == "modelopt":
            raw: dict[str, Any] = {"quant_method": "modelopt", "quant_algo": "FP8"}
        elif self.method in ("fp8", "fp8-block"):
            raw = {"quant_method": "fp8", "activation_scheme": "dynamic"}
            if self.method == "fp8-block":
                raw["weight_block_size"] = [128, 128]
        elif self.method == "nvfp4":
            raw = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
        elif self.method in ("awq", "gptq"):
            raw = {"quant_method": self.method, "bits": 4, "group_size": _INT4_GROUP_SIZE}
        elif self.method == "int8":
            raw = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
                "targets": ["Linear"], "input_activations": {"num_bits": 8, "type": "int", "strategy": "token"},
                "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}}
        elif self.method == "w4a16-int4":
            raw = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
                "targets": ["Linear"], "input_activations": None,
                "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32}}}}
        else:
            raw = {"quant_method": self.method}
        if self.kv_cache_dtype:
            raw["kv_cache_quant_algo"] = self.kv_cache_dtype.upper()
        return {**raw, "modules_to_not_convert": list(self.ignore)}

    def ignores(self, module: str) -> bool:
        """Whether a module (its name in vLLM, e.g. "model.layers.0.self_attn.qkv_proj") is left unquantized:
        a pattern matches when it is a dotted prefix of the name or fnmatch-matches it (vLLM's `is_layer_skipped`
        prefix test; `*` wildcards of modelopt's exclude_modules; compressed-tensors' "re:" patterns are regular
        expressions matched at the start of the name, vLLM's `find_matched_target` / `_is_equal_or_regex_match`)."""
        return any(re.match(p[3:], module) is not None if p.startswith("re:") else
                   fnmatch.fnmatch(module, p) or fnmatch.fnmatch(module, p + ".*") or f".{p}." in f".{module}."
                   for p in self.ignore)


def checkpoint_quant(raw: dict[str, Any] | None, where: str) -> CheckpointQuant | None:
    """A config's `quantization_config` (or hf_quant_config.json's "quantization", marked quant_method
    "modelopt") -> CheckpointQuant; None when the checkpoint is not quantized; ValueError for a method not
    supported. As vLLM reads them: fp8 (`Fp8Config`: `weight_block_size` [128, 128] = block-scaled,
    `ignored_layers` / `modules_to_not_convert`), mxfp4 (`Mxfp4Config`: `modules_to_not_convert`), ModelOpt
    (`quant_algo` FP8 / NVFP4, `exclude_modules`)."""
    if not raw:
        return None
    method = str(raw.get("quant_method", "")).lower()
    ignore = tuple(raw.get("modules_to_not_convert") or raw.get("ignored_layers") or raw.get("ignore")
                   or raw.get("exclude_modules") or ())
    if method == "compressed-tensors":
        method = _compressed_tensors_method(raw, where)
    elif method in ("awq", "gptq"):
        bits, group = raw.get("bits", raw.get("w_bit")), raw.get("group_size", raw.get("q_group_size"))
        if (bits, group) != (4, _INT4_GROUP_SIZE):
            raise ValueError(f"{where}: {method} with bits {bits}, group_size {group} is not supported; allowed: "
                             f"bits 4, group_size {_INT4_GROUP_SIZE}")
    elif method == "modelopt":
        algo = str(raw.get("quant_algo", "")).upper()
        method = {"FP8": "fp8", "NVFP4": "nvfp4"}.get(algo, f"modelopt {algo}")
    elif method == "fp8":
        block = raw.get("weight_block_size")
        if block is not None:
            if list(block) != [128, 128]:
                raise ValueError(f"{where}: fp8 weight_block_size {block} is not supported; allowed: [128, 128]")
            method = "fp8-block"
    if method not in CHECKPOINT_QUANT_METHODS:
        raise ValueError(f"{where}: quantization_config quant_method {method!r} is not supported; "
                         f"allowed: fp8 (per-tensor or weight_block_size [128, 128]), mxfp4, modelopt FP8 / NVFP4, "
                         f"awq / gptq (4-bit, group 128), compressed-tensors W4A16 int4 group 32, W8A8 int8 or fp8")
    modelopt = str(raw.get("quant_method", "")).lower().startswith("modelopt")
    return CheckpointQuant(method=method, ignore=ignore, producer="modelopt" if modelopt and method == "fp8" else "",
                           kv_cache_dtype=_modelopt_kv_cache_dtype(raw, where) if modelopt else "")


def _modelopt_kv_cache_dtype(raw: dict[str, Any], where: str) -> str:
    """The KV-cache dtype a ModelOpt config declares, as vLLM's `get_kv_cache_quant_algo_string` reads it: the first
    of `kv_cache_scheme` / `kv_cache_quant_algo` (in a nested "quantization" or at the top); a scheme dict of static
    8-bit floats is fp8; a string "FP8" / "NVFP4" (any case) is fp8 / nvfp4. Anything else: ValueError (vLLM warns
    and falls back to the model dtype; the simulator names it instead of guessing)."""
    inner = raw.get("quantization", raw)
    algo = (inner.get("kv_cache_scheme") or raw.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
            or raw.get("kv_cache_quant_algo"))
    if not algo:
        return ""
    if isinstance(algo, dict):
        if algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
            return "fp8"
    elif str(algo).lower() in ("fp8", "nvfp4"):
        return str(algo).lower()
    raise ValueError(f"{where}: quantization_config kv_cache_scheme / kv_cache_quant_algo {algo!r} is not supported; "
                     "allowed: FP8, NVFP4, or {dynamic: false, num_bits: 8, type: float}")


def _compressed_tensors_method(raw: dict[str, Any], where: str) -> str:
    """A compressed-tensors config's one weight scheme: 4-bit symmetric integer weights per group of 32 with
    16-bit activations (vLLM `CompressedTensorsWNA16`; its MoE `CompressedTensorsWNA16MarlinMoEMethod`) is
    "w4a16-int4"; every other scheme a ValueError naming it."""
    groups = list((raw.get("config_groups") or {}).values())
    schemes = {(w.get("type"), w.get("num_bits"), w.get("strategy"), w.get("group_size"),
                g.get("input_activations") is None) for g in groups for w in [g.get("weights") or {}]}
    if schemes == {("int", 4, "group", 32, True)}:
        return "w4a16-int4"
    # W8A8: 8-bit weights (per channel or per tensor) and 8-bit activations (vLLM CompressedTensorsW8A8Int8 / Fp8).
    acts = {(a.get("type"), a.get("num_bits")) for g in groups for a in [g.get("input_activations") or {}]}
    eight_bit = {(t, b, st) for t, b, st, _, _ in schemes}
    if eight_bit == {("int", 8, "channel")} or eight_bit == {("int", 8, "tensor")}:
        if acts == {("int", 8)}:
            return "int8"
    if eight_bit in ({("float", 8, "channel")}, {("float", 8, "tensor")}) and acts == {("float", 8)}:
        return "fp8"
    raise ValueError(f"{where}: compressed-tensors scheme {sorted(map(str, schemes))} is not supported; "
                     f"allowed: 4-bit int weights, group_size 32, 16-bit activations (W4A16); 8-bit int or float "
                     f"weights per channel or tensor with 8-bit activations of the same type (W8A8)")
