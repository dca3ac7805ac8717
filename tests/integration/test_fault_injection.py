"""Faults injected into real processes while thousands of tasks are in flight.

Every test checks the same promise from the client's side: each future gets exactly one outcome, and
a successful one is the right value. Tasks append their argument to a per-test log (O_APPEND, one
short write per task, so lines never interleave) to count executions: a task may legitimately run
twice after its worker dies, but a canceled task must never run, and the client must *receive* one
result per task (a spy on the client's connection counts what arrives from the scheduler).
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import mmap
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from typing import Callable, Iterator

import psutil
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.errors import MemoryLimitError, SchedulerLostError, TaskTimeoutError, WorkerDiedError
from scaler.protocol import messages as m
from scaler.protocol.monitor_messages import MonitorSnapshot
from scaler.scheduler.config import default_monitor_address
from scaler.ui.feed import MonitorSubscriber

TASKS = 4000
RESULT_TIMEOUT = 90


# ---------------------------------------------------------------------------------------------- tasks


def append_line(log_path: str, text: str) -> None:
    descriptor = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, f"{text}\n".encode())
    finally:
        os.close(descriptor)


def logged_task(value: int, log_path: str, seconds: float) -> int:
    append_line(log_path, str(value))
    if seconds:
        time.sleep(seconds)
    return value * 3 + 1


def logged_task_with_object(value: int, log_path: str, seconds: float, blob: bytes) -> int:
    append_line(log_path, str(value))
    time.sleep(seconds)
    return value * 3 + len(blob) % 7


def segfault(log_path: str) -> None:
    import ctypes

    append_line(log_path, "segfault")
    ctypes.string_at(0)  # a real SIGSEGV in the processor, not a Python exception


def kill_own_worker(log_path: str) -> None:
    """Takes the whole worker down: SIGKILL to the agent (the processor's parent); the processor follows it."""
    append_line(log_path, "worker-killer")
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(60)


def sleep_forever(log_path: str) -> None:
    append_line(log_path, "sleeper")
    time.sleep(60)


def hog_memory(log_path: str, megabytes: int) -> int:
    """Takes `megabytes` of resident memory in one system call where the OS allows, then holds it.

    Filling memory costs CPU (the kernel zeroes every page), which a loaded machine hands out sparingly: in 16 MiB
    steps with a sleep between them, this task took 9 s to reach 250 MiB at load 14, so the task timeout stopped
    it first. One populated mapping needs a tenth of the CPU time and no wake-ups on the way.
    """
    append_line(log_path, "hog")
    size = megabytes * 1024 * 1024
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if populate:
        held: mmap.mmap | bytearray = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
    else:
        held = bytearray(size)
    time.sleep(60)
    return len(held)


def expected(value: int) -> int:
    return value * 3 + 1


# ---------------------------------------------------------------------------------------------- helpers


def read_log(log_path: str) -> collections.Counter[str]:
    try:
        with open(log_path) as log:
            return collections.Counter(line.strip() for line in log if line.strip())
    except FileNotFoundError:
        return collections.Counter()


def log_lines(log_path: str) -> int:
    return sum(read_log(log_path).values())


def wait_for(predicate: Callable[[], object], timeout: float, message: str | Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(message() if callable(message) else message)


def count_once_quiet(log_path: str, quiet_seconds: float, timeout: float, message: str) -> int:
    """The log's line count once it has not changed for `quiet_seconds`; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    count, since = log_lines(log_path), time.monotonic()
    while time.monotonic() - since < quiet_seconds:
        assert time.monotonic() < deadline, f"{message} ({count} lines)"
        time.sleep(0.1)
        now_count = log_lines(log_path)
        if now_count != count:
            count, since = now_count, time.monotonic()
    return count


def children_running(parent_pid: int, module: str) -> list[psutil.Process]:
    found = []
    try:
        children = psutil.Process(parent_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    for child in children:
        try:
            if module in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def agent_with_processors(cluster_pid: int, expected_agents: int) -> tuple[psutil.Process, list[psutil.Process]]:
    """The first of the cluster's worker agents, once all have started, and its processor children."""
    wait_for(
        lambda: len(children_running(cluster_pid, "scaler.worker.agent")) == expected_agents
        and all(children_running(agent.pid, "scaler.worker.processor")
                for agent in children_running(cluster_pid, "scaler.worker.agent")),
        30, "worker agents and their processors did not start",
    )
    agent = children_running(cluster_pid, "scaler.worker.agent")[0]
    return agent, children_running(agent.pid, "scaler.worker.processor")


class DeliverySpy:
    """Counts every outcome the scheduler delivers to a client, per task id, before the futures see it.

    A future ignores a second outcome, so a duplicate delivery would go unnoticed by looking at futures.
    """

    def __init__(self, client: Client) -> None:
        self.outcomes: collections.Counter[int] = collections.Counter()
        routing = client._connection._results
        original = routing.route

        def counting(results: m.TaskResults) -> None:
            self.outcomes.update(results.succeeded_ids)
            self.outcomes.update(f.task_id for f in results.failures if f.kind != m.FailureKind.NOT_FOUND)
            original(results)

        routing.route = counting  # type: ignore[method-assign]

    def assert_exactly_once(self, futures: list[concurrent.futures.Future]) -> None:
        task_ids = [future.task_id for future in futures]  # type: ignore[attr-defined]
        missing = [task_id for task_id in task_ids if self.outcomes[task_id] == 0]
        duplicated = {task_id: self.outcomes[task_id] for task_id in task_ids if self.outcomes[task_id] > 1}
        assert not missing, f"{len(missing)} tasks never got an outcome"
        assert not duplicated, f"{len(duplicated)} tasks got more than one outcome: {list(duplicated.items())[:10]}"


def submit_logged(client: Client, values: range, log_path: str, seconds: float) -> list[concurrent.futures.Future]:
    return [client.submit(logged_task, value, log_path, seconds) for value in values]


def assert_all_correct(
    futures: list[concurrent.futures.Future], values: range, timeout: float = RESULT_TIMEOUT
) -> None:
    results = [future.result(timeout=timeout) for future in futures]
    wrong = [(value, result) for value, result in zip(values, results) if result != expected(value)]
    assert not wrong, f"{len(wrong)} wrong results, first {wrong[:5]}"


def assert_each_ran(log_path: str, values: range) -> collections.Counter[str]:
    executions = read_log(log_path)
    never_ran = [value for value in values if executions[str(value)] == 0]
    assert not never_ran, f"{len(never_ran)} tasks have a result but never ran, e.g. {never_ran[:5]}"
    return executions


def tasks_rescheduled_from(cluster_log: str, worker_name: str) -> list[int]:
    """What the scheduler logged when it took the worker for gone (timed out, or its connection lost): how many
    tasks it took back, each time."""
    pattern = re.compile(
        rf"worker {re.escape(worker_name)} (?:timed out|lost its connection), (\d+) tasks to reschedule"
    )
    with open(cluster_log) as log:
        return [int(found.group(1)) for found in pattern.finditer(log.read())]


def latest_snapshot(monitor: MonitorSubscriber) -> MonitorSnapshot | None:
    return monitor.receive(timeout_seconds=1.5)


def wait_for_registered_workers(monitor: MonitorSubscriber, count: int) -> None:
    """An agent starts its processor before it says hello: wait until the scheduler knows them all."""

    def registered() -> bool:
        snapshot = latest_snapshot(monitor)
        return snapshot is not None and len(snapshot.workers) == count

    wait_for(registered, 30, f"the scheduler never saw {count} workers")


def assert_scheduler_accepted_exactly(monitor: MonitorSubscriber, count: int) -> None:
    """The scheduler's own tally of accepted results: a late result accepted twice would push it past `count`."""
    seen: list[int] = []

    def tallied() -> bool:
        snapshot = latest_snapshot(monitor)
        if snapshot is not None:
            seen[:] = [snapshot.tasks.success]
        return bool(seen) and seen[0] >= count

    wait_for(tallied, 30, lambda: f"the scheduler counts {seen} successes, expected {count}")
    assert seen[0] == count


@pytest.fixture
def log_path(tmp_path) -> str:  # type: ignore[no-untyped-def]
    return str(tmp_path / "executions.log")


@pytest.fixture
def cluster_log(tmp_path) -> str:  # type: ignore[no-untyped-def]
    return str(tmp_path / "cluster.log")


@pytest.fixture
def fast_failure_cluster(cluster_log: str) -> Iterator[SchedulerClusterCombo]:
    """Two workers that heartbeat often and are declared dead after 3 s of silence; logs go to a file. Each
    worker is filled to its capacity (`worker_queue_seconds=0`), so that a worker that dies or freezes holds a
    deep queue of unstarted tasks for the scheduler to hand on (by default, its queue would be ~50 of these
    1 ms tasks: the same path, fewer tasks)."""
    with SchedulerClusterCombo(
        n_workers=2, logging_level="INFO", logging_paths=[cluster_log], worker_timeout_seconds=3,
        heartbeat_interval_seconds=0.5, worker_queue_seconds=0,
    ) as cluster:
        yield cluster


# ---------------------------------------------------------------------------------------------- 1. worker death


@pytest.mark.timeout(120)
def test_a_worker_killed_mid_run_has_its_queued_and_running_tasks_rerun_elsewhere(
    fast_failure_cluster: SchedulerClusterCombo, log_path: str, cluster_log: str
) -> None:
    cluster = fast_failure_cluster
    victim, processors = agent_with_processors(cluster.cluster_pid, 2)
    victim_name = json.loads(victim.cmdline()[-1])["name"]
    with MonitorSubscriber(default_monitor_address(cluster.get_address())) as monitor, \
            Client(address=cluster.get_address(), timeout_seconds=60) as client:
        wait_for_registered_workers(monitor, 2)
        spy = DeliverySpy(client)
        values = range(TASKS)
        futures = submit_logged(client, values, log_path, 0.001)
        wait_for(lambda: log_lines(log_path) >= TASKS // 8, 60, "tasks did not start")
        for process in [victim, *processors]:
            process.kill()
        killed_at = time.monotonic()

        def scheduler_dropped_the_dead_worker() -> bool:
            snapshot = latest_snapshot(monitor)
            return snapshot is not None and len(snapshot.workers) == 1

        # --worker-timeout-seconds is 3: a generous bound for a loaded 2-core machine
        wait_for(scheduler_dropped_the_dead_worker, 20, "the scheduler did not notice the dead worker")
        assert time.monotonic() - killed_at < 20
        # it held a full queue (1,000 per worker, 4,000 submitted) when it died
        assert tasks_rescheduled_from(cluster_log, victim_name)[0] > 100
        assert_all_correct(futures, values)
        spy.assert_exactly_once(futures)
        assert_each_ran(log_path, values)
        assert_scheduler_accepted_exactly(monitor, TASKS)
        # the survivor carries on alone
        assert [agent.pid for agent in children_running(cluster.cluster_pid, "scaler.worker.agent")] != [victim.pid]
        assert client.map(abs, [(-i,) for i in range(200)]) == list(range(200))


@pytest.mark.timeout(120)
def test_a_killed_worker_is_known_dead_by_its_closed_connection_long_before_its_timeout(
    log_path: str, cluster_log: str
) -> None:
    """With the default 60 s worker timeout: the scheduler sees the dead agent's connection end and, as it
    does not come back within a second, takes the worker for gone and reruns its tasks elsewhere at once."""
    with SchedulerClusterCombo(
        n_workers=2, logging_level="INFO", logging_paths=[cluster_log], worker_timeout_seconds=60,
        worker_queue_seconds=0,
    ) as cluster, MonitorSubscriber(default_monitor_address(cluster.get_address())) as monitor, \
            Client(address=cluster.get_address(), timeout_seconds=60) as client:
        victim, processors = agent_with_processors(cluster.cluster_pid, 2)
        victim_name = json.loads(victim.cmdline()[-1])["name"]
        wait_for_registered_workers(monitor, 2)
        values = range(400)
        futures = submit_logged(client, values, log_path, 0.01)
        wait_for(lambda: log_lines(log_path) >= 40, 60, "tasks did not start")
        for process in [victim, *processors]:
            process.kill()
        # Well within the worker timeout (60 s), even on a loaded machine.
        assert_all_correct(futures, values, timeout=30)
        assert tasks_rescheduled_from(cluster_log, victim_name)[0] > 0
        with open(cluster_log) as log:
            text = log.read()
        assert f"worker {victim_name} lost its connection" in text and "timed out" not in text


# ---------------------------------------------------------------------------------------------- 2. segfault


def poisoned_among_thousands(client: Client, poison: Callable[[str], None], log_path: str) -> collections.Counter[str]:
    """One poisoned task amid TASKS good ones: it fails after the default --max-task-crashes (3) deaths it
    caused, every other task gets exactly one correct result; returns how often each task ran."""
    spy = DeliverySpy(client)
    first, second = range(TASKS // 2), range(TASKS // 2, TASKS)
    before = submit_logged(client, first, log_path, 0.001)
    poisoned = client.submit(poison, log_path)
    after = submit_logged(client, second, log_path, 0.001)
    with pytest.raises(WorkerDiedError, match="died under it 3 times"):
        poisoned.result(timeout=RESULT_TIMEOUT)
    assert_all_correct(before + after, range(TASKS))
    spy.assert_exactly_once([*before, poisoned, *after])
    return assert_each_ran(log_path, range(TASKS))


@pytest.mark.timeout(120)
def test_a_segfaulting_task_fails_after_max_crashes_while_thousands_of_others_complete(log_path: str) -> None:
    with SchedulerClusterCombo(n_workers=2, logging_level="CRITICAL") as cluster:
        with Client(address=cluster.get_address(), timeout_seconds=60) as client:
            executions = poisoned_among_thousands(client, segfault, log_path)
            # the default --max-task-crashes: retried until the third crash, never after
            assert executions["segfault"] == 3
            assert client.map(abs, [(-i,) for i in range(200)]) == list(range(200))


@pytest.mark.timeout(150)
def test_a_task_that_kills_its_whole_worker_fails_after_max_crashes_deaths_while_thousands_of_others_complete(
    log_path: str, cluster_log: str
) -> None:
    """The scheduler only sees the worker's connection end (or the worker fall silent). After the first death every
    task that worker held is a suspect and reports its start, so the next deaths are blamed on the one that was
    running."""
    with SchedulerClusterCombo(
        n_workers=4, logging_level="INFO", logging_paths=[cluster_log], worker_timeout_seconds=3,
        heartbeat_interval_seconds=0.5, max_task_crashes=3,
    ) as cluster, MonitorSubscriber(default_monitor_address(cluster.get_address())) as monitor, \
            Client(address=cluster.get_address(), timeout_seconds=60) as client:
        agent_with_processors(cluster.cluster_pid, 4)
        wait_for_registered_workers(monitor, 4)
        executions = poisoned_among_thousands(client, kill_own_worker, log_path)
        # three workers died, each exactly when the poisoned task ran; the fourth was never touched
        assert executions["worker-killer"] == 3
        with open(cluster_log) as log:
            text = log.read()
            assert text.count("timed out") + text.count("lost its connection") == 3
        assert len(children_running(cluster.cluster_pid, "scaler.worker.agent")) == 1
        assert_scheduler_accepted_exactly(monitor, TASKS)
        assert client.map(abs, [(-i,) for i in range(200)]) == list(range(200))


# ---------------------------------------------------------------------------------------------- 3. frozen worker


@pytest.mark.timeout(120)
def test_a_frozen_worker_is_dropped_its_late_results_are_not_delivered_again_and_it_rejoins(
    fast_failure_cluster: SchedulerClusterCombo, log_path: str, cluster_log: str
) -> None:
    cluster = fast_failure_cluster
    victim, processors = agent_with_processors(cluster.cluster_pid, 2)
    victim_name = json.loads(victim.cmdline()[-1])["name"]
    frozen = [victim, *processors]
    with MonitorSubscriber(default_monitor_address(cluster.get_address())) as monitor, \
            Client(address=cluster.get_address(), timeout_seconds=60) as client:
        wait_for_registered_workers(monitor, 2)
        spy = DeliverySpy(client)
        values = range(TASKS)
        futures = submit_logged(client, values, log_path, 0.002)
        wait_for(lambda: log_lines(log_path) >= TASKS // 8, 60, "tasks did not start")
        try:
            for process in frozen:
                process.suspend()
            frozen_at = time.monotonic()

            def scheduler_dropped_the_frozen_worker() -> bool:
                snapshot = latest_snapshot(monitor)
                return snapshot is not None and len(snapshot.workers) == 1

            wait_for(scheduler_dropped_the_frozen_worker, 30, "the scheduler did not drop the frozen worker")
            assert time.monotonic() - frozen_at >= 2.5  # not before --worker-timeout-seconds (3 s)
            assert not all(future.done() for future in futures), "thaw must happen with tasks still in flight"
        finally:
            for process in reversed(frozen):
                try:
                    process.resume()
                except psutil.NoSuchProcess:
                    pass
        # Thawed, it sends results and heartbeats for a connection the scheduler forgot: refused{unknownPeer}, it
        # says hello again and re-announces what it holds (PROTOCOL.md §21); its late results, of tasks done
        # elsewhere meanwhile, are kept aside as orphan results and never reach the client a second time.
        def rejoined() -> bool:
            with open(cluster_log) as log:
                return f"Worker[{victim_name}]: welcomed again" in log.read()

        wait_for(rejoined, 30, "the thawed worker did not rejoin")
        assert victim.is_running() and victim.status() != psutil.STATUS_ZOMBIE
        assert tasks_rescheduled_from(cluster_log, victim_name)[0] > 100
        assert_all_correct(futures, values)
        spy.assert_exactly_once(futures)
        assert_each_ran(log_path, values)
        assert_scheduler_accepted_exactly(monitor, TASKS)
        assert len(children_running(cluster.cluster_pid, "scaler.worker.agent")) == 2
        assert client.map(abs, [(-i,) for i in range(200)]) == list(range(200))


# ---------------------------------------------------------------------------------------------- 4. client death

_DOOMED_CLIENT = textwrap.dedent("""
    import sys
    import cloudpickle
    import tests.integration.test_fault_injection as module
    from scaler import Client

    cloudpickle.register_pickle_by_value(module)
    address, log_path, mode, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    client = Client(address=address, timeout_seconds=60, heartbeat_interval_seconds=0.5, name="doomed")
    blob = client.send_object(b"x" * (5 * 1024 * 1024), name="blob")
    futures = [client.submit(module.logged_task_with_object, i, log_path, 0.01, blob) for i in range(count)]
    print("submitted", flush=True)
    sys.stdin.readline()  # the test says when to leave (or kills us)
    client.disconnect()
""")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("ending", ["sigkill", "disconnect"])
def test_a_dead_client_has_its_queued_tasks_canceled_and_objects_freed_while_another_is_unaffected(
    ending: str, tmp_path, python_env: dict[str, str]  # type: ignore[no-untyped-def]
) -> None:
    doomed_log = str(tmp_path / "doomed.log")
    survivor_log = str(tmp_path / "survivor.log")
    with SchedulerClusterCombo(
        n_workers=2, logging_level="ERROR", client_timeout_seconds=3, heartbeat_interval_seconds=0.5
    ) as cluster, MonitorSubscriber(default_monitor_address(cluster.get_address())) as monitor:
        doomed = subprocess.Popen(
            [sys.executable, "-c", _DOOMED_CLIENT, cluster.get_address(), doomed_log, ending, str(TASKS)],
            env=python_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        try:
            with Client(address=cluster.get_address(), timeout_seconds=60, heartbeat_interval_seconds=0.5) as client:
                spy = DeliverySpy(client)
                assert doomed.stdout is not None
                assert doomed.stdout.readline().strip() == "submitted"
                values = range(3000)
                futures = submit_logged(client, values, survivor_log, 0.001)

                def doomed_object_is_held() -> bool:
                    snapshot = latest_snapshot(monitor)
                    return snapshot is not None and snapshot.object_bytes >= 5 * 1024 * 1024

                wait_for(doomed_object_is_held, 30, "the doomed client's object never reached the scheduler")
                wait_for(lambda: log_lines(doomed_log) >= 100, 60, "the doomed client's tasks did not start")
                assert doomed.stdin is not None
                if ending == "sigkill":
                    doomed.kill()
                else:
                    doomed.stdin.write("leave\n")
                    doomed.stdin.flush()
                assert doomed.wait(timeout=30) in (0, -signal.SIGKILL)

                last: list[MonitorSnapshot] = []

                def scheduler_forgot_the_doomed_client() -> bool:
                    snapshot = latest_snapshot(monitor)
                    if snapshot is None:
                        return False
                    last[:] = [snapshot]
                    return "doomed" not in {c.name for c in snapshot.clients} and snapshot.object_bytes < 1024 * 1024

                wait_for(scheduler_forgot_the_doomed_client, 30,
                         lambda: f"the scheduler still holds the doomed client or its object: {last}")
                # A task already running when the client went runs to its end; nothing queued runs afterwards:
                # the log goes quiet (queued tasks of 10 ms each would keep it growing) and stays so.
                settled = count_once_quiet(doomed_log, quiet_seconds=1.0, timeout=30,
                                           message="tasks of the dead client kept running after it was dropped")
                time.sleep(2.0)
                assert log_lines(doomed_log) == settled, "tasks of the dead client ran after it was dropped"
                assert settled < TASKS, "every task of the dead client ran: nothing was canceled"
                assert max(read_log(doomed_log).values()) == 1

                assert_all_correct(futures, values)
                spy.assert_exactly_once(futures)
                assert_each_ran(survivor_log, values)
            wait_for(lambda: (lambda s: s is not None and s.tasks.unassigned == s.tasks.running == 0
                              and not s.clients)(latest_snapshot(monitor)),
                     30, "the scheduler still holds tasks or clients at the end")
        finally:
            if doomed.poll() is None:
                doomed.kill()
            doomed.wait()
            for stream in (doomed.stdin, doomed.stdout):
                if stream is not None:
                    try:
                        stream.close()
                    except BrokenPipeError:
                        pass


# ---------------------------------------------------------------------------------------------- 5. scheduler death


@pytest.mark.timeout(150)
def test_scheduler_death_fails_futures_promptly_workers_leave_and_a_new_scheduler_serves(log_path: str) -> None:
    with SchedulerClusterCombo(
        n_workers=2, logging_level="CRITICAL", heartbeat_interval_seconds=0.5, death_timeout_seconds=3
    ) as cluster:
        address = cluster.get_address()
        agents = children_running(cluster.cluster_pid, "scaler.worker.agent")
        client = Client(address=address, timeout_seconds=3, heartbeat_interval_seconds=0.5)
        try:
            values = range(TASKS)
            futures = submit_logged(client, values, log_path, 0.002)
            wait_for(lambda: log_lines(log_path) >= TASKS // 8, 60, "tasks did not start")
            agents = children_running(cluster.cluster_pid, "scaler.worker.agent")
            assert len(agents) == 2
            os.kill(cluster.scheduler_pid, signal.SIGKILL)
            killed_at = time.monotonic()
            done, not_done = concurrent.futures.wait(futures, timeout=30)
            assert not not_done, f"{len(not_done)} futures still pending 30 s after the scheduler died"
            assert time.monotonic() - killed_at < 20  # client timeout 3 s, plus a slow machine's margin
            lost = 0
            for value, future in zip(values, futures):
                error = future.exception()
                if error is None:
                    assert future.result() == expected(value)
                else:
                    assert isinstance(error, SchedulerLostError), repr(error)
                    assert "scheduler" in str(error)
                    lost += 1
            assert lost > 0, "the scheduler died with nothing in flight: the test proves nothing"
            with pytest.raises(SchedulerLostError):
                client.submit(abs, 1)
        finally:
            client.disconnect()
        # Workers give up after --death-timeout-seconds without word from the scheduler.
        _, lingering = psutil.wait_procs(agents, timeout=30)
        assert not lingering, f"workers still running after the scheduler died: {[p.pid for p in lingering]}"
        wait_for(lambda: not children_running(cluster.cluster_pid, "scaler.worker.processor"), 15,
                 "processors linger after their workers left")
        # and with no worker left, scaler_cluster itself exits (it stays our unreaped child until shutdown)
        wait_for(lambda: psutil.Process(cluster.cluster_pid).status() == psutil.STATUS_ZOMBIE, 15,
                 "scaler_cluster lingers after all its workers left")

        with SchedulerClusterCombo(address=address, n_workers=2, logging_level="ERROR") as reborn:
            with Client(address=address, timeout_seconds=60) as fresh:
                spy = DeliverySpy(fresh)
                values = range(3000)
                fresh_log = log_path + ".reborn"
                futures = submit_logged(fresh, values, fresh_log, 0)
                assert_all_correct(futures, values)
                spy.assert_exactly_once(futures)
                assert max(assert_each_ran(fresh_log, values).values()) == 1
            assert len(children_running(reborn.cluster_pid, "scaler.worker.agent")) == 2


# ---------------------------------------------------------------------------------------------- 6. limits


@pytest.mark.timeout(120)
def test_timeout_and_memory_limit_fail_only_the_offending_tasks_among_thousands(log_path: str) -> None:
    with SchedulerClusterCombo(
        # The timeout leaves the hog, on a loaded machine, the CPU time to pass the memory limit first.
        n_workers=2, logging_level="CRITICAL", task_timeout_seconds=5, memory_limit_bytes=250 * 1024 * 1024
    ) as cluster:
        with Client(address=cluster.get_address(), timeout_seconds=60) as client:
            spy = DeliverySpy(client)
            first, second, third = range(0, 1500), range(1500, 3000), range(3000, TASKS)
            futures = submit_logged(client, first, log_path, 0.001)
            sleeper = client.submit(sleep_forever, log_path)
            futures += submit_logged(client, second, log_path, 0.001)
            hog = client.submit(hog_memory, log_path, 1024)
            futures += submit_logged(client, third, log_path, 0.001)
            with pytest.raises(TaskTimeoutError, match="--task-timeout-seconds"):
                sleeper.result(timeout=RESULT_TIMEOUT)
            with pytest.raises(MemoryLimitError, match="--memory-limit-bytes"):
                hog.result(timeout=RESULT_TIMEOUT)
            assert_all_correct(futures, range(TASKS))
            spy.assert_exactly_once([*futures, sleeper, hog])
            executions = assert_each_ran(log_path, range(TASKS))
            assert executions["sleeper"] == 1 and executions["hog"] == 1  # failed for good, never retried
            assert client.map(abs, [(-i,) for i in range(200)]) == list(range(200))
