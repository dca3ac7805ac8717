"""Scaler: a light, fast and reliable distributed task framework."""

from typing import Any

from scaler.about import __version__
from scaler.client.client import Client
from scaler.client.future import ScalerFuture
from scaler.client.object_reference import ObjectReference
from scaler.cluster.cluster import Cluster
from scaler.cluster.combo import SchedulerClusterCombo
from scaler.native_tasks import NeutralSerializer, native
from scaler.protocol.serializer import Serializer

try:  # registers joblib's "scaler" backend when joblib is installed (lazily: see scaler/compat/joblib)
    from scaler.compat import joblib as _joblib_backend  # noqa: F401
except ImportError:
    pass

__all__ = [
    "Client",
    "Cluster",
    "NeutralSerializer",
    "ObjectReference",
    "ScalerFuture",
    "SchedulerClusterCombo",
    "Serializer",
    "__version__",
    "get",
    "native",
]


def __getattr__(name: str) -> Any:
    # `scaler.get`, the dask scheduler function, is imported on first use: `import scaler` needs no dask.
    if name == "get":
        from scaler.compat.dask import get

        return get
    raise AttributeError(f"module 'scaler' has no attribute {name!r}")
