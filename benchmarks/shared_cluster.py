"""A shared cluster: how long a second client waits while a first one floods the workers (issue 25).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/shared_cluster.py [--tasks 4000] [--task-ms 10] [--workers 2]
                                                                  [--flooders 1]

Starts a scheduler and `--workers` workers (real processes, SchedulerClusterCombo) and two clients. Client A
floods the cluster with `--tasks` tasks of `--task-ms` ms each (time.sleep, so that a loaded machine shifts
the figures less; 0: no-op tasks, which workers hold 1,000 deep) and keeps that many queued while the others
measure: a feeder submits one more for each that finishes. With `--flooders N`, N clients flood so (A is the
first). Meanwhile:

- client B submits single no-op tasks one after the other (`--samples`): how long each waits for its
  result (median, p90, max);
- client B runs a 20-task `map` of no-op tasks: how long it takes;
- client A submits one no-op task with `priority=10`: how long it waits (skipped when `Client.submit`
  takes no `priority=`);
- the monitor feed gives how many tasks each worker holds (sampled once a second): the deepest queue.

Then the feeder stops and A's flood runs out: its rate against the ideal (tasks x duration / workers) says
what the depth of the queues costs a flood. `--worker-queue-seconds` is passed to the scheduler (0 gives
every worker --per-worker-queue-size tasks, as before issue 25). Measuring stops after `--budget` seconds
(a scheduler serving clients first-come, first-served makes each of B's tasks wait for A's whole backlog).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import statistics
import tempfile
import threading
import time
from typing import Any

from scaler import Client, SchedulerClusterCombo
from scaler.ui.feed import MonitorSubscriber


def noop(value: object) -> object:
    return value


def sleep_ms(milliseconds: float) -> None:
    time.sleep(milliseconds / 1000)


class Flood:
    """Client A's backlog, kept at `count` unfinished tasks by a feeder thread until `stop`."""

    def __init__(self, client: Client, count: int, task_ms: float) -> None:
        self._client = client
        self._task_ms = task_ms
        self._function = sleep_ms if task_ms > 0 else noop
        self._stopping = threading.Event()
        self.futures = [client.submit(self._function, task_ms) for _ in range(count)]
        self.submitted = count
        self._feeder = threading.Thread(target=self._feed, name="flood-feeder", daemon=True)
        self._feeder.start()

    def _feed(self) -> None:
        while not self._stopping.wait(0.05):
            finished = sum(1 for future in self.futures if future.done())
            if finished:
                self.futures = [future for future in self.futures if not future.done()]
                self.futures.extend(self._client.submit(self._function, self._task_ms) for _ in range(finished))
                self.submitted += finished

    def stop(self) -> None:
        self._stopping.set()
        self._feeder.join(timeout=30)


class DepthWatch:
    """The most tasks any worker held, from the monitor feed, in a thread until `stop`."""

    def __init__(self, monitor_address: str) -> None:
        self.deepest = 0
        self.snapshots: list[int] = []
        self._stopping = threading.Event()
        self._subscriber = MonitorSubscriber(monitor_address)
        self._thread = threading.Thread(target=self._watch, name="depth-watch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stopping.is_set():
            snapshot = self._subscriber.receive(0.5)
            if snapshot is not None and snapshot.workers:
                deepest = max(worker.assigned for worker in snapshot.workers)
                self.snapshots.append(deepest)
                self.deepest = max(self.deepest, deepest)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=10)
        self._subscriber.close()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def has_priority() -> bool:
    return "priority" in inspect.signature(Client.submit).parameters


def measure(arguments: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    if arguments.worker_queue_seconds is not None:
        settings["worker_queue_seconds"] = arguments.worker_queue_seconds
    figures: dict[str, Any] = {"load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="shared-cluster-") as directory:
        monitor_address = f"ipc://{os.path.join(directory, 'monitor')}"
        with SchedulerClusterCombo(
            n_workers=arguments.workers, logging_level="WARNING", monitor_address=monitor_address, **settings
        ) as cluster, contextlib.ExitStack() as stack:
            flooders = [
                stack.enter_context(Client(address=cluster.get_address())) for _ in range(max(1, arguments.flooders))
            ]
            client_a, client_b = flooders[0], stack.enter_context(Client(address=cluster.get_address()))
            for client in (*flooders, client_b):  # functions shipped, processors started
                client.map(noop, [(index,) for index in range(20 * arguments.workers)])
            client_a.map(sleep_ms, [(arguments.task_ms,)] * (2 * arguments.workers))
            watch = DepthWatch(monitor_address)
            started = time.monotonic()
            floods = [Flood(client, arguments.tasks, arguments.task_ms) for client in flooders]
            try:
                time.sleep(0.5)  # the flood reaches the workers
                deadline = started + arguments.budget
                waits: list[float] = []
                for index in range(arguments.samples):
                    if time.monotonic() > deadline:
                        break
                    begin = time.monotonic()
                    client_b.submit(noop, index).result(timeout=arguments.budget + 60)
                    waits.append(time.monotonic() - begin)
                    time.sleep(0.05)
                figures["single_waits"] = waits
                if time.monotonic() < deadline:
                    begin = time.monotonic()
                    client_b.map(noop, [(index,) for index in range(20)])
                    figures["map_20_seconds"] = time.monotonic() - begin
                if has_priority() and time.monotonic() < deadline:
                    begin = time.monotonic()
                    client_a.submit(noop, 1, priority=10).result(timeout=arguments.budget + 60)  # type: ignore[call-arg]
                    figures["priority_seconds"] = time.monotonic() - begin
            finally:
                for flood in floods:
                    flood.stop()
            backlog = [future for flood in floods for future in flood.futures]
            drain_started = time.monotonic()
            for future in backlog:
                future.result(timeout=arguments.budget + 600)
            drained = time.monotonic() - drain_started
            watch.stop()
            figures["flood_tasks"] = sum(flood.submitted for flood in floods)
            figures["drain_tasks"] = len(backlog)
            figures["drain_efficiency"] = (len(backlog) * arguments.task_ms / 1000 / arguments.workers) / drained
            figures["deepest_queue"] = watch.deepest
            figures["median_deepest_queue"] = statistics.median(watch.snapshots) if watch.snapshots else 0
    figures["load_after"] = os.getloadavg()[0]
    return figures


def print_table(arguments: argparse.Namespace, figures: dict[str, Any]) -> None:
    waits = figures.get("single_waits", [])
    setting = "default" if arguments.worker_queue_seconds is None else f"{arguments.worker_queue_seconds:g}"
    flooders = f"{arguments.flooders} clients, each " if arguments.flooders > 1 else ""
    rows = [("client A's flood", f"{flooders}{arguments.tasks} tasks of {arguments.task_ms:g} ms kept queued, "
             f"{arguments.workers} workers, --worker-queue-seconds {setting}")]
    if waits:
        rows.append(("B: single no-op task, wait (s)", f"median {statistics.median(waits):.3f}, "
                     f"p90 {percentile(waits, 0.9):.3f}, max {max(waits):.3f} [{len(waits)} samples]"))
    else:
        rows.append(("B: single no-op task, wait (s)", "not measured (budget spent)"))
    map_seconds = figures.get("map_20_seconds")
    rows.append(("B: map of 20 no-op tasks (s)", f"{map_seconds:.3f}" if map_seconds is not None else "not measured"))
    if not has_priority():
        rows.append(("A: priority=10 no-op task (s)", "skipped: Client.submit takes no priority="))
    else:
        priority = figures.get("priority_seconds")
        rows.append(("A: priority=10 no-op task (s)", f"{priority:.3f}" if priority is not None else "not measured"))
    rows.append(("deepest worker queue (monitor, 1/s)", f"{figures['deepest_queue']} tasks "
                 f"(median of the snapshots {figures['median_deepest_queue']:g})"))
    rows.append(("A's backlog run out, against ideal", f"{figures['drain_efficiency']:.2f} "
                 f"[{figures['drain_tasks']} tasks]"))
    rows.append(("load average, before / after", f"{figures['load_before']:.2f} / {figures['load_after']:.2f}"))
    width = max(len(name) for name, _ in rows)
    print(f"| {'measure':<{width}} | figure |")
    print(f"| {'-' * width} | --- |")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=4000, help="client A's backlog, kept queued (default 4000)")
    parser.add_argument("--task-ms", type=float, default=10.0, help="duration of A's tasks in ms (default 10)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--flooders", type=int, default=1, help="clients flooding so, A first (default 1)")
    parser.add_argument("--samples", type=int, default=10, help="B's single tasks, one after the other (default 10)")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds of measuring at most (default 120)")
    parser.add_argument(
        "--worker-queue-seconds", type=float, default=None,
        help="the scheduler's --worker-queue-seconds (default: its own default; 0: full queues, as before)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON, not a table")
    arguments = parser.parse_args()
    figures = measure(arguments)
    if arguments.json:
        print(json.dumps(figures))
    else:
        print_table(arguments, figures)


if __name__ == "__main__":
    main()
