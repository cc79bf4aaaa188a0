"""`roofline simulate`: serve a workload on a simulated deployment and print what users would see.

    roofline simulate                                    # llama-3.1-8b on h100-sxm, sharegpt-chat, 300 requests
    roofline simulate --model llama-3.1-70b --hardware h100-sxm --tensor-parallel-size 4 \\
        --workload sharegpt-chat --request-rate 12 --num-requests 2000 --slo-ttft-s 0.5 --slo-tpot-s 0.05 \\
        --warmup-s 20 --drain --out runs/70b
    roofline simulate --model llama-3.1-8b --hardware h100-sxm --dataset-name random --random-input-len 1024 \\
        --random-output-len 128 --num-prompts 500 --max-concurrency 32 --goodput ttft:500 tpot:50 --save-result

The load is a workload (`--workload`, `--input-len/--output-len`) or what `vllm bench serve` sends
(`--dataset-name random|sharegpt`, `--burstiness`, `--ramp-up-strategy`; `roofline.sim.bench_client`), open loop or
closed (`--max-concurrency`). Every run prints the offered load, the engine configuration, the result counted as
vLLM's client counts it under its names (`roofline.sim.bench_metrics`), the steady state (warm-up and drain left
out, as `roofline plan` measures it) and roofline's own summary (the `--warmup-s/--drain` window, SLO shares).

`--save-result` writes the result JSON `vllm bench serve --save-result` writes (`--result-dir`, `--result-filename`,
`--save-detailed` for the per-request lists), plus a `roofline` section with the deployment and the load.
`--out DIR` writes requests.csv (per request), steps.parquet, sequences.parquet and run.json (a step trace,
`engine.core.trace`'s schema version 2: the steps, and their sequences one row each; plus the replica, the predicted
time and its per-operator breakdown), timeseries.csv (KV
usage, running and waiting requests per step), load_over_time.csv (per time bin: offered load, KV usage, queue,
latency and SLO attainment; `roofline.sim.timeline`; with a trace also load_over_time.png) and summary.json. A trace
replay (and --verbose) prints the peaks of that table in one line. `--json` prints the summary as JSON instead of text.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.core.model_spec import ModelSpec
from roofline.commands import HELP
from roofline.cost.kernels import kernel_family
from roofline.cost.kernels.gemm_weight_only import kernel_label
from roofline.engine_args import add_engine_args, check_quantization_flag, engine_args_from
from roofline.errors import UserError
from roofline.jsonable import jsonable, to_json
from roofline.paths import prepare_output_dir
from roofline.registry import load_model
from roofline.sim.api_server import add_api_server_args, resolve_api_server_count
from roofline.sim.bench_client import add_bench_args, bench_load_from_args, is_bench_mode
from roofline.sim.bench_metrics import (
    DRAIN_FRACTION,
    WARMUP_FRACTION,
    BenchMetricOptions,
    bench_metrics,
    format_bench_metrics,
    parse_goodput,
    parse_metric_percentiles,
    parse_percentile_metrics,
    result_filename,
    result_path,
    steady_state,
    unmodelled,
)
from roofline.sim.deployment import Deployment, make_deployment
from roofline.sim.intervals import (
    DEFAULT_LEVEL_PERCENT,
    DEFAULT_NUM_SAMPLES,
    IntervalSpec,
    SampleRuns,
    apply_noise,
    format_intervals,
    interval_metrics,
    interval_record,
)
from roofline.sim.metrics import SummaryOptions, format_summary
from roofline.sim.simulator import ROUTERS, SimulationOptions, run_simulation, terminal_progress
from roofline.sim.timeline import draw_load_over_time, format_peaks, load_over_time, peaks
from roofline.sim.traces import trace_rows
from roofline.sim.verdict import load_verdict
from roofline.sim.workload import KeptPrompts, Workload, sample_requests
from roofline.sim.workload_args import add_workload_args, workload_from_args
from roofline.vllm_flags import add_vllm_serve_flags

DEFAULT_MODEL = "llama-3.1-8b"
# The engine settings the default output shows (--verbose: all of them).
_SHORT_ENGINE_KEYS = ("tensor_parallel_size", "data_parallel_size", "enable_expert_parallel", "all2all_backend",
                      "quantization", "dtype", "kv_cache_dtype", "max_num_seqs",
                      "max_num_batched_tokens", "max_model_len")
# Schemes vLLM applies to an unquantized checkpoint at load time (`--quantization fp8`: dynamic per-tensor fp8,
# vllm/model_executor/layers/quantization/fp8.py `Fp8Config` with is_checkpoint_fp8_serialized False).
ONLINE_QUANTIZATIONS = ("fp8",)
DEFAULT_HARDWARE = "h100-sxm"
_BENCH_ONLY_FLAGS = ("dataset_path", "tokenizer", "random_input_len", "random_output_len", "random_range_ratio",
                     "random_prefix_len", "sharegpt_output_len", "ramp_up_start_rps", "ramp_up_end_rps")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "simulate", help=HELP["simulate"],
        description="Discrete-event simulation of a vLLM-style deployment: the engine's own scheduler, steps "
                    "charged the time the cost model predicts on the hardware profile.")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"model id or path (default: {DEFAULT_MODEL})")
    parser.add_argument("--hardware", default=DEFAULT_HARDWARE,
                        help=f"hardware profile id or path (default: {DEFAULT_HARDWARE})")
    add_workload_args(parser)
    add_bench_args(parser)
    deploy = parser.add_argument_group("deployment")
    deploy.add_argument("--num-replicas", type=int, default=1, help="replicas behind the router (default: 1)")
    deploy.add_argument("--router", choices=ROUTERS, default="round_robin",
                        help="how requests are spread over replicas (default: round_robin)")
    add_api_server_args(deploy)
    add_engine_args(parser, "simulate")
    stats = parser.add_argument_group("statistics")
    stats.add_argument("--slo-ttft-s", type=float, default=None, help="per-request time-to-first-token SLO (s)")
    stats.add_argument("--slo-tpot-s", type=float, default=None, help="per-request time-per-output-token SLO (s)")
    stats.add_argument("--warmup-s", type=float, default=0.0,
                       help="leave out requests arriving before this time, and start throughput there (default: 0)")
    stats.add_argument("--drain", action="store_true",
                       help="leave out the drain: end the statistics window at the last arrival")
    add_result_args(parser)
    band = parser.add_argument_group("prediction intervals (roofline.sim.intervals)")
    band.add_argument("--intervals", nargs="?", const=str(DEFAULT_LEVEL_PERCENT), default=None, metavar="PERCENT",
                      help=f"also run the simulation on cost models sampled from the profile's measured operator-time "
                           f"uncertainty and give each figure this interval (default {DEFAULT_LEVEL_PERCENT:g}) "
                           f"around it, printed, in --json and in --save-result")
    band.add_argument("--interval-samples", default=None, metavar="N",
                      help=f"sampled cost models, run in parallel on this machine's cores (default "
                           f"{DEFAULT_NUM_SAMPLES})")
    out = parser.add_argument_group("output")
    out.add_argument("--out", type=Path, default=None, metavar="DIR",
                     help="write requests.csv, steps.parquet, sequences.parquet, run.json, timeseries.csv, "
                          "load_over_time.csv and summary.json here")
    out.add_argument("--json", action="store_true", help="print the summary as JSON (with the load verdict)")
    out.add_argument("--verbose", "-v", action="store_true",
                     help="also print the whole engine configuration, the hardware profile's provenance, the "
                          "steady state (where one exists), roofline's own summary and what is not modelled")
    add_vllm_serve_flags(parser, "simulate")
    parser.set_defaults(run=run)
    return parser


def add_result_args(parser: argparse.ArgumentParser) -> None:
    """vLLM's result flags: what is reported and where the result JSON goes."""
    group = parser.add_argument_group("vllm bench serve result")
    group.add_argument("--percentile-metrics", default=None, metavar="LIST",
                       help="metrics with percentiles: ttft,tpot,itl,e2el,client_queue_time,"
                            "e2el_including_client_queue (default: ttft,tpot,itl)")
    group.add_argument("--metric-percentiles", default="99", metavar="LIST", help="percentiles (default: 99)")
    group.add_argument("--goodput", nargs="+", default=None, metavar="KEY:MS",
                       help="SLOs for goodput in ms: ttft:MS tpot:MS e2el:MS")
    group.add_argument("--save-result", action="store_true", help="write vLLM's result JSON")
    group.add_argument("--save-detailed", action="store_true",
                       help="with it the per-request lists (input_lens, output_lens, ttfts, itls, start_times)")
    group.add_argument("--result-dir", type=Path, default=None, metavar="DIR", help="directory of the result JSON")
    group.add_argument("--result-filename", default=None, metavar="NAME",
                       help="file name (default: vLLM's {label}-{rate}qps[-concurrency{N}]-{model}-{date}.json)")
    group.add_argument("--label", default="roofline", help="label (prefix) of the result file (default: roofline)")


def metric_options_from(args: argparse.Namespace) -> BenchMetricOptions:
    return BenchMetricOptions(parse_percentile_metrics(args.percentile_metrics),
                              parse_metric_percentiles(args.metric_percentiles), parse_goodput(args.goodput))


def run(args: argparse.Namespace) -> int:
    summary_options = SummaryOptions(warmup_s=args.warmup_s, drain=args.drain, slo_ttft_s=args.slo_ttft_s,
                                     slo_tpot_s=args.slo_tpot_s)
    metric_options = metric_options_from(args)
    if args.save_detailed and not args.save_result:
        raise UserError("--save-detailed: only with --save-result")
    for flag, given in (("--result-dir", args.result_dir), ("--result-filename", args.result_filename)):
        if given is not None and not args.save_result:
            raise UserError(f"{flag}: only with --save-result (nothing is saved without it)")
    if args.interval_samples is not None and args.intervals is None:
        raise UserError("--interval-samples: only with --intervals")
    spec = load_model(args.model)
    check_quantization_flag(args.quantization, spec)  # before the deployment, which may not fit without it
    engine_args = engine_args_from(args, "simulate")
    deployment = make_deployment(spec, args.hardware, engine_args)
    parallel = deployment.engine.parallel
    if parallel.all2all_backend != parallel.resolved_all2all_backend:  # vLLM's own fallback, said as vLLM says it
        print(f"roofline simulate: --all2all-backend {parallel.all2all_backend}: removed from vLLM, which falls back "
              f"to {parallel.resolved_all2all_backend} (vllm/config/parallel.py); simulated so", file=sys.stderr)
    if is_bench_mode(args):
        load = bench_load_from_args(args)
        bench = load.build(deployment.spec)
        workload, specs, client_input_lens = bench.workload, bench.specs, bench.client_input_lens
        max_concurrency, request_rate, offered = load.max_concurrency, load.request_rate, load.offered_load()
    else:
        _refuse_bench_only_flags(args)
        workload = workload_from_args(args)
        if workload.trace_path is not None and args.seed is not None:
            # A trace fixes arrivals, lengths and (a Mooncake trace's block ids) which prompts share which prefixes:
            # no simulated number depends on a seed.
            raise UserError(f"--seed: a trace ({workload.trace_path}) is replayed as recorded and no simulated "
                            f"result depends on a seed; give no --seed with a trace")
        specs, client_input_lens = None, None
        max_concurrency, request_rate = args.max_concurrency, _workload_rate(workload)
        offered = workload_load(workload, max_concurrency)
    options = SimulationOptions(num_replicas=args.num_replicas, router=args.router,
                                record_steps=args.out is not None, max_concurrency=max_concurrency,
                                api_server_count=resolve_api_server_count(
                                    args.api_server_count, deployment.engine.data_parallel_size,
                                    deployment.hw.host is not None),
                                endpoint=args.endpoint or "completions")
    intervals = None if args.intervals is None else \
        IntervalSpec.from_flags(args.intervals, args.interval_samples, deployment.hw, workload.seed or 0)
    if args.out is not None:
        # (imported only for --out: Parquet's writer is a fifth of the process's start)
        from roofline.sim.outputs import StepTraceStream, csv_tables, write_csv, write_outputs
        prepare_output_dir(args.out)
    if args.save_result:
        check_result_dir(args.result_dir)
    runs, prompts = None, None
    if intervals is not None:
        # The samples start now, on forked workers (`SampleRuns`), and the plain run below runs beside them; all
        # read the same requests and prompts, made once here where they are few enough (the same figures).
        specs = sample_requests(workload) if specs is None else specs
        prompts = KeptPrompts.kept(workload, specs, deployment.spec.vocab_size, deployment.spec.bos_token_id,
                                   deployment.spec.eos_token_id)
        lens = client_input_lens

        def run_one(hw: Any) -> dict[str, float | None]:  # one sampled cost model, the same requests
            sampled = run_simulation(make_deployment(deployment.spec, hw, engine_args), workload,
                                     replace(options, record_steps=False), specs=specs, prompts=prompts)
            return interval_metrics(bench_metrics(
                sampled.request_table, sampled.itl, sampled.request_table["num_prompt_tokens"] if lens is None
                else lens, metric_options, max_concurrency, request_rate, latency_lists=False),
                sampled.summary(summary_options))

        runs = SampleRuns(run_one, intervals.profiles(deployment.hw), intervals.num_workers)
    try:
        stream = None if args.out is None else StepTraceStream(args.out, deployment)  # the step trace as it comes
        result = run_simulation(deployment, workload, options, specs=specs, progress=terminal_progress(),
                                step_sink=stream, prompts=prompts)
        if stream is not None:  # (the CSVs now: where a child process writes them, beside what follows here)
            stream.write_tables(csv_tables(result))
        sample_metrics = None if runs is None else runs.results()
    finally:
        if runs is not None:
            runs.close()
    # (First what reads no ITL gap: meanwhile the gaps' sort runs on the second core, `TokenTimes.presort`.)
    load_table = load_over_time(result.request_table, result.step_table, args.slo_ttft_s, args.slo_tpot_s)
    verdict = load_verdict(result.request_table, result.step_table, deployment.scheduler_config.max_num_seqs,
                           deployment.scheduler_config.max_num_batched_tokens, burst=_is_burst(request_rate),
                           max_concurrency=max_concurrency)
    if client_input_lens is None:
        client_input_lens = result.request_table["num_prompt_tokens"]
    # (The printout reads the tables' numpy columns: pandas is imported only where a DataFrame is written, --out.)
    vllm = bench_metrics(result.request_table, result.itl, client_input_lens, metric_options, max_concurrency,
                         request_rate, detailed=args.save_detailed, latency_lists=args.save_result)
    steady = steady_state(result.request_table, result.itl, result.step_table, WARMUP_FRACTION, DRAIN_FRACTION,
                          metric_options.percentiles)
    not_modelled = unmodelled(deployment.hw) + model_unmodelled(deployment.spec)
    summary = {"model": deployment.spec.name, "hardware": deployment.hw.id,
               "hardware_provenance": deployment.hw.provenance_line(), "workload": workload.name,
               "seed": workload.seed, "num_replicas": options.num_replicas, "router": options.router,
               "gpus_per_replica": deployment.gpus_per_replica,
               "max_concurrency": options.max_concurrency, "offered_load": offered,
               "engine": deployment.engine_record, "kv_cache": deployment.kv.terms(),
               "vllm_bench": {k: v for k, v in vllm.items() if not isinstance(v, list)},
               "steady_state": steady, "unmodelled": list(not_modelled),
               **result.summary(summary_options)}
    summary["load_over_time"] = peaks(load_table)
    if intervals is not None and sample_metrics is not None:
        samples = [apply_noise(m, f) for m, f in zip(sample_metrics, intervals.noise(deployment.hw))]
        summary["intervals"] = interval_record(interval_metrics(vllm, summary), samples, intervals, deployment.hw)
    if args.out is not None:
        write_outputs(args.out, deployment, result, summary, stream)
        write_csv(load_table, args.out / "load_over_time.csv")
        if workload.trace_path is not None:  # (a trace's load varies; matplotlib only for it)
            draw_load_over_time(load_table, args.out / "load_over_time.png",
                                f"{deployment.spec.name} on {deployment.hw.id}, {workload.name}")
    saved = None
    if args.save_result:
        saved = save_result(args, deployment, offered, vllm, steady, summary.get("intervals"))
    if args.json:
        # The printed summary adds the verdict; summary.json under --out stays the run's record as it was.
        print(to_json({**summary, "verdict": verdict.as_dict()}), end="")
    else:
        print(header_text(deployment, options, workload, offered, verbose=args.verbose))
        print(format_bench_metrics(vllm, max_concurrency, request_rate, metric_options))
        if intervals is not None:
            print(format_intervals(summary["intervals"]))
        if args.verbose:
            if verdict.steady:
                print(format_steady_state(steady, metric_options.percentiles))
            else:
                print("steady state: none (" + ("a burst" if verdict.burst and max_concurrency is None
                                                else "the queue grows without bound") + "), so no figures")
            print("roofline summary (its --warmup-s/--drain window)")
            print(format_summary(summary))
            print("not modelled: " + "; ".join(not_modelled))
        else:
            print(short_summary(summary))
        if args.verbose or workload.trace_path is not None:
            print(format_peaks(summary["load_over_time"]))
        print(verdict.line())
        for note in quantization_notes(deployment):
            print(f"note: {note}")
        if args.out is not None:
            print(f"wrote {args.out}/requests.csv, steps.parquet, sequences.parquet, run.json, timeseries.csv, "
                  f"summary.json, load_over_time.csv" + (", load_over_time.png" if workload.trace_path is not None else ""))
        if saved is not None:
            print(f"wrote {saved}")
        if not args.verbose:
            print("(--verbose: the whole engine configuration, steady state, percentiles, what is not modelled; "
                  "--json: everything)")
    return 0


def check_result_dir(result_dir: Path | None) -> None:
    """--result-dir is a directory or can be made one (before the simulation, not after)."""
    if result_dir is None:
        return
    if result_dir.exists() and not result_dir.is_dir():
        raise UserError(f"--result-dir: '{result_dir}' exists and is not a directory; give a directory path")
    parent = next((p for p in [result_dir, *result_dir.parents] if p.exists()), Path("."))
    if not parent.is_dir():
        raise UserError(f"--result-dir: '{parent}' (in '{result_dir}') is not a directory")


def _refuse_bench_only_flags(args: argparse.Namespace) -> None:
    for name in _BENCH_ONLY_FLAGS:
        if getattr(args, name) is not None:
            raise UserError(f"--{name.replace('_', '-')}: a vllm bench serve flag; give --dataset-name random or "
                            f"sharegpt with it")
    if args.ignore_eos or args.num_warmups:
        raise UserError("--ignore-eos/--num-warmups: vllm bench serve flags; give --dataset-name random or sharegpt "
                        "with them (a workload's outputs always run to their length)")


def _is_burst(request_rate: float | str | None) -> bool:
    try:
        return math.isinf(float(request_rate)) if request_rate is not None else False
    except (TypeError, ValueError):
        return False


def short_summary(summary: dict[str, Any]) -> str:
    """One line of roofline's own figures the vLLM block does not give: p90 latencies, queueing, preemptions,
    prefix hits, and the SLO shares when SLOs are given."""
    lat = summary["latency"]

    def ms(metric: str, p: str) -> str:
        value = lat[metric][p]
        return "-" if value is None else f"{value * 1e3:.0f}"

    text = (f"summary: TTFT p50/p90 {ms('ttft_s', 'p50')}/{ms('ttft_s', 'p90')} ms, TPOT p50/p90 "
            f"{ms('tpot_s', 'p50')}/{ms('tpot_s', 'p90')} ms, queueing mean {ms('queueing_s', 'mean')} ms, "
            f"{summary['num_preemptions']} preemptions, {summary['prefix_hit_tokens']} prefix-cache hit tokens")
    slo = summary.get("slo")
    if slo:
        parts = []
        if slo["slo_ttft_s"] is not None:
            parts.append(f"TTFT <= {slo['slo_ttft_s'] * 1e3:g} ms {slo['ttft_percent_meeting']:.1f}%")
        if slo["slo_tpot_s"] is not None:
            parts.append(f"TPOT <= {slo['slo_tpot_s'] * 1e3:g} ms {slo['tpot_percent_meeting']:.1f}%")
        text += (f"; SLO {', '.join(parts)}, both {slo['both_percent_meeting']:.1f}%, goodput "
                 f"{slo['goodput_requests_per_s']:.3f} req/s")
    return text


def simulated_quantization(deployment: Deployment) -> str:
    """The weight formats the cost model prices, per module where they differ (a checkpoint's own scheme, e.g.
    gpt-oss: attention bf16, experts MXFP4), not just the --quantization flag."""
    q = deployment.cost_model.quant  # resolved per module against the checkpoint (`resolve_for_model`)
    linear = q.quantization if q.quantization != "none" else f"none ({q.act_dtype})"
    if q.gemm_dtype == q.act_dtype and q.weight_bytes_per_param < q.act_bytes and deployment.hw.kind != "cpu":
        # weight-only (16-bit math on narrower weights): its mixed-input kernel
        kernels = kernel_family(deployment.hw.family).weight_only
        linear += f" ({kernel_label(kernels, q.quantization, q.weight_bytes_per_param)})"
    elif q.gemm_dtype == "int8" and deployment.hw.kind != "cpu":  # no operator table times vLLM's int8 W8A8
        linear += " (CUTLASS W8A8 int8 at the fp8 kernels' fit, unfitted)"
    if not deployment.spec.is_moe:
        return linear
    scheme = q.experts[0]
    experts = scheme if scheme != "none" else f"none ({q.act_dtype})"
    return linear if experts == linear else f"attention/dense {linear}, experts {experts}"


def model_unmodelled(spec: ModelSpec) -> tuple[str, ...]:
    """What the simulation leaves out of the model as vLLM runs it (issue 39's architectures)."""
    notes = []
    if spec.chunked_local_attention:
        notes.append(f"chunked local attention's KV blocks are freed as a sliding window of {spec.sliding_window} "
                     f"tokens (vLLM frees a chunk's blocks when the next chunk starts: the same peak, a lower mean); "
                     f"its q/k L2 norm and the NoPE layers' attention temperature (elementwise) are not timed")
    if spec.num_mtp_layers:
        notes.append(f"the {spec.num_mtp_layers} multi-token-prediction layer(s) (run only for speculative decoding)")
    return tuple(notes)


def quantization_notes(deployment: Deployment) -> list[str]:
    """What the user should know about the simulated formats: a weight quantization on a checkpoint stored
    unquantized is a what-if (vLLM would load such a checkpoint only for schemes it quantizes online)."""
    ck, user = deployment.spec.checkpoint_quant, deployment.engine.quantization
    if ck is None and user not in ("none",) + ONLINE_QUANTIZATIONS:
        return [f"--quantization {user}: model '{deployment.spec.name}' is an unquantized checkpoint, so this is a "
                f"what-if (its weights priced as {user}); vLLM serves {user} only from a checkpoint quantized with "
                f"it (online it quantizes only to {', '.join(ONLINE_QUANTIZATIONS)})"]
    return []


def _workload_rate(workload: Workload) -> float:
    if workload.trace_path is not None:
        return workload.trace_rate_per_s if workload.trace_rate_per_s is not None else math.nan
    return workload.synthetic[0].rate_per_s


def workload_load(workload: Workload, max_concurrency: int | None) -> dict[str, Any]:
    """The offered load of a roofline workload (not vllm bench serve's)."""
    load: dict[str, Any] = {"workload": workload.name, "num_requests": workload.num_requests,
                               "seed": workload.seed, "max_concurrency": max_concurrency}
    if workload.trace_path is not None:
        rows = trace_rows(workload.trace_path)  # (parsed once: the replay read it)
        load.update(trace=str(workload.trace_path), trace_format=rows.format,
                    request_rate=workload.trace_rate_per_s or "as recorded")
        if rows.num_left_out:
            load.update(left_out=rows.left_out_reason)
        if workload.trace_window_s is not None:
            load.update(trace_window_s=list(workload.trace_window_s))
        if workload.trace_speed is not None:
            load.update(trace_speed=workload.trace_speed)
    else:
        arrival, prompt_tokens, output_tokens = workload.synthetic
        rate = arrival.rate_per_s
        load.update(arrival=arrival.process, request_rate="inf" if math.isinf(rate) else rate,
                    mean_prompt_tokens=prompt_tokens.mean_tokens(), mean_output_tokens=output_tokens.mean_tokens())
    return load


def header_text(deployment: Deployment, options: SimulationOptions, workload: Workload,
                offered: dict[str, Any], verbose: bool = True) -> str:
    kv = deployment.kv
    tp = deployment.gpus_per_replica  # TP x DP
    replicas, gpus = options.num_replicas, tp * options.num_replicas
    load = ", ".join(f"{k} {v:.6g}" if isinstance(v, float) else f"{k} {v}" for k, v in offered.items()
                     if v is not None)
    record = {**deployment.engine_record, "quantization": simulated_quantization(deployment)}
    if verbose:
        engine = ", ".join(f"{k}={v}" for k, v in record.items())
    else:
        engine = ", ".join(f"{k}={record[k]}" for k in _SHORT_ENGINE_KEYS if k in record)
    dp = deployment.engine.data_parallel_size
    layout = f" (DP {dp} x TP {tp // dp})" if dp > 1 else ""
    return (f"{deployment.spec.name} on {replicas} replica{'s' * (replicas > 1)} of {tp} x {deployment.hw.id}{layout} "
            f"({tp} GPU{'s' * (tp > 1)} per replica, {gpus} GPU{'s' * (gpus > 1)} in all), workload "
            f"{workload.name}; KV cache {kv.num_gpu_blocks} blocks = {kv.num_tokens} tokens per "
            f"{'DP rank' if dp > 1 else 'replica'}\n"
            f"offered load: {load}\nengine: {engine}"
            + (f"\nhardware profile: {deployment.hw.provenance_line()}" if verbose else ""))


def format_steady_state(steady: dict[str, Any], percentiles: tuple[float, ...]) -> str:
    lines = ["{s:{c}^{n}}".format(s=" Steady state (not vLLM's counting) ", n=50, c="-"),
             f"  {steady['definition']}"]
    if steady.get("request_throughput") is not None:
        lines.append(f"{'Request throughput (req/s):':<40} {steady['request_throughput']:<10.2f}")
        lines.append(f"{'Output token throughput (tok/s):':<40} {steady['output_throughput']:<10.2f}")
    for name in ("ttft", "tpot", "itl", "e2el"):
        cells = [f"mean {steady[f'mean_{name}_ms']:.2f}", f"median {steady[f'median_{name}_ms']:.2f}"]
        cells += [f"p{p:g} {steady[f'p{_word(p)}_{name}_ms']:.2f}" for p in percentiles]
        lines.append(f"{name.upper() + ' (ms):':<40} {', '.join(cells)}")
    return "\n".join(lines)


def _word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def save_result(args: argparse.Namespace, deployment: Deployment, offered: dict[str, Any],
                vllm: dict[str, Any], steady: dict[str, Any], intervals: dict[str, Any] | None = None) -> Path:
    """vLLM's result JSON (its keys, in its order) plus a `roofline` section; the same run gives the same bytes
    (vLLM's `date` would not: it is null here, the file name carries the date as vLLM's does)."""
    rate = offered.get("request_rate", "inf")
    rate_value = math.inf if rate in ("inf", "as recorded") else float(rate)
    ramp = ((offered["ramp_up_strategy"], offered["ramp_up_start_rps"], offered["ramp_up_end_rps"])
            if "ramp_up_strategy" in offered else None)
    now = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = result_path(args.result_dir, args.result_filename,
                       result_filename(args.label, rate_value, offered.get("max_concurrency"), str(args.model), now,
                                       ramp))
    record: dict[str, Any] = {
        "date": None, "endpoint_type": "roofline", "backend": "roofline", "label": args.label,
        "model_id": str(args.model), "tokenizer_id": str(args.tokenizer) if args.tokenizer else str(args.model),
        "num_prompts": offered.get("num_prompts", offered.get("num_requests")),
        "request_rate": rate if rate != "as recorded" else "inf", "burstiness": offered.get("burstiness", 1.0),
        "max_concurrency": offered.get("max_concurrency"),
    }
    if ramp is not None:
        record.update(ramp_up_strategy=ramp[0], ramp_up_start_rps=ramp[1], ramp_up_end_rps=ramp[2])
    record.update(vllm)
    record["roofline"] = {"simulated": True, "model": deployment.spec.name, "hardware": deployment.hw.id,
                          "gpus_per_replica": deployment.gpus_per_replica,
                          "num_replicas": args.num_replicas, "router": args.router, "offered_load": offered,
                          "engine": deployment.engine_record, "steady_state": steady,
                          "unmodelled": list(unmodelled(deployment.hw) + model_unmodelled(deployment.spec))}
    if intervals is not None:
        record["roofline"]["intervals"] = intervals
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(jsonable(record)) + "\n")  # compact, as vLLM's json.dump
    return path
