"""A discrete-event simulation of vLLM-style serving on a virtual clock, driving the engine's own scheduler.

Each replica is an `engine.core.Scheduler` (the very code the real engine runs) with the KV block count vLLM
would get on the device (`roofline.cost.kv_capacity`); each step it plans is charged the time the cost model
predicts (`roofline.cost.step_cost.StepCostModel`), or whatever `step_time_fn` returns. Requests are routed to
replicas round-robin or to the one with the fewest outstanding requests.

The client is open loop by default: each request is sent at its arrival time. `SimulationOptions(max_concurrency=N)`
makes it the closed loop of vLLM's benchmark client (`vllm bench serve --max-concurrency N`, vLLM 0.32
`vllm/benchmarks/serve.py`): requests still come due at the workload's arrival times (`--request-rate`, or all
at once), but at most N are in flight across all replicas; a request that comes due while N are in flight waits
in the client, first come first served (an asyncio.Semaphore), and is sent the instant one in flight finishes.
The server sees it then: `arrival_s` in the results is the send time, which is where vLLM's client starts TTFT
and end-to-end latency; `client_queue_s` is the wait for a slot (vLLM's `queue_times`). The simulated client takes
no time: a finished request frees its slot at the end of the step that sampled its last token, and the request is
sent at that instant. The API server tokenizes the prompt before handing the request to the engine core
(`executor.tokenize_s_per_prompt_token` x prompt tokens; each request on its own, no queue), and a request spends
`executor.frontend_s_per_request` more outside the engine core (HTTP, input processing, the IPC both ways, the
first token's way back to the client; all charged on the way in): the request reaches the engine that much after
it was sent (at once where the profile has neither).

When a sent request reaches the scheduler follows vLLM 0.32's engine core loop (`vllm/v1/engine/core.py`
`run_busy_loop`: drain the input queue, then one step). A busy engine schedules step k+1 as soon as step k's
outputs are out, before a request sent in answer to them can arrive, so that request joins step k+2. With
asynchronous scheduling (`executor.host_overlaps_device`; `step_with_batch_queue`, a batch queue of two) step k+1
was scheduled while step k ran, so a request arriving during step k joins step k+2, and one sent at its end step
k+3. An idle engine takes a request at once (`_Replica.admit`).

    deployment = make_deployment("llama-3.1-8b", "h100-sxm", EngineArgs())        # resolve once, reuse
    result = run_simulation(deployment, load_workload("sharegpt-chat"))
    result.summary(SummaryOptions(warmup_s=10, slo_ttft_s=0.5, slo_tpot_s=0.05))
    result.requests, result.steps, result.timeseries                                # pandas DataFrames

Events live in one heap keyed (time_s, priority, seq_no): at equal times step completions come first (their
requests finish and free blocks), then arrivals, then requests out of the API server reaching the engine, then
scheduler invocations, so a scheduler called at t sees every request that reached it by t (see above for when that is);
seq_no breaks the remaining ties in insertion order, which makes runs deterministic. A replica runs back to back
while it has work, and idles until the next arrival otherwise.

Sampled tokens are one fixed id that is neither BOS nor EOS (`sampled_token_id`): requests carry ignore_eos, so
output lengths are honoured.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import heapq
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.core import step_record
from engine.core.model_spec import ModelSpec
from engine.core.native import _kvcore
from engine.core.request import Request
from engine.core.step_plan import StepPlan
from roofline.cost.step_cost import StepCostModel
from roofline.errors import UserError
from roofline.sim.api_server import (
    ENDPOINTS,
    ApiServer,
    ApiServerCosts,
    assigns_by_connection,
    release_chat_output_token_extra_s,
    release_chat_request_extra_s,
)
from roofline.sim.data_parallel import DataParallelScheduler, GroupPlan, group_step_time, make_scheduler, ranks_of
from roofline.sim.deployment import Deployment
from roofline.sim.native import COMPILED, _simcore
from roofline.sim.pipeline_engine import PipelineEngine
from roofline.sim.recorder import Recorder, SimulationResult, StepSink, build_result
from roofline.sim.token_times import TimeSeries
from roofline.sim.workload import KeptPrompts, PromptStream, RequestFactory, RequestSpec, Workload, sample_requests

ROUTERS = ("round_robin", "least_outstanding")
# Steps per part handed to a step sink: a multiple of the step rows' blocks (`StepRows.CHUNK`) and of steps.parquet's
# row groups (`roofline.sim.steps_file.ROW_GROUP_STEPS`), so that the parts' rows of the file are the whole table's;
# one row group, so that `--out`'s writer process builds and encodes the parts while the simulation goes on, and has
# at most one part's work left when the simulation ends (outputs.py).
STEPS_PER_PART = 2048

# Event priorities at equal times (see the module docstring).
_STEP_END, _SEEN, _ARRIVAL, _REACH, _SCHEDULE = 0, 1, 2, 3, 4

# (replica, step index on that replica, start time, StepPlan) -> the step's duration in seconds.
StepTimeFn = Callable[[int, int, float, StepPlan], float]


@dataclass(frozen=True)
class SimulationOptions:
    num_replicas: int = 1
    router: str = "round_robin"
    record_steps: bool = True  # keep per-step rows with every sequence's lengths (for --out)
    max_concurrency: int | None = None  # closed loop: at most this many requests in flight (None: open loop)
    # vLLM's API server (`roofline.sim.api_server`; needs the profile's `host:` section): its processes per replica
    # (`vllm serve --api-server-count`) and the endpoint the client calls (`vllm bench serve --endpoint`).
    api_server_count: int = 1
    endpoint: str = "completions"
    # The API server's costs on the reference host, before the profile's host speed divides them (None: the measured
    # `ApiServerCosts()`); for fits and tests.
    api_server_costs: ApiServerCosts | None = None
    # New connections accepted one a turn of each API-server process's loop, as uvloop and vLLM's own accept do
    # (`roofline.sim.api_server`, "The accept"; `ApiServer`'s `accept_per_turn`); False: every connection read as its
    # bytes arrive, the requests' input work first come first served (the model before; a sensitivity).
    api_server_accept_per_turn: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.api_server_count, bool) or not isinstance(self.api_server_count, int) \
                or self.api_server_count < 1:
            raise UserError(f"--api-server-count: must be a positive integer, got {self.api_server_count!r}")
        if self.endpoint not in ENDPOINTS:
            raise UserError(f"--endpoint: {self.endpoint!r} is not allowed; allowed: {', '.join(ENDPOINTS)}")
        if self.num_replicas < 1:
            raise UserError(f"--num-replicas: must be a positive integer, got {self.num_replicas}")
        if self.max_concurrency is not None and (isinstance(self.max_concurrency, bool)
                                                 or not isinstance(self.max_concurrency, int)
                                                 or self.max_concurrency < 1):
            raise UserError(f"--max-concurrency: must be a positive integer, got {self.max_concurrency!r}")
        if self.router not in ROUTERS:
            raise UserError(f"--router: '{self.router}' is not allowed; allowed: {', '.join(ROUTERS)}")


@dataclass(frozen=True)
class EarlyStop:
    """Looks at a run while it goes and may end it before every request has finished: at `first_s`, `first_s +
    every_s`, `first_s + 2 every_s`, ... (simulated seconds) it calls `decided(now_s, sent_s, first_token_s,
    finish_s)` with, per request in workload order, when it was sent, when its first token and its last were
    sampled, as known at `now_s` (NaN: not yet); True ends the run there (`SimulationResult.stopped_at_s`).

    What is known at `now_s` is exactly what the whole run knows by then: the loop handles events in time order and
    an event before `now_s` depends only on the requests sent before it (their specs and prompts; the next arrival
    is queued by the one before it), so the run to `now_s` is the whole run's first part. The planner ends a probe
    once its SLO percentile is certainly missed (`roofline.planning.early_stop`). One API-server process only: with
    more, the times a client sees are mapped from the steps' only at the end."""

    first_s: float
    every_s: float
    decided: Callable[[float, np.ndarray, np.ndarray, np.ndarray], bool]

    def __post_init__(self) -> None:
        assert self.every_s > 0 and math.isfinite(self.first_s), "EarlyStop: checks at increasing finite times"


class _Replica:
    """One engine instance: its scheduler, the step in flight and its counters."""

    # (slots: the compiled loop reads and writes them at their offsets, roofline/sim/_simcore.c)
    __slots__ = ("index", "scheduler", "plan", "num_steps", "num_outstanding", "schedule_pending", "pipeline", "lag",
                 "in_transit", "stamps")

    def __init__(self, index: int, deployment: Deployment, num_clients: int = 1) -> None:
        self.index = index
        # vLLM's, or a DP group's behind `num_clients` API-server processes' load balancers
        # (roofline.sim.data_parallel)
        self.scheduler = make_scheduler(deployment, num_clients)
        self.plan: StepPlan | None = None  # the step in flight
        self.num_steps = 0
        self.num_outstanding = 0
        self.schedule_pending = False
        # Schedules a request arriving during a step lets pass before it is seen: 1 with asynchronous
        # scheduling (the next step is already planned), else 0. A pipeline's engine core drains its input before
        # every call of its batch-queue loop (`_Simulation.pipeline_step`): 0.
        overlap = deployment.hw.executor.host_overlaps_device
        self.pipeline = PipelineEngine(deployment.pipeline, overlap) if deployment.pipeline is not None else None
        self.lag = 1 if overlap and self.pipeline is None else 0
        # Sent, not yet seen by the scheduler: [request, schedules still to let pass], in arrival order.
        self.in_transit: list[list[Any]] = []
        # The time stamped on each step's tokens, step after step (its end, or when the API server's client saw its
        # tokens): a request's tokens are runs of these (`roofline.sim.token_times`).
        self.stamps = TimeSeries()

    def admit(self, everything: bool = False) -> None:
        """Before a schedule: add the in-transit requests whose wait is over (all of them for an engine with
        nothing to run, which blocks on its input queue and takes them at once); count the others down."""
        waiting = []
        for entry in self.in_transit:
            if everything or entry[1] == 0:
                self.scheduler.add_request(entry[0])
            else:
                entry[1] -= 1
                waiting.append(entry)
        self.in_transit = waiting


class _SeenTimes:
    """For one API-server process of one replica: the end times of the steps that had tokens for it (increasing) and
    when its clients saw them (the stamps of its requests' tokens)."""

    def __init__(self) -> None:
        self.engine = TimeSeries()
        self.seen = TimeSeries()

    def add(self, engine_s: float, seen_s: float) -> None:
        self.engine.add(engine_s)
        self.seen.add(seen_s)

    def map(self, engine_times_s: np.ndarray) -> np.ndarray:
        """When the client saw tokens the engine sampled at `engine_times_s` (step end times added before)."""
        return self.seen.values[np.searchsorted(self.engine.values[:self.engine.num], engine_times_s)]


def run_simulation(deployment: Deployment, workload: Workload, options: SimulationOptions = SimulationOptions(),
                   specs: Sequence[RequestSpec] | None = None, step_time_fn: StepTimeFn | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   step_sink: StepSink | None = None, early_stop: EarlyStop | None = None,
                   prompts: KeptPrompts | None = None) -> SimulationResult:
    """Simulate serving the workload's requests (or `specs`, in arrival order, if given) until all finished.
    `step_sink`: takes the steps with their sequences in parts of `STEPS_PER_PART` as they come
    (`roofline.sim.outputs.StepTraceStream.write`; the result then holds no step sequences). `early_stop`: checks
    that may end the run sooner (`EarlyStop`); the requests unfinished then have no finish time (NaN), and a first
    token time if they had one. `prompts`: the prompts of these specs made before (`KeptPrompts`, the same ids)."""
    assert early_stop is None or options.api_server_count == 1, "EarlyStop: one API-server process only"
    if deployment.pipeline is not None and step_time_fn is not None:
        raise UserError("--pipeline-parallel-size (-pp): a pipeline's batches are timed stage by stage "
                        "(roofline.sim.pipeline_engine); allowed: no step_time_fn with -pp")
    if specs is None:
        with gc_paused():  # (a million specs make no cycles; each young collection would walk them again: -0.9 s)
            specs = sample_requests(workload)
    _check_lengths(specs, deployment.scheduler_config.max_model_len)
    started = time.perf_counter()
    sim = _Simulation(deployment, workload, specs, options, step_time_fn or _default_time(deployment),
                      progress, step_sink, prompts)
    # The loop makes no reference cycles (tests/test_simulator.py checks), so reference counting frees all it
    # drops; the cyclic collector would only traverse the live requests and their token lists again and again (a
    # fifth of the run time for 10,000 requests, BENCHMARKS.md). Paused for the loop and the result tables: right
    # after the loop every object it left alive is in the youngest generation, and each young collection while the
    # tables are built traversed them and the tables' tuples again (~40 collections, ~50 ms at 10,000 requests).
    # The loop's objects are dropped while the collector is still paused (reference counting frees them once the
    # schedulers release their prefix-cache callbacks, `Scheduler.shutdown`), so the first young collection after the
    # block traverses only what the result keeps, not the loop's requests, blocks and token lists.
    with gc_paused():
        sim.run(early_stop)
        result = build_result(specs, sim.recorder, time.perf_counter() - started, sim.stopped_at_s)
        for replica in sim.replicas:
            replica.scheduler.shutdown()
        del sim
    return result


if COMPILED and hasattr(_simcore, "bind_request_type"):  # a finished Request's records read at its slots, in C
    _simcore.bind_request_type(Request, getattr(_kvcore, "FinishedTokens", None))


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for the block (as it was after it): for work that makes no reference
    cycles worth collecting early but many containers, each young collection of which traverses every live
    object again."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


class _Simulation:
    """The event loop and its three handlers (see the module docstring for the event order)."""

    def __init__(self, deployment: Deployment, workload: Workload, specs: Sequence[RequestSpec],
                 options: SimulationOptions, time_fn: StepTimeFn, progress: Callable[[int, int], None] | None,
                 step_sink: StepSink | None = None, prompts: KeptPrompts | None = None) -> None:
        spec = deployment.spec
        self.specs, self.options, self.time_fn, self.progress = specs, options, time_fn, progress
        # The cost model's `time_s` where `time_fn` is `_cost_model_time`'s, called without it (once a step).
        self.plan_time_s: Callable[[StepPlan], float] | None = getattr(time_fn, "plan_time_s", None)
        self.replicas = [_Replica(i, deployment, options.api_server_count) for i in range(options.num_replicas)]
        self.recorder = Recorder(specs, options.record_steps, step_sink)
        self.make_request = RequestFactory(spec.vocab_size, workload.seed, spec.bos_token_id, spec.eos_token_id)
        self.prefix_tokens = workload.shared_prefix.prefix_tokens if workload.shared_prefix else 0
        # Prompts made when the scheduler first reads them, in spec order: the queue of an overloaded run holds no ids.
        self.prompts = PromptStream(self.make_request, specs, self.prefix_tokens) if prompts is None else prompts
        self.token_id = sampled_token_id(spec)
        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.stopped_at_s: float | None = None  # where an EarlyStop ended the run
        self.num_routed = 0
        self.num_done = 0
        self.max_in_flight = options.max_concurrency
        self.num_in_flight = 0
        self.client_queue: collections.deque[int] = collections.deque()  # due, waiting for a slot (spec indices)
        self.tokenize_s_per_token = deployment.hw.executor.tokenize_s_per_prompt_token
        self.frontend_s = deployment.hw.executor.frontend_s_per_request
        self.in_frontend: dict[int, Request] = {}  # sent, not yet at the engine core (spec index -> request)
        # ... behind an API server: (its replica, its process, its ticket)
        self.api_ticket: dict[int, tuple[_Replica, int, int]] = {}
        self.hop_waited: set[int] = set()  # ... that reached a busy engine core and waited for its core (reach)
        # vLLM's API server per replica, where the profile describes the host CPU (`roofline.sim.api_server`).
        host = deployment.hw.host
        if host is None and (options.api_server_count != 1 or options.endpoint != "completions"):
            flag = "--api-server-count" if options.api_server_count != 1 else "--endpoint"
            raise UserError(f"{flag}: hardware profile '{deployment.hw.id}' has no host: section, so its API server "
                            f"is not modelled; add host: (cpu_model, single_thread_speed_relative) to the profile")
        self.api: list[ApiServer] | None = None
        self.host_overlaps_device = deployment.hw.executor.host_overlaps_device
        if host is not None:
            # Costs given for a fit, a test or the judge's client are reference-host costs; else the host's (its
            # measured ones, if any). A sampled cost model's factors (`host.cost_factors`, --intervals) apply to
            # either.
            if options.api_server_costs is None:
                costs = ApiServerCosts.for_host(host)
            else:
                given = options.api_server_costs.scaled(1.0 / host.single_thread_speed_relative)
                costs = replace(given, **{f"{name}_s": getattr(given, f"{name}_s") * factor
                                          for name, factor in host.cost_factors})
            # The simulated release's own chat work beyond a plain model's on 0.32, in reference-host seconds: per
            # request (vLLM 0.11.0's template parse), per streamed output token (harmony's parsing for gpt-oss).
            version, architecture = deployment.vllm_version, deployment.spec.architecture
            speed = host.single_thread_speed_relative
            costs = replace(costs,
                            chat_request_s=costs.chat_request_s + release_chat_request_extra_s(version, architecture) / speed,
                            chat_output_token_s=costs.chat_output_token_s
                            + release_chat_output_token_extra_s(version, architecture) / speed)
            # With `api_server_accept_per_turn` new connections are accepted one a turn of each process's loop,
            # which needs the client's connections tracked: by vLLM's least-loaded accept where the release has it,
            # trivially with one process.
            by_connection = assigns_by_connection(version) or options.api_server_count == 1
            self.api = [ApiServer(costs, options.api_server_count, options.endpoint, host,
                                  deployment.cache_config.enable_prefix_caching, by_connection,
                                  options.api_server_accept_per_turn)
                        for _ in self.replicas]
        # With more than one process per API server: each request's process, and per (replica, process) when its
        # client saw each step's tokens (`_SeenTimes`).
        self.process_of = np.zeros(len(specs), np.int64) if options.api_server_count > 1 else None
        self.seen_times = [[_SeenTimes() for _ in range(options.api_server_count)] for _ in self.replicas] \
            if options.api_server_count > 1 else None

    def push(self, time_s: float, priority: int, payload: int) -> None:
        heapq.heappush(self.heap, (time_s, priority, self.seq, payload))
        self.seq += 1

    def run(self, early_stop: EarlyStop | None = None) -> None:
        if self.specs:
            self.push(self.specs[0].arrival_s, _ARRIVAL, 0)
        handlers: list[Callable[[float, int], None]] = [self.end_step, self.seen, self.arrive, self.reach,
                                                         self.schedule]  # (by priority: a list's index is cheaper)
        assert [_STEP_END, _SEEN, _ARRIVAL, _REACH, _SCHEDULE] == list(range(len(handlers)))
        heap = self.heap
        if early_stop is None and self.compiled_loop() and _simcore.run_loop(self, handlers, self._rest_of_step()):
            return  # (the same loop, its common step in C)
        if early_stop is None:
            while heap:
                now, priority, _, payload = heapq.heappop(heap)
                handlers[priority](now, payload)
            return
        num_checks = 0
        check_s = early_stop.first_s
        while heap:
            if heap[0][0] >= check_s:  # every event before check_s is handled
                first_token_s = self.first_token_times()
                if early_stop.decided(check_s, self.recorder.sent, first_token_s, self.recorder.finish):
                    self.recorder.first_token[:] = first_token_s
                    self.stopped_at_s = check_s
                    return
                num_checks += 1
                check_s = early_stop.first_s + num_checks * early_stop.every_s
                continue
            now, priority, _, payload = heapq.heappop(heap)
            handlers[priority](now, payload)

    def _rest_of_step(self) -> Callable[[Recorder, StepPlan, bool], None]:
        """What the compiled loop calls after a step's row: `_record_rest`; where every step's sequences are recorded
        in C, the same as one C call (`engine.core._steprec.StepAdder`: a step that does not fill the rows' block
        is `recorder.step_seqs.add(plan)`, without `_record_rest`'s Python frame), `_record_rest` for the others."""
        if self.recorder.record_steps and step_record.COMPILED:
            return step_record._steprec.StepAdder(_record_rest, "step_seqs")  # type: ignore[no-any-return]
        return _record_rest

    def compiled_loop(self) -> bool:
        """Whether `run` (without an early stop) runs in C (roofline/sim/_simcore.c `run_loop`: the loop and the
        common step's handlers, `end_step` / `end_step_streamed` / `next_step` / `schedule`, and with one replica
        behind an API server of one process in an open loop `arrive` / `send` / `reach`; the same statements, the
        Python code the reference): compiled, every replica an engine of its own (no pipeline, no DP group), its step
        rows the compiled block's, and an API server of one process per replica or none (then an open loop)."""
        if not COMPILED or self.recorder.steps.record is None or self.seen_times is not None:
            return False
        if self.api is None and self.max_in_flight is not None:
            return False
        return all(r.pipeline is None and not isinstance(r.scheduler, DataParallelScheduler) for r in self.replicas)

    def first_token_times(self) -> np.ndarray:
        """Per request, when its first token was sampled: the recorded time of a finished request, the scheduler's
        stamp of an unfinished one that has a token, else NaN."""
        first = self.recorder.first_token.copy()
        row_of = self.recorder.row_of
        for replica in self.replicas:
            for req in replica.scheduler.requests.values():
                t = req.first_token_time_s
                if t is not None:
                    first[row_of[req.request_id]] = t
        return first

    def arrive(self, now: float, index: int) -> None:
        """Request `index` comes due at the client: sent now, or queued for a slot in the closed loop."""
        if index + 1 < len(self.specs):
            self.push(self.specs[index + 1].arrival_s, _ARRIVAL, index + 1)
        if self.max_in_flight is not None and self.num_in_flight >= self.max_in_flight:
            self.client_queue.append(index)
        else:
            self.send(now, index)

    def send(self, now: float, index: int, ending: int | None = None) -> None:
        """The client sends request `index` at `now`; after the API server (`reach`: tokenization and the rest of
        the frontend), or at once without one, the router hands it to a replica. `ending`: the replica whose step
        ended at `now` with the outputs this send answers; routed there at once, the request arrives after the
        schedule that replica makes at `now` (module docstring)."""
        self.num_in_flight += 1
        self.recorder.sent[index] = now
        request = self.make_request.lazy(self.specs[index], self.prompts.source(index), now)
        if self.api is not None:  # routed now, to the replica whose API server takes it in
            replica = self.route(index)
            process, ticket, reach_s = self.api[replica.index].take_request(now, self.specs[index].num_prompt_tokens)
            if self.process_of is not None:
                self.process_of[index] = process
            self.in_frontend[index] = request
            self.api_ticket[index] = (replica, process, ticket)
            heapq.heappush(self.heap, (reach_s, _REACH, self.seq, index))  # (`push`)
            self.seq += 1
            return
        if self.tokenize_s_per_token > 0 or self.frontend_s > 0:
            self.in_frontend[index] = request
            self.push(now + self.frontend_s + self.tokenize_s_per_token * self.specs[index].num_prompt_tokens, _REACH,
                      index)
            return
        self.hand_over(now, index, request, ending)

    def reach(self, now: float, index: int) -> None:
        """Request `index`, through the API server, reaches the engine core at `now`."""
        if self.api is not None:
            replica, process, ticket = self.api_ticket[index]
            # Output work the API server took since the request was sent may have delayed its input work (the
            # event loop runs the output handler first: roofline.sim.api_server): come back then.
            api = self.api[replica.index]
            if index in self.hop_waited:  # (its wait for the engine core's core below: over)
                self.hop_waited.discard(index)
            else:
                reach_s = api.reach_s(now, process, ticket)
                if reach_s > now:
                    self.push(reach_s, _REACH, index)
                    return
                if api.busy_hop_s > 0 and replica.plan is not None:
                    # A step under way: the engine core's input threads wait for their core (ApiServerCosts)
                    self.hop_waited.add(index)
                    self.push(now + api.busy_hop_s, _REACH, index)
                    return
            del self.api_ticket[index]
            request = self.in_frontend.pop(index)
            if isinstance(replica.scheduler, DataParallelScheduler):  # the process's client picks the DP rank
                replica.scheduler.client_of[request.request_id] = process
            self.enter(now, replica, request)
        else:
            self.hand_over(now, index, self.in_frontend.pop(index))

    def route(self, index: int) -> _Replica:
        """The router picks the replica of request `index`."""
        replicas = self.replicas
        replica = replicas[0] if len(replicas) == 1 else _route(replicas, self.options.router, self.num_routed)
        self.num_routed += 1
        self.recorder.replica[index] = replica.index
        replica.num_outstanding += 1
        return replica

    def hand_over(self, now: float, index: int, request: Request, ending: int | None = None) -> None:
        """The router hands `request` (of spec `index`) to a replica at `now`."""
        self.enter(now, self.route(index), request, ending)

    def enter(self, now: float, replica: _Replica, request: Request, ending: int | None = None) -> None:
        """`request` reaches `replica`'s engine core at `now`."""
        if replica.index == ending:
            replica.in_transit.append([request, replica.lag + 1])
            return  # end_step schedules at `now`
        if replica.plan is None or replica.lag == 0:  # idle, or seen by the schedule at the step's end
            replica.scheduler.add_request(request)
        else:
            replica.in_transit.append([request, replica.lag])
        if replica.plan is None:
            self.wake(replica, now)

    def wake(self, replica: _Replica, now: float) -> None:
        """Ask the replica's scheduler for a step at `now` (after this instant's arrivals)."""
        if not replica.schedule_pending:
            replica.schedule_pending = True
            self.push(now, _SCHEDULE, replica.index)

    def schedule(self, now: float, index: int) -> None:
        replica = self.replicas[index]
        replica.schedule_pending = False
        if replica.pipeline is not None:
            self.pipeline_step(now, replica)
            return
        if replica.in_transit:
            replica.admit()
        plan = replica.scheduler.schedule(now)
        if plan.is_empty:
            self.idle(now, replica, plan)
            return
        plan_time_s = self.plan_time_s
        duration = plan_time_s(plan) if plan_time_s is not None else self.time_fn(index, replica.num_steps, now, plan)
        if self.api is not None:  # the served engine core's own work: per step, per request it admits
            duration += self.api[index].engine_step_s + (0.0 if self.host_overlaps_device
                                                         else self.admission_s(replica, plan))
        if isinstance(plan, GroupPlan):  # a DP group: each rank's plan
            for engine_index, rank_plan in ranks_of(index, plan):
                _record_step(self.recorder, engine_index, rank_plan, now, duration)
        else:
            _record_step(self.recorder, index, plan, now, duration)
        replica.plan = plan
        heapq.heappush(self.heap, (now + duration, _STEP_END, self.seq, index))  # (`push`)
        self.seq += 1

    def idle(self, now: float, replica: _Replica, plan: StepPlan) -> None:
        """After a schedule at `now` whose plan is empty."""
        if plan.preempted_request_ids:  # a step that only preempted: vLLM schedules again at once
            self.wake(replica, now)
        elif replica.in_transit:  # nothing to run: the engine waits on its input and takes them at once
            replica.admit(everything=True)
            self.wake(replica, now)
        # otherwise idle until the next arrival

    def admission_s(self, replica: _Replica, plan: StepPlan) -> float:
        """The served engine core's work for the requests `plan` admits (`ApiServer.admission_s`); 0 without an API
        server, when it admits none, or with async scheduling (`executor.host_overlaps_device`: vLLM's engine core
        schedules the next step while the device runs this one, so its scheduler's work hides under the device time
        as the executor's own host work does, `roofline.cost.host`)."""
        if self.api is None or self.host_overlaps_device:
            return 0.0
        api = self.api[replica.index]
        if isinstance(plan, GroupPlan):  # each DP rank's engine core admits its own; the group waits for the slowest
            ranks = replica.scheduler.ranks  # type: ignore[union-attr]
            return max(api.admission_s([rank.requests[rid].num_prompt_tokens for rid in p.admitted_request_ids])
                       for rank, p in zip(ranks, plan.plans))
        if not plan.admitted_request_ids:
            return 0.0
        requests = replica.scheduler.requests
        return api.admission_s([requests[rid].num_prompt_tokens for rid in plan.admitted_request_ids])

    def pipeline_step(self, now: float, replica: _Replica) -> None:
        """A pipeline's engine core at `now` (`roofline.sim.pipeline_engine`): the calls of its batch-queue loop,
        each after draining its input, until it blocks on the oldest batch (whose output `end_step` takes) or has
        nothing to do."""
        engine, scheduler = replica.pipeline, replica.scheduler
        assert engine is not None
        host_s = self.api[replica.index].engine_step_s if self.api is not None else 0.0
        while True:
            if replica.in_transit:
                replica.admit()
            if scheduler.has_unfinished() and not engine.is_full:
                plan = scheduler.schedule(now)
                done = engine.submit(plan, now, host_s + self.admission_s(replica, plan))
                if not plan.is_empty:
                    _record_step(self.recorder, replica.index, plan, now, done - now)
                if not engine.is_full and (not plan.is_empty or scheduler.has_unfinished()):
                    continue
            elif not engine.queue:
                if replica.in_transit:  # idle: it waits on its input and takes them at once
                    replica.admit(everything=True)
                    continue
                replica.plan = None
                return
            replica.plan, done = engine.queue[0]
            self.push(max(done, now), _STEP_END, replica.index)
            return

    def end_step(self, now: float, index: int) -> None:
        replica = self.replicas[index]
        plan, replica.plan = replica.plan, None
        assert plan is not None, "a step ended on a replica with no step in flight"
        if replica.pipeline is not None:
            replica.pipeline.queue.popleft()
            if plan.is_empty:
                self.next_step(now, replica)
                return
        replica.num_steps += 1
        if self.api is not None:
            self.end_step_streamed(now, replica, plan)
            return
        replica.stamps.add(now)
        for req in replica.scheduler.update_from_output(plan, self.token_id, now):
            self.recorder.finished(req, replica.stamps)
            replica.num_outstanding -= 1
            self.num_done += 1
            self.num_in_flight -= 1
            if self.client_queue:  # the closed loop: the freed slot goes to the longest-waiting request
                self.send(now, self.client_queue.popleft(), ending=index)
        self.next_step(now, replica)

    def next_step(self, now: float, replica: _Replica) -> None:
        if self.progress is not None:
            self.progress(self.num_done, len(self.specs))
        heap = self.heap
        if not replica.schedule_pending and (not heap or heap[0][0] > now):
            self.schedule(now, replica.index)  # nothing else happens at `now`: the event `wake` queues would be next
        else:
            self.wake(replica, now)

    def end_step_streamed(self, now: float, replica: _Replica, plan: StepPlan) -> None:
        """`end_step` behind an API server: the step's tokens reach their clients when the API-server process of
        each request has streamed them (`ApiServer.stream_outputs`), and a closed-loop client sends its next
        request then (`seen`). The step's first outputs (on the chat endpoint, `ApiServer.first_output_s`): its
        emitting prefill seqs, the requests whose prompt it completes."""
        api = self.api[replica.index]  # type: ignore[index]
        if self.seen_times is None:  # one process: every token of the step is seen at the same time
            num = plan.num_emitting_seqs
            first = num - plan.num_decode_tokens if api.first_output_s else 0
            seen_s = api.stream_outputs(now, 0, num, first) if num else now
            replica.stamps.add(seen_s)
            finished = replica.scheduler.update_from_output(plan, self.token_id, seen_s)
            for req in finished:
                self.recorder.finished(req, replica.stamps)
                api.release(0, seen_s)  # its connection is idle from then on
                self.request_seen(replica, seen_s)
        else:
            row_of, process_of = self.recorder.row_of, self.process_of
            counts = [0] * api.num_processes
            for req, emit in zip(plan.requests, plan.emits):
                if emit:
                    counts[process_of[row_of[req.request_id]]] += 1  # type: ignore[index]
            seen_times = self.seen_times[replica.index]
            firsts = [0] * api.num_processes
            if api.first_output_s:
                for req, emit, query, context in zip(plan.requests, plan.emits, plan.query_lens, plan.context_lens):
                    if emit and not (query == 1 and context >= req.num_prompt_tokens):  # (not a decode seq)
                        firsts[process_of[row_of[req.request_id]]] += 1  # type: ignore[index]
            for process, num in enumerate(counts):
                if num:
                    seen_times[process].add(now, api.stream_outputs(now, process, num, firsts[process]))
            for req in replica.scheduler.update_from_output(plan, self.token_id, now):
                process = process_of[row_of[req.request_id]]  # type: ignore[index]
                seen = seen_times[process]
                times = seen.map(req.token_times_array)
                self.recorder.finished(req, seen.seen, times)
                api.release(int(process), float(times[-1]))  # its connection is idle from then on
                self.request_seen(replica, float(times[-1]))
        self.next_step(now, replica)

    def request_seen(self, replica: _Replica, seen_s: float) -> None:
        """A request of `replica` finished; its last token reached its client at `seen_s`: a closed loop frees its
        slot then."""
        replica.num_outstanding -= 1
        self.num_done += 1
        if self.max_in_flight is None:
            self.num_in_flight -= 1
        else:
            self.push(seen_s, _SEEN, 0)

    def seen(self, now: float, payload: int) -> None:
        """A closed-loop client saw a request's last token at `now`: the slot goes to the longest-waiting request."""
        self.num_in_flight -= 1
        if self.client_queue:
            self.send(now, self.client_queue.popleft())


def sampled_token_id(spec: ModelSpec) -> int:
    """The id every simulated step samples: the smallest that is neither BOS nor EOS."""
    reserved = {spec.bos_token_id, spec.eos_token_id}
    return next(i for i in range(len(reserved) + 1) if i not in reserved)


def _check_lengths(specs: Sequence[RequestSpec], max_model_len: int) -> None:
    # vLLM rejects a prompt that does not leave room for one output token within max_model_len.
    for spec in specs:
        if spec.num_prompt_tokens >= max_model_len:
            raise UserError(f"--max-model-len {max_model_len}: request {spec.request_id} has a prompt of "
                            f"{spec.num_prompt_tokens} tokens; raise --max-model-len or shorten the workload")


def _route(replicas: list[_Replica], router: str, rr_next: int) -> _Replica:
    if router == "round_robin":
        return replicas[rr_next % len(replicas)]
    return min(replicas, key=lambda r: (r.num_outstanding, r.index))


def _cost_model_time(cost_model: StepCostModel) -> StepTimeFn:
    time_s = cost_model.plan_time_fn()  # a StepPlan is a StepShape: the cost model reads what it needs of it

    def step_time(replica: int, step_index: int, start_s: float, plan: StepPlan) -> float:
        return time_s(plan)
    step_time.plan_time_s = time_s  # type: ignore[attr-defined]  # (`_Simulation.schedule` calls it directly)
    return step_time


def _default_time(deployment: Deployment) -> StepTimeFn:
    if deployment.moe is not None:
        return group_step_time(deployment)
    return _cost_model_time(deployment.cost_model)


def _record_step(recorder: Recorder, engine_index: int, plan: StepPlan, now: float, duration: float) -> None:
    rows = recorder.steps
    record = rows.record
    if record is not None:  # compiled: this row written into the block's array (roofline/sim/_simcore.c)
        full = record(engine_index, plan, now, duration)
    else:
        rows.append((
            engine_index, plan.step_index, now, now + duration, duration, plan.num_seqs, plan.num_batched_tokens,
            plan.num_prefill_tokens, plan.num_decode_tokens, plan.num_emitting_seqs,
            len(plan.preempted_request_ids),
            plan.num_new_prefix_hit_tokens, plan.num_kv_blocks_used, plan.num_kv_blocks_total,
            plan.num_kv_blocks_used / plan.num_kv_blocks_total, plan.num_running, plan.num_waiting))
        full = len(rows.rows) >= rows.CHUNK
    if full or recorder.record_steps:
        _record_rest(recorder, plan, full)


def _record_rest(recorder: Recorder, plan: StepPlan, full: bool) -> None:
    """`_record_step` after the row: the rows' block moved out where it is `full`, a part handed to the step sink,
    the plan's sequences recorded (the compiled loop calls it where the block is full or sequences are recorded)."""
    if full:
        recorder.steps.flush()
        if recorder.step_sink is not None and len(recorder.step_seqs) + 1 >= STEPS_PER_PART:
            recorder.step_seqs.add(plan)
            recorder.stream_steps()
            return
    if recorder.record_steps:
        recorder.step_seqs.add(plan)


def terminal_progress(stream: Any = None) -> Callable[[int, int], None] | None:
    """A progress callback that redraws one line (on stderr by default) at most 5 times a second; None when the
    stream is no terminal."""
    stream = stream or sys.stderr
    if not stream.isatty():
        return None
    last = [0.0]

    def show(done: int, total: int) -> None:
        now = time.perf_counter()
        if now - last[0] < 0.2 and done < total:
            return
        last[0] = now
        width = 30
        filled = width * done // max(total, 1)
        stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} requests")
        if done == total:
            stream.write("\n")
        stream.flush()
    return show
