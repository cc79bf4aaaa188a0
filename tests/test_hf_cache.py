"""`--model ORG/NAME`: a shipped preset by its HF id, then the local Hugging Face cache, then a path; never the
network (roofline.hf_cache, roofline.registry.resolve_model), on a fake cache folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from roofline.cli import main
from roofline.errors import UserError
from roofline.hf_cache import cached_config, hub_cache_dir
from roofline.registry import data_dir, load_model, preset_hf_ids, resolve_model

CONFIG = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 5120, "intermediate_size": 17408,
          "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
          "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False}


def cache_model(hub: Path, hf_id: str, config: dict, commit: str = "a" * 40, ref: bool = True,
                quant: dict | None = None) -> Path:
    """A snapshot laid out as huggingface_hub writes it: the file in blobs/, a link to it in snapshots/<commit>/."""
    repo = hub / f"models--{hf_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, content in (("config.json", config), ("hf_quant_config.json", quant)):
        if content is not None:
            blob = repo / "blobs" / f"{commit}-{name}"
            blob.write_text(json.dumps(content))
            (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
    return snapshot / "config.json"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    (tmp_path / "hub").mkdir()
    return tmp_path / "hub"


def test_cache_folder_follows_huggingface_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hub_cache_dir() == tmp_path / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache_dir() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "legacy"))
    assert hub_cache_dir() == tmp_path / "legacy"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "new"))
    assert hub_cache_dir() == tmp_path / "new"


def test_cached_model_resolves_by_hf_id(hub: Path) -> None:
    config = cache_model(hub, "acme/Qwen3-Custom-14B", CONFIG)
    assert resolve_model("acme/Qwen3-Custom-14B") == (config, "acme/Qwen3-Custom-14B")
    spec = load_model("acme/Qwen3-Custom-14B")
    assert (spec.name, spec.num_layers, spec.hidden_size, spec.qk_norm) == ("acme/Qwen3-Custom-14B", 40, 5120, True)
    assert spec.checkpoint_quant is None


def test_hf_home_locates_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    cache_model(tmp_path / "hf" / "hub", "acme/Qwen3-Custom-14B", CONFIG)
    assert load_model("acme/Qwen3-Custom-14B").num_layers == 40


def test_cached_quantization_is_read(hub: Path) -> None:
    """quantization_config inside config.json, and NVIDIA ModelOpt's hf_quant_config.json beside it."""
    cache_model(hub, "Org/Fp8", {**CONFIG, "quantization_config": {"quant_method": "fp8",
                                                                    "activation_scheme": "dynamic"}})
    assert load_model("Org/Fp8").checkpoint_quant.method == "fp8"  # type: ignore[union-attr]
    cache_model(hub, "acme/Qwen3-Custom-14B-NVFP4", CONFIG,
                quant={"quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}})
    quant = load_model("acme/Qwen3-Custom-14B-NVFP4").checkpoint_quant
    assert quant is not None and (quant.method, quant.ignore) == ("nvfp4", ("lm_head",))


def test_refs_main_picks_the_snapshot(hub: Path) -> None:
    cache_model(hub, "Org/Two", {**CONFIG, "num_hidden_layers": 2}, commit="b" * 40, ref=False)
    cache_model(hub, "Org/Two", {**CONFIG, "num_hidden_layers": 3}, commit="c" * 40, ref=True)
    assert load_model("Org/Two").num_layers == 3


def test_several_snapshots_without_refs_main_is_one_line(hub: Path) -> None:
    cache_model(hub, "Org/Two", CONFIG, commit="b" * 40, ref=False)
    cache_model(hub, "Org/Two", CONFIG, commit="c" * 40, ref=False)
    with pytest.raises(UserError, match=r"^--model Org/Two: 2 cached snapshots .* pass one snapshot folder"):
        load_model("Org/Two")


def test_shipped_preset_wins_over_the_cache(hub: Path) -> None:
    cache_model(hub, "Qwen/Qwen3-32B", {**CONFIG, "num_hidden_layers": 1})
    assert resolve_model("qwen/QWEN3-32b") == (data_dir("models") / "qwen3-32b.json", "qwen3-32b")
    assert load_model("Qwen/Qwen3-32B").num_layers == 64


def test_every_preset_hf_id_names_its_own_preset() -> None:
    ids = preset_hf_ids()
    assert ids["meta-llama/llama-3.1-8b-instruct"] == "llama-3.1-8b"
    for hf_id, preset in ids.items():
        assert resolve_model(hf_id)[1] == preset


def test_a_path_comes_last(hub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "local" / "model").mkdir(parents=True)
    (tmp_path / "local" / "model" / "config.json").write_text(json.dumps(CONFIG))
    monkeypatch.chdir(tmp_path / "local")
    assert load_model("model").num_layers == 40  # not an HF id: a path
    monkeypatch.chdir(tmp_path)
    assert load_model("local/model").num_layers == 40  # looks like an HF id, not cached: the path


def test_a_miss_says_where_it_looked(hub: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cached_config("acme/Qwen3-Custom-14B") == f"{hub / 'models--acme--Qwen3-Custom-14B'}: no such folder"
    code = main(["simulate", "--model", "acme/Qwen3-Custom-14B", "--hardware", "h100-sxm", "--num-requests", "2"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert str(hub / "models--acme--Qwen3-Custom-14B") in err and "huggingface-cli download acme/Qwen3-Custom-14B" in err
    assert "pass a config.json or model directory as --model" in err


def test_a_snapshot_without_config_is_a_miss(hub: Path) -> None:
    (hub / "models--Org--Empty" / "snapshots" / ("d" * 40)).mkdir(parents=True)
    with pytest.raises(UserError, match=r"models--Org--Empty: no snapshots/\*/config.json"):
        load_model("Org/Empty")


def test_simulate_runs_a_cached_model(hub: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache_model(hub, "acme/Qwen3-Custom-14B", CONFIG)
    code = main(["simulate", "--model", "acme/Qwen3-Custom-14B", "--hardware", "h100-sxm", "--num-prompts", "4",
                 "--dataset-name", "random", "--random-input-len", "64", "--random-output-len", "4", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["model"], summary["num_requests"]) == ("acme/Qwen3-Custom-14B", 4)
