"""Where `vllm bench serve`'s client spends its CPU (benchmarks/ground_truth/bench_client_split.py, the probe in the
client's process) and how vllm_serve_sim.py places it (`client_split_costs`): the probe on a plain asyncio loop, the
placement on made-up runs."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth"))

import bench_client_split as probe  # noqa: E402
import vllm_serve_sim  # noqa: E402


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_the_probe_charges_each_requests_callbacks_before_and_after_its_send(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two requests as tasks: 20 ms of CPU each before the send mark, a callback their task started (a transport's,
    in a copy of its context) and 30 ms more after it; `benchmark`'s own task 10 ms. The probe charges 40 / 60 ms to
    the two phases, 10 ms to the main task, and the first steps (20 ms each: the send mark's step) to each."""
    monkeypatch.setattr(probe, "S", probe._State())
    original = asyncio.events.Handle._run
    try:
        probe.install_loop_probe()

        async def request(tag: str) -> str:
            _spin(0.02)
            probe.mark_sent()
            loop = asyncio.get_running_loop()
            done = loop.create_future()
            loop.call_soon(lambda: (_spin(0.01), done.set_result(None)))  # a callback of its context
            await done
            _spin(0.02)
            return tag

        async def benchmark() -> list[str]:
            probe.S.main_task = asyncio.current_task()
            probe.MAIN.set(True)
            _spin(0.01)
            tasks = [asyncio.create_task(probe.probed(request)(tag)) for tag in ("a", "b")]
            return list(await asyncio.gather(*tasks))

        assert asyncio.run(benchmark()) == ["a", "b"]
    finally:
        asyncio.events.Handle._run = original  # type: ignore[method-assign]
    state = probe.S
    assert [r.test for r in state.requests] == [False, False] and all(r.sent for r in state.requests)
    ms = 1e-6
    assert state.before_ns * ms == pytest.approx(40, rel=0.2)
    assert state.after_ns * ms == pytest.approx(60, rel=0.2)
    assert state.main_ns * ms == pytest.approx(10, rel=0.3)
    assert [r.first_ns * ms for r in state.requests] == [pytest.approx(20, rel=0.25)] * 2
    out = probe.summary([{"test": r.test, "first_ns": r.first_ns, "reads": 0, "messages": 0, "output_tokens": 1}
                         for r in state.requests], dict.fromkeys(probe._counters(), 0), probe._counters())
    assert out["before_send_ms_per_request"] == pytest.approx(20, rel=0.2)
    assert out["after_send_ms_per_request"] == pytest.approx(30, rel=0.2)


def _run(load: str, **split: float) -> dict:
    return {"load": load, "client_split": {"summary": {"requests": 100, "output_tokens": 3200, "callbacks": 1000,
                                                       **split}, "probe_ns_per_callback": 10_000.0}}


def test_the_clients_cpu_is_placed_by_the_measured_split() -> None:
    """Split runs: 0.3 + 0.1 ms before each send, 1.2 + 0.2 + 0.3 ms after it (less the probe's own 10 callbacks x
    10 us): 20 % before in the burst (0.4 / 2.0 ms); 30 % in the 20/s run (0.6 / 2.0 ms); the mean 25 %. A host's
    accounting of 1 ms per request + 50 us per token at 32 tokens (2.6 ms) is placed: 25 % of it before the send, the
    rest over the 32 tokens."""
    runs = [_run("burst100", before_send_ms_per_request=0.3, main_task_ms_per_request=0.1,
                 after_send_ms_per_request=1.2, other_callbacks_ms_per_request=0.2,
                 outside_callbacks_ms_per_request=0.3),
            _run("rate20", before_send_ms_per_request=0.5, main_task_ms_per_request=0.1,
                 after_send_ms_per_request=1.0, other_callbacks_ms_per_request=0.1,
                 outside_callbacks_ms_per_request=0.4),
            _run("closed1", before_send_ms_per_request=9.0, main_task_ms_per_request=0.0,  # not a campaign load
                 after_send_ms_per_request=0.1, other_callbacks_ms_per_request=0.0,
                 outside_callbacks_ms_per_request=0.1)]
    split = vllm_serve_sim.client_before_send_fraction(runs)
    assert split["before_send_fraction"] == pytest.approx(0.25) and split["runs"] == 2
    placed = vllm_serve_sim.placed_client({"per_request_s": 1e-3, "per_token_s": 50e-6}, 0.25, 32)
    assert placed["request_s"] == pytest.approx(0.25 * 2.6e-3)
    assert placed["output_token_s"] == pytest.approx(0.75 * 2.6e-3 / 32)
    with pytest.raises(SystemExit, match="--client-split: no burst100 / rate20 run"):
        vllm_serve_sim.client_before_send_fraction(runs[2:])


def test_the_clients_accounting_counts_its_own_marks_where_a_run_has_them() -> None:
    """A run with the client's marks (unprobed: its process CPU over its timed requests) counts that, a probed one
    its engine window as before (the window's filter: at most 1 s longer than the run): 100 requests of 1 token at
    0.5 ms and 100 of 32 tokens at 2.05 ms fit 0.45 ms per request + 50 us per token."""
    def marked(tokens: int, ms: float) -> dict:
        return {"result": {"completed": 100, "output_lens": [tokens] * 100, "duration": 1.0},
                "engine_window": {"wall_s": 9.0, "threads_cpu_s": {"client/python": 7.0}},  # start-up: not used
                "client_split": {"probed": False, "summary": {"requests": 100, "output_tokens": 100 * tokens,
                                                              "process_cpu_ms_per_request": ms}}}
    fit = vllm_serve_sim.client_cpu_fit([marked(1, 0.5), marked(32, 2.05)])
    assert fit["per_request_s"] == pytest.approx(0.45e-3) and fit["per_token_s"] == pytest.approx(50e-6)
    assert fit["runs"] == 2
    probed = marked(1, 0.5)
    probed["client_split"]["probed"] = True  # the probe's runs are slowed by it: their window, which is too long here
    with pytest.raises(SystemExit, match="--fit-cpu: no run with the client's CPU"):
        vllm_serve_sim.client_cpu_fit([probed])
