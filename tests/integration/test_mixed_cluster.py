"""A mixed cluster: one scheduler, a Python worker and a native worker (native/worker/), all real processes.

Python functions require "python" and native stand-ins (scaler.native) require "native" without the user
saying so, so each task runs where it can; one graph mixes both, values crossing between them in the
neutral encoding (PROTOCOL.md §16); and a worker SIGKILLed while such a graph runs loses no result.
"""

from __future__ import annotations

import os
import signal
from typing import Iterator

import pytest

import scaler
from scaler import Client, NeutralSerializer
from scaler.errors import SerializationError
from scaler.scheduler.config import default_monitor_address
from scaler.ui.feed import MonitorSubscriber
from tests.integration.process_cluster import ProcessCluster
from tests.integration.scheduler_process import wait_for_snapshot
from tests.native_worker import BUILD_TIMEOUT_SECONDS, native_worker_executable

pytestmark = pytest.mark.timeout(180 + BUILD_TIMEOUT_SECONDS)

RESULT_SECONDS = 90.0
# How long the monitor feed may take to show a state the test waits for.
FEED_SECONDS = 30.0


def plus_one(value: int) -> int:
    return value + 1


def describe(total: int, label: str) -> dict:
    return {"label": label, "total": total}


def milliseconds_for(index: int) -> int:
    return 20 + index % 7


def tagged(value: int, index: int) -> int:
    return value + 1000 * index


@pytest.fixture
def mixed(tmp_path: str) -> Iterator[ProcessCluster]:
    cluster = ProcessCluster(native_worker_executable(), str(tmp_path))
    try:
        cluster.add_python_worker("python-1")
        cluster.add_worker("native-1")
        yield cluster
    finally:
        cluster.stop()


def mixed_client(cluster: ProcessCluster) -> Client:
    return Client(address=cluster.address, serializer=NeutralSerializer(python_objects=True), timeout_seconds=30)


def test_python_and_native_tasks_each_run_where_they_can(mixed: ProcessCluster) -> None:
    """Without routing about half of each kind would land on the other kind of worker and fail there."""
    assert scaler.native("add") is scaler.native_tasks.native("add")
    with mixed_client(mixed) as client:
        natives = [client.submit(scaler.native("add"), index, 1) for index in range(60)]
        pythons = [client.submit(plus_one, index) for index in range(60)]
        assert [future.result(RESULT_SECONDS) for future in natives] == list(range(1, 61))
        assert [future.result(RESULT_SECONDS) for future in pythons] == list(range(1, 61))
        assert client.map(scaler.native("mul"), [(i, i) for i in range(50)]) == [i * i for i in range(50)]
        assert client.map(plus_one, [(i,) for i in range(50)]) == list(range(1, 51))


def test_one_graph_mixes_python_and_native_nodes_both_ways(mixed: ProcessCluster) -> None:
    add, mul = scaler.native("add"), scaler.native("mul")
    graph = {
        "xs": [1, 2, 3],
        "total": (sum, "xs"),                   # Python
        "doubled": (mul, "total", 2),           # native, on a Python result
        "next": (plus_one, "doubled"),          # Python, on a native result
        "both": (add, "next", "total"),         # native, on a Python and a Python-after-native result
        "report": (describe, "both", "done"),   # Python, a dict back to the caller
    }
    with mixed_client(mixed) as client:
        assert client.get(graph, ["doubled", "both", "report"]) == {
            "doubled": 12, "both": 19, "report": {"label": "done", "total": 19},
        }
        # A Python value with no neutral form reaches a native node: that node fails, saying why.
        with pytest.raises(SerializationError):
            client.get({"s": (set, [1, 2]), "n": (add, "s", 1)}, ["n"])


def test_a_worker_killed_in_the_middle_of_a_mixed_graph_loses_no_result(mixed: ProcessCluster) -> None:
    """200 chains python -> native -> python -> native. Once a tenth of the nodes are done the native worker
    is SIGKILLed; the scheduler notices, the native nodes it held wait for a native worker, a new one joins,
    and every chain ends with its own result, once: the scheduler counts exactly one success per node."""
    add, sleep_ms = scaler.native("add"), scaler.native("sleep_ms")
    chains = 200
    graph: dict = {}
    for index in range(chains):
        graph[f"ms{index}"] = (milliseconds_for, index)                   # Python
        graph[f"slept{index}"] = (sleep_ms, f"ms{index}")               # native: returns its argument
        graph[f"tagged{index}"] = (tagged, f"slept{index}", index)      # Python
        graph[f"sum{index}"] = (add, f"tagged{index}", f"ms{index}")    # native
    sinks = [f"sum{index}" for index in range(chains)]
    expected = {f"sum{i}": 2 * milliseconds_for(i) + 1000 * i for i in range(chains)}
    victim = mixed.processes[-1]
    with MonitorSubscriber(default_monitor_address(mixed.address)) as monitor, mixed_client(mixed) as client:
        assert client.submit(add, 1, 1).result(RESULT_SECONDS) == 2  # the native worker is up
        assert client.submit(plus_one, 1).result(RESULT_SECONDS) == 2  # and the Python one
        before = wait_for_snapshot(monitor, lambda s: s.tasks.success >= 2, FEED_SECONDS, "the warm-up tasks").tasks
        futures = client.get(graph, sinks, block=False)
        # The native worker sleeps about 4 s in all: a tenth of the nodes done is well inside the run.
        wait_for_snapshot(
            monitor, lambda s: s.tasks.success - before.success >= len(graph) // 10, FEED_SECONDS, "progress"
        )
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        assert sum(future.done() for future in futures.values()) < chains, "the kill came after the run"
        wait_for_snapshot(
            monitor, lambda s: not any("native" in w.tags for w in s.workers), FEED_SECONDS, "the dead worker dropped"
        )
        mixed.add_worker("native-2")
        results = {key: future.result(RESULT_SECONDS) for key, future in futures.items()}
        assert results == expected
        after = wait_for_snapshot(
            monitor, lambda s: s.tasks.success - before.success >= len(graph) and not s.tasks.running,
            FEED_SECONDS, "every node's success",
        ).tasks
    assert after.success - before.success == len(graph), "a node succeeded twice, or one is missing"
    assert after.failed == before.failed
    assert victim.returncode == -signal.SIGKILL
