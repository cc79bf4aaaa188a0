"""Predicted against measured, step by step and end to end, for one step trace (or the repeats of one) and one
hardware profile.

    trace = load_trace("traces/chat")                          # roofline.calibration.traces
    result = compare_trace(trace, load_profile("cpu.yaml"))    # per-step table + summary
    result = compare_repeats(load_traces("traces/a"), hw)      # a repeat set (roofline.calibration.protocol)
    result.summary["median_abs_rel_err"], result.summary["by_kind"]["decode"]
    write_report(result, Path("out"))                          # steps.csv, summary.json, PNG plots

Per step, the cost model (`roofline.cost.step_cost.StepCostModel`) predicts the duration of the step the trace ran
(its per-sequence query and context lengths and which sequences emitted a token) and is compared with the
measured `duration_s`, the whole iteration (schedule + execute + sample + bookkeeping), which is what the
profile's per-step host overhead models. Relative error = predicted / measured - 1. Steps are grouped by kind:
`prefill` (only prompt tokens), `decode` (only one-token decodes), `mixed` (both in one batch).

End to end, the trace's requests (arrival times, prompt and output lengths from `requests.csv`) are replayed
in the simulator (`roofline.sim.simulator`, the engine's own scheduler on a virtual clock) with the engine
configuration and KV block count the trace recorded, each step charged the predicted time; mean TTFT, mean
TPOT and output throughput come from `roofline.sim.metrics.run_figures` for the measured and the simulated
requests alike (the figures `measure` printed for the run, and `simulate`'s without --warmup-s or --drain). The replay
keeps lengths, not token ids: prefix-cache hits of a workload with shared prefixes are not reproduced.

Noise floor: what a perfect deterministic model of step time would score. Each step is predicted by the median
measured duration of the steps of the same shape (`roofline.calibration.protocol.shape_keys`: kind, sequences,
batched, prefill and context tokens in narrow buckets) of the same trace ("in run") or of a second measurement
of the same workload ("across runs", `repeat=`). A repeat set (`roofline measure --repeats N` / `--append`) is
compared repeat by repeat (`compare_repeats`): errors pooled and per repeat, the same errors on the steps the floor
covers, and the floor left one repeat out, which is the one that bounds a held-out comparison on a host whose
speed drifts between runs; end to end, the median over the repeats next to their spread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofline.calibration.protocol import (
    STEP_KINDS,
    error_stats,
    format_noise_floor,
    noise_floor_of_repeats,
    oracle_pairs,
    per_shape_medians,
    stats_by_kind,
    step_kinds,
)
from roofline.calibration.traces import Trace
from roofline.cost.hardware import HardwareProfile
from roofline.cost.step_cost import StepCostModel
from roofline.cost.step_shape import StepArrays
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.jsonable import to_json
from roofline.sim.api_server import without_api_server
from roofline.sim.deployment import make_deployment
from roofline.sim.metrics import run_figures
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.workload import RequestSpec, fixed_workload

# The end-to-end metrics compared: name -> (what it is, unit).
E2E_METRICS = ("mean_ttft_s", "mean_tpot_s", "output_tokens_per_s")


# ---- per step -------------------------------------------------------------------------------------------------


def predict_step_times(model: StepCostModel, steps: pd.DataFrame) -> np.ndarray:
    """The cost model's time of every step of a trace (seconds)."""
    columns = zip(steps["query_lens"], steps["context_lens"], steps["emits"])
    return np.array([model.time_s(StepArrays(np.asarray(q, np.int64), np.asarray(c, np.int64), np.asarray(e, bool)))
                     for q, c, e in columns], dtype=np.float64)


def cost_model_for(trace: Trace, hw: HardwareProfile) -> StepCostModel:
    """The cost model of the trace's model and dtypes on `hw`, describing the engine that recorded the trace
    (`Trace.cpu_engine`)."""
    return StepCostModel(trace.spec, hw, trace.quant, trace.tensor_parallel_size, cpu_engine=trace.cpu_engine)


def step_table(trace: Trace, hw: HardwareProfile) -> pd.DataFrame:
    """One row per step: what ran, measured and predicted seconds, relative error, kind."""
    steps = trace.steps
    predicted = predict_step_times(cost_model_for(trace, hw), steps)
    measured = steps["duration_s"].to_numpy(np.float64)
    return pd.DataFrame({
        "step_index": steps["step_index"].to_numpy(),
        "start_s": steps["start_s"].to_numpy(np.float64),
        "kind": step_kinds(steps),
        "num_seqs": steps["num_seqs"].to_numpy(),
        "num_batched_tokens": steps["num_batched_tokens"].to_numpy(),
        "num_prefill_tokens": steps["num_prefill_tokens"].to_numpy(),
        "num_decode_tokens": steps["num_decode_tokens"].to_numpy(),
        "num_context_tokens": np.array([int(np.sum(c)) for c in steps["context_lens"]], dtype=np.int64),
        "measured_s": measured,
        "predicted_s": predicted,
        "rel_err": predicted / measured - 1.0,
    })


def shape_oracle(reference: Trace, target: Trace) -> dict[str, Any]:
    """Error statistics of predicting `target`'s steps by the median duration of `reference`'s steps of the same
    shape (`roofline.calibration.protocol.shape_keys`), with `num_steps` the steps that had such a group and
    `num_steps_in_trace` all of them."""
    pairs = oracle_pairs(per_shape_medians([reference]), target)
    return {"num_steps_in_trace": int(len(target.steps)), **error_stats(pairs["predicted_s"], pairs["measured_s"])}


def noise_floor(trace: Trace, repeat: Trace | None = None) -> dict[str, Any]:
    """The per-shape oracle of `trace` on itself and, given a second measurement of the same workload, of
    `repeat` on `trace`; a repeat of another model or dtype is a UserError naming --repeat-trace."""
    floor = {"in_run": shape_oracle(trace, trace)}
    if repeat is not None:
        if (repeat.spec.name, repeat.quant) != (trace.spec.name, trace.quant):
            raise UserError(f"--repeat-trace {repeat.path}: a run of {repeat.spec.name} ({repeat.dtype}), but "
                            f"--trace {trace.path} ran {trace.spec.name} ({trace.dtype}); pass a second "
                            "measurement of the same workload")
        floor["across_runs"] = shape_oracle(repeat, trace)
    return floor


# ---- end to end -----------------------------------------------------------------------------------------------


def replay_specs(requests: pd.DataFrame) -> list[RequestSpec]:
    """The trace's requests as simulator request specs, in arrival order (ties keep file order)."""
    order = np.argsort(requests["arrival_s"].to_numpy(np.float64), kind="stable")
    rows = requests.iloc[order]
    return [RequestSpec(request_id=str(r.request_id), arrival_s=float(r.arrival_s),
                        num_prompt_tokens=int(r.num_prompt_tokens), num_output_tokens=int(r.num_output_tokens))
            for r in rows.itertuples(index=False)]


def simulate_trace(trace: Trace, hw: HardwareProfile) -> pd.DataFrame:
    """The simulated per-request metrics of the trace's workload on `hw`, with the trace's engine settings."""
    assert trace.requests is not None
    ec = trace.metadata.engine_config
    args = EngineArgs(max_num_seqs=ec.max_num_seqs, max_num_batched_tokens=ec.max_num_batched_tokens,
                      block_size=ec.block_size, max_model_len=ec.max_model_len,
                      enable_chunked_prefill=ec.enable_chunked_prefill, enable_prefix_caching=ec.enable_prefix_caching,
                      tensor_parallel_size=ec.tensor_parallel_size, dtype=ec.dtype, quantization=ec.quantization,
                      kv_cache_dtype=ec.kv_cache_dtype, num_gpu_blocks_override=ec.num_kv_blocks)
    # A trace's requests were submitted to the engine in-process (the engine's loop, vLLM's LLMEngine): no API server.
    deployment = make_deployment(trace.spec, without_api_server(hw), args, cpu_engine=trace.cpu_engine)
    specs = replay_specs(trace.requests)
    # The workload object only carries the seed for token ids (no shared prefix: lengths are replayed).
    workload = fixed_workload(1, 1, len(specs), math.inf, trace.metadata.seed)
    result = run_simulation(deployment, workload, SimulationOptions(record_steps=False), specs=specs)
    return result.requests


def end_to_end(trace: Trace, hw: HardwareProfile) -> dict[str, Any] | None:
    """Measured vs simulated mean TTFT, mean TPOT and output throughput; None without requests.csv or for a
    multi-replica simulator trace (its routing is not recorded)."""
    if trace.requests is None or len(trace.requests) == 0 or trace.metadata.num_replicas != 1:
        return None
    measured = run_figures(trace.requests)
    predicted = run_figures(simulate_trace(trace, hw))
    out: dict[str, Any] = {}
    for name in E2E_METRICS:
        m, p = measured[name], predicted[name]
        rel = None if m is None or p is None or m == 0 else p / m - 1.0
        out[name] = {"measured": m, "predicted": p, "rel_err": rel}
    return out


# ---- the whole comparison -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    trace: Trace
    hardware_id: str
    table: pd.DataFrame  # step_table
    summary: dict[str, Any]


def compare_trace(trace: Trace, hw: HardwareProfile, e2e: bool = True, repeat: Trace | None = None) -> Comparison:
    table = step_table(trace, hw)
    summary: dict[str, Any] = {"trace": str(trace.path), "hardware": hw.id, "model": trace.spec.name,
                               "executor": trace.executor(hw), "weight_streaming": trace.weight_streaming(hw),
                               **stats_by_kind(table), "noise_floor": noise_floor(trace, repeat)}
    if e2e:
        summary["end_to_end"] = end_to_end(trace, hw)
    return Comparison(trace=trace, hardware_id=hw.id, table=table, summary=summary)


def compare_repeats(traces: Sequence[Trace], hw: HardwareProfile, e2e: bool = True) -> Comparison:
    """The cost model against every repeat of a repeat set (`roofline.calibration.protocol`): errors over all
    repeats' steps pooled and per repeat; the same errors on the steps the noise floor covers, next to the floor
    (each repeat left out of the per-shape medians in turn); end to end per repeat, and the model's figure against
    the repeats' median next to their spread."""
    tables = [step_table(t, hw).assign(repeat=t.name) for t in traces]
    table = pd.concat(tables, ignore_index=True)
    floor, pairs = noise_floor_of_repeats(traces)
    covered = pd.concat([t.iloc[p["row"].to_numpy()] for t, p in zip(tables, pairs)], ignore_index=True)
    summary: dict[str, Any] = {
        "trace": str(traces[0].path.parent), "hardware": hw.id, "model": traces[0].spec.name,
        "executor": traces[0].executor(hw), "weight_streaming": traces[0].weight_streaming(hw),
        **stats_by_kind(table),
        "per_repeat": [{"repeat": t.name, **error_stats(x["predicted_s"], x["measured_s"])}
                       for t, x in zip(traces, tables)],
        "on_noise_floor_steps": stats_by_kind(covered), "noise_floor": {"leave_one_repeat_out": floor}}
    if e2e:
        per_repeat = [end_to_end(t, hw) for t in traces]
        summary["end_to_end"] = _end_to_end_of_repeats(per_repeat, floor["end_to_end"])
        summary["end_to_end_per_repeat"] = per_repeat
    return Comparison(trace=traces[0], hardware_id=hw.id, table=table, summary=summary)


def _end_to_end_of_repeats(per_repeat: list[dict[str, Any] | None], spread: dict[str, Any]) -> dict[str, Any] | None:
    """Per E2E metric: the repeats' median measured figure, the median predicted one (the replays differ only in
    their recorded arrivals), the error, and the measured spread across repeats (what the error is judged by)."""
    if any(r is None for r in per_repeat):
        return None
    out: dict[str, Any] = {}
    for name in E2E_METRICS:
        measured = [r[name]["measured"] for r in per_repeat if r is not None and r[name]["measured"] is not None]
        predicted = [r[name]["predicted"] for r in per_repeat if r is not None and r[name]["predicted"] is not None]
        m = float(np.median(measured)) if measured else None
        p = float(np.median(predicted)) if predicted else None
        rel = None if m is None or p is None or m == 0 else p / m - 1.0
        out[name] = {"measured": m, "predicted": p, "rel_err": rel, "spread": spread[name]["spread"]}
    return out


def write_report(result: Comparison, out_dir: Path) -> list[Path]:
    """steps.csv, summary.json and four PNGs into out_dir; returns the paths written."""
    from roofline.calibration import plots  # (matplotlib: imported when the plots are drawn)

    out_dir.mkdir(parents=True, exist_ok=True)
    table = result.table
    paths = [out_dir / "steps.csv", out_dir / "summary.json"]
    table.to_csv(paths[0], index=False, float_format="%.9g")
    paths[1].write_text(to_json(result.summary))
    by_kind = [(k, table[table["kind"] == k]) for k in STEP_KINDS if (table["kind"] == k).any()]
    title = f"{result.trace.spec.name} on {result.hardware_id}: {Path(result.summary['trace']).name}"
    paths.append(plots.predicted_vs_measured(
        out_dir / "predicted_vs_measured.png",
        [plots.Series(k, t["measured_s"].to_numpy(), t["predicted_s"].to_numpy()) for k, t in by_kind],
        title=f"step time, {title}", unit="s"))
    paths.append(plots.error_vs(
        out_dir / "error_vs_batch_tokens.png",
        [plots.Series(k, t["num_batched_tokens"].to_numpy(), t["rel_err"].to_numpy()) for k, t in by_kind],
        xlabel="batched tokens in the step", title=f"step time error, {title}"))
    t = table["start_s"].to_numpy()
    paths.append(plots.over_time(
        out_dir / "step_time_over_time.png",
        [plots.Series("measured", t, table["measured_s"].to_numpy()),
         plots.Series("predicted", t, table["predicted_s"].to_numpy())],
        xlabel="time since start of run [s]", ylabel="step time [s]", title=f"step time, {title}", log_y=True))
    paths.append(plots.over_time(
        out_dir / "error_over_time.png", [plots.Series("relative error", t, 100.0 * table["rel_err"].to_numpy())],
        xlabel="time since start of run [s]", ylabel="predicted / measured - 1 [%]",
        title=f"step time error, {title}"))
    return paths


def format_summary(summary: dict[str, Any]) -> str:
    """A few human lines: overall and per-kind step error, then the end-to-end metrics."""
    lines = [f"{summary['model']} on {summary['hardware']}: {summary['trace']}",
             f"executor description: {summary['executor']}",
             *([summary["weight_streaming"]] if summary.get("weight_streaming") else []),
             _stats_line("all steps", summary)]
    lines += [_stats_line(k, summary["by_kind"][k]) for k in STEP_KINDS if summary["by_kind"][k]["num_steps"]]
    for row in summary.get("per_repeat", []):
        lines.append(_stats_line(row["repeat"], row))
    floor = summary.get("noise_floor") or {}
    if "leave_one_repeat_out" in floor:
        lines.append("the same steps as the noise floor below:")
        covered = summary["on_noise_floor_steps"]
        lines += [_stats_line("all steps", covered)]
        lines += [_stats_line(k, covered["by_kind"][k]) for k in STEP_KINDS if covered["by_kind"][k]["num_steps"]]
        lines += format_noise_floor(floor["leave_one_repeat_out"])
    labels = {"in_run": "in this run", "across_runs": "across runs (--repeat-trace)"}
    for key, label in labels.items():
        f = floor.get(key)
        if f and f["num_steps"]:
            lines.append(f"noise floor, per-shape medians {label}: "
                         f"median |err| {100 * f['median_abs_rel_err']:.1f} %  p90 {100 * f['p90_abs_rel_err']:.1f} %  "
                         f"({f['num_steps']} of {f['num_steps_in_trace']} steps)")
    e2e = summary.get("end_to_end")
    if e2e:
        lines.append("end to end (simulated replay vs measured" +
                     (", medians over the repeats):" if "end_to_end_per_repeat" in summary else "):"))
        for name in E2E_METRICS:
            row = e2e[name]
            if row["measured"] is not None and row["predicted"] is not None:
                err = "" if row["rel_err"] is None else f"  ({100 * row['rel_err']:+.1f} %)"
                if row.get("spread") is not None:
                    err += f"  repeats' spread {100 * row['spread']:.1f} %"
                lines.append(f"  {name:<20} measured {row['measured']:.4g}  predicted {row['predicted']:.4g}{err}")
    return "\n".join(lines)


def _stats_line(label: str, s: dict[str, Any]) -> str:
    return (f"  {label:<10} {s['num_steps']:>6} steps  median |err| {100 * s['median_abs_rel_err']:5.1f} %  "
            f"p90 {100 * s['p90_abs_rel_err']:5.1f} %  max {100 * s['max_abs_rel_err']:6.1f} %  "
            f"bias {100 * s['mean_rel_err']:+5.1f} %")
