"""dask.distributed on a LocalCluster of worker processes, one thread each; also joblib's "dask" backend."""

from __future__ import annotations

import logging
import os
import warnings

from workloads import (
    Runner,
    cpu_efficiency,
    cpu_work,
    descendants,
    large_arguments,
    noop,
    payload_size,
    process_memory,
    rate,
    result_of,
    sequential_round_trips,
    submit_loop,
    task_node_count,
    timed,
    tree_graph,
)


def main() -> None:
    runner = Runner("dask.distributed")
    spec = runner.spec
    warnings.filterwarnings("ignore")  # "sending large graph" and friends would flood the log
    import dask
    from distributed import Client, LocalCluster

    dask.config.set({"distributed.admin.large-graph-warning-threshold": "2GB"})
    logging.getLogger("distributed").setLevel(logging.ERROR)
    with LocalCluster(
        n_workers=runner.workers, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, Client(cluster) as client:
        client.wait_for_workers(runner.workers)

        def start(function, argument):  # pure=False: distinct calls, never served from dask's cache
            return client.submit(function, argument, pure=False)

        client.gather(client.map(noop, range(500)))
        client.gather(client.map(cpu_work, [10] * 10, pure=False))
        client.submit(payload_size, b"x" * 2_000_000).result()
        small, root, expected = tree_graph(100)
        assert client.get(small, root) == expected

        def run_map() -> dict:
            count = runner.count("map")
            results: list = []
            # Distinct arguments from the warm-up, so no result is reused from a key computed before.
            arguments = range(1_000_000, 1_000_000 + count)
            seconds = timed(lambda: results.extend(client.gather(client.map(noop, arguments))))
            assert results[-1] == 1_000_000 + count - 1
            return rate(count, seconds)

        runner.run("map", run_map)
        worker_pids = descendants(os.getpid())
        runner.run("memory", lambda: process_memory(
            [], worker_pids, note="the LocalCluster scheduler runs inside the client process"
        ))

        runner.run("submit", lambda: submit_loop(start, result_of, runner.count("submit")))
        runner.run("rtt", lambda: sequential_round_trips(start, result_of, runner.count("rtt")))

        def run_graph() -> dict:
            graph, root, expected = tree_graph(runner.count("graph"))
            outcome: list = []
            seconds = timed(lambda: outcome.append(client.get(graph, root)))
            assert outcome[0] == expected, outcome
            return rate(task_node_count(graph), seconds)

        runner.run("graph", run_graph)

        def run_dask_array() -> dict:
            import dask_array_workload

            dask_array_workload.run(None, spec, warm_up=True)  # None: the default, this distributed client
            return dask_array_workload.run(None, spec)

        runner.run("dask_array", run_dask_array)

        def run_joblib() -> dict:
            import joblib_workload

            joblib_workload.run("dask", runner.workers, 200)
            return joblib_workload.run("dask", runner.workers, runner.count("joblib"))

        runner.run("joblib", run_joblib)

        def run_cpu() -> dict:
            arguments = [spec["cpu_iterations"]] * spec["cpu_tasks"]
            return cpu_efficiency(spec, lambda: client.gather(client.map(cpu_work, arguments, pure=False)))

        runner.run("cpu", run_cpu)

        runner.run("large_args", lambda: large_arguments(start, result_of, spec))

        def run_persist_query() -> dict:
            import persist_query_workload
            from distributed import wait

            persist_query_workload.run(wait, 20)  # warm-up, as for Scaler
            return persist_query_workload.run(wait, spec["persist_mb"])

        runner.run("persist_query", run_persist_query)


if __name__ == "__main__":  # workers start with spawn, which re-imports this file
    main()
