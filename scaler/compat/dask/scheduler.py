"""`get`: a dask scheduler function that computes on a Scaler cluster.

    dask.compute(x, scheduler=scaler.get)
    x.compute(scheduler=scaler.get)
    with dask.config.set(scheduler=scaler.get): ...

The whole graph goes to the cluster as one graph task; which cluster is decided by
`scaler.compat.cluster_choice` (`use(...)`, else `SCALER_ADDRESS`, else an embedded local cluster).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

from scaler.client.call_priority import call_priority
from scaler.compat.cluster_choice import current_client
from scaler.compat.dask.annotations import annotated_priorities, fused_priorities
from scaler.utility.blocking import waiting_for_tasks


def get(
    dsk: Mapping | Any, keys: Any, *, fuse: bool = True, priority: int | None = None, stream_output: bool = False,
    **kwargs: Any,
) -> Any:
    """Compute `keys` of the dask graph `dsk` on a Scaler cluster, like `dask.threaded.get`.

    `keys` is one key or a list nesting keys; the result has the same shape, lists turned into tuples.
    `fuse=False` sends every task as it is instead of running chain links and tiny leaf tasks inside
    their only dependent. Other keyword arguments dask passes to schedulers (`num_workers`, `pool`,
    `cache`, ...) have no meaning here and are ignored. A missing key raises KeyError (also a
    ValueError), a cycle ValueError, both before anything runs; a failing task raises its exception.

    `priority` is that of every task (as for `Client.submit`: higher runs first among the client's tasks);
    `with dask.annotate(priority=N)` gives the tasks built inside it N instead. A task that runs fused
    tasks inside it takes the highest priority among them. `dask.compute(x, scheduler=scaler.get,
    priority=5)` reaches here too, since dask passes its keywords on to the scheduler.

    `stream_output=True` shows what the tasks print in this process, as `Client(stream_output=True)` does:
    `dask.compute(x, scheduler=scaler.get, stream_output=True)`.
    """
    try:
        from scaler.compat.dask.translation import translate
    except ImportError as error:
        raise ImportError("scaler.get needs dask: pip install 'scaler[dask]'") from error

    graph_priority = call_priority(priority, "scaler.get()")
    flat_keys = list(_flatten(keys)) if isinstance(keys, list) else [keys]
    with _collector_paused():
        translation = translate(dsk, flat_keys, fuse=fuse)  # a bad graph fails before a cluster is chosen
        priorities = fused_priorities(annotated_priorities(dsk), translation.fused)
    client = current_client(stream_output=bool(stream_output))
    with _collector_paused():
        futures = client.get(
            translation.graph, translation.requested, block=False, priority=graph_priority, priorities=priorities
        )
    with waiting_for_tasks():
        done, _ = concurrent.futures.wait(list(futures.values()), return_when=concurrent.futures.FIRST_EXCEPTION)
    for key in translation.requested:  # the first failure in key order among those that failed already
        future = futures[key]
        if future in done and future.exception() is not None:
            raise future.exception()  # type: ignore[misc]
    results = {key: future.result() for key, future in futures.items()}
    return _nested_get(keys, results)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Translating and submitting allocate a few objects per node and free none: cycle collections
    meanwhile would only rescan them, about half the client-side time of a 100k-node graph."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _flatten(keys: list) -> Any:
    for item in keys:
        if isinstance(item, list):
            yield from _flatten(item)
        else:
            yield item


def _nested_get(keys: Any, results: dict[Hashable, Any]) -> Any:
    """Results in the shape of `keys`: a list of keys gives a tuple, as dask's own get functions return."""
    if isinstance(keys, list):
        return tuple(_nested_get(item, results) for item in keys)
    return results[keys]
