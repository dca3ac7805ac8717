"""What is wrong with a task graph: a requested key missing or repeated, or a cycle. Each is a GraphError."""

from __future__ import annotations

import graphlib
from collections.abc import Hashable


class GraphError(ValueError):
    """The graph cannot be computed: a requested key is missing or repeated, or there is a cycle."""


class GraphKeyError(GraphError, KeyError):
    """A requested key is not in the graph; a KeyError too, as dask's schedulers raise for a bad key."""

    def __init__(self, key: Hashable) -> None:
        super().__init__(f"requested key {key!r} is not in the graph")
        self.key = key

    def __str__(self) -> str:
        return str(self.args[0])  # not KeyError's repr of the message


class DuplicateKeyError(GraphError, KeyError):
    """A key is requested more than once; a KeyError too, as Scaler 1.9.x raised for it."""

    def __init__(self, keys: list[Hashable]) -> None:
        super().__init__(f"keys requested more than once: {keys!r}; ask for each key once")
        self.keys = keys

    def __str__(self) -> str:
        return str(self.args[0])


class GraphCycleError(GraphError, graphlib.CycleError):
    """The graph has a cycle; also a `graphlib.CycleError`, which Scaler 1.9.x raised.

    As graphlib does, `args[1]` lists the keys of one cycle, each one a dependency of the next, the
    first repeated at the end.
    """

    def __init__(self, message: str, cycle: list[Hashable]) -> None:
        super().__init__(message, cycle)
        self.cycle = cycle

    def __str__(self) -> str:
        return str(self.args[0])
