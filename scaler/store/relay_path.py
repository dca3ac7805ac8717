"""What a StoreClient needs of a peer that can relay data messages through the scheduler (PROTOCOL.md §19).

A client relays over its own link to the scheduler (scaler/client/store_relay.py). The probe time is how
long a first request waits for a connection to a store's data address before the store counts as out of
reach: connections on a working network take milliseconds; an unrouted or firewalled address never comes.
"""

from __future__ import annotations

from typing import Protocol

from scaler.protocol import messages as m

DEFAULT_PROBE_SECONDS = 3.0


class RelayPath(Protocol):
    owner: str  # who relays, for the log: "Client"

    def send(self, store: str, request_id: int, frames: list[m.Buffer]) -> None:
        """Pass a data message (its frames) for the store with this data address to the scheduler."""

    def receive(self, store: str, deadline: float) -> m.Relay | None:
        """The next relayed answer from this store (monotonic `deadline`; None once it has passed)."""
