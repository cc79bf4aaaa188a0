"""The runs of `vllm_serve_bench.py` simulated: each saved `vllm bench serve` result (with --save-detailed: every
request's lengths and send time replayed exactly) against `roofline compare --vllm-bench`'s prediction of it.

    python benchmarks/ground_truth/vllm_serve_sim.py --runs benchmarks/results/vllm-serve-bench/runs.json \
        --hardware benchmarks/results/vllm-serve-bench/cpu-host.yaml --out "$OUT/after.json"
    # the build before the API-server stage, same script (it uses only what both builds have):
    PYTHONPATH=$BEFORE_TREE python benchmarks/ground_truth/vllm_serve_sim.py --runs ... --hardware \
        benchmarks/results/cpu-profile.yaml --out "$OUT/before.json"
    python benchmarks/ground_truth/vllm_serve_sim.py --report "$OUT/before.json" "$OUT/after.json" \
        --fit-cells completions-a1

The model is rebuilt from the run index's config (`model_config`); the engine flags are the server's
(`server_flags`); the steps are charged by the vLLM-CPU executor description (`cpu_engine="vllm-cpu"`). Each
request's prompt is the client's `input_lens` plus the tokens the server added, measured per run as the server's
prompt-token counter over the run minus the client's count (the chat template's tokens on the chat endpoint).

`--fit` fits the API server's reference costs (`roofline.sim.api_server.ApiServerCosts`) on the named cells (e.g.
completions with one API-server process), by a coarse grid on the mean and median TTFT, mean TPOT and output
throughput errors; the other cells are then the held-out judgement.
"""

from __future__ import annotations

import argparse
import fnmatch
import inspect
import json
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

METRICS = ("mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "output_throughput")
# The ApiServerCosts that are CPU work of the API-server process (and of the client added to them) on its core.
API_CORE_WORK = ("request_s", "chat_request_s", "prompt_token_s", "output_pass_s", "output_token_s",
                 "chat_output_token_s", "chat_first_output_s", "render_request_s")
# --refill-after-other-us: the host's `api_server_refill_after_other_us` for every run (None: the profile's).
REFILL_AFTER_OTHER_S: float | None = None
# --no-accept-per-turn: every run's connections read as their bytes arrive, not accepted one a turn of the API
# server's loop (`SimulationOptions.api_server_accept_per_turn` False; the model before it was the default).
ACCEPT_PER_TURN = True


def engine_argv(server_flags: list[str]) -> list[str]:
    """The server's engine flags as `roofline compare` takes them (same names as vLLM's)."""
    keep = {"--max-num-seqs", "--max-num-batched-tokens", "--max-model-len", "--dtype"}
    out = []
    for i, flag in enumerate(server_flags):
        if flag in keep:
            out += [flag, server_flags[i + 1]]
    if "--no-enable-prefix-caching" in server_flags:
        out.append("--no-enable-prefix-caching")
    return out + ["--block-size", "128"]  # vLLM-CPU's default block size (vllm/platforms/cpu.py)


def simulate_run(run: dict[str, Any], model_dir: Path, hardware: str, server_flags: list[str],
                 costs: Any = None, api_cores: int | None = None,
                 client: dict[str, float] | None = None) -> dict[str, float]:
    from roofline.calibration import vllm_bench
    from roofline.cli import build_parser
    from roofline.sim.bench_client import bench_load_from_args
    from roofline.sim.bench_metrics import parse_goodput
    from roofline.sim.deployment import make_deployment
    from roofline.sim.simulator import SimulationOptions

    record = dict(run["result"])
    extra = round((run["server_prompt_tokens"] - sum(record["input_lens"])) / len(record["input_lens"]))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "result.json"
        path.write_text(json.dumps(record))
        args = build_parser().parse_args(["compare", "--vllm-bench", str(path), "--hardware", hardware,
                                          "--model", str(model_dir), *engine_argv(server_flags)])
        deployment = make_deployment(str(model_dir), hardware, _engine_args(args), cpu_engine="vllm-cpu")
        if REFILL_AFTER_OTHER_S is not None and deployment.hw.host is not None:
            deployment = replace(deployment, hw=replace(deployment.hw, host=replace(
                deployment.hw.host, api_server_refill_after_other_s=REFILL_AFTER_OTHER_S)))
        replay = vllm_bench.replay_from_result(record)
        # The server's prompt: the client's text re-tokenized plus what the server adds (counted above).
        lengths = ([n + extra for n in replay.lengths[0]], list(replay.lengths[1]))
        load = bench_load_from_args(args, lengths, replay.due_s, replay.settings)
        fields = inspect.signature(SimulationOptions).parameters
        kwargs: dict[str, Any] = {"record_steps": False, "max_concurrency": load.max_concurrency}
        if not ACCEPT_PER_TURN:
            kwargs["api_server_accept_per_turn"] = False
        if "api_server_count" in fields:
            from roofline.sim.api_server import ApiServerCosts

            count = run["api_server_count"]
            host = deployment.hw.host
            shared = api_cores is not None and count > api_cores
            if client or shared:
                # Given costs are reference-host costs, which the simulator divides by the host's speed; without
                # them, the host's own costs.
                speed = host.single_thread_speed_relative if host is not None else 1.0
                if costs is None:
                    costs = ApiServerCosts.for_host(host).scaled(speed) \
                        if host is not None and hasattr(ApiServerCosts, "for_host") else ApiServerCosts()
                # The client's work on the same cores (seconds on this host, so at the reference host's speed).
                costs = with_client(costs, {k: v * speed for k, v in client.items()} if client else None)
            if shared and (host is None or host.api_server_num_cores is None):
                # More API-server processes than the cores they were pinned to, and a profile that does not say
                # so (host.api_server_num_cores: the simulator's API server then shares the cores itself): they
                # share them (processor sharing), so each runs its work at api_cores / count of a core's speed.
                # Only the work on those cores: the hops (latency_s, output_latency_s) are no CPU work of theirs
                # and the engine core's own per-step work (engine_step_s) runs on the engine's core (until
                # 2026-11-29e all were scaled).
                factor = count / api_cores
                costs = replace(costs, **{name: getattr(costs, name) * factor for name in API_CORE_WORK})
            kwargs.update(api_server_count=count, endpoint=run["endpoint"], api_server_costs=costs)
        options = SimulationOptions(**kwargs)
        metric_options = vllm_bench.measured_metric_options(record, parse_goodput(None))
        comparison = vllm_bench.compare_with_result(record, deployment, load, metric_options, options, replay,
                                                    str(model_dir), deployment.hw.id)
    rows = {row["metric"]: row for row in comparison.rows}
    return {m: rows[m]["predicted"] for m in METRICS}


def _engine_args(args: argparse.Namespace) -> Any:
    from roofline.engine_args import engine_args_from

    return engine_args_from(args, "simulate")


def simulate_all(index: dict[str, Any], hardware: str, costs: Any = None, names: set[str] | None = None,
                 client: dict[str, float] | None = None) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "llama-tiny"
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps(index["model_config"]))
        return {run["name"]: simulate_run(run, model_dir, hardware, index["server_flags"], costs, api_cores(index),
                                          client)
                for run in index["runs"] if (names is None or run["name"] in names) and "excluded" not in run}


def judge_summary(rows: list[dict[str, Any]], fitted: set[str],
                  floor: dict[str, dict[str, float]] | None = None) -> dict[str, str]:
    """The target of issue 37 per group of cells (the fitted ones, the judged ones, each API-server count): how many
    (cell, metric) errors lie within the repeats' spread + 10 points, and the median |error|; with `floor` (cell ->
    metric -> spread %, e.g. another index's rows: `spreads`) that spread instead of the rows' own."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        names = ["all", "fitted" if row["cell"] in fitted else "judged", f"api-server-count {row['cell'][-1]}"]
        for metric in METRICS:
            spread = floor[row["cell"]][metric] if floor is not None else row[metric]["spread_pct"]
            for name in names:
                groups.setdefault(name, []).append((abs(row[metric]["error_pct"]), spread))
    return {name: f"{sum(e <= s + 10 for e, s in pairs)} of {len(pairs)} within spread + 10 points, median "
                  f"|error| {statistics.median(e for e, _ in pairs):.1f} %" for name, pairs in groups.items()}


def spreads(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each cell's spread % per metric in `rows` (an --out file's: the noise floor its repeats measured)."""
    return {row["cell"]: {metric: row[metric]["spread_pct"] for metric in METRICS} for row in rows}


def api_cores(index: dict[str, Any]) -> int:
    """How many cores the API-server processes were pinned to (taskset -c list, e.g. "0" or "0,2-3")."""
    cores = 0
    for part in str(index.get("api_cores", "0")).split(","):
        low, _, high = part.partition("-")
        cores += int(high or low) - int(low) + 1
    return cores


def cell_of(run: dict[str, Any]) -> str:
    return f"{run['load']}-{run['endpoint']}-a{run['api_server_count']}"


def summarize(index: dict[str, Any], predicted: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Per cell: measured median over repeats, spread (max - min) / median, predicted (median over the repeats'
    replays) and the error of the predicted against the measured median, for every metric; also the means over the
    repeats and the error of the predicted mean, and each repeat's own error (`run_error_pct`, in the runs' order:
    with one run per server session, the error per session)."""
    cells: dict[str, list[dict[str, Any]]] = {}
    for run in index["runs"]:
        if run["name"] in predicted:
            cells.setdefault(cell_of(run), []).append(run)
    rows = []
    for cell, runs in cells.items():
        row: dict[str, Any] = {"cell": cell, "repeats": len(runs),
                               "loadavg_1min": [r["loadavg_before"][0] for r in runs]}
        for metric in METRICS:
            measured = [r["result"][metric] for r in runs]
            mid = statistics.median(measured)
            pred = statistics.median(predicted[r["name"]][metric] for r in runs)
            preds = [predicted[r["name"]][metric] for r in runs]
            mean, pred_mean = statistics.mean(measured), statistics.mean(preds)
            row[metric] = {"measured": mid, "spread_pct": 100 * (max(measured) - min(measured)) / mid,
                           "predicted": pred, "error_pct": 100 * (pred / mid - 1),
                           "measured_mean": mean, "predicted_mean": pred_mean,
                           "error_of_mean_pct": 100 * (pred_mean / mean - 1),
                           "run_error_pct": [100 * (p / m - 1) for p, m in zip(preds, measured)]}
        row["runs"] = [r["name"] for r in runs]
        rows.append(row)
    return rows


def cpu_rows(index: dict[str, Any]) -> list[dict[str, Any]]:
    """Per cell, medians over its repeats of the CPU seconds each process took in the engine's working window
    (`vllm_serve_bench.py` `CpuSampler.engine_window`), and the CPU each core gave to other sessions' niced work
    (`nice_s`) and left idle meanwhile."""
    groups = {"api_server": ("api_server/", "APIServer"), "client": ("client/",),
              "engine_core": ("VLLM::EngineCor/",), "worker": ("VLLM::Worker/",)}
    cells: dict[str, list[dict[str, float]]] = {}
    for run in index["runs"]:
        window = run.get("engine_window")
        if not window or "excluded" in run:
            continue
        row = {"wall_s": window["wall_s"]}
        for group, marks in groups.items():
            row[f"{group}_cpu_s"] = sum(v for k, v in window["threads_cpu_s"].items() if any(m in k for m in marks))
        for cpu, use in window["cpus"].items():
            row[f"{cpu}_others_s"] = use["nice_s"]
            row[f"{cpu}_idle_s"] = use["idle_s"]
        cells.setdefault(cell_of(run), []).append(row)
    return [{"cell": cell, "repeats": len(rows), **{k: round(statistics.median(r[k] for r in rows), 3)
                                                    for k in rows[0]}} for cell, rows in cells.items()]


def ttft_rows(index: dict[str, Any]) -> list[dict[str, Any]]:
    """Per cell, medians over its repeats of where the mean TTFT went (ms), from vLLM's own histograms of each run
    (`server_histograms`): the client's TTFT; the API server's (`time_to_first_token_seconds`: from the request's
    arrival in the API server to its first token there); inside it the engine's queueing and prefill (scheduled to
    first token); the rest of the API server's TTFT (its input work after the arrival stamp, the IPC hops, the
    first token's output processing); and the client's share (HTTP in, the first chunk out, the client's own
    processing: client TTFT - API-server TTFT)."""
    cells: dict[str, list[dict[str, float]]] = {}
    for run in index["runs"]:
        h = run.get("server_histograms")
        if not h or "time_to_first_token_seconds_mean" not in h or "excluded" in run:
            continue
        api = 1e3 * h["time_to_first_token_seconds_mean"]
        queue, prefill = 1e3 * h["request_queue_time_seconds_mean"], 1e3 * h["request_prefill_time_seconds_mean"]
        client = run["result"]["mean_ttft_ms"]
        cells.setdefault(cell_of(run), []).append({
            "client_ttft_ms": client, "api_server_ttft_ms": api, "engine_queue_ms": queue,
            "engine_prefill_ms": prefill, "api_server_rest_ms": api - queue - prefill, "client_share_ms": client - api,
            "api_server_itl_ms": 1e3 * h["inter_token_latency_seconds_mean"]})
    return [{"cell": cell, "repeats": len(rows), **{k: round(statistics.median(r[k] for r in rows), 1)
                                                    for k in rows[0]}} for cell, rows in cells.items()]


def step_gap_rows(index: dict[str, Any]) -> list[dict[str, Any]]:
    """Per cell, the median over its repeats of the served engine's time per step outside the iteration log's
    elapsed (the Worker's forward pass and the hand-off both ways): (run duration - sum of elapsed) / steps, in ms;
    an upper bound (the duration also holds the idle gaps of a run's start and end)."""
    cells: dict[str, list[float]] = {}
    for run in index["runs"]:
        steps = run.get("engine_steps")
        if steps and "excluded" not in run:
            gap = (run["result"]["duration"] - sum(s[5] for s in steps) / 1e3) / len(steps)
            cells.setdefault(cell_of(run), []).append(1e3 * gap)
    return [{"cell": cell, "repeats": len(gaps), "gap_ms_per_step": round(statistics.median(gaps), 2)}
            for cell, gaps in cells.items()]


def decode_step_ms(trace_dirs: list[Path]) -> dict[int, float]:
    """Median duration (ms) of the pure-decode steps of in-process step traces (`roofline measure --engine vllm`,
    repeat sets or single traces), by number of sequences, without the scheduler's own `schedule_s`."""
    import pandas as pd

    from engine.core.trace import read_trace

    frames = []
    for trace in trace_dirs:
        repeats = sorted(trace.glob("repeat-*")) or [trace]
        for repeat in repeats:
            steps, _ = read_trace(repeat)
            frames.append(steps[steps["num_prefill_tokens"] == 0])
    steps = pd.concat(frames)
    return {int(n): 1e3 * float((g["duration_s"] - g["schedule_s"]).median()) for n, g in steps.groupby("num_seqs")}


def served_step_rows(index: dict[str, Any], reference: dict[int, float]) -> list[dict[str, Any]]:
    """Per run: the served engine's pure-decode steps (the server's iteration log: `engine_steps`) against the
    in-process engine's median pure-decode step of the same batch size (`decode_step_ms`): the median ratio, over
    the steps whose batch size the reference has."""
    rows = []
    for run in index["runs"]:
        ratios = [step[5] / reference[step[3]] for step in run.get("engine_steps", [])
                  if step[1] == 0 and step[3] in reference]
        if ratios:
            rows.append({"run": run["name"], "decode_steps": len(ratios),
                         "served_over_inprocess": round(statistics.median(ratios), 3),
                         "loadavg_before": run["loadavg_before"][0]})
    return rows


# The grids: the completions endpoint's terms first (on the completions cells named by --fit), then the chat
# endpoint's own terms (on the chat cells named by --fit-chat) with the completions terms fixed.
# The ranges span the 2026-11-25 quiet measurements (0.4 ms per request, 65 us per token) up to what the API
# server's CPU time per request in the 2026-11-29 campaign allows (10-16 ms per request of 32 streamed tokens).
GRID = {"request_s": (0.4e-3, 2e-3, 4e-3, 6e-3, 8e-3), "output_token_s": (65e-6, 150e-6, 300e-6)}
CHAT_GRID = {"chat_request_s": (0.0, 2e-3, 4e-3, 8e-3), "chat_output_token_s": (0.0, 50e-6)}


def fit(index: dict[str, Any], hardware: str, cells: set[str], grid: dict[str, tuple[float, ...]],
        base: Any = None, client: dict[str, float] | None = None) -> Any:
    """The point of `grid` (reference-host seconds, the other costs from `base`) minimizing the mean |error| of
    METRICS over the runs of `cells` (with the client's costs `client` on the API server's cores)."""
    import itertools

    from roofline.sim.api_server import ApiServerCosts

    names = {run["name"] for run in index["runs"] if cell_of(run) in cells}
    base = base or ApiServerCosts()
    best = None
    for values in itertools.product(*grid.values()):
        costs = replace(base, **dict(zip(grid, values)))
        rows = summarize(index, simulate_all(index, hardware, costs, names, client))
        score = statistics.mean(abs(row[m]["error_pct"]) for row in rows for m in METRICS)
        if best is None or score < best[0]:
            best = (score, costs)
        print(f"fit: {dict(zip(grid, values))} -> {score:.1f} %", file=sys.stderr, flush=True)
    assert best is not None
    return best[1]


def window_cpu_s(run: dict[str, Any], marks: tuple[str, ...]) -> float:
    """CPU seconds of the threads whose key starts with or contains one of `marks` in the run's engine window."""
    return sum(v for k, v in run["engine_window"]["threads_cpu_s"].items() if any(k.startswith(m) or m in k
                                                                                  for m in marks))


def api_cpu_fit(runs: list[dict[str, Any]], chat_per_token: bool = False) -> dict[str, float]:
    """Least squares of the API server's CPU seconds in each run's engine window (`cpu_rows`' api_server) over
    `runs` (one API-server process each): cpu = per_request x requests + per_token x output tokens + per_step x
    engine steps (the server's iteration log) + chat_per_request x requests on the chat endpoint (with
    `chat_per_token`, + chat_per_token x output tokens on the chat endpoint); the client's one-prompt test run (32
    tokens) counted as a request. Runs of one output length alone cannot tell per_request from per_token: the fit
    needs loads of different output lengths (burst100 against burst100-out1), on both endpoints for chat_per_token."""
    import numpy as np

    rows, cpu = [], []
    for run in runs:
        res = run["result"]
        requests, tokens = res["completed"] + 1, sum(res["output_lens"]) + 32
        chat = run["endpoint"] == "chat"
        rows.append([requests, tokens, len(run.get("engine_steps", [])), requests if chat else 0]
                    + ([tokens if chat else 0] if chat_per_token else []))
        cpu.append(window_cpu_s(run, ("api_server", "APIServer")))
    solution, *_ = np.linalg.lstsq(np.array(rows, float), np.array(cpu), rcond=None)
    per_request, per_token, per_step, chat = (float(x) for x in solution[:4])
    out = {"per_request_s": per_request, "per_token_s": per_token, "per_step_s": per_step,
           "chat_per_request_s": chat, "runs": len(cpu)}
    if chat_per_token:
        out["chat_per_token_s"] = float(solution[4])
    return out


def chat_before_handoff_fraction(split: dict[str, Any]) -> dict[str, float]:
    """The share of the chat endpoint's extra work per request (over completions) that runs before the request's
    hand-off to the engine core, from `vllm_serve_chat_split.py`'s one-at-a-time runs (its --out file): per output
    length, chat minus completions in the loop's steps before the hand-off (the medians over requests: a step the
    client's work on the shared core interrupts takes its wall time), against those from the hand-off to the
    client's first token (the role chunk, and the first token's chunk written in the same task step: the per-token
    slope of the mean steps from the first token to the last over the output lengths is taken off it) and after the
    client's last token (the request's end); the means over the output lengths."""
    diffs = split["chat_minus_completions_ms"]
    lengths = {1: "closed1-out1-a1", 32: "closed1-a1", 128: "closed1-out128-a1"}
    have = {n: diffs[c] for n, c in lengths.items() if c in diffs}
    if len(have) < 2:
        raise SystemExit("--chat-split: needs the chat-minus-completions rows of two output lengths or more "
                         f"({', '.join(lengths.values())}), got {', '.join(diffs) or 'none'}")
    ns = sorted(have)
    # Per streamed token after the first: the slope of (first_to_last) over the output lengths (none where negative).
    slope = max(0.0, (have[ns[-1]]["first_to_last"] - have[ns[0]]["first_to_last"]) / (ns[-1] - ns[0]))
    before = statistics.mean(have[n]["before_handoff_median"] for n in ns)
    after = statistics.mean(have[n]["handoff_to_first_median"] - slope + have[n]["after_last_median"] for n in ns)
    total = before + after
    if total <= 0:
        raise SystemExit(f"--chat-split: the chat endpoint's extra per request is {total:.4f} ms (not positive)")
    return {"before_handoff_ms": before, "after_handoff_ms": after, "per_token_ms": slope,
            "before_handoff_fraction": min(1.0, max(0.0, before / total))}


def client_cpu_fit(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Least squares of the client's (`vllm bench serve`) CPU seconds over `runs`: cpu = per_request x requests +
    per_token x output tokens. A run with the client's own marks (`vllm_serve_bench.py`: run['client_split'], unprobed:
    its process CPU from its first timed request's start to its last one's end) counts that; an older one its CPU in
    the engine window, where the window holds the client's CPU and not its start-up (window at most 1 s longer than
    the run: the sampler's windows that began before the client had imported vLLM hold ~17 s of start-up; the
    window's 0.2-s edges still hold some of the client's work before and after the run)."""
    import numpy as np

    rows, cpu = [], []
    for run in runs:
        marks = run.get("client_split", {})
        if "summary" in marks and not marks.get("probed", True):
            summary = marks["summary"]
            rows.append([summary["requests"], summary["output_tokens"]])
            cpu.append(summary["process_cpu_ms_per_request"] * summary["requests"] / 1e3)
            continue
        window = run["engine_window"]
        if window["wall_s"] > run["result"]["duration"] + 1.0 or not any(k.startswith("client/")
                                                                         for k in window["threads_cpu_s"]):
            continue
        rows.append([run["result"]["completed"] + 1, sum(run["result"]["output_lens"]) + 32])
        cpu.append(window_cpu_s(run, ("client/",)))
    if not rows:
        raise SystemExit("--fit-cpu: no run with the client's CPU (its marks, or an engine window without its start-up)")
    (per_request, per_token), *_ = np.linalg.lstsq(np.array(rows, float), np.array(cpu), rcond=None)
    return {"per_request_s": float(per_request), "per_token_s": float(per_token), "runs": len(cpu)}


def intake_waits(costs: Any, cpu: dict[str, float], client: dict[str, float] | None,
                 waits: dict[str, Any], render_split: bool = False) -> Any:
    """The costs with the intake's measured wake-ups (vllm_serve_intake_waits.py's one-at-a-time means, the closed1
    completions runs of `waits`): the renderer worker's start after the loop's submit (`render_start_wait_s`: its
    wake-up on the executor's queue) and the loop's resuming the request after the render's end
    (`render_resume_wait_s`: its wake-up on `call_soon_threadsafe`), and from the client's send to the loop's read of
    the request, the time the loop idles beyond the client's own work before the send (`read_wait_s`: the bytes over
    loopback, the loop's wake-up on epoll). With `render_split` also the renderer thread's measured CPU per request
    (`render_request_s` beyond `prompt_token_s` x 128, the campaign's prompts), taken out of the loop's `request_s`
    (the fitted CPU per request less it): a diagnostic, not the model (it fails a judged figure:
    docs/benchmark-history/2026-11-30h-serve15.md)."""
    one = waits["loads"]["closed1-completions"]
    client_s = client["request_s"] if client else 0.0
    costs = replace(costs, render_start_wait_s=one["render_to_start"] / 1e3,
                    render_resume_wait_s=one["render_to_resume"] / 1e3,
                    read_wait_s=max(0.0, one["A_send_to_read"]["idle"] / 1e3 - client_s))
    if render_split:
        render_s = one["render_cpu"] / 1e3
        costs = replace(costs, request_s=cpu["per_request_s"] - render_s,
                        render_request_s=render_s - costs.prompt_token_s * 128)
    return costs


def busy_hop_s(stages: dict[str, Any]) -> dict[str, Any]:
    """The input hop's extra reaching a busy engine core (`busy_engine_hop_s`) from vllm_serve_stages.py's runs: per
    session, the mean ZMQ transport of the rate20 requests sent while the engine core was in a step
    (`measured_input_hop_ms.transport_in_step`) less that of its closed1 runs (one request at a time, the engine
    idle: the hop `latency_s` holds); the sessions' mean (those with the stamps, without perf: its CPU slows them)."""
    per_session: dict[int, dict[str, list[float]]] = {}
    for run in stages["runs"].values():
        hop = run.get("measured_input_hop_ms") or {}
        key = "transport_in_step" if run["load"] == "rate20" else "transport"
        if key in hop:
            per_session.setdefault(run["session"], {}).setdefault(run["load"], []).append(hop[key])
    extra = {k: statistics.mean(v["rate20"]) - statistics.mean(v["closed1"]) for k, v in sorted(per_session.items())
             if v.get("rate20") and v.get("closed1")}
    if not extra:
        raise SystemExit("--busy-hop: no session with both rate20 and closed1 runs' input hop stamps")
    return {"busy_engine_hop_s": statistics.mean(extra.values()) / 1e3,
            "per_session_ms": {f"s{k}": round(v, 4) for k, v in extra.items()}}


def with_client(costs: Any, client: dict[str, float] | None) -> Any:
    """The API-server costs with the client's work added, where the client ran on the API server's cores (as
    vllm_serve_bench.py pins it and the profile says, `host.client_shares_api_server_cores`): its work before each
    request's send (`client_request_s`: the client's own thread) and on each streamed chunk after it
    (`client_output_token_s`: beside the API server's output work, one core's work served in the same order)."""
    if not client:
        return costs
    return replace(costs, client_request_s=client["request_s"], client_output_token_s=client["output_token_s"])


def client_before_send_fraction(split_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The share of `vllm bench serve`'s CPU per request that runs before the request's send, as
    `vllm_serve_bench.py --client-split` measured it (`bench_client_split.py`) on the campaign's loads (bursts of 100,
    20/s) of `split_runs`, the mean over the runs: before = the request's callbacks before its send + `benchmark`'s own
    task (the `get_request` loop, `create_task`); after = its callbacks after the send + the loop's other callbacks and
    its time outside them (`select`: driven by the reads), less the probe's own cost (`probe_ns_per_callback` per
    callback, which runs mostly between one callback's end stamp and the next one's start)."""
    runs = [r for r in split_runs if r["load"] in ("burst100", "rate20") and "summary" in r.get("client_split", {})
            and r["client_split"].get("probed", True)]
    if not runs:
        raise SystemExit("--client-split: no burst100 / rate20 run with a client_split summary")
    fractions, before, after = [], [], []
    for run in runs:
        r = run["client_split"]["summary"]
        probe_ms = run["client_split"].get("probe_ns_per_callback", 0.0) / 1e6 * r["callbacks"] / r["requests"]
        b = r["before_send_ms_per_request"] + r["main_task_ms_per_request"]
        a = (r["after_send_ms_per_request"] + r["other_callbacks_ms_per_request"]
             + r["outside_callbacks_ms_per_request"] - probe_ms)
        fractions.append(b / (a + b))
        before.append(b)
        after.append(a)
    return {"before_send_fraction": statistics.mean(fractions), "before_send_ms": statistics.mean(before),
            "after_send_ms": statistics.mean(after), "runs": len(runs)}


def placed_client(client_cpu: dict[str, float], fraction: float, tokens_per_request: float) -> dict[str, float]:
    """The client's CPU per request as the host's accounting has it (`client_cpu_fit`: per request + per token, at
    `tokens_per_request` streamed tokens), placed by the measured split: `fraction` of it before the send
    (`request_s`), the rest after it, per streamed token (`output_token_s`)."""
    total = client_cpu["per_request_s"] + tokens_per_request * client_cpu["per_token_s"]
    return {"request_s": fraction * total, "output_token_s": (1.0 - fraction) * total / tokens_per_request}


# How much slower than the reference host (roofline.sim.api_server.REFERENCE_HOST) this host runs the API server's
# Python: every reference cost is multiplied by the factor, i.e. host.single_thread_speed_relative = 1 / factor.
HOST_SCALES = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0)


def fit_host_scale(index: dict[str, Any], hardware: str, cells: set[str]) -> tuple[float, Any]:
    """The factor of HOST_SCALES (the reference costs, all scaled alike) minimizing the mean |error| of METRICS
    over the runs of `cells`, and its costs."""
    from roofline.sim.api_server import ApiServerCosts

    names = {run["name"] for run in index["runs"] if cell_of(run) in cells}
    best = None
    for factor in HOST_SCALES:
        costs = ApiServerCosts().scaled(factor)
        rows = summarize(index, simulate_all(index, hardware, costs, names))
        score = statistics.mean(abs(row[m]["error_pct"]) for row in rows for m in METRICS)
        if best is None or score < best[0]:
            best = (score, factor, costs)
        print(f"fit: API-server costs x {factor} -> {score:.1f} %", file=sys.stderr, flush=True)
    assert best is not None
    return best[1], best[2]


def report(before: dict[str, Any], after: dict[str, Any]) -> str:
    lines = ["| cell | repeats | metric | measured (median) | spread % | before | error % | after | error % |",
             "|---|---|---|---|---|---|---|---|---|"]
    b_rows = {row["cell"]: row for row in before["rows"]}
    for row in after["rows"]:
        b = b_rows.get(row["cell"])
        for metric in METRICS:
            m = row[metric]
            bb = b[metric] if b else None
            lines.append(f"| {row['cell']} | {row['repeats']} | {metric} | {m['measured']:.2f} | "
                         f"{m['spread_pct']:.1f} | " + (f"{bb['predicted']:.2f} | {bb['error_pct']:+.1f} | "
                                                        if bb else "- | - | ")
                         + f"{m['predicted']:.2f} | {m['error_pct']:+.1f} |")
    return "\n".join(lines)


def install_event_loop(parser: argparse.ArgumentParser, fractions: str, accept_gap_ms: float,
                       client_request_s: float = 0.0, io_at_poll: bool = False) -> None:
    """The simulator's API server replaced by api_server_phases.EventLoopApiServer (the experiment)."""
    import functools

    from api_server_phases import EventLoopApiServer

    import roofline.sim.simulator as simulator

    try:
        phases = tuple(float(f) for f in fractions.split(","))
    except ValueError:
        parser.error(f"--event-loop: comma-separated fractions, got {fractions!r}")
    simulator.ApiServer = functools.partial(  # type: ignore[misc]
        EventLoopApiServer, phases=phases, accept_gap_s=accept_gap_ms / 1e3, client_request_s=client_request_s,
        io_at_poll=io_at_poll)


def existing_file(text: str) -> Path:
    """An input file argument: refused in one line (argparse's usage error, exit 2) if it is not a file."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return path


def merged_index(parser: argparse.ArgumentParser, paths: list[Path]) -> dict[str, Any]:
    """The runs of `paths` in one index (the first's settings); indexes whose server flags, model or cores differ
    are refused."""
    indexes = [json.loads(path.read_text()) for path in paths]
    first = indexes[0]
    for path, index in zip(paths[1:], indexes[1:]):
        for key in ("server_flags", "model_config", "api_cores", "engine_cores"):
            if index.get(key) != first.get(key):
                parser.error(f"--runs: {path} has another {key} than {paths[0]}")
    return {**first, "runs": [run for index in indexes for run in index["runs"]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=existing_file, nargs="+",
                        help="the index vllm_serve_bench.py wrote; more than one: their runs together (the same "
                             "server flags, model and pinning), e.g. one session's one-process runs and another's "
                             "two-process ones")
    parser.add_argument("--hardware", help="hardware profile (a cpu profile; with host: for the API server)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--fit", default=None, metavar="CELLS",
                        help="comma-separated cell suffixes to fit the completions terms on, e.g. completions-a1")
    parser.add_argument("--fit-chat", default=None, metavar="CELLS",
                        help="comma-separated cell suffixes to fit the chat terms on, e.g. chat-a1")
    parser.add_argument("--fit-cpu", default=None, metavar="CELLS",
                        help="comma-separated cell patterns of the completions endpoint (e.g. 'burst100-completions-a1,"
                             "rate20-completions-a1'): the API server's costs from their CPU accounting and timing")
    parser.add_argument("--fit-cpu-chat", default=None, metavar="CELLS",
                        help="the chat endpoint's cells for its extra costs, with --fit-cpu")
    parser.add_argument("--fit-runs", nargs="*", type=existing_file, default=[], metavar="INDEX",
                        help="indexes of vllm_serve_bench.py runs used in the --fit-cpu fit only, never judged "
                             "(runs-split.json: bursts of one output token, one request at a time)")
    parser.add_argument("--client-split", nargs="+", type=existing_file, default=None, metavar="INDEX",
                        help="with --fit-cpu: the client's CPU per request (its accounting, client_cpu_fit) placed "
                             "before each send and per streamed token after it by the split vllm_serve_bench.py "
                             "--client-split measured (these indexes; client_before_send_fraction) instead of all its "
                             "per-request work before the send")
    parser.add_argument("--client-costs", type=existing_file, default=None, metavar="JSON",
                        help="an --out file of a --fit-cpu fit: its client_costs_s (the client's CPU per request and "
                             "per streamed token, on the API server's cores) added to the API server's costs")
    parser.add_argument("--costs", type=existing_file, default=None, metavar="JSON",
                        help="an --out file of a --fit-cpu fit: its API-server costs and client_costs_s as they are, "
                             "nothing fitted (every cell of --runs judged out of sample, e.g. new server sessions)")
    parser.add_argument("--floor", type=existing_file, nargs="+", default=None, metavar="JSON",
                        help="an --out file whose cells' spreads (its repeats') are also taken as each cell's noise "
                             "floor: a second count, summary_floor (e.g. the campaign's floor on new runs); more "
                             "files: one more count each, summary_floors (file -> count)")
    parser.add_argument("--engine-step", type=existing_file, default=None, metavar="JSON",
                        help="with --fit-cpu: engine_step_s (and with its --step-kinds engine_admit_step_s) as "
                             "served_step_overhead.py measured it (its --out file) instead of fitting it by timing")
    parser.add_argument("--hops", type=existing_file, default=None, metavar="INDEX",
                        help="with --fit-cpu: latency_s and output_latency_s from a vllm_serve_bench.py --timeline "
                             "index (its closed1 runs' hop to the engine core, its rate20 runs' outputs' hand-off) "
                             "instead of fitting latency_s by timing")
    parser.add_argument("--chat-split", type=existing_file, default=None, metavar="JSON",
                        help="with --fit-cpu: the chat endpoint's extra CPU per request split at the hand-off to the "
                             "engine core as vllm_serve_chat_split.py measured it one request at a time (its --out "
                             "file): chat_request_s before it, chat_first_output_s at the request's first output")
    parser.add_argument("--intake-waits", type=existing_file, default=None, metavar="JSON",
                        help="with --fit-cpu: the intake's wake-ups (read_wait_s, render_start_wait_s, "
                             "render_resume_wait_s) as vllm_serve_intake_waits.py measured them one request at a time "
                             "(its --out file: the closed1 completions runs)")
    parser.add_argument("--busy-hop", type=existing_file, default=None, metavar="JSON",
                        help="with --fit-cpu: the input hop's extra reaching a busy engine core (busy_engine_hop_s) "
                             "as vllm_serve_stages.py measured it (its --out file: the transport of requests sent "
                             "during a step at 20/s less one at a time, per session)")
    parser.add_argument("--render-split", action="store_true",
                        help="with --intake-waits: also the renderer thread's measured CPU per request taken out of "
                             "the loop's (render_request_s; a diagnostic, not the model)")
    parser.add_argument("--fit-host-scale", default=None, metavar="CELLS",
                        help="comma-separated cell patterns (e.g. 'burst100-*-a1,rate20-*-a1') to fit one factor on "
                             "that scales every reference API-server cost (this host's speed, HOST_SCALES)")
    parser.add_argument("--refill-after-other-us", type=float, default=None, metavar="US",
                        help="the host's api_server_refill_after_other_us for every run (the turns of an API-server "
                             "process after another's on the shared core; default: the profile's)")
    parser.add_argument("--no-accept-per-turn", action="store_true",
                        help="connections read as their bytes arrive, not accepted one a turn of each API-server "
                             "process's loop (SimulationOptions.api_server_accept_per_turn False; a sensitivity)")
    parser.add_argument("--report", nargs=2, type=existing_file, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--reference-traces", nargs="*", type=existing_file, default=[],
                        help="in-process step traces of the same model and core (roofline measure --engine vllm): "
                             "the served engine's decode steps are compared with theirs")
    parser.add_argument("--input-phases", default=None, metavar="F1,F2,...",
                        help="experiment (api_server_phases.py): the API server's input work in phases of these "
                             "fractions, round robin between the requests being taken in, instead of first come first "
                             "served")
    parser.add_argument("--reach-phase", type=int, default=None, metavar="K",
                        help="with --input-phases: the request reaches the engine core after K phases (default: all)")
    parser.add_argument("--output-in-round", action="store_true",
                        help="with --input-phases: each output pass takes its turn in the round (the output handler "
                             "as one more task of the loop) instead of preempting the input work")
    parser.add_argument("--event-loop", default=None, metavar="F1,F2,...",
                        help="experiment (api_server_phases.py EventLoopApiServer): the API server as an asyncio ready "
                             "queue in rounds, each request's input work a chain of phases of these fractions, the "
                             "output handler's passes in the same queue")
    parser.add_argument("--accept-gap-ms", type=float, default=0.0, metavar="MS",
                        help="with --event-loop: the connections reach the server at most one per MS after their sends")
    parser.add_argument("--client-outside-loop", action="store_true",
                        help="with --event-loop: the client's work per request (client_costs_s) spaces the connections "
                             "instead of queueing in the API server's loop")
    parser.add_argument("--io-at-poll", action="store_true",
                        help="with --event-loop: each request's first phase (accept, read) runs at the loop's poll, "
                             "before the round (uvloop's poll phase), instead of in the queue")
    parser.add_argument("--stream-steps", type=float, default=None, metavar="FRACTION",
                        help="experiment (stream_steps.py StreamStepApiServer): each step's output work as the output "
                             "handler's turn (output_pass_s + FRACTION of output_token_s per output) and then the "
                             "requests' stream steps' turn, first come first served with the input work on the loop")
    parser.add_argument("--stream-input-steps", type=int, default=1, metavar="K",
                        help="with --stream-steps: each of a request's loop parts in K steps, each queued at the back")
    parser.add_argument("--stream-handoff-after", action="store_true",
                        help="with --stream-steps (a diagnostic): the outputs' hand-off delay (output_latency_s) after "
                             "the streams' turn, as the model has it, instead of before the handler's")
    parser.add_argument("--stream-preemptive", action="store_true",
                        help="with --stream-steps (a diagnostic): the output work before the input work (OUTPUTS), "
                             "as the model has it, instead of first come first served with it")
    args = parser.parse_args()
    if args.client_split and not args.fit_cpu:
        parser.error("--client-split: only with --fit-cpu")
    if args.intake_waits and not args.fit_cpu:
        parser.error("--intake-waits: only with --fit-cpu")
    if args.busy_hop and not args.fit_cpu:
        parser.error("--busy-hop: only with --fit-cpu")
    if args.chat_split and not args.fit_cpu:
        parser.error("--chat-split: only with --fit-cpu")
    if args.render_split and not args.intake_waits:
        parser.error("--render-split: only with --intake-waits")
    if args.costs and (args.fit_cpu or args.fit or args.fit_chat or args.fit_host_scale or args.client_costs):
        parser.error("--costs: not with --fit-cpu, --fit, --fit-chat, --fit-host-scale or --client-costs (it fits nothing)")
    if (args.client_outside_loop or args.io_at_poll) and args.event_loop is None:
        parser.error("--client-outside-loop, --io-at-poll: only with --event-loop")
    if args.event_loop is not None:
        install_event_loop(parser, args.event_loop, args.accept_gap_ms, io_at_poll=args.io_at_poll)
    elif args.accept_gap_ms:
        parser.error("--accept-gap-ms: only with --event-loop")
    if args.stream_steps is not None and not 0.0 <= args.stream_steps <= 1.0:
        parser.error(f"--stream-steps: a fraction from 0 to 1, got {args.stream_steps}")
    if args.stream_input_steps < 1:
        parser.error(f"--stream-input-steps: a positive integer, got {args.stream_input_steps}")
    if args.stream_steps is not None:
        import functools

        from stream_steps import StreamStepApiServer

        import roofline.sim.simulator as simulator

        simulator.ApiServer = functools.partial(  # type: ignore[misc]
            StreamStepApiServer, handler_token_fraction=args.stream_steps, input_steps=args.stream_input_steps,
            handoff_after=args.stream_handoff_after, preemptive=args.stream_preemptive)
    elif args.stream_input_steps != 1 or args.stream_handoff_after or args.stream_preemptive:
        parser.error("--stream-input-steps, --stream-handoff-after, --stream-preemptive: only with --stream-steps")
    if args.input_phases is not None:
        import functools

        from api_server_phases import PhasedApiServer

        import roofline.sim.simulator as simulator

        try:
            phases = tuple(float(f) for f in args.input_phases.split(","))
        except ValueError:
            parser.error(f"--input-phases: comma-separated fractions, got {args.input_phases!r}")
        simulator.ApiServer = functools.partial(  # type: ignore[misc]
            PhasedApiServer, phases=phases, reach_phase=args.reach_phase or len(phases),
            output_in_round=args.output_in_round)
    elif args.reach_phase is not None or args.output_in_round:
        parser.error("--reach-phase, --output-in-round: only with --input-phases")
    if args.refill_after_other_us is not None:
        if not 0 <= args.refill_after_other_us <= 1e5:
            parser.error(f"--refill-after-other-us: microseconds in [0, 100000], got {args.refill_after_other_us}")
        global REFILL_AFTER_OTHER_S
        REFILL_AFTER_OTHER_S = args.refill_after_other_us * 1e-6
    if args.no_accept_per_turn:
        global ACCEPT_PER_TURN
        ACCEPT_PER_TURN = False
    if args.report:
        print(report(json.loads(args.report[0].read_text()), json.loads(args.report[1].read_text())))
        return 0
    index = merged_index(parser, args.runs)
    costs = None
    record: dict[str, Any] = {"hardware": args.hardware}
    if args.refill_after_other_us is not None:
        record["refill_after_other_us"] = args.refill_after_other_us
    fitted_on: list[str] = []
    client = json.loads(args.client_costs.read_text())["client_costs_s"] if args.client_costs else None
    if args.costs:
        # A fitted model as it is: the API server's costs (reference-host seconds) and the client's (this host's).
        from roofline.sim.api_server import ApiServerCosts

        fitted = json.loads(args.costs.read_text())
        if "costs" not in fitted:
            parser.error(f"--costs: {args.costs} has no costs (an --out file of a --fit-cpu fit)")
        costs = ApiServerCosts(**fitted["costs"])
        client = fitted.get("client_costs_s")
        record["costs_from"] = str(args.costs)
    if args.fit_cpu:
        # The API server's CPU per request, per streamed token, per engine step and the chat endpoint's per request
        # from the CPU accounting of the fit cells and the fit runs (--fit-runs: the same bursts with one output
        # token tell per-request from per-token work), all but tokenization taken as serial input work; the
        # client's CPU likewise, added where it shares the API server's core; then the rest of a request's time
        # outside the engine (latency_s) and the served engine core's own work per step (engine_step_s) by timing,
        # on the fit cells and the fit runs' one-at-a-time loads (closed1).
        from roofline.sim.api_server import ApiServerCosts

        def pick(patterns: str, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [r for r in runs if any(fnmatch.fnmatch(cell_of(r), p) for p in patterns.split(",") if p)]

        split = [run for path in args.fit_runs for run in json.loads(path.read_text())["runs"]
                 if run["api_server_count"] == 1 and "excluded" not in run]
        fit_runs = pick(f"{args.fit_cpu},{args.fit_cpu_chat or ''}", index["runs"])
        fit_cells = {cell_of(r) for r in fit_runs}
        cpu = api_cpu_fit(fit_runs + split)
        client_cpu = client_cpu_fit(fit_runs + split)
        base = ApiServerCosts()
        prompt_s = base.prompt_token_s * 128  # the campaign's prompts (tokenization: not separable here)
        costs = replace(base, request_s=cpu["per_request_s"] - prompt_s, output_token_s=max(0.0, cpu["per_token_s"]),
                        output_pass_s=max(0.0, cpu["per_step_s"]), chat_request_s=max(0.0, cpu["chat_per_request_s"]),
                        chat_output_token_s=0.0)
        if args.chat_split:
            # The chat endpoint's extra per request placed where vLLM runs it (measured one at a time: before the
            # hand-off, the rest at its first output). Its extra per streamed token is not resolved (measured: within
            # the noise, one at a time and in bursts of 1, 32 and 128 tokens), so chat_output_token_s stays 0; the
            # accounting's line with a chat term per token is kept beside as a diagnostic.
            placement = chat_before_handoff_fraction(json.loads(args.chat_split.read_text()))
            chat_s = max(0.0, cpu["chat_per_request_s"])
            costs = replace(costs, chat_request_s=chat_s * placement["before_handoff_fraction"],
                            chat_first_output_s=chat_s * (1.0 - placement["before_handoff_fraction"]))
            record["chat_split"] = {"file": str(args.chat_split), **placement,
                                    "api_cpu_with_chat_per_token": api_cpu_fit(fit_runs + split, chat_per_token=True)}
        client = {"request_s": client_cpu["per_request_s"], "output_token_s": client_cpu["per_token_s"]}
        record["api_cpu"], record["client_cpu"] = cpu, client_cpu
        if args.client_split:
            # Where the client's CPU falls, measured (its before-send work delays the intake, its per-chunk work the
            # output path): the accounting's per-request work is not all before the send.
            split_runs = [run for path in args.client_split for run in json.loads(path.read_text())["runs"]]
            placement = client_before_send_fraction(split_runs)
            tokens = statistics.mean(statistics.mean(r["result"]["output_lens"]) for r in fit_runs)
            client = placed_client(client_cpu, placement["before_send_fraction"], tokens)
            record["client_split"] = {**placement, "tokens_per_request": tokens, **client}
        # Timing: latency_s and engine_step_s on the fit cells and the closed loops of the fit runs together (the
        # servers' iteration logs bound engine_step_s: the time per step outside the Worker's forward pass,
        # `step_gap_rows`, 1.9-3.0 ms on these cells, schedule() and update_from_output() included; at one request
        # at a time the CPU work above already spans the measured time outside the engine, so latency_s from 0).
        timing = {**index, "runs": fit_runs + [dict(r, name=f"split-{r['name']}") for r in split
                                               if r["load"] == "closed1"]}
        grid: dict[str, tuple[float, ...]] = {}
        if args.hops:
            # Measured (vllm_serve_bench.py --timeline, vllm_timeline.py): the request's hop to the engine core where
            # nothing else waits (one request at a time: closed1, the engine idle at its arrival) and the outputs'
            # hand-off to the API server's output handler at the steady load (rate20); the means of the runs' means.
            traced = [r for r in json.loads(args.hops.read_text())["runs"] if "timeline" in r]
            hop_in = [r["timeline"]["engine_to_queued_ms"]["mean"] for r in traced if r["load"] == "closed1"]
            hop_out = [r["timeline"]["output_handoff_ms"]["mean"] for r in traced if r["load"] == "rate20"]
            costs = replace(costs, latency_s=statistics.mean(hop_in) / 1e3,
                            output_latency_s=statistics.mean(hop_out) / 1e3)
            record["hops"] = {"index": str(args.hops), "closed1_engine_to_queued_ms": hop_in,
                              "rate20_output_handoff_ms": hop_out}
        else:
            grid["latency_s"] = (0.0, 1e-3, 2e-3, 3e-3, 4e-3)
        if args.intake_waits:
            costs = intake_waits(costs, cpu, client, json.loads(args.intake_waits.read_text()), args.render_split)
            record["intake_waits"] = str(args.intake_waits)
        if args.busy_hop:
            busy = busy_hop_s(json.loads(args.busy_hop.read_text()))
            costs = replace(costs, busy_engine_hop_s=busy["busy_engine_hop_s"])
            record["busy_hop"] = {"stages": str(args.busy_hop), **busy}
        if args.engine_step:
            # Measured instead (served_step_overhead.py: served steps against in-process steps of the same shape).
            served_step = json.loads(args.engine_step.read_text())
            costs = replace(costs, engine_step_s=served_step["engine_step_s"])
            if "engine_admit_step_s" in served_step:  # --step-kinds: the work of a step that admits new requests
                costs = replace(costs, engine_admit_step_s=served_step["engine_admit_step_s"])
            record["engine_step"] = str(args.engine_step)
        else:
            grid["engine_step_s"] = (1e-3, 1.5e-3, 2e-3, 2.5e-3, 3e-3)
        if grid:
            costs = fit(timing, args.hardware, {cell_of(r) for r in timing["runs"]}, grid, costs, client)
        fitted_on += sorted(fit_cells)
        record["fit_runs"] = [str(path) for path in args.fit_runs]
    if args.fit_host_scale:
        cells = {cell_of(r) for r in index["runs"]
                 if any(fnmatch.fnmatch(cell_of(r), p) for p in args.fit_host_scale.split(","))}
        factor, costs = fit_host_scale(index, args.hardware, cells)
        fitted_on += sorted(cells)
        record["host_scale"] = factor
    for flag, grid in ((args.fit, GRID), (args.fit_chat, CHAT_GRID)):
        if flag:
            # A pattern names cells by suffix ("completions-a1") or shell pattern ("burst100-*-a1").
            cells = {cell_of(r) for r in index["runs"]
                     if any(cell_of(r).endswith(p) or fnmatch.fnmatch(cell_of(r), p) for p in flag.split(","))}
            costs = fit(index, args.hardware, cells, grid, costs)
            fitted_on += sorted(cells)
    if costs is not None:
        record.update(fitted_on=fitted_on, costs={k: getattr(costs, k) for k in costs.__dataclass_fields__})
    if client is not None:
        record["client_costs_s"] = client
    if args.client_outside_loop and client:
        install_event_loop(parser, args.event_loop, args.accept_gap_ms, client["request_s"], args.io_at_poll)
    predicted = simulate_all(index, args.hardware, costs, client=client)
    record.update(predicted=predicted, rows=summarize(index, predicted), cpu_rows=cpu_rows(index),
                  ttft_rows=ttft_rows(index), step_gap_rows=step_gap_rows(index))
    if args.reference_traces:
        record["served_steps"] = served_step_rows(index, decode_step_ms(args.reference_traces))
    record["summary"] = judge_summary(record["rows"], set(fitted_on))
    for i, path in enumerate(args.floor or []):
        floor = spreads(json.loads(path.read_text())["rows"])
        missing = sorted({row["cell"] for row in record["rows"]} - set(floor))
        if missing:
            parser.error(f"--floor: {path} has no cell {', '.join(missing)}")
        summary = judge_summary(record["rows"], set(fitted_on), floor)
        if i == 0:
            record["floor_from"], record["summary_floor"] = str(path), summary
        else:
            record.setdefault("summary_floors", {})[str(path)] = summary
        print(f"with {path.name}'s spreads:", "; ".join(f"{k}: {v}" for k, v in summary.items()))
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for key, value in record["summary"].items():
        print(f"{key}: {value}")
    for row in record["rows"]:
        print(row["cell"], " ".join(f"{m} {row[m]['measured']:.1f}/{row[m]['predicted']:.1f} "
                                    f"({row[m]['error_pct']:+.1f}%, spread {row[m]['spread_pct']:.1f}%)"
                                    for m in METRICS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
