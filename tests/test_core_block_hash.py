import numpy as np
import pytest

from engine.core import CacheConfig, KVCacheManager, Request, SamplingParams
from engine.core.block_hash import (
    MASK_63,
    ROOT_BLOCK_HASH,
    block_hash,
    constant_block_terms,
    prompt_block_hashes,
)

BS = 16


def _chained(ids: np.ndarray, start_block: int = 0, parent: int = ROOT_BLOCK_HASH) -> list[int]:
    out = []
    for k in range(start_block, len(ids) // BS):
        parent = block_hash(parent, ids[k * BS:(k + 1) * BS].tolist(), k * BS)
        out.append(parent)
    return out


def test_array_scalar_and_constant_paths_agree() -> None:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 200_000, 40 * BS)
    ids[7 * BS:8 * BS] = 5  # a block of one repeated token
    hashes = prompt_block_hashes(ROOT_BLOCK_HASH, ids, 0, BS)
    assert hashes == _chained(ids)
    assert prompt_block_hashes(hashes[11], ids[12 * BS:], 12 * BS, BS) == hashes[12:]
    weight, sums = constant_block_terms(5, 40 * BS)
    assert (hashes[6] + weight * (sums[8 * BS] - sums[7 * BS])) & MASK_63 == hashes[7]
    assert all(0 <= h < 2**63 for h in hashes) and len(set(hashes)) == len(hashes)


def _splitmix64(x: int) -> int:
    m = (1 << 64) - 1
    z = (x + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def test_block_hash_is_the_documented_sum_over_python_ints() -> None:
    # hash_k = (parent + sum of w_token(x_t) * w_position(t)) mod 2^63, computed exactly; block_hash sums mod 2^64 in
    # uint64 (the same low 63 bits), for ids past its table too.
    from engine.core.block_hash import _POSITION_SALT, _TOKEN_SALT

    rng = np.random.default_rng(2)
    for vocab, start in ((1000, 0), (300_000, 16 * 4097)):
        ids = rng.integers(0, vocab, BS).tolist()
        parent = int(rng.integers(0, 2**63))
        exact = sum(_splitmix64(x ^ _TOKEN_SALT) * (_splitmix64((start + t) ^ _POSITION_SALT) | 1)
                    for t, x in enumerate(ids))
        assert block_hash(parent, ids, start) == block_hash(parent, np.array(ids), start) == (parent + exact) % 2**63


def test_a_hash_names_the_whole_prefix() -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(0, 50_000, 8 * BS)
    b = a.copy()
    b[3 * BS + 4] += 1  # differs in block 3 only
    ha, hb = prompt_block_hashes(ROOT_BLOCK_HASH, a, 0, BS), prompt_block_hashes(ROOT_BLOCK_HASH, b, 0, BS)
    assert ha[:3] == hb[:3] and all(x != y for x, y in zip(ha[3:], hb[3:]))
    swapped = a.copy()
    swapped[[0, 1]] = swapped[[1, 0]]  # the same tokens in another order
    assert prompt_block_hashes(ROOT_BLOCK_HASH, swapped, 0, BS)[0] != ha[0]
    shifted = np.concatenate((a[BS:2 * BS], a[:BS]))  # block contents at other positions
    assert prompt_block_hashes(ROOT_BLOCK_HASH, shifted, 0, BS)[1] != ha[0]


@pytest.mark.parametrize("prompt_len", [15, 16, 40, 64])
def test_request_hashes_do_not_depend_on_how_the_prompt_was_given(prompt_len: int) -> None:
    kv = KVCacheManager(CacheConfig(num_blocks=64, block_size=BS, enable_prefix_caching=True), max_model_len=512)
    ids = np.random.default_rng(prompt_len).integers(0, 1000, prompt_len)
    as_list = Request("a", ids.tolist(), SamplingParams(max_tokens=8))
    as_array = Request("b", ids, SamplingParams(max_tokens=8))
    for req in (as_list, as_array):
        kv.update_block_hashes(req)
        req._output_ids.extend([3] * (64 - prompt_len))  # generated tokens up to four whole blocks
        kv.update_block_hashes(req)
    assert as_list.block_hashes == as_array.block_hashes == _chained(np.asarray(as_list.all_token_ids))
    assert len(as_list.block_hashes) == 4


def test_request_keeps_a_read_only_prompt_and_slices_across_outputs() -> None:
    ids = np.arange(10, 20)
    req = Request("r", ids, SamplingParams(max_tokens=4))
    assert not req.prompt_array.flags.writeable and ids.flags.writeable
    req._output_ids.extend([1, 2])
    assert req.all_token_ids == list(range(10, 20)) + [1, 2]
    assert req.token_ids(8, 12) == [18, 19, 1, 2] and req.token_ids(11, 12) == [2] and req.token_ids(0, 2) == [10, 11]
    assert req.num_tokens == 12 and req.num_output_tokens == 2 and req.prompt_token_ids == list(range(10, 20))
    with pytest.raises(ValueError, match="non-empty"):
        Request("empty", [], SamplingParams())
    with pytest.raises(ValueError, match=">= 0"):
        Request("negative", [3, -1], SamplingParams())
