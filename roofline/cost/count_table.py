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

