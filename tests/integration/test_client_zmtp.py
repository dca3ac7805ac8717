"""The client speaking ZMTP itself (SCALER_CLIENT_TRANSPORT=zmtp, scaler/client/client_link.py), with callers
that write their own submits (baton.py): results right and each delivered once from many threads at once,
done-callbacks, a scheduler that restarts or dies seen as with libzmq, and CURVE keys keeping libzmq. Real
processes over real sockets."""

from __future__ import annotations

import collections
import concurrent.futures
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Iterator

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.client.client_link import TRANSPORT_ENV, ZmqClientLink, ZmtpClientLink
from scaler.cluster.combo import free_local_address
from scaler.utility import curve
from tests.conftest import console_script
from tests.integration.spawned import Spawner, start_scheduler
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

RESULT_SECONDS = 60.0  # an upper bound against hangs on a loaded machine, never an expectation


def plus_one(value: int) -> int:
    return value + 1


def sleep_then(value: int, seconds: float) -> int:
    import time

    time.sleep(seconds)
    return value


@pytest.fixture
def zmtp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TRANSPORT_ENV, "zmtp")


@pytest.fixture
def zmtp_client(zmtp: None, combo: SchedulerClusterCombo) -> Iterator[Client]:
    with Client(address=combo.get_address(), timeout_seconds=30) as client:
        assert isinstance(client._connection._link, ZmtpClientLink)
        yield client


def test_submit_map_and_large_payloads_come_back_right(zmtp_client: Client) -> None:
    assert [zmtp_client.submit(plus_one, index).result(RESULT_SECONDS) for index in range(50)] == list(range(1, 51))
    assert zmtp_client.map(plus_one, [(index,) for index in range(300)]) == list(range(1, 301))
    large = b"x" * (9 << 20)  # frames of many reads and writes each way
    assert zmtp_client.submit(len, large).result(RESULT_SECONDS) == len(large)
    assert zmtp_client.submit(bytes, 4 << 20).result(RESULT_SECONDS) == bytes(4 << 20)
    with pytest.raises(ZeroDivisionError):
        zmtp_client.submit(divmod, 1, 0).result(RESULT_SECONDS)


def test_many_threads_submitting_and_waiting_at_once_each_get_their_results_once(zmtp_client: Client) -> None:
    """Callers that write their own submits while others wait, and futures waited for by two threads: every
    result right, every done-callback called exactly once."""
    calls: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()
    shared: list[concurrent.futures.Future[int]] = []

    def count(future: concurrent.futures.Future[int]) -> None:
        with lock:
            calls[future.result()] += 1

    def submitter(thread: int) -> list[int]:
        values = []
        for index in range(60):
            value = thread * 1000 + index
            future = zmtp_client.submit(plus_one, value)
            future.add_done_callback(count)
            if index % 3 == 0:
                with lock:
                    shared.append(future)  # waited for by the main thread too
            values.append(future.result(RESULT_SECONDS) - 1)
        return values

    with concurrent.futures.ThreadPoolExecutor(8) as threads:
        outcomes = list(threads.map(submitter, range(8)))
    assert outcomes == [[thread * 1000 + index for index in range(60)] for thread in range(8)]
    done, not_done = concurrent.futures.wait(shared, timeout=RESULT_SECONDS)
    assert not not_done
    wait_until(lambda: sum(calls.values()) == 8 * 60, "every done-callback ran", timeout=RESULT_SECONDS)
    assert calls == collections.Counter(thread * 1000 + index + 1 for thread in range(8) for index in range(60))
    assert zmtp_client._connection.unfinished_tasks == 0


def test_done_callbacks_may_submit_and_a_result_waits_in_another_thread(zmtp_client: Client) -> None:
    """A done-callback runs on whichever thread holds the baton; one that submits leaves its work queued (the
    baton is not reentrant), and that work still goes out."""
    chained: concurrent.futures.Future[concurrent.futures.Future[int]] = concurrent.futures.Future()

    def chain(future: concurrent.futures.Future[int]) -> None:
        chained.set_result(zmtp_client.submit(plus_one, future.result()))

    first = zmtp_client.submit(sleep_then, 41, 0.2)
    first.add_done_callback(chain)
    assert first.result(RESULT_SECONDS) == 41
    assert chained.result(RESULT_SECONDS).result(RESULT_SECONDS) == 42

    waiter_result: list[int] = []
    slow = zmtp_client.submit(sleep_then, 7, 0.3)
    waiter = threading.Thread(target=lambda: waiter_result.append(slow.result(RESULT_SECONDS)))
    waiter.start()
    assert zmtp_client.submit(plus_one, 1).result(RESULT_SECONDS) == 2  # meanwhile, from this thread
    waiter.join(RESULT_SECONDS)
    assert waiter_result == [7]
    with pytest.raises(concurrent.futures.TimeoutError):
        zmtp_client.submit(sleep_then, 0, 5.0).result(0.2)  # a wait still ends at its timeout


@pytest.mark.parametrize("transport", ["zmq", "zmtp"])
def test_a_client_outlives_a_scheduler_restart(spawn: Spawner, transport: str, monkeypatch) -> None:
    monkeypatch.setenv(TRANSPORT_ENV, transport)
    address = free_local_address()
    options = ("--heartbeat-interval-seconds", "0.5", "--worker-timeout-seconds", "5")
    scheduler = start_scheduler(spawn, address, *options)
    spawn("cluster", [console_script("scaler_cluster"), "-n", "1", "--heartbeat-interval", "0.5", address])
    with Client(address=address, timeout_seconds=30) as client:
        assert type(client._connection._link) is (ZmtpClientLink if transport == "zmtp" else ZmqClientLink)
        assert client.submit(plus_one, 1).result(RESULT_SECONDS) == 2
        in_flight = [client.submit(sleep_then, index, 0.5) for index in range(4)]
        os.kill(scheduler.process.pid, signal.SIGKILL)
        scheduler.process.wait(30)
        start_scheduler(spawn, address, *options, name="scheduler-again")
        assert [future.result(RESULT_SECONDS) for future in in_flight] == list(range(4))
        assert client.submit(plus_one, 2).result(RESULT_SECONDS) == 3


def _outcome_when_the_scheduler_dies(spawn: Spawner, name: str) -> tuple[str, str]:
    address = free_local_address()
    scheduler = start_scheduler(spawn, address, name=name)
    spawn(f"{name}-cluster", [console_script("scaler_cluster"), "-n", "1", address])
    with Client(address=address, timeout_seconds=4, heartbeat_interval_seconds=0.5) as client:
        assert client.submit(plus_one, 1).result(RESULT_SECONDS) == 2
        waiting = client.submit(sleep_then, 1, 30.0)
        os.kill(scheduler.process.pid, signal.SIGKILL)
        scheduler.process.wait(30)
        with pytest.raises(Exception) as raised:
            waiting.result(RESULT_SECONDS)
        with pytest.raises(Exception) as later:
            client.submit(plus_one, 1).result(RESULT_SECONDS)
    return type(raised.value).__name__, type(later.value).__name__


def test_a_scheduler_that_dies_for_good_fails_the_futures_as_with_libzmq(spawn: Spawner, monkeypatch) -> None:
    monkeypatch.setenv(TRANSPORT_ENV, "zmq")
    with_zmq = _outcome_when_the_scheduler_dies(spawn, "zmq")
    monkeypatch.setenv(TRANSPORT_ENV, "zmtp")
    assert _outcome_when_the_scheduler_dies(spawn, "zmtp") == with_zmq


def test_curve_keys_keep_libzmq_whatever_the_variable_says(
    zmtp: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = tmp_path / "keys"
    subprocess.run([console_script("scaler_keygen"), str(keys), "scheduler", "worker", "client"], check=True,
                   capture_output=True, timeout=60)
    authorized = tmp_path / "authorized"
    authorized.mkdir()
    for name in ("worker", "client"):
        (authorized / f"{name}.key").write_bytes((keys / f"{name}.key").read_bytes())
    monkeypatch.setenv(curve.SCHEDULER_SECRET_KEY_ENV, str(keys / "scheduler.key_secret"))
    monkeypatch.setenv(curve.AUTHORIZED_KEYS_ENV, str(authorized))
    monkeypatch.setenv(curve.SERVER_KEY_ENV, str(keys / "scheduler.key"))
    monkeypatch.setenv(curve.SECRET_KEY_ENV, str(keys / "worker.key_secret"))
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as cluster:
        monkeypatch.delenv(curve.SERVER_KEY_ENV)
        monkeypatch.delenv(curve.SECRET_KEY_ENV)
        with Client(address=cluster.get_address(), timeout_seconds=30, curve_server_key=str(keys / "scheduler.key"),
                    curve_secret_key=str(keys / "client.key_secret")) as client:
            assert isinstance(client._connection._link, ZmqClientLink)
            assert client.submit(pow, 2, 8).result(RESULT_SECONDS) == 256
