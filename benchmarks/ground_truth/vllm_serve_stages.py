"""Each request's TTFT stage by stage, real `vllm serve` against the simulator on the same runs: which stage's growth
from one request at a time (closed1) to 20/s (rate20) the simulator lacks (docs/benchmark-history/2026-11-30i-serve17.md).

    python benchmarks/ground_truth/vllm_serve_stages.py --work-dirs $OUT/s1 $OUT/s2 ... \
        --hardware benchmarks/results/vllm-serve-bench/2026-11-30c/cal-host.yaml \
        --costs benchmarks/results/vllm-serve-bench/2026-11-30g-serve14/sim-2026-11-30c-host.json --out $OUT/stages.json

The work directories: `vllm_serve_bench.py --timeline` sessions recorded with `VLLM_SERVE_TIMELINE_STEPS=1`
(vllm_timeline.py: each loop task's steps, uvicorn's reads and the renderer thread's calls, each with its process),
one or two API-server processes. A request's stages, measured (vLLM 0.32's path; vllm_serve_intake_waits.py's
phases A-D) and simulated (`roofline.sim.api_server`'s chain of parts, observed; nothing in it changes):

Each stage, measured -> simulated (from the previous stage's end to):
- send: the loop's read (uvicorn's last `data_received` before the request's ASGI task) -> the loop's first part
  queued (the client's part, the read's wake-up, the accept spacing);
- read: the end of the loop's step that submits the render (`tokenize_prompt_async`'s first step) -> that part's end
  (the accept, reads, validation; output passes and other requests' parts before it);
- render: the loop's step that resumes it (the renderer thread's `_tokenize_prompt` and both wake-ups) -> the loop's
  second part queued (the renderer's part and its waits);
- handoff: `AsyncMPClient.add_request_async` -> the second part's end (`process_for_engine_async`, `generate`,
  `add_request`);
- engine_intake: the engine core's input thread done (`EngineCoreProc.preprocess_add_request`'s end: ZMQ, the
  `Request` made) -> its reach of the engine core (`latency_s`);
- wait: SCHEDULED (the busy loop's input queue at the end of the step under way, QUEUED, the scheduler) -> its first
  schedule;
- prompt_step: its first token's step outputs (`EngineCoreOutputs.timestamp`) -> the end of the step with its first
  token;
- output_handoff: the output handler's stamp (`IterationStats.iteration_timestamp`: ZMQ, `process_outputs_socket`,
  the handler's turn) -> `output_latency_s` later;
- output_stream: the client's first token (the handler's pass, the requests' stream steps, the client's read) -> the
  client's first token (the output pass, queued).

Requests whose intake (send -> hand-off) overlaps another's in the same process are left out on both sides (the
loop's steps name the task, not the request: at 20/s ~1 in 4); the simulated stages are of the same requests. Per
measured phase also the loop's time by what it ran (`intake_loop.kind_of`: this request's steps, other requests'
streams, the output path, idle); per simulated one the time the process's loop had output passes queued. Means per
run, per (load, API-server count) and the growth from closed1 to rate20, ms.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vllm_serve_intake_waits import KINDS, loop_by_kind, spans_between  # noqa: E402

STAGES = ("send", "read", "render", "handoff", "engine_intake", "wait", "prompt_step", "output_handoff",
          "output_stream")
STREAM_GAP_S = 0.1e-3  # a step's stream steps follow the handler's step and each other within this (measured: 10-30 us)


def request_key(engine_id: str, suffixed: bool = True) -> str:
    """The client's x-request-id of an engine request id (the hand-off's "cmpl-<x-request-id>-<prompt index>-<suffix>",
    "chatcmpl-<x-request-id>-<suffix>"; without the suffix in the output processor's, `suffixed` False)."""
    drop = (2 if engine_id.startswith("cmpl-") else 1) - (0 if suffixed else 1)
    rest = engine_id.split("-", 1)[1]
    return rest.rsplit("-", drop)[0] if drop else rest


def read_events(path: Path) -> list[list[Any]]:
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:  # (two processes' buffered writes: a line cut by the other's, rare)
            continue
    return events


def measured(work_dir: Path, count: int) -> dict[str, list[dict[str, Any]]]:
    """Per run of the work dir: per request (client index) its stage boundaries and the loop's time by kind."""
    events = read_events(work_dir / f"timeline-a{count}.log")
    by_pid: dict[Any, list[tuple[float, float, str]]] = collections.defaultdict(list)
    for e in events:
        if e[0] == "step":
            by_pid[e[4] if len(e) > 4 else None].append((e[2], e[3], e[1]))
        elif e[0] == "io":
            by_pid[e[3] if len(e) > 3 else None].append((e[1], e[2], "io"))
    for spans in by_pid.values():
        spans.sort()
    starts = {pid: [s[0] for s in spans] for pid, spans in by_pid.items()}
    asgi = {e[1]: e[2] for e in events if e[0] == "asgi"}
    adds = {request_key(e[1]): (e[2], e[3]) for e in events if e[0] == "add"}
    inputs = {request_key(e[1]): e[3] for e in events if e[0] == "ec_in"}
    reqs = {request_key(e[1], suffixed=False): e for e in events if e[0] == "req"}
    passes = sorted((e[1], e[2], e[3], e[4] if len(e) > 4 else None) for e in events if e[0] == "pass")
    out: dict[str, list[dict[str, Any]]] = {}
    for run in json.loads((work_dir / "runs.json").read_text())["runs"]:
        result = json.loads((work_dir / run["file"]).read_text())
        sends, ttfts = result["start_times"], result["ttfts"]
        firsts = [k for k in asgi if k.endswith("-0") and abs(asgi[k] - sends[0]) < 0.1]
        if not firsts:
            continue
        prefix = firsts[0][:-2]
        keys = [f"{prefix}-{i}" for i in range(len(sends))]
        rows = []
        for i, key in enumerate(keys):
            if key not in asgi or key not in adds or key not in reqs or key not in inputs:
                continue
            send, (handoff, pid) = sends[i], adds[key]
            if len(by_pid) == 1:
                pid = next(iter(by_pid))
            overlaps = any(j != i and keys[j] in adds and adds[keys[j]][1] == adds[key][1]
                           and sends[j] < handoff and adds[keys[j]][0] > send for j in range(len(keys)))
            if overlaps:
                continue
            spans, pid_starts = by_pid.get(pid, []), starts.get(pid, [])
            window = spans_between(spans, pid_starts, send, handoff)
            reads = [s for s in window if s[2] == "io" and s[0] <= asgi[key]]
            tokenize = [s for s in window if s[2].endswith("tokenize_prompt_async")]
            if not reads or len(tokenize) < 2:
                continue
            req = reqs[key]
            bounds = [send, reads[-1][0], tokenize[0][1], tokenize[1][0], handoff, inputs[key], req[4], req[5],
                      req[6], send + ttfts[i]]
            loop: dict[str, dict[str, float]] = {}
            for p, stage in enumerate(STAGES[:4]):
                loop[stage] = loop_by_kind(window, bounds[p], bounds[p + 1], handoff)
            row = {"index": i, "bounds": bounds, "loop": loop}
            # the output handler's pass that carries its first token: the first of its process's passes from the
            # handler's stamp on (`OutputProcessor.process_outputs`, stamped just after `iteration_timestamp`)
            k = bisect.bisect_left(passes, (req[6] - 1e-4,))
            while k < len(passes) and passes[k][3] not in (None, adds[key][1]):
                k += 1
            if k < len(passes) and passes[k][0] < send + ttfts[i]:
                row["pass"] = (passes[k][1], passes[k][2])
            rows.append(row)
        out[run["name"]] = rows
    return out


class _Recorded(collections.deque):  # type: ignore[type-arg]
    """One of the simulated API server's thread queues, noting each part's queueing and end with the simulator's
    clock of the caller (`_Threads._run` / `_wait` / `_alone`'s local `t`)."""

    def __init__(self, index: int, log: list[tuple[float, str, int, int]]) -> None:
        super().__init__()
        self.queue, self.log = index, log

    def append(self, job: Any) -> None:
        self.log.append((sys._getframe(1).f_locals["t"], "queued", self.queue, job[0]))
        super().append(job)

    def popleft(self) -> Any:
        job = super().popleft()
        self.log.append((sys._getframe(1).f_locals["t"], "ended", self.queue, job[0]))
        return job


def observe_threads() -> dict[str, Any]:
    """Patch the simulator's API-server threads to note each part's queueing and end (`_Recorded`), and its
    `_Simulation.send` to note each request's ticket; `_alone` (a shortcut that runs a lone chain's next parts back
    to back without queueing them) ends the one part and queues the next, as `_run`'s general step does: the same
    times (checked by the caller against the unobserved simulation)."""
    from roofline.sim import api_server, simulator

    seen: dict[str, Any] = {"log": [], "ticket": {}}
    threads, server = api_server._Threads, api_server.ApiServer
    server_init = server.__init__

    def server_noted(self: Any, *args: Any, **kwargs: Any) -> None:
        server_init(self, *args, **kwargs)
        seen["api"] = self

    init = threads.__init__

    def init_noted(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.queues = [_Recorded(i, seen["log"]) for i in range(len(self.queues))]
        self._threads = self._threads_of(self.queues)

    def alone(self: Any, job: list[Any], t: float, limit_s: float, queues: Any, io: Any, chains: Any,
              finished_s: Any, stop: Any) -> tuple[float, bool]:
        ticket, part = job[0], job[1]
        chain = chains[ticket]
        t += job[2]
        queues[chain[part][0]].popleft()
        if part + 1 < len(chain):
            queue, work = chain[part + 1]
            if queue == api_server.WAIT:
                self._wait(queues, io, chains, ticket, chain, part + 1, t)
            else:
                queues[queue].append([ticket, part + 1, work])
            return t, False
        del chains[ticket]
        if ticket >= 0:
            if stop is None:
                self.num_inputs -= 1
            finished_s[ticket] = t
        if ticket == stop:
            finished_s[ticket] = t
            return t, True
        return t, False

    sim = simulator._Simulation
    send = sim.send

    def send_noted(self: Any, now: float, index: int, ending: Any = None) -> None:
        send(self, now, index, ending)
        if self.api is not None and index in self.api_ticket:  # (replica,) process, ticket
            seen["ticket"][index] = tuple(self.api_ticket[index][-2:])

    threads.__init__, threads._alone = init_noted, alone  # type: ignore[method-assign]
    server.__init__ = server_noted  # type: ignore[method-assign]
    sim.send = send_noted  # type: ignore[method-assign]
    return seen


def simulated(log: list[tuple[float, str, int, int]], tickets: dict[int, tuple[int, int]], seen: dict[str, Any],
              api: Any) -> dict[int, dict[str, Any]]:
    """Per request index: its simulated stage boundaries and the time its loop had output passes queued per stage."""
    from roofline.sim.api_server import LOOP, OUTPUTS

    marks: dict[tuple[int, int], list[float]] = collections.defaultdict(list)  # (ticket, queue) -> times
    outputs_busy: dict[int, list[tuple[float, float]]] = collections.defaultdict(list)  # loop -> (from, to)
    depth: dict[int, int] = collections.defaultdict(int)
    since: dict[int, float] = {}
    for t, what, queue, ticket in log:
        if ticket >= 0:
            marks[(ticket, queue)].append(t)
        elif queue % 3 == OUTPUTS:
            if what == "queued":
                if depth[queue] == 0:
                    since[queue] = t
                depth[queue] += 1
            else:
                depth[queue] -= 1
                if depth[queue] == 0:
                    outputs_busy[queue - OUTPUTS + LOOP].append((since[queue], t))
    rec = seen["recorder"]
    rid_of = {row: rid for rid, row in rec.row_of.items()}
    out = {}
    for index, (process, ticket) in tickets.items():
        loop = marks.get((ticket, 3 * process + LOOP), [])
        rid = rid_of[index]
        if len(loop) < 4 or rid not in seen["reach"] or rid not in seen["step_end"]:
            continue
        queued1, end1, queued2, end2 = sorted(loop)[:4]
        end = seen["step_end"][rid]
        bounds = [rec.sent[index], queued1, end1, queued2, end2, seen["reach"][rid], rec.first_scheduled[index],
                  end, end + api.output_latency_s, rec.first_token[index]]
        busy = {}
        for p, stage in enumerate(STAGES[:4]):
            lo, hi = bounds[p], bounds[p + 1]
            busy[stage] = sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in outputs_busy[3 * process + LOOP])
        out[index] = {"bounds": [float(b) for b in bounds], "outputs": busy}
    return out


HOP_PARTS = ("send", "transport", "decode", "to_preprocess", "preprocess")


def input_hop(work_dir: Path, count: int) -> dict[str, dict[str, float]]:
    """Per run, each request's input hop (the hand-off -> the engine core's input thread done) in parts, where the
    work dir has vllm_timeline.py's "sent" and "ec_dec" stamps: `add_request_async` -> `_send_input` returned (the
    request encoded, handed to ZMQ) -> the input thread's `MsgpackDecoder.decode` starts (the message across ZMQ's
    I/O threads, the input thread woken from `poller.poll()` with the GIL) -> decoded -> `preprocess_add_request`
    starts -> ends; the transport also by whether the engine core was in a step (`EngineCore.step`, "ec_step") when
    the request was sent, and for those sent while the busy loop ran its own Python (holding the GIL). Means over the
    run's requests, ms; {} without the stamps."""
    events = read_events(work_dir / f"timeline-a{count}.log")
    steps = sorted((e[1], e[2]) for e in events if e[0] == "ec_step")
    step_starts = [a for a, _ in steps]
    # the busy loop's own Python in a step, holding the GIL: `schedule()`, `execute_model`'s enqueue (the
    # scheduler output pickled), `update_from_output`
    python = sorted((e[1], e[2]) for e in events if e[0] in ("ec_sched", "ec_exec", "ec_upd"))
    python_starts = [a for a, _ in python]
    stamps: dict[str, dict[str, Any]] = collections.defaultdict(dict)
    for e in events:
        if e[0] in ("add", "sent"):
            stamps[e[1]][e[0]] = e[2]
        elif e[0] in ("ec_dec", "ec_in"):
            stamps[e[1]][e[0]] = (e[2], e[3])
    out: dict[str, dict[str, float]] = {}
    for run in json.loads((work_dir / "runs.json").read_text())["runs"]:
        sends = json.loads((work_dir / run["file"]).read_text())["start_times"]
        lo, hi = sends[0], sends[-1] + 1.0
        rows = [(s["add"], s["sent"], *s["ec_dec"], *s["ec_in"]) for s in stamps.values()
                if len(s) == 4 and lo <= s["add"] <= hi]
        if not rows:
            continue
        out[run["name"]] = {part: round(1e3 * statistics.mean(r[p + 1] - r[p] for r in rows), 4)
                            for p, part in enumerate(HOP_PARTS)} | {"requests": len(rows)}
        # the transport by whether the engine core was in a step (`EngineCore.step`) when the request was sent
        during: dict[bool, list[float]] = {True: [], False: []}
        for r in rows:
            k = bisect.bisect_right(step_starts, r[1]) - 1
            during[k >= 0 and steps[k][1] > r[1]].append(r[2] - r[1])
        held = []
        for r in rows:
            k = bisect.bisect_right(python_starts, r[1]) - 1
            if k >= 0 and python[k][1] > r[1]:
                held.append(r[2] - r[1])
        for key, name in ((True, "in_step"), (False, "between_steps")):
            if during[key]:
                out[run["name"]][f"transport_{name}"] = round(1e3 * statistics.mean(during[key]), 4)
                out[run["name"]][f"requests_{name}"] = len(during[key])
        if held:
            out[run["name"]]["transport_in_busy_loop_python"] = round(1e3 * statistics.mean(held), 4)
            out[run["name"]]["requests_in_busy_loop_python"] = len(held)
    return out


def output_steps(work_dir: Path, count: int) -> dict[str, dict[str, float]]:
    """Per run, the loop's output work of a step as vLLM runs it: the ZMQ socket task's step
    (`process_outputs_socket`), the output handler's step around its pass (`output_handler`), then the requests' stream
    steps (`TaskHandle._run_coro`: Starlette's `StreamingResponse` writing each SSE chunk), back to back after it
    (`STREAM_GAP_S`), at most one an output; means over the passes with at least one output, by the outputs in the pass
    (ms; "span": the pass's end -> the last stream step's end)."""
    events = read_events(work_dir / f"timeline-a{count}.log")
    by_pid: dict[Any, list[tuple[float, float, str]]] = collections.defaultdict(list)
    for e in events:
        if e[0] == "step":
            by_pid[e[4] if len(e) > 4 else None].append((e[2], e[3], e[1]))
    for spans in by_pid.values():
        spans.sort()
    out: dict[str, dict[str, float]] = {}
    runs = json.loads((work_dir / "runs.json").read_text())["runs"]
    for run in runs:
        sends = json.loads((work_dir / run["file"]).read_text())["start_times"]
        lo, hi = sends[0], sends[-1] + 1.0
        rows: dict[int, list[tuple[float, float, float, int, float]]] = collections.defaultdict(list)
        for e in events:
            if e[0] != "pass" or not lo <= e[1] <= hi or e[3] < 1:
                continue
            spans = by_pid[e[4] if len(e) > 4 else None]
            j = bisect.bisect_right(spans, (e[1], math.inf, ""))
            handler = [s for s in spans[max(0, j - 3):j + 1] if "output_handler" in s[2] and s[0] <= e[1] <= s[1]]
            if not handler:
                continue
            socket = [s for s in spans[max(0, j - 4):j] if "process_outputs_socket" in s[2]]
            k = j
            while k < len(spans) and spans[k][0] < e[2]:  # (the handler's own step)
                k += 1
            streams: list[tuple[float, float, str]] = []
            while (k < len(spans) and spans[k][2] == "TaskHandle._run_coro" and len(streams) < e[3]
                   and spans[k][0] - (streams[-1][1] if streams else handler[0][1]) < STREAM_GAP_S):
                streams.append(spans[k])  # the step's stream steps: back to back after the handler's step
                k += 1
            if not streams:
                continue
            rows[e[3]].append((socket[-1][1] - socket[-1][0] if socket else 0.0, handler[0][1] - handler[0][0],
                               sum(b - a for a, b, _ in streams), len(streams), streams[-1][1] - e[2]))
        out[run["name"]] = {str(n): {"passes": len(r), "socket_step": round(1e3 * statistics.mean(x[0] for x in r), 4),
                                     "handler_step": round(1e3 * statistics.mean(x[1] for x in r), 4),
                                     "stream_steps": round(1e3 * statistics.mean(x[2] for x in r), 4),
                                     "stream_steps_seen": round(statistics.mean(x[3] for x in r), 3),
                                     "span": round(1e3 * statistics.mean(x[4] for x in r), 4)}
                            for n, r in sorted(rows.items())}
    return out


def output_split(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The measured output stream in two: the output handler's pass (its stamp -> the pass's end) and the rest
    (-> the client: the requests' stream steps, the writes, the client's reads), and the outputs in that pass."""
    rows = [r for r in rows if "pass" in r]
    if not rows:
        return {}
    return {"handler_pass": round(1e3 * statistics.mean(r["pass"][0] - r["bounds"][8] for r in rows), 4),
            "streams_to_client": round(1e3 * statistics.mean(r["bounds"][9] - r["pass"][0] for r in rows), 4),
            "outputs_per_pass": round(statistics.mean(r["pass"][1] for r in rows), 3)}


def stage_means(rows: list[list[float]]) -> dict[str, float]:
    return {s: round(1e3 * statistics.mean(b[p + 1] - b[p] for b in rows), 4) for p, s in enumerate(STAGES)} | {
        "ttft": round(1e3 * statistics.mean(b[-1] - b[0] for b in rows), 4)}


def main() -> None:
    import vllm_serve_sim
    from sim_ttft_parts import observe

    from roofline.sim.api_server import ApiServerCosts

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dirs", type=Path, nargs="+", required=True)
    parser.add_argument("--hardware", required=True)
    parser.add_argument("--costs", type=Path, required=True, help="a vllm_serve_sim.py --out file: its fitted costs")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    for path in args.work_dirs:
        if not (path / "runs.json").is_file() or not list(path.glob("timeline-a*.log")):
            parser.exit(2, f"--work-dirs: {path} has no runs.json or timeline-a<N>.log (a vllm_serve_bench.py "
                           f"--timeline work dir)\n")
    if not args.costs.is_file():
        parser.exit(2, f"--costs: {args.costs} is not a file\n")
    fitted = json.loads(args.costs.read_text())
    costs = ApiServerCosts(**fitted["costs"])
    client = fitted.get("client_costs_s")
    plain = {}
    out: dict[str, Any] = {"costs": str(args.costs), "hardware": args.hardware, "runs": {}}
    for k, path in enumerate(args.work_dirs, 1):
        index = json.loads((path / "runs.json").read_text())
        count = index["runs"][0]["api_server_count"]
        meas = measured(path, count)
        steps = output_steps(path, count)
        hops = input_hop(path, count)
        for run in index["runs"]:
            if run["name"] not in meas:
                continue
            one = dict(index, runs=[run])
            plain = vllm_serve_sim.simulate_all(one, args.hardware, costs, client=client)[run["name"]]
            seen = observe()
            noted = observe_threads()
            predicted = vllm_serve_sim.simulate_all(one, args.hardware, costs, client=client)[run["name"]]
            restore()
            assert abs(predicted["mean_ttft_ms"] - plain["mean_ttft_ms"]) < 1e-6, (predicted, plain)
            sim = simulated(noted["log"], noted["ticket"], seen, noted["api"])
            rows = [r for r in meas[run["name"]] if r["index"] in sim]
            name = f"{run['name']}-s{k}"
            entry = {"load": run["load"], "api_server_count": count, "session": k, "requests": len(rows),
                     "measured_ms": stage_means([r["bounds"] for r in rows]),
                     "simulated_ms": stage_means([sim[r["index"]]["bounds"] for r in rows]),
                     "measured_loop_ms": {s: {kind: round(1e3 * statistics.mean(r["loop"][s][kind] for r in rows), 4)
                                              for kind in KINDS} for s in STAGES[:4]},
                     "simulated_outputs_ms": {s: round(1e3 * statistics.mean(sim[r["index"]]["outputs"][s]
                                                                             for r in rows), 4) for s in STAGES[:4]},
                     "measured_output_split_ms": output_split(rows),
                     "measured_output_steps_ms": steps.get(run["name"], {}),
                     "measured_input_hop_ms": hops.get(run["name"], {}),
                     "measured_mean_ttft_ms": run["result"]["mean_ttft_ms"],
                     "simulated_mean_ttft_ms": round(predicted["mean_ttft_ms"], 4)}
            out["runs"][name] = entry
            print(name, entry["requests"], " ".join(f"{s} {entry['measured_ms'][s]:.2f}/{entry['simulated_ms'][s]:.2f}"
                                                     for s in (*STAGES, "ttft")), flush=True)
    groups: dict[str, Any] = {}
    for load in ("closed1", "rate20"):
        for count in (1, 2):
            mine = [r for r in out["runs"].values() if r["load"] == load and r["api_server_count"] == count]
            if not mine:
                continue
            groups[f"{load}-a{count}"] = {
                side: {s: round(statistics.mean(r[side][s] for r in mine), 3) for s in (*STAGES, "ttft")}
                for side in ("measured_ms", "simulated_ms")} | {
                "measured_loop_ms": {s: {kind: round(statistics.mean(r["measured_loop_ms"][s][kind] for r in mine), 3)
                                         for kind in KINDS} for s in STAGES[:4]},
                "simulated_outputs_ms": {s: round(statistics.mean(r["simulated_outputs_ms"][s] for r in mine), 3)
                                         for s in STAGES[:4]},
                "runs": len(mine), "requests": sum(r["requests"] for r in mine)}
    for count in (1, 2):
        alone, busy = groups.get(f"closed1-a{count}"), groups.get(f"rate20-a{count}")
        if alone and busy:
            growth = {side: {s: round(busy[side][s] - alone[side][s], 3) for s in (*STAGES, "ttft")}
                      for side in ("measured_ms", "simulated_ms")}
            growth["missing_ms"] = {s: round(growth["measured_ms"][s] - growth["simulated_ms"][s], 3)
                                    for s in (*STAGES, "ttft")}
            groups[f"growth-a{count}"] = growth
    out["groups"] = groups
    out["sessions"] = {}
    for k in sorted({r["session"] for r in out["runs"].values()}):
        session = [r for r in out["runs"].values() if r["session"] == k]
        ones = [r for r in session if r["load"] == "closed1"]
        loads = [r for r in session if r["load"] == "rate20"]
        if not ones or not loads:
            continue
        growth = {side: {s: round(statistics.mean(r[side][s] for r in loads) - statistics.mean(r[side][s] for r in ones),
                                  3) for s in (*STAGES, "ttft")} for side in ("measured_ms", "simulated_ms")}
        growth["missing_ms"] = {s: round(growth["measured_ms"][s] - growth["simulated_ms"][s], 3)
                                for s in (*STAGES, "ttft")}
        out["sessions"][f"s{k}"] = {"api_server_count": session[0]["api_server_count"], "growth": growth}
    for name, group in groups.items():
        print(name, json.dumps({k: v for k, v in group.items() if k != "measured_loop_ms"}))
    args.out.write_text(json.dumps(out, indent=1) + "\n")


_ORIGINALS: dict[tuple[str, str], Any] = {}


def restore() -> None:
    """Undo `observe` / `observe_threads` (so that the next run's plain simulation is the simulator's own)."""
    from roofline.sim import api_server, simulator

    for (owner, name), value in _ORIGINALS.items():
        setattr({"threads": api_server._Threads, "server": api_server.ApiServer,
                 "sim": simulator._Simulation}[owner], name, value)


def _save_originals() -> None:
    from roofline.sim import api_server, simulator

    for name in ("__init__", "_alone"):
        _ORIGINALS[("threads", name)] = getattr(api_server._Threads, name)
    _ORIGINALS[("server", "__init__")] = api_server.ApiServer.__init__
    for name in ("send", "enter", "end_step_streamed", "run"):
        _ORIGINALS[("sim", name)] = getattr(simulator._Simulation, name)


if __name__ == "__main__":
    # The simulator's Python loop and API server, the ones this script observes (`observe`, `observe_threads`: the
    # compiled loop, roofline/sim/_simcore.c `run_loop`, calls no `_Simulation.enter` or `end_step_streamed`, so
    # under it no simulated stage was found); the compiled code is property-tested to give the same times. Set
    # before anything of roofline is imported (`engine.core.native` reads it once).
    os.environ["ROOFLINE_PURE_PYTHON"] = "1"
    _save_originals()
    main()
