"""Where one round trip `client.submit(f, x).result()` spends its time: CPU per process and thread, per call.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/round_trip_hops.py [--count 2000] [--runs 3]

Starts a SchedulerClusterCombo with one worker (one processor), warms it up, then runs `--count`
sequential round trips of a no-op task, `--runs` times, and prints for each hop the CPU time it spent per
round trip (user + system, read from /proc, so other work on a shared machine does not inflate it), with
the wall-clock median of a round trip and the load average beside it. The same is measured for
`ProcessPoolExecutor(1)` as the yardstick. The median over runs is shown; a hop's CPU is what its process
(or thread) did, including zmq's I/O threads of that process, which are listed apart.

The hops of one round trip, in order: the caller (submit, then wait), the client's I/O thread, the
scheduler, the worker agent, the processor, and back through the agent, the scheduler and the client's
I/O thread.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import threading
import time
from typing import Callable

import psutil

from scaler import Client, SchedulerClusterCombo


def noop(value: object) -> object:
    return value


def _runs(process: psutil.Process, module: str) -> bool:
    return f"scaler.{module}" in process.cmdline()


def _thread_cpu(process: psutil.Process) -> dict[int, float]:
    return {thread.id: thread.user_time + thread.system_time for thread in process.threads()}


class _Hops:
    """CPU seconds of named processes and of this process's threads, between two snapshots."""

    def __init__(self, processes: dict[str, psutil.Process]) -> None:
        self._processes = processes
        self._own = psutil.Process()
        self._before: dict[str, float] = {}

    def _snapshot(self) -> dict[str, float]:
        figures: dict[str, float] = {}
        names = {thread.native_id: thread.name for thread in threading.enumerate()}
        for thread_id, seconds in _thread_cpu(self._own).items():
            label = names.get(thread_id, "zmq/other threads")
            label = "caller" if label == "MainThread" else label
            figures[f"client: {label}"] = figures.get(f"client: {label}", 0.0) + seconds
        for name, process in self._processes.items():
            threads = process.threads()
            main = max(threads, key=lambda thread: thread.user_time + thread.system_time)
            total = sum(thread.user_time + thread.system_time for thread in threads)
            figures[name] = main.user_time + main.system_time
            figures[f"{name}: zmq/other threads"] = total - figures[name]
        return figures

    def start(self) -> None:
        self._before = self._snapshot()

    def stop(self) -> dict[str, float]:
        after = self._snapshot()
        return {name: after[name] - self._before.get(name, 0.0) for name in after}


def _measure(call: Callable[[int], object], hops: _Hops, count: int) -> tuple[float, dict[str, float]]:
    samples = []
    hops.start()
    for index in range(count):
        started = time.perf_counter()
        call(index)
        samples.append(time.perf_counter() - started)
    cpu = hops.stop()
    return statistics.median(samples), {name: seconds / count for name, seconds in cpu.items()}


def _report(title: str, runs: list[tuple[float, dict[str, float]]]) -> float:
    median_wall = statistics.median(wall for wall, _ in runs)
    names = sorted({name for _, cpu in runs for name in cpu})
    print(f"\n{title}: round trip median {median_wall * 1e6:.0f} us (median of {len(runs)} runs)")
    print(f"  {'hop':<44} {'CPU us per round trip':>22}")
    total = 0.0
    for name in names:
        value = statistics.median(cpu.get(name, 0.0) for _, cpu in runs)
        if value * 1e6 < 0.5:
            continue
        total += value
        print(f"  {name:<44} {value * 1e6:>22.1f}")
    print(f"  {'all':<44} {total * 1e6:>22.1f}")
    return median_wall


def _scaler(count: int, runs: int) -> float:
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as cluster:
        with Client(address=cluster.get_address()) as client:
            for index in range(200):
                client.submit(noop, index).result()
            agent, = (child for child in psutil.Process(cluster.cluster_pid).children() if _runs(child, "worker.agent"))
            processes = {"scheduler": psutil.Process(cluster.scheduler_pid), "worker agent": agent}
            for number, processor in enumerate(agent.children()):
                processes[f"processor {number}"] = processor
            hops = _Hops(processes)
            results = [_measure(lambda index: client.submit(noop, index).result(), hops, count) for _ in range(runs)]
    return _report("scaler (1 worker)", results)


def _process_pool(count: int, runs: int) -> float:
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        for index in range(200):
            pool.submit(noop, index).result()
        processes = {f"pool process {number}": psutil.Process(pid) for number, pid in enumerate(pool._processes)}
        hops = _Hops(processes)
        results = [_measure(lambda index: pool.submit(noop, index).result(), hops, count) for _ in range(runs)]
    return _report("ProcessPoolExecutor(1)", results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=2000, help="round trips per run (default 2000)")
    parser.add_argument("--runs", type=int, default=3, help="runs, the median of which is shown (default 3)")
    parser.add_argument("--no-pool", action="store_true", help="skip the ProcessPoolExecutor yardstick")
    arguments = parser.parse_args()
    print(f"load average before: {' '.join(f'{value:.2f}' for value in os.getloadavg())} on {os.cpu_count()} cores")
    scaler = _scaler(arguments.count, arguments.runs)
    if not arguments.no_pool:
        pool = _process_pool(arguments.count, arguments.runs)
        print(f"\nscaler / ProcessPoolExecutor: {scaler / pool:.2f}x")
    print(f"load average after: {' '.join(f'{value:.2f}' for value in os.getloadavg())}")


if __name__ == "__main__":
    main()
