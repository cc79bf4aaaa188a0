"""LLMEngine: the timed main loop that serves a list of requests and records every step.

One thread does everything, in order, as vLLM's engine core does: admit the requests whose arrival time has
come (wall clock since the start of the run; all at once when they all arrive at 0), `schedule()`, run the
model, sample, hand the tokens back to the scheduler. Every iteration is timed in four parts
(`schedule_s`, `execute_s`, `sample_s`, `bookkeeping_s`) with `perf_counter` around synchronised work (on
CUDA the `execute` part comes from CUDA events); no second thread competes for the cores.

    engine = LLMEngine(spec, EngineConfig(scheduler=SchedulerConfig(...)), state=None)  # random weights
    engine.warm_up()                                    # oneDNN/cuBLAS see every batch-token bucket once
    result = engine.run(requests, progress=print_progress)
    result.trace        # engine.core.trace.StepTraceWriter: one row per step (result.steps as a DataFrame)
    result.requests     # the finished engine.core Requests, with their token times
    engine.write_trace(out_dir, result, model_name="llama-156m")   # steps.parquet, run.json, requests.csv

KV capacity: `num_blocks` if given (vLLM's `--num-gpu-blocks-override`), else `kv_cache_memory_bytes` divided
by the bytes of one block; without either, vLLM's rules for `gpu_memory_utilization`: on CUDA total memory x
utilization minus the peak of a profiling forward of `max_num_batched_tokens` tokens (vllm/v1/worker/
gpu_worker.py), on CPU total RAM x utilization minus the process's resident memory (vllm/v1/worker/
cpu_worker.py). On CPU with no utilization given the KV cache is 4 GiB (the old VLLM_CPU_KVCACHE_SPACE default),
because vLLM's 0.9 of RAM would take a shared machine's memory.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from engine.attention import PagedKVCache, build_metadata
from engine.core.config import CacheConfig, SchedulerConfig
from engine.core.model_spec import ModelSpec
from engine.core.request import Request
from engine.core.scheduler import Scheduler, StepPlan
from engine.core.trace import EngineConfigRecord, RunMetadata, StepTraceWriter, write_trace
from engine.device import describe_device, library_versions, parse_device, usable_cpus
from engine.runner import ModelRunner, StepBatch
from engine.sampler import Sampler
from engine.weights import load_model, parse_dtype, random_state_dict

CPU_DEFAULT_KV_CACHE_BYTES = 4 * 2**30


@dataclass(frozen=True)
class EngineConfig:
    scheduler: SchedulerConfig
    block_size: int = 16
    enable_prefix_caching: bool = True
    num_blocks: int | None = None  # --num-gpu-blocks-override (counts the reserved null block, as vLLM)
    kv_cache_memory_bytes: int | None = None
    gpu_memory_utilization: float | None = None  # None: 0.9 on CUDA; on CPU a 4 GiB KV cache
    dtype: str = "bfloat16"
    device: str = "cpu"
    num_threads: int | None = None  # torch threads; None = every CPU this process may use
    seed: int = 0

    def __post_init__(self) -> None:
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"--gpu-memory-utilization: must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes <= 0:
            raise ValueError(f"--kv-cache-memory-bytes: must be positive, got {self.kv_cache_memory_bytes}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads: must be positive, got {self.num_threads}")
        parse_dtype(self.dtype)


@dataclass(frozen=True)
class RunResult:
    trace: StepTraceWriter  # one row per executed step (engine.core.trace schema, with the timing parts)
    requests: list[Request]  # finished, in finishing order
    duration_s: float
    admitted: list[str] = field(default_factory=list)  # request ids in the order they entered the scheduler

    @property
    def steps(self) -> pd.DataFrame:
        return self.trace.table().to_pandas()


def in_admission_order(requests: Sequence[Request], admitted: Sequence[str]) -> list[Request]:
    """requests.csv's order: the order the scheduler received the requests (arrival time, then the workload's order
    among equal arrival times), which a replay of the file (`roofline compare`) needs for first-come-first-served
    ties; finishing order would reorder requests that arrived together."""
    rank = {request_id: i for i, request_id in enumerate(admitted)}
    return sorted(requests, key=lambda r: (r.arrival_time_s, rank.get(r.request_id, len(rank))))


class LLMEngine:
    def __init__(self, spec: ModelSpec, config: EngineConfig,
                 state: dict[str, torch.Tensor] | None = None) -> None:
        """`state`: weights with transformers' names (from `engine.weights.load_hf_dir`); None = seeded random."""
        self.spec = spec
        self.config = config
        self.device = parse_device(config.device)
        self.dtype = parse_dtype(config.dtype)
        # Fixed before any kernel runs: oneDNN and OpenMP size their pools once.
        self.num_threads = config.num_threads or usable_cpus()
        torch.set_num_threads(self.num_threads)
        if state is None:
            state = random_state_dict(spec, config.seed, self.dtype)
        self.model = load_model(spec, state, self.dtype, self.device, config.scheduler.max_model_len)
        self.num_blocks = self._num_blocks()
        self.kv_cache = PagedKVCache(spec.num_layers, self.num_blocks, config.block_size, spec.num_kv_heads,
                                     spec.head_dim, self.dtype, self.device)
        self.reset()
        self.runner = ModelRunner(self.model, self.kv_cache, Sampler(config.seed), self.device)

    def reset(self) -> None:
        """A new scheduler with an empty KV cache and prefix cache (a repeat starts as the first run did); the
        model and its warmed-up kernels stay."""
        self.scheduler = Scheduler(self.config.scheduler, CacheConfig(self.num_blocks, self.config.block_size,
                                                                      self.config.enable_prefix_caching))

    # ---- setup ----
    def _block_bytes(self) -> int:
        return PagedKVCache.bytes_per_block(self.spec.num_layers, self.config.block_size, self.spec.num_kv_heads,
                                            self.spec.head_dim, self.dtype.itemsize)

    def _num_blocks(self) -> int:
        cfg = self.config
        if cfg.num_blocks is not None:
            return cfg.num_blocks
        kv_bytes = cfg.kv_cache_memory_bytes
        if kv_bytes is None and self.device.type == "cuda":
            kv_bytes = self._cuda_kv_bytes(cfg.gpu_memory_utilization or 0.9)
        elif kv_bytes is None and cfg.gpu_memory_utilization is not None:
            kv_bytes = self._cpu_kv_bytes(cfg.gpu_memory_utilization)
        elif kv_bytes is None:
            kv_bytes = CPU_DEFAULT_KV_CACHE_BYTES
        num_blocks = int(kv_bytes // self._block_bytes())
        if num_blocks < 2:
            raise ValueError(f"KV cache of {kv_bytes} bytes holds {num_blocks} blocks of {self._block_bytes()} "
                             f"bytes; at least 2 are needed (block 0 is reserved)")
        return num_blocks

    @staticmethod
    def _cpu_kv_bytes(utilization: float) -> int:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        resident = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        return int(total * utilization) - resident

    def _cuda_kv_bytes(self, utilization: float) -> int:
        # vLLM's Worker.determine_available_memory: run the largest batch once and take its peak.
        torch.cuda.reset_peak_memory_stats(self.device)
        num_tokens = self.config.scheduler.max_num_batched_tokens
        scratch = PagedKVCache(self.spec.num_layers, 2, self.config.block_size, self.spec.num_kv_heads,
                               self.spec.head_dim, self.dtype, self.device)
        self._dummy_forward(scratch, num_decodes=0, prefill_tokens=num_tokens)
        torch.cuda.synchronize(self.device)
        peak = torch.cuda.max_memory_allocated(self.device)
        total = torch.cuda.get_device_properties(self.device).total_memory
        return int(total * utilization) - peak

    def _dummy_forward(self, cache: PagedKVCache, num_decodes: int, prefill_tokens: int) -> None:
        """A forward of `num_decodes` decodes and one prefill chunk, all writing into the null block 0."""
        bs = cache.block_size
        decodes: list[tuple[Sequence[int], int]] = [([0], 0)] * num_decodes
        prefills: list[tuple[Sequence[int], int, int]] = (
            [([0] * (-(-prefill_tokens // bs)), 0, prefill_tokens)] if prefill_tokens else [])
        meta = build_metadata(decodes, prefills, cache, self.device)
        num_tokens = num_decodes + prefill_tokens
        ids = torch.zeros(num_tokens, dtype=torch.long, device=self.device)
        with torch.inference_mode():
            hidden = self.model(ids, ids, meta, cache)
            self.model.compute_logits(hidden[-min(num_tokens, self.config.scheduler.max_num_seqs):])

    def warm_up(self, max_num_decodes: int | None = None) -> list[int]:
        """Run every decode batch size up to max_num_seqs, and prefills of powers of two up to
        max_num_batched_tokens, once: oneDNN builds a kernel per GEMM shape on first sight, and that cost must
        stay out of the timed steps. `max_num_decodes` caps the decode sizes (no run has more running requests
        than requests). Writes only into the reserved block 0. Returns the prefill sizes run."""
        sched = self.config.scheduler
        for num_decodes in range(1, min(max_num_decodes or sched.max_num_seqs, sched.max_num_seqs) + 1):
            self._dummy_forward(self.kv_cache, num_decodes=num_decodes, prefill_tokens=0)
        prefill_sizes = [2**k for k in range(1, sched.max_num_batched_tokens.bit_length())
                         if 2**k < sched.max_num_batched_tokens] + [sched.max_num_batched_tokens]
        for num_tokens in prefill_sizes:
            self._dummy_forward(self.kv_cache, num_decodes=0, prefill_tokens=num_tokens)
        self.runner.synchronize()
        return prefill_sizes

    def metadata(self) -> RunMetadata:
        """The run metadata of a trace (`engine.core.trace.RunMetadata`)."""
        dtype = str(self.dtype).removeprefix("torch.")
        sched = self.config.scheduler
        typed = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "enable_chunked_prefill")
        return RunMetadata(
            source="engine",
            model=dataclasses.asdict(self.spec),
            dtypes={"weights": dtype, "activations": dtype, "kv_cache": dtype},
            engine_config=EngineConfigRecord(
                max_num_seqs=sched.max_num_seqs, max_num_batched_tokens=sched.max_num_batched_tokens,
                max_model_len=sched.max_model_len, enable_chunked_prefill=sched.enable_chunked_prefill,
                block_size=self.config.block_size, enable_prefix_caching=self.config.enable_prefix_caching,
                num_kv_blocks=self.num_blocks, dtype=dtype,
                extra={**{k: v for k, v in dataclasses.asdict(sched).items() if k not in typed},
                       "kv_block_bytes": self._block_bytes()}),
            device=describe_device(self.device),
            library_versions=library_versions(),
            seed=self.config.seed,
            extra={"num_threads": self.num_threads},
        )

    def write_trace(self, out_dir: str | Path, result: RunResult, **metadata: Any) -> None:
        """steps.parquet, run.json (this engine's metadata plus `metadata`: fields or extra keys) and requests.csv
        into out_dir."""
        write_trace(out_dir, result.trace, self.metadata().with_extra(duration_s=result.duration_s, **metadata),
                    requests=in_admission_order(result.requests, result.admitted))

    # ---- the loop ----
    def run(self, requests: Sequence[Request],
            progress: Callable[[int, int], None] | None = None) -> RunResult:
        """Serve `requests` (arrival_time_s relative to the start of the run) until all finish.
        `progress(num_finished, num_total)` is called after every step that finishes one."""
        pending = deque(sorted(requests, key=lambda r: r.arrival_time_s))
        # As vLLM's engine core does after start-up: move everything alive now (model, KV cache, requests) out of
        # the collector's reach, so that its oldest-generation passes during the run stay short.
        gc.collect()
        gc.freeze()
        trace = StepTraceWriter()
        done: list[Request] = []
        admitted: list[str] = []
        start = time.perf_counter()
        while pending or self.scheduler.has_unfinished():
            now = time.perf_counter() - start
            while pending and pending[0].arrival_time_s <= now:
                admitted.append(pending[0].request_id)
                self.scheduler.add_request(pending.popleft())
            if not self.scheduler.has_unfinished():
                time.sleep(max(0.0, pending[0].arrival_time_s - now))  # idle until the next arrival
                continue
            finished = self._step(start, now, trace)
            if finished is None and not pending:
                raise RuntimeError("scheduler made no progress with no request left to arrive")
            if finished is None:  # nothing fits until something arrives: wait for it
                time.sleep(max(0.0, pending[0].arrival_time_s - (time.perf_counter() - start)))
                continue
            done.extend(finished)
            if finished and progress is not None:
                progress(len(done), len(requests))
        return RunResult(trace, done, time.perf_counter() - start, admitted)

    def _step(self, start: float, cutoff_s: float, trace: StepTraceWriter) -> list[Request] | None:
        """One iteration; None if nothing could be scheduled."""
        t0 = time.perf_counter()
        plan = self.scheduler.schedule(t0 - start)
        num_preemptions = len(plan.preempted_request_ids)
        while plan.is_empty and plan.preempted_request_ids:  # a step that only preempted: go again (vLLM)
            plan = self.scheduler.schedule(time.perf_counter() - start)
            num_preemptions += len(plan.preempted_request_ids)
        if plan.is_empty:
            return None
        t1 = time.perf_counter()
        execute_s, batch, logits = self._execute(plan)
        t2 = time.perf_counter()
        sampled = self.runner.sample(batch, logits)
        t3 = time.perf_counter()
        finished = self.scheduler.update_from_output(plan, sampled, t3 - start)
        t4 = time.perf_counter()
        trace.add_plan(plan, start_s=t0 - start, duration_s=t4 - t0, arrival_cutoff_s=cutoff_s,
                       num_preemptions=num_preemptions, schedule_s=t1 - t0, execute_s=execute_s, sample_s=t3 - t2,
                       bookkeeping_s=t4 - t3, request_ids=plan.request_ids)
        return finished

    def _execute(self, plan: StepPlan) -> tuple[float, StepBatch, torch.Tensor]:
        if self.device.type != "cuda":
            t = time.perf_counter()
            batch = self.runner.prepare(plan)
            logits = self.runner.forward(batch)
            return time.perf_counter() - t, batch, logits
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        batch = self.runner.prepare(plan)
        logits = self.runner.forward(batch)
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1000, batch, logits
