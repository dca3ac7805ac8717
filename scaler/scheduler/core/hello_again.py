"""A hello from a peer this scheduler has registered: a client or a store coming back to it.

A peer that moved to another scheduler address (this one was silent to it: stalled, or cut off from that peer
only) and came back before this scheduler dropped it says hello again on the same routing identity. A worker
does not come here: its hello is a breach (message_rules.py), and it leaves and joins again (PROTOCOL.md §23).

- A client naming its own id prefix is welcomed again and its session goes on (PeerRegistry.hello_again).
- A store naming its own data address is welcomed again and keeps every object this scheduler has it hold: it
  then announces everything it holds (objectsHeld), as after any welcome, which also makes it delete what was
  freed while it was away (the deletes sent meanwhile were lost with its connection). Leaving and joining
  again instead would lose what it alone holds, and results in it would be made again.

Any other hello of a registered peer is answered as before, protocolError "hello sent twice".
"""

from __future__ import annotations

import logging

from scaler.protocol import messages as m
from scaler.scheduler.core.message_rules import violation
from scaler.scheduler.core.peer_registry import ClientPeer, PeerRegistry
from scaler.scheduler.core.store_registry import StorePeer, StoreRegistry

logger = logging.getLogger(__name__)


def hello_again(
    peers: PeerRegistry, stores: StoreRegistry, peer: ClientPeer | StorePeer, hello: m.Hello, now: float
) -> m.Message:
    """The answer to a registered client's or store's hello."""
    if isinstance(peer, ClientPeer):
        return peers.hello_again(peer, hello, now, stores.directory_for(peer.host_key))
    if hello.data_address != peer.data_address or peers.refuses_version(hello):
        return m.ProtocolError(reason=violation(m.Role.STORE, m.Hello))
    peer.last_seen = now
    logger.info(f"StoreRegistry: store {peer.name} at {peer.data_address} came back (it had moved to another "
                "scheduler address); it keeps its objects here")
    return peers.welcome(m.Role.STORE)
