"""Per-task overhead of the native client on 2 local workers, side by side with ProcessPoolExecutor.

    python benchmarks/native_overhead.py [--tasks 100000] [--repeats 3]

Clusters and pools are started before the clock. Prints the median of the repeats and ratios.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import operator
import statistics
import time
from typing import Callable

from scaler import Client, SchedulerClusterCombo

WORKERS = 2


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def scaler_map(client: Client, count: int) -> None:
    results = client.map(operator.neg, [(i,) for i in range(count)])
    assert results[-1] == -(count - 1)


def scaler_submit_loop(client: Client, count: int) -> None:
    futures = [client.submit(operator.neg, i) for i in range(count)]
    assert [future.result() for future in futures][-1] == -(count - 1)


def round_trips(client: Client, count: int) -> list[float]:
    samples = []
    for i in range(count):
        started = time.perf_counter()
        client.submit(operator.neg, i).result()
        samples.append(time.perf_counter() - started)
    return samples


def pool_map(pool: concurrent.futures.ProcessPoolExecutor, count: int) -> None:
    results = list(pool.map(operator.neg, range(count), chunksize=1))
    assert results[-1] == -(count - 1)


def pool_round_trips(pool: concurrent.futures.ProcessPoolExecutor, count: int) -> list[float]:
    samples = []
    for i in range(count):
        started = time.perf_counter()
        pool.submit(operator.neg, i).result()
        samples.append(time.perf_counter() - started)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--pool-tasks", type=int, default=20_000, help="ProcessPoolExecutor is slow at chunksize=1")
    parser.add_argument("--round-trips", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    figures: dict[str, list[float]] = {name: [] for name in ("map", "submit", "pool_map", "rtt", "pool_rtt")}
    with SchedulerClusterCombo(n_workers=WORKERS, logging_level="WARNING") as cluster, Client(
        address=cluster.get_address()
    ) as client, concurrent.futures.ProcessPoolExecutor(WORKERS) as pool:
        scaler_map(client, 1000)  # warm up: workers connected, function cached
        pool_map(pool, 100)
        for _ in range(args.repeats):
            figures["map"].append(args.tasks / timed(lambda: scaler_map(client, args.tasks)))
            figures["submit"].append(args.tasks / timed(lambda: scaler_submit_loop(client, args.tasks)))
            figures["pool_map"].append(args.pool_tasks / timed(lambda: pool_map(pool, args.pool_tasks)))
            figures["rtt"].append(statistics.median(round_trips(client, args.round_trips)) * 1e3)
            figures["pool_rtt"].append(statistics.median(pool_round_trips(pool, args.round_trips)) * 1e3)

    median = {name: statistics.median(values) for name, values in figures.items()}
    print(f"{WORKERS} workers, median of {args.repeats} runs")
    print(f"{'workload':<44}{'scaler':>12}{'ProcessPool':>14}{'ratio':>8}")
    print(f"{'Client.map no-op, tasks/s':<44}{median['map']:>12,.0f}{median['pool_map']:>14,.0f}"
          f"{median['map'] / median['pool_map']:>8.1f}x")
    print(f"{'submit loop no-op, tasks/s':<44}{median['submit']:>12,.0f}{'':>14}{'':>8}")
    print(f"{'round trip submit().result(), median ms':<44}{median['rtt']:>12.3f}{median['pool_rtt']:>14.3f}"
          f"{median['pool_rtt'] / median['rtt']:>8.1f}x")
    print(f"{args.tasks:,} tasks via map took {args.tasks / median['map']:.2f} s (median)")


if __name__ == "__main__":
    main()
