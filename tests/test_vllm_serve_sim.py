"""vllm_serve_sim.py's judge of new server sessions: the means and each run's error per cell (`summarize`), another
index's spreads as the noise floor (`judge_summary`, `--floor`) and a fitted model's costs taken as they are
(`--costs`), which must reproduce the fit's own simulation of a run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "ground_truth"))

import vllm_serve_sim  # noqa: E402

SCRIPT = ROOT / "benchmarks" / "ground_truth" / "vllm_serve_sim.py"
RESULTS = ROOT / "benchmarks" / "results" / "vllm-serve-bench"
FIT = RESULTS / "2026-11-30i-serve17" / "sim-2026-11-30c-host-busy-hop.json"  # the model's fit of this host
SESSIONS = RESULTS / "2026-11-30i-serve17" / "sim-sessions-serve11-busy-hop.json"  # serve11's between-session spreads


def _run(name: str, ttft: float) -> dict:
    load, endpoint, count, _ = name.split("-")
    metrics = {"mean_ttft_ms": ttft, "median_ttft_ms": ttft, "mean_tpot_ms": 5.0, "output_throughput": 100.0}
    return {"name": name, "load": load, "endpoint": endpoint, "api_server_count": int(count[1:]),
            "loadavg_before": [1.0], "result": metrics}


def test_summarize_gives_each_sessions_error_and_the_error_of_the_mean() -> None:
    """Three sessions' runs of one cell (mean TTFT 20, 30, 40 ms) simulated at 30 ms each: the median's error 0 %,
    the spread (40 - 20) / 30, the mean's error 0 %, each session's +50 / 0 / -25 %."""
    index = {"runs": [_run(f"rate20-chat-a1-r{k}", ttft) for k, ttft in enumerate((20.0, 40.0, 30.0))]}
    predicted = {run["name"]: {**run["result"], "mean_ttft_ms": 30.0} for run in index["runs"]}
    (row,) = vllm_serve_sim.summarize(index, predicted)
    ttft = row["mean_ttft_ms"]
    assert row["repeats"] == 3 and row["runs"] == ["rate20-chat-a1-r0", "rate20-chat-a1-r1", "rate20-chat-a1-r2"]
    assert ttft["measured"] == 30.0 and ttft["error_pct"] == 0.0 and ttft["spread_pct"] == pytest.approx(100 * 20 / 30)
    assert ttft["measured_mean"] == 30.0 and ttft["error_of_mean_pct"] == pytest.approx(0.0)
    assert ttft["run_error_pct"] == pytest.approx([50.0, -25.0, 0.0])


def test_judge_summary_takes_another_indexs_spreads_as_the_floor() -> None:
    """A -16.5 % error: beyond its own 6 % spread + 10 points it misses, within another index's 7 % it is met."""
    metrics = {m: {"error_pct": -16.5, "spread_pct": 6.0} for m in vllm_serve_sim.METRICS}
    rows = [{"cell": "rate20-chat-a1", **metrics}]
    assert vllm_serve_sim.judge_summary(rows, set())["all"].startswith("0 of 4")
    floor = vllm_serve_sim.spreads([{"cell": "rate20-chat-a1", **{m: {"spread_pct": 7.0} for m in metrics}}])
    assert vllm_serve_sim.judge_summary(rows, set(), floor)["all"].startswith("4 of 4")


def test_costs_refuses_a_fit_in_the_same_run(tmp_path: Path) -> None:
    runs = tmp_path / "r.json"
    runs.write_text("{}")
    out = subprocess.run([sys.executable, str(SCRIPT), "--runs", str(runs), "--costs", str(FIT),
                          "--fit-cpu", "burst100-completions-a1", "--out", str(tmp_path / "o.json")],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "--costs: not with --fit-cpu" in out.stderr and "Traceback" not in out.stderr


def test_costs_reproduces_the_fits_own_simulation_of_a_run(tmp_path: Path) -> None:
    """One campaign run re-simulated with --costs (the fit's --out file): the same prediction as in that file, written
    before the accept per turn was the default (so with --no-accept-per-turn), and as serve26's judge of it with the
    accept."""
    campaign = json.loads((RESULTS / "2026-11-30c" / "runs.json").read_text())
    run = next(r for r in campaign["runs"] if r["name"] == "burst100-completions-a1-r0")
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps({**campaign, "runs": [run]}))
    fit = json.loads(FIT.read_text())
    accept = json.loads((RESULTS / "2026-12-01g-serve26" / "sim-host30-accept.json").read_text())
    for flags, expected in (([], accept), (["--no-accept-per-turn"], fit)):
        out = tmp_path / "sim.json"
        subprocess.run([sys.executable, str(SCRIPT), "--runs", str(runs), "--hardware", str(ROOT / fit["hardware"]),
                        "--costs", str(FIT), "--floor", str(FIT), str(SESSIONS), "--out", str(out), *flags],
                       check=True, capture_output=True, cwd=ROOT)
        record = json.loads(out.read_text())
        assert record["predicted"][run["name"]] == expected["predicted"][run["name"]]
    # (terms added since the fit was written stay at their defaults: 0)
    assert {k: record["costs"][k] for k in fit["costs"]} == fit["costs"]
    assert all(record["costs"][k] == 0.0 for k in set(record["costs"]) - set(fit["costs"]))
    assert record["client_costs_s"] == fit["client_costs_s"]
    assert record["fitted_on"] == [] and "summary_floor" in record
    # a second floor (the between-session spreads) is one more count, under its file's name
    assert list(record["summary_floors"]) == [str(SESSIONS)]
    assert record["summary_floors"][str(SESSIONS)]["all"].endswith("within spread + 10 points, median |error| "
                                                                    + record["summary"]["all"].split("median |error| ")[1])


def test_refill_after_other_us_moves_the_two_process_run_only(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """--refill-after-other-us: the host's turns' refill for every run. Against 0, the profile's (110 us) makes a
    two-process burst of the campaign take longer to stream (its mean TPOT and TTFT change); a one-process run, whose
    process never follows another's, is the same."""
    campaign = json.loads((RESULTS / "2026-11-30d-serve6" / "runs-a2.json").read_text())
    one = json.loads((RESULTS / "2026-11-30c" / "runs.json").read_text())
    fit = json.loads(FIT.read_text())
    from roofline.sim.api_server import ApiServerCosts

    costs = ApiServerCosts(**fit["costs"])
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(campaign["model_config"]))
    hardware = str(RESULTS / "2026-11-30c" / "cal-host.yaml")
    for index, name, moves in ((campaign, "burst100-completions-a2-r0", True),
                               (one, "burst100-completions-a1-r0", False)):
        run = next(r for r in index["runs"] if r["name"] == name)
        args = (run, model_dir, hardware, index["server_flags"], costs, vllm_serve_sim.api_cores(index))
        monkeypatch.setattr(vllm_serve_sim, "REFILL_AFTER_OTHER_S", 0.0)
        before = vllm_serve_sim.simulate_run(*args)
        monkeypatch.setattr(vllm_serve_sim, "REFILL_AFTER_OTHER_S", None)  # the profile's
        after = vllm_serve_sim.simulate_run(*args)
        assert (after != before) == moves, name
        if moves:
            assert after["mean_ttft_ms"] > before["mean_ttft_ms"]


def test_a_missing_input_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """An input file that is not there (here --costs) is refused by the argument parser: one line, exit 2."""
    missing = tmp_path / "no-such-fit.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--runs", str(RESULTS / "2026-11-30e-lead" / "runs-sessions-rerun.json"),
                           "--hardware", str(RESULTS / "2026-11-30c" / "cal-host.yaml"), "--costs", str(missing)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert f"argument --costs: no such file: {missing}" in done.stderr
    assert "Traceback" not in done.stderr


def test_busy_hop_is_each_sessions_in_step_transport_less_one_at_a_time() -> None:
    """Session 1: 0.40 / 0.44 ms at 20/s in a step, 0.10 / 0.12 one at a time -> 0.31 ms; session 2: 0.30 - 0.10 =
    0.20 ms; runs without the stamps (session 3) are left out: 0.255 ms."""
    def run(session: int, load: str, hop: dict[str, float]) -> dict[str, object]:
        return {"session": session, "load": load, "measured_input_hop_ms": hop}
    stages = {"runs": {"a": run(1, "rate20", {"transport_in_step": 0.40}), "b": run(1, "rate20", {"transport_in_step": 0.44}),
                       "c": run(1, "closed1", {"transport": 0.10}), "d": run(1, "closed1", {"transport": 0.12}),
                       "e": run(2, "rate20", {"transport_in_step": 0.30}), "f": run(2, "closed1", {"transport": 0.10}),
                       "g": run(3, "rate20", {}), "h": run(3, "closed1", {})}}
    out = vllm_serve_sim.busy_hop_s(stages)
    assert out["busy_engine_hop_s"] == pytest.approx(0.255e-3)
    assert out["per_session_ms"] == {"s1": pytest.approx(0.31), "s2": pytest.approx(0.20)}
    with pytest.raises(SystemExit, match="--busy-hop: no session"):
        vllm_serve_sim.busy_hop_s({"runs": {"g": run(3, "rate20", {})}})


def test_chat_split_places_the_chat_requests_extra_by_the_measured_share_before_the_hand_off() -> None:
    """One at a time at 1 and 128 output tokens, chat minus completions: 0.3 / 0.1 ms (medians) before the hand-off,
    0.12 / 0.14 from it to the first token (the 128-token runs' 0.6 ms more from the first token to the last: 5 us a
    token, taken off once), 0 after the last: before 0.2, after (0.115 + 0.135) / 2 = 0.125 ms: 0.615 of it before.
    A negative slope counts as none; fewer than two output lengths is refused in one line."""
    row = {"before_handoff": 9.0, "handoff_to_first": 9.0, "after_last": 9.0}  # (the means: not used but the slope)
    split = {"chat_minus_completions_ms": {
        "closed1-out1-a1": {**row, "first_to_last": 0.0, "before_handoff_median": 0.3, "handoff_to_first_median": 0.12,
                            "after_last_median": 0.0},
        "closed1-out128-a1": {**row, "first_to_last": 0.635, "before_handoff_median": 0.1,
                              "handoff_to_first_median": 0.14, "after_last_median": 0.0}}}
    out = vllm_serve_sim.chat_before_handoff_fraction(split)
    assert out["per_token_ms"] == pytest.approx(0.005)
    assert out["before_handoff_ms"] == pytest.approx(0.2) and out["after_handoff_ms"] == pytest.approx(0.125)
    assert out["before_handoff_fraction"] == pytest.approx(0.2 / 0.325)
    split["chat_minus_completions_ms"]["closed1-out128-a1"]["first_to_last"] = -3.0
    assert vllm_serve_sim.chat_before_handoff_fraction(split)["per_token_ms"] == 0.0
    with pytest.raises(SystemExit, match="--chat-split: needs the chat-minus-completions rows of two output lengths"):
        vllm_serve_sim.chat_before_handoff_fraction({"chat_minus_completions_ms": {"closed1-a1": row}})


def test_chat_split_only_with_a_fit(tmp_path: Path) -> None:
    runs = tmp_path / "r.json"
    runs.write_text("{}")
    out = subprocess.run([sys.executable, str(SCRIPT), "--runs", str(runs), "--chat-split", str(runs),
                          "--out", str(tmp_path / "o.json")], capture_output=True, text=True)
    assert out.returncode == 2 and "--chat-split: only with --fit-cpu" in out.stderr and "Traceback" not in out.stderr
