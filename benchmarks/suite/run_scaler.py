"""This checkout's Scaler: native Client, the dask adapter (scaler.get) and the joblib backend "scaler"."""

from __future__ import annotations

import gc
import operator

from workloads import (
    Runner,
    cpu_efficiency,
    cpu_work,
    current_rss_mb,
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

from scaler import Client, SchedulerClusterCombo


def main() -> None:
    runner = Runner("scaler")
    spec = runner.spec
    with SchedulerClusterCombo(n_workers=runner.workers, logging_level="WARNING") as cluster, Client(
        address=cluster.get_address()
    ) as client:
        warm_up(client)

        def scheduler_pids() -> list[int]:
            return [cluster.scheduler_pid]

        def worker_pids() -> list[int]:
            return [cluster.cluster_pid, *descendants(cluster.cluster_pid)]

        def run_map() -> dict:
            count = runner.count("map")
            arguments = [(index,) for index in range(count)]
            results: list = []
            seconds = timed(lambda: results.extend(client.map(noop, arguments)))
            assert results[-1] == count - 1
            return rate(count, seconds)

        runner.run("map", run_map)
        runner.run("memory", lambda: process_memory(scheduler_pids(), worker_pids()))
        runner.run("memory_flat", lambda: memory_flat(client, runner, scheduler_pids()))

        runner.run("submit", lambda: submit_loop(client.submit, result_of, runner.count("submit")))
        runner.run("rtt", lambda: sequential_round_trips(client.submit, result_of, runner.count("rtt")))

        def run_graph() -> dict:
            graph, root, expected = tree_graph(runner.count("graph"))
            outcome: dict = {}
            seconds = timed(lambda: outcome.update(client.get(graph, [root])))
            assert outcome[root] == expected, outcome
            return rate(task_node_count(graph), seconds)

        runner.run("graph", run_graph)
        runner.run("graph_adapter", lambda: graph_via_adapter(client, runner))
        runner.run("dask_array", lambda: dask_array(client, runner))
        runner.run("joblib", lambda: joblib_calls(client, runner))

        def run_cpu() -> dict:
            arguments = [(spec["cpu_iterations"],)] * spec["cpu_tasks"]
            return cpu_efficiency(spec, lambda: client.map(cpu_work, arguments))

        runner.run("cpu", run_cpu)

        runner.run("large_args", lambda: large_arguments(client.submit, result_of, spec))
        runner.run("persist_query", lambda: persist_query(client, spec))


def warm_up(client: Client) -> None:
    """Workers connected, functions sent and cached, code paths imported, before any clock starts."""
    client.map(noop, [(index,) for index in range(2000)])
    client.map(cpu_work, [(10,)] * 10)
    assert client.submit(payload_size, b"x" * 2_000_000).result() == 2_000_000
    graph, root, expected = tree_graph(100)
    assert client.get(graph, [root])[root] == expected
    assert client.submit(operator.pos, 1).result() == 1


def memory_flat(client: Client, runner: Runner, scheduler_pids: list[int]) -> dict:
    """Scheduler RSS after the 100k map and after `memory_flat` tasks in all, run as maps of 100k."""
    total = runner.count("memory_flat")
    step = min(100_000, total)
    gc.collect()
    after_first = current_rss_mb(scheduler_pids)
    done = 0
    arguments = [(index,) for index in range(step)]
    while done < total:
        client.map(noop, arguments)
        done += step
        if done == step:
            after_first = current_rss_mb(scheduler_pids)
    after_all = current_rss_mb(scheduler_pids)
    return {
        "count": done, "scheduler_rss_after_first_mb": after_first, "scheduler_rss_after_all_mb": after_all,
        "growth_mb": after_all - after_first, "first": step,
    }


def graph_via_adapter(client: Client, runner: Runner) -> dict:
    try:
        from scaler.compat.dask import get, use
    except ImportError:
        return {"unavailable": "scaler.compat.dask not available yet"}
    graph, root, expected = tree_graph(runner.count("graph"))
    with use(client):
        get({"a": (operator.add, 1, 2)}, "a")  # the adapter's first call imports dask
        result: list = []
        seconds = timed(lambda: result.append(get(graph, root)))
    assert result[0] == expected, result
    return rate(task_node_count(graph), seconds)


def dask_array(client: Client, runner: Runner) -> dict:
    try:
        from scaler.compat.dask import get, use
    except ImportError:
        return {"unavailable": "scaler.compat.dask not available yet"}
    import dask_array_workload

    with use(client):
        dask_array_workload.run(get, runner.spec, warm_up=True)
        figures = dask_array_workload.run(get, runner.spec)
    return figures


def joblib_calls(client: Client, runner: Runner) -> dict:
    try:
        import scaler.compat.joblib  # noqa: F401 - registers the "scaler" backend
        from scaler.compat.cluster_choice import use
    except ImportError:
        return {"unavailable": "scaler.compat.joblib not available yet"}
    import joblib_workload

    with use(client):
        joblib_workload.run("scaler", runner.workers, 200)
        return joblib_workload.run("scaler", runner.workers, runner.count("joblib"))


def persist_query(client: Client, spec: dict) -> dict:
    """Through scaler.compat.dask.distributed's Client, on this cluster: dask code as written for dask.distributed."""
    import persist_query_workload

    from scaler.compat.dask.distributed import Client as DaskClient
    from scaler.compat.dask.distributed import wait

    with DaskClient(client):  # wraps this native client (left open), and is dask's scheduler meanwhile
        persist_query_workload.run(wait, 20)  # warm-up: imports, functions sent, nothing measured
        return persist_query_workload.run(wait, spec["persist_mb"])


if __name__ == "__main__":
    main()
