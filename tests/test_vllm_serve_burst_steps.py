"""vllm_serve_burst_steps.py: logged engine steps joined with the Worker's calls and the arrivals during them, the
like-for-like medians, and the cores' run time by role over a burst's intake, from made-up stamps."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "ground_truth"))

import vllm_serve_burst_steps as bs  # noqa: E402


def _log(*steps: tuple[int, int, int, float]) -> str:
    return "\n".join(f"x Engine 000: Iteration({i}): {c} context requests, {t} context tokens, {g} generation requests, "
                     f"{g} generation tokens, iteration elapsed time: {ms:.2f} ms, CPU KV cache usage: 0.0%"
                     for i, (c, t, g, ms) in enumerate(steps))


def test_logged_steps_are_read_in_iteration_order_once_each() -> None:
    text = _log((1, 128, 0, 5.0), (2, 256, 1, 8.0)) + "\n" + _log((1, 128, 0, 5.0))  # a repeated line
    assert bs.logged_steps(text) == [(1, 128, 0, 5.0), (2, 256, 1, 8.0)]


def test_calls_of_steps_that_scheduled_nothing_are_left_out() -> None:
    events = [["ec_sched", 1.0, 1.001, 1, 1, 0], ["wk_rpc", "execute_model", 1.002, 1.006],
              ["ec_sched", 2.0, 2.001, 0, 0, 0], ["wk_rpc", "execute_model", 2.002, 2.0022],
              ["wk_rpc", "sample_tokens", 1.0061, 1.0063]]
    assert bs.worker_calls(events) == [["wk_rpc", "execute_model", 1.002, 1.006]]


def test_join_counts_the_arrivals_in_each_call_and_flags_a_misjoined_pair() -> None:
    steps = [(1, 128, 0, 4.5), (2, 256, 1, 8.5), (0, 0, 3, 30.0)]
    calls = [["wk_rpc", "execute_model", 0.5, 0.501],  # a warm-up call: dropped (paired from the end)
             ["wk_rpc", "execute_model", 1.000, 1.004, 0, 0.0038, 0.0, 1],
             ["wk_rpc", "execute_model", 1.005, 1.013],
             ["wk_rpc", "execute_model", 3.000, 3.002]]  # 2 ms against 30 logged: misjoined
    rows = bs.join(steps, calls, arrivals_s=[1.0001, 1.006, 1.007, 2.5])
    assert [r["arrivals"] for r in rows] == [1, 2, 0]
    assert rows[0]["idle_s"] is None and rows[1]["idle_s"] == 0.001
    assert rows[0]["worker_user_ms"] == 3.8 and rows[1]["worker_user_ms"] is None
    assert [r["consistent"] for r in rows] == [True, True, False]


def _row(ctx_reqs: int, ctx_tokens: int, ms: float, arrivals: int, idle_s: float | None) -> dict:
    return {"ctx_reqs": ctx_reqs, "ctx_tokens": ctx_tokens, "gen_reqs": 0, "ms": ms, "worker_ms": ms - 0.5,
            "start_s": 0.0, "arrivals": arrivals, "idle_s": idle_s, "worker_user_ms": None, "worker_faults": None,
            "consistent": True}


def test_compare_takes_full_steps_after_a_step_and_one_prompt_steps_by_the_idle_before_them() -> None:
    rows = [_row(1, 128, 6.0, 0, 5.0),     # one prompt after 5 s idle
            _row(16, 2048, 40.0, 0, 0.002), _row(16, 2048, 42.0, 30, 0.002),
            _row(16, 2048, 60.0, 0, 3.0),  # a full step after idle: not like for like
            _row(1, 128, 4.0, 0, 0.003), _row(1, 128, 5.0, 0, 0.7)]
    out = bs.compare(rows)
    assert out["full_prefill_ms"]["without_arrivals"] == 40.0 and out["full_prefill_ms"]["with_arrivals"] == 42.0
    assert out["one_prompt_ms"]["after_a_step"] == 4.0 and out["one_prompt_ms"]["after_idle"] == 6.0
    assert out["one_prompt_ms"]["by_idle_s"]["0.5-1.0"] == {"n": 1, "ms": 5.0, "worker_user_ms": None}


def test_intake_cpu_splits_each_slice_at_the_first_hand_off_and_divides_by_the_intervals() -> None:
    # perf_sched_holders.timehist: (switch-out time, cpu, comm, tid, delay s, run s); a slice runs until its time.
    events = [(10.010, 0, "python", 7, 0.0, 0.010),   # client: 10.000-10.010, before the first hand-off
              (10.014, 0, "python", 5, 0.0, 0.006),   # API loop: 10.008-10.014 (2 ms before, 4 during)
              (10.020, 1, "VLLM::Worker", 9, 0.0, 0.008)]
    roles = bs.roles({"api_server/python/5/5": [], "client/python/7/7": [], "VLLM::Worker/VLLM::Worker/9/9": []})
    assert roles == {5: "api_loop", 7: "client", 9: "VLLM::Worker/VLLM::Worker"}
    out = bs.intake_cpu(events, roles, first_send_s=10.0, first_add_s=10.010, last_add_s=10.020, num_hand_offs=3)
    assert out["first_hand_off_ms"] == 10.0 and out["ms_a_hand_off"] == 5.0
    assert out["before_first_hand_off_ms"] == {"cpu0/api_loop": 2.0, "cpu0/client": 10.0}
    assert out["per_hand_off_ms"] == {"cpu0/api_loop": 2.0, "cpu1/VLLM::Worker/VLLM::Worker": 4.0}


def test_the_per_arrival_line_recovers_its_terms_with_an_intercept_per_session() -> None:
    # ms = session (2 or 3) + 17 per 1,000 context tokens + 0.1 per decode + 0.2 per arrival, exactly.
    sessions = []
    for base in (2.0, 3.0):
        rows = []
        for k in range(12):
            tokens, decodes, arrivals = 500 + 130 * k, (7 * k) % 40, (5 * k) % 23
            row = _row(4, tokens, base + 17 * tokens / 1000 + 0.1 * decodes + 0.2 * arrivals, arrivals, 0.002)
            rows.append({**row, "gen_reqs": decodes})
        rows.append({**_row(1, 128, 99.0, 3, 0.002)})   # below the context tokens taken: left out
        rows.append({**_row(8, 1000, 99.0, 3, 2.0)})    # after an idle engine: left out
        sessions.append(rows)
    fit = bs.per_arrival_fit(sessions, num_boot=20)
    assert fit["steps"] == 24 and fit["of"] == 24
    assert fit["ms_per_1000_context_tokens"] == 17.0 and fit["ms_per_decode"] == 0.1 and fit["ms_per_arrival"] == 0.2
    assert fit["ms_per_arrival_90"] == [0.2, 0.2]
