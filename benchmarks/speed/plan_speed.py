"""How long `roofline plan` takes, and whether the executors agree.

    python benchmarks/speed/plan_speed.py                       # issue 8: without and with sensitivity, 2 workers
    python benchmarks/speed/plan_speed.py --report-dir reports/plan-llama-3.1-70b-sharegpt-chat   # also keep a report
    python benchmarks/speed/plan_speed.py --subset60 --executors 1,2,ray   # issue 19: 60 configurations, 1 and 2 local
                                                                     # workers and a local Ray (2 CPUs)
    python benchmarks/speed/plan_speed.py --full                # issue 19: the full search space (576 configurations)
    python benchmarks/speed/plan_speed.py --space1024 --executors 2,ray1,ray2,ray4   # issue 42: 1,024 configurations,
                                                                     # 2 local workers and a local Ray of 1, 2, 4 CPUs
    python benchmarks/speed/plan_speed.py --space1024 --hardware h100-sxm --executors ray1,ray2,ray4   # its sub-space
                                                                     # on one device (256 configurations)

Issue 8's target: at most 60 s without sensitivity on the project machine (2 cores). Issue 19's: 2 workers at
least 1.7x faster than 1 on the 60-configuration subset; the full plan timed once. Prints one line per run: wall
seconds, CPU seconds of this process and its workers (less disturbed by other jobs on a shared machine), the load
average before and after, simulations, configurations; and whether every executor gave the same plan.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import time
from pathlib import Path

from roofline.engine_args import EngineArgs
from roofline.planning.backend import SimulatorBackend, choose_max_model_len
from roofline.planning.executor import Executor, LocalExecutor, RayExecutor
from roofline.planning.plan import DEFAULT_MAX_NUM_SEQS, Plan, PlanRequest, make_plan
from roofline.planning.prices import prices_for
from roofline.planning.report import all_tables, answer_text, write_report
from roofline.planning.search import Slo, num_simulated_requests

MODEL = "llama-3.1-70b"
HARDWARE = ("h100-sxm", "h200-sxm", "a100-80gb-sxm")
WORKLOAD = "sharegpt-chat"
SLO = Slo(ttft_s=2.0, tpot_s=0.08, percentile=90)
TARGET_RATE_PER_S = 10.0

# Issue 19's runs: four devices; every probe simulates 250 requests and measures 200 (so the three timed runs of
# the subset and the full plan fit a session on 2 shared cores); no sensitivity.
ISSUE19_HARDWARE = ("h100-sxm", "h200-sxm", "b200", "a100-80gb-sxm")
ISSUE19_NUM_REQUESTS = 200
# The fixed subset: 4 devices x TP 2, 4, 8 x max_num_seqs 32 ... 512 = 60 configurations, unquantized.
SUBSET60 = dict(tensor_parallel_sizes=(2, 4, 8), max_num_seqs=(32, 64, 128, 256, 512))
# The full space: 4 devices x TP 1, 2, 4, 8 x 3 quantizations x 2 KV dtypes x 2 token budgets x 3 max_num_seqs.
FULL = dict(tensor_parallel_sizes=(1, 2, 4, 8), quantizations=("none", "fp8", "awq"), kv_cache_dtypes=("auto", "fp8"),
            max_num_batched_tokens=(None, 16384), max_num_seqs=(64, 128, 256))


# Issue 42's space: 4 devices x TP 1, 2, 4, 8 x 2 quantizations x 2 KV dtypes x 4 token budgets x 4 max_num_seqs =
# 1,024 configurations, the plan's defaults otherwise (2,000 measured requests per probe, sensitivity on).
SPACE1024 = dict(tensor_parallel_sizes=(1, 2, 4, 8), quantizations=("none", "fp8"), kv_cache_dtypes=("auto", "fp8"),
                 max_num_batched_tokens=(2048, 4096, 8192, 16384), max_num_seqs=(32, 64, 128, 256))


def _cpu_s() -> float:
    """User + system CPU seconds of this process and of its finished children (the pool's workers; not Ray's)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _machine_cpu_s() -> float:
    """CPU seconds every process of this machine has spent (user + nice + system, /proc/stat): Ray's workers are no
    children of this process, so a Ray run's CPU is counted here (in a quiet window, nearly all of it the plan's)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return float("nan")
    return sum(int(v) for v in fields[:3]) / os.sysconf("SC_CLK_TCK")


def _machine_state() -> str:
    """The load average and the busiest processes (this machine is shared with other jobs)."""
    try:
        top = subprocess.run(["top", "-bn1", "-o", "%CPU"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        top = ""
    lines = top.splitlines()
    header = next((i for i, line in enumerate(lines) if line.lstrip().startswith("PID")), None)
    busy = [" ".join(line.split()[i] for i in (8, 11)) for line in lines[header + 1:header + 6]] if header else []
    return f"load {os.getloadavg()[0]:.1f}; top CPU%: {', '.join(busy)}"


def _executor(kind: str) -> Executor:
    if kind.startswith("ray"):  # ray (2 CPUs) or rayN: a local multi-process Ray cluster of N worker slots
        import ray

        num_cpus = int(kind[3:] or 2)
        started = time.perf_counter()
        ray.init(num_cpus=num_cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        print(f"  ray.init(num_cpus={num_cpus}): {time.perf_counter() - started:.1f} s (not in the plan's time); this "
              f"machine has {os.cpu_count()} cores")
        return RayExecutor(None)
    return LocalExecutor(int(kind))


def timed_plan(request: PlanRequest, backend: SimulatorBackend, kind: str) -> tuple[Plan, float]:
    executor = _executor(kind)
    before = _machine_state()
    started, cpu_started, machine_started = time.perf_counter(), _cpu_s(), _machine_cpu_s()
    try:
        with executor:
            plan = make_plan(request, backend, prices_for(request.hardware, {}), executor=executor)
    finally:
        if kind.startswith("ray"):
            import ray

            ray.shutdown()
    elapsed, cpu = time.perf_counter() - started, _cpu_s() - cpu_started
    machine = _machine_cpu_s() - machine_started
    searched = len(plan.configs) - len(plan.pruned) - len(plan.skipped)
    print(f"executor {kind} ({executor.describe()}): {elapsed:.1f} s wall, {cpu:.1f} s CPU (this process and pool "
          f"workers; not Ray's), {machine:.1f} s CPU of the whole machine (all processes, Ray's too), "
          f"{plan.num_simulations} simulations of {num_simulated_requests(request.num_requests)} "
          f"requests, {len(plan.configs)} configurations ({len(plan.pruned)} do not fit, {len(plan.skipped)} pruned "
          f"by bounds or cost, {searched} searched, {len(plan.serving)} serve the target)\n  before: {before}\n"
          f"  after:  {_machine_state()}", flush=True)
    print("  " + answer_text(plan, all_tables(plan)))
    return plan, elapsed


def issue19(args: argparse.Namespace) -> None:
    engine = EngineArgs()
    num_requests = args.num_requests or ISSUE19_NUM_REQUESTS
    choice = choose_max_model_len(WORKLOAD, num_simulated_requests(num_requests), engine.block_size, 131072)
    backend = SimulatorBackend(MODEL, WORKLOAD, EngineArgs(max_model_len=choice.max_model_len))
    space = FULL if args.full else SUBSET60
    request = PlanRequest(model=MODEL, hardware=ISSUE19_HARDWARE, workload=WORKLOAD, slo=SLO,
                          target_rate_per_s=TARGET_RATE_PER_S, sensitivity=False, num_requests=num_requests, **space)
    print(f"{'full' if args.full else 'subset60'}: {len(request.configs())} configurations; {choice.note()}")
    plans, times = {}, {}
    for kind in args.executors.split(","):
        plans[kind], times[kind] = timed_plan(request, backend, kind)
        if args.report_dir is not None:
            write_report(plans[kind], args.report_dir)
    first = next(iter(plans.values()))
    print(f"identical plans on every executor: {'yes' if all(p == first for p in plans.values()) else 'NO'}")
    if "1" in times and "2" in times:
        print(f"speed-up of 2 workers over 1: {times['1'] / times['2']:.2f}x (target >= 1.7x)")


def issue42(args: argparse.Namespace) -> None:
    engine = EngineArgs()
    num_requests = args.num_requests or PlanRequest.num_requests
    choice = choose_max_model_len(WORKLOAD, num_simulated_requests(num_requests), engine.block_size, 131072)
    backend = SimulatorBackend(MODEL, WORKLOAD, EngineArgs(max_model_len=choice.max_model_len))
    hardware = tuple(args.hardware.split(",")) if args.hardware else ISSUE19_HARDWARE
    request = PlanRequest(model=MODEL, hardware=hardware, workload=WORKLOAD, slo=SLO,
                          target_rate_per_s=TARGET_RATE_PER_S, num_requests=num_requests, **SPACE1024)
    print(f"space1024 on {', '.join(hardware)}: {len(request.configs())} configurations; {choice.note()}", flush=True)
    plans = {kind: timed_plan(request, backend, kind)[0] for kind in args.executors.split(",")}
    first = next(iter(plans.values()))
    print(f"identical plans on every executor: {'yes' if all(p == first for p in plans.values()) else 'NO'}")


def issue8(args: argparse.Namespace) -> None:
    seqs = tuple(int(v) for v in args.max_num_seqs.split(","))
    backend = SimulatorBackend(MODEL, WORKLOAD, EngineArgs())
    prices = prices_for(HARDWARE, {})
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, workers {args.workers}")
    for sensitivity in (False,) if args.skip_sensitivity else (False, True):
        request = PlanRequest(model=MODEL, hardware=HARDWARE, workload=WORKLOAD, slo=SLO,
                              target_rate_per_s=TARGET_RATE_PER_S, tensor_parallel_sizes=(2, 4, 8),
                              max_num_seqs=seqs, sensitivity=sensitivity)
        started, cpu_started = time.perf_counter(), _cpu_s()
        plan = make_plan(request, backend, prices, num_workers=args.workers)
        elapsed, cpu = time.perf_counter() - started, _cpu_s() - cpu_started
        print(f"sensitivity={'on' if sensitivity else 'off'}: {elapsed:.1f} s wall, {cpu:.1f} s CPU, load average "
              f"{os.getloadavg()[0]:.1f}, {plan.num_simulations} simulations "
              f"of {request.num_requests} measured requests, {len(plan.configs)} configurations "
              f"({len(plan.serving)} serve the target)")
        print("  " + answer_text(plan, all_tables(plan)))
        if args.report_dir is not None and (sensitivity or args.skip_sensitivity):
            write_report(plan, args.report_dir)
            print(f"  report: {args.report_dir / 'report.html'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-num-seqs", default=",".join(map(str, DEFAULT_MAX_NUM_SEQS)),
                        help="comma-separated candidates (default: roofline plan's)")
    parser.add_argument("--report-dir", type=Path, default=None, help="write the (last) run's report here")
    parser.add_argument("--skip-sensitivity", action="store_true")
    parser.add_argument("--subset60", action="store_true", help="issue 19: the fixed 60-configuration subset")
    parser.add_argument("--full", action="store_true", help="issue 19: the full search space")
    parser.add_argument("--space1024", action="store_true", help="issue 42: 1,024 configurations")
    parser.add_argument("--hardware", default=None, help="issue 42: a sub-space, the 1,024-configuration space on these "
                        "devices only (comma-separated; default: the four, 1,024 configurations)")
    parser.add_argument("--num-requests", type=int, default=None,
                        help=f"issue 19: measured requests per probe (default: {ISSUE19_NUM_REQUESTS})")
    parser.add_argument("--executors", default="2", help="issue 19: comma-separated: a number of local workers, "
                        "or ray (a local Ray with 2 CPUs); default: 2")
    args = parser.parse_args()
    if args.space1024:
        issue42(args)
    elif args.subset60 or args.full:
        issue19(args)
    else:
        issue8(args)


if __name__ == "__main__":
    main()
