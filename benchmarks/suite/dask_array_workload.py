"""The dask.array workload: `(x + x.T).mean(axis=0).sum()` with x random, chunked, built inside the tasks."""

from __future__ import annotations

import time
from typing import Any


def run(scheduler: Any, spec: dict, warm_up: bool = False, **compute_options: Any) -> dict:
    """Compute once with `scheduler` (a get function or a dask scheduler name); seconds and the answer."""
    import dask.array as da

    size = 400 if warm_up else spec["array_size"]
    chunk = 100 if warm_up else spec["array_chunk"]
    x = da.random.default_rng(42).random((size, size), chunks=(chunk, chunk))
    expression = (x + x.T).mean(axis=0).sum()
    started = time.perf_counter()
    value = float(expression.compute(scheduler=scheduler, **compute_options))
    seconds = time.perf_counter() - started
    # E[x + x.T] = 1: the mean over rows of each column is about 1, the sum about `size`.
    assert abs(value - size) < size * 0.01, value
    return {"seconds": seconds, "size": size, "chunk": chunk, "tasks": len(expression.__dask_graph__())}
