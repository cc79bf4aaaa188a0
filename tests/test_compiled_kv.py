"""The compiled KV cache manager (engine/core/_kvcore.c, engine.core.compiled_kv): built where a C compiler is, in
use when built, and turned off by ROOFLINE_PURE_PYTHON=1. (That it gives the Python classes' results:
tests/test_core_block_pool.py, tests/test_core_properties.py.) Its prompt hashing and token id draw against their
Python and numpy references: below."""

import functools
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import (
    CacheConfig,
    KVCacheManager,
    Request,
    SamplingParams,
    Scheduler,
    SchedulerConfig,
    TokenIdGenerator,
    compiled_kv,
    token_ids,
)
from engine.core.block_hash import ROOT_BLOCK_HASH, block_hash, prompt_block_hashes
from engine.core.compiled_kv import _kvcore

_PROBE = ("from engine.core import CacheConfig, Scheduler, SchedulerConfig; "
          "s = Scheduler(SchedulerConfig(max_model_len=64), CacheConfig(num_blocks=16, block_size=4)); "
          "print(type(s.kv).__name__)")


def _compiler_found() -> bool:
    """What setup.py's optional build needs: the C compiler Python was built with and Python's headers."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None and (Path(sysconfig.get_paths()["include"]) / "Python.h").exists()


def _kind_in_subprocess(**env: str) -> str:
    run = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    return run.stdout.strip()


def test_the_extension_is_built_where_a_compiler_is():
    """In CI (a fresh clone installed by .ci/run) a missing build is a failure; in a checkout installed before the
    extension existed it is only a skip that says how to build it."""
    if not _compiler_found():
        pytest.skip("no C compiler or Python headers here: the package runs on the Python classes")
    if not compiled_kv.BUILT and not os.environ.get("CI"):
        pytest.skip("engine.core._kvcore is not built in this checkout: `pip install -e .` builds it")
    assert compiled_kv.BUILT, "a C compiler is here but engine.core._kvcore was not built (pip install -e . again)"


def test_the_compiled_manager_is_in_use_when_built():
    if not compiled_kv.BUILT:
        pytest.skip("engine.core._kvcore is not built")
    assert _kind_in_subprocess(ROOFLINE_PURE_PYTHON="") == "CompiledKVCacheManager"
    cache = CacheConfig(num_blocks=16, block_size=4)
    if compiled_kv.COMPILED:  # (this process's environment may select the Python classes)
        assert isinstance(Scheduler(SchedulerConfig(max_model_len=64), cache).kv, compiled_kv.CompiledKVCacheManager)


@pytest.mark.parametrize("value", ["1", "TRUE", " yes"])
def test_pure_python_is_selected_by_the_environment(value):
    assert _kind_in_subprocess(ROOFLINE_PURE_PYTHON=value) == "KVCacheManager"


def test_a_false_value_keeps_the_compiled_manager():
    if not compiled_kv.BUILT:
        pytest.skip("engine.core._kvcore is not built")
    assert _kind_in_subprocess(ROOFLINE_PURE_PYTHON="0") == "CompiledKVCacheManager"


def test_a_hybrid_cache_uses_the_python_manager():
    cache = CacheConfig(num_blocks=16, block_size=4, enable_prefix_caching=False, num_sliding_groups=1,
                        sliding_window=8, sliding_admission_cap_blocks=100)
    assert compiled_kv.kv_cache_manager_class(cache) is KVCacheManager
    if compiled_kv.BUILT:
        with pytest.raises(ValueError, match="num_sliding_groups"):
            compiled_kv.CompiledKVCacheManager(cache, 64)


# ---- the prompt's block hashes and the token id draw in C: the same numbers as the Python/numpy reference ----

_built = pytest.mark.skipif(not compiled_kv.BUILT, reason="engine.core._kvcore is not built")


@_built
@settings(max_examples=150, deadline=None)
@given(block_size=st.integers(1, 40), num_blocks=st.integers(0, 30), extra=st.integers(0, 39),
       first=st.integers(0, 30), reverse=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_prompt_block_hashes_in_c_are_block_hash_py(block_size, num_blocks, extra, first, reverse, seed):
    """`_kvcore.prompt_block_hashes` (the compiled manager's prompt hashing), extended in two calls, gives
    `block_hash.prompt_block_hashes`'s chain, also on a strided view, and its first hash is `block_hash`'s."""
    ids = np.random.default_rng(seed).integers(0, 300_000, size=num_blocks * block_size + extra % block_size)
    if reverse:
        ids = ids[::-1]  # (not contiguous)
    hashes: list[int] = []
    _kvcore.prompt_block_hashes(hashes, ids, min(first, num_blocks), block_size)
    _kvcore.prompt_block_hashes(hashes, ids, num_blocks, block_size)
    assert hashes == prompt_block_hashes(ROOT_BLOCK_HASH, ids[:num_blocks * block_size], 0, block_size)
    if num_blocks:
        assert hashes[0] == block_hash(ROOT_BLOCK_HASH, ids[:block_size], 0)


@_built
def test_the_compiled_manager_hashes_prompt_and_outputs_as_the_python_one():
    """`ensure_block_hashes` of the compiled manager (prompt in C, generated tokens by the Python method) against the
    Python manager's, a block at a time and all at once, on prompts that do and do not end on a block boundary."""
    cache = CacheConfig(num_blocks=64, block_size=4)
    for num_prompt in (3, 8, 13):
        reqs = []
        for kind in (KVCacheManager, compiled_kv.CompiledKVCacheManager):
            kv = kind(cache, 64)
            gen = TokenIdGenerator(1000, 7)
            req = Request.lazy("r", num_prompt, functools.partial(gen.unique_array, num_prompt),
                               SamplingParams(max_tokens=20))
            for token in (5, 5, 5, 9, 5, 5, 5, 5, 1, 2, 3):
                req.append_output_token(token, None)
            for n in range(1, 3):
                kv.ensure_block_hashes(req, n)
            kv.ensure_block_hashes(req, req.num_tokens // cache.block_size)
            reqs.append(req)
        assert reqs[0].block_hashes == reqs[1].block_hashes
        assert len(reqs[1].block_hashes) == (num_prompt + 11) // 4


def _numpy_draw(rng: np.random.Generator, n: int, num_allowed: int, bounds: list[int]) -> np.ndarray:
    """`TokenIdGenerator._draw` by numpy (its reference code)."""
    ids = rng.integers(0, num_allowed, size=n)
    if bounds:
        rows = np.flatnonzero(ids >= bounds[0])
        ids[rows] = ids[rows] + np.searchsorted(np.array(bounds), ids[rows], side="right")
    return ids


@_built
@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**63), num_allowed=st.sampled_from([2, 3, 1000, 128254, 151936, 2**31 + 11, 2**32 - 1]),
       reserved=st.lists(st.integers(0, 2**32 - 2), max_size=4), sizes=st.lists(st.integers(0, 3000), max_size=4))
def test_draw_token_ids_in_c_is_numpy(seed, num_allowed, reserved, sizes):
    """`_kvcore.draw_token_ids` gives numpy's ids (PCG64, Lemire's bounded draw: 2^31 + 11 rejects nearly half its
    draws) and leaves the generator in numpy's state, across calls that stop halfway through a 64-bit output."""
    bounds = sorted({r % num_allowed for r in reserved})
    ours, ref = np.random.default_rng(seed), np.random.default_rng(seed)
    for n in sizes:
        state = ours.bit_generator.state
        ids = np.empty(n, dtype=np.int64)
        pcg = state["state"]
        pcg["state"], state["has_uint32"], state["uinteger"] = _kvcore.draw_token_ids(
            pcg["state"], pcg["inc"], state["has_uint32"], state["uinteger"], num_allowed, bounds, ids)
        ours.bit_generator.state = state
        assert ids.tolist() == _numpy_draw(ref, n, num_allowed, bounds).tolist()
        assert ours.bit_generator.state == ref.bit_generator.state


def test_token_ids_are_the_same_drawn_by_c_or_numpy(monkeypatch):
    """TokenIdGenerator's ids (stream, prefixes, blocks) with its draw in C (where built) and by numpy."""
    def ids() -> list[list[int]]:
        gen = TokenIdGenerator(32000, 3, reserved_ids=(0, 2, 31999))
        return [gen.unique(5), gen.unique(70000), gen.prefix(1, 1500), gen.block_array(4, 16).tolist(), gen.unique(9)]
    default = ids()
    monkeypatch.setattr(token_ids, "_DRAW_IN_C", False)
    assert ids() == default
    assert token_ids._DRAW_IN_C is False or not compiled_kv.COMPILED


def test_pure_python_draws_token_ids_and_checks_prompts_by_numpy():
    probe = ("from engine.core import request, token_ids; "
             "print(token_ids._DRAW_IN_C, request._any_negative is request._any_negative_numpy)")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "ROOFLINE_PURE_PYTHON": "1"})
    assert run.stdout.split() == ["False", "True"]


class _RequestSubclass(Request):
    """Not exactly `Request`: the extension reaches its fields through the generic attribute calls."""


@_built
def test_bind_request_type_wants_object_slots():
    class NoSlots:
        pass

    with pytest.raises(TypeError, match="no slot"):
        _kvcore.bind_request_type(NoSlots)


@_built
def test_a_request_subclass_gets_the_same_blocks_as_a_request():
    """The compiled manager reads a `Request`'s slots at their offsets and anything else through getattr/setattr: the
    same block tables, prefix hits, cached counts and frees either way."""
    cache = CacheConfig(num_blocks=32, block_size=4)
    tables = []
    for cls in (Request, _RequestSubclass):
        kv = compiled_kv.CompiledKVCacheManager(cache, 64)
        first = cls("a", list(range(10)), SamplingParams(max_tokens=4))
        second = cls("b", list(range(9)) + [99], SamplingParams(max_tokens=4))
        hit, num_hit = kv.get_computed_blocks(first)
        assert kv.allocate_slots(first, 10 - num_hit, hit, full_sequence_must_fit=True)
        hit, num_hit = kv.get_computed_blocks(second)
        assert kv.allocate_slots(second, 10 - num_hit, hit, full_sequence_must_fit=True)
        state = [list(first.block_ids), list(second.block_ids), num_hit, first.num_cached_blocks,
                 second.num_cached_blocks, list(first.block_hashes)]
        kv.free(first)
        state += [first.block_ids, first.num_cached_blocks, first.cache_chain, kv.num_free_blocks]
        tables.append(state)
    assert tables[0] == tables[1]
    assert tables[0][2] == 8  # the second request's hit: the first two blocks


@_built
def test_block_ids_and_hashes_of_every_size_read_back_exactly():
    """The extension's int reading (CPython's digits read directly for up to three digits) on the edges: 0, one,
    two and three 30-bit digits, 2^63 - 1 (the largest hash), beyond (an error, as PyLong_AsLongLong gives), and a
    negative number."""
    pool = compiled_kv.CompiledBlockPool(8)
    values = [0, 1, 2**30 - 1, 2**30, 2**60 - 1, 2**60, 2**63 - 1, 2**62 + 12345]
    for value in values:
        ids = pool.allocate(1)
        pool.register_chain(None, ids, [value], 0, 1)
        assert int(pool.block_hash[ids[0]]) == value
        pool.free(ids)
    with pytest.raises(OverflowError):
        pool.register_chain(None, pool.allocate(1), [2**63], 0, 1)
    with pytest.raises(IndexError):
        pool.touch_ids([-1])


@_built
@settings(max_examples=100, deadline=None)
@given(ids=st.lists(st.integers(-2**63, 2**63 - 1), max_size=300), step=st.sampled_from([1, 2, -1]))
def test_any_negative_id_is_numpy(ids, step):
    """The prompt check's scan (contiguous, strided and reversed views, any length) says what numpy says."""
    array = np.array(ids, dtype=np.int64)[::step]
    assert _kvcore.any_negative_id(array) is bool((array < 0).any())


@_built
def test_any_negative_id_refuses_what_is_not_int64_ids():
    for bad in (np.zeros(3, np.int32), np.zeros((2, 2), np.int64)):
        with pytest.raises(ValueError, match="any_negative_id"):
            _kvcore.any_negative_id(bad)


def test_a_negative_prompt_id_is_refused_either_way():
    """Request's prompt check, by the extension or by numpy: a negative id is named, eager or lazy."""
    with pytest.raises(ValueError, match="must be >= 0, got -3"):
        Request("r", [1, -3, 2], SamplingParams())
    lazy = Request.lazy("s", 3, lambda: np.array([4, -1, 0]), SamplingParams())
    with pytest.raises(ValueError, match="prompt source gave"):
        lazy.prompt_array
