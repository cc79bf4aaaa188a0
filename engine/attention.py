"""Paged KV cache and attention over it for a mixed batch of prefill chunks and decodes.

Layout of one layer's cache (K and V alike), head-major so that a gather yields contiguous [L, head_dim]
matrices per (KV head, sequence), ready for batched GEMMs:

    cache[num_kv_heads, num_blocks, block_size, head_dim]
    slot id = block_id * block_size + offset_in_block        (cache.view(kv_heads, num_blocks * block_size, D))
    gather row of (head h, block b) = h * num_blocks + b     (cache.view(kv_heads * num_blocks, block_size, D))

A step's tokens are ordered decodes first, then prefill chunks (see `AttentionMetadata`):

    tokens:  [d0 d1 ... d(B-1) | p0 p0 p0 ... | p1 p1 ... ]
              one query each     chunk of seq p0   chunk of seq p1

Within each layer the K/V of all new tokens are written into their slots (one `index_copy_` each) before any
attention reads the cache. Decodes are attended together: one `index_select` of whole blocks gathers their
keys into [kv_heads, B, L, D] (block tables padded to the longest, the padding masked), the query heads that
share a KV head ride along the query-length axis (GQA without repeating K/V), and two batched GEMMs with an
fp32 softmax in between do the rest. (This beat `scaled_dot_product_attention` for one-token queries on
CPU: its flash kernel tiles a query of length 1-8 poorly.) Prefill chunks run one SDPA call each: causal
when nothing is cached before them, else over the gathered context plus the chunk with a causal mask
shifted by the context length.

    meta = build_metadata(decodes, prefills, kv_cache, device)   # once per step, shared by all layers
    out = paged_attention(q, k, v, kv_cache.k[i], kv_cache.v[i], meta, scale)   # in each layer
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F


class PagedKVCache:
    """K and V tensors of every layer, shape [num_kv_heads, num_blocks, block_size, head_dim], zeroed (padding
    keys are masked, but a masked NaN would still poison the weighted sum of values)."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        shape = (num_kv_heads, num_blocks, block_size, head_dim)
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.num_kv_heads = num_kv_heads
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]

    @staticmethod
    def bytes_per_block(num_layers: int, block_size: int, num_kv_heads: int, head_dim: int,
                        element_bytes: int) -> int:
        """K and V of one block over all layers."""
        return 2 * num_layers * block_size * num_kv_heads * head_dim * element_bytes


@dataclass(frozen=True)
class PrefillChunk:
    """One sequence computing more than one token this step: its tokens are [start, start + num_query)."""

    start: int
    num_query_tokens: int
    num_context_tokens: int  # already in the cache before this chunk
    gather_rows: torch.Tensor | None  # [kv_heads * blocks] long, blocks to read; None when num_context == 0
    mask: torch.Tensor | None  # [num_query, num_context + num_query] bool, True = attend; None when causal


@dataclass(frozen=True)
class AttentionMetadata:
    """What every layer needs to write and read the paged cache in one step."""

    slot_mapping: torch.Tensor  # [num_tokens] long: the slot of each new token
    num_decode_tokens: int  # the first tokens, one per decoding sequence
    decode_gather_rows: torch.Tensor | None  # [kv_heads * num_decodes * max_blocks] long (padding: block 0)
    decode_bias: torch.Tensor | None  # [1, num_decodes, 1, max_blocks * block_size] fp32, -inf on padding
    prefills: tuple[PrefillChunk, ...]


def _gather_rows(tables: torch.Tensor, cache: PagedKVCache) -> torch.Tensor:
    """Block ids [...] -> rows of the [kv_heads * num_blocks] view, head-major: [kv_heads * tables.numel()]."""
    heads = torch.arange(cache.num_kv_heads, device=tables.device) * cache.num_blocks
    return (heads[:, None] + tables.reshape(1, -1)).reshape(-1)


def build_metadata(decodes: list[tuple[Sequence[int], int]], prefills: list[tuple[Sequence[int], int, int]],
                   cache: PagedKVCache, device: torch.device) -> AttentionMetadata:
    """decodes: (block_ids, num_context_tokens) per single-token sequence, in token order;
    prefills: (block_ids, num_context_tokens, num_query_tokens) per chunk, after the decodes."""
    block_size = cache.block_size
    slot_mapping = [ids[n // block_size] * block_size + n % block_size for ids, n in decodes]
    gather_rows = bias = None
    if decodes:
        # Only the blocks holding keys: the scheduler may have allocated ahead.
        num_blocks = [n // block_size + 1 for _, n in decodes]
        width = max(num_blocks)
        tables = torch.tensor([list(ids[:b]) + [0] * (width - b) for (ids, _), b in zip(decodes, num_blocks)],
                              dtype=torch.long, device=device)
        gather_rows = _gather_rows(tables, cache)
        lengths = torch.tensor([n + 1 for _, n in decodes], device=device)
        padding = torch.arange(width * block_size, device=device)[None, :] >= lengths[:, None]
        bias = torch.zeros(padding.shape, device=device).masked_fill_(padding, float("-inf"))[None, :, None, :]
    chunks = []
    start = len(decodes)
    for block_ids, num_context, num_query in prefills:
        total = num_context + num_query
        slot_mapping.extend(block_ids[p // block_size] * block_size + p % block_size
                            for p in range(num_context, total))
        rows = mask = None
        if num_context:
            table = torch.tensor(list(block_ids[:(total - 1) // block_size + 1]), dtype=torch.long, device=device)
            rows = _gather_rows(table, cache)
            key_pos = torch.arange(total, device=device)
            mask = key_pos[None, :] <= key_pos[num_context:, None]
        chunks.append(PrefillChunk(start, num_query, num_context, rows, mask))
        start += num_query
    return AttentionMetadata(torch.tensor(slot_mapping, dtype=torch.long, device=device), len(decodes),
                             gather_rows, bias, tuple(chunks))


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """q: [T, heads, D]; k, v: [T, kv_heads, D] of the step's new tokens -> [T, heads * D].

    Writes k, v into the cache first, then attends every token to its sequence's cached keys."""
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    k_cache.view(num_kv_heads, -1, head_dim).index_copy_(1, meta.slot_mapping, k.transpose(0, 1))
    v_cache.view(num_kv_heads, -1, head_dim).index_copy_(1, meta.slot_mapping, v.transpose(0, 1))
    out = torch.empty(num_tokens, num_heads, head_dim, dtype=q.dtype, device=q.device)
    num_decodes = meta.num_decode_tokens
    if num_decodes:
        out[:num_decodes] = _decode_attention(q[:num_decodes], k_cache, v_cache, meta, scale)
    for chunk in meta.prefills:
        rows = slice(chunk.start, chunk.start + chunk.num_query_tokens)
        out[rows] = _prefill_attention(q[rows], k[rows], v[rows], k_cache, v_cache, chunk, scale)
    return out.view(num_tokens, num_heads * head_dim)


def _gather(cache: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """[kv_heads, num_blocks, block_size, D] cache, head-major block rows -> [kv_heads, rows/kv_heads * bs, D]."""
    num_kv_heads, _, block_size, head_dim = cache.shape
    return cache.view(-1, block_size, head_dim).index_select(0, rows).view(num_kv_heads, -1, head_dim)


def _decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                      scale: float) -> torch.Tensor:
    # q: [B, heads, D] -> [kv_heads, B, group, D]: HF's repeat_kv gives KV head j the query heads
    # j * group .. (j + 1) * group - 1, so the group axis stands in for the query-length axis.
    num_decodes, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[0]
    q = q.view(num_decodes, num_kv_heads, num_heads // num_kv_heads, head_dim).transpose(0, 1)
    keys = _gather(k_cache, meta.decode_gather_rows).view(num_kv_heads, num_decodes, -1, head_dim)
    values = _gather(v_cache, meta.decode_gather_rows).view(num_kv_heads, num_decodes, -1, head_dim)
    scores = torch.matmul(q, keys.transpose(-1, -2)).float()  # [kv_heads, B, group, L]
    probs = torch.softmax(scores.mul_(scale).add_(meta.decode_bias), dim=-1).to(q.dtype)
    out = torch.matmul(probs, values)  # [kv_heads, B, group, D]
    return out.transpose(0, 1).reshape(num_decodes, num_heads, head_dim)


def _prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                       v_cache: torch.Tensor, chunk: PrefillChunk, scale: float) -> torch.Tensor:
    # q: [n, heads, D]; SDPA wants [1, heads, n, D]. With nothing cached the chunk's own K/V are the keys.
    if chunk.gather_rows is None:
        keys, values = k.transpose(0, 1), v.transpose(0, 1)
    else:
        total = chunk.num_context_tokens + chunk.num_query_tokens
        keys = _gather(k_cache, chunk.gather_rows)[:, :total]
        values = _gather(v_cache, chunk.gather_rows)[:, :total]
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys[None], values[None], attn_mask=chunk.mask,
                                         is_causal=chunk.mask is None, scale=scale, enable_gqa=True)
    return out[0].transpose(0, 1)
