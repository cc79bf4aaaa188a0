"""Where the API server's loop spends its time in a request's life, one request at a time: real `vllm serve` traced
with the loop's task steps (`VLLM_SERVE_TIMELINE_STEPS=1 vllm_serve_bench.py --timeline`, `vllm_timeline.py`), the
closed-loop runs (closed1, closed1-out1, closed1-out128), chat against completions.

    python benchmarks/ground_truth/vllm_serve_chat_split.py --work-dirs $WORK/st --out $OUT/chat-split.json

Per request, the loop's task steps (`["step", qualname, start, end, pid]`) and uvicorn's reads (`["io", ...]`) are
summed by the interval of the request's life they start in, on the client's clock (CLOCK_MONOTONIC, the stamps'):
- `before_handoff`: from the client's send to the request's hand-off to the engine core (`["add", ...]`:
  `AsyncMPClient.add_request_async`): the intake;
- `handoff_to_first`: from the hand-off to the client's first token (the engine's prompt step, then the output
  handler's pass and the first chunk(s): for chat the role chunk and the first token's chunk);
- `first_to_last`: from the client's first token to its last chunk (the other tokens' passes and chunks);
- `after_last`: from the client's end of the response to the next request's send (the final chunk, the usage chunk,
  `[DONE]` and the request's cleanup that the client does not wait for, the client's own next send).
In a closed loop the next request is sent once the client has read this one's last chunk, so the sums are this
request's, but for what of its end runs after that send (it falls in the next request's `before_handoff`, the same
for both endpoints). Steps are wall time on the loop's pinned core (the client shares it: its work between the loop's
steps is not in them; a step it interrupts takes longer, hence the medians). The means and medians per request and
per cell, and per interval the chat endpoint's minus the completions endpoint's at each output length: a difference
growing with the output length is per streamed token, one that does not is per request.

With `--cpu-runs` (vllm_serve_bench.py indexes of untraced runs, e.g. bursts of 1, 32 and 128 output tokens), the
API server's CPU accounting too: per cell its CPU per request (the run's engine window, `vllm_serve_sim.window_cpu_s`;
the client's one-prompt test request counted as a request), and per load family (the load without its "-outN") and
endpoint a least-squares line over the output tokens (per request + per token), chat minus completions. Results and
their reading: docs/benchmark-history/2026-12-01e-serve24.md.
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

INTERVALS = ("before_handoff", "handoff_to_first", "first_to_last", "after_last")


def request_rows(events: list[list[Any]], result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per request of the closed-loop run `result` (sent in order, one at a time), the loop's step time (s) in each
    interval, by qualname."""
    starts = result["start_times"]
    order = sorted(range(len(starts)), key=lambda i: starts[i])
    first, last = starts[order[0]], starts[order[-1]] + result["latencies"][order[-1]]
    adds = sorted(e[2] for e in events if e[0] == "add" and first <= e[2] <= last)
    steps = sorted((e[2], e[3], e[1]) for e in events if e[0] == "step" and first - 0.01 <= e[2] <= last + 0.05)
    steps += [(e[1], e[2], "io") for e in events if e[0] == "io" and first - 0.01 <= e[1] <= last + 0.05]
    steps.sort()
    step_starts = [s[0] for s in steps]
    rows = []
    for k, i in enumerate(order):
        send, ttft, latency = starts[i], result["ttfts"][i], result["latencies"][i]
        nxt = starts[order[k + 1]] if k + 1 < len(order) else send + latency + 0.05
        j = bisect.bisect_left(adds, send)
        if j >= len(adds) or adds[j] > send + ttft:
            continue  # its hand-off not stamped within its TTFT
        bounds = (send, adds[j], send + ttft, send + latency, nxt)
        row: dict[str, Any] = {name: defaultdict(float) for name in INTERVALS}
        for s_idx in range(bisect.bisect_left(step_starts, send), bisect.bisect_left(step_starts, nxt)):
            start, end, name = steps[s_idx]
            part = bisect.bisect_right(bounds, start) - 1
            row[INTERVALS[min(part, 3)]][name] += end - start
        row["output_tokens"] = result["output_lens"][i]
        rows.append(row)
    return rows


def cell_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"requests": len(rows)}
    for name in INTERVALS:
        totals = [sum(r[name].values()) for r in rows]
        names = sorted({q for r in rows for q in r[name]})
        out[name] = {"mean_ms": round(1e3 * statistics.mean(totals), 4),
                     "median_ms": round(1e3 * statistics.median(totals), 4),
                     "by_task_ms": {q: round(1e3 * statistics.mean(r[name].get(q, 0.0) for r in rows), 4)
                                    for q in names}}
    out["total_ms"] = round(sum(out[name]["mean_ms"] for name in INTERVALS), 4)
    return out


def cpu_lines(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The API server's CPU per request by cell (ms) and per load family (the load without its "-outN") and endpoint
    its line over output tokens per request."""
    import numpy as np
    from vllm_serve_sim import window_cpu_s

    by_cell: dict[str, list[float]] = defaultdict(list)
    points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for run in runs:
        if run.get("api_server_count") != 1:
            continue
        res = run["result"]
        requests, tokens = res["completed"] + 1, sum(res["output_lens"]) + 32
        cpu_ms = 1e3 * window_cpu_s(run, ("api_server", "APIServer")) / requests
        by_cell[f"{run['load']}-{run['endpoint']}"].append(cpu_ms)
        points[f"{run['load'].split('-out')[0]}-{run['endpoint']}"].append((tokens / requests, cpu_ms))
    out: dict[str, Any] = {"per_request_ms_by_cell": {c: {"mean": round(statistics.mean(v), 4), "runs": len(v),
                                                          "min": round(min(v), 4), "max": round(max(v), 4)}
                                                      for c, v in sorted(by_cell.items())}}
    lines = {}
    for endpoint, pts in sorted(points.items()):
        x, y = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
        slope, intercept = np.polyfit(x, y, 1)
        lines[endpoint] = {"per_request_ms": round(float(intercept), 4), "per_token_ms": round(float(slope), 5),
                           "runs": len(pts)}
    out["lines"] = lines
    out["chat_minus_completions"] = {
        key[:-len("-chat")]: {k: round(line[k] - lines[key[:-len("-chat")] + "-completions"][k], 5)
                              for k in ("per_request_ms", "per_token_ms")}
        for key, line in lines.items() if key.endswith("-chat") and key[:-len("-chat")] + "-completions" in lines}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dirs", type=Path, nargs="+", required=True,
                        help="vllm_serve_bench.py --timeline work directories (VLLM_SERVE_TIMELINE_STEPS=1)")
    parser.add_argument("--cpu-runs", type=Path, nargs="*", default=[],
                        help="vllm_serve_bench.py indexes of untraced closed1* runs: the API server's CPU accounting")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    cells: dict[str, list[dict[str, Any]]] = defaultdict(list)
    per_run: dict[str, Any] = {}
    for work in args.work_dirs:
        logs = sorted(work.glob("timeline-a1*.log"))
        if not logs:
            parser.error(f"--work-dirs: {work} has no timeline-a1*.log")
        events = [json.loads(line) for log in logs for line in log.read_text().splitlines() if line.strip()]
        for path in sorted(work.glob("closed1*-a1-r*.json")):
            if path.name.endswith(".client-split.json"):
                continue
            result = json.loads(path.read_text())
            rows = request_rows(events, result)
            cell = path.name.rsplit("-r", 1)[0]
            cells[cell] += rows
            per_run[f"{work.name}/{path.stem}"] = cell_summary(rows) if rows else {"requests": 0}
    out: dict[str, Any] = {"cells": {c: cell_summary(rows) for c, rows in sorted(cells.items()) if rows},
                           "runs": per_run}
    diffs = {}
    for cell in out["cells"]:
        if "-chat-" in cell and cell.replace("-chat-", "-completions-") in out["cells"]:
            chat, comp = out["cells"][cell], out["cells"][cell.replace("-chat-", "-completions-")]
            diffs[cell.replace("-chat-", "-")] = {name: round(chat[name]["mean_ms"] - comp[name]["mean_ms"], 4)
                                                  for name in INTERVALS} | {
                "total": round(chat["total_ms"] - comp["total_ms"], 4)} | {
                f"{name}_median": round(chat[name]["median_ms"] - comp[name]["median_ms"], 4) for name in INTERVALS}
    out["chat_minus_completions_ms"] = diffs
    if args.cpu_runs:
        out["cpu"] = cpu_lines([run for path in args.cpu_runs for run in json.loads(path.read_text())["runs"]])
        print("cpu:", json.dumps(out["cpu"].get("lines")), json.dumps(out["cpu"].get("chat_minus_completions")))
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for cell, d in diffs.items():
        print(cell, " ".join(f"{k} {v:+.3f}" for k, v in d.items()))  # (the means, then the medians)
    return 0


if __name__ == "__main__":
    sys.exit(main())
