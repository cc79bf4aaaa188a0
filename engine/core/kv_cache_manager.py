"""Per-request KV block tables and prefix caching over a `BlockPool` (vLLM V1 `kv_cache_manager.py`,
`single_type_kv_cache_manager.py` for full attention, `kv_cache_utils.py` for the hashes).

    kv = KVCacheManager(CacheConfig(num_blocks=1024, block_size=16), max_model_len=4096)
    kv.update_block_hashes(req)                       # after tokens are appended
    hit_blocks, num_hit_tokens = kv.get_computed_blocks(req)
    if kv.allocate_slots(req, num_new_tokens, hit_blocks):   # False: does not fit, nothing changed
        ...
    kv.free(req)                                       # tail block first

Prefix caching: every full block of a request's tokens (prompt and generated) gets a hash chained to the
hash of the block before it, `hash((parent_hash, tokens_of_block))`; a block is reused only if all blocks
before it were too. Python hashes tuples of ints the same in every run (PYTHONHASHSEED only salts str and
bytes), so schedules are reproducible. A full hit still recomputes the last prompt token to get its logits:
hits are capped at `num_tokens - 1` tokens, rounded down to whole blocks, so a prompt that is an exact
multiple of the block size recomputes its whole last block (as vLLM does). Blocks are registered in the
cache as soon as they are full of *scheduled* tokens (vLLM caches in `allocate_slots`, before the step runs;
a request admitted later in the same step may hit them, which is why the engine writes all new KV of a
layer before attention reads it).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.core.block_pool import BlockPool, KVCacheBlock
from engine.core.config import CacheConfig
from engine.core.request import Request

# Parent hash of a request's first block; any fixed int does (vLLM seeds NONE_HASH from PYTHONHASHSEED).
ROOT_BLOCK_HASH = 0x5EED_B10C


def hash_block_tokens(parent_hash: int, token_ids: tuple[int, ...]) -> int:
    return hash((parent_hash, token_ids))


class KVCacheManager:
    def __init__(self, cache: CacheConfig, max_model_len: int, watermark: float = 0.0) -> None:
        self.block_size = cache.block_size
        self.enable_caching = cache.enable_prefix_caching
        self.max_model_len = max_model_len
        self.pool = BlockPool(cache.num_blocks)
        # vLLM: int(watermark * num_blocks), kept free when admitting waiting or preempted requests.
        self.watermark_blocks = int(watermark * cache.num_blocks)

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.pool.num_used_blocks

    @property
    def num_usable_blocks(self) -> int:
        return self.pool.num_usable_blocks

    def update_block_hashes(self, req: Request) -> None:
        """Hash the blocks of `req` that became full since the last call (no-op without prefix caching)."""
        if not self.enable_caching:
            return
        bs = self.block_size
        hashes = req.block_hashes
        tokens = req.all_token_ids
        parent = hashes[-1] if hashes else ROOT_BLOCK_HASH
        for i in range(len(hashes), len(tokens) // bs):
            parent = hash_block_tokens(parent, tuple(tokens[i * bs : (i + 1) * bs]))
            hashes.append(parent)

    def get_computed_blocks(self, req: Request) -> tuple[list[KVCacheBlock], int]:
        """The longest run of cached full blocks from the start of `req`, at most `num_tokens - 1` tokens."""
        if not self.enable_caching:
            return [], 0
        get = self.pool.get_cached_block
        hits: list[KVCacheBlock] = []
        for block_hash in req.block_hashes[: (req.num_tokens - 1) // self.block_size]:
            block = get(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits, len(hits) * self.block_size

    def allocate_slots(
        self,
        req: Request,
        num_new_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock] = (),
        full_sequence_must_fit: bool = False,
        apply_watermark: bool = False,
    ) -> bool:
        """Give `req` slots for `num_new_tokens` more tokens after its computed ones and the prefix hit
        `new_computed_blocks`. Returns False, changing nothing, if the free blocks do not suffice.

            | computed | new_computed (hit) | new tokens |   <- slots needed
                       |<-- touched  -->|<-- allocated -->|

        `full_sequence_must_fit` (vLLM's scheduler_reserve_full_isl, for admissions) also requires room for
        all of the request's current tokens, not only this chunk. Hit blocks sitting in the free queue
        (ref_cnt 0) count against the free blocks, since taking them removes them from the queue.
        """
        bs = self.block_size
        pool = self.pool
        num_hit = len(new_computed_blocks)
        num_computed = req.num_computed_tokens + num_hit * bs
        num_held = len(req.blocks) + num_hit
        num_required_free = self.watermark_blocks if apply_watermark else 0
        if num_hit:
            num_required_free += sum(1 for b in new_computed_blocks if b.ref_cnt == 0)
        num_free = pool.num_free_blocks
        if full_sequence_must_fit:
            num_full = min(req.num_tokens, self.max_model_len)
            if -(-num_full // bs) - num_held + num_required_free > num_free:
                return False
        num_to_allocate = -(-min(num_computed + num_new_tokens, self.max_model_len) // bs) - num_held
        if num_to_allocate + num_required_free > num_free:
            return False
        if num_hit:
            pool.touch(new_computed_blocks)
            req.blocks.extend(new_computed_blocks)
            req.num_cached_blocks = num_hit
            req.block_table += tuple([b.block_id for b in new_computed_blocks])
        if num_to_allocate > 0:
            new_blocks = pool.get_new_blocks(num_to_allocate)
            req.blocks.extend(new_blocks)
            req.block_table += tuple([b.block_id for b in new_blocks])
        if self.enable_caching:
            # Register blocks full of scheduled tokens; generated tokens not yet sampled are never cached.
            num_full_blocks = min(num_computed + num_new_tokens, req.num_tokens) // bs
            if num_full_blocks > req.num_cached_blocks:
                pool.cache_full_blocks(req.blocks, req.block_hashes, req.num_cached_blocks, num_full_blocks)
                req.num_cached_blocks = num_full_blocks
        return True

    def free(self, req: Request) -> None:
        """Release all blocks of `req`, last block first so a chain is evicted from its tail."""
        self.pool.free_blocks(reversed(req.blocks))
        req.blocks = []
        req.num_cached_blocks = 0
        req.block_table = ()
