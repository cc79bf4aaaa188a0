"""The host time of one launch outside a CUDA graph in vLLM (`executor.kernel_launch_us` of the GPU families),
derived from public A/B runs of vLLM's CUDA-graph modes and this cost model's count of each step's launches.

    python benchmarks/ground_truth/host_launch_evidence.py

A step that launches its kernels from the host (no graph) takes the longer of its device time and its launches
(`StepCostModel._combine`); where the launches are the longer, a run's time per decode step minus the per-step
host work, over the launches of a step, is the time of one launch. Each source below is a published measurement
of real vLLM on a GPU (not a row of the end-to-end judge's silicon_sample.csv), the two modes differing only in
which graphs they replay:

- vLLM issue #45709 (comment of 2026-08-28, vLLM 0.28.1rc1, Qwen3-30B-A3B bf16, 4x L20, TP4, closed loop of 8,
  3,500 / 1,500 tokens, 16 requests): mean TPOT 34.4 ms with `cudagraph_mode` NONE (torch.compile on), 11.8 ms with
  PIECEWISE. Bounds: at most the NONE step's time less its host work over its launches (the step no longer than
  its launches); at least the difference of the two TPOTs over the difference of their launches (whatever the
  device time, a step's difference is at most that of its launches).
- vLLM PR #25444 (2025-09-23, Qwen3-Coder-30B-A3B-Instruct-FP8, one H100, `vllm bench serve --num-prompts 10`,
  1,024 / 128 tokens): 4.07 req/s with PIECEWISE (then the default) against 5.98 req/s with FULL_AND_PIECEWISE; the
  difference of the two durations falls on the 127 decode steps (the prefills run without graphs in both), which
  launch the pieces between the layers' attention calls and the attention calls against one full graph. Bound:
  whatever the device time, one step's difference is at most the difference of the launches (lower). This cost
  model counts an attention call as one launch (2 x layers + 1 a step); vLLM's FlashAttention backend launches
  two kernels in one (`reshape_and_cache_flash`, then the attention kernel): 3 x layers + 1.
Eager PyTorch's ATen launches cost less (pie-project PR #348: ~1,200 kernels a decode step of Qwen2.5-72B-AWQ on
an A100, 7.29 ms saved by a full graph: ~6 us a kernel; AWQ is not modelled here, so it is quoted, not derived).
Prints one line per source and a JSON line.
"""

from __future__ import annotations

import json

import numpy as np

from roofline.cost.step_shape import StepArrays
from roofline.engine_args import EngineArgs
from roofline.sim.deployment import make_deployment


def decode_step(model: str, hardware: str, tp: int, quantization: str, batch: int, context: int,
                mode: str) -> tuple[int, float, float]:
    """(launches, device seconds, per-step host work seconds) of a decode step of `batch` sequences at `context`
    tokens each, under CUDA-graph `mode`."""
    engine = EngineArgs(tensor_parallel_size=tp, quantization=quantization, cudagraph_mode=mode, max_model_len=8192)
    cm = make_deployment(model, hardware, engine).cost_model
    step = cm.cost(StepArrays(np.ones(batch, dtype=np.int64), np.full(batch, context, dtype=np.int64),
                        np.ones(batch, dtype=bool)))
    ex = cm.hw.executor
    launches = int(round((step.host_s - ex.step_overhead_s - ex.step_overhead_per_seq_s * batch)
                         / ex.kernel_launch_s))
    return launches, step.device_s, ex.step_overhead_s + ex.step_overhead_per_seq_s * batch


def main() -> None:
    out: dict[str, object] = {}
    # vLLM issue #45709: TP4, 8 sequences at ~3,500 + 750 tokens of context. The launches do not depend on the GPU.
    n_none, _, work = decode_step("qwen3-30b-a3b", "h100-sxm", 4, "none", 8, 4250, "NONE")
    n_pw, _, _ = decode_step("qwen3-30b-a3b", "h100-sxm", 4, "none", 8, 4250, "PIECEWISE")
    tpot_none, tpot_pw = 34.4e-3, 11.8e-3
    upper = (tpot_none - work) / n_none
    lower = (tpot_none - tpot_pw) / (n_none - n_pw)
    print(f"vLLM #45709, Qwen3-30B-A3B bf16 TP4, 8 seqs: launches a decode step NONE {n_none}, PIECEWISE {n_pw}; "
          f"one launch {lower * 1e6:.0f}-{upper * 1e6:.0f} us")
    out["issue_45709_us"] = [round(lower * 1e6, 1), round(upper * 1e6, 1)]
    # vLLM PR #25444: one H100, block-fp8 checkpoint, 10 sequences at ~1,024 + 64 tokens (the launches do not depend
    # on the lengths).
    n_pw, _, _ = decode_step("qwen3-30b-a3b", "h100-sxm", 1, "fp8-block", 10, 1088, "PIECEWISE")
    n_full, _, _ = decode_step("qwen3-30b-a3b", "h100-sxm", 1, "fp8-block", 10, 1088, "FULL_AND_PIECEWISE")
    per_step = (10 / 4.07 - 10 / 5.98) / 127
    layers = (n_pw - 1) // 2
    bound, bound_fa = per_step / (n_pw - n_full), per_step / (n_pw + layers - n_full)
    print(f"vLLM #25444, Qwen3-30B-A3B fp8-block H100, 10 seqs: launches a decode step PIECEWISE {n_pw} "
          f"({n_pw + layers} with two kernels an attention call), FULL {n_full}; {per_step * 1e3:.2f} ms more a step: "
          f"one launch >= {bound * 1e6:.0f} us ({bound_fa * 1e6:.0f} us)")
    out["pr_25444_us_at_least"] = [round(bound * 1e6, 1), round(bound_fa * 1e6, 1)]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
