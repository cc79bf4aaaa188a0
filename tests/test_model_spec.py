"""Model specs: published parameter counts, every preset loads, clear errors for what is not supported."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from engine.core.model_spec import ModelSpec, format_params
from roofline.registry import list_ids, resolve


def _preset(model_id: str) -> ModelSpec:
    return ModelSpec.from_path(resolve("model", model_id), name=model_id)


# Exact totals of the released safetensors checkpoints; the model cards round them to the strings.
@pytest.mark.parametrize("model_id, num_params, published", [
    ("llama-3.1-8b", 8_030_261_248, "8.03B"),
    ("llama-3.1-70b", 70_553_706_496, "70.6B"),
    ("mixtral-8x7b", 46_702_792_704, "46.7B"),
    ("qwen3-8b", 8_190_735_360, "8.19B"),
])
def test_param_count_equals_published(model_id: str, num_params: int, published: str) -> None:
    spec = _preset(model_id)
    assert spec.num_params() == num_params
    assert format_params(spec.num_params()) == published


def test_llama_156m_is_about_156m_params() -> None:
    assert format_params(_preset("llama-156m").num_params()) == "156M"


def test_mixtral_active_params_count_two_of_eight_experts() -> None:
    # Mistral AI: "12.9B active parameters per token".
    assert format_params(_preset("mixtral-8x7b").num_active_params()) == "12.9B"


@pytest.mark.parametrize("model_id", list_ids("model"))
def test_every_preset_loads_and_round_trips(model_id: str) -> None:
    spec = _preset(model_id)
    assert spec.num_params() > 0
    assert ModelSpec.from_hf_config(spec.to_hf_config(), name=model_id) == spec


def test_shipped_model_ids_are_the_issue_names() -> None:
    expected = {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-2-7b", "llama-2-13b", "llama-2-70b",
                "mistral-7b-v0.1", "mixtral-8x7b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-8b", "qwen3-32b",
                "llama-156m"}
    assert expected <= set(list_ids("model"))


def test_qwen3_has_qk_norm_and_qwen2_has_qkv_bias() -> None:
    assert _preset("qwen3-8b").qk_norm and not _preset("qwen3-8b").attention_bias
    assert _preset("qwen2.5-7b").attention_bias and not _preset("qwen2.5-7b").qk_norm


def test_model_id_is_case_insensitive() -> None:
    assert resolve("model", "Llama-3.1-8B") == resolve("model", "llama-3.1-8b")


def test_config_dir_path_loads(tmp_path: Path) -> None:
    config = json.loads(resolve("model", "llama-tiny").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert ModelSpec.from_path(tmp_path) == _preset("llama-tiny")  # named by its _name_or_path


def test_unsupported_architecture_error_names_it(tmp_path: Path) -> None:
    config = json.loads(resolve("model", "llama-tiny").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="GPT2LMHeadModel.*allowed: LlamaForCausalLM"):
        ModelSpec.from_path(path)


def test_missing_field_error_names_it(tmp_path: Path) -> None:
    config = json.loads(resolve("model", "llama-tiny").read_text())
    del config["num_hidden_layers"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="num_hidden_layers"):
        ModelSpec.from_path(path)


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{\n  "architectures": ["LlamaForCausalLM"],\n  oops\n}')
    with pytest.raises(ValueError, match=r"config\.json.*line 3"):
        ModelSpec.from_path(path)


# ---- MoE models served with tensor parallelism (issue 17) ---------------------------------------------------

# Published counts and the convention that reproduces them (module docstring of engine.core.model_spec):
# gpt-oss model card (OpenAI, 2025, table 1): 120b 116.83B total / 5.13B active, 20b 20.91B / 3.61B; active
# there leaves the embedding out (it counts the unembedding). Qwen3 model cards: 30B-A3B "30.5B in total and 3.3B
# activated", 235B-A22B "235B in total and 22B activated" (active with embedding and LM head). MiniMax-M2.5 on
# Hugging Face: 229B parameters (without the MTP modules vLLM does not load).
@pytest.mark.parametrize("model_id, total, active, with_embedding", [
    ("gpt-oss-120b", 116.83e9, 5.13e9, False),
    ("gpt-oss-20b", 20.91e9, 3.61e9, False),
    ("qwen3-235b-a22b", 235e9, 22e9, True),
    ("qwen3-235b-a22b-fp8", 235e9, 22e9, True),
    ("qwen3-30b-a3b", 30.5e9, None, True),
    ("minimax-m2.5", 229e9, None, True),
])
def test_moe_param_counts_within_1_percent_of_published(model_id: str, total: float, active: float | None,
                                                        with_embedding: bool) -> None:
    spec = _preset(model_id)
    assert spec.num_params() == pytest.approx(total, rel=0.01)
    if active is not None:
        assert spec.num_active_params(include_embedding=with_embedding) == pytest.approx(active, rel=0.01)


def test_coarse_published_active_counts() -> None:
    # Published to one or two significant figures only: Qwen3-30B-A3B "3.3B activated" (we count 3.35B with the
    # embedding and LM head, 1.6 % above), MiniMax-M2.5 "10B activated" (10.42B without the embedding).
    assert format_params(_preset("qwen3-30b-a3b").num_active_params()) == "3.35B"
    assert round(_preset("minimax-m2.5").num_active_params(include_embedding=False) / 1e9) == 10


def test_gpt_oss_alternates_sliding_and_full_layers_with_sinks() -> None:
    spec = _preset("gpt-oss-120b")
    assert spec.layer_types[:2] == ("sliding_attention", "full_attention")  # vLLM: layer_idx % 2 == 0 slides
    assert spec.num_sliding_layers == 18 and spec.is_hybrid_attention and spec.sliding_window == 128
    assert spec.attention_sinks and spec.expert_bias and spec.router_bias
    assert spec.checkpoint_quant.method == "mxfp4"
    assert spec.checkpoint_quant.ignores("model.layers.3.self_attn.qkv_proj")
    assert spec.checkpoint_quant.ignores("lm_head")
    assert not spec.checkpoint_quant.ignores("model.layers.3.mlp.experts")


def test_minimax_m2_partial_rotary_layer_qk_norm_and_block_fp8() -> None:
    spec = _preset("minimax-m2.5")
    assert (spec.rotary_dim, spec.head_dim) == (64, 128)
    assert spec.qk_norm and spec.qk_norm_per_layer
    assert spec.checkpoint_quant.method == "fp8-block"
    assert spec.checkpoint_quant.ignores("model.layers.7.block_sparse_moe.gate")
    assert not spec.checkpoint_quant.ignores("model.layers.7.self_attn.qkv_proj")


def test_qwen3_moe_reads_moe_intermediate_size() -> None:
    spec = _preset("qwen3-30b-a3b")
    assert (spec.intermediate_size, spec.num_experts, spec.num_experts_per_tok) == (768, 128, 8)
    assert spec.qk_norm and not spec.is_hybrid_attention


def test_unsupported_architecture_lists_the_moe_ones(tmp_path: Path) -> None:
    config = json.loads(resolve("model", "llama-tiny").read_text())
    config["architectures"] = ["Qwen3NextForCausalLM"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="Qwen3NextForCausalLM.*GptOssForCausalLM, Qwen3MoeForCausalLM, "
                                         "MiniMaxM2ForCausalLM, DeepseekV3ForCausalLM"):
        ModelSpec.from_path(tmp_path)


def test_unsupported_quantization_method_is_an_error(tmp_path: Path) -> None:
    config = json.loads(resolve("model", "qwen3-30b-a3b").read_text())
    config["quantization_config"] = {"quant_method": "bitsandbytes"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="quant_method 'bitsandbytes' is not supported; allowed: fp8"):
        ModelSpec.from_path(tmp_path)


def test_modelopt_hf_quant_config_is_read(tmp_path: Path) -> None:
    config = json.loads(resolve("model", "qwen3-30b-a3b").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}}))
    quant = ModelSpec.from_path(tmp_path).checkpoint_quant
    assert quant.method == "nvfp4" and quant.ignores("model.layers.1.self_attn.o_proj")


def test_aiconfigurator_style_hf_quant_config_name_is_read(tmp_path: Path) -> None:
    config = json.loads(resolve("model", "qwen3-30b-a3b").read_text())
    (tmp_path / "nvidia--Qwen3-30B-A3B-NVFP4_config.json").write_text(json.dumps(config))
    (tmp_path / "nvidia--Qwen3-30B-A3B-NVFP4_hf_quant_config.json").write_text(json.dumps(
        {"quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}}))
    spec = ModelSpec.from_path(tmp_path / "nvidia--Qwen3-30B-A3B-NVFP4_config.json")
    assert spec.checkpoint_quant.method == "nvfp4"


# aiconfigurator-core ships the published configs it models (model_configs/<org>--<name>_config.json): our
# presets must describe the same shapes. Read from the installed package; skipped without it.
_AIC_CONFIGS = {"gpt-oss-20b": "openai--gpt-oss-20b", "gpt-oss-120b": "openai--gpt-oss-120b",
                "qwen3-30b-a3b": "Qwen--Qwen3-30B-A3B", "qwen3-235b-a22b": "Qwen--Qwen3-235B-A22B",
                "qwen3-235b-a22b-fp8": "Qwen--Qwen3-235B-A22B-FP8", "minimax-m2.5": "MiniMaxAI--MiniMax-M2.5",
                "deepseek-v3": "deepseek-ai--DeepSeek-V3", "deepseek-r1": "deepseek-ai--DeepSeek-R1",
                "deepseek-v3.1-nvfp4": "nvidia--DeepSeek-V3.1-NVFP4", "kimi-k2": "moonshotai--Kimi-K2-Instruct",
                "kimi-k2.5": "moonshotai--Kimi-K2.5", "kimi-k2.5-nvfp4": "nvidia--Kimi-K2.5-NVFP4"}


@pytest.mark.parametrize("model_id", sorted(_AIC_CONFIGS))
def test_moe_preset_matches_aiconfigurator_config(model_id: str) -> None:
    aic = pytest.importorskip("aiconfigurator_core")
    path = Path(aic.__file__).parent / "model_configs" / f"{_AIC_CONFIGS[model_id]}_config.json"
    theirs = ModelSpec.from_path(path, name=model_id)
    ours = _preset(model_id)
    # The Qwen FP8 preset keeps only the gates and lm_head of the published ignore list (it also names norms,
    # which vLLM never quantizes).
    assert ours == replace(theirs, checkpoint_quant=ours.checkpoint_quant)
    assert (ours.checkpoint_quant is None) == (theirs.checkpoint_quant is None)
    if ours.checkpoint_quant is not None:
        assert ours.checkpoint_quant.method == theirs.checkpoint_quant.method


# ---- DeepSeek-V3 family: latent attention, dense first layers, shared experts (issue 38) ----------------------

# DeepSeek-V3 README (https://huggingface.co/deepseek-ai/DeepSeek-V3): "685B, which includes 671B of the Main Model
# weights and 14B of the Multi-Token Prediction (MTP) Module weights"; "37B activated". Kimi-K2 on Hugging Face:
# 1.03T parameters (the model card: "1 trillion total parameters, 32 billion activated"). Active without the
# embedding table, the convention of gpt-oss's model card (see test_moe_param_counts_within_1_percent_of_published).
@pytest.mark.parametrize("model_id, total, with_mtp, active_billions", [
    ("deepseek-v3", 671e9, 685e9, 37),
    ("deepseek-r1", 671e9, 685e9, 37),
    ("deepseek-v3.1-nvfp4", 671e9, 685e9, 37),
    ("kimi-k2", 1.03e12, 1.03e12, 32),
    ("kimi-k2.5", 1.03e12, 1.03e12, 32),
    ("kimi-k2.5-nvfp4", 1.03e12, 1.03e12, 32),
])
def test_deepseek_family_param_counts_within_1_percent_of_published(model_id: str, total: float, with_mtp: float,
                                                                     active_billions: int) -> None:
    spec = _preset(model_id)
    assert spec.num_params() == pytest.approx(total, rel=0.01)
    assert spec.num_params() + spec.num_mtp_params() == pytest.approx(with_mtp, rel=0.01)
    assert round(spec.num_active_params(include_embedding=False) / 1e9) == active_billions


def test_deepseek_v3_reads_latent_attention_dense_layers_and_grouped_routing() -> None:
    spec = _preset("deepseek-v3")
    assert spec.mla is not None and spec.mla.latent_width == 576 and spec.mla.qk_head_dim == 192
    assert (spec.mla.q_lora_rank, spec.mla.kv_lora_rank, spec.mla.v_head_dim) == (1536, 512, 128)
    assert (spec.num_dense_layers, spec.num_moe_layers, spec.dense_intermediate_size, spec.intermediate_size) == (
        3, 58, 18432, 2048)
    assert (spec.num_experts, spec.num_experts_per_tok, spec.num_shared_experts) == (256, 8, 1)
    assert (spec.num_expert_groups, spec.topk_expert_groups, spec.num_mtp_layers) == (8, 4, 1)
    assert spec.router_bias and spec.checkpoint_quant is not None and spec.checkpoint_quant.method == "fp8-block"
    # One layer's latent cache entry: 576 values; K and V are not stored per head.
    assert spec.kv_bytes_per_token(2.0) == 61 * 576 * 2.0


def test_mla_attention_params_by_hand() -> None:
    # q_a 7168x1536 + q_a_norm 1536 + q_b 1536x(128x192) + kv_a 7168x576 + kv_a_norm 512 + kv_b 512x(128x256)
    # + o 128x128x7168
    spec = _preset("deepseek-v3")
    assert spec.attention_params() == (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256
                                       + 128 * 128 * 7168)


def test_kimi_k25_wrapper_is_read_as_its_text_model_with_int4_experts() -> None:
    spec = _preset("kimi-k2.5")
    assert spec.architecture == "DeepseekV3ForCausalLM" and spec.num_experts == 384 and spec.num_heads == 64
    ck = spec.checkpoint_quant
    assert ck is not None and ck.method == "w4a16-int4"
    assert ck.ignores("model.layers.3.self_attn.q_b_proj") and ck.ignores("model.layers.3.mlp.shared_experts.down_proj")
    assert ck.ignores("model.layers.0.mlp.gate_up_proj") and not ck.ignores("model.layers.3.mlp.experts")


def test_multimodal_wrapper_ignore_list_is_renamed_to_the_text_model(tmp_path: Path) -> None:
    text = json.loads(resolve("model", "kimi-k2").read_text())
    del text["quantization_config"]
    wrapper = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": text,
               "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                       "ignore": ["language_model.model.layers.*.self_attn*"]}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(wrapper))
    ck = ModelSpec.from_path(path).checkpoint_quant
    assert ck is not None and ck.method == "nvfp4" and ck.ignore == ("model.layers.*.self_attn*",)


def test_deepseek_v32_sparse_attention_is_refused_by_name(tmp_path: Path) -> None:
    config = json.loads(resolve("model", "deepseek-v3").read_text())
    config.update(architectures=["DeepseekV32ForCausalLM"], index_topk=2048)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="DeepseekV32ForCausalLM.*sparse attention.*2048 keys.*not modelled"):
        ModelSpec.from_path(path)


def test_compressed_tensors_scheme_other_than_w4a16_group_32_is_an_error(tmp_path: Path) -> None:
    config = json.loads(resolve("model", "kimi-k2.5").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 128
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="compressed-tensors scheme.*allowed: 4-bit int weights, group_size 32"):
        ModelSpec.from_path(path)
