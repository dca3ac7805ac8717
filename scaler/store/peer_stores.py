"""The stores as a client or a processor sees them: where it puts large payloads, and where it reads them.

The scheduler sends the directory of stores (welcome.storeDirectory, then storeDirectory whenever it
changes) and names this peer's home store. A payload of `inline_limit` bytes or more is put into the
home store and travels on the control path as its id, size and holder (PROTOCOL.md §13); without a
home store everything stays on the control path, as it always did. A stored object is read from its
holder: through shared memory when the holder is on this host (same host key), else over TCP, or
through the scheduler when this peer has a relay path and the store's TCP address is out of its reach.

Puts and gets run on the caller's thread; each StoreClient serializes its own requests, so one lock
per store is all the sharing there is.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from scaler.protocol import messages as m
from scaler.protocol import stored_payload
from scaler.protocol.serializer import DefaultSerializer, Serializer
from scaler.protocol.stored_payload import StoredBuffer
from scaler.store.relay_path import DEFAULT_PROBE_SECONDS, RelayPath
from scaler.store.store_client import StoreAddress, StoreClient, StoreTimeout

logger = logging.getLogger(__name__)


class Stores:
    def __init__(
        self, timeout_seconds: float, relay: RelayPath | None = None, probe_seconds: float = DEFAULT_PROBE_SECONDS,
        lend: bool = False,
    ) -> None:
        self._timeout_seconds = timeout_seconds
        self._lend = lend  # lend large `bytes` payloads to a local home store instead of copying them (clients)
        self._relay = relay
        self._probe_seconds = probe_seconds
        self._lock = threading.Lock()
        self._addresses: dict[str, StoreAddress] = {}
        self._home = ""
        self._clients: dict[str, StoreClient] = {}
        # Clients of stores the directory no longer lists that were busy when it changed: closed once idle.
        self._retired: list[StoreClient] = []
        self._closed = False
        self.inline_limit = m.INLINE_LIMIT_BYTES

    # ------------------------------------------------------------------------------------------ directory

    def update(self, directory: m.StoreDirectory, home: str | None = None) -> None:
        """The scheduler's directory of stores; `home` overrides its home store (a worker's own store)."""
        with self._lock:
            self._addresses = {
                entry.data_address: StoreAddress(entry.data_address, entry.ipc_address, entry.host_key)
                for entry in directory.stores
            }
            self._home = home if home is not None else directory.home_store
            gone = self._clients.keys() - self._addresses.keys()
            retired = self._retired + [self._clients.pop(data_address) for data_address in gone]
            # Never waits for a request under way (a fetch can wait long; the caller may be the thread that
            # must deliver its relayed answer): a busy client is closed at a later change, or with the stores.
            self._retired = [client for client in retired if not client.close_if_idle()]

    @property
    def home(self) -> str:
        """The data address of the home store; empty when there is none (then nothing is stored)."""
        return self._home

    def address_of(self, data_address: str) -> StoreAddress | None:
        """How to reach a store of the directory (None: not in it)."""
        return self._addresses.get(data_address)

    def _client_for(self, data_address: str) -> StoreClient:
        with self._lock:
            if self._closed:
                raise RuntimeError("the stores of this peer are closed")
            client = self._clients.get(data_address)
            if client is None:
                address = self._addresses.get(data_address) or StoreAddress(data_address)
                client = self._clients[data_address] = StoreClient(
                    address, timeout_seconds=self._timeout_seconds, relay=self._relay,
                    probe_seconds=self._probe_seconds, lend=self._lend and data_address == self._home,
                )
            return client

    # ------------------------------------------------------------------------------------------ writing

    def put_object(
        self, object_id: bytes, obj: Any, serializer: Serializer | None, name: str, wait: bool = True
    ) -> m.ObjectPayload:
        """Put `obj` into the home store (serialized once, its buffers out-of-band); what names it."""
        return self.put_prepared(object_id, stored_payload.prepare(obj, serializer), name, wait=wait)

    def put_prepared(
        self, object_id: bytes, prepared: stored_payload.PreparedPayload, name: str, wait: bool = True
    ) -> m.ObjectPayload:
        """`wait=False`: do not wait for the store's answer to a local seal (StoreClient.put_prepared)."""
        home = self._home
        size = self._client_for(home).put_prepared(object_id, prepared, name, wait=wait)
        return m.ObjectPayload(object_id=object_id, payload=b"", name=name, size=size, holder=home)

    def put_payload(self, item: m.ObjectPayload, serializer: Serializer | None) -> m.ObjectPayload:
        """Put an object that is serialized already into the home store; what names it instead."""
        prepared = stored_payload.PreparedPayload(
            stored_payload.PayloadFormat.PICKLE if _is_default(serializer) else stored_payload.PayloadFormat.SERIALIZER,
            bytes(item.payload), [],
        )
        return self.put_prepared(item.object_id, prepared, item.name)

    # ------------------------------------------------------------------------------------------ reading

    def fetch(self, object_id: bytes, holder: str, timeout: float | None = None) -> StoredBuffer:
        """The stored payload of an object, from its holder: mapped (same host) or received (another host).

        A mapping stays pinned in its store until the returned buffer and every view of it are gone.
        `timeout` (None: the one these stores were made with) bounds the wait for the object.
        """
        return StoredBuffer(self._client_for(holder).get_payload(object_id, timeout=timeout))

    def read(self, object_id: bytes, holder: str, serializer: Serializer | None, timeout: float | None = None) -> Any:
        """The object itself: through the home store when there is one (it fetches from the holder if it has
        not got it: the store-to-store pull), else from the holder directly. A home store that does not answer
        is passed by: the holder may well be alive, and a reader that reports its object lost makes it rerun."""
        via = self._home or holder
        if via == holder:
            return self._client_for(holder).get(object_id, timeout=timeout, serializer=serializer)
        try:
            return self._client_for(via).get(object_id, holder=holder, timeout=timeout, serializer=serializer)
        except StoreTimeout:
            return self._client_for(holder).get(object_id, timeout=timeout, serializer=serializer)

    def let_go(self, object_ids: list[bytes]) -> None:
        """These objects are deleted: what was lent of them may be freed (StoreClient.let_go)."""
        for client in self._current_clients():
            client.let_go(object_ids)

    def let_go_all(self) -> None:
        """Every object this peer stored is deleted (a client's clear())."""
        for client in self._current_clients():
            client.let_go_all()

    def sweep(self) -> None:
        """Periodically (a client's heartbeat): memory held for later puts that is no longer worth holding."""
        for client in self._current_clients():
            client.sweep_kept_mappings()

    def _current_clients(self) -> list[StoreClient]:
        with self._lock:
            return list(self._clients.values())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients = [*self._clients.values(), *self._retired]
            self._clients, self._retired = {}, []
        for client in clients:
            client.close()


def _is_default(serializer: Serializer | None) -> bool:
    return serializer is None or type(serializer) is DefaultSerializer
