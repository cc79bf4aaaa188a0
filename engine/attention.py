"""Paged KV cache and attention over it for a mixed batch of prefill chunks and decodes.

Layout of one layer's cache (K and V alike), a slot being one token's K (or V) of all KV heads:

    cache[num_blocks, block_size, num_kv_heads, head_dim]
    slot id = block_id * block_size + offset_in_block          (flat view: cache.view(-1, kv_heads, head_dim))

A step's tokens are ordered decodes first, then prefill chunks (see `AttentionMetadata`):

    tokens:  [d0 d1 ... d(B-1) | p0 p0 p0 ... | p1 p1 ... ]
              one query each     chunk of seq p0   chunk of seq p1

Within each layer the K/V of all new tokens are written into their slots (one `index_copy_`) before any
attention reads the cache. Decodes are attended together: their block tables, padded to the longest, gather
the cache into [B, kv_heads, L, head_dim] and one `scaled_dot_product_attention` call runs with the query
heads of each KV head laid out as the query-length axis (GQA without repeating K/V) and a key-padding mask.
Prefill chunks run one SDPA call each: causal when nothing is cached before them, else over the gathered
context plus the chunk with a causal mask shifted by the context length.

    meta = build_metadata(...)                     # once per step, shared by all layers
    out = paged_attention(q, k, v, cache.k[i], cache.v[i], meta, scale)   # in each layer
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F


class PagedKVCache:
    """K and V tensors of every layer, shape [num_blocks, block_size, num_kv_heads, head_dim]."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        self.block_size = block_size
        self.num_blocks = num_blocks
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
    block_table: torch.Tensor | None  # [num_blocks] long, blocks to read; None when num_context == 0
    mask: torch.Tensor | None  # [num_query, num_context + num_query] bool, True = attend; None when causal


@dataclass(frozen=True)
class AttentionMetadata:
    """What every layer needs to write and read the paged cache in one step."""

    slot_mapping: torch.Tensor  # [num_tokens] long: the slot of each new token
    num_decode_tokens: int  # the first tokens, one per decoding sequence
    decode_block_table: torch.Tensor | None  # [num_decodes, max_blocks] long, padded with block 0
    decode_mask: torch.Tensor | None  # [num_decodes, 1, 1, max_blocks * block_size] bool, True = a real key
    prefills: tuple[PrefillChunk, ...]


def build_metadata(decodes: list[tuple[Sequence[int], int]], prefills: list[tuple[Sequence[int], int, int]],
                   block_size: int, device: torch.device) -> AttentionMetadata:
    """decodes: (block_ids, num_context_tokens) per single-token sequence, in token order;
    prefills: (block_ids, num_context_tokens, num_query_tokens) per chunk, after the decodes."""
    slot_mapping = [ids[n // block_size] * block_size + n % block_size for ids, n in decodes]
    decode_table = decode_mask = None
    if decodes:
        # Only the blocks holding keys: the scheduler may have allocated ahead.
        num_blocks = [n // block_size + 1 for _, n in decodes]
        width = max(num_blocks)
        decode_table = torch.tensor([list(ids[:b]) + [0] * (width - b) for (ids, _), b in zip(decodes, num_blocks)],
                                    dtype=torch.long, device=device)
        lengths = torch.tensor([n + 1 for _, n in decodes], device=device)
        decode_mask = (torch.arange(width * block_size, device=device)[None, :] < lengths[:, None])[:, None, None]
    chunks = []
    start = len(decodes)
    for block_ids, num_context, num_query in prefills:
        total = num_context + num_query
        slot_mapping.extend(block_ids[p // block_size] * block_size + p % block_size
                            for p in range(num_context, total))
        table = mask = None
        if num_context:
            table = torch.tensor(list(block_ids[:(total - 1) // block_size + 1]), dtype=torch.long, device=device)
            key_pos = torch.arange(total, device=device)
            mask = key_pos[None, :] <= key_pos[num_context:, None]
        chunks.append(PrefillChunk(start, num_query, num_context, table, mask))
        start += num_query
    return AttentionMetadata(torch.tensor(slot_mapping, dtype=torch.long, device=device), len(decodes),
                             decode_table, decode_mask, tuple(chunks))


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """q: [T, heads, D]; k, v: [T, kv_heads, D] of the step's new tokens -> [T, heads * D].

    Writes k, v into the cache first, then attends every token to its sequence's cached keys."""
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    flat_k = k_cache.view(-1, num_kv_heads, head_dim)
    flat_v = v_cache.view(-1, num_kv_heads, head_dim)
    flat_k.index_copy_(0, meta.slot_mapping, k)
    flat_v.index_copy_(0, meta.slot_mapping, v)
    out = torch.empty(num_tokens, num_heads, head_dim, dtype=q.dtype, device=q.device)
    num_decodes = meta.num_decode_tokens
    if num_decodes:
        out[:num_decodes] = _decode_attention(q[:num_decodes], k_cache, v_cache, meta, scale)
    for chunk in meta.prefills:
        rows = slice(chunk.start, chunk.start + chunk.num_query_tokens)
        out[rows] = _prefill_attention(q[rows], k[rows], v[rows], k_cache, v_cache, chunk, scale)
    return out.view(num_tokens, num_heads * head_dim)


def _decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                      scale: float) -> torch.Tensor:
    # q: [B, heads, D] -> [B, kv_heads, group, D]: HF's repeat_kv gives KV head j the query heads
    # j * group .. (j + 1) * group - 1, so the group axis stands in for the query-length axis.
    num_decodes, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    q = q.view(num_decodes, num_kv_heads, num_heads // num_kv_heads, head_dim)
    table = meta.decode_block_table
    # index_select copies whole blocks (several times faster than advanced indexing on CPU).
    keys = k_cache.index_select(0, table.view(-1)).view(num_decodes, -1, num_kv_heads, head_dim).transpose(1, 2)
    values = v_cache.index_select(0, table.view(-1)).view(num_decodes, -1, num_kv_heads, head_dim).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=meta.decode_mask, scale=scale)
    return out.reshape(num_decodes, num_heads, head_dim)


def _prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                       v_cache: torch.Tensor, chunk: PrefillChunk, scale: float) -> torch.Tensor:
    # q: [n, heads, D]; SDPA wants [1, heads, n, D]. With nothing cached the chunk's own K/V are the keys.
    if chunk.block_table is not None:
        total = chunk.num_context_tokens + chunk.num_query_tokens
        k = k_cache.index_select(0, chunk.block_table).flatten(0, 1)[:total]
        v = v_cache.index_select(0, chunk.block_table).flatten(0, 1)[:total]
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                         v.transpose(0, 1)[None], attn_mask=chunk.mask,
                                         is_causal=chunk.mask is None, scale=scale, enable_gqa=True)
    return out[0].transpose(0, 1)
