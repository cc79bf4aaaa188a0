"""Seeded synthetic token ids for workloads, so that `roofline measure` (real engine) and `roofline simulate`
see the same prompts, and therefore the same prefix-cache hits.

    gen = TokenIdGenerator(vocab_size=32000, seed=0, reserved_ids=(spec.bos_token_id, spec.eos_token_id))
    system = gen.prefix(group_id=3, n=200)      # shared by every request of group 3 (system prompt, few-shot)
    prompt = system + gen.unique(300)            # a unique suffix
    chat = gen.session(prefix_ids=system)        # a multi-turn conversation
    turn1 = chat.next_prompt(num_user_tokens=50)
    turn2 = chat.next_prompt(num_user_tokens=40, num_previous_output_tokens=120)
    # turn2 == turn1 + 120 synthetic response ids + 40 new user ids

Ids are drawn uniformly from `[0, vocab_size)` minus `reserved_ids` (pass BOS/EOS and other special tokens),
so a run with `ignore_eos` never meets a special token in its prompts. `prefix(g, n)` depends only on
(seed, g, n): its ids come in fixed chunks each seeded by (seed, g, chunk index), so a shorter prefix of a
group is always the start of a longer one, whatever the order of calls. `unique` and sessions draw from one
sequential stream: the same calls in the same order give the same ids.

The synthetic response ids of a session stand in for what the model answered; an engine samples other
tokens, so only the prompt part of an earlier turn is a prefix-cache hit, in the engine and the simulator
alike (the simulator must not feed the session's response ids back as its sampled tokens).
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from engine.core.native import COMPILED, _kvcore

# The ids drawn by the extension (`_kvcore.draw_token_ids`: numpy's PCG64 and bounded draw, the same ids and
# generator state) where it is built and selected, else by numpy.
_DRAW_IN_C = COMPILED and hasattr(_kvcore, "draw_token_ids")  # (a build from before it: numpy)
# The sequential stream's next draws made on another thread while the last ones are handed out
# (`_kvcore.DrawAhead`: the same C draw, without the GIL), so that a long simulation's main thread only hands ids
# out. Module-level so that tests can turn it off.
DRAW_AHEAD = _DRAW_IN_C and hasattr(_kvcore, "DrawAhead")
if DRAW_AHEAD:
    # No draw's thread left running at exit, nor at a fork (the `--out` writer's child: roofline/sim/outputs.py):
    # each pending batch of draws joined first (it ends within a batch's draw, ~2.5 ms), its result kept for `join`.
    atexit.register(_kvcore.join_draws)
    os.register_at_fork(before=_kvcore.join_draws)
_PREFIX_CHUNK = 1024
# Ids drawn from the sequential stream at once (`unique_array` hands them out in order): one numpy draw per ~28
# ShareGPT prompts instead of one each, whose fixed cost (~10 us: `integers`' size handling, the reserved-id pass)
# outweighed drawing a prompt's 2,340 ids.
_STREAM_AHEAD = 1 << 16
# Draws of _STREAM_AHEAD ids made at once on the other thread (DRAW_AHEAD), at most: a thread's start costs ~50 us
# on this project's VM, a third of a draw (docs/benchmark-history/2026-12-01b-million2.md). A generator's first
# batch is one draw, each next one twice the last, so that a short run draws little it does not use.
_DRAW_AHEAD_CHUNKS = 16
_STREAM_TAG = 1
_PREFIX_TAG = 2
_BLOCK_TAG = 3


class TokenIdGenerator:
    def __init__(self, vocab_size: int, seed: int, reserved_ids: Iterable[int | None] = ()) -> None:
        reserved = sorted({int(i) for i in reserved_ids if i is not None})
        self._reserved_in_vocab = [i for i in reserved if 0 <= i < vocab_size]  # ascending
        self._num_allowed = vocab_size - len(self._reserved_in_vocab)
        # reserved_j - j for the j-th reserved id (ascending): the draws k >= it are shifted past it (`_draw`).
        self._bounds_list = [r - j for j, r in enumerate(self._reserved_in_vocab)]
        self._reserved_bounds = np.array(self._bounds_list, dtype=np.int64)
        if self._num_allowed < 2:
            raise ValueError(f"TokenIdGenerator: vocab_size {vocab_size} leaves fewer than 2 usable token ids")
        self.vocab_size = vocab_size
        self.seed = seed
        self.reserved_ids = tuple(reserved)
        self._stream = np.random.default_rng([seed, _STREAM_TAG])
        # Drawn from the stream, not yet handed out: _ahead[_ahead_pos:]. Drawing a + b ids at once gives the ids
        # of drawing a then b (numpy's bounded integers take the generator's next numbers one id after another, any
        # half-used 64-bit number kept in the generator; tests/test_core_token_ids.py checks), so the ids are those of
        # one draw per call.
        self._ahead = np.zeros(0, dtype=np.int64)
        self._ahead_pos = 0
        self._prefix_chunks: dict[tuple[int, int], np.ndarray] = {}
        # The stream's next draws of _STREAM_AHEAD ids being made on another thread (DRAW_AHEAD): `_next_out`
        # their arrays, unseen until joined, `_next_from` the state they start from. `_stream` itself stays at the
        # state after the ids handed to `_ahead`, as without the thread.
        self._drawer: Any = None
        self._batch = 1  # (the draws of the next batch)
        self._next_out: list[np.ndarray] | None = None
        self._next_from: tuple[int, int, int, int] | None = None
        # Joined draws not yet handed out, the next last: (ids, the state after them), and the state (PCG64
        # state, inc, has_uint32, uinteger) the next starts from.
        self._ready: list[tuple[np.ndarray, tuple[int, int, int]]] = []
        self._ready_from: tuple[int, int, int, int] | None = None

    def _draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        # The k-th id that is not reserved, for k drawn uniformly: k plus the number of reserved ids at or below
        # it, which is the number of j with k >= reserved_j - j (reserved ascending; reserved_j - j allowed ids lie
        # below reserved_j), the same ids as stepping k over each reserved id in order. Written only where k
        # reaches the lowest bound (a few ids in a thousand: reserved ids sit at the top of most vocabularies),
        # since a pass over all ids per reserved id cost ~10 us per 2,340 ids. (A gather from a table of the
        # allowed ids gives the same ids, but its random reads of a vocabulary-sized table miss the caches in a
        # long simulation: 48 -> 23 us per 2,340 ids, BENCHMARKS.md.)
        if _DRAW_IN_C and self._num_allowed < 1 << 32:
            state = dict(rng.bit_generator.state)
            if state["bit_generator"] == "PCG64":  # (every generator here: `default_rng`)
                return self._draw_in_c(rng, state, n)
        ids = rng.integers(0, self._num_allowed, size=n)
        bounds = self._reserved_bounds
        if len(bounds):
            rows = np.flatnonzero(ids >= bounds[0])
            if len(rows):
                k = ids[rows]
                ids[rows] = k + np.searchsorted(bounds, k, side="right")
        return ids

    def _draw_in_c(self, rng: np.random.Generator, state: dict[str, Any], n: int) -> np.ndarray:
        """`_draw` by the extension, from the PCG64 state `state` of `rng`, which it sets to the state after."""
        ids = np.empty(n, dtype=np.int64)
        pcg = state["state"]
        pcg["state"], state["has_uint32"], state["uinteger"] = _kvcore.draw_token_ids(
            pcg["state"], pcg["inc"], state["has_uint32"], state["uinteger"], self._num_allowed, self._bounds_list, ids)
        rng.bit_generator.state = state
        return ids

    def unique(self, n: int) -> list[int]:
        """`n` fresh ids from the sequential stream (practically never shared with another call)."""
        return self.unique_array(n).tolist()

    def unique_array(self, n: int) -> np.ndarray:
        """`unique` as a read-only int64 array (the same draws): a view of the ids drawn ahead."""
        if n < 0:
            raise ValueError(f"TokenIdGenerator.unique: n must be >= 0, got {n}")
        ahead, pos = self._ahead, self._ahead_pos
        if pos + n <= len(ahead):
            self._ahead_pos = pos + n
            # A read-only view, not a copy: the ~28 prompts of one draw hold it together (the same bytes as their
            # copies) and, arriving together, mostly finish together.
            return ahead[pos:pos + n]
        # The ids left and the next draw's first ones: only this call's ids are joined (a copy of the whole draw
        # was ~2 us a prompt, most of it the page faults of a new 512 KB array), the rest of the draw is ahead.
        rest = ahead[pos:]
        drawn = self._ahead = self._draw_stream(max(n - len(rest), _STREAM_AHEAD))
        drawn.flags.writeable = False
        self._ahead_pos = n - len(rest)
        if not len(rest):
            return drawn[:n]
        ids = np.concatenate((rest, drawn[:n - len(rest)]))
        ids.flags.writeable = False
        return ids

    def _draw_stream(self, n: int) -> np.ndarray:
        """`_draw(self._stream, n)`, `_stream` set to the state after it. Where the draw is one of _STREAM_AHEAD
        ids from the state the stream is at, the ids drawn ahead on another thread (DRAW_AHEAD: the same C draw,
        from that state); the next batch of draws is begun as one is taken up."""
        ahead = DRAW_AHEAD and _DRAW_IN_C
        if n == _STREAM_AHEAD and ahead and self._drawer is not None:
            state = self._stream.bit_generator.state
            pcg = state["state"]
            key = (pcg["state"], pcg["inc"], state["has_uint32"], state["uinteger"])
            if not self._ready and self._next_out is not None and key == self._next_from:
                after = self._drawer.join()
                out, self._next_out = self._next_out, None
                if after is not None:  # (None: begun by the parent of this forked process, not to be read)
                    self._ready = list(zip(out, after))[::-1]
                    self._ready_from = key
                    self._start_ahead(after[-1], pcg["inc"])
            if self._ready and key == self._ready_from:
                ids, (pcg_state, has_uint32, uinteger) = self._ready.pop()
                self._stream.bit_generator.state = {
                    "bit_generator": "PCG64", "state": {"state": pcg_state, "inc": pcg["inc"]},
                    "has_uint32": has_uint32, "uinteger": uinteger}
                self._ready_from = (pcg_state, pcg["inc"], has_uint32, uinteger)
                return ids
        # Not drawn ahead (the first draw, a longer one): what was is dropped, and drawing ahead begins afresh.
        self._ready = []
        if self._next_out is not None:
            self._drawer.join()
            self._next_out = None
        drawn = self._draw(self._stream, n)
        if ahead and self._num_allowed < 1 << 32:
            state = self._stream.bit_generator.state
            if state["bit_generator"] == "PCG64":  # (every generator here: `default_rng`)
                pcg = state["state"]
                self._start_ahead((pcg["state"], state["has_uint32"], state["uinteger"]), pcg["inc"])
        return drawn

    def _start_ahead(self, start: tuple[int, int, int], inc: int) -> None:
        """Begins the next batch of draws of _STREAM_AHEAD ids of the stream from the PCG64 state `start` (state,
        has_uint32, uinteger) and increment `inc` on another thread."""
        if self._drawer is None:
            self._drawer = _kvcore.DrawAhead()
        # One array a draw, as without the thread (not views of one batch: a prompt, a view of its draw, holds
        # only that draw, and a long-running request no batch).
        out = [np.empty(_STREAM_AHEAD, dtype=np.int64) for _ in range(self._batch)]
        self._batch = min(2 * self._batch, _DRAW_AHEAD_CHUNKS)
        pcg_state, has_uint32, uinteger = start
        self._drawer.start(pcg_state, inc, has_uint32, uinteger, self._num_allowed, self._bounds_list, out)
        self._next_out, self._next_from = out, (pcg_state, inc, has_uint32, uinteger)

    def prefix(self, group_id: int, n: int) -> list[int]:
        """The first `n` ids of shared-prefix group `group_id` (an int >= 0)."""
        return self.prefix_array(group_id, n).tolist()

    def prefix_array(self, group_id: int, n: int) -> np.ndarray:
        """`prefix` as an int64 array."""
        if isinstance(group_id, bool) or not isinstance(group_id, int) or group_id < 0:
            raise ValueError(f"TokenIdGenerator.prefix: group_id must be an integer >= 0, got {group_id!r}")
        if n < 0:
            raise ValueError(f"TokenIdGenerator.prefix: n must be >= 0, got {n}")
        chunks = [self._prefix_chunk(group_id, k) for k in range(-(-n // _PREFIX_CHUNK))]
        return np.concatenate(chunks)[:n] if chunks else np.zeros(0, dtype=np.int64)

    def _prefix_chunk(self, group_id: int, k: int) -> np.ndarray:
        key = (group_id, k)
        chunk = self._prefix_chunks.get(key)
        if chunk is None:
            rng = np.random.default_rng([self.seed, _PREFIX_TAG, group_id, k])
            chunk = self._prefix_chunks[key] = self._draw(rng, _PREFIX_CHUNK)
        return chunk

    def block_array(self, block_id: int, n: int) -> np.ndarray:
        """`n` ids of the token block `block_id` (an int >= 0): the same ids wherever the block recurs (a replayed
        trace's block hashes, `roofline.sim.traces`), drawn afresh each call rather than kept (a day's trace names
        millions of blocks)."""
        if isinstance(block_id, bool) or not isinstance(block_id, int) or block_id < 0:
            raise ValueError(f"TokenIdGenerator.block_array: block_id must be an integer >= 0, got {block_id!r}")
        return self._draw(np.random.default_rng([self.seed, _BLOCK_TAG, block_id]), n)

    def session(self, prefix_ids: Sequence[int] | np.ndarray = ()) -> MultiTurnSession:
        """A multi-turn conversation whose first prompt starts with `prefix_ids`."""
        return MultiTurnSession(self, prefix_ids)


class MultiTurnSession:
    """Turn n's prompt = turn n-1's prompt + its synthetic response + the new user message."""

    def __init__(self, gen: TokenIdGenerator, prefix_ids: Sequence[int] | np.ndarray = ()) -> None:
        self._gen = gen
        self._prefix = np.asarray(prefix_ids, dtype=np.int64)
        self._prompt: np.ndarray | None = None
        self.num_turns = 0

    def next_prompt(self, num_user_tokens: int, num_previous_output_tokens: int = 0) -> list[int]:
        """The next turn's prompt. `num_previous_output_tokens` is the length of the previous turn's
        response (0, and only 0, for the first turn)."""
        return self.next_prompt_array(num_user_tokens, num_previous_output_tokens).tolist()

    def next_prompt_array(self, num_user_tokens: int, num_previous_output_tokens: int = 0) -> np.ndarray:
        """`next_prompt` as an int64 array (read-only: later turns share it)."""
        if num_user_tokens < 1 or num_previous_output_tokens < 0:
            raise ValueError(
                "MultiTurnSession.next_prompt: num_user_tokens must be >= 1 and num_previous_output_tokens >= 0, "
                f"got {num_user_tokens} and {num_previous_output_tokens}"
            )
        if self._prompt is None:
            if num_previous_output_tokens:
                raise ValueError("MultiTurnSession.next_prompt: the first turn has no previous output tokens")
            prompt = np.concatenate((self._prefix, self._gen.unique_array(num_user_tokens)))
        else:
            new_ids = self._gen.unique_array(num_previous_output_tokens + num_user_tokens)
            prompt = np.concatenate((self._prompt, new_ids))
        prompt.flags.writeable = False
        self._prompt = prompt
        self.num_turns += 1
        return prompt
