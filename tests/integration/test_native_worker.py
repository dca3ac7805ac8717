"""End to end: the Python scheduler and client with native workers (native/worker/) running neutral tasks.

Clusters of native workers only, and Python workers reading the neutral encoding; clusters of both kinds
running one mixed graph are in test_mixed_cluster.py.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
from typing import Callable, Iterator

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.errors import NoCapableWorkerError, RemoteTaskError, SerializationError
from scaler.native_tasks import NeutralSerializer, native
from tests.integration.process_cluster import ProcessCluster
from tests.integration.waiting import wait_until as wait_until_within
from tests.native_worker import BUILD_TIMEOUT_SECONDS, native_worker_executable

RESULT_SECONDS = 60.0


def wait_until(condition: Callable[[], object], what: str) -> None:
    wait_until_within(condition, what, RESULT_SECONDS)


@pytest.fixture
def native_cluster(tmp_path: str) -> Iterator[ProcessCluster]:
    cluster = ProcessCluster(native_worker_executable(), str(tmp_path))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.timeout(120 + BUILD_TIMEOUT_SECONDS)
def test_neutral_tasks_submit_map_and_graph(native_cluster: ProcessCluster) -> None:
    native_cluster.add_worker("native-1")
    with Client(address=native_cluster.address, serializer=NeutralSerializer(), timeout_seconds=30) as client:
        assert client.submit(native("add"), 1, 2).result(timeout=RESULT_SECONDS) == 3
        assert client.submit(native("add"), 1, b=2.5).result(timeout=RESULT_SECONDS) == 3.5
        assert client.map(native("mul"), [(i, i) for i in range(100)]) == [i * i for i in range(100)]
        assert client.submit(native("echo"), {"k": [1, "two", b"3", None]}).result(timeout=RESULT_SECONDS) == {
            "k": [1, "two", b"3", None]
        }
        # A graph of native nodes: each result is the next node's argument, unchanged, in one encoding.
        graph = {"a": 4, "b": (native("add"), "a", 1), "c": (native("mul"), "b", "b"), "d": (native("add"), "b", "c")}
        assert client.get(graph, keys=["c", "d"]) == {"c": 25, "d": 30}
        with pytest.raises(RemoteTaskError, match="boom") as raised:
            client.submit(native("fail"), "boom").result(timeout=RESULT_SECONDS)
        assert raised.value.type_name == "native.TaskFailed"
        with pytest.raises(SerializationError, match="no native function 'nope'"):
            client.submit(native("nope"), 1).result(timeout=RESULT_SECONDS)
    with Client(address=native_cluster.address, timeout_seconds=30) as pickling:  # the default serializer
        with pytest.raises(SerializationError, match="NeutralSerializer"):
            pickling.submit(native("add"), 1, 2).result(timeout=RESULT_SECONDS)


@pytest.mark.timeout(120 + BUILD_TIMEOUT_SECONDS)
def test_a_native_worker_keeps_the_store_directory_without_a_warning_when_stores_join_and_leave(
    native_cluster: ProcessCluster,
) -> None:
    native_cluster.add_worker("native-1")
    with Client(address=native_cluster.address, serializer=NeutralSerializer(), timeout_seconds=30) as client:
        assert client.submit(native("add"), 1, 2).result(timeout=RESULT_SECONDS) == 3
        store = native_cluster.add_store("store-1")
        wait_until(lambda: "connected at" in native_cluster.log_of("scheduler"), "the store registered")
        # The scheduler sent the new directory before it took this task: the worker read it first.
        assert client.submit(native("add"), 2, 2).result(timeout=RESULT_SECONDS) == 4
        store.terminate()
        store.wait(timeout=RESULT_SECONDS)
        wait_until(lambda: "StoreRegistry: store store-1 at" in native_cluster.log_of("scheduler"), "the store left")
        assert client.submit(native("add"), 3, 2).result(timeout=RESULT_SECONDS) == 5
    warnings = [line for line in native_cluster.log_of("native-1").splitlines() if "WARNING" in line]
    assert warnings == []


@pytest.mark.timeout(120 + BUILD_TIMEOUT_SECONDS)
def test_no_task_is_lost_when_a_native_worker_is_killed(native_cluster: ProcessCluster) -> None:
    """Two native workers share 200 tasks; one is SIGKILLed once some results are in. The scheduler notices
    the silence, hands the dead worker's tasks to the other one, and every task ends with its own result."""
    victim = native_cluster.add_worker("native-victim")
    native_cluster.add_worker("native-survivor")
    with Client(address=native_cluster.address, serializer=NeutralSerializer(), timeout_seconds=30) as client:
        assert client.map(native("echo"), [(i,) for i in range(50)]) == list(range(50))  # both workers are up
        durations = [20 + index / 1000 for index in range(200)]  # sleep_ms returns its argument: distinct results
        futures = [client.submit(native("sleep_ms"), duration) for duration in durations]
        done_before_kill = 0
        for _ in concurrent.futures.as_completed(futures, timeout=RESULT_SECONDS):
            done_before_kill += 1
            if done_before_kill == 10:
                break
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        results = [future.result(timeout=RESULT_SECONDS) for future in futures]
    assert results == durations
    assert done_before_kill == 10 and victim.returncode == -signal.SIGKILL


def test_python_workers_read_the_neutral_encoding() -> None:
    """The other half of a mixed graph (PROTOCOL.md §16): with python_objects=True a Python function travels
    inside the neutral encoding, reads neutral arguments and returns a neutral result. A native function is
    never sent to a Python worker: with no native worker connected it waits, here until the client's limit."""
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as cluster:
        serializer = NeutralSerializer(python_objects=True)
        with Client(
            address=cluster.get_address(), serializer=serializer, timeout_seconds=30, wait_for_tags_seconds=1
        ) as client:
            assert client.submit(lambda x: x + 1, 41).result(timeout=RESULT_SECONDS) == 42
            graph = {"a": [1, 2, 3], "b": (sum, "a"), "c": (lambda total: {"total": total}, "b")}
            assert client.get(graph, keys=["c"]) == {"c": {"total": 6}}
            with pytest.raises(NoCapableWorkerError, match="native"):
                client.submit(native("add"), 1, 2).result(timeout=RESULT_SECONDS)


@pytest.mark.timeout(120 + BUILD_TIMEOUT_SECONDS)
def test_a_second_clients_tasks_run_ahead_of_what_a_native_worker_holds(tmp_path: str) -> None:
    # Filled to its capacity by one client's flood (prefetch off: what no-op tasks get anyway), the worker runs the
    # second client's tasks first (TaskGroup.ahead): behind its queue they would wait for about 1,000 of the flood's.
    cluster = ProcessCluster(native_worker_executable(), str(tmp_path), "--worker-queue-seconds", "0")
    try:
        cluster.add_worker("native-1")
        with Client(address=cluster.address, serializer=NeutralSerializer(), timeout_seconds=30) as flood, \
                Client(address=cluster.address, serializer=NeutralSerializer(), timeout_seconds=30) as small:
            backlog = [flood.submit(native("sleep_ms"), 2) for _ in range(1500)]
            backlog[0].result(timeout=RESULT_SECONDS)
            assert small.map(native("add"), [(index, 1) for index in range(20)]) == list(range(1, 21))
            flood_done = sum(future.done() for future in backlog)
            assert flood_done < 500, f"the small client's tasks waited for {flood_done} of the flood's"
            flood.clear()
    finally:
        cluster.stop()

