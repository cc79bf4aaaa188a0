"""How well the cost model and simulator predict the real engine on this CPU, before and after calibration.

    python benchmarks/accuracy/calibration_accuracy.py --out $OUT/calib            # measure, then evaluate
    python benchmarks/accuracy/calibration_accuracy.py --out $OUT/calib --reuse    # evaluate traces already there
    python benchmarks/accuracy/calibration_accuracy.py --out $OUT/calib --skip-op-tables --json result.json

1. Noise floor, two ways. (a) Workload A with every request arriving at once, measured twice: the schedule is
   then the same step for step (checked), and the spread of paired step times (|t2 / t1 - 1|) bounds what any
   model can reach. (b) Workload B measured twice ("b" and "b_repeat"): a per-shape oracle predicts each step by
   the median measured time of the steps of the same shape in the same run ("in run") or in the other run
   ("across runs": b's medians predict b_repeat), `roofline.calibration.compare.shape_oracle`. It is the error of a perfect
   deterministic model of step time: what is left is the machine's own run-to-run and within-run noise.
2. Uncalibrated: `roofline compare` of workload A (Poisson arrivals) and workload B (other lengths, other rate)
   with the `roofline profile-device` profile.
3. Calibrated on A, judged on B: `roofline calibrate --trace A --test-trace B`, then `compare` of B with the
   calibrated profile: per-step error and end-to-end throughput and mean TPOT of the simulated replay.
4. H100: `roofline calibrate --op-tables h100_sxm` from the shipped h100-sxm profile and from its datasheet
   part alone (default efficiencies): error on the fitted and the held-out weight shapes, before and after.

Each `roofline measure` run is short (about a minute on a quiet 2-core machine). Timings on a shared machine
are noisy: the noise floor says how noisy.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from roofline.calibration.calibrate import calibrate_on_op_tables, calibrate_on_traces, write_calibrated_profile
from roofline.calibration.compare import compare_trace, shape_oracle
from roofline.calibration.op_tables import load_op_tables
from roofline.calibration.traces import load_trace
from roofline.cost.hardware import load_profile
from roofline.cost.params import EfficiencyParams
from roofline.jsonable import jsonable

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PROFILE = REPO / "tests" / "data" / "cpu-profile.yaml"
MODEL = "llama-156m"
ENGINE = ["--max-num-seqs", "32", "--max-num-batched-tokens", "512", "--dtype", "bfloat16"]
# name -> workload flags. A and B differ in prompt and output lengths and in arrival rate.
WORKLOADS = {
    "noise1": ["--input-len", "128", "--output-len", "32", "--num-requests", "24", "--request-rate", "inf"],
    "noise2": ["--input-len", "128", "--output-len", "32", "--num-requests", "24", "--request-rate", "inf"],
    "a": ["--input-len", "128", "--output-len", "32", "--num-requests", "32", "--request-rate", "4", "--seed", "1"],
    "b": ["--input-len", "384", "--output-len", "64", "--num-requests", "16", "--request-rate", "1", "--seed", "2"],
}
WORKLOADS["b_repeat"] = WORKLOADS["b"]


def measure(out: Path, name: str) -> Path:
    trace = out / name
    cmd = ["roofline", "measure", "--model", MODEL, "--out", str(trace), *ENGINE, *WORKLOADS[name]]
    print("$", " ".join(cmd), file=sys.stderr)
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    print(f"  {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return trace


def noise_floor(first: Path, second: Path) -> dict[str, Any]:
    """Paired step times of two runs of the same all-at-once workload."""
    a, b = load_trace(first).steps, load_trace(second).steps
    same = len(a) == len(b) and all(
        np.array_equal(x, y) for col in ("query_lens", "context_lens") for x, y in zip(a[col], b[col]))
    if not same:
        return {"same_schedule": False, "num_steps": [len(a), len(b)]}
    d1, d2 = a["duration_s"].to_numpy(), b["duration_s"].to_numpy()
    err = np.abs(d2 / d1 - 1.0)
    return {"same_schedule": True, "num_steps": int(len(a)), "median_abs_rel_diff": float(np.median(err)),
            "p90_abs_rel_diff": float(np.percentile(err, 90)), "max_abs_rel_diff": float(err.max()),
            "total_time_rel_diff": float(d2.sum() / d1.sum() - 1.0)}


def step_errors(summary: dict[str, Any]) -> dict[str, Any]:
    keep = ("num_steps", "median_abs_rel_err", "p90_abs_rel_err", "max_abs_rel_err", "mean_rel_err")
    out = {k: summary[k] for k in keep}
    out["by_kind"] = {k: {m: v[m] for m in keep} for k, v in summary["by_kind"].items()}
    if summary.get("end_to_end"):
        out["end_to_end"] = summary["end_to_end"]
    return out


def op_tables_before_after() -> dict[str, Any]:
    tables = load_op_tables("h100_sxm")
    shipped = load_profile("h100-sxm")
    datasheet = replace(shipped, efficiency=EfficiencyParams())
    results = {}
    for label, hw in (("shipped h100-sxm profile", shipped), ("datasheet + default efficiencies", datasheet)):
        started = time.perf_counter()
        report = calibrate_on_op_tables(hw, tables, "h100_sxm")
        results[label] = {"error": report.error, "fit_seconds": time.perf_counter() - started,
                          "parameters": report.parameters}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the traces and calibrated profile")
    parser.add_argument("--hardware", type=Path, default=DEFAULT_PROFILE, help="profile-device profile to start from")
    parser.add_argument("--reuse", action="store_true", help="use the traces already in --out")
    parser.add_argument("--skip-op-tables", action="store_true", help="skip the H100 operator-table calibration")
    parser.add_argument("--json", type=Path, help="write every number to this JSON file")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    traces = {name: (args.out / name if args.reuse else measure(args.out, name)) for name in WORKLOADS}
    hw = load_profile(args.hardware)
    b, b2 = load_trace(traces["b"]), load_trace(traces["b_repeat"])  # the shape oracle's "across runs": b predicts b2
    result: dict[str, Any] = {"noise_floor": noise_floor(traces["noise1"], traces["noise2"]),
                              "shape_oracle_b": {"in_run": shape_oracle(b, b), "in_run_repeat": shape_oracle(b2, b2),
                                                 "across_runs": shape_oracle(b, b2)}}
    result["uncalibrated"] = {w: step_errors(compare_trace(load_trace(traces[w]), hw).summary) for w in ("a", "b")}
    report = calibrate_on_traces(hw, [load_trace(traces["a"])], [load_trace(traces["b"])])
    calibrated_path = args.out / "cpu-calibrated.yaml"
    write_calibrated_profile(args.hardware, report, calibrated_path,
                             f"roofline calibrate --hardware {args.hardware} --trace {traces['a']} "
                             f"--test-trace {traces['b']} --out {calibrated_path}")
    calibrated = load_profile(calibrated_path)
    result["calibration"] = {"parameters": report.parameters, "fit_seconds": report.fit_seconds,
                             "train_after": step_errors(compare_trace(load_trace(traces["a"]), calibrated).summary),
                             "held_out_after": step_errors(compare_trace(load_trace(traces["b"]), calibrated).summary),
                             "held_out_after_repeat": step_errors(
                                 compare_trace(load_trace(traces["b_repeat"]), calibrated).summary)}
    if not args.skip_op_tables:
        result["h100_op_tables"] = op_tables_before_after()
    text = json.dumps(jsonable(result), indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
