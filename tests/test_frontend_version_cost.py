"""The pure parts of benchmarks/ground_truth/frontend_version_cost.py (the timed part needs a vLLM venv): its list
arguments, the per-token / per-request line, and the comparison of releases' runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"))

import frontend_version_cost as fvc  # noqa: E402


def test_int_lists_parse_and_reject_bad_values() -> None:
    assert fvc.parse_int_list("64,256", "--concurrency") == [64, 256]
    assert fvc.parse_int_list(" 8 ,", "--output-len") == [8]
    for bad in ("", "0,4", "4,4", "-1", "a,2"):
        with pytest.raises(ValueError, match="--concurrency"):
            fvc.parse_int_list(bad, "--concurrency")


def test_line_gives_per_token_and_per_request() -> None:
    # 10 requests, 30 us a request, 5 us a token: total = 10 x (30e-6 + n x 5e-6)
    totals = {n: 10 * (30e-6 + n * 5e-6) for n in (64, 128, 256)}
    per_token, per_request = fvc.per_token_and_request(totals, 10)
    assert per_token == pytest.approx(5e-6)
    assert per_request == pytest.approx(30e-6)
    with pytest.raises(ValueError, match="two output lengths"):
        fvc.per_token_and_request({64: 1.0}, 10)


def test_summarize_spread_is_range_over_median() -> None:
    out = fvc.summarize([1.0, 2.0, 4.0])
    assert (out["min"], out["median"], out["max"], out["n"]) == (1.0, 2.0, 4.0, 3)
    assert out["spread"] == pytest.approx(1.5)


def run(version: str, per_token: dict[str, float], per_request: float) -> dict:
    return {"vllm": version, "output_len": [64, 256],
            "by_concurrency": {c: {"per_token_s": {"256": {"median": t}}, "per_request_s": {"median": per_request}}
                               for c, t in per_token.items()}}


def test_compare_takes_later_release_over_earlier() -> None:
    runs = [run("0.32.0", {"64": 20e-6}, 80e-6), run("0.8.5", {"64": 10e-6, "256": 12e-6}, 40e-6),
            run("0.32.0", {"64": 30e-6}, 100e-6), run("0.8.5", {"64": 14e-6}, 50e-6)]
    out = fvc.compare(runs, 256)
    assert out["releases"]["0.8.5"]["64"]["per_token_s"]["min"] == pytest.approx(10e-6)
    assert out["releases"]["0.8.5"]["64"]["per_token_s"]["median"] == pytest.approx(12e-6)
    ratio = out["ratios"]["0.32.0/0.8.5"]
    assert set(ratio) == {"64"}  # 256 only in one release
    assert ratio["64"]["per_token_s"]["min"] == pytest.approx(2.0)
    assert ratio["64"]["per_token_s"]["median"] == pytest.approx(25 / 12)
    assert ratio["64"]["per_request_s"]["median"] == pytest.approx(90 / 45)


def test_compare_keeps_a_forced_detokenizer_apart() -> None:
    slow = run("0.8.5", {"64": 30e-6}, 40e-6) | {"label": "0.8.5 slow-detokenizer"}
    out = fvc.compare([run("0.8.5", {"64": 10e-6}, 40e-6), slow, run("0.32.0", {"64": 20e-6}, 40e-6)], 256)
    assert set(out["ratios"]) == {"0.8.5 slow-detokenizer/0.8.5", "0.32.0/0.8.5", "0.32.0/0.8.5 slow-detokenizer"}
    assert out["ratios"]["0.32.0/0.8.5 slow-detokenizer"]["64"]["per_token_s"]["min"] == pytest.approx(2 / 3)
