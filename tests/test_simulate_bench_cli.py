"""`roofline simulate` with vllm bench serve's flags: its result keys in the summary and in --save-result,
the offered load and the engine in every output, same seed same bytes, bad input as one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roofline.cli import main

SMALL = ["--model", "llama-156m", "--hardware", "h100-sxm", "--max-model-len", "4096",
         "--num-gpu-blocks-override", "2000"]
RANDOM = [*SMALL, "--dataset-name", "random", "--random-input-len", "200", "--random-output-len", "20",
          "--random-range-ratio", "0.5", "--num-prompts", "60", "--request-rate", "50", "--max-concurrency", "8"]


def test_random_dataset_summary_in_vllms_terms(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *RANDOM, "--goodput", "ttft:100", "tpot:10", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    bench = summary["vllm_bench"]
    assert bench["completed"] == 60 and bench["request_goodput"] is not None
    assert {"duration", "request_throughput", "output_throughput", "total_token_throughput", "mean_ttft_ms",
            "median_tpot_ms", "std_itl_ms", "p99_ttft_ms"} <= set(bench)
    load = summary["offered_load"]
    assert (load["dataset_name"], load["num_prompts"], load["request_rate"], load["max_concurrency"]) == \
        ("random", 60, 50.0, 8)
    assert summary["engine"]["max_num_seqs"] > 0 and summary["gpus_per_replica"] == 1
    assert "request_throughput" in summary["steady_state"]


def test_text_output_has_load_engine_vllm_block_verdict_and_verbose_steady_state(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *RANDOM]) == 0
    out = capsys.readouterr().out
    assert "1 GPU per replica" in out and "offered load: " in out and "engine: tensor_parallel_size=1" in out
    assert "Serving Benchmark Result" in out and "Maximum request concurrency:" in out
    assert "\nsummary: TTFT p50/p90" in out and "\nverdict: closed loop of 8" in out
    assert "Steady state" not in out and "not modelled:" not in out and "hardware profile:" not in out
    assert main(["simulate", *RANDOM, "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "engine: max_num_seqs=" in out and "hardware profile:" in out
    assert "Steady state (not vLLM's counting)" in out and "not modelled:" in out


def test_save_result_writes_vllms_keys_with_the_same_bytes_for_the_same_seed(tmp_path: Path) -> None:
    for name in ("a.json", "b.json"):
        assert main(["simulate", *RANDOM, "--save-result", "--save-detailed", "--result-dir", str(tmp_path),
                     "--result-filename", name, "--metric-percentiles", "50,99", "--percentile-metrics",
                     "ttft,tpot,itl,e2el"]) == 0
    first, second = (tmp_path / "a.json").read_bytes(), (tmp_path / "b.json").read_bytes()
    assert first == second
    record = json.loads(first)
    assert list(record)[:10] == ["date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id",
                                 "num_prompts", "request_rate", "burstiness", "max_concurrency"]
    assert record["request_rate"] == 50.0 and record["max_concurrency"] == 8
    assert len(record["input_lens"]) == len(record["output_lens"]) == 60
    assert {"p50_e2el_ms", "p99_tpot_ms", "max_output_tokens_per_s"} <= set(record)
    assert record["roofline"]["engine"]["block_size"] == 16


def test_default_result_name_is_vllms(tmp_path: Path) -> None:
    assert main(["simulate", *RANDOM, "--save-result", "--result-dir", str(tmp_path)]) == 0
    (path,) = tmp_path.iterdir()
    assert path.name.startswith("roofline-50.0qps-concurrency8-llama-156m-")


def test_ramp_up_and_burstiness_are_in_the_offered_load(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *SMALL, "--dataset-name", "random", "--random-input-len", "64", "--random-output-len",
                 "8", "--num-prompts", "30", "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "5",
                 "--ramp-up-end-rps", "50", "--burstiness", "0.5", "--json"]) == 0
    load = json.loads(capsys.readouterr().out)["offered_load"]
    assert load["ramp_up_strategy"] == "linear" and load["burstiness"] == 0.5


@pytest.mark.parametrize("argv, flag", [
    (["--dataset-name", "sonnet"], "--dataset-name"),
    (["--dataset-name", "random", "--random-range-ratio", "1.5"], "--random-range-ratio"),
    (["--dataset-name", "random", "--dataset-path", "x.json"], "--dataset-path"),
    (["--dataset-name", "sharegpt"], "--dataset-path"),
    (["--dataset-name", "random", "--workload", "sharegpt-chat"], "--workload"),
    (["--random-input-len", "100"], "--random-input-len"),
    (["--dataset-name", "random", "--goodput", "ttft=5"], "--goodput"),
    (["--dataset-name", "random", "--percentile-metrics", "ttft,foo"], "--percentile-metrics"),
    (["--dataset-name", "random", "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1",
      "--ramp-up-end-rps", "5", "--request-rate", "3"], "--ramp-up-strategy"),
    (["--dataset-name", "random", "--burstiness", "0"], "--burstiness"),
    (["--dataset-name", "random", "--max-concurrency", "0"], "--max-concurrency"),
    (["--save-detailed"], "--save-detailed"),
    (["--num-warmups", "2"], "--num-warmups"),
    (["--dataset-name", "random", "--sharegpt-output-len", "5"], "--sharegpt-output-len"),
    (["--dataset-name", "random", "--ramp-up-start-rps", "5"], "--ramp-up-start-rps"),
])
def test_bad_bench_input_is_one_line_and_exit_2(argv: list[str], flag: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *SMALL, "--num-prompts", "5", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]
