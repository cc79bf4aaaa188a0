"""Do requests that arrive close together at a real `vllm serve` API server take their input work in turn (first come
first served) or interleaved? Per request, from a `vllm_serve_bench.py --timeline` work directory.

    python benchmarks/ground_truth/timeline_pairs.py --work-dir $WORK --out $OUT/timeline-requests.json
    python benchmarks/ground_truth/timeline_pairs.py --requests benchmarks/results/vllm-serve-bench/timeline-requests.json

`--work-dir`: the work directory of one `--timeline` campaign (its timeline-a1.log, vllm_timeline.py's events, and
the runs' `vllm bench serve --save-detailed` results, <run>.json); writes per run and request, in the client's order:
the client's send (`start_times`), vLLM's arrival stamp (rendering starts), the hand-off to the engine core
(`AsyncMPClient.add_request_async`) and the engine core's SCHEDULED stamp, seconds on CLOCK_MONOTONIC. Requests are
matched by id: the client numbers its requests in its own order (`vllm bench serve`'s request id prefix and index; the
server's id on the completions endpoint adds the prompt's index, and on "add" a suffix). Runs are assigned to the
log's id prefixes in time order.

`--requests`: the tables below from such a file. Per run: when the arrival stamps and the hand-offs came after the
run's first send (a burst's phases); the median time from send to hand-off of the isolated requests (no other sent
within 15 ms either side) and, for the pairs sent less than 5 ms apart with none in the 15 ms before, the first's and
second's send to hand-off, the send gap and the hand-off gap (second minus first), how often the second was handed
off first; and how many engine steps scheduled 1, 2 and 3+ new requests. First come first served predicts the first
of a pair as fast as an isolated request and the hand-offs a whole request's input work apart; work shared between
them (interleaved) predicts the first slowed and the hand-off gap near the send gap.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def client_key(request_id: str) -> tuple[str, int]:
    """(the client's id prefix, its index) of a request id as vLLM's stats name it: "cmpl-" and the client's id
    ("bench-0e0f8042-7") and the prompt's index ("-0") on the completions endpoint, "chatcmpl-" and the client's id on
    the chat endpoint; e.g. "cmpl-bench-0e0f8042-7-0" and "chatcmpl-bench-0e0f8042-7" -> ("bench-0e0f8042", 7)."""
    endpoint, _, rest = request_id.partition("-")
    if endpoint == "cmpl":
        rest, _, item = rest.rpartition("-")
        if not item.isdigit():
            raise ValueError(f"not a vllm bench serve request id: {request_id!r}")
    elif endpoint != "chatcmpl":
        raise ValueError(f"not a vllm bench serve request id: {request_id!r}")
    prefix, _, index = rest.rpartition("-")
    if not index.isdigit():
        raise ValueError(f"not a vllm bench serve request id: {request_id!r}")
    return prefix, int(index)


def extract(work_dir: Path) -> dict[str, Any]:
    events = [json.loads(line) for line in (work_dir / "timeline-a1.log").read_text().splitlines()]
    adds, reqs, prefixes = {}, {}, []
    for event in events:
        if event[0] in ("add", "req"):
            key = client_key(event[1] if event[0] == "req" else event[1].rsplit("-", 1)[0])
            if key[0] not in prefixes:
                prefixes.append(key[0])
            (adds if event[0] == "add" else reqs)[key] = event
    results = sorted(((json.loads(p.read_text()), p.stem) for p in work_dir.glob("*-a1-r*.json")),
                     key=lambda item: min(item[0]["start_times"]))
    if len(results) != len(prefixes):
        raise SystemExit(f"{work_dir}: {len(results)} run results but {len(prefixes)} request id prefixes")
    runs = {}
    for (result, name), prefix in zip(results, prefixes):
        rows = []
        for i, sent in enumerate(result["start_times"]):
            add, req = adds.get((prefix, i)), reqs.get((prefix, i))
            if add is not None and req is not None:
                rows.append([i, sent, req[2], add[2], req[4]])
        runs[name] = {"columns": ["index", "sent_s", "arrival_s", "add_s", "scheduled_s"], "rows": rows}
    return {"work_dir_runs": sorted(runs), "runs": runs}


def pairs(rows: list[list[float]]) -> dict[str, Any]:
    rows = sorted(rows, key=lambda r: r[1])
    isolated, first, second, send_gap, add_gap, inverted = [], [], [], [], [], 0
    for k, (_, sent, _, add, _) in enumerate(rows):
        before = rows[k - 1] if k else None
        after = rows[k + 1] if k + 1 < len(rows) else None
        alone_before = before is None or sent - before[1] > 0.015
        if alone_before and (after is None or after[1] - sent > 0.015):
            isolated.append(add - sent)
        if alone_before and after is not None and after[1] - sent < 0.005:
            first.append(add - sent)
            second.append(after[3] - after[1])
            send_gap.append(after[1] - sent)
            add_gap.append(after[3] - add)
            inverted += after[3] < add
    steps: dict[float, int] = {}
    for row in rows:
        steps[row[4]] = steps.get(row[4], 0) + 1
    sizes = list(steps.values())

    def ms(values: list[float]) -> float | None:
        return round(1e3 * statistics.median(values), 2) if values else None

    t0 = rows[0][1] if rows else 0.0
    arrivals = sorted(r[2] - t0 for r in rows)
    hand_offs = sorted(r[3] - t0 for r in rows)

    def at(values: list[float], q: float) -> float | None:
        return round(1e3 * values[min(len(values) - 1, int(q * len(values)))], 1) if values else None

    return {"requests": len(rows), "min_send_to_arrival_ms": round(1e3 * min(r[2] - r[1] for r in rows), 2),
            "arrival_ms_p0_p10_p50_p90_p100": [at(arrivals, q) for q in (0, 0.1, 0.5, 0.9, 1)],
            "add_ms_p0_p10_p50_p90_p100": [at(hand_offs, q) for q in (0, 0.1, 0.5, 0.9, 1)],
            "isolated": len(isolated), "isolated_send_to_add_ms": ms(isolated),
            "pairs": len(first), "pair_send_gap_ms": ms(send_gap), "pair_first_send_to_add_ms": ms(first),
            "pair_second_send_to_add_ms": ms(second), "pair_add_gap_ms": ms(add_gap), "pair_second_first": inverted,
            "steps_with_1_2_3plus_new": [sizes.count(1), sizes.count(2), sum(s >= 3 for s in sizes)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, nargs="*", default=[])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--requests", type=Path)
    args = parser.parse_args()
    if args.work_dir:
        if args.out is None:
            parser.error("--out: required with --work-dir")
        merged: dict[str, Any] = {"runs": {}}
        for work_dir in args.work_dir:
            merged["runs"].update(extract(work_dir)["runs"])
        args.out.write_text(json.dumps(merged) + "\n")
        source = args.out
    elif args.requests is not None:
        source = args.requests
    else:
        parser.error("give --work-dir and --out, or --requests")
    data = json.loads(source.read_text())
    print("| run | requests | min send to arrival ms | arrival stamps after the first send, ms: p0 / p10 / p50 / "
          "p90 / max | hand-offs, ms: the same |")
    print("|---|---|---|---|---|")
    for name in sorted(data["runs"]):
        s = pairs(data["runs"][name]["rows"])
        print(f"| {name} | {s['requests']} | {s['min_send_to_arrival_ms']} | "
              f"{' / '.join(map(str, s['arrival_ms_p0_p10_p50_p90_p100']))} | "
              f"{' / '.join(map(str, s['add_ms_p0_p10_p50_p90_p100']))} |")
    print()
    print("| run | requests | isolated send to add ms (n) | pairs < 5 ms | send gap ms | first send to add ms | "
          "second ms | add gap ms | second first | steps with 1 / 2 / 3+ new |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in sorted(data["runs"]):
        s = pairs(data["runs"][name]["rows"])
        print(f"| {name} | {s['requests']} | {s['isolated_send_to_add_ms']} ({s['isolated']}) | {s['pairs']} | "
              f"{s['pair_send_gap_ms']} | {s['pair_first_send_to_add_ms']} | {s['pair_second_send_to_add_ms']} | "
              f"{s['pair_add_gap_ms']} | {s['pair_second_first']} | "
              f"{' / '.join(map(str, s['steps_with_1_2_3plus_new']))} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
