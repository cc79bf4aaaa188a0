"""`roofline compare --vllm-bench`: a saved vllm bench serve result (files built from vLLM 0.32's documented
result keys) against the simulated run, metric by metric; what the file lacks is named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roofline.cli import main
from roofline.commands import compare as compare_command
from roofline.engine_args import VLLM_VERSION
from roofline.sim.deployment import make_deployment

SMALL_ENGINE = ["--max-model-len", "4096", "--num-gpu-blocks-override", "2000"]


def summary_only_result(path: Path, **overrides: object) -> Path:
    """A result as `vllm bench serve --save-result` writes it without --save-detailed (vLLM 0.32 keys)."""
    n = 40
    record = {
        "date": "20250101-120000", "endpoint_type": "openai", "backend": "openai", "label": None,
        "model_id": "meta-llama/Llama-3.1-8B", "tokenizer_id": "meta-llama/Llama-3.1-8B", "num_prompts": n,
        "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 8,
        "duration": 4.0, "completed": n, "failed": 0, "total_input_tokens": n * 255, "total_output_tokens": n * 32,
        "request_throughput": n / 4.0, "request_goodput": None, "output_throughput": n * 32 / 4.0,
        "total_token_throughput": n * 287 / 4.0, "latencies": [0.8] * n, "queue_times": [0.1] * n,
        "max_output_tokens_per_s": 400.0, "max_concurrent_requests": 16, "rtfx": 0.0,
        "mean_ttft_ms": 40.0, "median_ttft_ms": 38.0, "std_ttft_ms": 5.0, "p50_ttft_ms": 38.0, "p99_ttft_ms": 60.0,
        "mean_tpot_ms": 12.0, "median_tpot_ms": 12.0, "std_tpot_ms": 1.0, "p50_tpot_ms": 12.0, "p99_tpot_ms": 15.0,
        "mean_itl_ms": 12.0, "median_itl_ms": 11.0, "std_itl_ms": 3.0, "p50_itl_ms": 11.0, "p99_itl_ms": 30.0,
    }
    record.update(overrides)
    path.write_text(json.dumps(record))
    return path


def compare_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["compare", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_summary_only_file_every_metric_side_by_side_and_what_is_missing(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = summary_only_result(tmp_path / "r.json")
    out = compare_json(["--vllm-bench", str(path), "--hardware", "h100-sxm", "--random-input-len", "256",
                        "--random-output-len", "32"], capsys)
    assert out["model"] == "llama-3.1-8b"  # meta-llama/Llama-3.1-8B names a shipped model
    rows = {row["metric"]: row for row in out["metrics"]}
    assert {"duration", "request_throughput", "output_throughput", "mean_ttft_ms", "p50_itl_ms", "p99_tpot_ms",
            "max_concurrent_requests"} <= set(rows)
    assert rows["completed"]["predicted"] == 40 and rows["completed"]["rel_err"] == 0.0
    # 255 client tokens + the BOS the server adds = --random-input-len 256, as in vLLM.
    assert rows["total_input_tokens"]["predicted"] == 40 * 255
    assert rows["mean_ttft_ms"]["rel_err"] == pytest.approx(rows["mean_ttft_ms"]["predicted"] / 40.0 - 1)
    assert out["offered_load"]["max_concurrency"] == 8 and out["offered_load"]["num_prompts"] == 40
    assert any("input_lens/output_lens" in item for item in out["not_found"])
    assert any("seed" in item for item in out["not_found"])
    assert out["engine"]["max_num_seqs"] > 0


def test_text_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = summary_only_result(tmp_path / "r.json")
    assert main(["compare", "--vllm-bench", str(path), "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                 "--random-input-len", "256", "--random-output-len", "32"]) == 0
    out = capsys.readouterr().out
    assert "predicted" in out and "measured" in out and "rel. error" in out and "mean_ttft_ms" in out
    assert "not in the file:" in out


def test_a_detailed_file_of_a_run_is_replayed_exactly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # roofline simulate --save-result writes vLLM's format: comparing it with the same deployment must give the
    # same numbers (lengths and send times replayed from input_lens/output_lens/start_times/queue_times).
    assert main(["simulate", "--model", "llama-156m", *SMALL_ENGINE, "--dataset-name", "random",
                 "--random-input-len", "300", "--random-output-len", "40", "--random-range-ratio", "0.5",
                 "--num-prompts", "50", "--request-rate", "80", "--burstiness", "0.5", "--max-concurrency", "6",
                 "--percentile-metrics", "ttft,tpot,itl,e2el,client_queue_time", "--metric-percentiles", "50,90,99",
                 "--save-result", "--save-detailed", "--result-dir", str(tmp_path), "--result-filename",
                 "run.json"]) == 0
    capsys.readouterr()
    out = compare_json(["--vllm-bench", str(tmp_path / "run.json"), "--hardware", "h100-sxm", *SMALL_ENGINE,
                        "--seed", "123"], capsys)
    assert out["model"] == "llama-156m"  # taken from the file's model_id
    rows = {row["metric"]: row for row in out["metrics"]}
    assert {"p90_e2el_ms", "mean_client_queue_time_ms", "max_output_tokens_per_s"} <= set(rows)
    for row in out["metrics"]:
        assert row["rel_err"] is None or abs(row["rel_err"]) < 1e-9, row
    assert any("replayed from input_lens" in item for item in out["found_in_file"])


def test_goodput_predicted_when_the_slos_are_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = summary_only_result(tmp_path / "r.json", request_goodput=5.0)
    argv = ["--vllm-bench", str(path), "--model", "llama-3.1-8b", "--hardware", "h100-sxm"]
    out = compare_json(argv, capsys)
    assert any("goodput" in item for item in out["not_found"])
    assert next(r for r in out["metrics"] if r["metric"] == "request_goodput")["predicted"] is None
    out = compare_json([*argv, "--goodput", "ttft:1000"], capsys)
    assert next(r for r in out["metrics"] if r["metric"] == "request_goodput")["predicted"] is not None


def test_append_result_file_needs_an_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = summary_only_result(tmp_path / "a.json").read_text()
    path = tmp_path / "appended.json"
    path.write_text(one + "\n" + one.replace('"num_prompts": 40', '"num_prompts": 20'))
    argv = ["compare", "--vllm-bench", str(path), "--model", "llama-3.1-8b", "--hardware", "h100-sxm"]
    assert main(argv) == 2
    assert "--result-index" in capsys.readouterr().err
    out = compare_json([*argv[1:], "--result-index", "1"], capsys)
    assert out["offered_load"]["num_prompts"] == 20


@pytest.mark.parametrize("extra, flag", [
    ([], "--model"),  # the file's model_id names no shipped model
    (["--model", "llama-3.1-8b", "--out", "x"], "--out"),
    (["--model", "llama-3.1-8b", "--dataset-name", "hf"], "--dataset-name"),
])
def test_bad_vllm_bench_input_is_one_line_and_exit_2(tmp_path: Path, extra: list[str], flag: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = summary_only_result(tmp_path / "r.json", model_id="my-org/custom-model")
    assert main(["compare", "--vllm-bench", str(path), "--hardware", "h100-sxm", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]


def test_not_a_result_and_both_sources_are_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hello": 1}))
    assert main(["compare", "--vllm-bench", str(bad), "--hardware", "h100-sxm", "--model", "llama-3.1-8b"]) == 2
    assert "not a vllm bench serve result" in capsys.readouterr().err
    assert main(["compare", "--vllm-bench", str(bad), "--trace", str(tmp_path), "--hardware", "h100-sxm"]) == 2
    assert main(["compare", "--trace", str(tmp_path), "--hardware", "h100-sxm", "--max-num-seqs", "4"]) == 2
    assert "--max-num-seqs: only with --vllm-bench" in capsys.readouterr().err


def test_a_summary_only_file_is_reproduced_from_the_dataset_flags_and_seed(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # Without --save-detailed the lengths and the send schedule are drawn again, from the dataset flags and the
    # seed, with vLLM's generators: the same flags give the same run.
    dataset = ["--dataset-name", "random", "--random-input-len", "120", "--random-output-len", "16",
               "--random-range-ratio", "0.3", "--seed", "5"]
    assert main(["simulate", "--model", "llama-156m", *SMALL_ENGINE, *dataset, "--num-prompts", "30",
                 "--request-rate", "40", "--save-result", "--result-dir", str(tmp_path), "--result-filename",
                 "run.json"]) == 0
    capsys.readouterr()
    out = compare_json(["--vllm-bench", str(tmp_path / "run.json"), "--hardware", "h100-sxm", *SMALL_ENGINE,
                        *dataset], capsys)
    assert out["offered_load"]["request_rate"] == 40.0
    for row in out["metrics"]:
        assert row["rel_err"] is None or abs(row["rel_err"]) < 1e-12, row


@pytest.mark.parametrize("flags, overrides, where", [
    (["--vllm-version", "0.7.3"], {}, "--vllm-version"),
    ([], {"version": "0.6.6.post1"}, "--vllm-bench: the file's version"),
    (["--vllm-version", "latest"], {}, "--vllm-version"),
])
def test_results_of_vllm_before_the_v1_engine_are_refused(tmp_path: Path, flags: list[str], overrides: dict,
                                                          where: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = summary_only_result(tmp_path / "r.json", **overrides)
    assert main(["compare", "--vllm-bench", str(path), "--hardware", "h100-sxm", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and where in err[0], err


def test_v1_version_chat_backend_and_api_server_count_are_used_and_shown(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = summary_only_result(tmp_path / "r.json", backend="openai-chat", endpoint_type="openai-chat")
    argv = ["--vllm-bench", str(path), "--hardware", "h100-sxm", "--random-input-len", "256",
            "--random-output-len", "32"]
    out = compare_json([*argv, "--vllm-version", "0.11.0", "--api-server-count", "2"], capsys)
    assert (out["vllm_version"], out["endpoint"], out["api_server_count"]) == ("0.11.0", "chat", 2)
    assert compare_json([*argv, "--endpoint", "completions"], capsys)["endpoint"] == "completions"
    assert main(["compare", *argv]) == 0
    assert "vLLM version: not in the file and no --vllm-version" in capsys.readouterr().out


def test_the_version_sizes_the_deployment_and_sets_its_scheduling_default(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """--vllm-version is the deployment's release, not only a label: 0.11 schedules synchronously unless
    --async-scheduling is given, and its memory profile (not 0.32's) sizes the KV cache."""
    deployments: list[dict] = []

    def spy(*args: object, **kwargs: object) -> object:
        deployments.append(kwargs)
        return make_deployment(*args, **kwargs)  # type: ignore[arg-type]
    monkeypatch.setattr(compare_command, "make_deployment", spy)
    path = summary_only_result(tmp_path / "r.json")
    argv = ["--vllm-bench", str(path), "--hardware", "h100-sxm", "--random-input-len", "256",
            "--random-output-len", "32", "--max-model-len", "4096"]
    old, new = (compare_json([*argv, "--vllm-version", v], capsys) for v in ("0.11.0", "0.32.0"))
    assert (old["engine"]["async_scheduling"], new["engine"]["async_scheduling"]) == (False, True)
    assert compare_json([*argv, "--vllm-version", "0.11.0", "--async-scheduling"],
                        capsys)["engine"]["async_scheduling"] is True
    assert [call["vllm_version"] for call in deployments] == ["0.11.0", "0.32.0", "0.11.0"]
    compare_json(argv, capsys)  # no version anywhere: the simulator's own (vLLM 0.32)
    assert deployments[-1]["vllm_version"] == VLLM_VERSION


@pytest.mark.parametrize(("version", "mode"), [("0.10.2", "PIECEWISE"), ("0.11.0", "FULL_AND_PIECEWISE"),
                                               (None, "FULL_AND_PIECEWISE")])
def test_the_release_s_cuda_graph_mode_when_none_is_given(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          version: str | None, mode: str) -> None:
    """vLLM before 0.11.0 replays piecewise graphs for decodes too (VllmConfig.__post_init__ of 0.10.2); a given
    --cudagraph-mode or --enforce-eager wins."""
    record = {"model_id": "llama-156m", "num_prompts": 8, "request_rate": "inf", "burstiness": 1.0,
              "max_concurrency": 1, "duration": 1.0, "completed": 8, "mean_ttft_ms": 10.0}
    if version is not None:
        record["vllm_version"] = version
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record))
    argv = ["compare", "--vllm-bench", str(path), "--hardware", "h100-sxm", "--max-model-len", "4096",
            "--random-input-len", "64", "--random-output-len", "4", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["engine"]["cudagraph_mode"] == mode
    assert main([*argv, "--cudagraph-mode", "FULL_DECODE_ONLY"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"]["cudagraph_mode"] == "FULL_DECODE_ONLY"
    assert main([*argv, "--enforce-eager"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"]["cudagraph_mode"] == "NONE"
