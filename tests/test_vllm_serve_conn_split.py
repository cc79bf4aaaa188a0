"""vllm_serve_conn_split.py's per-phase summary and report (the measurement of the two-process API servers' extra CPU
in docs/benchmark-history/2026-12-01b-serve21.md): per request from the threads' counters, medians over the untraced
rounds, idle per second."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"
sys.path.insert(0, str(HERE))

import vllm_serve_conn_split as cs  # noqa: E402


def _row(rnd: int, phase: str, cpu_ms: list[float], requests: int, traced: bool = False) -> dict:
    """A phase's row: one thread per API process with `cpu_ms` of CPU (run delay, scheduled in, switches, faults
    alike), the client's CPU 0.1 s."""
    threads = {f"api/{100 + i}/python/{100 + i}": [int(ms * 1e6), int(ms * 1e5), 10, 2, 3, 4, 0]
               for i, ms in enumerate(cpu_ms)}
    threads["engine/200/VLLM::EngineCor/200"] = [int(50e6), 0, 1, 0, 0, 0, 0]
    return {"round": rnd, "phase": phase, "traced": traced, "wall_s": 2.0, "client_cpu_s": 0.1,
            "requests": requests, "threads": threads}


def test_a_phase_is_summed_over_the_api_processes_per_request_and_idle_per_second() -> None:
    warm, idle = cs.summarize([_row(0, "warm", [300.0, 200.0], 100), _row(0, "idle", [10.0, 10.0], 0)])
    assert warm["api_cpu_ms_per_request"] == 5.0 and warm["api_cpu_ms_per_request_by_process"] == {"100": 3.0,
                                                                                                  "101": 2.0}
    assert warm["api_delay_ms_per_request"] == 0.5 and warm["api_scheduled_per_request"] == 0.2
    assert warm["client_cpu_ms_per_request"] == 1.0 and warm["engine_cpu_ms_per_request"] == 0.5
    assert idle["requests"] == 2.0 and idle["api_cpu_ms_per_request"] == 10.0  # 20 ms over the 2 s idle


def test_the_report_takes_the_median_of_the_untraced_rounds_and_the_traces_counts() -> None:
    rows = [_row(0, "warm", [400.0], 100), _row(1, "warm", [600.0], 100), _row(2, "warm", [500.0], 100),
            _row(3, "warm", [5000.0], 100, traced=True)]
    rows[3]["strace"] = {"getpid": [7000, 0], "accept4": [101, 1]}
    index = {"sessions": [{"name": "a1-s0", "api_server_count": 1, "summary": cs.summarize(rows), "rows": rows}]}
    (report,) = cs.report(index)
    assert (report["session"], report["phase"], report["rounds"]) == ("a1-s0", "warm", 3)
    assert report["api_cpu_ms_per_request"] == 5.0  # the traced round (50 ms a request) is left out
    assert report["syscalls_per_request"] == {"getpid": [70.0, 0.0], "accept4": [1.01, 0.01]}
