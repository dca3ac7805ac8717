"""The dask.array workload: `(x + x.T).mean(axis=0).sum()` with x random, chunked, built inside the tasks."""

from __future__ import annotations

import statistics
import time
from typing import Any

# Computations after the first: their median is the steady figure, what a peer does once the first
# computation has paid for whatever it pays once (imports, connections, caches, a store's first segments).
STEADY_COMPUTATIONS = 3


def run(scheduler: Any, spec: dict, warm_up: bool = False, **compute_options: Any) -> dict:
    """Compute with `scheduler` (a get function or a dask scheduler name): the first computation's seconds,
    then the median of `STEADY_COMPUTATIONS` more of the same expression ("seconds"). `warm_up`: one small
    computation, nothing measured that counts."""
    import dask.array as da

    size = 400 if warm_up else spec["array_size"]
    chunk = 100 if warm_up else spec["array_chunk"]
    x = da.random.default_rng(42).random((size, size), chunks=(chunk, chunk))
    expression = (x + x.T).mean(axis=0).sum()
    timings = [_compute(expression, size, scheduler, compute_options)
               for _ in range(1 if warm_up else 1 + STEADY_COMPUTATIONS)]
    steady = timings[1:] or timings
    return {
        "seconds": statistics.median(steady), "first_seconds": timings[0], "steady_each_seconds": steady,
        "size": size, "chunk": chunk, "tasks": len(expression.__dask_graph__()),
    }


def _compute(expression: Any, size: int, scheduler: Any, compute_options: dict) -> float:
    started = time.perf_counter()
    value = float(expression.compute(scheduler=scheduler, **compute_options))
    seconds = time.perf_counter() - started
    # E[x + x.T] = 1: the mean over rows of each column is about 1, the sum about `size`.
    assert abs(value - size) < size * 0.01, value
    return seconds
