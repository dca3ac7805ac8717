"""A progress bar over a number of tasks: what `Client.map(..., progress=True)` and `get(..., progress=True)` show.

The bar is tqdm's, on stderr. Counting is cheap and thread-safe, so it can be fed from the client's
I/O thread (future done-callbacks) or polled from the caller's thread (`wait_with_progress`).
"""

from __future__ import annotations

import threading
from typing import IO, Any, Callable

# How often a waiting caller reads the count of finished tasks into the bar.
REFRESH_SECONDS = 0.1


def _bar_class() -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        raise ImportError("progress=True needs tqdm: pip install tqdm") from None

    class _Bar(tqdm):  # type: ignore[misc, valid-type]
        # No tqdm monitor thread: every thread of a client has an owner that joins it, and nobody joins that one.
        monitor_interval = 0

    return _Bar


class TaskProgress:
    """`total` tasks; `update(n)` when n more finished, `close()` (or leave the `with` block) when done."""

    def __init__(self, total: int, description: str = "tasks", file: IO[str] | None = None) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._completed = 0
        self._bar = _bar_class()(
            total=total, desc=description, unit="task", file=file, mininterval=REFRESH_SECONDS, dynamic_ncols=True
        )

    @property
    def total(self) -> int:
        return int(self._bar.total)

    @property
    def completed(self) -> int:
        return self._completed

    def update(self, count: int = 1) -> None:
        """Count `count` more finished tasks; ignored once closed (a late callback is harmless)."""
        with self._lock:
            if self._closed or count <= 0:
                return
            self._completed += count
            self._bar.update(count)

    def set_completed(self, completed: int) -> None:
        """Move the bar to `completed` finished tasks in all; it never goes back."""
        with self._lock:
            if self._closed or completed <= self._completed:
                return
            self._bar.update(completed - self._completed)
            self._completed = completed

    def close(self) -> None:
        """Draw the final state and release the line. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._bar.close()

    def __enter__(self) -> TaskProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def wait_with_progress(
    finished: threading.Event, total: int, completed: Callable[[], int], description: str = "tasks",
    file: IO[str] | None = None,
) -> None:
    """Wait for `finished` while a bar shows `completed()` out of `total`, read every REFRESH_SECONDS."""
    with TaskProgress(total, description, file) as progress:
        while not finished.wait(REFRESH_SECONDS):
            progress.set_completed(completed())
        progress.set_completed(completed())
