"""concurrent.futures.ProcessPoolExecutor: map with chunksize=1, so each call is one round trip to a process."""

from __future__ import annotations

import concurrent.futures
import os

from workloads import (
    Runner,
    cpu_efficiency,
    cpu_work,
    descendants,
    distinct_payloads,
    noop,
    payload_size,
    process_memory,
    rate,
    round_trips,
    timed,
    transfer,
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

        def run_submit() -> dict:
            count = runner.count("submit")

            def submit_all() -> None:
                futures = [pool.submit(noop, index) for index in range(count)]
                assert [future.result() for future in futures][-1] == count - 1

            return rate(count, timed(submit_all))

        runner.run("submit", run_submit)
        runner.run("rtt", lambda: round_trips(lambda index: pool.submit(noop, index).result(), runner.count("rtt")))

        def run_cpu() -> dict:
            arguments = [spec["cpu_iterations"]] * spec["cpu_tasks"]
            return cpu_efficiency(spec, lambda: list(pool.map(cpu_work, arguments, chunksize=1)))

        runner.run("cpu", run_cpu)

        def run_large() -> dict:
            payloads = distinct_payloads(spec["large_count"], spec["large_bytes"])

            def send_all() -> None:
                futures = [pool.submit(payload_size, payload) for payload in payloads]
                assert all(future.result() == spec["large_bytes"] for future in futures)

            return transfer(len(payloads), spec["large_bytes"], timed(send_all))

        runner.run("large_args", run_large)


if __name__ == "__main__":
    main()
