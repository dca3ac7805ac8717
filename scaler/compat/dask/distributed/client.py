"""Client: dask.distributed's Client on a Scaler cluster.

    Client()                        starts a LocalCluster (closed with the client); keywords go to it
    Client("tcp://host:port")       connects to a Scaler scheduler
    Client(cluster)                 connects to a LocalCluster (or a SchedulerClusterCombo)
    Client(scaler.Client(...))      wraps a native client (left open when this one closes)

What differs from dask.distributed, by design:
- `resources={"GPU": 1}` requires the worker tag "GPU" (`scaler_cluster --tags GPU`): every resource named with
  a quantity above 0 is a tag the worker must have; quantities are not counted (a worker runs as many such
  tasks at once as it has processors).
- `workers=`, `allow_other_workers=`, `fifo_timeout=`, `actors=`, `direct=` are accepted and have no effect:
  the scheduler places every task (it prefers the worker that holds its inputs).
- `run` and `upload_file` raise NotImplementedError: Scaler's scheduler does not address single workers.
- `restart()` cancels every task of this client and drops its data; it does not restart worker processes.
- `dashboard_link` is "": Scaler's monitor is `scaler_ui`, started apart, not a page the scheduler serves.
- Results of `submit`, `map`, `compute` and `persist` stay on the cluster until their futures are released;
  `scatter` sends data once with `send_object` (the tasks that take it read it from the cluster), where it
  stays until the client closes or restarts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import uuid
from collections.abc import Hashable, Iterator
from typing import Any, Callable, Iterable

from scaler.client.client import DEFAULT_TIMEOUT_SECONDS
from scaler.client.client import Client as NativeClient
from scaler.client.future import ScalerFuture, cancel_without_waiting
from scaler.cluster.combo import SchedulerClusterCombo
from scaler.compat.dask.distributed.arguments import prepare_call
from scaler.compat.dask.distributed.default import forget, make_default
from scaler.compat.dask.distributed.durations import seconds
from scaler.compat.dask.distributed.future import Future, KeyState, register_client
from scaler.compat.dask.distributed.gathering import gathered
from scaler.compat.dask.distributed.graph_runs import flat_keys, identity, nested_results, submit_graph
from scaler.compat.dask.distributed.key_table import KeyTable, settle
from scaler.compat.dask.distributed.keys import data_key, task_key
from scaler.compat.dask.distributed.local_cluster import LocalCluster
from scaler.compat.dask.distributed.persisted import persisted_layer
from scaler.compat.dask.distributed.resources import tags_of_resources

RUNNING = "running"
CLOSED = "closed"
NEWLY_CREATED = "newly-created"


class Client:
    """dask.distributed's Client; see the module docstring for what `address` may be and what differs."""

    def __init__(
        self, address: Any = None, loop: Any = None, timeout: Any = None, set_as_default: bool = True,
        scheduler_file: str | None = None, security: Any = None, asynchronous: bool = False, name: str | None = None,
        heartbeat_interval: Any = None, serializers: Any = None, deserializers: Any = None, extensions: Any = None,
        direct_to_workers: Any = None, connection_limit: int = 512, **cluster_kwargs: Any,
    ) -> None:
        if scheduler_file is not None:
            raise NotImplementedError("scheduler_file: give the scheduler's address instead")
        self.asynchronous = asynchronous
        self.id = f"Client-{uuid.uuid4()}"
        register_client(self)  # its Futures, pickled and back, are Futures of it again (future.py)
        self.status = NEWLY_CREATED
        self._address = address
        self._timeout = seconds(timeout)
        self._set_as_default = set_as_default
        self._name = name or ""
        self._cluster_kwargs = cluster_kwargs
        self.cluster: LocalCluster | SchedulerClusterCombo | None = None
        self._owns_cluster = False
        self._native: NativeClient | None = None
        self._owns_native = True
        self._lock = threading.RLock()
        self._keys = KeyTable()
        if not asynchronous:
            self._start()

    # ------------------------------------------------------------------------------------------ lifecycle

    def _start(self) -> None:
        with self._lock:
            if self.status != NEWLY_CREATED:
                return
            address = self._address
            if isinstance(address, NativeClient):
                self._native, self._owns_native = address, False
            else:
                if address is None:
                    self.cluster, self._owns_cluster = LocalCluster(**self._cluster_kwargs), True
                    address = self.cluster.scheduler_address
                elif isinstance(address, LocalCluster):
                    self.cluster, address = address, address.scheduler_address
                elif isinstance(address, SchedulerClusterCombo):
                    self.cluster, address = address, address.get_address()
                elif not isinstance(address, str):
                    kind = type(address).__name__
                    raise TypeError(f"Client() takes an address, a LocalCluster or nothing, got {kind}")
                elif "://" not in address:
                    address = f"tcp://{address}"  # dask takes "host:port" too
                timeout = DEFAULT_TIMEOUT_SECONDS if self._timeout is None else self._timeout
                try:
                    self._native = NativeClient(address=address, name=self._name, timeout_seconds=timeout)
                except BaseException:
                    self._close_own_cluster()
                    raise
            self.status = RUNNING
        if self._set_as_default:
            make_default(self)

    def __await__(self) -> Any:
        async def started() -> Client:
            await asyncio.get_running_loop().run_in_executor(None, self._start)
            return self

        return started().__await__()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._close()

    async def __aenter__(self) -> Client:
        return await self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._close)

    def close(self, timeout: Any = None) -> Any:
        """Disconnect; a LocalCluster this client started stops too. Awaitable with asynchronous=True."""
        return self._maybe_async(self._close)

    def _close(self) -> None:
        with self._lock:
            if self.status == CLOSED:
                return
            self.status = CLOSED
        forget(self)
        states = self._keys.take_all(closing=True)
        if self._native is not None and self._owns_native:
            self._native.disconnect()  # cancels the unfinished tasks: their futures end canceled
        for state in states:
            settle(state)
        self._close_own_cluster()

    def _close_own_cluster(self) -> None:
        if self._owns_cluster and isinstance(self.cluster, LocalCluster):
            self.cluster.close()

    def __del__(self) -> None:
        try:
            if self.status == RUNNING and self._owns_native:
                self._close()
        except Exception:
            pass

    def __reduce__(self) -> tuple:
        # Inside a task, a client of the same scheduler, as get_client() gives there.
        return _client_around, (self.native,)

    def __repr__(self) -> str:
        address = self._native.address if self._native is not None else self._address
        return f"<Client: scheduler={address!r}, status={self.status}>"

    @property
    def native(self) -> NativeClient:
        """The scaler.Client underneath (for what only Scaler offers)."""
        if self._native is None:
            raise RuntimeError("this asynchronous Client has not started: `await` it or use `async with`")
        return self._native

    @property
    def scheduler_address(self) -> str:
        return self.native.address

    @property
    def dashboard_link(self) -> str:
        """Always "": Scaler's web monitor is `scaler_ui`, started on its own, not served by the scheduler."""
        return ""

    def _maybe_async(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn(...)`; for an asynchronous client inside its loop, an awaitable of it that does not block the loop."""
        if self.asynchronous:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return fn(*args, **kwargs)
            return loop.run_in_executor(None, functools.partial(fn, *args, **kwargs))
        return fn(*args, **kwargs)

    # ------------------------------------------------------------------------------------------ keys

    # ------------------------------------------------------------------------------------------ futures

    def submit(
        self, func: Callable[..., Any], *args: Any, key: Hashable | None = None, workers: Any = None,
        resources: dict[str, float] | None = None, retries: int | None = None, priority: int = 0,
        fifo_timeout: Any = None, allow_other_workers: bool = False, actor: bool = False, actors: bool = False,
        pure: bool = True, **kwargs: Any,
    ) -> Future:
        """Run `func(*args, **kwargs)` on the cluster; a Future of its result. A key this client already has
        (the same pure call again, or the same `key=`) gives that key's Future and runs nothing."""
        if not callable(func):
            raise TypeError("First input to submit must be a callable function")
        if actor or actors:
            raise NotImplementedError("actors are not supported on Scaler")
        if key is None:
            key = task_key(func, args, kwargs, pure)
        tags = tags_of_resources(resources)
        native_priority = priority or None
        with self._keys.lock:
            self._check_running()
            state = self._keys.get(key)
            if state is None:
                prepared = prepare_call(func, args, kwargs)
                if any(dependency.cancelled for dependency in prepared.dependencies):
                    return Future(key, self, KeyState.cancelled_before_start(key))  # nothing to run it on

                # Kept on the cluster, so that the future may be another task's argument there.
                def launch() -> ScalerFuture:
                    return self.native.submit(
                        prepared.fn, *prepared.args, tags=tags, priority=native_priority, keep=True, **prepared.kwargs
                    )

                state = self._keys.track(key, launch(), prepared.dependencies, retries or 0, launch)
            return Future(key, self, state)

    def map(
        self, func: Callable[..., Any], *iterables: Iterable[Any], key: str | list[Hashable] | None = None,
        workers: Any = None, retries: int | None = None, resources: dict[str, float] | None = None,
        priority: int = 0, allow_other_workers: bool = False, fifo_timeout: Any = None, actor: bool = False,
        actors: bool = False, pure: bool = True, batch_size: int | None = None, **kwargs: Any,
    ) -> list[Future]:
        """`submit(func, *args, **kwargs)` for each tuple of the zipped `iterables`; the list of Futures.

        `key` is a list of keys, one per call, or a prefix for their names (`funcname` when None)."""
        if not callable(func):
            raise TypeError("First input to map must be a callable function")
        if not iterables:
            raise TypeError("map() needs at least one iterable of arguments")
        if any(isinstance(iterable, dict) for iterable in iterables):
            raise TypeError("Dictionaries are not supported as iterables of map(); use a list of their items")
        calls = list(zip(*iterables))
        if isinstance(key, list):
            if len(key) != len(calls):
                raise ValueError(f"map() got {len(key)} keys for {len(calls)} calls")
            keys: list[Hashable] = list(key)
        else:
            prefix = key if isinstance(key, str) else None
            if pure:
                keys = [task_key(func, args, kwargs, True, prefix) for args in calls]
            else:
                base = task_key(func, (), {}, False, prefix)
                keys = [f"{base}-{index}" for index in range(len(calls))]
        return [
            self.submit(
                func, *args, key=call_key, retries=retries, resources=resources, priority=priority, pure=pure, **kwargs
            )
            for args, call_key in zip(calls, keys)
        ]

    def gather(self, futures: Any, errors: str = "raise", direct: Any = None, asynchronous: Any = None) -> Any:
        """The values of `futures` (a Future, or lists, tuples, sets and dicts nesting them) in their shape.

        `errors="skip"` leaves out of lists the futures that failed (and dict entries of them)."""
        if errors not in ("raise", "skip"):
            raise ValueError(f"errors must be 'raise' or 'skip', got {errors!r}")
        return self._maybe_async(gathered, futures, errors == "skip")

    def scatter(
        self, data: Any, workers: Any = None, broadcast: bool = False, direct: Any = None, hash: bool = True,
        timeout: Any = None, asynchronous: Any = None,
    ) -> Any:
        """Send data to the cluster; Futures standing for it, in the shape of `data` (a dict's keys name its
        futures). The data stays on the cluster until the client closes or restarts."""
        return self._maybe_async(self._scatter, data, hash)

    def _scatter(self, data: Any, hashed: bool) -> Any:
        if isinstance(data, dict):
            return {name: self._scatter_one(value, name, hashed) for name, value in data.items()}
        if isinstance(data, (list, tuple, set, frozenset)):
            return type(data)(self._scatter_one(value, None, hashed) for value in data)
        if isinstance(data, Iterator):
            return [self._scatter_one(value, None, hashed) for value in data]
        return self._scatter_one(data, None, hashed)

    def _scatter_one(self, value: Any, key: Hashable | None, hashed: bool) -> Future:
        if key is None:
            key = data_key(value, hashed)
        with self._keys.lock:
            self._check_running()
            state = self._keys.get(key)
            if state is None:
                state = self._keys.add_scattered(key, self.native.send_object(value, name=str(key)))
            return Future(key, self, state)

    def _fetch_scattered(self, state: KeyState) -> Any:
        """A scattered object's value, read back from the cluster (the client does not keep a copy)."""
        return self.native.submit(identity, state.reference).result()

    def cancel(self, futures: Any, asynchronous: Any = None, force: bool = False) -> Any:
        """Cancel these futures' tasks; a task already running finishes unless `force`."""
        return self._maybe_async(self._cancel, futures, force)

    def _cancel(self, futures: Any, force: bool = False) -> None:
        """As in dask, the keys are forgotten, finished or not: their futures are cancelled, their kept results
        dropped, and the same call submitted again runs anew."""
        from scaler.compat.dask.distributed.arguments import futures_in

        states = [future._state for future in futures_in(futures)]
        for state in states:
            state.retries_left = 0
            state.cancelled = True
            self._keys.forget(state)
        # Not a scattered object (nothing runs), nor a literal of a computed graph (a plain, finished future).
        cancel_without_waiting([state.native for state in states if isinstance(state.native, ScalerFuture)], force)

    def restart(self, timeout: Any = None, wait_for_workers: bool = True) -> Any:
        """Cancel every task of this client and drop its data on the cluster; its futures end canceled.
        Unlike dask, worker processes are not restarted (Scaler replaces a processor only when it fails)."""
        return self._maybe_async(self._restart)

    def _restart(self) -> None:
        states = self._keys.take_all(closing=False)
        self.native.clear()  # cancels every unfinished task of this client
        for state in states:
            settle(state)

    def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "Client.run: Scaler's scheduler places every task and cannot address each worker; "
            "use submit, or a worker preload / `scaler_cluster --tags` to prepare workers"
        )

    def upload_file(self, filename: str, load: bool = True) -> Any:
        raise NotImplementedError(
            "Client.upload_file: Scaler cannot address each worker; install the module on the workers, "
            "or pass its functions (cloudpickle sends them by value)"
        )

    def _check_running(self) -> None:
        if self.status != RUNNING:
            raise RuntimeError(f"this Client is {self.status}")

    # ------------------------------------------------------------------------------------------ collections

    def get(self, dsk: Any, keys: Any, workers: Any = None, allow_other_workers: Any = None, resources: Any = None,
            sync: bool = True, asynchronous: Any = None, direct: Any = None, retries: Any = None, priority: int = 0,
            fifo_timeout: Any = None, actors: Any = None, **kwargs: Any) -> Any:
        """dask's scheduler function on this cluster: `dask.compute(x, scheduler=client.get)`. With `sync=False`,
        Futures of `keys` (in their shape) instead of their values."""
        if not sync:
            return _shaped(keys, self._graph_futures(dsk, flat_keys(keys), priority))
        return self._maybe_async(self._get, dsk, keys, priority)

    def _get(self, dsk: Any, keys: Any, priority: int) -> Any:
        natives, used = submit_graph(
            self.native, dsk, flat_keys(keys), keep=False, lookup=self._keys.get, priority=priority or None
        )
        for state in used:
            self._keys.hold(state)
        try:
            concurrent.futures.wait(list(natives.values()), return_when=concurrent.futures.FIRST_EXCEPTION)
            return nested_results(keys, {key: native.result() for key, native in natives.items()})
        finally:
            self._keys.let_go_all(used)

    def compute(self, collections: Any, sync: bool = False, optimize_graph: bool = True, workers: Any = None,
                allow_other_workers: bool = False, resources: Any = None, retries: int = 0, priority: int = 0,
                fifo_timeout: Any = None, actors: Any = None, traverse: bool = True, **kwargs: Any) -> Any:
        """A Future of each collection's value (the values themselves with `sync=True`); other items as they are."""
        import dask
        from dask._expr import FinalizeCompute
        from dask.base import collections_to_expr
        from dask.core import flatten

        singleton = not isinstance(collections, (list, tuple, set, frozenset))
        items = [collections] if singleton else list(collections)
        if traverse:
            items = [dask.delayed(item) if isinstance(item, (list, set, tuple, dict, Iterator)) else item
                     for item in items]
        variables = [item for item in items if dask.is_dask_collection(item)]
        by_key: dict[Hashable, Future] = {}
        names: list[Hashable] = []
        if variables:
            expr = FinalizeCompute(collections_to_expr(variables, optimize_graph)).optimize()
            names = list(flatten(expr.__dask_keys__()))
            by_key = self._graph_futures(expr, names, priority)
        computed = iter(names)
        result = [by_key[next(computed)] if dask.is_dask_collection(item) else item for item in items]
        if sync:
            result = self.gather(result)
        return result[0] if singleton else result

    def persist(self, collections: Any, optimize_graph: bool = True, workers: Any = None,
                allow_other_workers: Any = None, resources: Any = None, retries: Any = None, priority: int = 0,
                fifo_timeout: Any = None, actors: Any = None, **kwargs: Any) -> Any:
        """The collections again, their graphs now referring to their chunks, computed and kept on the cluster
        (persisted.py); later computations read them there. Returns at once; `wait(x)` or `progress(x)` waits."""
        from dask.base import collections_to_expr
        from dask.core import flatten

        singleton = not isinstance(collections, (list, tuple, set, frozenset))
        items = [collections] if singleton else list(collections)
        expr = collections_to_expr(items, optimize_graph).optimize()
        keys = expr.__dask_keys__()
        futures = self._graph_futures(expr, list(flatten(keys)), priority)
        rebuilt = [
            rebuild(persisted_layer({key: futures[key] for key in flatten(collection_keys)}), *state)
            for (rebuild, state), collection_keys in zip([item.__dask_postpersist__() for item in items], keys)
        ]
        return rebuilt[0] if singleton else rebuilt

    def _graph_futures(self, expr: Any, names: list[Hashable], priority: int) -> dict[Hashable, Future]:
        """Run the graph for `names`, their results kept on the cluster; a Future per name."""
        natives, used = submit_graph(
            self.native, expr, names, keep=True, lookup=self._keys.get, priority=priority or None
        )
        futures: dict[Hashable, Future] = {}
        with self._keys.lock:
            self._check_running()
            for key, native in natives.items():
                state = self._keys.get(key)
                if state is None:
                    state = self._keys.track(key, native, used)
                elif native is not state.native:  # the key's first result stands, as in dask; this one is not
                    release = getattr(native, "release", None)  # needed on the cluster (the first one may be
                    if release is not None:  # the very future the graph held for this key: kept, of course)
                        release()
                futures[key] = Future(key, self, state)
        return futures

def _shaped(keys: Any, futures: dict[Hashable, Future]) -> Any:
    """`keys` with each key replaced by its Future (a list of keys gives a list, as dask.distributed's get)."""
    if isinstance(keys, list):
        return [_shaped(item, futures) for item in keys]
    return futures[keys]


def _client_around(native: NativeClient) -> Client:
    return Client(native, set_as_default=False)
