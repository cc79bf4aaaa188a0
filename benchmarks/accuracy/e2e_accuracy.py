"""End-to-end accuracy against measured vLLM runs: every vLLM `agg` row of aiconfigurator-core 0.12.0's
`systems/silicon_sample.csv` simulated (or skipped with a reason from a closed list), next to aiconfigurator's own
estimator on the same rows. A judge only: nothing is fitted on this file.

    pip install -e '.[benchmarks]'                     # aiconfigurator-core==0.12.0 (read, never copied)
    python benchmarks/accuracy/e2e_accuracy.py         # -> benchmarks/results/e2e/ (git-ignored): report.md,
                                                       #    summary.json, rows.csv, pred_vs_measured.png
    python benchmarks/accuracy/e2e_accuracy.py --jobs 2 --systems h100_sxm --no-peer

Per row (`roofline.judge.rows` reads the row and states every assumption; `roofline.judge.peer` is the peer):
- the benchmark client is `vllm bench serve --max-concurrency N --request-rate inf` with 10 x N prompts whose
  lengths are uniform in [0.8 L, L] (InferenceX's harness): the simulator's closed loop
  (`SimulationOptions(max_concurrency=N)`), N sent at t = 0, each later one the instant one finishes;
- the engine is `vllm serve` with the row's version's defaults, its TP and quantization;
- predicted TTFT and TPOT are means over the requests, as the file's. For the rows of `--sensitivity-systems`
  the report shows how the unrecorded client settings move the errors: 5 x N prompts, exactly isl / osl tokens,
  the steady state (requests 2N..8N of the 10 x N run) and the first wave alone.

Errors are (predicted - measured) / measured; the report gives median and p90 of the absolute error and the bias
(mean signed error), overall, per GPU and per (model, GPU, precision, TP), ours next to the peer's. The peer's
vLLM backend is tuned on this very file, so its figures are in-sample (labelled so everywhere).

Each measured row is also checked against its stated lengths: `measured_prefill_load`, the share of the measured
run's wall time the GPUs must have spent in the prompts' GEMMs and experts alone, and `measured_decode_load`, the
least DRAM time of one decode step over the measured TPOT. A row above 1 on either cannot come from the stated
lengths and batch; the report counts them and gives the errors without them beside the errors on every row.

Per-row results are cached under OUT/cache/: simulations keyed by the row and a hash of the code and data they
depend on (roofline/ except commands/, planning/ and calibration/, so with roofline/judge/; engine/core/,
hardware_profiles/, models/ and this file's SIM_VERSION), so a re-run after a change recomputes only what the change can
move and an interrupted run resumes; the peer keyed by the row and the package version. `--reuse-verified IDENTITY`
carries an earlier identity's rows over, per GPU, where a fixed sample of that GPU's rows re-simulates identically
(a change that cannot move them, e.g. to the CPU cost path); REUSED.json in the cache and the report say so.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
import zlib
from collections import Counter, defaultdict
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, fields, replace
from pathlib import Path

import numpy as np
import pandas as pd

from roofline.cost.step_shape import StepArrays
from roofline.judge.checks import (
    RANGE_RATIO,
    client_costs,
    client_workload,
    decode_read_floor_s,
    measured_prefill_load,
    prefill_linear_s_per_token,
    repeat_spread,
)
from roofline.judge.harness import row_origin
from roofline.judge.peer import LABEL as PEER_LABEL
from roofline.judge.rows import (
    ASSUMPTIONS,
    AUTO_FIT_NOTE,
    PEER_PACKAGE,
    PEER_VERSION,
    RowError,
    SiliconRow,
    SimCase,
    Skip,
    SkipReason,
    read_silicon_rows,
    resolve_row,
    silicon_csv_path,
)

SIM_VERSION = 3  # bump when what a cached simulation row holds changes
PROMPTS_PER_CONCURRENCY = 10  # the assumed --num-prompts / --max-concurrency
SENSITIVITY_PROMPTS_PER_CONCURRENCY = 5
STEADY_WAVES = (2, 8)  # steady state: requests [2N, 8N) of the 10 x N run
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "e2e"  # git-ignored
SYSTEM_ORDER = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm")
TARGETS = {"tpot_median": 0.10, "tpot_p90": 0.25, "ttft_median": 0.20}  # H100 rows (issue 15)


# ---- code identity and caching -------------------------------------------------------------------------------------


def source_root() -> Path:
    """The tree `roofline` is imported from (a checkout or an exported commit)."""
    import roofline.registry

    return roofline.registry.SOURCE_DIR


NOT_SIMULATED = ("commands", "planning", "calibration")  # roofline/ subpackages no simulated row imports


def code_identity(root: Path) -> str:
    """A hash of every file a simulation's result depends on."""
    digest = hashlib.sha256(f"sim-version {SIM_VERSION}\n".encode())
    files: list[Path] = []  # roofline/judge/ (the rows' reading and the client) is hashed with roofline/
    for folder, patterns in (("roofline", ("*.py",)), ("engine/core", ("*.py",)),
                             ("hardware_profiles", ("*.yaml",)), ("models", ("*.json",))):
        for pattern in patterns:
            files.extend(path for path in sorted((root / folder).rglob(pattern))
                         if not any(part in NOT_SIMULATED for part in path.relative_to(root).parts[:2]))
    for path in files:
        digest.update((str(path.relative_to(root)) if root in path.parents else path.name).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def commit_label(root: Path) -> str:
    """`git rev-parse --short HEAD` of the tree, "+dirty" when the files the simulation reads differ from it."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "roofline", "engine/core",
                                "hardware_profiles", "models"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        marker = root / "COMMIT"  # an exported tree (git archive) may carry its commit in this file
        return marker.read_text().strip() if marker.exists() else "unknown"
    return head + ("+dirty" if dirty else "")


def _cache_file(folder: Path, row_id: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in row_id)
    return folder / f"{safe}.json"


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)  # atomic: an interrupted run leaves no half-written row


# ---- one row ---------------------------------------------------------------------------------------------------------


def simulate_case(case: SimCase, sensitivity: bool) -> dict:
    """The simulator on one row: predicted means (and medians, steady state, 5 x N) and step diagnostics."""
    from roofline.cost.kv_capacity import KvCacheTooSmall
    from roofline.engine_args import AUTO_FIT_MAX_MODEL_LEN
    from roofline.judge.rows import kv_vllm_version
    from roofline.registry import load_model
    from roofline.sim.deployment import make_deployment
    from roofline.sim.simulator import SimulationOptions, run_simulation

    row, n = case.row, case.concurrency
    started = time.perf_counter()
    notes = list(case.notes)
    version = kv_vllm_version(row.backend_version)  # the row's vLLM sizes its KV cache
    try:
        deployment = make_deployment(load_model(case.config_path), case.hardware_id, case.engine, vllm_version=version)
    except KvCacheTooSmall as exc:  # vLLM would not start with the model's length: the run must have set one
        deployment = make_deployment(load_model(case.config_path), case.hardware_id,
                                     replace(case.engine, max_model_len=AUTO_FIT_MAX_MODEL_LEN), vllm_version=version)
        notes.append(f"{AUTO_FIT_NOTE} ({exc}); simulated with --max-model-len -1: "
                     f"{deployment.engine_record['max_model_len']}")
    out: dict = {"num_gpu_blocks": int(deployment.kv.num_gpu_blocks), "engine": deployment.engine_record,
                 "notes": notes}
    runs = [("", PROMPTS_PER_CONCURRENCY, RANGE_RATIO)]
    if sensitivity:
        runs += [("_5x", SENSITIVITY_PROMPTS_PER_CONCURRENCY, RANGE_RATIO), ("_fixed", PROMPTS_PER_CONCURRENCY, 1.0)]
    for suffix, multiple, ratio in runs:
        result = run_simulation(deployment, client_workload(row, multiple * n, ratio),
                                SimulationOptions(max_concurrency=n, record_steps=False,
                                                  api_server_count=case.api_server_count,
                                                  api_server_costs=client_costs(row)))
        requests = result.requests  # workload order = send order of the closed loop
        ttft, tpot = requests.ttft_s.to_numpy(), requests.tpot_s.to_numpy()
        out.update({f"ttft_mean{suffix}_s": _mean(ttft), f"tpot_mean{suffix}_s": _mean(tpot)})
        if not suffix:
            lo, hi = STEADY_WAVES[0] * n, STEADY_WAVES[1] * n
            out.update(ttft_median_s=_median(ttft), tpot_median_s=_median(tpot),
                       ttft_steady_mean_s=_mean(ttft[lo:hi]), tpot_steady_mean_s=_mean(tpot[lo:hi]),
                       ttft_first_wave_mean_s=_mean(ttft[:n]), num_requests=int(len(requests)),
                       num_preemptions=int(requests.num_preemptions.sum()), **step_diagnostics(result.steps))
    out.update(decode_breakdown_s=decode_breakdown(deployment, row),
               prefill_linear_s_per_token=prefill_linear_s_per_token(deployment, row),
               decode_read_floor_s=decode_read_floor_s(deployment, row, out.get("decode_step_mean_batch")),
               wall_s=time.perf_counter() - started)
    return out


def step_diagnostics(steps: pd.DataFrame) -> dict:
    """Which steps the time went to: decode-only steps against steps carrying prefill tokens."""
    prefill = steps.num_prefill_tokens.to_numpy() > 0
    duration = steps.duration_s.to_numpy()
    decode_only = ~prefill
    return {
        "num_steps": int(len(steps)),
        "decode_step_mean_s": _mean(duration[decode_only]),
        "decode_step_mean_batch": _mean(steps.num_seqs.to_numpy()[decode_only].astype(float)),
        "prefill_step_mean_s": _mean(duration[prefill]),
        "prefill_time_share": float(duration[prefill].sum() / duration.sum()) if duration.sum() > 0 else None,
    }


def decode_breakdown(deployment, row: SiliconRow) -> dict:  # noqa: ANN001 - roofline Deployment
    """The cost model's decode step at the row's concurrency and mid-output context, by operator kind."""
    n = row.concurrency
    context = np.full(n, row.isl + row.osl // 2, dtype=np.int64)
    cost = deployment.cost_model.cost(StepArrays(np.ones(n, dtype=np.int64), context, np.ones(n, dtype=np.int64)))
    parts: dict[str, float] = defaultdict(float)
    for op in cost.ops:
        parts[op.kind] += op.time_s
    parts["host_not_hidden"] = cost.breakdown_s.get("host_overhead", 0.0)
    parts["total"] = cost.total_s
    return dict(parts)


def _simulate_worker(payload: tuple[SimCase, bool, str]) -> tuple[str, dict]:
    case, sensitivity, cache_path = payload
    try:
        data = {"status": "simulated", **simulate_case(case, sensitivity)}
    except Exception as exc:  # noqa: BLE001 - any failure of a row that is not skipped is a miss, reported as such
        data = {"status": "miss", "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=4)}
    data["row_id"] = case.row.row_id
    _write_json(Path(cache_path), data)
    return case.row.row_id, data


VERIFY_SAMPLE = 3  # rows per reuse group re-simulated before an earlier identity's cached rows of it are reused
NOT_COMPARED = ("wall_s",)  # what differs between two simulations of one row by the same code


def reuse_verified(todo: list[tuple[SimCase, bool, str]], old_cache: Path, sim_cache: Path, outcomes: dict,
                   jobs: int, log) -> list[tuple[SimCase, bool, str]]:  # noqa: ANN001
    """Rows cached under an earlier code identity, reused where the change cannot have moved them: per reuse group
    (`reuse_group`: GPU, model, precision, layout, vLLM version and recipe flags: one set of kernels, operator fits
    and engine paths), a fixed sample of VERIFY_SAMPLE rows (the smallest CRC32 of their ids) is simulated now; if
    every one equals its old result (all fields but NOT_COMPARED), the group's other old simulated rows (not its
    misses) are copied into this identity's cache, and REUSED.json there says from which identity, on which
    evidence. Otherwise the group is simulated afresh.
    Returns what is left to simulate."""
    old = {case.row.row_id: _read_json(_cache_file(old_cache, case.row.row_id)) for case, _, _ in todo}
    by_group: dict[str, list[tuple[SimCase, bool, str]]] = defaultdict(list)
    for item in todo:  # a miss is simulated again: it is what a change may have fixed
        if old[item[0].row.row_id] is not None and old[item[0].row.row_id].get("status") == "simulated":
            by_group[reuse_group(item[0])].append(item)
    samples = {group: sorted(items, key=lambda t: zlib.crc32(t[0].row.row_id.encode()))[:VERIFY_SAMPLE]
               for group, items in by_group.items()}
    sampled = [item for items in samples.values() for item in items]
    log(f"reuse from {old_cache.name}: re-simulating {len(sampled)} sampled rows of {len(samples)} groups")
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        fresh = dict(pool.map(_simulate_worker, sampled))
    record_path = sim_cache / "REUSED.json"
    record = _read_json(record_path) or {}
    reused: set[str] = set()
    for group, items in by_group.items():
        same = [_comparable(fresh[c.row.row_id]) == _comparable(old[c.row.row_id]) for c, _, _ in samples[group]]
        if not all(same):
            log(f"  {group}: {same.count(False)} of {len(same)} sampled rows differ: simulated afresh")
            continue
        for case, _, path in items:
            if case.row.row_id not in fresh:
                _write_json(Path(path), old[case.row.row_id])
            reused.add(case.row.row_id)
        record[group] = {"from_identity": old_cache.name.removeprefix("sim-"), "rows": len(items),
                         "verified_rows": [c.row.row_id for c, _, _ in samples[group]]}
        log(f"  {group}: {len(same)} sampled rows identical: {len(items)} rows reused")
    for row_id, data in fresh.items():
        outcomes[row_id] = data
    for item in todo:
        if item[0].row.row_id in reused and item[0].row.row_id not in fresh:
            outcomes[item[0].row.row_id] = old[item[0].row.row_id]
    if record:
        _write_json(record_path, record)
    return [item for item in todo if item[0].row.row_id not in reused and item[0].row.row_id not in fresh]


# Engine arguments that follow each row's load (a recipe's `--max-num-seqs $CONC`, `--max-num-batched-tokens
# $((ISL * 2))`): not part of a reuse group's key, which would otherwise hold one row each.
LOAD_ARGS = frozenset({"max_num_seqs", "max_num_batched_tokens"})


def reuse_group(case: SimCase) -> str:
    """The rows one set of code paths serves: a change to one GPU's fit, one model's kernels (its weights'
    precision), the data / expert-parallel paths, a vLLM version's behaviour or a recipe's flags (a kernel backend,
    the KV cache's dtype, prefix caching ...) moves all of a group's rows or none of them. The key names the GPU,
    model, precision and layout, and carries the row's vLLM version and a digest of its engine arguments other than
    `LOAD_ARGS`: rows of one model launched by different recipes (the 0.17.0 and 0.19.0 MiniMax-M2.5 B200 rows, Triton
    and TRT-LLM-gen MoE) are different groups, so 3 sampled rows of one can never vouch for the other."""
    parallel = case.engine.parallel
    layout = (f"dp{parallel.data_parallel_size}" + ("-ep" if case.engine.enable_expert_parallel else "")
              + ("-multinode" if case.engine.data_parallel_size_local is not None else ""))
    flags = repr(sorted((f.name, repr(getattr(case.engine, f.name))) for f in fields(case.engine)
                        if f.name not in LOAD_ARGS))
    digest = f"{zlib.crc32(flags.encode()):08x}"
    return f"{case.row.system}/{case.row.model_path}/{case.row.precision}/{layout}/vllm-{case.row.backend_version}/{digest}"


def _comparable(data: dict | None) -> dict | None:
    return None if data is None else {k: v for k, v in data.items() if k not in NOT_COMPARED}


def _mean(values: np.ndarray) -> float | None:
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else None


def _median(values: np.ndarray) -> float | None:
    values = values[np.isfinite(values)]
    return float(np.median(values)) if len(values) else None


# ---- the peer --------------------------------------------------------------------------------------------------------


def peer_results(rows: list[SiliconRow], cache_dir: Path, log, deadline: float = math.inf) -> dict[str, dict]:  # noqa: ANN001
    """The peer's estimate per row, from the cache or computed now (H100 rows first); rows left when `deadline`
    (a perf_counter time) passes are 'not run' (a re-run resumes them)."""
    from roofline.judge.peer import peer_estimate

    order = {system: i for i, system in enumerate(SYSTEM_ORDER)}
    todo = sorted((r for r in rows if _read_json(_cache_file(cache_dir, r.row_id)) is None),
                  key=lambda r: order.get(r.system, len(order)))
    log(f"peer ({PEER_LABEL}): {len(rows) - len(todo)} rows cached, {len(todo)} to estimate")
    started = time.perf_counter()
    for i, row in enumerate(todo):
        if time.perf_counter() > deadline:
            log(f"  peer: budget spent, {len(todo) - i} rows not estimated")
            break
        try:
            estimate = peer_estimate(row)
            data = {"status": "estimated", **asdict(estimate)}
        except Exception as exc:  # noqa: BLE001 - a peer failure is the peer's miss
            data = {"status": "miss", "error": f"{type(exc).__name__}: {exc}"}
        _write_json(_cache_file(cache_dir, row.row_id), data)
        if (i + 1) % 25 == 0:
            log(f"  peer {i + 1}/{len(todo)} ({time.perf_counter() - started:.0f} s)")
    return {row.row_id: _read_json(_cache_file(cache_dir, row.row_id)) or {"status": "not run"} for row in rows}


# ---- statistics and report -------------------------------------------------------------------------------------------


def error_stats(predicted: np.ndarray, measured: np.ndarray) -> dict:
    """n, median and p90 of |relative error|, bias = mean signed relative error (fractions)."""
    ok = np.isfinite(predicted) & np.isfinite(measured) & (measured > 0)
    if not ok.any():
        return {"n": 0, "median": None, "p90": None, "bias": None}
    rel = predicted[ok] / measured[ok] - 1.0
    return {"n": int(ok.sum()), "median": float(np.median(np.abs(rel))),
            "p90": float(np.percentile(np.abs(rel), 90)), "bias": float(rel.mean())}


def build_table(rows: list[SiliconRow], outcomes: dict[str, dict], peer: dict[str, dict]) -> pd.DataFrame:
    records = []
    for row in rows:
        o, p = outcomes[row.row_id], peer.get(row.row_id, {})
        records.append({
            "row_id": row.row_id, "model": row.model_path, "system": row.system, "origin": row_origin(row),
            "precision": row.precision or "(none)", "tp": row.tp_size, "isl": row.isl, "osl": row.osl,
            "concurrency": row.concurrency, "backend_version": row.backend_version or "",
            "measured_ttft_s": row.measured_ttft_s, "measured_tpot_s": row.measured_tpot_s,
            "status": o["status"], "skip_reason": o.get("reason", ""), "error": o.get("error", ""),
            "predicted_ttft_s": o.get("ttft_mean_s"), "predicted_tpot_s": o.get("tpot_mean_s"),
            "predicted_ttft_median_s": o.get("ttft_median_s"), "predicted_tpot_median_s": o.get("tpot_median_s"),
            "predicted_ttft_5x_s": o.get("ttft_mean_5x_s"), "predicted_ttft_steady_s": o.get("ttft_steady_mean_s"),
            "predicted_ttft_fixed_s": o.get("ttft_mean_fixed_s"), "predicted_tpot_fixed_s": o.get("tpot_mean_fixed_s"),
            "predicted_tpot_5x_s": o.get("tpot_mean_5x_s"),
            "predicted_ttft_first_wave_s": o.get("ttft_first_wave_mean_s"),
            "num_preemptions": o.get("num_preemptions"), "prefill_time_share": o.get("prefill_time_share"),
            "decode_step_mean_s": o.get("decode_step_mean_s"),
            "prefill_linear_s_per_token": o.get("prefill_linear_s_per_token"),
            "decode_read_floor_s": o.get("decode_read_floor_s"),
            "peer_status": p.get("status", ""), "peer_ttft_s": p.get("ttft_s"), "peer_tpot_s": p.get("tpot_s"),
            "peer_error": p.get("error", ""),
        })
    frame = pd.DataFrame.from_records(records)
    for col in [c for c in frame.columns if c.startswith(("predicted_", "peer_t"))] + [
            "prefill_linear_s_per_token", "decode_read_floor_s"]:
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    frame["measured_prefill_load"] = measured_prefill_load(frame)
    frame["measured_decode_load"] = frame.decode_read_floor_s / frame.measured_tpot_s
    return frame


def group_stats(frame: pd.DataFrame, keys: list[str]) -> list[dict]:
    """Ours and the peer's error stats per group, over the simulated rows."""
    sim = frame[frame.status == "simulated"]
    out = []
    for name, part in (sim.groupby(keys, sort=True) if keys else [("all", sim)]):
        entry = {"group": name if isinstance(name, str) else " / ".join(str(x) for x in name), "rows": len(part)}
        for metric in ("ttft", "tpot"):
            measured = part[f"measured_{metric}_s"].to_numpy(float)
            entry[f"{metric}"] = error_stats(part[f"predicted_{metric}_s"].to_numpy(float), measured)
            entry[f"{metric}_peer"] = error_stats(part[f"peer_{metric}_s"].to_numpy(float), measured)
        entry["peer_not_run"] = int((part.peer_status == "not run").sum())
        out.append(entry)
    return out


def _pct(stats: dict, field: str) -> str:
    value = stats.get(field)
    return "-" if value is None else f"{100 * value:+.1f}%" if field == "bias" else f"{100 * value:.1f}%"


def _cells(entry: dict) -> list[str]:
    cells = []
    for metric in ("ttft", "tpot"):
        for who in ("", "_peer"):
            s = entry[f"{metric}{who}"]
            cells.append(f"{_pct(s, 'median')} / {_pct(s, 'p90')} / {_pct(s, 'bias')}"
                         + ("" if not who or s["n"] == entry["rows"] else f" (n={s['n']})"))
    return cells


def markdown_report(meta: dict, frame: pd.DataFrame, skips: dict, stats: dict, spread: dict) -> str:
    lines = [f"# End-to-end judge: silicon_sample.csv ({meta['commit']}, {meta['date_utc']})", "",
             f"Command: `{meta['command']}`; machine: {meta['machine']}; wall {meta['wall_s']:.0f} s "
             f"({meta['num_simulated_now']} rows simulated now, the rest from the cache).",
             f"Data: {PEER_PACKAGE} {PEER_VERSION} `systems/silicon_sample.csv`, {meta['num_rows']} vLLM agg rows. "
             f"Code identity {meta['code_identity']}." + "".join(
                 f" {system}: {r['rows']} rows reused from identity {r['from_identity']} ({len(r['verified_rows'])} "
                 "sampled rows re-simulated identically)." for system, r in (meta["reused_from_earlier_identity"]
                                                                              or {}).items()), "",
             "## Rows", "",
             "| outcome | rows |", "|---|---|"]
    lines.append(f"| simulated | {meta['num_simulated']} |")
    for reason in SkipReason:
        lines.append(f"| skipped: {reason.value} (first reason) | {skips['first'].get(reason.value, 0)} |")
    lines.append(f"| miss (neither simulated nor a listed skip) | {meta['num_miss']} |")
    if meta["num_not_run"]:
        lines.append(f"| not run in this invocation (--systems / --limit / --budget-minutes; a re-run resumes) | "
                     f"{meta['num_not_run']} |")
    lines += ["", "Rows blocked by each reason (a row can have several) / by that reason alone:", ""]
    for reason in SkipReason:
        lines.append(f"- {reason.value}: {skips['any'].get(reason.value, 0)} / {skips['alone'].get(reason.value, 0)}")
    lines += ["", "## Errors (median / p90 of |pred/meas - 1| / bias)", "",
              f"Peer: {PEER_LABEL}; n = rows the peer estimated where fewer than the group (the rest: the peer's "
              f"misses, out of memory in its own KV check, or not run within --budget-minutes: "
              f"{int((frame.peer_status == 'not run').sum())} rows).", "",
              "| group | rows | TTFT ours | TTFT peer (in-sample) | TPOT ours | TPOT peer (in-sample) |",
              "|---|---|---|---|---|---|"]
    for section in ("overall", "per_gpu", "per_group"):
        for entry in stats[section]:
            lines.append(f"| {entry['group']} | {entry['rows']} | " + " | ".join(_cells(entry)) + " |")
    lines += ["", "By where the rows come from (`silicon_data_source`): InferenceX's public harness, whose client the "
              "simulation follows (its recipes, `--num-prompts` 10 x N, ranged lengths), or aiconfigurator's own "
              "gap-analysis campaigns, whose client (number of prompts, length distribution) the file does not "
              "record (the sensitivity section below shows how far that moves TTFT):", "",
              "| GPU / origin | rows | TTFT ours | TTFT peer (in-sample) | TPOT ours | TPOT peer (in-sample) |",
              "|---|---|---|---|---|---|"]
    for entry in stats["per_gpu_origin"]:
        lines.append(f"| {entry['group']} | {entry['rows']} | " + " | ".join(_cells(entry)) + " |")
    lines += ["", "## The file's noise floor: configurations measured more than once", "",
              "Rows of one configuration (model, GPU, version, precision, parallelism, lengths, concurrency, recipe) "
              "with different measured results; per group the spread max / min - 1.", "",
              "| GPU | groups | TTFT spread median / p90 | TPOT spread median / p90 |", "|---|---|---|---|"]
    for group, g in spread.items():
        lines.append(f"| {group} | {g['groups']} | {_pct(g, 'ttft_median')} / {_pct(g, 'ttft_p90')} | "
                     f"{_pct(g, 'tpot_median')} / {_pct(g, 'tpot_p90')} |")
    lines += load_lines(frame)
    lines += ["", "## Assumptions", ""] + [f"- {a}" for a in ASSUMPTIONS]
    lines += ["", "## The client's unrecorded settings: how the errors move with them", ""]
    lines += sensitivity_lines(frame)
    if meta["num_miss"]:
        lines += ["", "## Misses", ""]
        for _, r in frame[frame.status == "miss"].iterrows():
            lines.append(f"- {r.row_id}: {r.error}")
    return "\n".join(lines) + "\n"


def inconsistent(frame: pd.DataFrame) -> pd.Series:
    """Simulated rows whose measured means the stated lengths cannot produce: `measured_prefill_load` or
    `measured_decode_load` above 1."""
    return (frame.status == "simulated") & ((frame.measured_prefill_load > 1.0) | (frame.measured_decode_load > 1.0))


def load_lines(frame: pd.DataFrame) -> list[str]:
    """The measured rows checked against their stated lengths: which fail, and the errors per GPU without them
    (reported beside the errors on every row, never instead of them)."""
    sim = frame[frame.status == "simulated"]
    bad = inconsistent(frame)
    lines = ["", "## The measured rows checked against their stated lengths", "",
             "- `measured_prefill_load`: the share of the measured run's wall time the GPUs must have spent in the "
             "prompts' GEMMs and experts alone (the cost model's time per prompt token of one chunk; attention and "
             "everything else left out), given the measured mean TTFT and TPOT of N closed-loop clients and the "
             "assumed lengths. Above 1 the stated prompts cannot all have been prefilled.",
             "- `measured_decode_load`: the DRAM bytes one decode step of N sequences must read (weights, the "
             "experts uniform routing touches, the KV cache at mid-output context) at the datasheet bandwidth, over "
             "the measured mean TPOT. Above 1 no decode step of the stated batch is that short.",
             "", f"Rows above 1 on either: {int(bad.sum())} of {len(sim)} simulated rows.", ""]
    if not bad.any():
        return lines
    lines += ["| model | GPU | rows | prefill load > 1 | decode load > 1 | prefill load median (max) | "
              "decode load median (max) |", "|---|---|---|---|---|---|---|"]
    for (model, system), part in sim.groupby(["model", "system"], sort=True):
        pre, dec = part.measured_prefill_load, part.measured_decode_load
        if (pre > 1.0).any() or (dec > 1.0).any():
            lines.append(f"| {model} | {system} | {len(part)} | {int((pre > 1.0).sum())} | {int((dec > 1.0).sum())} | "
                         f"{pre.median():.2f} ({pre.max():.2f}) | {dec.median():.2f} ({dec.max():.2f}) |")
    lines += ["", "Errors per GPU without those rows (median / p90 / bias):", "",
              "| GPU | rows | TTFT | TPOT |", "|---|---|---|---|"]
    for entry in group_stats(frame[~bad], ["system"]):
        lines.append(f"| {entry['group']} | {entry['rows']} | " + " | ".join(
            " / ".join(_pct(entry[m], f) for f in ("median", "p90", "bias")) for m in ("ttft", "tpot")) + " |")
    return lines


def sensitivity_lines(frame: pd.DataFrame) -> list[str]:
    part = frame[(frame.status == "simulated") & frame.predicted_ttft_5x_s.notna()]
    if part.empty:
        return ["(none run)"]
    lines = [f"{len(part)} rows ({', '.join(sorted(part.system.unique()))}).", "",
             "| client assumption | TTFT median / p90 / bias | TTFT / assumed, median (min-max) | "
             "TPOT median / p90 / bias |", "|---|---|---|---|"]
    variants = (("10 x N prompts, lengths in [0.8 L, L] (assumed)", "predicted_ttft_s", "predicted_tpot_s"),
                ("5 x N prompts", "predicted_ttft_5x_s", "predicted_tpot_5x_s"),
                ("steady state (requests 2N..8N of the assumed run)", "predicted_ttft_steady_s", None),
                ("first wave only (the N sent at once)", "predicted_ttft_first_wave_s", None),
                ("10 x N prompts, exactly isl / osl tokens", "predicted_ttft_fixed_s", "predicted_tpot_fixed_s"))
    base = part.predicted_ttft_s.to_numpy(float)
    for label, ttft_col, tpot_col in variants:
        values = part[ttft_col].to_numpy(float)
        s = error_stats(values, part.measured_ttft_s.to_numpy(float))
        ratio = values / base
        tpot = "-" if tpot_col is None else " / ".join(
            _pct(error_stats(part[tpot_col].to_numpy(float), part.measured_tpot_s.to_numpy(float)), f)
            for f in ("median", "p90", "bias"))
        lines.append(f"| {label} | {_pct(s, 'median')} / {_pct(s, 'p90')} / {_pct(s, 'bias')} | "
                     f"{np.nanmedian(ratio):.2f} ({np.nanmin(ratio):.2f}-{np.nanmax(ratio):.2f}) | {tpot} |")
    sim = frame[frame.status == "simulated"]
    mean_median = sim.predicted_ttft_median_s.to_numpy(float) / sim.predicted_ttft_s.to_numpy(float)
    tpot_mm = sim.predicted_tpot_median_s.to_numpy(float) / sim.predicted_tpot_s.to_numpy(float)
    lines += ["", f"Mean against median (all {len(sim)} simulated rows): simulated median TTFT / mean TTFT "
              f"{np.nanmedian(mean_median):.2f} ({np.nanmin(mean_median):.2f}-{np.nanmax(mean_median):.2f}); "
              f"median TPOT / mean TPOT {np.nanmedian(tpot_mm):.3f} ({np.nanmin(tpot_mm):.3f}-{np.nanmax(tpot_mm):.3f})."]
    return lines


def plot(frame: pd.DataFrame, path: Path) -> None:
    from roofline.figures import new_figure, save_png

    sim = frame[frame.status == "simulated"]
    fig = new_figure(12, 5.5)
    axes = fig.subplots(1, 2)
    for ax, metric, unit in ((axes[0], "ttft", "TTFT (s)"), (axes[1], "tpot", "TPOT (s)")):
        measured = sim[f"measured_{metric}_s"].to_numpy(float)
        for system, marker in (("h100_sxm", "o"), ("h200_sxm", "s"), ("b200_sxm", "^"), ("b300_sxm", "v")):
            mask = (sim.system == system).to_numpy()
            if mask.any():
                ax.scatter(measured[mask], sim[f"predicted_{metric}_s"].to_numpy(float)[mask], s=14, marker=marker,
                           label=f"roofline, {system}", alpha=0.8)
        peer = sim[f"peer_{metric}_s"].to_numpy(float)
        ax.scatter(measured, peer, s=10, marker="x", color="grey", alpha=0.6, label=PEER_LABEL)
        finite = np.concatenate([measured, sim[f"predicted_{metric}_s"].to_numpy(float)])
        finite = finite[np.isfinite(finite) & (finite > 0)]
        lo, hi = finite.min() / 1.5, finite.max() * 1.5
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
        ax.fill_between([lo, hi], [lo * 0.8, hi * 0.8], [lo * 1.2, hi * 1.2], color="black", alpha=0.07)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"measured {unit}")
        ax.set_ylabel(f"predicted {unit}")
        ax.set_title(f"{metric.upper()}: {len(sim)} simulated vLLM rows (band: +-20 %)")
        ax.legend(fontsize=7)
    save_png(fig, path)


# ---- main ------------------------------------------------------------------------------------------------------------


def peer_deadline(args: argparse.Namespace, started: float) -> float:
    """The peer stops at the budget plus a fifth of it (its rows are cheaper than a simulation)."""
    return started + 72 * args.budget_minutes if args.budget_minutes > 0 else math.inf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output and cache folder (default: %(default)s)")
    parser.add_argument("--systems", default="", help="comma-separated systems to simulate (default: all)")
    parser.add_argument("--models", default="",
                        help="comma-separated parts of model paths to simulate, e.g. Kimi-K2.5 (default: all)")
    parser.add_argument("--sensitivity-systems", default="h100_sxm",
                        help="systems whose rows also run 5 x N prompts (default: %(default)s; '' for none)")
    parser.add_argument("--jobs", type=int, default=2, help="simulation processes (default: %(default)s)")
    parser.add_argument("--no-peer", action="store_true", help="skip aiconfigurator's estimator")
    parser.add_argument("--parallel-only", action="store_true",
                        help="simulate only the rows served with data or expert parallelism (issue 40)")
    parser.add_argument("--multi-node-only", action="store_true",
                        help="simulate only the rows served over more than one node (issue 40)")
    parser.add_argument("--limit", type=int, default=0, help="simulate at most this many rows (0: all)")
    parser.add_argument("--budget-minutes", type=float, default=0.0,
                        help="submit no new simulation after this many minutes; the rest is reported as 'not run' "
                             "and a re-run resumes them from the cache (0: no budget)")
    parser.add_argument("--reuse-verified", default=None, metavar="IDENTITY",
                        help="reuse the rows cached under an earlier code identity, per GPU, model, precision and "
                             f"layout, where a sample of {VERIFY_SAMPLE} of its rows re-simulates identically now "
                             "(reuse_verified)")
    parser.add_argument("--peer-only", action="store_true",
                        help="only fill the peer's cache for every row that would be simulated, then stop")
    args = parser.parse_args(argv)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.0f} s] {message}", file=sys.stderr, flush=True)

    root = source_root()
    identity, commit = code_identity(root), commit_label(root)
    log(f"roofline from {root} ({commit}), code identity {identity}")
    rows = read_silicon_rows()
    systems = {s for s in args.systems.split(",") if s}
    models = [m for m in args.models.split(",") if m]
    sensitivity = {s for s in args.sensitivity_systems.split(",") if s}
    sim_cache = args.out / "cache" / f"sim-{identity}"
    peer_cache = args.out / "cache" / f"peer-{PEER_VERSION}"
    sim_cache.mkdir(parents=True, exist_ok=True)
    peer_cache.mkdir(parents=True, exist_ok=True)

    outcomes: dict[str, dict] = {}
    skips = {"first": Counter(), "any": Counter(), "alone": Counter()}
    todo: list[tuple[SimCase, bool, str]] = []
    for row in rows:
        try:
            case = resolve_row(row)
        except RowError as exc:
            outcomes[row.row_id] = {"status": "miss", "error": str(exc)}
            continue
        if isinstance(case, Skip):
            outcomes[row.row_id] = {"status": "skipped", "reason": case.reasons[0].value,
                                    "details": "; ".join(case.details)}
            skips["first"][case.reasons[0].value] += 1
            for reason in case.reasons:
                skips["any"][reason.value] += 1
            if len(case.reasons) == 1:
                skips["alone"][case.reasons[0].value] += 1
            continue
        if systems and row.system not in systems:
            outcomes[row.row_id] = {"status": "not run", "error": "--systems"}
            continue
        if models and not any(m in row.model_path for m in models):
            outcomes[row.row_id] = {"status": "not run", "error": "--models"}
            continue
        if args.parallel_only and case.engine.parallel.data_parallel_size == 1 \
                and not case.engine.enable_expert_parallel:
            outcomes[row.row_id] = {"status": "not run", "error": "--parallel-only"}
            continue
        if args.multi_node_only and case.engine.data_parallel_size_local is None:
            outcomes[row.row_id] = {"status": "not run", "error": "--multi-node-only"}
            continue
        path = _cache_file(sim_cache, row.row_id)
        cached = _read_json(path)
        if cached is not None:
            outcomes[row.row_id] = cached
        else:
            todo.append((case, row.system in sensitivity, str(path)))
    if args.reuse_verified:
        todo = reuse_verified(todo, args.out / "cache" / f"sim-{args.reuse_verified}", sim_cache, outcomes,
                              args.jobs, log)
    if args.limit:
        for case, _, _ in todo[args.limit:]:
            outcomes[case.row.row_id] = {"status": "not run", "error": "--limit"}
        todo = todo[:args.limit]
    if args.peer_only:
        peer_results([case.row for case, _, _ in todo], peer_cache, log, peer_deadline(args, started))
        return 0
    # H100 first (the targets), then the other GPUs; within one, longest first (osl x runs), so that a budget
    # leaves out whole GPUs rather than a scatter, and the pool does not end on one long row.
    order = {system: i for i, system in enumerate(SYSTEM_ORDER)}
    todo.sort(key=lambda t: (order.get(t[0].row.system, len(order)), -(t[0].row.osl * (2.5 if t[1] else 1.0))))
    log(f"{len(rows)} rows; to simulate now: {len(todo)}; cached: "
        f"{sum(1 for o in outcomes.values() if o['status'] in ('simulated', 'miss') and 'row_id' in o)}")
    if todo:
        deadline = started + 60 * args.budget_minutes if args.budget_minutes > 0 else math.inf
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            pending = {}
            queue = list(todo)
            done = 0
            while queue or pending:
                while queue and len(pending) < 2 * max(1, args.jobs) and time.perf_counter() < deadline:
                    item = queue.pop(0)
                    pending[pool.submit(_simulate_worker, item)] = item
                if not pending:
                    break
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    pending.pop(future)
                    row_id, data = future.result()
                    outcomes[row_id] = data
                    done += 1
                    if done % 10 == 0 or data["status"] == "miss":
                        log(f"  simulated {done}/{len(todo)}" + (f"  MISS {row_id}: {data['error']}"
                                                                 if data["status"] == "miss" else ""))
            for case, _, _ in queue:
                outcomes[case.row.row_id] = {"status": "not run", "error": "--budget-minutes"}
    simulated_rows = [r for r in rows if outcomes[r.row_id]["status"] == "simulated"]
    peer = {} if args.no_peer else peer_results(simulated_rows, peer_cache, log, peer_deadline(args, started))

    frame = build_table(rows, outcomes, peer)
    sim = frame[frame.status == "simulated"]
    stats = {"overall": group_stats(frame, []), "per_gpu": group_stats(frame, ["system"]),
             "per_group": group_stats(frame, ["model", "system", "precision", "tp"]),
             "per_gpu_origin": group_stats(frame, ["system", "origin"])}
    h100 = next((e for e in stats["per_gpu"] if e["group"] == "h100_sxm"), None)
    targets = {}
    if h100 is not None:
        targets = {"tpot_median": h100["tpot"]["median"], "tpot_p90": h100["tpot"]["p90"],
                   "ttft_median": h100["ttft"]["median"]}
        targets = {k: {"value": v, "target": TARGETS[k], "met": v is not None and v <= TARGETS[k]}
                   for k, v in targets.items()}
    meta = {"commit": commit, "code_identity": identity, "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": "python benchmarks/accuracy/e2e_accuracy.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": f"{platform.node() or 'host'}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
            "wall_s": time.perf_counter() - started, "num_rows": len(rows), "num_simulated": len(sim),
            "num_simulated_now": len(todo), "num_miss": int((frame.status == "miss").sum()),
            "num_not_run": int((frame.status == "not run").sum()), "csv": str(silicon_csv_path()),
            "peer": PEER_LABEL, "assumptions": list(ASSUMPTIONS),
            "reused_from_earlier_identity": _read_json(sim_cache / "REUSED.json")}
    args.out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out / "rows.csv", index=False)
    bad = frame[inconsistent(frame)]
    spread = repeat_spread(rows)
    summary = {"meta": meta, "skips": {k: dict(v) for k, v in skips.items()}, "stats": stats, "h100_targets": targets,
               "repeat_spread": spread,
               "inconsistent_with_stated_lengths": {"rows": len(bad), "per_gpu": bad.system.value_counts().to_dict(),
                                                    "per_gpu_stats_without": group_stats(frame[~inconsistent(frame)],
                                                                                         ["system"])}}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    (args.out / "report.md").write_text(markdown_report(meta, frame, skips, stats, spread))
    if len(sim):
        plot(frame, args.out / "pred_vs_measured.png")
    log(f"done: {len(sim)} simulated, {sum(skips['first'].values())} skipped, {meta['num_miss']} misses; "
        f"report {args.out / 'report.md'}")
    for entry in stats["overall"] + stats["per_gpu"]:
        print(f"{entry['group']:>10} {entry['rows']:4d} rows  TTFT {' | '.join(_cells(entry)[:2])}   "
              f"TPOT {' | '.join(_cells(entry)[2:])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
