"""`roofline compare`: predicted against measured, for every step of a trace and end to end, or against a saved
`vllm bench serve` result.

    roofline compare --trace traces/chat --hardware cpu.yaml
    roofline compare --trace traces/chat --hardware cpu.yaml --out reports/chat --json
    roofline compare --vllm-bench vllm-8.0qps-Llama-3.1-8B-20250101-120000.json --model llama-3.1-8b \\
        --hardware h100-sxm --tensor-parallel-size 1 --goodput ttft:500 tpot:50

Per step: median, p90 and max absolute relative error (predicted / measured - 1) of the cost model's step time,
overall and by step kind (prefill only, decode only, mixed). End to end: the trace's requests replayed in the
simulator on the profile, mean TTFT, mean TPOT and output tokens/s against the measured ones. `--out DIR`
writes steps.csv, summary.json and PNG plots (predicted vs measured with y = x, error vs batch tokens, step
time and error over time). `--json` prints the summary (`median_abs_rel_err`, `p90_abs_rel_err` at its top).
The noise floor is what a perfect model of step time would score: each step predicted by the median time of
the steps of its shape in this run or, with `--repeat-trace`, in a second measurement of the same workload. A
repeat set (`roofline measure --repeats N`, `--append`) as --trace is compared repeat by repeat, next to its
noise floor left one repeat out and the spread of its end-to-end figures (`roofline.calibration.protocol`).

`--vllm-bench RESULT.json` simulates the run the file records (its load, its per-request lengths and send times
when saved with --save-detailed) on the deployment the flags give, counts it as vLLM counts, and prints every
metric of the file predicted next to measured with the relative error; it says which settings the file lacks
(`roofline.calibration.vllm_bench`).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from roofline.commands import HELP
from roofline.cost.hardware import load_profile
from roofline.cost.kv_capacity import parse_vllm_version
from roofline.engine_args import (
    VLLM_VERSION,
    add_engine_args,
    check_quantization_flag,
    engine_args_from,
    version_async_scheduling,
    version_cudagraph_mode,
)
from roofline.errors import UserError
from roofline.hf_cache import cached_config, looks_like_hf_id
from roofline.jsonable import to_json
from roofline.registry import list_ids, load_model, preset_hf_ids
from roofline.sim.api_server import add_api_server_args, resolve_api_server_count
from roofline.sim.bench_client import add_bench_args, bench_load_from_args
from roofline.sim.bench_metrics import parse_goodput
from roofline.sim.deployment import make_deployment
from roofline.sim.simulator import ROUTERS, SimulationOptions
from roofline.vllm_flags import add_vllm_serve_flags

# Flags that only mean something with --vllm-bench (dest names), refused with --trace when set.
_TRACE_FLAGS = ("out", "repeat_trace")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "compare", help=HELP["compare"],
        description=__doc__.split("\n\n")[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=None, metavar="DIR",
                        help="step-trace directory (steps.parquet, run.json, requests.csv), or a repeat set of them")
    parser.add_argument("--vllm-bench", type=Path, default=None, metavar="RESULT.json",
                        help="a result file of vllm bench serve --save-result, instead of --trace")
    parser.add_argument("--hardware", required=True, help="hardware profile id or path")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="write steps.csv, summary.json and the plots here (--trace)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--no-end-to-end", dest="end_to_end", action="store_false",
                        help="skip the simulated replay of the trace's requests (--trace)")
    parser.add_argument("--repeat-trace", type=Path, default=None, metavar="DIR",
                        help="a second measurement of the same workload: the noise floor across runs (each step "
                             "predicted by the other run's median step time of its shape)")
    bench = parser.add_argument_group("--vllm-bench: the deployment and what the file does not record")
    bench.add_argument("--model", default=None,
                       help="model id or path (default: the result's model_id, if it names one)")
    bench.add_argument("--result-index", type=int, default=None, metavar="I",
                       help="which result of a file written with --append-result")
    bench.add_argument("--num-replicas", type=int, default=1, help="replicas behind the router (default: 1)")
    bench.add_argument("--router", choices=ROUTERS, default="round_robin")
    add_api_server_args(bench)
    bench.add_argument("--vllm-version", default=None, metavar="X.Y.Z",
                       help="the vLLM release that served the run (vLLM does not record it): its KV memory profile, "
                            "KV dtype, all-reduce table, DP padding and --async-scheduling default are used "
                            "(default: the file's version key, else 0.32); below 0.8, the V0 engine, refused")
    bench.add_argument("--num-prompts", dest="num_requests", type=int, default=None, metavar="N",
                       help="default: the file's num_prompts")
    bench.add_argument("--request-rate", default=None, metavar="RPS", help="default: the file's request_rate")
    bench.add_argument("--input-len", type=int, default=None, metavar="TOKENS", help="= --random-input-len")
    bench.add_argument("--output-len", type=int, default=None, metavar="TOKENS",
                       help="= --random-output-len / --sharegpt-output-len")
    bench.add_argument("--seed", type=int, default=None, help="the run's --seed (vLLM does not record it; default 0)")
    bench.add_argument("--goodput", nargs="+", default=None, metavar="KEY:MS",
                       help="the run's goodput SLOs (vLLM does not record them)")
    add_bench_args(parser)
    add_engine_args(parser, "simulate")
    add_vllm_serve_flags(parser, "simulate")
    parser.set_defaults(run=run, bench_defaults={a.dest: a.default for a in parser._actions})
    return parser


def run(args: argparse.Namespace) -> int:
    if (args.trace is None) == (args.vllm_bench is None):
        raise UserError("--trace/--vllm-bench: give exactly one of them")
    if args.vllm_bench is not None:
        return run_vllm_bench(args)
    # (the traces' modules, with pandas, imported for a comparison: not for --help or a refused flag)
    from roofline.calibration.compare import compare_repeats, compare_trace, format_summary, write_report
    from roofline.calibration.protocol import load_traces
    from roofline.calibration.traces import load_trace

    _refuse_bench_flags(args)
    hw = load_profile(args.hardware)
    traces = load_traces(args.trace)
    if len(traces) > 1:
        if args.repeat_trace is not None:
            raise UserError(f"--repeat-trace: --trace {args.trace} is a repeat set, whose noise floor comes from its "
                            "own repeats; give --repeat-trace only with a single trace")
        result = compare_repeats(traces, hw, e2e=args.end_to_end)
    else:
        repeat = None if args.repeat_trace is None else load_trace(args.repeat_trace, flag="--repeat-trace")
        result = compare_trace(traces[0], hw, e2e=args.end_to_end, repeat=repeat)
    if args.out is not None:
        write_report(result, args.out)
    if args.json:
        print(to_json(result.summary), end="")
    else:
        print(format_summary(result.summary))
        if args.out is not None:
            print(f"wrote {args.out}/steps.csv, summary.json and plots")
    return 0


def _refuse_bench_flags(args: argparse.Namespace) -> None:
    """With --trace, every --vllm-bench flag left at its default: a set one would be silently ignored."""
    own = {"trace", "vllm_bench", "hardware", "out", "json", "end_to_end", "repeat_trace", "run", "bench_defaults",
           "command", "func"}
    for dest, default in args.bench_defaults.items():
        if dest in own or dest == "help" or not hasattr(args, dest):
            continue
        if getattr(args, dest) != default:
            raise UserError(f"--{dest.replace('_', '-')}: only with --vllm-bench, not with --trace")


def run_vllm_bench(args: argparse.Namespace) -> int:
    from roofline.calibration.vllm_bench import (
        check_vllm_version,
        compare_with_result,
        endpoint_of,
        format_comparison,
        measured_metric_options,
        read_vllm_result,
        replay_from_result,
    )

    for dest in _TRACE_FLAGS:
        if getattr(args, dest) is not None:
            raise UserError(f"--{dest.replace('_', '-')}: only with --trace, not with --vllm-bench")
    if not args.end_to_end:
        raise UserError("--no-end-to-end: only with --trace, not with --vllm-bench")
    record = read_vllm_result(args.vllm_bench, args.result_index)
    version = check_vllm_version(record, args.vllm_version)
    endpoint = args.endpoint or endpoint_of(record)
    model = args.model or _model_from_record(record)
    # A vllm bench serve result is vLLM's: on a cpu profile, the vLLM-CPU executor description.
    spec = load_model(model)
    check_quantization_flag(args.quantization, spec)  # before the deployment, which may not fit without it
    engine = engine_args_from(args, "simulate")
    if version is not None and load_profile(args.hardware).kind != "cpu":
        # The release's own defaults where the flags are not given: vLLM >= 0.14 schedules asynchronously; before
        # 0.11.0 a batch of decodes replays piecewise CUDA graphs (a device that runs none stays eager: HostModel).
        if engine.async_scheduling is None:
            engine = replace(engine, async_scheduling=version_async_scheduling(parse_vllm_version(version)))
        if engine.cudagraph_mode is None and not engine.enforce_eager:
            engine = replace(engine, cudagraph_mode=version_cudagraph_mode(parse_vllm_version(version)))
    # The release's KV memory profile, KV dtype, all-reduce table and DP padding (`make_deployment`).
    deployment = make_deployment(spec, args.hardware, engine, cpu_engine="vllm-cpu",
                                 vllm_version=version or VLLM_VERSION)
    replay = replay_from_result(record)
    load = bench_load_from_args(args, replay.lengths, replay.due_s, replay.settings)
    options = SimulationOptions(num_replicas=args.num_replicas, router=args.router, record_steps=False,
                                max_concurrency=load.max_concurrency,
                                api_server_count=resolve_api_server_count(
                                    args.api_server_count, deployment.engine.data_parallel_size,
                                    deployment.hw.host is not None),
                                endpoint=endpoint)
    metric_options = measured_metric_options(record, parse_goodput(args.goodput))
    comparison = compare_with_result(record, deployment, load, metric_options, options, replay, model,
                                     deployment.hw.id, version)
    if args.json:
        print(to_json(comparison.as_dict()), end="")
    else:
        print(format_comparison(comparison))
    return 0


def _model_from_record(record: dict) -> str:
    model_id = str(record.get("model_id") or "")
    candidates = [model_id, model_id.split("/")[-1].lower()]
    if model_id.lower() in preset_hf_ids():  # a shipped preset by its HF id
        return preset_hf_ids()[model_id.lower()]
    for candidate in candidates:
        if candidate and (Path(candidate).exists() or candidate.lower() in list_ids("model")
                          or (looks_like_hf_id(candidate) and isinstance(cached_config(candidate), Path))):
            return candidate
    raise UserError(f"--model: give the model (the result's model_id {model_id!r} is not a shipped id or a path; "
                    f"see roofline models)")
