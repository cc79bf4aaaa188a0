"""The peer for `benchmarks/accuracy/e2e_accuracy.py`: aiconfigurator-core 0.12.0's own estimator on a
silicon_sample.csv row.

Entry point: the core SDK's agg path, `aiconfigurator_core.sdk.backends.factory.get_backend("vllm").run_agg(model,
database, RuntimeConfig(isl, osl, batch_size), ctx_tokens=isl)`, with the model built by
`aiconfigurator_core.sdk.models.get_model` and the measured-operator database of
`aiconfigurator_core.sdk.perf_database.get_database_view`. That is what the upper `aiconfigurator` package's
`cli_estimate(mode="agg")` runs (its default `ctx_tokens=None` means "isl as the budget", and it resolves the
context-FMHA mode, NVFP4 lanes and MoE parallelism the same way first), and what aiconfigurator's own
`tools/accuracy_regression_testing/predict_silicon_sample.py` calls per row: the row's model, system, isl, osl,
batch_size, parallel sizes and quant modes; the row's vLLM version's database when the package ships one, else
the newest (its fallback too).

IN-SAMPLE: the vLLM backend of this package is tuned on this same file (`sdk/backends/vllm_backend.py`: the
per-layer prefill dispatch overhead "recalibrated ... against the full silicon corpus", the TTFT queuing factor
"calibrated to the silicon corpus"), so its errors here are training errors, not predictions.

Runs on the CPU; no network: checkpoints the package does not cache under the row's name use the same alias as
the simulator (`rows.MODEL_ALIASES`), with the row's quant modes.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from roofline.judge.rows import MODEL_ALIASES, SiliconRow

LABEL = "aiconfigurator-core 0.12.0 (in-sample)"


@dataclass(frozen=True)
class PeerEstimate:
    ttft_s: float
    tpot_s: float
    database_version: str
    model_path: str  # as given to aiconfigurator (after aliasing)


def peer_estimate(row: SiliconRow) -> PeerEstimate:
    """aiconfigurator's TTFT/TPOT for the row (ValueError/RuntimeError from the package propagate: a peer miss)."""
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config import RuntimeConfig
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.models.helpers import (
        check_is_moe,
        resolve_context_fmha_by_data,
        resolve_dsv4_moe_arch,
        resolve_nvfp4_for_system,
    )

    model_path = peer_model_path(row.model_path)
    database = _database(row.system, database_version(row))
    moe_tp, moe_ep = row.moe_tp_size or None, row.moe_ep_size or None
    with _quiet():
        if check_is_moe(model_path):
            if moe_tp is None and moe_ep is None:
                moe_ep = 1
        else:
            moe_tp, moe_ep = moe_tp or 1, moe_ep or 1
        # None for an unset MoE size: the package resolves it (`resolve_moe_parallelism` below)
        model_config = build_model_config(row.tp_size, row.pp_size, row.attention_dp_size,
                                          moe_tp, moe_ep,  # type: ignore[arg-type]
                                          gemm_quant_mode=row.gemm_quant_mode, moe_quant_mode=row.moe_quant_mode)
        if check_is_moe(model_path):
            model_config.resolve_moe_parallelism()
        resolve_context_fmha_by_data(model_config, model_path, database, "vllm", is_context_role=True)
        resolve_dsv4_moe_arch(model_config, model_path, system_name=row.system, backend_name="vllm")
        resolve_nvfp4_for_system(model_config, row.system, model_path)
        model = get_model(model_path, model_config, "vllm")
        runtime = RuntimeConfig(isl=row.isl, osl=row.osl, batch_size=row.batch_size)
        summary = get_backend("vllm").run_agg(model, database, runtime, ctx_tokens=row.isl)
    if summary.check_oom():
        raise RuntimeError(f"aiconfigurator: out of memory (tp {row.tp_size}, batch {row.batch_size})")
    result = summary.get_result_dict()
    if result is None:
        raise RuntimeError("aiconfigurator: no result")
    return PeerEstimate(float(result["ttft"]) / 1e3, float(result["tpot"]) / 1e3, database.version, model_path)


def peer_model_path(model_path: str) -> str:
    from aiconfigurator_core.sdk.common import DefaultHFModels

    if model_path in DefaultHFModels:
        return model_path
    return MODEL_ALIASES.get(model_path, model_path)


def database_version(row: SiliconRow) -> str:
    """The row's vLLM version when the package has its operator database, else the newest (0.24.0 for every
    system of the file: the package ships vLLM 0.24.0 and 0.27.0 tables, the rows ran 0.11.2-0.19.0)."""
    from aiconfigurator_core.sdk.perf_database import get_latest_database_version, get_supported_databases

    versions = get_supported_databases().get(row.system, {}).get("vllm", [])
    if row.backend_version in versions:
        return row.backend_version
    latest = get_latest_database_version(system=row.system, backend="vllm")
    if latest is None:
        raise ValueError(f"aiconfigurator: no vLLM database for {row.system}")
    return latest


@cache
def _database(system: str, version: str) -> Any:  # the package's PerfDatabase
    from aiconfigurator_core.sdk.perf_database import get_database_view

    with _quiet():
        database = get_database_view(system, "vllm", version)
    if database is None:
        raise ValueError(f"aiconfigurator: failed to load the vLLM {version} database of {system}")
    return database


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The package logs and prints per call (fallback rows, loaded configs); keep the judge's output readable."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(previous)
