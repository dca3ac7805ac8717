"""A progress bar over a number of tasks: what `Client.map(..., progress=True)` and `get(..., progress=True)` show.

The bar is tqdm's, from `tqdm.auto`: a widget in Jupyter (with ipywidgets installed; without them tqdm
warns once and draws text), text on stderr elsewhere. Counting is cheap and thread-safe, so it can be fed
from the client's I/O thread (future done-callbacks) or polled from the caller's thread (`wait_with_progress`).
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import IO, Any, Callable

# How often a waiting caller reads the count of finished tasks into the bar.
REFRESH_SECONDS = 0.1

# A bar younger than this shows no rate and no time left: results arrive in batches, so tasks per
# second measured over a few milliseconds (an instant map: millions of tasks/s) say nothing.
MIN_RATE_SECONDS = 1.0

_BAR_WITHOUT_RATE = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}]"


def _bar_class() -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError:
        raise ImportError("progress=True needs tqdm: pip install tqdm") from None

    class _Bar(tqdm):  # type: ignore[misc, valid-type]
        # No tqdm monitor thread: every thread of a client has an owner that joins it, and nobody joins that one.
        monitor_interval = 0

        @property
        def format_dict(self) -> dict[str, Any]:
            fields = super().format_dict
            if fields["elapsed"] < MIN_RATE_SECONDS:
                fields["bar_format"] = _BAR_WITHOUT_RATE
            return fields

    return _Bar


class TaskProgress:
    """`total` tasks; `update(n)` when n more finished, `close()` (or leave the `with` block) when done.

    `completed` tasks were already finished when the bar started. The rate shown is the average, since
    the bar started, of the tasks finished while it ran (those finished before would inflate it).
    """

    def __init__(
        self, total: int, description: str = "tasks", file: IO[str] | None = None, completed: int = 0
    ) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._completed = completed
        self._bar = _bar_class()(
            total=total, initial=completed, desc=description, unit="task", file=file, mininterval=REFRESH_SECONDS,
            dynamic_ncols=True, smoothing=0,
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
    with TaskProgress(total, description, file, completed=completed()) as progress:
        while not finished.wait(REFRESH_SECONDS):
            progress.set_completed(completed())
        progress.set_completed(completed())


def wait_for_futures_with_progress(futures: list[concurrent.futures.Future]) -> None:
    """Wait for every future while a bar counts them; done-callbacks run on the client's I/O thread."""
    done = threading.Event()
    finished = [0]
    lock = threading.Lock()

    def count(_: concurrent.futures.Future) -> None:
        with lock:
            finished[0] += 1
            if finished[0] == len(futures):
                done.set()

    if not futures:
        done.set()
    for future in futures:
        future.add_done_callback(count)
    wait_with_progress(done, len(futures), lambda: finished[0], "get")
