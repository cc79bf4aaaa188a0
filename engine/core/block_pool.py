"""KV cache blocks, the free queue and the prefix-cache map (vLLM V1 `vllm/v1/core/block_pool.py`).

    pool = BlockPool(num_blocks=1024)
    ids = pool.allocate(3)                   # block ids from the head of the free queue, evicting cached ones
    pool.register(ids[:2], [h0, h1])         # full blocks enter the prefix cache under their hashes
    pool.free(ids[::-1])                     # ref_cnt -= 1; at 0 back into the free queue (tail block first)

The same operations exist on `KVCacheBlock` objects (`get_new_blocks`, `cache_full_blocks`, `touch`,
`free_blocks`, `get_cached_block`), views whose `ref_cnt` and `block_hash` read the pool's arrays.

Block 0 is the null block (vLLM reserves it as a placeholder), so `num_blocks - 1` blocks are usable.

The free queue is ordered by eviction priority, head first. A freed block that holds no prefix-cache hash
goes to the head (reused first, LIFO); a freed cached block goes to the tail, so cached blocks are evicted in
least-recently-freed order (LRU). Callers free a request's blocks tail-first, so of one request's chain the
last block is evicted first and the shared prefix survives longest. A cached block with ref_cnt 0 stays in
the free queue (it counts as free) until it is either reused by a prefix hit (`touch`) or evicted by
`allocate`.

Everything is kept in numpy arrays so that a request's whole prompt (hundreds of blocks) is allocated, cached
and freed in a few array operations, not one Python step per block (the simulator moves millions of blocks):
- reference counts and the hash of each block (NO_HASH when it is not in the prefix cache);
- the free queue as a window [head, tail) of a large array with the position of each free block in it:
  allocation takes a slice at the head, a freed block is written before the head or after the tail, and a
  block taken out of the middle by a prefix hit leaves a hole that allocation skips (`_compact` packs it);
- the prefix-cache map `hash -> first block registered under it`, in which eviction only clears the block's
  hash: an entry is valid while its block still holds that hash, stale ones are dropped when met or in a
  periodic rebuild. Identical blocks computed by two requests are all kept (vLLM does not deduplicate, so
  block tables stay append-only); lookups return the earliest registered that is still cached, as vLLM does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast, overload

import numpy as np

# `free` runs once per finished or preempted request; `arr.all()`/`arr.any()` go through a Python wrapper each
# (numpy's _methods), ~2 % of sim_speed's time, so the ufunc reductions are called directly.
_all = np.logical_and.reduce
_any = np.logical_or.reduce

# CPython's hash() never returns -1 (it is its error code), so no block hash is ever NO_HASH.
NO_HASH = -1


class KVCacheBlock:
    """A view of one block of a `BlockPool`; its state lives in the pool's arrays."""

    __slots__ = ("block_id", "_pool")

    def __init__(self, block_id: int, pool: BlockPool) -> None:
        self.block_id = block_id
        self._pool = pool

    @property
    def ref_cnt(self) -> int:
        return int(self._pool.ref_cnt[self.block_id])

    @property
    def block_hash(self) -> int | None:
        """Chained hash of the block's tokens while it is registered in the prefix cache, else None."""
        h = int(self._pool.block_hash[self.block_id])
        return None if h == NO_HASH else h

    def __repr__(self) -> str:
        return f"KVCacheBlock({self.block_id}, ref_cnt={self.ref_cnt}, hash={self.block_hash})"


class _BlockViews(Sequence[KVCacheBlock]):
    """`pool.blocks[i]`: block `i`'s view, made on first use (`BlockPool._view`)."""

    __slots__ = ("_pool",)

    def __init__(self, pool: BlockPool) -> None:
        self._pool = pool

    def __len__(self) -> int:
        return self._pool.num_blocks

    @overload
    def __getitem__(self, index: int) -> KVCacheBlock: ...
    @overload
    def __getitem__(self, index: slice) -> list[KVCacheBlock]: ...
    def __getitem__(self, index: int | slice) -> KVCacheBlock | list[KVCacheBlock]:
        if isinstance(index, slice):
            return [self._pool._view(i) for i in range(*index.indices(self._pool.num_blocks))]
        return self._pool._view(range(self._pool.num_blocks)[index])


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        assert num_blocks >= 2
        self.num_blocks = num_blocks
        # Views are made on first use: a GPU pool holds up to ~10^6 blocks, and building every view up front cost
        # ~0.5 s per simulation while a run touches a fraction of them.
        self._views: list[KVCacheBlock | None] = [None] * num_blocks
        self.blocks = _BlockViews(self)
        self.null_block = self.blocks[0]
        self.ref_cnt = np.zeros(num_blocks, np.int64)
        self.block_hash = np.full(num_blocks, NO_HASH, np.int64)
        # Free queue: _queue[_head:_tail] in eviction order, with holes where _pos does not point back.
        self._queue = np.zeros(4 * num_blocks + 16, np.int64)
        self._pos = np.full(num_blocks, -1, np.int64)
        self._num_free = 0
        self._num_holes = 0
        self._head = self._tail = 0
        self._reset_queue(np.arange(1, num_blocks, dtype=np.int64))
        # hash -> first block registered under it (maybe stale); later blocks with the same hash, each with the
        # registration count of its block at the time, so that a block re-registered later is not mistaken
        # for its earlier registration.
        self._cached: dict[int, int] = {}
        self._dups: dict[int, list[tuple[int, int]]] = {}
        self._num_registrations = np.zeros(num_blocks, np.int64)
        # Stale entries are dropped all at once when the map outgrows this (sim_speed, 10,000 requests: 61
        # rebuilds of ~54k entries at 2 x num_blocks, 4.76-5.57 s; 8 x: 4.57-4.81 s, alternating in one process).
        self._max_entries = 8 * num_blocks + 1024

    def _view(self, block_id: int) -> KVCacheBlock:
        """The one `KVCacheBlock` of `block_id` (made on first use, then the same object)."""
        block = self._views[block_id]
        if block is None:
            block = self._views[block_id] = KVCacheBlock(block_id, self)
        return block

    # ---- counts ----
    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - 1

    @property
    def num_free_blocks(self) -> int:
        return self._num_free

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - 1 - self._num_free

    @property
    def num_cached_blocks(self) -> int:
        """Distinct hashes in the prefix cache (blocks in use or evictable); O(num_blocks)."""
        return len(np.unique(self.block_hash[self.block_hash != NO_HASH]))

    def usage(self) -> float:
        return self.num_used_blocks / self.num_usable_blocks

    # ---- the free queue ----
    def _reset_queue(self, ids: np.ndarray) -> None:
        """Lay the free queue `ids` out anew, with room for num_blocks prepends before it."""
        head = self.num_blocks
        self._queue[head:head + len(ids)] = ids
        self._pos[ids] = np.arange(head, head + len(ids))
        self._head, self._tail = head, head + len(ids)
        self._num_free = len(ids)
        self._num_holes = 0

    def _compact(self) -> None:
        seg = self._queue[self._head:self._tail]
        self._reset_queue(seg[self._pos[seg] == np.arange(self._head, self._tail)])

    def _take(self, n: int) -> np.ndarray:
        """The first `n` blocks of the free queue, removed from it."""
        assert n <= self._num_free, (n, self._num_free)
        head = self._head
        if not self._num_holes:
            ids = self._queue[head:head + n].copy()
            self._head = head + n
        else:
            end = head + n
            while True:
                seg = self._queue[head:end]
                valid = self._pos[seg] == np.arange(head, end)
                num_valid = int(np.count_nonzero(valid))
                if num_valid >= n:
                    break
                end = min(self._tail, end + n - num_valid + 64)
            cut = int(np.flatnonzero(valid)[n - 1]) + 1
            ids = seg[:cut][valid[:cut]]
            self._num_holes -= cut - n
            self._head = head + cut
        self._pos[ids] = -1
        self._num_free -= n
        return ids

    def _append(self, ids: np.ndarray) -> None:
        if self._tail + len(ids) > len(self._queue):
            self._compact()
        tail = self._tail
        self._queue[tail:tail + len(ids)] = ids
        self._pos[ids] = np.arange(tail, tail + len(ids))
        self._tail = tail + len(ids)
        self._num_free += len(ids)

    def _prepend(self, ids: np.ndarray) -> None:
        if self._head < len(ids):
            self._compact()
        head = self._head - len(ids)
        self._queue[head:self._head] = ids
        self._pos[ids] = np.arange(head, self._head)
        self._head = head
        self._num_free += len(ids)

    # ---- block ids ----
    def allocate(self, n: int) -> list[int]:
        """Take `n` blocks (ref_cnt 1) from the head of the free queue, evicting the cached ones; the caller
        checked there are enough."""
        ids = self._take(n)
        self.block_hash[ids] = NO_HASH  # eviction; their map entries are stale now
        self.ref_cnt[ids] = 1
        return ids.tolist()

    def touch_ids(self, ids: Sequence[int]) -> None:
        """A prefix hit takes a reference; a block at ref_cnt 0 leaves the free queue (no longer evictable)."""
        arr = np.asarray(ids, dtype=np.int64)
        refs = self.ref_cnt[arr]
        idle = arr[refs == 0]
        if len(idle):
            self._pos[idle] = -1
            self._num_free -= len(idle)
            self._num_holes += len(idle)
        self.ref_cnt[arr] = refs + 1

    def free(self, ordered_ids: Sequence[int]) -> None:
        """Drop one reference from each block (distinct ids); `ordered_ids` lists them in eviction order."""
        if not len(ordered_ids):
            return
        arr = np.asarray(ordered_ids, dtype=np.int64)
        refs = self.ref_cnt[arr]
        if not _all(refs):
            raise AssertionError(f"block {int(arr[refs == 0][0])} freed twice")
        refs -= 1
        self.ref_cnt[arr] = refs
        idle = arr[refs == 0]
        if len(idle):
            hashed = self.block_hash[idle] != NO_HASH
            if _any(hashed):
                self._append(idle[hashed])
            if not _all(hashed):
                # Prepending keeps the uncached blocks in order at the head: the first becomes the first reused.
                self._prepend(idle[~hashed])

    def register(self, ids: Sequence[int], hashes: Sequence[int]) -> None:
        """Register blocks `ids`, now full of computed (or scheduled) tokens and not yet cached, under `hashes`."""
        cached = self._cached
        if len(ids) == 1:
            block_hash = hashes[0]
            if block_hash in cached:
                self._register_duplicate(ids[0], block_hash)
            else:
                cached[block_hash] = ids[0]
                self.block_hash[ids[0]] = block_hash
        elif cached.keys().isdisjoint(hashes) and self._insert_new(ids, hashes):
            if len(ids) <= 16:
                # Below ~16 blocks (the decodes' filled blocks) numpy's list conversion costs more than the loop.
                registered = self.block_hash
                for block_id, h in zip(ids, hashes):
                    registered[block_id] = h
            else:
                self.block_hash[np.asarray(ids, dtype=np.int64)] = hashes
        else:
            for block_id, block_hash in zip(ids, hashes):
                self._register_duplicate(block_id, block_hash)
        if len(cached) > self._max_entries:
            self._rebuild_map()

    def _insert_new(self, ids: Sequence[int], hashes: Sequence[int]) -> bool:
        """Map `hashes` (none of them in the map) to `ids` if they are distinct, else change nothing and return
        False. The map's growth tells whether they were distinct, which saves building a set of them."""
        cached = self._cached
        num_before = len(cached)
        cached.update(zip(hashes, ids))
        if len(cached) - num_before == len(hashes):
            return True
        for block_hash in hashes:
            cached.pop(block_hash, None)
        return False

    def _register_duplicate(self, block_id: int, block_hash: int) -> None:
        """Register one block whose hash may already be in the map (as a stale or a valid entry)."""
        first = self._first_valid(block_hash)
        self._num_registrations[block_id] += 1
        if first is None:
            self._cached[block_hash] = block_id
        else:
            self._dups.setdefault(block_hash, []).append((block_id, int(self._num_registrations[block_id])))
        self.block_hash[block_id] = block_hash

    def lookup(self, block_hash: int) -> int | None:
        """The block cached under `block_hash` (the earliest registered still cached), or None."""
        block_id = self._cached.get(block_hash)
        if block_id is None or self.block_hash[block_id] == block_hash:
            return block_id
        return self._first_valid(block_hash)

    def find_longest_cache_hit(self, block_hashes: Sequence[int], max_num_blocks: int) -> list[int]:
        """The blocks cached under block_hashes[0], [1], ... up to the first miss, at most `max_num_blocks`
        (vLLM's `find_longest_cache_hit`): `lookup` of each, inlined, since the head of the waiting queue
        asks every step."""
        cached = self._cached
        registered = self.block_hash
        if max_num_blocks <= 0 or not block_hashes or block_hashes[0] not in cached:
            return []  # the common miss
        wanted = block_hashes[:max_num_blocks]
        found: list[int | None] = [cached.get(h) for h in wanted]
        end = found.index(None) if None in found else len(found)
        hits = cast("list[int]", found[:end])  # no None before `end`
        # The entries found so far still name blocks holding their hash (one array comparison); the first stale
        # one, if any, is resolved by the loop below, which reads the map again from there (`_first_valid` is the
        # only call that changes the map, and the entries before it are not touched by it).
        num_hits = len(hits)
        stale = (registered[hits] != np.array(wanted[:num_hits], dtype=np.int64)).nonzero()[0]
        if not len(stale):
            return hits
        first_stale = int(stale[0])
        del hits[first_stale:]
        for block_hash in wanted[first_stale:]:
            block_id = cached.get(block_hash)
            if block_id is None:
                break
            if registered[block_id] != block_hash:  # evicted: a later block with that hash, or none
                block_id = self._first_valid(block_hash)
                if block_id is None:
                    break
            hits.append(block_id)
        return hits

    def _first_valid(self, block_hash: int) -> int | None:
        """Resolve the map entry of `block_hash`: drop evicted blocks from its front; the valid first or None."""
        block_id = self._cached.get(block_hash)
        if block_id is None or self.block_hash[block_id] == block_hash:
            return block_id
        dups = self._dups.pop(block_hash, [])
        for k, (dup_id, registration) in enumerate(dups):
            if self.block_hash[dup_id] == block_hash and self._num_registrations[dup_id] == registration:
                self._cached[block_hash] = dup_id
                if k + 1 < len(dups):
                    self._dups[block_hash] = dups[k + 1:]
                return dup_id
        del self._cached[block_hash]
        return None

    def _rebuild_map(self) -> None:
        """Drop the stale entries of the map (evicted blocks), keeping each hash's first valid block."""
        for block_hash in list(self._dups):
            self._first_valid(block_hash)
        later = {d for h, dups in self._dups.items() for d, r in dups
                 if self.block_hash[d] == h and self._num_registrations[d] == r}
        ids = np.flatnonzero(self.block_hash != NO_HASH)
        if later:
            ids = ids[~np.isin(ids, np.fromiter(later, np.int64, len(later)))]
        self._cached = dict(zip(self.block_hash[ids].tolist(), ids.tolist()))
        self._dups = {h: [(d, r) for d, r in dups if self.block_hash[d] == h and self._num_registrations[d] == r]
                      for h, dups in self._dups.items()}
        self._dups = {h: dups for h, dups in self._dups.items() if dups}

    # ---- the same on KVCacheBlock objects ----
    def get_cached_block(self, block_hash: int) -> KVCacheBlock | None:
        block_id = self.lookup(block_hash)
        return None if block_id is None else self._view(block_id)

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        view = self._view
        return [view(i) for i in self.allocate(num_blocks)]

    def touch(self, blocks: Sequence[KVCacheBlock]) -> None:
        self.touch_ids([b.block_id for b in blocks])

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        self.free([b.block_id for b in ordered_blocks])

    def cache_full_blocks(
        self, blocks: Sequence[KVCacheBlock], block_hashes: Sequence[int], start: int, end: int
    ) -> None:
        """Register blocks[start:end] under block_hashes[start:end]."""
        self.register([b.block_id for b in blocks[start:end]], list(block_hashes[start:end]))

    def check_invariants(self) -> None:
        """Blocks are conserved and reference counts and the map consistent; for tests (O(num_blocks))."""
        seg = self._queue[self._head:self._tail]
        queued = seg[self._pos[seg] == np.arange(self._head, self._tail)]
        assert len(queued) == self._num_free == len(set(queued.tolist()))
        assert len(seg) - len(queued) == self._num_holes
        assert 0 not in queued
        assert (self.ref_cnt >= 0).all()
        free = np.zeros(self.num_blocks, bool)
        free[queued] = True
        assert ((self.ref_cnt[1:] == 0) == free[1:]).all()
        assert (self._pos[~free] == -1).all()
        for block_id in np.flatnonzero(self.block_hash != NO_HASH).tolist():
            block_hash = int(self.block_hash[block_id])
            first = self.lookup(block_hash)
            assert first is not None and self.block_hash[first] == block_hash
