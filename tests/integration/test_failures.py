"""Failures the native runtime must survive or report clearly, injected into real processes."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.cluster.combo import free_local_address
from scaler.errors import ConnectionFailedError, SchedulerLostError, WorkerDiedError

pytestmark = pytest.mark.timeout(90)


def crash_processor() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def slow_identity(value: int, seconds: float) -> int:
    time.sleep(seconds)
    return value


def processes_running(parent_pid: int, module: str) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(parent_pid).children(recursive=True):
        try:
            if module in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def wait_for(predicate, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(message)


def test_unreachable_scheduler_is_a_clear_error_within_the_timeout() -> None:
    address = free_local_address()
    started = time.monotonic()
    with pytest.raises(ConnectionFailedError, match="could not connect to the scheduler"):
        Client(address=address, timeout_seconds=1)
    assert time.monotonic() - started < 10


def test_futures_fail_when_the_scheduler_dies() -> None:
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as cluster:
        client = Client(address=cluster.get_address(), timeout_seconds=3, heartbeat_interval_seconds=0.5)
        assert client.submit(abs, -1).result(timeout=30) == 1
        future = client.submit(time.sleep, 60)
        os.kill(cluster.scheduler_pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="scheduler") as raised:  # what code written for 1.9.x catches
            future.result(timeout=30)
        assert time.monotonic() - started < 15
        lost = raised.value
        assert isinstance(lost, SchedulerLostError) and isinstance(lost, ConnectionError)
        assert lost.errno is None and len(lost.args) == 1  # an OSError built from its message alone
        with pytest.raises(SchedulerLostError):
            client.submit(abs, 1)
        client.disconnect()


def test_a_task_that_keeps_crashing_its_processor_fails_with_worker_died() -> None:
    with SchedulerClusterCombo(n_workers=2, logging_level="ERROR", max_task_crashes=3) as cluster:
        with Client(address=cluster.get_address()) as client:
            before = [client.submit(slow_identity, i, 0.01) for i in range(20)]
            poisoned = client.submit(crash_processor)
            after = [client.submit(slow_identity, i, 0.01) for i in range(20, 40)]
            with pytest.raises(WorkerDiedError, match="died under it 3 times"):
                poisoned.result(timeout=60)
            assert [f.result(timeout=60) for f in before + after] == list(range(40))
            # workers replaced their processors and still serve
            assert client.map(abs, [(-i,) for i in range(100)]) == list(range(100))


def test_a_processor_killed_mid_task_does_not_lose_the_task() -> None:
    with SchedulerClusterCombo(n_workers=1, logging_level="ERROR") as cluster:
        with Client(address=cluster.get_address()) as client:
            futures = [client.submit(slow_identity, i, 0.2) for i in range(10)]
            wait_for(lambda: processes_running(cluster.cluster_pid, "scaler.worker.processor"), 20, "no processor")
            time.sleep(0.3)
            for processor in processes_running(cluster.cluster_pid, "scaler.worker.processor"):
                processor.kill()
            assert [f.result(timeout=60) for f in futures] == list(range(10))


def test_a_killed_worker_has_its_tasks_rescheduled_on_the_others() -> None:
    with SchedulerClusterCombo(
        n_workers=2, logging_level="ERROR", worker_timeout_seconds=3, heartbeat_interval_seconds=0.5
    ) as cluster:
        with Client(address=cluster.get_address()) as client:
            wait_for(lambda: len(processes_running(cluster.cluster_pid, "scaler.worker.agent")) == 2, 20, "no agents")
            futures = [client.submit(slow_identity, i, 0.02) for i in range(300)]
            time.sleep(0.5)
            victim = processes_running(cluster.cluster_pid, "scaler.worker.agent")[0]
            victim.kill()
            results = [f.result(timeout=60) for f in futures]
            assert results == list(range(300))


def test_a_restarted_scheduler_takes_old_clients_back() -> None:
    """A new scheduler at the same address takes the old client back under its id prefix: the task it waited
    for is sent again, and it submits more (tests/integration/test_scheduler_restart_clients.py for the rest)."""
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as first:
        address = first.get_address()
        client = Client(address=address, timeout_seconds=60, heartbeat_interval_seconds=0.5)
        try:
            assert client.submit(abs, -1).result(timeout=30) == 1
            waiting = client.submit(time.sleep, 1)
            os.kill(first.scheduler_pid, signal.SIGKILL)
            with SchedulerClusterCombo(address=address, n_workers=1, logging_level="WARNING"):
                assert client.submit(abs, -3).result(timeout=30) == 3
                assert waiting.result(timeout=30) is None
                with Client(address=address, timeout_seconds=30) as fresh:
                    assert fresh.submit(abs, -2).result(timeout=30) == 2
        finally:
            client.disconnect()


def test_peers_heartbeat_as_often_as_the_scheduler_needs_whatever_their_own_setting() -> None:
    """Workers and a client set to heartbeat every 10 s, against a scheduler that drops peers after 2 s of
    silence: they follow the welcome (a third of the timeout) instead of being dropped while idle."""
    with SchedulerClusterCombo(
        n_workers=2, logging_level="CRITICAL", heartbeat_interval_seconds=10, worker_timeout_seconds=2,
        client_timeout_seconds=2,
    ) as cluster, Client(address=cluster.get_address(), timeout_seconds=30, heartbeat_interval_seconds=10) as client:
        assert client.submit(abs, -1).result(timeout=30) == 1
        time.sleep(4)  # idle for twice the timeouts: only heartbeats keep everyone registered
        assert client.map(abs, [(-i,) for i in range(100)]) == list(range(100))
        assert client.submit(abs, -2).result(timeout=30) == 2
        assert len(processes_running(cluster.cluster_pid, "scaler.worker.agent")) == 2
