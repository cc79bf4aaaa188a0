"""The rows of aiconfigurator-core's `silicon_sample.csv`, read for `benchmarks/accuracy/e2e_accuracy.py`: what
each vLLM row measured, under which deployment, and either the simulator's inputs for it or why it is skipped.

    rows = read_silicon_rows()                     # every vLLM agg row of the installed package (0.12.0)
    for row in rows:
        case = resolve_row(row)                    # a SimCase, or a Skip with reasons from the closed list
                                                   # (RowError: the row itself is inconsistent: a miss)

The file is a judge only: nothing here is fitted on it. What it does not record is assumed once, here, and
listed in `ASSUMPTIONS` (the report prints them).

Columns (aiconfigurator `tools/accuracy_regression_testing/predict_silicon_sample.py` reads the same ones):
`batch_size` is per attention-data-parallel rank, so the benchmark client's concurrency is
`batch_size x attention_dp_size`; it is checked against the `silicon_concurrency=N` the row's
`silicon_data_source` records. A deployment uses `tp_size x pp_size x attention_dp_size` GPUs.
`silicon_ttft_ms` / `silicon_tpot_ms` are the means `vllm bench serve` reports (aiconfigurator's campaign writes
`bench["metrics"]["mean_ttft"] * 1000` into this column).
"""

from __future__ import annotations

import enum
import json
import math
import re
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import pandas as pd
import yaml

from engine.core.model_spec import checkpoint_quant
from roofline.cost.hardware import load_profile
from roofline.cost.quant import QUANTIZATION_CHOICES
from roofline.engine_args import EngineArgs, version_async_scheduling
from roofline.errors import UserError
from roofline.judge.harness import (
    copied_from,
    harness_of,
    launch_layout,
    measured_date,
    unrecorded_client,
)
from roofline.registry import list_ids, load_model

PEER_PACKAGE = "aiconfigurator-core"
PEER_VERSION = "0.12.0"

# aiconfigurator system folder -> this project's hardware profile id.
SYSTEM_PROFILES = {
    "h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200",
    "a100_sxm": "a100-80gb-sxm", "h100_pcie": "h100-pcie", "l40s": "l40s", "l4": "l4",
}

# Checkpoints the package's model_configs/ does not hold under the row's name, and the cached config of the same
# architecture and shapes used instead (HF renamed meta-llama/Meta-Llama-3.1-* to meta-llama/Llama-3.1-*; NVIDIA's
# FP8 checkpoint keeps Llama-3.1-8B-Instruct's shapes and only quantizes its linear layers).
MODEL_ALIASES = {
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
}
# Quantized checkpoints whose quantization config is not in the package: what their model card states.
# nvidia/Llama-3.1-8B-Instruct-FP8: ModelOpt FP8, per-tensor weights and activations of the decoder's linear
# layers (https://huggingface.co/nvidia/Llama-3.1-8B-Instruct-FP8); its 70B sibling's hf_quant_config in the
# package says the same (quant_algo FP8).
CHECKPOINT_QUANTIZATION = {"nvidia/Llama-3.1-8B-Instruct-FP8": "fp8"}

# The engine flags `vllm serve` chose by itself for these rows: vLLM 0.11.2-0.19.0 and the nightly of 2026-04
# give GPUs of >= 70 GiB (A100s excepted) max_num_batched_tokens 8192 and max_num_seqs 1024 in the API server
# (vllm/engine/arg_utils.py, PRs #17073 and #17885); the 16384 tier for >= 160 GiB came with PR #51726
# (2026-08-10), after every release in the file. gpu_memory_utilization 0.9 (vllm/config/cache.py up to 0.19;
# 0.92 from 0.22). Chunked prefill and prefix caching on, block size 16, KV cache in the model dtype: V1 defaults.
VERSION_BATCH_DEFAULTS = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}
LARGE_GPU_MIN_BYTES = 70 * 2 ** 30
API_SERVER_COUNT_DP_DEFAULT_SINCE = (0, 17)  # `api_server_count_default`


# A row whose model length does not fit its KV cache: vLLM refuses to start with the model's max_model_len, so the
# measured run set --max-model-len (a length, or -1 for vLLM's auto-fit), which the file does not record.
AUTO_FIT_NOTE = ("Where one request of the model's max_model_len does not fit the KV cache, vLLM would not start, "
                 "so the run set a shorter --max-model-len (not recorded)")

ASSUMPTIONS = (
    "Client: `vllm bench serve`-style closed loop, `--max-concurrency N --request-rate inf`, random prompts (no "
    "prefix hits), ignore_eos; N = batch_size x attention_dp_size. On the rows InferenceX measured, its client's new "
    "connection per request: 2.5 ms of client time per request on the reference host inside the TTFT clock "
    "(`checks.INFERENCEX_CLIENT_S`, measured by benchmarks/ground_truth/client_overhead.py).",
    "Request lengths: uniform integers in [int(0.8 L), L] for isl and osl independently: the random dataset of "
    "InferenceX's harness (`--random-range-ratio 0.8`, benchmark_serving.py's `np.random.randint(int(L * r), L + 1)`); "
    "the Llama-3.1-70B / gpt-oss rows are its grid (TP 2/4/8, concurrency 4-64, 1k/1k, 1k/8k, 8k/1k), the file "
    "records only isl / osl. Sensitivity: exactly isl / osl tokens.",
    "Number of prompts: 10 x N (InferenceX: `--num-prompts $((CONC * 10))`); sensitivity: 5 x N, and the steady "
    "state (requests 2N..8N of the 10 x N run).",
    "Engine flags of InferenceX's rows whose recipe is public (`INFERENCEX_HARNESS`: Llama-3.1-70B on H100 / H200 / "
    "B200, gpt-oss-120b on H100 / H200 / B200 at 2025-11-02, 0.18.0 on H100 / H200 and 0.15.1 on B200, "
    "MiniMax-M2.5 per GPU, version and precision, Kimi-K2.5 fp4 on B200 per date): the recipe's "
    "at the row's date, where the simulator expresses them (fp8 KV cache, --async-scheduling, --moe-backend marlin "
    "for VLLM_MXFP4_USE_MARLIN=1, --moe-backend flashinfer-mxfp4-mxfp8 for VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1, "
    "--float32-matmul-precision high for VLLM_FLOAT32_MATMUL_PRECISION=high, --cudagraph-mode for the compilation "
    "config's cudagraph_mode, --max-cudagraph-capture-size for `cuda-graph-sizes` / `--max-cudagraph-capture-size` "
    "(gpt-oss 2025-11, MiniMax-M2.5 0.19, Kimi-K2.5 B200 from 2026-04-20), --max-num-seqs, "
    "--max-num-batched-tokens, --block-size, "
    "--gpu-memory-utilization, prefix caching off where the script turns it off); the rest is named per row. Their "
    "parallel layout is the one the recipe's single-node script launched (`launch_layout`), not the row's labels: "
    "--tensor-parallel-size tp, no --data-parallel-size (the file's rows of a sweep's `{ tp: T, ep: T }` read "
    "attention_dp T, moe_ep T x T), --enable-expert-parallel where the script passes it (EP_SIZE > 1; always for "
    "MiniMax-M2.5 0.17.0 B200 and 0.18.0 H200, never for Kimi-K2.5 B200 and MiniMax-M2.5 0.16.0 H200), TP 1 x DP tp "
    "with EP for the MiniMax-M2.5 fp4 configurations run on the script's DP_ATTENTION branch. "
    "Every other row: the defaults of `vllm serve` of the row's version (0.11.2-0.19.0, nightly 2026-04; rows "
    "without a version were measured 2025-10-29 to 2025-12-05, i.e. 0.11-0.12): max_num_batched_tokens 8192, "
    "max_num_seqs 1024, gpu_memory_utilization 0.9, chunked prefill and prefix caching on, block size 16, "
    "max_model_len from the model's config, KV cache dtype auto, CUDA graphs captured up to min(2 x max_num_seqs, "
    "512) tokens (1,024 for gpt-oss). " + AUTO_FIT_NOTE + ": simulated with "
    "--max-model-len -1, vLLM's auto-fit to the longest request the KV cache holds (the length does not change "
    "the simulated steps of requests that fit, only the start-up check).",
    "Mean, not median: the file's TTFT/TPOT are the means `vllm bench serve` prints (aiconfigurator's "
    "campaign stores metrics.mean_ttft / mean_tpot); the simulator's are means over the same requests. "
    "The report also gives the simulated medians' distance from the means.",
    "Quantization: a quantized checkpoint's own config (block-scaled FP8 -> fp8-block, ModelOpt/per-tensor FP8 "
    "-> fp8); an unquantized checkpoint gets the --quantization its precision column implies (fp8 -> fp8); an "
    "empty precision with an empty gemm_quant_mode is the checkpoint's dtype (bf16).",
    "attention_dp_size empty = 1 (every such row's silicon_concurrency equals batch_size).",
    "Data / expert parallelism (a MoE model without an InferenceX recipe): --data-parallel-size attention_dp_size "
    "(or the DP the experts' width implies), --enable-expert-parallel where moe_ep_size > 1, vLLM's default "
    "--all2all-backend allgather_reducescatter (no row records one), no EPLB; over two nodes "
    "--data-parallel-size-local = GPUs per node / TP, the all-to-all across nodes over the profile's scale_out NICs "
    "(unmeasured). A dense model's data parallelism is skipped.",
    "API-server processes: vLLM's default, the data-parallel size from 0.17.0 on (`vllm serve` with internal "
    "load balancing), 1 before and without data parallelism.",
    "Asynchronous scheduling: vLLM's default from 0.14.0 on (PR #27614), so on for 0.15-0.19 and the 2026 nightly "
    "and off (`--no-async-scheduling`: host time between the GPU's steps) for 0.11.2, 0.12.0 and the unversioned "
    "rows of 2025-10/12; a harness that passed --async-scheduling itself is not recorded.",
)


class SkipReason(enum.Enum):
    """Why a row is not simulated: the closed list. Anything else that stops a row is a miss."""

    ARCHITECTURE = "model architecture not modelled"
    PRECISION = "precision not modelled"
    GPU = "GPU without a profile"
    PARALLELISM = "data/expert parallelism not modelled"
    MULTI_NODE = "multi-node"


class RowError(ValueError):
    """The row contradicts itself or cannot be read: counted as a miss, never as a skip."""


@dataclass(frozen=True)
class SiliconRow:
    """One measured vLLM agg run; times in seconds."""

    row_id: str
    model_path: str
    system: str
    backend_version: str | None
    precision: str | None
    gemm_quant_mode: str | None
    moe_quant_mode: str | None
    isl: int
    osl: int
    batch_size: int  # per attention-DP rank
    tp_size: int
    pp_size: int
    attention_dp_size: int
    moe_tp_size: int | None
    moe_ep_size: int | None
    measured_ttft_s: float
    measured_tpot_s: float
    source: str

    @property
    def concurrency(self) -> int:
        return self.batch_size * self.attention_dp_size

    @property
    def num_gpus(self) -> int:
        return self.tp_size * self.pp_size * self.attention_dp_size

    @property
    def group(self) -> tuple[str, str, str, int]:
        """(model, GPU, precision, TP): the report's grouping."""
        return (self.model_path, self.system, self.precision or "(none)", self.tp_size)


@dataclass(frozen=True)
class SimCase:
    """What the simulator runs for a row."""

    row: SiliconRow
    config_path: Path  # the HF config.json the model is read from
    hardware_id: str
    engine: EngineArgs
    concurrency: int
    notes: tuple[str, ...] = ()  # row-specific assumptions (aliases, quantization source)
    api_server_count: int = 1  # `vllm serve`'s API-server processes (`api_server_count_default`)


@dataclass(frozen=True)
class Skip:
    row: SiliconRow
    reasons: tuple[SkipReason, ...]  # in SkipReason order; reasons[0] is the one the counts use
    details: tuple[str, ...]


# ---- reading ------------------------------------------------------------------------------------------------------


def package_dir() -> Path:
    """The installed aiconfigurator_core package; ImportError names the extra to install."""
    try:
        import aiconfigurator_core
    except ImportError as exc:  # pragma: no cover - the test skips without the package
        raise ImportError("benchmarks/accuracy/e2e_accuracy.py reads the measured runs of "
                          f"{PEER_PACKAGE}=={PEER_VERSION}: "
                          "pip install -e '.[benchmarks]'") from exc
    return Path(aiconfigurator_core.__file__).resolve().parent


def silicon_csv_path() -> Path:
    return package_dir() / "systems" / "silicon_sample.csv"


def read_silicon_rows(path: Path | None = None) -> list[SiliconRow]:
    """Every vLLM `agg` row of the file, in file order (a row that cannot be read raises RowError)."""
    frame = pd.read_csv(path or silicon_csv_path(), dtype={"backend_version": str})
    frame = frame[(frame.backend == "vllm") & (frame["mode"] == "agg")]
    return [parse_row(record) for record in frame.to_dict("records")]


def parse_row(record: dict) -> SiliconRow:
    """One CSV record -> SiliconRow, checking concurrency against `silicon_concurrency=` of the source."""
    row_id = str(record["id"])
    where = f"row {row_id}"
    dp = _count(record.get("attention_dp_size"), f"{where}: attention_dp_size", default=1)
    batch_size = _count(record.get("batch_size"), f"{where}: batch_size")
    source = str(record.get("silicon_data_source") or "")
    match = re.search(r"silicon_concurrency=(\d+)", source)
    if match and int(match.group(1)) != batch_size * dp:
        raise RowError(f"{where}: batch_size {batch_size} x attention_dp_size {dp} = {batch_size * dp}, but the "
                       f"source records silicon_concurrency={match.group(1)}")
    ttft_ms, tpot_ms = _positive(record.get("silicon_ttft_ms")), _positive(record.get("silicon_tpot_ms"))
    if ttft_ms is None or tpot_ms is None:
        raise RowError(f"{where}: silicon_ttft_ms / silicon_tpot_ms must be positive numbers")
    return SiliconRow(
        row_id=row_id, model_path=str(record["model_path"]), system=str(record["system"]),
        backend_version=_text(record.get("backend_version")), precision=_text(record.get("precision")),
        gemm_quant_mode=_text(record.get("gemm_quant_mode")), moe_quant_mode=_text(record.get("moe_quant_mode")),
        isl=_count(record.get("isl"), f"{where}: isl"), osl=_count(record.get("osl"), f"{where}: osl"),
        batch_size=batch_size, tp_size=_count(record.get("tp_size"), f"{where}: tp_size"),
        pp_size=_count(record.get("pp_size"), f"{where}: pp_size", default=1), attention_dp_size=dp,
        moe_tp_size=_optional_int(record.get("moe_tp_size")), moe_ep_size=_optional_int(record.get("moe_ep_size")),
        measured_ttft_s=ttft_ms / 1e3, measured_tpot_s=tpot_ms / 1e3, source=source)


# ---- resolving ----------------------------------------------------------------------------------------------------


def resolve_row(row: SiliconRow) -> SimCase | Skip:
    """The simulator's inputs for `row`, or every reason from the closed list that stops it. RowError (a miss) when
    the row cannot be read: its MoE layout contradicts its TP, or its recipe ran a client the row does not record
    (`UNRECORDED_CLIENT`)."""
    reasons: dict[SkipReason, str] = {}
    notes: list[str] = []
    per_node = gpus_per_node(row.system)
    hardware_id = SYSTEM_PROFILES.get(row.system)
    # A row of an InferenceX recipe runs the layout its script launched, whatever its parallel labels say
    # (`launch_layout`); the others their labels.
    harness = harness_of(row)
    launch = None if harness is None else launch_layout(row, harness)
    num_gpus = row.num_gpus if launch is None else launch.tensor_parallel_size * launch.data_parallel_size
    # More GPUs than a node holds: data-parallel ranks over nodes where the profile describes the network between
    # them (`scale_out:`, issue 40), else a skip.
    multi_node = num_gpus > per_node
    if multi_node and (row.pp_size > 1 or row.tp_size > per_node or row.attention_dp_size == 1 or hardware_id is None
                       or hardware_id not in list_ids("hardware") or load_profile(hardware_id).scale_out is None):
        reasons[SkipReason.MULTI_NODE] = (f"{row.num_gpus} GPUs (tp {row.tp_size} x pp {row.pp_size} x dp "
                                          f"{row.attention_dp_size}) > {per_node} per {row.system} node")
    if hardware_id is None or hardware_id not in list_ids("hardware"):
        reasons[SkipReason.GPU] = f"no hardware profile for {row.system}"
    served, config_path, config_note = served_checkpoint(row)
    if config_note:
        notes.append(config_note)
    raw = json.loads(config_path.read_text())
    spec = None
    try:
        spec = load_model(config_path)
    except UserError as exc:
        if "architecture" not in str(exc):
            raise RowError(f"row {row.row_id}: {exc}") from None
        reasons[SkipReason.ARCHITECTURE] = f"{(raw.get('architectures') or ['?'])[0]}"
    quantization, quant_note = row_quantization(row, served, raw)
    if quantization is None:
        reasons[SkipReason.PRECISION] = quant_note
    else:
        notes.append(quant_note)
    is_moe = spec.is_moe if spec is not None else _config_is_moe(raw)
    moe_width = (row.moe_tp_size or 1) * (row.moe_ep_size or 1)
    # vLLM runs the experts over all tp x dp GPUs, their TP flattened across the data-parallel ranks when expert
    # parallelism is off (`FusedMoEParallelConfig.flatten_tp_across_dp`, vllm/model_executor/layers/fused_moe/
    # config.py): experts over a multiple of attention's TP, attention_dp empty, are data parallelism not recorded.
    implied_dp = moe_width // row.tp_size if row.attention_dp_size == 1 and moe_width % row.tp_size == 0 else 1
    if is_moe and moe_width != row.tp_size * max(row.attention_dp_size, implied_dp):
        # A row whose MoE layout spans another width cannot be read.
        raise RowError(f"row {row.row_id}: moe_tp {row.moe_tp_size} x moe_ep {row.moe_ep_size} = {moe_width} GPUs for "
                       f"the experts, but tp {row.tp_size} x attention_dp {row.attention_dp_size} = "
                       f"{row.tp_size * row.attention_dp_size} for attention")
    # Data / expert parallelism (issue 40): a MoE model's DP ranks (attention_dp, or the unrecorded DP its experts'
    # width implies) and --enable-expert-parallel (moe_ep > 1) are simulated (`roofline.sim.data_parallel`), or,
    # for a row of an InferenceX recipe, the TP, DP and EP its script passed; a dense model's DP ranks are not
    # modelled.
    data_parallel = max(row.attention_dp_size, implied_dp) if is_moe else row.attention_dp_size
    expert_parallel = is_moe and row.tp_size * data_parallel > 1 and (row.moe_ep_size or 1) > 1
    tensor_parallel = row.tp_size
    if launch is not None and (launch.tensor_parallel_size, launch.data_parallel_size, launch.expert_parallel) != (
            row.tp_size, data_parallel, expert_parallel):
        notes.append(f"launched as its recipe's script runs it: --tensor-parallel-size {launch.tensor_parallel_size}"
                     + (f" --data-parallel-size {launch.data_parallel_size}" if launch.data_parallel_size > 1 else "")
                     + (" --enable-expert-parallel" if launch.expert_parallel else ", no --enable-expert-parallel")
                     + f" (the row reads tp {row.tp_size}, attention_dp {row.attention_dp_size}, moe_tp "
                     f"{row.moe_tp_size}, moe_ep {row.moe_ep_size})")
    if launch is not None:
        tensor_parallel, data_parallel = launch.tensor_parallel_size, launch.data_parallel_size
        expert_parallel = is_moe and tensor_parallel * data_parallel > 1 and launch.expert_parallel
    if not is_moe and row.attention_dp_size > 1:
        reasons[SkipReason.PARALLELISM] = f"attention data parallelism {row.attention_dp_size} of a dense model"
    if reasons:
        ordered = tuple(r for r in SkipReason if r in reasons)
        return Skip(row, ordered, tuple(reasons[r] for r in ordered))
    if (defect := unrecorded_client(row)) is not None:
        raise RowError(f"row {row.row_id}: the run's server configuration is not recorded: {defect.reason}")
    assert spec is not None and quantization is not None and hardware_id is not None
    if harness is not None:
        if (original := copied_from(row)) is not None:
            notes.append(f"the measurement of InferenceX's row {original.row_id} (measured {measured_date(original)}; "
                         "the same mean TTFT and TPOT to 5 significant digits)")
        notes.append(f"engine flags of InferenceX's recipe {harness.source}"
                     + (f"; not modelled: {harness.not_modelled}" if harness.not_modelled else ""))
    local = per_node // tensor_parallel if multi_node else None
    if data_parallel > 1 or expert_parallel:
        notes.append(f"--data-parallel-size {data_parallel}" + (" --enable-expert-parallel" if expert_parallel else "")
                     + (f" --data-parallel-size-local {local} (over {num_gpus // per_node} nodes; the all-to-all "
                        "across nodes is unmeasured)" if local else "")
                     + " with vLLM's default --all2all-backend allgather_reducescatter (the row records no backend)")
    engine = replace(engine_args_for(row, quantization, data_parallel, expert_parallel, tensor_parallel),
                     data_parallel_size_local=local)
    api_servers = api_server_count_default(row.backend_version, data_parallel)
    if api_servers > 1:
        notes.append(f"--api-server-count {api_servers}: vLLM's default with --data-parallel-size {data_parallel}")
    return SimCase(row, config_path, hardware_id, engine, row.concurrency, tuple(notes), api_servers)


def api_server_count_default(version: str | None, data_parallel_size: int) -> int:
    """`vllm serve`'s API-server processes when the run did not set them: the data-parallel size from 0.17.0 on
    (vllm/entrypoints/cli/serve.py `ServeSubcommand.cmd`, internal load balancing; read in 0.17.0 and 0.32.0), 1
    before (0.12.0's `--api-server-count` defaults to 1; read). Every data-parallel row of the file is 0.12.0 or
    0.17.0-0.19.0 (the versions between were not read)."""
    if data_parallel_size == 1 or version is None:
        return 1
    if version.startswith("nightly"):
        return data_parallel_size
    major, minor = (int(x) for x in version.split(".")[:2])
    return data_parallel_size if (major, minor) >= API_SERVER_COUNT_DP_DEFAULT_SINCE else 1


def async_scheduling_default(version: str | None) -> bool:
    """Whether `vllm serve` of `version` schedules asynchronously by default: from 0.14.0 on (release notes; PR
    #27614). Rows without a version were measured 2025-10-29 to 2025-12-05 (0.11-0.12): off; nightlies of 2026:
    on."""
    if version is None:
        return False
    if version.startswith("nightly"):
        return True
    major, minor = (int(x) for x in version.split(".")[:2])
    return version_async_scheduling((major, minor))


def kv_vllm_version(version: str | None) -> str:
    """The vLLM release whose memory profile sizes the row's KV cache (`roofline.cost.kv_capacity`): the row's;
    rows without one were measured 2025-10-29 to 2025-12-05 (0.11-0.12, the same profile: 0.11.0); the 2026
    nightlies after the last release in the file (0.19.0)."""
    if version is None:
        return "0.11.0"
    if version.startswith("nightly"):
        return "0.19.0"
    return version


def engine_args_for(row: SiliconRow, quantization: str, data_parallel_size: int = 1,
                    expert_parallel: bool = False, tensor_parallel_size: int | None = None) -> EngineArgs:
    """vLLM's flags for the row: its version's defaults (see VERSION_BATCH_DEFAULTS and
    `async_scheduling_default`), its TP (the row's unless given), DP, expert parallelism and quantization; over
    them, the flags of its InferenceX recipe (`harness_of`)."""
    flags: dict[str, object] = dict(VERSION_BATCH_DEFAULTS, async_scheduling=async_scheduling_default(row.backend_version))
    harness = harness_of(row)
    if harness is not None:
        per_row = {"CONC": row.concurrency, "2*ISL": 2 * row.isl}
        flags.update({k: per_row.get(v, v) if isinstance(v, str) else v for k, v in harness.flags.items()})
    flags.update(data_parallel_size=data_parallel_size, enable_expert_parallel=expert_parallel)
    return EngineArgs(tensor_parallel_size=row.tp_size if tensor_parallel_size is None else tensor_parallel_size,
                      quantization=quantization, **flags)  # type: ignore[arg-type]


FP4_PRECISIONS = ("fp4", "nvfp4", "mxfp4")
# The checkpoint schemes a precision column value agrees with (FP4 precisions are handled apart).
_CHECKPOINTS_OF_PRECISION = {"fp8": ("fp8", "fp8-block"),
                             "int4": ("awq", "gptq", "w4a16-int4", "compressed-tensors int4")}


def served_checkpoint(row: SiliconRow) -> tuple[str, Path, str]:
    """(the checkpoint served, its config.json in the package, a note when it is not the row's model_path).

    A row with FP4 precision on a checkpoint that is not FP4 ran NVIDIA's NVFP4 checkpoint of the model (vLLM
    cannot quantize to FP4 online): `nvidia/<name>-NVFP4` when the package ships its config; otherwise the row's
    config, quantized with --quantization nvfp4 (`row_quantization`)."""
    config_path, note = model_config_path(row.model_path)
    if _precision(row) in FP4_PRECISIONS:
        own = checkpoint_quantization(row.model_path, json.loads(config_path.read_text()))
        if own not in ("nvfp4", "mxfp4"):
            nvfp4 = f"nvidia/{row.model_path.split('/')[-1]}-NVFP4"
            path = package_dir() / "model_configs" / f"{nvfp4.replace('/', '--')}_config.json"
            if path.exists():
                return nvfp4, path, f"precision {_precision(row)} on {row.model_path}: served {nvfp4}"
    return row.model_path, config_path, note


def row_quantization(row: SiliconRow, served: str, raw_config: dict) -> tuple[str | None, str]:
    """(the --quantization the simulator runs, how it was decided) or (None, why the precision is not modelled).
    A scheme is modelled when `roofline.cost.quant` has it (QUANTIZATION_CHOICES)."""
    checkpoint = checkpoint_quantization(served, raw_config)
    precision = _precision(row)
    if precision in FP4_PRECISIONS and checkpoint not in ("nvfp4", "mxfp4"):
        scheme, how = "nvfp4", f"precision {precision}: NVIDIA's NVFP4 checkpoint as --quantization nvfp4"
    elif checkpoint is not None:
        scheme, how = checkpoint, f"checkpoint's own quantization: {checkpoint}"
        if precision is not None and checkpoint not in _CHECKPOINTS_OF_PRECISION.get(precision, (checkpoint,)):
            return None, f"precision {precision} on a {checkpoint} checkpoint: which checkpoint ran is unknown"
    elif precision is None:
        scheme, how = "none", "precision and gemm_quant_mode empty: the checkpoint's dtype (assumed, bf16)"
    elif precision == "fp8":
        scheme, how = "fp8", "unquantized checkpoint, precision fp8: --quantization fp8 (dynamic per-tensor)"
    else:
        return None, f"precision {precision} (no such scheme on an unquantized checkpoint)"
    if scheme not in QUANTIZATION_CHOICES:
        return None, f"{how}: not a modelled scheme (modelled: {', '.join(QUANTIZATION_CHOICES)})"
    return scheme, how


def _precision(row: SiliconRow) -> str | None:
    """The row's precision column, or its gemm_quant_mode where that is empty."""
    return row.precision or row.gemm_quant_mode


def checkpoint_quantization(model_path: str, raw_config: dict) -> str | None:
    """The checkpoint's own scheme (`roofline.cost.quant` names where they exist: fp8, fp8-block, mxfp4, nvfp4),
    another scheme's name, or None for an unquantized checkpoint."""
    if model_path in CHECKPOINT_QUANTIZATION:
        return CHECKPOINT_QUANTIZATION[model_path]
    text_config = raw_config.get("text_config")
    text = text_config if isinstance(text_config, dict) else {}
    config = raw_config.get("quantization_config") or text.get("quantization_config")
    quant_file = package_dir() / "model_configs" / f"{model_path.replace('/', '--')}_hf_quant_config.json"
    if config is None and quant_file.exists():  # ModelOpt checkpoints: hf_quant_config.json
        algo = str((json.loads(quant_file.read_text()).get("quantization") or {}).get("quant_algo")).upper()
        return {"FP8": "fp8", "NVFP4": "nvfp4"}.get(algo, algo.lower())
    if config is None:
        return None
    method = str(config.get("quant_method", "")).lower()
    if method == "modelopt":
        algo = str(config.get("quant_algo", "")).upper()
        return {"FP8": "fp8", "NVFP4": "nvfp4"}.get(algo, f"modelopt {algo.lower()}")
    if method == "fp8":
        return "fp8-block" if config.get("weight_block_size") else "fp8"
    if method == "compressed-tensors":
        try:  # the schemes the model reader knows (W4A16 int4, group 32: "w4a16-int4")
            return checkpoint_quant(config, f"model {model_path}").method  # type: ignore[union-attr]
        except ValueError:
            pass
        groups = config.get("config_groups") or {}
        bits = {g.get("weights", {}).get("num_bits") for g in groups.values() if isinstance(g, dict)} - {None}
        return f"compressed-tensors int{min(bits)}" if bits else "compressed-tensors"
    return method or "unknown"


def model_config_path(model_path: str) -> tuple[Path, str]:
    """The package's cached config.json for the row's checkpoint (or its alias) and a note when aliased."""
    folder = package_dir() / "model_configs"
    path = folder / f"{model_path.replace('/', '--')}_config.json"
    if path.exists():
        return path, ""
    alias = MODEL_ALIASES.get(model_path)
    if alias is not None and (folder / f"{alias.replace('/', '--')}_config.json").exists():
        return (folder / f"{alias.replace('/', '--')}_config.json",
                f"{model_path}: config of {alias} (same architecture and shapes; not in model_configs under its name)")
    raise RowError(f"model {model_path}: no config.json in {PEER_PACKAGE}'s model_configs and no alias")


@cache
def gpus_per_node(system: str) -> int:
    """`node.num_gpus_per_node` of the package's system YAML (8 on HGX H100/H200/B200/B300)."""
    path = package_dir() / "systems" / f"{system}.yaml"
    if not path.exists():
        raise RowError(f"system {system}: no {path.name} in {PEER_PACKAGE}")
    return int(yaml.safe_load(path.read_text())["node"]["num_gpus_per_node"])


def _config_is_moe(raw: dict) -> bool:
    text_config = raw.get("text_config")
    text = text_config if isinstance(text_config, dict) else raw
    return any(text.get(k) for k in ("num_local_experts", "num_experts", "n_routed_experts"))


def _text(value: object) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value).strip()
    return text or None


def _optional_int(value: object) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value)  # type: ignore[call-overload]  # a pandas cell: int, float or str


def _positive(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None


def _count(value: object, where: str, default: int | None = None) -> int:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        if default is None:
            raise RowError(f"{where}: missing")
        return default
    number = float(value)  # type: ignore[arg-type]
    if number != int(number) or number < 1:
        raise RowError(f"{where}: must be a positive integer, got {value!r}")
    return int(number)
