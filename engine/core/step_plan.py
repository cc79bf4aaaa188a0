"""What one scheduler step hands its executor (vLLM V1 `vllm/v1/core/sched/output.py`): a `StepPlan` of
parallel columns, one entry per scheduled sequence, and `ScheduledSeq`, one sequence's share built on demand.

    plan = sched.schedule(now_s)
    query, context, emits = plan.seq_arrays()        # what the simulator reads
    for seq in plan.seqs: ...                        # what the engine reads (token ids, block table)

The scheduler fills a plan with `add_seq` (and `remove_seq` for a victim of priority preemption); the
fast paths (`engine.core.fast_path`) schedule the whole running queue at once (`add_running`,
`add_running_columns`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engine.core.request import Request

BulkRows = tuple[np.ndarray, np.ndarray, np.ndarray]  # query, context and block-table lengths of the bulk rows

_ONES: dict[int, np.ndarray] = {}


def _ones(n: int) -> np.ndarray:
    """A read-only int64 array of `n` ones (the query lengths of `n` decodes), shared by the plans of a size."""
    ones = _ONES.get(n)
    if ones is None:
        ones = _ONES[n] = np.ones(n, dtype=np.int64)
        ones.flags.writeable = False
    return ones


class ColumnRows:
    """The bulk rows of one step as the fast path's columns give them (`engine.core.fast_path.RunningColumns`):
    row i is a decode of context `off[i] + num_updates - 1` and `ceil((off[i] + num_updates) / block_size)`
    blocks, except the rows of `prefill_rows` (row, context, query, blocks); the request of row i is
    `ids[seq[i]]`. Called (once, on first use), it gives the plan's arrays; its fields are a step's record
    (`engine.core.step_record`). `off` and `seq` (lists of ints, or int arrays) are never written in place; `ids`
    only grows."""

    __slots__ = ("off", "num_updates", "block_size", "prefill_rows", "seq", "ids")

    def __init__(self, off: list[int] | np.ndarray, num_updates: int, block_size: int,
                 prefill_rows: list[tuple[int, int, int, int]], seq: list[int] | np.ndarray, ids: list[str]) -> None:
        self.off = off
        self.num_updates = num_updates
        self.block_size = block_size
        self.prefill_rows = prefill_rows
        self.seq = seq
        self.ids = ids

    def __call__(self) -> BulkRows:
        off, num_updates, bs = np.asarray(self.off, dtype=np.int64), self.num_updates, self.block_size
        context = off + (num_updates - 1)
        num_blocks = (off + (num_updates + bs - 1)) // bs
        if not self.prefill_rows:
            return _ones(len(off)), context, num_blocks
        query = np.ones(len(off), dtype=np.int64)
        for row, ctx, num_query, num_block_ids in self.prefill_rows:
            context[row], query[row], num_blocks[row] = ctx, num_query, num_block_ids
        return query, context, num_blocks


class ScheduledSeq:
    """One request's share of a step (built on demand from the plan's columns)."""

    __slots__ = (
        "request_id",
        "token_ids",
        "num_query_tokens",
        "num_context_tokens",
        "block_ids",
        "emits_token",
        "is_prefill",
    )

    def __init__(
        self,
        request_id: str,
        token_ids: list[int],
        num_query_tokens: int,
        num_context_tokens: int,
        block_ids: tuple[int, ...],
        emits_token: bool,
        is_prefill: bool,
    ) -> None:
        self.request_id = request_id
        self.token_ids = token_ids  # the tokens computed this step: positions num_context_tokens onwards
        self.num_query_tokens = num_query_tokens
        self.num_context_tokens = num_context_tokens  # tokens whose KV is already cached
        self.block_ids = block_ids  # the whole block table, enough slots for context + query
        self.emits_token = emits_token  # the step reaches the request's last known token: sample one
        self.is_prefill = is_prefill  # computes prompt tokens, or recomputes several after a preemption

    def __repr__(self) -> str:
        return (
            f"ScheduledSeq({self.request_id!r}, query={self.num_query_tokens}, context={self.num_context_tokens}, "
            f"emits={self.emits_token}, prefill={self.is_prefill})"
        )


_ALL_TRUE: dict[int, np.ndarray] = {}


def _all_true(n: int) -> np.ndarray:
    """A read-only array of `n` Trues, shared by the plans of every step with `n` bulk rows."""
    ones = _ALL_TRUE.get(n)
    if ones is None:
        ones = _ALL_TRUE[n] = np.ones(n, dtype=bool)
        ones.flags.writeable = False
    return ones


class StepPlan:
    """What one step computes, as parallel columns (index i is the i-th scheduled sequence, running
    requests first in queue order, then new admissions). Treat it as read-only, and read `block_tables` and
    `seqs` before `update_from_output` (they are built on first access from the requests' block lists).
    `seq_arrays()` gives query lengths, context lengths and emits as numpy arrays, which is what the
    simulator reads; the list columns are built on access."""

    __slots__ = (
        "step_index",
        "requests",
        "num_batched_tokens",
        "num_prefill_tokens",
        "num_decode_tokens",
        "preempted_request_ids",
        "admitted_request_ids",
        "num_new_prefix_hit_tokens",
        "num_kv_blocks_used",
        "num_kv_blocks_total",
        "num_running",
        "num_waiting",
        "num_emitting_seqs",
        "num_seqs",
        "_query",
        "_context",
        "_emits",
        "_num_blocks",
        "_bulk",
        "_columns",
        "_bulk_context_sum",
        "_bulk_decodes",
        "_arrays",
        "_seqs",
        "_tables",
    )

    def __init__(self, step_index: int) -> None:
        self.step_index = step_index
        self.requests: list[Request] = []
        self.num_batched_tokens = 0
        self.num_prefill_tokens = 0  # query tokens of prefill seqs
        self.num_decode_tokens = 0  # = number of decode seqs (one token each)
        self.preempted_request_ids: tuple[str, ...] = ()
        self.admitted_request_ids: tuple[str, ...] = ()  # taken from the waiting queue (new or resumed)
        self.num_new_prefix_hit_tokens = 0  # prefix-cache hit tokens of the admitted requests
        self.num_kv_blocks_used = 0  # after this step's allocations
        self.num_kv_blocks_total = 0
        self.num_running = 0
        self.num_waiting = 0
        # Sequences that sample a token this step (kept as the plan is filled: read at every step by the simulator).
        self.num_emitting_seqs = 0
        self.num_seqs = 0  # len(requests), kept as the plan is filled (read at every step by the simulator too)
        # Per sequence: tokens computed this step, tokens already in the KV cache before it, whether it
        # samples a token, and the length of its block table. `_bulk` holds the same for the leading
        # sequences as arrays (the fast path's columns), the lists those after them.
        self._query: list[int] = []
        self._context: list[int] = []
        self._emits: list[bool] = []
        self._num_blocks: list[int] = []
        self._bulk: BulkRows | None = None
        # The fast path hands the bulk rows over as its columns, turned into arrays on first use (a step of decodes
        # only is costed from its context sum, which it gives as well), so that a step nobody reads builds none.
        self._columns: ColumnRows | None = None
        self._bulk_context_sum: int | None = None
        # When every bulk row is a decode (one query token): their count and a function giving their longest context.
        self._bulk_decodes: tuple[int, Callable[[], int]] | None = None
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._seqs: tuple[ScheduledSeq, ...] | None = None
        self._tables: list[tuple[int, ...]] | None = None

    @property
    def is_empty(self) -> bool:
        return not self.requests

    def seq_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query lengths int64, context lengths int64, emits bool), one entry per sequence; read-only (a plan
        of running requests only shares its all-True emits with the other plans of its size)."""
        if self._arrays is not None:
            return self._arrays
        if self._columns is None:
            self._arrays = (np.array(self._query, dtype=np.int64), np.array(self._context, dtype=np.int64),
                            np.array(self._emits, dtype=bool))
            return self._arrays
        bulk_query, bulk_context, _ = self._resolve_bulk()
        bulk_emits = _all_true(len(bulk_query))  # the bulk rows always emit
        if not self._query:  # the running queue only
            self._arrays = (bulk_query, bulk_context, bulk_emits)
        else:  # and the requests admitted after it
            self._arrays = (np.concatenate((bulk_query, self._query)), np.concatenate((bulk_context, self._context)),
                            np.concatenate((bulk_emits, self._emits)))
        return self._arrays

    @property
    def emits_after_bulk(self) -> list[bool]:
        """Whether each sequence added after the bulk rows (`add_seq`) samples a token (all of them without bulk
        rows; do not modify)."""
        return self._emits

    @property
    def num_context_tokens(self) -> int:
        """Context lengths summed over the sequences."""
        if self._bulk_context_sum is not None:
            return self._bulk_context_sum + sum(self._context)
        return int(np.add.reduce(self.seq_arrays()[1]))

    @property
    def all_emit(self) -> bool:
        """Every sequence samples a token this step."""
        return all(self._emits)  # the bulk rows always do

    def seq_sums(self, longest: bool = True) -> tuple[int, int, int, list[int], list[int]] | None:
        """The sequences of one query token (count, context sum, longest context; 0 without any, or where not
        `longest`) and the query and context lengths of the others in order, without building arrays; None when that
        would take them (a plan without bulk rows)."""
        if self._bulk_context_sum is None:
            return None
        total = self._bulk_context_sum
        query: list[int] = []
        context: list[int] = []
        if self._bulk_decodes is not None:  # every bulk row a decode
            count, bulk_max = self._bulk_decodes
            longest_context = bulk_max() if longest and count else 0
        else:  # bulk rows with prefill chunks (`ColumnRows.prefill_rows`): the rows' sums less the chunks'
            cols = self._columns
            assert cols is not None
            count, longest_context = len(cols.off), 0
            for _, ctx, q, _ in sorted(cols.prefill_rows):  # (in row order, as the arrays have them)
                if q == 1:
                    longest_context = max(longest_context, ctx)
                    continue
                count -= 1
                total -= ctx
                if q > 1:
                    query.append(q)
                    context.append(ctx)
            if longest and len(cols.prefill_rows) < len(cols.off):  # the decoders' longest context
                rows = {row for row, _, _, _ in cols.prefill_rows}
                longest_context = max(longest_context, int(max(
                    off for i, off in enumerate(cols.off) if i not in rows)) + cols.num_updates - 1)
        for q, c in zip(self._query, self._context):
            if q == 1:
                count += 1
                total += c
                if longest:
                    longest_context = max(longest_context, c)
            else:
                query.append(q)
                context.append(c)
        return count, total, longest_context if longest else 0, query, context

    @property
    def request_ids(self) -> list[str]:
        return [r.request_id for r in self.requests]

    @property
    def query_lens(self) -> list[int]:
        """Tokens computed this step."""
        return self.seq_arrays()[0].tolist() if self._has_bulk else self._query

    @property
    def context_lens(self) -> list[int]:
        """Tokens already in the KV cache before this step."""
        return self.seq_arrays()[1].tolist() if self._has_bulk else self._context

    @property
    def emits(self) -> list[bool]:
        return self.seq_arrays()[2].tolist() if self._has_bulk else self._emits

    @property
    def block_tables(self) -> list[tuple[int, ...]]:
        """Each sequence's whole block table (enough slots for context + query)."""
        if self._tables is None:
            lengths = self._num_blocks if self._columns is None else self._resolve_bulk()[2].tolist() + self._num_blocks
            self._tables = [tuple(r.block_ids[:n]) for r, n in zip(self.requests, lengths)]
        return self._tables

    @property
    def seqs(self) -> tuple[ScheduledSeq, ...]:
        if self._seqs is None:
            self._seqs = tuple(
                ScheduledSeq(
                    req.request_id,
                    req.token_ids(ctx, ctx + q),
                    q,
                    ctx,
                    table,
                    emit,
                    ctx < req.num_prompt_tokens or q > 1,
                )
                for req, q, ctx, emit, table in zip(
                    self.requests, self.query_lens, self.context_lens, self.emits, self.block_tables
                )
            )
        return self._seqs

    # ---- filled by the scheduler ----
    def add_seq(self, req: Request, num_new_tokens: int, num_placeholders: int = 0) -> None:
        """Schedule `num_new_tokens` of `req` after its computed tokens (which the scheduler then advances);
        `num_placeholders`: its tokens sampled by steps still in flight (`engine.core.pipeline_scheduler`), which
        the step's last token may be."""
        ctx = req.num_computed_tokens
        num_prompt_tokens = req.num_prompt_tokens
        self.requests.append(req)
        self.num_seqs += 1
        self._query.append(num_new_tokens)
        self._context.append(ctx)
        emits = ctx + num_new_tokens == req.num_tokens + num_placeholders
        self._emits.append(emits)
        self.num_emitting_seqs += emits
        self._num_blocks.append(len(req.block_ids))
        self.num_batched_tokens += num_new_tokens
        if num_new_tokens == 1 and ctx >= num_prompt_tokens:
            self.num_decode_tokens += 1
        else:
            self.num_prefill_tokens += num_new_tokens

    def remove_seq(self, req: Request) -> int:
        """Unschedule `req` (a victim of priority preemption; not for plans with bulk rows); returns its
        tokens."""
        assert not self._has_bulk
        i = self.requests.index(req)
        n = self._query[i]
        is_decode = n == 1 and self._context[i] >= req.num_prompt_tokens
        self.num_emitting_seqs -= self._emits[i]
        for column in (self.requests, self._query, self._context, self._emits, self._num_blocks):
            del column[i]
        self.num_seqs -= 1
        self.num_batched_tokens -= n
        if is_decode:
            self.num_decode_tokens -= 1
        else:
            self.num_prefill_tokens -= n
        return n

    def add_running(self, requests: list[Request], query: list[int], context: list[int], num_blocks: list[int],
                    num_batched_tokens: int, num_prefill_tokens: int) -> None:
        """Schedule every one of `requests` (the running queue, all of which emit) at once, from lists of
        their query lengths, context lengths and block-table lengths."""
        self.requests = requests
        self.num_seqs = len(requests)
        self._query, self._context, self._num_blocks = query, context, num_blocks
        self._emits = [True] * len(requests)
        self.num_emitting_seqs = len(requests)
        self._set_totals(num_batched_tokens, num_prefill_tokens)

    def add_running_columns(self, requests: list[Request], bulk: ColumnRows, context_sum: int,
                            num_batched_tokens: int, num_prefill_tokens: int,
                            longest_decode: Callable[[], int] | None = None) -> None:
        """`add_running` from the fast path's columns: `bulk` the plan's leading (bulk) rows (their arrays built on
        first use), `context_sum` their context sum;
        `longest_decode()` their longest context where every one of them is a decode."""
        self.requests = requests
        self.num_seqs = len(requests)
        self._columns = bulk
        self.num_emitting_seqs = len(requests)  # (the bulk rows always emit)
        self._bulk_context_sum = context_sum
        if longest_decode is not None:
            self._bulk_decodes = (len(requests), longest_decode)
        self._set_totals(num_batched_tokens, num_prefill_tokens)

    def sequence_record(self) -> tuple[ColumnRows | None, list[int], list[int], list[bool]]:
        """The plan's sequences as it holds them: the bulk rows (None without), then the query lengths, context
        lengths and emits of the sequences after them (all of them without bulk rows); do not modify."""
        return self._columns, self._query, self._context, self._emits

    @property
    def _has_bulk(self) -> bool:
        return self._columns is not None

    def _resolve_bulk(self) -> BulkRows:
        if self._bulk is None:
            assert self._columns is not None
            self._bulk = self._columns()
        return self._bulk

    def _set_totals(self, num_batched_tokens: int, num_prefill_tokens: int) -> None:
        self.num_batched_tokens = num_batched_tokens
        self.num_prefill_tokens = num_prefill_tokens
        self.num_decode_tokens = num_batched_tokens - num_prefill_tokens
