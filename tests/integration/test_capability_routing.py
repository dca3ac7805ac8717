"""Capability routing with real processes: a task requiring tags runs only on a worker started with them,
waits (and shows in the monitor feed) while no such worker is connected, and fails with
NoCapableWorkerError after the client's limit. Bad tags are an error at the call.
"""

from __future__ import annotations

import os
from typing import Iterator

import joblib
import pytest

from scaler import Client, Cluster, SchedulerClusterCombo
from scaler.compat.cluster_choice import use
from scaler.compat.futures import ScalerExecutor
from scaler.errors import NoCapableWorkerError
from scaler.scheduler.config import default_monitor_address
from scaler.ui.feed import MonitorSubscriber
from scaler.worker.config import WorkerConfig
from tests.conftest import console_script
from tests.integration.scheduler_process import wait_for_snapshot
from tests.integration.spawned import Spawner

pytestmark = pytest.mark.timeout(120)

RESULT_SECONDS = 60.0


def agent_pid() -> int:
    """The worker agent running this task: the parent of the processor process that calls it."""
    return os.getppid()


def double(value: int) -> int:
    return 2 * value


@pytest.fixture(scope="module")
def combo() -> Iterator[SchedulerClusterCombo]:
    """Instead of conftest's, for its `client` too: one worker with no operator tags (so: "python" only)."""
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as cluster:
        yield cluster


def gpu_cluster(address: str) -> Cluster:
    cluster = Cluster(WorkerConfig(address=address, logging_level="WARNING"), ["gpu-worker"], tags={"gpu"})
    cluster.start()
    return cluster


def test_tasks_requiring_gpu_run_only_on_the_gpu_worker_through_every_api(
    combo: SchedulerClusterCombo, client: Client
) -> None:
    gpu = gpu_cluster(combo.get_address())
    try:
        gpu_pids = set(gpu.worker_pids)
        submitted = {client.submit(agent_pid, tags={"gpu"}).result(RESULT_SECONDS) for _ in range(10)}
        mapped = set(client.map(agent_pid, [()] * 30, tags={"gpu"}))
        graph = {"a": (agent_pid,), "b": (agent_pid,), "both": (list, ["a", "b"])}
        from_graph = set(client.get(graph, ["both"], tags=["gpu"])["both"])
        with ScalerExecutor(client=client, tags={"gpu"}) as executor:
            executed = set(executor.map(agent_pid, timeout=RESULT_SECONDS))
            executed |= set(executor.map(lambda _: agent_pid(), range(20)))
            executed.add(executor.submit(agent_pid).result(RESULT_SECONDS))
        with use(client), joblib.parallel_config(backend="scaler", tags={"gpu"}):
            batched = set(joblib.Parallel(n_jobs=2)(joblib.delayed(agent_pid)() for _ in range(20)))
        for name, seen in [("submit", submitted), ("map", mapped), ("get", from_graph), ("executor", executed),
                           ("joblib", batched)]:
            assert seen and seen <= gpu_pids, f"{name}: tasks requiring gpu ran on {seen - gpu_pids}"
        untagged = set(client.map(agent_pid, [()] * 200))
        assert untagged - gpu_pids, "untagged tasks may still run on the plain worker"
    finally:
        gpu.shutdown()


def test_a_task_no_worker_can_run_waits_shows_in_the_monitor_and_runs_when_one_joins(
    combo: SchedulerClusterCombo, client: Client, spawn: Spawner
) -> None:
    address = combo.get_address()
    with MonitorSubscriber(default_monitor_address(address)) as monitor:
        future = client.submit(double, 21, tags={"gpu"})
        snapshot = wait_for_snapshot(
            monitor, lambda s: [(w.tags, w.tasks) for w in s.waiting_for_tags] == [(["gpu", "python"], 1)],
            30.0, "one task waiting for {gpu, python} (a Python function also requires python)",
        )
        assert all("gpu" not in worker.tags and "python" in worker.tags for worker in snapshot.workers)
        assert not future.done()
        worker = spawn("gpu-worker", [console_script("scaler_cluster"), "-n", "1", "--tags", "gpu", address])
        assert future.result(RESULT_SECONDS) == 42
        snapshot = wait_for_snapshot(monitor, lambda s: not s.waiting_for_tags, 30.0, "the wait ended")
        assert any(worker.tags == ["gpu", "python"] for worker in snapshot.workers)
        worker.stop()


def test_with_a_limit_a_task_no_worker_can_run_fails_naming_the_tags(combo: SchedulerClusterCombo) -> None:
    with Client(address=combo.get_address(), timeout_seconds=30, wait_for_tags_seconds=1) as client:
        future = client.submit(double, 1, tags={"fpga", "python"})
        with pytest.raises(NoCapableWorkerError) as raised:
            future.result(RESULT_SECONDS)
        message = str(raised.value)
        assert "{fpga, python}" in message and "none has {fpga}" in message and "{python}" in message
        assert client.submit(double, 2).result(RESULT_SECONDS) == 4, "the client goes on as before"


@pytest.mark.parametrize("tags, error", [
    ("gpu", TypeError), ({""}, ValueError), ({1}, TypeError), (5, TypeError), ({"a,b"}, ValueError),
])
def test_bad_tags_are_an_error_at_the_call(client: Client, tags: object, error: type) -> None:
    with pytest.raises(error, match="tag"):
        client.submit(double, 1, tags=tags)
    with pytest.raises(error, match="tag"):
        client.map(double, [(1,)], tags=tags)
    with pytest.raises(error, match="tag"):
        client.get({"x": (double, 1)}, ["x"], tags=tags)
    with pytest.raises(error, match="tag"):
        ScalerExecutor(client=client, tags=tags)
    with pytest.raises(error, match="tag"):
        Cluster(WorkerConfig(address=client.address), ["w"], tags=tags)
    with pytest.raises(error, match="tag"):
        with use(client), joblib.parallel_config(backend="scaler", tags=tags):
            joblib.Parallel(n_jobs=1)(joblib.delayed(double)(1) for _ in range(1))
    with pytest.raises(ValueError, match="wait_for_tags_seconds"):
        Client(address=client.address, wait_for_tags_seconds=-1)
