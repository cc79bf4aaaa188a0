"""Pipeline parallelism (`roofline.cost.pipeline`): vLLM's layer split, each stage's operators and weights, the sends
between stages, the pipeline clock, the KV capacity of the scarcest stage, and the flags vLLM refuses."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

from roofline.cli import main
from roofline.cost.hardware import load_profile
from roofline.cost.pipeline import PipelineClock, pp_layer_partition
from roofline.cost.step_shape import StepArrays
from roofline.engine_args import EngineArgs
from roofline.sim.deployment import make_deployment


def _run(line: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(line.split())
        except SystemExit as exc:
            rc = int(exc.code or 0)
    return rc, out.getvalue(), err.getvalue()


def _decodes(n: int, context: int) -> StepArrays:
    return StepArrays(np.ones(n, dtype=np.int64), np.full(n, context, dtype=np.int64), np.ones(n, dtype=bool))


@pytest.mark.parametrize("num_layers, pp, expected", [
    (80, 4, (20, 20, 20, 20)),
    (30, 4, (7, 8, 8, 7)),  # the 2 left over go to the stages before the last, from the second-to-last back
    (61, 4, (15, 15, 16, 15)),  # DeepSeek-V3
    (32, 3, (11, 11, 10)),
    (5, 5, (1, 1, 1, 1, 1)),
])
def test_layer_split_is_vllms_get_pp_indices(num_layers: int, pp: int, expected: tuple[int, ...]) -> None:
    assert pp_layer_partition(num_layers, pp) == expected


def test_two_stage_pipeline_by_hand() -> None:
    """Stage times 3 s and 5 s, a send of 1 s: batch A 0-3 on stage 0, 4-9 on stage 1; batch B 3-6, then waits for
    stage 1 (9-14); batch C needs A's tokens (ready at 9): 9-12, then 14-19. The slowest stage sets the pace."""

    class Stages:
        num_stages = 2

        def send_s(self, num_tokens: int, stage: int) -> float:
            return 1.0

    clock = PipelineClock(Stages())  # type: ignore[arg-type]
    shape = _decodes(4, 10)
    assert clock.submit(shape, 0.0, stage_times_s=[3.0, 5.0]) == 9.0
    assert clock.submit(shape, 0.0, stage_times_s=[3.0, 5.0]) == 14.0
    assert clock.submit(shape, 0.0, inputs_ready_s=9.0, stage_times_s=[3.0, 5.0]) == 19.0
    assert clock.free_s == [12.0, 19.0]


def test_stages_run_their_own_operators_and_hold_their_own_weights() -> None:
    engine = EngineArgs(tensor_parallel_size=2, pipeline_parallel_size=3, max_model_len=8192)
    d = make_deployment("llama-3.1-70b", "h100-sxm", engine)
    assert d.pipeline is not None and d.pipeline.layers == ((0, 27), (27, 54), (54, 80))
    prefill = StepArrays(np.array([512]), np.array([0]), np.array([True]))
    names = [set(m.cost(prefill).breakdown_s) for m in d.pipeline.cost_models]
    assert "embedding" in names[0] and not {"lm_head", "sampling", "final_norm"} & names[0]
    assert not {"embedding", "lm_head", "final_norm"} & names[1]
    assert {"lm_head", "sampling", "final_norm"} <= names[2] and "embedding" not in names[2]
    # Weights: the stages' layers add up to the model's; embedding on the first, LM head and norm on the last.
    whole = d.cost_model.weight_bytes_per_rank()
    assert sum(m.weight_bytes_per_rank() for m in d.pipeline.cost_models) == pytest.approx(whole, rel=1e-12)
    vocab_bytes = (128256 // 2) * 8192 * 2
    assert d.pipeline.cost_models[0].weight_bytes_per_rank() - d.pipeline.cost_models[1].weight_bytes_per_rank() \
        == pytest.approx(vocab_bytes, rel=1e-12)
    # A stage's time is its cost model's total (time_s and cost agree), its layers' share of the step.
    for m in d.pipeline.cost_models:
        assert m.time_s(_decodes(32, 700)) == pytest.approx(m.cost(_decodes(32, 700)).total_s, rel=1e-12)
    assert d.pipeline.cost_models[1].time_s(prefill) < d.cost_model.time_s(prefill) / 2


def test_tied_embeddings_are_held_twice() -> None:
    """vLLM's last rank builds its own LM head, loaded from the tied embedding: both end stages hold the vocabulary."""
    d = make_deployment("llama-3.2-1b", "h100-sxm", EngineArgs(pipeline_parallel_size=2, max_model_len=4096))
    assert d.spec.tie_word_embeddings and d.pipeline is not None
    vocab_bytes = d.spec.vocab_size * d.spec.hidden_size * 2
    total = sum(m.weight_bytes_per_rank() for m in d.pipeline.cost_models)
    assert total == pytest.approx(d.cost_model.weight_bytes_per_rank() + vocab_bytes, rel=1e-12)


def test_send_within_a_node_and_across_nodes_by_hand() -> None:
    hw = load_profile("h100-sxm")
    e = hw.efficiency
    d = make_deployment("llama-3.1-70b", hw, EngineArgs(tensor_parallel_size=8, pipeline_parallel_size=2,
                                                          max_model_len=8192))
    assert d.pipeline is not None and d.pipeline.across_nodes == (True,)  # 16 GPUs: a node each
    tokens = 1000
    slice_bytes = 2 * tokens * 8192 * 2 / 8  # hidden_states and residual, bf16, this rank's eighth
    nic = e.nccl_ag_fixed_s + e.nccl_ag_rs_step_s + slice_bytes / (50e9 * e.nccl_ag_bus_efficiency)
    bw, alpha = 450e9 * e.collective_bus_efficiency, 42.5e-6 * e.collective_latency_scale
    gather = alpha + 7 / 8 * tokens * 8192 * 2 / bw + e.kernel_fixed_s
    assert d.pipeline.send_s(tokens, 0) == pytest.approx(nic + 2 * gather, rel=1e-12)
    d1 = make_deployment("llama-3.1-70b", hw, EngineArgs(tensor_parallel_size=4, pipeline_parallel_size=2,
                                                           max_model_len=8192))
    assert d1.pipeline is not None and d1.pipeline.across_nodes == (False,)
    nvlink = e.nccl_ag_fixed_s + e.nccl_ag_rs_step_s + 2 * tokens * 8192 * 2 / 4 / (450e9 * e.nccl_ag_bus_efficiency)
    gather4 = alpha + 3 / 4 * tokens * 8192 * 2 / bw + e.kernel_fixed_s
    assert d1.pipeline.send_s(tokens, 0) == pytest.approx(nvlink + 2 * gather4, rel=1e-12)


@pytest.mark.parametrize("pp, stage_layers", [(2, 40), (3, 27)])  # 80 layers: 40 + 40; 27 + 27 + 26
def test_kv_capacity_is_the_scarcest_stages_by_hand(pp: int, stage_layers: int) -> None:
    """With a fixed KV budget per GPU (--kv-cache-memory-bytes), a stage's blocks are the budget over a block of its
    own layers (16 tokens x 2 (K, V) x 4 KV heads per rank x 128 x 2 bytes per layer), and every stage gets the
    fewest (the stage with the most layers)."""
    engine = EngineArgs(tensor_parallel_size=2, pipeline_parallel_size=pp, max_model_len=8192,
                        kv_cache_memory_bytes=float(2**30))
    d = make_deployment("llama-3.1-70b", "h100-sxm", engine)
    assert d.kv.num_gpu_blocks == 2**30 // (16 * 2 * 4 * 128 * 2 * stage_layers)
    assert d.cache_config.num_blocks == d.kv.num_gpu_blocks
    assert d.gpus_per_replica == 2 * pp


def test_pipeline_frees_memory_for_the_kv_cache() -> None:
    one = make_deployment("llama-3.1-70b", "h100-sxm", EngineArgs(tensor_parallel_size=2, max_model_len=8192))
    two = make_deployment("llama-3.1-70b", "h100-sxm", EngineArgs(tensor_parallel_size=2, pipeline_parallel_size=2,
                                                                    max_model_len=8192))
    # Half the weights per GPU, half the layers per block: more than twice the blocks.
    assert two.kv.num_gpu_blocks > 2 * one.kv.num_gpu_blocks


@pytest.mark.parametrize("flags, field, words", [
    ("-pp 0", "--pipeline-parallel-size", "positive integer"),
    ("-pp 2 -dp 2", "--pipeline-parallel-size", "not model yet"),
    ("-pp 200", "--pipeline-parallel-size", "allowed: 1 to 80"),  # more stages than layers
    ("-tp 8 -pp 2 --hardware a100-80gb-sxm", "--pipeline-parallel-size", "scale_out"),  # two nodes, no network
    ("-tp 4 -pp 3 --hardware h100-sxm", "--pipeline-parallel-size", "split a TP group"),  # 12 GPUs on 8-GPU nodes
])
def test_bad_pipeline_flags_are_one_line(flags: str, field: str, words: str) -> None:
    line = f"simulate --model llama-3.1-70b --max-model-len 8192 --num-requests 2 {flags}"
    if "--hardware" not in flags:
        line += " --hardware h100-sxm"
    rc, out, err = _run(line)
    assert rc == 2 and out == "" and len(err.splitlines()) == 1 and field in err and words in err, err


def test_cpu_profile_refuses_pipeline_parallelism() -> None:
    cpu = Path(__file__).resolve().parent / "data" / "cpu-profile.yaml"
    rc, _, err = _run(f"simulate --model llama-156m --hardware {cpu} --num-requests 2 -pp 2")
    assert rc == 2 and "--pipeline-parallel-size" in err, err


# ---- roofline plan -------------------------------------------------------------------------------------------

def test_plan_searches_pipeline_sizes_and_launches_each_node() -> None:
    from dataclasses import replace

    from roofline.planning.deploy import HEAD_NODE_ADDRESS, MASTER_PORT, launch
    from roofline.planning.plan import ConfigPlan, PlanRequest
    from roofline.planning.search import Config, Fit, Slo

    request = PlanRequest("llama-3.1-70b", ("h100-sxm",), "sharegpt-chat", Slo(2.0, 0.1), 1.0,
                          tensor_parallel_sizes=(8,), max_num_seqs=(64,), pipeline_parallel_sizes=(1, 2))
    configs = request.configs()
    assert [(c.pipeline_parallel_size, c.num_gpus, c.label) for c in configs] == [
        (1, 8, "h100-sxm TP8 seqs64"), (2, 16, "h100-sxm TP8 PP2 seqs64")]
    known = {line for line in (Path(__file__).parent / "data" / "vllm-0.32.0-engine-flags.txt").read_text().split()
             if line.startswith("--")} | {"--headless"}  # (a vllm serve flag, not an engine flag)
    one_node = ConfigPlan(Config("h100-sxm", 4, 256, pipeline_parallel_size=2), Fit(1000), None, 1.0)
    (line,) = launch("llama-3.1-70b", EngineArgs(), one_node, {})
    assert "--tensor-parallel-size 4 --pipeline-parallel-size 2 --max-num-seqs 256" in line and "--nnodes" not in line
    two_nodes = replace(one_node, config=replace(one_node.config, tensor_parallel_size=8))
    head, worker = launch("llama-3.1-70b", EngineArgs(), two_nodes, {})
    common = f"--nnodes 2 --master-addr '{HEAD_NODE_ADDRESS}' --master-port {MASTER_PORT}"
    assert head.endswith(f"{common} --node-rank 0") and worker.endswith(f"{common} --node-rank 1 --headless")
    for text in (head, worker):
        assert "--pipeline-parallel-size 2" in text and {w for w in text.split() if w.startswith("--")} <= known


def test_plan_bound_of_a_pipeline_is_its_fastest_stage() -> None:
    from roofline.planning.backend import rank_step_floor

    d = make_deployment("llama-3.1-70b", "h100-sxm", EngineArgs(tensor_parallel_size=4, pipeline_parallel_size=2,
                                                                  max_model_len=8192))
    assert d.pipeline is not None
    shape = _decodes(48, 900)
    floor = rank_step_floor(d)(shape)
    assert floor == min(d.pipeline.stage_times_s(shape)) and floor < d.cost_model.time_s(shape)
