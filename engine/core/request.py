"""A generation request and its state, as the scheduler tracks it (vLLM V1 `vllm/v1/request.py`).

    req = Request("r0", prompt_token_ids=[...], sampling=SamplingParams(max_tokens=64, ignore_eos=True),
                  arrival_time_s=0.0, eos_token_id=2)

State is one number chasing another: `num_computed_tokens` (tokens whose KV is in the cache, or scheduled to
be) catches up with `num_tokens` (prompt plus generated tokens). There is no prefill or decode phase; a
prefill chunk, a decode, and the recompute after a preemption are all "compute the next tokens".

Metrics hooks (`first_scheduled_time_s`, `first_token_time_s`, `token_times_s`, `finish_time_s`) are stamped by
the scheduler from the `now_s` its caller passes, never from a clock of its own: only the executor knows
whether time is wall-clock (engine) or virtual (simulator). While the scheduler's fast path keeps a running
request's counters in arrays (its column path, taken when every sampled token is one constant id, as in the
simulator), `num_computed_tokens`, `all_token_ids` and `token_times_s` read through them, so they are always
current.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from engine.core.native import COMPILED, _kvcore

_min = np.minimum.reduce  # (the ufunc itself: `prompt.min()` goes through a Python wrapper, ~1 us a request)


def _any_negative_numpy(ids: np.ndarray) -> bool:
    return bool(_min(ids) < 0)


# Whether an int64 prompt holds an id below 0 (its check): the extension's scan where it is built and selected
# (engine.core.native), else numpy's minimum.
_any_negative = (_kvcore.any_negative_id if COMPILED and hasattr(_kvcore, "any_negative_id")
                 else _any_negative_numpy)
# Whether a prompt source's array is one `Request._load_prompt` keeps as it is (exactly an ndarray of the request's
# length of int64 ids >= 0, read-only): the extension's check of all that where built and selected, else None.
_ready_prompt: Callable[[object, int, type], bool] | None = (
    _kvcore.ready_prompt if COMPILED and hasattr(_kvcore, "ready_prompt") else None)
NO_BLOCK_IDS = np.zeros(0, dtype=np.int64)  # `Request.block_ids_head` of a request holding no run of blocks
NO_BLOCK_IDS.flags.writeable = False


class RequestStatus(enum.IntEnum):
    WAITING = 1
    RUNNING = 2
    PREEMPTED = 3
    # Everything after PREEMPTED is finished (as in vLLM).
    FINISHED_STOPPED = 4  # EOS or a stop token
    FINISHED_LENGTH_CAPPED = 5  # max_tokens or max_model_len
    FINISHED_ABORTED = 6

    @property
    def is_finished(self) -> bool:
        return self > RequestStatus.PREEMPTED


@dataclass(frozen=True)
class SamplingParams:
    """How to pick the next token and when to stop. `temperature == 0` is greedy; `top_k == 0` and
    `top_p == 1` disable those filters (vLLM's conventions). `seed` makes a request's sampling reproducible."""

    max_tokens: int = 16
    ignore_eos: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be a positive integer, got {self.max_tokens!r}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature!r}")
        if self.top_k < 0:
            raise ValueError(f"SamplingParams.top_k must be >= 0 (0 disables it), got {self.top_k!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")


class ColumnStorage(Protocol):
    """Where a running request's counters and last generated tokens live while the scheduler's fast path keeps them
    in columns (`engine.core.fast_path.RunningColumns`, which implements this): a `Request` reads them through these
    three calls. Declared here so that this module needs nothing of the fast path, which imports it."""

    def num_computed_of(self, req: Request) -> int:
        """`req.num_computed_tokens`."""
        ...

    def num_tokens_of(self, req: Request) -> int:
        """`req.num_tokens`."""
        ...

    def materialize(self, req: Request) -> None:
        """Write the request's unwritten tokens and their times into it."""
        ...


class Request:
    """One request. The scheduler owns every field below the arguments; read them, do not write them
    (the executor writes nothing: it passes `now_s` to the scheduler, which stamps the times)."""

    __slots__ = (
        "request_id",
        "sampling",
        "arrival_time_s",
        "eos_token_id",
        "priority",
        "num_prompt_tokens",
        "status",
        "block_ids",
        "block_ids_head",
        "block_hashes",
        "num_cached_blocks",
        "cache_chain",
        "sliding_block_ids",
        "sliding_first_block",
        "max_num_tokens",
        "stop_token_set",
        "next_check_len",
        "first_scheduled_time_s",
        "finish_time_s",
        "num_preemptions",
        "num_prefix_hit_tokens",
        "_prompt",
        "_prompt_source",
        "_output_ids",
        "_num_computed",
        "_token_times",
        "_times_array",
        "_cols",
        "_col_off",
        "_col_seq",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: Sequence[int] | np.ndarray,
        sampling: SamplingParams,
        arrival_time_s: float = 0.0,
        eos_token_id: int | None = None,
        priority: int = 0,
        _prompt_source: Callable[[], np.ndarray] | None = None,
    ) -> None:
        if _prompt_source is not None:  # `Request.lazy`: no prompt yet (`prompt_token_ids` unused), no checks of it
            self._init_fields(request_id, sampling, arrival_time_s, eos_token_id, priority)
            self._prompt_source: Callable[[], np.ndarray] | None = _prompt_source
            return
        prompt = np.asarray(prompt_token_ids, dtype=np.int64)
        if prompt.ndim != 1 or len(prompt) == 0:
            raise ValueError(f"request {request_id!r}: prompt_token_ids must be a non-empty sequence of token ids")
        if _any_negative(prompt):
            raise ValueError(f"request {request_id!r}: prompt_token_ids must be >= 0, got {int(_min(prompt))}")
        if prompt is prompt_token_ids:  # the caller's own array: keep a read-only view of it
            prompt = prompt.view()
        prompt.flags.writeable = False
        self._init_fields(request_id, sampling, arrival_time_s, eos_token_id, priority)
        self._prompt: np.ndarray | None = prompt
        self.num_prompt_tokens = len(prompt)

    def _init_fields(self, request_id: str, sampling: SamplingParams, arrival_time_s: float,
                     eos_token_id: int | None, priority: int) -> None:
        """Every field of a new request but its prompt (`__init__` and `lazy` set it)."""
        self.request_id = request_id
        self.sampling = sampling
        self.arrival_time_s = arrival_time_s
        self.eos_token_id = eos_token_id
        self.priority = priority  # lower is served first under policy "priority" (vLLM's convention)
        # The prompt as an int64 array (the simulator never makes a Python int per prompt token) and the
        # generated tokens, only ever appended to.
        self._prompt = None
        self._prompt_source = None  # (`Request.lazy`)
        self._output_ids: list[int] = []
        self.num_prompt_tokens = 0
        self._num_computed = 0
        self.status = RequestStatus.WAITING
        # KV bookkeeping, owned by KVCacheManager: the ids of the blocks held (in token order; a new list
        # whenever the blocks are freed, so a plan's (list, length) snapshot of a table stays valid), the
        # chained hashes of the first full blocks of all_token_ids (computed when first needed, so maybe none),
        # and how many leading blocks are registered in the prefix cache. `block_ids_head` is block_ids[:k] as an
        # int64 array for the blocks that came in whole runs (prefix hits, prompt chunks), before any decode block
        # was appended one by one, so that registering and freeing them converts no list of ints.
        self.block_ids: list[int] = []
        self.block_ids_head = NO_BLOCK_IDS
        self.block_hashes: list[int] = []
        self.num_cached_blocks = 0
        self.cache_chain: int | None = None  # the prefix-cache chain its block list registers into (BlockPool)
        # A hybrid model's sliding-window groups (KVCacheManager): the blocks they hold, group by group for each
        # block index from `sliding_first_block` on (those before it left the window and were freed).
        self.sliding_block_ids: list[int] = []
        self.sliding_first_block = 0
        # Stop rules precomputed by the scheduler: the length at which the request stops (prompt + max_tokens
        # capped by max_model_len) and the tokens that stop it (EOS unless ignore_eos, stop_token_ids).
        self.max_num_tokens = 0
        self.stop_token_set: frozenset[int] = frozenset()
        # The length at which update_from_output next needs a closer look (first token, max_num_tokens), so
        # the common case costs one comparison.
        self.next_check_len = 0
        # Metrics: the time of every output token (kept across preemptions).
        self.first_scheduled_time_s: float | None = None
        self.finish_time_s: float | None = None
        self._token_times: list[float] = []
        # The same floats as an array while the fast path's columns had them as one (a view of their times, set
        # as `_token_times` is first written from them): the first len(_times_array) entries of _token_times,
        # and all of them while the lengths agree (`token_times_array`).
        self._times_array: np.ndarray | None = None
        self.num_preemptions = 0
        # Tokens found in the prefix cache when first scheduled (vLLM's `num_cached_tokens`).
        self.num_prefix_hit_tokens: int | None = None
        # While the scheduler's fast path keeps this running request's counters in its columns
        # (`engine.core.fast_path.RunningColumns`), they hold its computed tokens and its last generated
        # tokens and their times; the properties below read through them.
        self._cols: ColumnStorage | None = None
        self._col_off: int | None = None  # there: num_tokens - the columns' update count, while it decodes
        self._col_seq = 0  # there: when it joined them (the running queue's order)

    @property
    def num_computed_tokens(self) -> int:
        """Tokens whose KV is in the cache, or scheduled to be."""
        if self._cols is None:
            return self._num_computed
        return self._cols.num_computed_of(self)

    @num_computed_tokens.setter
    def num_computed_tokens(self, value: int) -> None:
        assert self._cols is None, "the fast path's columns hold this request's counters"
        self._num_computed = value

    def append_output_token(self, token_id: int, time_s: float | None) -> None:
        """Append a sampled token and, when the caller has a clock, its time."""
        assert self._cols is None, "the fast path's columns hold this request's tokens"
        self._output_ids.append(token_id)
        if time_s is not None:
            self._token_times.append(time_s)

    @property
    def all_token_ids(self) -> list[int]:
        """Prompt followed by the generated tokens (a new list)."""
        return self.prompt_array.tolist() + self.output_token_ids

    def token_ids(self, start: int, stop: int) -> list[int]:
        """`all_token_ids[start:stop]`, without building the whole list."""
        p = self.num_prompt_tokens
        if stop <= p:
            return self.prompt_array[start:stop].tolist()
        outputs = self.output_token_ids
        if start >= p:
            return outputs[start - p:stop - p]
        return self.prompt_array[start:].tolist() + outputs[:stop - p]

    @property
    def token_times_s(self) -> list[float]:
        """The time of every output token, kept across preemptions (do not modify)."""
        if self._cols is not None:
            self._cols.materialize(self)
        return self._token_times

    @property
    def token_times_array(self) -> np.ndarray:
        """`token_times_s` as a float64 array, the same floats (do not modify): the columns' own array where they
        wrote every time of the request (no conversion of a list of floats, ~200 instructions a token), else a
        new one."""
        times = self.token_times_s
        shared = self._times_array
        if shared is not None and len(shared) == len(times):
            return shared
        return np.fromiter(times, np.float64, len(times))

    @property
    def block_table(self) -> tuple[int, ...]:
        return tuple(self.block_ids)

    @property
    def num_tokens(self) -> int:
        if self._cols is not None:
            return self._cols.num_tokens_of(self)
        return self.num_prompt_tokens + len(self._output_ids)

    @property
    def num_output_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.prompt_array.tolist()

    @property
    def prompt_array(self) -> np.ndarray:
        """The prompt as a read-only int64 array."""
        prompt = self._prompt
        if prompt is None:
            prompt = self._load_prompt()
        return prompt

    def _load_prompt(self) -> np.ndarray:
        source = self._prompt_source
        assert source is not None
        prompt = source()
        if _ready_prompt is not None and _ready_prompt(prompt, self.num_prompt_tokens, np.ndarray):
            self._prompt, self._prompt_source = prompt, None  # (what the lines below keep as it is, checked in C)
            return prompt
        prompt = np.asarray(prompt, dtype=np.int64)
        if prompt.shape != (self.num_prompt_tokens,) or _any_negative(prompt):
            raise ValueError(f"request {self.request_id!r}: its prompt source gave {prompt.shape} ids (not "
                             f"{self.num_prompt_tokens} ids >= 0)")
        if prompt.flags.writeable:
            prompt = prompt.view()
            prompt.flags.writeable = False
        self._prompt, self._prompt_source = prompt, None
        return prompt

    @classmethod
    def lazy(cls, request_id: str, num_prompt_tokens: int, prompt_source: Callable[[], np.ndarray],
             sampling: SamplingParams, arrival_time_s: float = 0.0, eos_token_id: int | None = None,
             priority: int = 0) -> Request:
        """A request whose prompt ids are made when first read (`prompt_source()`: `num_prompt_tokens` ids >= 0):
        a simulation's waiting requests, which may be hundreds of thousands in an overloaded run, then hold no ids
        (the scheduler reads them only to hash the prompt's blocks, when it first schedules the request)."""
        if isinstance(num_prompt_tokens, bool) or not isinstance(num_prompt_tokens, int) or num_prompt_tokens < 1:
            raise ValueError(f"request {request_id!r}: num_prompt_tokens must be a positive integer, got "
                             f"{num_prompt_tokens!r}")
        # (`__init__`'s checks of a prompt's ids skipped, which would run on a stand-in: ~40 % of a lazy request's
        # making, which the simulator does for each of its requests. Through `__init__`, not `cls.__new__(cls)`:
        # a class compiled by mypyc (benchmarks/speed/compiled_ab.py) runs `__init__` from `__new__`.)
        if cls is Request and _new_lazy is not None:  # the same slots set in C (~12 k instructions less a request)
            return _new_lazy(request_id, num_prompt_tokens, prompt_source, sampling, arrival_time_s, eos_token_id,
                             priority)
        req = cls(request_id, (), sampling, arrival_time_s, eos_token_id, priority, prompt_source)
        req.num_prompt_tokens = num_prompt_tokens
        return req

    @property
    def output_token_ids(self) -> list[int]:
        """The generated tokens (do not modify)."""
        if self._cols is not None:
            self._cols.materialize(self)
        return self._output_ids

    @property
    def first_token_time_s(self) -> float | None:
        times = self.token_times_s
        return times[0] if times else None

    @property
    def is_finished(self) -> bool:
        return self.status > RequestStatus.PREEMPTED

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, status={self.status.name}, computed={self.num_computed_tokens}/"
            f"{self.num_tokens}, prompt={self.num_prompt_tokens})"
        )


# `Request.lazy` in C where the extension is built and selected (engine.core.native) and knows Request's slots: every
# slot set as `_init_fields` sets it, then the prompt's source and length (engine/core/_kvcore.c `new_lazy_request`;
# None otherwise: the Python code above, the reference, which tests/test_compiled_fast.py compares it with).
_new_lazy: Callable[..., Request] | None = (
    _kvcore.bind_lazy_request(Request, RequestStatus.WAITING, NO_BLOCK_IDS)
    if COMPILED and hasattr(_kvcore, "bind_lazy_request") else None)
