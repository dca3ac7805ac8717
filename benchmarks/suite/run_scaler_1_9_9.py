"""The original Scaler 1.9.9 from PyPI, run by the python of its own virtual environment.

It has the same package name as this checkout, so the suite never imports it in-process: it runs
this file with `benchmarks/.venv-scaler-1.9.9/bin/python` (see old_scaler_env.py).
"""

from __future__ import annotations

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
    tree_graph_with_data_keys,
)


def main() -> None:
    runner = Runner("scaler 1.9.9")
    spec = runner.spec
    import scaler
    from scaler import Client, SchedulerClusterCombo

    version = getattr(scaler, "__version__", "")
    if not version:
        from scaler.about import __version__ as version
    assert version == "1.9.9", f"expected Scaler 1.9.9, imported {version} from {scaler.__file__}"

    cluster = SchedulerClusterCombo(n_workers=runner.workers, logging_level="WARNING")
    client = Client(address=cluster.get_address())
    try:
        client.map(noop, [(index,) for index in range(200)])
        client.map(cpu_work, [(10,)] * 10)
        client.submit(payload_size, b"x" * 2_000_000).result()
        small, root, expected = tree_graph_with_data_keys(50)
        assert client.get(small, keys=[root])[root] == expected

        def run_map() -> dict:
            count = runner.count("map")
            results: list = []
            seconds = timed(lambda: results.extend(client.map(noop, [(index,) for index in range(count)])))
            assert results[-1] == count - 1
            return rate(count, seconds)

        runner.run("map", run_map)
        scheduler_pid = cluster._scheduler.pid
        cluster_pid = cluster._cluster.pid
        runner.run("memory", lambda: process_memory([scheduler_pid], [cluster_pid, *descendants(cluster_pid)]))

        runner.run("submit", lambda: submit_loop(client.submit, result_of, runner.count("submit")))
        runner.run("rtt", lambda: sequential_round_trips(client.submit, result_of, runner.count("rtt")))

        def run_graph() -> dict:
            # 1.9.9 takes only keys as task arguments: each literal leaf argument becomes a data key.
            graph, root, expected = tree_graph_with_data_keys(runner.count("graph"))
            outcome: dict = {}
            seconds = timed(lambda: outcome.update(client.get(graph, keys=[root])))
            assert outcome[root] == expected, outcome
            return {**rate(task_node_count(graph), seconds), "note": "literal leaf arguments given as data keys"}

        runner.run("graph", run_graph)

        def run_cpu() -> dict:
            arguments = [(spec["cpu_iterations"],)] * spec["cpu_tasks"]
            return cpu_efficiency(spec, lambda: client.map(cpu_work, arguments))

        runner.run("cpu", run_cpu)

        runner.run("large_args", lambda: large_arguments(client.submit, result_of, spec))
    finally:
        client.disconnect()
        cluster.shutdown()


if __name__ == "__main__":  # 1.9.9 starts its processes with spawn, which re-imports this file
    main()
