"""Public production traces read from their published files (Azure's LLM inference traces, BurstGPT): each trace's
request count, lengths and arrival rates next to what its authors publish, and its busiest hour served by a named
deployment (`roofline simulate` in process, with the load over time of `roofline.sim.timeline`).

    python benchmarks/accuracy/public_traces.py --azure-2023 $AZURE_DATASET/data [--azure-2024 DIR] \\
        [--burstgpt FILE ...] [--json OUT]

$AZURE_DATASET: a checkout of github.com/Azure/AzurePublicDataset (CC-BY 4.0); data/ holds the 2023 traces
AzureLLMInferenceTrace_{code,conv}.csv. --azure-2024: a folder with AzureLLMInferenceTrace_{code,conv}_1week.csv
(Azure blob storage, linked from AzureLLMInferenceDataset2024.md). --burstgpt: BurstGPT_*.csv from
github.com/HPMLL/BurstGPT's releases. A file not given or absent is skipped and said so.

Published (what each file is compared with):
- Azure 2023: the rows the dataset's own notebook prints (analysis/AzureLLMInferenceDataset2023.ipynb: 19,366
  conversation, 8,819 code, 2023-11-16 18:15-19:14); the median prompt and output lengths of Splitwise (Patel et
  al., ISCA'24, section III: coding 1,500 / 13 tokens, conversation 1,020 / 129).
- Azure 2024: the rows its notebook prints (16,803,695 code from 2024-05-10, 27,303,999 conversation from
  2024-05-12, a week each).
- BurstGPT: the lines its README gives (BurstGPT_1.csv 1,429.7k with failures, BurstGPT_without_fails_1.csv 1,404.3k;
  _2: 3,858.4k / 3,784.2k; _3: 5,344.0k / 4,956.1k).

The simulation: the trace's busiest hour (the 2023 traces are one hour: all of it) replayed as recorded
(`--trace-window busiest:3600`), served by Llama-3.1-70B on 4x H100-SXM (TP 4), vLLM's defaults, SLOs of the README's plan
example (TTFT 2 s, TPOT 80 ms): latency, SLO attainment, and the busiest / fullest / worst bins of its load over time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from roofline.engine_args import EngineArgs  # noqa: E402
from roofline.sim.deployment import make_deployment  # noqa: E402
from roofline.sim.metrics import SummaryOptions  # noqa: E402
from roofline.sim.simulator import SimulationOptions, run_simulation  # noqa: E402
from roofline.sim.timeline import format_peaks, load_over_time, peaks  # noqa: E402
from roofline.sim.traces import busiest_window, read_trace, trace_rows  # noqa: E402
from roofline.sim.workload import Workload  # noqa: E402

MODEL, HARDWARE, TP = "llama-3.1-70b", "h100-sxm", 4
SLO_TTFT_S, SLO_TPOT_S = 2.0, 0.08
HOUR_S = 3600.0
# name -> (file name, published rows, published median prompt / output tokens or None)
AZURE_2023 = {"azure-2023-conv": ("AzureLLMInferenceTrace_conv.csv", 19366, (1020, 129)),
              "azure-2023-code": ("AzureLLMInferenceTrace_code.csv", 8819, (1500, 13))}
AZURE_2024 = {"azure-2024-conv": ("AzureLLMInferenceTrace_conv_1week.csv", 27303999, None),
              "azure-2024-code": ("AzureLLMInferenceTrace_code_1week.csv", 16803695, None)}
BURSTGPT_LINES = {"BurstGPT_1.csv": 1429.7e3, "BurstGPT_without_fails_1.csv": 1404.3e3,
                  "BurstGPT_2.csv": 3858.4e3, "BurstGPT_without_fails_2.csv": 3784.2e3,
                  "BurstGPT_3.csv": 5344.0e3, "BurstGPT_without_fails_3.csv": 4956.1e3}


def describe(name: str, path: Path, published_rows: float, medians: tuple[int, int] | None) -> dict:
    wall, cpu = time.perf_counter(), time.process_time()
    rows = trace_rows(path)
    parse = {"parse_wall_s": time.perf_counter() - wall, "parse_cpu_s": time.process_time() - cpu}
    span = float(rows.arrival_s.max())
    per_minute = np.bincount((rows.arrival_s // 60).astype(np.int64))
    row = {"trace": name, "file": path.name, "format": rows.format, "requests": len(rows),
           "left_out": rows.num_left_out, "rows": len(rows) + rows.num_left_out, "published_rows": published_rows,
           "span_s": span, "mean_rate_per_s": len(rows) / span, "peak_minute_rate_per_s": float(per_minute.max()) / 60,
           **parse}
    for key, values in (("prompt", rows.prompt_tokens), ("output", rows.output_tokens)):
        p50, p90, p99 = np.percentile(values, (50, 90, 99))
        row.update({f"{key}_mean": float(values.mean()), f"{key}_p50": float(p50), f"{key}_p90": float(p90),
                    f"{key}_p99": float(p99)})
    if medians is not None:
        row["published_prompt_p50"], row["published_output_p50"] = medians
    print(f"{name}: {row['rows']:,} rows (published {published_rows:,.0f}), {rows.num_left_out:,} left out; "
          f"{span / 3600:.2f} h, mean {row['mean_rate_per_s']:.2f} req/s, busiest minute "
          f"{row['peak_minute_rate_per_s']:.2f} req/s; prompt p50/p90/p99 {row['prompt_p50']:.0f}/"
          f"{row['prompt_p90']:.0f}/{row['prompt_p99']:.0f} (mean {row['prompt_mean']:.0f}), output "
          f"{row['output_p50']:.0f}/{row['output_p90']:.0f}/{row['output_p99']:.0f} (mean {row['output_mean']:.0f})"
          + (f"; published medians {medians[0]} / {medians[1]}" if medians else "")
          + f"; parsed in {parse['parse_cpu_s']:.1f} s CPU")
    window = busiest_window(rows.arrival_s, HOUR_S)
    row.update(simulate(path, window))
    return row


def simulate(path: Path, window: tuple[float, float]) -> dict:
    deployment = make_deployment(MODEL, HARDWARE, EngineArgs(tensor_parallel_size=TP))
    specs = read_trace(path, window_s=window)
    workload = Workload(name=path.stem, trace_path=path, num_requests=len(specs), trace_window_s=window)
    wall, cpu = time.perf_counter(), time.process_time()
    result = run_simulation(deployment, workload, SimulationOptions(record_steps=False), specs=specs)
    row: dict = {"window_s": list(window), "simulated_requests": len(specs),
                 "simulated_wall_s": time.perf_counter() - wall, "simulated_cpu_s": time.process_time() - cpu}
    summary = result.summary(SummaryOptions(slo_ttft_s=SLO_TTFT_S, slo_tpot_s=SLO_TPOT_S))
    table = load_over_time(result.requests, result.steps, SLO_TTFT_S, SLO_TPOT_S)
    lat = summary["latency"]
    row.update({"ttft_p50_s": lat["ttft_s"]["p50"], "ttft_p90_s": lat["ttft_s"]["p90"],
                "tpot_p50_s": lat["tpot_s"]["p50"], "tpot_p90_s": lat["tpot_s"]["p90"],
                "slo_percent": summary["slo"]["both_percent_meeting"], "load_over_time": peaks(table),
                "kv_usage_mean": float(table["kv_usage_mean"].mean()),
                "bins_below_90_percent_slo": int((table["slo_percent"] < 90).sum())})
    print(f"  busiest hour {window[0]:.0f}-{window[1]:.0f} s, {len(specs):,} requests as recorded, {MODEL} on "
          f"{TP}x {HARDWARE} (TP {TP}): TTFT p50/p90 {row['ttft_p50_s'] * 1e3:.0f}/{row['ttft_p90_s'] * 1e3:.0f} ms, "
          f"TPOT p50/p90 {row['tpot_p50_s'] * 1e3:.1f}/{row['tpot_p90_s'] * 1e3:.1f} ms; both SLOs (TTFT "
          f"{SLO_TTFT_S:g} s, TPOT {SLO_TPOT_S * 1e3:g} ms) {row['slo_percent']:.1f}% of requests, "
          f"{row['bins_below_90_percent_slo']} of {len(table)} bins below 90%; {row['simulated_cpu_s']:.1f} s CPU")
    print("  " + format_peaks(row["load_over_time"]))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--azure-2023", type=Path, help="folder holding AzureLLMInferenceTrace_{code,conv}.csv")
    ap.add_argument("--azure-2024", type=Path, help="folder holding AzureLLMInferenceTrace_{code,conv}_1week.csv")
    ap.add_argument("--burstgpt", type=Path, nargs="*", default=[], help="BurstGPT_*.csv files")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    for folder, traces in ((args.azure_2023, AZURE_2023), (args.azure_2024, AZURE_2024)):
        for name, (file, count, medians) in traces.items():
            path = folder / file if folder is not None else None
            if path is None or not path.is_file():
                print(f"{name}: {path or file} not given or absent, skipped")
                continue
            rows.append(describe(name, path, count, medians))
    for path in args.burstgpt:
        if not path.is_file():
            print(f"{path}: absent, skipped")
            continue
        rows.append(describe(path.stem, path, BURSTGPT_LINES.get(path.name, float("nan")), None))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
