"""`scaler_symphony_cluster` against a test double of IBM's soamapi SDK (tests/symphony_double/), running the
service container of examples/symphony/ in service processes, with a real scheduler and real clients.

The double is not IBM's code and this is not a real Symphony cluster: it checks that the worker speaks the
documented SDK surface and the Scaler protocol correctly, not how Symphony itself behaves.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import time
from typing import Callable, Iterator

import pytest

from scaler import Client
from scaler.cluster.combo import free_local_address
from scaler.ui.feed import MonitorSubscriber
from tests.conftest import REPO_ROOT, child_python_environment, console_script
from tests.integration.scheduler_process import SchedulerProcess, wait_for_snapshot
from tests.integration.spawned import Spawned, Spawner, start_scheduler

pytestmark = pytest.mark.timeout(180)

DOUBLE = os.path.join(REPO_ROOT, "tests", "symphony_double")
SERVICE = os.path.join(REPO_ROOT, "examples", "symphony", "scaler_service.py")
WAIT_SECONDS = 60.0  # upper bounds only
# It ends its Symphony session on SIGTERM before it exits.
WORKER_STOP_SECONDS = 30.0


class SymphonyWorkerProcess(Spawned):
    def __init__(self, address: str, directory: str, base_concurrency: int, slots: int) -> None:
        environment = child_python_environment()
        environment["PYTHONPATH"] = os.pathsep.join([DOUBLE, environment["PYTHONPATH"]])
        environment["SOAMAPI_DOUBLE_SERVICES"] = f"ScalerService={SERVICE}"
        environment["SOAMAPI_DOUBLE_SLOTS"] = str(slots)
        super().__init__(
            [console_script("scaler_symphony_cluster"), address, "ScalerService",
             "--base-concurrency", str(base_concurrency), "--worker-name", "symphony-test"],
            os.path.join(directory, "symphony_worker.log"), environment,
        )


Cluster = Callable[..., Client]


@pytest.fixture
def symphony_cluster(tmp_path) -> Iterator[Cluster]:
    """symphony_cluster(base_concurrency, slots): a scheduler whose only worker is a Symphony worker; a client."""
    started: list = []

    def start(base_concurrency: int, slots: int) -> Client:
        scheduler = SchedulerProcess(str(tmp_path))
        started.append(scheduler)
        worker = SymphonyWorkerProcess(scheduler.address, str(tmp_path), base_concurrency, slots)
        started.append(worker)
        with MonitorSubscriber(scheduler.monitor_address) as monitor:
            wait_for_snapshot(
                monitor, lambda s: [w.name for w in s.workers] == ["symphony-test"], WAIT_SECONDS,
                f"the Symphony worker registered; its log:\n{worker.log()}",
            )
        client = Client(address=scheduler.address, timeout_seconds=60)
        started.append(client)
        return client

    try:
        yield start
    finally:
        for item in reversed(started):
            if isinstance(item, Client):
                item.disconnect()
            elif isinstance(item, SymphonyWorkerProcess):
                code = item.stop(WORKER_STOP_SECONDS)
                assert code == 0, item.log()
            else:
                item.stop()


def where_am_i() -> str:
    return os.path.basename(sys.argv[0])


def describe(value: int, *, unit: str, scale: int = 1) -> str:
    return f"{value * scale} {unit}"


class BadInput(ValueError):
    pass


def refuse(value: int) -> int:
    raise BadInput(f"no {value}")


def interval(_: int) -> tuple[float, float]:
    began = time.monotonic()
    time.sleep(0.3)
    return began, time.monotonic()


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return peak


def parent_waiting_on_a_child(client: Client, value: int) -> int:
    return client.submit(pow, value, 2).result(timeout=60) + 1


def hold_until_opened(started: str, gate: str) -> str:
    open(started, "w").close()
    deadline = time.monotonic() + WAIT_SECONDS
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    return "opened"


def test_without_the_sdk_the_command_says_what_to_install_and_exits() -> None:
    completed = subprocess.run(
        [console_script("scaler_symphony_cluster"), "tcp://127.0.0.1:2345", "ScalerService", "--base-concurrency", "4"],
        capture_output=True, text=True, timeout=60, env=child_python_environment(),
    )
    assert completed.returncode == 1
    assert "soamapi" in completed.stderr and "install" in completed.stderr, completed.stderr
    assert "Traceback" not in completed.stderr


def test_tasks_run_in_the_symphony_service_with_their_arguments_and_errors(symphony_cluster: Cluster) -> None:
    client = symphony_cluster(base_concurrency=2, slots=2)
    assert client.submit(where_am_i).result(timeout=WAIT_SECONDS) == "scaler_service.py"
    assert client.map(pow, [(value, 2) for value in range(20)]) == [value * value for value in range(20)]
    shared = client.send_object(1000)
    assert client.submit(describe, 3, unit="ms", scale=shared).result(timeout=WAIT_SECONDS) == "3000 ms"
    with pytest.raises(BadInput, match="no 7"):
        client.submit(refuse, 7).result(timeout=WAIT_SECONDS)


def test_no_more_unnested_tasks_run_at_once_than_the_base_concurrency(symphony_cluster: Cluster) -> None:
    client = symphony_cluster(base_concurrency=2, slots=4)
    intervals = client.map(interval, [(index,) for index in range(10)])
    assert most_at_once(intervals) <= 2


def test_nested_tasks_go_past_the_base_concurrency_so_waiting_parents_do_not_deadlock(
    symphony_cluster: Cluster,
) -> None:
    # The one base slot is held by a parent that waits on its child: only a child that goes past the
    # base concurrency (to the second Symphony slot) can run, as document 004 describes.
    client = symphony_cluster(base_concurrency=1, slots=2)
    futures = [client.submit(parent_waiting_on_a_child, client, value) for value in range(3)]
    assert [future.result(timeout=WAIT_SECONDS) for future in futures] == [1, 2, 5]


def test_a_cancel_stops_a_task_still_queued_and_is_refused_for_one_running_in_symphony(
    symphony_cluster: Cluster, tmp_path
) -> None:
    client = symphony_cluster(base_concurrency=1, slots=1)
    started, gate = str(tmp_path / "started"), str(tmp_path / "gate")
    running = client.submit(hold_until_opened, started, gate)
    deadline = time.monotonic() + WAIT_SECONDS
    while not os.path.exists(started):
        assert time.monotonic() < deadline, "the first task never started in Symphony"
        time.sleep(0.01)
    queued = client.submit(pow, 2, 10)  # behind the first: the base concurrency is 1
    assert queued.cancel() is True and queued.cancelled()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        refusal = pool.submit(running.cancel)
        # In Symphony, only a forced cancel could drop it: the worker refuses at once. Unanswered, the cancel
        # would wait for the client's whole timeout (60 s) and then say False all the same.
        assert refusal.result(timeout=WAIT_SECONDS / 2) is False
    assert not running.done()
    open(gate, "w").close()
    assert running.result(timeout=WAIT_SECONDS) == "opened"
    assert client.submit(pow, 2, 10).result(timeout=WAIT_SECONDS) == 1024


def test_given_a_standby_first_the_worker_moves_on_to_the_scheduler_that_serves(spawn: Spawner, tmp_path) -> None:
    """The scheduler addresses as every peer takes them, a standby's among them: refused there, it moves on."""
    first, second = free_local_address(), free_local_address()
    start_scheduler(spawn, first, "--monitor-address", f"ipc://{tmp_path}/first", name="first")
    start_scheduler(spawn, second, "--standby-of", first, name="standby")
    worker = SymphonyWorkerProcess(f"{second},{first}", str(tmp_path), base_concurrency=2, slots=2)
    try:
        with MonitorSubscriber(f"ipc://{tmp_path}/first") as monitor:
            wait_for_snapshot(
                monitor, lambda s: [w.name for w in s.workers] == ["symphony-test"], WAIT_SECONDS,
                f"the Symphony worker registered at the first scheduler; its log:\n{worker.log()}",
            )
        with Client(address=first, timeout_seconds=60) as client:
            assert client.submit(describe, 3, unit="tasks", scale=2).result(timeout=WAIT_SECONDS) == "6 tasks"
    finally:
        assert worker.stop(WORKER_STOP_SECONDS) == 0, worker.log()
