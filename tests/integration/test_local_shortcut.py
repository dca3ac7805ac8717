"""Peers on the scheduler's machine reach its loopback address over a Unix socket (scaler/utility/local_shortcut.py):
what a user sees with `ss` or psutil, with the shortcut on, turned off on either side, and with its name taken by
another user's process first. A real scheduler, workers and client over real sockets."""

from __future__ import annotations

import os
import socket
from typing import Callable

import psutil
import pytest

from scaler import Client
from scaler.utility.local_shortcut import SHORTCUT_ENV
from tests.conftest import console_script
from tests.integration.spawned import Spawned, Spawner
from tests.integration.waiting import wait_until
from tests.protocol.conftest import free_tcp_address

pytestmark = pytest.mark.timeout(120)

RESULT_SECONDS = 60.0  # an upper bound against hangs on a loaded machine, never an expectation

Start = Callable[..., Spawned]


def plus_one(value: int) -> int:
    return value + 1


@pytest.fixture
def start(spawn: Spawner) -> Start:
    """start(name, args, shortcut=True): spawn's, with the shortcut turned off in that process unless `shortcut`."""
    def run(name: str, args: list[str], shortcut: bool = True) -> Spawned:
        return spawn(name, args, None if shortcut else {SHORTCUT_ENV: "off"})

    return run


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def _tcp_connections_to(port: int, processes: list[psutil.Process]) -> int:
    return sum(
        1 for process in processes for connection in process.net_connections("tcp")
        if connection.raddr and connection.raddr.port == port
    )


def _shortcut_connections(scheduler: Spawned, port: int) -> int:
    """The connections the scheduler accepted on its shortcut. psutil names an abstract socket with a leading @, and
    shows the listening socket as it shows those it accepted (no peer address, no state): one less than it lists."""
    name = f"@scaler-{os.getuid()}-127.0.0.1-{port}"
    listed = [connection for connection in psutil.Process(scheduler.process.pid).net_connections("unix")
              if connection.laddr == name]
    return max(0, len(listed) - 1)


def _start_cluster(start: Start, address: str, shortcut: bool) -> tuple[Spawned, Spawned]:
    scheduler = start("scheduler", [console_script("scaler_scheduler"), "--logging-level", "DEBUG", address])
    scheduler.wait_for_log(f"listening on {address}")
    workers = start("workers", [console_script("scaler_cluster"), "-n", "2", address], shortcut=shortcut)
    return scheduler, workers


def _peers(workers: Spawned) -> list[psutil.Process]:
    """This process (the client) and the workers' agents (the cluster's store keeps libzmq's DEALER)."""
    return [psutil.Process(), *(process for process in workers.descendants()
                                if "scaler.worker.agent" in process.cmdline())]


def test_a_client_and_workers_on_the_schedulers_machine_connect_over_its_unix_socket(start: Start) -> None:
    address = free_tcp_address()
    scheduler, workers = _start_cluster(start, address, shortcut=True)
    with Client(address=address, timeout_seconds=30) as client:
        assert [client.submit(plus_one, index).result(RESULT_SECONDS) for index in range(20)] == list(range(1, 21))
        assert client.map(plus_one, [(index,) for index in range(200)]) == list(range(1, 201))
        port = _port(address)
        # The client and both workers' agents; not one of them holds a TCP connection to the port.
        wait_until(lambda: _shortcut_connections(scheduler, port) >= 3, "the peers on the shortcut", RESULT_SECONDS)
        assert _tcp_connections_to(port, _peers(workers)) == 0


@pytest.mark.parametrize("side", ["peers", "scheduler"])
def test_turned_off_on_either_side_the_peers_connect_over_tcp(
    start: Start, side: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    address = free_tcp_address()
    if side == "scheduler":
        scheduler = start("scheduler", [console_script("scaler_scheduler"), address], shortcut=False)
        scheduler.wait_for_log(f"listening on {address}")
        workers = start("workers", [console_script("scaler_cluster"), "-n", "2", address])
    else:
        monkeypatch.setenv(SHORTCUT_ENV, "off")  # for the client, in this process
        scheduler, workers = _start_cluster(start, address, shortcut=False)
        scheduler.wait_for_log("peers on this machine connect over")  # it serves one: they choose TCP
    with Client(address=address, timeout_seconds=30) as client:
        assert client.map(plus_one, [(index,) for index in range(50)]) == list(range(1, 51))
        port = _port(address)
        wait_until(lambda: _tcp_connections_to(port, _peers(workers)) >= 3, "the peers on TCP", RESULT_SECONDS)
        assert _shortcut_connections(scheduler, port) == 0


@pytest.mark.skipif(os.getuid() != 0, reason="needs root, to listen as another user under the scheduler's name")
def test_a_name_taken_first_by_another_user_is_not_used_and_the_cluster_works_over_tcp(start: Start) -> None:
    address = free_tcp_address()
    port = _port(address)
    name = f"\0scaler-{os.getuid()}-127.0.0.1-{port}"  # the scheduler's (root's) shortcut name
    read, write = os.pipe()
    squatter = os.fork()
    if squatter == 0:  # as nobody: bind the scheduler's shortcut name first, then report what it hears
        try:
            os.close(read)
            os.setgid(65534)
            os.setuid(65534)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(name)
            listener.listen(16)
            os.write(write, b"listening\n")
            heard = 0
            listener.settimeout(60)
            while True:
                connection, _ = listener.accept()
                connection.settimeout(5)
                heard += len(connection.recv(4096))
                os.write(write, f"heard {heard}\n".encode())
                connection.close()
        finally:
            os._exit(0)
    os.close(write)
    try:
        with os.fdopen(read, "rb", buffering=0) as reports:
            assert reports.readline() == b"listening\n"
            scheduler, workers = _start_cluster(start, address, shortcut=True)
            scheduler.wait_for_log("cannot serve peers on this machine over")
            with Client(address=address, timeout_seconds=30) as client:
                assert client.map(plus_one, [(index,) for index in range(50)]) == list(range(1, 51))
                wait_until(lambda: _tcp_connections_to(port, _peers(workers)) >= 3, "the peers on TCP", RESULT_SECONDS)
            scheduler.stop()
            workers.stop()
            os.kill(squatter, 9)
            # A peer that connected to the name saw it was not its own user's and closed without a byte.
            heard = reports.read().decode().splitlines()
            assert all(line == "heard 0" for line in heard), heard
    finally:
        try:
            os.kill(squatter, 9)
        except ProcessLookupError:
            pass
        os.waitpid(squatter, 0)
