"""Lazily tabulated per-count operator times (`_CountTable`)."""

from __future__ import annotations

from typing import Any

import numpy as np

_TABLE_BLOCK = 512  # counts per tabulated block: one block covers every decode batch up to 511 sequences


class _CountTable:
    """(seconds, kernels) of the operators that depend on one count (tokens or emitted tokens) of a step, for
    every count, computed lazily in blocks of `_TABLE_BLOCK` counts by one vectorized evaluation of the same
    formulas (`part(counts array)`); a count of 0 has no operators. A mixed prefill+decode step has a token
    count seldom seen before, so evaluating one count at a time would cost a full GEMM tile search per step.

    `span_end` (`StepCostModel.expect_max_num_tokens`, where the formulas are elementwise in the count, so that
    each count gets the float it gets in its own block): the first lookup of a count in [_TABLE_BLOCK, span_end)
    fills every block of that range not yet filled in one evaluation, whose fixed cost (~2.5 ms of Python and
    numpy calls on this machine) is then paid once instead of once per block (16 blocks up to 8,192 tokens,
    which a long simulation fills anyway)."""

    def __init__(self, part: Any) -> None:
        self._part = part
        self._blocks: dict[int, list[float]] = {}
        self._kernels = -1  # kernels of any count >= 1 (the same operators for every count); set with a block
        self.span_end = 0

    def lookup(self, count: int) -> tuple[float, int]:
        if count <= 0:
            return 0.0, 0
        block = self._blocks.get(count // _TABLE_BLOCK)
        if block is None:
            block = self._fill(count // _TABLE_BLOCK)
        return block[count % _TABLE_BLOCK], self._kernels

    def block(self, index: int) -> list[float]:
        """The seconds of counts index x _TABLE_BLOCK ... (index + 1) x _TABLE_BLOCK - 1 as `lookup` gives them
        (count 0's entry is not looked up: `lookup(0)` is 0.0); filled where not yet."""
        block = self._blocks.get(index)
        return self._fill(index) if block is None else block

    def _fill(self, index: int) -> list[float]:
        first = last = index
        if 0 < index * _TABLE_BLOCK < self.span_end:
            first, last = 1, (self.span_end - 1) // _TABLE_BLOCK
            while first in self._blocks:
                first += 1
            while last in self._blocks:
                last -= 1
        # Count 0 of block 0 is never looked up; evaluate 1 there instead so every formula sees a count >= 1.
        counts = np.arange(first * _TABLE_BLOCK, (last + 1) * _TABLE_BLOCK, dtype=np.float64)
        counts[0] = max(counts[0], 1.0)
        seconds, self._kernels = self._part(counts)
        rows = np.broadcast_to(seconds, counts.shape).astype(np.float64).reshape(-1, _TABLE_BLOCK).tolist()
        for i, row in enumerate(rows, first):
            self._blocks.setdefault(i, row)
        return self._blocks[index]



class _OpCountTable:
    """Seconds of each operator that depends on one count (`StepCostModel.breakdown_columns`' token and emit
    operators), for every count, tabulated in blocks of `_TABLE_BLOCK` counts by `evaluate(counts)` (counts >= 1
    -> (operator names, seconds: counts x operators, kernels per count)), kept for the model's life: the
    simulator's `--out` costs a part of steps at a time, and the parts share most of their counts. Only operators
    whose formulas are elementwise in the count (`StepCostModel._op_columns`), so that a count's seconds are those of
    evaluating any array that holds it (tests/test_sim_outputs.py and tests/test_breakdown_tables.py check them
    against `cost(...).breakdown_s`).

    A lookup fills the blocks of its counts not yet filled in one evaluation: a part of the README's workload touches
    every block up to its 8,192-token budget (~26 ms once on the project's VM, against 14-20 ms per part to evaluate
    a part's ~1,500 distinct counts, most of it the fixed cost of the GEMM tilings' numpy calls); later parts
    mostly gather rows."""

    def __init__(self, evaluate: Any) -> None:
        self._evaluate = evaluate
        self._names: list[str] | None = None
        self._kernels = 0  # kernels of any count >= 1 (the same operators for every count)
        self._seconds = np.zeros((0, 0))  # row = count; row 0 (and unfilled blocks) zeros
        self._filled = np.zeros(0, dtype=bool)  # by block

    def columns(self, counts: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
        """(names, seconds: len(counts) x operators, kernels per count) of integer `counts` >= 0: a count of 0 has
        no operators (0.0 seconds, 0 kernels), and no positive count none at all (no names)."""
        positive = counts > 0
        if not positive.any():
            return [], np.zeros((len(counts), 0)), np.zeros(len(counts), dtype=np.int64)
        blocks = counts[positive] // _TABLE_BLOCK
        top = int(blocks.max())
        if top >= len(self._filled) or not self._filled[blocks].all():
            needed = np.zeros(top + 1, dtype=bool)
            needed[blocks] = True
            self._fill(np.flatnonzero(needed))
        assert self._names is not None
        return list(self._names), self._seconds[counts], np.where(positive, self._kernels, 0)

    def _fill(self, blocks: np.ndarray) -> None:
        order = [b for b in blocks.tolist() if b >= len(self._filled) or not self._filled[b]]  # (ascending)
        counts = np.concatenate([np.arange(b * _TABLE_BLOCK, (b + 1) * _TABLE_BLOCK, dtype=np.int64) for b in order])
        counts = counts[counts > 0]
        names, seconds, kernels = self._evaluate(counts)
        if self._names is None:
            self._names, self._kernels = list(names), int(kernels[0])
            self._seconds = np.zeros((0, len(names)))
        assert list(names) == self._names and bool((kernels == self._kernels).all()), "the same operators"
        end = (order[-1] + 1) * _TABLE_BLOCK
        if end > len(self._seconds):
            grown = np.zeros((end, len(self._names)))
            grown[:len(self._seconds)] = self._seconds
            self._seconds = grown
            filled = np.zeros(end // _TABLE_BLOCK, dtype=bool)
            filled[:len(self._filled)] = self._filled
            self._filled = filled
        self._seconds[counts] = seconds
        self._filled[order] = True
