"""The object path (issue 15): large arguments, objects and results go through a store; the scheduler moves
only their ids, sizes and holders.

A real scheduler and real workers (SchedulerClusterCombo), a real store process with real shared memory,
a real client. The store registers with the scheduler as a peer of role `store`: here a registration the
test plays over a real socket on the store's behalf (hello with its addresses, heartbeats, and the
scheduler's deleteObjects passed on to the store), until the store links to the scheduler by itself.
"""

from __future__ import annotations

import os
import socket as socket_module
import sys
import threading
import time
import uuid
from typing import Callable, Iterator

import pytest
import zmq

from scaler import Client, SchedulerClusterCombo
from scaler.protocol import messages as m
from scaler.store.store_client import StoreClient
from scaler.store.store_process import StoreProcess
from scaler.utility.host_key import this_host_key
from scaler.utility.zmq_util import configure_socket, has_input, receive_frames, send_message
from tests.conftest import child_python_environment

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only"),
]

MB = 1 << 20
WAIT_SECONDS = 60.0  # an upper bound against hangs, never a measure


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_SECONDS}s: {what}"
        time.sleep(0.05)


class StoreRegistration:
    """The store's peer role at the scheduler, played for a standalone store: hello, heartbeats, deletes."""

    def __init__(self, scheduler_address: str, store: StoreProcess) -> None:
        self._scheduler_address = scheduler_address
        self._store = store
        self.deleted: list[bytes] = []
        self.welcomed = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self.welcomed.wait(WAIT_SECONDS), "the scheduler did not welcome the store"

    def _run(self) -> None:
        context = zmq.Context()
        dealer = context.socket(zmq.DEALER)
        configure_socket(dealer, f"S|{uuid.uuid4().hex[:8]}".encode())
        dealer.connect(self._scheduler_address)
        address = self._store.address
        with StoreClient(address, local=True, context=context) as store:
            send_message(dealer, m.Hello(
                role=m.Role.STORE, name="test store", hostname=socket_module.gethostname(), pid=self._store.pid,
                host_key=address.host_key, data_address=address.data_address, ipc_address=address.ipc_address,
                capacity_bytes=1 << 30,
            ))
            last_heartbeat = time.monotonic()
            while not self._stop.is_set():
                if dealer.poll(100):
                    while has_input(dealer):
                        message = m.decode(receive_frames(dealer))
                        if isinstance(message, m.Welcome):
                            self.welcomed.set()
                        elif isinstance(message, m.DeleteObjects):
                            self.deleted.extend(message.object_ids)
                            store.delete(message.object_ids)
                if time.monotonic() - last_heartbeat > 1.0:
                    last_heartbeat = time.monotonic()
                    send_message(dealer, m.Heartbeat())
            send_message(dealer, m.Disconnect(reason="test over"))
        dealer.close(linger=500)
        context.term()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_SECONDS)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Iterator[StoreProcess]:
    with StoreProcess.start(
        spill_directory=str(tmp_path_factory.mktemp("spill")), capacity_bytes=1 << 30,
        environment=child_python_environment(),
    ) as started:
        yield started


@pytest.fixture(scope="module")
def cluster(store: StoreProcess) -> Iterator[tuple[SchedulerClusterCombo, StoreRegistration]]:
    combo = SchedulerClusterCombo(n_workers=2, logging_level="WARNING")
    registration = StoreRegistration(combo.get_address(), store)
    try:
        yield combo, registration
    finally:
        registration.close()
        combo.shutdown()


@pytest.fixture
def client(cluster) -> Iterator[Client]:
    combo, _ = cluster
    # The store registered before the client connects: the client's welcome names it as its home store.
    with Client(address=combo.get_address()) as connected:
        yield connected


def store_status(store: StoreProcess):
    with StoreClient(store.address, local=True) as reader:
        return reader.status()


def byte_count(data: bytes) -> int:
    return len(data)


def make_bytes(size: int, fill: int) -> bytes:
    return bytes([fill]) * size


def where_am_i(data: bytes) -> int:
    return os.getpid()


def test_a_large_argument_goes_through_the_store_and_is_deleted_once_its_task_is_done(
    client: Client, store: StoreProcess, cluster
) -> None:
    _, registration = cluster
    before = store_status(store).object_count
    argument = os.urandom(8 * MB)
    assert client.submit(byte_count, argument).result(timeout=WAIT_SECONDS) == len(argument)
    # The client put it into the store and the scheduler named it by id: it tells the store to delete it
    # once the task is done and the client released it.
    wait_until(lambda: registration.deleted, "the scheduler deletes the argument from its holder")
    wait_until(lambda: store_status(store).object_count == before, "the store drops the deleted argument")


def test_a_sent_object_is_put_into_the_store_and_read_by_the_task(client: Client, store: StoreProcess) -> None:
    before = store_status(store).held_bytes
    data = os.urandom(4 * MB)
    reference = client.send_object(data, name="big")
    assert reference.size >= len(data)
    assert store_status(store).held_bytes >= before + len(data)  # in the store before anything runs
    assert client.submit(byte_count, reference).result(timeout=WAIT_SECONDS) == len(data)


def test_a_large_result_comes_back_from_the_store_and_is_released_after_the_fetch(
    client: Client, store: StoreProcess, cluster
) -> None:
    _, registration = cluster
    deleted_before = len(registration.deleted)
    result = client.submit(make_bytes, 3 * MB, 7).result(timeout=WAIT_SECONDS)
    assert result == bytes([7]) * (3 * MB)
    wait_until(lambda: len(registration.deleted) > deleted_before, "the client releases the fetched result")


def test_a_graph_passes_a_large_intermediate_through_the_store(client: Client, cluster) -> None:
    _, registration = cluster
    deleted_before = len(registration.deleted)
    graph = {"data": (make_bytes, 2 * MB, 3), "size": (byte_count, "data")}
    assert client.get(graph, keys=["size"]) == {"size": 2 * MB}
    wait_until(lambda: len(registration.deleted) > deleted_before, "the quiet intermediate is deleted")


def test_many_results_of_a_map_come_back_through_the_store(client: Client, cluster) -> None:
    _, registration = cluster
    deleted_before = len(registration.deleted)
    results = client.map(make_bytes, [(MB, index) for index in range(8)])
    assert results == [bytes([index]) * MB for index in range(8)]
    wait_until(lambda: len(registration.deleted) >= deleted_before + 8, "the client releases every fetched result")


def test_small_tasks_stay_on_the_control_path(client: Client, store: StoreProcess) -> None:
    before = store_status(store)
    assert client.map(byte_count, [(b"x" * 1000,)] * 50) == [1000] * 50
    after = store_status(store)
    assert (after.object_count, after.held_bytes) == (before.object_count, before.held_bytes)


def test_the_client_puts_into_the_store_on_its_host(client: Client, store: StoreProcess) -> None:
    assert store.address.host_key == this_host_key()
    assert getattr(client._connection, "stores").home == store.address.data_address
