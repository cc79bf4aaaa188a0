"""A simulated run counted as `vllm bench serve` counts it, under its result keys, and its saved result file.

Mirrors vLLM 0.32.0's `calculate_metrics`, its printed block and the JSON of `--save-result`
(`vllm/benchmarks/serve.py`):

- every request counts (no warm-up or drain is left out); all simulated requests succeed;
- `duration`: from the benchmark's start (just before the first request is scheduled: time 0 of the
  simulation) to the last completion;
- TTFT and end-to-end latency (`e2el`) start when the client sent the request, after any wait for a
  `--max-concurrency` slot (that wait is `client_queue_time`);
- TPOT per request = (e2el - TTFT) / (output tokens - 1), averaged over requests with more than one output
  token: `engine.core.metrics.tpot_s` on the client's times (its first token at TTFT, its last at e2el, both
  from the send); ITL pools every gap between consecutive tokens of every request;
- mean, median, std (population) and percentiles as numpy computes them (`np.percentile`, linear), in ms;
  percentile keys `p{P}_{metric}_ms` with P written as vLLM writes it ('99', '99.9');
- goodput (`--goodput ttft:MS tpot:MS e2el:MS`): requests meeting every given SLO (a one-token output counts
  TPOT 0) per second of duration (`roofline.sim.metrics.meets_slos`, `rate_per_s`);
- `total_input_tokens` counts prompts as the client counted them (`input_lens`: the random dataset's prompt
  without the special tokens the server adds), `total_output_tokens` the generated tokens;
- `max_output_tokens_per_s` and `max_concurrent_requests`: the largest count of tokens, and of requests in
  flight, over 1-s buckets from the first send.

Where the profile describes its host CPU (`host:`), the API server is a stage of the simulation
(`roofline.sim.api_server`: each request's input work and each step's streamed outputs queue in its processes), so
the simulated TTFT, ITL and e2el contain it as vLLM's client measures them; otherwise only the executor's older
terms (`executor.tokenize_us_per_prompt_token`, `executor.frontend_us_per_request`), where above 0. Not modelled
(`unmodelled`): the client's own overhead and the network.

    metrics = bench_metrics(result, client_input_lens, BenchMetricOptions(goodput_ms={"ttft": 500}))
    print(format_bench_metrics(metrics, max_concurrency=32, request_rate=8.0))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.core import metrics
from roofline.cost.hardware import HardwareProfile
from roofline.errors import UserError
from roofline.sim.metrics import InterTokenLatencies, median, meets_slos, percentile, rate_per_s
from roofline.sim.table import Columns, between, column, skipna_sum
from roofline.sim.token_times import TokenTimes, WeightedValues, by_row

PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue")
DEFAULT_PERCENTILE_METRICS = ("ttft", "tpot", "itl")  # vLLM's default for generative models
DEFAULT_METRIC_PERCENTILES = (99.0,)
GOODPUT_METRICS = ("ttft", "tpot", "e2el")
# The steady state (`steady_state`, and every probe of `roofline plan`) excludes the first and the last tenth of the
# requests by arrival: at the start the system fills from empty, at the end arrivals stop and the batch drains, and
# neither is the steady state whose latency an SLO is about.
WARMUP_FRACTION = 0.10
DRAIN_FRACTION = 0.10
_HEADERS = {"ttft": ("TTFT", "Time to First Token"), "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
            "itl": ("ITL", "Inter-token Latency"), "e2el": ("E2EL", "End-to-end Latency"),
            "client_queue_time": ("Client Queue Time", "Client-side Queueing"),
            "e2el_including_client_queue": ("E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency")}
def unmodelled(hw: HardwareProfile) -> tuple[str, ...]:
    """What vLLM's client measures that the simulation leaves out, for a profile: with a `host:` section the API
    server is simulated; without, its prompt tokenization (`executor.tokenize_s_per_prompt_token`) and the rest of
    a request's time outside the engine core (`executor.frontend_s_per_request`) are in the simulated TTFT where
    they are above 0."""
    rest = ("the client's own overhead; network latency", "failed requests (every simulated request succeeds)")
    if hw.host is not None:
        return rest
    executor = hw.executor
    modelled = [name for name, value in (("executor.tokenize_us_per_prompt_token", executor.tokenize_s_per_prompt_token),
                                         ("executor.frontend_us_per_request", executor.frontend_s_per_request))
                if value > 0]
    left_out = [part for part, value in (("prompt tokenization", executor.tokenize_s_per_prompt_token),
                                         ("the request's way to the engine core and the first token's way back",
                                          executor.frontend_s_per_request)) if value == 0]
    api = ("API server: " + ", ".join([*left_out, "detokenization and HTTP streaming of each later token"])
           + " (inside vLLM's measured TTFT, ITL and E2EL; not in the simulated ones"
           + (f"; in the simulated TTFT: {', '.join(modelled)})" if modelled else ")")
           + "; the profile has no host: section")
    return (api, *rest)


@dataclass(frozen=True)
class BenchMetricOptions:
    """vLLM's `--percentile-metrics`, `--metric-percentiles` and `--goodput` (in ms)."""

    percentile_metrics: tuple[str, ...] = DEFAULT_PERCENTILE_METRICS
    percentiles: tuple[float, ...] = DEFAULT_METRIC_PERCENTILES
    goodput_ms: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.percentile_metrics:
            if name not in PERCENTILE_METRICS:
                raise UserError(f"--percentile-metrics: '{name}' is not allowed; allowed: "
                                f"{', '.join(PERCENTILE_METRICS)}")
        for p in self.percentiles:
            if not 0 <= p <= 100:
                raise UserError(f"--metric-percentiles: must be numbers in [0, 100], got {p}")
        for name, value in self.goodput_ms.items():
            if name not in GOODPUT_METRICS:
                raise UserError(f"--goodput: '{name}' is not allowed; allowed: {', '.join(GOODPUT_METRICS)}")
            if not value >= 0:
                raise UserError(f"--goodput: {name} must be >= 0 ms, got {value}")


def parse_percentile_metrics(text: str | None) -> tuple[str, ...]:
    return DEFAULT_PERCENTILE_METRICS if text is None else tuple(t.strip() for t in text.split(","))


def parse_metric_percentiles(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(t) for t in text.split(","))
    except ValueError:
        raise UserError(f"--metric-percentiles: must be comma-separated numbers such as 50,90,99; got {text!r}") from None


def parse_goodput(pairs: Sequence[str] | None) -> dict[str, float]:
    """['ttft:500', 'tpot:50'] -> {'ttft': 500.0, 'tpot': 50.0} (ms), as vLLM's parse_goodput."""
    slos: dict[str, float] = {}
    for pair in pairs or ():
        name, sep, value = pair.partition(":")
        try:
            slos[name] = float(value) if sep else float("nan")
        except ValueError:
            slos[name] = float("nan")
        if math.isnan(slos[name]):
            raise UserError(f"--goodput: '{pair}' must be KEY:MILLISECONDS with KEY one of "
                            f"{', '.join(GOODPUT_METRICS)}")
    return slos


def percentile_word(p: float) -> str:
    """How vLLM writes a percentile in a key: 99 -> '99', 99.9 -> '99.9'."""
    return str(int(p)) if int(p) == p else str(p)


def _stats(values: np.ndarray | WeightedValues, percentiles: Sequence[float],
           with_std: bool = True) -> tuple[float, float, float | None, list[float]]:
    """(mean, median, std, percentiles) in ms, as vLLM (an empty list counts as [0]); std None unless `with_std`
    (the steady state reports none: at 1,000,000 requests its ITL gaps' std was a 0.1 s `fsum` for nothing)."""
    if isinstance(values, WeightedValues) and len(values):  # a simulation's ITL gaps, pooled
        return (values.mean() * 1000, values.median() * 1000, values.std() * 1000 if with_std else None,
                [values.percentile(p) * 1000 for p in percentiles])
    if isinstance(values, WeightedValues):
        values = np.zeros(0)
    data = values if len(values) else np.zeros(1)
    return (float(np.mean(data) * 1000), float(median(data) * 1000),
            float(np.std(data) * 1000) if with_std else None, [float(percentile(data, p) * 1000) for p in percentiles])


def per_request_token_times(requests: Columns, itl: InterTokenLatencies) -> tuple[np.ndarray, np.ndarray]:
    """Every output token's time, and its request row, in request order (first token, then the ITL gaps)."""
    order = np.argsort(itl.request_index, kind="stable")
    rows = itl.request_index[order]
    gaps = itl.gap_s[order]
    first = column(requests, "first_token_s", float)
    # Cumulative gaps within each request: a running sum restarted at each request's first gap.
    cumulative = np.cumsum(gaps)
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]]) if len(rows) else np.zeros(0, dtype=np.int64)
    offset = np.zeros(len(gaps))
    if len(rows):
        before = np.r_[0.0, cumulative][starts]
        offset = np.repeat(before, np.diff(np.r_[starts, len(rows)]))
    later = first[rows] + (cumulative - offset)
    all_rows = np.concatenate([np.arange(len(first)), rows])
    all_times = np.concatenate([first, later])
    return all_times, all_rows


def bench_metrics(requests: Columns, itl: InterTokenLatencies | TokenTimes, client_input_lens: np.ndarray,
                  options: BenchMetricOptions, max_concurrency: int | None, request_rate: float,
                  detailed: bool = False, latency_lists: bool = True) -> dict[str, Any]:
    """vLLM's result keys for a finished simulation (`requests` in send order, as the simulator returns them).
    `latency_lists`: with its per-request `latencies` and `queue_times` (lists of floats, for `--save-result`; 0.13 s
    at 1,000,000 requests), else without them."""
    ttft = column(requests, "ttft_s", float)
    e2el = column(requests, "e2e_s", float)
    output_lens = column(requests, "num_output_tokens", np.int64)
    queue = column(requests, "client_queue_s", float)
    start = column(requests, "arrival_s", float)
    finish = column(requests, "finish_s", float)
    # vLLM's client: TPOT from its own TTFT and latency; a one-token output counts TPOT 0 towards goodput.
    all_tpots = np.nan_to_num(metrics.tpot_s_array(ttft, e2el, output_lens), nan=0.0)
    tpots = all_tpots[output_lens > 1]
    itls = itl.values(by_request=True) if isinstance(itl, TokenTimes) else itl.values_by_request()
    duration = float(finish.max())
    completed = len(requests)
    total_input = int(np.sum(client_input_lens))
    total_output = int(output_lens.sum())
    good = meets_slos({"ttft": ttft, "tpot": all_tpots, "e2el": e2el},
                      {name: ms / 1000 for name, ms in options.goodput_ms.items()})
    peak_tokens, peak_requests = _peaks(requests, itl, start, finish)
    result: dict[str, Any] = {
        "duration": duration,
        "completed": completed,
        "failed": 0,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": completed / duration,
        "request_goodput": rate_per_s(float(good.sum()), (0.0, duration)) if options.goodput_ms else None,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
    }
    if detailed:
        index = itl.request_index  # (the gaps by request row, as a stable argsort of the rows orders them)
        rows, gaps = by_row(index, index), by_row(itl.gap_s, index)
        bounds = np.searchsorted(rows, np.arange(completed + 1))
        result.update(input_lens=[int(v) for v in client_input_lens], output_lens=output_lens.tolist(),
                      ttfts=ttft.tolist(), itls=[gaps[bounds[i]:bounds[i + 1]].tolist() for i in range(completed)])
    if latency_lists or detailed:
        result["latencies"] = e2el.tolist()
    if detailed:
        result["start_times"] = start.tolist()
    if latency_lists or detailed:
        result["queue_times"] = queue.tolist()
    if detailed:
        result["errors"] = [""] * completed
    result.update(max_output_tokens_per_s=peak_tokens, max_concurrent_requests=peak_requests, rtfx=0.0)
    values: dict[str, np.ndarray | WeightedValues] = {"ttft": ttft, "tpot": tpots, "itl": itls, "e2el": e2el}
    if max_concurrency is not None:
        values["client_queue_time"] = queue
        if not math.isinf(request_rate):
            values["e2el_including_client_queue"] = e2el + queue
    for name in PERCENTILE_METRICS:  # vLLM's order
        if name not in options.percentile_metrics or name not in values:
            continue
        mean, median, std, pcts = _stats(values[name], options.percentiles)
        result[f"mean_{name}_ms"] = mean
        result[f"median_{name}_ms"] = median
        result[f"std_{name}_ms"] = std
        for p, value in zip(options.percentiles, pcts):
            result[f"p{percentile_word(p)}_{name}_ms"] = value
    return result


def _peaks(requests: Columns, itl: InterTokenLatencies | TokenTimes, start: np.ndarray,
           finish: np.ndarray) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s and max_concurrent_requests: 1-s buckets from the first send."""
    first_send = float(start.min())
    num_buckets = int(np.ceil(finish.max() - first_send)) + 1
    if isinstance(itl, TokenTimes):  # each step's stamp once, with the number of tokens stamped with it
        times, weights = itl.times, itl.tokens_at_stamps()
    else:
        times, weights = per_request_token_times(requests, itl)[0], None
    buckets = (times - first_send).astype(np.int64)
    counted = (buckets >= 0) & (buckets < num_buckets)
    tokens = np.bincount(buckets[counted], weights=None if weights is None else weights[counted],
                         minlength=num_buckets)
    first_second = (start - first_send).astype(np.int64)
    last_second = (finish - first_send).astype(np.int64)
    change = np.zeros(num_buckets + 1, dtype=np.int64)
    np.add.at(change, first_second, 1)
    np.add.at(change, last_second + 1, -1)
    return float(tokens.max()), int(np.cumsum(change)[:-1].max())


def format_bench_metrics(metrics: dict[str, Any], max_concurrency: int | None, request_rate: float,
                         options: BenchMetricOptions) -> str:
    """vLLM's printed result block, with the simulated numbers."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result (simulated) ", n=50, c="=")]

    def row(label: str, value: object, fmt: str = "") -> None:
        lines.append(f"{label:<40} {value:{fmt}}")

    row("Successful requests:", metrics["completed"])
    row("Failed requests:", metrics["failed"])
    if max_concurrency is not None:
        row("Maximum request concurrency:", max_concurrency)
    if not math.isinf(request_rate):
        row("Request rate configured (RPS):", request_rate, "<10.2f")
    row("Benchmark duration (s):", metrics["duration"], "<10.2f")
    row("Total input tokens:", metrics["total_input_tokens"])
    row("Total generated tokens:", metrics["total_output_tokens"])
    row("Request throughput (req/s):", metrics["request_throughput"], "<10.2f")
    if metrics["request_goodput"] is not None:
        row("Request goodput (req/s):", metrics["request_goodput"], "<10.2f")
    row("Output token throughput (tok/s):", metrics["output_throughput"], "<10.2f")
    row("Peak output token throughput (tok/s):", metrics["max_output_tokens_per_s"], "<10.2f")
    row("Peak concurrent requests:", float(metrics["max_concurrent_requests"]), "<10.2f")
    row("Total token throughput (tok/s):", metrics["total_token_throughput"], "<10.2f")
    for name in PERCENTILE_METRICS:
        if f"mean_{name}_ms" not in metrics:
            continue
        short, header = _HEADERS[name]
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        row(f"Mean {short} (ms):", metrics[f"mean_{name}_ms"], "<10.2f")
        row(f"Median {short} (ms):", metrics[f"median_{name}_ms"], "<10.2f")
        for p in options.percentiles:
            row(f"P{percentile_word(p)} {short} (ms):", metrics[f"p{percentile_word(p)}_{name}_ms"], "<10.2f")
    lines.append("=" * 50)
    return "\n".join(lines)


# ---- steady state --------------------------------------------------------------------------------------------


def steady_state(requests: Columns, itl: InterTokenLatencies | TokenTimes, steps: Columns, warmup_fraction: float,
                 drain_fraction: float, percentiles: Sequence[float]) -> dict[str, Any]:
    """Figures of the steady state, which vLLM's counting does not give: the first `warmup_fraction` and the last
    `drain_fraction` of the requests by send order left out of the latencies; throughput between the
    completions at those fractions (the definitions `roofline plan` uses)."""
    n = len(requests)
    lo, hi = int(n * warmup_fraction), n - int(n * drain_fraction)
    kept = np.zeros(n, dtype=bool)
    kept[lo:hi] = True
    done = np.sort(column(requests, "finish_s", float))
    first, last = int(n * warmup_fraction), n - 1 - int(n * drain_fraction)
    window = (float(done[first]), float(done[last])) if last > first and done[last] > done[first] else None
    out: dict[str, Any] = {
        "definition": f"requests {warmup_fraction:.0%}-{1 - drain_fraction:.0%} by send order; throughput between "
                      f"the {warmup_fraction:.0%} and {1 - drain_fraction:.0%} completions (as roofline plan)",
        "num_requests": int(kept.sum()),
        "window_s": list(window) if window else None,
    }
    if window:
        span = window[1] - window[0]
        in_window = between(column(steps, "end_s", float), window[0], window[1])
        out["request_throughput"] = (last - first) / span
        out["output_throughput"] = float(skipna_sum(column(steps, "num_output_tokens")[in_window])) / span
    n_out = column(requests, "num_output_tokens")[kept]
    ttft, e2el = column(requests, "ttft_s", float)[kept], column(requests, "e2e_s", float)[kept]
    values: dict[str, np.ndarray | WeightedValues] = {
        "ttft": ttft, "e2el": e2el, "tpot": metrics.tpot_s_array(ttft, e2el, n_out)[n_out > 1],
        "itl": itl.values(kept)}
    for name in ("ttft", "tpot", "itl", "e2el"):
        mean, median, _, pcts = _stats(values[name], percentiles, with_std=False)
        out[f"mean_{name}_ms"] = mean
        out[f"median_{name}_ms"] = median
        for p, value in zip(percentiles, pcts):
            out[f"p{percentile_word(p)}_{name}_ms"] = value
    return out


# ---- the saved result file -----------------------------------------------------------------------------------


def result_filename(label: str, request_rate: float, max_concurrency: int | None, model_id: str, date_text: str,
                    ramp_up: tuple[str, float, float] | None = None) -> str:
    """vLLM's default `--save-result` name (`compute_result_filename`)."""
    concurrency = f"-concurrency{max_concurrency}" if max_concurrency is not None else ""
    base_model_id = model_id.split("/")[-1]
    if ramp_up is not None:
        strategy, start, end = ramp_up
        return f"{label}-ramp-up-{strategy}-{_rps(start)}qps-{_rps(end)}qps{concurrency}-{base_model_id}-{date_text}.json"
    return f"{label}-{float(request_rate)}qps{concurrency}-{base_model_id}-{date_text}.json"


def _rps(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def result_path(result_dir: Path | None, result_filename_arg: str | None, default_name: str) -> Path:
    """Where `--save-result` writes: `--result-filename` or vLLM's default name, inside `--result-dir`."""
    name = result_filename_arg or default_name
    return Path(result_dir) / name if result_dir is not None else Path(name)
