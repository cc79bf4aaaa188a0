"""Record real vLLM's steps: the same ground truth as this project's engine, from the engine users deploy.

Two halves, one file:

- `record(job)` runs inside vLLM's own virtual environment (`python engine/vllm_recorder.py < job.json >
  records.json`; it needs only vLLM and the standard library, and imports neither `roofline` nor the rest of
  `engine`). It drives vLLM's V1 `LLMEngine` in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), admits the job's
  requests at their arrival times in wall time (open loop) or whenever fewer than `max_concurrency` are in flight
  (closed loop, as `vllm bench serve --max-concurrency`), and records every step with the exact batch it ran.
- `write_step_trace(records, out_dir)` runs in this project's environment and writes the records in the
  project's step-trace schema (`engine.core.trace`, docs/step_trace.md) so `roofline compare` and `roofline
  calibrate` read a vLLM run as they read one of this engine's.

What a step is, for both engines: from the start of the scheduler's `schedule()` to the return of its
`update_from_output()` (`duration_s`; inside it `schedule_s`, and the model's forward and sampling in between).
vLLM's frontend output processing after that (detokenization is off: token ids in, token ids out) is recorded
as `frontend_s`, outside `duration_s`. The batch of a step comes from vLLM's own `SchedulerOutput`: for every
scheduled request the tokens computed (`num_scheduled_tokens`) and the tokens already in the KV cache
(`num_computed_tokens` when scheduled). Whether vLLM scheduled asynchronously is recorded in the run metadata;
with asynchronous scheduling (vLLM's default on CUDA) the next `schedule()` overlaps the current forward pass,
so a step's `duration_s` then spans schedule to update of one batch while the GPU may already run the next:
compare such traces by throughput and per-step medians, not step by step. vLLM-CPU runs synchronously.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the records are written in this project's environment; vLLM's never imports it
    from engine.core.trace import RunMetadata

SUPPORTED_VLLM_VERSIONS = ("0.32.0",)


def record(job: dict[str, Any]) -> dict[str, Any]:
    """Serve `job["requests"]` on vLLM `job["repeats"]` times (default once) in one engine session and return
    {"runs": [{"steps", "requests", "duration_s", "started_unix_s"} per repeat], "metadata": {...}}.

    job: model_dir (an HF directory with safetensors), engine (vLLM EngineArgs keywords: max_num_seqs,
    max_num_batched_tokens, max_model_len, block_size, enable_prefix_caching, enable_chunked_prefill, dtype,
    seed), requests ([{request_id, arrival_s, prompt_token_ids, max_tokens}]), max_concurrency (or null),
    warmup (bool: serve a few requests first, then empty the prefix cache), repeats (int; each repeat starts
    with an empty prefix cache).
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import vllm
    from vllm import EngineArgs, LLMEngine, SamplingParams
    from vllm.inputs import TokensPrompt

    if vllm.__version__ not in SUPPORTED_VLLM_VERSIONS:
        raise SystemExit(f"vllm_recorder: vLLM {vllm.__version__} is not supported; tested: "
                         f"{', '.join(SUPPORTED_VLLM_VERSIONS)}")
    engine = LLMEngine.from_engine_args(EngineArgs(model=job["model_dir"], skip_tokenizer_init=True,
                                                   disable_log_stats=True, **job["engine"]))
    core = engine.engine_core.engine_core  # InprocClient -> EngineCore
    steps = _StepLog(core.scheduler)

    def submit(req: dict[str, Any], arrival: float) -> None:
        params = SamplingParams(max_tokens=req["max_tokens"], ignore_eos=True, temperature=0.0, detokenize=False)
        engine.add_request(req["request_id"], TokensPrompt(prompt_token_ids=req["prompt_token_ids"]), params,
                           arrival_time=arrival)

    if job.get("warmup"):
        steps.enabled = False
        for i, req in enumerate(job["requests"][:4]):
            submit({**req, "request_id": f"warmup-{i}", "max_tokens": 4}, time.time())
        while engine.has_unfinished_requests():
            engine.step()
        engine.reset_prefix_cache()
        steps.enabled = True

    runs = []
    for k in range(int(job.get("repeats") or 1)):
        if k:  # each repeat starts as the first did: an empty prefix cache, a fresh step log
            engine.reset_prefix_cache()
            steps.reset()
        runs.append(_serve(engine, steps, job, submit))
    config = core.vllm_config
    metadata = {
        "source": "vllm",
        "vllm_version": vllm.__version__,
        "engine_config": {
            "max_num_seqs": config.scheduler_config.max_num_seqs,
            "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
            "max_model_len": config.model_config.max_model_len,
            "enable_chunked_prefill": config.scheduler_config.enable_chunked_prefill,
            "block_size": config.cache_config.block_size,
            "enable_prefix_caching": config.cache_config.enable_prefix_caching,
            "num_kv_blocks": config.cache_config.num_gpu_blocks,
            "async_scheduling": bool(getattr(config.scheduler_config, "async_scheduling", False)),
            "max_concurrency": job.get("max_concurrency"),
        },
        "dtypes": {"weights": str(config.model_config.dtype).removeprefix("torch."),
                   "activations": str(config.model_config.dtype).removeprefix("torch."),
                   "kv_cache": config.cache_config.cache_dtype},
        "device": _describe_device(),
        "library_versions": {"vllm": vllm.__version__, "torch": _version("torch"), "python": platform.python_version()},
        "seed": job["engine"].get("seed", 0),
        "warmup": bool(job.get("warmup")),
    }
    return {"runs": runs, "metadata": metadata}


def _serve(engine: Any, steps: _StepLog, job: dict[str, Any], submit: Any) -> dict[str, Any]:
    """One timed pass over the job's requests: {"steps", "requests", "duration_s", "started_unix_s"}."""
    started_unix_s = time.time()
    pending = sorted(job["requests"], key=lambda r: r["arrival_s"])
    cap = job.get("max_concurrency") or len(pending) or 1
    in_flight: dict[str, dict[str, Any]] = {}
    done: list[dict[str, Any]] = []
    start = time.perf_counter()
    steps.start = start
    while pending or in_flight:
        now = time.perf_counter() - start
        while pending and pending[0]["arrival_s"] <= now and len(in_flight) < cap:
            req = pending.pop(0)
            submit(req, time.time())
            in_flight[req["request_id"]] = {"request_id": req["request_id"], "arrival_s": now,
                                            "num_prompt_tokens": len(req["prompt_token_ids"]), "token_times_s": [],
                                            "submitted": len(done) + len(in_flight)}
        if not in_flight:
            time.sleep(max(0.0, pending[0]["arrival_s"] - now))
            continue
        outputs = engine.step()
        steps.frontend_done(time.perf_counter())
        for out in outputs:
            row = in_flight[out.request_id]
            num_tokens = len(out.outputs[0].token_ids)
            row["token_times_s"] += [steps.last_end_s] * (num_tokens - len(row["token_times_s"]))
            row["num_prefix_hit_tokens"] = max(0, out.num_cached_tokens or 0)
            if out.finished:
                row["finish_s"] = steps.last_end_s
                done.append(in_flight.pop(out.request_id))
    duration = time.perf_counter() - start
    for row in done:
        row["first_scheduled_s"] = steps.first_scheduled_s.get(row["request_id"])
        row["num_preemptions"] = steps.num_preemptions.get(row["request_id"], 0)
    # In submission order (arrival, then the job's order among equal arrivals), which a replay's first-come-first-
    # served ties need; `done` is in finishing order.
    done.sort(key=lambda r: (r["arrival_s"], r["submitted"]))
    for row in done:
        del row["submitted"]
    return {"steps": steps.rows, "requests": done, "duration_s": duration, "started_unix_s": started_unix_s}


class _StepLog:
    """Wraps one scheduler's `schedule` and `update_from_output` to time each step and keep its batch."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.rows: list[dict[str, Any]] = []
        self.enabled = True
        self.start = time.perf_counter()
        self.last_end_s = 0.0
        self.first_scheduled_s: dict[str, float] = {}
        self.num_preemptions: dict[str, int] = {}
        self._open: dict[str, Any] | None = None
        schedule, update = scheduler.schedule, scheduler.update_from_output

        def timed_schedule(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = schedule(*args, **kwargs)
            if self.enabled and out.total_num_scheduled_tokens > 0:
                self._open = self._batch(out, t0, time.perf_counter())
            return out

        def timed_update(scheduler_output: Any, model_output: Any) -> Any:
            result = update(scheduler_output, model_output)
            end = time.perf_counter()
            if self._open is not None:
                row, self._open = self._open, None
                row["duration_s"] = end - row.pop("_t0")
                row["num_running"] = len(self.scheduler.running)
                row["num_waiting"] = len(self.scheduler.waiting)
                self.last_end_s = end - self.start
                self.rows.append(row)
            return result

        scheduler.schedule = timed_schedule
        scheduler.update_from_output = timed_update

    def reset(self) -> None:
        """Forget the recorded steps and requests (the next repeat starts a new trace)."""
        self.rows, self.last_end_s = [], 0.0
        self.first_scheduled_s, self.num_preemptions = {}, {}

    def frontend_done(self, now: float) -> None:
        """The frontend finished processing the last step's outputs."""
        if self.rows and "frontend_s" not in self.rows[-1]:
            self.rows[-1]["frontend_s"] = max(0.0, now - self.start - self.last_end_s)

    def _batch(self, out: Any, t0: float, t1: float) -> dict[str, Any]:
        sched = self.scheduler
        cached = out.scheduled_cached_reqs
        seqs = list(zip(cached.req_ids, cached.num_computed_tokens))
        seqs += [(new.req_id, new.num_computed_tokens) for new in out.scheduled_new_reqs]
        ids, query, context, emits = [], [], [], []
        num_prefill_tokens = num_decode = 0
        start_s = t0 - self.start
        for req_id, num_computed in seqs:
            request = sched.requests[req_id]
            n = out.num_scheduled_tokens[req_id]
            req_id = _external_id(request, req_id)
            ids.append(req_id)
            query.append(n)
            context.append(num_computed)
            emits.append(num_computed + n >= request.num_tokens)
            if num_computed < request.num_prompt_tokens or n > 1:
                num_prefill_tokens += n
            else:
                num_decode += 1
            self.first_scheduled_s.setdefault(req_id, start_s)
        # Admitted this step (new, or resumed after a preemption): what they found computed is prefix-cache hits.
        resumed = set(getattr(cached, "resumed_req_ids", ()) or ())
        hits = sum(new.num_computed_tokens for new in out.scheduled_new_reqs)
        hits += sum(n for req_id, n in zip(cached.req_ids, cached.num_computed_tokens) if req_id in resumed)
        preempted = sorted(out.preempted_req_ids or ())
        for req_id in preempted:
            req_id = _external_id(sched.requests.get(req_id), req_id)
            self.num_preemptions[req_id] = self.num_preemptions.get(req_id, 0) + 1
        pool = sched.kv_cache_manager.block_pool
        total = pool.num_gpu_blocks - 1  # block 0 is the null block
        return {
            "_t0": t0, "step_index": len(self.rows), "start_s": start_s, "arrival_cutoff_s": start_s,
            "num_seqs": len(ids), "num_batched_tokens": sum(query), "num_prefill_tokens": num_prefill_tokens,
            "num_decode_tokens": num_decode, "query_lens": query, "context_lens": context, "emits": emits,
            "num_kv_blocks_used": total - pool.get_num_free_blocks(), "num_kv_blocks_total": total,
            "num_preemptions": len(preempted), "num_new_prefix_hit_tokens": hits, "schedule_s": t1 - t0,
            "request_ids": ids,
        }


def _external_id(request: Any, req_id: str) -> str:
    """The id the request was added with: vLLM 0.32 schedules it as `<id>-<8 random hex digits>`."""
    external = getattr(request, "external_req_id", None)
    if external:
        return str(external)
    head, _, tail = req_id.rpartition("-")
    return head if head and len(tail) == 8 and all(c in "0123456789abcdef" for c in tail) else req_id


def _describe_device() -> dict[str, Any]:
    import torch

    if torch.cuda.is_available():  # vLLM with CUDA runs the model on GPU 0 of this process (TP 1)
        props = torch.cuda.get_device_properties(0)
        return {"type": "cuda", "name": props.name, "memory_bytes": int(props.total_memory),
                "num_gpus_visible": torch.cuda.device_count()}
    name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    return {"type": "cpu", "name": name, "num_threads": torch.get_num_threads(),
            "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
            "kv_cache_space_gib": os.environ.get("VLLM_CPU_KVCACHE_SPACE")}


def _version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def write_step_trace(run: dict[str, Any], recorded: dict[str, Any], out_dir: str | Path, **metadata: Any) -> None:
    """One run of `record` (an item of its "runs") as a step trace (steps.parquet, run.json, requests.csv) under
    `out_dir`; `recorded` is record's "metadata", `metadata` the run metadata's `model` (the spec's fields) and any
    other fields or extra keys."""
    from engine.core import metrics
    from engine.core.trace import StepTraceWriter, write_trace

    writer = StepTraceWriter()
    for row in run["steps"]:
        writer.add_row({**row, "frontend_s": row.get("frontend_s", 0.0)})
    requests = []
    for r in run["requests"]:
        times = r["token_times_s"]
        n = len(times)
        requests.append({
            "request_id": r["request_id"], "arrival_s": r["arrival_s"], "first_scheduled_s": r["first_scheduled_s"],
            "first_token_s": times[0] if times else None, "finish_s": r.get("finish_s"),
            "num_prompt_tokens": r["num_prompt_tokens"], "num_output_tokens": n,
            "ttft_s": metrics.ttft_s(r["arrival_s"], times[0]) if times else None,
            "tpot_s": metrics.tpot_s(times[0], times[-1], n) if times else None,
            "e2e_s": metrics.e2e_s(r["arrival_s"], r["finish_s"]) if r.get("finish_s") is not None else None,
            "num_preemptions": r["num_preemptions"], "num_prefix_hit_tokens": r.get("num_prefix_hit_tokens", 0),
        })
    write_trace(out_dir, writer, run_metadata({**recorded, "duration_s": run["duration_s"]}, **metadata),
                requests=requests)


def run_metadata(recorded: dict[str, Any], **metadata: Any) -> RunMetadata:
    """`record`'s metadata (vLLM's names, written in vLLM's environment) as the trace's `RunMetadata`: vLLM's
    resolved dtype and KV-cache dtype become engine_config's dtype and kv_cache_dtype."""
    from engine.core.trace import EngineConfigRecord, RunMetadata

    dtypes = recorded["dtypes"]
    config = EngineConfigRecord.from_json({"dtype": dtypes["weights"], "kv_cache_dtype": dtypes["kv_cache"],
                                           "quantization": "none", **recorded["engine_config"]},
                                          "vLLM run metadata")
    fields = {k: v for k, v in recorded.items() if k != "engine_config"}
    return RunMetadata.from_json({**fields, **metadata, "engine_config": config.to_json()}, "vLLM run metadata")


if __name__ == "__main__":
    result = record(json.loads(sys.stdin.read()))
    sys.stdout.write("RECORDS " + json.dumps(result) + "\n")
