"""Large payloads and profiling on 2 local workers.

    python benchmarks/objects_and_profiling.py [--megabytes 200] [--tasks 20] [--repeats 3]

Prints, as medians of the repeats: a large argument used by many tasks, sent once with send_object
versus passed to every submit; the MB/s of a large result coming back; and what profiling=True adds
to a no-op task.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

from scaler import Client, SchedulerClusterCombo


def total_length(payload: bytes) -> int:
    return len(payload)


def make_bytes(size: int) -> bytes:
    return b"\x01" * size


def noop(value: int) -> int:
    return value


def timed(action) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profiled-tasks", type=int, default=5000)
    args = parser.parse_args()
    size = args.megabytes * 1024 * 1024
    payload = make_bytes(size)

    figures: dict[str, list[float]] = {"object": [], "direct": [], "result": [], "plain": [], "profiled": []}
    with SchedulerClusterCombo(n_workers=2, logging_level="WARNING") as cluster, Client(
        address=cluster.get_address()
    ) as client:
        client.map(noop, [(i,) for i in range(100)])
        for _ in range(args.repeats):
            def via_object() -> None:
                reference = client.send_object(payload)
                assert client.map(total_length, [(reference,)] * args.tasks) == [size] * args.tasks

            def direct() -> None:
                futures = [client.submit(total_length, payload) for _ in range(args.tasks)]
                assert [future.result() for future in futures] == [size] * args.tasks

            figures["object"].append(timed(via_object))
            figures["direct"].append(timed(direct))
            figures["result"].append(timed(lambda: client.submit(make_bytes, size).result()))

        # Profiling on its own, after the large payloads are gone, alternating which goes first.
        def many(profiling: bool) -> None:
            futures = [client.submit(noop, i, profiling=profiling) for i in range(args.profiled_tasks)]
            for future in futures:
                future.result()

        for repeat in range(max(args.repeats, 5)):
            order = (False, True) if repeat % 2 == 0 else (True, False)
            for profiling in order:
                figures["profiled" if profiling else "plain"].append(timed(functools.partial(many, profiling)))

    median = {name: statistics.median(values) for name, values in figures.items()}
    print(f"2 workers, median of {args.repeats} runs, {args.megabytes} MB payload")
    print(f"{args.tasks} tasks using it via send_object: {median['object']:.2f} s")
    print(f"{args.tasks} tasks each passed it directly:  {median['direct']:.2f} s "
          f"({median['direct'] / median['object']:.1f}x slower)")
    print(f"a {args.megabytes} MB result comes back at {args.megabytes / median['result']:.0f} MB/s")
    per_task_us = (median["profiled"] - median["plain"]) / args.profiled_tasks * 1e6
    print(f"profiling=True adds {per_task_us:.1f} us per no-op task "
          f"({args.profiled_tasks} tasks: {median['plain']:.3f} s plain, {median['profiled']:.3f} s profiled)")


if __name__ == "__main__":
    main()
