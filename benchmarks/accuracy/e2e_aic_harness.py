"""The rows of aiconfigurator's own measurement campaign (`silicon_data_source` names `aic-auto-gap-analysis`)
under the benchmark client aiconfigurator itself generates, against the judge's default client. A sensitivity of
the end-to-end judge (`e2e_accuracy.py`), nothing fitted: the file does not record which client measured these rows.

    python benchmarks/accuracy/e2e_aic_harness.py [--model Qwen3-32B] [--out rows.csv]

The client aiconfigurator generates for a deployment (github.com/ai-dynamo/aiconfigurator,
`src/aiconfigurator/generator/config/backend_templates/benchmark/bench_run.sh.j2`, defaults in
`generator/config/deployment_config.yaml`): `aiperf profile` against a Dynamo frontend, chat endpoint, streaming,
`--isl L --isl-stddev 0 --osl L --osl-stddev 0` (exact lengths), `--concurrency N --num-requests 20N
--warmup-request-count 2N`, no `--num-dataset-entries` (AIPerf's default: 100 distinct prompts, reused). AIPerf waits
for every warmup response before it starts the measured requests (its warmup documentation), so the measured run
starts from an idle engine; the warmup's prompts are in vLLM's prefix cache when it does.

Simulated per row, as the judge simulates a row otherwise (`roofline.judge.rows.resolve_row`: engine flags, quantization):
- `exact`: 20N requests of exactly isl / osl tokens, closed loop of N, every request measured;
- `pool`: 22N requests, request i sending prompt i mod 100 (a shared prefix of isl - 1 tokens per prompt, so a
  repeat hits every full block, as a repeated prompt does), the first 2N (the warmup) dropped from the means.
  (The loop keeps running through the warmup's end instead of draining: an approximation.)
The judge's default client (InferenceX's: lengths uniform in [0.8 L, L], 10N prompts) is in its own report.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from roofline.judge.checks import client_workload
from roofline.judge.rows import SimCase, read_silicon_rows, resolve_row

CAMPAIGN = "aic-auto-gap-analysis"
REQUESTS_PER_CONCURRENCY = 20  # --num-requests $((concurrency * 20)) (BENCH_MULTI_ROUND)
WARMUP_PER_CONCURRENCY = 2  # --warmup-request-count $((concurrency * 2))
DATASET_ENTRIES = 100  # AIPerf's --num-dataset-entries default


def simulate(case: SimCase, pool: bool) -> tuple[float, float]:
    """Mean TTFT and TPOT (s) of the measured requests."""
    from roofline.judge.rows import kv_vllm_version
    from roofline.registry import load_model
    from roofline.sim.deployment import make_deployment
    from roofline.sim.simulator import SimulationOptions, run_simulation
    from roofline.sim.workload import SharedPrefix

    row, n = case.row, case.concurrency
    deployment = make_deployment(load_model(case.config_path), case.hardware_id, case.engine,
                                 vllm_version=kv_vllm_version(row.backend_version))
    warmup = WARMUP_PER_CONCURRENCY * n if pool else 0
    workload = client_workload(row, REQUESTS_PER_CONCURRENCY * n + warmup, 1.0)
    if pool:
        workload = replace(workload, shared_prefix=SharedPrefix(DATASET_ENTRIES, row.isl - 1))
    requests = run_simulation(deployment, workload, SimulationOptions(max_concurrency=n,
                                                                      record_steps=False)).requests.iloc[warmup:]
    return float(requests.ttft_s.mean()), float(requests.tpot_s.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="only rows whose model path contains this")
    parser.add_argument("--out", type=Path, default=None, help="write the per-row table here (CSV)")
    args = parser.parse_args()
    records = []
    for row in read_silicon_rows():
        if CAMPAIGN not in row.source or args.model not in row.model_path:
            continue
        case = resolve_row(row)
        if not isinstance(case, SimCase):
            continue
        record = {"model": row.model_path, "system": row.system, "tp": row.tp_size, "isl": row.isl,
                  "osl": row.osl, "concurrency": case.concurrency, "measured_ttft_s": row.measured_ttft_s,
                  "measured_tpot_s": row.measured_tpot_s}
        for name, pool in (("exact", False), ("pool", True)):
            record[f"{name}_ttft_s"], record[f"{name}_tpot_s"] = simulate(case, pool)
        records.append(record)
        print(record, file=sys.stderr, flush=True)
    frame = pd.DataFrame(records)
    if args.out is not None:
        frame.to_csv(args.out, index=False)
    for (model, system), group in frame.groupby(["model", "system"]):
        cells = []
        for name in ("exact", "pool"):
            for metric in ("ttft", "tpot"):
                err = group[f"{name}_{metric}_s"] / group[f"measured_{metric}_s"] - 1
                cells.append(f"{name} {metric.upper()} {np.median(np.abs(err)) * 100:.1f} % "
                             f"(median signed {np.median(err) * 100:+.1f} %)")
        print(f"{model} / {system} ({len(group)} rows): " + "; ".join(cells))


if __name__ == "__main__":
    main()
