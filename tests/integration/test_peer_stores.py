"""The stores as a peer sees them (scaler/store/peer_stores.py), over real sockets: a change of the directory
never waits for a request under way to a store it drops. The client's I/O thread applies directory changes
while its fetch thread may be waiting on that very store (for a relayed answer that only the I/O thread can
deliver, or for a store that no longer answers)."""

from __future__ import annotations

import threading
from typing import Iterator

import pytest
import zmq

from scaler.protocol import messages as m
from scaler.store.peer_stores import Stores
from scaler.store.store_client import StoreTimeout

pytestmark = pytest.mark.timeout(120)

# How long the fetch from the silent store waits for the object; the fetch gives up some seconds later still
# (the store client's grace for an answer on its way). The directory change must be done within this, while the
# fetch is still under way: a change that waited for the fetch would miss it by that grace at least. Short,
# since the test then waits for the fetch to give up.
FETCH_SECONDS = 4.0
HANG_GUARD_SECONDS = 60.0  # an upper bound against hangs, never a measure


@pytest.fixture
def silent_store() -> Iterator[tuple[str, zmq.Socket]]:
    """A data address that takes requests and never answers, as a store that hangs."""
    context = zmq.Context()
    socket = context.socket(zmq.ROUTER)
    socket.setsockopt(zmq.LINGER, 0)
    port = socket.bind_to_random_port("tcp://127.0.0.1")
    try:
        yield f"tcp://127.0.0.1:{port}", socket
    finally:
        socket.close()
        context.term()


def test_dropping_a_store_from_the_directory_does_not_wait_for_a_fetch_under_way(
    silent_store: tuple[str, zmq.Socket],
) -> None:
    address, socket = silent_store
    stores = Stores(timeout_seconds=60)
    stores.update(m.StoreDirectory(stores=[m.StoreEntry(address, "", "another-host")]))
    outcome: list[BaseException] = []

    def fetch() -> None:
        try:
            stores.fetch(b"\x01" * 16, address, timeout=FETCH_SECONDS)
        except BaseException as error:
            outcome.append(error)

    fetching = threading.Thread(target=fetch)
    fetching.start()
    try:
        assert socket.poll(int(HANG_GUARD_SECONDS * 1000)), "the fetch never reached the store"
        updated = threading.Event()
        updater = threading.Thread(target=lambda: (stores.update(m.StoreDirectory()), updated.set()))
        updater.start()
        assert updated.wait(FETCH_SECONDS), "the directory change waited for the fetch under way"
        assert fetching.is_alive(), "the fetch ended early: this test did not see the directory change wait"
        updater.join(HANG_GUARD_SECONDS)
    finally:
        fetching.join(FETCH_SECONDS + HANG_GUARD_SECONDS)
        stores.close()
    assert not fetching.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], StoreTimeout), outcome
