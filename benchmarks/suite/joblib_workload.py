"""The joblib workload: many tiny calls through `joblib.Parallel` with a given backend."""

from __future__ import annotations

import time
from typing import Any

from workloads import noop


def run(backend: str, workers: int, calls: int, **backend_options: Any) -> dict:
    import joblib

    with joblib.parallel_config(backend=backend, n_jobs=workers, **backend_options):
        started = time.perf_counter()
        results = joblib.Parallel()(joblib.delayed(noop)(index) for index in range(calls))
        seconds = time.perf_counter() - started
    assert results[-1] == calls - 1
    return {"count": calls, "seconds": seconds, "rate": calls / seconds}
