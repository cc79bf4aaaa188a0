"""Model specs: published parameter counts, every preset loads, clear errors for what is not supported."""

from __future__ import annotations

import json
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
