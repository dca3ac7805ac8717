"""ScalerFuture: a real concurrent.futures.Future whose result is deserialized on first use."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import weakref
from concurrent.futures import _base as future_states
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterable

import cloudpickle

from scaler.client.kept_result import KeptResult
from scaler.client.profiling import ProfilingInfo
from scaler.errors import (
    NoCapableWorkerError,
    ObjectLostError,
    RemoteTaskError,
    RemoteTraceback,
    SerializationError,
    TaskNotDoneError,
    TaskRejectedError,
    WorkerDiedError,
)
from scaler.protocol import messages as m
from scaler.protocol.serializer import Serializer, loads
from scaler.protocol.task_warnings import issue_task_warnings
from scaler.utility.blocking import waiting_for_tasks

if TYPE_CHECKING:
    from scaler.client.connection import ClientConnection

# What a kept future's result is while the value itself stays in a store: result() reads it from there.
_IN_STORE = object()

class ScalerFuture(concurrent.futures.Future):
    """Works with `concurrent.futures.wait`, `as_completed` and `add_done_callback` like any other future.

    Done-callbacks run on the client's I/O thread, as an executor's run on its management thread.
    Warnings the task raised are issued again by the first `result()` or `exception()` that hands out
    its outcome, in that caller's thread, so the caller's warning filters apply to them.

    It is the ResultSink (result_sinks.py) of its task: `deliver`, `fail`, `mark_canceled`,
    `hold_warning` and `hold_profile` are called by the client's I/O thread only.
    """

    def __init__(
        self, task_id: int, connection: ClientConnection, serializer: Serializer, keep: bool = False
    ) -> None:
        super().__init__()
        self._task_id = task_id
        # submit(..., keep=True): the outcome stays on the cluster until release() or collection (kept_result.py).
        self._kept: KeptResult | None = None
        if keep:
            kept = self._kept = KeptResult(connection, task_id)
            weakref.finalize(self, kept.release)
        self._connection = connection
        self._serializer = serializer
        self._decoded = False
        self._value: Any = None
        self._profile: m.TaskProfile | None = None
        self._cancel_answered: threading.Event | None = None  # set when a cancel is refused or the task ends
        # Warnings of the task, and of the quiet tasks of its graph (a list shared by the graph's
        # futures), held until the outcome is handed out; see scaler/protocol/task_warnings.py.
        self._warnings: list[m.TaskWarning] | None = None
        self._graph_warnings: list[m.TaskWarning] | None = None

    @property
    def task_id(self) -> int:
        return self._task_id

    def __await__(self) -> Generator[Any, None, Any]:
        """`await future` in a coroutine: the result, or the task's exception raised, without blocking the loop."""
        yield from settled_in_loop(self).__await__()
        return self.result()

    @property
    def keeps_result(self) -> bool:
        """Submitted with keep=True: its result stays on the cluster, and it may be another task's argument."""
        return self._kept is not None

    @property
    def released(self) -> bool:
        """release() was called: a kept result is gone from the cluster (or will be once the task ends)."""
        return self._kept is not None and self._kept.released

    def release(self) -> None:
        """Let the cluster drop the result kept for this future (keep=True); nothing for other futures.

        Called by itself when the future is garbage-collected. A task that already received the result as an
        argument still gets it. Afterwards the future cannot be passed as an argument, and result() of a result
        that stayed in a store raises ObjectLostError. Safe to call twice."""
        if self._kept is not None:
            self._kept.release()

    def result(self, timeout: float | None = None) -> Any:
        try:
            if self.done():
                payload = super().result(timeout)
            else:
                with waiting_for_tasks():
                    payload = super().result(self._read_until_done(timeout))
        except BaseException:
            if self._warnings is not None or self._graph_warnings:
                self.issue_task_warnings()
            raise
        if self._warnings is not None or self._graph_warnings:
            self.issue_task_warnings()
        if payload is _IN_STORE:
            assert self._kept is not None
            return self._kept.fetch(self._serializer)  # each time: the client does not hold it in between
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
                error = super().exception(self._read_until_done(timeout))
        if self._warnings is not None or self._graph_warnings:
            self.issue_task_warnings()
        return error

    def _read_until_done(self, timeout: float | None) -> float | None:
        """Let this thread read the link for the outcome itself while the client's I/O thread sleeps
        (caller_read.py); the rest of `timeout` to wait as ever."""
        if timeout is None:
            self._connection.read_until(self, None)
            return None
        started = time.monotonic()
        self._connection.read_until(self, timeout)
        return max(0.0, timeout - (time.monotonic() - started))

    def issue_task_warnings(self) -> None:
        """Issue here, once, the warnings the finished task raised (result() and exception() call this)."""
        with self._condition:
            if not self.done() or self.cancelled():
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
        if self.done():
            return self.cancelled()
        return self._connection.cancel_future(self, force)

    # ------------------------------------------------------------------------------------------ I/O thread

    def deliver(self, task_id: int, payload: m.Buffer) -> None:
        if not self.done():
            if self._kept is not None:
                self._kept.outcome_arrived()
            concurrent.futures.Future.set_result(self, payload)

    def deliver_stored(self, stored: m.StoredResult) -> None:
        """A kept result stays in its store: the future completes with where it is, result() reads it there."""
        if not self.done():
            assert self._kept is not None
            self._kept.note_stored(stored)
            concurrent.futures.Future.set_result(self, _IN_STORE)

    def replace_stored(self, stored: m.StoredResult) -> None:
        """The kept result was lost with its store and made again: it is read from its new place now."""
        assert self._kept is not None
        self._kept.note_remade(stored)

    def fail(self, task_id: int, error: BaseException) -> None:
        if not self.done():
            if self._kept is not None:
                self._kept.outcome_arrived()  # the scheduler keeps the failure too, for later dependents
            concurrent.futures.Future.set_exception(self, error)

    def mark_canceled(self, task_id: int) -> None:
        if self._kept is not None:
            self._kept.outcome_arrived()
        cancel_and_notify(self)

    def hold_warning(self, task_id: int, warning: m.TaskWarning) -> None:
        if self._warnings is None:
            self._warnings = []
        self._warnings.append(warning)

    def hold_profile(self, profile: m.TaskProfile) -> None:
        self._profile = profile

    def share_graph_warnings(self, graph_warnings: list[m.TaskWarning]) -> None:
        """The list, shared by the futures of one graph, where the warnings of its quiet tasks land."""
        self._graph_warnings = graph_warnings

    def refuse_cancel(self) -> None:
        # Not a notify on self._condition: a result(timeout) waiting there takes any wake-up for the end of
        # its wait, and would raise TimeoutError at once (concurrent.futures.Future.result does not loop).
        answered = self._cancel_answered
        if answered is not None:
            answered.set()

    def _expect_cancel_outcome(self) -> None:
        """Called before the cancel request goes out, so that an early refusal is not missed."""
        answered = self._cancel_answered = threading.Event()
        self.add_done_callback(lambda _: answered.set())

    def _wait_for_cancel_outcome(self, timeout: float) -> None:
        answered = self._cancel_answered  # set by _expect_cancel_outcome, which comes first
        if answered is not None:
            answered.wait(timeout)


def cancel_and_notify(future: concurrent.futures.Future) -> bool:
    """Cancel a future whose call will not run, in the two steps an executor takes for a call it drops.

    Future.cancel() wakes result() and runs the done-callbacks (outside any lock: they may wait on
    anything); set_running_or_notify_cancel() then wakes wait() and as_completed(). Only the first of
    several callers takes the second step. Returns whether the future ends canceled.
    """
    if not concurrent.futures.Future.cancel(future):
        return False
    with future._condition:
        # CPython's Future has no public way to tell a notified cancel from one not notified yet.
        if future._state == future_states.CANCELLED:
            future.set_running_or_notify_cancel()
    return True


def cancel_without_waiting(futures: Iterable[ScalerFuture], force: bool = False) -> None:
    """Ask for these tasks to be canceled, one message per client; each future settles when its answer comes.

    `ScalerFuture.cancel()` waits for the answer, which comes late for a task queued behind a running one
    (a worker reads cancels between tasks): thousands of futures are canceled together this way. With
    `force`, running tasks are stopped too, as `ScalerFuture.cancel(force=True)` stops one.
    """
    task_ids_by_connection: dict[int, tuple[ClientConnection, list[int]]] = {}
    for future in futures:
        if not future.done():
            connection = future._connection
            task_ids_by_connection.setdefault(id(connection), (connection, []))[1].append(future.task_id)
    for connection, task_ids in task_ids_by_connection.values():
        connection.cancel_tasks(task_ids, force)


def _deserialize_result(serializer: Serializer, payload: m.Buffer) -> Any:
    try:
        return loads(serializer, payload)
    except Exception as error:
        raise SerializationError(f"could not deserialize a task result: {type(error).__name__}: {error}") from error


def exception_from_failure(failure: m.TaskFailure) -> BaseException:
    """Rebuild what the client should raise for a failed task."""
    kind = failure.kind
    if kind == m.FailureKind.RAISED:
        try:
            loaded = cloudpickle.loads(failure.exception) if failure.exception else None
        except Exception:
            loaded = None
        if loaded is None and failure.type_name == "scaler.errors.ObjectLostError":
            return ObjectLostError(failure.message)  # the scheduler's own failure (lineage, PROTOCOL.md §18)
        error: BaseException = (
            loaded if isinstance(loaded, BaseException) else RemoteTaskError(failure.type_name, failure.message)
        )
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
        if failure.type_name == NoCapableWorkerError.__name__:
            return NoCapableWorkerError(failure.message)
        return TaskRejectedError(failure.message)
    return RemoteTaskError(failure.type_name or kind.name, failure.message)


def settled_in_loop(future: concurrent.futures.Future) -> asyncio.Future:
    """An asyncio future of the running loop that completes (with None) once `future` is done.

    Not asyncio.wrap_future: canceling the awaiting coroutine cancels its asyncio future, which wrap_future
    would pass on to `future`, canceling the task itself (a round trip to the scheduler, from the loop's
    thread). A coroutine that stops waiting leaves the task alone, as a dask future's await does.
    """
    loop = asyncio.get_running_loop()
    settled = loop.create_future()
    if future.done():
        settled.set_result(None)
        return settled

    def mark(_: asyncio.Future) -> None:
        if not settled.done():
            settled.set_result(None)

    def wake(_: concurrent.futures.Future) -> None:
        try:
            loop.call_soon_threadsafe(mark, settled)
        except RuntimeError:
            pass  # the loop was closed meanwhile: nobody awaits any more

    future.add_done_callback(wake)
    return settled


def call_when_all_done(futures: list[concurrent.futures.Future], action: Callable[[], object]) -> None:
    """Run `action` once, on the thread that completes the last of `futures` (at once if they are all done)."""
    remaining = [len(futures)]
    lock = threading.Lock()

    def one_done(_: concurrent.futures.Future) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            action()

    for future in futures:
        future.add_done_callback(one_done)
