"""The presets of issue 39 (Qwen3 / Qwen2.5 / Llama 3.x / Mistral / Gemma 3 / Phi-4 / GLM-4.x and their quantized
checkpoints): parameter counts against the published ones, and the architectures as vLLM runs them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from engine.core.model_spec import ModelSpec
from roofline.cost.ops import BatchStats, chunked_attention_pairs
from roofline.engine_args import derived_max_model_len
from roofline.registry import data_dir, list_ids, load_model

PUBLISHED = yaml.safe_load((Path(__file__).resolve().parents[1] / "benchmarks" / "data"
                            / "published_param_counts.yaml").read_text())["models"]


def _tolerance(published: float) -> float:
    """1 %, or half a unit of the published figure's last digit where it is rounded coarser than that ("24B")."""
    text = f"{published:.10g}"
    decimals = len(text.split(".")[1]) if "." in text else 0
    return max(0.01 * published, 0.5 * 10 ** -decimals)


@pytest.mark.parametrize("entry", PUBLISHED, ids=[e["model"] for e in PUBLISHED])
def test_param_counts_match_the_published_ones(entry: dict) -> None:
    """benchmarks/data/published_param_counts.yaml: each figure within 1 % (or its rounding); a total that includes a
    vision encoder the preset leaves out: at most it (within its rounding) and within 2 % below."""
    spec = load_model(entry["model"])
    embedding = spec.vocab_size * spec.hidden_size / 1e9
    total = spec.num_params() / 1e9
    if "total_b" in entry:
        if "total_note" in entry:
            assert 0.98 * entry["total_b"] <= total <= entry["total_b"] + _tolerance(entry["total_b"]), total
        else:
            assert abs(total - entry["total_b"]) <= _tolerance(entry["total_b"]), total
    if "active_b" in entry:
        head = 0.0 if spec.tie_word_embeddings else embedding
        active = spec.num_active_params() / 1e9 - ((embedding + head) if "active_counts" in entry else 0.0)
        assert abs(active - entry["active_b"]) <= _tolerance(entry["active_b"]), active
    if "embedding_b" in entry:
        assert abs(embedding - entry["embedding_b"]) <= 0.01 * entry["embedding_b"]
        assert abs(total - embedding - entry["non_embedding_b"]) <= 0.01 * entry["non_embedding_b"]


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
    ("llama-3.3-70b-instruct-fp4", "nvfp4"), ("glm-4.5-air-fp8", "fp8"), ("glm-4.6-fp8", "fp8"),
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


def test_simulate_lists_what_it_leaves_out_of_the_model() -> None:
    from roofline.commands.simulate import model_unmodelled
    assert any("chunked local attention's KV blocks" in n for n in model_unmodelled(load_model("llama-4-scout")))
    assert any("multi-token-prediction" in n for n in model_unmodelled(load_model("glm-4.5")))
    assert model_unmodelled(load_model("llama-3.1-8b")) == ()


# The shape fields the simulator reads, compared between a shipped preset and the same checkpoint's config.json as
# aiconfigurator-core 0.12.0 ships it (`aiconfigurator_core/model_configs/ORG--NAME_config.json`, copied there from
# the Hugging Face hub): the presets written from the published configs must equal them.
SHAPE_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "vocab_size", "head_dim", "num_local_experts", "num_experts", "num_experts_per_tok",
                "moe_intermediate_size", "n_routed_experts", "n_shared_experts", "first_k_dense_replace",
                "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_group",
                "topk_group", "tie_word_embeddings", "interleave_moe_layer_step", "attention_chunk_size",
                "sliding_window", "shared_expert_intermediate_size", "intermediate_size_mlp")


def _aic_configs() -> dict[str, Path]:
    aic = pytest.importorskip("aiconfigurator_core")
    folder = Path(aic.__file__).resolve().parent / "model_configs"
    return {_hf_key(p.name[:-len("_config.json")].split("--", 1)[1]): p for p in folder.glob("*_config.json")
            if not p.name.endswith("hf_quant_config.json")}


def _hf_key(name: str) -> str:
    """A checkpoint's name without its org, case and Meta's old "Meta-" prefix (Meta-Llama-3.1-8B = Llama-3.1-8B)."""
    name = name.lower()
    return name[len("meta-"):] if name.startswith("meta-llama") else name


def _text_fields(config: dict) -> dict:
    return {**config, **config.get("text_config", {})}


def test_presets_equal_the_hf_configs_aiconfigurator_ships() -> None:
    configs = _aic_configs()
    compared = []
    for model_id in list_ids("model"):
        preset = json.loads((data_dir("models") / f"{model_id}.json").read_text())
        source = preset.get("_source", "")
        if not source.startswith("https://huggingface.co/"):  # the tiny CPU models' made-up shapes
            continue
        name = _hf_key(source[len("https://huggingface.co/"):].split("/blob/")[0].split("/")[-1])
        if name not in configs:
            continue
        ours, theirs = _text_fields(preset), _text_fields(json.loads(configs[name].read_text()))
        for field in SHAPE_FIELDS:
            if field in theirs:
                assert ours.get(field) == theirs[field], (model_id, field, ours.get(field), theirs[field])
        compared.append(model_id)
    # 24 presets have a counterpart in aiconfigurator-core 0.12.0 (Qwen3, Llama 3.1 / 4, DeepSeek-V3/R1,
    # Kimi-K2/K2.5, gpt-oss, MiniMax-M2.5, Mixtral, their FP8 / NVFP4 checkpoints).
    assert len(compared) >= 24, compared
