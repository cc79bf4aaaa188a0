"""The engine's timed main loop and `roofline measure`: arrivals in wall-clock time, the step trace with its
timing parts, run metadata, and the command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from engine.core.config import SchedulerConfig  # noqa: E402
from engine.core.model_spec import ModelSpec  # noqa: E402
from engine.core.request import Request, SamplingParams  # noqa: E402
from engine.core.trace import read_requests, read_trace  # noqa: E402
from engine.llm_engine import EngineConfig, LLMEngine  # noqa: E402
from roofline.cli import main  # noqa: E402

TINY = ModelSpec.from_path(Path(__file__).resolve().parents[1] / "models" / "llama-tiny.json")


def tiny_engine(**config: object) -> LLMEngine:
    return LLMEngine(TINY, EngineConfig(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32, max_model_len=64),
                                        block_size=4, num_blocks=64, num_threads=1, **config))


def requests(arrivals: list[float]) -> list[Request]:
    return [Request(f"r{i}", [5 + i] * 6, SamplingParams(max_tokens=4, ignore_eos=True), arrival_time_s=t)
            for i, t in enumerate(arrivals)]


def test_arrivals_are_admitted_in_wall_clock_time() -> None:
    arrivals = [0.0, 0.15, 0.3]
    result = tiny_engine().run(requests(arrivals))
    by_id = {r.request_id: r for r in result.requests}
    for i, t in enumerate(arrivals):
        assert by_id[f"r{i}"].first_scheduled_time_s >= t
    steps = result.steps
    first_step_of = {rid: cutoff for ids, cutoff in zip(steps.request_ids, steps.arrival_cutoff_s) for rid in ids[::-1]}
    assert all(first_step_of[f"r{i}"] >= t for i, t in enumerate(arrivals))
    assert result.duration_s >= arrivals[-1]


def test_requests_csv_keeps_the_admission_order_of_requests_that_arrive_together(tmp_path: Path) -> None:
    # r0 asks for the most tokens and finishes last; the file lists the requests as they were admitted, which a
    # first-come-first-served replay of the file needs (finishing order would put r0 last).
    batch = [Request(f"r{i}", [5 + i] * 6, SamplingParams(max_tokens=max_tokens, ignore_eos=True), arrival_time_s=0.0)
             for i, max_tokens in enumerate([8, 2, 5, 1])]
    engine = tiny_engine()
    result = engine.run(batch)
    assert [r.request_id for r in result.requests][-1] == "r0" and result.admitted == ["r0", "r1", "r2", "r3"]
    engine.write_trace(tmp_path, result)
    assert read_requests(tmp_path)["request_id"].tolist() == ["r0", "r1", "r2", "r3"]


def test_step_parts_add_up_to_at_most_the_step() -> None:
    steps = tiny_engine().run(requests([0.0] * 5)).steps
    parts = steps.schedule_s + steps.execute_s + steps.sample_s + steps.bookkeeping_s
    assert ((parts <= steps.duration_s + 1e-9) & (steps.execute_s > 0)).all()
    assert (steps.start_s.diff().dropna() > 0).all()
    assert steps.step_index.tolist() == list(range(len(steps)))


def test_trace_round_trips_with_metadata(tmp_path: Path) -> None:
    engine = tiny_engine(dtype="float32", seed=4)
    engine.warm_up()
    result = engine.run(requests([0.0] * 3))
    engine.write_trace(tmp_path, result, workload="test")
    steps, meta = read_trace(tmp_path)
    assert len(steps) == len(result.steps)
    assert meta.device["type"] == "cpu" and meta.extra["num_threads"] == 1 == torch.get_num_threads()
    assert meta.dtypes["kv_cache"] == "float32" and meta.seed == 4 and meta.workload == "test"
    assert meta.source == "engine" and meta.engine_config.num_kv_blocks == 64 and meta.engine_config.dtype == "float32"
    per_request = read_requests(tmp_path)
    assert per_request.num_output_tokens.tolist() == [4, 4, 4]
    assert (per_request.ttft_s > 0).all() and (per_request.e2e_s >= per_request.ttft_s).all()


def test_measure_writes_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["measure", "--model", "llama-tiny", "--out", str(tmp_path), "--input-len", "8", "--output-len", "3",
                 "--num-requests", "3", "--request-rate", "inf", "--max-num-seqs", "4",
                 "--max-num-batched-tokens", "64", "--max-model-len", "64", "--threads", "1", "--dtype", "float32",
                 "--num-gpu-blocks-override", "32",
                 "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["num_requests"] == 3 and summary["output_tokens_per_s"] > 0
    steps, meta = read_trace(tmp_path)
    assert steps.num_decode_tokens.sum() + steps.num_prefill_tokens.sum() >= 3 * 8 + 2 * 3
    assert meta.engine_config.max_num_seqs == 4 and meta.extra["weights"] == "random"
    # compare reads the same figures from the trace (JSON floats printed with repr: exact)
    profile = Path(__file__).resolve().parent.parent / "tests" / "data" / "cpu-profile.yaml"
    assert main(["compare", "--trace", str(tmp_path), "--hardware", str(profile), "--json"]) == 0
    measured = json.loads(capsys.readouterr().out)["end_to_end"]
    for name in ("output_tokens_per_s", "mean_ttft_s", "mean_tpot_s"):
        assert measured[name]["measured"] == summary[name], name


def test_measure_runs_qwen3_moe_and_compare_reads_its_trace(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["measure", "--model", "qwen3-moe-tiny", "--out", str(tmp_path), "--input-len", "8",
                 "--output-len", "3", "--num-requests", "3", "--request-rate", "inf", "--max-num-seqs", "4",
                 "--max-num-batched-tokens", "64", "--max-model-len", "64", "--threads", "1",
                 "--num-gpu-blocks-override", "32", "--json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["num_requests"] == 3
    steps, meta = read_trace(tmp_path)
    assert meta.model["architecture"] == "Qwen3MoeForCausalLM" and meta.model["norm_topk_prob"] and len(steps) > 0
    profile = Path(__file__).resolve().parent.parent / "tests" / "data" / "cpu-profile.yaml"
    assert main(["compare", "--trace", str(tmp_path), "--hardware", str(profile), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["end_to_end"]["mean_tpot_s"]["predicted"] > 0


def test_measure_without_torch_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    assert main(["measure", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install -e '.[engine]'" in err


def test_measure_rejects_a_bad_engine_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["measure", "--out", str(tmp_path), "--max-num-seqs", "0"]) == 2
    assert "--max-num-seqs" in capsys.readouterr().err


@pytest.mark.parametrize("model", ["mixtral-8x7b", "gpt-oss-20b"])
def test_measure_refuses_other_moe_models_in_one_line(model: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["measure", "--model", model, "--out", str(tmp_path), "--num-requests", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "(mixture of experts) is not supported by the engine" in err
    assert "Qwen3MoeForCausalLM" in err


def test_warm_up_writes_only_the_reserved_block() -> None:
    engine = tiny_engine()
    assert engine.warm_up() == [2, 4, 8, 16, 32]
    for cache in engine.kv_cache.k + engine.kv_cache.v:  # [kv_heads, num_blocks, block_size, head_dim]
        assert cache[:, 0].abs().sum() > 0 and cache[:, 1:].abs().sum() == 0
