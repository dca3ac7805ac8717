"""Errors a Scaler user can meet, in one place so that every layer raises the same types.

Each is also an instance of what code written for Scaler 1.9.x catches where 1.9.x raised a builtin
error (a `ValueError` for a refused shutdown, a `TimeoutError` for a lost scheduler, ...), so that
such code keeps working; the README's table lists them.
"""

from __future__ import annotations

import concurrent.futures


class ScalerError(Exception):
    """Base class of the errors Scaler itself raises (not those raised by your functions)."""


class ConnectionFailedError(ScalerError, ConnectionError):
    """The scheduler could not be reached, refused us, or stopped answering."""


class SchedulerLostError(ConnectionFailedError, TimeoutError):
    """The scheduler went silent or away while work was outstanding; a TimeoutError too, as in 1.9.x."""


class ClusterStartError(ScalerError, RuntimeError):
    """A local scheduler or workers did not come up (address taken, no scheduler answering, a process died)."""


class ProtectedModeError(ScalerError, ValueError):
    """The scheduler runs in protected mode and refused to shut down; a ValueError too, as in 1.9.x."""


class WorkerDiedError(ScalerError):
    """The worker running the task died, or the task crashed its worker too many times."""


class TaskTimeoutError(ScalerError, TimeoutError):
    """The task ran longer than its worker's --task-timeout-seconds; its processor was replaced."""


class MemoryLimitError(MemoryError, ScalerError):
    """The task's processor went over its worker's --memory-limit-bytes; the processor was replaced.

    MemoryError comes first: it has a constructor of its own, and picklers that rebuild an exception
    with `cls.__new__(cls)` (tblib's, which dask.multiprocessing and distributed install) need it found
    before ScalerError's."""


class NestingLimitError(ScalerError):
    """A task waited on nested tasks while its worker already had its maximum of processors."""


class TaskRejectedError(ScalerError):
    """The scheduler refused the task (malformed, unknown function, or its queue is full)."""


class NoCapableWorkerError(TaskRejectedError):
    """No connected worker had every tag the task requires (`tags=`) within `Client(wait_for_tags_seconds=...)`.

    The message names the tags the task required and those the connected workers had.
    """


class PayloadTooLargeError(ScalerError, ValueError):
    """An argument, object, function or result is larger than the scheduler accepts (--max-message-size-bytes)."""


class SerializationError(ScalerError, TypeError):
    """A function, argument or result could not be serialized or deserialized.

    A TypeError too: pickle raises one for an object it cannot pickle, and code around a call catches that.
    """


class ObjectLostError(ScalerError):
    """A stored object (a large argument, an object, or a task's result) could not be read from its store."""


class TaskNotDoneError(ScalerError, concurrent.futures.InvalidStateError, ValueError):
    """Asked for what only a finished task has (`profiling_info()`); a ValueError too, as in 1.9.x."""


class RemoteTaskError(ScalerError):
    """A task raised an exception that could not be rebuilt here; holds its type name and message."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.remote_message = message


class RemoteTraceback(Exception):
    """Attached as `__cause__` of a task's exception so that printing it shows the remote traceback."""

    def __init__(self, traceback_text: str) -> None:
        super().__init__(traceback_text)
        self.traceback_text = traceback_text

    def __str__(self) -> str:
        return f'\n"""\n{self.traceback_text}"""'


CancelledError = concurrent.futures.CancelledError
