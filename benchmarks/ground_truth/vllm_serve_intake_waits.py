"""Where a request's intake waits off the API server's loop: real `vllm serve` traced one request at a time (closed1)
and at 20/s, from `vllm_serve_bench.py --timeline` work directories recorded with `VLLM_SERVE_TIMELINE_STEPS=1`
(vllm_timeline.py: each step of each loop task, uvicorn's reads, the renderer thread's `_tokenize_prompt` calls).

    python benchmarks/ground_truth/vllm_serve_intake_waits.py --work-dirs $OUT/s1 $OUT/s2 --out $OUT/waits.json

A request's intake from the client's send to its hand-off to the engine core (`add_request_async`) in four phases
(vLLM 0.32's path: uvicorn reads the bytes (`data_received`), the ASGI task runs routing, FastAPI's body read and
validation and `create_completion` / `create_chat_completion` up to the render, whose `_tokenize_prompt` runs on the
renderer's worker thread (`vllm/renderers/base.py`: `make_async(self._tokenize_prompt, executor=self._executor)`,
`loop.run_in_executor`), then the rest on the loop up to `AsyncLLM.add_request`'s hand-off):
- A, send -> the loop's read of the request (uvicorn's last `data_received` before the request's ASGI task starts);
- B, that -> the end of the loop's step that submits the render (`BaseRenderer.tokenize_prompt_async`'s first);
- C, that -> the loop's step that resumes it (the second): the render's round trip through the worker thread;
- D, that -> the hand-off.
In each phase the loop's time by what it ran (this request's input steps, other requests' streams and the output path,
`intake_loop.kind_of`) and idle; in C also the renderer thread's wall and CPU time (its stamp inside the phase). Requests
whose intake overlaps another's are left out (at 20/s ~1 in 4), so a phase's loop steps are this request's or output
work. Means per run and per load, ms.
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
from pathlib import Path
from typing import Any

from intake_loop import kind_of

PHASES = ("A_send_to_read", "B_read_to_render", "C_render", "D_render_to_handoff")
KINDS = ("own", "stream", "output_path", "idle")


def spans_between(spans: list[Any], starts: list[float], lo: float, hi: float) -> list[Any]:
    """The loop's spans ((start, end, task), sorted by start, `starts` their starts) that overlap (lo, hi)."""
    j = max(0, bisect.bisect_right(starts, lo) - 1)
    window = []
    while j < len(spans) and spans[j][0] < hi:
        if spans[j][1] > lo:
            window.append(spans[j])
        j += 1
    return window


def loop_by_kind(window: list[Any], lo: float, hi: float, handoff: float) -> dict[str, float]:
    """The API server's loop's seconds of [lo, hi) by `KINDS`, from the loop's spans `window` ((start, end, task)) of
    one request's intake that ends at its `handoff`: "own" its own work (its read, its input task, its stream task's
    first step, which hands it to the engine core), "stream" / "output_path" other requests', "idle" the rest."""
    out = dict.fromkeys(KINDS, 0.0)
    for a, b, q in window:
        overlap = min(b, hi) - max(a, lo)
        if overlap <= 0:
            continue
        kind = "own" if q == "io" else kind_of(q)
        if kind == "input" or (q == "TaskHandle._run_coro" and b >= handoff):
            kind = "own"  # its own stream task's first step hands it to the engine core
        out[kind] += overlap
    out["idle"] = max(0.0, (hi - lo) - sum(out.values()))
    return out


def analyse(work_dir: Path) -> dict[str, Any]:
    events = [json.loads(line) for line in (work_dir / "timeline-a1.log").read_text().splitlines()]
    spans = sorted([(e[2], e[3], e[1]) for e in events if e[0] == "step"]
                   + [(e[1], e[2], "io") for e in events if e[0] == "io"])
    starts = [s[0] for s in spans]
    renders = sorted((e[1], e[2], e[3]) for e in events if e[0] == "render")
    render_starts = [r[0] for r in renders]
    asgi = {e[1]: e[2] for e in events if e[0] == "asgi"}
    # the hand-off's request id: "cmpl-<x-request-id>-<prompt index>-<suffix>", "chatcmpl-<x-request-id>-<suffix>"
    adds = {e[1].split("-", 1)[1].rsplit("-", 2 if e[1].startswith("cmpl-") else 1)[0]: e[2]
            for e in events if e[0] == "add"}
    runs: dict[str, Any] = {}
    for run in json.loads((work_dir / "runs.json").read_text())["runs"]:
        sends = json.loads((work_dir / run["file"]).read_text())["start_times"]
        firsts = [k for k in asgi if k.endswith("-0") and abs(asgi[k] - sends[0]) < 0.1]
        if not firsts:
            continue
        prefix = firsts[0][:-2]
        windows = sorted((s, adds[f"{prefix}-{i}"], asgi[f"{prefix}-{i}"]) for i, s in enumerate(sends)
                         if f"{prefix}-{i}" in asgi and f"{prefix}-{i}" in adds)
        rows = []
        for n, (send, handoff, asgi_t) in enumerate(windows):
            if (n and windows[n - 1][1] > send) or (n + 1 < len(windows) and windows[n + 1][0] < handoff):
                continue  # another request's intake overlaps this one
            window = spans_between(spans, starts, send, handoff)
            reads = [s for s in window if s[2] == "io" and s[0] <= asgi_t]
            tokenize = [s for s in window if s[2].endswith("tokenize_prompt_async")]
            if not reads or len(tokenize) < 2:
                continue
            bounds = (send, reads[-1][0], tokenize[0][1], tokenize[1][0], handoff)
            row: dict[str, Any] = {}
            for p, name in enumerate(PHASES):
                lo, hi = bounds[p], bounds[p + 1]
                row[name] = {**loop_by_kind(window, lo, hi, handoff), "total": hi - lo}
            k = bisect.bisect_left(render_starts, bounds[2])
            if k < len(renders) and renders[k][0] < bounds[3]:
                row["render_wall"], row["render_cpu"] = renders[k][1] - renders[k][0], renders[k][2]
                row["render_to_start"] = renders[k][0] - bounds[2]
                row["render_to_resume"] = bounds[3] - renders[k][1]
            rows.append(row)
        runs[run["name"]] = {"load": run["load"], "endpoint": run["endpoint"], "requests": len(rows),
                             **mean_of(rows)}
    return runs


def mean_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {name: {k: round(1e3 * statistics.mean(r[name][k] for r in rows), 4)
                                  for k in (*KINDS, "total")} for name in PHASES}
    rendered = [r for r in rows if "render_wall" in r]
    for key in ("render_wall", "render_cpu", "render_to_start", "render_to_resume"):
        out[key] = round(1e3 * statistics.mean(r[key] for r in rendered), 4) if rendered else None
    out["rendered_requests"] = len(rendered)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dirs", type=Path, nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    for path in args.work_dirs:
        missing = [name for name in ("timeline-a1.log", "runs.json") if not (path / name).is_file()]
        if missing:
            parser.exit(2, f"--work-dirs: {path} has no {' or '.join(missing)} (a vllm_serve_bench.py --timeline "
                           f"--api-server-counts 1 work dir)\n")
    runs: dict[str, Any] = {}
    for k, path in enumerate(args.work_dirs, 1):
        runs |= {f"{name}-s{k}": row for name, row in analyse(path).items()}
    groups: dict[str, Any] = {}
    for key in sorted({f"{r['load']}-{r['endpoint']}" for r in runs.values()}):
        mine = [r for r in runs.values() if f"{r['load']}-{r['endpoint']}" == key]
        groups[key] = {name: {k: round(statistics.mean(r[name][k] for r in mine), 4) for k in (*KINDS, "total")}
                       for name in PHASES}
        for extra in ("render_wall", "render_cpu", "render_to_start", "render_to_resume"):
            values = [r[extra] for r in mine if r[extra] is not None]
            groups[key][extra] = round(statistics.mean(values), 4) if values else None
        groups[key]["runs"] = len(mine)
        print(key, json.dumps(groups[key]))
    args.out.write_text(json.dumps({"work_dirs": [str(p) for p in args.work_dirs], "runs": runs,
                                    "loads": groups}, indent=1) + "\n")


if __name__ == "__main__":
    main()
