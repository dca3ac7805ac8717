"""A store tells the scheduler what it holds and what it lost (PROTOCOL.md §17, §18), with real processes.

A real scheduler, a real store (`python -m scaler.store`) with little memory, a real worker and a client. The
client's object is spilled to disk; the test damages its spill file (as a failing disk would) and reads the
object itself, through the store, as no scaler peer: only the store can tell the scheduler it is gone. The
scheduler then asks the client for it again, and a task that needs it gets it. A copy that a worker's store
fetched is announced, so that it is deleted with its object instead of staying until the store stops.
"""

from __future__ import annotations

import functools
import os
import sys

import pytest

from scaler import Client
from scaler.cluster.combo import free_local_address
from scaler.store.store_client import StoreClient
from tests.conftest import console_script
from tests.integration import waiting
from tests.integration.spawned import Spawner, start_scheduler

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only"),
]

MB = 1 << 20
WAIT_SECONDS = 60.0  # an upper bound against hangs, never a measure
wait_until = functools.partial(waiting.wait_until, timeout=WAIT_SECONDS)


def spill_files(store_pid: int, spill_directory: str) -> list[str]:
    """The /proc paths of the store's open spill files (unlinked files in the spill directory)."""
    found = []
    fd_directory = f"/proc/{store_pid}/fd"
    for name in os.listdir(fd_directory):
        try:
            target = os.readlink(os.path.join(fd_directory, name))
        except OSError:
            continue  # closed meanwhile
        if target.startswith(spill_directory + os.sep):
            found.append(os.path.join(fd_directory, name))
    return found


def test_an_object_its_store_lost_is_reported_by_the_store_and_sent_again_by_its_client(
    spawn: Spawner, tmp_path
) -> None:
    address = free_local_address()
    scheduler = start_scheduler(spawn, address)
    spill_directory = str(tmp_path / "spill")
    os.mkdir(spill_directory)
    store = spawn("store", [
        sys.executable, "-m", "scaler.cli.store", "--scheduler-address", address, "--capacity-bytes", str(8 * MB),
        "--spill-directory", spill_directory, "--name", "lossy",
        # Every object copied into its memory: a lent one would stay in the client's memory and never spill.
        "--no-borrowing",
    ])
    store.wait_for_log("registered with the scheduler")
    worker = spawn("worker", [console_script("scaler_cluster"), "-n", "1", "--no-store", address])
    worker.wait_for_log("all 1 workers registered")
    with Client(address=address, timeout_seconds=60) as client:
        stores = client._connection.stores
        wait_until(lambda: stores.home, "the client knows its home store")
        store_address = stores.address_of(stores.home)
        assert store_address is not None
        first = client.send_object(b"a" * (5 * MB), name="first")
        client.send_object(b"b" * (5 * MB), name="second")  # 10 MB over 8: the first goes to disk
        # Written whole (the store writes it as the test looks), then cut short under the store.
        wait_until(
            lambda: [path for path in spill_files(store.pid, spill_directory) if os.stat(path).st_size >= first.size],
            "the first object is spilled",
        )
        (spilled,) = spill_files(store.pid, spill_directory)
        os.truncate(spilled, 0)

        with StoreClient(store_address, local=True, timeout_seconds=10) as reader:
            with pytest.raises(Exception, match="lost"):
                reader.get(first.object_id, timeout=5)

        # Nobody the scheduler knows read it: it learns of the loss from the store alone.
        scheduler.wait_for_log("Lineage: 1 stored objects lost", timeout=WAIT_SECONDS)
        assert client.submit(len, first).result(timeout=WAIT_SECONDS) == 5 * MB
    assert "objectsLost" not in scheduler.log()  # no protocolError for the store's report


def test_a_copy_a_store_fetched_for_its_worker_is_deleted_with_the_object(spawn: Spawner, tmp_path) -> None:
    address = free_local_address()
    start_scheduler(spawn, address)
    # The client's home: the store with the most room on this host, with no worker of its own.
    home = spawn("home", [
        sys.executable, "-m", "scaler.cli.store", "--scheduler-address", address, "--capacity-bytes", str(1 << 30),
        "--name", "home",
    ])
    home.wait_for_log("registered with the scheduler")
    cluster = spawn("cluster", [
        console_script("scaler_cluster"), "-n", "1", "--store-capacity-bytes", str(256 * MB), address,
    ])
    cluster.wait_for_log("all 1 workers registered")
    with Client(address=address, timeout_seconds=60) as client:
        stores = client._connection.stores
        wait_until(lambda: len(stores._addresses) == 2 and stores.home, "both stores registered")
        addresses = [stores.address_of(data_address) for data_address in stores._addresses]
        worker_store = next(store for store in addresses if store is not None and store.data_address != stores.home)
        reference = client.send_object(os.urandom(4 * MB), name="blob")
        # The worker reads it through its own store, which fetches a copy from the client's home store.
        assert client.submit(len, reference).result(timeout=WAIT_SECONDS) == 4 * MB
        wait_until(lambda: object_count(worker_store) == 1, "the worker's store keeps a copy")
        client.clear()  # the client lets go of its object: every copy goes
        wait_until(lambda: object_count(worker_store) == 0, "the copy is deleted")


def object_count(store) -> int:
    with StoreClient(store, local=True, timeout_seconds=10) as reader:
        return reader.status().object_count
