"""Two hosts' speed on fixed Python workloads (benchmarks/ground_truth/host_python_speed.py): the workloads do their
fixed work, and the comparison is the reference's time over the other's, on common workloads of the same size."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"))

import host_python_speed as hps  # noqa: E402


def test_workloads_do_their_fixed_work() -> None:
    assert hps.asyncio_queue(50) == 50
    assert hps.text_append(10) == len("".join(hps.PIECES))
    cycle = len(hps.PIECES)  # the token texts repeat every `cycle` tokens, so does the bytes' sum
    assert hps.sse_chunk(2 * cycle) == 2 * hps.sse_chunk(cycle) > 0


def test_measure_reports_cpu_times_a_unit() -> None:
    out = hps.measure({"text_append": hps.text_append}, {"text_append": 100}, repeats=3)
    row = out["text_append"]
    assert row["units"] == 100
    assert 0 <= row["min_s"] <= row["median_s"]
    assert row["us_per_unit"] == pytest.approx(row["min_s"] / 100 * 1e6)


def host(times: dict[str, tuple[int, float]]) -> dict:
    return {"host": {"cpu_model": "x"}, "workloads": {name: {"units": units, "min_s": t, "median_s": 2 * t}
                                                      for name, (units, t) in times.items()}}


def test_speed_is_the_references_time_over_the_others() -> None:
    reference = host({"sse_chunk": (10, 2.0), "asyncio_queue": (10, 1.0), "tokenizer": (10, 5.0)})
    other = host({"sse_chunk": (10, 1.0), "asyncio_queue": (10, 2.0), "tokenizer": (20, 5.0)})
    out = hps.compare(reference, other)
    assert out["speed"] == {"sse_chunk": 2.0, "asyncio_queue": 0.5}  # the tokenizer's sizes differ: left out
    assert out["geometric_mean"] == pytest.approx(1.0)
    assert math.isclose(hps.compare(other, reference)["speed"]["sse_chunk"], 0.5)


def test_nothing_in_common_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no workload of the same size"):
        hps.compare(host({"sse_chunk": (10, 1.0)}), host({"tokenizer": (10, 1.0)}))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(host({"text_append": (10, 3.0)})))
    b.write_text(json.dumps(host({"text_append": (10, 1.0)})))
    assert hps.main(["--compare", str(a), str(b)]) == 0
