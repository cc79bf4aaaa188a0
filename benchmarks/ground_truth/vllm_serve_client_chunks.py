"""How `vllm bench serve`'s client reads the streamed chunks of one output pass: real `vllm serve`, untraced, with
the client's event-loop waits and chunks stamped (`vllm_serve_bench.py --client-chunks`, bench_client_split.py
`install_chunk_stamps`; docs/benchmark-history/2026-11-30i-serve18.md):

    python benchmarks/ground_truth/vllm_serve_client_chunks.py --work-dirs $OUT/s1 --out $OUT/client-chunks.json

(the files may be gzipped: `<run>.client-split.json.gz`, as kept in benchmarks/results/vllm-serve-bench/).

The client's loop (one thread, asyncio's selector loop) alternates waits (`select` that may block) and cycles (from
a wait's return to the next wait: the transports' reads, the requests' task steps, `add_chunk`, `json.loads`). Per
wait: its wall, and within it the thread's run-queue delay (woken, its socket readable, not yet running: on the
API server's core, the server's own work, or another process's); the rest is idle (nothing readable). Per cycle: its
thread CPU and its run-queue delay (preempted mid-cycle).

A pass group: the chunks from one wake after at least `--idle-ms` of idle until the next such idle (the server writes
one engine step's outputs back to back; the engine step and the hand-off put >= ~1 ms between passes). Its span: from
the wake (the first wait's return less its run-queue delay: when the first chunk became readable) to the last chunk's
`add_chunk`; split into the client's CPU, its run-queue delay and its idle inside the group (waiting for the server's
next write). Lines through the groups by chunks in the group (least squares): per extra chunk in a pass, how much
wall, and of it how much client CPU, run-queue delay and idle. Only the timed requests' chunks (the test request's
are left out, and the groups that contain one).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def line(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """(intercept, slope) of the least-squares line; None with fewer than two distinct xs."""
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def groups(selects: list[list[int]], chunks: list[list[int]], timed: set[int], idle_ns: float) -> list[dict[str, Any]]:
    """The pass groups (module docstring), each with k (chunks), requests (distinct), span, cpu, not_running, idle (ns)
    and the wake's own run-queue delay (`wake_delay`), up to the group's last chunk; `first_tokens`: the requests
    whose first chunk is in the group, by place."""
    blocking = [i for i, s in enumerate(selects) if s[4] >= 0]  # waits that may block (polls have -1)
    by_select: dict[int, list[list[int]]] = {}
    for c in chunks:
        by_select.setdefault(c[5], []).append(c)
    out: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for n, i in enumerate(blocking):
        w0, w1, c0, c1, d0, d1, _ = selects[i]
        wait_delay, wait_idle = d1 - d0, (w1 - w0) - (d1 - d0)
        # This cycle: from this wait's return to the next wait's entry (its chunks: those stamped after any select
        # between, polls included).
        nxt = blocking[n + 1] if n + 1 < len(blocking) else None
        if nxt is None:
            break
        cyc_chunks = [c for j in range(i, nxt) for c in by_select.get(j, [])]
        cyc_cpu = selects[nxt][2] - c1
        if current is None or wait_idle >= idle_ns:
            if current is not None and current["chunks"]:
                out.append(current)
            current = {"wake": w1 - wait_delay, "wake_delay": wait_delay, "cpu": 0, "idle": 0, "chunks": [],
                       "end": None, "cpu_at_last": 0, "idle_at_last": 0}
        else:
            current["idle"] += wait_idle
        for c in cyc_chunks:
            current["chunks"].append(c)
        if cyc_chunks:  # the group's end: its last chunk's add_chunk entry; its CPU and idle up to there
            last = cyc_chunks[-1]
            current["end"] = last[1]
            current["cpu_at_last"] = current["cpu"] + (last[2] - c1)
            current["idle_at_last"] = current["idle"]  # (the run-queue delay: the span less CPU and idle)
        current["cpu"] += cyc_cpu
    if current is not None and current["chunks"]:
        out.append(current)
    first_wall: dict[int, int] = {}
    for c in chunks:
        first_wall.setdefault(c[0], c[1])  # each request's first chunk (its first token)
    result = []
    for g in out:
        if any(c[0] not in timed for c in g["chunks"]) or g["end"] is None:
            continue
        span = g["end"] - g["wake"]
        cpu, idle = g["cpu_at_last"], g["idle_at_last"]
        result.append({"k": len(g["chunks"]), "requests": len({c[0] for c in g["chunks"]}), "span": span,
                       "cpu": cpu, "idle": idle, "not_running": span - cpu - idle,
                       "wake_delay": g["wake_delay"],
                       "messages": sum(c[4] for c in g["chunks"]),
                       # each first token in the group: (its place, 0-based; its read's wall after the wake, ns)
                       "first_tokens": [(n, c[1] - g["wake"]) for n, c in enumerate(g["chunks"])
                                        if first_wall[c[0]] == c[1]]})
    return result


def cycles(selects: list[list[int]], chunks: list[list[int]]) -> list[tuple[int, int, int]]:
    """Per cycle with chunks: (chunks, thread CPU, run-queue delay) in ns."""
    blocking = [i for i, s in enumerate(selects) if s[4] >= 0]
    count: dict[int, int] = {}
    for c in chunks:
        count[c[5]] = count.get(c[5], 0) + 1
    out = []
    for i, nxt in zip(blocking, blocking[1:]):
        k = sum(count.get(j, 0) for j in range(i, nxt))
        if k:
            out.append((k, selects[nxt][2] - selects[i][3], selects[nxt][4] - selects[i][5]))
    return out


def run_summary(split: dict[str, Any], idle_ms: float) -> dict[str, Any]:
    timed = {i for i, r in enumerate(split["requests"]) if not r["test"]}
    chunks = [c for c in split["chunks"] if c[0] in timed]
    gs = groups(split["selects"], split["chunks"], timed, idle_ms * 1e6)
    cyc = cycles(split["selects"], chunks)
    ms = 1e-6
    fits = {}
    for key in ("span", "cpu", "not_running", "idle"):
        fit = line([g["k"] for g in gs], [g[key] * ms for g in gs])
        fits[key] = None if fit is None else {"at_1_ms": fit[0] + fit[1], "per_extra_chunk_ms": fit[1]}
    by_k: dict[int, list[dict[str, Any]]] = {}
    for g in gs:
        by_k.setdefault(g["k"], []).append(g)
    cfit = line([float(k) for k, _, _ in cyc], [c * ms for _, c, _ in cyc])
    firsts = [(g["k"], n, t) for g in gs for n, t in g["first_tokens"]]
    shared = [(k, n, t) for k, n, t in firsts if k > 1]
    ffit = line([float(k) for k, _, _ in firsts], [t * 1e-6 for _, _, t in firsts])
    return {
        # Where a request's first token is read: in a group of more than one chunk, how often last, its mean place
        # (0 first, 1 last) and its read's wall after the wake, ms
        "first_tokens": {"requests": len(firsts), "in_shared_groups": len(shared),
                         "last": sum(1 for k, n, _ in shared if n == k - 1),
                         "mean_place": statistics.fmean(n / (k - 1) for k, n, _ in shared) if shared else None,
                         "after_wake_ms": statistics.fmean(t * 1e-6 for _, _, t in firsts) if firsts else None,
                         "mean_k": statistics.fmean(k for k, _, _ in firsts) if firsts else None,
                         "after_wake_line_ms": None if ffit is None else {"at_1": ffit[0] + ffit[1],
                                                                          "per_extra_chunk": ffit[1]}},
        "chunks": len(chunks), "messages": sum(c[4] for c in chunks), "groups": len(gs),
        "chunk_cpu_ms": statistics.fmean((c[3] - c[2]) * ms for c in chunks),  # add_chunk alone
        "cycle_cpu_line_ms": None if cfit is None else {"intercept": cfit[0], "per_chunk": cfit[1]},
        "cycle_cpu_per_chunk_ms": sum(c for _, c, _ in cyc) * ms / max(1, sum(k for k, _, _ in cyc)),
        "group_lines": fits,
        "by_k": {k: {"groups": len(v), "span_ms": statistics.fmean(g["span"] * ms for g in v),
                     "cpu_ms": statistics.fmean(g["cpu"] * ms for g in v),
                     "not_running_ms": statistics.fmean(g["not_running"] * ms for g in v),
                     "idle_ms": statistics.fmean(g["idle"] * ms for g in v),
                     "wake_delay_ms": statistics.fmean(g["wake_delay"] * ms for g in v)}
                 for k, v in sorted(by_k.items())},
        "stamp_cost_us_per_wait": split.get("chunk_probe_ns", 0) / 1e3,
        "waits": sum(1 for s in split["selects"] if s[4] >= 0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dirs", type=Path, nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--idle-ms", type=float, default=0.3,
                        help="idle (nothing readable) that separates two passes' chunks (ms, default 0.3)")
    args = parser.parse_args()
    if not args.idle_ms > 0:
        parser.exit(2, f"--idle-ms: {args.idle_ms}: must be > 0\n")
    out: dict[str, Any] = {"idle_ms": args.idle_ms, "runs": {}}
    for work_dir in args.work_dirs:
        files = sorted([*work_dir.glob("*.client-split.json"), *work_dir.glob("*.client-split.json.gz")])
        if not files:
            parser.exit(2, f"--work-dirs: {work_dir}: no *.client-split.json (run vllm_serve_bench.py "
                           f"--client-chunks)\n")
        for f in files:
            split = json.loads(gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_text())
            if "chunks" not in split:
                parser.exit(2, f"--work-dirs: {f}: no chunk stamps (run vllm_serve_bench.py --client-chunks)\n")
            name = f"{work_dir.name}/{f.name.removesuffix('.gz').removesuffix('.client-split.json')}"
            out["runs"][name] = s = run_summary(split, args.idle_ms)
            lines = s["group_lines"]
            fmt = " ".join(f"{k} {v['at_1_ms']:.3f}+{v['per_extra_chunk_ms']:.3f}/chunk" if v else f"{k} -"
                           for k, v in lines.items())
            ft = s["first_tokens"]
            print(f"{name}: chunks {s['chunks']} groups {s['groups']} cycle CPU/chunk "
                  f"{s['cycle_cpu_per_chunk_ms']:.3f} ms; {fmt}; first tokens in shared groups "
                  f"{ft['in_shared_groups']}/{ft['requests']}, last {ft['last']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
