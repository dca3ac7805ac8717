"""Pointing dask at one get function: its named schedulers and its collections' default getters.

dask decides where a compute runs from, in order: `scheduler=` (a name or a callable), the `scheduler`
config, a dask.distributed client, the collection's `__dask_scheduler__`. dask's own tests mostly name
a scheduler ("sync" through `assert_eq`, "processes" for bags) or rely on the default getter, so
rerouting the names and the getters sends their computes where we want without touching the tests.

A default getter is rerouted wherever a class of a dask module (test modules included: their own
collections default to `dask.threaded.get` and are computed together with dask's) holds one of the
named schedulers. Callables a test passes itself (`scheduler=dask.threaded.get`, `dask.get(graph,
keys)`) stay as they are: those tests are about that very scheduler.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

# Modules of dask that define collections; importing them up front lets the getters be found at once.
COLLECTION_MODULES = ("dask.array", "dask.bag", "dask.dataframe", "dask.delayed")


@dataclasses.dataclass
class Routing:
    """What was replaced, to put back: (owner, attribute name, original value)."""

    replaced: list[tuple[Any, str, Any]] = dataclasses.field(default_factory=list)
    named: dict[str, Callable] = dataclasses.field(default_factory=dict)

    def restore(self) -> None:
        import dask.base

        for owner, name, original in reversed(self.replaced):
            setattr(owner, name, original)
        self.replaced.clear()
        dask.base.named_schedulers.update(self.named)
        self.named.clear()


def route_dask_to(get: Callable, routing: Routing | None = None) -> Routing:
    """Make every named scheduler and every library collection's default getter call `get`.

    Called again with the same `routing`, it also reroutes collections whose modules were imported since
    (test modules import more of dask); nothing already rerouted is touched twice.
    """
    import importlib

    import dask.base

    routing = routing if routing is not None else Routing()
    for module_name in COLLECTION_MODULES:
        try:
            importlib.import_module(module_name)
        except ImportError:  # an optional collection whose dependencies are missing is not tested either
            pass

    # `named_schedulers` is one dict that dask.array, dask.bag, ... imported by reference: change it in place.
    for name, original in dask.base.named_schedulers.items():
        if name not in routing.named:
            routing.named[name] = original
    originals = set(routing.named.values())
    for name in routing.named:
        dask.base.named_schedulers[name] = get

    for module_name, module in list(sys.modules.items()):
        if module is None or (module_name != "dask" and not module_name.startswith("dask.")):
            continue
        for attribute_name, value in list(vars(module).items()):
            if attribute_name == "DEFAULT_GET" and _is_one_of(value, originals):
                routing.replaced.append((module, attribute_name, value))
                setattr(module, attribute_name, get)
            elif isinstance(value, type) and value.__module__ == module_name:
                getter = vars(value).get("__dask_scheduler__")
                if isinstance(getter, staticmethod) and _is_one_of(getter.__func__, originals):
                    routing.replaced.append((value, "__dask_scheduler__", getter))
                    value.__dask_scheduler__ = staticmethod(get)  # type: ignore[attr-defined]
    return routing


def _is_one_of(value: Any, functions: set[Callable]) -> bool:
    try:
        return value in functions
    except TypeError:  # unhashable: not a function
        return False
