"""Two Python processes taking turns on one core against one process taking turns with an idle partner: the CPU the
same per-request work costs when the core's caches and TLB hold another process's working set at every turn.

A unit is one request's typical API-server Python work, done with the installed vLLM's own classes: validate a
completion request's JSON into vLLM's `CompletionRequest` (pydantic), tokenize its ~128-token prompt with the
campaign's byte-level BPE tokenizer (`vllm_serve_bench.py`'s model directory), decode the tokens back, and serialize
an OpenAI-style streamed chunk per token (`--tokens`). Modes, all processes pinned to `--core`:

  * "one": process A does a unit, then hands the turn over a pipe to an echo process (no work) and waits for it back:
    a context switch to another process every unit, with an almost empty working set on the other side;
  * "two": processes A and B each do a unit and hand the turn to the other: every switch lands on a process whose
    data the other just evicted (what two API servers on one core do in a burst);
  * "ring3": processes A, B and C each do a unit and hand the turn to the next (two API servers and the client on
    one core, against "two" for one API server and the client);
  * "threads": A and B are two threads of one process (the GIL handed over by a condition): the switch stays in one
    address space and heap.

Each worker measures its own thread CPU per unit (`time.thread_time_ns`) over `--units` units after `--warmup`;
`--rounds` rounds alternate the modes. `--units-per-turn` units run back to back before a hand-over (the number of
switches per unit is its inverse).

    "$VLLM_VENV/bin/python" benchmarks/ground_truth/vllm_serve_pingpong.py --model-dir $W/llama-tiny-bpe --out $OUT/pp.json

Results and their reading: docs/benchmark-history/2026-12-01b-serve21.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

WORDS = ("the", "of", "and", "model", "serve", "request", "token", "engine", "batch", "core", "python", "loop",
         "socket", "accept", "process", "thread", "cache", "kernel", "queue", "stream", "prompt", "output", "value")


def make_unit(model_dir: str, tokens: int, seed: int):
    from tokenizers import Tokenizer
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    rng = random.Random(seed)
    bodies = [json.dumps({"model": "tiny", "prompt": " ".join(rng.choice(WORDS) for _ in range(100)) + f" {i}",
                          "max_tokens": tokens, "temperature": 0, "stream": True,
                          "stream_options": {"include_usage": True}}) for i in range(64)]
    state = {"i": 0, "keep": []}

    def unit() -> None:
        body = bodies[state["i"] % len(bodies)]
        state["i"] += 1
        request = CompletionRequest.model_validate_json(body)
        ids = tok.encode(request.prompt).ids
        out = []
        for t in range(tokens):
            piece = tok.decode(ids[t:t + 1])
            out.append("data: " + json.dumps({"id": f"cmpl-{state['i']}", "object": "text_completion",
                                              "created": 0, "model": "tiny",
                                              "choices": [{"index": 0, "text": piece, "logprobs": None,
                                                           "finish_reason": None}]}) + "\n\n")
        state["keep"] = out  # live until the next unit, as a request's objects are
    return unit


def make_chunk_unit(model_dir: str, seed: int, num_requests: int = 50):
    """One streamed chunk of an output pass: the next of `num_requests` requests' token detokenized, its SSE chunk
    serialized and kept with that request's others (each request's objects live, as in a pass over a batch)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    rng = random.Random(seed)
    ids = [rng.randrange(3, 32000) for _ in range(4096)]
    streams: list[list[str]] = [[] for _ in range(num_requests)]
    state = {"i": 0}

    def unit() -> None:
        i = state["i"]
        state["i"] += 1
        piece = tok.decode(ids[i % len(ids):i % len(ids) + 1])
        stream = streams[i % num_requests]
        stream.append("data: " + json.dumps({"id": f"cmpl-{i % num_requests}", "object": "text_completion",
                                             "created": 0, "model": "tiny",
                                             "choices": [{"index": 0, "text": piece, "logprobs": None,
                                                          "finish_reason": None}]}) + "\n\n")
        if len(stream) > 32:
            stream.clear()
    return unit


def make_client_unit(num_requests: int = 100):
    """The client's read of one chunk: parse it, keep its text with its request's."""
    chunk = json.dumps({"id": "cmpl-0", "object": "text_completion", "created": 0, "model": "tiny",
                        "choices": [{"index": 0, "text": " token", "logprobs": None, "finish_reason": None}]})
    texts: list[list[str]] = [[] for _ in range(num_requests)]
    state = {"i": 0}

    def unit() -> None:
        state["i"] += 1
        data = json.loads(chunk)
        texts[state["i"] % num_requests].append(data["choices"][0]["text"])
        if len(texts[state["i"] % num_requests]) > 32:
            texts[state["i"] % num_requests].clear()
    return unit


def worker(role: str, model_dir: str, tokens: int, units: int, warmup: int, per_turn: int, rx: Any, tx: Any,
           result: Any, seed: int) -> None:
    """Does `per_turn` units, passes the turn (tx), waits for it back (rx); "echo" only passes it back. Roles: A, B,
    C (a request's work, `make_unit`), S1, S2 (a chunk of an output pass), K1, K2 (the client's read of a chunk); the
    first role of a ring (A, S1) ends it."""
    unit = (None if role == "echo" else make_chunk_unit(model_dir, seed) if role.startswith("S")
            else make_client_unit() if role.startswith("K") else make_unit(model_dir, tokens, seed))
    cpu = 0
    done = 0
    while True:
        msg = rx.recv_bytes()
        if msg == b"stop":
            tx.send_bytes(b"stop")
            break
        if unit is not None:
            t0 = time.thread_time_ns()
            for _ in range(per_turn):
                unit()
            t1 = time.thread_time_ns()
            done += per_turn
            if done > warmup:
                cpu += t1 - t0
            if done >= warmup + units and role in ("A", "S1"):
                tx.send_bytes(b"stop")
                rx.recv_bytes()
                break
        tx.send_bytes(b"go")
    if result is not None:
        result.put((role, cpu, max(0, done - warmup)))


RINGS = {"one": ("A", "echo"), "two": ("A", "B"), "ring3": ("A", "B", "C"),
         # an output pass chunk by chunk, the client reading each: one API server, and two taking turns through it
         "chunks-a1": ("S1", "K1"), "chunks-a2": ("S1", "K1", "S2", "K2")}


def run_processes(mode: str, args: argparse.Namespace) -> dict[str, float]:
    """The mode's processes in a ring, each passing the turn to the next over a pipe."""
    ctx = multiprocessing.get_context("spawn")
    roles = RINGS[mode]
    pipes = [ctx.Pipe(duplex=False) for _ in roles]  # pipe i: from process i - 1 to process i
    results = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(role, args.model_dir, args.tokens, args.units, args.warmup,
                                              args.units_per_turn, pipes[i][0], pipes[(i + 1) % len(roles)][1],
                                              results, i))
             for i, role in enumerate(roles)]
    for proc in procs:
        proc.start()
    time.sleep(args.settle_s)  # all imported
    pipes[0][1].send_bytes(b"go")  # A's first turn
    got = [results.get() for _ in roles]
    for proc in procs:
        proc.join()
    return {role: cpu / n / 1e6 for role, cpu, n in got if n}


def run_threads(args: argparse.Namespace) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    p = ctx.Process(target=threads_child, args=(args.model_dir, args.tokens, args.units, args.warmup,
                                                args.units_per_turn, results, args.settle_s))
    p.start()
    got = [results.get(), results.get()]
    p.join()
    return {role: cpu / n / 1e6 for role, cpu, n in got if n}


def threads_child(model_dir: str, tokens: int, units: int, warmup: int, per_turn: int, results: Any,
                  settle_s: float) -> None:
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()

    class End:
        def __init__(self, r: int, w: int) -> None:
            self.r, self.w = r, w

        def recv_bytes(self) -> bytes:
            return os.read(self.r, 4)

        def send_bytes(self, b: bytes) -> None:
            os.write(self.w, b)

    a_end, b_end = End(r1, w2), End(r2, w1)
    ta = threading.Thread(target=worker, args=("A", model_dir, tokens, units, warmup, per_turn, a_end, a_end,
                                               results, 0))
    tb = threading.Thread(target=worker, args=("B", model_dir, tokens, units, warmup, per_turn, b_end, b_end,
                                               results, 1))
    ta.start()
    tb.start()
    time.sleep(settle_s)
    os.write(w1, b"go")
    ta.join()
    tb.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--tokens", type=int, default=1)
    parser.add_argument("--units", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--units-per-turn", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="one,two,threads")
    parser.add_argument("--settle-s", type=float, default=8.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    modes = args.modes.split(",")
    if any(m not in (*RINGS, "threads") for m in modes):
        parser.exit(2, f"--modes: {args.modes}: each must be one of {', '.join([*RINGS, 'threads'])}\n")
    out: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "cpus": sorted(os.sched_getaffinity(0)),
                           "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                           "loadavg": Path("/proc/loadavg").read_text().split()[:3], "rounds": []}
    for rnd in range(args.rounds):
        order = modes if rnd % 2 == 0 else modes[::-1]
        for mode in order:
            per_unit = run_threads(args) if mode == "threads" else run_processes(mode, args)
            out["rounds"].append({"round": rnd, "mode": mode, "cpu_ms_per_unit": per_unit,
                                  "loadavg": Path("/proc/loadavg").read_text().split()[:3]})
            print(f"round {rnd} {mode}: " + ", ".join(f"{k} {v:.4f} ms" for k, v in per_unit.items()),
                  file=sys.stderr, flush=True)
    out["loadavg_after"] = Path("/proc/loadavg").read_text().split()[:3]
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
