"""Soak: a real scheduler and workers, a steady stream of tasks, and workers killed at random.

    python benchmarks/soak.py [--minutes 10] [--workers 4] [--kill-every 4] [--seed N]

It starts `scaler_scheduler` and one `scaler_cluster -n 1` per worker slot as subprocesses, keeps tasks
in flight from one client (single submits and maps side by side), and every few seconds SIGKILLs either
a worker agent (the scheduler must notice by heartbeat timeout and reschedule its tasks) or one of its
processors (the agent must notice and hand the task back). A slot whose worker is gone gets a new one,
so capacity stays. Each task returns a value derived from its argument, so results are checked. A few
single submits (`--cancel-fraction`) are canceled right after submission, half of them with force.
With `--poison-every S`, a poisoned task that SIGKILLs whatever worker agent runs it is submitted every S
seconds: each must fail with WorkerDiedError after the scheduler's --max-task-crashes deaths (3).

At the end it prints what was submitted, completed, lost (never resolved, or failed with an error),
delivered twice, or wrong, how many workers were killed, the scheduler's RSS at start and end, and how
many tasks the scheduler still holds once every future has its outcome (from its monitor feed). It exits
with 1 if anything was lost, duplicated or wrong, if a `cancel()` answered True for a task that then
delivered its result (or False for one that ended canceled), or if the scheduler still holds tasks.
Every process it starts is stopped on exit, Ctrl-C, SIGTERM or error; the children also exit on their own
if this process is killed.
"""

from __future__ import annotations

import argparse
import collections
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import psutil

from scaler import Client
from scaler.cluster.combo import free_local_address
from scaler.errors import WorkerDiedError
from scaler.protocol import messages as m
from scaler.ui.feed import MonitorSubscriber
from scaler.utility.parent_watch import environment_exiting_with_this_process

_MULTIPLIER = 2654435761
_STOP_GRACE_SECONDS = 10.0
_PROGRESS_SECONDS = 30.0


def work(value: int) -> int:
    """A short task (0 to 15 ms) whose result depends only on its argument."""
    time.sleep((value % 16) / 1000)
    return value * _MULTIPLIER % 2**32


def kill_own_worker() -> None:
    """The poisoned task: SIGKILLs its worker agent (its processor's parent) every time it runs."""
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(60)


def expected(value: int) -> int:
    return value * _MULTIPLIER % 2**32


class Processes:
    """Every process the soak starts, each in a session of its own so a group kill reaches its children."""

    def __init__(self, log_dir: str) -> None:
        self._log_dir = log_dir
        self._environment = environment_exiting_with_this_process()
        self._started: list[subprocess.Popen] = []
        self._lock = threading.Lock()

    def start(self, name: str, module: str, args: list[str]) -> subprocess.Popen:
        with open(os.path.join(self._log_dir, f"{name}.log"), "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", module, *args], env=self._environment, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        with self._lock:
            self._started.append(process)
        return process

    def stop_all(self) -> None:
        """SIGTERM each process group (workers first), then SIGKILL what is left of it after a grace period."""
        with self._lock:
            processes, self._started = self._started, []
        for process in reversed(processes):
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_SECONDS
        for process in reversed(processes):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # Agents and processors of a slot whose scaler_cluster already exited live on in its group.
            _signal_group(process, signal.SIGKILL)
            process.wait()


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)  # start_new_session: the group id is the pid we started
    except (ProcessLookupError, PermissionError):
        pass


class Ledger:
    """What the client saw, by task id: deliveries straight off the wire, and how each task ended."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.submitted = 0
        self.completed = 0
        self.wrong: list[tuple[int, Any, int]] = []
        self.failed: list[tuple[int, str]] = []
        self.duplicates: list[int] = []
        self.callbacks_by_task: collections.Counter[int] = collections.Counter()
        self.wire_deliveries: collections.Counter[int] = collections.Counter()
        self.map_hangs = 0
        self.canceled = 0
        # (future, force, what cancel() returned) for every cancel the soak asked for
        self.cancels: list[tuple[Any, bool, bool]] = []

    def watch_wire(self, client: Client) -> None:
        """Count every result and failure the scheduler sends for a task, before the client drops repeats.

        The client keeps a task pending until its first answer and ignores later ones, so a duplicate sent by
        the scheduler would otherwise go unseen.
        """
        connection = client._connection
        original = connection._on_results

        def counting(results: m.TaskResults) -> None:
            with self.lock:
                for task_id in results.succeeded_ids:
                    self._delivered(task_id)
                for failure in results.failures:
                    if failure.kind != m.FailureKind.NOT_FOUND:
                        self._delivered(failure.task_id)
            original(results)

        connection._on_results = counting  # type: ignore[method-assign]

    def _delivered(self, task_id: int) -> None:
        self.wire_deliveries[task_id] += 1
        if self.wire_deliveries[task_id] == 2:
            self.duplicates.append(task_id)


class Stream:
    """Keeps `in_flight` single submits outstanding, and a thread running maps one after another.

    A fraction of the single submits is canceled soon after it is submitted (half of those with force), by a
    thread of its own since `cancel()` waits for the scheduler's answer.
    """

    def __init__(
        self, client: Client, ledger: Ledger, in_flight: int, map_size: int, cancel_fraction: float, seed: int
    ) -> None:
        self._client = client
        self._ledger = ledger
        self._in_flight = in_flight
        self._map_size = map_size
        self._cancel_fraction = cancel_fraction
        self._submit_rng = random.Random(seed)
        self._cancel_rng = random.Random(seed + 1)
        self._to_cancel: queue.Queue[Any] = queue.Queue()
        self._cancel_requested: set[int] = set()
        self._cancel_thread = threading.Thread(target=self._run_cancels, name="soak-cancels", daemon=True)
        self._next_value = 0
        self._value_lock = threading.Lock()
        self._outstanding: dict[int, Any] = {}
        self._outstanding_lock = threading.Lock()
        self._stop = threading.Event()
        self._map_thread = threading.Thread(target=self._run_maps, name="soak-maps", daemon=True)
        self.maps_done = 0
        self.poisoned: list[Any] = []

    def _values(self, count: int) -> range:
        with self._value_lock:
            start = self._next_value
            self._next_value += count
        return range(start, start + count)

    def start(self) -> None:
        self._map_thread.start()
        self._cancel_thread.start()

    def top_up(self) -> None:
        with self._outstanding_lock:
            missing = self._in_flight - len(self._outstanding)
        if missing <= 0 or self._stop.is_set():
            return
        for value in self._values(missing):
            future = self._client.submit(work, value)
            with self._outstanding_lock:
                self._outstanding[future.task_id] = (future, value)
            with self._ledger.lock:
                self._ledger.submitted += 1
            future.add_done_callback(lambda done, value=value: self._on_done(done, value))
            if self._cancel_fraction and self._submit_rng.random() < self._cancel_fraction:
                with self._ledger.lock:
                    self._cancel_requested.add(future.task_id)
                self._to_cancel.put(future)

    def poison(self) -> None:
        if not self._stop.is_set():
            self.poisoned.append(self._client.submit(kill_own_worker))

    def poisoned_outcomes(self) -> collections.Counter[str]:
        """How the poisoned tasks ended: "WorkerDiedError" is the only right answer."""
        outcomes: collections.Counter[str] = collections.Counter()
        for future in self.poisoned:
            if not future.done():
                outcomes["unresolved"] += 1
            elif future.cancelled():
                outcomes["canceled"] += 1
            else:
                error = future.exception()
                outcomes[type(error).__name__ if error is not None else "a result"] += 1
        return outcomes

    def _run_cancels(self) -> None:
        while not (self._stop.is_set() and self._to_cancel.empty()):
            try:
                future = self._to_cancel.get(timeout=0.1)
            except queue.Empty:
                continue
            force = self._cancel_rng.random() < 0.5
            returned = future.cancel(force=force)
            with self._ledger.lock:
                self._ledger.cancels.append((future, force, returned))

    def _on_done(self, future: Any, value: int) -> None:
        ledger = self._ledger
        with self._outstanding_lock:
            self._outstanding.pop(future.task_id, None)
        if future.cancelled():
            outcome: tuple[str, Any] = ("error", "canceled")
        elif future.exception() is not None:
            error = future.exception()
            outcome = ("error", f"{type(error).__name__}: {error}")
        else:
            outcome = ("value", future.result())
        with ledger.lock:
            ledger.callbacks_by_task[future.task_id] += 1
            if ledger.callbacks_by_task[future.task_id] == 2:
                ledger.duplicates.append(future.task_id)
            if outcome == ("error", "canceled") and future.task_id in self._cancel_requested:
                ledger.canceled += 1
            elif outcome[0] == "error":
                ledger.failed.append((value, outcome[1]))
            elif outcome[1] != expected(value):
                ledger.wrong.append((value, outcome[1], expected(value)))
            else:
                ledger.completed += 1

    def _run_maps(self) -> None:
        ledger = self._ledger
        while not self._stop.is_set():
            values = self._values(self._map_size)
            with ledger.lock:
                ledger.submitted += len(values)
            try:
                results = self._client.map(work, [(value,) for value in values])
            except Exception as error:  # noqa: BLE001 - every failure is counted and reported
                with ledger.lock:
                    ledger.failed.extend((value, f"map: {type(error).__name__}: {error}") for value in values)
                continue
            with ledger.lock:
                for value, result in zip(values, results):
                    if result == expected(value):
                        ledger.completed += 1
                    else:
                        ledger.wrong.append((value, result, expected(value)))
            self.maps_done += 1

    def outstanding(self) -> int:
        with self._outstanding_lock:
            return len(self._outstanding)

    def drain(self, timeout: float) -> list[int]:
        """Stop submitting and wait for what is in flight; returns the values that never resolved."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (
            self.outstanding() or self._map_thread.is_alive() or self._cancel_thread.is_alive()
            or not all(future.done() for future in self.poisoned)
        ):
            time.sleep(0.1)
        self._map_thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._cancel_thread.join(timeout=max(0.0, deadline - time.monotonic()))
        never = []
        with self._outstanding_lock:
            never.extend(value for _, value in self._outstanding.values())
        if self._map_thread.is_alive():
            self._ledger.map_hangs += 1
            never.extend([-1] * self._map_size)  # the values of the map in progress; counted, not named
        return never


class Workers:
    """Worker slots: one `scaler_cluster -n 1` each, killed at random and replaced when gone."""

    def __init__(self, processes: Processes, address: str, count: int, heartbeat_seconds: float) -> None:
        self._processes = processes
        self._address = address
        self._heartbeat_seconds = heartbeat_seconds
        self._slots: list[subprocess.Popen | None] = [None] * count
        self._started = 0
        self.killed: collections.Counter[str] = collections.Counter()
        self.exited_on_their_own = 0

    def _start(self, slot: int) -> None:
        self._started += 1
        self._slots[slot] = self._processes.start(
            f"worker-{slot}-{self._started}", "scaler.cli.cluster",
            ["-n", "1", "--worker-names", f"soak-{slot}-{self._started}",
             "--heartbeat-interval", str(self._heartbeat_seconds), "--logging-level", "WARNING", self._address],
        )

    def start_all(self) -> None:
        for slot in range(len(self._slots)):
            self._start(slot)

    def replace_exited(self, kill_pending: set[int]) -> None:
        for slot, process in enumerate(self._slots):
            if process is not None and process.poll() is not None:
                # Agents or processors left over in its group (there should be none) go with it.
                _signal_group(process, signal.SIGKILL)
                if slot not in kill_pending:
                    self.exited_on_their_own += 1
                kill_pending.discard(slot)
                self._start(slot)

    def agents(self, slot: int) -> list[psutil.Process]:
        process = self._slots[slot]
        if process is None:
            return []
        try:
            return [child for child in psutil.Process(process.pid).children() if _runs(child, "scaler.worker.agent")]
        except psutil.Error:
            return []

    def kill_one(self, rng: random.Random, kill_pending: set[int]) -> str | None:
        """SIGKILL the agent or one processor of a random slot; returns what was killed."""
        slots = [slot for slot in range(len(self._slots)) if self.agents(slot)]
        if not slots:
            return None
        slot = rng.choice(slots)
        agent = self.agents(slot)[0]
        if rng.random() < 0.5:
            victim, kind = agent, "agent"
        else:
            try:
                processors = [child for child in agent.children() if _runs(child, "scaler.worker.processor")]
            except psutil.Error:
                processors = []
            if not processors:
                return None
            victim, kind = rng.choice(processors), "processor"
        try:
            victim.kill()
        except psutil.Error:
            return None
        if kind == "agent":
            kill_pending.add(slot)  # its scaler_cluster exits next, and the slot gets a new worker
        self.killed[kind] += 1
        return kind


def _runs(process: psutil.Process, module: str) -> bool:
    try:
        return module in " ".join(process.cmdline())
    except psutil.Error:
        return False


def _rss_mb(process: psutil.Process) -> float:
    return process.memory_info().rss / 1e6


def _tasks_left_in_scheduler(monitor: MonitorSubscriber, timeout: float = 10.0) -> int | None:
    """Tasks the scheduler still holds, from a monitor snapshot published after this call; None if none came."""
    asked_at = time.time()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snapshot = monitor.receive(timeout_seconds=max(0.0, deadline - time.monotonic()))
        if snapshot is not None and snapshot.published_at > asked_at:
            counts = snapshot.tasks
            return counts.unassigned + counts.running + counts.waiting_on_dependencies
    return None


def soak(options: argparse.Namespace) -> int:
    rng = random.Random(options.seed)
    log_dir = options.log_dir or tempfile.mkdtemp(prefix="scaler-soak-")
    os.makedirs(log_dir, exist_ok=True)
    address = free_local_address()
    processes = Processes(log_dir)
    client: Client | None = None
    monitor_address = f"ipc://{os.path.join(log_dir, 'monitor')}"
    monitor = MonitorSubscriber(monitor_address)
    print(f"soak: {options.minutes:g} min, {options.workers} workers, a kill every ~{options.kill_every:g} s, "
          f"seed {options.seed}, scheduler {address}, logs in {log_dir}", flush=True)
    try:
        scheduler = processes.start("scheduler", "scaler.cli.scheduler", [
            "--worker-timeout-seconds", str(options.worker_timeout),
            "--heartbeat-interval-seconds", str(options.heartbeat),
            "--monitor-address", monitor_address,
            "--logging-level", "WARNING", address,
        ])
        scheduler_process = psutil.Process(scheduler.pid)
        workers = Workers(processes, address, options.workers, options.heartbeat)
        workers.start_all()
        client = Client(address=address, timeout_seconds=60)
        ledger = Ledger()
        ledger.watch_wire(client)
        # Warm up: every worker connected and serving, the function shipped, before the clock starts.
        client.map(work, [(value,) for value in range(-200, 0)])
        rss_start = _rss_mb(scheduler_process)
        stream = Stream(client, ledger, options.in_flight, options.map_size, options.cancel_fraction, options.seed)
        stream.start()
        started = time.monotonic()
        end = started + options.minutes * 60
        next_kill = started + options.kill_every * rng.uniform(0.5, 1.5)
        next_poison = started + options.poison_every if options.poison_every > 0 else float("inf")
        next_progress = started + _PROGRESS_SECONDS
        kill_pending: set[int] = set()
        while time.monotonic() < end:
            if scheduler.poll() is not None:
                raise RuntimeError(f"the scheduler exited with code {scheduler.returncode}; see {log_dir}")
            stream.top_up()
            workers.replace_exited(kill_pending)
            now = time.monotonic()
            if now >= next_kill:
                workers.kill_one(rng, kill_pending)
                next_kill = now + options.kill_every * rng.uniform(0.5, 1.5)
            if now >= next_poison:
                stream.poison()
                next_poison = now + options.poison_every
            if now >= next_progress:
                next_progress = now + _PROGRESS_SECONDS
                with ledger.lock:
                    print(f"  {now - started:5.0f} s: {ledger.submitted:,} submitted, {ledger.completed:,} completed, "
                          f"{ledger.canceled:,} canceled, {len(ledger.failed)} failed, "
                          f"{stream.outstanding()} single submits in flight, "
                          f"{sum(workers.killed.values())} killed, scheduler RSS {_rss_mb(scheduler_process):.1f} MB",
                          flush=True)
            time.sleep(0.01)
        elapsed = time.monotonic() - started
        # Workers killed just before the end hold tasks until the scheduler times them out.
        drain_deadline = options.worker_timeout * 3 + 60
        drain_started = time.monotonic()
        never_resolved = stream.drain(drain_deadline)
        drain_seconds = time.monotonic() - drain_started
        rss_end = _rss_mb(scheduler_process)
        # Every future has its outcome, so the scheduler should hold nothing: anything left is a leak.
        tasks_left = _tasks_left_in_scheduler(monitor) if not never_resolved else None
        with ledger.lock:
            lost = len(never_resolved) + len(ledger.failed)
            # cancel() returning True must mean the future is canceled; False, that it ran (or failed) instead.
            cancel_mismatches = [
                (future, force, returned) for future, force, returned in ledger.cancels
                if future.done() and returned != future.cancelled()
            ]
            forced = sum(1 for _, force, _ in ledger.cancels if force)
            poisoned = stream.poisoned_outcomes()
            poison_wrong = sum(count for outcome, count in poisoned.items() if outcome != WorkerDiedError.__name__)
            report = [
                ("run", f"{elapsed / 60:.1f} min, then {drain_seconds:.1f} s to drain"),
                ("tasks submitted", f"{ledger.submitted:,} ({stream.maps_done:,} maps of {options.map_size})"),
                ("tasks completed", f"{ledger.completed:,}"),
                ("tasks canceled", f"{ledger.canceled:,} of {len(ledger.cancels):,} cancel() calls "
                                   f"({forced:,} with force); {len(cancel_mismatches)} where cancel()'s answer "
                                   "disagreed with the outcome"),
                ("tasks lost", f"{lost} ({len(never_resolved)} never resolved, {len(ledger.failed)} failed)"),
                ("duplicates", f"{len(ledger.duplicates)}"),
                ("wrong results", f"{len(ledger.wrong)}"),
                ("poisoned tasks", f"{len(stream.poisoned)} submitted; ended: "
                                   + (", ".join(f"{count} {outcome}" for outcome, count in sorted(poisoned.items()))
                                      or "-")),
                ("workers killed", f"{sum(workers.killed.values())} ({workers.killed['agent']} agents, "
                                   f"{workers.killed['processor']} processors); "
                                   f"{workers.exited_on_their_own} exited on their own (poisoned tasks kill theirs)"),
                ("scheduler RSS", f"{rss_start:.1f} MB at start, {rss_end:.1f} MB at end"),
                ("tasks left", "unknown" if tasks_left is None else f"{tasks_left} in the scheduler after the drain"),
            ]
            failed_sample = ledger.failed[:5]
            wrong_sample = ledger.wrong[:5]
            duplicate_sample = ledger.duplicates[:5]
        print("soak results:")
        for label, value in report:
            print(f"  {label:16} {value}")
        for value, error in failed_sample:
            print(f"  failed: work({value}): {error}")
        for value, got, want in wrong_sample:
            print(f"  wrong: work({value}) gave {got}, expected {want}")
        for task_id in duplicate_sample:
            print(f"  duplicate: task {task_id:#x}")
        for future, force, returned in cancel_mismatches[:5]:
            print(f"  cancel(force={force}) returned {returned} for task {future.task_id:#x}, "
                  f"which ended {'canceled' if future.cancelled() else 'with a result or error'}")
        if never_resolved:
            print(f"  never resolved: {sorted(never_resolved)[:10]}")
        ok = (lost == 0 and not ledger.duplicates and not ledger.wrong and not tasks_left and not cancel_mismatches
              and poison_wrong == 0)
        print("soak: PASS" if ok else f"soak: FAIL (logs in {log_dir})", flush=True)
        return 0 if ok else 1
    finally:
        if client is not None:
            client.disconnect()
        monitor.close()
        processes.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to keep tasks flowing and killing")
    parser.add_argument("--workers", type=int, default=4, help="worker slots, each refilled when its worker dies")
    parser.add_argument("--kill-every", type=float, default=4.0,
                        help="seconds between kills, on average (each gap is 0.5 to 1.5 times this)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the choice of victims and gaps")
    parser.add_argument("--in-flight", type=int, default=200, help="single submits kept outstanding")
    parser.add_argument("--map-size", type=int, default=100, help="tasks per map call (maps run one after another)")
    parser.add_argument("--cancel-fraction", type=float, default=0.02,
                        help="share of single submits canceled right after submission, half of them with force")
    parser.add_argument("--worker-timeout", type=float, default=10.0,
                        help="the scheduler's --worker-timeout-seconds: how soon a killed agent is noticed")
    parser.add_argument("--heartbeat", type=float, default=1.0, help="heartbeat interval of workers (seconds)")
    parser.add_argument("--poison-every", type=float, default=0.0,
                        help="seconds between poisoned tasks that kill their worker agent (0: none)")
    parser.add_argument("--log-dir", default=None, help="where the scheduler and workers log (default: a temp dir)")
    options = parser.parse_args()
    if options.workers < 1 or options.minutes <= 0 or options.kill_every <= 0:
        parser.error("--workers, --minutes and --kill-every must be positive")

    def on_sigterm(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        sys.exit(soak(options))
    except KeyboardInterrupt:
        print("soak: interrupted; every process it started has been stopped", flush=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
