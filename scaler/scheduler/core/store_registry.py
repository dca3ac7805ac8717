"""The registered stores (PROTOCOL.md §17): how a store joins and leaves, what it last reported, and the
directory of stores that clients and workers are told, with each receiver's home store.

A store is named everywhere by its data address (tcp://). A worker names its store in its hello; that
name is kept on the worker as it is, so a store may register before or after its workers, and
`store_of` finds it while it is registered. What a departed store held is the object table's business.
"""

from __future__ import annotations

import dataclasses
import logging

from scaler.protocol import messages as m

logger = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False, slots=True)
class StorePeer:
    identity: bytes
    name: str
    hostname: str
    data_address: str
    ipc_address: str
    host_key: str
    capacity_bytes: int
    last_seen: float
    last_heartbeat: m.Heartbeat | None = None

    @property
    def free_bytes(self) -> int:
        """Memory it can still fill before it spills: spilled objects hold no memory."""
        heartbeat = self.last_heartbeat
        in_memory = heartbeat.bytes_held - heartbeat.bytes_spilled if heartbeat is not None else 0
        return max(self.capacity_bytes - max(in_memory, 0), 0)

    @property
    def entry(self) -> m.StoreEntry:
        return m.StoreEntry(data_address=self.data_address, ipc_address=self.ipc_address, host_key=self.host_key)


class StoreRegistry:
    """Stores by routing identity, and the same stores by data address (one store per address)."""

    def __init__(self) -> None:
        self.stores: dict[bytes, StorePeer] = {}
        self.by_address: dict[str, StorePeer] = {}
        # The directory's entries, made once per change of membership, not once per receiver.
        self._entries: list[m.StoreEntry] | None = None

    def on_hello(self, sender: bytes, hello: m.Hello, now: float) -> str | None:
        """Register a store; returns why it is refused instead (None: registered)."""
        if not hello.data_address:
            return "a store must name its data address"
        if hello.data_address in self.by_address:
            return f"a store with data address {hello.data_address} is registered already"
        store = StorePeer(
            identity=sender, name=hello.name, hostname=hello.hostname, data_address=hello.data_address,
            ipc_address=hello.ipc_address, host_key=hello.host_key, capacity_bytes=hello.capacity_bytes, last_seen=now,
        )
        self.stores[sender] = self.by_address[store.data_address] = store
        self._entries = None
        logger.info(
            f"StoreRegistry: store {store.name} connected at {store.data_address}, "
            f"capacity {store.capacity_bytes:,} bytes"
        )
        return None

    def silent(self, now: float, timeout_seconds: float) -> list[StorePeer]:
        deadline = now - timeout_seconds
        return [store for store in self.stores.values() if store.last_seen < deadline]

    def remove(self, store: StorePeer, why: str, level: int = logging.INFO) -> None:
        del self.stores[store.identity]
        del self.by_address[store.data_address]
        self._entries = None
        logger.log(level, f"StoreRegistry: store {store.name} at {store.data_address} {why}")

    def store_of(self, store_address: str) -> StorePeer | None:
        """The registered store a worker named in its hello, if it is registered now."""
        return self.by_address.get(store_address) if store_address else None

    def directory_for(self, host_key: str, named_store: str = "") -> m.StoreDirectory:
        """What a peer with this host key (a worker: and this store of its own) is told: every store, its home."""
        if self._entries is None:
            self._entries = [store.entry for _, store in sorted(self.by_address.items())]
        return m.StoreDirectory(stores=list(self._entries), home_store=self.home_of(host_key, named_store))

    def home_of(self, host_key: str, named_store: str = "") -> str:
        """The store a peer puts its objects into: its own, else one on its host, else the one with most room."""
        if named_store in self.by_address:
            return named_store
        candidates = [store for store in self.stores.values() if host_key and store.host_key == host_key]
        candidates = candidates or list(self.stores.values())
        if not candidates:
            return ""
        return min(candidates, key=lambda store: (-store.free_bytes, store.data_address)).data_address
