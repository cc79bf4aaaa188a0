"""The compiled block pool and KV cache manager (`engine/core/_kvcore.c`), behind the Python classes' interfaces.

    from engine.core.compiled_kv import COMPILED, new_kv_cache_manager
    kv = new_kv_cache_manager(cache, max_model_len, watermark)   # the compiled one where built, else the Python one

`CompiledBlockPool` and `CompiledKVCacheManager` give the same results as `BlockPool` and `KVCacheManager` (the
reference: every block id, prefix hit and eviction the same; tests/test_core_block_pool.py and
tests/test_core_properties.py run both), in C: the simulator's step loop spends half its time in these two
(docs/benchmark-history/2026-11-30d-speed.md), most of it in numpy calls on a few block ids each.

The extension is optional: `pip install -e .` builds it where a C compiler is found (setup.py) and the package
runs on the Python classes where it is not. `ROOFLINE_PURE_PYTHON=1` (any value but empty, 0, false or no) in the
environment selects the Python classes even where it is built (read once, at import). A hybrid model's cache
(sliding-window groups) always uses the Python manager: the compiled one has no sliding groups.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.core.block_pool import NO_HASH, BlockPool, KVCacheBlock, _BlockViews
from engine.core.config import CacheConfig
from engine.core.kv_cache_manager import KVCacheManager

# Whether the extension is built, and whether `new_kv_cache_manager` gives the compiled manager (built, and not turned
# off by ROOFLINE_PURE_PYTHON): engine.core.native.
from engine.core.native import BUILT, COMPILED, _kvcore
from engine.core.request import NO_BLOCK_IDS, Request

if _kvcore is not None:
    # The extension reads and writes a Request's slots at their offsets (generic attribute calls for anything else;
    # a build from before this binding: always).
    if hasattr(_kvcore, "bind_request_type"):
        _kvcore.bind_request_type(Request)

    class CompiledBlockPool(_kvcore.BlockPoolCore, BlockPool):
        """`BlockPool` in C: the free queue, reference counts, chains and lookups are `BlockPoolCore`'s; the
        numpy-array flavours of its operations, the block views and the checks are here (`BlockPool`'s where the
        same code reads both)."""

        def __init__(self, num_blocks: int) -> None:
            assert num_blocks >= 2
            self.ref_cnt = np.zeros(num_blocks, np.int64)
            self.block_hash = np.full(num_blocks, NO_HASH, np.int64)
            self._reg_order = np.zeros(num_blocks, np.int64)
            self._reg_chain = np.zeros(num_blocks, np.int64)
            _kvcore.BlockPoolCore.__init__(self, num_blocks, self.ref_cnt, self.block_hash, self._reg_order,
                                           self._reg_chain)
            self._views: list[KVCacheBlock | None] = [None] * num_blocks
            self.blocks = _BlockViews(self)
            self.null_block = self.blocks[0]

        def allocate_array(self, n: int, keep: bool = True) -> np.ndarray:
            return np.array(self.allocate(n), dtype=np.int64)

        def register(self, ids: Sequence[int], hashes: Sequence[int]) -> None:
            self.register_chain(None, list(ids), list(hashes), 0, len(ids))

        def check_invariants(self) -> None:
            """Blocks are conserved and reference counts and the map consistent; for tests (O(num_blocks))."""
            queued = self._free_queue()
            assert len(queued) == self.num_free_blocks == len(set(queued))
            assert 0 not in queued
            assert (self.ref_cnt >= 0).all()
            free = np.zeros(self.num_blocks, bool)
            free[queued] = True
            assert ((self.ref_cnt[1:] == 0) == free[1:]).all()
            for block_id in np.flatnonzero(self.block_hash != NO_HASH).tolist():
                info = self._chain_info(int(self._reg_chain[block_id]))
                assert info is not None  # a cached block's chain is kept
                block_ids, block_hashes, start, lazy, _ = info
                position = block_ids.index(block_id)
                if self.block_hash[block_id] < NO_HASH:
                    assert lazy
                else:
                    assert block_hashes[position] == self.block_hash[block_id]
                assert position >= start and block_hashes[start] in self._chain_starts
            placeholders = self.block_hash[self.block_hash < NO_HASH]
            assert len(np.unique(placeholders)) == len(placeholders)

    class CompiledKVCacheManager(_kvcore.KVCacheManagerCore, KVCacheManager):
        """`KVCacheManager` in C for a cache without sliding-window groups: `allocate`, `allocate_slots`,
        `allocate_decode_slots`, `free` and `get_computed_blocks` are `KVCacheManagerCore`'s; the block hashes
        (`ensure_block_hashes`, called back from C when a lookup needs them) are `KVCacheManager`'s. It leaves
        `Request.block_ids_head` empty (C reads the block list itself; the head is the Python manager's shortcut)."""

        def __init__(self, cache: CacheConfig, max_model_len: int, watermark: float = 0.0) -> None:
            if cache.num_sliding_groups:
                raise ValueError("CompiledKVCacheManager: num_sliding_groups must be 0 (use KVCacheManager)")
            _kvcore.KVCacheManagerCore.__init__(
                self, CompiledBlockPool(cache.num_blocks), cache.block_size, max_model_len,
                int(watermark * cache.num_blocks), cache.enable_prefix_caching, KVCacheManager.ensure_block_hashes,
                NO_BLOCK_IDS)
            self.num_sliding_groups = 0
            self.sliding_window = cache.sliding_window
            self.sliding_cap = cache.sliding_admission_cap_blocks


def kv_cache_manager_class(cache: CacheConfig) -> type[KVCacheManager]:
    """The manager `new_kv_cache_manager` makes for `cache`."""
    if COMPILED and not cache.num_sliding_groups:
        return CompiledKVCacheManager
    return KVCacheManager


def new_kv_cache_manager(cache: CacheConfig, max_model_len: int, watermark: float = 0.0) -> KVCacheManager:
    """The compiled manager where it is built and selected (`COMPILED`) and the cache has no sliding groups, else
    the Python one."""
    return kv_cache_manager_class(cache)(cache, max_model_len, watermark)


def block_pool_classes() -> list[type[BlockPool]]:
    """Every block pool implementation available here (the Python one first), for tests."""
    return [BlockPool] + ([CompiledBlockPool] if BUILT else [])


def kv_cache_manager_classes() -> list[type[KVCacheManager]]:
    """Every KV cache manager implementation available here (the Python one first), for tests."""
    return [KVCacheManager] + ([CompiledKVCacheManager] if BUILT else [])
