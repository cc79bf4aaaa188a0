"""Paged attention against a per-sequence reference: decodes split into several groups of different padded
widths, and a prefill chunk with cached context after them (both read through the shared scratch buffer)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import engine.attention as attention  # noqa: E402
from engine.attention import PagedKVCache, build_metadata, paged_attention  # noqa: E402

CPU = torch.device("cpu")
HEADS, KV_HEADS, HEAD_DIM, BLOCK = 4, 2, 8, 4


def reference(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, num_context: int) -> torch.Tensor:
    """q: [n, heads, D] for positions num_context.. ; keys, values: [num_context + n, kv_heads, D]."""
    group = HEADS // KV_HEADS
    k = keys.repeat_interleave(group, dim=1).transpose(0, 1)  # HF repeat_kv order
    v = values.repeat_interleave(group, dim=1).transpose(0, 1)
    scores = q.transpose(0, 1) @ k.transpose(-1, -2) * HEAD_DIM ** -0.5
    pos = torch.arange(keys.shape[0])
    scores = scores.masked_fill(pos[None, :] > pos[num_context:, None], float("-inf"))
    return (scores.softmax(-1) @ v).transpose(0, 1).reshape(q.shape[0], -1)


@pytest.mark.parametrize("group_keys", [8, 40, 10_000])
def test_grouped_decodes_and_chunk_match_reference(group_keys: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attention, "DECODE_GROUP_KEYS", group_keys)
    gen = torch.Generator().manual_seed(0)
    cache = PagedKVCache(1, 64, BLOCK, KV_HEADS, HEAD_DIM, torch.float32, CPU)
    # (context, query) per sequence: five decodes of mixed lengths, then a chunk of 5 after 6 cached tokens.
    shapes = [(3, 1), (17, 1), (0, 1), (9, 1), (30, 1), (6, 5)]
    free = torch.randperm(63, generator=gen).add(1).tolist()  # block 0 stays the null block
    tables, history = [], []
    for ctx, n in shapes:
        num_blocks = (ctx + n - 1) // BLOCK + 1
        tables.append([free.pop() for _ in range(num_blocks)])
        keys, values = (torch.randn(ctx + n, KV_HEADS, HEAD_DIM, generator=gen) for _ in range(2))
        history.append((keys, values))
        slots = torch.tensor([tables[-1][p // BLOCK] * BLOCK + p % BLOCK for p in range(ctx)], dtype=torch.long)
        cache.k[0].view(KV_HEADS, -1, HEAD_DIM)[:, slots] = keys[:ctx].transpose(0, 1)
        cache.v[0].view(KV_HEADS, -1, HEAD_DIM)[:, slots] = values[:ctx].transpose(0, 1)
    meta = build_metadata([(t, c) for t, (c, n) in zip(tables, shapes) if n == 1],
                          [(t, c, n) for t, (c, n) in zip(tables, shapes) if n > 1], cache, CPU)
    assert sum(g.end - g.start for g in meta.decode_groups) == 5
    if group_keys == 8:
        assert len(meta.decode_groups) == 5
    q = torch.randn(10, HEADS, HEAD_DIM, generator=gen)
    new_k = torch.cat([k[c:] for (k, _), (c, _) in zip(history, shapes)])
    new_v = torch.cat([v[c:] for (_, v), (c, _) in zip(history, shapes)])
    out = paged_attention(q, new_k, new_v, cache.k[0], cache.v[0], meta, HEAD_DIM ** -0.5)
    start = 0
    for (keys, values), (ctx, n) in zip(history, shapes):
        expected = reference(q[start:start + n], keys, values, ctx)
        torch.testing.assert_close(out[start:start + n], expected, rtol=1e-5, atol=1e-5)
        start += n
