"""How fast `roofline simulate` runs: wall time to simulate N requests of the ShareGPT-like workload at a rate
above what one replica serves (so the queue grows and every step runs a full batch).

    python benchmarks/speed/sim_speed.py                        # 10,000 requests, Llama-3.1-8B on H100-SXM
    python benchmarks/speed/sim_speed.py --num-requests 100000
    python benchmarks/speed/sim_speed.py --profile              # plus the top of a cProfile by total time
    python benchmarks/speed/sim_speed.py --out $OUT/sim-out     # plus recording every step and writing simulate's files

Instructions executed, which the machine's speed drifts do not disturb (valgrind; the simulation's share is the
difference of the two counts):

    PY=$(python -c 'import sys; print(sys.executable)')
    valgrind --tool=callgrind --callgrind-out-file=$OUT/cg.run $PY benchmarks/speed/sim_speed.py --num-requests 1500
    valgrind --tool=callgrind --callgrind-out-file=$OUT/cg.prep $PY benchmarks/speed/sim_speed.py --num-requests 1500 \
        --prepare-only

Prints one JSON line: wall and CPU seconds of this process (sampling the workload, building the deployment, the
simulation, its summary (once, as `roofline simulate` makes it) and, with `--out`, writing `roofline simulate
--out`'s files: `write_s` is the summary and the files; CPU time is what other jobs on a shared machine disturb
least), steps,
request-steps (sequences summed over steps), and the simulated throughput, so the number can be checked.
The target (issue 6) is <= 5 s for 10,000 requests on the project's 2-core machine; with `--out`, at most 25 % more
(issue 20).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import platform
import pstats
import time
from pathlib import Path

from roofline.engine_args import EngineArgs
from roofline.sim.deployment import make_deployment
from roofline.sim.outputs import write_outputs
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.workload import load_workload, sample_requests
from roofline.sim.workload_args import override_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=10_000)
    parser.add_argument("--request-rate", type=float, default=10.0,
                        help="requests/s (default 10: about 1.5x what one H100 replica serves of this workload)")
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--hardware", default="h100-sxm")
    parser.add_argument("--workload", default="sharegpt-chat")
    parser.add_argument("--profile", action="store_true", help="run under cProfile and print the top functions")
    parser.add_argument("--prepare-only", action="store_true",
                        help="sample the workload and build the deployment, then stop (a baseline for callgrind)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="also record every step and write `roofline simulate --out`'s files here")
    args = parser.parse_args()

    started = time.perf_counter()
    cpu_started = time.process_time()
    workload = override_workload(load_workload(args.workload), num_requests=args.num_requests,
                                 rate_per_s=args.request_rate)
    specs = sample_requests(workload)
    deployment = make_deployment(args.model, args.hardware, EngineArgs())
    prepared = time.perf_counter()
    if args.prepare_only:
        return
    options = SimulationOptions(record_steps=args.out is not None)
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    result = run_simulation(deployment, workload, options, specs=specs)
    if profiler:
        profiler.disable()
    simulated = time.perf_counter()
    summary = result.summary()  # once, as `roofline simulate` does, then (--out) the files
    if args.out is not None:
        write_outputs(args.out, deployment, result, {"seed": workload.seed, "workload": workload.name,
                                                     "num_replicas": 1, "kv_cache": deployment.kv.terms(),
                                                     **summary})
    finished = time.perf_counter()
    cpu_s = time.process_time() - cpu_started
    print(json.dumps({
        "num_requests": args.num_requests, "request_rate": args.request_rate, "model": args.model,
        "hardware": args.hardware, "workload": args.workload, "machine": f"{platform.machine()} {platform.node()}",
        "python": platform.python_version(), "wall_s": round(finished - started, 3), "cpu_s": round(cpu_s, 3),
        "prepare_s": round(prepared - started, 3), "simulate_s": round(simulated - prepared, 3),
        "write_s": round(finished - simulated, 3),
        "num_steps": int(len(result.steps)), "num_request_steps": int(result.steps["num_seqs"].sum()),
        "simulated_duration_s": round(summary["duration_s"], 1),
        "simulated_output_tokens_per_s": round(summary["output_tokens_per_s"], 1),
        "num_preemptions": summary["num_preemptions"],
    }))
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
