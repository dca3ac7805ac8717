"""Where one round trip `client.submit(f, x).result()` spends its time: CPU and wake-ups per hop, per call.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/round_trip_hops.py [--count 2000] [--runs 3] [--no-pool]

Starts a SchedulerClusterCombo with one worker (one processor), warms it up, then runs `--count`
sequential round trips of a no-op task, `--runs` times, and prints for each hop, per round trip, the CPU
time its threads spent and how often they were put on a CPU (wake-ups), both from Linux's per-thread
schedstat, so that other work on a shared machine inflates them far less than the wall clock. Beside them
the wall-clock median of a round trip and the load average. The same for `ProcessPoolExecutor(1)` as the
yardstick. Figures are medians over the runs. Linux only.

The hops of one round trip, in order: the caller (submit, then wait), the client's I/O thread, the
scheduler, the worker agent, the processor, and back through the agent, the scheduler and the client's
I/O thread. Each process's zmq I/O thread is listed apart: every message between two processes wakes the
sender's and the receiver's, besides the receiving thread itself.

With --trace, the wall time of each hop instead (SCALER_HOP_TRACE, scaler/utility/hop_trace.py): each
process logs when it received and sent each message, and a hop is the time between two of those, so a hop
from one process to the next is the link's (zmq: two I/O threads and the wake-up of the receiver; the
agent's socketpair with its processor: the wake-up only) and a hop within a process is its own work.
Each log line costs a write, a few microseconds per hop.
"""

from __future__ import annotations

import argparse
import bisect
import concurrent.futures
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import psutil

# The trace is switched on at import (zmq_util), in this process as in the cluster's, which inherit it.
_TRACE_DIRECTORY = tempfile.mkdtemp(prefix="round-trip-trace-") if "--trace" in sys.argv else None
if _TRACE_DIRECTORY:
    os.environ["SCALER_HOP_TRACE"] = _TRACE_DIRECTORY

from scaler import Client, SchedulerClusterCombo  # noqa: E402


def noop(value: object) -> object:
    return value


def _runs(process: psutil.Process, module: str) -> bool:
    return f"scaler.{module}" in process.cmdline()


def _thread_figures(pid: int) -> dict[int, tuple[str, int, int]]:
    """Each thread's name, CPU nanoseconds and the times it was put on a CPU (Linux's schedstat: exact, not ticks)."""
    figures = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as comm, open(f"/proc/{pid}/task/{tid}/schedstat") as stat:
                name = comm.read().strip()
                cpu_ns, _, slices = (int(field) for field in stat.read().split())
        except OSError:
            continue  # the thread ended meanwhile
        figures[int(tid)] = (name, cpu_ns, slices)
    return figures


class _Hops:
    """CPU time and wake-ups (times put on a CPU) of this process's threads and of named processes' threads,
    between two snapshots, by hop: a process's main thread, and its other threads (zmq's I/O thread) apart."""

    def __init__(self, processes: dict[str, int]) -> None:
        self._processes = processes
        self._before: dict[str, tuple[int, int]] = {}

    def _snapshot(self) -> dict[str, tuple[int, int]]:
        figures: dict[str, tuple[int, int]] = {}

        def add(label: str, cpu_ns: int, slices: int) -> None:
            old_cpu, old_slices = figures.get(label, (0, 0))
            figures[label] = (old_cpu + cpu_ns, old_slices + slices)

        python_names = {thread.native_id: thread.name for thread in threading.enumerate()}
        for tid, (name, cpu_ns, slices) in _thread_figures(os.getpid()).items():
            label = python_names.get(tid, f"{name} (zmq)" if name.startswith("ZMQ") else "other threads")
            add(f"client: {'caller' if label == 'MainThread' else label}", cpu_ns, slices)
        for process_name, pid in self._processes.items():
            for tid, (_name, cpu_ns, slices) in _thread_figures(pid).items():
                add(f"{process_name}: {'main' if tid == pid else 'zmq and other threads'}", cpu_ns, slices)
        return figures

    def start(self) -> None:
        self._before = self._snapshot()

    def stop(self) -> dict[str, tuple[int, int]]:
        after = self._snapshot()
        return {
            label: (cpu_ns - self._before.get(label, (0, 0))[0], slices - self._before.get(label, (0, 0))[1])
            for label, (cpu_ns, slices) in after.items()
        }


Figures = dict[str, tuple[float, float]]  # per round trip, by hop: CPU microseconds, wake-ups


def _measure(call: Callable[[int], object], hops: _Hops, count: int) -> tuple[float, Figures]:
    samples = []
    hops.start()
    for index in range(count):
        started = time.perf_counter()
        call(index)
        samples.append(time.perf_counter() - started)
    figures = hops.stop()
    per_call = {label: (cpu_ns / 1000 / count, slices / count) for label, (cpu_ns, slices) in figures.items()}
    return statistics.median(samples), per_call


def _report(title: str, runs: list[tuple[float, Figures]]) -> float:
    median_wall = statistics.median(wall for wall, _ in runs)
    labels = sorted({label for _, figures in runs for label in figures})
    print(f"\n{title}: round trip median {median_wall * 1e6:.0f} us (median of {len(runs)} runs)")
    print(f"  {'hop':<40} {'CPU us':>8} {'wake-ups':>9}   (per round trip)")
    total_cpu = total_wakeups = zmq_cpu = zmq_wakeups = 0.0
    for label in labels:
        cpu = statistics.median(figures.get(label, (0.0, 0.0))[0] for _, figures in runs)
        wakeups = statistics.median(figures.get(label, (0.0, 0.0))[1] for _, figures in runs)
        if cpu < 0.5 and wakeups < 0.05:
            continue
        total_cpu += cpu
        total_wakeups += wakeups
        if "zmq" in label:
            zmq_cpu += cpu
            zmq_wakeups += wakeups
        print(f"  {label:<40} {cpu:>8.1f} {wakeups:>9.2f}")
    print(f"  {'all':<40} {total_cpu:>8.1f} {total_wakeups:>9.2f}")
    if zmq_wakeups:
        # What a transport without I/O threads would not pay: each zmq message wakes the sender's I/O thread and
        # the receiver's besides the receiver itself (transport_ping_pong.py measures one link alone).
        print(f"  {'of which zmq I/O (and other) threads':<40} {zmq_cpu:>8.1f} {zmq_wakeups:>9.2f}"
              f"   ({zmq_wakeups / total_wakeups:.0%} of the wake-ups)")
    return median_wall


def _scaler(count: int, runs: int) -> float:
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as cluster:
        with Client(address=cluster.get_address()) as client:
            for index in range(200):
                client.submit(noop, index).result()
            agent, = (child for child in psutil.Process(cluster.cluster_pid).children() if _runs(child, "worker.agent"))
            processes = {"scheduler": cluster.scheduler_pid, "worker agent": agent.pid}
            for number, processor in enumerate(agent.children()):
                processes[f"processor {number}"] = processor.pid
            if _TRACE_DIRECTORY:
                return _trace(client, {pid: name for name, pid in processes.items()}, count)
            hops = _Hops(processes)
            results = [_measure(lambda index: client.submit(noop, index).result(), hops, count) for _ in range(runs)]
    return _report("scaler (1 worker)", results)


# The messages of one round trip in order, as (process, sent or received), and the hops between them.
_TRACED_PATH = [
    ("client", "S"), ("scheduler", "R"), ("scheduler", "S"), ("worker agent", "R"), ("worker agent", "S"),
    ("processor 0", "R"), ("processor 0", "S"), ("worker agent", "R"), ("worker agent", "S"), ("scheduler", "R"),
    ("scheduler", "S"), ("client", "R"),
]


def _trace(client: Client, names: dict[int, str], count: int) -> float:
    """Wall time per hop of `count` round trips, from the send and receive times each process logged."""
    assert _TRACE_DIRECTORY is not None
    names[os.getpid()] = "client"
    calls = []
    for index in range(count):
        started = time.monotonic_ns()
        client.submit(noop, index).result()
        calls.append((started, time.monotonic_ns()))
    events = []
    for path in Path(_TRACE_DIRECTORY).glob("*.txt"):
        name = names.get(int(path.stem))
        for line in path.read_text().splitlines():
            stamp, kind = line.split()
            events.append((int(stamp), name, kind))
    shutil.rmtree(_TRACE_DIRECTORY, ignore_errors=True)  # the cluster still logs its heartbeats: as good as done
    events.sort()
    stamps = [stamp for stamp, _, _ in events]
    labels = ["caller: submit until its message leaves"]
    for (before, _), (after, _) in zip(_TRACED_PATH, _TRACED_PATH[1:]):
        link = "socketpair" if "processor" in before + after else "zmq"  # utility/frame_stream.py
        labels.append(f"{before}: received until sent" if before == after else f"{before} -> {after} ({link})")
    labels += ["client: result received until result() returns"]
    hops: list[list[float]] = [[] for _ in labels]
    for started, ended in calls:
        window = events[bisect.bisect_left(stamps, started):bisect.bisect_right(stamps, ended)]
        if [(name, kind) for _, name, kind in window] != _TRACED_PATH:
            continue  # a heartbeat or another message in between
        points = [started, *(stamp for stamp, _, _ in window), ended]
        for hop, (before, after) in zip(hops, zip(points, points[1:])):
            hop.append((after - before) / 1000)
    median_wall = statistics.median((ended - started) / 1000 for started, ended in calls)
    print(f"\nscaler (1 worker), traced: round trip median {median_wall:.0f} us; "
          f"{len(hops[0])} of {count} round trips had only their own messages")
    print(f"  {'hop (wall, median us)':<64} {'us':>8}")
    for label, values in zip(labels, hops):
        if values:
            print(f"  {label:<64} {statistics.median(values):>8.1f}")
    return median_wall / 1e6


def _process_pool(count: int, runs: int) -> float:
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        for index in range(200):
            pool.submit(noop, index).result()
        processes = {f"pool process {number}": pid for number, pid in enumerate(pool._processes)}
        hops = _Hops(processes)
        results = [_measure(lambda index: pool.submit(noop, index).result(), hops, count) for _ in range(runs)]
    return _report("ProcessPoolExecutor(1)", results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=2000, help="round trips per run (default 2000)")
    parser.add_argument("--runs", type=int, default=3, help="runs, the median of which is shown (default 3)")
    parser.add_argument("--no-pool", action="store_true", help="skip the ProcessPoolExecutor yardstick")
    parser.add_argument("--trace", action="store_true", help="wall time per hop instead of CPU (see above)")
    arguments = parser.parse_args()
    print(f"load average before: {' '.join(f'{value:.2f}' for value in os.getloadavg())} on {os.cpu_count()} cores")
    scaler = _scaler(arguments.count, arguments.runs)
    if not arguments.no_pool:
        pool = _process_pool(arguments.count, arguments.runs)
        print(f"\nscaler / ProcessPoolExecutor: {scaler / pool:.2f}x")
    print(f"load average after: {' '.join(f'{value:.2f}' for value in os.getloadavg())}")


if __name__ == "__main__":
    main()
