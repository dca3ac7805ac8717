"""Where the outcome of a task lands: a ScalerFuture (one task), or a MapCollector (every task of a map).

The client's I/O thread hands each outcome to the sink registered for the task id (result_routing.py),
without asking which kind it is: both kinds take the same four calls.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Protocol

from scaler.protocol import messages as m


class ResultSink(Protocol):
    """Called by the client's I/O thread only, once per task at most, except `hold_warning`."""

    def deliver(self, task_id: int, payload: m.Buffer) -> None:
        """The task's serialized result."""

    def fail(self, task_id: int, error: BaseException) -> None:
        """The task failed, or will never finish (the scheduler is lost): `error` is what the caller gets."""

    def mark_canceled(self, task_id: int) -> None:
        """The task was canceled before it ran."""

    def hold_warning(self, task_id: int, warning: m.TaskWarning) -> None:
        """A warning the task raised; it arrives before the outcome and is issued with it."""


class MapCollector:
    """The results of one `Client.map`: its tasks have consecutive ids, so a task's id gives its place.

    One sink for all the tasks of the map is cheaper than a future, or any object, per task.
    """

    def __init__(self, first_task_id: int, count: int) -> None:
        self._first_task_id = first_task_id
        self.payloads: list[Any] = [None] * count
        # Failures by place in the map; map() raises the first in argument order.
        self.errors: dict[int, BaseException] = {}
        self.remaining = count
        self.finished = threading.Event()
        # Warnings the tasks raised, in arrival order; map() issues them before it returns or raises.
        self.warnings: list[m.TaskWarning] = []
        if count == 0:
            self.finished.set()

    @property
    def task_ids(self) -> range:
        return range(self._first_task_id, self._first_task_id + len(self.payloads))

    def deliver(self, task_id: int, payload: m.Buffer) -> None:
        self.payloads[task_id - self._first_task_id] = payload
        self.remaining -= 1
        if self.remaining == 0:
            self.finished.set()

    def fail(self, task_id: int, error: BaseException) -> None:
        self.errors[task_id - self._first_task_id] = error
        self.remaining -= 1
        self.finished.set()  # fail fast: map raises as soon as anything fails

    def mark_canceled(self, task_id: int) -> None:
        self.fail(task_id, concurrent.futures.CancelledError())

    def hold_warning(self, task_id: int, warning: m.TaskWarning) -> None:
        self.warnings.append(warning)
