"""Future: dask.distributed's handle on one key, over a native ScalerFuture (or a scattered object).

Several Future objects may name one key (a second `submit` of the same pure call, `Future(key, client)`):
they share one `KeyState`, and the key is released on the cluster once the last of them is released or
garbage-collected, and no task still waiting needs it, as in dask.
"""

from __future__ import annotations

import concurrent.futures
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Generator, Hashable

from dask._task_spec import TaskRef

from scaler.client.future import ScalerFuture, settled_in_loop
from scaler.client.object_reference import ObjectReference
from scaler.compat.dask.distributed.durations import seconds
from scaler.utility.blocking import waiting_for_tasks

if TYPE_CHECKING:
    from scaler.compat.dask.distributed.client import Client

PENDING = "pending"
FINISHED = "finished"
ERROR = "error"
CANCELLED = "cancelled"
LOST = "lost"


class Outcome(concurrent.futures.Future):
    """A key's outcome, which forgets its done-callbacks once it has called them.

    A callback often holds a Future of the key (`add_done_callback`, `wait`, `as_completed`), and the key's
    state holds its outcome: kept after they ran (as concurrent.futures does), the callbacks would keep
    that Future, hence the key and its kept result on the cluster, alive as long as the key."""

    def _invoke_callbacks(self) -> None:
        super()._invoke_callbacks()  # type: ignore[misc]
        self._done_callbacks: list = []


class KeyState:
    """What the Futures of one key share; its `outcome` completes once the last attempt has ended.

    `native` is the ScalerFuture of the current attempt (a retry replaces it), None for a scattered
    object, which `reference` names instead. `holders` counts the Futures and waiting dependents that
    need the key; at 0 the client releases it.
    """

    __slots__ = (
        "key", "native", "reference", "outcome", "holders", "retries_left", "resubmit", "lock", "cancelled",
        "__weakref__",
    )

    def __init__(self, key: Hashable, native: ScalerFuture | None, reference: ObjectReference | None = None) -> None:
        self.key = key
        self.native = native
        self.reference = reference
        self.outcome: concurrent.futures.Future = Outcome()
        self.holders = 0
        self.retries_left = 0
        self.resubmit: Callable[[], ScalerFuture] | None = None
        self.lock = threading.Lock()
        # Client.cancel was called: the key is forgotten, as in dask, even if its task had already ended.
        self.cancelled = False
        if native is None:
            self.outcome.set_result(None)

    @classmethod
    def cancelled_before_start(cls, key: Hashable) -> KeyState:
        """A key whose task takes a cancelled key: it never runs, and its futures are cancelled, as in dask."""
        state = cls(key, None)
        state.cancelled = True
        return state

    def status(self) -> str:
        if self.cancelled:
            return CANCELLED
        if not self.outcome.done():
            return PENDING
        native = self.native
        if native is None:
            return FINISHED
        if native.cancelled():
            return CANCELLED
        return ERROR if native.exception() is not None else FINISHED

    def argument(self) -> Any:
        """What stands for this key among a task's arguments: the scattered object's reference, else the
        kept native future (a dependency resolved on the cluster)."""
        return self.reference if self.native is None else self.native


class Future(TaskRef):
    """A remotely running computation, as `dask.distributed.Future`.

    `result()`, `exception()`, `done()`, `cancel()`, `status`, `key`, `add_done_callback(fn)` (`fn` gets
    this Future), `release()`, and `await future` in a coroutine. Pass it to `Client.submit`/`map` as an
    argument, also inside lists, tuples, sets and dicts: the task receives its value, resolved on the cluster.

    As dask.distributed's, it is a dask `TaskRef` to its key: inside a dask graph (`delayed(f)(future)`, a task
    `(f, future)`, a persisted collection's values) dask reads it as a dependency on a key outside the graph,
    which the client resolves on the cluster (graph_runs.py). Futures of one key are equal, as there.
    """

    def __init__(self, key: Hashable, client: Client | None = None, state: KeyState | None = None) -> None:
        from scaler.compat.dask.distributed.default import default_client

        TaskRef.__init__(self, key)  # type: ignore[arg-type]  # dask's Key is narrower than what dask accepts
        self._client = client if client is not None else default_client()
        self._released = False
        self._state = state if state is not None else self._client._keys.state_of(key)
        self._client._keys.hold(self._state)

    @property
    def client(self) -> Client:
        return self._client

    @property
    def status(self) -> str:
        return LOST if self._released else self._state.status()

    def done(self) -> bool:
        return self._state.cancelled or self._state.outcome.done()

    def cancelled(self) -> bool:
        return self.status == CANCELLED

    def result(self, timeout: Any = None) -> Any:
        """The task's value; raises its exception, CancelledError if canceled, TimeoutError after `timeout`.
        With an asynchronous client, inside its event loop, an awaitable of it (as are exception and traceback)."""
        return self._client._maybe_async(self._result, timeout)

    def _result(self, timeout: Any = None) -> Any:
        self._settled(timeout)
        native = self._state.native
        if native is None:
            return self._client._fetch_scattered(self._state)
        return native.result()

    def exception(self, timeout: Any = None) -> Any:
        return self._client._maybe_async(self._exception, timeout)

    def _exception(self, timeout: Any = None) -> BaseException | None:
        self._settled(timeout)
        native = self._state.native
        return None if native is None else native.exception()

    def _settled(self, timeout: Any) -> None:
        outcome = self._state.outcome
        if not outcome.done() and not self._state.cancelled:
            with waiting_for_tasks():  # inside a task, its worker runs other tasks meanwhile
                outcome.result(seconds(timeout))
        if self._state.cancelled:
            raise concurrent.futures.CancelledError(f"the key {self.key!r} was cancelled")

    def traceback(self, timeout: Any = None) -> Any:
        return self._client._maybe_async(self._traceback, timeout)

    def _traceback(self, timeout: Any = None) -> Any:
        error = self._exception(timeout)
        return None if error is None else error.__traceback__

    def cancel(self, force: bool = False) -> None:
        self._client._cancel([self], force=force)  # does not block: no awaitable needed, even asynchronously

    def add_done_callback(self, fn: Callable[[Future], Any]) -> None:
        """Call `fn(self)` once the key's computation has ended (at once if it has)."""
        self._state.outcome.add_done_callback(lambda _: fn(self))

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._client._keys.let_go(self._state)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # at interpreter exit the client may be half torn down: nothing left to release
            pass

    def __await__(self) -> Generator[Any, None, Any]:
        yield from settled_in_loop(self._state.outcome).__await__()
        return self._result()

    def __dask_tokenize__(self) -> Hashable:
        # A pure call that takes this future is named after its key, not after the future object.
        return ("scaler-future", self.key)

    def __reduce__(self) -> tuple:
        # Pickled inside an object that no call looks into (scatter's data, a closure): the key travels, and
        # only the process of its client makes a Future of it again (see `unpickled_future`).
        return unpickled_future, (self._client.id, self.key)

    def __repr__(self) -> str:
        return f"<Future: {self.status}, key: {self.key}>"


# The open clients of this process by id, for `unpickled_future`.
_clients_by_id: weakref.WeakValueDictionary[str, Client] = weakref.WeakValueDictionary()


def register_client(client: Client) -> None:
    _clients_by_id[client.id] = client


def unpickled_future(client_id: str, key: Hashable) -> TaskRef:
    """A Future's key unpickled: a Future again in the process of its client while the key is held there (data
    scattered and gathered back, say); elsewhere a FutureElsewhere, which dask still reads as a reference."""
    client = _clients_by_id.get(client_id)
    if client is not None:
        state = client._keys.get(key)
        if state is not None:
            return Future(key, client, state)
    return FutureElsewhere(client_id, key)


class FutureElsewhere(TaskRef):
    """A Future that reached a process other than its client's inside a pickled object: only its key, which
    travels back as the Future. Its value is not here: pass the Future as an argument of submit or map (also
    inside lists, tuples, sets, dicts and dask collections) for the task to receive its value."""

    def __init__(self, client_id: str, key: Hashable) -> None:
        super().__init__(key)  # type: ignore[arg-type]  # as Future's
        self.client_id = client_id

    def __reduce__(self) -> tuple:
        return unpickled_future, (self.client_id, self.key)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"{name!r}: the Future of key {self.key!r} reached this process inside a pickled object, without its "
            "value; pass the Future as an argument of submit or map (also inside lists, tuples, sets, dicts and "
            "dask collections), where it stands for its value"
        )

    def __repr__(self) -> str:
        return f"<Future elsewhere: key: {self.key}>"
