"""Clients rebuilt from a pickle, one per scheduler and settings in a process.

Every task on a worker that receives "the client" shares one connection instead of opening its own. The
lock is held while a client connects (seconds, against a slow scheduler): a thread that forks meanwhile
leaves its child a copy of the lock held by a thread the child does not have, so the child makes a new one
(fork_safety.py). The parent's clients it inherits say they are not connected there, and are replaced.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Callable, Generic, Protocol, TypeVar

from scaler.utility.fork_safety import fix_after_fork


class _Connectable(Protocol):
    @property
    def is_connected(self) -> bool: ...


ClientT = TypeVar("ClientT", bound=_Connectable)


class UnpickledClients(Generic[ClientT]):
    def __init__(self) -> None:
        self._clients: dict[Hashable, ClientT] = {}
        self._lock = threading.Lock()
        fix_after_fork(self)

    def shared(self, key: Hashable, connect: Callable[[], ClientT]) -> ClientT:
        """The connected client kept for `key`, else a new one from `connect()`, kept for the next caller."""
        with self._lock:
            client = self._clients.get(key)
            if client is None or not client.is_connected:
                client = self._clients[key] = connect()
            return client

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
