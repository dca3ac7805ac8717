"""Topological order of a task graph with GraphBLAS sparse matrices (the optional `graphblas` extra).

The graph becomes an adjacency matrix, edges from each dependency to its dependents. Starting from the
tasks that depend on nothing, each step multiplies the frontier by the matrix to count, for every task,
how many of its dependencies were just released, and the tasks whose count reaches zero form the next
frontier: the order comes out wave by wave, one sparse product per wave, with no Python loop over edges.

    plan_graph(graph, keys, order=graphblas_order)
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from scaler.client.graph_order import cycle_error

_graphblas: Any = None


def graphblas_available() -> bool:
    """True when python-graphblas (and its SuiteSparse backend) can be imported."""
    try:
        _load()
    except ImportError:
        return False
    return True


def _load() -> Any:
    global _graphblas
    if _graphblas is None:
        try:
            import graphblas
        except ImportError as error:
            missing = ModuleNotFoundError if isinstance(error, ModuleNotFoundError) else ImportError
            raise missing(
                f'order="graphblas" needs python-graphblas, the optional graphblas extra: '
                f'pip install "scaler[graphblas]" ({error})',
                name="graphblas",
            ) from error

        _graphblas = graphblas
    return _graphblas


def graphblas_order(dependencies: Mapping[Hashable, Sequence[Hashable]]) -> list[Hashable]:
    """Every key after its dependencies, wave by wave; GraphError naming part of a cycle if any.

    Same contract as `scaler.client.graph_order.topological_order`. Raises ImportError without python-graphblas.
    """
    graphblas = _load()
    import numpy

    keys = list(dependencies)
    count = len(keys)
    if count == 0:
        return []
    index_of = dict(zip(keys, range(count)))
    # One edge per use: a task that takes the same dependency twice waits for it "twice", as in Kahn's.
    # map() and chain() keep the per-edge work out of the interpreter loop.
    needed_per_key = list(dependencies.values())
    dependency_indices = numpy.fromiter(
        map(index_of.__getitem__, itertools.chain.from_iterable(needed_per_key)), dtype=numpy.int64
    )
    dependent_indices = numpy.repeat(
        numpy.arange(count, dtype=numpy.int64), numpy.fromiter(map(len, needed_per_key), dtype=numpy.int64, count=count)
    )
    edges = len(dependency_indices)

    waiting = numpy.zeros(count, dtype=numpy.int64)
    if edges:
        waiting += numpy.bincount(dependent_indices, minlength=count)
    frontier_indices = numpy.flatnonzero(waiting == 0)
    order_indices = [frontier_indices]
    placed = len(frontier_indices)
    if edges:
        adjacency = graphblas.Matrix.from_coo(
            dependency_indices,
            dependent_indices,
            numpy.ones(edges, dtype=numpy.int64),
            nrows=count,
            ncols=count,
            dup_op=graphblas.binary.plus,
        )
        frontier = graphblas.Vector(graphblas.dtypes.INT64, size=count)
        released = graphblas.Vector(graphblas.dtypes.INT64, size=count)
        while len(frontier_indices):
            frontier.clear()
            frontier.build(frontier_indices, numpy.ones(len(frontier_indices), dtype=numpy.int64))
            released << frontier.vxm(adjacency, graphblas.semiring.plus_times)
            touched, how_many = released.to_coo()
            touched = touched.astype(numpy.int64, copy=False)
            if not len(touched):
                break
            remaining = waiting[touched] - how_many
            waiting[touched] = remaining
            frontier_indices = touched[remaining == 0]
            order_indices.append(frontier_indices)
            placed += len(frontier_indices)
    if placed != count:
        raise cycle_error({keys[index] for index in numpy.flatnonzero(waiting > 0).tolist()}, dependencies)
    return [keys[index] for index in numpy.concatenate(order_indices).tolist()]
