"""Large results kept by the processor that made them until another process reads them
(worker/own_results.py), with a real scheduler, real workers and their real store.

A dependent placed on the maker's worker takes the value from the maker's processor, and the store never
sees the bytes; a dependent on another worker reads them from the store, where the maker writes them when
the scheduler asks, even in the middle of a task of its own.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from typing import Iterator

import numpy as np
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.store.store_client import StoreAddress, StoreClient
from tests.integration import waiting
from tests.integration.test_object_path import how_received, make_array
from tests.integration.waiting import wait_for_file

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only"),
]

MB = 1 << 20
WAIT_SECONDS = 60.0  # an upper bound against hangs, never a measure
wait_until = functools.partial(waiting.wait_until, timeout=WAIT_SECONDS)


@pytest.fixture(scope="module")
def combo() -> Iterator[SchedulerClusterCombo]:
    # One task at a time per worker: the second reader of a result has to go to the other worker.
    with SchedulerClusterCombo(n_workers=2, per_worker_queue_size=1, logging_level="WARNING") as started:
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
    assert address is not None
    return address


def objects_in(store: StoreAddress) -> int:
    with StoreClient(store, local=True) as reader:
        return reader.status().object_count


def make_array_counted(size: int, fill: int, runs: str) -> np.ndarray:
    """make_array, leaving one file per run in the directory `runs`."""
    with open(os.path.join(runs, f"run-{len(os.listdir(runs))}-{os.getpid()}"), "w"):
        pass
    return make_array(size, fill)


def store_objects_while_reading(array: np.ndarray, data_address: str, ipc_address: str) -> tuple[str, int]:
    """How the array came, and how many objects the store holds while its reader runs."""
    with StoreClient(StoreAddress(data_address, ipc_address), local=True) as reader:
        return how_received(array), reader.status().object_count


def read_then_meet(array: np.ndarray, mine: str, theirs: str) -> str:
    """How the array came; returns only once the other reader has read it too."""
    how = how_received(array)
    with open(mine, "w"):
        pass
    wait_for_file(theirs, WAIT_SECONDS)
    return how


def wait_for_either(first: str, second: str) -> bool:
    while not (os.path.exists(first) or os.path.exists(second)):
        time.sleep(0.05)
    return True


def test_a_large_intermediate_read_by_its_makers_processor_never_goes_into_the_store(
    client: Client, store: StoreAddress
) -> None:
    before = objects_in(store)
    graph = {
        "data": (make_array, 2 * MB, 3),
        "seen": (store_objects_while_reading, "data", store.data_address, store.ipc_address),
    }
    assert client.get(graph, keys=["seen"]) == {"seen": ("made here", before)}
    assert objects_in(store) == before


def test_a_large_intermediate_read_on_another_worker_is_written_by_its_maker_in_the_middle_of_a_task(
    client: Client, store: StoreAddress, tmp_path
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    # The data is made on one worker while the other is busy with the blocker; the maker takes a reader,
    # which frees the blocker, so that the other reader goes to the other worker only now, while the first
    # one runs. Neither reader ends before the other has read the data: the maker must write it in the
    # middle of its own task, or both wait until the other reader gives up on its input and the data is
    # made again.
    graph = {
        "blocker": (wait_for_either, first, second),
        "data": (make_array_counted, 2 * MB, 5, str(runs)),
        "first": (read_then_meet, "data", first, second),
        "second": (read_then_meet, "data", second, first),
    }
    before = objects_in(store)
    results = client.get(graph, keys=["first", "second", "blocker"])
    assert sorted([results["first"], results["second"]]) == ["made here", "mapped"]
    assert len(os.listdir(runs)) == 1, "the data was made again: its reader on the other worker did not get it"
    wait_until(lambda: objects_in(store) == before, "the written intermediate is deleted once read")
