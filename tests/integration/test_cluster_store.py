"""A Cluster's store, for real: `scaler_cluster` starts it before its workers and stops it after them, it
registers with a real scheduler as a store (PROTOCOL.md §17), peers are told of it, and a SIGKILLed
cluster leaves neither a store process nor a shared-memory segment behind."""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
import uuid

import psutil
import pytest
import zmq

from scaler import Client, SchedulerClusterCombo
from scaler.cluster.cluster import Cluster
from scaler.cluster.combo import free_local_address
from scaler.cluster.store_settings import StoreSettings
from scaler.errors import ClusterStartError
from scaler.protocol import messages as m
from scaler.store.store_client import StoreAddress, StoreClient
from scaler.store.store_process import StoreProcess
from scaler.utility.host_key import this_host_key
from scaler.worker.config import WorkerConfig
from tests.conftest import child_python_environment, console_script
from tests.integration import waiting
from tests.integration.scheduler_process import SchedulerProcess
from tests.integration.spawned import Spawned, Spawner, start_scheduler

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only"),
]

WAIT_SECONDS = 60.0  # an upper bound against hangs, never a measure
wait_until = functools.partial(waiting.wait_until, timeout=WAIT_SECONDS)


def directory_of(address: str) -> m.StoreDirectory:
    """What a client on this host is told of the stores: hello as a peer in another language would."""
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.IDENTITY, f"probe-{uuid.uuid4().hex[:8]}".encode())
    try:
        socket.connect(address)
        socket.send(m.encode(m.Hello(role=m.Role.CLIENT, name="probe", host_key=this_host_key()))[0])
        assert socket.poll(WAIT_SECONDS * 1000), "no welcome"
        welcome = m.decode(socket.recv_multipart())
        assert isinstance(welcome, m.Welcome), welcome
        socket.send(m.encode(m.Disconnect(reason="seen enough"))[0])
        return welcome.store_directory
    finally:
        socket.close()
        context.term()


def store_processes(spawned_pid: int) -> list[psutil.Process]:
    return [
        child for child in psutil.Process(spawned_pid).children(recursive=True)
        if "scaler.cli.store" in " ".join(child.cmdline())
    ]


def scaler_segments() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if "scaler" in name or "psm_" in name}


def scheduler_at_a_free_address(spawn: Spawner) -> tuple[str, Spawned]:
    address = free_local_address()
    return address, start_scheduler(spawn, address)


def test_scaler_cluster_starts_its_store_first_and_peers_are_told_of_it(spawn: Spawner) -> None:
    address, scheduler = scheduler_at_a_free_address(spawn)
    cluster = spawn("cluster", [
        console_script("scaler_cluster"), "-n", "2", "--store-capacity-bytes", "123456789", address,
    ])
    cluster.wait_for_log("all 2 workers registered")

    wait_until(lambda: directory_of(address).stores, "the store registered")
    directory = directory_of(address)
    (entry,) = directory.stores
    assert directory.home_store == entry.data_address
    assert entry.host_key == this_host_key() and entry.ipc_address.startswith("ipc://")
    with StoreClient(StoreAddress(entry.data_address, entry.ipc_address, entry.host_key)) as store:
        assert store.status().capacity_bytes == 123456789
    (store_process,) = store_processes(cluster.pid)
    workers = [child for child in cluster.descendants() if "scaler.worker.agent" in " ".join(child.cmdline())]
    assert len(workers) == 2
    assert all(store_process.create_time() <= worker.create_time() for worker in workers)

    cluster.process.send_signal(signal.SIGTERM)
    assert cluster.wait_exit() == 0
    assert not store_process.is_running() or store_process.status() == psutil.STATUS_ZOMBIE
    wait_until(lambda: "disconnected" in scheduler.log().split("StoreRegistry: store", 1)[1], "the store said bye")
    assert directory_of(address).stores == []


@pytest.mark.parametrize("borrowing", [True, False], ids=["default", "no-borrowing"])
def test_no_borrowing_has_the_store_copy_what_a_client_on_its_host_would_lend(spawn: Spawner, borrowing: bool) -> None:
    address, _ = scheduler_at_a_free_address(spawn)
    cluster = spawn("cluster", [
        console_script("scaler_cluster"), "-n", "1", *([] if borrowing else ["--no-borrowing"]), address,
    ])
    cluster.wait_for_log("all 1 workers registered")
    wait_until(lambda: directory_of(address).stores, "the store registered")
    (entry,) = directory_of(address).stores
    payload = os.urandom(16 << 20)
    with StoreClient(StoreAddress(entry.data_address, entry.ipc_address, entry.host_key)) as store, \
            Client(address=address, timeout_seconds=60) as client:
        resident_before = store.status().resident_bytes
        reference = client.send_object(payload)
        assert client.submit(len, reference).result(timeout=60) == len(payload)
        grown = store.status().resident_bytes - resident_before
    if borrowing:
        assert grown < len(payload), "lent: the bytes stay in the client's memory"
    else:
        assert grown >= len(payload), "copied into the store's memory"


def test_no_store_means_none(spawn: Spawner) -> None:
    address, _ = scheduler_at_a_free_address(spawn)
    cluster = spawn("cluster", [console_script("scaler_cluster"), "-n", "1", "--no-store", address])
    cluster.wait_for_log("all 1 workers registered")
    assert store_processes(cluster.pid) == []
    assert directory_of(address) == m.StoreDirectory()


def test_a_sigkilled_cluster_leaves_no_store_and_no_segment(spawn: Spawner) -> None:
    segments_before = scaler_segments()
    address, _ = scheduler_at_a_free_address(spawn)
    cluster = spawn("cluster", [console_script("scaler_cluster"), "-n", "1", address])
    cluster.wait_for_log("all 1 workers registered")
    wait_until(lambda: directory_of(address).stores, "the store registered")
    (entry,) = directory_of(address).stores
    (store_process,) = store_processes(cluster.pid)
    # Objects in it, in shared memory and spilled, so that there is something to leave behind.
    with StoreClient(StoreAddress(entry.data_address, entry.ipc_address, entry.host_key)) as store:
        for index in range(3):
            store.put(b"object-%09d" % index, b"x" * (4 << 20))
        assert store.status().object_count == 3

    cluster.process.send_signal(signal.SIGKILL)
    cluster.wait_exit()

    wait_until(
        lambda: not store_process.is_running() or store_process.status() == psutil.STATUS_ZOMBIE,
        "the store exited with its cluster",
    )
    assert scaler_segments() <= segments_before

    def leftovers() -> list[psutil.Process]:
        return [
            process for process in psutil.process_iter(["cmdline", "status"])
            if entry.data_address in " ".join(process.info["cmdline"] or ())
            and process.info["status"] != psutil.STATUS_ZOMBIE
        ]

    # Its worker's processes notice their parent is gone within their watch interval, then exit.
    wait_until(lambda: leftovers() == [], "every process of the killed cluster exited")


def test_cluster_from_python_stops_its_store_after_its_workers(tmp_path) -> None:
    scheduler = SchedulerProcess(str(tmp_path))
    try:
        cluster = Cluster(WorkerConfig(address=scheduler.address), ["only"])
        cluster.start()
        try:
            store_pid = cluster.store_pid
            assert store_pid is not None and psutil.pid_exists(store_pid)
            assert cluster.store_address.startswith("tcp://127.0.0.1:")
            wait_until(lambda: directory_of(scheduler.address).stores, "the store registered")
            assert [entry.data_address for entry in directory_of(scheduler.address).stores] == [cluster.store_address]
        finally:
            cluster.shutdown()
        assert not psutil.pid_exists(store_pid) or psutil.Process(store_pid).status() == psutil.STATUS_ZOMBIE
        assert directory_of(scheduler.address).stores == []
    finally:
        scheduler.stop()


def test_a_store_that_cannot_start_stops_the_cluster_before_any_worker(tmp_path) -> None:
    # 192.0.2.0/24 is TEST-NET-1: no interface here has it, so the store cannot bind it.
    cluster = Cluster(
        WorkerConfig(address="tcp://127.0.0.1:9"), ["never"], store=StoreSettings(data_address="tcp://192.0.2.1"),
        start_timeout_seconds=30,
    )
    with pytest.raises(ClusterStartError, match="the store could not start.*192.0.2.1"):
        cluster.start()
    assert cluster.worker_pids == []
    assert cluster.store_pid is None


def test_store_settings_are_checked_where_given() -> None:
    with pytest.raises(ValueError, match="whole number"):
        StoreSettings(capacity_bytes=-1)
    with pytest.raises(ValueError, match="not a wildcard"):
        StoreSettings(data_address="tcp://0.0.0.0")
    with pytest.raises(ValueError, match="borrowing must be True or False"):
        StoreSettings(borrowing="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="StoreSettings or None"):
        Cluster(WorkerConfig(address="tcp://127.0.0.1:9"), ["a"], store=True)  # type: ignore[arg-type]


class SchedulerStandIn:
    """A ROUTER playing the scheduler's side of the control protocol, to see what a store says and to order it."""

    def __init__(self) -> None:
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        port = self.socket.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"
        self.peer = b""

    def receive(self, kind: type) -> m.Message:
        """The next message of this kind from the store (heartbeats in between are skipped unless asked for)."""
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            if not self.socket.poll(500):
                continue
            identity, *frames = self.socket.recv_multipart()
            self.peer = identity
            message = m.decode(frames)
            if isinstance(message, kind):
                return message
        raise AssertionError(f"no {kind.__name__} from the store within {WAIT_SECONDS:g}s")

    def send(self, message: m.Message) -> None:
        self.socket.send_multipart([self.peer, *m.encode(message)])

    def close(self) -> None:
        self.socket.close()
        self.context.term()


def test_a_store_speaks_the_store_role_and_obeys_the_scheduler(tmp_path) -> None:
    scheduler = SchedulerStandIn()
    try:
        with StoreProcess.start(
            capacity_bytes=1 << 30, spill_directory=str(tmp_path), scheduler_address=scheduler.address,
            name="the-store", heartbeat_interval_seconds=0.2, environment=child_python_environment(),
        ) as store:
            hello = scheduler.receive(m.Hello)
            assert (hello.role, hello.name, hello.pid, hello.capacity_bytes) == (
                m.Role.STORE, "the-store", store.pid, 1 << 30,
            )
            assert (hello.data_address, hello.ipc_address, hello.host_key) == (
                store.address.data_address, store.address.ipc_address, this_host_key(),
            )
            scheduler.send(m.Welcome(heartbeat_interval_ms=200, peer_timeout_ms=60_000))

            object_id = uuid.uuid4().bytes
            with StoreClient(store.address) as client:
                client.put(object_id, b"y" * (2 << 20))
                wait_until(lambda: scheduler.receive(m.Heartbeat).object_count == 1, "a heartbeat counting it")
                heartbeat = scheduler.receive(m.Heartbeat)
                assert heartbeat.bytes_held >= 2 << 20 and heartbeat.bytes_spilled == 0

                # A store linked to a scheduler takes deletes from it, and only from it.
                client.delete([object_id])
                assert client.status().object_count == 1
                scheduler.send(m.DeleteObjects(object_ids=[object_id]))
                wait_until(lambda: client.status().object_count == 0, "the object deleted on the scheduler's word")

            scheduler.send(m.Disconnect(reason="scheduler is shutting down"))
            assert store.process.wait(timeout=WAIT_SECONDS) == 0
    finally:
        scheduler.close()


def test_a_refused_store_stops_with_an_error_and_status_1_as_a_refused_worker_does(tmp_path) -> None:
    scheduler = SchedulerStandIn()
    log = tmp_path / "store.log"
    try:
        with StoreProcess.start(
            capacity_bytes=1 << 20, spill_directory=str(tmp_path), scheduler_address=scheduler.address,
            environment=child_python_environment(), logging_paths=(str(log),),
        ) as store:
            scheduler.receive(m.Hello)
            scheduler.send(m.Refused(reason="a store with data address X is registered already"))
            assert store.process.wait(timeout=WAIT_SECONDS) == 1
        assert "[ERROR]" in next(line for line in log.read_text().splitlines() if "registered already" in line)
    finally:
        scheduler.close()


def test_the_combo_passes_the_store_options_on() -> None:
    with SchedulerClusterCombo(n_workers=1, store_capacity_bytes=77_777_777) as combo:
        wait_until(lambda: directory_of(combo.get_address()).stores, "the store registered")
        (entry,) = directory_of(combo.get_address()).stores
        with StoreClient(StoreAddress(entry.data_address, entry.ipc_address, entry.host_key)) as store:
            assert store.status().capacity_bytes == 77_777_777
    with SchedulerClusterCombo(n_workers=1, store=False) as combo:
        assert directory_of(combo.get_address()) == m.StoreDirectory()
