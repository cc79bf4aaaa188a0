"""Experiments, not the simulator's model (its renderer-thread model, roofline/sim/api_server.py since 994c211, grew out
of an experiment here, removed once it was the model): vLLM's API server taking a request's input work in phases, round robin
between the requests being taken in, instead of first come first served (roofline/sim/api_server.py). For
`vllm_serve_sim.py --input-phases F1,F2,... --reach-phase K`: the fractions of a request's input work (`request_s` +
`prompt_token_s` x prompt tokens, the client's sending added by the bench) in each phase, and after how many phases it
reaches the engine core (the rest is work of the event loop after the hand-off, e.g. the streamed response's start).

Why phases: in vLLM 0.32 a request's input path is a chain of awaits on the API server's asyncio loop (the HTTP body,
`OpenAIServingCompletion.render_completion_request` -> `_check_model`, `OnlineRenderer.render_completion` ->
`BaseRenderer.render_cmpl_async`: `render_prompts_async`, `tokenize_prompts_async` on the renderer's thread pool
(`make_async`), `process_for_engine_async`, each an `asyncio.gather`; then the StreamingResponse's generator,
`AsyncLLM.generate` -> `add_request` -> `InputProcessor.process_inputs_async` -> `_add_request` ->
`AsyncMPClient.add_request_async`); at each, the request's task goes to the back of the loop's ready queue (uvloop's
`Loop._on_idle`, the loop `vllm serve` runs, takes the ready callbacks in rounds), so close arrivals interleave. The
phase sizes are not in the source; measured (`vllm_serve_bench.py --timeline`, closed1 runs, one request at a time):
send to vLLM's arrival stamp 3.75-4.00 ms, arrival stamp to the hand-off 3.44-4.29 ms (medians), together 0.65-0.69 of
the input work the CPU fit charges (11.2 ms completions, 12.1 ms chat, client included), the rest after the hand-off.
(docs/benchmark-history/2026-11-29f-serve.md.)

Output work keeps its priority over the input work (preemptive, as in roofline.sim.api_server), or with
`output_in_round` (`vllm_serve_sim.py --output-in-round`) takes its turn as one more member of the round: the output
handler (`vllm/v1/engine/async_llm.py` `AsyncLLM._run_output_handler`) is one task of the same loop, so a step's output
pass queues behind one slice of every request being taken in (measured in 1,000-prompt bursts: its first outputs
wait 233-459 ms (p90-max) during the intake; docs/benchmark-history/2026-11-30c-serve3.md). The costs are the
simulator's (`ApiServerCosts`); only the queueing differs.
"""

from __future__ import annotations

import collections
import heapq
import math
from typing import Any

from roofline.sim.api_server import ApiServer, ApiServerCosts, reach_after


class PhasedApiServer(ApiServer):
    """`ApiServer` with the input work in phases taken round robin (module docstring); same interface."""

    def __init__(self, costs: ApiServerCosts, num_processes: int = 1, endpoint: str = "completions",
                 host: Any = None, *, phases: tuple[float, ...], reach_phase: int,
                 output_in_round: bool = False) -> None:
        super().__init__(costs, num_processes, endpoint)
        self.request_s += costs.client_request_s  # the client's sending as the model before 2026-11-30d had it
        if not phases or any(f < 0 for f in phases) or abs(sum(phases) - 1.0) > 1e-9:
            raise SystemExit(f"--input-phases: fractions >= 0 summing to 1, got {phases}")
        if not 1 <= reach_phase <= len(phases):
            raise SystemExit(f"--reach-phase: 1 to {len(phases)}, got {reach_phase}")
        self.loops = [_Loop(phases, reach_phase, output_in_round) for _ in range(num_processes)]

    def take_request(self, now_s: float, num_prompt_tokens: int) -> tuple[int, int, float]:
        process = self.num_taken % self.num_processes
        ticket = self.num_taken
        self.num_taken += 1
        loop = self.loops[process]
        loop.advance(now_s)
        loop.add(ticket, self.request_s + self.prompt_token_s * num_prompt_tokens)
        return process, ticket, loop.projected_end(ticket) + self.latency_s

    def reach_s(self, now_s: float, process: int, ticket: int) -> float:
        return reach_after(self.loops[process], now_s, ticket, self.latency_s)

    def stream_outputs(self, now_s: float, process: int, num_tokens: int) -> float:
        loop = self.loops[process]
        loop.advance(now_s)
        end = loop.add_output(now_s, self.output_pass_s + self.output_token_s * num_tokens)
        return end + self.output_latency_s


class _Loop:
    """One API-server process's event loop, advanced lazily to the simulator's clock: `busy` holds the output passes
    not yet over (start, end; back to back or apart, in order), `queue` the requests being taken in as [ticket, phase,
    work left in the phase, the request's input work]: the head runs whenever no output pass does, and a request
    whose phase ends goes to the back for its next one (`phases`)."""

    def __init__(self, phases: tuple[float, ...], reach_phase: int, output_in_round: bool = False) -> None:
        self.phases, self.reach_phase, self.output_in_round = phases, reach_phase, output_in_round
        self.num_outputs = 0  # output passes taken in the round: tickets -1, -2, ...
        self.now_s = 0.0
        self.busy: collections.deque[tuple[float, float]] = collections.deque()
        self.queue: collections.deque[list[Any]] = collections.deque()
        self.finished_s: dict[int, float] = {}  # ticket -> when its input work ended

    def add(self, ticket: int, work_s: float) -> None:
        self.queue.append([ticket, 0, work_s * self.phases[0], work_s])

    def add_output(self, now_s: float, work_s: float) -> float:
        """An output pass taken at `now_s` (after `advance(now_s)`): when it ends."""
        if self.output_in_round:  # at the back of the round: after one slice of each request ahead (exact: FIFO)
            self.num_outputs += 1
            ticket = -self.num_outputs
            self.queue.append([ticket, 0, work_s, work_s])
            return self.projected_end(ticket)
        start = max(now_s, self.busy[-1][1]) if self.busy else now_s
        self.busy.append((start, start + work_s))
        return start + work_s

    def advance(self, to_s: float) -> None:
        """The loop's work up to `to_s` (the simulator's clock never goes back)."""
        if to_s > self.now_s:
            self.now_s = _run(self.now_s, to_s, self.queue, self.busy, self.finished_s, None, self.phases, self.reach_phase)

    def projected_end(self, ticket: int) -> float:
        """When `ticket`'s input work ends if no more requests or output passes come (a lower bound)."""
        queue = collections.deque([list(entry) for entry in self.queue])
        finished: dict[int, float] = {}
        _run(self.now_s, math.inf, queue, collections.deque(self.busy), finished, ticket, self.phases,
             self.reach_phase)
        return finished[ticket]


def _run(now_s: float, to_s: float, queue: collections.deque[list[Any]], busy: collections.deque[tuple[float, float]],
         finished_s: dict[int, float], stop: int | None, phases: tuple[float, ...], reach_phase: int) -> float:
    """Runs the loop (`_Loop`) from `now_s` to `to_s`, or until request `stop`'s input work ends; returns the time
    reached. Input work runs outside the output passes, preempted by them (slices taken as infinitely small)."""
    t = now_s
    while t < to_s:
        while busy and busy[0][1] <= t:
            busy.popleft()
        if busy and busy[0][0] <= t:  # an output pass runs
            t = min(busy[0][1], to_s)
            continue
        free_end = min(to_s, busy[0][0]) if busy else to_s
        if not queue:
            t = free_end
            continue
        head = queue[0]
        if t + head[2] > free_end:
            head[2] -= free_end - t
            t = free_end
            continue
        t += head[2]
        queue.popleft()
        if head[0] < 0:  # an output pass in the round: one slice, done
            if head[0] == stop:
                finished_s[stop] = t
                return t
            continue
        head[1] += 1
        if head[1] == reach_phase:
            finished_s[head[0]] = t
            if head[0] == stop:
                return t
        if head[1] < len(phases):
            head[2] = head[3] * phases[head[1]]
            queue.append(head)
    return t


# The output handler processes at most this many outputs between yields to the loop (`VLLM_V1_OUTPUT_PROC_CHUNK_SIZE`,
# vllm/envs.py default 128; `AsyncLLM._run_output_handler.output_handler`: `await asyncio.sleep(0)` between chunks).
OUTPUT_CHUNK = 128


class EventLoopApiServer(ApiServer):
    """An experiment (`vllm_serve_sim.py --event-loop F1,F2,...`): each API-server process as the event loop it is,
    a FIFO ready queue run in rounds. `vllm serve` runs on uvloop (`vllm/entrypoints/cli/serve.py`:
    `uvloop.run(run_server(args))`): once per libuv iteration `Loop._on_idle` (uvloop/loop.pyx) runs exactly the
    `ntodo = len(self._ready)` handles queued at its start; a handle queued meanwhile (`call_soon`: a task whose await
    is already done, `asyncio.sleep(0)`) runs in the next round, behind them; the I/O callbacks (the accept,
    `handles/streamserver.pyx` `__uv_streamserver_on_listen`; the reads) run in libuv's poll phase between rounds.
    (CPython's own loop, `BaseEventLoop._run_once`, has the same rounds.) Each callback runs to its end.

    A request's input work (`request_s` + `prompt_token_s` x prompt tokens, the client's sending added by the bench)
    is a chain of phases in the fractions `phases`: the first enters the queue at the connection's arrival at the
    server (the accept: `selector_events._accept_connection`, then uvicorn's protocol parsing the headers), each
    phase's end puts the next at the back of the queue, and the request reaches the engine core when its last phase
    ends (`AsyncMPClient.add_request_async`); with `io_at_poll` the first phase runs at the poll instead (uvloop's
    poll phase), before the round. The connections arrive one per `accept_gap_s` after their sends at the
    earliest (the client's connection work: one client process for all API-server processes).

    The output handler (`vllm/v1/engine/async_llm.py` `AsyncLLM._run_output_handler`: one task of the same loop,
    `asyncio.create_task(output_handler())`) takes each step's outputs as an I/O callback of the loop: its pass
    (`output_pass_s` + `output_token_s` x outputs) enters the back of the queue at the step's end, in chunks of
    `OUTPUT_CHUNK` outputs (`OutputProcessor.process_outputs` per chunk, `await asyncio.sleep(0)` between them);
    the client has the step's tokens `output_latency_s` after the last chunk ends. Same interface as `ApiServer`."""

    def __init__(self, costs: ApiServerCosts, num_processes: int = 1, endpoint: str = "completions",
                 host: Any = None, *, phases: tuple[float, ...], accept_gap_s: float = 0.0,
                 client_request_s: float = 0.0, io_at_poll: bool = False) -> None:
        super().__init__(costs, num_processes, endpoint)
        self.request_s += costs.client_request_s  # the client's sending as the model before 2026-11-30d had it
        if not phases or any(f < 0 for f in phases) or abs(sum(phases) - 1.0) > 1e-9:
            raise SystemExit(f"--event-loop: fractions >= 0 summing to 1, got {phases}")
        if accept_gap_s < 0:
            raise SystemExit(f"--accept-gap-ms: >= 0, got {accept_gap_s * 1e3}")
        # The client's own work per request (`client_request_s`, included in `request_s` by vllm_serve_sim.py's
        # with_client): with `--client-outside-loop` it is taken out of the server's queue and spaces the
        # connections instead (the client is its own process and event loop: its sending precedes the connection).
        self.phases, self.accept_gap_s = phases, accept_gap_s + client_request_s
        self.request_s -= client_request_s
        self.loops = [_EventLoop(io_at_poll) for _ in range(num_processes)]
        self.last_connect_s = -math.inf
        self.num_outputs = 0

    def take_request(self, now_s: float, num_prompt_tokens: int) -> tuple[int, int, float]:
        process = self.num_taken % self.num_processes
        ticket = self.num_taken
        self.num_taken += 1
        loop = self.loops[process]
        loop.advance(now_s)
        self.last_connect_s = max(now_s, self.last_connect_s) + self.accept_gap_s
        work = self.request_s + self.prompt_token_s * num_prompt_tokens
        loop.arrive(self.last_connect_s, [(ticket, k, work * f) for k, f in enumerate(self.phases)])
        return process, ticket, loop.projected_end(ticket) + self.latency_s

    def reach_s(self, now_s: float, process: int, ticket: int) -> float:
        return reach_after(self.loops[process], now_s, ticket, self.latency_s)

    def stream_outputs(self, now_s: float, process: int, num_tokens: int) -> float:
        loop = self.loops[process]
        loop.advance(now_s)
        self.num_outputs += 1
        ticket = -self.num_outputs  # output passes: negative tickets
        chunks = [(ticket, k, (self.output_pass_s if k == 0 else 0.0) + self.output_token_s * min(OUTPUT_CHUNK, rest))
                  for k, rest in enumerate(range(num_tokens, 0, -OUTPUT_CHUNK))]
        loop.arrive(now_s, chunks)
        return loop.projected_end(ticket) + self.output_latency_s


class _EventLoop:
    """One process's loop (`EventLoopApiServer`), advanced lazily to the simulator's clock. `ready`: the callbacks
    queued, each (ticket, phase, seconds); `left`: how many of them belong to the round under way; `io`: the
    arrivals not yet polled (time, order, the chain of callbacks, the first one queued at the poll, each next one
    when its predecessor ends); `finished_s`: ticket -> when its chain ended. A chain's later links wait in `rest`."""

    def __init__(self, io_at_poll: bool = False) -> None:
        self.io_at_poll = io_at_poll
        self.now_s = 0.0
        self.ready: collections.deque[tuple[int, int, float]] = collections.deque()
        self.left = 0
        self.io: list[tuple[float, int, int]] = []  # heap of (arrival, order, ticket)
        self.rest: dict[int, list[tuple[int, int, float]]] = {}  # ticket -> its chain
        self.num_arrivals = 0
        self.finished_s: dict[int, float] = {}

    def arrive(self, at_s: float, chain: list[tuple[int, int, float]]) -> None:
        ticket = chain[0][0]
        self.rest[ticket] = chain
        heapq.heappush(self.io, (at_s, self.num_arrivals, ticket))
        self.num_arrivals += 1

    def advance(self, to_s: float) -> None:
        """Runs the loop until its next poll would come at or after `to_s` (what arrives later is not known yet)."""
        self.now_s, self.left = _run_loop(self.now_s, self.left, self.ready, self.io, self.rest, self.finished_s,
                                          to_s, None, self.io_at_poll)

    def projected_end(self, ticket: int) -> float:
        """When `ticket`'s chain ends if nothing more arrives (a lower bound: later arrivals only queue behind)."""
        finished: dict[int, float] = {}
        _run_loop(self.now_s, self.left, collections.deque(self.ready), list(self.io), dict(self.rest), finished,
                  math.inf, ticket, self.io_at_poll)
        return finished[ticket]


def _run_loop(now_s: float, left: int, ready: collections.deque[tuple[int, int, float]],
              io: list[tuple[float, int, int]], rest: dict[int, list[tuple[int, int, float]]],
              finished_s: dict[int, float], to_s: float, stop: int | None,
              io_at_poll: bool = False) -> tuple[float, int]:
    """`_EventLoop`'s rounds from `now_s` (`left` callbacks of the round under way) until the next poll would come at
    or after `to_s`, or chain `stop` ends; returns (the time reached, the callbacks left in the round). With
    `io_at_poll` a request's first phase runs at the poll itself, before the round (uvloop: libuv runs the I/O
    callbacks, the accept and the read, in its poll phase), its next phase joining the round."""
    t = now_s
    while True:
        if left == 0:  # the poll: the arrivals so far join the back of the queue, in order; a new round
            if not ready:
                if not io or io[0][0] >= to_s:  # idle until an arrival not polled yet
                    return t, 0
                t = max(t, io[0][0])
            if t >= to_s:  # the poll comes at or after `to_s`: arrivals before it may still be added
                return t, 0
            while io and io[0][0] <= t:
                ticket = heapq.heappop(io)[2]
                chain = rest[ticket]
                if io_at_poll and ticket >= 0 and len(chain) > 1:
                    t += chain[0][2]
                    ready.append(chain[1])
                else:
                    ready.append(chain[0])
            left = len(ready)
            continue
        ticket, phase, work = ready.popleft()
        left -= 1
        t += work
        chain = rest[ticket]
        if phase + 1 < len(chain):
            ready.append(chain[phase + 1])
        else:
            del rest[ticket]
            if ticket >= 0 or ticket == stop:  # requests; an output pass only where asked for
                finished_s[ticket] = t
            if ticket == stop:
                return t, left
