"""The executor and joblib adapters side by side with what they replace, on 2 local workers.

    python benchmarks/executor_joblib.py [--joblib-calls 20000] [--map-calls 100000] [--chunksize 1000] [--repeats 3]

- joblib: tiny calls, `Parallel(n_jobs=2)(delayed(neg)(i) for i in ...)` with the default
  batch_size="auto", on loky and on the "scaler" backend;
- executor: `map` of tiny calls, `ScalerExecutor` against `ProcessPoolExecutor(2)`, with
  chunksize=1 and with a larger chunksize.

The cluster, the pool and loky's workers are started and warmed up before the clock; the workloads
take turns within each repeat. Prints the median of the repeats and the ratio peer time / scaler
time (above 1: scaler is faster).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import operator
import statistics
import time
from typing import Callable

import joblib
from joblib.externals.loky import get_reusable_executor

from scaler import Client, SchedulerClusterCombo
from scaler.compat.cluster_choice import use
from scaler.compat.futures import ScalerExecutor

WORKERS = 2


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def joblib_run(backend: str, count: int) -> None:
    results = joblib.Parallel(n_jobs=WORKERS, backend=backend)(joblib.delayed(operator.neg)(i) for i in range(count))
    assert results[-1] == -(count - 1)


def executor_map(executor: concurrent.futures.Executor, count: int, chunksize: int) -> None:
    results = list(executor.map(operator.neg, range(count), chunksize=chunksize))
    assert results[-1] == -(count - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--joblib-calls", type=int, default=20_000)
    parser.add_argument("--map-calls", type=int, default=100_000)
    parser.add_argument("--chunksize", type=int, default=1000, help="the larger chunksize tried for map")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    workloads = [
        f"joblib {args.joblib_calls:,} tiny calls, vs loky",
        f"map {args.map_calls:,} calls, chunksize=1, vs ProcessPool",
        f"map {args.map_calls:,} calls, chunksize={args.chunksize}, vs ProcessPool",
    ]
    scaler_seconds: list[list[float]] = [[] for _ in workloads]
    peer_seconds: list[list[float]] = [[] for _ in workloads]

    with SchedulerClusterCombo(n_workers=WORKERS, logging_level="WARNING") as cluster, Client(
        address=cluster.get_address()
    ) as client, use(client), ScalerExecutor(client=client) as executor, concurrent.futures.ProcessPoolExecutor(
        WORKERS
    ) as pool:
        try:
            # Warm up: workers connected and importing joblib, loky's workers started, functions cached.
            joblib_run("scaler", 2000)
            joblib_run("loky", 2000)
            executor_map(executor, 2000, 1)
            executor_map(pool, 200, 1)
            for _ in range(args.repeats):
                runs: list[tuple[Callable[[], object], Callable[[], object]]] = [
                    (lambda: joblib_run("scaler", args.joblib_calls), lambda: joblib_run("loky", args.joblib_calls)),
                    (lambda: executor_map(executor, args.map_calls, 1), lambda: executor_map(pool, args.map_calls, 1)),
                    (
                        lambda: executor_map(executor, args.map_calls, args.chunksize),
                        lambda: executor_map(pool, args.map_calls, args.chunksize),
                    ),
                ]
                for index, (scaler_run, peer_run) in enumerate(runs):
                    scaler_seconds[index].append(timed(scaler_run))
                    peer_seconds[index].append(timed(peer_run))
        finally:
            get_reusable_executor().shutdown(wait=True)  # loky keeps its workers for reuse otherwise

    print(f"{WORKERS} workers, median of {args.repeats} runs; ratio = peer time / scaler time")
    print(f"{'workload':<52}{'scaler':>9}{'peer':>9}{'ratio':>8}")
    for name, scaler_times, peer_times in zip(workloads, scaler_seconds, peer_seconds):
        scaler_median, peer_median = statistics.median(scaler_times), statistics.median(peer_times)
        print(f"{name:<52}{scaler_median:>8.2f}s{peer_median:>8.2f}s{peer_median / scaler_median:>7.1f}x")

if __name__ == "__main__":
    main()
