"""The scheduler's fast path with its columns' state in C (`engine/core/_kvcore.c`: `ColumnsCore`, `FastPathCore`).

    from engine.core.compiled_fast import new_fast_path
    fast = new_fast_path(scheduler)    # the compiled one where built and the manager is compiled, else FastPath

`CompiledColumns` keeps `engine.core.fast_path.RunningColumns`' state as C fields (the rows of a period by
`_col_seq`, each phase's decoders as a list linked in queue order, the stops as a heap) with its operations;
`CompiledFastPath` runs `FastPath.schedule_running` and `FastPath.update` in C in the common case (a period without
prefill rows whose step the free blocks cover, every admission sampling its token) and `FastPath`'s Python methods,
on the same C columns, in every other case (a period starting or ending, prompt chunks, preemptions). For an FCFS
`Scheduler` it also runs the scheduler's whole step (`schedule_step`: `Scheduler.schedule` with its waiting queue's
admissions; `update_step`: `Scheduler.update_from_output`; `add_request_step`: `Scheduler.add_request`), so that a
step makes no Python call of engine.core in the common case. The Python
classes stay the reference: tests/test_core_properties.py compares both step by step. Moving the fast path's code to
C while its state stayed in Python objects saved nothing (docs/benchmark-history/2026-11-30f-steploop2.md): the
state is what moved here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from engine.core import compiled_kv
from engine.core.fast_path import FastPath, RunningColumns, SchedulerState
from engine.core.native import _kvcore
from engine.core.request import Request, RequestStatus
from engine.core.step_plan import ColumnRows, StepPlan

# Built with the fast path's types (a build from before them: the Python fast path).
FAST_PATH_BUILT = _kvcore is not None and hasattr(_kvcore, "FastPathCore")

if FAST_PATH_BUILT or TYPE_CHECKING:
    _kvcore.bind_fast_path_types(Request, StepPlan, ColumnRows, RequestStatus.FINISHED_STOPPED,
                                 RequestStatus.FINISHED_LENGTH_CAPPED)

    class CompiledColumns(_kvcore.ColumnsCore, RunningColumns):
        """`RunningColumns` in C (`ColumnsCore`); `longest_context` and `bulk_rows` are the Python class's."""

        def __init__(self, reqs: list[Request], token: int, block_size: int) -> None:
            _kvcore.ColumnsCore.__init__(self, reqs, token, block_size, np.empty(1024))

        def _grow_times(self) -> None:
            """Double the times array into a new one (views of the old one stay as they are)."""
            self.times_array = np.concatenate((self.times_array, np.empty(len(self.times_array))))

    class CompiledFastPath(_kvcore.FastPathCore, FastPath):
        """`FastPath` whose `schedule_running` and `update` run in C in the common case, on `CompiledColumns`."""

        new_columns = CompiledColumns

        def __init__(self, scheduler: SchedulerState) -> None:
            _kvcore.FastPathCore.__init__(self, scheduler, scheduler.kv, FastPath.schedule_running, FastPath.update)


# Built with the scheduler's whole step in C (`FastPathCore.schedule_step` / `update_step`; a build from before it: the
# Python `Scheduler.schedule` and `update_from_output` on the compiled fast path).
STEP_BUILT = FAST_PATH_BUILT and hasattr(_kvcore, "bind_step_types")
_STEP_BOUND = False
# The step in C makes its plans and `_Blocked`s at their slots directly (False: StepPlan's or `_Blocked`'s slots are not
# the ones it knows, and it calls the class; tests/test_compiled_fast.py requires True where built, so that a new slot
# is added there too).
STEP_PLANS_DIRECT = False


def bind_step(blocked: type, add_request: Callable[..., None]) -> bool:
    """Give the extension what the scheduler's step in C reads, makes and calls: `engine.core.scheduler._Blocked` (its
    slots; `_Blocked.of` is done in C) and `Scheduler.add_request` (the checks' errors). Whether the step in C is built
    (called once, by engine.core.scheduler)."""
    global _STEP_BOUND, STEP_PLANS_DIRECT
    if STEP_BUILT:
        STEP_PLANS_DIRECT = _kvcore.bind_step_types(blocked, RequestStatus.RUNNING, RequestStatus.WAITING, add_request)
        _STEP_BOUND = True
    return _STEP_BOUND


def compiled_step(fast: FastPath | None) -> CompiledFastPath | None:
    """`fast` where it can run its scheduler's whole step (the step in C built and bound, `fast` the compiled fast
    path), else None."""
    if _STEP_BOUND and isinstance(fast, CompiledFastPath):
        return fast
    return None


def fast_path_class(scheduler: SchedulerState) -> type[FastPath]:
    """The fast path `new_fast_path` makes for `scheduler`: the compiled one where the extension is built with it and
    selected (`compiled_kv.COMPILED`) and the scheduler's KV cache manager is the compiled one."""
    if FAST_PATH_BUILT and compiled_kv.COMPILED and isinstance(scheduler.kv, compiled_kv.CompiledKVCacheManager):
        return CompiledFastPath
    return FastPath


def new_fast_path(scheduler: SchedulerState) -> FastPath:
    return fast_path_class(scheduler)(scheduler)
