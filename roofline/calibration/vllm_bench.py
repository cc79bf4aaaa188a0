"""A saved `vllm bench serve` result against the simulator's prediction of the same run, metric by metric.

    record = read_vllm_result(Path("vllm-8.0qps-Llama-3.1-8B-20250101-120000.json"))
    replay = replay_from_result(record)                            # what the file says about the load
    load = bench_load_from_args(args, replay.lengths, replay.due_s, replay.settings)   # flags fill the rest
    comparison = compare_with_result(record, deployment, load, measured_metric_options(record, goodput_ms),
                                     SimulationOptions(max_concurrency=load.max_concurrency), replay, model, hw)
    print(format_comparison(comparison))

What a result file (vLLM 0.32.0, `--save-result`) records and what this takes from it:
- the load: `num_prompts`, `request_rate`, `burstiness`, `max_concurrency`, `ramp_up_*`;
- with `--save-detailed`: `input_lens` and `output_lens` (replayed exactly, the random dataset's prompts plus the
  special tokens the server adds), and `start_times` with `queue_times` and `latencies` (the send schedule,
  replayed exactly: due time = start - client queue time - benchmark start, the start being the last completion
  minus `duration`);
- the metrics: every count, throughput and `mean_/median_/std_/p*_` latency key it holds, which also tells the
  `--percentile-metrics` and `--metric-percentiles` of the run.
vLLM does not record the dataset and its lengths (only in the lists above), the seed, the goodput SLOs, the
server's engine flags, the GPU or `--ignore-eos`: the flags give them, and `not_found` lists each one taken from a
default. Predicted and measured are printed with the relative error predicted / measured - 1.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from roofline.errors import UserError
from roofline.sim.bench_client import BenchLoad
from roofline.sim.bench_metrics import BenchMetricOptions, bench_metrics, unmodelled
from roofline.sim.deployment import Deployment
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.time_split import time_split, time_split_line
from roofline.sim.verdict import load_verdict

_STAT_KEY = re.compile(r"^(mean|median|std|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el|client_queue_time|"
                       r"e2el_including_client_queue)_ms$")
COUNT_KEYS = ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
              "request_goodput", "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
              "max_concurrent_requests")
LOAD_KEYS = ("num_prompts", "request_rate", "burstiness", "max_concurrency", "ramp_up_strategy", "ramp_up_start_rps",
             "ramp_up_end_rps")


# The V1 engine, which the simulator describes (its scheduler is engine.core's, vLLM 0.32's), is vLLM's default
# from 0.8.0 (release notes: "V1 engine enabled by default"; VLLM_USE_V1=0 still selected V0 until 0.10 removed it).
FIRST_V1_VERSION = (0, 8)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?(?:[.+-].*)?$")


def check_vllm_version(record: dict[str, Any], flag: str | None) -> str | None:
    """The vLLM release of the run (`--vllm-version`, else a `vllm_version` or `version` key of the file, which
    `vllm bench serve --metadata` can add; vLLM itself records none); `UserError` for one before the V1 engine."""
    where, text = "--vllm-version", flag
    if text is None:
        for key in ("vllm_version", "version"):
            if isinstance(record.get(key), str):
                where, text = f"--vllm-bench: the file's {key}", record[key]
                break
    if text is None:
        return None
    match = _VERSION.match(text.strip())
    if match is None:
        raise UserError(f"{where}: {text!r} is not a vLLM version; give one such as 0.11.0")
    if (int(match.group(1)), int(match.group(2))) < FIRST_V1_VERSION:
        raise UserError(f"{where}: vLLM {text} ran the V0 engine (V1 is the default from 0.8.0); the simulator "
                        f"describes V1, so this result is not compared")
    return text.strip()


def endpoint_of(record: dict[str, Any]) -> str:
    """The endpoint a result's client called, from its `backend` (or older `endpoint_type`): the chat backends
    ("openai-chat", ...) call /v1/chat/completions, the others /v1/completions."""
    backend = record.get("backend", record.get("endpoint_type"))
    return "chat" if isinstance(backend, str) and "chat" in backend else "completions"


def read_vllm_result(path: Path, index: int | None = None) -> dict[str, Any]:
    """One result of a `vllm bench serve --save-result` file (`--append-result` files hold one per line)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"--vllm-bench: no such file '{path}'") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--vllm-bench: cannot read '{path}': {exc}") from None
    try:
        records = [json.loads(text)]
    except json.JSONDecodeError:
        try:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise UserError(f"--vllm-bench: '{path}' is not JSON: {exc}") from None
    if not records:
        raise UserError(f"--vllm-bench: '{path}' holds no result (an empty file); give a file vllm bench serve "
                        f"--save-result wrote")
    if index is None and len(records) > 1:
        raise UserError(f"--vllm-bench: '{path}' holds {len(records)} results (--append-result); choose one with "
                        f"--result-index 0..{len(records) - 1}")
    index = index or 0
    if not 0 <= index < len(records):
        raise UserError(f"--result-index: must be in 0..{len(records) - 1}, got {index}")
    record = records[index]
    if not isinstance(record, dict) or "duration" not in record or "completed" not in record:
        raise UserError(f"--vllm-bench: '{path}' is not a vllm bench serve result (no 'duration' and 'completed')")
    check_record(record, f"--vllm-bench: '{path}'")
    return record


# The largest count or length a result can hold and still describe a run (`roofline.sim.workload`'s bounds).
_MAX_TOKENS = 10_000_000
_MAX_COUNT = 100_000_000


def check_record(record: dict[str, Any], where: str) -> None:
    """The load and per-request fields of a result, each a value vLLM could have written: a bad one names the
    file's key (not the flag it would fill) and what is allowed."""
    def bad(key: str, allowed: str) -> UserError:
        return UserError(f"{where}: key '{key}': {record[key]!r} is not allowed; allowed: {allowed}")

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    def is_num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    for key in ("num_prompts", "completed"):
        if record.get(key) is not None and not (is_int(record[key]) and 0 <= record[key] <= _MAX_COUNT):
            raise bad(key, f"an integer from 0 to {_MAX_COUNT:,}")
    if record.get("max_concurrency") is not None and not (is_int(record["max_concurrency"])
                                                           and 1 <= record["max_concurrency"] <= _MAX_COUNT):
        raise bad("max_concurrency", f"null or an integer from 1 to {_MAX_COUNT:,}")
    rate = record.get("request_rate")
    if rate is not None and not ((is_num(rate) and rate > 0 and not math.isnan(rate))
                                 or (isinstance(rate, str) and rate.strip().lower() in ("inf", "infinity"))):
        raise bad("request_rate", "a positive number or inf")
    for key in ("duration", "burstiness", "ramp_up_start_rps", "ramp_up_end_rps"):
        value = record.get(key)
        if value is not None and not (is_num(value) and math.isfinite(value)
                                      and (value > 0 if key in ("duration", "burstiness") else value >= 0)):
            raise bad(key, "a finite number " + ("> 0" if key in ("duration", "burstiness") else ">= 0"))
    if record.get("ramp_up_strategy") is not None and record["ramp_up_strategy"] not in ("linear", "exponential"):
        raise bad("ramp_up_strategy", "linear, exponential or null")
    for key, lo in (("input_lens", 0), ("output_lens", 0)):
        values = record.get(key)
        if values is None:
            continue
        if not isinstance(values, list):
            raise bad(key, f"a list of integers from {lo} to {_MAX_TOKENS:,}")
        wrong = next((i for i, v in enumerate(values) if not (is_int(v) and lo <= v <= _MAX_TOKENS)), None)
        if wrong is not None:
            raise UserError(f"{where}: key '{key}'[{wrong}]: {values[wrong]!r} is not allowed; allowed: integers "
                            f"from {lo} to {_MAX_TOKENS:,}")
    for key in ("start_times", "queue_times", "latencies", "ttfts"):
        values = record.get(key)
        if values is None:
            continue
        if not isinstance(values, list):
            raise bad(key, "a list of finite numbers of seconds")
        wrong = next((i for i, v in enumerate(values) if not (is_num(v) and math.isfinite(v))), None)
        if wrong is not None:
            raise UserError(f"{where}: key '{key}'[{wrong}]: {values[wrong]!r} is not allowed; allowed: finite "
                            f"numbers of seconds")


@dataclass(frozen=True)
class Replay:
    """What a result file says about its load."""

    settings: dict[str, Any]  # the load keys it holds (vLLM's names)
    lengths: tuple[list[int], list[int]] | None  # input_lens, output_lens of the successful requests
    due_s: list[float] | None  # their due times, from the benchmark's start
    notes: list[str]  # what was found, how it is used
    not_found: list[str]  # what the file does not hold


def replay_from_result(record: dict[str, Any]) -> Replay:
    settings = {k: record[k] for k in LOAD_KEYS if record.get(k) is not None}
    notes, not_found = [], []
    for key in ("num_prompts", "request_rate", "burstiness"):
        if key not in record:
            not_found.append(f"{key} (vLLM's default or the flag is used)")
    if "max_concurrency" not in record:
        not_found.append("max_concurrency (none: open loop, unless --max-concurrency)")
    lengths = due = None
    inputs, outputs = record.get("input_lens"), record.get("output_lens")
    if isinstance(inputs, list) and isinstance(outputs, list) and len(inputs) == len(outputs) and inputs:
        errors = record.get("errors") or [""] * len(inputs)
        ok = [i for i in range(len(inputs)) if outputs[i] and not errors[i]]
        if len(ok) < len(inputs):
            notes.append(f"{len(inputs) - len(ok)} failed requests in the file are not replayed")
        lengths = ([int(inputs[i]) for i in ok], [int(outputs[i]) for i in ok])
        settings["num_prompts"] = len(ok)
        notes.append(f"lengths: replayed from input_lens/output_lens ({len(ok)} requests)")
        due = _due_times(record, ok, notes)
    else:
        not_found.append("input_lens/output_lens (saved only with --save-detailed): lengths sampled from the dataset "
                         "flags")
    if due is None:
        not_found.append("start_times (saved only with --save-detailed): the send schedule is drawn with --seed "
                         "(vLLM does not record its seed; default 0, vLLM's default)")
    not_found += ["dataset name and lengths settings (--dataset-name, default random as in vLLM 0.32)",
                  "the server's engine flags and GPU (--hardware, --tensor-parallel-size, ...)",
                  "--ignore-eos (the simulator runs every output to its length)"]
    if record.get("request_goodput") is not None:
        not_found.append("goodput SLOs (request_goodput is in the file; pass the run's --goodput to predict it)")
    return Replay(settings, lengths, due, notes, not_found)


def _due_times(record: dict[str, Any], ok: list[int], notes: list[str]) -> list[float] | None:
    starts, queues = record.get("start_times"), record.get("queue_times")
    if not (isinstance(starts, list) and len(starts) == len(record["input_lens"])):
        return None
    queue = np.array(queues if isinstance(queues, list) and len(queues) == len(starts) else [0.0] * len(starts),
                     dtype=float)
    start = np.array(starts, dtype=float)
    due = start - queue
    latencies = record.get("latencies")
    if isinstance(latencies, list) and len(latencies) == len(starts):
        # duration runs from the benchmark's start to the last completion.
        origin = float(np.max(start + np.array(latencies, dtype=float))) - float(record["duration"])
        origin = min(origin, float(due.min()))
    else:
        origin = float(due.min())
    notes.append("send schedule: replayed from start_times - queue_times")
    return [max(0.0, float(due[i] - origin)) for i in ok]


def measured_metric_options(record: dict[str, Any], goodput_ms: dict[str, float]) -> BenchMetricOptions:
    """The --percentile-metrics and --metric-percentiles the file's keys show."""
    metrics: list[str] = []
    percentiles: list[float] = []
    for key in record:
        match = _STAT_KEY.match(key)
        if match:
            if match.group(3) not in metrics:
                metrics.append(match.group(3))
            if match.group(2) is not None and float(match.group(2)) not in percentiles:
                percentiles.append(float(match.group(2)))
    return BenchMetricOptions(tuple(metrics) or ("ttft", "tpot", "itl"), tuple(percentiles) or (99.0,), goodput_ms)


@dataclass(frozen=True)
class Comparison:
    rows: list[dict[str, Any]]  # metric, predicted, measured, rel_err
    context: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {**self.context, "metrics": self.rows}


def compare_with_result(record: dict[str, Any], deployment: Deployment, load: BenchLoad,
                        metric_options: BenchMetricOptions, options: SimulationOptions, replay: Replay,
                        model: str, hardware: str, vllm_version: str | None = None) -> Comparison:
    bench = load.build(deployment.spec)
    result = run_simulation(deployment, bench.workload, options, specs=bench.specs)
    predicted = bench_metrics(result.requests, result.itl, bench.client_input_lens, metric_options,
                              load.max_concurrency, load.request_rate)
    rows = []
    keys = [k for k in COUNT_KEYS if k in record] + [k for k in record if _STAT_KEY.match(k)]
    for key in keys:
        measured = record.get(key)
        value = predicted.get(key)
        if not isinstance(measured, (int, float)) or isinstance(measured, bool):
            continue
        rel = None
        if isinstance(value, (int, float)) and measured != 0 and math.isfinite(measured):
            rel = float(value) / float(measured) - 1
        rows.append({"metric": key, "predicted": value, "measured": measured, "rel_err": rel})
    context = {
        "vllm_result": {k: record.get(k) for k in ("date", "backend", "label", "model_id", "tokenizer_id")},
        "vllm_version": vllm_version, "endpoint": options.endpoint, "api_server_count": options.api_server_count,
        "model": model, "hardware": hardware, "gpus_per_replica": deployment.engine.tensor_parallel_size,
        "num_replicas": options.num_replicas, "engine": deployment.engine_record,
        "offered_load": load.offered_load(), "found_in_file": replay.notes + [f"{k}: {v}" for k, v in
                                                                             replay.settings.items()],
        "not_found": replay.not_found,
        "unmodelled": list(unmodelled(deployment.hw)),
        # Whether the simulated deployment keeps up with the file's load (`roofline.sim.verdict`).
        "verdict": load_verdict(result.requests, result.steps, deployment.scheduler_config.max_num_seqs,
                                deployment.scheduler_config.max_num_batched_tokens,
                                burst=False,  # (a burst is recognised from the due times)
                                max_concurrency=load.max_concurrency).as_dict(),
        # Where the simulated time goes (steps by kind, idle, the last request's first step: `roofline.sim.time_split`).
        "simulated_time": time_split(result.requests, result.steps, deployment.cache_config.block_size,
                                     options.num_replicas),
        # Requests decoding at once on average, measured and simulated (`decoding_at_once`).
        "decoding_at_once": {side: decoding_at_once(record if side == "measured" else predicted)
                             for side in ("measured", "predicted")},
    }
    return Comparison(rows, context)


def decoding_at_once(figures: dict[str, Any]) -> float | None:
    """The requests decoding together on average, by Little's law: output tok/s x mean TPOT (each decoding request
    adds one token per TPOT). Equal in a measured and a simulated run, their difference in TPOT and throughput is the
    time per step; a larger simulated one says the real server held requests back before the engine. None without
    both figures."""
    rate, tpot = figures.get("output_throughput"), figures.get("mean_tpot_ms")
    if not (isinstance(rate, (int, float)) and isinstance(tpot, (int, float))) or isinstance(rate, bool) \
            or isinstance(tpot, bool) or not (math.isfinite(rate) and math.isfinite(tpot)):
        return None
    return float(rate) * float(tpot) / 1e3


def format_comparison(comparison: Comparison) -> str:
    ctx = comparison.context
    engine = ", ".join(f"{k}={v}" for k, v in ctx["engine"].items())
    load = ", ".join(f"{k} {v}" for k, v in ctx["offered_load"].items() if v is not None)
    lines = [f"vllm bench serve result of {ctx['vllm_result']['model_id']} against {ctx['model']} on "
             f"{ctx['num_replicas']} x {ctx['gpus_per_replica']} x {ctx['hardware']} "
             f"({ctx['gpus_per_replica']} GPU{'s' * (ctx['gpus_per_replica'] > 1)} per replica)",
             f"engine: {engine}", f"offered load: {load}",
             "vLLM version: " + (ctx["vllm_version"] or "not in the file and no --vllm-version (the simulator "
                                                        "describes the V1 engine, vLLM >= 0.8)")
             + f"; endpoint: {ctx['endpoint']}; API-server processes: {ctx['api_server_count']}",
             "from the file: " + "; ".join(ctx["found_in_file"]),
             "not in the file: " + "; ".join(ctx["not_found"]),
             f"{'metric':<34}{'predicted':>14}{'measured':>14}{'rel. error':>12}"]
    for row in comparison.rows:
        rel = "-" if row["rel_err"] is None else f"{row['rel_err'] * 100:+.1f}%"
        lines.append(f"{row['metric']:<34}{_number(row['predicted']):>14}{_number(row['measured']):>14}{rel:>12}")
    lines.append("not modelled: " + "; ".join(ctx["unmodelled"]))
    lines.append(f"simulated {ctx['verdict']['text']}")
    lines.append(time_split_line(ctx["simulated_time"]))
    at_once = ctx["decoding_at_once"]
    if at_once["measured"] is not None and at_once["predicted"] is not None:
        lines.append(f"requests decoding at once (output tok/s x mean TPOT): measured {at_once['measured']:.1f}, "
                     f"simulated {at_once['predicted']:.1f}")
    return "\n".join(lines)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{float(value):.2f}"
