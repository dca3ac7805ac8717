"""Lost data (issue 15 point 5, PROTOCOL.md §18), with real processes: a store that dies takes objects with
it, and what is still needed comes back. A lost intermediate is made again by rerunning the task that
made it, a lost client object is put again by the client that sent it, and every future still gets
exactly one outcome, the right one.

A real scheduler and real `scaler_cluster` processes, each starting its own store, on this host; the
clients are real clients. A cluster is killed with SIGKILL, as a machine that vanishes.
"""

from __future__ import annotations

import functools
import hashlib
import os
import signal
import sys
import time
from typing import Iterator

import psutil
import pytest

from scaler import Client
from scaler.cluster.combo import free_local_address
from scaler.errors import ObjectLostError
from scaler.store.store_client import StoreAddress, StoreClient
from tests.conftest import console_script
from tests.integration import waiting
from tests.integration.spawned import Spawned, Spawner, start_scheduler
from tests.integration.test_fault_injection import DeliverySpy
from tests.integration.waiting import wait_for_file

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only"),
]

MB = 1 << 20
PART_BYTES = 1 * MB
PARTS = 8
WAIT_SECONDS = 120.0  # an upper bound against hangs, never a measure
wait_until = functools.partial(waiting.wait_until, timeout=WAIT_SECONDS)
# A store that stops answering is dropped by the scheduler after this (its stores time out as workers do).
PEER_TIMEOUT_SECONDS = "3"
FETCH_TIMEOUT_SECONDS = 6.0


# ---------------------------------------------------------------------------------------------- tasks


def make_part(index: int, size: int) -> bytes:
    return hashlib.sha256(b"part-%d" % index).digest() * (size // 32)


def make_part_noted(index: int, size: int, directory: str) -> bytes:
    """make_part, leaving a file behind once the part is made (its value is then the worker's alone)."""
    part = make_part(index, size)
    with open(os.path.join(directory, f"part-{index}"), "w"):
        pass
    return part


def digest_of(part: bytes, gate: bool, blob: bytes, index: int) -> tuple[int, str, int]:
    return index, hashlib.sha256(part).hexdigest(), len(blob)


def expected_digest(index: int, blob: bytes) -> tuple[int, str, int]:
    return index, hashlib.sha256(make_part(index, PART_BYTES)).hexdigest(), len(blob)


# ---------------------------------------------------------------------------------------------- helpers


def start_cluster(
    spawn: Spawner, name: str, address: str, capacity_bytes: int, workers: int = 2, *options: str
) -> Spawned:
    cluster = spawn(name, [
        console_script("scaler_cluster"), "-n", str(workers), "--store-capacity-bytes", str(capacity_bytes),
        "--death-timeout-seconds", "30", *options, address,
    ])
    cluster.wait_for_log(f"all {workers} workers registered")
    return cluster


def store_of(cluster: Spawned, client: Client) -> StoreAddress:
    """The store this cluster started, as the scheduler's directory names it to the client."""
    (store_process,) = [child for child in cluster.descendants() if "scaler.cli.store" in " ".join(child.cmdline())]
    stores = client._connection.stores

    def listed() -> str | None:
        ports = [
            f"tcp://127.0.0.1:{connection.laddr.port}" for connection in store_process.net_connections("tcp")
            if connection.status == psutil.CONN_LISTEN
        ]
        return next((port for port in ports if stores.address_of(port) is not None), None)

    wait_until(listed, "the store is in the client's directory")
    address = stores.address_of(listed() or "")
    assert address is not None
    return address


def kill_store_then_cluster(cluster: Spawned) -> None:
    """SIGKILL to the cluster's store (it cannot say goodbye), then to the cluster and its workers."""
    (store_process,) = [child for child in cluster.descendants() if "scaler.cli.store" in " ".join(child.cmdline())]
    store_process.kill()
    store_process.wait(WAIT_SECONDS)
    cluster.process.send_signal(signal.SIGKILL)
    cluster.wait_exit()


def object_count(store: StoreAddress) -> int:
    with StoreClient(store, local=True, timeout_seconds=10) as reader:
        return reader.status().object_count


@pytest.fixture
def scheduler_address(spawn: Spawner) -> Iterator[str]:
    address = free_local_address()
    start_scheduler(spawn, address, "--worker-timeout-seconds", PEER_TIMEOUT_SECONDS)
    yield address


# ---------------------------------------------------------------------------------------------- tests


def test_a_cluster_killed_while_its_store_holds_intermediates_and_an_object_loses_no_result(
    spawn: Spawner, scheduler_address: str, tmp_path
) -> None:
    # The first cluster's store has the most room: the client's home, where its object goes too.
    holder = start_cluster(spawn, "holder", scheduler_address, 2 << 30)
    gate = str(tmp_path / "gate")
    with Client(address=scheduler_address, timeout_seconds=60) as client:
        holder_store = store_of(holder, client)
        wait_until(lambda: client._connection.stores.home == holder_store.data_address, "the client's home")
        spy = DeliverySpy(client)
        blob = os.urandom(4 * MB)
        reference = client.send_object(blob, name="blob")
        made = tmp_path / "made"
        made.mkdir()
        graph: dict = {"gate": (wait_for_file, gate, 90.0)}
        for index in range(PARTS):
            graph[f"part-{index}"] = (make_part_noted, index, PART_BYTES, str(made))
            graph[f"digest-{index}"] = (digest_of, f"part-{index}", "gate", reference, index)
        keys = [f"digest-{index}" for index in range(PARTS)]
        futures = client.get(graph, keys, block=False)
        # Every part is made and held by the holder (its processors keep them until another process reads
        # them: worker/own_results.py), and the object by its store; none read yet: the gate holds their
        # readers back.
        wait_until(lambda: object_count(holder_store) >= 1, "the object is in the holder's store")
        wait_until(lambda: len(list(made.iterdir())) == PARTS, "the parts are made")

        # A reader sent its task before the scheduler dropped the dead holder waits out its input wait (and the
        # store client's grace) before reporting the part lost: 2 s, not the default 10, as the test waits for it.
        readers = start_cluster(spawn, "readers", scheduler_address, 1 << 30, 2, "--input-wait-seconds", "2")
        wait_until(lambda: len(client._connection.stores._addresses) == 2, "the readers' store registered")
        holder.process.send_signal(signal.SIGKILL)
        holder.wait_exit()
        with open(gate, "w"):
            pass

        results = {key: future.result(timeout=WAIT_SECONDS) for key, future in futures.items()}
        assert results == {f"digest-{index}": expected_digest(index, blob) for index in range(PARTS)}
        spy.assert_exactly_once(list(futures.values()))
        assert readers.process.poll() is None


def test_a_result_whose_store_dies_before_its_client_fetches_it_is_made_again_for_the_same_future(
    spawn: Spawner, scheduler_address: str
) -> None:
    doomed = start_cluster(spawn, "doomed", scheduler_address, 1 << 30)
    # The client's fetch from the dead store waits out the client's timeout (at most 10 s, more for large
    # objects; scaler/client/stored_results.py): short here, as the test waits for it. Heartbeats every second
    # keep a live scheduler well inside it.
    with Client(
        address=scheduler_address, timeout_seconds=FETCH_TIMEOUT_SECONDS, heartbeat_interval_seconds=1
    ) as client:
        doomed_store = store_of(doomed, client)
        spy = DeliverySpy(client)
        # The cluster that makes the results again; results are stored by whichever worker made them.
        start_cluster(spawn, "survivor", scheduler_address, 1 << 30)
        wait_until(lambda: len(client._connection.stores._addresses) == 2, "the survivor's store registered")
        stores = client._connection.stores
        fetch = stores.fetch
        killed: list[str] = []

        def fetch_after_the_holder_died(object_id: bytes, holder: str, *how_long: float | None):
            # The fault, at the worst moment: the doomed cluster dies just as the client fetches from its store.
            if holder == doomed_store.data_address and not killed:
                kill_store_then_cluster(doomed)
                killed.append(holder)
            return fetch(object_id, holder, *how_long)

        stores.fetch = fetch_after_the_holder_died  # type: ignore[method-assign]
        futures = [client.submit(make_part, index, PART_BYTES) for index in range(PARTS)]
        results = [future.result(timeout=WAIT_SECONDS) for future in futures]
        assert killed, "no result was stored by the doomed cluster: the fault never happened"
        assert results == [make_part(index, PART_BYTES) for index in range(PARTS)]
        spy.assert_exactly_once(futures)


def count_after(seconds: float, blob: bytes) -> int:
    time.sleep(seconds)
    return len(blob)


def test_workers_whose_own_store_died_read_from_the_holder_and_nothing_is_taken_for_lost(
    spawn: Spawner, tmp_path
) -> None:
    # The scheduler is slow to notice a silent store here: the workers must find out for themselves.
    address = free_local_address()
    scheduler = start_scheduler(spawn, address, "--worker-timeout-seconds", "60")
    holder = start_cluster(spawn, "holder", address, 2 << 30)
    with Client(address=address, timeout_seconds=60) as client:
        holder_store = store_of(holder, client)
        wait_until(lambda: client._connection.stores.home == holder_store.data_address, "the client's home")
        # Its processors' reads through their dead store give up after the input wait (and the store client's
        # grace), then go to the holder: 2 s, not the default 10, as the test waits for it.
        orphaned = start_cluster(spawn, "orphaned", address, 1 << 30, 2, "--input-wait-seconds", "2")
        wait_until(lambda: len(client._connection.stores._addresses) == 2, "the second store registered")
        (store_process,) = [
            child for child in orphaned.descendants() if "scaler.cli.store" in " ".join(child.cmdline())
        ]
        store_process.kill()
        store_process.wait(WAIT_SECONDS)
        blob = os.urandom(2 * MB)
        reference = client.send_object(blob, name="blob")
        spy = DeliverySpy(client)
        futures = [client.submit(count_after, 0.2, reference) for _ in range(40)]
        assert [future.result(timeout=WAIT_SECONDS) for future in futures] == [len(blob)] * 40
        spy.assert_exactly_once(futures)
        ran_on = {line for line in orphaned.log().splitlines() if "could not be read" in line}
        assert not ran_on, f"a worker took a living object for lost: {sorted(ran_on)[:2]}"
    assert "Lineage:" not in scheduler.log(), "an object was taken for lost while its holder lived"


def test_a_lost_object_no_owner_can_send_again_fails_its_tasks_naming_it_for_every_client(
    spawn: Spawner, scheduler_address: str, tmp_path
) -> None:
    # The object's sender hands its reference to two other clients and leaves: they own the object (their tasks
    # use it) but never held it, so when its store dies, every owner answers the scheduler's resendObjects
    # with objectsLost at the same time, and their tasks fail with ObjectLostError naming the object.
    # Room for both clients' gate tasks and their other tasks.
    holder = start_cluster(spawn, "holder", scheduler_address, 2 << 30, workers=3)
    gate = str(tmp_path / "gate")
    with Client(address=scheduler_address, timeout_seconds=60) as first, \
            Client(address=scheduler_address, timeout_seconds=60) as second:
        holder_store = store_of(holder, first)
        with Client(address=scheduler_address, timeout_seconds=60) as sender:
            wait_until(lambda: sender._connection.stores.home == holder_store.data_address, "the sender's home")
            blob = os.urandom(4 * MB)
            reference = sender.send_object(blob, name="blob")
            wait_until(lambda: object_count(holder_store) >= 1, "the object is in the holder's store")
            futures = {}
            for client in (first, second):
                graph: dict = {"gate": (wait_for_file, gate, 90.0)}
                for index in range(PARTS // 2):
                    graph[f"digest-{index}"] = (digest_of, b"part", "gate", reference, index)
                futures[client] = client.get(graph, [f"digest-{index}" for index in range(PARTS // 2)], block=False)
                # The scheduler takes a client's messages in order: once this result is back, the graph (and the
                # client's claim on the object) is in.
                assert client.submit(len, b"ok").result(timeout=WAIT_SECONDS) == 2
        spies = {client: DeliverySpy(client) for client in (first, second)}

        readers = start_cluster(spawn, "readers", scheduler_address, 1 << 30)
        wait_until(lambda: len(first._connection.stores._addresses) == 2, "the readers' store registered")
        kill_store_then_cluster(holder)
        with open(gate, "w"):
            pass

        for client, client_futures in futures.items():
            for key, future in client_futures.items():
                error = future.exception(timeout=WAIT_SECONDS)
                assert isinstance(error, ObjectLostError), f"{key}: {error!r}"
                assert reference.object_id.hex() in str(error) and "could send it again" in str(error), str(error)
            spies[client].assert_exactly_once(list(client_futures.values()))
        # Both clients go on: their link and the cluster that is left work.
        assert first.submit(len, b"abc").result(timeout=WAIT_SECONDS) == 3
        assert second.submit(len, b"abcd").result(timeout=WAIT_SECONDS) == 4
        assert readers.process.poll() is None
