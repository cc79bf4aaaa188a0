"""The published vllm bench serve cases (benchmarks/data/public_vllm_bench_cases.yaml) load and validate, and a bad
case file is refused with one line naming the case and the field, exit 2 (benchmarks/accuracy/public_bench.py)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from roofline.errors import UserError
from roofline.registry import list_ids

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks" / "accuracy"))
import public_bench as bench  # type: ignore[import-not-found]  # noqa: E402

CASES = REPO / "benchmarks" / "data" / "public_vllm_bench_cases.yaml"


def test_the_shipped_cases_validate_with_a_source_a_profiled_gpu_and_the_scored_figures() -> None:
    cases = bench.load_cases(CASES)
    assert len(cases) >= 20
    profiles = set(list_ids("hardware"))
    for case in cases:
        assert case["source"]["url"].startswith("https://"), case["id"]
        assert case["deployment"]["hardware"] in profiles, case["id"]
        assert all(case["measured"][key] > 0 for key in bench.SCORED), case["id"]
    shapes = {bench.load_shape(case["load"]) for case in cases}
    assert shapes == set(bench.SHAPES)


def _write(tmp_path: Path, cases: list[dict]) -> Path:
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"cases": cases}, sort_keys=False))
    return path


def _one_case() -> dict:
    return copy.deepcopy(yaml.safe_load(CASES.read_text())["cases"][0])


def test_a_case_on_a_gpu_without_a_profile_is_one_line_and_exit_2(tmp_path: Path) -> None:
    case = _one_case()
    case["deployment"]["hardware"] = "h20"
    path = _write(tmp_path, [case])
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "accuracy" / "public_bench.py"), "--check",
                           "--cases", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert case["id"] in lines[0] and "deployment.hardware" in lines[0] and "'h20'" in lines[0]


@pytest.mark.parametrize(("edit", "field"), [
    (lambda c: c["source"].update(url="github.com/x"), "source.url"),
    (lambda c: c["deployment"].update(vllm_version="0.6.3"), "deployment.vllm_version"),
    (lambda c: c["deployment"].update(serve_args="-tp 2"), "deployment.gpu_count"),
    (lambda c: c["measured"].pop("mean_tpot_ms"), "'mean_tpot_ms'"),
    (lambda c: c["measured"].update(mean_ttft_ms="fast"), "measured.mean_ttft_ms"),
    (lambda c: c["load"].update(request_rate=-1), "load.request_rate"),
    (lambda c: c["load"].update(warmups=3), "'warmups'"),
    (lambda c: c["deployment"].update(num_replicas=2), "deployment.gpu_count"),
    (lambda c: c["deployment"].update(router="random"), "deployment.router"),
])
def test_each_bad_field_is_named(tmp_path: Path, edit, field: str) -> None:
    case = _one_case()
    edit(case)
    with pytest.raises(UserError, match=field.replace(".", r"\.")):
        bench.load_cases(_write(tmp_path, [case]))


def test_sharegpt_is_simulated_at_the_printed_mean_lengths_and_short_outputs_at_their_mean() -> None:
    sharegpt = {"load": {"dataset": "sharegpt"}, "measured": {"completed": 100, "total_input_tokens": 23260,
                                                               "total_output_tokens": 22061}}
    assert bench.simulated_lengths(sharegpt) == (233, 221, "sharegpt as mean lengths")
    assert "not simulated" not in str(bench.simulated_lengths(sharegpt))
    sharegpt["measured"].pop("total_input_tokens")
    assert isinstance(bench.simulated_lengths(sharegpt), str)  # the reason it is not simulated
    random = {"load": {"dataset": "random", "random_input_len": 4000, "random_output_len": 200},
              "measured": {"completed": 500, "total_output_tokens": 99803}}
    assert bench.simulated_lengths(random) == (4000, 200, "random, as stated")  # 0.2 % short: as stated
    random["measured"]["total_output_tokens"] = 67205  # gpt-oss: EOS ended a third of the output early
    assert bench.simulated_lengths(random) == (4000, 134, "random; output: printed mean")


def test_a_case_runs_through_roofline_compare_and_a_refused_one_keeps_the_reason(tmp_path: Path) -> None:
    cases = {case["id"]: case for case in bench.load_cases(CASES)}
    row = bench.simulate_case(cases["kvcached-qwen3-0.6b-h100-random512-rate16-seed42"], tmp_path)
    assert row["shape"] == "rate-limited" and row["lengths"] == "random, as stated"
    for metric in bench.SCORED:
        scored = row["metrics"][metric]
        assert scored["measured"] == cases[row["id"]]["measured"][metric]
        assert scored["predicted"] > 0 and scored["rel_err"] == pytest.approx(
            scored["predicted"] / scored["measured"] - 1)
    refused = bench.simulate_case(cases["gpustack-qwen3-235b-a22b-fp8-a100-tp4-random2k-burst"], tmp_path)
    assert "metrics" not in refused and "fp8" in refused["not_simulated"]
    summary = bench.summarize([row, refused])
    assert summary["rate-limited"]["mean_ttft_ms"]["n"] == 1 and summary["burst"]["mean_ttft_ms"]["n"] == 0


def test_a_burst_s_row_carries_its_time_split_and_the_report_shows_it(tmp_path: Path) -> None:
    """The bursts' split table: the simulated steps by kind beside the measured ITL and the requests decoding at once."""
    cases = {case["id"]: case for case in bench.load_cases(CASES)}
    row = bench.simulate_case(cases["kvcached-qwen3-0.6b-h100-random512-burst-seed42"], tmp_path)
    split, at_once = row["simulated_time"], row["decoding_at_once"]
    assert split["steps_with_prefill"]["count"] >= 1 and split["decode_only_steps"]["count"] >= 127  # 128 tokens
    assert split["duration_s"] == pytest.approx(row["metrics"]["duration"]["predicted"])
    measured = cases[row["id"]]["measured"]
    assert at_once["measured"] == pytest.approx(measured["output_throughput"] * measured["mean_tpot_ms"] / 1e3)
    lines = bench.time_split_table([row])
    assert lines[-1].startswith(f"| {row['id']} | 5.4 / ") and lines[-1].endswith(
        f" | {at_once['measured']:.0f} / {at_once['predicted']:.0f} |")
    assert bench.time_split_table([{**row, "shape": "rate-limited"}]) == []
