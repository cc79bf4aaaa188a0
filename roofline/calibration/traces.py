"""Step traces as `compare` and `calibrate` read them: the steps, the run metadata, the model spec and dtypes.

    trace = load_trace("traces/chat")      # Trace: steps, RunMetadata, ModelSpec, dtypes, requests.csv
    trace.quant, trace.spec, trace.steps, trace.requests

A trace of this project's engine, of the simulator and of real vLLM read the same way: `engine.core.trace`
validates run.json into one `RunMetadata` (docs/step_trace.md). Bad input is a `UserError` naming the flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from engine.core.model_spec import ModelSpec, RopeScaling
from engine.core.trace import RunMetadata, read_trace
from roofline.cost.hardware import HardwareProfile
from roofline.cost.quant import QuantConfig
from roofline.errors import UserError
from roofline.registry import load_model

# requests.csv columns the end-to-end comparison reads.
REQUEST_COLUMNS = ("arrival_s", "finish_s", "num_prompt_tokens", "num_output_tokens", "ttft_s", "tpot_s")


@dataclass(frozen=True)
class Trace:
    """What compare and calibrate need from a step-trace directory."""

    path: Path
    steps: pd.DataFrame
    metadata: RunMetadata
    spec: ModelSpec
    quant: QuantConfig  # the run's engine_config dtype, quantization and KV-cache dtype
    requests: pd.DataFrame | None  # requests.csv, when the trace has one

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def dtype(self) -> str:
        """--dtype of the run (with --quantization and --kv-cache-dtype: `quant`)."""
        return self.metadata.engine_config.dtype

    @property
    def tensor_parallel_size(self) -> int:
        return self.metadata.engine_config.tensor_parallel_size

    @property
    def cpu_engine(self) -> str:
        """Whose execution a CPU profile describes for this trace (`roofline.cost.cpu.CPU_ENGINES`): real
        vLLM's (`source` "vllm": `roofline.cost.cpu.vllm_cpu`), else this project's engine's (the engine's
        own traces and the simulator's, which predicts with that description by default)."""
        return "vllm-cpu" if self.metadata.source == "vllm" else "roofline-engine"

    def executor(self, hw: HardwareProfile) -> str:
        """The executor description `hw` predicts this trace with: the CPU engine on a `kind: cpu` profile, else
        the GPU executor mode of the profile."""
        return self.cpu_engine if hw.kind == "cpu" else f"gpu {hw.executor.mode}"

    def weight_streaming(self, hw: HardwareProfile) -> str | None:
        """On a `kind: cpu` profile, what it assumes of this trace's engine's GEMM weight streaming by rows (a
        measured curve, or one rate for every row count where the profile has none); None on a GPU profile."""
        return hw.streaming_note(self.cpu_engine) if hw.kind == "cpu" else None


def load_trace(path: str | Path, flag: str = "--trace") -> Trace:
    """Read a trace directory (`engine.core.trace`) and resolve its model spec; bad input is a UserError naming
    the flag and the directory."""
    path = Path(path)
    where = f"{flag} {path}"
    try:
        steps, meta = read_trace(path)
    except ValueError as exc:
        raise UserError(f"{flag}: {exc}") from None
    if len(steps) == 0:
        raise UserError(f"{where}: the trace has no steps")
    if not (steps["duration_s"] > 0).all():
        raise UserError(f"{where}: steps.parquet: duration_s must be positive in every row")
    requests_path = path / "requests.csv"
    requests = _read_requests(requests_path, where) if requests_path.is_file() else None
    spec = _model_spec(meta.model, where)
    ec = meta.engine_config
    try:
        quant = QuantConfig.from_user(dtype=ec.dtype, quantization=ec.quantization, kv_cache_dtype=ec.kv_cache_dtype,
                                      model_dtype=spec.torch_dtype)
    except UserError as exc:
        raise UserError(f"{where}: run.json engine_config: {exc}") from None
    return Trace(path=path, steps=steps.reset_index(drop=True), metadata=meta, spec=spec, quant=quant,
                 requests=requests)


def _read_requests(path: Path, where: str) -> pd.DataFrame:
    requests = pd.read_csv(path)
    missing = [c for c in REQUEST_COLUMNS if c not in requests.columns]
    if missing:
        raise UserError(f"{where}: requests.csv: missing column(s) {', '.join(missing)}; "
                        f"needed: {', '.join(REQUEST_COLUMNS)}")
    return requests


def _model_spec(model: dict[str, Any], where: str) -> ModelSpec:
    """run.json `model`: the spec's fields. A simulator trace written before `RunMetadata` named its model by id
    alone (read as `{"name": id}`): that id is resolved among the shipped models."""
    try:
        if set(model) == {"name"}:
            return load_model(model["name"])
        fields = dict(model)
        if fields.get("rope_scaling") is not None:
            fields["rope_scaling"] = RopeScaling(**fields["rope_scaling"])
        return ModelSpec(**fields)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{where}: run.json model: {exc}") from None
