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
attention reads the cache. Decodes are attended in groups of consecutive sequences holding about
`DECODE_GROUP_KEYS` keys together: one `index_select` of whole blocks gathers a group's keys into
[kv_heads, G, L, D] (block tables padded to the group's longest, the padding masked), the query heads that
share a KV head ride along the query-length axis (GQA without repeating K/V), and two batched GEMMs with an
fp32 softmax in between do the rest. (This beat `scaled_dot_product_attention` for one-token queries on
CPU: its flash kernel tiles a query of length 1-8 poorly.) The gathers land in a scratch buffer the cache
keeps and reuses (a fresh tensor per layer paid its page faults every time), and a group's copy is small
enough to still be in cache when the GEMMs read it. Prefill chunks run one SDPA call each: causal when
nothing is cached before them, else over the gathered context plus the chunk with a causal mask shifted by
the context length.

    meta = build_metadata(decodes, prefills, kv_cache, device)   # once per step, shared by all layers
    out = paged_attention(q, k, v, kv_cache.k[i], kv_cache.v[i], meta, scale)   # in each layer
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# Keys (padded) per decode group. Measured on this CPU (1 thread, bf16, 4 KV heads x 64, gathers into the
# scratch buffer, per layer): B=64 at context 512: one group 9.4 ms, groups of <= 8192 keys 5.0, 4096 5.3,
# 2048 6.5 ms (a fresh-tensor gather of all 64, as before, took 15.0 ms); B=32 at 2048: one group 20.3 ms,
# 8192 11.3 ms. Smaller groups leave the gathered copy in the cache for the GEMMs but add ~7 torch ops each.
DECODE_GROUP_KEYS = 8192


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
        self._scratch = torch.empty((2, 0, block_size, head_dim), dtype=dtype, device=device)

    def scratch(self, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Two [num_rows, block_size, head_dim] buffers for gathered K and V blocks, reused by every layer and
        step (grown to the largest request, never shrunk); valid until the next call."""
        if self._scratch.shape[1] < num_rows:
            self._scratch = torch.empty((2, num_rows, *self._scratch.shape[2:]), dtype=self._scratch.dtype,
                                        device=self._scratch.device)
        return self._scratch[0, :num_rows], self._scratch[1, :num_rows]

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
class DecodeGroup:
    """Decoding sequences [start, end) of the step's tokens, attended together."""

    start: int
    end: int
    gather_rows: torch.Tensor  # [kv_heads * (end - start) * max_blocks] long (padding: block 0)
    bias: torch.Tensor  # [1, end - start, 1, max_blocks * block_size] fp32, -inf on padding


@dataclass(frozen=True)
class AttentionMetadata:
    """What every layer needs to write and read the paged cache in one step."""

    slot_mapping: torch.Tensor  # [num_tokens] long: the slot of each new token
    num_decode_tokens: int  # the first tokens, one per decoding sequence
    decode_groups: tuple[DecodeGroup, ...]  # covering [0, num_decode_tokens) in order
    prefills: tuple[PrefillChunk, ...]
    cache: PagedKVCache  # for its scratch buffers


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
    groups = tuple(_decode_group(decodes[start:end], start, cache, device)
                   for start, end in _group_bounds([n // block_size + 1 for _, n in decodes], block_size))
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
                             groups, tuple(chunks), cache)


def _group_bounds(num_blocks: list[int], block_size: int) -> list[tuple[int, int]]:
    """[start, end) runs of consecutive decodes whose padded keys stay within DECODE_GROUP_KEYS (at least one
    sequence each)."""
    bounds, start, width = [], 0, 0
    for i, n in enumerate(num_blocks):
        width = max(width, n)
        if i > start and (i + 1 - start) * width * block_size > DECODE_GROUP_KEYS:
            bounds.append((start, i))
            start, width = i, n
    if num_blocks:
        bounds.append((start, len(num_blocks)))
    return bounds


def _decode_group(decodes: list[tuple[Sequence[int], int]], start: int, cache: PagedKVCache,
                  device: torch.device) -> DecodeGroup:
    block_size = cache.block_size
    # Only the blocks holding keys: the scheduler may have allocated ahead.
    num_blocks = [n // block_size + 1 for _, n in decodes]
    width = max(num_blocks)
    tables = torch.tensor([list(ids[:b]) + [0] * (width - b) for (ids, _), b in zip(decodes, num_blocks)],
                          dtype=torch.long, device=device)
    lengths = torch.tensor([n + 1 for _, n in decodes], device=device)
    padding = torch.arange(width * block_size, device=device)[None, :] >= lengths[:, None]
    bias = torch.zeros(padding.shape, device=device).masked_fill_(padding, float("-inf"))[None, :, None, :]
    return DecodeGroup(start, start + len(decodes), _gather_rows(tables, cache), bias)


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """q: [T, heads, D]; k, v: [T, kv_heads, D] of the step's new tokens -> [T, heads * D].

    Writes k, v into the cache first, then attends every token to its sequence's cached keys."""
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    k_cache.view(num_kv_heads, -1, head_dim).index_copy_(1, meta.slot_mapping, k.transpose(0, 1))
    v_cache.view(num_kv_heads, -1, head_dim).index_copy_(1, meta.slot_mapping, v.transpose(0, 1))
    out = torch.empty(num_tokens, num_heads, head_dim, dtype=q.dtype, device=q.device)
    for group in meta.decode_groups:
        rows = slice(group.start, group.end)
        _decode_attention(q[rows], k_cache, v_cache, group, meta.cache, scale, out[rows])
    for chunk in meta.prefills:
        rows = slice(chunk.start, chunk.start + chunk.num_query_tokens)
        out[rows] = _prefill_attention(q[rows], k[rows], v[rows], k_cache, v_cache, chunk, meta.cache, scale)
    return out.view(num_tokens, num_heads * head_dim)


def _gather(cache: torch.Tensor, rows: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """[kv_heads, num_blocks, block_size, D] cache, head-major block rows -> [kv_heads, rows/kv_heads * bs, D],
    copied into `out` (a scratch buffer of at least rows.numel() rows)."""
    num_kv_heads, _, block_size, head_dim = cache.shape
    dest = out[:rows.numel()]
    torch.index_select(cache.view(-1, block_size, head_dim), 0, rows, out=dest)
    return dest.view(num_kv_heads, -1, head_dim)


def _decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, group: DecodeGroup,
                      cache: PagedKVCache, scale: float, out: torch.Tensor) -> None:
    """One decode group into out [G, heads, D]."""
    # q: [G, heads, D] -> [kv_heads, G, group, D]: HF's repeat_kv gives KV head j the query heads
    # j * group .. (j + 1) * group - 1, so the group axis stands in for the query-length axis.
    num_decodes, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[0]
    q = q.view(num_decodes, num_kv_heads, num_heads // num_kv_heads, head_dim).transpose(0, 1)
    k_buf, v_buf = cache.scratch(group.gather_rows.numel())
    keys = _gather(k_cache, group.gather_rows, k_buf).view(num_kv_heads, num_decodes, -1, head_dim)
    values = _gather(v_cache, group.gather_rows, v_buf).view(num_kv_heads, num_decodes, -1, head_dim)
    scores = torch.matmul(q, keys.transpose(-1, -2)).float()  # [kv_heads, G, group, L]
    probs = torch.softmax(scores.mul_(scale).add_(group.bias), dim=-1).to(q.dtype)
    torch.matmul(probs, values, out=out.view(num_decodes, num_kv_heads, -1, head_dim).transpose(0, 1))


def _prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                       v_cache: torch.Tensor, chunk: PrefillChunk, cache: PagedKVCache,
                       scale: float) -> torch.Tensor:
    # q: [n, heads, D]; SDPA wants [1, heads, n, D]. With nothing cached the chunk's own K/V are the keys.
    if chunk.gather_rows is None:
        keys, values = k.transpose(0, 1), v.transpose(0, 1)
    else:
        total = chunk.num_context_tokens + chunk.num_query_tokens
        k_buf, v_buf = cache.scratch(chunk.gather_rows.numel())
        keys = _gather(k_cache, chunk.gather_rows, k_buf)[:, :total]
        values = _gather(v_cache, chunk.gather_rows, v_buf)[:, :total]
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys[None], values[None], attn_mask=chunk.mask,
                                         is_causal=chunk.mask is None, scale=scale, enable_gqa=True)
    return out[0].transpose(0, 1)
