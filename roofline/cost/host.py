"""The executor's host side: CUDA-graph modes, batch padding to the captured sizes, kernel launches and how host
time overlaps device time.

A step's device time is the sum over its operators; the executor (`hw.executor`) adds host time: eager
launches cost kernel_launch_s per kernel, CUDA graphs one replay per graph and pad the batch up to the next
captured size; step_overhead_s per step; with host_overlaps_device the host work hides under the device time
(total = max, plus the idle gap step_gap_s between steps that overlapping leaves); otherwise the rest of the host
work adds, and on a GPU the launches overlap the kernels already launched (total = rest + max(device, launches));
on a CPU everything adds.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

import numpy as np

from roofline.cost.hardware import HardwareProfile
from roofline.cost.roofline_math import Num, _max

# vLLM's CompilationConfig.cudagraph_mode (vllm/config/compilation.py `CUDAGraphMode`; the flag --cudagraph-mode):
# the graph a batch of decodes and a batch with prefills replays up to the largest captured size
# (vllm/v1/cudagraph_dispatcher.py: the mode's `decode_mode()` and `mixed_mode()`), "full" (one launch), "piecewise"
# (the pieces between the layers' attention calls, attention launched from the host) or None (every kernel launched
# from the host; also every batch above the largest captured size). FULL_AND_PIECEWISE is vLLM's default;
# NONE is also --enforce-eager. FULL is left out: whether its graphs take a batch with prefills depends on the
# attention backend (vLLM lowers the mode where the backend cannot).
_GRAPHS_OF_MODE: dict[str, tuple[str | None, str | None]] = {
    "FULL_AND_PIECEWISE": ("full", "piecewise"),
    "FULL_DECODE_ONLY": ("full", None),
    "PIECEWISE": ("piecewise", "piecewise"),
    "NONE": (None, None),
}
CUDAGRAPH_MODE_CHOICES = tuple(_GRAPHS_OF_MODE)
DEFAULT_CUDAGRAPH_MODE = "FULL_AND_PIECEWISE"


class HostModel:
    """The host side of one deployment's steps: which CUDA graph a batch replays, the batch size it is padded to,
    the host time (per-step overhead plus launches) and how it combines with the device time."""

    def __init__(self, hw: HardwareProfile, cudagraph_mode: str, graph_sizes: tuple[int, ...], layers: int) -> None:
        """`cudagraph_mode` (`CUDAGRAPH_MODE_CHOICES`): which batches replay CUDA graphs on a device whose executor
        captures them; `graph_sizes`: the batch sizes they are captured for, ascending; `layers`: the model's
        layers (a piecewise graph is launched in 2 x layers + 1 pieces)."""
        self.hw = hw
        ex = hw.executor
        self.graph_sizes = graph_sizes
        # The mode this device runs: NONE where its executor launches every kernel (`executor.mode: eager`).
        self.cudagraph_mode = cudagraph_mode if ex.mode == "cuda_graphs" else "NONE"
        graphs = _GRAPHS_OF_MODE[self.cudagraph_mode]
        # The graph that runs a batch of decodes and one with prefills, up to the largest captured size: "full",
        # "piecewise" or None (launched from the host).
        self.decode_graph, self.mixed_graph = graphs
        self.max_graph = graph_sizes[-1] if graphs != (None, None) else 0
        # Steps of more tokens than this replay no CUDA graph: their all-reduces take the eager path
        # (`roofline.cost.ops.all_reduce_record`); a CPU runs no CUDA all-reduce. A batch with prefills in a mode
        # without a graph for it (FULL_DECODE_ONLY) is eager at every size.
        self.graph_max_tokens = math.inf if hw.kind == "cpu" else self.max_graph
        self.mixed_eager = hw.kind != "cpu" and self.mixed_graph is None and self.max_graph > 0
        self._layers = layers

    def padded_tokens(self, num_tokens: int, mixed: bool = False) -> int:
        """CUDA graphs: a batch of up to the largest captured size runs the graph of the next size up (`mixed`: a
        batch with prefills, unpadded where such a batch runs without graphs)."""
        if num_tokens == 0 or num_tokens > self.max_graph or (self.mixed_graph is None if mixed
                                                                else self.decode_graph is None):
            return num_tokens
        return self.graph_sizes[bisect.bisect_left(self.graph_sizes, num_tokens)]

    def padded_tokens_array(self, num_tokens: np.ndarray, mixed: np.ndarray) -> np.ndarray:
        """`padded_tokens(n, m)` of each n of an int64 array and m of a bool array (the same integers: the next
        captured size by `bisect_left`'s rule, `searchsorted` side left, on the ascending sizes)."""
        padded = num_tokens.copy()
        if not self.max_graph:
            return padded
        sizes = np.asarray(self.graph_sizes, dtype=np.int64)
        graph = (num_tokens > 0) & (num_tokens <= self.max_graph)
        if self.mixed_graph is None:
            graph &= ~mixed
        if self.decode_graph is None:
            graph &= mixed
        padded[graph] = sizes[np.searchsorted(sizes, num_tokens[graph], side="left")]
        return padded

    def time_s_array(self, num_tokens: np.ndarray, num_prefill_seqs: np.ndarray, num_decode_seqs: np.ndarray,
                     num_kernels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`time_s` of each step of int64 arrays, elementwise: the same operations in the same order on each step's
        numbers (IEEE float64 either way), so the same floats."""
        ex = self.hw.executor
        launches = num_kernels.astype(np.int64)
        graph = (num_tokens > 0) & (num_tokens <= self.max_graph)
        for rows, kind in ((graph & (num_prefill_seqs == 0), self.decode_graph),
                           (graph & (num_prefill_seqs != 0), self.mixed_graph)):
            if kind == "full":
                launches[rows] = 1
            elif kind == "piecewise":
                launches[rows] = 2 * self._layers + 1
        launch_s = launches * ex.kernel_launch_s
        return ex.step_overhead_s + launch_s + ex.step_overhead_per_seq_s * (num_decode_seqs + num_prefill_seqs), \
            launch_s

    def time_s(self, num_tokens: int, num_prefill_seqs: int, num_decode_seqs: int, num_kernels: int
               ) -> tuple[float, float]:
        """Host time (per-step overhead plus launches) and the launches' part of it. Up to the largest captured
        size, a batch replays the graph its kind runs in the CUDA-graph mode (vLLM's default FULL_AND_PIECEWISE:
        one full graph for a batch of decodes; piecewise graphs between the layers' attention calls, which launch
        from the host, for a batch with prefills); a batch without a graph launches every kernel."""
        ex = self.hw.executor
        graph = None  # above the largest captured size: no graph
        if 0 < num_tokens <= self.max_graph:
            graph = self.mixed_graph if num_prefill_seqs else self.decode_graph
        if graph == "full":
            launches = 1
        elif graph == "piecewise":
            launches = 2 * self._layers + 1
        else:
            launches = num_kernels
        launch_s = launches * ex.kernel_launch_s
        return ex.step_overhead_s + launch_s + ex.step_overhead_per_seq_s * (num_decode_seqs + num_prefill_seqs), \
            launch_s

    def combine(self, device_s: Num, host_s: Num, launch_s: Num) -> Any:
        """Step time from device time, host time and the launches' part of the host time. Async scheduling: the
        host work of the next step overlaps this step's device time, so the slower of the two, plus the device idle
        gap between steps that overlapping leaves (`step_gap_s`). Otherwise on a GPU the host prepares the step,
        then launches its kernels while the device runs those already launched (a CUDA launch returns at once), so
        the launches and the device time overlap: the rest of the host time plus the slower of the two. On a CPU the
        ops run on the host one after another: the sum. Floats or arrays (`breakdown_columns`), elementwise."""
        ex = self.hw.executor
        if ex.host_overlaps_device:
            return _max(device_s, host_s) + ex.step_gap_s
        if self.hw.kind == "cpu":
            return device_s + host_s
        return (host_s - launch_s) + _max(device_s, launch_s)
