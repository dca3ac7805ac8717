"""priority= from every entry point reaches the scheduler, which runs a client's higher priorities first.

One worker that holds one task at a time (`per_worker_queue_size=1`) runs a blocker; the test queues tasks
of several priorities behind it, waits until the scheduler's monitor feed counts them all as queued, then
lets the blocker end. The worker then runs them one by one, each appending its label to a file: the order
in that file is the order the scheduler chose. Submission order always differs from the expected order,
so a priority that is lost or ignored on the way fails the test.
"""

from __future__ import annotations

import os
import pathlib
import threading
import time
from typing import Any, Callable, Iterator

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.compat import cluster_choice
from scaler.protocol.monitor_feed import MonitorSubscriber
from scaler.utility.blocking import running_task_priority
from tests.integration.scheduler_process import wait_for_snapshot
from tests.integration.waiting import wait_for_file

pytestmark = pytest.mark.timeout(120)

GATE_SECONDS = 60.0

def hold(gate: str) -> str:
    """The blocker: says it started, then holds the worker until the test opens the gate."""
    pathlib.Path(gate, "started").touch()
    wait_for_file(os.path.join(gate, "open"), GATE_SECONDS)
    return "blocker"


def record(log: str, label: str) -> str:
    with open(log, "a") as file:
        file.write(label + "\n")
    return label


def task_priority() -> int:
    """The priority the worker ran this task at, as a task submitted from inside it would inherit."""
    return running_task_priority()


def nested_priorities(client: Client, given: int | None) -> tuple[int, int]:
    """Inside a task: the priority a nested task runs at without and with `priority=given`."""
    inherited = client.submit(task_priority).result()
    explicit = client.submit(task_priority, priority=given).result()
    return inherited, explicit


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SchedulerClusterCombo, str]]:
    monitor_address = f"ipc://{tmp_path_factory.mktemp('monitor')}/feed"
    with SchedulerClusterCombo(
        n_workers=1, per_worker_queue_size=1, monitor_address=monitor_address, logging_level="WARNING"
    ) as cluster:
        yield cluster, monitor_address


@pytest.fixture
def client(one_slot: tuple[SchedulerClusterCombo, str]) -> Iterator[Client]:
    with Client(address=one_slot[0].get_address(), timeout_seconds=30) as connected:
        yield connected


class HeldWorker:
    """The worker held by a blocker; `queued(n)` waits until n tasks wait at the scheduler, `order()` opens
    the gate and gives the labels in the order they ran."""

    def __init__(self, client: Client, monitor_address: str, directory: pathlib.Path) -> None:
        self.log = str(directory / "order.log")
        self._gate = str(directory)
        self._monitor_address = monitor_address
        self._blocker = client.submit(hold, self._gate)
        wait_for_file(os.path.join(self._gate, "started"), GATE_SECONDS)

    def queued(self, count: int) -> None:
        with MonitorSubscriber(self._monitor_address) as monitor:
            wait_for_snapshot(monitor, lambda snapshot: snapshot.tasks.unassigned == count, 30, f"{count} queued")

    def release(self) -> None:
        pathlib.Path(self._gate, "open").touch()

    def order(self, count: int) -> list[str]:
        self.release()
        assert self._blocker.result(timeout=GATE_SECONDS) == "blocker"
        deadline = time.monotonic() + GATE_SECONDS
        while len(self._labels()) < count:
            assert time.monotonic() < deadline, f"only {self._labels()} ran"
            time.sleep(0.05)
        return self._labels()

    def _labels(self) -> list[str]:
        if not os.path.exists(self.log):
            return []
        return pathlib.Path(self.log).read_text().split()


@pytest.fixture
def held(client: Client, one_slot: tuple[SchedulerClusterCombo, str], tmp_path: pathlib.Path) -> Iterator[HeldWorker]:
    worker = HeldWorker(client, one_slot[1], tmp_path)
    try:
        yield worker
    finally:
        worker.release()  # a test that failed early leaves the worker free for the next


def in_background(call: Callable[[], Any]) -> Callable[[], Any]:
    """Run `call` on a thread (it blocks until its tasks are done); the returned function joins it."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:  # handed to the test's thread
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def join() -> Any:
        thread.join(GATE_SECONDS)
        assert outcome, "the call did not return"
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    return join


def test_submit_map_and_get_priorities(client: Client, held: HeldWorker) -> None:
    log = held.log
    client.submit(record, log, "low")
    mapped = in_background(lambda: client.map(record, [(log, "map"), (log, "map")], priority=3))
    held.queued(3)
    submitted = client.submit(record, log, "submit", priority=9)
    graph = {"k1": (record, log, "graph"), "k2": (record, log, "keyed")}
    futures = client.get(graph, ["k1", "k2"], block=False, priority=1, priorities={"k2": 8})
    held.queued(6)
    assert held.order(6) == ["submit", "keyed", "map", "map", "graph", "low"]
    assert submitted.result() == "submit" and mapped() == ["map", "map"]
    assert {key: future.result() for key, future in futures.items()} == {"k1": "graph", "k2": "keyed"}


def test_executor_priorities(client: Client, held: HeldWorker) -> None:
    from scaler.compat.futures import ScalerExecutor

    log = held.log
    client.submit(record, log, "low")
    with ScalerExecutor(client=client, priority=2) as executor:
        default = executor.submit(record, log, "executor")
        given = executor.submit(record, log, "given", priority=6)
        mapped = executor.map(record, [log], ["map"], priority=4)
        held.queued(4)
        assert held.order(4) == ["given", "map", "executor", "low"]
        assert (default.result(), given.result(), list(mapped)) == ("executor", "given", ["map"])


def test_joblib_priority(client: Client, held: HeldWorker) -> None:
    joblib = pytest.importorskip("joblib")
    import scaler.compat.joblib  # noqa: F401  (registers the backend)

    log = held.log
    client.submit(record, log, "low")

    def parallel() -> list[str]:
        with joblib.parallel_config(backend="scaler", priority=5):
            return joblib.Parallel(n_jobs=2)(joblib.delayed(record)(log, "joblib") for _ in range(1))

    with cluster_choice.use(client):
        joined = in_background(parallel)
        held.queued(2)
        assert held.order(2) == ["joblib", "low"]
        assert joined() == ["joblib"]


def test_dask_annotations_and_get_priority(client: Client, held: HeldWorker) -> None:
    dask = pytest.importorskip("dask")
    import scaler

    log = held.log
    client.submit(record, log, "low")
    with dask.annotate(priority=7):
        annotated = dask.delayed(record, pure=False)(log, "annotated")
    plain = dask.delayed(record, pure=False)(log, "graph")
    with cluster_choice.use(client):
        joined = in_background(lambda: dask.compute(annotated, plain, scheduler=scaler.get, priority=3))
        held.queued(3)
        assert held.order(3) == ["annotated", "graph", "low"]
        assert joined() == ("annotated", "graph")


def test_each_entry_point_gives_its_tasks_their_priority(combo: SchedulerClusterCombo) -> None:
    """Each task reports the priority its worker ran it at: it crossed the client, the scheduler and the worker.

    On two workers (conftest's combo): a worker holding one task at a time cannot run nested tasks."""
    dask = pytest.importorskip("dask")
    joblib = pytest.importorskip("joblib")
    import scaler
    from scaler.compat.futures import ScalerExecutor

    with Client(address=combo.get_address(), timeout_seconds=30) as client:
        assert client.submit(task_priority, priority=4).result(timeout=GATE_SECONDS) == 4
        assert client.submit(task_priority).result(timeout=GATE_SECONDS) == 0
        assert client.map(task_priority, [(), ()], priority=-3) == [-3, -3]
        graph = {"a": (task_priority,), "b": (task_priority,)}
        assert client.get(graph, ["a", "b"], priority=1, priorities={"b": 8}) == {"a": 1, "b": 8}
        with ScalerExecutor(client=client, priority=2) as executor:
            assert executor.submit(task_priority).result(timeout=GATE_SECONDS) == 2
            assert executor.submit(task_priority, priority=6).result(timeout=GATE_SECONDS) == 6
            assert list(executor.map(task_priority, priority=5)) == []  # no iterables: no calls
            assert list(executor.map(lambda _: task_priority(), [0], priority=5)) == [5]
        with cluster_choice.use(client):
            with joblib.parallel_config(backend="scaler", priority=5):
                assert joblib.Parallel(n_jobs=2)(joblib.delayed(task_priority)() for _ in range(2)) == [5, 5]
            with dask.annotate(priority=7):
                annotated = dask.delayed(task_priority, pure=False)()
            plain = dask.delayed(task_priority, pure=False)()
            assert dask.compute(annotated, plain, scheduler=scaler.get, priority=3) == (7, 3)
        # Inside a priority-6 task: a nested task without a priority inherits 6; one given -3 has -3.
        nested = client.submit(nested_priorities, client, -3, priority=6)
        assert nested.result(timeout=GATE_SECONDS) == (6, -3)


def test_bad_priorities_and_shares_fail_at_the_call(client: Client) -> None:
    import scaler
    from scaler.compat.futures import ScalerExecutor

    with pytest.raises(TypeError, match="priority must be an int"):
        client.submit(record, "x", "y", priority="high")
    with pytest.raises(TypeError, match="priority must be an int"):
        client.map(record, [("x", "y")], priority=1.5)
    with pytest.raises(TypeError, match="priority must be an int"):
        client.get({"k": (record, "x", "y")}, "k", priority=True)
    with pytest.raises(TypeError, match="key 'k'"):
        client.get({"k": (record, "x", "y")}, "k", priorities={"k": "high"})
    with pytest.raises(TypeError, match="priority must be an int"):
        ScalerExecutor(client=client, priority="high")
    with pytest.raises(TypeError, match="priority must be an int"):
        scaler.get({"k": (record, "x", "y")}, "k", priority=2.0)
    with pytest.raises(ValueError, match="share must be a finite number above 0"):
        Client(address=client.address, share=0)
    with pytest.raises(TypeError, match="share must be a number"):
        Client(address=client.address, share="2")
    with Client(address=client.address, share=2.5) as weighted:
        assert weighted.share == 2.5
        assert weighted.submit(task_priority).result(timeout=GATE_SECONDS) == 0
