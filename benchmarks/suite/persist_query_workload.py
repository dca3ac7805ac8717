"""The persist-then-query workload: a dask.dataframe made on the workers, persisted once, then queried ten times.

Each partition is made inside its task (random, seeded), so no peer sends the data from the client; the
persisted partitions stay on the cluster (dask.distributed: in the workers' memory; Scaler through
`scaler.compat.dask.distributed`: in the workers' stores). Each query is a groupby mean over all of it.
The same code runs on both peers: the open client is dask's scheduler, `wait` is the peer's own.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

QUERIES = 10
ROWS_PER_PARTITION = 1_000_000  # 16 MB partitions: two int64/float64 columns
GROUPS = 1000
BYTES_PER_ROW = 16


def make_partition(index: int) -> Any:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(index)
    return pd.DataFrame({
        "key": rng.integers(0, GROUPS, ROWS_PER_PARTITION), "value": rng.random(ROWS_PER_PARTITION),
    })


def run(wait: Callable[[Any], Any], size_mb: int) -> dict:
    """Persist a dataframe of about `size_mb` MB (10^6 bytes), wait for it, then time `QUERIES` queries."""
    import dask
    import dask.dataframe as dd

    partitions = max(2, round(size_mb * 1e6 / (ROWS_PER_PARTITION * BYTES_PER_ROW)))
    frame = dd.from_map(make_partition, range(partitions))
    started = time.perf_counter()
    (persisted,) = dask.persist(frame)
    wait(persisted)
    persist_seconds = time.perf_counter() - started
    timings = []
    for _ in range(QUERIES):
        started = time.perf_counter()
        means = persisted.groupby("key").value.mean().compute()
        timings.append(time.perf_counter() - started)
        assert len(means) == GROUPS and abs(float(means.mean()) - 0.5) < 0.01, means.describe()
    del persisted  # the partitions leave the cluster before the peer's next workload
    return {
        "query_seconds": statistics.median(timings), "first_query_seconds": timings[0], "query_each_seconds": timings,
        "persist_seconds": persist_seconds, "size_mb": partitions * ROWS_PER_PARTITION * BYTES_PER_ROW / 1e6,
        "partitions": partitions, "queries": QUERIES,
    }
