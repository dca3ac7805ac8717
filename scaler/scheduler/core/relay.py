"""The relay fallback (PROTOCOL.md §19): data messages for a store that their sender cannot reach directly.

A client, or a store fetching from another store, that gets no connection to a store's data address
wraps its data message in `relay` to the scheduler; the scheduler passes it to the store over the
store's control link, naming the requester, and passes the store's answer back the same way. The
frames are handed on as they came: the scheduler decides where they go and counts their payload bytes
(`bytes_relayed`, the monitor feed), never reads or copies them. Each pair of requester and store is
said in the log once, when its first relay passes: an operator sees which peers cannot reach which
data address.
"""

from __future__ import annotations

import collections
import logging
from typing import Union

from scaler.protocol import messages as m
from scaler.scheduler.core.outgoing import Outgoing
from scaler.scheduler.core.peer_registry import ClientPeer, PeerRegistry
from scaler.scheduler.core.store_registry import StorePeer, StoreRegistry

logger = logging.getLogger(__name__)

RelayPeer = Union[ClientPeer, StorePeer]


class RelayRouter:
    def __init__(self, peers: PeerRegistry, stores: StoreRegistry, counters: collections.Counter[str]) -> None:
        self._peers = peers
        self._stores = stores
        self._counters = counters
        # (requester identity, store data address) pairs relayed at least once: logged once each.
        self._announced: set[tuple[bytes, str]] = set()

    def on_relay(self, sender: RelayPeer, relay: m.Relay, out: list[Outgoing]) -> None:
        """A request from a client or a store, or (from a store, naming `peer`) a store's answer."""
        if relay.peer:
            if isinstance(sender, StorePeer):
                self._answer(sender, relay, out)
            else:
                out.append((sender.identity, m.ProtocolError(reason="only a store answers a relay (names a peer)")))
            return
        if relay.error:
            out.append((sender.identity, m.ProtocolError(reason="a relayed request carries no error")))
            return
        store = self._stores.by_address.get(relay.store)
        if store is None:
            out.append((sender.identity, m.Relay(
                frames=[], store=relay.store, request_id=relay.request_id,
                error=f"no store with data address {relay.store!r} is registered with the scheduler",
            )))
            return
        self._announce(sender, store)
        self._counters["bytes_relayed"] += relay.payload_bytes
        out.append((store.identity, m.Relay(frames=relay.frames, peer=sender.identity, request_id=relay.request_id)))

    def _answer(self, store: StorePeer, relay: m.Relay, out: list[Outgoing]) -> None:
        requester = self._peers.clients.get(relay.peer) or self._stores.stores.get(relay.peer)
        if requester is None:
            return  # the requester left meanwhile: nobody waits for this answer
        self._counters["bytes_relayed"] += relay.payload_bytes
        out.append((requester.identity, m.Relay(
            frames=relay.frames, store=store.data_address, request_id=relay.request_id, error=relay.error,
        )))

    def _announce(self, requester: RelayPeer, store: StorePeer) -> None:
        key = (requester.identity, store.data_address)
        if key in self._announced:
            return
        self._announced.add(key)
        kind = "client" if isinstance(requester, ClientPeer) else "store"
        logger.warning(
            f"RelayRouter: relaying data between {kind} {requester.name} and store {store.name}: the {kind} "
            f"cannot reach the store's data address {store.data_address} directly"
        )

    def forget(self, identity: bytes = b"", data_address: str = "") -> None:
        """A peer left (by its identity), or a store (by its data address too): its pairs may be told again."""
        if not self._announced:
            return
        self._announced = {
            (requester, address) for requester, address in self._announced
            if requester != identity and address != data_address
        }
