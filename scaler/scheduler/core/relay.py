"""The relay fallback (PROTOCOL.md §19): data messages for a store that their sender cannot reach directly.

A client, or a store fetching from another store, that gets no connection to a store's data address
wraps its data message in `relay` to the scheduler; the scheduler passes it to the store over the
store's control link, naming the requester, and passes the store's answer back the same way. The
frames are handed on as they came: the scheduler decides where they go and counts their payload bytes
(`bytes_relayed`, the monitor feed), never reads or copies them. Each pair of requester and store is
said in the log once, when its first relay passes: an operator sees which peers cannot reach which
data address.

A store that leaves (disconnects, times out, is dropped) answers nothing more: the requests relayed to
it and not answered yet are answered here, each with `relay{error}` naming the store, so that their
requesters know at once instead of waiting for their own timeouts. Answers carry no request id at
this level (the scheduler does not read the frames), so a store's answer to a requester settles that
requester's oldest request to it: exact for a requester that waits for each answer before its next
request (a client does), and for one with several requests in flight an error may name a request
that was answered already (requesters ignore an answer to a request they no longer wait for).
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

# Requests not answered yet, kept per requester and store: a bound, for a requester whose requests get
# no answer (it is only told of the newest ones when their store leaves).
_MAX_PENDING_PER_PAIR = 1024


class RelayRouter:
    def __init__(self, peers: PeerRegistry, stores: StoreRegistry, counters: collections.Counter[str]) -> None:
        self._peers = peers
        self._stores = stores
        self._counters = counters
        # (requester identity, store data address) pairs relayed at least once: logged once each.
        self._announced: set[tuple[bytes, str]] = set()
        # Store data address -> requester identity -> the request ids relayed to it and not answered, oldest first.
        self._pending: dict[str, dict[bytes, collections.deque[int]]] = {}

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
        by_requester = self._pending.setdefault(store.data_address, {})
        pending = by_requester.get(sender.identity)
        if pending is None:
            pending = by_requester[sender.identity] = collections.deque(maxlen=_MAX_PENDING_PER_PAIR)
        pending.append(relay.request_id)
        self._counters["bytes_relayed"] += relay.payload_bytes
        out.append((store.identity, m.Relay(frames=relay.frames, peer=sender.identity, request_id=relay.request_id)))

    def _answer(self, store: StorePeer, relay: m.Relay, out: list[Outgoing]) -> None:
        by_requester = self._pending.get(store.data_address)
        if by_requester is not None:
            pending = by_requester.get(relay.peer)
            if pending:
                pending.popleft()
                if not pending:
                    del by_requester[relay.peer]
                    if not by_requester:
                        del self._pending[store.data_address]
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

    def store_left(self, store: StorePeer, why: str, out: list[Outgoing]) -> None:
        """The store is gone (already out of the registry): each request relayed to it and not answered gets
        an error answer naming it, then its pairs are forgotten."""
        for requester_identity, request_ids in self._pending.pop(store.data_address, {}).items():
            requester = self._peers.clients.get(requester_identity) or self._stores.stores.get(requester_identity)
            if requester is None:
                continue
            error = f"the store {store.name} at {store.data_address} left the scheduler before it answered: {why}"
            for request_id in request_ids:
                out.append((requester.identity, m.Relay(
                    frames=[], store=store.data_address, request_id=request_id, error=error,
                )))
        self.forget(identity=store.identity, data_address=store.data_address)

    def forget(self, identity: bytes = b"", data_address: str = "") -> None:
        """A peer left (by its identity), or a store (by its data address too): its pairs may be told again, and
        nobody waits for answers to its requests."""
        if identity:
            for address in list(self._pending):
                by_requester = self._pending[address]
                if by_requester.pop(identity, None) is not None and not by_requester:
                    del self._pending[address]
        if data_address:
            self._pending.pop(data_address, None)
        if not self._announced:
            return
        self._announced = {
            (requester, address) for requester, address in self._announced
            if requester != identity and address != data_address
        }
