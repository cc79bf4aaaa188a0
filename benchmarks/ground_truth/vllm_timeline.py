"""Per-request timestamps of a real `vllm serve` API server, for `vllm_serve_bench.py --timeline`.

`install(path)` runs in the API server's process before vLLM's CLI (the bench's launcher calls it when
`VLLM_SERVE_TIMELINE` names a file; with `--api-server-count` > 1 `install_api_server` calls it in each spawned API
server process, `timeline_site/sitecustomize.py`) and appends one JSON line per event, every time on CLOCK_MONOTONIC
(which `time.perf_counter`, the client's clock, is on Linux; one clock for all processes):
- ["add", request id, t, pid]: `AsyncMPClient.add_request_async`, the request handed to the engine core, and the API
  server process that handed it;
- ["req", request id, arrival, queued, scheduled, first token, first token seen, last token, finished]: at the
  request's end, vLLM's own `RequestStateStats` (`vllm/v1/metrics/stats.py`): the API server's arrival stamp (taken
  when rendering starts), the engine core's QUEUED and SCHEDULED events and first token (`EngineCoreOutputs.timestamp`:
  the step's outputs made), the output handler's iteration stamp of the first token, the last token's;
- ["sent", request id, t, pid]: `AsyncMPClient._send_input` of an ADD returned (the request encoded and handed to
  the ZMQ socket);
- ["pass", start, end, outputs, pid]: each `OutputProcessor.process_outputs` call;
- ["conn", t, pid, client port]: each HTTP connection uvicorn's protocol accepts (`connection_made`), the process
  that accepted it and the client's port (with several API-server processes: which process took which connection);
- ["asgi", x-request-id, t, client port]: the request's ASGI task starts (`Starlette.__call__`: uvicorn has parsed its
  headers), and the port of the connection it came on;
- ["handler", x-request-id, t]: the endpoint's serving method starts (`OpenAIServingCompletion.create_completion`,
  `OpenAIServingChat.create_chat_completion`: FastAPI has read and validated the body);
- ["render", start, end, thread CPU s, pid]: each `BaseRenderer._tokenize_prompt` (the tokenizer's call, on the renderer's
  worker thread: `make_async(self._tokenize_prompt, executor=self._executor)`).
In the engine-core process (`install_engine_core`, by `timeline_site/sitecustomize.py` when vLLM spawns it):
- ["ec_dec", request id, start, end]: the request's `MsgpackDecoder.decode` in the input socket thread (it starts
  right after `recv_multipart`: the message has crossed ZMQ and the thread has woken and taken the GIL);
- ["ec_in", request id, start, end]: `EngineCoreProc.preprocess_add_request` in the input socket thread (the decoded
  request made a `Request`: block hashes, validation), before it is queued for the busy loop;
- ["ec_add", request id, start, end]: `EngineCore.add_request` in the busy loop (the scheduler's QUEUED);
- ["ec_inq", start, end]: each `EngineCoreProc._process_input_queue` (the busy loop draining its input queue);
- ["ec_sched", start, end, new, running, waiting]: each `Scheduler.schedule` (new requests scheduled, then the
  running and waiting queues' lengths);
- ["ec_step", start, end]: each `EngineCore.step` / `step_with_batch_queue` (schedule, execute, update);
- ["ec_exec", start, end, new]: `MultiprocExecutor.execute_model` (non-blocking: the scheduler output pickled and
  written to the shared-memory `MessageQueue`, `shm_broadcast.MessageQueue.enqueue`), new = the requests it admits;
- ["ec_upd", start, end]: `Scheduler.update_from_output` (the step's outputs made).
In the Worker process (`install_worker`, when `vllm.v1.executor.multiproc_executor` is imported there):
- ["wk_rpc", method, start, end, minor faults, user CPU s, system CPU s, involuntary switches]:
  `WorkerProc._execute_worker_rpc` (the RPC run and its result enqueued), and what the calling thread spent in it
  (getrusage RUSAGE_THREAD: the forward pass's page faults, its CPU, the times it was preempted);
- ["wk_upd", start, end, new, finished]: `GPUModelRunner._update_states` (the persistent batch: a new request's
  `CachedRequestState`, `InputBatch.add_request`);
- ["wk_loads", start, end, bytes]: the message's `pickle.loads` in `MessageQueue.dequeue` (the scheduler output).
With `VLLM_SERVE_TIMELINE_STEPS=1` also, in the API server's loop (uvloop: `vllm/entrypoints/cli/serve.py` runs
`uvloop.run(run_server(args))`, so the loop's task factory is set when that coroutine starts):
- ["step", coroutine qualname, start, end, pid]: each step of each task (one `send` / `throw` into its coroutine: the
  CPU the task holds the loop between two awaits), buffered and written every 5,000 steps or 1 s;
- ["io", start, end, pid]: each `data_received` of uvicorn's HTTP protocol (libuv's poll phase: the request's bytes read
  and parsed, its ASGI task created).
`timeline(...)` joins them with the client's send times and TTFTs (`vllm bench serve --save-detailed`) into where each
request's TTFT went. Nothing else of vLLM changes.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

_INSTALLED: list[str] = []  # install() once per process (the launcher's call and sitecustomize's may both come)


def install_api_server(path: str, _module: Any) -> None:
    """`install(path)` in an API server process that `--api-server-count` > 1 spawns (multiprocessing names it
    "ApiServer_<i>" before it unpickles its target, `vllm.v1.utils.run_api_server_worker_proc`); nothing in the
    others that import `vllm.v1.utils` (the launcher, the engine core, the Worker)."""
    import multiprocessing

    if multiprocessing.current_process().name.startswith("ApiServer_"):
        install(path)


def install(path: str) -> None:
    if _INSTALLED:
        return
    _INSTALLED.append(path)
    import os

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
        log.write(json.dumps(["add", request.request_id, time.monotonic(), os.getpid()]) + "\n")
        return await add(self, request)

    process = output_processor.OutputProcessor.process_outputs

    def process_outputs(self: Any, outputs: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        result = process(self, outputs, *args, **kwargs)
        log.write(json.dumps(["pass", start, time.monotonic(), len(outputs), os.getpid()]) + "\n")
        return result

    send_input = core_client.AsyncMPClient._send_input

    def send_input_logged(self: Any, request_type: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        result = send_input(self, request_type, request, *args, **kwargs)
        if getattr(request_type, "name", "") == "ADD":
            log.write(json.dumps(["sent", request.request_id, time.monotonic(), os.getpid()]) + "\n")
        return result

    core_client.AsyncMPClient._send_input = send_input_logged  # type: ignore[method-assign]
    stats.IterationStats.update_from_finished_request = update_from_finished_request  # type: ignore[method-assign]
    core_client.AsyncMPClient.add_request_async = add_request_async  # type: ignore[method-assign]
    output_processor.OutputProcessor.process_outputs = process_outputs  # type: ignore[method-assign]

    import starlette.applications as applications

    call = applications.Starlette.__call__

    async def starlette_call(self: Any, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and str(scope.get("path", "")).startswith("/v1/"):
            rid = dict(scope.get("headers") or ()).get(b"x-request-id", b"").decode()
            client = scope.get("client") or (None, None)
            log.write(json.dumps(["asgi", rid, time.monotonic(), client[1]]) + "\n")
        await call(self, scope, receive, send)

    applications.Starlette.__call__ = starlette_call  # type: ignore[method-assign]

    for cls in uvicorn_protocols("connection_made"):
        made = cls.connection_made

        def connection_made(self: Any, *args: Any, _made: Any = made, **kwargs: Any) -> Any:
            transport = args[0] if args else kwargs.get("transport")
            peer = transport.get_extra_info("peername") if transport is not None else None
            log.write(json.dumps(["conn", time.monotonic(), os.getpid(), peer[1] if peer else None]) + "\n")
            return _made(self, *args, **kwargs)

        cls.connection_made = connection_made  # type: ignore[attr-defined]

    if os.environ.get("VLLM_SERVE_TIMELINE_STEPS"):
        install_steps(log, os.getpid())

    import vllm.renderers.base as renderers_base

    tokenize = renderers_base.BaseRenderer._tokenize_prompt

    def tokenize_prompt(self: Any, *args: Any, **kwargs: Any) -> Any:
        start, cpu = time.monotonic(), time.thread_time()
        try:
            return tokenize(self, *args, **kwargs)
        finally:
            log.write(json.dumps(["render", start, time.monotonic(), time.thread_time() - cpu, os.getpid()]) + "\n")

    # (make_async binds it when the renderer is made, after this: `BaseRenderer.__init__`)
    renderers_base.BaseRenderer._tokenize_prompt = tokenize_prompt  # type: ignore[method-assign]

    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
    from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion

    for cls, method in ((OpenAIServingCompletion, "create_completion"), (OpenAIServingChat, "create_chat_completion")):
        original = getattr(cls, method)

        async def handler(self: Any, request: Any, raw_request: Any = None, *args: Any, _original: Any = original,
                          **kwargs: Any) -> Any:
            rid = raw_request.headers.get("x-request-id", "") if raw_request is not None else ""
            log.write(json.dumps(["handler", rid, time.monotonic()]) + "\n")
            return await _original(self, request, raw_request, *args, **kwargs)

        setattr(cls, method, handler)


def install_steps(log: Any, pid: int) -> None:
    """The per-step stamps of the loop's tasks and the HTTP protocol's reads (module docstring)."""
    import asyncio
    import collections.abc

    import uvloop

    buffer: list[str] = []
    flushed = [time.monotonic()]

    def record(entry: list[Any]) -> None:
        end = entry[-1]
        buffer.append(json.dumps([*entry, pid]))
        if len(buffer) >= 5000 or end - flushed[0] > 1.0:
            log.write("\n".join(buffer) + "\n")
            buffer.clear()
            flushed[0] = end

    class Timed(collections.abc.Coroutine):  # type: ignore[type-arg]
        """A task's coroutine, each step timed."""

        def __init__(self, coro: Any) -> None:
            self.coro = coro
            self.kind = getattr(coro, "__qualname__", type(coro).__name__)

        def send(self, value: Any) -> Any:
            start = time.monotonic()
            try:
                return self.coro.send(value)
            finally:
                record(["step", self.kind, start, time.monotonic()])

        def throw(self, *args: Any) -> Any:
            start = time.monotonic()
            try:
                return self.coro.throw(*args)
            finally:
                record(["step", self.kind, start, time.monotonic()])

        def close(self) -> None:
            self.coro.close()

        def __await__(self) -> Any:
            return self.coro.__await__()

        def __getattr__(self, name: str) -> Any:  # cr_frame, cr_code, ... (anyio inspects its tasks' coroutines)
            return getattr(self.coro, name)

    def factory(loop: Any, coro: Any, **kwargs: Any) -> Any:
        return asyncio.Task(Timed(coro), loop=loop, **kwargs)

    run = uvloop.run

    async def with_factory(main: Any) -> Any:
        asyncio.get_running_loop().set_task_factory(factory)
        return await main

    def timed_run(main: Any, **kwargs: Any) -> Any:
        return run(with_factory(main), **kwargs)

    uvloop.run = timed_run

    for cls in uvicorn_protocols("data_received"):
        received = cls.data_received

        def data_received(self: Any, data: Any, _received: Any = received) -> Any:
            start = time.monotonic()
            try:
                return _received(self, data)
            finally:
                record(["io", start, time.monotonic()])

        cls.data_received = data_received  # type: ignore[attr-defined]


def uvicorn_protocols(method: str) -> list[type]:
    """uvicorn's HTTP protocol classes (httptools' and h11's, those installed) that define `method` themselves."""
    import importlib

    classes = []
    for module_name in ("httptools_impl", "h11_impl"):
        try:
            module = importlib.import_module(f"uvicorn.protocols.http.{module_name}")
        except ImportError:
            continue
        classes += [cls for cls in vars(module).values()
                    if isinstance(cls, type) and method in vars(cls) and cls.__module__ == module.__name__]
    return classes


def install_engine_core(path: str, core: Any) -> None:
    """The engine-core process's events (module docstring); `core`: the module `vllm.v1.engine.core`, just imported."""
    from vllm.v1.core.sched import scheduler as sched

    log = open(path, "a", buffering=1)

    from vllm.v1 import serial_utils

    decode = serial_utils.MsgpackDecoder.decode

    def decode_logged(self: Any, bufs: Any) -> Any:
        start = time.monotonic()
        result = decode(self, bufs)
        rid = getattr(result, "request_id", None)
        if isinstance(rid, str):  # an EngineCoreRequest, on the input thread
            log.write(json.dumps(["ec_dec", rid, start, time.monotonic()]) + "\n")
        return result

    serial_utils.MsgpackDecoder.decode = decode_logged  # type: ignore[method-assign]
    preprocess = core.EngineCoreProc.preprocess_add_request

    def preprocess_add_request(self: Any, request: Any) -> Any:
        start = time.monotonic()
        result = preprocess(self, request)
        log.write(json.dumps(["ec_in", request.request_id, start, time.monotonic()]) + "\n")
        return result

    add = core.EngineCore.add_request

    def add_request(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        result = add(self, request, *args, **kwargs)
        log.write(json.dumps(["ec_add", request.request_id, start, time.monotonic()]) + "\n")
        return result

    drain = core.EngineCoreProc._process_input_queue

    def process_input_queue(self: Any) -> Any:
        start = time.monotonic()
        result = drain(self)
        log.write(json.dumps(["ec_inq", start, time.monotonic()]) + "\n")
        return result

    schedule = sched.Scheduler.schedule

    def schedule_logged(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        out = schedule(self, *args, **kwargs)
        log.write(json.dumps(["ec_sched", start, time.monotonic(), len(out.scheduled_new_reqs), len(self.running),
                              len(self.waiting)]) + "\n")
        return out

    def timed(original: Any) -> Any:
        def step(self: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.monotonic()
            result = original(self, *args, **kwargs)
            log.write(json.dumps(["ec_step", start, time.monotonic()]) + "\n")
            return result
        return step

    from vllm.v1.executor import multiproc_executor as mp

    execute = mp.MultiprocExecutor.execute_model

    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        result = execute(self, scheduler_output, *args, **kwargs)
        log.write(json.dumps(["ec_exec", start, time.monotonic(), len(scheduler_output.scheduled_new_reqs)]) + "\n")
        return result

    update = sched.Scheduler.update_from_output

    def update_from_output(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        result = update(self, *args, **kwargs)
        log.write(json.dumps(["ec_upd", start, time.monotonic()]) + "\n")
        return result

    mp.MultiprocExecutor.execute_model = execute_model
    sched.Scheduler.update_from_output = update_from_output
    core.EngineCoreProc.preprocess_add_request = preprocess_add_request
    core.EngineCore.add_request = add_request
    core.EngineCoreProc._process_input_queue = process_input_queue
    core.EngineCore.step = timed(core.EngineCore.step)
    core.EngineCore.step_with_batch_queue = timed(core.EngineCore.step_with_batch_queue)
    sched.Scheduler.schedule = schedule_logged


def install_worker(path: str, mp: Any) -> None:
    """The Worker process's events (module docstring); `mp`: the module `vllm.v1.executor.multiproc_executor`, just
    imported, in whichever process imports it: the patches go in when `WorkerProc.worker_busy_loop` starts, which
    runs in the Worker only."""
    busy_loop = mp.WorkerProc.worker_busy_loop

    def worker_busy_loop(self: Any, *args: Any, **kwargs: Any) -> Any:
        install_worker_steps(path, mp)
        return busy_loop(self, *args, **kwargs)

    mp.WorkerProc.worker_busy_loop = worker_busy_loop


def install_worker_steps(path: str, mp: Any) -> None:
    import pickle
    import resource
    import types

    from vllm.distributed.device_communicators import shm_broadcast
    from vllm.v1.worker import gpu_model_runner as runner

    log = open(path, "a", buffering=1)
    rpc = mp.WorkerProc._execute_worker_rpc

    def execute_worker_rpc(self: Any, rpc_request: Any) -> Any:
        before = resource.getrusage(resource.RUSAGE_THREAD)
        start = time.monotonic()
        result = rpc(self, rpc_request)
        end = time.monotonic()
        after = resource.getrusage(resource.RUSAGE_THREAD)
        method = rpc_request[0] if isinstance(rpc_request[0], str) else "bytes"
        log.write(json.dumps(["wk_rpc", method, start, end, after.ru_minflt - before.ru_minflt,
                              round(after.ru_utime - before.ru_utime, 6), round(after.ru_stime - before.ru_stime, 6),
                              after.ru_nivcsw - before.ru_nivcsw]) + "\n")
        return result

    def loads(data: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        result = pickle.loads(data, *args, **kwargs)
        log.write(json.dumps(["wk_loads", start, time.monotonic(), len(data)]) + "\n")
        return result

    states = runner.GPUModelRunner._update_states

    def update_states(self: Any, scheduler_output: Any) -> Any:
        start = time.monotonic()
        result = states(self, scheduler_output)
        log.write(json.dumps(["wk_upd", start, time.monotonic(), len(scheduler_output.scheduled_new_reqs),
                              len(scheduler_output.finished_req_ids)]) + "\n")
        return result

    mp.WorkerProc._execute_worker_rpc = execute_worker_rpc
    # shm_broadcast calls `pickle.loads` through its module global `pickle`: a copy of the module with loads timed.
    shm_broadcast.pickle = types.SimpleNamespace(**{**vars(pickle), "loads": loads})
    runner.GPUModelRunner._update_states = update_states


PARTS = ("client_to_arrival", "arrival_to_engine", "engine_to_queued", "queued_to_scheduled", "prefill_step",
         "output_handoff", "output_to_client")


def timeline(events: list[list[Any]], start_times: list[float], ttfts: list[float]) -> dict[str, Any]:
    """Where the TTFT of the client's requests went, ms (mean and median over requests): client_to_arrival (the
    client's sending, HTTP, the API server before its arrival stamp), arrival_to_engine (the API server's input work),
    engine_to_queued (the hop to the engine core and the step under way), queued_to_scheduled, prefill_step (the
    step that computed the prompt), output_handoff (the step's outputs to the API server's output handler),
    output_to_client (the output pass, the SSE chunk, the client's reading). Requests are matched by time: each of
    the server's (by arrival) to the latest unmatched client send before it; the ids differ (the server appends a
    suffix to the client's). With several API-server processes (`add`'s pid) also `by_api_process`: per process, its
    requests and each part's mean, and each part's 90th percentile over all requests (`p90_ms`)."""
    adds = {e[1].rsplit("-", 1)[0]: e[2] for e in events if e[0] == "add"}
    pids = {e[1].rsplit("-", 1)[0]: e[3] for e in events if e[0] == "add" and len(e) > 3}
    first, last = min(start_times), max(start_times)
    served = sorted((e for e in events if e[0] == "req" and first - 0.5 <= e[2] <= last + 30), key=lambda e: e[2])
    order = sorted(range(len(start_times)), key=lambda i: start_times[i])
    used: set[int] = set()
    rows, end, row_pids = [], first, []
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
        row_pids.append(pids.get(rid))
    passes = [e for e in events if e[0] == "pass" and first <= e[1] <= end]
    out: dict[str, Any] = {"requests_matched": len(rows), "requests": len(start_times)}
    for j, name in enumerate(PARTS):
        values = [1e3 * row[j] for row in rows]
        if values:
            out[f"{name}_ms"] = {"mean": round(statistics.mean(values), 3), "median": round(statistics.median(values), 3)}
    if passes:
        out["output_pass_ms_mean"] = round(1e3 * statistics.mean(p[2] - p[1] for p in passes), 3)
        out["outputs_per_pass_mean"] = round(statistics.mean(p[3] for p in passes), 2)
    if len(rows) >= 2:
        out["p90_ms"] = {name: round(1e3 * statistics.quantiles([row[j] for row in rows], n=10, method="inclusive")[-1], 3)
                         for j, name in enumerate(PARTS)}
    if len(set(row_pids) - {None}) > 1:
        out["by_api_process"] = {
            str(pid): {"requests": sum(p == pid for p in row_pids)} | {
                f"{name}_ms": round(1e3 * statistics.mean(row[j] for row, p in zip(rows, row_pids) if p == pid), 3)
                for j, name in enumerate(PARTS)}
            for pid in sorted(set(row_pids) - {None})}
    return out
