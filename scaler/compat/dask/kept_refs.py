"""Kept futures inside dask graphs: how a persisted collection refers to results kept on the cluster.

dask fuses a plain value of a graph into the tasks that use it, so a kept ScalerFuture put in a graph as a
value (`{key: future}`) may end up inside another task's arguments, where it cannot travel. A `KeptRef`
is a dask `TaskRef` instead, as dask.distributed's futures are: dask treats it as a dependency on a key
outside the graph and never fuses it. `scaler.get` (translation.py) finds the kept future behind such a
key here and hands it to `Client.get`, which resolves it on the cluster.

    futures = persist_dask_graph(client, x.__dask_graph__(), keys)  # persist.py
    persisted = dask.array.Array(HighLevelGraph.from_collections(x.name, persisted_graph(futures), []), ...)
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Mapping

from dask._task_spec import TaskRef

from scaler.client.future import ScalerFuture

# The key of each live KeptRef -> its future; a future no graph refers to any more is not kept alive here.
_futures_by_key: weakref.WeakValueDictionary[Hashable, ScalerFuture] = weakref.WeakValueDictionary()


class KeptRef(TaskRef):
    """A dask reference to a kept result; holds the future, so the result lives while a graph holds it."""

    __slots__ = ("future",)

    def __init__(self, future: ScalerFuture) -> None:
        if not future.keeps_result:
            raise ValueError("only a future submitted with keep=True can stand in a dask graph")
        key = ("scaler-kept", id(future._connection), future.task_id)
        super().__init__(key)
        self.future = future
        _futures_by_key[key] = future


def persisted_graph(futures: Mapping[Hashable, ScalerFuture]) -> dict[Hashable, KeptRef]:
    """The graph of a persisted collection: each of its keys refers to the kept result computed for it."""
    return {key: KeptRef(future) for key, future in futures.items()}


def kept_future_of(key: Hashable) -> ScalerFuture | None:
    """The kept future a KeptRef's key (a key outside the graph) stands for, or None."""
    try:
        return _futures_by_key.get(key)
    except TypeError:  # unhashable
        return None
