"""concurrent.futures.ProcessPoolExecutor: map with chunksize=1, so each call is one round trip to a process."""

from __future__ import annotations

import concurrent.futures
import os

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
    timed,
)


def main() -> None:
    runner = Runner("ProcessPoolExecutor")
    spec = runner.spec
    with concurrent.futures.ProcessPoolExecutor(runner.workers) as pool:
        list(pool.map(noop, range(500), chunksize=1))
        list(pool.map(cpu_work, [10] * 10))
        pool.submit(payload_size, b"x" * 2_000_000).result()

        def run_map() -> dict:
            count = runner.count("map")
            results: list = []
            seconds = timed(lambda: results.extend(pool.map(noop, range(count), chunksize=1)))
            assert results[-1] == count - 1
            return rate(count, seconds)

        runner.run("map", run_map)
        runner.run("memory", lambda: process_memory([], descendants(os.getpid()), note="no scheduler process"))

        runner.run("submit", lambda: submit_loop(pool.submit, result_of, runner.count("submit")))
        runner.run("rtt", lambda: sequential_round_trips(pool.submit, result_of, runner.count("rtt")))

        def run_cpu() -> dict:
            arguments = [spec["cpu_iterations"]] * spec["cpu_tasks"]
            return cpu_efficiency(spec, lambda: list(pool.map(cpu_work, arguments, chunksize=1)))

        runner.run("cpu", run_cpu)

        runner.run("large_args", lambda: large_arguments(pool.submit, result_of, spec))


if __name__ == "__main__":
    main()
