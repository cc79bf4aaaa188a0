"""Where the simulated TTFT of end-to-end judge rows goes, and what candidate host terms would change (a diagnosis).

    python benchmarks/accuracy/ttft_decomposition.py stages ROW_ID [ROW_ID ...]
    python benchmarks/accuracy/ttft_decomposition.py what-if --rows 40 --out $OUT/what-if.jsonl
    python benchmarks/accuracy/ttft_decomposition.py latency ROW_ID [ROW_ID ...]
    python benchmarks/accuracy/ttft_decomposition.py shape --judge-rows $OUT/rows.csv
    python benchmarks/accuracy/ttft_decomposition.py host-gap --judge-rows $OUT/rows.csv

Each row is simulated as the judge simulates it (`roofline.judge.rows.resolve_row`, `make_deployment` with the row's
vLLM version, `roofline.judge.checks.client_workload`: 10 x N requests, closed loop of N). `silicon_sample.csv` is a
judge: nothing here is fitted on it or writes a model value (docs/benchmark-history/2026-11-30b-ttft.md).

- `stages`: the mean TTFT of every request and of those after the first wave, split into the API server's way in
  (request + prompt tokens x prompt_token + latency, `ApiServerCosts.for_host`), the wait from reaching the engine
  core to the schedule that takes the request, the span from that schedule to the end of the step that samples its
  first token, and the output path to the client; the mean decode-only step.
- `what-if`: the first `--rows` rows by CRC-32 of the row id among the simulated tensor-parallel rows (no DP / EP)
  with output <= 2,048 tokens and concurrency <= 64 (`--judge-rows`: a judge run's rows.csv naming the simulated
  ones), each under three API-server cost sets on the GPU host (reference-host seconds / the profile's speed): the
  profiles' (`ApiServerCosts()`), the served campaign's CPU fit (`CAMPAIGN_COSTS`), and that plus the client's
  share of TTFT one request at a time (`CLIENT_SHARE_S`); one JSON line per row; `--summary FILE` prints the TTFT
  and TPOT errors of each set. `--launches-serial`: instead, the profiles' costs with the cost model's step time as
  it is and as if a step's kernel launches did not overlap its kernels (`launches_serial`: device + launches + the
  rest of the host time where hidden; a what-if of section 7 of the history note, not a model). `--judge-client`:
  the profiles' costs against the judge's (`roofline.judge.checks.client_costs`: InferenceX's client).
- `latency`: the row's mean TTFT with 0-14 ms more per-request latency on the GPU host (added to `latency_s`): how
  the step grid turns a longer way in into whole steps.
- `shape`: from a judge run's rows.csv (`e2e_accuracy.py --out`), the median of predicted / measured - 1 of TTFT and
  of TPOT per (model, GPU, vLLM version, precision) group of InferenceX rows, by prompt length and concurrency 4-64.
- `host-gap`: per InferenceX row at concurrency 4 of that file, measured - predicted mean TTFT against the cost
  model's host and device time (`StepCost.host_s`, `device_s`) of a step of one prefill of the mean prompt
  (0.9 x isl) and three decodes on the row's deployment; medians per group and prompt length, and per TP.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import sys
import zlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from roofline.judge.checks import RANGE_RATIO, client_costs, client_workload  # noqa: E402
from roofline.judge.rows import SiliconRow, SimCase, kv_vllm_version, read_silicon_rows, resolve_row  # noqa: E402
from roofline.registry import load_model  # noqa: E402
from roofline.sim.api_server import ApiServerCosts  # noqa: E402
from roofline.sim.deployment import Deployment, make_deployment  # noqa: E402
from roofline.sim.simulator import SimulationOptions, SimulationResult, run_simulation  # noqa: E402

PROMPTS_PER_CONCURRENCY = 10  # the judge's (e2e_accuracy.PROMPTS_PER_CONCURRENCY, InferenceX's --num-prompts)
# The served campaign's fit of the API server's CPU on the CPU VM (benchmarks/results/vllm-serve-bench/
# cpu-host-calibrated.yaml `host.api_server_costs_s`; 2026-11-29d-serve.md), reference-host seconds; its
# output_latency and engine_step (the CPU VM's thread wake-ups and the CPU Worker's hand-off) left out.
CAMPAIGN_COSTS = ApiServerCosts(request_s=5.974e-3, chat_request_s=0.922e-3, output_pass_s=1.651e-3,
                                output_token_s=197.2e-6, chat_output_token_s=0.0, latency_s=1.0217e-3,
                                output_latency_s=0.0, engine_step_s=0.0)
# The client's share of TTFT one request at a time on that VM (client TTFT - vLLM's time_to_first_token, 5.3-5.8 ms;
# 2026-11-29d-serve.md section 2), taken as latency on the way in.
CLIENT_SHARE_S = 5.5e-3
COST_SETS = {"base": ApiServerCosts(), "campaign": CAMPAIGN_COSTS,
             "campaign+client": replace(CAMPAIGN_COSTS, latency_s=CAMPAIGN_COSTS.latency_s + CLIENT_SHARE_S)}
LATENCY_STEPS_MS = (0, 2, 4, 6, 8, 10, 14)


@contextlib.contextmanager
def launches_serial() -> Iterator[None]:
    """While active, deployments made compute a step as if its launches did not overlap its kernels:
    max(device, host - launches) + launches (+ the step gap) with asynchronous scheduling, (host - launches) + device
    + launches without (`roofline.cost.host.HostModel.combine` takes the max of device and launches)."""
    from roofline.cost.host import HostModel
    from roofline.cost.roofline_math import _max

    original = HostModel.combine

    def serial(self: HostModel, device_s, host_s, launch_s):  # noqa: ANN001, ANN202 - floats or arrays
        ex = self.hw.executor
        if self.hw.kind == "cpu":
            return original(self, device_s, host_s, launch_s)
        if ex.host_overlaps_device:
            return _max(device_s, host_s - launch_s) + launch_s + ex.step_gap_s
        return (host_s - launch_s) + device_s + launch_s

    HostModel.combine = serial  # type: ignore[method-assign]
    try:
        yield
    finally:
        HostModel.combine = original  # type: ignore[method-assign]


def judge_case(row: SiliconRow) -> tuple[SimCase, Deployment]:
    case = resolve_row(row)
    if not isinstance(case, SimCase):
        raise SystemExit(f"row {row.row_id}: the judge skips it ({case.reasons[0].value})")
    deployment = make_deployment(load_model(case.config_path), case.hardware_id, case.engine,
                                 vllm_version=kv_vllm_version(row.backend_version))
    return case, deployment


def simulate(case: SimCase, deployment: Deployment, costs: ApiServerCosts | None = None,
             record_steps: bool = False) -> SimulationResult:
    n = case.concurrency
    return run_simulation(deployment, client_workload(case.row, PROMPTS_PER_CONCURRENCY * n, RANGE_RATIO),
                          SimulationOptions(max_concurrency=n, record_steps=record_steps,
                                            api_server_count=case.api_server_count, api_server_costs=costs))


def stages(row: SiliconRow) -> list[str]:
    case, deployment = judge_case(row)
    result = simulate(case, deployment, record_steps=True)
    rq, st = result.requests, result.steps
    assert deployment.hw.host is not None, "a GPU profile with a host: section"
    costs = ApiServerCosts.for_host(deployment.hw.host)
    sent, scheduled = rq.arrival_s.to_numpy(), rq.first_scheduled_s.to_numpy()
    first = rq.first_token_s.to_numpy()
    way_in = costs.request_s + costs.prompt_token_s * rq.num_prompt_tokens.to_numpy() + costs.latency_s
    starts, ends = st.start_s.to_numpy(), st.start_s.to_numpy() + st.duration_s.to_numpy()
    last = np.searchsorted(ends, first, side="right") - 1  # the step that sampled the first token (seen after it)
    first_step = np.searchsorted(starts, scheduled, side="left")
    lines = [f"{row.row_id}: {row.model_path} {row.system} TP{row.tp_size} {row.isl}/{row.osl} c{case.concurrency} "
             f"vLLM {row.backend_version or '-'}; measured TTFT {row.measured_ttft_s * 1e3:.1f} ms, TPOT "
             f"{row.measured_tpot_s * 1e3:.2f} ms"]
    for label, sel in (("all", np.ones(len(rq), bool)), ("after the first wave", np.arange(len(rq)) >= case.concurrency)):
        lines.append(
            f"  {label} ({sel.sum()}): TTFT {np.mean((first - sent)[sel]) * 1e3:.1f} = way in "
            f"{np.mean(way_in[sel]) * 1e3:.2f} + wait {np.mean((scheduled - sent - way_in)[sel]) * 1e3:.2f} + "
            f"schedule to first-token step end {np.mean((ends[last] - scheduled)[sel]) * 1e3:.2f} "
            f"({np.mean((last - first_step + 1)[sel]):.2f} steps) + output path "
            f"{np.mean((first - ends[last])[sel]) * 1e3:.2f} ms")
    decode = st[st.num_prefill_tokens == 0]
    lines.append(f"  decode-only step {decode.duration_s.mean() * 1e3:.2f} ms (batch {decode.num_seqs.mean():.1f})")
    return lines


def subset(rows: list[SiliconRow], judged: set[str] | None, count: int) -> list[SiliconRow]:
    chosen = []
    for row in rows:
        if (judged is not None and row.row_id not in judged) or row.osl > 2048:
            continue
        case = resolve_row(row)
        if not isinstance(case, SimCase) or case.concurrency > 64 or case.engine.enable_expert_parallel \
                or case.engine.parallel.data_parallel_size != 1:
            continue
        chosen.append(row)
    return sorted(chosen, key=lambda r: zlib.crc32(r.row_id.encode()))[:count]


def what_if(rows: list[SiliconRow], out: Path, serial: bool, judge_client: bool = False) -> None:
    with out.open("a") as f:
        for row in rows:
            case, deployment = judge_case(row)
            record: dict = {"row_id": row.row_id, "concurrency": case.concurrency, "isl": row.isl, "osl": row.osl,
                            "measured_ttft_s": row.measured_ttft_s, "measured_tpot_s": row.measured_tpot_s}
            variants = [("base", deployment, ApiServerCosts())]
            if judge_client:  # the judge's client (roofline.judge.checks.client_costs) against the profiles' costs
                variants.append(("judge client", deployment, client_costs(row) or ApiServerCosts()))
            elif serial:
                with launches_serial():
                    variants.append(("launches serial", judge_case(row)[1], ApiServerCosts()))
            else:
                variants += [(name, deployment, costs) for name, costs in COST_SETS.items() if name != "base"]
            for name, dep, costs in variants:
                result = simulate(case, dep, costs)
                record[name] = [float(np.mean(result.requests.ttft_s)), float(np.nanmean(result.requests.tpot_s))]
            f.write(json.dumps(record) + "\n")
            f.flush()


def summary(path: Path) -> list[str]:
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    lines = [f"{len(records)} rows"]
    for name in [k for k in records[0] if isinstance(records[0][k], list)]:
        ttft = np.array([r[name][0] / r["measured_ttft_s"] - 1 for r in records]) * 100
        tpot = np.array([r[name][1] / r["measured_tpot_s"] - 1 for r in records]) * 100
        moved = np.array([r[name][0] - r["base"][0] for r in records]) * 1e3
        lines.append(f"{name}: TTFT median |error| {np.median(abs(ttft)):.1f} %, p90 {np.percentile(abs(ttft), 90):.1f} %, "
                     f"bias {ttft.mean():+.1f} %; TPOT median |error| {np.median(abs(tpot)):.2f} %, bias "
                     f"{tpot.mean():+.2f} %; TTFT against base: median {np.median(moved):+.2f} ms, max "
                     f"{moved.max():+.2f} ms")
    return lines


def latency(row: SiliconRow) -> str:
    case, deployment = judge_case(row)
    assert deployment.hw.host is not None, "a GPU profile with a host: section"
    speed = deployment.hw.host.single_thread_speed_relative
    cells = []
    for extra_ms in LATENCY_STEPS_MS:  # on the GPU host; the costs are given on the reference host
        costs = replace(ApiServerCosts(), latency_s=ApiServerCosts().latency_s + extra_ms * 1e-3 * speed)
        cells.append(f"+{extra_ms} ms: {np.mean(simulate(case, deployment, costs).requests.ttft_s) * 1e3:.1f}")
    return (f"{row.row_id}: measured {row.measured_ttft_s * 1e3:.1f} ms (TPOT {row.measured_tpot_s * 1e3:.2f}); "
            f"simulated with more latency per request: " + ", ".join(cells))


def judged_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return [r for r in csv.DictReader(f) if r["status"] == "simulated" and r["origin"].startswith("InferenceX")]


def group_of(model: str, system: str, version: str, precision: str) -> str:
    return f"{model.split('/')[-1]} {system} {version or '-'} {precision or '-'}"


def shape(path: Path) -> list[str]:
    cells: dict[tuple[str, int], dict[int, list[tuple[float, float]]]] = {}
    for r in judged_rows(path):
        key = (group_of(r["model"], r["system"], r["backend_version"], r["precision"]), int(r["isl"]))
        cells.setdefault(key, {}).setdefault(int(r["concurrency"]), []).append(
            (float(r["predicted_ttft_s"]) / float(r["measured_ttft_s"]) - 1,
             float(r["predicted_tpot_s"]) / float(r["measured_tpot_s"]) - 1))
    concurrencies = (4, 8, 16, 32, 64)
    lines = ["group | isl | TTFT c4 / c8 / c16 / c32 / c64 (%) | TPOT c4 ... c64 (%)"]
    for (group, isl), by_c in sorted(cells.items()):
        if sum(c in by_c for c in concurrencies) < 4:
            continue
        ttft = " / ".join(f"{np.median([x[0] for x in by_c[c]]) * 100:+.0f}" if c in by_c else "-" for c in concurrencies)
        tpot = " / ".join(f"{np.median([x[1] for x in by_c[c]]) * 100:+.0f}" if c in by_c else "-" for c in concurrencies)
        lines.append(f"{group} | {isl} | {ttft} | {tpot}")
    return lines


def host_gap(path: Path) -> list[str]:
    from roofline.cost.step_shape import StepArrays

    wanted = {r["row_id"]: r for r in judged_rows(path) if r["concurrency"] == "4"}
    deployments: dict[tuple, Deployment] = {}
    points: dict[tuple[str, int], list[tuple[int, float, float, float]]] = {}
    for row in read_silicon_rows():
        if row.row_id not in wanted:
            continue
        case = resolve_row(row)
        if not isinstance(case, SimCase):
            continue
        key = (case.config_path, case.hardware_id, case.engine, row.backend_version)
        if key not in deployments:
            deployments[key] = judge_case(row)[1]
        prompt = (int(row.isl * RANGE_RATIO) + row.isl) // 2
        context = row.isl + 200  # three decodes early in their outputs
        cost = deployments[key].cost_model.cost(StepArrays(np.array([prompt, 1, 1, 1], dtype=np.int64),
                                                           np.array([prompt, context, context, context], dtype=np.int64),
                                                           np.ones(4, dtype=np.int64)))
        r = wanted[row.row_id]
        gap = float(r["measured_ttft_s"]) - float(r["predicted_ttft_s"])
        points.setdefault((group_of(row.model_path, row.system, row.backend_version or "", row.precision or ""),
                           row.isl), []).append((row.tp_size, gap, cost.host_s, cost.device_s))
    lines = ["group | isl | gap ms | host ms | device ms | per row TP: gap / host / device ms"]
    for (group, isl), pts in sorted(points.items()):
        med = [np.median([p[i] for p in pts]) * 1e3 for i in (1, 2, 3)]
        per = ", ".join(f"TP{p[0]} {p[1] * 1e3:.0f} / {p[2] * 1e3:.0f} / {p[3] * 1e3:.0f}" for p in sorted(pts))
        lines.append(f"{group} | {isl} | {med[0]:.1f} | {med[1]:.1f} | {med[2]:.1f} | {per}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("stages", "what-if", "latency", "shape", "host-gap"))
    parser.add_argument("row_ids", nargs="*", help="silicon_sample.csv row ids (stages, latency)")
    parser.add_argument("--rows", type=int, default=40, help="what-if: rows in the subset")
    parser.add_argument("--judge-rows", type=Path,
                        help="a judge run's rows.csv (e2e_accuracy.py --out): what-if takes only its simulated rows; "
                             "shape and host-gap read it")
    parser.add_argument("--out", type=Path, help="what-if: JSON lines, appended")
    parser.add_argument("--summary", type=Path, help="what-if: print the summary of this JSON-lines file and stop")
    parser.add_argument("--judge-client", action="store_true",
                        help="what-if: the profiles' costs against the judge's client costs (checks.client_costs)")
    parser.add_argument("--launches-serial", action="store_true",
                        help="what-if: the base step time against launches not overlapping the kernels")
    args = parser.parse_args()
    if args.mode in ("shape", "host-gap"):
        if args.judge_rows is None:
            parser.error(f"{args.mode}: --judge-rows FILE is required")
        print("\n".join(shape(args.judge_rows) if args.mode == "shape" else host_gap(args.judge_rows)))
        return 0
    if args.mode == "what-if" and args.summary:
        print("\n".join(summary(args.summary)))
        return 0
    rows = read_silicon_rows()
    if args.mode == "what-if":
        if args.out is None:
            parser.error("what-if: --out FILE is required")
        judged = None
        if args.judge_rows:
            with args.judge_rows.open(newline="") as f:
                judged = {r["row_id"] for r in csv.DictReader(f) if r["status"] == "simulated"}
        what_if(subset(rows, judged, args.rows), args.out, args.launches_serial, args.judge_client)
        print("\n".join(summary(args.out)))
        return 0
    by_id = {r.row_id: r for r in rows}
    unknown = [rid for rid in args.row_ids if rid not in by_id]
    if unknown or not args.row_ids:
        parser.error(f"row ids: give silicon_sample.csv ids; unknown: {', '.join(unknown) or '(none given)'}")
    for rid in args.row_ids:
        print("\n".join(stages(by_id[rid])) if args.mode == "stages" else latency(by_id[rid]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
