"""`roofline plan`: how many GPUs of which kind, configured how, for a traffic and its SLOs, at what cost.

    roofline plan --model llama-3.1-70b --hardware h100-sxm,h200-sxm,a100-80gb-sxm --workload sharegpt-chat \\
        --slo-ttft-s 2 --slo-tpot-s 0.1 --target-qps 20 --tensor-parallel-sizes 2,4,8 \\
        --quantizations none,fp8 --kv-cache-dtypes auto,fp8 --max-num-batched-tokens-list 8192,16384 --out reports/plan

Searches every hardware x tensor-parallel size x quantization x KV-cache dtype x max_num_batched_tokens x
max_num_seqs with the simulator (see `roofline.planning.plan`), pruning what cannot fit before simulating, on local
worker processes or on Ray (`--ray-address`), and writes DIR/report.html, DIR/report.md, the plots, the CSV
tables (see `roofline.planning.report`) and DIR/plan.json. Each list flag has a single-value engine flag beside it
(`--quantization fp8` = `--quantizations fp8`); giving both is an error.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from roofline.commands import HELP
from roofline.cost.hardware import load_profile
from roofline.cost.quant import KV_CACHE_DTYPE_CHOICES, QUANTIZATION_CHOICES
from roofline.engine_args import EngineArgs, add_engine_args, derived_max_model_len, engine_args_from
from roofline.errors import UserError
from roofline.jsonable import to_json
from roofline.paths import prepare_output_dir
from roofline.planning.backend import SimulatorBackend, choose_max_model_len
from roofline.planning.deploy import launch, parse_checkpoints, plan_json
from roofline.planning.executor import Executor, LocalExecutor, RayExecutor
from roofline.planning.plan import (
    DEFAULT_MAX_NUM_SEQS,
    DEFAULT_NUM_REQUESTS,
    DEFAULT_TENSOR_PARALLEL_SIZES,
    ConfigPlan,
    PlanRequest,
    make_plan,
)
from roofline.planning.prices import parse_price_flags, prices_for
from roofline.planning.prune import replicas_lower_bound
from roofline.planning.report import all_tables, answer_text, write_report
from roofline.planning.search import DEFAULT_SLO_PERCENTILE, NOMINAL, Config, Slo, num_simulated_requests
from roofline.registry import load_model
from roofline.sim.workload import MAX_NUM_REQUESTS, load_workload
from roofline.vllm_flags import add_vllm_serve_flags, canonical_kv_cache_dtype, canonical_quantization


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "plan", help=HELP["plan"],
        description="For each hardware, tensor-parallel size, quantization, KV-cache dtype, max_num_batched_tokens "
        "and max_num_seqs: whether it fits (checked without simulating; if not, why and what would make it fit), "
        "the highest request rate one replica sustains within the SLOs (found by simulation), the replicas, GPUs "
        "and dollars for the target rate, the cheapest configuration and the Pareto front of cost against rate, "
        "and how that moves between pessimistic and optimistic operator times (each kind at the 90th / 10th "
        "percentile of its measured error, where the profile states it; else -10 / +10 % efficiency). Writes "
        "an HTML/markdown report with plots, "
        "CSV tables and plan.json.")
    parser.add_argument("--model", required=True, metavar="ID|PATH", help="model id or HF config.json / directory")
    parser.add_argument("--hardware", required=True, metavar="H1,H2,...",
                        help="comma-separated hardware profile ids or paths")
    parser.add_argument("--workload", required=True, metavar="ID|PATH",
                        help="workload id, YAML file or CSV trace (formats: docs/workload-formats.md)")
    parser.add_argument("--slo-ttft-s", type=float, required=True, metavar="S", help="time-to-first-token SLO")
    parser.add_argument("--slo-tpot-s", type=float, required=True, metavar="S", help="time-per-output-token SLO")
    parser.add_argument("--slo-itl-s", type=float, metavar="S",
                        help="inter-token latency SLO over the pooled token gaps (default: none)")
    parser.add_argument("--slo-e2el-s", type=float, metavar="S",
                        help="end-to-end latency SLO, vLLM's --goodput e2el (default: none)")
    parser.add_argument("--slo-percentile", type=float, default=DEFAULT_SLO_PERCENTILE, metavar="P",
                        help=f"share of requests (percent) that must meet each SLO (default: "
                             f"{DEFAULT_SLO_PERCENTILE:g})")
    parser.add_argument("--target-qps", type=float, required=True, metavar="RPS",
                        help="the request rate to serve, requests per second")
    parser.add_argument("--price", action="append", default=[], metavar="ID=USD_PER_HOUR",
                        help="price of one GPU-hour of a hardware (repeatable); overrides the shipped default")
    parser.add_argument("--tensor-parallel-sizes", default=_join(DEFAULT_TENSOR_PARALLEL_SIZES), metavar="N,...",
                        help=f"tensor-parallel sizes to try (default: {_join(DEFAULT_TENSOR_PARALLEL_SIZES)})")
    parser.add_argument("--data-parallel-sizes", default="1", metavar="N,...",
                        help="data-parallel sizes to try (a MoE model's DP ranks, each TP GPUs, as one replica; ranks "
                             "fill one node after another; default: 1)")
    parser.add_argument("--pipeline-parallel-sizes", default="1", metavar="N,...",
                        help="pipeline-parallel sizes to try (vLLM's -pp: stages of TP GPUs each, across nodes over "
                             "the profile's scale_out network where one node cannot hold them; default: 1)")
    parser.add_argument("--expert-parallel", default="off", metavar="off,on",
                        help="expert parallelism to try: off, on or off,on (vLLM's --enable-expert-parallel; default: "
                             "off)")
    parser.add_argument("--max-num-seqs", default=_join(DEFAULT_MAX_NUM_SEQS), metavar="N,...",
                        help=f"max_num_seqs values to try (default: {_join(DEFAULT_MAX_NUM_SEQS)})")
    parser.add_argument("--quantizations", metavar="Q,...", help=f"weight quantizations to try, of "
                        f"{', '.join(QUANTIZATION_CHOICES)} (default: --quantization's value, none)")
    parser.add_argument("--kv-cache-dtypes", metavar="D,...", help=f"KV-cache dtypes to try, of "
                        f"{', '.join(KV_CACHE_DTYPE_CHOICES)} (default: --kv-cache-dtype's value, auto)")
    parser.add_argument("--max-num-batched-tokens-list", metavar="N,...", help="max_num_batched_tokens values to "
                        "try (default: --max-num-batched-tokens's value, else vLLM's default for the device)")
    parser.add_argument("--sensitivity", action=argparse.BooleanOptionalAction, default=True,
                        help="repeat the best configurations' searches with every operator kind's time at the 90th and 10th "
                             "percentile of its measured / predicted (the profile's uncertainty: section; else "
                             "-10 %% and +10 %% compute and memory efficiency) (default: on)")
    parser.add_argument("--num-requests", type=int, default=DEFAULT_NUM_REQUESTS, metavar="N",
                        help=f"measured requests per simulation, after warm-up and drain (default: "
                             f"{DEFAULT_NUM_REQUESTS}; fewer make the percentiles noisier)")
    parser.add_argument("--workers", type=int, metavar="N", help="local worker processes (default: 2)")
    parser.add_argument("--ray-address", metavar="ADDR|auto", help="run the simulations as Ray tasks on this "
                        "cluster (auto: the one this machine belongs to) instead of local processes; needs the "
                        "ray extra: pip install 'roofline[ray]'")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="directory for the report and plan.json (every configuration, its outcome and reason); "
                             "required but with --dry-run")
    parser.add_argument("--checkpoint", action="append", default=[], metavar="QUANT=REPO",
                        help="the checkpoint (HF repo or path) to serve for one planned quantization (repeatable), "
                             "written into the `vllm serve` lines (default: a placeholder to fill in)")
    parser.add_argument("--json", action="store_true", help="print the whole plan as JSON (as plan.json)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the search space (what fits; per configuration the cost model's bound on its "
                             "rate and the fewest replicas and GPUs it can need) and stop without simulating or "
                             "writing anything")
    parser.add_argument("--exhaustive", action="store_true",
                        help="search every configuration that fits to its answer with whole probes, without pruning "
                             "by the cost model's bounds or by cost and without ending a probe once it misses an SLO "
                             "(the same answer, many more and longer simulations; for checking)")
    add_engine_args(parser, "plan")
    add_vllm_serve_flags(parser, "plan")
    # Unset (None) rather than vLLM's default, so that a single-value flag given beside its list is detected.
    parser.set_defaults(run=run, quantization=None, kv_cache_dtype=None)
    return parser


def _join(values: tuple[int, ...]) -> str:
    return ",".join(map(str, values))


def parse_int_list(text: str, flag: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4); anything else names the flag."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if not values or any(v < 1 for v in values):
        raise UserError(f"{flag}: expected a comma-separated list of positive integers, got '{text}'")
    return values


def parse_choice_list(text: str, flag: str, choices: tuple[str, ...],
                      alias: Callable[[str], str] = str) -> tuple[str, ...]:
    """'none,fp8' -> ('none', 'fp8'), each one of `choices` (or vLLM's alias of one, `alias`); anything else names
    the flag and the choices."""
    values = tuple(alias(v.strip()) for v in text.split(","))
    bad = [v for v in values if v not in choices]
    if bad:
        raise UserError(f"{flag}: '{bad[0]}' is not allowed; allowed: {', '.join(choices)} (comma-separated)")
    return values


def _one_or_list(single: object, listed: str | None, single_flag: str, list_flag: str) -> None:
    if single is not None and listed is not None:
        raise UserError(f"{list_flag}: given together with {single_flag}; give one of them "
                        f"({single_flag} X is the same as {list_flag} X)")


def search_space(args: argparse.Namespace) -> dict[str, tuple]:
    """The lists of quantizations, KV-cache dtypes and token budgets to search, each from its list flag or from
    its single-value engine flag (never both)."""
    _one_or_list(args.quantization, args.quantizations, "--quantization", "--quantizations")
    _one_or_list(args.kv_cache_dtype, args.kv_cache_dtypes, "--kv-cache-dtype", "--kv-cache-dtypes")
    _one_or_list(args.max_num_batched_tokens, args.max_num_batched_tokens_list, "--max-num-batched-tokens",
                 "--max-num-batched-tokens-list")
    quantizations = (parse_choice_list(args.quantizations, "--quantizations", QUANTIZATION_CHOICES,
                                       canonical_quantization)
                     if args.quantizations is not None else (args.quantization or "none",))
    kv_cache_dtypes = (parse_choice_list(args.kv_cache_dtypes, "--kv-cache-dtypes", KV_CACHE_DTYPE_CHOICES,
                                         canonical_kv_cache_dtype)
                       if args.kv_cache_dtypes is not None else (args.kv_cache_dtype or "auto",))
    tokens: tuple[int | None, ...] = (
        parse_int_list(args.max_num_batched_tokens_list, "--max-num-batched-tokens-list")
        if args.max_num_batched_tokens_list is not None else (args.max_num_batched_tokens,))
    return {"quantizations": quantizations, "kv_cache_dtypes": kv_cache_dtypes, "max_num_batched_tokens": tokens}


def make_executor(args: argparse.Namespace) -> Executor:
    if args.ray_address is not None:
        if args.workers is not None:
            raise UserError("--workers: local worker processes do not apply with --ray-address (Ray places the "
                            "tasks); give one of them")
        if not args.ray_address.strip():
            raise UserError("--ray-address: expected a Ray address (host:port, ray://host:port) or auto")
        return RayExecutor(args.ray_address.strip())
    workers = 2 if args.workers is None else args.workers
    if workers < 1:
        raise UserError(f"--workers: must be a positive integer, got {workers}")
    return LocalExecutor(workers)


# How often progress is printed when stderr is not a terminal (a log): every this many seconds, and at each round.
LOG_INTERVAL_S = 10.0


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s"


class PlanReporter:
    """`make_plan`'s progress on stderr (stdout stays the answer, or the JSON): the search space and what the bounds
    pruned at the start, then each round of probes as it finishes. No estimate up front: how many probes the
    branch and bound needs is known only as it goes."""

    def __init__(self, request: PlanRequest, executor: Executor) -> None:
        self.request, self.executor = request, executor
        self.stream = sys.stderr
        self.tty = self.stream.isatty()
        self.started = time.perf_counter()
        self.phase, self.num_rounds, self.num_probes, self.num_done = "", 0, 0, 0
        self.last_print = 0.0

    def _say(self, text: str, redraw: bool = False) -> None:
        if self.tty and redraw:
            self.stream.write(f"\r\033[K{text}")
        else:
            self.stream.write(("\n" if self.tty and self.last_print else "") + text + ("" if self.tty else "\n"))
        self.stream.flush()
        self.last_print = time.perf_counter()

    def planned(self, num_configs: int, num_fitting: int, num_slo_bound: int) -> None:
        r = self.request
        pp = f"{len(r.pipeline_parallel_sizes)} PP x " if len(r.pipeline_parallel_sizes) > 1 else ""
        dims = (f"{len(r.hardware)} hardware x {len(r.tensor_parallel_sizes)} TP x {pp}{len(r.quantizations)} "
                f"quantization x {len(r.kv_cache_dtypes)} KV dtype x {len(r.max_num_batched_tokens)} token budget x "
                f"{len(r.max_num_seqs)} max_num_seqs")
        self._say(f"roofline plan: {num_configs} configurations ({dims}): {num_configs - num_fitting} do not fit, "
                  f"{num_slo_bound} miss an SLO at any rate by the cost model's bounds; searching the other "
                  f"{num_fitting - num_slo_bound} by branch and bound on replicas ({'pruned' if r.prune else 'every one'}"
                  f", probes of {num_simulated_requests(r.num_requests)} requests on {self.executor.describe()})")

    def round(self, phase: str, num_probes: int) -> None:
        if phase != self.phase:
            self.phase, self.num_rounds = phase, 0
        self.num_rounds += 1
        self.num_probes += num_probes
        self._show(force=True)

    def task_done(self) -> None:
        self.num_done += 1
        self._show(force=self.num_done == self.num_probes)

    def _show(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and not self.tty and now - self.last_print < LOG_INTERVAL_S:
            return
        self._say(f"roofline plan: {self.phase} round {self.num_rounds}: {self.num_done}/{self.num_probes} probes "
                  f"done, {_duration(now - self.started)} elapsed", redraw=True)

    def finish(self) -> None:
        if self.tty and self.last_print:
            self.stream.write("\n")
            self.stream.flush()


def dry_run_text(configs: list[Config], fits: dict, bounds: dict, request: PlanRequest) -> str:
    """The configurations grouped by all but max_num_seqs, each group with whether it fits (or why not) and, if it
    does, the cost model's bounds: the highest rate, the fewest replicas and GPUs for the target, an SLO missed."""
    groups: dict[tuple[str, str], list[int]] = {}
    for c in configs:
        head = c.label.rsplit(" seqs", 1)[0] if " seqs" in c.label else c.label
        if not fits[c].fits:
            verdict = f"does not fit: {fits[c].reason}"
        else:
            b = bounds[c]
            k = replicas_lower_bound(request.target_rate_per_s, b.passable_rate_per_s(
                request.slo.ttft_s, num_simulated_requests(request.num_requests)))
            verdict = (f"fits; at most {b.rate_per_s:.3g} req/s per replica ({b.limited_by} bound), so at least {k} "
                       f"replica(s), {k * c.num_gpus} GPUs")
            miss = b.misses(request.slo.limits())
            if miss is not None:
                verdict += f"; {miss}"
        groups.setdefault((head, verdict), []).append(c.max_num_seqs)
    return "\n".join(f"{head} max_num_seqs {','.join(map(str, seqs))}: {verdict}"
                     for (head, verdict), seqs in groups.items())


def deploy_block(model: str, engine: EngineArgs, c: ConfigPlan, checkpoints: dict[str, str]) -> str:
    """The launch of one configuration's replica: its `vllm serve` line, or one per node with a comment naming it."""
    lines = launch(model, engine, c, checkpoints)
    if len(lines) == 1:
        return lines[0]
    return "\n".join(f"# {c.config.label}, node {i + 1} of {len(lines)} ({'head' if i == 0 else 'headless'}):\n{line}"
                     for i, line in enumerate(lines))


def run(args: argparse.Namespace) -> int:
    if args.out is None and not args.dry_run:
        raise UserError("--out: required (the directory for the report and plan.json), unless --dry-run")
    if not 1 <= args.num_requests <= MAX_NUM_REQUESTS:
        raise UserError(f"--num-requests: must be a positive integer up to {MAX_NUM_REQUESTS:,}, got "
                        f"{args.num_requests}")
    hardware = tuple(h.strip() for h in args.hardware.split(",") if h.strip())
    space = search_space(args)
    executor = make_executor(args)
    spec = load_model(args.model)
    request = PlanRequest(
        model=args.model, hardware=hardware, workload=args.workload,
        slo=Slo(args.slo_ttft_s, args.slo_tpot_s, args.slo_percentile, args.slo_itl_s, args.slo_e2el_s),
        target_rate_per_s=args.target_qps,
        tensor_parallel_sizes=parse_int_list(args.tensor_parallel_sizes, "--tensor-parallel-sizes"),
        data_parallel_sizes=parse_int_list(args.data_parallel_sizes, "--data-parallel-sizes"),
        pipeline_parallel_sizes=parse_int_list(args.pipeline_parallel_sizes, "--pipeline-parallel-sizes"),
        expert_parallel=tuple(v == "on" for v in parse_choice_list(args.expert_parallel, "--expert-parallel",
                                                                   ("off", "on"))),
        max_num_seqs=parse_int_list(args.max_num_seqs, "--max-num-seqs"), sensitivity=args.sensitivity,
        num_requests=args.num_requests, prune=not args.exhaustive,
        checkpoint_quantization=spec.checkpoint_quant.method if spec.checkpoint_quant is not None else None, **space)
    # Unknown names fail here, once, rather than as a "does not fit" reason on every configuration.
    for hw in hardware:
        load_profile(hw)
    load_workload(args.workload)
    # The searched knobs live in each configuration; the engine holds the rest.
    args.quantization, args.kv_cache_dtype, args.max_num_batched_tokens = "none", "auto", None
    engine = engine_args_from(args, "plan")
    engine.check_model(spec)
    checkpoints = parse_checkpoints(args.checkpoint, request.quantizations)
    prices = prices_for(hardware, parse_price_flags(args.price))
    if args.out is not None and not args.dry_run:
        prepare_output_dir(args.out)
    notes: tuple[str, ...] = ()
    if engine.max_model_len is None:
        choice = choose_max_model_len(args.workload, num_simulated_requests(request.num_requests), engine.block_size,
                                      derived_max_model_len(spec))
        engine = replace(engine, max_model_len=choice.max_model_len)
        notes = (choice.note(),)
        print(f"roofline plan: {choice.note()} (--max-model-len sets another)", file=sys.stderr)
    backend = SimulatorBackend(args.model, args.workload, engine, notes)
    started = time.perf_counter()
    reporter = PlanReporter(request, executor)
    if args.dry_run:
        configs = request.configs()
        fits = {c: backend.fit(c) for c in configs}
        bounds = {c: backend.bounds(c, NOMINAL, request.num_requests, request.slo.percentile)
                  for c in configs if fits[c].fits}
        reporter.planned(len(configs), len(bounds),
                         sum(b.misses(request.slo.limits()) is not None for b in bounds.values()))
        print(dry_run_text(configs, fits, bounds, request))
        return 0
    with executor:
        plan = make_plan(request, backend, prices, executor=executor, progress=reporter)
    reporter.finish()
    deploy = tuple(deploy_block(args.model, engine, c, checkpoints) for c in plan.best_per_hardware())
    write_report(plan, args.out, deploy)
    as_json = to_json(plan_json(plan, engine, checkpoints))
    (args.out / "plan.json").write_text(as_json)
    if args.json:
        print(as_json, end="")
    else:
        print(answer_text(plan, all_tables(plan)))
        if deploy:
            print("deploy:\n" + deploy[0])
    print(f"report: {args.out / 'report.html'} ({len(plan.configs)} configurations: {len(plan.pruned)} do not fit, "
          f"{len(plan.skipped)} pruned by the cost model's bounds or by cost; {plan.num_simulations} simulations on "
          f"{executor.describe()} in "
          f"{time.perf_counter() - started:.1f} s)", file=sys.stderr)
    if plan.best is None:
        print("roofline plan: no configuration serves the target within the SLOs; the report says why for each",
              file=sys.stderr)
        return 1
    return 0
