"""The store's link to the scheduler (the control protocol's role `store`), as the store server sees it.

The server calls these methods from its one thread and polls the sockets the link returns from `start`.
A store without a link is standalone: local processes order deletes themselves (data protocol `delete`).
The link that speaks to a real scheduler (hello with the data address, host key and capacity; heartbeats
with the store's status; objectsHeld/objectsLost; deleteObjects in) is made where the control protocol
learns the role.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Union

import zmq

from scaler.protocol import messages as m
from scaler.store.store_records import StoreStatus


@dataclasses.dataclass(frozen=True)
class StoreIdentity:
    """What the scheduler and the other peers know a store by."""

    data_address: str  # tcp://: its identity for everyone
    ipc_address: str  # ipc://: for processes with the same host key
    host_key: str
    capacity_bytes: int
    pid: int


@dataclasses.dataclass(frozen=True)
class DeleteOrder:
    object_ids: tuple[bytes, ...]


@dataclasses.dataclass(frozen=True)
class StopStore:
    reason: str
    # The store cannot work (the scheduler refused its hello): logged as an error, and its process exits with
    # status 1, as a refused worker's does.
    failed: bool = False


@dataclasses.dataclass(frozen=True)
class Registered:
    """The scheduler welcomed the store: it is told everything the store holds (objects_held)."""


@dataclasses.dataclass(frozen=True)
class RelayedRequest:
    """A data message from a peer that cannot reach this store directly, passed on by the scheduler (§19).
    `peer` is opaque: the answer goes back naming it."""

    peer: bytes
    frames: list[m.Buffer]


@dataclasses.dataclass(frozen=True)
class RelayedAnswer:
    """The answer of a store this one cannot reach directly, to a request it relayed (or why it could not be)."""

    store: str
    request_id: int
    frames: list[m.Buffer]
    error: str


LinkEvent = Union[DeleteOrder, StopStore, Registered, RelayedRequest, RelayedAnswer]


class SchedulerLink(abc.ABC):
    @abc.abstractmethod
    def start(self, context: zmq.Context, identity: StoreIdentity, now: float) -> list[zmq.Socket]:
        """Connect (say hello); returns the sockets the server polls for `on_readable`."""

    @abc.abstractmethod
    def on_readable(self, socket: zmq.Socket, now: float) -> list[LinkEvent]:
        """Read what arrived on one of the link's sockets (without blocking)."""

    @abc.abstractmethod
    def on_tick(self, status: StoreStatus, now: float) -> list[LinkEvent]:
        """Heartbeat with this status when due; notice a scheduler that went silent."""

    @abc.abstractmethod
    def objects_held(self, objects: tuple[tuple[bytes, int], ...]) -> None:
        """This store holds these (object id, size): all it holds once registered, then each copy it fetched."""

    @abc.abstractmethod
    def objects_lost(self, object_ids: tuple[bytes, ...]) -> None:
        """This store lost these objects without being told to delete them (an unreadable spill file, a
        borrowed object whose lender exited)."""

    @abc.abstractmethod
    def send_relay(self, relay: m.Relay, track: bool = False) -> zmq.MessageTracker | None:
        """Send a relay to the scheduler: an answer to a relayed request, or a request this store relays."""

    @abc.abstractmethod
    def close(self) -> None:
        """Say goodbye and close the sockets."""
