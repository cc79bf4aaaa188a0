"""Hardware profiles: the datasheet part of a device, loaded from `hardware_profiles/<id>.yaml` or any path.

    hw = load_profile("h100-sxm")          # a shipped id (case-insensitive) or a path to a YAML profile
    hw.peak_flops("bf16")                  # 9.894e14 FLOP/s, dense
    hw.memory_bandwidth_bytes_per_s        # 3.35e12
    hw.efficiency, hw.executor             # roofline.cost.params.EfficiencyParams / ExecutorParams

YAML fields carry their unit in the name (`memory_bandwidth_gb_per_s`, `peak_tflops`, `latency_us`); the
dataclass holds SI units (FLOP/s, bytes, bytes/s, seconds, Hz). Decimal prefixes everywhere (1 GB = 1e9 bytes,
1 TFLOP/s = 1e12 FLOP/s) except caches, which datasheets size in binary units (`l2_cache_mib`).

Schema (every key checked, unknown keys are errors; "nullable" keys must be present, `null` = not published):

    id: h100-sxm                        # lowercase kebab-case; shipped profiles: equals the file stem
    name: NVIDIA H100 SXM5 80GB
    kind: gpu                           # gpu | cpu
    vendor: NVIDIA
    peak_tflops: {fp32: .., tf32: .., bf16: .., fp16: .., fp8: .., int8: .., fp4: ..}   # dense; absent = unsupported
    memory_capacity_gb: 85.52           # total device memory as the driver reports it (see profiles' comments)
    memory_bandwidth_gb_per_s: 3350
    l2_cache_mib: 50                    # nullable
    num_compute_units: 132              # SMs (NVIDIA), CUs (AMD), cores (CPU)
    boost_clock_mhz: 1980               # nullable
    interconnect:                       # nullable: scale-up link; null = collectives go over PCIe
      name: nvlink4
      bandwidth_gb_per_s_per_direction: 450
      latency_us: 42.5                  # time of a latency-bound collective (the alpha term)
      max_num_gpus: 8                   # GPUs one scale-up domain joins
    scale_out:                          # optional: the network between nodes (multi-node data / expert parallelism)
      name: connectx7-ndr400
      bandwidth_gb_per_s_per_direction: 50   # one NIC per GPU
      gpus_per_node: 8
    pcie_bandwidth_gb_per_s_per_direction: 64   # nullable; pcie_latency_us: 20 optional; both where collectives use PCIe
    architecture: {...}                 # optional: per-SM facts of kernel descriptions (roofline.cost.architecture)
    tdp_w: 700                          # nullable
    exp_throughput_factor: 2            # optional (default 1): SFU exponential (MUFU.EX2) throughput relative to
                                        #   the family's base chip; used where the family's attention kernels run
                                        #   the softmax on the SFU (roofline.cost.kernels.attention.AttentionKernels)
    sustained_clock_factor: 1.09        # optional (default 1): sustained SM clock relative to the family's base
                                        #   chip of the same datasheet peaks; scales the compute rate and divides
                                        #   the fixed latencies of the family's dense GEMM kernels, not HBM
                                        #   (roofline.cost.kernels.gemm.gemm_time_s); NVIDIA publishes no sustained
                                        #   clocks, so it is fitted on the chip's own GEMM tables
    power_limit:                        # optional: the clock a long compute-bound call settles at once the chip's
      after_ms: 4.4                     #   power limit holds it down: a DeepGEMM call whose math at the full
      clock_factor: 0.52                #   clock lasts longer than after_ms runs its math at clock_factor of it
                                        #   (roofline.cost.kernels.gemm_block_scaled._deepgemm_gemm_time_s); fitted on the chip's
                                        #   own tables (NVIDIA publishes no sustained clocks)
    sources: {field or field.subfield: text or URL}   # one for every number above and in efficiency/executor
    family: hopper                      # optional: the kernel family whose efficiency/executor this chip shares
    operator_tables: h100_sxm           # optional: the aiconfigurator-core system with this chip's measured tables
    efficiency: {...}                   # optional: roofline.cost.params.EfficiencyParams.from_dict; with a family,
    executor: {...}                     #   chip-level overrides of the family's values (ExecutorParams.from_dict)
    weight_streaming:                   # optional, cpu only: GEMM weight-streaming rate by rows (profile-device)
      roofline-engine:                  #   per CPU engine (roofline.cost.cpu.CPU_ENGINES) whose kernel was timed
        kernel: oneDNN prepacked linear #   what was timed (text)
        rows: [1, 2, 3, 4, 6, 8, 12, 16]      # M, the rows of the GEMM's input (tokens), increasing from 1
        gb_per_s: [24.6, 22.4, 27.3, ...]     # weight bytes / time, best of the repeats, per row count
        spread: [0.05, 0.06, ...]             # (max - min) / median over the repeats, per row count
    host:                               # optional (a family may hold it): the host CPU of vLLM's API server and
      cpu_model: Intel Xeon 8480C       #   engine-core loop and its single-thread speed relative to the host the
      single_thread_speed_relative: 2   #   API-server costs were measured on (roofline.cost.host_cpu, roofline.sim.
                                        #   api_server); replaces executor.tokenize_us_per_prompt_token and
                                        #   executor.frontend_us_per_request
    measured: {...}                     # optional: written by `roofline profile-device`
    calibration: {...}                  # optional: written by `roofline calibrate` (free-form record)

`weight_streaming` is how fast the engine's GEMM kernel pulls weights that do not fit in the caches, as a function of
the rows M it multiplies them with (oneDNN's bf16 kernels on the AVX-512 EPYC: 9-11 % slower at M = 2 than at M = 1,
4-17 % faster at M = 3-6; BENCHMARKS.md issue 18). `roofline.cost.cpu.engine.gemm_time_s` takes from it the
*shape* `StreamingCurve.relative(m)`; the level stays `efficiency.memory_efficiency` (which calibration fits). A
cpu profile without it (written before profile-device measured it, or by hand) streams at one rate for every M,
and `StreamingCurve.describe` / `HardwareProfile.streaming_note` say so in every compare and calibrate record.

Kernel families (`hardware_profiles/families/<name>.yaml`): what depends on the kernels vLLM runs (FA3, cuBLAS,
CUTLASS fp8 on Hopper; FlashInfer TRT-LLM on Blackwell; ...) is shared by the GPUs that run them; the chip keeps
its datasheet numbers (the kernels themselves: `roofline.cost.kernels.KernelFamily`, keyed by the family's `id`).
A family file holds `id`, `name`, `efficiency`, `executor`, optional
`per_chip: {chip id: {efficiency: {...}, all_reduce_by_vllm_version: {version: {...}}}}` (values a family fit sets
per chip: the collectives, which ride on the chip's own link; and the same per vLLM all-reduce table version, which
`roofline.cost.collective_versions` picks by the deployment's vLLM version), an optional `fit` record (what the
parameters were fitted on and their held-out and leave-one-GPU-out errors, written by
benchmarks/accuracy/gpu_profiles.py) and `sources` for every number. A chip's
parameters are the family's, then its `per_chip` entry, then the chip file's own `efficiency`/`executor`.
`HardwareProfile.provenance` says where they came from; `provenance_line()` says it in one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from roofline.cost.architecture import Architecture, parse_architecture
from roofline.cost.collective_versions import SECTION, Versions, parse_versions
from roofline.cost.host_cpu import HostCpu
from roofline.cost.params import EfficiencyParams, ExecutorParams
from roofline.cost.profile_yaml import (
    check_keys,
    check_sources,
    count_field,
    is_number,
    optional_positive,
    positive,
    read_profile_dict,
    text_field,
)
from roofline.cost.uncertainty import NOMINAL as NOMINAL_FACTORS
from roofline.cost.uncertainty import OpTimeFactors, OpUncertainty, check_section, chip_uncertainty
from roofline.errors import UserError
from roofline.registry import data_dir, resolve

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")
KINDS = ("gpu", "cpu")
_ID_PATTERN = re.compile(r"^[a-z0-9]+([.-][a-z0-9]+)*$")

# key -> required? Nullable keys are required (an author says `null` on purpose); the sections may be omitted.
_TOP_KEYS: dict[str, bool] = {
    "id": True, "name": True, "kind": True, "vendor": True, "peak_tflops": True, "memory_capacity_gb": True,
    "memory_bandwidth_gb_per_s": True, "l2_cache_mib": True, "num_compute_units": True, "boost_clock_mhz": True,
    "interconnect": True, "pcie_bandwidth_gb_per_s_per_direction": True, "tdp_w": True, "sources": True,
    "efficiency": False, "executor": False, "measured": False, "calibration": False, "family": False,
    "operator_tables": False, "exp_throughput_factor": False, "weight_streaming": False,
    "sustained_clock_factor": False, "power_limit": False, "host": False, "pcie_latency_us": False,
    "architecture": False, "scale_out": False, "uncertainty": False,
}
# The CPU engines a `weight_streaming` curve may describe: `roofline.cost.cpu.CPU_ENGINES` (checked equal there).
STREAMING_ENGINES = ("roofline-engine", "vllm-cpu")
_STREAMING_KEYS = ("kernel", "rows", "gb_per_s", "spread")
_FAMILY_KEYS: dict[str, bool] = {"id": True, "name": True, "efficiency": True, "executor": True, "per_chip": False,
                                 "fit": False, "sources": True, "host": False, "uncertainty": False}
FAMILIES_DIR = "families"  # the family files' folder, under hardware_profiles/ (or beside a profile given by path)
# How a profile's efficiency parameters were obtained (`Provenance.status`).
PROVENANCE_STATUSES = ("fitted", "family", "calibrated", "measured", "datasheet-only")
_INTERCONNECT_KEYS = ("name", "bandwidth_gb_per_s_per_direction", "latency_us", "max_num_gpus")
_SCALE_OUT_KEYS = ("name", "bandwidth_gb_per_s_per_direction", "gpus_per_node")
# What `roofline profile-device` records; the values are free-form (numbers, strings, sweeps).
_MEASURED_KEYS = ("date", "command", "machine", "library_versions", "num_threads", "num_repeats",
                  "gemm", "memory", "weight_streaming", "launch_overhead")
_FAMILY_UNSOURCED = ("sources", "fit", "id", "name", "uncertainty")


@dataclass(frozen=True)
class Interconnect:
    """The scale-up link between devices (NVLink, Infinity Fabric)."""

    name: str
    bandwidth_bytes_per_s_per_direction: float
    latency_s: float  # a latency-bound collective's fixed time (the alpha of alpha + bytes / bandwidth)
    max_num_gpus: int  # devices one link domain joins; tensor parallelism beyond it goes over the network


@dataclass(frozen=True)
class ScaleOut:
    """The network between nodes: one NIC per GPU at this per-direction bandwidth (HGX: ConnectX-7, 400 Gb/s), and
    the GPUs one node holds (vLLM's --data-parallel-size-local x TP at most)."""

    name: str
    bandwidth_bytes_per_s_per_direction: float
    gpus_per_node: int


@dataclass(frozen=True)
class PowerLimit:
    """A chip's power limit on long compute-bound calls: a call whose math at the full clock lasts longer than
    `after_s` runs it at `clock_factor` of that clock (the SM clock the limit settles at). Seen on GB200's DeepGEMM
    tables (BENCHMARKS.md, issue 17); NVIDIA publishes no sustained clocks, so both are fitted on the chip's tables."""

    after_s: float
    clock_factor: float  # in (0, 1]


@dataclass(frozen=True)
class StreamingCurve:
    """One CPU engine's GEMM weight-streaming rate by rows (the `weight_streaming` section), in bytes/s.

    The rate rises while more rows keep more loads in flight and falls once the rows' FLOPs take over; only the
    rising part is a streaming rate: `saturated_rows` is the row count of the highest measured rate, and beyond
    it the compute term of `roofline.cost.cpu.engine.gemm_time_s` carries the rest (holding the highest rate there).
    Between measured row counts the rate is interpolated linearly."""

    kernel: str
    rows: tuple[int, ...]
    bytes_per_s: tuple[float, ...]
    spread: tuple[float, ...]

    @property
    def saturated_rows(self) -> int:
        return self.rows[max(range(len(self.rows)), key=lambda i: self.bytes_per_s[i])]

    def relative(self, m: Any) -> Any:
        """Streaming rate at m rows over the rate at the first row count (1): a float for a number, an array for an
        array of row counts."""
        top = self.saturated_rows
        if isinstance(m, (int, float)):
            x = min(max(float(m), float(self.rows[0])), float(top))
            i = 1
            while i < len(self.rows) - 1 and self.rows[i] < x:
                i += 1
            x0, x1, y0, y1 = self.rows[i - 1], self.rows[i], self.bytes_per_s[i - 1], self.bytes_per_s[i]
            rate = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
            return rate / self.bytes_per_s[0]
        kept = [i for i, r in enumerate(self.rows) if r <= top]
        rates = np.interp(np.minimum(np.asarray(m, np.float64), top), [self.rows[i] for i in kept],
                          [self.bytes_per_s[i] for i in kept])
        return rates / self.bytes_per_s[0]

    def describe(self) -> str:
        rates = ", ".join(f"{r}: {b / 1e9:.3g}" for r, b in zip(self.rows, self.bytes_per_s))
        return f"{self.kernel}, GB/s by rows {{{rates}}}, saturated at {self.saturated_rows} rows"


@dataclass(frozen=True)
class Provenance:
    """Where a profile's efficiency and executor parameters come from.

    status: `fitted` (its family was fitted on this chip's measured operator tables; `held_out` is this chip's
    error on the held-out shapes), `family` (no tables for this chip: the family's parameters, fitted on other
    GPUs; `held_out` is the family's leave-one-GPU-out error, what to expect on a GPU without tables),
    `calibrated` (`roofline calibrate` wrote it), `measured` (`roofline profile-device` wrote it) or
    `datasheet-only` (defaults and datasheet-derived values).
    `held_out`: (reported kind, median, p90, bias) with relative errors as fractions."""

    status: str
    family: str | None = None
    fitted_on: str = ""  # e.g. "aiconfigurator-core 0.12.0, vLLM 0.24.0 tables of h100_sxm, h200_sxm"
    held_out: tuple[tuple[str, float, float, float], ...] = ()
    note: str = ""


_KIND_NAMES = {"gemm": "GEMM", "attention": "attention", "all_reduce": "all-reduce", "moe": "MoE"}


@dataclass(frozen=True)
class HardwareProfile:
    """One device, in SI units. `peak_flops_by_dtype` holds (dtype, dense FLOP/s) pairs in `DTYPES` order."""

    id: str
    name: str
    kind: str
    vendor: str
    peak_flops_by_dtype: tuple[tuple[str, float], ...]
    memory_capacity_bytes: float
    memory_bandwidth_bytes_per_s: float
    l2_cache_bytes: float | None
    num_compute_units: int
    boost_clock_hz: float | None
    interconnect: Interconnect | None
    pcie_bandwidth_bytes_per_s_per_direction: float | None
    tdp_w: float | None
    efficiency: EfficiencyParams
    executor: ExecutorParams
    sources: tuple[tuple[str, str], ...] = field(compare=False, hash=False)
    measured: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    calibration: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    family: str | None = None
    operator_tables: str | None = field(default=None, compare=False, hash=False)
    # SFU exponential throughput relative to the family's base chip (Blackwell Ultra: 2); see the schema above.
    exp_throughput_factor: float = 1.0
    # Sustained SM clock relative to the family's base chip (B300 against B200); see the schema above.
    sustained_clock_factor: float = 1.0
    # The power-limited clock of long compute-bound calls (GB200); None: no such limit described. See the schema.
    power_limit: PowerLimit | None = None
    provenance: Provenance = field(default=Provenance("datasheet-only"), compare=False, hash=False)
    # CPU only: (engine, its GEMM weight-streaming curve) pairs, `STREAMING_ENGINES` order; see `StreamingCurve`.
    weight_streaming: tuple[tuple[str, StreamingCurve], ...] = ()
    # The host CPU that runs vLLM's API server and engine-core loop (`roofline.cost.host_cpu`); None: not described.
    host: HostCpu | None = None
    pcie_latency_s: float | None = None  # a latency-bound collective's fixed time over PCIe (the schema above)
    architecture: Architecture = Architecture()
    scale_out: ScaleOut | None = None  # the network between nodes; None: not described (multi-node refused)
    # How sure its operator times are (`roofline.cost.uncertainty`: the section of the chip, else its family's); and
    # the factors a sampled cost model multiplies each operator kind's time by (`roofline simulate --intervals`).
    uncertainty: OpUncertainty | None = field(default=None, compare=False, hash=False)
    op_time_factors: OpTimeFactors = NOMINAL_FACTORS
    # The collective parameters per vLLM all-reduce table version (`roofline.cost.collective_versions`).
    all_reduce_by_vllm_version: Versions = ()

    def streaming_curve(self, engine: str) -> StreamingCurve | None:
        """The measured weight-streaming curve of `engine`'s GEMM kernel, or None: one rate for every row count."""
        return dict(self.weight_streaming).get(engine)

    def streaming_note(self, engine: str) -> str:
        """What a CPU profile assumes of `engine`'s GEMM weight streaming, for compare and calibrate records."""
        curve = self.streaming_curve(engine)
        if curve is None:
            return ("GEMM weight streaming: no per-row curve for this engine in the profile (weight_streaming), "
                    "assumed one rate for every row count (efficiency.memory_efficiency)")
        return f"GEMM weight streaming by rows: {curve.describe()}"

    def provenance_line(self) -> str:
        """One line on where the efficiency parameters come from and how far to trust them, e.g. "h200-sxm:
        fitted (hopper family: aiconfigurator-core 0.12.0, vLLM 0.24.0 tables of h100_sxm, h200_sxm); held-out
        median error GEMM 7 %, attention 14 %, all-reduce 6 %, MoE 13 %"."""
        p = self.provenance
        errors = ", ".join(f"{_KIND_NAMES.get(kind, kind)} {100 * median:.1f} %" for kind, median, _, _ in p.held_out)
        if p.status == "fitted":
            line = f"{self.id}: fitted ({p.family} family: {p.fitted_on})"
            if self.sustained_clock_factor != 1.0:
                line += f"; sustained clock factor {self.sustained_clock_factor:g} fitted on its own GEMM tables"
            if self.power_limit is not None:
                line += (f"; power-limited clock {self.power_limit.clock_factor:g} after "
                         f"{self.power_limit.after_s * 1e3:g} ms of DeepGEMM math fitted on its own GEMM tables")
            return line + (f"; held-out median error {errors}" if errors else "")
        if p.status == "family":
            line = f"{self.id}: no operator tables of its own; {p.family} family parameters (fitted on {p.fitted_on})"
            return line + (f"; expected median error {errors}" if errors else "") + (f" ({p.note})" if p.note else "")
        if p.status == "calibrated":
            return f"{self.id}: calibrated by roofline calibrate ({p.fitted_on})"
        if p.status == "measured":
            return f"{self.id}: measured ({p.fitted_on})"
        return f"{self.id}: datasheet-only (default efficiencies, not fitted)" + (f"; {p.note}" if p.note else "")

    @property
    def supported_dtypes(self) -> tuple[str, ...]:
        return tuple(dtype for dtype, _ in self.peak_flops_by_dtype)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s (ops/s for int8) of one dtype; a dtype the device lacks is a UserError."""
        for name, flops in self.peak_flops_by_dtype:
            if name == dtype:
                return flops
        raise UserError(f"hardware '{self.id}': dtype '{dtype}' is not supported; "
                        f"supported: {', '.join(self.supported_dtypes)}")

    @property
    def is_measured(self) -> bool:
        return self.measured is not None


# ---- loading --------------------------------------------------------------------------------------------


def load_profile(id_or_path: str | Path) -> HardwareProfile:
    """A shipped id (case-insensitive) or a path to a profile YAML -> a validated `HardwareProfile`."""
    path = resolve("hardware", id_or_path)
    return parse_profile(read_profile_dict(path), where=str(path), base_dir=path.parent)


def parse_profile(data: dict[str, Any], where: str, base_dir: Path | None = None) -> HardwareProfile:
    """Validate a profile mapping (as read from YAML) and convert it to SI units. `where` names it in errors;
    a `family:` is looked up in `base_dir/families/` first, then among the shipped families."""
    check_keys(data, _TOP_KEYS, where)
    family = _family(data, where, base_dir)
    tables = data.get("operator_tables")
    if tables is not None and (not isinstance(tables, str) or not tables.strip()):
        raise UserError(f"{where}: operator_tables: must be an aiconfigurator-core system name (e.g. h100_sxm), "
                        f"got {tables!r}")
    kind = data["kind"]
    if kind not in KINDS:
        raise UserError(f"{where}: kind: {kind!r} is not allowed; allowed: {', '.join(KINDS)}")
    profile_id = text_field(data, "id", where)
    if not _ID_PATTERN.match(profile_id):
        raise UserError(f"{where}: id: {profile_id!r} must be lowercase kebab-case (e.g. h100-sxm)")
    efficiency_section, executor_section = data.get("efficiency"), data.get("executor")
    for name, section in (("efficiency", efficiency_section), ("executor", executor_section)):
        if section is not None and not isinstance(section, dict):
            raise UserError(f"{where}: {name}: must be a mapping of fields, got {type(section).__name__}")
    chip: dict[str, Any] = {}
    if family is not None:
        chip = (family.get("per_chip") or {}).get(profile_id) or {}
        efficiency_section = {**family["efficiency"], **(chip.get("efficiency") or {}), **(efficiency_section or {})}
        executor_section = {**family["executor"], **(executor_section or {})}
    executor = ExecutorParams.from_dict(executor_section, f"{where}: executor")
    host_section = data.get("host", family.get("host") if family is not None else None)
    host = None if host_section is None else HostCpu.from_dict(host_section, f"{where}: host")
    if host is not None and (executor.tokenize_s_per_prompt_token > 0 or executor.frontend_s_per_request > 0):
        raise UserError(f"{where}: host: the API server it describes replaces executor.tokenize_us_per_prompt_token "
                        f"and executor.frontend_us_per_request; remove those two or the host section")
    if kind == "cpu" and executor.mode != "eager":
        raise UserError(f"{where}: executor.mode: a cpu profile must set mode: eager (got {executor.mode!r})")
    profile = HardwareProfile(
        id=profile_id,
        name=text_field(data, "name", where),
        kind=kind,
        vendor=text_field(data, "vendor", where),
        peak_flops_by_dtype=_peak_flops(data["peak_tflops"], where),
        memory_capacity_bytes=positive(data, "memory_capacity_gb", where) * 1e9,
        memory_bandwidth_bytes_per_s=positive(data, "memory_bandwidth_gb_per_s", where) * 1e9,
        l2_cache_bytes=_scaled(optional_positive(data, "l2_cache_mib", where), 2**20),
        num_compute_units=count_field(data, "num_compute_units", where),
        boost_clock_hz=_scaled(optional_positive(data, "boost_clock_mhz", where), 1e6),
        interconnect=_interconnect(data["interconnect"], where),
        pcie_bandwidth_bytes_per_s_per_direction=_scaled(
            optional_positive(data, "pcie_bandwidth_gb_per_s_per_direction", where), 1e9),
        tdp_w=optional_positive(data, "tdp_w", where),
        efficiency=EfficiencyParams.from_dict(efficiency_section, f"{where}: efficiency"),
        all_reduce_by_vllm_version=parse_versions(chip.get(SECTION), efficiency_section or {},
                                                  f"{where}: per_chip.{profile_id}"),
        executor=executor,
        sources=(),
        measured=_measured(data.get("measured"), where),
        calibration=_mapping_or_none(data.get("calibration"), "calibration", where),
        family=None if family is None else family["id"],
        operator_tables=tables,
        exp_throughput_factor=positive(data, "exp_throughput_factor", where) if "exp_throughput_factor" in data
        else 1.0,
        sustained_clock_factor=positive(data, "sustained_clock_factor", where)
        if "sustained_clock_factor" in data else 1.0,
        power_limit=_power_limit(data["power_limit"], where) if "power_limit" in data else None,
        weight_streaming=_weight_streaming(data.get("weight_streaming"), kind, where),
        host=host,
        pcie_latency_s=positive(data, "pcie_latency_us", where) / 1e6 if "pcie_latency_us" in data else None,
        architecture=parse_architecture(data.get("architecture", {}), f"{where}: architecture"),
        scale_out=_scale_out(data["scale_out"], where) if "scale_out" in data else None,
        uncertainty=chip_uncertainty(data.get("uncertainty", family.get("uncertainty") if family is not None else None),
                                     profile_id, where),
    )
    profile = replace(profile, provenance=_provenance(profile, family))
    # Sources last: a misspelt field is reported as such, not as a number without a source.
    check_sources(data, where)
    return replace(profile, sources=tuple(sorted(data["sources"].items())))



# A peak above this is a typo, not a device (~100x B300's 15 PFLOP/s dense fp4; see profile_yaml's other bounds).
_PEAK_TFLOPS_UPPER_BOUND = 1e6


def _power_limit(data: Any, where: str) -> PowerLimit:
    where = f"{where}: power_limit"
    if not isinstance(data, dict) or set(data) != {"after_ms", "clock_factor"}:
        raise UserError(f"{where}: must be a mapping with exactly the keys after_ms, clock_factor; got {data!r}")
    clock_factor = positive(data, "clock_factor", where)
    if clock_factor > 1.0:
        raise UserError(f"{where}: clock_factor: must be in (0, 1] (a fraction of the full clock), got {clock_factor!r}")
    return PowerLimit(after_s=positive(data, "after_ms", where) * 1e-3, clock_factor=clock_factor)


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else value * scale


def _peak_flops(section: Any, where: str) -> tuple[tuple[str, float], ...]:
    check_keys(section, {d: False for d in DTYPES}, f"{where}: peak_tflops")
    if not section:
        raise UserError(f"{where}: peak_tflops: needs at least one dtype; allowed: {', '.join(DTYPES)}")
    return tuple((d, positive(section, d, f"{where}: peak_tflops", _PEAK_TFLOPS_UPPER_BOUND) * 1e12)
                 for d in DTYPES if d in section)


def _interconnect(section: Any, where: str) -> Interconnect | None:
    if section is None:
        return None
    here = f"{where}: interconnect"
    check_keys(section, _INTERCONNECT_KEYS, here)
    return Interconnect(
        name=text_field(section, "name", here),
        bandwidth_bytes_per_s_per_direction=positive(section, "bandwidth_gb_per_s_per_direction", here) * 1e9,
        latency_s=positive(section, "latency_us", here) * 1e-6,
        max_num_gpus=count_field(section, "max_num_gpus", here),
    )


def _scale_out(section: Any, where: str) -> ScaleOut:
    here = f"{where}: scale_out"
    check_keys(section, {k: True for k in _SCALE_OUT_KEYS}, here)
    return ScaleOut(name=text_field(section, "name", here),
                    bandwidth_bytes_per_s_per_direction=positive(section, "bandwidth_gb_per_s_per_direction",
                                                                 here) * 1e9,
                    gpus_per_node=count_field(section, "gpus_per_node", here))


def _mapping_or_none(section: Any, key: str, where: str) -> dict[str, Any] | None:
    if section is not None and not isinstance(section, dict):
        raise UserError(f"{where}: {key}: must be a mapping, got {type(section).__name__}")
    return section


def _weight_streaming(section: Any, kind: str, where: str) -> tuple[tuple[str, StreamingCurve], ...]:
    if section is None:
        return ()
    here = f"{where}: weight_streaming"
    if kind != "cpu":
        raise UserError(f"{here}: only a cpu profile has one (its CPU engines' GEMM kernels); remove it")
    check_keys(section, {e: False for e in STREAMING_ENGINES}, here)
    curves = []
    for engine in STREAMING_ENGINES:
        if engine not in section:
            continue
        entry, at = section[engine], f"{here}.{engine}"
        check_keys(entry, _STREAMING_KEYS, at)
        kernel = text_field(entry, "kernel", at)
        rows, rates, spread = entry["rows"], entry["gb_per_s"], entry["spread"]
        if (not isinstance(rows, list) or not rows or rows[0] != 1 or len(rows) < 2
                or not all(isinstance(r, int) and not isinstance(r, bool) for r in rows)
                or any(b <= a for a, b in zip(rows, rows[1:]))):
            raise UserError(f"{at}.rows: must be increasing integers starting at 1 (at least two), got {rows!r}")
        for key, values in (("gb_per_s", rates), ("spread", spread)):
            if (not isinstance(values, list) or len(values) != len(rows) or not all(is_number(v) for v in values)
                    or not all(v > 0 if key == "gb_per_s" else v >= 0 for v in values)):
                raise UserError(f"{at}.{key}: must be one {'positive' if key == 'gb_per_s' else 'non-negative'} "
                                f"number per row count ({len(rows)}), got {values!r}")
        curves.append((engine, StreamingCurve(kernel, tuple(rows), tuple(float(v) * 1e9 for v in rates),
                                              tuple(float(v) for v in spread))))
    return tuple(curves)


def _measured(section: Any, where: str) -> dict[str, Any] | None:
    if section is None:
        return None
    check_keys(section, {k: k in ("date", "machine") for k in _MEASURED_KEYS}, f"{where}: measured")
    return section


# ---- sources --------------------------------------------------------------------------------------------


# ---- kernel families --------------------------------------------------------------------------------------


def family_dirs(base_dir: Path | None = None) -> list[Path]:
    """Where family files are looked up: `base_dir/families` (beside a profile given by path), then the shipped
    `hardware_profiles/families`."""
    shipped = data_dir("hardware_profiles") / FAMILIES_DIR
    local = [] if base_dir is None else [Path(base_dir) / FAMILIES_DIR]
    return [d for d in dict.fromkeys(local + [shipped]) if d.is_dir()]


def list_families(base_dir: Path | None = None) -> list[str]:
    return sorted({p.stem for d in family_dirs(base_dir) for p in d.glob("*.yaml")})


def family_path(name: str, base_dir: Path | None = None) -> Path | None:
    for folder in family_dirs(base_dir):
        if (folder / f"{name}.yaml").is_file():
            return folder / f"{name}.yaml"
    return None


def load_family(name: str, base_dir: Path | None = None) -> dict[str, Any]:
    """A validated family mapping (YAML units) by name; an unknown name is a UserError listing the known ones."""
    path = family_path(name, base_dir)
    if path is None:
        raise UserError(f"family: {name!r} is not allowed; allowed: {', '.join(list_families(base_dir))}")
    return _parse_family(read_profile_dict(path), str(path))


def _parse_family(data: dict[str, Any], where: str) -> dict[str, Any]:
    check_keys(data, _FAMILY_KEYS, where)
    family_id = text_field(data, "id", where)
    if Path(where).stem != family_id:
        raise UserError(f"{where}: id: {family_id!r} must equal the file name '{Path(where).stem}'")
    text_field(data, "name", where)
    # Parsed for their errors (unknown fields, ranges); the merged values are parsed again per chip.
    EfficiencyParams.from_dict(data["efficiency"], f"{where}: efficiency")
    ExecutorParams.from_dict(data["executor"], f"{where}: executor")
    if data.get("host") is not None:
        HostCpu.from_dict(data["host"], f"{where}: host")
    per_chip = data.get("per_chip") or {}
    if not isinstance(per_chip, dict):
        raise UserError(f"{where}: per_chip: must be a mapping of chip id -> {{efficiency: {{...}}}}")
    for chip, section in per_chip.items():
        check_keys(section, {"efficiency": True, SECTION: False}, f"{where}: per_chip.{chip}")
        EfficiencyParams.from_dict({**data["efficiency"], **section["efficiency"]},
                                   f"{where}: per_chip.{chip}.efficiency")
    _mapping_or_none(data.get("fit"), "fit", where)
    if data.get("uncertainty") is not None:
        check_section(data["uncertainty"], where)
    check_sources(data, where, _FAMILY_UNSOURCED)
    return data


def _family(data: dict[str, Any], where: str, base_dir: Path | None) -> dict[str, Any] | None:
    name = data.get("family")
    if name is None:
        return None
    if not isinstance(name, str) or not name.strip():
        raise UserError(f"{where}: family: must be a family name; allowed: {', '.join(list_families(base_dir))}")
    if family_path(name, base_dir) is None:
        raise UserError(f"{where}: family: {name!r} is not allowed; allowed: {', '.join(list_families(base_dir))}")
    return load_family(name, base_dir)


def _held_out(errors: dict[str, Any] | None) -> tuple[tuple[str, float, float, float], ...]:
    """(kind, median, p90, bias) fractions from a fit record's {kind: {median_pct, p90_pct, bias_pct}}."""
    rows = []
    for kind, e in (errors or {}).items():
        rows.append((kind, e["median_pct"] / 100, e["p90_pct"] / 100, e["bias_pct"] / 100))
    return tuple(rows)


def _provenance(profile: HardwareProfile, family: dict[str, Any] | None) -> Provenance:
    if profile.calibration is not None:
        record = profile.calibration
        return Provenance("calibrated", profile.family, f"{record.get('source', '?')}, {record.get('date', '?')}")
    if family is None and profile.measured is not None:
        record = profile.measured
        return Provenance("measured", fitted_on=f"roofline profile-device on {record.get('machine', '?')}, "
                                                f"{record.get('date', '?')}")
    if family is None:
        note = f"no measured operator tables for {profile.vendor} kernels" if profile.kind == "gpu" else ""
        return Provenance("datasheet-only", note=note)
    fit = family.get("fit") or {}
    fitted_on = str(fit.get("fitted_on", "not fitted: assumed values, see the family file's sources"))
    held_out = (fit.get("held_out") or {}).get(profile.id)
    if held_out is not None:
        return Provenance("fitted", family["id"], fitted_on, _held_out(held_out))
    return Provenance("family", family["id"], fitted_on, _held_out(fit.get("expected_without_tables")),
                      note=str(fit.get("note_without_tables", "")))
