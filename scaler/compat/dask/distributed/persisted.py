"""The graph of a persisted collection: its keys' Futures, each standing for its chunk kept on the cluster.

As in dask.distributed, the graph's values are the Futures themselves: a Future is a dask TaskRef, which dask
neither fuses into the tasks that use it nor computes, and a later graph run resolves it on the cluster
(graph_runs.py). `wait`, `progress` and `futures_of` find them there, and a chunk stays on the cluster while
a graph holds its Future.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from scaler.compat.dask.distributed.future import Future


def persisted_layer(futures: Mapping[Hashable, Future]) -> dict[Hashable, Future]:
    """A persisted collection's graph layer: the Future of each computed key."""
    return dict(futures)
