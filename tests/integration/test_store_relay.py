"""The relay fallback (issue 15, point 3; PROTOCOL.md §19): peers that can reach the scheduler but not a store.

The worker host is a network namespace (test_network_partition.py's Lab) that reaches the scheduler's namespace
only; nothing routes between it and the client's namespace, as for a client outside a cluster's network (behind
NAT, or a data port nobody opened). The client's large argument and large result must still travel, through the
scheduler: the client finds no connection to the store's data address within its probe time, says so once, and
relays; the scheduler says so once too, and the monitor feed shows the bytes it relayed. Two such hosts, with no
route between them, are two stores out of each other's reach: the one that fetches relays too.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Iterator

import numpy as np
import psutil
import pytest

from scaler import Client
from scaler.client import stored_results
from scaler.ui.feed import MonitorSubscriber
from tests.integration.test_network_partition import Lab, lab, network_namespaces, wait_for  # noqa: F401
from tests.integration.test_stores_across_hosts import checksum, read_here
from tests.integration.waiting import wait_for_file

pytestmark = pytest.mark.timeout(240)

MB = 1 << 20
WAIT_SECONDS = 120.0  # an upper bound against hangs, never a measure
# How long the clients here try a store's data address before relaying through the scheduler (3 s by default):
# every store here is out of their reach, so each test waits it out once.
PROBE_SECONDS = 1.0
CLIENT_LOG = "relaying its data through the scheduler"
SCHEDULER_LOG = "RelayRouter: relaying data between client"
STORE_TO_STORE_LOG = "RelayRouter: relaying data between store"


def pattern(size: int, seed: int) -> np.ndarray:
    return (np.arange(size, dtype=np.uint64) * 2654435761 + seed).astype(np.uint8)


def doubled_and_reversed(array: np.ndarray) -> np.ndarray:
    """A result larger than its argument, every byte of it depending on the argument's."""
    return np.concatenate([array, array[::-1]])


@pytest.fixture
def cut_off_client(lab: Lab) -> Iterator[tuple[Lab, Client, MonitorSubscriber]]:  # noqa: F811
    host = lab.add_host("host-a")
    lab.start_scheduler()
    lab.start_worker(host)
    with MonitorSubscriber(lab.monitor_address) as monitor:
        wait_for(monitor, lambda s: len(s.stores) == 1 and len(s.workers) == 1, 60, "the store and the worker")
        with Client(address=lab.address, timeout_seconds=60, store_probe_seconds=PROBE_SECONDS) as client:
            deadline = time.monotonic() + WAIT_SECONDS
            while not client._connection.stores.home:
                assert time.monotonic() < deadline, "the client was never told of the store"
                time.sleep(0.05)
            yield lab, client, monitor


def test_a_client_that_cannot_reach_the_store_sends_and_gets_large_data_through_the_scheduler(
    cut_off_client: tuple[Lab, Client, MonitorSubscriber], caplog: pytest.LogCaptureFixture
) -> None:
    the_lab, client, monitor = cut_off_client
    store_address = client._connection.stores.home
    assert the_lab.hosts["host-a"].address in store_address  # the store's address is on the host the client can't reach
    arguments = [pattern(2 * MB, seed) for seed in range(3)]

    with caplog.at_level(logging.WARNING):
        futures = [client.submit(doubled_and_reversed, argument) for argument in arguments]
        results = [future.result(timeout=WAIT_SECONDS) for future in futures]

    for argument, result in zip(arguments, results):
        assert np.array_equal(result, doubled_and_reversed(argument))
    moved = sum(argument.nbytes * 3 for argument in arguments)  # each argument there, twice its size back
    snapshot = wait_for(monitor, lambda s: s.bytes_relayed >= moved, 30, f"{moved:,} bytes relayed")
    assert snapshot.stores[0].bytes_held < moved, "results the client fetched are let go of"

    client_lines = [record.getMessage() for record in caplog.records if CLIENT_LOG in record.getMessage()]
    assert len(client_lines) == 1 and store_address in client_lines[0], client_lines
    deadline = time.monotonic() + 30
    while SCHEDULER_LOG not in _read(the_lab.scheduler_log) and time.monotonic() < deadline:
        time.sleep(0.2)
    scheduler_lines = [line for line in _read(the_lab.scheduler_log).splitlines() if SCHEDULER_LOG in line]
    assert len(scheduler_lines) == 1 and store_address in scheduler_lines[0], scheduler_lines


def test_a_store_that_cannot_reach_the_holder_fetches_through_the_scheduler(lab: Lab) -> None:  # noqa: F811
    hosts = [lab.add_host("host-a"), lab.add_host("host-b")]  # no route between them, nor to the client
    lab.start_scheduler()
    for host in hosts:
        lab.start_worker(host)
    with MonitorSubscriber(lab.monitor_address) as monitor:
        wait_for(monitor, lambda s: len(s.stores) == 2 and len(s.workers) == 2, 60, "two stores and two workers")
        with Client(address=lab.address, timeout_seconds=60, store_probe_seconds=PROBE_SECONDS) as client:
            array = pattern(4 * MB, 7)
            reference = client.send_object(array, name="big")  # into one host's store, relayed
            runs = client.map(read_here, [(reference, 0.3)] * 12)
            assert len({host for host, _, _ in runs}) == 2, f"every task ran on one host: {runs}"
            assert all(mapped and total == checksum(array) for _, mapped, total in runs), runs
            # The client's put, then the other store's fetch: each carried the object through the scheduler.
            wait_for(monitor, lambda s: s.bytes_relayed >= 2 * array.nbytes, 30, "the object relayed twice")
    deadline = time.monotonic() + 30
    while STORE_TO_STORE_LOG not in _read(lab.scheduler_log) and time.monotonic() < deadline:
        time.sleep(0.2)
    lines = [line for line in _read(lab.scheduler_log).splitlines() if STORE_TO_STORE_LOG in line]
    assert len(lines) == 1, lines
    fetching = [host for host in hosts if "relaying its data through the scheduler" in host.log()]
    assert len(fetching) == 1, "exactly the store without the object fetched it, and said so"


def _read(path: str) -> str:
    try:
        with open(path) as log:
            return log.read()
    except FileNotFoundError:
        return ""


def large_result() -> bytes:
    return b"q" * MB


def test_a_relayed_fetch_from_a_store_that_leaves_is_answered_at_once_naming_the_store(
    cut_off_client: tuple[Lab, Client, MonitorSubscriber], monkeypatch: pytest.MonkeyPatch, tmp_path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The client's own wait for a store's answer is long here (as for a large object on a slow link): what ends it
    # early is the scheduler's answer when the store leaves (timed out, --worker-timeout-seconds 3).
    monkeypatch.setattr(stored_results, "FETCH_WAIT_BASE_SECONDS", 1000.0)
    the_lab, client, monitor = cut_off_client
    store_address = client._connection.stores.home
    host = the_lab.hosts["host-a"]
    assert host.process is not None
    (store_process,) = [
        child for child in psutil.Process(host.process.pid).children(recursive=True)
        if "scaler.cli.store" in " ".join(child.cmdline())
    ]
    armed = str(tmp_path / "armed")
    store_stopped = threading.Event()
    # A first result, fetched through the scheduler: the client knows the store is out of its reach, and relays
    # its next request at once (before the store is taken for gone).
    assert client.submit(large_result).result(timeout=WAIT_SECONDS) == large_result()
    wait_for(monitor, lambda s: bool(s.stores) and s.stores[0].objects == 0, 60, "the first result let go of")
    try:
        # Done-callbacks run on the client's I/O thread: the gate's holds it (and with it the fetch of the large
        # result, which the host's one processor makes next) until the store is stopped, so that the fetch is
        # relayed to a store that no longer answers.
        gate = client.submit(wait_for_file, armed, WAIT_SECONDS)
        gate.add_done_callback(lambda _: store_stopped.wait(WAIT_SECONDS))
        large = client.submit(large_result)
        wait_for(monitor, lambda s: s.tasks.unassigned + s.tasks.running >= 2, 60, "both tasks at the scheduler")
        with open(armed, "w"):
            pass
        wait_for(monitor, lambda s: bool(s.stores) and s.stores[0].objects >= 1, 60, "the large result is stored")
        with caplog.at_level(logging.WARNING):
            store_process.send_signal(signal.SIGSTOP)
            store_stopped.set()
            deadline = time.monotonic() + WAIT_SECONDS
            while not [record for record in caplog.records if "could not be fetched" in record.getMessage()]:
                assert time.monotonic() < deadline, "the client still waits for a store that left"
                time.sleep(0.1)
    finally:
        store_stopped.set()
        store_process.kill()
    (line,) = [record.getMessage() for record in caplog.records if "could not be fetched" in record.getMessage()]
    assert "left the scheduler before it answered" in line and store_address in line, line
    assert not large.done() or large.exception(timeout=0) is None, "the result is made again, not failed"
