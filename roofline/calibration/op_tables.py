"""Reader of measured operator tables in the `aiconfigurator-core` layout (PyPI `aiconfigurator-core`).

    tables = load_op_tables("h100_sxm")               # the installed package's data, or root=DIR
    tables["gemm"]                                      # DataFrame: m, n, k, dtype, measured_s, shape_key

The package ships latencies (milliseconds) measured by NVIDIA's collectors (github.com/ai-dynamo/aiconfigurator,
`collector/vllm/collect_*.py`) under `<root>/<system>/<op>/vllm/<version>/*.parquet`. Semantics checked there:

- GEMM (`collect_gemm.py`): a vLLM `RowParallelLinear` (y = x W^T, x is m x k), six layers replayed in one
  CUDA graph, latency / 6: per-kernel time without host launch cost. bf16 = kernel_source
  `torch.nn.functional.linear` (cuBLAS); fp8 = `CutlassFP8ScaledMMLinearKernel` (static per-tensor scales: the
  input is quantized by its own kernel inside the measured forward). Block-scaled fp8 and nvfp4 rows (other
  quantization schemes) are not read.
- Attention (`collect_attn.py`): vLLM's backend `forward` in a CUDA graph, including writing the new K/V into
  the paged cache. Context rows: `batch_size` prompts of `isl` tokens, no earlier context. Generation rows:
  one query token per sequence, KV length `isl + step`. `window_size == 0`, `beam_width == 1`.
- All-reduce (`custom_allreduce_perf`): backend `vllm_graph` (the CUDA-graph path vLLM serves with; `vllm_eager`
  is "other"); `message_size` counts elements of `allreduce_dtype`.
- MoE (`moe_perf`): the vLLM fused-MoE layer, bf16 and per-tensor fp8, `distribution == balanced`, TP = EP = 1,
  with that `distribution` (the collector's round-robin routing, which `roofline.calibration.fit.predict_table`
  reproduces: `roofline.calibration.moe_routing`). The tables do not say which experts are gated; `gated` is
  False for the shapes of the package's Nemotron-H configs (`nongated_moe_shapes`: the collector runs their relu2
  experts without a gate, one up projection).

Measurement condition (`replay_working_set_bytes`): no collector flushes the L2 between runs. Each times a CUDA
graph replayed back to back on the same buffers (`collector/helper.py` `benchmark_with_power`: 3 warm-up replays,
then `num_runs` timed ones, no flush), so the bytes one replay touches stay in the L2 for the next one where they
fit. `roofline.calibration.fit.predict_table` predicts the tables under that condition; serving never is (each
layer reads other weights and another layer's KV cache: between two uses of a byte the whole model goes by).

Which kernel is "default" per operator and group (dtype, or KV-cache dtype for attention): see `_GEMM_KERNELS`
and below; the other kernels of the same groups are read with `kernels="other"`.

Rows come back in the `roofline predict-ops` schema (`roofline.cost.single_ops.SINGLE_OP_COLUMNS`) with
`measured_s` (seconds) and `shape_key`, the key a held-out split is made by (distinct weight shape (n, k)
for GEMM; documented per kind in `_SHAPE_KEYS`). Nothing is copied into this repository.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofline.errors import UserError

_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "fp8": "fp8", "int8": "int8"}
# The kernel vLLM selects by default, per operator and group (dtype; KV-cache dtype for attention), in order of
# preference: the first one a table has is the default one on that GPU and vLLM version. Hopper runs FA3,
# cuBLAS and CUTLASS fp8; Blackwell FlashInfer's TRT-LLM attention and fused-MoE kernels; Ada FA2 (bf16 KV) and
# FlashInfer (fp8 KV: FA2 has no fp8 KV cache); Ampere (a100_sxm, vLLM 0.14.0) names its kernels
# `vllm_default` / `vllm_flash_attn`. Every other kernel of the same group is "other": read with
# `load_op_tables(..., kernels="other")` and reported separately, never fitted on.
_GEMM_KERNELS = {"bf16": ("torch.nn.functional.linear", "vllm_default"),
                 "fp8": ("CutlassFP8ScaledMMLinearKernel", "vllm_default")}
_PREFILL_KERNELS = ("vllm_flash_attn_fa3", "vllm_flashinfer_trtllmprefill", "vllm_flash_attn_fa2", "vllm_flash_attn",
                    "vllm_flashinfer_fiprefill")
_DECODE_KERNELS = ("vllm_flash_attn_fa3", "vllm_flashinfer_trtllmdecode", "vllm_flash_attn_fa2", "vllm_flash_attn",
                   "vllm_flashinfer_fidecode")
_MOE_KERNELS = {"bf16": ("vllm_unquantizedfusedmoe_triton_tritonexperts",
                         "vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts", "vllm_fused_moe"),
                "fp8": ("vllm_modeloptfp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
                        "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts",
                        "vllm_modeloptfp8moe_triton_tritonexperts")}
KERNEL_CHOICES = ("default", "other")
# What a held-out split groups by: shapes a deployment fixes (weights, heads), not the batch it runs.
_SHAPE_KEYS = {
    "gemm": ("n", "k"),
    "attention_prefill": ("num_heads", "num_kv_heads", "head_dim"),
    "attention_decode": ("num_heads", "num_kv_heads", "head_dim"),
    "all_reduce": ("message_bytes",),
    "moe": ("hidden_size", "inter_size", "topk", "num_experts"),
}
OP_KINDS = tuple(_SHAPE_KEYS)
_FILES = {"gemm": ("gemm", "gemm_perf.parquet"),
          "attention_prefill": ("attention", "context_attention_perf.parquet"),
          "attention_decode": ("attention", "generation_attention_perf.parquet"),
          "all_reduce": ("comm", "custom_allreduce_perf.parquet"), "moe": ("moe", "moe_perf.parquet")}


def package_root() -> Path:
    """`systems/data` of the installed aiconfigurator-core; a UserError names the package when it is absent."""
    try:
        import aiconfigurator_core
    except ImportError:
        raise UserError("--op-tables: the PyPI package 'aiconfigurator-core' is not installed; "
                        "pip install aiconfigurator-core, or pass a directory") from None
    return Path(aiconfigurator_core.__file__).resolve().parent / "systems" / "data"


# GEMM rows: the collector builds this many RowParallelLinear layers (separate weights, the same input x) and
# replays them in one graph (`collect_gemm.py`: outside_loop_count 6 for bf16 and per-tensor fp8).
GEMM_LAYERS_PER_REPLAY = 6
_ELEMENT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "fp32": 4.0}


def replay_working_set_bytes(kind: str, cols: dict[str, np.ndarray]) -> np.ndarray | None:
    """Bytes one timed graph replay of a table row touches (what the next replay finds in the L2 if they fit),
    per row; None for kinds whose working set is not described (all-reduce: other GPUs' buffers; MoE).

    GEMM: six layers' weights (n x k), plus ONE output (m x n, bf16), for W8A8 one quantized input (m x k, 8
    bits), and the shared bf16 input x (m x k): the collector discards each layer's output (`op.forward(x)` in
    its loop, the result unused), and during CUDA graph capture PyTorch's caching allocator serves allocations
    from the graph's private pool, where a block freed earlier in the capture is reassigned to the next request
    of its size (pytorch/pytorch#51075, "Private CUDA memory pools": "temporary internal allocations can be
    assigned, released and reassigned"), so the six layers write the same output buffer (and quantize into the
    same 8-bit buffer). Attention (`collect_attn.py`, one layer): Q and O
    (bf16, heads x head_dim per token), the new tokens' K and V (bf16) written into the paged cache, and the
    cache's K and V that the kernel reads (KV dtype): prefill `batch_size` x `seq_len` tokens, decode
    `batch_size` sequences of one new token and `seq_len` cached ones."""
    if kind == "gemm":
        m, n, k = cols["m"], cols["n"], cols["k"]
        size = np.array([_ELEMENT_BYTES[d] for d in cols["dtype"]])
        quantized_in = np.where(size < 2.0, m * k * size, 0.0)
        return GEMM_LAYERS_PER_REPLAY * n * k * size + m * n * 2.0 + quantized_in + m * k * 2.0
    if kind in ("attention_prefill", "attention_decode"):
        b, s, d = cols["batch_size"], cols["seq_len"], cols["head_dim"]
        kv_size = np.array([_ELEMENT_BYTES[x] for x in cols["kv_dtype"]])
        qo_token = 2.0 * cols["num_heads"] * d * 2.0
        kv_token = 2.0 * cols["num_kv_heads"] * d
        new_tokens = b * s if kind == "attention_prefill" else b
        return new_tokens * (qo_token + kv_token * 2.0) + b * s * kv_token * kv_size
    return None


def list_systems(root: Path | None = None) -> list[str]:
    root = root or package_root()
    return sorted(p.name for p in root.iterdir() if p.is_dir())


def load_op_tables(system: str, root: Path | None = None, kernels: str = "default") -> dict[str, pd.DataFrame]:
    """All vLLM operator tables of one system (e.g. `h100_sxm`) that exist, by kind, from the newest vLLM version
    folder of each. `kernels="default"`: the rows of the kernel vLLM selects by default (per group, see
    `_GEMM_KERNELS` ...); `"other"`: the rows of every other kernel of the same groups. Each frame has a `kernel`
    column and `attrs["source"]` (the file) and `attrs["vllm_version"]`."""
    if kernels not in KERNEL_CHOICES:
        raise UserError(f"op tables: kernels {kernels!r} is not allowed; allowed: {', '.join(KERNEL_CHOICES)}")
    root = Path(root) if root is not None else package_root()
    base = root / system
    if not base.is_dir():
        raise UserError(f"--op-tables: no system '{system}' under '{root}'; allowed: {', '.join(list_systems(root))}")
    readers = {"gemm": _gemm, "attention_prefill": _attention_prefill, "attention_decode": _attention_decode,
               "all_reduce": _all_reduce, "moe": _moe}
    out = {}
    for kind, (folder, name) in _FILES.items():
        path = _newest(base / folder / "vllm", name)
        if path is None:
            continue
        frame = _read(kind, path, readers[kind], kernels)
        if len(frame):
            out[kind] = frame
    return out


def _read(kind: str, path: Path, reader: Any, kernels: str) -> pd.DataFrame:
    frame = reader(pd.read_parquet(path))
    frame = frame[_is_default(frame, kind) == (kernels == "default")].copy()
    if not len(frame):
        return frame
    frame["shape_key"] = frame[list(_SHAPE_KEYS[kind])].astype(str).agg("/".join, axis=1)
    frame = frame.reset_index(drop=True)
    frame.attrs["source"] = str(path)
    frame.attrs["vllm_version"] = path.parent.name
    return frame


def load_all_reduce_versions(system: str, root: Path | None = None) -> dict[str, pd.DataFrame]:
    """The default-kernel all-reduce rows of every vLLM version folder of `system` that has the table, by version
    (oldest first): `roofline.calibration.family_fit` fits the collectives once per table version."""
    root = Path(root) if root is not None else package_root()
    folder = root / system / _FILES["all_reduce"][0] / "vllm"
    name = _FILES["all_reduce"][1]
    if not folder.is_dir():
        return {}
    paths = sorted((p / name for p in folder.iterdir() if (p / name).exists()), key=lambda p: _version(p.parent))
    frames = {p.parent.name: _read("all_reduce", p, _all_reduce, "default") for p in paths}
    return {v: f for v, f in frames.items() if len(f)}


def _version(p: Path) -> tuple[int, ...]:
    return tuple(int(x) if x.isdigit() else -1 for x in p.name.replace("-", ".").split("."))


def _preferred(kind: str, group: str) -> tuple[str, ...]:
    if kind == "gemm":
        return _GEMM_KERNELS.get(group, ())
    if kind == "moe":
        return _MOE_KERNELS.get(group, ())
    if kind == "all_reduce":
        return ("vllm_graph",)
    return _PREFILL_KERNELS if kind == "attention_prefill" else _DECODE_KERNELS


def _is_default(frame: pd.DataFrame, kind: str) -> np.ndarray:
    """Rows of the default kernel of their group (the first of `_preferred` the group has)."""
    group = frame["kv_dtype"] if "kv_dtype" in frame else frame["dtype"]
    keep = np.zeros(len(frame), bool)
    for name in group.unique():
        rows = (group == name).to_numpy()
        chosen = _first_present(frame["kernel"][rows], _preferred(kind, str(name)))
        keep |= rows & (frame["kernel"] == chosen).to_numpy()
    return keep


def _newest(folder: Path, name: str) -> Path | None:
    """The file from the newest vLLM version folder that has it (versions compared numerically)."""
    if not folder.is_dir():
        return None
    candidates = [p for p in folder.iterdir() if (p / name).exists()]
    if not candidates:
        return None
    return max(candidates, key=_version) / name


def _gemm(d: pd.DataFrame) -> pd.DataFrame:
    d = d[d.gemm_dtype.isin(["bfloat16", "fp8"])]  # fp8 = per-tensor scales (fp8_block, nvfp4: other models)
    return pd.DataFrame({"op": "gemm", "m": d.m, "n": d.n, "k": d.k, "dtype": d.gemm_dtype.map(_DTYPES),
                         "measured_s": d.latency * 1e-3, "kernel": d.kernel_source})


def _first_present(names: pd.Series, preferred: tuple[str, ...]) -> str | None:
    present = set(names.unique())
    return next((k for k in preferred if k in present), None)


def _attention(d: pd.DataFrame, kind: str, seq_len: pd.Series) -> pd.DataFrame:
    return pd.DataFrame({"op": kind, "batch_size": d.batch_size, "seq_len": seq_len, "num_heads": d.num_heads,
                         "num_kv_heads": d.num_key_value_heads, "head_dim": d.head_dim,
                         "dtype": d.attn_dtype.map(_DTYPES), "kv_dtype": d.kv_cache_dtype.map(_DTYPES),
                         "measured_s": d.latency * 1e-3, "kernel": d.kernel_source})


def _attention_rows(d: pd.DataFrame) -> pd.DataFrame:
    keep = np.ones(len(d), bool)
    for column, value in (("window_size", 0), ("beam_width", 1)):  # older tables lack these columns
        if column in d:
            keep &= (d[column] == value).to_numpy()
    return d[keep]


def _attention_prefill(d: pd.DataFrame) -> pd.DataFrame:
    d = _attention_rows(d)
    return _attention(d, "attention_prefill", d.isl)


def _attention_decode(d: pd.DataFrame) -> pd.DataFrame:
    d = _attention_rows(d)
    return _attention(d, "attention_decode", d.isl + d.step)


def _all_reduce(d: pd.DataFrame) -> pd.DataFrame:
    backend = d.backend if "backend" in d else pd.Series("vllm_graph", index=d.index)
    size = d.allreduce_dtype.map({"bfloat16": 2, "float16": 2, "float32": 4})
    return pd.DataFrame({"op": "all_reduce", "message_bytes": d.message_size * size, "num_devices": d.num_gpus,
                         "dtype": d.allreduce_dtype.map(_DTYPES), "measured_s": d.latency * 1e-3,
                         "kernel": backend})


def _moe(d: pd.DataFrame) -> pd.DataFrame:
    """bf16 and per-tensor fp8 fused MoE, tokens spread evenly over the experts, TP = EP = 1."""
    d = d[d.moe_dtype.isin(["bfloat16", "fp8"]) & (d.distribution == "balanced") & (d.moe_tp_size == 1)
          & (d.moe_ep_size == 1)]
    return pd.DataFrame({"op": "moe", "num_tokens": d.num_tokens, "hidden_size": d.hidden_size,
                         "inter_size": d.inter_size, "topk": d.topk, "num_experts": d.num_experts,
                         "dtype": d.moe_dtype.map(_DTYPES), "gated": moe_rows_gated(d),
                         "distribution": d.distribution, "measured_s": d.latency * 1e-3, "kernel": d.kernel_source})


def moe_rows_gated(d: pd.DataFrame) -> np.ndarray:
    """Per row of a `moe_perf` table (columns hidden_size, inter_size, topk, num_experts): whether its experts are
    gated (False for `nongated_moe_shapes`)."""
    nongated = nongated_moe_shapes()
    keys = zip(d.hidden_size, d.inter_size, d.topk, d.num_experts)
    return np.array([(int(h), int(i), int(k), int(e)) not in nongated for h, i, k, e in keys], dtype=bool)


@lru_cache(maxsize=1)
def nongated_moe_shapes() -> frozenset[tuple[int, int, int, int]]:
    """(hidden, intermediate, top-k, experts) of the MoE tables' cases whose experts have no gate.

    The collector (github.com/ai-dynamo/aiconfigurator at 095f58a51, `collector/vllm/collect_moe.py`) builds each
    case's FusedMoE from the package's own config of its model (`model_configs/<org>--<name>_config.json`); for
    `model_type` nemotron_h it sets the activation to `<mlp_hidden_act>_no_mul` (relu2_no_mul) and loads the
    experts as vLLM serves those checkpoints (ModelOptFp8MoEMethod: `w13_num_shards = 2 if is_act_and_mul else
    1`): one up projection, no gate. The tables carry no activation column, so the shapes of the Nemotron-H configs
    the package ships (hidden = `moe_latent_size` where the model projects to a latent before its experts, as
    Nemotron 3 Super and Ultra do) are these cases. They are faster than a gated expert of the same shape by
    about 3/2 (B200 per-tensor fp8, hidden 2048, intermediate 5120, top-22 of 512 at 32 tokens, every expert
    touched: 10.7 TB/s counted as gated, 7.1 as not; the top-8 shapes of the same table 5.6-7.2). No package
    installed: none."""
    try:
        import aiconfigurator_core
    except ImportError:
        return frozenset()
    shapes = set()
    for path in sorted((Path(aiconfigurator_core.__file__).resolve().parent / "model_configs").glob("*_config.json")):
        config = json.loads(path.read_text())
        config = config.get("text_config", config)
        if config.get("model_type") != "nemotron_h" or not config.get("n_routed_experts"):
            continue
        hidden = config.get("moe_latent_size") or config["hidden_size"]
        shapes.add((int(hidden), int(config["moe_intermediate_size"]), int(config["num_experts_per_tok"]),
                    int(config["n_routed_experts"])))
    return frozenset(shapes)
