"""ScalerExecutor: a `concurrent.futures.Executor` whose calls run on a Scaler cluster.

It translates and never schedules: `submit` is `Client.submit`, `map` is one `Client.submit` per
call (or per chunk of calls), cancelling is `ScalerFuture.cancel()`. What it adds is the executor
contract around them: shutdown, `RuntimeError` after shutdown, a lazy ordered `map` with a
deadline, and `BrokenScalerExecutor` once the cluster is gone.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import os
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Iterator

from scaler.client.call_check import call_shape
from scaler.client.client import Client
from scaler.cluster.combo import SchedulerClusterCombo
from scaler.compat import cluster_choice
from scaler.compat.futures.broken import BrokenScalerExecutor, broken_from, is_cluster_lost
from scaler.compat.futures.cancelling import cancel_without_waiting
from scaler.compat.futures.executor_future import ExecutorFuture
from scaler.errors import ConnectionFailedError
from scaler.protocol.serializer import Serializer
from scaler.protocol.sharing import checked_priority
from scaler.utility.fork_safety import fix_after_fork
from scaler.utility.tags import Tags, checked_tags


class ScalerExecutor(concurrent.futures.Executor):
    """Runs calls on a Scaler cluster, with the `concurrent.futures.Executor` interface.

    >>> with ScalerExecutor() as executor:
    ...     list(executor.map(pow, [2, 3], [5, 2]))
    [32, 9]

    Which cluster:

    - `address`: the scheduler there; the executor makes a client and disconnects it on shutdown;
    - `client`: this client; it is yours, and stays connected after shutdown;
    - neither: the cluster chosen with `scaler.compat.cluster_choice.use(...)` or the
      `SCALER_ADDRESS` environment variable if there is one (as for the dask and joblib adapters),
      else an embedded local cluster of one worker per core, which this executor starts and stops
      on `shutdown()`, also when a `with` block ends with an exception;
    - `n_workers=N` alone always means that embedded cluster, with N workers.

    `serializer` is used by the client the executor makes; a given `client` has its own.

    `stream_output=True` shows what the calls print in this process, as `Client(stream_output=True)` does (see
    the README, "Seeing what tasks print"); a given `client` streams or not as it was made.

    `tags` and `priority` apply to every call of this executor, as `Client.submit` takes them; a call's
    own `submit(fn, ..., priority=5)` or `map(..., priority=5)` replaces them. The executor's client shares
    the cluster with the others by its `share` (see docs/sharing.md): give a `client=Client(..., share=2.0)`
    to weigh it.

    Differences from `ProcessPoolExecutor`: futures never report `running()` (the client is not
    told when a task starts); a worker that dies is replaced by another and its task retried, so
    only that call fails (`WorkerDiedError`) and the executor stays usable; a call that cannot be
    serialized fails at `submit`/`map` rather than at `result()`; in a forked child, an executor made
    in the parent raises `BrokenScalerExecutor` at once (create a new one in the child).
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        client: Client | None = None,
        n_workers: int | None = None,
        serializer: Serializer | None = None,
        tags: Iterable[str] | None = None,
        priority: int | None = None,
        stream_output: bool = False,
    ) -> None:
        _check_arguments(address, client, n_workers, serializer)
        # None: each call's default (the priority of the task it runs in, else 0).
        self._priority = checked_priority(priority, "ScalerExecutor(priority=...)") if priority is not None else None
        # Every call of this executor runs only on workers with these tags (see Client.submit); a call's own
        # tags= replace them.
        self._tags: Tags | None = checked_tags(tags, "ScalerExecutor(tags=...)") if tags is not None else None
        self._cluster: SchedulerClusterCombo | None = None
        self._owns_client = False
        if client is not None:
            self._client = client
        elif address is not None:
            self._client, self._owns_client = (
                Client(address=address, serializer=serializer, stream_output=stream_output), True
            )
        elif n_workers is None and cluster_choice.cluster_is_chosen():
            chosen = cluster_choice.current_client()
            if serializer is None and not stream_output:
                self._client = chosen
            else:
                self._client, self._owns_client = Client(
                    address=chosen.address, serializer=serializer, stream_output=stream_output
                ), True
        else:
            # Not cluster_choice's shared embedded cluster, which lives until exit: shutdown() stops this one.
            self._cluster = SchedulerClusterCombo(n_workers=n_workers or os.cpu_count() or 1, logging_level="WARNING")
            try:
                self._client = Client(
                    address=self._cluster.get_address(), serializer=serializer, stream_output=stream_output
                )
            except BaseException:
                self._cluster.shutdown()
                raise
            self._owns_client = True
        self._address = self._client.address
        # Held for the whole of a submission, so shutdown() cannot slip between its check and its tracking.
        self._submit_lock = threading.Lock()
        # Held only briefly, also by the thread a future settles on (the client's I/O thread, mostly).
        self._tracking_lock = threading.Lock()
        self._shut_down = False
        # What the client raised when the cluster went away; every later call raises a new error from it.
        self._broken: BaseException | None = None
        self._submitted: set[ExecutorFuture] = set()
        # The futures of each live map call, shared with its iterator, which pops them as it goes.
        self._mapped: dict[int, list[concurrent.futures.Future]] = {}
        self._map_keys = itertools.count()
        self._closer: threading.Thread | None = None
        self._finished = threading.Event()
        # In a forked child, `_forked_from` names the process that made this executor (see _after_fork_in_child).
        self._owner_pid = os.getpid()
        self._forked_from: int | None = None
        fix_after_fork(self)

    @property
    def address(self) -> str:
        """The scheduler this executor submits to."""
        return self._address

    # ------------------------------------------------------------------------------------------ calls

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """Run `fn(*args, **kwargs)` on the cluster; returns a future of its result.

        `tags=`, `priority=` and `profiling=` are taken as by `Client.submit`, never passed to `fn`; the
        executor's `tags` and `priority` apply unless given here."""
        if self._tags is not None and "tags" not in kwargs:
            kwargs["tags"] = self._tags
        if self._priority is not None and "priority" not in kwargs:
            kwargs["priority"] = self._priority
        with self._submit_lock:
            self._check_usable()
            try:
                source = self._client.submit(fn, *args, **kwargs)
            except ConnectionFailedError as error:
                raise self._mark_broken(error) from error
            future = ExecutorFuture(source, self._address, self._forget)
            with self._tracking_lock:
                self._submitted.add(future)
        future.follow()
        return future

    def map(
        self, fn: Callable[..., Any], *iterables: Iterable[Any], timeout: float | None = None, chunksize: int = 1,
        priority: int | None = None,
    ) -> Iterator[Any]:
        """Like the built-in `map(fn, *iterables)`, with the calls running on the cluster.

        The iterables are consumed and every call is submitted now; the returned iterator yields the
        results in order as they arrive. A call's exception is raised when its result is reached;
        `TimeoutError` if a result is not there `timeout` seconds after this call. `chunksize`
        calls travel as one task, which pays off for many tiny calls. Leaving the iterator early
        (break, an exception, garbage collection) cancels the calls not yet run. `priority` as for
        `submit`, for every call (default: the executor's).
        """
        if not callable(fn):
            raise TypeError(f"map() needs a callable as its first argument, got {type(fn).__name__}")
        if priority is None:
            priority = self._priority
        else:
            checked_priority(priority, "map()")
        if not isinstance(chunksize, int) or chunksize < 1:
            raise ValueError(f"chunksize must be a positive integer, got {chunksize!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        argument_tuples = list(zip(*iterables))
        # Every call takes one argument per iterable: one check before anything is sent, chunked or not.
        shape = call_shape(fn) if argument_tuples else None
        if shape is not None and not shape.fits(len(iterables)):
            problem = shape.problem(argument_tuples[0], {})
            if problem is not None:
                raise TypeError(f"map() with {len(iterables)} iterables: {problem}")
        with self._submit_lock:
            self._check_usable()
            futures: list[concurrent.futures.Future] = []
            key = next(self._map_keys)
            with self._tracking_lock:
                self._mapped[key] = futures
            try:
                if chunksize == 1:
                    submit = self._client.submit
                    tags = self._tags
                    for arguments in argument_tuples:
                        futures.append(submit(fn, *arguments, tags=tags, priority=priority))
                else:
                    # One partial for the whole map, so the client serializes `fn` once, not per chunk.
                    run_chunk = functools.partial(_run_chunk, fn)
                    for start in range(0, len(argument_tuples), chunksize):
                        futures.append(self._client.submit(
                            run_chunk, argument_tuples[start:start + chunksize], tags=self._tags, priority=priority
                        ))
            except BaseException as error:
                self._abandon(key, futures)
                if isinstance(error, ConnectionFailedError):
                    raise self._mark_broken(error) from error
                raise
        results = self._results(key, futures, timeout, deadline, chunksize > 1)
        # An iterator dropped before its first next() never runs its finally: stop tracking it then
        # (its calls still run, as ProcessPoolExecutor's do), so a long-lived executor does not keep it.
        weakref.finalize(results, self._untrack_map, key)
        return results

    def _results(
        self,
        key: int,
        futures: list[concurrent.futures.Future],
        timeout: float | None,
        deadline: float | None,
        chunked: bool,
    ) -> Iterator[Any]:
        # No name here holds a result while it is handed out (popped from reversed lists, fetched by a
        # helper), so a result the consumer dropped goes at once, as with CPython's executors since 3.9:
        # a streaming map over large results does not grow.
        futures.reverse()
        try:
            while futures:
                if chunked:
                    chunk = self._next_result(futures, timeout, deadline)
                    chunk.reverse()
                    while chunk:
                        yield chunk.pop()
                else:
                    yield self._next_result(futures, timeout, deadline)
        finally:
            self._abandon(key, futures)

    def _next_result(
        self, futures: list[concurrent.futures.Future], timeout: float | None, deadline: float | None
    ) -> Any:
        """The result of the call at the end of `futures`, whose future is popped once it is there."""
        future = futures[-1]
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            value = future.result(remaining)
        except BaseException as error:
            if not future.done() and isinstance(error, concurrent.futures.TimeoutError):
                # Ours, not a TimeoutError raised by the call itself (that one's future is done).
                raise concurrent.futures.TimeoutError(
                    f"map() results did not all arrive within its timeout of {timeout:g}s"
                ) from None
            if is_cluster_lost(error):
                raise self._mark_broken(error) from error
            raise
        futures.pop()
        return value

    def _abandon(self, key: int, futures: list[concurrent.futures.Future]) -> None:
        """A map call is over: stop tracking it and cancel what it no longer needs, without waiting."""
        self._untrack_map(key)
        cancel_without_waiting(futures)
        futures.clear()

    def _untrack_map(self, key: int) -> None:
        with self._tracking_lock:
            self._mapped.pop(key, None)

    def _forget(self, future: ExecutorFuture) -> None:
        with self._tracking_lock:
            self._submitted.discard(future)

    def _check_usable(self) -> None:
        if self._forked_from is not None:
            raise BrokenScalerExecutor(
                f"this ScalerExecutor was created in process {self._forked_from} and cannot be used in a forked "
                f"child (process {os.getpid()}): create a new ScalerExecutor in the child"
            )
        if self._shut_down:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if self._broken is not None:
            raise broken_from(self._broken, self._address)

    def _mark_broken(self, error: BaseException) -> BrokenScalerExecutor:
        if self._broken is None:
            self._broken = error
        return broken_from(self._broken, self._address)

    # ------------------------------------------------------------------------------------------ end

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new calls; with `wait`, return once every call is done and what the executor started is stopped.

        `cancel_futures` cancels the calls that have not started. Without `wait` the same happens on
        a thread of the executor, which the interpreter waits for at exit. Waiting on calls cannot
        hang on a dead cluster: the client fails them within its `timeout_seconds`.
        """
        with self._submit_lock:
            if self._shut_down:
                if wait and threading.current_thread() is not self._closer:
                    self._finished.wait()
                return
            self._shut_down = True
            with self._tracking_lock:
                outstanding = self._outstanding()
            if cancel_futures:
                cancel_without_waiting(outstanding)
            if not wait:
                # Not a daemon: like ProcessPoolExecutor, the interpreter waits for the calls at exit.
                self._closer = threading.Thread(
                    target=self._finish, args=(outstanding,), name="scaler-executor-shutdown"
                )
                self._closer.start()
                return
        self._finish(outstanding)

    def _outstanding(self) -> list[concurrent.futures.Future]:
        mapped = [future for futures in self._mapped.values() for future in list(futures)]
        return [*self._submitted, *mapped]

    def _finish(self, outstanding: list[concurrent.futures.Future]) -> None:
        try:
            concurrent.futures.wait(outstanding)
        finally:
            try:
                if self._owns_client:
                    self._client.disconnect()
                if self._cluster is not None:
                    self._cluster.shutdown()
            finally:
                self._finished.set()

    def _after_fork_in_child(self) -> None:
        """In a forked child: calls fail at once; shutdown() returns at once, leaving the parent's client,
        cluster and calls alone (only the parent can wait for those, or stop them)."""
        self._forked_from = self._owner_pid
        self._submit_lock = threading.Lock()
        self._tracking_lock = threading.Lock()
        self._submitted = set()
        self._mapped = {}
        self._owns_client = False
        self._cluster = None
        self._closer = None
        self._finished = threading.Event()
        self._finished.set()

    def __repr__(self) -> str:
        state = "shut down" if self._shut_down else "broken" if self._broken else "running"
        return f"<ScalerExecutor {self._address} {state}>"


def _run_chunk(fn: Callable[..., Any], argument_tuples: list[tuple]) -> list[Any]:
    """One task of a chunked map: the calls of one chunk, in order, on one worker."""
    return [fn(*arguments) for arguments in argument_tuples]


def _check_arguments(
    address: str | None, client: Client | None, n_workers: int | None, serializer: Serializer | None
) -> None:
    """Catch the combinations that cannot mean anything, at the call, with what to do instead."""
    if isinstance(address, Client):
        raise TypeError("to reuse a Client, pass it by name: ScalerExecutor(client=my_client)")
    if address is not None and not isinstance(address, str):
        raise TypeError(f"address must be a scheduler address such as tcp://127.0.0.1:2345, got {address!r}")
    if client is not None and not isinstance(client, Client):
        raise TypeError(f"client must be a scaler.Client, got {type(client).__name__}")
    if address is not None and client is not None:
        raise TypeError("give either an address or a client, not both")
    if n_workers is not None:
        if address is not None or client is not None:
            raise TypeError(
                "n_workers sizes the local cluster the executor starts itself; a cluster reached by "
                "address or client has its own workers: drop n_workers"
            )
        if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
            raise ValueError(f"n_workers must be a positive integer, got {n_workers!r}")
    if serializer is not None:
        if client is not None:
            raise TypeError("a given client keeps its own serializer: pass serializer= to Client(...) instead")
        if not isinstance(serializer, Serializer):
            raise TypeError("serializer must be an instance of scaler.Serializer")

