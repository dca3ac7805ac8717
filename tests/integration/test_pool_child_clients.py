"""A client made in a multiprocessing pool's child leaves the scheduler when the pool ends the child.

A pool's `terminate()` (`with Pool()`, joblib's "multiprocessing" backend at the end of each call) SIGTERMs
its workers, and a worker that ends by itself ends with `os._exit`: neither runs atexit, where a client's
fallback disconnect lives. Without scaler/utility/child_exit.py, the scheduler kept such a client until its
client timeout. Here that timeout is far longer than any wait, so a client seen leaving left by itself.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import time
from typing import Any, Callable

import pytest

from scaler import Client
from scaler.cluster.combo import free_local_address
from scaler.compat import cluster_choice
from tests.integration.forked_child import start_forked_child
from tests.integration.spawned import Spawned, Spawner, start_scheduler
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

# Far beyond any wait here: a client that leaves only by timing out is never seen leaving.
CLIENT_TIMEOUT_SECONDS = "3600"
WAIT_SECONDS = 60.0  # an upper bound against hangs on a loaded machine, never an expectation
POOL_SIZE = 2

_kept: list[Client] = []  # in the child: the user's own client, kept for the next call and never disconnected


def adapters_client(_: int) -> str:
    """What a Parallel(backend="scaler") call in a joblib "multiprocessing" child leaves behind: the adapters'
    client for SCALER_ADDRESS, kept for the child's next call. Its name is a client's default one."""
    cluster_choice.current_client()
    return f"{socket.gethostname()}|{os.getpid()}"


def kept_user_client(address: str) -> str:
    if not _kept:
        _kept.append(Client(address=address, timeout_seconds=30, name=f"kept-{os.getpid()}"))
    return _kept[0].name


def client_then_wait(address: str, sender: multiprocessing.connection.Connection) -> None:
    """A child that makes a client, says its name and waits to be terminated."""
    sender.send(kept_user_client(address))
    while True:
        time.sleep(1)


@pytest.fixture
def scheduler(spawn: Spawner) -> tuple[str, Spawned]:
    address = free_local_address()
    started = start_scheduler(spawn, address, "--client-timeout-seconds", CLIENT_TIMEOUT_SECONDS,
                              "--logging-level", "INFO")
    return address, started


@pytest.fixture
def by_environment(scheduler: tuple[str, Spawned], monkeypatch: pytest.MonkeyPatch) -> tuple[str, Spawned]:
    """The adapters find the scheduler through SCALER_ADDRESS, which the pool's children inherit."""
    monkeypatch.setattr(cluster_choice, "_used", [])
    monkeypatch.setenv(cluster_choice.ADDRESS_ENVIRONMENT_VARIABLE, scheduler[0])
    return scheduler


def names_made_in_pool(call: Callable[[Any], str], argument: object, terminate: bool) -> set[str]:
    """The names of the clients `call(argument)` made or found in the workers of a fork pool, once the pool has
    ended: by `terminate()` (SIGTERM) or by `close()` and `join()` (the workers end by themselves)."""
    pool = multiprocessing.get_context("fork").Pool(POOL_SIZE)
    try:
        pending = pool.map_async(call, [argument] * POOL_SIZE * 2, chunksize=1)
        names = set(pending.get(WAIT_SECONDS))
    finally:
        if terminate:
            pool.terminate()
        else:
            pool.close()
        pool.join()
    return names


def wait_until_left(scheduler: Spawned, names: set[str]) -> None:
    lines = {f"client {name} disconnected" for name in names}
    wait_until(lambda: all(line in scheduler.log() for line in lines), f"clients {sorted(names)} left", WAIT_SECONDS)
    assert "timed out" not in scheduler.log() and "lost its connection" not in scheduler.log()


def test_the_adapters_client_in_a_terminated_pool_worker_leaves(by_environment: tuple[str, Spawned]) -> None:
    """joblib's "multiprocessing" backend with a Parallel(backend="scaler") call in each child."""
    names = names_made_in_pool(adapters_client, 0, terminate=True)
    assert names
    wait_until_left(by_environment[1], names)


def test_the_adapters_client_in_a_pool_worker_that_ends_by_itself_leaves(by_environment: tuple[str, Spawned]) -> None:
    names = names_made_in_pool(adapters_client, 0, terminate=False)
    assert names
    wait_until_left(by_environment[1], names)


def test_a_users_kept_client_in_a_terminated_pool_worker_leaves(scheduler: tuple[str, Spawned]) -> None:
    address, spawned = scheduler
    names = names_made_in_pool(kept_user_client, address, terminate=True)
    assert names
    wait_until_left(spawned, names)


def test_a_terminated_child_still_ends_by_sigterm(scheduler: tuple[str, Spawned]) -> None:
    """The client leaves, and the child's exit status is SIGTERM's, as its parent expects."""
    address, spawned = scheduler
    child, receiver = start_forked_child(client_then_wait, address)
    try:
        assert receiver.poll(WAIT_SECONDS), "the child did not make its client"
        name = receiver.recv()
        child.terminate()
        child.join(WAIT_SECONDS)
        assert child.exitcode == -signal.SIGTERM
    finally:
        if child.is_alive():
            child.kill()
            child.join(WAIT_SECONDS)
        receiver.close()
    wait_until_left(spawned, {name})
