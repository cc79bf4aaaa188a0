"""BlockPool and KVCacheManager: free-queue order, eviction, prefix hits (vLLM V1 semantics). Each test runs on the
Python classes and, where it is built, on the compiled ones (engine.core.compiled_kv)."""

import pytest

from engine.core import CacheConfig, KVCacheManager, Request, SamplingParams
from engine.core.block_hash import ROOT_BLOCK_HASH, block_hash, prompt_block_hashes
from engine.core.block_pool import NO_HASH
from engine.core.compiled_kv import block_pool_classes, kv_cache_manager_classes

POOLS = pytest.mark.parametrize("BlockPool", block_pool_classes(), ids=lambda c: c.__name__)
MANAGERS = pytest.mark.parametrize("KVCacheManager", kv_cache_manager_classes(), ids=lambda c: c.__name__)


def _ids(blocks):
    return [b.block_id for b in blocks]


@POOLS
def test_null_block_is_reserved(BlockPool):
    pool = BlockPool(5)
    assert pool.num_free_blocks == 4
    assert _ids(pool.get_new_blocks(4)) == [1, 2, 3, 4]


@POOLS
def test_freed_cached_blocks_are_evicted_lru_and_tail_first(BlockPool):
    pool = BlockPool(7)
    a = pool.get_new_blocks(3)  # 1 2 3
    b = pool.get_new_blocks(2)  # 4 5
    pool.cache_full_blocks(a, [11, 12, 13], 0, 3)
    pool.cache_full_blocks(b, [21, 22], 0, 2)
    pool.free_blocks(reversed(a))  # request a finishes first, its tail first
    pool.free_blocks(reversed(b))
    # free queue: 6 (never used), then a's chain tail-first, then b's
    assert _ids(pool.get_new_blocks(6)) == [6, 3, 2, 1, 5, 4]
    assert pool.num_cached_blocks == 0  # every cached block was evicted on reuse


@POOLS
def test_freed_uncached_blocks_are_reused_first(BlockPool):
    pool = BlockPool(6)
    a = pool.get_new_blocks(2)  # 1 2
    pool.cache_full_blocks(a, [7], 0, 1)  # block 1 cached, block 2 partial
    pool.free_blocks(reversed(a))
    # the uncached block 2 goes to the head, the cached block 1 to the tail
    assert _ids(pool.get_new_blocks(4)) == [2, 3, 4, 5]
    assert pool.get_cached_block(7) is a[0]


@POOLS
def test_touch_takes_an_evictable_block_out_of_the_free_queue(BlockPool):
    pool = BlockPool(4)
    a = pool.get_new_blocks(1)
    pool.cache_full_blocks(a, [9], 0, 1)
    pool.free_blocks(a)
    assert pool.num_free_blocks == 3
    pool.touch(a)
    assert pool.num_free_blocks == 2 and a[0].ref_cnt == 1
    pool.check_invariants()


@POOLS
def test_freeing_a_block_twice_fails(BlockPool):
    pool = BlockPool(3)
    a = pool.get_new_blocks(1)
    pool.free_blocks(a)
    with pytest.raises(AssertionError, match="freed twice"):
        pool.free_blocks(a)


@POOLS
def test_duplicate_hashes_keep_the_first_block(BlockPool):
    pool = BlockPool(4)
    a, b = pool.get_new_blocks(1), pool.get_new_blocks(1)
    pool.cache_full_blocks(a, [5], 0, 1)
    pool.cache_full_blocks(b, [5], 0, 1)
    assert pool.get_cached_block(5) is a[0]
    pool.free_blocks(a)
    pool.get_new_blocks(2)  # evicts a's block (after the never-used one)
    assert pool.get_cached_block(5) is b[0]
    pool.check_invariants()


@POOLS
def test_chains_of_evicted_blocks_are_dropped_and_lookups_unchanged(BlockPool):
    pool = BlockPool(6)
    pool._max_chains = 2  # prune at every third chain
    a = pool.get_new_blocks(2)  # 1 2
    pool.cache_full_blocks(a, [31, 32], 0, 2)
    pool.free_blocks(reversed(a))
    b = pool.get_new_blocks(3)  # 3 4 5 (never used first)
    pool.cache_full_blocks(b, [41, 42, 43], 0, 3)
    assert pool.find_longest_cache_hit([31, 32], 2) == [1, 2]
    c = pool.get_new_blocks(2)  # 2 1: evicts a's chain, tail first
    pool.cache_full_blocks(c, [31, 52], 0, 2)  # a third chain: a's, evicted, is dropped
    assert pool.num_live_chains == 2
    assert pool.find_longest_cache_hit([31, 32], 2) == [2]
    assert pool.find_longest_cache_hit([41, 42, 43], 3) == [3, 4, 5]
    pool.check_invariants()


def _req(tokens, rid="r"):
    return Request(rid, tokens, SamplingParams(max_tokens=8))


@MANAGERS
def test_prefix_hit_stops_one_token_short_of_the_prompt(KVCacheManager):
    kv = KVCacheManager(CacheConfig(num_blocks=20, block_size=4), max_model_len=100)
    first = _req(list(range(100, 108)), "a")  # two full blocks
    kv.update_block_hashes(first)
    assert kv.allocate_slots(first, 8)
    same = _req(list(range(100, 108)), "b")
    kv.update_block_hashes(same)
    blocks, num_hit = kv.get_computed_blocks(same)
    # 8 tokens hit at most 7, rounded down to whole blocks: the second block is recomputed
    assert num_hit == 4 and blocks == first.block_ids[:1]
    longer = _req(list(range(100, 109)), "c")
    kv.update_block_hashes(longer)
    assert kv.get_computed_blocks(longer)[1] == 8


@MANAGERS
def test_hit_chain_breaks_at_first_differing_block(KVCacheManager):
    kv = KVCacheManager(CacheConfig(num_blocks=20, block_size=2), max_model_len=100)
    first = _req([1, 2, 3, 4, 5, 6, 7], "a")
    kv.update_block_hashes(first)
    assert kv.allocate_slots(first, 7)
    other = _req([1, 2, 9, 9, 5, 6, 7], "b")  # block 2 equals, but its parent differs
    kv.update_block_hashes(other)
    assert kv.get_computed_blocks(other)[1] == 2


@MANAGERS
def test_allocate_counts_evictable_hit_blocks_against_free_blocks(KVCacheManager):
    kv = KVCacheManager(CacheConfig(num_blocks=4, block_size=2), max_model_len=100)
    a = _req([1, 2, 3, 4, 5], "a")
    kv.update_block_hashes(a)
    assert kv.allocate_slots(a, 5)  # 3 blocks: all usable ones
    kv.free(a)
    b = _req([1, 2, 3, 4, 6], "b")
    kv.update_block_hashes(b)
    hits, num_hit = kv.get_computed_blocks(b)
    assert num_hit == 4 and all(kv.pool.blocks[h].ref_cnt == 0 for h in hits)
    assert kv.allocate_slots(b, 1, hits)  # 2 evictable hits + 1 new block = 3 free blocks
    assert kv.num_free_blocks == 0
    kv.pool.check_invariants()


@MANAGERS
def test_failed_allocation_changes_nothing(KVCacheManager):
    kv = KVCacheManager(CacheConfig(num_blocks=3, block_size=2), max_model_len=100)
    a = _req([1, 2, 3, 4, 5], "a")
    kv.update_block_hashes(a)
    assert not kv.allocate_slots(a, 5)
    assert a.block_ids == [] and kv.num_free_blocks == 2


@MANAGERS
def test_a_chain_is_hashed_when_a_lookup_walks_into_it(KVCacheManager):
    kv = KVCacheManager(CacheConfig(num_blocks=20, block_size=4), max_model_len=100)
    a = _req(list(range(100, 112)), "a")  # three full blocks
    assert kv.get_computed_blocks(a) == ([], 0) and len(a.block_hashes) == 1  # a miss needs the first hash only
    assert kv.allocate_slots(a, 12)
    pool = kv.pool
    assert len(a.block_hashes) == 1 and (pool.block_hash[a.block_ids] < NO_HASH).all()  # placeholders
    pool.check_invariants()
    other = _req(list(range(200, 213)), "other")
    assert kv.get_computed_blocks(other) == ([], 0) and len(a.block_hashes) == 1  # another first block: no walk
    b = _req(list(range(100, 113)), "b")
    assert kv.get_computed_blocks(b) == (a.block_ids, 12)
    expected = prompt_block_hashes(ROOT_BLOCK_HASH, a.prompt_array, 0, 4)
    assert a.block_hashes == expected and pool.block_hash[a.block_ids].tolist() == expected
    assert [pool.blocks[i].block_hash for i in a.block_ids] == expected
    pool.check_invariants()


@MANAGERS
def test_lazy_hashes_equal_the_eager_ones_across_outputs(KVCacheManager):
    kv = KVCacheManager(CacheConfig(num_blocks=20, block_size=4), max_model_len=100)
    a, b = _req(list(range(100, 106)), "a"), _req(list(range(100, 106)), "b")
    for tokens in ([7, 7], [7, 7, 7, 7], [8, 7, 7, 9]):  # one partly prompt, one of a repeated token, one mixed
        a._output_ids.extend(tokens)
        b._output_ids.extend(tokens)
        kv.ensure_block_hashes(a, a.num_tokens // 4)
    kv.update_block_hashes(b)
    assert a.block_hashes == b.block_hashes == [
        block_hash(ROOT_BLOCK_HASH if k == 0 else a.block_hashes[k - 1], a.token_ids(4 * k, 4 * k + 4), 4 * k)
        for k in range(4)]


# ---- hybrid models: sliding-window groups in the same pool (vLLM 0.32's hybrid allocator) ----------------------

def _hybrid_kv(num_blocks: int = 64, cap: int = 100) -> KVCacheManager:
    # One sliding group with a window of 8 tokens (2 blocks of 4) beside the full group.
    return KVCacheManager(CacheConfig(num_blocks=num_blocks, block_size=4, enable_prefix_caching=False,
                                      num_sliding_groups=1, sliding_window=8, sliding_admission_cap_blocks=cap),
                          max_model_len=1000)


def _advance(kv: KVCacheManager, req: Request, num_new: int) -> bool:
    if not kv.allocate_slots(req, num_new):
        return False
    req.num_computed_tokens += num_new
    return True


def test_sliding_group_takes_a_block_for_every_new_block_of_a_chunk():
    kv = _hybrid_kv()
    a = _req(list(range(1, 21)), "a")  # 20 tokens = 5 blocks of 4
    assert _advance(kv, a, 20)
    assert len(a.block_ids) == 5 and len(a.sliding_block_ids) == 5  # the whole chunk, both groups
    assert kv.num_used_blocks == 10
    kv.pool.check_invariants()


def test_sliding_blocks_leave_as_the_window_passes_them():
    kv = _hybrid_kv()
    a = _req(list(range(1, 21)), "a")
    assert _advance(kv, a, 20)
    a.append_output_token(7, None)
    # The next step frees the blocks whose tokens all precede computed - window + 1 = 13: blocks 0-2 (tokens
    # 0-11), then takes block 5 for token 20 in both groups (vLLM's remove_skipped_blocks before allocating).
    assert _advance(kv, a, 1)
    assert a.sliding_first_block == 3 and len(a.sliding_block_ids) == 3  # blocks 3, 4, 5
    assert len(a.block_ids) == 6 and kv.num_used_blocks == 9
    kv.free(a)
    assert kv.num_used_blocks == 0 and a.sliding_block_ids == [] and a.sliding_first_block == 0
    kv.pool.check_invariants()


def test_admission_reserves_the_whole_sequence_in_the_sliding_group_up_to_its_cap():
    # 19 free blocks: a 40-token prompt needs 10 full blocks and, for the sliding group, min(10, cap) blocks.
    assert not _hybrid_kv(num_blocks=20).allocate_slots(_req(list(range(1, 41)), "a"), 8, full_sequence_must_fit=True)
    kv = _hybrid_kv(num_blocks=20, cap=4)
    a = _req(list(range(1, 41)), "a")
    assert kv.allocate_slots(a, 8, full_sequence_must_fit=True)  # 10 + 4 <= 19
    assert len(a.block_ids) == 2 and len(a.sliding_block_ids) == 2  # the first chunk only is allocated


@MANAGERS
def test_dense_cache_holds_no_sliding_blocks(KVCacheManager):
    kv = KVCacheManager(CacheConfig(num_blocks=64, block_size=4, enable_prefix_caching=False), max_model_len=1000)
    a = _req(list(range(1, 21)), "a")
    assert _advance(kv, a, 20) and a.sliding_block_ids == [] and kv.num_used_blocks == 5


def test_sliding_settings_without_groups_are_refused():
    with pytest.raises(ValueError, match="num_sliding_groups"):
        CacheConfig(num_blocks=8, sliding_window=128)
