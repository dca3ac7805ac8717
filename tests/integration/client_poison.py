"""Proof that values stay on the cluster: a value the client process cannot unpickle, and a spy on its store reads.

`poison_this_process(monkeypatch)` marks the test process: from then on, unpickling a `ClientPoison` here
raises, while workers (other processes) unpickle it as usual. A test whose large values are poisons and still
passes never had them in the client. `store_fetches` counts the client's reads from stores (the real reads
still run); `results_delivered` the sizes of the results that came inside result messages; `objects_in_store`
counts the objects of the client's home store (the one its workers use when they run on this host).
"""

from __future__ import annotations

import os

import pytest

from scaler.client.client import Client
from scaler.client.future import ScalerFuture
from scaler.store.store_client import StoreAddress, StoreClient

MB = 1 << 20
POISONED_PID_VARIABLE = "SCALER_TEST_POISONED_PID"


def _rebuild(data: bytes) -> ClientPoison:
    if str(os.getpid()) == os.environ.get(POISONED_PID_VARIABLE):
        raise AssertionError("a value kept on the cluster was unpickled in the client process")
    return ClientPoison(data)


class ClientPoison:
    """A value that workers can unpickle and a poisoned process cannot."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self) -> tuple:
        return _rebuild, (self.data,)


def make_poison(size: int, fill: int = 1) -> ClientPoison:
    return ClientPoison(bytes([fill]) * size)


def size_of(*values: ClientPoison) -> int:
    return sum(len(value.data) for value in values)


def poison_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # Workers started earlier never see the variable; those started meanwhile see another process's id.
    monkeypatch.setenv(POISONED_PID_VARIABLE, str(os.getpid()))


def store_fetches(native: Client, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The object ids `native` reads from stores from now on (a spy on the real Stores.fetch, which still runs)."""
    stores = native._connection.stores
    fetched: list[bytes] = []
    real_fetch = stores.fetch

    def counted(object_id: bytes, holder: str, timeout: float | None = None):  # noqa: ANN202
        fetched.append(object_id)
        return real_fetch(object_id, holder, timeout)

    monkeypatch.setattr(stores, "fetch", counted)
    return fetched


def results_delivered(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the results this process receives inside result messages from now on, for any client (a spy
    on the real ScalerFuture.deliver, which still runs). A result left in a store is not delivered so."""
    sizes: list[int] = []
    real_deliver = ScalerFuture.deliver

    def counted(future: ScalerFuture, task_id: int, payload) -> None:  # noqa: ANN001
        sizes.append(len(memoryview(payload)))
        real_deliver(future, task_id, payload)

    monkeypatch.setattr(ScalerFuture, "deliver", counted)
    return sizes


def objects_in_store(native: Client) -> int:
    stores = native._connection.stores
    address = stores.address_of(stores.home)
    assert isinstance(address, StoreAddress)
    with StoreClient(address, local=True) as reader:
        return reader.status().object_count
