"""Where a simulated run's time goes: its engine steps by kind, the engine's idle time, and when the last request
was first scheduled (how long the requests took to get in), from the run's own records.

    split = time_split(result.requests, result.steps, block_size=16)
    split["steps_with_prefill"]["total_s"], split["decode_only_steps"]["median_s"], split["idle_s"]
    time_split_line(split)   # "simulated 123.6 s: 267 steps with prefill 82.7 s (median 328.4 ms, 8192 tokens) ..."

Steps with prefill are those that compute any prompt token (vLLM's chunked prefill puts decodes beside them: a
"mixed" step); decode-only steps compute one token per sequence. A served run's measured figures say the same
about the real engine: its median ITL is the commoner kind of step, its p99 ITL the longer one (`vllm bench serve`
records a token's gap to the previous one, so a request decoding through a step with prefill sees that step's time).
Times are summed over the engines (engine-seconds: the replicas, each data-parallel rank its own engine); `idle_s`
is the engines' time without a step over the run, summed too. `last_first_scheduled_s`: when the last request first
got a step, from the first send: in a burst, how long the API server and the queue (KV cache, max_num_seqs, the token
budget) held the last one back.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


def _kind(steps: pd.DataFrame, seqs_column: str) -> dict[str, Any]:
    if steps.empty:
        return {"count": 0, "total_s": 0.0, "median_s": None, f"median_{seqs_column}": None}
    return {"count": int(len(steps)), "total_s": float(steps["duration_s"].sum()),
            "median_s": float(steps["duration_s"].median()),
            f"median_{seqs_column}": float(steps[_COLUMN[seqs_column]].median())}


_COLUMN = {"tokens": "num_batched_tokens", "seqs": "num_seqs"}


def time_split(requests: pd.DataFrame, steps: pd.DataFrame, block_size: int, num_replicas: int = 1) -> dict[str, Any]:
    """The run's time split (module docstring); every figure from `requests` and `steps` (the simulator's
    `SimulationResult.requests` and `.steps`) of a run on `num_replicas` engines."""
    start = float(requests["arrival_s"].min()) if len(requests) else 0.0
    finish = requests["finish_s"].to_numpy(dtype=float)
    end = float(np.nanmax(finish)) if len(requests) and not np.isnan(finish).all() else start
    scheduled = requests["first_scheduled_s"].to_numpy(dtype=float)
    last_scheduled = float(np.nanmax(scheduled)) - start if len(scheduled) and not np.isnan(scheduled).all() \
        else None
    prefill = steps[steps["num_prefill_tokens"] > 0]
    decode = steps[steps["num_prefill_tokens"] == 0]
    duration = end - start
    # Engines: the replicas, or more where a replica's data-parallel ranks record their own steps (engine i x DP + r).
    engines = max(num_replicas, int(steps["replica"].max()) + 1 if len(steps) else 0)
    return {
        "duration_s": duration,
        "engines": engines,
        "steps_with_prefill": _kind(prefill, "tokens"),
        "decode_only_steps": _kind(decode, "seqs"),
        "idle_s": max(0.0, engines * duration - float(steps["duration_s"].sum())),
        "last_first_scheduled_s": last_scheduled,
        "preemptions": int(steps["num_preemptions"].sum()) if len(steps) else 0,
        "peak_running": int(steps["num_running"].max()) if len(steps) else 0,
        "kv_cache_tokens": int(steps["num_kv_blocks_total"].iloc[0]) * block_size if len(steps) else None,
    }


def _ms(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{1e3 * value:.1f} ms"


def time_split_line(split: dict[str, Any]) -> str:
    """One line of the split, for `roofline compare --vllm-bench`'s text output."""
    p, d = split["steps_with_prefill"], split["decode_only_steps"]
    tokens = "-" if p["median_tokens"] is None else f"{p['median_tokens']:.0f}"
    seqs = "-" if d["median_seqs"] is None else f"{d['median_seqs']:.0f}"
    last = split["last_first_scheduled_s"]
    kv = split["kv_cache_tokens"]
    return (f"simulated {split['duration_s']:.2f} s: {p['count']} steps with prefill {p['total_s']:.2f} s (median "
            f"{_ms(p['median_s'])}, {tokens} tokens), {d['count']} decode-only {d['total_s']:.2f} s (median "
            f"{_ms(d['median_s'])}, {seqs} sequences), engines idle {split['idle_s']:.2f} s; last request first "
            f"scheduled at {'-' if last is None else f'{last:.2f} s'}; peak {split['peak_running']} running, "
            f"{split['preemptions']} preemptions, KV cache {'-' if kv is None else f'{kv:,}'} tokens per replica")
