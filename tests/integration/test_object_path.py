"""The object path (issue 15): large arguments, objects and results go through a store; the scheduler moves
only their ids, sizes and holders.

A real scheduler, real workers and the real store their Cluster starts (SchedulerClusterCombo), with real
shared memory, and a real client on the same host, whose home store is that store. What the tests watch
is the store itself: what it holds while the work runs, and that it holds nothing more once the work is
done and the objects were released (the scheduler told the store to delete them).
"""

from __future__ import annotations

import functools
import mmap
import os
import sys
import time
from typing import Callable, Iterator

import cloudpickle
import numpy as np
import pytest

from scaler import Client, SchedulerClusterCombo, Serializer
from scaler.store.store_client import StoreAddress, StoreClient
from scaler.utility.host_key import this_host_key
from tests.integration import waiting

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only"),
]

MB = 1 << 20
WAIT_SECONDS = 60.0  # an upper bound against hangs, never a measure
wait_until = functools.partial(waiting.wait_until, timeout=WAIT_SECONDS)


@pytest.fixture(scope="module")
def combo() -> Iterator[SchedulerClusterCombo]:
    with SchedulerClusterCombo(n_workers=2, logging_level="WARNING", store_capacity_bytes=1 << 30) as started:
        yield started


@pytest.fixture
def client(combo: SchedulerClusterCombo) -> Iterator[Client]:
    with Client(address=combo.get_address()) as connected:
        wait_until(lambda: bool(connected._connection.stores.home), "the client is told of its store")
        yield connected


@pytest.fixture
def store(client: Client) -> StoreAddress:
    stores = client._connection.stores
    address = stores.address_of(stores.home)
    assert address is not None and address.host_key == this_host_key()
    return address


def store_status(store: StoreAddress):
    with StoreClient(store, local=True) as reader:
        return reader.status()


def holds_only(store: StoreAddress, object_count: int) -> Callable[[], bool]:
    return lambda: store_status(store).object_count == object_count


def byte_count(data: bytes) -> int:
    return len(data)


def make_bytes(size: int, fill: int) -> bytes:
    return bytes([fill]) * size


def make_array(size: int, fill: int) -> np.ndarray:
    return np.full(size, fill, dtype=np.uint8)


def mapped_from_a_store(array: np.ndarray) -> bool:
    """Whether the array is a view of a store's shared-memory segment (mapped, not copied)."""
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def mapped_size(array: np.ndarray) -> int:
    return array.nbytes if mapped_from_a_store(array) else -1


def how_received(array: np.ndarray) -> str:
    """"made here": the very array its maker returned (same processor); "mapped": a view of a store's segment;
    "copied": unpickled from bytes that travelled (through the scheduler)."""
    if array.flags.owndata and array.base is None:
        return "made here"
    return "mapped" if mapped_from_a_store(array) else "copied"


def hold_then_count(data: bytes, seconds: float) -> int:
    time.sleep(seconds)
    return len(data)


def test_a_large_argument_goes_through_the_store_and_is_deleted_once_its_task_is_done(
    client: Client, store: StoreAddress
) -> None:
    before = store_status(store)
    argument = os.urandom(8 * MB)
    future = client.submit(hold_then_count, argument, 0.5)
    # In the store while its task runs: the client put it there and the submission named it by id.
    wait_until(lambda: store_status(store).held_bytes >= before.held_bytes + len(argument), "the argument is stored")
    assert future.result(timeout=WAIT_SECONDS) == len(argument)
    # The task is done and the client released it: the scheduler told the store to delete it.
    wait_until(holds_only(store, before.object_count), "the store drops the argument")


def test_a_sent_object_is_put_into_the_store_and_read_by_the_task(client: Client, store: StoreAddress) -> None:
    before = store_status(store).held_bytes
    data = os.urandom(4 * MB)
    reference = client.send_object(data, name="big")
    assert reference.size >= len(data)
    assert store_status(store).held_bytes >= before + len(data)  # in the store before anything runs
    assert client.submit(byte_count, reference).result(timeout=WAIT_SECONDS) == len(data)


def test_a_large_result_comes_back_from_the_store_and_is_released_after_the_fetch(
    client: Client, store: StoreAddress
) -> None:
    before = store_status(store)
    result = client.submit(make_array, 3 * MB, 7).result(timeout=WAIT_SECONDS)
    assert result.nbytes == 3 * MB and int(result[0]) == int(result[-1]) == 7
    assert mapped_from_a_store(result)  # the worker wrote it into the store; the client mapped it from there
    assert client.submit(make_bytes, 3 * MB, 5).result(timeout=WAIT_SECONDS) == bytes([5]) * (3 * MB)
    wait_until(holds_only(store, before.object_count), "the client releases the fetched results")


def test_a_graph_hands_a_large_intermediate_to_its_dependent_on_the_worker_that_made_it(
    client: Client, store: StoreAddress
) -> None:
    before = store_status(store)
    graph = {"data": (make_array, 2 * MB, 3), "how": (how_received, "data")}
    # The intermediate went into the store (any other reader maps it from there), and the idle cluster put
    # the dependent on the worker that made it, whose processor handed it the value itself: no copy at all.
    assert client.get(graph, keys=["how"]) == {"how": "made here"}
    wait_until(holds_only(store, before.object_count), "the quiet intermediate is deleted")


def test_many_results_of_a_map_come_back_through_the_store(client: Client, store: StoreAddress) -> None:
    before = store_status(store)
    results = client.map(make_array, [(MB, index) for index in range(8)])
    assert [int(result[-1]) for result in results] == list(range(8))
    assert all(mapped_from_a_store(result) for result in results)
    wait_until(holds_only(store, before.object_count), "the client releases every fetched result")


def test_small_tasks_stay_on_the_control_path(client: Client, store: StoreAddress) -> None:
    results = client.map(make_array, [(1000, 1)] * 20)
    assert not any(mapped_from_a_store(result) for result in results)


# ------------------------------------------------------------------------------------------ any large argument


def pattern(size: int, seed: int) -> np.ndarray:
    return (np.arange(size, dtype=np.uint64) * 2654435761 + seed).astype(np.uint8)


def mapped_checksum(array: np.ndarray) -> tuple[int, int]:
    """(the bytes of `array` mapped from a store, -1 if it was copied; a checksum of its contents)."""
    return mapped_size(array), int(array.sum(dtype=np.uint64))


def checksum(array: np.ndarray) -> int:
    return int(array.sum(dtype=np.uint64))


def make_pair(size: int) -> dict:
    return {"left": pattern(size, 1), "right": pattern(size, 2), "name": "pair"}


def test_a_numpy_argument_to_submit_is_mapped_by_its_task_and_deleted_after(
    client: Client, store: StoreAddress
) -> None:
    before = store_status(store)
    array = pattern(6 * MB, 9)
    assert client.submit(mapped_checksum, array).result(timeout=WAIT_SECONDS) == (array.nbytes, checksum(array))
    wait_until(holds_only(store, before.object_count), "the stored argument is deleted once its task is done")


def test_numpy_arguments_of_map_and_of_a_graph_are_mapped_by_their_tasks(client: Client, store: StoreAddress) -> None:
    before = store_status(store)
    first, second = pattern(2 * MB, 1), pattern(3 * MB, 2)
    results = client.map(mapped_checksum, [(first,), (second,), (first,)])  # `first` twice: stored once
    assert results == [(first.nbytes, checksum(first)), (second.nbytes, checksum(second)),
                       (first.nbytes, checksum(first))]
    graph = {"literal": (mapped_checksum, second)}
    assert client.get(graph, keys=["literal"]) == {"literal": (second.nbytes, checksum(second))}
    wait_until(holds_only(store, before.object_count), "the map's and the graph's stored arguments are deleted")


def test_a_large_result_of_any_type_comes_back_with_its_arrays_mapped(client: Client, store: StoreAddress) -> None:
    result = client.submit(make_pair, 2 * MB).result(timeout=WAIT_SECONDS)
    assert result["name"] == "pair"
    assert checksum(result["left"]) == checksum(pattern(2 * MB, 1))
    assert checksum(result["right"]) == checksum(pattern(2 * MB, 2))
    assert mapped_from_a_store(result["left"]) and mapped_from_a_store(result["right"])


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident memory (VmHWM): what it held at its most, whatever it freed since."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def test_the_scheduler_never_holds_a_large_numpy_argument() -> None:
    """Its own cluster: the scheduler's peak memory is its own since it started, not other tests'."""
    array = pattern(96 * MB, 5)
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING", store_capacity_bytes=1 << 30) as combo:
        with Client(address=combo.get_address()) as connected:
            wait_until(lambda: bool(connected._connection.stores.home), "the client is told of its store")
            assert connected.submit(byte_count, b"x").result(timeout=WAIT_SECONDS) == 1  # warmed up
            peak_before = peak_rss_bytes(combo.scheduler_pid)
            assert connected.submit(mapped_checksum, array).result(timeout=WAIT_SECONDS)[0] == array.nbytes
            assert [size for size, _ in connected.map(mapped_checksum, [(array,), (pattern(MB, 1),)])] == [
                array.nbytes, MB
            ]
            grown = peak_rss_bytes(combo.scheduler_pid) - peak_before
    # Through the scheduler, the argument's 96 MB would have been in its memory at least once.
    assert grown < 16 * MB, f"the scheduler's peak memory grew by {grown:,} bytes"


class PrefixedSerializer(Serializer):
    """A user's own serializer: its bytes are stored as they are (no out-of-band buffers)."""

    @staticmethod
    def serialize(obj: object) -> bytes:
        return b"user:" + cloudpickle.dumps(obj)

    @staticmethod
    def deserialize(payload: bytes) -> object:
        assert bytes(payload[:5]) == b"user:", "not this serializer's bytes"
        return cloudpickle.loads(payload[5:])


def total(numbers: list) -> int:
    return sum(numbers)


def test_large_arguments_without_buffers_and_of_a_custom_serializer_go_through_the_store(
    combo: SchedulerClusterCombo, store: StoreAddress
) -> None:
    numbers = list(range(200_000))  # about 1 MB pickled, all of it in the main part
    for serializer in (None, PrefixedSerializer()):
        with Client(address=combo.get_address(), serializer=serializer) as connected:
            wait_until(lambda: bool(connected._connection.stores.home), "the client is told of its store")
            before = store_status(store)
            future = connected.submit(hold_then_total, numbers, 0.5)
            stored = before.held_bytes + 500_000
            wait_until(lambda: store_status(store).held_bytes >= stored, "the list is stored")  # noqa: B023
            assert future.result(timeout=WAIT_SECONDS) == sum(numbers)
            wait_until(holds_only(store, before.object_count), "the stored list is deleted")


def hold_then_total(numbers: list, seconds: float) -> int:
    time.sleep(seconds)
    return total(numbers)
