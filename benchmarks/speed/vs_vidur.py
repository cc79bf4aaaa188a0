"""roofline and Vidur on one request list, side by side: run time, CPU time, peak memory, and what each simulated.

    python benchmarks/speed/vs_vidur.py --vidur-python $VIDUR_VENV/bin/python \\
        --vidur-profiling VIDUR_CHECKOUT/data/profiling [--setup S] [--num-requests 10000] [--repeats 3] \\
        [--chunk-size 512] [--vidur-cache DIR]
    python benchmarks/speed/vs_vidur.py --num-requests 2000              # roofline alone (no Vidur given)

The request list (issue 20): Poisson arrivals (8 req/s by default), prompt + output tokens uniform in 256-2,048
with a 4:1 prompt:output split, at most 128 sequences a step, on one of two setups (`--setup`): Llama-2-7B on one
H100 (the issue's) or Llama-2-70B on two A100s with tensor parallelism (the one whose Vidur profiles are all
reachable here, below). It is written once, as roofline's CSV
trace (`arrival_s,prompt_tokens,output_tokens`) and as Vidur's trace-replay CSV (`Date,Time,PromptTokenCount,
CompletionTokenCount`, scale factors 1), and both tools run on it alternately (roofline, Vidur, roofline, ...),
each a fresh process writing its normal outputs: roofline `simulate --out` (requests.csv, steps.parquet with the
per-operator breakdown, timeseries.csv, summary.json), Vidur its metrics directory (request and batch metrics,
plots, chrome trace). Measured per run, from the parent: wall time, CPU time (user + system, `os.wait4`) and peak
resident memory of the child. So that a reader sees the two simulated the same load, each tool's own outputs give
its simulated output throughput (output tokens / (last finish - first arrival)) and mean TTFT and TPOT.

Vidur (PyPI `vidur`, 0.0.26 checked) goes in its own environment: `python -m venv $VIDUR_VENV &&
$VIDUR_VENV/bin/pip install vidur==0.0.26`, then `--vidur-python $VIDUR_VENV/bin/python`. Its runs use
the vLLM-style scheduler (`vllm`, batch cap 128, 8,192 batched tokens) or, with `--chunk-size`, Sarathi's chunked
prefill (roofline then gets `--max-num-batched-tokens` = the chunk size), and its default random-forest
execution-time predictor.

Vidur's profiling data: the PyPI package ships none. Vidur 0.0.26 downloads per-model operator profiles from the
Hugging Face Hub at run time (datasets `project-vajra/...`, `snapshot_download`), which a machine without that
network cannot reach. The profiles Vidur published are the CSVs in its repository (github.com/microsoft/vidur):
`data/profiling/compute/<device>/<model>/{mlp,attention}.csv` and `data/profiling/network/<network>/{all_reduce,
send_recv}.csv`; `--vidur-profiling` names a folder in that layout. For `llama-2-7b-h100` it is the repository's
`data/profiling` (compute/h100/meta-llama/Llama-2-7b-hf, network/h100_dgx). For `llama-2-70b-a100-tp2`:
compute/a100/meta-llama/Llama-2-70b-hf/mlp.csv and network/a100_pairwise_nvlink/* from the repository's HEAD, and as
compute/a100/meta-llama/Llama-2-70b-hf/attention.csv the file data/profiling/a100/attention.csv of its first commit
(e2d00e9: Llama-2-70B's attention shape, 8,192 wide with 64 / 8 heads, at TP 2, block size 16; the same columns
Vidur 0.0.26 reads). The script builds from the folder the offline Hub cache Vidur reads (`datasets--local--<name>/
refs/main` and `snapshots/<rev>/` holding `config.json` and the xz-compressed CSVs, under `--vidur-cache`) and
runs Vidur with `HF_HUB_OFFLINE=1` against those local dataset names. Vidur trains its random forests on the
first run and caches them (and its prediction tables) in the same folder; that first run is a warm-up and is not
timed (about an hour on a 2-core machine for the A100 setup; `--vidur-cache` keeps it for the next run).

Prints one line per run and a summary table; `--json FILE` writes every run.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Setup:
    """One model on one GPU type, as each tool names it."""

    roofline_model: str
    roofline_hardware: str
    tensor_parallel: int
    vidur_model: str
    vidur_device: str
    vidur_network: str


SETUPS = {
    # The list: every profile it needs is in Vidur's repository at HEAD except attention.csv, which is
    # stored there as a large file that no snapshot reachable here holds.
    "llama-2-7b-h100": Setup("llama-2-7b", "h100-sxm", 1, "meta-llama/Llama-2-7b-hf", "h100", "h100_dgx"),
    # The one attention profile Vidur published that is reachable here: Llama-2-70B's shape (8,192 wide, 64/8
    # heads) at TP 2 on A100, in the repository's first commit (e2d00e9, data/profiling/a100/attention.csv); its
    # mlp.csv (compute/a100/meta-llama/Llama-2-70b-hf) and the A100 pairwise-NVLink network CSVs are at HEAD.
    "llama-2-70b-a100-tp2": Setup("llama-2-70b", "a100-80gb-sxm", 2, "meta-llama/Llama-2-70b-hf", "a100",
                                  "a100_pairwise_nvlink"),
}
VIDUR_DATE = "2024-01-01"  # trace-replay rows are selected by a date; any, the same in the file and the flag


def request_list(num_requests: int, rate_per_s: float, seed: int) -> pd.DataFrame:
    """Poisson arrivals; prompt + output tokens uniform in [256, 2048], split 4:1 (at least one output token)."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate_per_s, num_requests))
    total = rng.integers(256, 2049, num_requests)
    output = np.maximum(1, np.round(total / 5.0).astype(np.int64))
    return pd.DataFrame({"arrival_s": arrival, "prompt_tokens": total - output, "output_tokens": output})


def write_traces(requests: pd.DataFrame, work: Path) -> tuple[Path, Path]:
    roofline_trace = work / "requests.csv"
    requests.to_csv(roofline_trace, index=False)
    vidur_trace = work / "requests_vidur.csv"
    pd.DataFrame({"Date": VIDUR_DATE, "Time": requests["arrival_s"], "PromptTokenCount": requests["prompt_tokens"],
                  "CompletionTokenCount": requests["output_tokens"]}).to_csv(vidur_trace, index=False)
    return roofline_trace, vidur_trace


def _hub_dataset(cache: Path, name: str, files: dict[str, Path], config: dict[str, object]) -> None:
    """One dataset `local/<name>` in the layout `huggingface_hub.snapshot_download` finds offline."""
    root = cache / f"datasets--local--{name}"
    revision = "0" * 40
    snapshot = root / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(revision)
    (snapshot / "config.json").write_text(json.dumps(config))
    for target, source in files.items():
        if not source.is_file():
            raise SystemExit(f"--vidur-profiling: missing {source}")
        with lzma.open(snapshot / target, "wb") as out:
            out.write(source.read_bytes())


def build_vidur_cache(profiling: Path, cache: Path, setup: Setup) -> tuple[str, str]:
    """The offline Hub cache of Vidur's compute and network profiles from its published CSVs; their dataset ids."""
    compute = profiling / "compute" / setup.vidur_device / setup.vidur_model
    network = profiling / "network" / setup.vidur_network
    compute_name = f"{setup.vidur_model.split('/')[-1].lower()}-{setup.vidur_device}"
    network_name = setup.vidur_network.replace("_", "-")
    _hub_dataset(cache / "profiling_data" / "compute", compute_name,
                 {"mlp.csv.xz": compute / "mlp.csv", "attention.csv.xz": compute / "attention.csv"},
                 {"model": setup.vidur_model, "device_sku": setup.vidur_device})
    _hub_dataset(cache / "profiling_data" / "network", network_name,
                 {"all_reduce.csv.xz": network / "all_reduce.csv", "send_recv.csv.xz": network / "send_recv.csv"},
                 {"sku": setup.vidur_network})
    return f"local/{compute_name}", f"local/{network_name}"


def roofline_command(trace: Path, out: Path, chunk_size: int | None, setup: Setup) -> list[str]:
    cmd = [sys.executable, "-m", "roofline", "simulate", "--model", setup.roofline_model, "--hardware",
           setup.roofline_hardware, "--tensor-parallel-size", str(setup.tensor_parallel),
           "--workload", str(trace), "--max-num-seqs", "128", "--out", str(out), "--json"]
    return cmd + (["--max-num-batched-tokens", str(chunk_size)] if chunk_size else [])


def vidur_command(python: str, trace: Path, out: Path, cache: Path, datasets: tuple[str, str],
                  chunk_size: int | None, setup: Setup, stages: int,
                  forest: tuple[int, int, int] | None = None, prediction_max_tokens: int | None = None) -> list[str]:
    predictor = "--random_forrest_execution_time_predictor_config"
    # One point of Vidur's random-forest grid (trees, depth, min samples to split) instead of its grid search, with
    # the least cross-validation folds (2): one forest trained per operator instead of 27 x 10 + 1.
    grid = [] if forest is None else [
        f"{predictor}_num_estimators", str(forest[0]), f"{predictor}_max_depth", str(forest[1]),
        f"{predictor}_min_samples_split", str(forest[2]), f"{predictor}_k_fold_cv_splits", "2"]
    # Vidur tabulates every forest's prediction before the run, for 1 to prediction_max_tokens_per_request tokens
    # (its default 2,097,152: about 2 million rows per operator, each table a dict held in memory every run).
    if prediction_max_tokens is not None:
        grid += [f"{predictor}_prediction_max_tokens_per_request", str(prediction_max_tokens)]
    if chunk_size:
        scheduler = ["--replica_scheduler_config_type", "sarathi", "--sarathi_scheduler_config_batch_size_cap", "128",
                     "--sarathi_scheduler_config_chunk_size", str(chunk_size)]
    else:
        scheduler = ["--replica_scheduler_config_type", "vllm", "--vllm_scheduler_config_batch_size_cap", "128",
                     "--vllm_scheduler_config_max_tokens_in_batch", "8192"]
    return [python, "-m", "vidur.main", "--replica_config_device", setup.vidur_device,
            "--replica_config_network_device", setup.vidur_network, "--replica_config_model_name", setup.vidur_model,
            # Vidur's default is 8-way tensor parallelism: the setup's instead. Its pipeline stages: `--vidur-stages`.
            "--replica_config_tensor_parallel_size", str(setup.tensor_parallel),
            "--replica_config_num_pipeline_stages", str(stages),
            "--request_generator_config_type", "trace_replay", "--trace_request_generator_config_trace_file",
            str(trace), "--trace_request_generator_config_date", VIDUR_DATE,
            "--trace_request_generator_config_prefill_scale_factor", "1",
            "--trace_request_generator_config_decode_scale_factor", "1",
            "--trace_request_generator_config_time_scale_factor", "1",
            "--trace_request_generator_config_max_tokens", "4096", *scheduler,
            f"{predictor}_model_profiling_dataset", datasets[0], f"{predictor}_network_profiling_dataset", datasets[1],
            f"{predictor}_cache_dir", str(cache), "--metrics_config_output_dir", str(out), *grid]


def run_measured(cmd: list[str], env: dict[str, str], cwd: Path) -> dict[str, object]:
    """Wall time, CPU time (user + system) and peak RSS of one child process; the tail of its stderr."""
    started = time.perf_counter()
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        _, status, usage = os.wait4(proc.pid, 0)
        wall_s = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        stdout, stderr = proc.stdout.read().decode(), proc.stderr.read().decode()
    return {"returncode": proc.returncode, "wall_s": wall_s, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": usage.ru_maxrss / 1024.0, "stdout": stdout, "stderr_tail": stderr.strip()[-2000:]}


def served(arrival_s: np.ndarray, finish_s: np.ndarray, output_tokens: np.ndarray, ttft_s: np.ndarray,
           tpot_s: np.ndarray) -> dict[str, float]:
    """What a tool simulated, computed the same way for both: output tokens/s over first arrival to last finish,
    mean TTFT and TPOT."""
    return {"output_tokens_per_s": float(output_tokens.sum() / (np.nanmax(finish_s) - arrival_s.min())),
            "mean_ttft_s": float(np.nanmean(ttft_s)), "mean_tpot_s": float(np.nanmean(tpot_s))}


def roofline_served(out: Path) -> dict[str, float]:
    r = pd.read_csv(out / "requests.csv")
    return served(r["arrival_s"].to_numpy(), r["finish_s"].to_numpy(), r["num_output_tokens"].to_numpy(),
                  r["ttft_s"].to_numpy(), r["tpot_s"].to_numpy())


def vidur_served(out: Path, requests: pd.DataFrame) -> dict[str, float]:
    """From Vidur's request_metrics.csv (one timestamped folder under its output dir): TTFT = prefill_e2e_time,
    TPOT = decode_time_execution_plus_preemption_normalized, finish = arrival + request_e2e_time."""
    metrics = sorted(out.glob("*/request_metrics.csv"))
    if not metrics:
        return {}
    m = pd.read_csv(metrics[-1])
    ids = m.iloc[:, 0].astype(int).to_numpy()  # Request Id: the trace row
    arrival = requests["arrival_s"].to_numpy()[ids]
    return served(arrival, arrival + m["request_e2e_time"].to_numpy(), m["request_num_decode_tokens"].to_numpy(),
                  m["prefill_e2e_time"].to_numpy(), m["decode_time_execution_plus_preemption_normalized"].to_numpy())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", choices=sorted(SETUPS), default="llama-2-7b-h100",
                        help="model and GPU (default llama-2-7b-h100, the issue's list)")
    parser.add_argument("--num-requests", type=int, default=10_000)
    parser.add_argument("--request-rate", type=float, default=8.0, help="Poisson arrivals, requests/s (default 8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each tool, alternating (default 3)")
    parser.add_argument("--chunk-size", type=int, default=None,
                        help="chunked prefill of this many tokens (Vidur: Sarathi scheduler; roofline: token budget)")
    parser.add_argument("--vidur-python", default=None, help="the Python of an environment with `vidur` installed")
    parser.add_argument("--vidur-profiling", type=Path, default=None,
                        help="Vidur's published profiling CSVs: the data/profiling folder of its repository")
    parser.add_argument("--vidur-stages", type=int, default=2,
                        help="Vidur's pipeline stages (default 2, Vidur's own default: with 1, Vidur 0.0.26 stopped "
                             "on an assertion in Request.on_batch_stage_end on the llama-2-70b-a100-tp2 list; "
                             "roofline runs the setup's tensor parallelism alone: no -pp is passed to it)")
    parser.add_argument("--vidur-forest", default=None, metavar="TREES,DEPTH,SPLIT",
                        help="train Vidur's random forests at this one point of its grid (e.g. 250,16,2) with 2 "
                             "cross-validation folds instead of its 27-point grid search with 10 (default: its "
                             "grid search, about an hour of a 2-core machine for llama-2-70b-a100-tp2); Vidur's cache "
                             "does not tell the two apart: give each its own --vidur-cache")
    parser.add_argument("--vidur-prediction-max-tokens", type=int, default=None, metavar="N",
                        help="Vidur's prediction tables up to N tokens (a batch's tokens, a request's KV cache) "
                             "instead of its default 2,097,152; N at least the batch's token cap (8,192) and the "
                             "longest request changes no prediction, only the tables' size (memory, start time)")
    parser.add_argument("--no-vidur-warmup", action="store_true",
                        help="no untimed warm-up run of Vidur: its --vidur-cache already holds the forests and "
                             "prediction tables of this setup (an earlier run of this script trained them)")
    parser.add_argument("--work-dir", type=Path, default=Path("vs-vidur"), help="traces and outputs (kept)")
    parser.add_argument("--vidur-cache", type=Path, default=None,
                        help="Vidur's cache (profiles, trained forests, prediction tables), kept between runs of "
                             "this script (default: inside --work-dir, which each run empties)")
    parser.add_argument("--json", type=Path, default=None, help="write every run here")
    args = parser.parse_args()
    if args.vidur_stages < 1:
        parser.error(f"--vidur-stages: a whole number >= 1, got {args.vidur_stages}")
    forest = None
    if args.vidur_forest is not None:
        parts = args.vidur_forest.split(",")
        if len(parts) != 3 or not all(p.isdigit() for p in parts) or min(int(p) for p in parts[:2]) < 1 \
                or int(parts[2]) < 2:
            parser.error(f"--vidur-forest: TREES,DEPTH,SPLIT, whole numbers, trees and depth >= 1, split >= 2 "
                         f"(e.g. 250,16,2), "
                         f"got {args.vidur_forest!r}")
        forest = (int(parts[0]), int(parts[1]), int(parts[2]))
    if args.vidur_prediction_max_tokens is not None and args.vidur_prediction_max_tokens < 8192:
        parser.error(f"--vidur-prediction-max-tokens: a whole number >= 8192 (the batch's token cap), "
                     f"got {args.vidur_prediction_max_tokens}")
    if args.vidur_python and args.vidur_profiling is None:
        parser.error("--vidur-python needs --vidur-profiling (Vidur's package ships no profiling data)")

    work = args.work_dir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    requests = request_list(args.num_requests, args.request_rate, args.seed)
    roofline_trace, vidur_trace = write_traces(requests, work)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    setup = SETUPS[args.setup]
    tools = {"roofline": lambda out: (roofline_command(roofline_trace, out, args.chunk_size, setup), env)}
    if args.vidur_python:
        cache = args.vidur_cache.resolve() if args.vidur_cache else work / "vidur-cache"
        datasets = build_vidur_cache(args.vidur_profiling.resolve(), cache, setup)
        vidur_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        vidur_env.update(HF_HUB_OFFLINE="1", WANDB_MODE="disabled")
        tools["vidur"] = lambda out: (vidur_command(args.vidur_python, vidur_trace, out, cache, datasets,
                                                    args.chunk_size, setup, args.vidur_stages, forest,
                                                    args.vidur_prediction_max_tokens), vidur_env)
        warm = run_measured(*tools["vidur"](work / "vidur-warmup"), cwd=work) if not args.no_vidur_warmup \
            else {"returncode": 0, "wall_s": 0.0}  # the warm-up trains and caches its forests
        print(f"vidur warm-up: exit {warm['returncode']}, {warm['wall_s']:.1f} s", flush=True)
        if warm["returncode"] != 0:
            print(f"vidur failed; its error:\n{warm['stderr_tail']}", flush=True)
            del tools["vidur"]

    runs: list[dict[str, object]] = []
    for repeat in range(args.repeats):
        for tool, command in tools.items():
            out = work / f"{tool}-{repeat}"
            run = run_measured(*command(out), cwd=work)
            run.update(tool=tool, repeat=repeat)
            if run["returncode"] == 0:
                run.update(roofline_served(out) if tool == "roofline" else vidur_served(out, requests))
            runs.append(run)
            print(f"{tool:8s} run {repeat}: exit {run['returncode']}, wall {run['wall_s']:.2f} s, "
                  f"CPU {run['cpu_s']:.2f} s, peak RSS {run['peak_rss_mb']:.0f} MB, "
                  f"{run.get('output_tokens_per_s', float('nan')):.1f} output tok/s, "
                  f"TTFT {run.get('mean_ttft_s', float('nan')):.3f} s, TPOT {run.get('mean_tpot_s', float('nan')):.4f} s",
                  flush=True)
            if run["returncode"] != 0:
                print(run["stderr_tail"], flush=True)

    print(f"\n{args.setup}: {args.num_requests} requests at {args.request_rate} req/s, "
          f"chunk size {args.chunk_size or 'none'}; "
          "medians over the runs:")
    print("| tool | wall (s), each run | median wall (s) | CPU (s) | peak RSS (MB) | output tok/s | mean TTFT (s) "
          "| mean TPOT (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for tool in tools:
        ok = [r for r in runs if r["tool"] == tool and r["returncode"] == 0]
        if not ok:
            continue

        def med(key: str, rows: list[dict[str, object]] = ok) -> float:
            return statistics.median(float(r[key]) for r in rows)

        walls = ", ".join(f"{r['wall_s']:.2f}" for r in ok)
        print(f"| {tool} | {walls} | {med('wall_s'):.2f} | {med('cpu_s'):.2f} "
              f"| {med('peak_rss_mb'):.0f} | {med('output_tokens_per_s'):.1f} | {med('mean_ttft_s'):.3f} "
              f"| {med('mean_tpot_s'):.4f} |")
    if args.json:
        args.json.write_text(json.dumps([{k: v for k, v in r.items() if k != "stdout"} for r in runs], indent=1))
    return 0 if all(r["returncode"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
