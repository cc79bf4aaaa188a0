"""The measurement protocol (roofline.calibration.protocol): repeat sets on disk, shapes, the noise floor left one
repeat out, and how measure, compare and calibrate use them.

Repeat sets are built from one simulator trace whose step durations are replaced by a known function of the step's
shape times a known factor per repeat, so every floor is computable by hand.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from profiles import TEST_CPU_PROFILE

from engine.core.trace import read_trace
from roofline.calibration.calibrate import calibrate_on_traces
from roofline.calibration.compare import compare_repeats
from roofline.calibration.protocol import (
    NOISE_FLOOR_FILE,
    PROTOCOL_FILE,
    _bucket,
    load_traces,
    noise_floor_of_repeats,
    prepare_repeat_set,
    record_repeat,
    shape_keys,
)
from roofline.cli import main
from roofline.cost.hardware import load_profile
from roofline.errors import UserError

MODEL = "llama-156m"


@pytest.fixture(scope="module")
def base_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulator trace with prefill, decode and mixed steps, on the test CPU profile."""
    root = tmp_path_factory.mktemp("protocol")
    profile = root / "cpu.yaml"
    profile.write_text(yaml.safe_dump(TEST_CPU_PROFILE, sort_keys=False))
    out = root / "trace"
    assert main(["simulate", "--model", MODEL, "--hardware", str(profile), "--input-len", "40", "--output-len", "6",
                 "--num-requests", "12", "--request-rate", "inf", "--max-num-seqs", "4",
                 "--max-num-batched-tokens", "96", "--num-gpu-blocks-override", "200", "--max-model-len", "256",
                 "--out", str(out), "--json"]) == 0
    return out


def shaped_durations(steps: pd.DataFrame) -> np.ndarray:
    """A duration that depends on the step's shape key alone (so per-shape medians reproduce it exactly)."""
    return np.array([1e-3 * (1 + sum(map(hash, map(str, key))) % 7) for key in shape_keys(steps)])


def make_set(root: Path, base: Path, factors: list[float]) -> Path:
    """A repeat set whose repeat k is `base` with shaped durations times factors[k]."""
    dirs = prepare_repeat_set(root, append=False, num_repeats=len(factors), expected={})
    for out, factor in zip(dirs, factors):
        shutil.copytree(base, out)
        table = pq.read_table(out / "steps.parquet")  # keeps the schema metadata (its version) as written
        durations = pa.array(shaped_durations(read_trace(out)[0]) * factor, pa.float64())
        table = table.set_column(table.schema.get_field_index("duration_s"), "duration_s", durations)
        pq.write_table(table, out / "steps.parquet")
        record_repeat(root, out, datetime(2026, 1, 1, tzinfo=timezone.utc))
    return root


def test_buckets_are_exact_below_64_tokens_then_a_sixteenth_of_an_octave() -> None:
    b = _bucket(np.array([0, 1, 63, 64, 66, 67, 128, 4096]))
    assert b[:3].tolist() == [0, 1, 63]
    assert b[3] == b[4] != b[5]  # 64 and 66 share a bucket 4.4 % wide, 67 starts the next
    assert b[6] - b[3] == 16 and (np.diff(b) > 0).sum() == 6  # one octave = 16 buckets; never two values mixed up


def test_identical_repeats_have_a_zero_floor(base_trace: Path, tmp_path: Path) -> None:
    root = make_set(tmp_path / "set", base_trace, [1.0, 1.0, 1.0])
    floor, _ = noise_floor_of_repeats(load_traces(root))
    steps = floor["steps"]
    assert floor["num_repeats"] == 3 and steps["num_steps"] == steps["num_steps_in_repeats"] > 0
    assert steps["max_abs_rel_err"] == 0.0
    assert floor["end_to_end"]["output_tokens_per_s"]["spread"] == 0.0


def test_each_repeat_is_predicted_by_the_others_pooled(base_trace: Path, tmp_path: Path) -> None:
    # Factors 1, 2, 4: repeat 1 is predicted by the median of {2x, 4x} per shape (3x, +200 %), repeat 2 by {1x, 4x}
    # (2.5x, +25 %), repeat 3 by {1x, 2x} (1.5x, -62.5 %); a shape's steps of the other repeats pool into one median.
    root = make_set(tmp_path / "set", base_trace, [1.0, 2.0, 4.0])
    floor, _ = noise_floor_of_repeats(load_traces(root))
    per_repeat = {r["repeat"]: r for r in floor["steps"]["per_repeat"]}
    assert per_repeat["repeat-1"]["mean_rel_err"] == pytest.approx(2.0)
    assert per_repeat["repeat-2"]["mean_rel_err"] == pytest.approx(0.25)
    assert per_repeat["repeat-3"]["mean_rel_err"] == pytest.approx(-0.625)
    assert floor["steps"]["median_abs_rel_err"] == pytest.approx(0.625)
    assert json.loads((root / NOISE_FLOOR_FILE).read_text())["steps"]["num_steps"] == floor["steps"]["num_steps"]


def test_a_set_needs_two_repeats_and_one_workload(base_trace: Path, tmp_path: Path) -> None:
    one = make_set(tmp_path / "one", base_trace, [1.0])
    assert not (one / NOISE_FLOOR_FILE).exists()
    with pytest.raises(UserError, match="at least two repeats"):
        noise_floor_of_repeats(load_traces(one))
    root = make_set(tmp_path / "set", base_trace, [1.0, 1.0])
    run_json = root / "repeat-2" / "run.json"
    meta = json.loads(run_json.read_text())
    meta["engine_config"]["max_num_seqs"] = 8
    run_json.write_text(json.dumps(meta))
    with pytest.raises(UserError, match=r"engine_config.max_num_seqs 8 \(not 4\)"):
        load_traces(root)


def test_a_new_set_goes_to_an_empty_directory_and_append_checks_the_run(base_trace: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a repeat set"):
        prepare_repeat_set(base_trace, append=True, num_repeats=1, expected={})
    root = make_set(tmp_path / "set", base_trace, [1.0])
    with pytest.raises(UserError, match="--append"):
        prepare_repeat_set(root, append=False, num_repeats=1, expected={})
    with pytest.raises(UserError, match="workload"):
        prepare_repeat_set(root, append=True, num_repeats=1, expected={"workload": "another"})
    assert [p.name for p in prepare_repeat_set(root, append=True, num_repeats=2, expected={})] == \
        ["repeat-2", "repeat-3"]
    (root / PROTOCOL_FILE).write_text("{}")
    with pytest.raises(UserError, match="schema_version"):
        load_traces(root)


def test_compare_reads_a_set_repeat_by_repeat(base_trace: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    root = make_set(tmp_path / "set", base_trace, [1.0, 1.0, 1.0])
    profile = tmp_path / "cpu.yaml"
    profile.write_text(yaml.safe_dump(TEST_CPU_PROFILE, sort_keys=False))
    result = compare_repeats(load_traces(root), load_profile(profile))
    s = result.summary
    assert s["num_steps"] == 3 * len(read_trace(base_trace)[0]) and len(s["per_repeat"]) == 3
    assert s["noise_floor"]["leave_one_repeat_out"]["steps"]["max_abs_rel_err"] == 0.0
    assert s["on_noise_floor_steps"]["num_steps"] == s["noise_floor"]["leave_one_repeat_out"]["steps"]["num_steps"]
    assert s["end_to_end"]["output_tokens_per_s"]["spread"] == 0.0
    assert set(result.table["repeat"]) == {"repeat-1", "repeat-2", "repeat-3"}
    assert main(["compare", "--trace", str(root), "--hardware", str(profile), "--no-end-to-end"]) == 0
    out = capsys.readouterr().out
    assert "noise floor, leave one of 3 repeats out" in out and "repeat-2" in out
    assert main(["compare", "--trace", str(root), "--hardware", str(profile), "--repeat-trace",
                 str(base_trace)]) == 2
    assert "--repeat-trace" in capsys.readouterr().err


def test_calibrate_reports_the_held_out_sets_floor_on_the_same_steps(base_trace: Path, tmp_path: Path) -> None:
    train = make_set(tmp_path / "a", base_trace, [1.0, 1.1])
    test = make_set(tmp_path / "b", base_trace, [1.0, 1.2, 1.1])
    profile = tmp_path / "cpu.yaml"
    profile.write_text(yaml.safe_dump(TEST_CPU_PROFILE, sort_keys=False))
    report = calibrate_on_traces(load_profile(profile), load_traces(train), load_traces(test),
                                 params=["executor.step_overhead_s"], max_fit_steps=40)
    held_out = report.error["test"]
    assert len(held_out["per_trace"]) == 3 and len(held_out["noise_floor"]) == 1
    floor = held_out["noise_floor"][0]
    assert floor["repeat_set"] == str(test) and floor["repeats"] == ["repeat-1", "repeat-2", "repeat-3"]
    assert floor["after"]["num_steps"] == floor["floor"]["num_steps"] > 0


def test_measure_repeats_and_appends_on_the_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    flags = ["--model", "llama-tiny", "--input-len", "8", "--output-len", "3", "--num-requests", "3",
             "--request-rate", "inf", "--max-num-seqs", "4", "--max-num-batched-tokens", "64", "--max-model-len", "64",
             "--threads", "1", "--dtype", "float32", "--num-gpu-blocks-override", "32", "--no-warmup"]
    out = tmp_path / "set"
    assert main(["measure", "--out", str(out), "--repeats", "2", *flags]) == 0
    assert "noise floor, leave one of 2 repeats out" in capsys.readouterr().out
    assert main(["measure", "--out", str(out), "--append", *flags]) == 0
    protocol = json.loads((out / PROTOCOL_FILE).read_text())
    assert [r["dir"] for r in protocol["repeats"]] == ["repeat-1", "repeat-2", "repeat-3"]
    traces = load_traces(out)
    # every repeat served the same requests from an empty prefix cache
    assert [int(t.steps["num_prefill_tokens"].sum()) for t in traces] == [24, 24, 24]
    assert json.loads((out / NOISE_FLOOR_FILE).read_text())["num_repeats"] == 3
    assert main(["measure", "--out", str(out), *flags]) == 2
    assert "--append" in capsys.readouterr().err
    assert main(["measure", "--out", str(out), "--append", *flags, "--output-len", "4"]) == 2
    assert "workload" in capsys.readouterr().err and not (out / "repeat-4").exists()
    assert main(["measure", "--out", str(tmp_path / "x"), "--repeats", "0", *flags]) == 2
    assert "--repeats" in capsys.readouterr().err
