"""ExecutorFuture: the future `ScalerExecutor.submit` returns.

It follows one `ScalerFuture` and differs in a single way: when the cluster is gone it fails with
`BrokenScalerExecutor`, as a `ProcessPoolExecutor` future fails with `BrokenProcessPool`. Results
are still deserialized lazily, by the followed future, on the first `result()`.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable

from scaler.client.future import ScalerFuture, cancel_and_notify
from scaler.compat.futures.broken import broken_from, is_cluster_lost

# Stands for "the result lives in the followed future" in this future's own result slot.
_IN_SOURCE = object()


class ExecutorFuture(concurrent.futures.Future):
    def __init__(
        self, source: concurrent.futures.Future, address: str, on_settled: Callable[[ExecutorFuture], None]
    ) -> None:
        super().__init__()
        self._source = source
        self._address = address
        self._on_settled = on_settled

    @property
    def source(self) -> concurrent.futures.Future:
        """The followed ScalerFuture."""
        return self._source

    def follow(self) -> None:
        """Start following; separate from __init__ so the owner can track us before we can settle."""
        self._source.add_done_callback(self._settle)

    def cancel(self) -> bool:
        """Cancel the call if it has not started; True only when it is certain it will not run.

        Like `ScalerFuture.cancel()`, this waits for the scheduler's answer.
        """
        if self.done():
            return self.cancelled()
        if not self._source.cancel():
            return False
        self._settle(self._source)
        return self.cancelled()

    def result(self, timeout: float | None = None) -> Any:
        try:
            value = super().result(timeout)
        except BaseException:
            self._issue_task_warnings()
            raise
        return self._source.result() if value is _IN_SOURCE else value

    def exception(self, timeout: float | None = None) -> BaseException | None:
        error = super().exception(timeout)
        self._issue_task_warnings()
        return error

    def _issue_task_warnings(self) -> None:
        """The call's warnings, issued by the caller who is handed its outcome (see ScalerFuture)."""
        if self.done() and not self.cancelled() and isinstance(self._source, ScalerFuture):
            self._source.issue_task_warnings()

    def _settle(self, source: concurrent.futures.Future) -> None:
        """Copy the followed future's outcome; runs where that future settles: on the client's I/O thread, or
        inline on the caller's if it was done already or the client's link had ended (client/connection.py).

        No lock is held while the outcome is set: that runs the user's done-callbacks, which may
        wait on anything. Settling twice (cancel() and the callback both get here) is harmless.
        """
        if source.cancelled():
            cancel_and_notify(self)
        else:
            # The base class's: ScalerFuture.exception() would issue the task's warnings on this thread.
            error = concurrent.futures.Future.exception(source, timeout=0)
            try:
                if error is None:
                    self.set_result(_IN_SOURCE)
                elif is_cluster_lost(error):
                    self.set_exception(broken_from(error, self._address))
                else:
                    self.set_exception(error)
            except concurrent.futures.InvalidStateError:
                pass  # settled already
        self._on_settled(self)
