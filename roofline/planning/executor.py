"""Where the planner's simulations run: independent tasks mapped over a pluggable executor.

    with LocalExecutor(num_workers=2) as executor:       # spawned processes on this machine (1: in this process)
        results = executor.map(fn, items)                # in the order of `items`, whatever ran first
    with RayExecutor("auto") as executor:                # a Ray cluster (`--ray-address ADDR|auto`)
        results = executor.map(fn, items)

`fn` must be a module-level function and `items` must pickle. Each task is a pure function of its item, and
results come back in item order, so a plan is identical on any executor and any number of workers.

Ray is an optional extra (`pip install 'roofline[ray]'`); it is imported only when a `RayExecutor` is used.
`RayExecutor(None)` uses a Ray already initialised in this process (tests start a small local one), or starts
a local one.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from types import TracebackType
from typing import Any, Protocol, TypeVar

from roofline.errors import UserError

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    """Maps a function over independent items, returning the results in item order."""

    def map(self, fn: Callable[[T], R], items: list[T], on_done: Callable[[], None] | None = None) -> list[R]: ...

    def describe(self) -> str: ...

    def close(self) -> None: ...

    def __enter__(self) -> Executor: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...


class LocalExecutor:
    """A pool of `num_workers` spawned processes, started at the first map with more than one item and reused
    until `close` (so workers keep their caches across rounds); one worker runs everything in this process."""

    def __init__(self, num_workers: int = 1) -> None:
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise UserError(f"--workers: must be a positive integer, got {num_workers!r}")
        self.num_workers = num_workers
        self._pool: ProcessPoolExecutor | None = None

    def map(self, fn: Callable[[T], R], items: list[T], on_done: Callable[[], None] | None = None) -> list[R]:
        """`fn` of every item, in item order; `on_done()` after each item finishes (progress)."""
        if self.num_workers <= 1 or len(items) <= 1:
            results = []
            for item in items:
                results.append(fn(item))
                if on_done is not None:
                    on_done()
            return results
        if self._pool is None:
            # spawn, not fork: workers start clean (no inherited threads or locks) on every platform. Workers ignore
            # SIGINT: a Ctrl-C reaches the whole process group, and only this process handles it (`kill`).
            self._pool = ProcessPoolExecutor(max_workers=self.num_workers,
                                             mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_ignore_sigint)
        futures: list[Future[R]] = [self._pool.submit(fn, item) for item in items]
        try:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    future.result()  # (raises a task's exception at once)
                    if on_done is not None:
                        on_done()
            return [f.result() for f in futures]
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        """End the workers now, their tasks unfinished (an interrupt or an error: nothing waits for them)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list(getattr(pool, "_processes", {}).values())  # (no public handle on the workers)
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(timeout=2)

    def describe(self) -> str:
        return "this process" if self.num_workers == 1 else f"{self.num_workers} local worker processes"

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class RayExecutor:
    """One Ray task per item (1 CPU each) on the cluster at `address` ("auto": the one this machine belongs to;
    None: a Ray already initialised here, else a new local one). Ray is connected at the first map and left
    as found: shut down at `close` only if this executor started it."""

    def __init__(self, address: str | None = None) -> None:
        self.address = address
        self._started = False

    def _ray(self) -> Any:
        try:
            import ray
        except ImportError:
            raise UserError("--ray-address: Ray is not installed; install the extra: pip install 'roofline[ray]'") \
                from None
        if not ray.is_initialized():
            try:
                ray.init(address=self.address, include_dashboard=False, logging_level=logging.ERROR,
                         log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise UserError(f"--ray-address: cannot connect to Ray at '{self.address}': {first}; "
                                f"allowed: a Ray address (host:port, ray://host:port) or auto") from None
            self._started = True
        return ray

    def map(self, fn: Callable[[T], R], items: list[T], on_done: Callable[[], None] | None = None) -> list[R]:
        if not items:
            return []
        ray = self._ray()
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        refs = [remote.remote(item) for item in items]
        try:
            pending = list(refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                if on_done is not None:
                    for _ in done:
                        on_done()
            return list(ray.get(refs))
        except BaseException:
            for ref in refs:  # an interrupt or a failed task: nothing waits for the others
                ray.cancel(ref, force=True)
            raise

    def describe(self) -> str:
        return f"Ray at {self.address}" if self.address else "a local Ray"

    def close(self) -> None:
        if self._started:
            import ray

            ray.shutdown()
            self._started = False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
