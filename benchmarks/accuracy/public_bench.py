"""Published `vllm bench serve` results against the simulator: the second end-to-end judge, on GPUs.

    python benchmarks/accuracy/public_bench.py --out $OUT/pubbench [--cases benchmarks/data/public_vllm_bench_cases.yaml]
        [--only ID ...] [--check]

Each case of the YAML file is one published result block (source, deployment, load, the printed figures, what the
source does not say; the file's header describes the fields). `--check` only loads and validates the file. Otherwise
each case is simulated as `roofline compare --vllm-bench` simulates a saved result (`roofline.commands.compare`, in
process): the case's figures and load become the result record vLLM's --save-result would have written, its serve
flags are passed as given, its model and GPU are the shipped preset and profile it names. The load:
- random dataset: the stated `--random-input-len` / `--random-output-len` (vLLM's default range ratio 0 in every
  release here: fixed lengths); where the printed total of generated tokens is more than 2 % short of
  num_prompts x the output length (no --ignore-eos: EOS ended some outputs), every output at the printed mean
  (total_output_tokens / completed), labelled `output: printed mean`;
- ShareGPT: not replayable here (no dataset file, no tokenizer), so every request at the printed mean lengths
  (total_input_tokens / completed, total_output_tokens / completed), labelled `sharegpt as mean lengths`; a ShareGPT
  case without those totals is not simulated, with the reason.
Scored: mean TTFT, median TTFT, mean TPOT and output throughput, relative error predicted / measured - 1; per load
shape (burst: request rate inf and no max concurrency; rate-limited: a finite rate; closed loop: a max concurrency)
and overall (and the cases at random lengths apart from the ShareGPT ones at mean lengths), n, median and p90 of
|error| and the bias (mean signed error). Per burst, where the simulated time goes (`roofline.sim.time_split`: steps
with prefill, decode-only steps, idle, the last request's first step) beside the measured median and p99 ITL
(report.md, summary.json). Written under --out: report.md, rows.csv
(one line per case, every printed metric predicted and measured) and summary.json. A JUDGE: nothing is fitted here,
no model term is chosen by it. Same cases, same outputs (no clock, no randomness beyond the cases' seeds).

Bad case file: one line naming the case and the field, exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from roofline import cli  # noqa: E402
from roofline.calibration.vllm_bench import FIRST_V1_VERSION  # noqa: E402
from roofline.cost.hardware import load_profile  # noqa: E402
from roofline.errors import UserError  # noqa: E402
from roofline.registry import list_ids  # noqa: E402
from roofline.sim.simulator import ROUTERS  # noqa: E402
from roofline.yaml_file import read_yaml  # noqa: E402

DEFAULT_CASES = ROOT / "benchmarks" / "data" / "public_vllm_bench_cases.yaml"
SCORED = ("mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "output_throughput")
SHAPES = ("burst", "rate-limited", "closed loop")
BACKENDS = ("vllm", "openai", "openai-chat")
DATASETS = ("random", "sharegpt")
# The printed figures a case may hold (vLLM's --save-result names) and the ones every case must hold.
MEASURED_KEYS = ("completed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
                 "output_throughput") + tuple(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl")
                                              for s in ("mean", "median", "p99"))
REQUIRED_MEASURED = ("completed", "duration") + SCORED
SECTIONS = {"id", "source", "deployment", "load", "measured", "unknowns"}
SOURCE_KEYS = {"url", "title", "date"}
DEPLOYMENT_KEYS = {"model", "model_hf_id", "hardware", "gpu_count", "gpu_stated", "serve_command", "serve_args",
                   "vllm_version", "vllm_version_note", "num_replicas", "router"}
DEPLOYMENT_REQUIRED = DEPLOYMENT_KEYS - {"num_replicas", "router"}
LOAD_KEYS = {"backend", "dataset", "random_input_len", "random_output_len", "num_prompts", "request_rate",
             "burstiness", "max_concurrency", "seed"}
SHORT_OUTPUT = 0.98  # printed total below this share of num_prompts x output length: EOS ended outputs early


# ---- the case file -------------------------------------------------------------------------------------------

def load_cases(path: Path) -> list[dict[str, Any]]:
    """The validated cases of a case file; a `UserError` naming the case and the field for a bad one."""
    data = read_yaml(path)
    if not isinstance(data, dict) or set(data) != {"cases"} or not isinstance(data["cases"], list) \
            or not data["cases"]:
        raise UserError(f"{path}: a mapping with one key 'cases' holding a non-empty list of cases")
    models, profiles = set(list_ids("model")), set(list_ids("hardware"))
    seen: set[str] = set()
    for index, case in enumerate(data["cases"]):
        where = f"{path}: case {index}"
        if not isinstance(case, dict):
            raise UserError(f"{where}: a mapping with keys {', '.join(sorted(SECTIONS))}")
        if not isinstance(case.get("id"), str) or not case["id"]:
            raise UserError(f"{where}: id: a non-empty string")
        where = f"{path}: case {case['id']}"
        if case["id"] in seen:
            raise UserError(f"{where}: id given twice")
        seen.add(case["id"])
        _keys(case, SECTIONS, where)
        _check_source(case["source"], where)
        _check_deployment(case["deployment"], where, models, profiles)
        _check_load(case["load"], where)
        _check_measured(case, where)
        unknowns = case["unknowns"]
        if not isinstance(unknowns, list) or not all(isinstance(u, str) and u for u in unknowns):
            raise UserError(f"{where}: unknowns: a list of non-empty strings (what the source does not say)")
    return data["cases"]


def _keys(section: Any, allowed: set[str], where: str, required: set[str] | None = None) -> None:
    if not isinstance(section, dict):
        raise UserError(f"{where}: a mapping with keys {', '.join(sorted(allowed))}")
    unknown = sorted(set(section) - allowed)
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}")
    missing = sorted((allowed if required is None else required) - set(section))
    if missing:
        raise UserError(f"{where}: missing key {missing[0]!r}")


def _check_source(source: Any, where: str) -> None:
    _keys(source, SOURCE_KEYS, f"{where}: source")
    if not isinstance(source["url"], str) or not source["url"].startswith("https://"):
        raise UserError(f"{where}: source.url: an https:// URL of the published result, got {source['url']!r}")
    for key in ("title", "date"):
        if not isinstance(source[key], str) or not source[key].strip():
            raise UserError(f"{where}: source.{key}: a non-empty string")


def _check_deployment(deployment: Any, where: str, models: set[str], profiles: set[str]) -> None:
    _keys(deployment, DEPLOYMENT_KEYS, f"{where}: deployment", required=DEPLOYMENT_REQUIRED)
    if deployment["model"] not in models:
        raise UserError(f"{where}: deployment.model: {deployment['model']!r} is not a shipped model preset "
                        f"(roofline models)")
    if deployment["hardware"] not in profiles:
        raise UserError(f"{where}: deployment.hardware: {deployment['hardware']!r} is not a shipped hardware profile "
                        f"(roofline profiles)")
    if load_profile(deployment["hardware"]).kind == "cpu":
        raise UserError(f"{where}: deployment.hardware: {deployment['hardware']!r} is a CPU profile; this judge is "
                        f"for GPUs")
    gpus = deployment["gpu_count"]
    if not (isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 1):
        raise UserError(f"{where}: deployment.gpu_count: a positive integer, got {gpus!r}")
    if not isinstance(deployment["serve_args"], str):
        raise UserError(f"{where}: deployment.serve_args: a string of vllm serve flags ('' for none)")
    replicas = deployment.get("num_replicas", 1)
    if not _positive_int(replicas):
        raise UserError(f"{where}: deployment.num_replicas: a positive integer (vLLM servers behind one router)")
    if deployment.get("router", "round_robin") not in ROUTERS:
        raise UserError(f"{where}: deployment.router: {deployment['router']!r}; allowed: {', '.join(ROUTERS)}")
    parallel = _parallel_sizes(deployment["serve_args"])
    if parallel * replicas != gpus:
        raise UserError(f"{where}: deployment.gpu_count: {gpus} GPUs, but num_replicas x TP x PP x DP = "
                        f"{replicas} x {parallel}")
    for key in ("model_hf_id", "gpu_stated", "serve_command", "vllm_version_note"):
        if not isinstance(deployment[key], str) or not deployment[key].strip():
            raise UserError(f"{where}: deployment.{key}: a non-empty string")
    version = str(deployment["vllm_version"])
    parts = version.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise UserError(f"{where}: deployment.vllm_version: {version!r} is not a vLLM version such as 0.11.0")
    if (int(parts[0]), int(parts[1])) < FIRST_V1_VERSION:
        raise UserError(f"{where}: deployment.vllm_version: {version} ran the V0 engine (V1 is the default from 0.8.0); "
                        f"allowed: 0.8 or later")


def _parallel_sizes(serve_args: str) -> int:
    """TP x PP x DP of a vllm serve flag string (each 1 when not given)."""
    parser = argparse.ArgumentParser(add_help=False)
    for short, long in (("-tp", "--tensor-parallel-size"), ("-pp", "--pipeline-parallel-size"),
                        ("-dp", "--data-parallel-size")):
        parser.add_argument(short, long, type=int, default=1)
    known, _ = parser.parse_known_args(shlex.split(serve_args))
    return int(known.tensor_parallel_size * known.pipeline_parallel_size * known.data_parallel_size)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_load(load: Any, where: str) -> None:
    _keys(load, LOAD_KEYS, f"{where}: load", required={"backend", "dataset", "num_prompts", "request_rate",
                                                        "max_concurrency"})
    if load["backend"] not in BACKENDS:
        raise UserError(f"{where}: load.backend: {load['backend']!r}; allowed: {', '.join(BACKENDS)}")
    if load["dataset"] not in DATASETS:
        raise UserError(f"{where}: load.dataset: {load['dataset']!r}; allowed: {', '.join(DATASETS)}")
    lengths = ("random_input_len", "random_output_len")
    if load["dataset"] == "random":
        for key in lengths:
            if not _positive_int(load.get(key)):
                raise UserError(f"{where}: load.{key}: a positive integer (the run's --{key.replace('_', '-')})")
    elif any(key in load for key in lengths):
        raise UserError(f"{where}: load.random_input_len / random_output_len: only with dataset random")
    if not _positive_int(load["num_prompts"]):
        raise UserError(f"{where}: load.num_prompts: a positive integer")
    rate = load["request_rate"]
    if rate != "inf" and not (isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0
                              and math.isfinite(rate)):
        raise UserError(f"{where}: load.request_rate: {rate!r}; allowed: inf or a positive number (requests/s)")
    if load["max_concurrency"] is not None and not _positive_int(load["max_concurrency"]):
        raise UserError(f"{where}: load.max_concurrency: null (open loop) or a positive integer")
    if "burstiness" in load and not (isinstance(load["burstiness"], (int, float)) and load["burstiness"] > 0):
        raise UserError(f"{where}: load.burstiness: a positive number")
    if "seed" in load and not (isinstance(load["seed"], int) and not isinstance(load["seed"], bool)):
        raise UserError(f"{where}: load.seed: an integer")


def _check_measured(case: dict[str, Any], where: str) -> None:
    measured = case["measured"]
    _keys(measured, set(MEASURED_KEYS), f"{where}: measured", required=set(REQUIRED_MEASURED))
    for key, value in measured.items():
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and value > 0):
            raise UserError(f"{where}: measured.{key}: {value!r}; allowed: a positive number as the source prints it")
    if measured["completed"] > case["load"]["num_prompts"]:
        raise UserError(f"{where}: measured.completed: {measured['completed']} is more than load.num_prompts "
                        f"{case['load']['num_prompts']}")


# ---- one case through `roofline compare --vllm-bench` ----------------------------------------------------------

def load_shape(load: dict[str, Any]) -> str:
    if load["max_concurrency"] is not None:
        return "closed loop"
    return "burst" if load["request_rate"] == "inf" else "rate-limited"


def simulated_lengths(case: dict[str, Any]) -> tuple[int, int, str] | str:
    """(input, output, how) the simulator sends, or the reason the case cannot be simulated."""
    load, measured = case["load"], case["measured"]
    completed = measured["completed"]
    if load["dataset"] == "sharegpt":
        if "total_input_tokens" not in measured or "total_output_tokens" not in measured:
            return ("ShareGPT without the printed token totals: no file to replay and no mean lengths to stand in "
                    "for it")
        return (round(measured["total_input_tokens"] / completed), round(measured["total_output_tokens"] / completed),
                "sharegpt as mean lengths")
    input_len, output_len = load["random_input_len"], load["random_output_len"]
    total = measured.get("total_output_tokens")
    if total is not None and total < SHORT_OUTPUT * completed * output_len:
        return input_len, max(1, round(total / completed)), "random; output: printed mean"
    return input_len, output_len, "random, as stated"


def result_record(case: dict[str, Any]) -> dict[str, Any]:
    """The --save-result record vLLM would have written for the case (its load and printed figures)."""
    load, deployment = case["load"], case["deployment"]
    # num_prompts is what completed: a failed request is not simulated (`roofline compare` replays none).
    return {"backend": load["backend"], "model_id": deployment["model_hf_id"],
            "num_prompts": case["measured"]["completed"], "request_rate": load["request_rate"],
            "burstiness": load.get("burstiness", 1.0), "max_concurrency": load["max_concurrency"],
            "vllm_version": str(deployment["vllm_version"]), **case["measured"]}


def simulate_case(case: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """The case's row: predicted and measured figures, or `not_simulated` with the reason."""
    deployment, load = case["deployment"], case["load"]
    row: dict[str, Any] = {"id": case["id"], "shape": load_shape(load), "model": deployment["model"],
                           "hardware": deployment["hardware"], "gpus": deployment["gpu_count"],
                           "serve_args": deployment["serve_args"], "vllm_version": str(deployment["vllm_version"]),
                           "dataset": load["dataset"], "num_prompts": case["measured"]["completed"],
                           "request_rate": load["request_rate"], "max_concurrency": load["max_concurrency"],
                           "source": case["source"]["url"]}
    lengths = simulated_lengths(case)
    if isinstance(lengths, str):
        return {**row, "not_simulated": lengths}
    input_len, output_len, how = lengths
    row.update(input_len=input_len, output_len=output_len, lengths=how)
    record_path = workdir / f"{case['id']}.json"
    record_path.write_text(json.dumps(result_record(case)))
    argv = ["compare", "--vllm-bench", str(record_path), "--model", deployment["model"], "--hardware",
            deployment["hardware"], "--random-input-len", str(input_len), "--random-output-len", str(output_len),
            "--json"]
    if "seed" in load:
        argv += ["--seed", str(load["seed"])]
    argv += ["--num-replicas", str(deployment.get("num_replicas", 1)), "--router",
             deployment.get("router", "round_robin")]
    argv += shlex.split(deployment["serve_args"])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    if code != 0:
        return {**row, "not_simulated": err.getvalue().strip().splitlines()[-1] if err.getvalue().strip()
                else f"roofline compare exited {code}"}
    result = json.loads(out.getvalue())
    metrics = {m["metric"]: m for m in result["metrics"]}
    row["metrics"] = {k: {"predicted": v["predicted"], "measured": v["measured"], "rel_err": v["rel_err"]}
                      for k, v in metrics.items()}
    row["verdict"] = result["verdict"]["text"]
    row["simulated_time"] = result["simulated_time"]
    row["decoding_at_once"] = result["decoding_at_once"]
    row["command"] = "roofline " + " ".join(shlex.quote(a) for a in argv).replace(str(record_path),
                                                                                  f"<{case['id']}.json>")
    return row


# ---- summary and report --------------------------------------------------------------------------------------

def stats(errors: list[float]) -> dict[str, Any]:
    """n, median and p90 of |relative error|, bias = mean signed relative error (fractions)."""
    if not errors:
        return {"n": 0, "median": None, "p90": None, "bias": None}
    rel = np.array(errors, dtype=float)
    return {"n": int(len(rel)), "median": float(np.median(np.abs(rel))),
            "p90": float(np.percentile(np.abs(rel), 90)), "bias": float(rel.mean())}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    simulated = [r for r in rows if "metrics" in r]
    groups = {shape: [r for r in simulated if r["shape"] == shape] for shape in SHAPES}
    groups["all"] = simulated
    # The ShareGPT cases run at their mean lengths (not the dataset's spread): apart, so that the stand-in shows.
    for name, mean_lengths in (("random lengths", False), ("sharegpt as mean lengths", True)):
        groups[name] = [r for r in simulated if (r["lengths"] == "sharegpt as mean lengths") == mean_lengths]
    return {name: {metric: stats([r["metrics"][metric]["rel_err"] for r in group
                                  if r["metrics"].get(metric, {}).get("rel_err") is not None])
                   for metric in SCORED} for name, group in groups.items()}


def _pct(value: float | None, signed: bool = False) -> str:
    return "-" if value is None else f"{100 * value:+.1f}" if signed else f"{100 * value:.1f}"


def report_markdown(rows: list[dict[str, Any]], summary: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = ["# Published vllm bench serve results against the simulator", "",
             f"commit {meta['commit']}; cases {meta['cases_file']} ({meta['num_cases']} cases, "
             f"{meta['num_simulated']} simulated). Errors: predicted / measured - 1, %.", "",
             "| shape | metric | n | median abs. error | p90 abs. error | bias |", "|---|---|---|---|---|---|"]
    for name in summary:
        for metric in SCORED:
            st = summary[name][metric]
            lines.append(f"| {name} | {metric} | {st['n']} | {_pct(st['median'])} | {_pct(st['p90'])} | "
                         f"{_pct(st['bias'], True)} |")
    lines += ["", "| case | shape | model | GPU x n | vLLM | lengths in / out | " +
              " | ".join(f"{m} meas / pred (err)" for m in SCORED) + " | simulated verdict |",
              "|---|---|---|---|---|---|" + "---|" * len(SCORED) + "---|"]
    for r in rows:
        if "metrics" not in r:
            continue
        cells = []
        for metric in SCORED:
            m = r["metrics"].get(metric)
            cells.append("-" if m is None else f"{m['measured']:.4g} / {m['predicted']:.4g} "
                                               f"({_pct(m['rel_err'], True)})")
        lines.append(f"| [{r['id']}]({r['source']}) | {r['shape']} | {r['model']} | {r['hardware']} x {r['gpus']} | "
                     f"{r['vllm_version']} | {r['input_len']} / {r['output_len']} ({r['lengths']}) | "
                     + " | ".join(cells) + f" | {r['verdict']} |")
    lines += time_split_table(rows)
    skipped = [r for r in rows if "not_simulated" in r]
    if skipped:
        lines += ["", "Not simulated:"] + [f"- {r['id']}: {r['not_simulated']}" for r in skipped]
    return "\n".join(lines) + "\n"


def time_split_table(rows: list[dict[str, Any]]) -> list[str]:
    """The bursts' simulated time by stage (`roofline.sim.time_split`) beside what the measured block says of the
    same stages: its duration, its median ITL (the commoner kind of step) and p99 ITL (the longer kind), and the
    requests decoding at once on average (Little's law: output tok/s x mean TPOT), measured and simulated: where
    they agree the engine's schedule (admission, KV cache, batch) is the measured one and the time per step is
    what differs; where the simulated is larger, the real server held the requests back before the engine."""
    bursts = [r for r in rows if "metrics" in r and r["shape"] == "burst"]
    if not bursts:
        return []
    lines = ["", "Bursts: where the simulated time goes (engine-seconds over replicas) beside the measured ITL. "
             "Steps with prefill carry a prompt chunk (decodes beside it), decode-only steps one token per sequence; "
             "decoding at once: output tok/s x mean TPOT (Little's law), the requests decoding together on average.",
             "", "| case | duration s meas / sim | steps with prefill: n, total s, median ms (tokens) | decode-only: n, "
             "total s, median ms (sequences) | ITL ms meas / sim: median, p99 | last request first scheduled s | "
             "preemptions | decoding at once meas / sim |", "|---|---|---|---|---|---|---|---|"]
    for r in bursts:
        t, m = r["simulated_time"], r["metrics"]
        p, d = t["steps_with_prefill"], t["decode_only_steps"]

        def itl(key: str) -> str:
            v = m.get(key)
            return "-" if v is None or v["predicted"] is None else f"{v['measured']:.4g} / {v['predicted']:.4g}"

        def kind(k: dict[str, Any], median_key: str) -> str:
            if not k["count"]:
                return "0"
            return f"{k['count']}, {k['total_s']:.4g}, {1e3 * k['median_s']:.4g} ({k[median_key]:.0f})"

        last = t["last_first_scheduled_s"]
        at_once = [r["decoding_at_once"][k] for k in ("measured", "predicted")]
        lines.append(f"| {r['id']} | {m['duration']['measured']:.4g} / {m['duration']['predicted']:.4g} | "
                     f"{kind(p, 'median_tokens')} | {kind(d, 'median_seqs')} | {itl('median_itl_ms')}, "
                     f"{itl('p99_itl_ms')} | {'-' if last is None else f'{last:.4g}'} | {t['preemptions']} | "
                     + " / ".join("-" if v is None else f"{v:.0f}" for v in at_once) + " |")
    return lines


def write_outputs(out: Path, rows: list[dict[str, Any]], summary: dict[str, Any], meta: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps({"meta": meta, "summary": summary, "cases": rows}, indent=1,
                                                 sort_keys=True) + "\n")
    (out / "report.md").write_text(report_markdown(rows, summary, meta))
    metrics = [*SCORED, *(k for k in MEASURED_KEYS if k not in SCORED)]
    fields = ["id", "shape", "model", "hardware", "gpus", "serve_args", "vllm_version", "dataset", "num_prompts",
              "request_rate", "max_concurrency", "input_len", "output_len", "lengths", "not_simulated", "verdict"]
    fields += [f"{k}_{m}" for m in metrics for k in ("measured", "predicted", "rel_err")]
    with (out / "rows.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            line = {k: r.get(k) for k in fields if k in r}
            for m, values in r.get("metrics", {}).items():
                if m in metrics:
                    line.update({f"{k}_{m}": values[k] for k in ("measured", "predicted", "rel_err")})
            writer.writerow(line)


def print_summary(rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    for r in rows:
        if "metrics" not in r:
            print(f"{r['id']}: not simulated: {r['not_simulated']}")
            continue
        errs = "  ".join(f"{m} {r['metrics'][m]['measured']:.4g}/{r['metrics'][m]['predicted']:.4g} "
                         f"{_pct(r['metrics'][m]['rel_err'], True)}%" for m in SCORED if m in r["metrics"])
        print(f"{r['id']} [{r['shape']}]: measured/predicted {errs}")
    print(f"{'shape':<26}{'metric':<20}{'n':>4}{'median %':>10}{'p90 %':>9}{'bias %':>9}")
    for name in summary:
        for metric in SCORED:
            st = summary[name][metric]
            print(f"{name:<26}{metric:<20}{st['n']:>4}{_pct(st['median']):>10}{_pct(st['p90']):>9}"
                  f"{_pct(st['bias'], True):>9}")


def _commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=Path, default=DEFAULT_CASES)
    parser.add_argument("--out", type=Path, default=None, help="write report.md, rows.csv and summary.json here")
    parser.add_argument("--only", nargs="+", default=None, metavar="ID", help="simulate only these cases")
    parser.add_argument("--check", action="store_true", help="only load and validate the case file")
    args = parser.parse_args(argv)
    try:
        cases = load_cases(args.cases)
        if args.only:
            unknown = sorted(set(args.only) - {c["id"] for c in cases})
            if unknown:
                raise UserError(f"--only: no case {unknown[0]!r} in {args.cases}")
            cases = [c for c in cases if c["id"] in args.only]
    except UserError as exc:
        print(f"public_bench.py: error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        shapes = {shape: sum(load_shape(c["load"]) == shape for c in cases) for shape in SHAPES}
        print(f"{args.cases}: {len(cases)} cases valid (" + ", ".join(f"{n} {s}" for s, n in shapes.items()) + ")")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        rows = [simulate_case(case, Path(tmp)) for case in cases]
    summary = summarize(rows)
    print_summary(rows, summary)
    if args.out is not None:
        meta = {"commit": _commit(), "cases_file": str(args.cases.resolve().relative_to(ROOT))
                if args.cases.resolve().is_relative_to(ROOT) else args.cases.name,
                "num_cases": len(rows), "num_simulated": sum("metrics" in r for r in rows)}
        write_outputs(args.out, rows, summary, meta)
        print(f"wrote {args.out}/report.md, rows.csv and summary.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
