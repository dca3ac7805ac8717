"""dask's persist on Scaler: a graph computed on the cluster, its results kept there (kept_refs.py)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from scaler.client.client import Client
from scaler.client.future import ScalerFuture
from scaler.compat.dask.translation import translate


def persist_dask_graph(client: Client, dsk: Mapping, keys: list[Hashable]) -> dict[Hashable, ScalerFuture]:
    """Compute `keys` of a dask graph (task-spec or legacy) on `client`'s cluster, keeping their results there:
    a kept future per key, for `persisted_graph`."""
    translation = translate(dsk, keys)
    return client.persist_graph(translation.graph, translation.requested)
