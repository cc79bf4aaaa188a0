"""Per-request KV block tables and prefix caching over a `BlockPool` (vLLM V1 `kv_cache_manager.py`,
`single_type_kv_cache_manager.py` for full attention, `kv_cache_utils.py` for the hashes).

    kv = KVCacheManager(CacheConfig(num_blocks=1024, block_size=16), max_model_len=4096)
    hit_block_ids, num_hit_tokens = kv.get_computed_blocks(req)
    if kv.allocate_slots(req, num_new_tokens, hit_block_ids):   # False: does not fit, nothing changed
        ...                                            # req.block_ids: the block table
    kv.allocate_decode_slots(opening_reqs, filling_reqs)         # many one-token decodes at once (fast path)
    kv.free(req)                                       # tail block first

Prefix caching: every full block of a request's tokens (prompt and generated) gets a hash of all tokens from the
start of the request to its end (`engine.core.block_hash`, chained from block to block as vLLM chains
`hash((parent_hash, tokens_of_block))`); a block is reused only if all blocks before it were too. Hashes are
deterministic (no per-process salt), so schedules are reproducible. They are computed when first needed
(`ensure_block_hashes`): a lookup needs the first block's, and the rest only if some chain starts with it; a
chain is registered with the hash of its first block and placeholders (`BlockPool.register_chain`'s lazy
chains), and hashed when a lookup walks into it. Most requests are never hashed past their first block.
A full hit still recomputes the last prompt token to get its logits: hits are capped at `num_tokens - 1` tokens,
rounded down to whole blocks, so a prompt that is an exact multiple of the block size recomputes its whole last
block (as vLLM does). Blocks are registered in the cache as soon as they are full of *scheduled* tokens (vLLM
caches in `allocate_slots`, before the step runs; a request admitted later in the same step may hit them, which is
why the engine writes all new KV of a layer before attention reads it).

Hybrid models (`CacheConfig.num_sliding_groups`, gpt-oss: sliding-window and full-attention layers) take blocks
for their sliding groups from the same pool, as vLLM 0.32's hybrid allocator does (vllm/v1/core/kv_cache_manager.py
`allocate_slots`, single_type_kv_cache_manager.py `SlidingWindowManager`): each step first frees the blocks whose
tokens all left the window of the computed tokens (`remove_skipped_blocks`: tokens before num_computed - window + 1),
then each sliding group takes a block for every new block index of the step, like the full group; an admission
(`full_sequence_must_fit`) also needs room for the whole sequence in every sliding group, capped at
`sliding_admission_cap_blocks` (`apply_admission_cap`). `req.block_ids` stays the full-attention table; the sliding
groups' blocks are held uncached in `req.sliding_block_ids`. Not mirrored: prefix-cache hits of the sliding groups
(a hit's window, at most window / block_size + 1 blocks a group, is allocated anew instead of reused).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import partial

import numpy as np

from engine.core.block_hash import MASK_63, ROOT_BLOCK_HASH, block_hash, constant_block_terms, prompt_block_hashes
from engine.core.block_pool import BlockPool
from engine.core.config import CacheConfig
from engine.core.request import NO_BLOCK_IDS, Request


class KVCacheManager:
    def __init__(self, cache: CacheConfig, max_model_len: int, watermark: float = 0.0) -> None:
        self.block_size = cache.block_size
        self.enable_caching = cache.enable_prefix_caching
        self.max_model_len = max_model_len
        self.pool = BlockPool(cache.num_blocks)
        self.num_sliding_groups = cache.num_sliding_groups
        self.sliding_window = cache.sliding_window
        self.sliding_cap = cache.sliding_admission_cap_blocks
        # vLLM: int(watermark * num_blocks), kept free when admitting waiting or preempted requests.
        self.watermark_blocks = int(watermark * cache.num_blocks)
        # Free blocks the last allocation that returned False needed (more than there were).
        self.failed_need = 0

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
        """Hash every full block of `req` now (no-op without prefix caching); the scheduler leaves it to
        `ensure_block_hashes`, on demand."""
        if self.enable_caching:
            self.ensure_block_hashes(req, req.num_tokens // self.block_size)

    def ensure_block_hashes(self, req: Request, num_blocks: int) -> None:
        """Extend `req.block_hashes` to the first `num_blocks` blocks (full, of known tokens): those inside the
        prompt by array operations on its ids, the others one by one (a block of one repeated token, the
        simulator's generated ones, by one multiplication)."""
        hashes = req.block_hashes
        num_hashed = len(hashes)
        if num_blocks <= num_hashed:
            return
        bs = self.block_size
        parent = hashes[-1] if hashes else ROOT_BLOCK_HASH
        num_prompt_blocks = min(num_blocks, req.num_prompt_tokens // bs)
        if num_prompt_blocks == num_hashed + 1:  # one block (a chain's first): fewer numpy calls
            hashes.append(block_hash(parent, req.prompt_array[num_hashed * bs:num_prompt_blocks * bs], num_hashed * bs))
        elif num_prompt_blocks > num_hashed:
            hashes.extend(prompt_block_hashes(parent, req.prompt_array[num_hashed * bs:num_prompt_blocks * bs],
                                              num_hashed * bs, bs))
        for k in range(len(hashes), num_blocks):
            tokens = req.token_ids(k * bs, (k + 1) * bs)
            parent = hashes[-1] if hashes else ROOT_BLOCK_HASH
            if tokens.count(tokens[0]) == bs:
                weight, sums = constant_block_terms(tokens[0], (k + 1) * bs + 1)
                hashes.append((parent + weight * (sums[(k + 1) * bs] - sums[k * bs])) & MASK_63)
            else:
                hashes.append(block_hash(parent, tokens, k * bs))

    def get_computed_blocks(self, req: Request) -> tuple[list[int], int]:
        """The longest run of cached full blocks from the start of `req`, at most `num_tokens - 1` tokens: their
        ids and the number of tokens they hold."""
        if not self.enable_caching:
            return [], 0
        max_num_blocks = (req.num_tokens - 1) // self.block_size
        if max_num_blocks <= 0:
            return [], 0
        # A hit starts at the first block: the rest of the request is hashed only if some chain starts there.
        self.ensure_block_hashes(req, 1)
        if not self.pool.may_hit(req.block_hashes[0]):
            return [], 0
        self.ensure_block_hashes(req, max_num_blocks)
        hits = self.pool.find_longest_cache_hit(req.block_hashes, max_num_blocks)
        return hits, len(hits) * self.block_size

    def _register(self, req: Request, start: int, end: int) -> None:
        """Register req.block_ids[start:end] in its chain, lazily hashed; a new chain needs its first hash."""
        chain = req.cache_chain
        head = req.block_ids_head
        ids = head[start:end] if end <= len(head) else None
        if chain is None:
            self.ensure_block_hashes(req, start + 1)
            req.cache_chain = self.pool.register_chain(None, req.block_ids, req.block_hashes, start, end,
                                                       partial(self.ensure_block_hashes, req), ids)
        else:
            self.pool.register_chain(chain, req.block_ids, req.block_hashes, start, end, ids=ids)

    def allocate_slots(
        self,
        req: Request,
        num_new_tokens: int,
        new_computed_block_ids: Sequence[int] = (),
        full_sequence_must_fit: bool = False,
        apply_watermark: bool = False,
    ) -> bool:
        """Give `req` slots for `num_new_tokens` more tokens after its computed ones and the prefix hit
        `new_computed_block_ids`. Returns False, changing nothing, if the free blocks do not suffice.

            | computed | new_computed (hit) | new tokens |   <- slots needed
                       |<-- touched  -->|<-- allocated -->|

        `full_sequence_must_fit` (vLLM's scheduler_reserve_full_isl, for admissions) also requires room for
        all of the request's current tokens, not only this chunk. Hit blocks sitting in the free queue
        (ref_cnt 0) count against the free blocks, since taking them removes them from the queue.
        """
        num_computed = req.num_computed_tokens
        bs = self.block_size
        if num_new_tokens == 1 and 0 < num_computed % bs < bs - 1 and not (
            new_computed_block_ids or full_sequence_must_fit or apply_watermark
        ) and not (self.num_sliding_groups and (num_computed - self.sliding_window + 1) % bs == 0):
            return True  # the common decode: its slot is in the last block held, which it does not fill
        return self.allocate(req, num_computed, req.num_tokens, num_new_tokens, new_computed_block_ids,
                             full_sequence_must_fit, apply_watermark)

    def allocate(
        self,
        req: Request,
        num_computed_tokens: int,
        num_tokens: int,
        num_new_tokens: int,
        hit_ids: Sequence[int] = (),
        full_sequence_must_fit: bool = False,
        apply_watermark: bool = False,
    ) -> bool:
        """`allocate_slots` with the request's computed and total tokens given (the fast path keeps them in
        its columns)."""
        bs = self.block_size
        pool = self.pool
        num_hit = len(hit_ids)
        num_computed = num_computed_tokens + num_hit * bs
        num_held_before = len(req.block_ids)
        num_held = num_held_before + num_hit
        num_required_free = self.watermark_blocks if apply_watermark else 0
        hit_array = NO_BLOCK_IDS
        if num_hit:
            hit_array = np.asarray(hit_ids, dtype=np.int64)
            num_required_free += int(np.count_nonzero(pool.ref_cnt[hit_array] == 0))
        num_free = pool.num_free_blocks
        sliding = self.num_sliding_groups
        if full_sequence_must_fit:
            num_full = min(num_tokens, self.max_model_len)
            need = -(-num_full // bs) - num_held + num_required_free
            if sliding:
                need += sliding * self._sliding_blocks_to_reserve(req, num_full, num_computed, num_held)
            if need > num_free:
                self.failed_need = need
                return False
        end_block = -(-min(num_computed + num_new_tokens, self.max_model_len) // bs)
        num_to_allocate = end_block - num_held
        num_sliding_new = 0
        if sliding:
            num_free += self._free_skipped_sliding_blocks(req, num_computed, num_held)
            num_sliding_new = sliding * (end_block - req.sliding_first_block - len(req.sliding_block_ids) // sliding)
        if num_to_allocate + num_sliding_new + num_required_free > num_free:
            self.failed_need = num_to_allocate + num_sliding_new + num_required_free
            return False
        if num_sliding_new > 0:
            self._allocate_sliding(req, end_block)
        if num_hit:
            pool.touch_ids(hit_array)
            req.block_ids.extend(hit_ids)
            req.num_cached_blocks = num_hit
        new_ids = NO_BLOCK_IDS
        if num_to_allocate > 0:
            new_ids = pool.allocate_array(num_to_allocate)
            req.block_ids.extend(new_ids.tolist())
        if len(req.block_ids_head) == num_held_before and len(req.block_ids) > num_held_before:
            # The head held every block: it takes these runs too.
            req.block_ids_head = new_ids if not num_held else np.concatenate((req.block_ids_head, hit_array, new_ids))
        if self.enable_caching:
            # Register blocks full of scheduled tokens; generated tokens not yet sampled are never cached.
            num_full_blocks = min(num_computed + num_new_tokens, num_tokens) // bs
            num_cached = req.num_cached_blocks
            if num_full_blocks > num_cached:
                self._register(req, num_cached, num_full_blocks)
                req.num_cached_blocks = num_full_blocks
        return True

    def _sliding_blocks_to_reserve(self, req: Request, num_tokens: int, num_computed: int, num_held: int) -> int:
        """Blocks one sliding group still needs for `num_tokens` tokens at admission (vLLM's
        `get_num_blocks_to_allocate` with `apply_admission_cap`): the whole sequence's, capped, less the blocks
        it holds or skips (the window's start, or a prefix hit's length: its blocks are not reserved here)."""
        required = min(-(-num_tokens // self.block_size), self.sliding_cap)
        first = max(self._skipped_blocks(num_computed), num_held)
        if req.sliding_block_ids:
            first = req.sliding_first_block + len(req.sliding_block_ids) // self.num_sliding_groups
        return max(required - first, 0)

    def _skipped_blocks(self, num_computed: int) -> int:
        """Leading blocks whose tokens all left the window of `num_computed` computed tokens (vLLM
        `SlidingWindowManager.get_num_skipped_tokens`: num_computed - window + 1)."""
        return max(0, num_computed - self.sliding_window + 1) // self.block_size

    def _free_skipped_sliding_blocks(self, req: Request, num_computed: int, num_held: int) -> int:
        """`remove_skipped_blocks`: free the sliding blocks out of the window (also when the allocation then
        fails, as vLLM does); a request holding none starts its table at the window (or its prefix hit).
        Returns how many blocks went back to the pool."""
        groups = self.num_sliding_groups
        skipped = self._skipped_blocks(num_computed)
        ids = req.sliding_block_ids
        if not ids:
            req.sliding_first_block = max(skipped, num_held)
            return 0
        num_drop = min(skipped - req.sliding_first_block, len(ids) // groups)
        if num_drop <= 0:
            return 0
        dropped = ids[:num_drop * groups]
        del ids[:num_drop * groups]
        req.sliding_first_block += num_drop
        self.pool.free(dropped)
        return len(dropped)

    def _allocate_sliding(self, req: Request, end_block: int) -> None:
        """Each sliding group takes a block for every block index up to `end_block` it does not hold."""
        groups = self.num_sliding_groups
        ids = req.sliding_block_ids
        num_new = end_block - req.sliding_first_block - len(ids) // groups
        if num_new > 0:
            ids.extend(self.pool.allocate(num_new * groups))

    def allocate_decode_slots(self, opening: Collection[Request], filling: Collection[Request]) -> None:
        """`allocate_slots(req, 1)` for many running requests at once, in queue order, each computing one token
        that either opens a block (`opening`: one new block each) or fills its last block (`filling`: registered
        in the prefix cache; none without caching); the caller checked that the free blocks suffice. The new
        blocks come off the free queue in the order of `opening`, as one `allocate_slots` after another would
        take them; registering and evicting commute, since a registered block is in use and the map keeps
        registration order."""
        if opening:
            for req, block_id in zip(opening, self.pool.allocate(len(opening))):
                req.block_ids.append(block_id)
        if filling:
            pool = self.pool
            block_ids: list[int] = []
            chains: list[int] = []
            for req in filling:
                k = req.num_cached_blocks
                chain = req.cache_chain
                if chain is None:  # its block list's first block of its own: a new chain (after the ones before)
                    if block_ids:
                        pool.register_ends(chains, block_ids)
                        block_ids, chains = [], []
                    self._register(req, k, k + 1)
                else:
                    block_ids.append(req.block_ids[k])
                    chains.append(chain)
                req.num_cached_blocks = k + 1
            if block_ids:
                pool.register_ends(chains, block_ids)

    def free(self, req: Request) -> None:
        """Release all blocks of `req`, last block first so a chain is evicted from its tail."""
        head, ids = req.block_ids_head, req.block_ids
        # Its first num_cached_blocks blocks are in the prefix cache (registered, or hits), the others not: a block
        # in use is never evicted, and its table is registered from the front.
        num_uncached = len(ids) - req.num_cached_blocks
        if not len(head):
            self.pool.free(ids[::-1], num_uncached)
        else:  # only the blocks appended after the head are converted
            tail = ids[len(head):]
            tail.reverse()
            self.pool.free(np.concatenate((np.fromiter(tail, np.int64, len(tail)), head[::-1])) if tail else head[::-1],
                           num_uncached)
        req.block_ids = []
        req.block_ids_head = NO_BLOCK_IDS
        req.num_cached_blocks = 0
        if req.sliding_block_ids:
            self.pool.free(req.sliding_block_ids[::-1])
            req.sliding_block_ids = []
        req.sliding_first_block = 0
        if req.cache_chain is not None:
            self.pool.close_chain(req.cache_chain)
            req.cache_chain = None
