"""vLLM-CPU's execution as a CPU executor (`roofline.cost.cpu.vllm_cpu`, `StepCostModel(cpu_engine=...)`): the
default stays this engine's description, float for float; the compiled graph dispatches fewer ops; compare and
calibrate pick the description from the trace's source and say which."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.core.model_spec import ModelSpec
from roofline.calibration.calibrate import calibrate_on_traces, write_calibrated_profile
from roofline.calibration.compare import compare_trace, cost_model_for, format_summary
from roofline.calibration.traces import load_trace
from roofline.cli import main
from roofline.commands.calibrate import format_report
from roofline.cost.hardware import load_profile
from roofline.cost.profile_yaml import dump_profile, read_profile_dict
from roofline.cost.quant import QuantConfig
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepArrays
from roofline.errors import UserError

REPO = Path(__file__).resolve().parents[1]
CPU = load_profile(REPO / "tests" / "data" / "cpu-profile.yaml")
RECORDED = REPO / "tests" / "data" / "vllm-0.32.0-cpu-trace"  # real vLLM 0.32.0 on a loaded CPU (source "vllm")
SPEC = ModelSpec(name="m", architecture="LlamaForCausalLM", num_layers=8, hidden_size=1024, num_heads=16,
                 num_kv_heads=4, head_dim=64, intermediate_size=2816, vocab_size=32000)
QUANT = QuantConfig.from_user(model_dtype="bfloat16")
# Three decodes and a 40-token prefill chunk, all emitting.
BATCH = (np.array([1, 1, 1, 40]), np.array([100, 200, 300, 0]), np.array([1, 1, 1, 1], dtype=bool))


def test_the_default_cpu_engine_is_this_engines_description_unchanged() -> None:
    # Floats of the description before the vllm-cpu one existed (commit e2eaa05), on this profile as it was then
    # (no weight-streaming curves, the GEMM efficiencies before profile-device fitted them) and batch.
    old = replace(CPU, weight_streaming=(), efficiency=replace(
        CPU.efficiency, gemm_compute_efficiency=1.0, gemm_fixed_rows=2.0, memory_efficiency=0.53))
    model = StepCostModel(SPEC, old, QUANT)
    assert model.cpu_engine == "roofline-engine"
    assert model.time_s(StepArrays(*BATCH)) == 0.017232581209339615
    assert model.cost(StepArrays(*BATCH)).num_kernels == 295
    explicit = StepCostModel(SPEC, old, QUANT, cpu_engine="roofline-engine")
    assert explicit.cost(StepArrays(*BATCH)) == model.cost(StepArrays(*BATCH))


def test_vllm_cpu_dispatches_fewer_host_ops_than_the_eager_engine() -> None:
    eager = StepCostModel(SPEC, CPU, QUANT).cost(StepArrays(*BATCH))
    vllm = StepCostModel(SPEC, CPU, QUANT, cpu_engine="vllm-cpu").cost(StepArrays(*BATCH))
    # Per layer: 4 fused inductor kernels (2 norms, RoPE, SiLU-and-mul), 4 oneDNN GEMMs, 2 attention calls; then
    # embedding, final norm, LM-head gather + GEMM, 5 sampler ops.
    assert vllm.num_kernels == 8 * (4 + 4 + 2) + 1 + 1 + 2 + 5
    assert vllm.num_kernels < eager.num_kernels
    assert vllm.host_s < eager.host_s


def test_vllm_cpu_fast_path_equals_the_full_path() -> None:
    model = StepCostModel(SPEC, CPU, QUANT, cpu_engine="vllm-cpu")
    assert model.time_s(StepArrays(*BATCH)) == pytest.approx(model.cost(StepArrays(*BATCH)).total_s, rel=1e-12)


def test_vllm_cpu_attention_reads_only_the_keys_each_decode_has() -> None:
    # One long and many short decodes: this engine pads every decode to the longest; vLLM's kernel does not.
    q, c, e = np.ones(4, dtype=np.int64), np.array([3000, 10, 10, 10]), np.ones(4, dtype=bool)
    eager = StepCostModel(SPEC, CPU, QUANT).cost(StepArrays(q, c, e)).breakdown_s["attention_decode"]
    vllm = StepCostModel(SPEC, CPU, QUANT, cpu_engine="vllm-cpu").cost(StepArrays(q, c, e)).breakdown_s["attention_decode"]
    assert vllm < 0.5 * eager


def test_an_unknown_cpu_engine_is_a_user_error() -> None:
    with pytest.raises(UserError, match="'vllm'.*allowed: roofline-engine, vllm-cpu"):
        StepCostModel(SPEC, CPU, QUANT, cpu_engine="vllm")


def test_compare_on_a_vllm_trace_uses_and_names_the_vllm_cpu_description(tmp_path: Path) -> None:
    trace = load_trace(RECORDED)
    assert trace.cpu_engine == "vllm-cpu" and cost_model_for(trace, CPU).cpu_engine == "vllm-cpu"
    summary = compare_trace(trace, CPU, e2e=False).summary
    assert summary["executor"] == "vllm-cpu"
    assert "executor description: vllm-cpu" in format_summary(summary)
    # what the profile assumes of vLLM's GEMM weight streaming by rows is said, whether it has a curve or not
    assert summary["weight_streaming"] == CPU.streaming_note("vllm-cpu") in format_summary(summary)
    assert main(["compare", "--trace", str(RECORDED), "--hardware", str(REPO / "tests" / "data" /
                                                                           "cpu-profile.yaml"),
                 "--out", str(tmp_path / "cmp")]) == 0
    assert json.loads((tmp_path / "cmp" / "summary.json").read_text())["executor"] == "vllm-cpu"


def test_calibrate_records_the_executor_description_of_each_trace() -> None:
    report = calibrate_on_traces(CPU, [load_trace(RECORDED)], params=("efficiency.memory_efficiency",), max_fit_steps=25)
    assert report.fitted_on[0]["executor"] == "vllm-cpu"
    assert "executor description: vllm-cpu" in format_report(report)
    assert report.fitted_on[0]["weight_streaming"] == CPU.streaming_note("vllm-cpu") in format_report(report)


def test_a_calibrated_profile_keeps_the_measured_streaming_curves(tmp_path: Path) -> None:
    """The curve is a device measurement: calibration scales it (memory_efficiency), never drops or refits it."""
    data = read_profile_dict(REPO / "tests" / "data" / "cpu-profile.yaml")
    data["weight_streaming"] = {"vllm-cpu": {"kernel": "k", "rows": [1, 2, 3], "gb_per_s": [25.0, 21.0, 29.0],
                                             "spread": [0.0, 0.0, 0.0]}}
    data["sources"]["weight_streaming"] = "a test"
    start = tmp_path / "start.yaml"
    dump_profile(data, start)
    hw = load_profile(start)
    report = calibrate_on_traces(hw, [load_trace(RECORDED)], params=("efficiency.memory_efficiency",),
                                 max_fit_steps=25)
    write_calibrated_profile(start, report, tmp_path / "cal.yaml", command="test")
    calibrated = load_profile(tmp_path / "cal.yaml")
    assert calibrated.weight_streaming == hw.weight_streaming
    assert "GB/s by rows {1: 25, 2: 21, 3: 29}" in report.fitted_on[0]["weight_streaming"]
