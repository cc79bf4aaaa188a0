"""KV cache blocks, the free queue and the prefix-cache map (vLLM V1 `vllm/v1/core/block_pool.py`).

    pool = BlockPool(num_blocks=1024)
    blocks = pool.get_new_blocks(3)          # from the head of the free queue, evicting cached ones
    pool.free_blocks(reversed(blocks))       # ref_cnt -= 1; at 0 back into the free queue

Block 0 is the null block (vLLM reserves it as a placeholder), so `num_blocks - 1` blocks are usable.

The free queue is ordered by eviction priority, head first. A freed block that holds no prefix-cache hash
goes to the head (reused first, LIFO); a freed cached block goes to the tail, so cached blocks are evicted in
least-recently-freed order (LRU). Callers free a request's blocks tail-first, so of one request's chain the
last block is evicted first and the shared prefix survives longest. A cached block with ref_cnt 0 stays in
the free queue (it counts as free) until it is either reused by a prefix hit (`touch`) or evicted by
`get_new_blocks`.

The queue is an `OrderedDict` (C-implemented doubly linked list): O(1) pop from the head, removal from the
middle, append and prepend, like vLLM's hand-written `FreeKVCacheBlockQueue`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence


class KVCacheBlock:
    __slots__ = ("block_id", "ref_cnt", "block_hash")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        # Chained hash of the block's tokens while it is registered in the prefix cache, else None.
        self.block_hash: int | None = None

    def __repr__(self) -> str:
        return f"KVCacheBlock({self.block_id}, ref_cnt={self.ref_cnt}, hash={self.block_hash})"


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        assert num_blocks >= 2
        self.num_blocks = num_blocks
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.null_block = self.blocks[0]
        # block_id -> block, head = next to allocate/evict.
        self._free: OrderedDict[int, KVCacheBlock] = OrderedDict((b.block_id, b) for b in self.blocks[1:])
        # hash -> block, or hash -> {block_id: block} when identical blocks were computed by two requests
        # (vLLM does not deduplicate, so block tables stay append-only); lookups return the first.
        self._cached: dict[int, KVCacheBlock | dict[int, KVCacheBlock]] = {}

    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - 1

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - 1 - len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        """Distinct hashes in the prefix cache (blocks in use or evictable)."""
        return len(self._cached)

    def usage(self) -> float:
        return self.num_used_blocks / self.num_usable_blocks

    def get_cached_block(self, block_hash: int) -> KVCacheBlock | None:
        entry = self._cached.get(block_hash)
        if entry is None or type(entry) is KVCacheBlock:
            return entry
        return next(iter(entry.values()))

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Take `num_blocks` blocks from the head of the free queue; the caller checked there are enough."""
        assert num_blocks <= len(self._free), (num_blocks, len(self._free))
        popitem = self._free.popitem
        out = []
        for _ in range(num_blocks):
            block = popitem(last=False)[1]
            if block.block_hash is not None:
                self._evict(block)
            assert block.ref_cnt == 0
            block.ref_cnt = 1
            out.append(block)
        return out

    def _evict(self, block: KVCacheBlock) -> None:
        block_hash = block.block_hash
        entry = self._cached.pop(block_hash)
        if type(entry) is not KVCacheBlock:
            del entry[block.block_id]
            if entry:
                self._cached[block_hash] = entry
        block.block_hash = None

    def touch(self, blocks: Sequence[KVCacheBlock]) -> None:
        """A prefix hit takes a reference; a block at ref_cnt 0 leaves the free queue (no longer evictable)."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self._free[block.block_id]
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference from each block; `ordered_blocks` lists them in the order they should be evicted."""
        to_head: list[KVCacheBlock] = []
        free = self._free
        for block in ordered_blocks:
            assert block.ref_cnt > 0, f"block {block.block_id} freed twice"
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                if block.block_hash is None:
                    to_head.append(block)
                else:
                    free[block.block_id] = block
        # Prepending keeps `to_head` in order at the head: to_head[0] becomes the first to reuse.
        for block in reversed(to_head):
            free[block.block_id] = block
            free.move_to_end(block.block_id, last=False)

    def cache_full_blocks(
        self, blocks: Sequence[KVCacheBlock], block_hashes: Sequence[int], start: int, end: int
    ) -> None:
        """Register blocks[start:end], now full of computed (or scheduled) tokens, under their hashes."""
        cached = self._cached
        for i in range(start, end):
            block = blocks[i]
            block_hash = block_hashes[i]
            # Prefix-hit blocks are counted in num_cached_blocks, so every block here is unregistered.
            assert block.block_hash is None, block
            block.block_hash = block_hash
            entry = cached.get(block_hash)
            if entry is None:
                cached[block_hash] = block
            elif type(entry) is KVCacheBlock:
                cached[block_hash] = {entry.block_id: entry, block.block_id: block}
            else:
                entry[block.block_id] = block

    def check_invariants(self) -> None:
        """Blocks are conserved and reference counts consistent; for tests and debugging (O(num_blocks))."""
        free_ids = set(self._free)
        assert len(free_ids) == len(self._free)
        assert 0 not in free_ids
        for block in self.blocks[1:]:
            assert block.ref_cnt >= 0, block
            assert (block.ref_cnt == 0) == (block.block_id in free_ids), block
            if block.block_hash is not None:
                entry = self._cached[block.block_hash]
                assert entry is block or (type(entry) is dict and entry.get(block.block_id) is block), block
        num_entries = sum(1 if type(e) is KVCacheBlock else len(e) for e in self._cached.values())
        assert num_entries == sum(b.block_hash is not None for b in self.blocks)
