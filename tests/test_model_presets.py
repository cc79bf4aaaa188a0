"""The presets of issue 39 (Qwen3 / Qwen2.5 / Llama 3.x / Mistral / Gemma 3 / Phi-4 / GLM-4.x and their quantized
checkpoints): parameter counts against the published ones, and the architectures as vLLM runs them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.core.model_spec import ModelSpec
from roofline.cost.ops import BatchStats, chunked_attention_pairs
from roofline.engine_args import derived_max_model_len
from roofline.registry import data_dir, list_ids, load_model


def _tolerance(published: float) -> float:
    """1 %, or half a unit of the published figure's last digit where it is rounded coarser than that ("24B")."""
    text = f"{published:.10g}"
    decimals = len(text.split(".")[1]) if "." in text else 0
    return max(0.01 * published, 0.5 * 10 ** -decimals)


# Published totals in billions, from the model cards (the "Number of Parameters" lines of Qwen's cards, the parameter
# tables of Meta's Llama 3.2 card, the sizes in Mistral's and Microsoft's card titles and text).
@pytest.mark.parametrize("model_id, billions", [
    ("qwen3-0.6b", 0.6), ("qwen3-1.7b", 1.7), ("qwen3-4b", 4.0), ("qwen3-8b", 8.2), ("qwen3-14b", 14.8),
    ("qwen3-32b", 32.8),
    ("qwen2.5-0.5b", 0.49), ("qwen2.5-1.5b", 1.54), ("qwen2.5-3b", 3.09), ("qwen2.5-7b", 7.61),
    ("qwen2.5-14b", 14.7), ("qwen2.5-32b", 32.5), ("qwen2.5-72b", 72.7),
    ("llama-3.2-1b", 1.23), ("llama-3.2-3b", 3.21), ("llama-3.1-405b", 405),
    ("mistral-nemo-12b", 12), ("mistral-small-24b", 24), ("mistral-small-3.1-24b", 24),
    ("mistral-large-2407", 123), ("phi-4", 14.7),
])
def test_dense_param_counts_match_the_model_cards(model_id: str, billions: float) -> None:
    counted = load_model(model_id).num_params() / 1e9
    assert abs(counted - billions) <= _tolerance(billions), (counted, billions)


# Gemma 3 technical report (arXiv 2503.19786), Table 1: embedding and non-embedding parameters in millions (the
# 417M vision encoder is not served as text; the 4B-27B embedding rows also hold the image projector).
@pytest.mark.parametrize("model_id, embedding_m, non_embedding_m", [
    ("gemma-3-1b", 302, 698), ("gemma-3-4b", 675, 3209), ("gemma-3-12b", 1012, 10759), ("gemma-3-27b", 1416, 25600),
])
def test_gemma3_counts_match_the_technical_report(model_id: str, embedding_m: float, non_embedding_m: float) -> None:
    spec = load_model(model_id)
    embedding = spec.vocab_size * spec.hidden_size / 1e6
    assert spec.tie_word_embeddings
    assert abs(embedding - embedding_m) <= 0.01 * embedding_m
    assert abs((spec.num_params() / 1e6 - embedding) - non_embedding_m) <= 0.01 * non_embedding_m


# zai-org/GLM-4.5 README: GLM-4.5 355B total / 32B active, GLM-4.5-Air 106B / 12B (active: the layers a token runs,
# without the embedding and LM head); GLM-4.6 is GLM-4.5's architecture with a 200K context.
@pytest.mark.parametrize("model_id, total, active", [
    ("glm-4.5", 355, 32), ("glm-4.5-air", 106, 12), ("glm-4.6", 355, 32),
])
def test_glm_param_counts_match_the_readme(model_id: str, total: float, active: float) -> None:
    spec = load_model(model_id)
    embedding = spec.vocab_size * spec.hidden_size
    assert abs(spec.num_params() / 1e9 - total) <= 0.01 * total
    assert abs((spec.num_active_params() - 2 * embedding) / 1e9 - active) <= _tolerance(active)


def test_every_preset_cites_a_source_with_a_unique_hf_id() -> None:
    ids: dict[str, str] = {}
    for model_id in list_ids("model"):
        config = json.loads((data_dir("models") / f"{model_id}.json").read_text())
        if model_id in ("llama-156m", "llama-tiny", "qwen3-moe-156m", "qwen3-moe-tiny"):  # this project's own
            continue
        assert config.get("_source", "").startswith("https://huggingface.co/"), model_id
        for hf_id in [config["_source"].split("/")[3] + "/" + config["_source"].split("/")[4],
                      *config.get("_hf_ids", [])]:
            assert ids.setdefault(hf_id.lower(), model_id) == model_id, hf_id


def test_glm45_is_deepseek_moe_under_gqa() -> None:
    """vLLM models/glm4_moe.py: 3 dense layers of 12288, then 89 MoE layers of 160 experts (top 8) of 1536 and one
    shared expert, sigmoid routing with e_score_correction_bias (an fp32 gate), qkv bias, per-head q/k norm, RoPE on
    half of each head."""
    spec = load_model("glm-4.5")
    assert (spec.num_dense_layers, spec.dense_intermediate_size, spec.num_moe_layers) == (3, 12288, 89)
    assert (spec.num_experts, spec.num_experts_per_tok, spec.intermediate_size, spec.num_shared_experts) == \
        (160, 8, 1536, 1)
    assert spec.router_bias and spec.router_fp32 and spec.attention_bias and spec.qk_norm
    assert (spec.rotary_dim, spec.head_dim, spec.num_mtp_layers) == (64, 128, 1)
    air = load_model("glm-4.5-air")
    assert (air.num_dense_layers, air.qk_norm, air.num_experts) == (1, False, 128)


def test_gemma3_slides_five_layers_in_six_with_four_norms() -> None:
    spec = load_model("gemma-3-27b")
    assert spec.layer_types is not None and spec.layer_types[:6] == ("sliding_attention",) * 5 + ("full_attention",)
    assert (spec.num_sliding_layers, spec.sliding_window, spec.is_hybrid_attention) == (52, 1024, True)
    assert spec.sandwich_norms and spec.qk_norm and spec.layer_params()["norms"] == 4 * 5376
    assert derived_max_model_len(spec) == 131072  # vLLM leaves Gemma 3's linear RoPE factor out of the length


def test_gemma3_text_config_takes_transformers_defaults(tmp_path: Path) -> None:
    """HF's multimodal Gemma 3 configs leave vocab_size, tie_word_embeddings, rms_norm_eps ... out of text_config."""
    sparse = {"architectures": ["Gemma3ForConditionalGeneration"], "torch_dtype": "bfloat16",
              "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504,
                              "model_type": "gemma3_text", "num_attention_heads": 32, "num_hidden_layers": 62,
                              "num_key_value_heads": 16, "query_pre_attn_scalar": 168,
                              "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}}
    spec = ModelSpec.from_hf_config(sparse, "gemma")
    shipped = load_model("gemma-3-27b")
    assert spec.num_params() == shipped.num_params()
    assert (spec.vocab_size, spec.tie_word_embeddings, spec.num_sliding_layers) == (262208, True, 52)


def test_phi4_counts_as_llama_with_fused_projections() -> None:
    spec = load_model("phi-4")
    assert (spec.architecture, spec.num_kv_heads, spec.head_dim, spec.qk_norm, spec.attention_bias) == \
        ("Phi3ForCausalLM", 10, 128, False, False)


@pytest.mark.parametrize("model_id, method", [
    ("qwen2.5-7b-instruct-awq", "awq"), ("qwen2.5-7b-instruct-gptq-int4", "gptq"),
    ("llama-3.1-8b-instruct-w8a8", "int8"), ("llama-3.1-8b-instruct-fp8", "fp8"), ("qwen3-8b-fp8", "fp8-block"),
    ("llama-3.3-70b-instruct-fp4", "nvfp4"),
])
def test_quantized_presets_read_their_scheme(model_id: str, method: str) -> None:
    quant = load_model(model_id).checkpoint_quant
    assert quant is not None and quant.method == method


@pytest.mark.parametrize("quant, message", [
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "gptq with bits 8, group_size 128 is not supported"),
    ({"quant_method": "awq", "bits": 4, "group_size": 64}, "awq with bits 4, group_size 64 is not supported"),
])
def test_unsupported_int_quantization_names_bits_and_group(quant: dict, message: str) -> None:
    config = json.loads((data_dir("models") / "qwen3-8b.json").read_text())
    with pytest.raises(ValueError, match=message):
        ModelSpec.from_hf_config({**config, "quantization_config": quant}, "q")


def test_engine_refuses_architectures_it_does_not_build() -> None:
    from engine.model import check_supported
    for model_id in ("gemma-3-1b", "phi-4"):
        with pytest.raises(ValueError, match="is not supported by the engine"):
            check_supported(load_model(model_id), 4096)


# Llama 4 model card (meta-llama/Llama-4-Scout-17B-16E-Instruct, -Maverick-17B-128E-Instruct): 17B active each,
# 109B / 400B total. The totals include the vision encoder, which a text request does not run and the presets leave
# out: Maverick's text model is within 1 % of its 400B; Scout's is 1.1 % under its 109B (BENCHMARKS.md, model breadth).
def test_llama4_param_counts_match_the_model_card() -> None:
    scout, maverick = load_model("llama-4-scout"), load_model("llama-4-maverick")
    assert abs(maverick.num_params() / 1e9 - 400) <= 4
    assert 0.98 * 109 <= scout.num_params() / 1e9 < 109
    for spec in (scout, maverick):
        assert abs(spec.num_active_params() / 1e9 - 17) <= _tolerance(17)


def test_llama4_interleaves_moe_and_chunks_three_layers_in_four() -> None:
    """vLLM models/llama4.py: Maverick's MoE every second layer (dense MLPs of intermediate_size_mlp between), Scout's
    every layer; one shared expert; RoPE layers attend within 8192-token chunks, every fourth (NoPE) globally."""
    scout, maverick = load_model("llama-4-scout"), load_model("llama-4-maverick")
    assert (maverick.num_moe_layers, maverick.num_dense_layers, maverick.dense_intermediate_size) == (24, 24, 16384)
    assert (scout.num_moe_layers, scout.num_dense_layers, scout.num_experts, scout.num_shared_experts) == (48, 0, 16, 1)
    assert scout.chunked_local_attention and scout.sliding_window == 8192 and scout.num_sliding_layers == 36
    assert scout.layer_types is not None and scout.layer_types[3] == "full_attention"
    assert ModelSpec.from_hf_config(maverick.to_hf_config(), name=maverick.name) == maverick


def test_chunked_attention_sees_its_chunk_only() -> None:
    """A query at position p sees p mod chunk + 1 keys: decodes and prefill pairs by hand."""
    assert chunked_attention_pairs(4, 6, 4) == (3 + 4) + (1 + 2)  # positions 6, 7 | 8, 9
    assert chunked_attention_pairs(8, 0, 4) == 2 * (1 + 2 + 3 + 4)
    stats = BatchStats.from_arrays(np.array([1, 1, 3]), np.array([5, 8, 2]), np.array([True, True, True]),
                                   sliding_window=4, hybrid=True, chunked=True)
    assert stats.sliding is not None and stats.decode_pairs == 6 + 9  # the global layers: every key
    assert (stats.sliding.decode_pairs, stats.sliding.decode_max_keys) == (2 + 1, 2.0)
    assert stats.sliding.prefill_pairs == 3 + 4 + 1  # positions 2, 3 | 4
    decodes = BatchStats.from_decode_contexts(np.array([5, 8]), 4, hybrid=True, chunked=True)
    assert decodes.sliding is not None and decodes.sliding.decode_pairs == 3


@pytest.mark.parametrize("arch, layer", [
    ("Qwen3NextForCausalLM", "gated DeltaNet"), ("Qwen3_5MoeForConditionalGeneration", "gated DeltaNet"),
    ("NemotronHForCausalLM", "Mamba-2"), ("KimiLinearForCausalLM", "Kimi Delta Attention"),
])
def test_linear_attention_and_state_space_models_are_refused_naming_the_layer(arch: str, layer: str) -> None:
    config = json.loads((data_dir("models") / "qwen3-8b.json").read_text())
    with pytest.raises(ValueError, match=f"architecture '{arch}' \\(.*{layer}.*per-request .*state.*\\) is not "
                                         f"modelled; allowed: "):
        ModelSpec.from_hf_config({**config, "architectures": [arch]}, "m")
