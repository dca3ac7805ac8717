"""Topological order of a task graph in Python (Kahn's algorithm), and the error that names a cycle.

    plan_graph(graph, keys, order="python")

The GraphBLAS order (graph_order_graphblas.py) keeps the same contract and names a cycle the same way.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from scaler.client.graph_errors import GraphCycleError


def topological_order(dependencies: Mapping[Hashable, Sequence[Hashable]]) -> list[Hashable]:
    """Kahn's algorithm: every key after its dependencies; GraphError naming part of a cycle if any."""
    remaining = {key: len(needed) for key, needed in dependencies.items()}
    dependents: dict[Hashable, list[Hashable]] = {key: [] for key in dependencies}
    for key, needed in dependencies.items():
        for dependency in needed:  # a repeated dependency is counted, and released, once per use
            dependents[dependency].append(key)
    ready = [key for key, count in remaining.items() if count == 0]
    ordered: list[Hashable] = []
    while ready:
        key = ready.pop()
        ordered.append(key)
        for dependent in dependents[key]:
            remaining[dependent] -= 1
            if remaining[dependent] == 0:
                ready.append(dependent)
    if len(ordered) != len(dependencies):
        stuck = {key for key, count in remaining.items() if count > 0}
        raise cycle_error(stuck, dependencies)
    return ordered


def cycle_error(stuck: set[Hashable], dependencies: Mapping[Hashable, Sequence[Hashable]]) -> GraphCycleError:
    """The error for an ordering that placed every key but `stuck`: each of those waits on another one."""
    named = sorted(repr(key) for key in stuck)[:5]
    # Walking from any stuck key to a stuck dependency of it must come back to a key already seen.
    walked: list[Hashable] = []
    seen: set[Hashable] = set()
    key = next(iter(stuck))
    while key not in seen:
        seen.add(key)
        walked.append(key)
        key = next(dependency for dependency in dependencies[key] if dependency in stuck)
    loop = walked[walked.index(key):]
    return GraphCycleError(f"the graph has a cycle involving {', '.join(named)}", [*reversed(loop), loop[-1]])
