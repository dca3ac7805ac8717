"""Workers and stores outlive a scheduler killed with SIGKILL, and serve the same command started again on the
same address (PROTOCOL.md §21, docs/failure_model.md): the same processes, re-announced, and working."""

from __future__ import annotations

import functools
import pathlib
import re
import signal
import sys
import textwrap
import time

import psutil
import pytest

from scaler import Client
from scaler.cluster.combo import free_local_address
from scaler.store.store_client import StoreAddress, StoreClient
from tests.conftest import console_script
from tests.integration import waiting
from tests.integration.spawned import Spawner, start_scheduler
from tests.integration.test_cluster_store import directory_of, store_processes

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only"),
]

WAIT_SECONDS = 60.0  # an upper bound against hangs, never a measure
wait_until = functools.partial(waiting.wait_until, timeout=WAIT_SECONDS)

REANNOUNCED = r"welcomed again; re-announced (\d+) tasks held"
SCHEDULER_OPTIONS = [
    "--heartbeat-interval-seconds", "0.5", "--worker-timeout-seconds", "5", "--client-timeout-seconds", "5",
    "--logging-level", "INFO",
]

# A client of the first scheduler that dies with it: 8 tasks in flight, each of which says it started and then
# holds its worker until the test opens the gate (so the workers still hold them when the next scheduler answers,
# however long the restart takes on a loaded machine), and an object in the store.
OLD_CLIENT = textwrap.dedent("""
    import os, sys, time
    from scaler import Client

    def hold(gate, index):
        open(os.path.join(gate, f"started-{index}"), "w").close()
        deadline = time.monotonic() + 150
        while not os.path.exists(os.path.join(gate, "open")):
            if time.monotonic() > deadline:
                raise TimeoutError("the test never opened the gate")
            time.sleep(0.05)
        return index

    client = Client(address=sys.argv[1], timeout_seconds=300)
    reference = client.send_object(b"x" * (4 << 20))
    assert client.submit(len, reference).result(timeout=60) == 4 << 20
    futures = [client.submit(hold, sys.argv[2], index) for index in range(8)]
    print("in flight", flush=True)
    time.sleep(300)
""")


def agents_of(cluster_pid: int) -> set[int]:
    return {
        child.pid for child in psutil.Process(cluster_pid).children(recursive=True)
        if "scaler.worker.agent" in " ".join(child.cmdline())
    }


def started_tasks(gate: pathlib.Path) -> int:
    return sum(1 for path in gate.iterdir() if path.name.startswith("started-"))


def test_workers_and_their_store_outlive_a_sigkilled_scheduler_and_serve_the_next(
    spawn: Spawner, tmp_path: pathlib.Path
) -> None:
    address = free_local_address()
    scheduler = start_scheduler(spawn, address, *SCHEDULER_OPTIONS)
    cluster = spawn("cluster", [
        console_script("scaler_cluster"), "-n", "2", "--heartbeat-interval", "0.5",
        "--death-timeout-seconds", "60", "--logging-level", "INFO", "--no-borrowing", address,
    ])
    cluster.wait_for_log("all 2 workers registered")
    wait_until(lambda: directory_of(address).stores, "the store registered")
    (entry,) = directory_of(address).stores
    agents = agents_of(cluster.pid)
    (store,) = store_processes(cluster.pid)
    assert len(agents) == 2

    gate = tmp_path / "gate"
    gate.mkdir()
    old_client = spawn("old-client", [sys.executable, "-c", OLD_CLIENT, address, str(gate)])
    old_client.wait_for_log("in flight")
    # Killed once both workers run one of them: each then holds a task until the gate opens.
    wait_until(lambda: started_tasks(gate) >= 2, "both workers started a task of the old client")
    with StoreClient(StoreAddress(entry.data_address, entry.ipc_address, entry.host_key)) as store_client:
        objects_before = store_client.status().object_count
    assert objects_before >= 1, "the object is in the store (copied: --no-borrowing)"

    scheduler.process.send_signal(signal.SIGKILL)
    old_client.process.send_signal(signal.SIGKILL)  # its own survival is the client's business, not this test's
    scheduler.wait_exit()
    time.sleep(2.0)  # the operator restarts the same command a little later
    restarted = start_scheduler(spawn, address, *SCHEDULER_OPTIONS, name="scheduler-again")

    wait_until(lambda: len(re.findall(REANNOUNCED, cluster.log())) == 2, "both workers rejoined")
    held = [int(count) for count in re.findall(REANNOUNCED, cluster.log())]
    assert all(count > 0 for count in held), f"each worker re-announced the tasks it held: {held}"
    wait_until(lambda: directory_of(address).stores == [entry], "the store registered with the new scheduler")
    restarted.wait_for_log("re-announced")
    assert "refused us" not in cluster.log()
    assert agents_of(cluster.pid) == agents, "the same worker processes, none replaced"
    assert store.is_running() and store_processes(cluster.pid) == [store]
    with StoreClient(StoreAddress(entry.data_address, entry.ipc_address, entry.host_key)) as store_client:
        assert store_client.status().object_count >= objects_before, "the store kept its objects"

    (gate / "open").touch()  # the old client's tasks end; the workers are free for the new client's
    with Client(address=address, timeout_seconds=30) as client:
        assert client.map(abs, [(-value,) for value in range(20)]) == list(range(20))
        assert client.submit(pow, 2, 10).result(timeout=WAIT_SECONDS) == 1024
    assert agents_of(cluster.pid) == agents
