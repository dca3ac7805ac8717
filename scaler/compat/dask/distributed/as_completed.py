"""`as_completed`: futures in the order they finish, as dask.distributed's (also `async for`)."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Any, Iterable, Iterator

from scaler.compat.dask.distributed.durations import seconds
from scaler.compat.dask.distributed.future import Future
from scaler.utility.blocking import waiting_for_tasks


class as_completed:  # noqa: N801 - dask's name
    """Iterate over futures as they finish; `add(future)` and `update(futures)` while iterating.

    `with_results=True` yields `(future, result)`; a failed future's exception is then raised, or yielded as
    its result with `raise_errors=False`. `timeout` (seconds from construction) makes a `next` that would
    wait past it raise TimeoutError. Works with `for` and `async for`.
    """

    def __init__(
        self, futures: Iterable[Future] | None = None, loop: Any = None, with_results: bool = False,
        raise_errors: bool = True, *, timeout: Any = None,
    ) -> None:
        self.with_results = with_results
        self.raise_errors = raise_errors
        timeout = seconds(timeout)
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._timeout = timeout
        self._finished: queue.SimpleQueue[Future] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._count = 0  # added and not yet handed out
        if futures is not None:
            self.update(futures)

    def add(self, future: Future) -> None:
        if not isinstance(future, Future):
            raise TypeError(f"as_completed takes Futures, got {type(future).__name__}")
        with self._lock:
            self._count += 1
        future._state.outcome.add_done_callback(lambda _: self._finished.put(future))

    def update(self, futures: Iterable[Future]) -> None:
        for future in futures:
            self.add(future)

    def count(self) -> int:
        with self._lock:
            return self._count

    def is_empty(self) -> bool:
        return self.count() == 0

    def has_ready(self) -> bool:
        return not self._finished.empty()

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        future = self._take(block=True)
        if future is None:
            raise StopIteration
        return self._item(future)

    def __aiter__(self) -> as_completed:
        return self

    async def __anext__(self) -> Any:
        if self.is_empty():
            raise StopAsyncIteration
        loop = asyncio.get_running_loop()
        future = await loop.run_in_executor(None, self._take, True)
        if future is None:
            raise StopAsyncIteration
        if self.with_results:
            await _settled(future)  # the result is fetched without blocking the loop
        return self._item(future)

    def next_batch(self, block: bool = True) -> list[Any]:
        """Every future finished by now (at least one if `block`), each handed out once."""
        batch = []
        first = self._take(block)
        while first is not None:
            batch.append(self._item(first))
            first = self._take(False)
        return batch

    def batches(self) -> Iterator[list[Any]]:
        while not self.is_empty():
            yield self.next_batch(block=True)

    def _take(self, block: bool) -> Future | None:
        with self._lock:
            if self._count == 0:
                return None
        try:
            if not block:
                future = self._finished.get_nowait()
            else:
                wait = None if self._deadline is None else max(0.0, self._deadline - time.monotonic())
                with waiting_for_tasks():
                    future = self._finished.get(timeout=wait)
        except queue.Empty:
            if not block:
                return None
            raise TimeoutError(f"as_completed: no future finished within {self._timeout}s") from None
        with self._lock:
            self._count -= 1
        return future

    def _item(self, future: Future) -> Any:
        if not self.with_results:
            return future
        try:
            result = future._result()
        except Exception as error:
            if self.raise_errors:
                raise
            result = error
        return future, result


async def _settled(future: Future) -> None:
    try:
        await future
    except BaseException:
        pass  # raised, or given as the result, by _item
