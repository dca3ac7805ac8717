"""dask collections on the cluster: the graphs `Client.get`, `compute` and `persist` hand to the native client.

A Future is a dask TaskRef (future.py), so wherever it stands in a graph (a graph's value, a task's argument,
nested in lists, tuples and dicts, a persisted collection's chunk) dask reads it as a reference to its key.
Each such key becomes a key of the graph that the native client resolves on the cluster: a computed key's
kept native future (a reference to its task), a scattered key's one-line task taking the object's reference,
which the worker resolves. No value passes through the client.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Callable

from scaler.client.client import Client as NativeClient
from scaler.client.future import ScalerFuture
from scaler.compat.dask.distributed.future import Future, KeyState


def identity(value: Any) -> Any:
    return value


class FutureKeys:
    """What stands in a graph for the keys of Futures, and the keys a graph run used (held until it ends).

    `lookup(key)` gives the state of a key this client holds, or None."""

    def __init__(self, lookup: Callable[[Hashable], KeyState | None]) -> None:
        self._lookup = lookup
        self.used: list[KeyState] = []
        self._seen: set[int] = set()

    def value(self, state: KeyState) -> Any:
        if id(state) not in self._seen:
            self._seen.add(id(state))
            self.used.append(state)
        if state.native is None:
            return (identity, state.reference)
        return state.native

    def outside(self, key: Hashable) -> Any:
        """For translate(): the value standing for a key outside the graph, if it is a Future's."""
        try:
            state = self._lookup(key)
        except TypeError:  # unhashable: no future's key
            return None
        return None if state is None else self.value(state)

    @property
    def reads_objects(self) -> bool:
        return any(state.native is None for state in self.used)


def graph_with_futures_resolved(dsk: Any, futures: FutureKeys) -> tuple[dict[Hashable, Any], frozenset[Hashable]]:
    """dask's graph as a dict whose Future values stand as the native client reads them; and their keys."""
    from dask._task_spec import DataNode

    from scaler.compat.dask.translation import graph_of

    graph = graph_of(dsk)
    replaced: dict[Hashable, Any] = {}
    for key, value in graph.items():
        future = value.value if isinstance(value, DataNode) else value
        if isinstance(future, Future):
            replaced[key] = futures.value(future._state)
    if replaced:
        graph = {**graph, **replaced}
    return graph, frozenset(replaced)


def submit_graph(
    native: NativeClient, dsk: Any, keys: list[Hashable], keep: bool, lookup: Callable[[Hashable], KeyState | None],
    priority: int | None = None,
) -> tuple[dict[Hashable, ScalerFuture], list[KeyState]]:
    """Run the graph for `keys`; their native futures (kept on the cluster with `keep`), and the keys it reads.
    `lookup` finds the state of a Future's key that the graph refers to."""
    from scaler.compat.dask.annotations import annotated_priorities, fused_priorities
    from scaler.compat.dask.translation import translate

    futures = FutureKeys(lookup)
    graph, future_keys = graph_with_futures_resolved(dsk, futures)
    # A scattered object's one-line task must stay a task of its own: fused into its dependent, its reference
    # would be a nested argument, which the worker passes as it is. (Keys from outside are never fused.)
    translation = translate(
        graph, keys, fuse=not futures.reads_objects, outside=futures.outside, future_keys=future_keys
    )
    if keep:
        natives = native.persist_graph(translation.graph, translation.requested)
    else:
        priorities = fused_priorities(annotated_priorities(dsk), translation.fused)
        natives = native.get(
            translation.graph, translation.requested, block=False, priority=priority, priorities=priorities
        )
    return natives, futures.used


def flat_keys(keys: Any) -> list[Hashable]:
    if isinstance(keys, list):
        return [key for item in keys for key in flat_keys(item)]
    return [keys]


def nested_results(keys: Any, results: dict[Hashable, Any]) -> Any:
    """Results in the shape of `keys`: a list of keys gives a tuple, as dask's own get functions return."""
    if isinstance(keys, list):
        return tuple(nested_results(item, results) for item in keys)
    return results[keys]
