"""The multi-head latent attention backends vLLM runs per kernel family (`KernelFamily.mla`), apart from the MLA
cost model (`roofline.cost.kernels.mla`), which needs the operator records of `roofline.cost.ops`: the family
records are built from these without importing it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MlaBackend:
    """The MLA kernels vLLM runs on a family for one KV dtype: the decode backend's name (as vLLM and the
    tables name it) and its `reorder_batch_threshold` (query lengths up to it take the decode path: "process
    small prefills with decode pathway"), and the prefill backend's name."""

    decode: str
    decode_threshold: int
    prefill: str = "FLASH_ATTN"


# The backends each family runs (`KernelFamily.mla`, bf16 KV then fp8 KV). Thresholds:
# vllm/v1/attention/backends/mla/flashattn_mla.py (512), flashmla.py (128); FlashInfer MLA and Triton MLA take decodes
# only (the tables' FLASHINFER_MLA and TRITON_MLA context rows are their one-token rows).
HOPPER_MLA = (MlaBackend("FLASH_ATTN_MLA", 512), MlaBackend("FLASHMLA", 128))
BLACKWELL_MLA = (MlaBackend("FLASHINFER_MLA", 1), MlaBackend("FLASHINFER_MLA", 1))
ADA_MLA = (MlaBackend("TRITON_MLA", 1), MlaBackend("TRITON_MLA", 1))
