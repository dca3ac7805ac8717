"""Restart soak (issue 26, point 6): the scheduler SIGKILLed at random points of a load, N times.

    python benchmarks/restart_soak.py [--rounds 20] [--tasks 1000] [--max-outage 10] [--seed N]

It starts `scaler_scheduler` and `scaler_cluster -n 2` (two workers and a store) as subprocesses, and one
client that lives through every round. Each round puts in flight: `--tasks` tasks of 10 ms that use a
`send_object` reference, a graph through `Client.get`, a nested task (a client inside a task maps a few
tasks of its own), and a task whose 8 MB result is held in the store. At a random point of that load it
SIGKILLs the scheduler, waits 0 to `--max-outage` seconds, and starts the same command on the same address.

Counted over all rounds, and printed at the end:
- futures lost (failed, or not done), duplicated (completed twice) and wrong;
- tasks run again although their result was held: each run of a task appends its value to a file (the side
  channel), and a task that ran twice counts;
- worker processes replaced: the worker agents' pids, before the first round and after the last;
- seconds from the new scheduler listening to the first future completing after it (work flowing again).
It exits with 1 if anything was lost, duplicated, wrong, run again or replaced. Every process it starts is
stopped on exit; they also exit on their own if this process dies.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from scaler import Client
from scaler.cluster.combo import free_local_address
from scaler.utility.parent_watch import environment_exiting_with_this_process

BIG_BYTES = 8 * 1024 * 1024
WAIT_SECONDS = 120.0  # an upper bound against hangs, never a measure
SCHEDULER_OPTIONS = ["--heartbeat-interval-seconds", "0.5", "--worker-timeout-seconds", "10", "--logging-level", "INFO"]


def logged(value: int, blob: bytes, log_path: str) -> int:
    """One short write per run (O_APPEND: lines never interleave), to count how often each task ran."""
    descriptor = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, f"{value}\n".encode())
    finally:
        os.close(descriptor)
    time.sleep(0.01)
    return value * 3 + len(blob)


def slow_add(*values: int) -> int:
    time.sleep(0.3)
    return sum(values)


def big(size: int) -> bytes:
    return b"y" * size


def nested(address: str, count: int) -> int:
    with Client(address=address, timeout_seconds=WAIT_SECONDS) as inner:
        return sum(inner.map(abs, [(-value,) for value in range(count)]))


@dataclasses.dataclass
class Counts:
    rounds: int = 0
    futures: int = 0
    lost: int = 0
    duplicated: int = 0
    wrong: int = 0
    ran_again: int = 0
    workers_replaced: int = 0
    outages: list[float] = dataclasses.field(default_factory=list)
    flowing_again: list[float] = dataclasses.field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.wrong or self.ran_again or self.workers_replaced)

    def summary(self) -> str:
        flowing = sorted(self.flowing_again)
        median = flowing[len(flowing) // 2] if flowing else float("nan")
        return (
            f"{self.rounds} restarts, {self.futures} futures: lost {self.lost}, duplicated {self.duplicated}, "
            f"wrong {self.wrong}, tasks run again although their result was held {self.ran_again}, worker "
            f"processes replaced {self.workers_replaced}; outages {min(self.outages, default=0):.1f}-"
            f"{max(self.outages, default=0):.1f}s; work flowing again after the new scheduler listened: median "
            f"{median:.2f}s, max {max(flowing, default=float('nan')):.2f}s"
        )


class Completions:
    """When each future completed, and how often: a done-callback runs once per completion."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: collections.Counter[int] = collections.Counter()
        self.times: list[float] = []

    def watch(self, key: int, future: concurrent.futures.Future) -> None:
        future.add_done_callback(lambda _: self._done(key))

    def _done(self, key: int) -> None:
        with self.lock:
            self.counts[key] += 1
            self.times.append(time.monotonic())


class Cluster:
    """The scheduler (killed and started again) and the workers (never), each logging to a file."""

    def __init__(self, log_dir: str, address: str) -> None:
        self.log_dir, self.address = log_dir, address
        self._environment = environment_exiting_with_this_process()
        self._started: list[subprocess.Popen] = []
        self.scheduler = self._start_scheduler("scheduler-0")
        self.workers = self._start("workers", [
            "scaler.cli.cluster", "-n", "2", "--heartbeat-interval", "0.5", "--death-timeout-seconds", "120",
            "--logging-level", "INFO", address,
        ])
        deadline = time.monotonic() + WAIT_SECONDS
        while len(self.agents()) < 2 or "all 2 workers registered" not in self._log("workers"):
            if time.monotonic() > deadline:
                raise RuntimeError("the workers did not register")
            time.sleep(0.1)

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        with open(os.path.join(self.log_dir, f"{name}.log"), "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", *args], env=self._environment, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        self._started.append(process)
        return process

    def _log(self, name: str) -> str:
        with open(os.path.join(self.log_dir, f"{name}.log"), encoding="utf-8", errors="replace") as log:
            return log.read()

    def _start_scheduler(self, name: str) -> subprocess.Popen:
        process = self._start(name, ["scaler.cli.scheduler", *SCHEDULER_OPTIONS, self.address])
        deadline = time.monotonic() + WAIT_SECONDS
        while f"listening on {self.address}" not in self._log(name):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start:\n{self._log(name)}")
            time.sleep(0.01)
        return process

    def restart(self, round_number: int, outage: float) -> float:
        """SIGKILL the scheduler, wait `outage` seconds, start it again; when it listens (monotonic)."""
        self.scheduler.send_signal(signal.SIGKILL)
        self.scheduler.wait(timeout=WAIT_SECONDS)
        time.sleep(outage)
        self.scheduler = self._start_scheduler(f"scheduler-{round_number + 1}")
        return time.monotonic()

    def agents(self) -> set[int]:
        try:
            children = psutil.Process(self.workers.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return set()
        return {child.pid for child in children if "scaler.worker.agent" in " ".join(child.cmdline())}

    def stop(self) -> None:
        for process in reversed(self._started):
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        for process in reversed(self._started):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def one_round(
    client: Client, cluster: Cluster, round_number: int, tasks: int, max_outage: float, rng: random.Random,
    log_path: str, counts: Counts,
) -> None:
    completions = Completions()
    base = round_number * 1_000_000
    blob = client.send_object(b"x" * (1000 + round_number))
    futures = [client.submit(logged, base + index, blob, log_path) for index in range(tasks)]
    expected = [(base + index) * 3 + 1000 + round_number for index in range(tasks)]
    for index, future in enumerate(futures):
        completions.watch(index, future)
    futures.append(client.submit(big, BIG_BYTES))
    completions.watch(tasks, futures[-1])
    futures.append(client.submit(nested, cluster.address, 20))
    completions.watch(tasks + 1, futures[-1])
    graph = {"a": (slow_add, 1, round_number), "b": (slow_add, "a", 10), "c": (slow_add, "a", "b")}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        graph_result = pool.submit(client.get, graph, ["c", "b"])
        # A random point of the load: anywhere from at once to most of the way through it.
        time.sleep(rng.uniform(0.0, tasks * 0.01 / 2 * 0.8))
        outage = rng.uniform(0.0, max_outage)
        listening = cluster.restart(round_number, outage)
        counts.outages.append(outage)
        values = []
        for future in futures:
            try:
                values.append(future.result(timeout=WAIT_SECONDS))
            except Exception as error:  # noqa: BLE001 - any failure is a lost future, counted and shown
                print(f"round {round_number}: a future failed: {error!r}", flush=True)
                values.append(None)
                counts.lost += 1
        try:
            graph_values = graph_result.result(timeout=WAIT_SECONDS)
        except Exception as error:  # noqa: BLE001
            print(f"round {round_number}: the graph failed: {error!r}", flush=True)
            graph_values = None
            counts.lost += 1
    counts.wrong += sum(value != want for value, want in zip(values, expected) if value is not None)
    counts.wrong += values[tasks] is not None and values[tasks] != b"y" * BIG_BYTES
    counts.wrong += values[tasks + 1] is not None and values[tasks + 1] != sum(range(20))
    counts.wrong += graph_values is not None and graph_values != {"b": 1 + round_number + 10,
                                                                  "c": 2 * (1 + round_number) + 10}
    time.sleep(0.2)  # a second completion, if any, would come right after the first
    with completions.lock:
        counts.duplicated += sum(count - 1 for count in completions.counts.values() if count > 1)
        after = [moment - listening for moment in completions.times if moment >= listening]
    counts.futures += len(futures) + 1
    counts.rounds += 1
    if after:
        counts.flowing_again.append(min(after))


def run(rounds: int, tasks: int, max_outage: float, seed: int, log_dir: str) -> Counts:
    rng = random.Random(seed)
    counts = Counts()
    log_path = os.path.join(log_dir, "runs.log")
    cluster = Cluster(log_dir, free_local_address())
    try:
        agents = cluster.agents()
        with Client(address=cluster.address, timeout_seconds=WAIT_SECONDS, heartbeat_interval_seconds=0.5) as client:
            for round_number in range(rounds):
                one_round(client, cluster, round_number, tasks, max_outage, rng, log_path, counts)
                print(f"round {round_number + 1}/{rounds}: outage {counts.outages[-1]:.1f}s, flowing again "
                      f"{counts.flowing_again[-1] if counts.flowing_again else float('nan'):.2f}s after listening",
                      flush=True)
        counts.workers_replaced = len(agents - cluster.agents())
    finally:
        cluster.stop()
    with open(log_path) as log:
        runs = collections.Counter(line.strip() for line in log)
    counts.ran_again = sum(1 for count in runs.values() if count > 1)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--max-outage", type=float, default=10.0, help="seconds, at most, before the restart")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--log-dir", default=None, help="keep the processes' logs here (default: a temp dir)")
    options = parser.parse_args()
    seed = options.seed if options.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}", flush=True)
    with tempfile.TemporaryDirectory(prefix="restart-soak-") as temporary:
        log_dir = options.log_dir or temporary
        os.makedirs(log_dir, exist_ok=True)
        counts = run(options.rounds, options.tasks, options.max_outage, seed, log_dir)
    print(counts.summary(), flush=True)
    sys.exit(0 if counts.clean else 1)


if __name__ == "__main__":
    main()
