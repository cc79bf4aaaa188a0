"""Prefix-cache hashes of KV blocks, computed on numpy token arrays.

Block k of a request (tokens at positions [k * bs, (k + 1) * bs)) is identified by everything before and in it:

    hash_k = (hash_{k-1} + sum over its positions t of w_token(x_t) * w_position(t))  mod 2^63
    hash_{-1} = ROOT_BLOCK_HASH

with w_token(x) = splitmix64(x ^ salt) and w_position(t) = splitmix64(t ^ salt') | 1, products and sums mod 2^64.
Two requests get the same hash for block k when their first (k + 1) * bs tokens are the same; different
prefixes collide with probability about 2^-62 per pair. This plays the part of vLLM's chained
`hash((parent_hash, tokens_of_block))` (same hits, same misses), but a whole prompt is hashed by a few
array operations on its ids without making a Python int per token, and a block of one repeated token (the
simulator's generated tokens) costs one multiplication. Everything is deterministic: no salt from the
process (PYTHONHASHSEED), so schedules are reproducible.

    hashes = prompt_block_hashes(ROOT_BLOCK_HASH, ids[:n * bs], start_pos=0, block_size=bs)  # n blocks
    h = block_hash(hashes[-1], tokens_of_next_block, start_pos=n * bs)
    w, sums = constant_block_terms(token, num_positions)     # a block of one repeated token, inline:
    h = (hashes[-1] + w * (sums[(n + 1) * bs] - sums[n * bs])) & MASK_63                  # the same as block_hash
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ROOT_BLOCK_HASH = 0x5EED_B10C  # hash "before" the first block; any fixed value below 2^63 does
MASK_63 = (1 << 63) - 1  # hashes are below 2^63: never the block pool's NO_HASH (-1)
_TOKEN_SALT = 0x243F6A8885A308D3
_POSITION_SALT = 0x13198A2E03707344


_U_GOLDEN, _U_MIX1, _U_MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_U_30, _U_27, _U_31 = np.uint64(30), np.uint64(27), np.uint64(31)
_U_TOKEN_SALT, _U_MASK_63 = np.uint64(_TOKEN_SALT), np.uint64(MASK_63)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on a uint64 array (arithmetic wraps mod 2^64); `prompt_block_hashes` inlines it."""
    z = x + _U_GOLDEN
    z = (z ^ (z >> _U_30)) * _U_MIX1
    z = (z ^ (z >> _U_27)) * _U_MIX2
    return z ^ (z >> _U_31)


class _Weights:
    """splitmix64(i ^ salt) (| 1 for positions) for i < capacity as a uint64 array, grown by doubling, shared by all
    callers; and on demand their prefix sums mod 2^64 as Python ints (`cumulative`)."""

    def __init__(self, salt: int, odd: bool) -> None:
        self.salt, self.odd = salt, odd
        self.array = np.zeros(0, dtype=np.uint64)
        self._cumulative: list[int] = [0]

    def ensure(self, n: int) -> None:
        if n <= len(self.array):
            return
        size = max(n, 2 * len(self.array), 1 << 16)
        array = _splitmix64(np.arange(size, dtype=np.uint64) ^ np.uint64(self.salt))
        self.array = array | np.uint64(1) if self.odd else array

    def cumulative(self, n: int) -> list[int]:
        """`[t]` = the sum of the weights below t, for t <= n at least. (Python ints, grown by doubling from 1,024:
        ~150 instructions each, so only as many as a caller reaches.)"""
        if n >= len(self._cumulative):
            size = max(n, 2 * (len(self._cumulative) - 1), 1 << 10)
            self.ensure(size)
            self._cumulative = [0, *np.cumsum(self.array[:size], dtype=np.uint64).tolist()]
        return self._cumulative


_TOKENS = _Weights(_TOKEN_SALT, odd=False)
_POSITIONS = _Weights(_POSITION_SALT, odd=True)
_max = np.maximum.reduce


def prompt_block_hashes(parent: int, token_ids: np.ndarray, start_pos: int, block_size: int) -> list[int]:
    """Hashes of the whole blocks `token_ids` (int64 ids >= 0, a multiple of block_size long) at positions from
    `start_pos` (a multiple of block_size), chained after `parent`."""
    n = len(token_ids)
    if n == 0:
        return []
    _POSITIONS.ensure(start_pos + n)
    # Token weights computed, not gathered from `_TOKENS.array`: random reads of a vocabulary-sized table miss
    # the caches in a long simulation, the arithmetic streams. `_splitmix64` in place on one array (every
    # admitted request's prompt passes here; numpy's per-call overhead, not the arithmetic, is its cost).
    z = token_ids.astype(np.uint64)
    z ^= _U_TOKEN_SALT
    z += _U_GOLDEN
    z ^= z >> _U_30
    z *= _U_MIX1
    z ^= z >> _U_27
    z *= _U_MIX2
    z ^= z >> _U_31
    z *= _POSITIONS.array[start_pos:start_pos + n]
    # The running sum at each block's last token is the sum of the contents of that block and all before it.
    ends = np.cumsum(z, dtype=np.uint64)[block_size - 1::block_size]
    ends += np.uint64(parent)
    ends &= _U_MASK_63
    return ends.tolist()


def block_hash(parent: int, token_ids: Sequence[int] | np.ndarray, start_pos: int) -> int:
    """Hash of one block of `token_ids` (ids >= 0; an int64 array converts nothing) at positions from `start_pos`,
    chained after `parent`."""
    ids = np.asarray(token_ids, dtype=np.int64)
    n = len(ids)
    try:
        token_weights = _TOKENS.array[ids]
    except IndexError:  # an id past the table
        _TOKENS.ensure(int(_max(ids)) + 1)
        token_weights = _TOKENS.array[ids]
    _POSITIONS.ensure(start_pos + n)
    # The sum of w_token(x_t) * w_pos(t) mod 2^64 (uint64 arithmetic wraps, in any order), which gives the hash's low
    # 63 bits: a third of the instructions of the same sum over Python ints, and no table of Python ints.
    content = np.dot(token_weights, _POSITIONS.array[start_pos:start_pos + n])
    return (parent + int(content)) & MASK_63


def constant_block_terms(token_id: int, num_positions: int) -> tuple[int, list[int]]:
    """(w_token(token_id), prefix sums of the position weights, at least up to num_positions) for a caller that
    hashes many blocks of `token_id` inline: `block_hash` of the block of `token_id` at positions [a, b) after
    `parent` is `(parent + w * (sums[b] - sums[a])) & MASK_63`, one multiplication."""
    _TOKENS.ensure(token_id + 1)
    return int(_TOKENS.array[token_id]), _POSITIONS.cumulative(num_positions)
