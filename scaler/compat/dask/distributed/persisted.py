"""The graph of a persisted collection: one `FutureRef` per chunk, standing for the chunk kept on the cluster.

dask fuses a plain graph value (a Future put there as `{key: future}`) into the tasks that use it, where it
could not travel; a dask `TaskRef` it leaves alone, as it does dask.distributed's futures. A FutureRef is
ddcore's `KeptRef` (a TaskRef that `scaler.get` and `Client.get` resolve on the cluster) that also holds the
dask Future of its chunk: `wait`, `progress` and `futures_of` find the Futures of a persisted collection
through it, and the chunk stays on the cluster while a graph holds it (the Future's release lets it go).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from scaler.compat.dask.distributed.future import Future
from scaler.compat.dask.kept_refs import KeptRef


class FutureRef(KeptRef):
    __slots__ = ("dask_future",)

    def __init__(self, dask_future: Future) -> None:
        native = dask_future._state.native
        assert native is not None, "a scattered object has no kept result to refer to"
        super().__init__(native)
        self.dask_future = dask_future


def persisted_layer(futures: Mapping[Hashable, Future]) -> dict[Hashable, Any]:
    """A persisted collection's graph layer: a FutureRef per computed key. A key whose Future is a scattered
    object (scattered earlier under the same key) stays a Future, which a graph run reads as its reference."""
    return {
        key: future if future._state.native is None else FutureRef(future) for key, future in futures.items()
    }
