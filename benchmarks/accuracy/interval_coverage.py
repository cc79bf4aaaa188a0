"""Coverage of `roofline simulate --intervals` on the end-to-end judge: the share of measured TTFT and TPOT inside the
predicted interval. A judge only: the intervals come from the operator tables (`roofline.calibration.uncertainty`),
nothing here is fitted on `silicon_sample.csv`.

    python benchmarks/accuracy/interval_coverage.py --rows-per-gpu 50 --jobs 1      # -> $OUT (default below)

A stratified subset, by a fixed rule: per GPU, the rows `e2e_accuracy.py` simulates (`roofline.judge.rows`:
vLLM `agg` rows that are not skipped) whose assumed client generates at most `--max-client-tokens` output tokens
(10 x N x OSL; 250k keeps about half of each GPU's rows, 115 to 253, and a twelfth of the simulation work of the
first 50 rows: the short runs, so the subset leans to low concurrency and short outputs), ordered by the CRC-32 of their
row id, the first `--rows-per-gpu`; run GPU by GPU in turn (the first row of each, then the second, ...), so that a
`--budget-minutes` leaves every GPU with about as many rows. Each row as
`e2e_accuracy.py` runs it (the assumed client: 10 x N prompts, lengths uniform in [0.8 L, L], `--max-concurrency N`,
`--request-rate inf`; means over the requests), once with the cost model as fitted (the central value) and once per
sampled cost model (`--samples`, default `roofline simulate`'s), the interval the samples' percentiles at `--level`
(`roofline.sim.intervals.IntervalSpec`). Reported overall, per GPU and per model: the share of rows whose measured
mean TTFT / TPOT lies inside, below and above the interval, and the interval's median width relative to the central
value. Per-row results are cached under OUT/cache/ keyed by the code identity (`e2e_accuracy.code_identity`) and the
sampling settings, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_accuracy import (  # noqa: E402 - the judge's own reading of the rows and its cache identity
    PROMPTS_PER_CONCURRENCY,
    SYSTEM_ORDER,
    _mean,
    code_identity,
    commit_label,
    source_root,
)

from roofline.judge.checks import RANGE_RATIO, client_costs, client_workload  # noqa: E402
from roofline.judge.rows import RowError, SimCase, Skip, read_silicon_rows, resolve_row  # noqa: E402
from roofline.sim.intervals import (  # noqa: E402
    DEFAULT_LEVEL_PERCENT,
    DEFAULT_NUM_SAMPLES,
    IntervalSpec,
    apply_noise,
)

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "e2e" / "intervals"  # git-ignored
SEED = 0  # the sampling seed (roofline simulate's default workload seed)


def select_rows(rows_per_gpu: int, max_client_tokens: float, gpus: tuple[str, ...] = SYSTEM_ORDER) -> list[SimCase]:
    """Per GPU (of `gpus`, in `SYSTEM_ORDER`), the first `rows_per_gpu` simulated rows of at most `max_client_tokens`
    output tokens by the CRC-32 of their row id, interleaved GPU by GPU."""
    by_gpu: dict[str, list[SimCase]] = defaultdict(list)
    for row in read_silicon_rows():
        try:
            case = resolve_row(row)
        except RowError:
            continue
        if not isinstance(case, Skip) and PROMPTS_PER_CONCURRENCY * case.concurrency * row.osl <= max_client_tokens:
            by_gpu[row.system].append(case)
    chosen = [sorted(by_gpu.get(s, []), key=lambda c: zlib.crc32(c.row.row_id.encode()))[:rows_per_gpu]
              for s in SYSTEM_ORDER if s in gpus]
    return [c[i] for i in range(rows_per_gpu) for c in chosen if i < len(c)]


def simulate_row(case: SimCase, spec: IntervalSpec) -> dict:
    """Mean TTFT and TPOT of the row, as fitted and for each sampled cost model."""
    from roofline.cost.hardware import load_profile
    from roofline.cost.kv_capacity import KvCacheTooSmall
    from roofline.engine_args import AUTO_FIT_MAX_MODEL_LEN
    from roofline.judge.rows import kv_vllm_version
    from roofline.registry import load_model
    from roofline.sim.deployment import make_deployment
    from roofline.sim.simulator import SimulationOptions, run_simulation
    from roofline.sim.workload import KeptPrompts, sample_requests

    row, n = case.row, case.concurrency
    spec_model = load_model(case.config_path)
    version = kv_vllm_version(row.backend_version)
    engine = case.engine
    hw = load_profile(case.hardware_id)
    try:
        make_deployment(spec_model, hw, engine, vllm_version=version)
    except KvCacheTooSmall:  # as e2e_accuracy.simulate_case: vLLM would not start with the model's length
        engine = replace(engine, max_model_len=AUTO_FIT_MAX_MODEL_LEN)
    workload = client_workload(row, PROMPTS_PER_CONCURRENCY * n, RANGE_RATIO)
    # as e2e_accuracy.simulate_case: the row's API-server processes and the judge's client (its per-request time on
    # the rows InferenceX measured)
    options = SimulationOptions(max_concurrency=n, record_steps=False, api_server_count=case.api_server_count,
                                api_server_costs=client_costs(row))
    specs = sample_requests(workload)  # the same requests and prompts for every run of the row, made once
    prompts = KeptPrompts.kept(workload, specs, spec_model.vocab_size, spec_model.bos_token_id, spec_model.eos_token_id)
    out: dict = {"row_id": row.row_id, "system": row.system, "model": row.model_path.split("/")[-1],
                 "measured_ttft_s": row.measured_ttft_s, "measured_tpot_s": row.measured_tpot_s}
    started = time.perf_counter()
    noise = [{}] + spec.noise(hw)  # the run-to-run factors where the host states them (none for the central value)
    for (label, profile), factors in zip([("central", hw)] + [(f"sample_{i}", p)
                                                                for i, p in enumerate(spec.profiles(hw))], noise):
        result = run_simulation(make_deployment(spec_model, profile, engine, vllm_version=version), workload, options,
                                specs=specs, prompts=prompts)
        out[label] = apply_noise({"ttft_s": _mean(result.requests.ttft_s.to_numpy()),
                                  "tpot_s": _mean(result.requests.tpot_s.to_numpy())}, factors)
    out["wall_s"] = time.perf_counter() - started
    return out


def coverage(rows: list[dict], spec: IntervalSpec) -> dict:
    """Per metric: the share of measured values inside / below / above the interval, and its median relative width."""
    out: dict = {"rows": len(rows)}
    for metric in ("ttft", "tpot"):
        inside = below = above = 0
        widths, errors = [], []
        for r in rows:
            samples = [r[f"sample_{i}"][f"{metric}_s"] for i in range(spec.num_samples)]
            central, measured = r["central"][f"{metric}_s"], r[f"measured_{metric}_s"]
            if central is None or any(s is None for s in samples):
                continue
            low, high = spec.bounds(samples)
            inside += low <= measured <= high
            below += measured < low
            above += measured > high
            widths.append((high - low) / central)
            errors.append(central / measured - 1)
        m = inside + below + above
        out[metric] = {"num_rows": m, "inside_pct": _pct(inside, m), "measured_below_pct": _pct(below, m),
                       "measured_above_pct": _pct(above, m),
                       "median_width_pct": round(100 * float(np.median(widths)), 1) if widths else None,
                       "median_abs_err_pct": round(100 * float(np.median(np.abs(errors))), 1) if errors else None}
    return out


def _pct(count: int, total: int) -> float | None:
    return round(100 * count / total, 1) if total else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output and cache folder (default: %(default)s)")
    parser.add_argument("--rows-per-gpu", type=int, default=50, help="rows per GPU (default: %(default)s)")
    parser.add_argument("--max-client-tokens", type=float, default=2.5e5,
                        help="only rows whose client generates at most this many tokens (default: %(default)g)")
    parser.add_argument("--gpus", default=",".join(SYSTEM_ORDER),
                        help="comma-separated GPUs whose rows to run (default: all; a budget then reaches "
                             "--rows-per-gpu on fewer GPUs; the cache serves a later run of all)")
    parser.add_argument("--models", default="",
                        help="comma-separated model names of the selected rows to run (default: all; a subset's "
                             "figures are that subset's)")
    parser.add_argument("--level", type=float, default=DEFAULT_LEVEL_PERCENT, help="interval, %% (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=DEFAULT_NUM_SAMPLES, help="sampled cost models per row "
                                                                                   "(default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=1, help="rows simulated at once (default: %(default)s)")
    parser.add_argument("--budget-minutes", type=float, default=0.0,
                        help="start no new row after this many minutes; a re-run resumes from the cache (0: none)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    root = source_root()
    identity = code_identity(root)
    spec = IntervalSpec(args.level, args.samples, SEED, 1)
    cache = args.out / "cache" / f"{identity}-l{args.level:g}-n{args.samples}-s{SEED}"
    cache.mkdir(parents=True, exist_ok=True)
    gpus = tuple(args.gpus.split(","))
    if set(gpus) - set(SYSTEM_ORDER):
        parser.error(f"--gpus: {', '.join(sorted(set(gpus) - set(SYSTEM_ORDER)))} is not allowed; allowed: a "
                     f"comma-separated subset of {', '.join(SYSTEM_ORDER)}")
    cases = select_rows(args.rows_per_gpu, args.max_client_tokens, gpus)
    if args.models:
        wanted = set(args.models.split(","))
        models = {c.row.model_path.split("/")[-1] for c in cases}
        if wanted - models:
            parser.error(f"--models: {', '.join(sorted(wanted - models))} not among the selected rows' models; "
                         f"allowed: {', '.join(sorted(models))}")
        cases = [c for c in cases if c.row.model_path.split("/")[-1] in wanted]
    print(f"{len(cases)} rows ({args.rows_per_gpu} per GPU at most), code identity {identity}", file=sys.stderr)
    results: list[dict] = []
    todo = []
    for case in cases:
        path = cache / f"{case.row.row_id.replace('/', '_')}.json"
        if path.exists():
            results.append(json.loads(path.read_text()))
        else:
            todo.append((case, path))
    deadline = started + 60 * args.budget_minutes if args.budget_minutes > 0 else float("inf")
    if args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(args.jobs) as pool:
            for (case, path), data in zip(todo, pool.map(simulate_row, [c for c, _ in todo],
                                                         [spec] * len(todo))):
                path.write_text(json.dumps(data))
                results.append(data)
    else:
        for i, (case, path) in enumerate(todo):
            if time.perf_counter() > deadline:
                print(f"budget reached: {len(todo) - i} rows not run", file=sys.stderr)
                break
            data = simulate_row(case, spec)
            path.write_text(json.dumps(data))
            results.append(data)
            print(f"[{time.perf_counter() - started:6.0f} s] {i + 1}/{len(todo)} {case.row.system} "
                  f"{data['model']} {data['wall_s']:.1f} s", file=sys.stderr, flush=True)
    order = {c.row.row_id: i for i, c in enumerate(cases)}
    results.sort(key=lambda r: order[r["row_id"]])
    report = {"commit": commit_label(root), "code_identity": identity,
              "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": "python benchmarks/accuracy/interval_coverage.py " + " ".join(sys.argv[1:] if argv is None
                                                                                       else argv),
              "max_client_tokens": args.max_client_tokens, "num_rows_run": len(results),
              "level_percent": args.level, "num_samples": args.samples, "rows_per_gpu": args.rows_per_gpu,
              "overall": coverage(results, spec),
              "per_gpu": {s: coverage([r for r in results if r["system"] == s], spec) for s in SYSTEM_ORDER
                          if any(r["system"] == s for r in results)},
              "per_gpu_model": {f"{s} {m}": coverage([r for r in results if r["system"] == s and r["model"] == m], spec)
                                for s, m in sorted({(r["system"], r["model"]) for r in results})}}
    (args.out / "summary.json").write_text(json.dumps(report, indent=1))
    for group, entry in [("overall", report["overall"]), *report["per_gpu"].items(), *report["per_gpu_model"].items()]:
        cells = [f"{m.upper()} inside {entry[m]['inside_pct']} % (below {entry[m]['measured_below_pct']}, above "
                 f"{entry[m]['measured_above_pct']}; width {entry[m]['median_width_pct']} %, |err| "
                 f"{entry[m]['median_abs_err_pct']} %)" for m in ("ttft", "tpot")]
        print(f"{group:>32} {entry['rows']:4d} rows  {'; '.join(cells)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
