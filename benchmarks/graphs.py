"""Graph workloads on scaler.get next to dask's own schedulers, and Client.get's client-side cost.

    python benchmarks/graphs.py [--workers 2] [--repeats 3] [--leaves 5000] [--native-nodes 100000]

Side by side, each with the same number of worker processes (threads for dask.threaded):
- a 10,000-node tree reduction (5,000 tiny leaf tasks summed pairwise) given as a plain dask graph;
- dask.array: reductions and a transpose, `(x + x.T).mean(axis=0)`, `x.std(axis=1)`, `x.sum()`, on a
  random 4000 x 4000 array in 64 chunks of 2 MB;
- dask.array: `(x @ x.T).sum()` on a 2000 x 2000 array in 64 chunks, where each chunk feeds 15 tasks;
on `scaler.get` (with and without fusing tiny tasks), `dask.threaded.get`, `dask.multiprocessing.get`
and a dask.distributed LocalCluster. Clusters and pools start before the clock; each figure is the
median of the repeats, and the ratio is that scheduler's time over scaler.get's (above 1: scaler is faster).

Then Client.get of a native 100,000-node tree reduction: the client-side time of planning, serializing
and handing the graph to the I/O thread (`block=False` returns), and the time to the result.
"""

from __future__ import annotations

import argparse
import operator
import statistics
import time
import warnings
from typing import Any, Callable

import dask
import dask.array as da
import dask.multiprocessing
import dask.threaded
import numpy

import scaler
from scaler import Client, SchedulerClusterCombo
from scaler.compat.dask import use


def timed(action: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    samples, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), result


def tree_reduction(leaves: int) -> tuple[dict, Any]:
    """`leaves` tiny tasks summed pairwise: 2 * leaves - 1 nodes."""
    graph: dict = {("leaf", i): (operator.neg, i) for i in range(leaves)}
    level: list = [("leaf", i) for i in range(leaves)]
    depth = 0
    while len(level) > 1:
        following = []
        for j in range(0, len(level) - 1, 2):
            graph[("sum", depth, j)] = (operator.add, level[j], level[j + 1])
            following.append(("sum", depth, j))
        if len(level) % 2:
            following.append(level[-1])
        level = following
        depth += 1
    return graph, level[0]


def array_reductions() -> tuple:
    x = da.random.default_rng(7).random((4000, 4000), chunks=(500, 500))
    return ((x + x.T).mean(axis=0), x.std(axis=1), x.sum())


def array_matmul() -> tuple:
    x = da.random.default_rng(7).random((2000, 2000), chunks=(250, 250))
    return ((x @ x.T).sum(),)


def same(mine: tuple, expected: tuple) -> bool:
    return all(numpy.allclose(one, other) for one, other in zip(mine, expected))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--leaves", type=int, default=5000, help="tree reduction of 2 * leaves - 1 nodes")
    parser.add_argument("--native-nodes", type=int, default=100_000)
    parser.add_argument("--no-distributed", action="store_true")
    parser.add_argument("--no-multiprocessing", action="store_true", help="dask.multiprocessing is the slowest")
    args = parser.parse_args()
    workers, repeats = args.workers, args.repeats

    tree, root = tree_reduction(args.leaves)
    expected_tree = -sum(range(args.leaves))
    arrays = {"dask.array reductions": array_reductions(), "dask.array x @ x.T": array_matmul()}
    expected_arrays = {name: dask.compute(*collections, scheduler="sync") for name, collections in arrays.items()}

    schedulers: dict[str, Callable[..., Any]] = {
        "scaler.get": scaler.get,
        "scaler.get fuse=False": lambda dsk, keys, **kw: scaler.get(dsk, keys, fuse=False, **kw),
        f"dask.threaded ({workers} threads)": lambda dsk, keys, **kw: dask.threaded.get(
            dsk, keys, num_workers=workers, **kw
        ),
    }
    if not args.no_multiprocessing:
        schedulers[f"dask.multiprocessing ({workers})"] = lambda dsk, keys, **kw: dask.multiprocessing.get(
            dsk, keys, num_workers=workers, **kw
        )

    distributed_client = distributed_cluster = None
    if not args.no_distributed:
        import distributed

        warnings.filterwarnings("ignore", module="distributed")
        distributed_cluster = distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        distributed_client = distributed.Client(distributed_cluster, set_as_default=False)
        schedulers[f"dask.distributed ({workers} procs)"] = distributed_client.get

    rows: list[tuple[str, list[float]]] = []
    with SchedulerClusterCombo(n_workers=workers, logging_level="WARNING") as cluster, Client(
        address=cluster.get_address()
    ) as client, use(client):
        warm_up, warm_up_root = tree_reduction(8)
        for get in schedulers.values():  # workers started, functions shipped, pools made
            get(warm_up, warm_up_root)
        for name, get in schedulers.items():
            tree_seconds, tree_result = timed(lambda get=get: get(tree, root), repeats)
            assert tree_result == expected_tree, (name, tree_result)
            figures = [tree_seconds]
            for workload, collections in arrays.items():
                dask.compute(*collections, scheduler=get)  # warm up: numpy loaded and functions shipped
                seconds, result = timed(lambda get=get, c=collections: dask.compute(*c, scheduler=get), repeats)
                assert same(result, expected_arrays[workload]), (name, workload)
                figures.append(seconds)
            rows.append((name, figures))
            print(f"  {name}: " + ", ".join(f"{seconds:.3f} s" for seconds in figures), flush=True)

        native, native_root = tree_reduction(args.native_nodes // 2)
        submit_samples, total_samples = [], []
        for _ in range(repeats):
            started = time.perf_counter()
            futures = client.get(native, keys=[native_root], block=False)
            submit_samples.append(time.perf_counter() - started)
            assert futures[native_root].result() == -sum(range(args.native_nodes // 2))
            total_samples.append(time.perf_counter() - started)

    if distributed_client is not None and distributed_cluster is not None:
        distributed_client.close()
        distributed_cluster.close()

    baseline = rows[0][1]
    columns = [f"{len(tree)}-node tree reduction", *arrays]
    print()
    print(f"{workers} workers, median of {repeats}; ratio = that scheduler's time / scaler.get's (above 1: slower)")
    print()
    print("| scheduler | " + " | ".join(f"{column} | ratio" for column in columns) + " |")
    print("| --- |" + " --- | --- |" * len(columns))
    for name, figures in rows:
        cells = [f"{seconds:.3f} s | {seconds / base:.2f}" for seconds, base in zip(figures, baseline)]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    print(
        f"Client.get of a {len(native)}-node tree reduction: client side (plan, serialize, hand over) "
        f"{statistics.median(submit_samples):.3f} s, to the result {statistics.median(total_samples):.3f} s"
    )


if __name__ == "__main__":
    main()
