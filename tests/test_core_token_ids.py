"""Seeded token ids: reproducible, special ids avoided, prefixes consistent, sessions extend earlier turns."""

import numpy as np
import pytest

from engine.core import TokenIdGenerator
from engine.core.token_ids import _STREAM_TAG


def test_same_seed_same_ids_and_other_seed_other_ids():
    a, b, c = (TokenIdGenerator(1000, seed) for seed in (1, 1, 2))
    assert a.unique(50) == b.unique(50) != c.unique(50)


def test_reserved_ids_never_appear():
    gen = TokenIdGenerator(8, seed=0, reserved_ids=(0, 1, None, 7))
    ids = gen.unique(2000) + gen.prefix(0, 2000)
    assert set(ids) == {2, 3, 4, 5, 6}


def test_prefix_is_independent_of_call_order_and_length():
    a, b = TokenIdGenerator(32000, 5), TokenIdGenerator(32000, 5)
    a.unique(10)
    long = a.prefix(3, 3000)
    assert b.prefix(3, 1500) == long[:1500]
    assert a.prefix(4, 100) != long[:100]


def test_session_turns_extend_the_previous_prompt():
    gen = TokenIdGenerator(32000, 0)
    system = gen.prefix(0, 20)
    chat = gen.session(prefix_ids=system)
    turn1 = chat.next_prompt(num_user_tokens=5)
    turn2 = chat.next_prompt(num_user_tokens=7, num_previous_output_tokens=11)
    assert turn1[:20] == system and len(turn1) == 25
    assert turn2[:25] == turn1 and len(turn2) == 25 + 11 + 7 and chat.num_turns == 2


def test_first_turn_has_no_previous_output():
    with pytest.raises(ValueError, match="first turn"):
        TokenIdGenerator(100, 0).session().next_prompt(5, num_previous_output_tokens=3)


def test_too_small_vocabulary_is_rejected():
    with pytest.raises(ValueError, match="vocab_size"):
        TokenIdGenerator(2, 0, reserved_ids=(0,))


def test_unique_ids_are_the_streams_draws_as_python_ints():
    """`unique` gives the ids `_draw` gives for the same stream (the ids every earlier version drew), as plain
    ints."""
    gen = TokenIdGenerator(vocab_size=500, seed=4, reserved_ids=(0, 2))
    stream = np.random.default_rng([4, _STREAM_TAG])
    for n in (1, 33, 400):
        ids = gen.unique(n)
        assert ids == gen._draw(stream, n).tolist()
        assert all(type(i) is int for i in ids)


@pytest.mark.parametrize("vocab_size, reserved", [(3, (0,)), (256, ()), (50_000, (0, 2)), (128_256, (128_000, 128_001)),
                                                  (2**33, (5,))])
def test_ids_drawn_ahead_are_those_of_one_draw_per_call(vocab_size, reserved):
    """`unique_array` hands out ids drawn ahead in large draws: each call gets the ids a draw of its own length from
    the stream would give, in call order, across the draws' boundaries (calls longer than a draw, empty calls,
    sessions' draws in between)."""
    gen = TokenIdGenerator(vocab_size=vocab_size, seed=7, reserved_ids=reserved)
    stream = np.random.default_rng([7, _STREAM_TAG])
    sizes = np.random.default_rng(1).choice([0, 1, 2, 3, 17, 2340, 9000], size=60).tolist() + [70_000, 5, 140_000, 1]
    for n in sizes:
        ids = gen.unique_array(n)
        assert ids.dtype == np.int64 and not ids.flags.writeable  # a view of the draw: nobody writes into it
        np.testing.assert_array_equal(ids, gen._draw(stream, n))
    chat = gen.session()
    first = chat.next_prompt_array(10)
    np.testing.assert_array_equal(first, gen._draw(stream, 10))
    np.testing.assert_array_equal(chat.next_prompt_array(4, 6)[10:], gen._draw(stream, 10))
