"""Where `vllm bench serve`'s client spends its CPU per request: before the request's send, and after it per
streamed chunk; for `vllm_serve_bench.py --client-split` (its client's launcher calls `install(path, probe)` when
`VLLM_BENCH_CLIENT_SPLIT` names a file; runs in vLLM's venv, imports no `roofline`). Without --client-split the
launcher installs the marks alone (`probe` false): the client's CPU over its timed requests, unperturbed.

What the client (vLLM 0.32, `vllm/benchmarks/serve.py`, `vllm/benchmarks/lib/endpoint_request_func.py`) does per
request, on one asyncio event loop (`asyncio.run(main_async(args))`, the standard loop: no uvloop in the client):
- before the send: `benchmark`'s loop over `get_request` builds a `RequestFuncInput` and `asyncio.create_task`s
  `limited_request_func` (at rate inf all of them at once: `get_request` yields without sleeping); the task's first
  step runs `async_request_openai_completions` / `async_request_openai_chat_completions`: the payload dict, the
  headers, `st = time.perf_counter()` (the TTFT clock starts here), `session.post(json=payload)`: aiohttp's
  `ClientSession._request` builds the `ClientRequest` (the payload JSON-encoded by `JsonPayload`), takes a connection
  from the `TCPConnector` (`limit=0`: a new TCP connection while every pooled one is busy, as in a burst; a pooled
  keep-alive one otherwise: `loop.create_connection`, the transport, `connection_made`), then `ClientRequest.send`
  writes the status line and headers and starts the body's `write_bytes` task, which writes the body;
- after it, per streamed chunk: the transport's `_read_ready` -> aiohttp's `ResponseHandler.data_received` (the C
  HTTP parser, the payload's `StreamReader.feed_data`, the waiting task woken), then in the request's task
  `response.content.iter_any()`, `StreamedResponseHandler.add_chunk` (UTF-8 decode, SSE split), `json.loads` of each
  message, `time.perf_counter()`, the ITL list, the text appended;
- at the end: the usage chunk and `data: [DONE]` (two more SSE messages), the response released (the connection
  back to the pool), `pbar.update` (none with --disable-tqdm), the task's result to `asyncio.gather`.

How it is measured: every callback the loop runs (`asyncio.events.Handle._run`: task steps, transport callbacks,
timers) is timed in thread CPU time (`time.thread_time_ns`) and charged to the request whose context it runs in
(each request's task sets a context variable at its start; its transports' callbacks run in copies of that context;
a kept-alive connection's callbacks stay charged to the request that opened it, so the split is read as totals over
the timed requests' window, not per request), before or after that request's send: the end of its body's `write_bytes` (the whole
request handed to the kernel). Callbacks of no request: `benchmark`'s own task (the `get_request` loop and
`create_task`: before the sends) and the rest of the loop's callbacks. The loop's own time outside callbacks
(`select`, `_run_once`) is the thread's CPU over the run less the callbacks'. The probe (`time.thread_time_ns` twice a
callback) costs its own CPU, reported per callback (`probe_ns_per_callback`) and in the totals.

The file written at exit (JSON): per request (the first ones, awaited in `benchmark`'s own task, are the test run:
flagged) its wall start and send (perf_counter), CPU before and after its send (ns), reads and SSE messages; the
totals over the timed requests' window (from the first timed request's start to the last one's end): thread CPU,
callbacks by kind, process CPU; the process CPU at install, at `benchmark`'s start and at exit.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import json
import os
import selectors
import time
from typing import Any

REQUEST: contextvars.ContextVar[Any] = contextvars.ContextVar("bench_client_split_request", default=None)
MAIN: contextvars.ContextVar[bool] = contextvars.ContextVar("bench_client_split_main", default=False)
_now = time.thread_time_ns


class _Request:
    __slots__ = ("test", "start_s", "sent_s", "end_s", "before_ns", "after_ns", "first_ns", "reads", "messages",
                 "sent", "output_tokens", "index")

    def __init__(self, test: bool) -> None:
        self.test, self.start_s, self.sent_s, self.end_s = test, time.perf_counter(), None, None
        self.before_ns = self.after_ns = self.reads = self.messages = self.output_tokens = 0
        self.sent = False
        self.first_ns = -1  # the CPU of its task's first step (where the TTFT clock starts)
        self.index = -1  # its place in S.requests


class _State:
    def __init__(self) -> None:
        self.requests: list[_Request] = []
        self.current: _Request | None = None  # the request the running callback is charged to
        self.t0 = 0  # thread CPU (ns) from which the running callback's time is charged
        self.main_task: Any = None
        self.callbacks = self.callbacks_ns = self.main_ns = self.other_ns = self.before_ns = self.after_ns = 0
        self.window_start: dict[str, int] | None = None
        self.window_end: dict[str, int] | None = None
        self.marks: dict[str, dict[str, float]] = {}
        self.probed = True  # the loop probe installed (else the marks alone)
        # --client-chunks: each wait of the loop (its selector's select) and each streamed chunk, stamped
        self.selects: list[tuple[int, int, int, int, int, int, int]] | None = None
        self.chunks: list[tuple[int, int, int, int, int, int]] | None = None
        self.schedstat_fd = -1


S = _State()


def _counters() -> dict[str, int]:
    return {"thread_ns": _now(), "process_ns": time.process_time_ns(), "callbacks": S.callbacks,
            "callbacks_ns": S.callbacks_ns, "main_ns": S.main_ns, "other_ns": S.other_ns, "before_ns": S.before_ns,
            "after_ns": S.after_ns,
            "wall_ns": time.perf_counter_ns()}


def _mark(name: str) -> None:
    S.marks[name] = {"wall_s": time.time(), "process_cpu_s": time.process_time()}


def _charge(request: _Request | None, dt: int, main: bool) -> None:
    if request is None:
        if main:
            S.main_ns += dt
        else:
            S.other_ns += dt
    elif request.sent:
        request.after_ns += dt
        S.after_ns += dt
    else:
        request.before_ns += dt
        S.before_ns += dt


def install_loop_probe() -> None:
    """Time every callback of asyncio's loop (`Handle._run`: task steps, transport callbacks, timers) in thread CPU
    and charge it (module docstring)."""
    run = asyncio.events.Handle._run

    def timed_run(handle: Any) -> None:
        context = handle._context
        S.current = context.get(REQUEST) if context is not None else None
        start = S.t0 = _now()
        try:
            run(handle)
        finally:
            end = _now()
            request = S.current
            _charge(request, end - S.t0, context is not None and context.get(MAIN, False))
            if request is not None and request.first_ns < 0:
                request.first_ns = request.before_ns + request.after_ns
            S.callbacks += 1
            S.callbacks_ns += end - start
            S.current = None

    asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]


def mark_sent() -> None:
    """The request of the running context is sent: what its callbacks take from now on is after its send."""
    request = REQUEST.get()
    if request is not None and not request.sent:
        now = _now()
        if S.current is request:
            _charge(request, now - S.t0, False)
            S.t0 = now
        request.sent, request.sent_s = True, time.perf_counter()


def probed(func: Any) -> Any:
    """`func` (an async request function) with its request's callbacks charged to it: its context variable set for
    the task (and what the task starts: its connection's transport, the body's writer task)."""
    async def request_func(*args: Any, **kwargs: Any) -> Any:
        test = S.main_task is not None and asyncio.current_task() is S.main_task
        request = _Request(test)
        if not test and S.window_start is None:
            S.window_start = _counters()
        token = REQUEST.set(request)
        request.index = len(S.requests)
        S.requests.append(request)
        S.current = request  # this callback's time so far is the request's too (its task's first step)
        try:
            output = await func(*args, **kwargs)
        finally:
            REQUEST.reset(token)
        request.end_s = time.perf_counter()
        request.output_tokens = getattr(output, "output_tokens", 0) or 0
        if not test:
            S.window_end = _counters()
        return output
    return request_func


def install(path: str, probe: bool = True) -> None:
    """In `vllm bench serve`'s process, before its CLI runs: the completions and chat request functions wrapped (the
    timed requests' window: their thread and process CPU from the first one's start to the last one's end),
    `benchmark`'s task marked, `path` written at exit; with `probe` also the loop probe, the send mark (the end of
    aiohttp's `ClientRequest.write_bytes`) and the SSE message count. Without it (the marks alone, two clock reads
    a request) the run is not perturbed and its client CPU is the requests' own, not the start-up's or the metrics'.
    With `VLLM_BENCH_CLIENT_CHUNKS=1` (`vllm_serve_bench.py --client-chunks`) also `install_chunk_stamps`."""
    import aiohttp.client_reqrep as reqrep
    from vllm.benchmarks import serve
    from vllm.benchmarks.lib import endpoint_request_func as erf

    _mark("install")
    S.probed = probe
    for name, func in list(erf.ASYNC_REQUEST_FUNCS.items()):
        if func in (erf.async_request_openai_completions, erf.async_request_openai_chat_completions):
            erf.ASYNC_REQUEST_FUNCS[name] = probed(func)
    benchmark = serve.benchmark

    async def marked_benchmark(*args: Any, **kwargs: Any) -> Any:
        _mark("benchmark_start")
        S.main_task = asyncio.current_task()
        MAIN.set(True)  # benchmark's task and what it starts (the request tasks copy it, and are charged first)
        try:
            return await benchmark(*args, **kwargs)
        finally:
            _mark("benchmark_end")

    serve.benchmark = marked_benchmark
    atexit.register(write, path)
    if os.environ.get("VLLM_BENCH_CLIENT_CHUNKS") == "1":
        install_chunk_stamps()
    if not probe:
        return
    install_loop_probe()
    write_bytes = reqrep.ClientRequest.write_bytes

    async def timed_write_bytes(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            await write_bytes(self, *args, **kwargs)
        finally:
            mark_sent()

    reqrep.ClientRequest.write_bytes = timed_write_bytes  # type: ignore[method-assign]
    start = reqrep.ClientResponse.start

    async def timed_start(self: Any, *args: Any, **kwargs: Any) -> Any:
        mark_sent()  # a request without a body: sent once its headers are (no write_bytes task)
        return await start(self, *args, **kwargs)

    reqrep.ClientResponse.start = timed_start  # type: ignore[method-assign]
    add_chunk = erf.StreamedResponseHandler.add_chunk

    def counted_add_chunk(self: Any, chunk_bytes: bytes) -> list[str]:
        messages = add_chunk(self, chunk_bytes)
        request = REQUEST.get()
        if request is not None:
            request.reads += 1
            request.messages += len(messages)
        return messages

    erf.StreamedResponseHandler.add_chunk = counted_add_chunk  # type: ignore[method-assign]


def _run_delay_ns() -> int:
    """This thread's time runnable but not running so far (ns; /proc/thread-self/schedstat's second field)."""
    return int(os.pread(S.schedstat_fd, 64, 0).split()[1])


def install_chunk_stamps() -> None:
    """Stamp every wait of the client's event loop and every streamed chunk, in wall (perf_counter, the TTFT's clock)
    and thread CPU, with the thread's run-queue delay around each wait (schedstat): a wait's wall less its run-queue
    delay is the time nothing was readable (the server had not written), the rest the client's wait for its core.

    - `selectors.EpollSelector.select` (asyncio's standard loop on Linux polls through it once per `_run_once`): per
      call (wall at entry, wall at exit, thread CPU at entry and at exit, run-queue delay at entry and at exit (-1
      for a poll with timeout 0: callbacks were ready), events returned);
    - `StreamedResponseHandler.add_chunk` (vllm/benchmarks/lib/endpoint_request_func.py: each chunk read from the
      response, in the request's task): (request index, wall, thread CPU at entry and at exit, SSE messages, the
      index of the loop's last wait).
    Costs a few us a wait (two schedstat reads: `chunk_probe_ns`, written with them) and ~1 us a chunk."""
    from vllm.benchmarks.lib import endpoint_request_func as erf

    S.selects, S.chunks = [], []
    S.schedstat_fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)  # the main thread: the client's loop
    selects, chunks, wall, cpu, delay = S.selects, S.chunks, time.perf_counter_ns, _now, _run_delay_ns
    select = selectors.EpollSelector.select

    def stamped_select(self: Any, timeout: float | None = None) -> Any:
        if timeout is not None and timeout <= 0:  # a poll (callbacks ready): no wait, no schedstat read
            w0, c0 = wall(), cpu()
            events = select(self, timeout)
            selects.append((w0, wall(), c0, cpu(), -1, -1, len(events)))
            return events
        w0, c0, d0 = wall(), cpu(), delay()
        events = select(self, timeout)
        selects.append((w0, wall(), c0, cpu(), d0, delay(), len(events)))
        return events

    selectors.EpollSelector.select = stamped_select  # type: ignore[method-assign]
    add_chunk = erf.StreamedResponseHandler.add_chunk

    def stamped_add_chunk(self: Any, chunk_bytes: bytes) -> list[str]:
        w, c = wall(), cpu()
        messages = add_chunk(self, chunk_bytes)
        request = REQUEST.get()
        chunks.append((request.index if request is not None else -1, w, c, cpu(), len(messages), len(selects) - 1))
        return messages

    erf.StreamedResponseHandler.add_chunk = stamped_add_chunk  # type: ignore[method-assign]


def _chunk_probe_ns() -> float:
    """The chunk stamps' own cost per wait (three clock reads twice, the tuple) from a loop like the wrapper's."""
    n, t0, out = 5000, time.perf_counter_ns(), []
    for _ in range(n):
        w0, c0, d0 = time.perf_counter_ns(), _now(), _run_delay_ns()
        out.append((w0, time.perf_counter_ns(), c0, _now(), d0, _run_delay_ns(), 0))
    return (time.perf_counter_ns() - t0) / n


def _probe_ns() -> float:
    """The probe's own cost per callback: two thread_time_ns calls and the charge, timed in a loop."""
    n, t0 = 20000, time.perf_counter_ns()
    for _ in range(n):
        a = _now()
        b = _now()
        _charge(None, b - a, False)
    return (time.perf_counter_ns() - t0) / n


def summary(requests: list[dict[str, Any]], start: dict[str, int], end: dict[str, int]) -> dict[str, Any]:
    """The timed requests' CPU split (ms per request, us per SSE message) and the window's totals."""
    timed = [r for r in requests if not r["test"]]
    n = len(timed)
    messages = sum(r["messages"] for r in timed)
    tokens = sum(r["output_tokens"] for r in timed)
    window = {k: end[k] - start[k] for k in start}
    # By phase over the window (a kept-alive connection's reads are charged to the request that opened it: the
    # phase is right, the request may be an earlier one)
    before, after = window["before_ns"] / 1e6, window["after_ns"] / 1e6
    main_ms, other_ms = window["main_ns"] / 1e6, window["other_ns"] / 1e6
    thread_ms = window["thread_ns"] / 1e6
    return {"requests": n, "output_tokens": tokens, "sse_messages": messages,
            "reads": sum(r["reads"] for r in timed), "callbacks": window["callbacks"],
            "before_send_ms_per_request": before / n,
            "first_step_ms_per_request": sum(r["first_ns"] for r in timed) / 1e6 / n,
            "after_send_ms_per_request": after / n,
            "after_send_us_per_message": 1e3 * after / messages if messages else None,
            "main_task_ms_per_request": main_ms / n, "other_callbacks_ms_per_request": other_ms / n,
            "outside_callbacks_ms_per_request": (thread_ms - window["callbacks_ns"] / 1e6) / n,
            "thread_cpu_ms_per_request": thread_ms / n, "process_cpu_ms_per_request": window["process_ns"] / 1e6 / n,
            "window_wall_s": window["wall_ns"] / 1e9}


def write(path: str) -> None:
    _mark("exit")
    requests = [{"test": r.test, "start_s": r.start_s, "sent_s": r.sent_s, "end_s": r.end_s,
                 "before_ns": r.before_ns, "after_ns": r.after_ns, "first_ns": r.first_ns, "reads": r.reads,
                 "messages": r.messages,
                 "output_tokens": r.output_tokens} for r in S.requests]
    out: dict[str, Any] = {"marks": S.marks, "probed": S.probed, "requests": requests}
    if S.probed:
        out["probe_ns_per_callback"] = _probe_ns()
    if S.chunks is not None:
        out["selects"], out["chunks"], out["chunk_probe_ns"] = S.selects, S.chunks, _chunk_probe_ns()
    if S.window_start and S.window_end:
        out["window_start"], out["window_end"] = S.window_start, S.window_end
        out["summary"] = summary(requests, S.window_start, S.window_end)
    with open(path, "w") as f:
        json.dump(out, f)
