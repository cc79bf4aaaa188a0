"""Per-request timestamps of a real `vllm serve` API server (one process), for `vllm_serve_bench.py --timeline`.

`install(path)` runs in the API server's process before vLLM's CLI (the bench's launcher calls it when
`VLLM_SERVE_TIMELINE` names a file) and appends one JSON line per event, every time on CLOCK_MONOTONIC (which
`time.perf_counter`, the client's clock, is on Linux):
- ["add", request id, t]: `AsyncMPClient.add_request_async`, the request handed to the engine core;
- ["req", request id, arrival, queued, scheduled, first token, first token seen, last token, finished]: at the
  request's end, vLLM's own `RequestStateStats` (`vllm/v1/metrics/stats.py`): the API server's arrival stamp (taken
  when rendering starts), the engine core's QUEUED and SCHEDULED events and first token (`EngineCoreOutputs.timestamp`:
  the step's outputs made), the output handler's iteration stamp of the first token, the last token's;
- ["pass", start, end, outputs]: each `OutputProcessor.process_outputs` call.
`timeline(...)` joins them with the client's send times and TTFTs (`vllm bench serve --save-detailed`) into where each
request's TTFT went. Nothing else of vLLM changes.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any


def install(path: str) -> None:
    import vllm.v1.engine.core_client as core_client
    import vllm.v1.engine.output_processor as output_processor
    import vllm.v1.metrics.stats as stats

    log = open(path, "a", buffering=1)  # line-buffered: each event is on disk when written

    def offset() -> float:  # the API server's arrival stamp is wall-clock time
        return time.time() - time.monotonic()

    finished = stats.IterationStats.update_from_finished_request

    def update_from_finished_request(self: Any, finish_reason: Any, request_id: str, *args: Any, **kwargs: Any) -> Any:
        req = args[2] if len(args) > 2 else kwargs["req_stats"]
        wall = offset()
        log.write(json.dumps(["req", request_id, req.arrival_time - wall, req.queued_ts, req.scheduled_ts,
                              req.first_token_ts, req.arrival_time + req.first_token_latency - wall,
                              req.last_token_ts, self.iteration_timestamp - wall]) + "\n")
        return finished(self, finish_reason, request_id, *args, **kwargs)

    add = core_client.AsyncMPClient.add_request_async

    async def add_request_async(self: Any, request: Any) -> None:
        log.write(json.dumps(["add", request.request_id, time.monotonic()]) + "\n")
        return await add(self, request)

    process = output_processor.OutputProcessor.process_outputs

    def process_outputs(self: Any, outputs: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        result = process(self, outputs, *args, **kwargs)
        log.write(json.dumps(["pass", start, time.monotonic(), len(outputs)]) + "\n")
        return result

    stats.IterationStats.update_from_finished_request = update_from_finished_request  # type: ignore[method-assign]
    core_client.AsyncMPClient.add_request_async = add_request_async  # type: ignore[method-assign]
    output_processor.OutputProcessor.process_outputs = process_outputs  # type: ignore[method-assign]


PARTS = ("client_to_arrival", "arrival_to_engine", "engine_to_queued", "queued_to_scheduled", "prefill_step",
         "output_handoff", "output_to_client")


def timeline(events: list[list[Any]], start_times: list[float], ttfts: list[float]) -> dict[str, Any]:
    """Where the TTFT of the client's requests went, ms (mean and median over requests): client_to_arrival (the
    client's sending, HTTP, the API server before its arrival stamp), arrival_to_engine (the API server's input work),
    engine_to_queued (the hop to the engine core and the step under way), queued_to_scheduled, prefill_step (the
    step that computed the prompt), output_handoff (the step's outputs to the API server's output handler),
    output_to_client (the output pass, the SSE chunk, the client's reading). Requests are matched by time: each of
    the server's (by arrival) to the latest unmatched client send before it; the ids differ (the server appends a
    suffix to the client's)."""
    adds = {e[1].rsplit("-", 1)[0]: e[2] for e in events if e[0] == "add"}
    first, last = min(start_times), max(start_times)
    served = sorted((e for e in events if e[0] == "req" and first - 0.5 <= e[2] <= last + 30), key=lambda e: e[2])
    order = sorted(range(len(start_times)), key=lambda i: start_times[i])
    used: set[int] = set()
    rows, end = [], first
    for e in served:
        _, rid, arrival, queued, scheduled, token, seen, _, _ = e
        candidates = [i for i in order if start_times[i] <= arrival and i not in used]
        if not candidates or rid not in adds:
            continue
        i = candidates[-1]
        used.add(i)
        end = max(end, seen)
        rows.append([arrival - start_times[i], adds[rid] - arrival, queued - adds[rid], scheduled - queued,
                     token - scheduled, seen - token, start_times[i] + ttfts[i] - seen])
    passes = [e for e in events if e[0] == "pass" and first <= e[1] <= end]
    out: dict[str, Any] = {"requests_matched": len(rows), "requests": len(start_times)}
    for j, name in enumerate(PARTS):
        values = [1e3 * row[j] for row in rows]
        if values:
            out[f"{name}_ms"] = {"mean": round(statistics.mean(values), 3), "median": round(statistics.median(values), 3)}
    if passes:
        out["output_pass_ms_mean"] = round(1e3 * statistics.mean(p[2] - p[1] for p in passes), 3)
        out["outputs_per_pass_mean"] = round(statistics.mean(p[3] for p in passes), 2)
    return out
