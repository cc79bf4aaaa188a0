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
- the prefix cache by chains, not by block: a *chain* is one block list of one request (`register_chain`, or
  one `register` call), whose blocks are registered in position order from where it starts; a block in the
  cache holds its hash in `block_hash` and the registration's order and chain in two more arrays (a lazy chain's
  block not yet hashed: its order in its placeholder, below). Only a chain's start is in a map (`hash of its
  first registered block -> chains`), so registering a request's prompt costs a few array writes and one map
  entry, not one per block. A lookup walks a request's chained
  hashes from its first block: a block holding the hash of position k was registered at position k by some
  chain that shares the request's tokens up to its start (hashes name the whole prefix), so the chains
  starting at the positions walked so far hold every candidate; each position takes the earliest registered
  of its candidates still holding the hash, as vLLM's map does (it does not deduplicate identical blocks
  computed by two requests, so block tables stay append-only). Eviction only clears a block's hash; chains
  none of whose blocks are cached any more are dropped now and then (`_prune_chains`).
- hashes computed lazily (`register_chain(..., hash_blocks=...)`, the KV cache manager's chains): such a chain's
  blocks are registered under *placeholders*, `PLACEHOLDER_BASE - order of registration` (unique per chain and
  position, below NO_HASH, so never a real hash), and only its start's hash, the map's key, is real. A lookup reads
  the cache only through the chains it finds by their starts (a real hash of the looking request at the start's
  position); before comparing their blocks it computes their real hashes (`hash_blocks`) and writes them over
  the placeholders of their blocks still registered (`_materialize`). Every block it compares then holds what
  eager hashing would have written, the blocks of other chains are never read, and eviction and the free queue
  only ask whether a block holds a hash: which blocks hit, in which order, and what is evicted are the same.
  Of sim_speed's ~11,000 prompts and ~10^5 filled decode blocks only the ~1,200 preempted requests' chains are
  ever walked into.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import overload

import numpy as np

# `free` runs once per finished or preempted request; `arr.all()`/`arr.any()` go through a Python wrapper each
# (numpy's _methods), ~2 % of sim_speed's time, so the ufunc reductions are called directly; on int arrays
# `count_nonzero` is ~10x cheaper still (`logical_and.reduce` casts them to bool first).
_all = np.logical_and.reduce
_count_nonzero = np.count_nonzero

# CPython's hash() never returns -1 (it is its error code), so no block hash is ever NO_HASH.
NO_HASH = -1
PLACEHOLDER_BASE = -2  # a lazy chain's block registered at order n holds PLACEHOLDER_BASE - n until hashed


_NEVER = np.iinfo(np.int64).max  # a registration order no cached block has
_MIN_MAX_CHAINS = 1024  # chains kept at least before `_prune_chains` (see BlockPool.__init__)


class _Chain:
    """One chain of the prefix cache: block_ids[start:] registered (so far) under block_hashes[start:]; with
    `hash_blocks` (lazy), block_hashes holds only the hashes computed so far and `hash_blocks(n)` extends it to at
    least n."""

    __slots__ = ("block_ids", "block_hashes", "start", "hash_blocks", "closed")

    def __init__(self, block_ids: list[int], block_hashes: list[int], start: int,
                 hash_blocks: Callable[[int], None] | None) -> None:
        self.block_ids = block_ids
        self.block_hashes = block_hashes
        self.start = start
        self.hash_blocks = hash_blocks
        self.closed = False  # its block list registers no more blocks (`close_chain`)


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
        pool = self._pool
        if pool.block_hash[self.block_id] < NO_HASH:
            pool._materialize(int(pool._reg_chain[self.block_id]))
        h = int(pool.block_hash[self.block_id])
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
        # The prefix cache's chains (module docstring): id -> chain, the ids of the chains starting with a hash,
        # and for each cached block the order of its registration and its chain (0 when it never had one). A lazy
        # chain's block holds its order in its placeholder instead (PLACEHOLDER_BASE - order), until `_materialize`
        # hashes it and writes the order here: one array write fewer per registered block.
        self._chains: dict[int, _Chain] = {}
        self._chain_starts: dict[int, list[int]] = {}
        self._num_chains_made = 0
        self._reg_order = np.zeros(num_blocks, np.int64)
        self._reg_chain = np.zeros(num_blocks, np.int64)
        # One element at a time, the arrays are written through memoryviews of them (the same int64s): a numpy
        # scalar assignment costs ~800 instructions, a memoryview's ~550 (callgrind; the decodes' filled blocks are
        # registered one by one, two writes each). The arrays are never replaced, so the views stay theirs.
        self._hash_view = self.block_hash.data
        self._chain_view = self._reg_chain.data
        self._queue_view = self._queue.data
        self._pos_view = self._pos.data
        self._num_registered = 0
        # `_prune_chains` when there are more. Dead chains keep their block and hash lists alive, and a lazy one its
        # request (prompt and outputs, to hash them): sim_speed's 10,000 requests keep ~190 chains live; pruning at
        # 4,096 peaked at 525 MB RSS, at 1,024 at 439 MB, the same CPU time (eager hashing at 4,096: 465 MB).
        self._max_chains = _MIN_MAX_CHAINS

    def release_chains(self) -> None:
        """Forget every chain of the prefix cache (the pool answers no lookup after): a lazy chain's hasher is a
        callback into the `KVCacheManager` that owns this pool, a reference cycle only the cyclic collector would
        free. For the end of a run (`Scheduler.shutdown`)."""
        self._chains.clear()
        self._chain_starts.clear()

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
        self._materialize_all()
        return len(np.unique(self.block_hash[self.block_hash != NO_HASH]))

    @property
    def num_chains_made(self) -> int:
        return self._num_chains_made

    @property
    def num_live_chains(self) -> int:
        """Chains kept (not yet dropped by `_prune_chains`)."""
        return len(self._chains)

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

    def _take(self, n: int, keep: bool = True) -> np.ndarray:
        """The first `n` blocks of the free queue, removed from it (`keep=False`: maybe a view of the queue, for a
        caller done with it before the queue changes)."""
        assert n <= self._num_free, (n, self._num_free)
        head = self._head
        if not self._num_holes:
            ids = self._queue[head:head + n]
            if keep:
                ids = ids.copy()
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
        if len(ids) == 1:  # (a request's tail block: two item writes cost a third of three array calls)
            block_id = int(ids[0])
            self._queue_view[head] = block_id
            self._pos_view[block_id] = head
        else:
            self._queue[head:self._head] = ids
            self._pos[ids] = np.arange(head, self._head)
        self._head = head
        self._num_free += len(ids)

    # ---- block ids ----
    def allocate(self, n: int) -> list[int]:
        """Take `n` blocks (ref_cnt 1) from the head of the free queue, evicting the cached ones; the caller
        checked there are enough."""
        return self.allocate_array(n, keep=False).tolist()

    def allocate_array(self, n: int, keep: bool = True) -> np.ndarray:
        """`allocate` as an int64 array (the pool never writes it; `keep=False`: to be read before the pool changes,
        maybe a view of its queue)."""
        ids = self._take(n, keep)
        self.block_hash[ids] = NO_HASH  # eviction; their map entries are stale now
        self.ref_cnt[ids] = 1
        return ids

    def touch_ids(self, ids: Sequence[int] | np.ndarray) -> None:
        """A prefix hit takes a reference; a block at ref_cnt 0 leaves the free queue (no longer evictable)."""
        arr = np.asarray(ids, dtype=np.int64)
        refs = self.ref_cnt[arr]
        idle = arr[refs == 0]
        if len(idle):
            self._pos[idle] = -1
            self._num_free -= len(idle)
            self._num_holes += len(idle)
        self.ref_cnt[arr] = refs + 1

    def free(self, ordered_ids: Sequence[int] | np.ndarray, num_uncached: int | None = None) -> None:
        """Drop one reference from each block (distinct ids); `ordered_ids` lists them in eviction order (an int64
        array is read, never written). `num_uncached`, where the caller knows it: its first `num_uncached` blocks
        hold no prefix-cache hash and the others hold one (a request's table tail first: the blocks after its
        registered ones, then those), which spares reading the hashes when no block is held by anyone else."""
        if not len(ordered_ids):
            return
        arr = ordered_ids if isinstance(ordered_ids, np.ndarray) else np.fromiter(ordered_ids, np.int64,
                                                                                   len(ordered_ids))
        refs = self.ref_cnt[arr] - 1
        # (count_nonzero: numpy's logical reductions of int arrays cost ~10x more)
        num_held = _count_nonzero(refs)  # blocks other requests still hold (or freed twice: -1)
        if num_held and _count_nonzero(refs < 0):
            raise AssertionError(f"block {int(arr[refs < 0][0])} freed twice")
        self.ref_cnt[arr] = refs
        if not num_held and num_uncached is not None:  # every block idle: the split below, known
            if num_uncached < len(arr):
                self._append(arr[num_uncached:])
            if num_uncached:
                self._prepend(arr[:num_uncached])
            return
        idle = arr[refs == 0] if num_held else arr  # (most blocks are their request's alone)
        n = len(idle)
        if n:
            hashed = self.block_hash[idle] != NO_HASH
            num_hashed = _count_nonzero(hashed)
            num_uncached = n - num_hashed
            if not num_uncached or not num_hashed:
                (self._append if num_hashed else self._prepend)(idle)
            elif _all(hashed[num_uncached:]):  # the usual split: the uncached first (a request's tail block)
                self._append(idle[num_uncached:])
                self._prepend(idle[:num_uncached])
            else:
                self._append(idle[hashed])
                # Prepending keeps the uncached blocks in order at the head: the first becomes the first reused.
                self._prepend(idle[~hashed])

    def register(self, ids: Sequence[int], hashes: Sequence[int]) -> None:
        """Register blocks `ids`, now full of computed (or scheduled) tokens and not yet cached, under `hashes`
        (consecutive positions: a chain of its own, hashed)."""
        self.register_chain(None, list(ids), list(hashes), 0, len(ids))

    def register_chain(self, chain: int | None, block_ids: list[int], block_hashes: list[int], start: int,
                       end: int, hash_blocks: Callable[[int], None] | None = None,
                       ids: np.ndarray | None = None) -> int:
        """Register block_ids[start:end] (consecutive positions of one block list, full and not yet cached)
        under block_hashes[start:end]: in `chain`, the chain these lists already registered into, or in a new
        one (None) which keeps the two lists (the caller only ever appends to them). Returns the chain.
        A new chain made with `hash_blocks` is lazy (module docstring): block_hashes needs only its hashes up to
        `start` (the key), the rest are computed by `hash_blocks(n)` when a lookup walks into the chain; its
        blocks are registered under placeholders, here and in `register_ends`. `ids`: block_ids[start:end] as an
        int64 array, where the caller has one (no list to convert)."""
        if chain is None:
            if len(self._chains) >= self._max_chains:
                self._prune_chains()
            chain = self._num_chains_made = self._num_chains_made + 1
            self._chains[chain] = _Chain(block_ids, block_hashes, start, hash_blocks)
            self._chain_starts.setdefault(block_hashes[start], []).append(chain)
            lazy = hash_blocks is not None
        else:
            lazy = self._chains[chain].hash_blocks is not None
        n = end - start
        order = self._num_registered
        self._num_registered = order + n
        if lazy:
            if n == 1:
                block_id = block_ids[start]
                self._hash_view[block_id] = PLACEHOLDER_BASE - order
                self._chain_view[block_id] = chain
            else:
                if ids is None:
                    ids = np.fromiter(block_ids[start:end], np.int64, n)  # (np.array of a list: ~20 % slower)
                self.block_hash[ids] = PLACEHOLDER_BASE - np.arange(order, order + n)
                self._reg_chain[ids] = chain
        elif n <= 16:
            # Below ~16 blocks (the decodes' filled blocks) numpy's list conversion costs more than the loop.
            registered, orders, chains = self.block_hash, self._reg_order, self._reg_chain
            for k in range(start, end):
                block_id = block_ids[k]
                registered[block_id] = block_hashes[k]
                orders[block_id] = order
                chains[block_id] = chain
                order += 1
        else:
            if ids is None:
                ids = np.fromiter(block_ids[start:end], np.int64, n)
            self.block_hash[ids] = block_hashes[start:end]
            self._reg_order[ids] = np.arange(order, order + n)
            self._reg_chain[ids] = chain
        return chain

    def register_ends(self, chains: Sequence[int], ids: Sequence[int]) -> None:
        """Register one block at the end of each of `chains` (lazy ones), blocks `ids`, in that order."""
        order = self._num_registered
        self._num_registered = order + len(ids)
        registered, reg_chains = self._hash_view, self._chain_view
        for chain, block_id in zip(chains, ids):
            registered[block_id] = PLACEHOLDER_BASE - order
            reg_chains[block_id] = chain
            order += 1

    def _materialize(self, chain_id: int) -> None:
        """Write the real hashes of a lazy chain over the placeholders of its blocks still registered in it."""
        chain = self._chains[chain_id]
        if chain.hash_blocks is None:
            return
        start = chain.start
        ids = np.array(chain.block_ids[start:], dtype=np.int64)
        # Its blocks registered in it and cached; the others are unregistered (the table's tail) or evicted, or
        # registered again by another chain, and never read as this chain's.
        mine = np.flatnonzero((self._reg_chain[ids] == chain_id) & (self.block_hash[ids] < NO_HASH))
        if not len(mine):
            return
        chain.hash_blocks(start + int(mine[-1]) + 1)
        held = ids[mine]
        self._reg_order[held] = PLACEHOLDER_BASE - self.block_hash[held]  # (the placeholders held the orders)
        self.block_hash[held] = np.array(chain.block_hashes[start:start + int(mine[-1]) + 1], dtype=np.int64)[mine]

    def _materialize_all(self) -> None:
        for chain_id in np.unique(self._reg_chain[self.block_hash < NO_HASH]).tolist():
            self._materialize(chain_id)

    def lookup(self, block_hash: int) -> int | None:
        """The block cached under `block_hash` (the earliest registered still cached), or None; O(num_blocks)."""
        self._materialize_all()
        ids = np.flatnonzero(self.block_hash == block_hash)
        if not len(ids):
            return None
        return int(ids[np.argmin(self._reg_order[ids])])

    def may_hit(self, first_block_hash: int) -> bool:
        """Whether some chain starts with `first_block_hash` (else a request starting with it hits nothing)."""
        return first_block_hash in self._chain_starts

    def find_longest_cache_hit(self, block_hashes: Sequence[int], max_num_blocks: int) -> list[int]:
        """The blocks cached under block_hashes[0], [1], ... (a request's chained hashes) up to the first miss, at
        most `max_num_blocks`, each the earliest registered still cached (vLLM's `find_longest_cache_hit`)."""
        starts = self._chain_starts
        if max_num_blocks <= 0 or not block_hashes or block_hashes[0] not in starts:
            return []  # the common miss
        wanted = block_hashes[:max_num_blocks]
        num_wanted = len(wanted)
        found = [(k, chain_id) for k, block_hash in enumerate(wanted) if block_hash in starts
                 for chain_id in starts[block_hash]]
        for _, chain_id in found:  # the only blocks compared below are these chains'
            self._materialize(chain_id)
        if len(found) == 1:  # one chain (a preempted request's own, back): its blocks up to the first not cached
            chain = self._chains[found[0][1]]
            seg = chain.block_ids[chain.start:chain.start + num_wanted]
            held = self.block_hash[np.array(seg, dtype=np.int64)] == np.array(wanted[:len(seg)], dtype=np.int64)
            end = len(seg) if _all(held) else int(np.argmin(held))
            return seg[:end]
        wanted_arr = np.array(wanted, dtype=np.int64)
        # Per chain starting at a wanted position: the order of registration of its block at each position, where
        # that block still holds the wanted hash (else _NEVER), and the block.
        orders = []
        blocks = []
        for k, chain_id in found:
            chain = self._chains[chain_id]
            seg = chain.block_ids[chain.start:chain.start + num_wanted - k]
            ids = np.zeros(num_wanted, dtype=np.int64)
            ids[k:k + len(seg)] = seg
            order = np.full(num_wanted, _NEVER, dtype=np.int64)
            held = self.block_hash[ids[k:k + len(seg)]] == wanted_arr[k:k + len(seg)]
            order[k:k + len(seg)][held] = self._reg_order[ids[k:k + len(seg)][held]]
            orders.append(order)
            blocks.append(ids)
        best = np.argmin(np.stack(orders), axis=0)
        positions = np.arange(num_wanted)
        order, ids = np.stack(orders)[best, positions], np.stack(blocks)[best, positions]
        misses = (order == _NEVER).nonzero()[0]
        end = int(misses[0]) if len(misses) else num_wanted
        return ids[:end].tolist()

    def close_chain(self, chain_id: int) -> None:
        """No more blocks will be registered in the chain (its request freed its blocks)."""
        chain = self._chains.get(chain_id)
        if chain is not None:
            chain.closed = True

    def candidates_closed(self, block_hashes: Sequence[int], max_num_blocks: int) -> bool:
        """Whether every chain that `find_longest_cache_hit(block_hashes, max_num_blocks)` compares is closed: then
        only a new chain can lengthen that hit."""
        starts, chains = self._chain_starts, self._chains
        return all(chains[c].closed for h in block_hashes[:max_num_blocks] if h in starts for c in starts[h])

    def _prune_chains(self) -> None:
        """Drop the chains none of whose blocks are cached any more (their blocks were all evicted or registered
        again by others)."""
        live = np.unique(self._reg_chain[self.block_hash != NO_HASH]).tolist()
        self._chains = {c: self._chains[c] for c in live if c in self._chains}
        starts: dict[int, list[int]] = {}
        for chain_id, chain in self._chains.items():  # in creation order, as the lists were
            starts.setdefault(chain.block_hashes[chain.start], []).append(chain_id)
        self._chain_starts = starts
        self._max_chains = max(2 * len(self._chains), _MIN_MAX_CHAINS)

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
        """Register blocks[start:end] under block_hashes[start:end] (a chain of its own)."""
        self.register_chain(None, [b.block_id for b in blocks], list(block_hashes), start, end)

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
            chain = self._chains[int(self._reg_chain[block_id])]  # a cached block's chain is kept
            position = chain.block_ids.index(block_id)
            if self.block_hash[block_id] < NO_HASH:  # a lazy chain's block not hashed yet (its order in it)
                assert chain.hash_blocks is not None
            else:
                assert chain.block_hashes[position] == self.block_hash[block_id]
            assert position >= chain.start and chain.block_hashes[chain.start] in self._chain_starts
        placeholders = self.block_hash[self.block_hash < NO_HASH]  # each a registration's own order
        assert len(np.unique(placeholders)) == len(placeholders)
