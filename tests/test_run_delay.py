"""run_delay.py and perf_sched_holders.py (benchmarks/ground_truth): the served threads' roles, their run delay summed by
role, and each wait split over the tasks that held the core."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"))

import perf_sched_holders  # noqa: E402
import run_delay  # noqa: E402


def test_roles_follow_process_name_and_main_thread() -> None:
    assert run_delay.role("api_server/python/100/100") == "api_loop"
    assert run_delay.role("VLLM::APIServer/VLLM::APIServer/101/101") == "api_loop"
    assert run_delay.role("api_server/ZMQbg/IO/1/100/107") == "api_other"  # a thread name with slashes
    assert run_delay.role("client/python/200/201") == "client"
    assert run_delay.role("VLLM::EngineCor/VLLM::EngineCor/300/300") == "engine_loop"
    assert run_delay.role("VLLM::EngineCor/VLLM::EngineCor/300/305") == "engine_other"
    assert run_delay.role("VLLM::Worker/gloo_tcp_loop/400/409") == "worker_other"
    assert run_delay.role("python3/python3/500/500") == "other"


def test_run_roles_sums_threads_and_normalises() -> None:
    def thread(cpu: float, delay: float, slices: int, core: int) -> dict:
        return {"cpu_s": cpu, "run_delay_s": delay, "slices": slices, "last_cpu": core, "allowed_cpus": [core]}

    run = {"result": {"completed": 10}, "engine_steps": [[i, 0, 0, 1, 1, 5.0] for i in range(100)],
           "engine_window": {"threads_sched": {
               "VLLM::EngineCor/VLLM::EngineCor/300/305": thread(0.01, 0.002, 40, 1),
               "VLLM::EngineCor/ZMQbg/IO/0/300/306": thread(0.01, 0.002, 60, 1),
               "api_server/python/100/100": thread(0.1, 0.05, 500, 0)}}}
    roles = run_delay.run_roles(run)
    other = roles["engine_other"]
    assert other["threads"] == 2 and other["slices"] == 100
    assert other["run_delay_s"] == pytest.approx(0.004)
    assert other["delay_per_slice_ms"] == pytest.approx(0.04)
    assert other["delay_per_step_ms"] == pytest.approx(0.04)
    assert other["delay_per_request_ms"] == pytest.approx(0.4)
    assert other["allowed"] == [1]
    assert roles["api_loop"]["cpu_per_step_ms"] == pytest.approx(1.0)


def test_holders_split_a_wait_over_who_ran_meanwhile() -> None:
    # perf sched timehist rows: (switch-out time, cpu, comm, tid, scheduling delay, run time), seconds.
    events = [
        (1.000, 1, "VLLM::Worker", 40, 0.0, 1.000),   # the Worker ran 0-1.000 on cpu 1
        (1.004, 1, "python", 99, 0.0, 0.004),          # another task 1.000-1.004
        (1.010, 1, "VLLM::EngineCor", 31, 0.006, 0.006),  # woken at 0.998, ran 1.004-1.010
        (1.010, 0, "VLLM::EngineCor", 32, 0.001, 0.001),  # on cpu 0: nothing else ran there, nothing held
    ]
    roles = {40: "worker_main", 31: "engine_other", 32: "engine_other"}
    out = perf_sched_holders.holders(events, roles, since_s=0.5)
    row = out["engine_other"]
    assert row["waits"] == 2
    assert row["delay_s"] == pytest.approx(0.007)
    assert row["held_by_s"]["worker_main"] == pytest.approx(0.002)
    assert row["held_by_s"]["other:python"] == pytest.approx(0.004)
    assert "worker_main" not in out  # its run started at 0 < since_s, and it did not wait


def test_step_period_summary_and_residual_wait() -> None:
    import sim_step_periods

    # Back-to-back steps of 10 ms and 5 ms, one each: a random instant falls in the 10 ms one 2/3 of the time.
    assert sim_step_periods.residual_ms([10.0, 5.0]) == pytest.approx((100 + 25) / 30)
    s = sim_step_periods.summary([10.0, 5.0, 5.0, 5.0], [True, False, False, False])
    assert s["prompt_share"] == 0.25 and s["prompt_ms"] == 10.0 and s["decode_ms"] == 5.0
