"""dask collections on the cluster: the graphs `Client.get`, `compute` and `persist` hand to the native client.

A graph may hold futures as values: a computed one stands there as its kept native future, which the native
client reads as a dependency resolved on the cluster; a scattered one as a one-line task whose argument is the
object's reference, which the worker resolves. A persisted collection's graph holds a FutureRef per chunk
(persisted.py), which the translation resolves on the cluster. No value passes through the client.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from scaler.client.client import Client as NativeClient
from scaler.client.future import ScalerFuture
from scaler.compat.dask.distributed.future import Future, KeyState
from scaler.compat.dask.distributed.persisted import FutureRef


def identity(value: Any) -> Any:
    return value


def graph_with_futures_resolved(dsk: Any) -> tuple[dict[Hashable, Any], list[KeyState]]:
    """dask's graph as a dict whose future values stand as the native client reads them; and their keys."""
    from dask._task_spec import DataNode

    from scaler.compat.dask.translation import graph_of

    graph = graph_of(dsk)
    used: list[KeyState] = []
    replaced: dict[Hashable, Any] = {}
    for key, value in graph.items():
        if isinstance(value, FutureRef):  # a persisted chunk: translate() resolves it on the cluster
            used.append(value.dask_future._state)
            continue
        future = value.value if isinstance(value, DataNode) else value
        if isinstance(future, Future):
            state = future._state
            used.append(state)
            if state.native is None:
                replaced[key] = (identity, state.reference)
            else:
                replaced[key] = DataNode(key, state.native) if isinstance(value, DataNode) else state.native
    if replaced:
        graph = {**graph, **replaced}
    return graph, used


def submit_graph(
    native: NativeClient, dsk: Any, keys: list[Hashable], keep: bool, priority: int | None = None,
) -> tuple[dict[Hashable, ScalerFuture], list[KeyState]]:
    """Run the graph for `keys`; their native futures (kept on the cluster with `keep`), and the keys it reads."""
    from scaler.compat.dask.annotations import annotated_priorities, fused_priorities
    from scaler.compat.dask.translation import translate

    graph, used = graph_with_futures_resolved(dsk)
    # A scattered object's one-line task must stay a task of its own: fused into its dependent, its reference
    # would be a nested argument, which the worker passes as it is.
    translation = translate(graph, keys, fuse=not any(state.native is None for state in used))
    if keep:
        futures = native.persist_graph(translation.graph, translation.requested)
    else:
        priorities = fused_priorities(annotated_priorities(dsk), translation.fused)
        futures = native.get(
            translation.graph, translation.requested, block=False, priority=priority, priorities=priorities
        )
    return futures, used


def flat_keys(keys: Any) -> list[Hashable]:
    if isinstance(keys, list):
        return [key for item in keys for key in flat_keys(item)]
    return [keys]


def nested_results(keys: Any, results: dict[Hashable, Any]) -> Any:
    """Results in the shape of `keys`: a list of keys gives a tuple, as dask's own get functions return."""
    if isinstance(keys, list):
        return tuple(nested_results(item, results) for item in keys)
    return results[keys]
