"""The deployable answer of a plan: the `vllm serve` command line of a configuration, and the whole plan as JSON.

The command line uses vLLM 0.32's flag names (`roofline.engine_args.VLLM_VERSION`; tests check every flag against
the flags vLLM 0.32.0's `EngineArgs` defines). It states the configuration, every engine flag the user gave (the
two vLLM reads from its environment as a prefix: `VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1` for `--moe-backend
flashinfer-mxfp4-mxfp8`, `VLLM_FLOAT32_MATMUL_PRECISION`) and the block size, prefix caching and chunked prefill
explicitly; the settings left to vLLM's device defaults
(`max_num_batched_tokens`, `gpu_memory_utilization` 0.9) are the defaults the plan simulated.
"""

from __future__ import annotations

import shlex
from typing import Any

from roofline.cost.hardware import load_profile
from roofline.cost.kernels.all_to_all import DEFAULT_ALL2ALL_BACKEND
from roofline.cost.quant import MXFP8_MOE_BACKEND
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.planning.backend import ranks_per_node
from roofline.planning.plan import ConfigPlan, Plan
from roofline.planning.search import Config

# --quantization values a plan may use, and what `vllm serve` needs for them: fp8 quantizes an unquantized
# checkpoint when it loads (`--quantization fp8`); the other schemes need a checkpoint already in that format,
# whose own quantization_config vLLM reads (no flag).
_ONLINE_QUANTIZATION = {"fp8": "fp8"}


def parse_checkpoints(values: list[str], quantizations: tuple[str, ...] | str) -> dict[str, str]:
    """`--checkpoint QUANT=REPO` values -> {quantization: checkpoint}, each QUANT one of the planned
    quantizations."""
    planned = (quantizations,) if isinstance(quantizations, str) else tuple(quantizations)
    out: dict[str, str] = {}
    for text in values:
        quant, sep, repo = text.partition("=")
        if not sep or not quant.strip() or not repo.strip():
            raise UserError(f"--checkpoint: expected QUANTIZATION=REPO_OR_PATH, got '{text}'")
        out[quant.strip()] = repo.strip()
    unused = sorted(set(out) - set(planned))
    if unused:
        raise UserError(f"--checkpoint: '{unused[0]}' is not a planned quantization; allowed: {', '.join(planned)}")
    return out


# Multi-node data parallelism as vLLM 0.32's docs launch it (docs/serving/data_parallel_deployment.md, "Internal Load
# Balancing"): one `vllm serve` per node, all with --data-parallel-size, --data-parallel-size-local, the head node's
# address and one RPC port; the head node runs the API server and ranks 0 .. L-1, every other node `--headless` from
# --data-parallel-start-rank. The port is vLLM's default (vllm/config/parallel.py ParallelConfig.data_parallel_rpc_port),
# written out so that every node names the same one.
HEAD_NODE_ADDRESS = "<head-node-ip>"
DP_RPC_PORT = 29550
# Multi-node pipeline parallelism with vLLM 0.32's multiprocessing executor (vllm/engine/arg_utils.py
# `create_engine_config`: --nnodes, --node-rank, --master-addr, --master-port; vllm/entrypoints/cli/serve.py
# `run_headless`: "Run headless workers (for multi-node PP/TP)"): every node runs the same `vllm serve` with its
# --node-rank, the head (rank 0) the API server, the others --headless. The port is vLLM's default
# (vllm/config/parallel.py ParallelConfig.master_port), written out so that every node names the same one.
MASTER_PORT = 29501


def launch_commands(model: str, engine: EngineArgs, c: ConfigPlan, checkpoints: dict[str, str],
                    ranks_per_node: int) -> tuple[str, ...]:
    """The `vllm serve` line of each node of one replica: one line on one node; over nodes (DP ranks beyond one
    node's GPUs, `ranks_per_node` on each), the head node's line and a `--headless` line per other node."""
    head = vllm_serve_command(model, engine, c, checkpoints)
    dp = c.config.data_parallel_size
    nodes = pipeline_nodes(c.config)
    if nodes > 1:
        common = ["--nnodes", str(nodes), "--master-addr", HEAD_NODE_ADDRESS, "--master-port", str(MASTER_PORT)]
        return tuple(head + " " + shlex.join([*common, "--node-rank", str(rank), *(["--headless"] if rank else [])])
                     for rank in range(nodes))
    if dp <= ranks_per_node:
        return (head,)
    assert dp % ranks_per_node == 0, f"{c.config.label}: {dp} ranks over nodes of {ranks_per_node}"
    common = ["--data-parallel-size-local", str(ranks_per_node), "--data-parallel-address", HEAD_NODE_ADDRESS,
              "--data-parallel-rpc-port", str(DP_RPC_PORT)]
    lines = [head + " " + shlex.join(common)]
    for node in range(1, dp // ranks_per_node):
        lines.append(head + " " + shlex.join(["--headless", *common, "--data-parallel-start-rank",
                                              str(node * ranks_per_node)]))
    return tuple(lines)


def launch(model: str, engine: EngineArgs, c: ConfigPlan, checkpoints: dict[str, str]) -> tuple[str, ...]:
    """`launch_commands` with the hardware profile's node size."""
    config = c.config
    per_node = ranks_per_node(load_profile(config.hardware), config) if config.data_parallel_size > 1 else 1
    return launch_commands(model, engine, c, checkpoints, per_node)


def pipeline_nodes(config: Config) -> int:
    """Nodes a pipeline-parallel replica spans (`roofline.parallel_config.ParallelLayout.num_nodes`); 1 without PP."""
    if config.pipeline_parallel_size == 1:
        return 1
    hw = load_profile(config.hardware)
    domain = hw.interconnect.max_num_gpus if hw.interconnect is not None else 8
    per_node = hw.scale_out.gpus_per_node if hw.scale_out is not None else domain
    return -(-config.num_gpus // per_node)


def vllm_serve_command(model: str, engine: EngineArgs, c: ConfigPlan, checkpoints: dict[str, str]) -> str:
    """The `vllm serve` line of one configuration (its TP, max_num_seqs, quantization, KV-cache dtype and token
    budget; the rest from `engine`); a placeholder stands for a checkpoint not given."""
    config = c.config
    quantization = config.quantization
    checkpoint = checkpoints.get(quantization) or (f"<{model} checkpoint>" if quantization == "none" else
                                                   f"<{model} checkpoint ({quantization})>")
    args = ["vllm", "serve", checkpoint, "--tensor-parallel-size", str(config.tensor_parallel_size)]
    if config.pipeline_parallel_size > 1:
        args += ["--pipeline-parallel-size", str(config.pipeline_parallel_size)]
    if config.data_parallel_size > 1:
        args += ["--data-parallel-size", str(config.data_parallel_size)]
    if config.expert_parallel:
        args.append("--enable-expert-parallel")
    if (config.data_parallel_size > 1 or config.expert_parallel) and engine.all2all_backend != DEFAULT_ALL2ALL_BACKEND:
        args += ["--all2all-backend", engine.all2all_backend]
    args += ["--max-num-seqs", str(config.max_num_seqs)]
    if engine.max_model_len is not None:
        args += ["--max-model-len", str(engine.max_model_len)]
    if config.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(config.max_num_batched_tokens)]
    if engine.gpu_memory_utilization is not None:
        args += ["--gpu-memory-utilization", f"{engine.gpu_memory_utilization:g}"]
    args += ["--block-size", str(engine.block_size)]
    args.append("--enable-prefix-caching" if engine.enable_prefix_caching else "--no-enable-prefix-caching")
    args.append("--enable-chunked-prefill" if engine.enable_chunked_prefill else "--no-enable-chunked-prefill")
    if engine.dtype != "auto":
        args += ["--dtype", engine.dtype]
    if quantization in _ONLINE_QUANTIZATION and quantization not in checkpoints:
        args += ["--quantization", _ONLINE_QUANTIZATION[quantization]]
    if config.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", config.kv_cache_dtype]
    if engine.async_scheduling is not None:
        args.append("--async-scheduling" if engine.async_scheduling else "--no-async-scheduling")
    if engine.moe_backend in ("marlin", "triton"):  # vLLM 0.32's --moe-backend values of the same names
        args += ["--moe-backend", engine.moe_backend]
    if engine.enforce_eager:
        args.append("--enforce-eager")
    elif engine.cudagraph_mode is not None:
        args += ["--compilation-config.cudagraph_mode", engine.cudagraph_mode]
    if engine.max_cudagraph_capture_size is not None:
        args += ["--max-cudagraph-capture-size", str(engine.max_cudagraph_capture_size)]
    # Settings vLLM reads from its environment (`roofline.cost.quant`: no vLLM 0.32 flag for them).
    env = []
    if engine.moe_backend == MXFP8_MOE_BACKEND:
        env.append("VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1")
    if engine.float32_matmul_precision != "highest":
        env.append(f"VLLM_FLOAT32_MATMUL_PRECISION={engine.float32_matmul_precision}")
    return shlex.join(env + args)


def goodput_arg(plan: Plan) -> str:
    """The SLOs as `vllm bench serve --goodput` takes them (milliseconds; ITL has no goodput key in vLLM)."""
    return " ".join(f"{name}:{value * 1e3:g}" for name, value in plan.request.slo.limits().items() if name != "itl")


def plan_json(plan: Plan, engine: EngineArgs, checkpoints: dict[str, str]) -> dict[str, Any]:
    """Every configuration with its outcome and reason (and, if pruned, the change that would make it fit), the
    best first among those that serve; the cheapest and the Pareto front of cost against sustained rate."""
    request = plan.request
    best = plan.best
    front = plan.pareto_front()

    def config(c: ConfigPlan) -> dict[str, Any]:
        cfg = c.config
        return {
            "label": cfg.label, "hardware": cfg.hardware, "tensor_parallel_size": cfg.tensor_parallel_size,
            "data_parallel_size": cfg.data_parallel_size, "expert_parallel": cfg.expert_parallel,
            "pipeline_parallel_size": cfg.pipeline_parallel_size,
            "num_gpus_per_replica": cfg.num_gpus,
            "quantization": cfg.quantization, "kv_cache_dtype": cfg.kv_cache_dtype,
            "max_num_seqs": cfg.max_num_seqs,
            "max_num_batched_tokens": cfg.max_num_batched_tokens or c.fit.max_num_batched_tokens,
            "fits": c.fit.fits, "num_kv_tokens": c.fit.num_kv_tokens, "fix": c.fit.fix,
            "serves": c.meets_slo, "reason": c.why_not, "max_rate_per_replica_per_s": c.max_rate_per_s,
            "num_replicas": c.num_replicas, "num_gpus": c.num_gpus, "sustained_rate_per_s": c.sustained_rate_per_s,
            "usd_per_gpu_hour": c.price.usd_per_gpu_hour if c.price else None, "usd_per_hour": c.usd_per_hour,
            "usd_per_million_output_tokens": c.usd_per_million_output_tokens, "kv_headroom": c.kv_headroom,
            "gpus_optimistic_pessimistic": c.gpus_range(),
            "usd_per_million_output_tokens_optimistic_pessimistic": c.usd_per_million_range(), "is_best": c is best,
            "on_pareto_front": c in front,
            "vllm_serve": vllm_serve_command(request.model, engine, c, checkpoints) if c.meets_slo else None,
            "launch_per_node": list(launch(request.model, engine, c, checkpoints)) if c.meets_slo else None,
        }

    ranked = plan.ranked()
    others = [c for c in plan.configs if c not in ranked]
    slo = request.slo
    return {
        "model": request.model, "hardware": list(request.hardware), "workload": request.workload,
        "target_rate_per_s": request.target_rate_per_s,
        "slo": {"percentile": slo.percentile, **{f"{name}_s": value for name, value in slo.limits().items()}},
        "vllm_bench_goodput": goodput_arg(plan),
        "engine": {k: v for k, v in vars(engine).items()
                   if k not in ("tensor_parallel_size", "max_num_seqs", "quantization", "kv_cache_dtype",
                                "max_num_batched_tokens")},
        "search_space": {"tensor_parallel_sizes": list(request.tensor_parallel_sizes),
                         "quantizations": list(request.quantizations), "kv_cache_dtypes": list(request.kv_cache_dtypes),
                         "max_num_batched_tokens": list(request.max_num_batched_tokens),
                         "max_num_seqs": list(request.max_num_seqs)},
        "num_configurations": len(plan.configs), "num_pruned": len(plan.pruned),
        "num_simulations": plan.num_simulations,
        "notes": list(plan.notes),
        "cheapest": plan.cheapest.config.label if plan.cheapest else None,
        "pareto_front": [{"label": c.config.label, "usd_per_hour": c.usd_per_hour,
                          "sustained_rate_per_s": c.sustained_rate_per_s} for c in front],
        "configurations": [config(c) for c in ranked + others],
    }
