"""Scaler: a light, fast and reliable distributed task framework."""

from typing import TYPE_CHECKING, Any

from scaler.about import __version__

if TYPE_CHECKING:
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

# The public names, imported on first use: every scheduler, worker, processor and store process imports
# this package, and none of them needs the client (cloudpickle, the graph planner, ...) to start.
_PUBLIC = {
    "Client": "scaler.client.client",
    "ScalerFuture": "scaler.client.future",
    "ObjectReference": "scaler.client.object_reference",
    "Cluster": "scaler.cluster.cluster",
    "SchedulerClusterCombo": "scaler.cluster.combo",
    "NeutralSerializer": "scaler.native_tasks",
    "native": "scaler.native_tasks",
    "Serializer": "scaler.protocol.serializer",
    "get": "scaler.compat.dask",  # the dask scheduler function: `import scaler` needs no dask
}


def __getattr__(name: str) -> Any:
    module_name = _PUBLIC.get(name)
    if module_name is None:
        raise AttributeError(f"module 'scaler' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    if name != "get":
        globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
