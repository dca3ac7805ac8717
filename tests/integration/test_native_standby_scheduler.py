"""Native workers (native/worker/) with a standby scheduler (PROTOCOL.md §23), as the Python peers have it: given
both addresses they serve the first scheduler while it is up, whichever address they try first; when it is
killed with SIGKILL the standby takes over with the same native worker processes, and every future completes
once with its own result. The Python peers' cases are test_standby_scheduler.py."""

from __future__ import annotations

import os
import signal

import pytest

from scaler import Client
from scaler.native_tasks import NeutralSerializer, native
from scaler.ui.feed import MonitorSubscriber
from tests.integration.scheduler_process import wait_for_snapshot
from tests.integration.spawned import Spawned, Spawner
from tests.integration.test_native_worker_rejoin import long_and_short_tasks, runs
from tests.integration.test_standby_scheduler import start_pair
from tests.native_worker import BUILD_TIMEOUT_SECONDS, native_worker_executable

pytestmark = pytest.mark.timeout(120 + BUILD_TIMEOUT_SECONDS)

WAIT_SECONDS = 60.0  # an upper bound against hangs on a loaded machine, never an expectation
SHORT_TASKS = 60
LONG_MS = 3000  # long enough to be running, usually, when the standby takes over


def start_native_workers(spawn: Spawner, first: str, second: str) -> list[Spawned]:
    executable = native_worker_executable()
    # The second lists the standby first: refused there, it moves on to the one that serves.
    workers = [
        spawn(name, [
            executable, addresses, "--worker-name", name, "--threads", "2", "--heartbeat-interval", "0.3",
            "--death-timeout-seconds", "60", "--logging-level", "DEBUG",
        ])
        for name, addresses in (("native-1", f"{first},{second}"), ("native-2", f"{second},{first}"))
    ]
    for worker in workers:
        worker.wait_for_log(f"connected to the scheduler at {first}")
    return workers


def test_native_workers_serve_the_first_scheduler_then_the_standby_that_takes_over(spawn: Spawner, tmp_path) -> None:
    first, second, first_scheduler, standby = start_pair(spawn, tmp_path)
    workers = start_native_workers(spawn, first, second)
    pids = [worker.pid for worker in workers]
    with MonitorSubscriber(f"ipc://{tmp_path}/first") as first_monitor, \
            MonitorSubscriber(f"ipc://{tmp_path}/second") as second_monitor:
        wait_for_snapshot(first_monitor, lambda s: len(s.workers) == 2, WAIT_SECONDS,
                          "the first scheduler serving both native workers")
        snapshot = wait_for_snapshot(second_monitor, lambda s: True, WAIT_SECONDS, "a snapshot of the standby")
        assert snapshot.workers == [], "a native worker registered at the standby while the first serves"

    addresses = f"{first},{second}"
    with Client(
        address=addresses, serializer=NeutralSerializer(), timeout_seconds=60, heartbeat_interval_seconds=0.3
    ) as client:
        long_futures, futures, durations, completions = long_and_short_tasks(
            client, workers, LONG_MS, SHORT_TASKS, 20, WAIT_SECONDS
        )

        os.kill(first_scheduler.pid, signal.SIGKILL)
        first_scheduler.wait_exit()
        standby.wait_for_log("taking over")

        assert [future.result(timeout=WAIT_SECONDS) for future in futures] == durations
        assert [future.result(timeout=WAIT_SECONDS) for future in long_futures] == [LONG_MS, LONG_MS + 1]
        with MonitorSubscriber(f"ipc://{tmp_path}/second") as second_monitor:
            wait_for_snapshot(second_monitor, lambda s: len(s.workers) == 2, WAIT_SECONDS,
                              "the standby serving both native workers")
        # The same workers serve new work under the standby.
        assert client.map(native("mul"), [(value, value) for value in range(10)]) == [v * v for v in range(10)]
    assert sorted(completions.counts.values()) == [1] * (SHORT_TASKS + 2), "a future completed more than once"

    logs = "".join(worker.log() for worker in workers)
    assert logs.count(f"trying the scheduler at {second}") >= 2 and logs.count("welcomed again") == 2, \
        "both workers moved to the standby and rejoined it"
    ran_again = sorted(task_id for task_id, count in runs(workers).items() if count > 1)
    assert ran_again == [], "tasks whose result a worker held (or that it still ran) ran again"
    assert "refused us" not in logs
    assert [worker.pid for worker in workers] == pids and all(worker.process.poll() is None for worker in workers)
