"""Stores on two hosts (issue 15, point 3): data crosses hosts store to store, over TCP, never through the scheduler.

Two worker hosts, each a network namespace with its own Cluster and so its own store, as in
test_network_partition.py (its Lab builds them); here the scheduler's namespace also forwards between
the hosts and the client's namespace, so that every store's TCP data address is reachable from every
other host, as on a real network. The host key of a store is its boot id and network namespace: the two
stores must differ, so a task on one host reads an object held on the other through its own store,
which pulls it over TCP and then hands it to the task through shared memory.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import time
from typing import Iterator

import numpy as np
import pytest

from scaler import Client
from scaler.ui.feed import MonitorSubscriber
from tests.integration.test_network_partition import Lab, _ip, lab, network_namespaces, wait_for  # noqa: F401

pytestmark = pytest.mark.timeout(240)

MB = 1 << 20
WAIT_SECONDS = 120.0  # an upper bound against hangs, never a measure


def this_host() -> str:
    """The network namespace a task runs in: which of the two hosts it is on."""
    return str(os.stat("/proc/self/ns/net").st_ino)


def pattern(size: int, seed: int) -> np.ndarray:
    return (np.arange(size, dtype=np.uint64) * 2654435761 + seed).astype(np.uint8)


def checksum(array: np.ndarray) -> int:
    return int(array.sum(dtype=np.uint64))


def mapped_from_a_store(array: np.ndarray) -> bool:
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def read_here(array: np.ndarray, seconds: float) -> tuple[str, bool, int]:
    """Where it ran, whether its argument came mapped from its host's store, and the argument's checksum."""
    time.sleep(seconds)  # long enough that both hosts get a share of the tasks
    return this_host(), mapped_from_a_store(array), checksum(array)


def produce(seed: int) -> dict:
    time.sleep(0.3)
    return {"host": this_host(), "data": pattern(2 * MB, seed)}


def consume(left: dict, right: dict) -> tuple[list[str], str, bool, int]:
    """The hosts its inputs were made on, its own host, whether both came uncopied (mapped from this host's
    store, or the maker's own array when it was made in this very process), and their checksum."""
    time.sleep(0.3)
    here = this_host()
    mapped = all(
        mapped_from_a_store(part["data"]) or (part["host"] == here and part["data"].flags.owndata)
        for part in (left, right)
    )
    return [left["host"], right["host"]], this_host(), mapped, checksum(left["data"]) + checksum(right["data"])


def route_between_hosts(the_lab: Lab) -> None:
    """The scheduler's namespace becomes a router: hosts reach each other and the client reaches every host."""
    subprocess.run(["ip", "netns", "exec", the_lab.scheduler_netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"],
                   check=True, timeout=30)
    subnet = the_lab.scheduler_ip.rsplit(".", 1)[0]
    for host in the_lab.hosts.values():
        _ip("route", "add", f"{subnet}.0/24", "via", the_lab.scheduler_ip, netns=host.netns)
        # In the root namespace: gone with the client's link when the lab removes the scheduler's namespace.
        _ip("route", "add", f"{host.address}/32", "via", the_lab.scheduler_ip)


@pytest.fixture
def two_hosts(lab: Lab) -> Iterator[tuple[Lab, Client, MonitorSubscriber]]:  # noqa: F811
    a, b = lab.add_host("host-a"), lab.add_host("host-b")
    route_between_hosts(lab)
    lab.start_scheduler()
    lab.start_worker(a)
    lab.start_worker(b)
    with MonitorSubscriber(lab.monitor_address) as monitor:
        wait_for(monitor, lambda s: len(s.stores) == 2 and len(s.workers) == 2, 60, "two stores and two workers")
        with Client(address=lab.address, timeout_seconds=30) as client:
            deadline = time.monotonic() + WAIT_SECONDS
            while len(client._connection.stores._addresses) < 2 or not client._connection.stores.home:
                assert time.monotonic() < deadline, "the client was never told of both stores"
                time.sleep(0.05)
            yield lab, client, monitor


def test_the_two_hosts_stores_have_different_host_keys_and_tcp_addresses(
    two_hosts: tuple[Lab, Client, MonitorSubscriber]
) -> None:
    the_lab, client, _ = two_hosts
    addresses = list(client._connection.stores._addresses.values())
    assert len({address.host_key for address in addresses}) == 2
    host_ips = {host.address for host in the_lab.hosts.values()}
    assert {address.data_address.split("//")[1].rsplit(":", 1)[0] for address in addresses} == host_ips
    assert not any(address.is_local() for address in addresses)  # the client's namespace is a third host


def test_a_task_on_one_host_reads_an_object_held_on_the_other(two_hosts: tuple[Lab, Client, MonitorSubscriber]) -> None:
    _, client, monitor = two_hosts
    array = pattern(8 * MB, 3)
    reference = client.send_object(array, name="big")  # put over TCP into the client's home store, on one host
    runs = client.map(read_here, [(reference, 0.3)] * 12)
    # Load balancing put tasks on both hosts: on one of them the object was pulled from the other's store.
    assert len({host for host, _, _ in runs}) == 2, f"every task ran on one host: {runs}"
    # The right bytes everywhere, handed to every task mapped from its own host's store.
    assert all(mapped and total == checksum(array) for _, mapped, total in runs), runs
    snapshot = wait_for(monitor, lambda s: sum(1 for store in s.stores if store.bytes_held >= array.nbytes) == 2,
                        30, "both stores holding the object (the pulled copy is a second holder)")
    assert snapshot.bytes_relayed == 0


def test_a_graph_passes_intermediates_made_on_one_host_to_tasks_on_the_other(
    two_hosts: tuple[Lab, Client, MonitorSubscriber]
) -> None:
    _, client, monitor = two_hosts
    count = 8
    graph: dict = {f"make-{index}": (produce, index) for index in range(count)}
    graph.update({f"use-{index}": (consume, f"make-{index}", f"make-{(index + 1) % count}") for index in range(count)})
    results = client.get(graph, keys=[f"use-{index}" for index in range(count)])
    expected = [checksum(pattern(2 * MB, index)) + checksum(pattern(2 * MB, (index + 1) % count))
                for index in range(count)]
    assert [results[f"use-{index}"][3] for index in range(count)] == expected
    assert all(mapped for _, _, mapped, _ in results.values())
    crossed = [run for run in results.values() if any(host != run[1] for host in run[0])]
    assert crossed, f"no task used an intermediate made on the other host: {list(results.values())}"
    snapshot = monitor.receive(timeout_seconds=5)
    assert snapshot is None or snapshot.bytes_relayed == 0
