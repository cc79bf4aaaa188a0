"""The scheduler's waiting queue, one class per scheduling policy (vLLM V1 `vllm/v1/core/sched/request_queue.py`).

    waiting = create_request_queue("fcfs")    # or "priority"; ValueError naming the allowed ones otherwise
    waiting.add_request(req); waiting.peek_request(); waiting.pop_request()
    waiting.prepend_request(req)              # a preempted request goes back: to the front (FCFS), by priority

Under "priority" the lowest (priority, arrival time, request id) goes first, as vLLM's `Request.__lt__`
orders them.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from engine.core.config import POLICIES
from engine.core.request import Request


class RequestQueue(Protocol):
    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Request]: ...

    def add_request(self, req: Request) -> None: ...

    def prepend_request(self, req: Request) -> None: ...

    def peek_request(self) -> Request: ...

    def pop_request(self) -> Request: ...

    def remove_request(self, req: Request) -> None: ...


class FCFSRequestQueue(deque[Request]):
    """First come, first served; a preempted request goes back to the front. A deque itself, so that the scheduler's
    `len(waiting)` and `while waiting` (three a step) are the deque's C calls, not a Python `__len__` each."""

    __slots__ = ()

    def add_request(self, req: Request) -> None:
        self.append(req)

    def prepend_request(self, req: Request) -> None:
        self.appendleft(req)

    def peek_request(self) -> Request:
        return self[0]

    def pop_request(self) -> Request:
        return self.popleft()

    def remove_request(self, req: Request) -> None:
        self.remove(req)


class PriorityRequestQueue:
    """Lowest (priority, arrival time, request id) first; a preempted request goes back by its priority."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, str, Request]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        """In the order they would be popped."""
        return (entry[3] for entry in sorted(self._heap, key=lambda e: e[:3]))

    def add_request(self, req: Request) -> None:
        heapq.heappush(self._heap, (req.priority, req.arrival_time_s, req.request_id, req))

    def prepend_request(self, req: Request) -> None:
        self.add_request(req)

    def peek_request(self) -> Request:
        return self._heap[0][3]

    def pop_request(self) -> Request:
        return heapq.heappop(self._heap)[3]

    def remove_request(self, req: Request) -> None:
        self._heap = [e for e in self._heap if e[3] is not req]
        heapq.heapify(self._heap)


def create_request_queue(policy: str) -> RequestQueue:
    """The waiting queue of `policy` ("fcfs" or "priority")."""
    if policy == "fcfs":
        return FCFSRequestQueue()
    if policy == "priority":
        return PriorityRequestQueue()
    raise ValueError(f"scheduling policy must be one of {', '.join(POLICIES)}, got {policy!r}")
