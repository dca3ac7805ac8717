"""BrokenScalerExecutor: what the executor raises once its cluster is gone, as ProcessPoolExecutor does."""

from __future__ import annotations

import concurrent.futures

from scaler.errors import ConnectionFailedError, RemoteTraceback


class BrokenScalerExecutor(concurrent.futures.BrokenExecutor, ConnectionFailedError):
    """The scheduler is gone or unreachable: this executor can run nothing more.

    It is a `concurrent.futures.BrokenExecutor`, so code written for `BrokenProcessPool` handles it,
    and a Scaler `ConnectionFailedError`, so code written for the native client does too. The
    client's own error is attached as `__cause__`.
    """


def is_cluster_lost(error: BaseException) -> bool:
    """True when `error` is the client reporting a dead link, not an error raised by a task.

    A task may itself raise ConnectionFailedError (say it talks to another cluster); the client
    attaches the remote traceback to every exception a task raised, and never to its own.
    """
    return isinstance(error, ConnectionFailedError) and not isinstance(error.__cause__, RemoteTraceback)


def broken_from(error: BaseException, address: str) -> BrokenScalerExecutor:
    broken = BrokenScalerExecutor(
        f"the Scaler cluster at {address} is gone ({error}); create a new executor once it is back"
    )
    broken.__cause__ = error
    return broken
