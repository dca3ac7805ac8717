"""ScalerFuture: a real concurrent.futures.Future whose result is deserialized on first use."""

from __future__ import annotations

import concurrent.futures
from typing import TYPE_CHECKING, Any

import cloudpickle

from scaler.client.profiling import ProfilingInfo
from scaler.client.task_warnings import issue_task_warnings
from scaler.errors import (
    RemoteTaskError,
    RemoteTraceback,
    SerializationError,
    TaskNotDoneError,
    TaskRejectedError,
    WorkerDiedError,
)
from scaler.protocol import messages as m
from scaler.protocol.serializer import Serializer, loads
from scaler.utility.blocking import waiting_for_tasks

if TYPE_CHECKING:
    from scaler.client.connection import ClientConnection

_FINISHED = "FINISHED"
_CANCELLED_STATES = ("CANCELLED", "CANCELLED_AND_NOTIFIED")


class ScalerFuture(concurrent.futures.Future):
    """Works with `concurrent.futures.wait`, `as_completed` and `add_done_callback` like any other future.

    Done-callbacks run on the client's I/O thread, as an executor's run on its management thread.
    Warnings the task raised are issued again by the first `result()` or `exception()` that hands out
    its outcome, in that caller's thread, so the caller's warning filters apply to them.
    """

    def __init__(self, task_id: int, connection: ClientConnection, serializer: Serializer) -> None:
        super().__init__()
        self._task_id = task_id
        self._connection = connection
        self._serializer = serializer
        self._decoded = False
        self._value: Any = None
        self._profile: m.TaskProfile | None = None
        self._cancel_refused = False
        # Warnings of the task, and of the quiet tasks of its graph (a list shared by the graph's
        # futures), held until the outcome is handed out; see scaler/client/task_warnings.py.
        self._warnings: list[m.TaskWarning] | None = None
        self._graph_warnings: list[m.TaskWarning] | None = None

    @property
    def task_id(self) -> int:
        return self._task_id

    def result(self, timeout: float | None = None) -> Any:
        try:
            if self.done():
                payload = super().result(timeout)
            else:
                with waiting_for_tasks():
                    payload = super().result(timeout)
        except BaseException:
            if self._warnings is not None or self._graph_warnings:
                self.issue_task_warnings()
            raise
        if self._warnings is not None or self._graph_warnings:
            self.issue_task_warnings()
        if not self._decoded:
            with self._condition:
                if not self._decoded:
                    self._value = _deserialize_result(self._serializer, payload)
                    self._decoded = True
        return self._value

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self.done():
            error = super().exception(timeout)
        else:
            with waiting_for_tasks():
                error = super().exception(timeout)
        if self._warnings is not None or self._graph_warnings:
            self.issue_task_warnings()
        return error

    def issue_task_warnings(self) -> None:
        """Issue here, once, the warnings the finished task raised (result() and exception() call this)."""
        with self._condition:
            if self._state != _FINISHED:
                return
            held, self._warnings = self._warnings or [], None
            if self._graph_warnings:
                held = [*self._graph_warnings, *held]
                self._graph_warnings.clear()
        issue_task_warnings(held)

    def profiling_info(self) -> ProfilingInfo:
        """Duration, CPU time and peak memory of the task; needs `profiling=True` and a finished task."""
        if not self.done():
            raise TaskNotDoneError("the task has not finished yet: call result() first")
        if self._profile is None:
            raise ValueError("this task was not profiled: submit it with profiling=True")
        profile = self._profile
        return ProfilingInfo(
            duration_us=profile.duration_us, peak_memory=profile.peak_memory_bytes,
            cpu_time_s=profile.cpu_time_us / 1e6,
        )

    def cancel(self, force: bool = False) -> bool:
        """Cancel the task if it has not started; True only when it is certain it will not run.

        With `force=True` a running task is stopped too (its worker replaces the processor running it).
        """
        with self._condition:
            if self._state == _FINISHED:
                return False
            if self._state in _CANCELLED_STATES:
                return True
        return self._connection.cancel_future(self, force)

    # Called by the connection's I/O thread only.

    def _hold_warning(self, warning: m.TaskWarning) -> None:
        if self._warnings is None:
            self._warnings = []
        self._warnings.append(warning)

    def _deliver(self, payload: m.Buffer) -> None:
        if not self.done():
            concurrent.futures.Future.set_result(self, payload)

    def _fail(self, error: BaseException) -> None:
        if not self.done():
            concurrent.futures.Future.set_exception(self, error)

    def _refuse_cancel(self) -> None:
        with self._condition:
            self._cancel_refused = True
            self._condition.notify_all()

    def _expect_cancel_outcome(self) -> None:
        """Called before the cancel request goes out, so that an early refusal is not missed."""
        with self._condition:
            self._cancel_refused = False

    def _wait_for_cancel_outcome(self, timeout: float) -> None:
        with self._condition:
            self._condition.wait_for(lambda: self._state != "PENDING" or self._cancel_refused, timeout)

    def _cancel_locally(self) -> None:
        if concurrent.futures.Future.cancel(self):
            # Moves to CANCELLED_AND_NOTIFIED, which is what wait() and as_completed() look for.
            self.set_running_or_notify_cancel()


def _deserialize_result(serializer: Serializer, payload: m.Buffer) -> Any:
    try:
        return loads(serializer, payload)
    except Exception as error:
        raise SerializationError(f"could not deserialize a task result: {type(error).__name__}: {error}") from error


def exception_from_failure(failure: m.TaskFailure) -> BaseException:
    """Rebuild what the client should raise for a failed task."""
    kind = failure.kind
    if kind == m.FailureKind.RAISED:
        error: BaseException
        try:
            error = cloudpickle.loads(failure.exception) if failure.exception else None  # type: ignore[assignment]
        except Exception:
            error = None  # type: ignore[assignment]
        if not isinstance(error, BaseException):
            error = RemoteTaskError(failure.type_name, failure.message)
        if failure.traceback:
            error.__cause__ = RemoteTraceback(failure.traceback)
        return error
    if kind == m.FailureKind.WORKER_DIED:
        return WorkerDiedError(failure.message or "the worker running this task died")
    if kind == m.FailureKind.SERIALIZATION:
        error = SerializationError(failure.message)
        if failure.traceback:
            error.__cause__ = RemoteTraceback(failure.traceback)
        return error
    if kind == m.FailureKind.REJECTED:
        return TaskRejectedError(failure.message)
    return RemoteTaskError(failure.type_name or kind.name, failure.message)
