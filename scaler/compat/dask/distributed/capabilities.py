"""What the native client offers that this layer builds on, read once from its signatures.

`keep=True` on `Client.submit` (results kept on the cluster, futures as arguments) and `Client.persist_graph`
come with the native work on issue 27 (points 2 and 4). Until both are there, what needs them raises
NotImplementedError naming what is missing, and never moves values through the client instead.
"""

from __future__ import annotations

import inspect

from scaler.client.client import Client as NativeClient

NATIVE_KEEPS = "keep" in inspect.signature(NativeClient.submit).parameters
NATIVE_PERSISTS = hasattr(NativeClient, "persist_graph")


def require_keeps(what: str) -> None:
    if not NATIVE_KEEPS:
        raise NotImplementedError(
            f"{what} needs results kept on the cluster (scaler.Client.submit(..., keep=True)), "
            "which this Scaler does not have yet"
        )


def require_persist(what: str) -> None:
    if not (NATIVE_KEEPS and NATIVE_PERSISTS):
        raise NotImplementedError(
            f"{what} needs scaler.Client.persist_graph (results kept on the cluster), "
            "which this Scaler does not have yet"
        )
