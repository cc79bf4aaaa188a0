"""A server session's host speed against the campaign's, from a short probe independent of the judged runs, and the
host profile with that speed as its `host.single_thread_speed_relative` (a user's input, nothing fitted):

    R=benchmarks/results/vllm-serve-bench
    PYTHONPATH=$PWD "$VLLM_VENV/bin/python" benchmarks/ground_truth/vllm_serve_bench.py --work-dir $OUT/probe \
        --out $OUT/probe/runs.json --repeats 2 --cells closed1:completions --api-server-counts 1 --temperature 0
    python benchmarks/ground_truth/vllm_serve_speed_probe.py --probe $OUT/probe/runs.json \
        --reference $R/2026-11-30c/runs-split.json --hardware $R/2026-11-30c/cal-host.yaml \
        --out $OUT/speed.json --hardware-out $OUT/host-at-probe-speed.yaml

The probe is one request at a time (closed1 completions: 40 requests of 128 prompt / 32 output tokens), the kind
of run the campaign's split runs measured (`runs-split.json`, fit only, never judged). Two speeds, each the
reference's over the probe's (1 = the campaign's session, above 1 faster):
- core 0 (the API server and the client): the API server's threads' CPU per request over the engine's working
  window (`vllm_serve_engine_speed.api_cpu_per_request`);
- core 1 (the engine core and the Worker): vLLM's own logged decode-only step times at one request
  (`vllm_serve_engine_speed.decode_steps`).
The profile's `host.single_thread_speed_relative` scales the API server's and the client's costs (core 0's work,
`roofline.sim.simulator`, `vllm_serve_sim.simulate_run`), so the written profile takes core 0's speed times the
profile's own; the engine's terms are not a speed field of the profile and stay as they are (core 1's speed is
reported only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml
from vllm_serve_engine_speed import api_cpu_per_request, decode_steps
from vllm_serve_sim import existing_file

PROBE_LOAD, PROBE_ENDPOINT = "closed1", "completions"


def probe_runs(index: dict[str, Any]) -> list[dict[str, Any]]:
    """The index's one-process closed1 completions runs."""
    return [run for run in index["runs"] if run["load"] == PROBE_LOAD and run["endpoint"] == PROBE_ENDPOINT
            and run.get("api_server_count") == 1 and "excluded" not in run]


def one_request_step_ms(runs: list[dict[str, Any]]) -> float:
    """The mean of the runs' decode-only steps of one request (ms)."""
    steps = [ms for run in runs for ms in decode_steps(run).get(1, [])]
    if not steps:
        raise ValueError("no decode-only step of one request logged in the runs (engine_steps)")
    return statistics.fmean(steps)


def mean_api_cpu_s(runs: list[dict[str, Any]]) -> float:
    """The mean over the runs of the API server's CPU per request (s)."""
    values = [v for v in (api_cpu_per_request(run) for run in runs) if v is not None]
    if not values:
        raise ValueError("no run with the API server's CPU over its engine window (engine_window.threads_cpu_s)")
    return statistics.fmean(values)


def speeds(probe: list[dict[str, Any]], reference: list[dict[str, Any]]) -> dict[str, Any]:
    """Core 0's and core 1's speed, the reference's time over the probe's (above 1: the probe ran faster)."""
    api, api_ref = mean_api_cpu_s(probe), mean_api_cpu_s(reference)
    step, step_ref = one_request_step_ms(probe), one_request_step_ms(reference)
    return {"api_cpu_per_request_ms": api * 1e3, "reference_api_cpu_per_request_ms": api_ref * 1e3,
            "core0_speed": api_ref / api,
            "decode_step_one_request_ms": step, "reference_decode_step_one_request_ms": step_ref,
            "core1_speed": step_ref / step,
            "probe_runs": [run["name"] for run in probe], "reference_runs": [run["name"] for run in reference]}


def profile_at_speed(profile: dict[str, Any], speed: float, source: str) -> dict[str, Any]:
    """The profile with its host's single-thread speed multiplied by `speed` and the source stated."""
    host = dict(profile["host"])
    host["single_thread_speed_relative"] = round(host["single_thread_speed_relative"] * speed, 4)
    sources = dict(profile.get("sources") or {})
    sources["host.single_thread_speed_relative"] = source
    return {**profile, "host": host, "sources": sources}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", type=existing_file, required=True, help="the probe session's index (vllm_serve_bench.py)")
    parser.add_argument("--reference", type=existing_file, required=True,
                        help="the index of the campaign's session whose speed the profile holds (its closed1 runs)")
    parser.add_argument("--hardware", type=existing_file, help="the host profile to restate at the probe's core-0 speed")
    parser.add_argument("--hardware-out", type=Path, help="with --hardware: where to write it")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if (args.hardware is None) != (args.hardware_out is None):
        parser.error("--hardware and --hardware-out: both or neither")
    found = []
    for flag, path in (("--probe", args.probe), ("--reference", args.reference)):
        try:
            found.append(probe_runs(json.loads(path.read_text())))
        except (ValueError, KeyError, TypeError):
            parser.error(f"{flag} {path}: not vllm_serve_bench.py's index (JSON with a 'runs' list of runs)")
    probe, reference = found
    for flag, runs in (("--probe", probe), ("--reference", reference)):
        if not runs:
            parser.error(f"{flag}: no one-process {PROBE_LOAD} {PROBE_ENDPOINT} run in the index")
    try:
        result = speeds(probe, reference)
    except ValueError as error:
        parser.error(str(error))
    result.update(probe=args.probe.name, reference=args.reference.name)
    if args.hardware is not None:
        profile = yaml.safe_load(args.hardware.read_text())
        source = (f"measured: core 0's speed {result['core0_speed']:.3f} x the profile's, the API server's CPU per "
                  f"request one request at a time ({PROBE_LOAD} {PROBE_ENDPOINT}, {len(probe)} runs) against the "
                  f"campaign's split runs' (vllm_serve_speed_probe.py)")
        args.hardware_out.write_text(yaml.safe_dump(profile_at_speed(profile, result["core0_speed"], source),
                                                    sort_keys=False, width=120))
        result["hardware_out"] = args.hardware_out.name
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if not k.endswith("_runs")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
