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
import time
from typing import Iterator

import numpy as np
import pytest

from scaler import Client
from scaler.ui.feed import MonitorSubscriber
from tests.integration.test_network_partition import Lab, lab, network_namespaces, wait_for  # noqa: F401
from tests.integration.test_stores_across_hosts import checksum, read_here

pytestmark = pytest.mark.timeout(240)

MB = 1 << 20
WAIT_SECONDS = 120.0  # an upper bound against hangs, never a measure
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
        with Client(address=lab.address, timeout_seconds=60) as client:
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
        with Client(address=lab.address, timeout_seconds=60) as client:
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
