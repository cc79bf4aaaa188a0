"""Microbenchmarks of the local device: GEMM throughput per dtype, memory read/copy bandwidth, launch overhead.

    result = profile_device(ProfileSettings(device="cpu", num_threads=2))
    result["gemm"]["bf16"]["peak_flops_per_s"], result["memory"]["read"]["plateau_bytes_per_s"]

Returns plain dicts in SI units (FLOP/s, bytes, bytes/s, seconds); `roofline profile-device` turns them into a
hardware profile. (engine never imports roofline, so this module knows nothing of the profile schema.)

How it measures:
- Every number is the best of `num_repeats` measurements (highest rate, lowest time: what the device can do;
  on a shared machine the median mostly measures the neighbours); `spread` = (max - min) / median over them,
  the run-to-run noise. One measurement loops an op until at least `min_time_s` has passed (after a warm-up
  call) and divides: `time.perf_counter` on CPU, CUDA events on the GPU.
- GEMM: C = A @ B over a sweep of square and transformer-shaped (m, n, k), 2 FLOP per multiply-accumulate;
  the best shape is the dtype's peak. CPU: fp32 and bf16, fp16 only when a probe shows it is fast
  (most CPUs convert fp16 in software). CUDA: fp32 (TF32 off), tf32, bf16, fp16.
- Memory: a reduction (`sum`, reads N bytes) and a copy (`copy_`, counted as 2N bytes as STREAM does) over
  buffer sizes doubling until far past the last-level cache. The bandwidth of the device memory is the
  plateau: the median over the three largest sizes, which the sweep makes at least 4x the caches - measured,
  not taken from what lscpu says. The in-cache peak is kept in the sweep.
- Weight streaming: bf16 y = x W^T through the projections of transformer layers (CPU: `llama-156m`'s, hidden 1024
  / intermediate 2816; GPU: Llama-3.1-8B's), as many layers as hold 8x the last-level cache, one after the other
  as a decode step runs them, for x of M = 1, 2, 3, ... rows (`STREAM_ROWS`): weight bytes / time per M is the
  bandwidth the memory-bound GEMMs of a batch of M tokens reach, often well below the plain read plateau and not
  the same for every M (oneDNN on the AVX-512 EPYC: 9-11 % slower at M = 2 than at M = 1, 4-17 % faster at 3-6).
  Each repeat goes over every M, so the host's drift meets every M alike. The larger M (up to 512, a prefill
  chunk) are compute-bound: the same sweep measures the kernel's compute rate on model-shaped weights. Timed
  with the kernel the engine runs (`STREAM_KERNELS`): on a CPU with native bf16, oneDNN's prepacked linear
  (`engine.model.prepack` / `linear`), else `torch.nn.functional.linear`; vLLM-CPU's `onednn_mm` (another oneDNN
  primitive) by running this file as a script in vLLM's environment (`python engine/profile_device.py --kernel
  vllm-onednn-mm`, which `roofline profile-device --vllm-python` does).
- Launch overhead: per-call time of a tiny element-wise op (one-element add); on CUDA the host-side time of
  back-to-back launches, which is what an eager engine pays per kernel.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

DEVICES = ("cpu", "cuda")

# (m, n, k): squares, then shapes of the projections of the models measured on each device kind
# (CPU: llama-156m, hidden 1024 / intermediate 2816; GPU: Llama-3.1-8B, hidden 4096 / intermediate 14336).
_CPU_GEMM_SHAPES = ((256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048),
                    (128, 2816, 1024), (512, 2816, 1024), (2048, 2816, 1024), (2048, 1024, 2816))
_CUDA_GEMM_SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
                     (128, 14336, 4096), (1024, 14336, 4096), (8192, 14336, 4096), (8192, 4096, 14336))
_QUICK_GEMM_SHAPES = ((64, 64, 64), (128, 128, 128), (32, 256, 128))
_TORCH_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

_MIB = 2**20
# Memory sweep: steps of 4x through the caches, then 2x where the plateau is read. The largest sizes must be
# far past any cache (CPU L3s reach 32-512 MiB; GPU L2s 40-96 MiB; MI300X's Infinity Cache 256 MiB).
_CPU_MEMORY_SIZES = tuple(2**p for p in (18, 20, 22, 24, 26, 27, 28, 29))  # 256 KiB .. 512 MiB
_CUDA_MEMORY_SIZES = tuple(2**p for p in (20, 22, 24, 26, 28, 30, 31, 32))  # 1 MiB .. 4 GiB
_QUICK_MEMORY_SIZES = tuple(2**p for p in range(16, 22))  # 64 KiB .. 2 MiB
# Weight streaming: (n, k) of the weights of one layer's projections (qkv, o, gate_up, down), repeated until the
# layers hold _STREAM_CACHE_MULTIPLE x the last-level cache; the rows swept. Past ~6 rows the rate falls on a CPU:
# the FLOPs take over (2 M FLOP per weight byte); the rows up to 512 (a prefill chunk) measure the kernel's compute
# rate on these weights, which `roofline profile-device` fits its GEMM compute efficiency to.
_CPU_LAYER_NK = ((1536, 1024), (1024, 1024), (5632, 1024), (1024, 2816))
_CUDA_LAYER_NK = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
_QUICK_LAYER_NK = ((256, 128), (128, 256))
# 8x, not 4x: over 6 llama-156m layers (135 MB, 4x the 32 MiB L3) oneDNN read 33-36 GB/s at 1-6 rows, as fast as
# the read plateau, against 22-28 GB/s over 8 layers (181 MB, the model's size) a quarter of an hour earlier
# (2026-11-24; not in one run, and the host drifts): 8x leaves the cache no share of the set.
_STREAM_CACHE_MULTIPLE = 8
_STREAM_FALLBACK_CACHE_BYTES = 32 * _MIB  # when the last-level cache size cannot be read
STREAM_ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 256, 512)
_QUICK_STREAM_ROWS = (1, 2, 3)
# The kernels `weight_streaming` times: this project's engine's (prepacked oneDNN when `engine.model.can_prepack`,
# else torch's linear) and vLLM-CPU's `onednn_mm` (only in a vLLM environment).
STREAM_KERNELS = ("engine", "vllm-onednn-mm")
_NUM_PLATEAU_SIZES = 3
# A probe of fp16 on CPU below this fraction of the best of fp32/bf16 means it runs in software: skip it.
_FP16_FAST_FRACTION = 0.5
_FP16_PROBE_MACS = 512**3


@dataclass(frozen=True)
class ProfileSettings:
    device: str = "cpu"
    num_threads: int | None = None  # CPU threads for torch; None = every core this process may run on
    quick: bool = False  # tiny sweeps for tests: seconds, numbers not meaningful
    num_repeats: int = 5
    min_time_s: float = 0.1  # each measurement loops its op at least this long
    # Seconds the GEMM sweep of one dtype may take: a shape whose estimated time (from the rate the previous shape
    # measured) would pass it is not run. A dtype this CPU emulates (bf16 without AVX512_BF16/AMX: about 1/100 of
    # fp32 on an AVX2-only EPYC) would otherwise take tens of minutes on the large shapes.
    gemm_budget_s: float = 60.0

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"--device: {self.device!r} is not allowed; allowed: {', '.join(DEVICES)}")
        if self.num_threads is not None and self.num_threads <= 0:
            raise ValueError(f"--threads: must be a positive integer, got {self.num_threads}")
        if self.num_repeats < 2:
            raise ValueError(f"num_repeats: must be at least 2 to measure a spread, got {self.num_repeats}")
        if not self.gemm_budget_s > 0:
            raise ValueError(f"gemm_budget_s: must be positive, got {self.gemm_budget_s}")
        if self.min_time_s <= 0:
            raise ValueError(f"min_time_s: must be positive, got {self.min_time_s}")


def default_num_threads() -> int:
    """The cores this process may run on (respects taskset/cgroup affinity, unlike os.cpu_count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def profile_device(settings: ProfileSettings, log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run every microbenchmark on the device `settings` names; see the module docstring for the result."""
    if settings.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device: cuda is not available here (torch.cuda.is_available() is False); "
                         "allowed: cpu")
    num_threads = settings.num_threads or default_num_threads()
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        bench = _Bench(settings, torch.device("cuda" if settings.device == "cuda" else "cpu"), log)
        if settings.device == "cpu":
            log(native_dtypes_line())
        gemm, skipped = bench.gemm_all()
        return {
            "device": cuda_description() if settings.device == "cuda" else cpu_description(),
            "library_versions": library_versions(),
            "num_threads": num_threads,
            "num_repeats": bench.num_repeats,
            "gemm": gemm,
            "gemm_skipped": skipped,
            "memory": {"read": bench.memory("read"), "copy": bench.memory("copy")},
            "weight_streaming": bench.weight_streaming("engine"),
            "launch_overhead": bench.launch_overhead(),
        }
    finally:
        torch.set_num_threads(previous_threads)


# ---- timing ---------------------------------------------------------------------------------------------


def _spread(values: list[float]) -> float:
    """(max - min) / median: the relative run-to-run range."""
    return (max(values) - min(values)) / statistics.median(values)


class _Bench:
    """The sweeps of one device. `_seconds_per_call` is the only place that reads a clock."""

    def __init__(self, settings: ProfileSettings, device: torch.device, log: Callable[[str], None]) -> None:
        self.settings = settings
        self.device = device
        self.is_cuda = device.type == "cuda"
        self.log = log
        self.min_time_s = 0.005 if settings.quick else settings.min_time_s
        self.num_repeats = 2 if settings.quick else settings.num_repeats

    def _sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def _seconds_per_call(self, fn: Callable[[], object], host_side: bool = False) -> float:
        """Warm up, size a loop to take >= min_time_s, time it. `host_side`: time the launches on the host
        clock (CUDA launch overhead) instead of the device's."""
        fn()
        self._sync()
        start = time.perf_counter()
        fn()
        self._sync()
        once_s = max(time.perf_counter() - start, 1e-7)
        num_calls = max(1, math.ceil(self.min_time_s / once_s))
        if self.is_cuda and not host_side:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(num_calls):
                fn()
            end.record()
            end.synchronize()
            return begin.elapsed_time(end) * 1e-3 / num_calls  # elapsed_time is in milliseconds
        self._sync()
        start = time.perf_counter()
        for _ in range(num_calls):
            fn()
        elapsed = time.perf_counter() - start
        self._sync()
        return elapsed / num_calls

    def _rates(self, fn: Callable[[], object], work: float) -> tuple[float, float, list[float]]:
        """(best, spread, all) of work / time over the repeats (work: FLOP or bytes per call)."""
        rates = [work / self._seconds_per_call(fn) for _ in range(self.num_repeats)]
        return max(rates), _spread(rates), rates

    # ---- GEMM -----------------------------------------------------------------------------------------

    def _gemm_shapes(self) -> tuple[tuple[int, int, int], ...]:
        if self.settings.quick:
            return _QUICK_GEMM_SHAPES
        return _CUDA_GEMM_SHAPES if self.is_cuda else _CPU_GEMM_SHAPES

    def _gemm_fn(self, dtype: str, m: int, n: int, k: int) -> Callable[[], object]:
        # Seeded inputs: values do not change the time, but a seeded run is reproducible in every other way.
        # Drawn on the device itself: 8192 x 14336 normals take about a second on a CPU.
        generator = torch.Generator(device=self.device).manual_seed(0)
        a = torch.randn(m, k, generator=generator, device=self.device).to(_TORCH_DTYPES[dtype])
        b = torch.randn(k, n, generator=generator, device=self.device).to(_TORCH_DTYPES[dtype])
        out = torch.empty(m, n, device=self.device, dtype=_TORCH_DTYPES[dtype])
        return lambda: torch.matmul(a, b, out=out)

    def _estimated_s(self, flops: float, rate: float) -> float:
        """How long `_rates` takes for a call of `flops` at `rate`: per repeat a warm-up call, a sizing call and a
        loop of at least min_time_s."""
        once = flops / rate
        return self.num_repeats * (2 * once + max(self.min_time_s, once))

    def _gemm_sweep(self, dtype: str, shapes: tuple[tuple[int, int, int], ...]) -> dict[str, Any]:
        sweep: list[dict[str, Any]] = []
        started = time.perf_counter()
        budget = math.inf if self.settings.quick else self.settings.gemm_budget_s
        for i, (m, n, k) in enumerate(shapes):
            if sweep:
                estimate = self._estimated_s(2.0 * m * n * k, float(sweep[-1]["flops_per_s"]))
                elapsed = time.perf_counter() - started
                if elapsed + estimate > budget:
                    self.log(f"gemm {dtype}: stopped after {i} of {len(shapes)} shapes: {m}x{n}x{k} would take "
                             f"about {estimate:.0f} s at the rate measured, past the {budget:g} s budget per dtype")
                    break
            rate, spread, _ = self._rates(self._gemm_fn(dtype, m, n, k), 2.0 * m * n * k)
            sweep.append({"mnk": [m, n, k], "flops_per_s": rate, "spread": spread})
            self.log(f"gemm {dtype} [{i + 1}/{len(shapes)}] {m}x{n}x{k}: {rate / 1e12:.3f} TFLOP/s (spread "
                     f"{spread:.1%}; {time.perf_counter() - started:.0f} s of the dtype's {budget:g} s)")
        best = max(sweep, key=lambda row: float(row["flops_per_s"]))
        return {"peak_flops_per_s": best["flops_per_s"], "peak_shape_mnk": best["mnk"], "spread": best["spread"],
                "sweep": sweep}

    def _with_tf32(self, dtype: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """fp32 GEMMs on CUDA use TF32 tensor cores only when allowed: measure fp32 with it off, tf32 on."""
        if not self.is_cuda:
            return run()
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        try:
            return run()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous

    def gemm_all(self) -> tuple[dict[str, Any], dict[str, str]]:
        shapes = self._gemm_shapes()
        dtypes = ["fp32", "tf32", "bf16", "fp16"] if self.is_cuda else ["fp32", "bf16"]
        results = {d: self._with_tf32(d, functools.partial(self._gemm_sweep, d, shapes)) for d in dtypes}
        skipped: dict[str, str] = {}
        if not self.is_cuda:
            # A mid-size probe: a software fp16 GEMM runs ~100x slower, so the largest shape would take minutes.
            probe = min(shapes, key=lambda s: abs(s[0] * s[1] * s[2] - _FP16_PROBE_MACS))
            fp16_rate, _, _ = self._rates(self._gemm_fn("fp16", *probe), 2.0 * probe[0] * probe[1] * probe[2])
            best = max(results[d]["peak_flops_per_s"] for d in dtypes)
            if fp16_rate >= _FP16_FAST_FRACTION * best:
                results["fp16"] = self._gemm_sweep("fp16", shapes)
            else:
                skipped["fp16"] = (f"slow: {fp16_rate / 1e12:.4f} TFLOP/s at {probe[0]}x{probe[1]}x{probe[2]}, "
                                   f"under {_FP16_FAST_FRACTION:g} x the best of {', '.join(dtypes)}")
                self.log(f"gemm fp16 skipped ({skipped['fp16']})")
        return results, skipped

    # ---- memory ---------------------------------------------------------------------------------------

    def _memory_sizes(self) -> tuple[int, ...]:
        if self.settings.quick:
            return _QUICK_MEMORY_SIZES
        sizes = _CUDA_MEMORY_SIZES if self.is_cuda else _CPU_MEMORY_SIZES
        # A copy holds two buffers: keep both under 1/4 of the memory there is.
        limit = _available_memory_bytes(self.device) // 8
        kept = tuple(s for s in sizes if s <= limit)
        return kept if len(kept) > _NUM_PLATEAU_SIZES else sizes[: _NUM_PLATEAU_SIZES + 1]

    def memory(self, kind: str) -> dict[str, Any]:
        """Bandwidth of a read (sum) or a copy over the size sweep; the plateau is the device memory's."""
        sweep = []
        all_rates = []
        for size in self._memory_sizes():
            src = torch.ones(size // 4, dtype=torch.float32, device=self.device)
            fn: Callable[[], object]
            if kind == "read":
                fn, moved = src.sum, size
            else:
                dst = torch.empty_like(src)
                fn, moved = functools.partial(dst.copy_, src), 2 * size
            best, spread, rates = self._rates(fn, float(moved))
            sweep.append({"size_bytes": size, "bytes_per_s": best, "spread": spread})
            all_rates.append(rates)
            self.log(f"memory {kind} {size / _MIB:g} MiB: {best / 1e9:.1f} GB/s (spread {spread:.1%})")
            del src
        # Per repeat, the median over the plateau sizes; then the best and the spread over the repeats.
        plateau = [statistics.median(r[i] for r in all_rates[-_NUM_PLATEAU_SIZES:])
                   for i in range(self.num_repeats)]
        return {"plateau_bytes_per_s": max(plateau), "spread": _spread(plateau),
                "plateau_sizes_bytes": [row["size_bytes"] for row in sweep[-_NUM_PLATEAU_SIZES:]],
                "sweep": sweep}

    def _stream_weights(self) -> list[torch.Tensor]:
        """bf16 weights [n, k] of as many layers as hold _STREAM_CACHE_MULTIPLE x the last-level cache."""
        layer: tuple[tuple[int, int], ...]
        if self.settings.quick:
            layer, num_layers = _QUICK_LAYER_NK, 1
        else:
            layer = _CUDA_LAYER_NK if self.is_cuda else _CPU_LAYER_NK
            cache = _last_level_cache_bytes(self.device) or _STREAM_FALLBACK_CACHE_BYTES
            num_layers = max(1, math.ceil(_STREAM_CACHE_MULTIPLE * cache / sum(2 * n * k for n, k in layer)))
        generator = torch.Generator(device=self.device).manual_seed(0)
        return [torch.randn(n, k, generator=generator, device=self.device).to(torch.bfloat16)
                for _ in range(num_layers) for n, k in layer]

    def _stream_kernel(self, kernel: str, weights: list[torch.Tensor]) -> tuple[str, Callable[..., object]]:
        """(description, fn(inputs by k)) that runs every weight once through `kernel`."""
        if kernel == "vllm-onednn-mm":
            from vllm import _custom_ops as ops  # only in a vLLM environment (see the module docstring)

            # As vllm/model_executor/layers/utils.py dispatch_cpu_unquantized_gemm builds it for a dense bf16 layer.
            handlers = [(w.shape[1], ops.create_onednn_mm(w.t(), 32)) for w in weights]
            return ("vLLM-CPU onednn_mm (oneDNN matmul, weights prepacked by create_onednn_mm)",
                    lambda xs: [ops.onednn_mm(h, xs[k], None) for k, h in handlers])
        assert kernel == "engine", kernel
        from engine.model import can_prepack, linear, prepack

        if can_prepack(torch.bfloat16, self.device):
            packed = [(w.shape[1], prepack(w)) for w in weights]
            return ("oneDNN prepacked bf16 linear (torch.ops.mkldnn._linear_pointwise, engine.model.linear)",
                    lambda xs: [linear(xs[k], p) for k, p in packed])
        plain = [(w.shape[1], w) for w in weights]
        return ("torch.nn.functional.linear (engine.model.linear without prepacked weights)",
                lambda xs: [torch.nn.functional.linear(xs[k], w) for k, w in plain])

    def weight_streaming(self, kernel: str) -> dict[str, Any]:
        """Weight bytes per second of `kernel` (`STREAM_KERNELS`) over weights past the caches, per row count."""
        weights = self._stream_weights()
        weight_bytes = sum(2 * w.numel() for w in weights)
        description, fn = self._stream_kernel(kernel, weights)
        rows = _QUICK_STREAM_ROWS if self.settings.quick else STREAM_ROWS
        generator = torch.Generator(device=self.device).manual_seed(1)
        inputs = {m: {k: torch.randn(m, k, generator=generator, device=self.device).to(torch.bfloat16)
                      for k in sorted({w.shape[1] for w in weights})} for m in rows}
        rates: dict[int, list[float]] = {m: [] for m in rows}
        for _ in range(self.num_repeats):  # every repeat over every M: drift meets them alike
            for m in rows:
                rates[m].append(weight_bytes / self._seconds_per_call(functools.partial(fn, inputs[m])))
        sweep = [{"rows": m, "bytes_per_s": max(rates[m]), "spread": _spread(rates[m])} for m in rows]
        for row in sweep:
            self.log(f"weight streaming ({kernel}) M={row['rows']}: {row['bytes_per_s'] / 1e9:.1f} GB/s "
                     f"(spread {row['spread']:.1%})")
        return {"kernel": description, "weight_bytes": weight_bytes, "num_weights": len(weights), "sweep": sweep}

    # ---- launch overhead ------------------------------------------------------------------------------

    def launch_overhead(self) -> dict[str, float]:
        a = torch.ones(1, device=self.device)
        b = torch.ones(1, device=self.device)
        out = torch.empty(1, device=self.device)
        times = [self._seconds_per_call(lambda: torch.add(a, b, out=out), host_side=True)
                 for _ in range(self.num_repeats)]
        best, spread = min(times), _spread(times)
        self.log(f"launch overhead: {best * 1e6:.2f} us per op (spread {spread:.1%})")
        return {"per_op_s": best, "spread": spread}


# ---- device descriptions --------------------------------------------------------------------------------


def _last_level_cache_bytes(device: torch.device) -> int | None:
    if device.type == "cuda":
        return getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None) or None
    return _cache_bytes(3) or _cache_bytes(2)


def _available_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    return _meminfo_bytes("MemAvailable") or 8 * 2**30


def _meminfo_bytes(key: str) -> int | None:
    """A /proc/meminfo entry (reported in kB = 1024 bytes) or None off Linux."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# CPU flags (as /proc/cpuinfo spells them) that run a dtype's GEMMs in hardware; without them PyTorch converts to
# fp32 and back (oneDNN's reference path for bf16/fp16 on AVX2).
_NATIVE_DTYPE_FLAGS = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}


def native_dtypes_line() -> str:
    """Which dtypes this CPU multiplies natively, from its flags: one line for the log."""
    flags = set((_cpuinfo_field("flags") or "").split())
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    parts = [f"fp32 ({vector})"]
    for dtype, needed in _NATIVE_DTYPE_FLAGS.items():
        have = [f for f in needed if f in flags]
        parts.append(f"{dtype} native ({', '.join(have)})" if have else
                     f"{dtype} emulated (no {' or '.join(needed)}: expect its GEMMs far below fp32; profile and run "
                     f"in fp32 here)")
    return "this CPU runs: " + "; ".join(parts)


def _cpuinfo_field(key: str) -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":")[0].strip() == key:
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _cache_bytes(level: int) -> int | None:
    """Total size of one cache level over the machine (each shared instance counted once), from sysfs."""
    instances: dict[str, int] = {}
    for index in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            if int((index / "level").read_text()) != level or (index / "type").read_text().strip() == "Instruction":
                continue
            size = (index / "size").read_text().strip()
            shared = (index / "shared_cpu_list").read_text().strip()
        except (OSError, ValueError):
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        instances[shared] = int(size.rstrip("KMG")) * units.get(size[-1], 1)
    return sum(instances.values()) or None


def _physical_memory_bytes() -> int:
    """Installed memory (Linux and macOS); /proc/meminfo MemTotal where sysconf lacks the names."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return _meminfo_bytes("MemTotal") or 0


def cpu_description() -> dict[str, Any]:
    vendor_id = _cpuinfo_field("vendor_id") or platform.processor()
    vendor = {"AuthenticAMD": "AMD", "GenuineIntel": "Intel"}.get(vendor_id, vendor_id or "unknown")
    flags = set((_cpuinfo_field("flags") or "").split())
    return {
        "kind": "cpu",
        "name": _cpuinfo_field("model name") or platform.processor() or platform.machine(),
        "vendor": vendor,
        "num_compute_units": os.cpu_count() or 1,
        "memory_capacity_bytes": _physical_memory_bytes(),
        "l2_cache_bytes": _cache_bytes(2),
        "boost_clock_hz": None,  # not reliably readable inside VMs; /proc/cpuinfo MHz is the current clock
        "tdp_w": None,
        "pcie_bytes_per_s_per_direction": None,
        "details": {"l3_cache_bytes": _cache_bytes(3), "platform": platform.platform(),
                    "matrix_flags": sorted(flags & {"avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16",
                                                    "amx_int8", "avx512_vnni", "avx_vnni"})},
    }


# PCIe transfer rate per lane (GT/s) and line-code efficiency by generation (8b/10b, then 128b/130b; Gen6
# FLIT mode carries 242 payload bytes per 256).
_PCIE_GT_PER_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
_PCIE_CODE = {1: 0.8, 2: 0.8, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}


def pcie_bytes_per_s(generation: int, width: int) -> float:
    """One direction of a PCIe link: Gen5 x16 -> 63.0e9 bytes/s."""
    return _PCIE_GT_PER_S[generation] * 1e9 * width * _PCIE_CODE[generation] / 8


def cuda_description(index: int = 0) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(index)
    nvml = _nvml_info(index)
    pcie = None
    if nvml.get("pcie_max_generation") in _PCIE_GT_PER_S and nvml.get("pcie_max_width"):
        pcie = pcie_bytes_per_s(nvml["pcie_max_generation"], nvml["pcie_max_width"])
    return {
        "kind": "gpu",
        "name": props.name,
        "vendor": "AMD" if torch.version.hip else "NVIDIA",
        "num_compute_units": props.multi_processor_count,
        "memory_capacity_bytes": int(props.total_memory),
        "l2_cache_bytes": getattr(props, "L2_cache_size", None) or None,
        "boost_clock_hz": nvml["max_sm_clock_mhz"] * 1e6 if nvml.get("max_sm_clock_mhz") else None,
        "tdp_w": nvml.get("power_limit_w"),
        "pcie_bytes_per_s_per_direction": pcie,
        "details": {"compute_capability": f"{props.major}.{props.minor}", "nvml": nvml},
    }


def _nvml_info(index: int) -> dict[str, Any]:
    """Clocks, memory bus, power limit and PCIe link from NVML; whatever a query cannot answer is left out
    (MIG slices, non-NVIDIA devices and old drivers answer only some of them)."""
    try:
        import pynvml  # nvidia-ml-py, part of the engine extra
    except ImportError:
        return {"error": "nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"error": f"nvmlInit: {exc}"}
    try:
        handle = _nvml_handle(pynvml, index)
        queries: dict[str, Callable[[], Any]] = {
            "driver_version": lambda: pynvml.nvmlSystemGetDriverVersion(),
            "name": lambda: pynvml.nvmlDeviceGetName(handle),
            "memory_total_bytes": lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).total,
            "max_sm_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "max_memory_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "memory_bus_width_bits": lambda: pynvml.nvmlDeviceGetMemoryBusWidth(handle),
            "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,  # mW
            "pcie_max_generation": lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle),
            "pcie_max_width": lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle),
        }
        info: dict[str, Any] = {}
        for key, query in queries.items():
            try:
                value = query()
            except pynvml.NVMLError:
                continue
            info[key] = value.decode() if isinstance(value, bytes) else value
        return info
    except pynvml.NVMLError as exc:
        return {"error": f"no NVML handle for CUDA device {index}: {exc}"}
    finally:
        pynvml.nvmlShutdown()


def _nvml_handle(pynvml: Any, index: int) -> Any:
    """NVML numbers devices without CUDA_VISIBLE_DEVICES, so match by UUID; fall back to the index only when
    no remapping is in effect."""
    uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", ""))
    if uuid:
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except pynvml.NVMLError:
            pass
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "torch": str(torch.__version__)}
    if torch.version.cuda:
        versions["cuda"] = str(torch.version.cuda)
    if torch.version.hip:
        versions["hip"] = str(torch.version.hip)
    return versions


def _main(argv: list[str] | None = None) -> int:
    """`python engine/profile_device.py --kernel vllm-onednn-mm`: the weight-streaming sweep of one kernel, printed
    as one `RESULT {json}` line (how `roofline profile-device --vllm-python` measures vLLM-CPU's kernel in vLLM's
    environment, where neither roofline nor this package is installed)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=_main.__doc__)
    parser.add_argument("--kernel", choices=STREAM_KERNELS, required=True)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    settings = ProfileSettings(device="cpu", num_threads=args.threads, quick=args.quick, num_repeats=args.repeats)
    torch.set_num_threads(settings.num_threads or default_num_threads())
    bench = _Bench(settings, torch.device("cpu"), lambda line: print(line, file=sys.stderr, flush=True))
    print("RESULT " + json.dumps(bench.weight_streaming(args.kernel)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
