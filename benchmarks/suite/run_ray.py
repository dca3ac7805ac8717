"""Ray with num_cpus equal to the worker count: remote calls, and graph nodes as calls on ObjectRefs."""

from __future__ import annotations

import logging
import os

from workloads import (
    Runner,
    call,
    cpu_efficiency,
    cpu_work,
    descendants,
    large_arguments,
    noop,
    payload_size,
    process_memory,
    rate,
    sequential_round_trips,
    submit_loop,
    task_node_count,
    timed,
    tree_graph,
)


def main() -> None:
    runner = Runner("ray")
    spec = runner.spec
    import ray

    ray.init(
        num_cpus=runner.workers, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
        configure_logging=False,
    )
    try:
        remote_noop = ray.remote(noop)
        remote_cpu = ray.remote(cpu_work)
        remote_size = ray.remote(payload_size)
        remote_call = ray.remote(call)
        remote_of = {noop: remote_noop, payload_size: remote_size}

        def start(function, argument):  # a remote call: its ObjectRef is the handle
            return remote_of[function].remote(argument)

        ray.get([remote_noop.remote(index) for index in range(500)])
        ray.get([remote_cpu.remote(10) for _ in range(10)])
        ray.get(remote_size.remote(b"x" * 2_000_000))
        run_graph_once(remote_call, ray, 100)

        def run_map() -> dict:
            count = runner.count("map")
            results: list = []
            seconds = timed(lambda: results.extend(ray.get([remote_noop.remote(index) for index in range(count)])))
            assert results[-1] == count - 1
            return rate(count, seconds)

        runner.run("map", run_map)

        def memory() -> dict:
            scheduler_pids, worker_pids = [], []
            for pid in descendants(os.getpid()):
                with open(f"/proc/{pid}/cmdline", "rb") as file:
                    command = file.read()
                is_worker = command.startswith(b"ray::") or b"default_worker" in command
                (worker_pids if is_worker else scheduler_pids).append(pid)
            return process_memory(scheduler_pids, worker_pids, note="scheduler: gcs_server, raylet and helpers")

        runner.run("memory", memory)

        runner.run("submit", lambda: submit_loop(start, ray.get, runner.count("submit")))
        runner.run("rtt", lambda: sequential_round_trips(start, ray.get, runner.count("rtt")))
        runner.run("graph", lambda: run_graph_once(remote_call, ray, runner.count("graph")))

        def run_cpu() -> dict:
            iterations, count = spec["cpu_iterations"], spec["cpu_tasks"]
            return cpu_efficiency(spec, lambda: ray.get([remote_cpu.remote(iterations) for _ in range(count)]))

        runner.run("cpu", run_cpu)

        runner.run("large_args", lambda: large_arguments(start, ray.get, spec))
    finally:
        ray.shutdown()


def run_graph_once(remote_call, ray, nodes: int) -> dict:
    """Ray has no graph API: each node becomes a remote call whose key arguments are the ObjectRefs."""
    graph, root, expected = tree_graph(nodes)

    def submit_and_wait() -> None:
        references: dict = {}
        for key, (function, *arguments) in graph.items():  # dict order is already topological
            references[key] = remote_call.remote(
                function, *[references[argument] if isinstance(argument, str) else argument for argument in arguments]
            )
        assert ray.get(references[root]) == expected

    return {**rate(task_node_count(graph), timed(submit_and_wait)), "note": "one remote call per node, on ObjectRefs"}


if __name__ == "__main__":
    main()
