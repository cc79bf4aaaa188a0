"""What a step's cost depends on, as its caller hands it over (`StepCostModel.time_s` / `cost`).

    model.time_s(plan)                                  # a scheduler's StepPlan is a StepShape
    model.time_s(StepArrays(query_lens, context_lens, emits))
    model.breakdown_columns(steps)                      # many steps: (query, context, emits) each, or concatenated

A `StepShape` offers counts, sums and arrays, each computed only if asked for: the cost model takes the cheapest that
determines the step (a step of decodes only: the number of sequences and their context sum; a step with prefills:
the decodes' sums and the prefill chunks' lengths, `seq_sums`; otherwise the arrays). `engine.core.step_plan.StepPlan`
has this shape (the engine does not import the cost model: the protocol is structural). `StepArrays` is a step given
as its arrays.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


class StepShape(Protocol):
    """One step's sequences: the counts and sums the cost model reads first, the arrays where it needs them."""

    @property
    def num_seqs(self) -> int:
        """Sequences in the step."""

    @property
    def num_batched_tokens(self) -> int:
        """Query tokens computed in the step, summed over its sequences."""

    @property
    def num_prefill_tokens(self) -> int:
        """Query tokens of the sequences still in their prompt (a prompt's last token included); 0: every
        sequence is a decode of one token that samples one."""

    @property
    def num_emitting_seqs(self) -> int:
        """Sequences that sample a token."""

    @property
    def num_context_tokens(self) -> int:
        """Tokens already in the KV cache before the step, summed over its sequences."""

    def seq_sums(self, longest: bool = True) -> tuple[int, int, int, list[int], list[int]] | None:
        """The sequences of one query token (count, context sum, longest context; 0 without any, or where not
        `longest`) and the query and context lengths of the others in order; None where only the arrays give them."""

    def seq_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query lengths, context lengths, emits), one entry per sequence."""


class StepArrays:
    """A `StepShape` given as its arrays: query lengths, context lengths (integers) and emits (bools)."""

    __slots__ = ("query", "context", "emits")

    def __init__(self, query: np.ndarray, context: np.ndarray, emits: np.ndarray) -> None:
        self.query, self.context, self.emits = query, context, emits

    @property
    def num_seqs(self) -> int:
        return len(self.query)

    @property
    def num_batched_tokens(self) -> int:
        return int(np.add.reduce(self.query))

    @property
    def num_prefill_tokens(self) -> int:
        """The query tokens of every sequence that is not a one-token decode sampling a token."""
        query = np.asarray(self.query)
        return int(np.add.reduce(query[(query != 1) | ~np.asarray(self.emits, dtype=bool)]))

    @property
    def num_emitting_seqs(self) -> int:
        return int(np.count_nonzero(self.emits))

    @property
    def num_context_tokens(self) -> int:
        return int(np.add.reduce(self.context))

    def seq_sums(self, longest: bool = True) -> None:
        return None  # the arrays are at hand

    def seq_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.query, self.context, self.emits


@runtime_checkable
class ConcatenatedSteps(Protocol):
    """Many steps' sequences held concatenated (the simulator's step records, `engine.core.step_record`): step i's
    are rows offsets[i]:offsets[i + 1] of the `concatenated` (query, context, emits) arrays."""

    @property
    def offsets(self) -> np.ndarray: ...

    @property
    def concatenated(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
