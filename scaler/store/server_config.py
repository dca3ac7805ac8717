"""What a store process is started with: the fields of its option table (settings.py), defaults included."""

from __future__ import annotations

import dataclasses

from scaler.store.settings import STORE, tcp_bind_address

__all__ = ["StoreServerConfig", "StoreStartError", "tcp_bind_address"]


class StoreStartError(RuntimeError):
    """The store could not start serving (its address is taken, no shared memory here, ...)."""


@dataclasses.dataclass(frozen=True)
class StoreServerConfig:
    capacity_bytes: int
    # tcp://HOST (a free port) or tcp://HOST:PORT; HOST is what peers connect to, so not a wildcard.
    data_address: str = STORE.field("data_address")
    spill_directory: str = ""  # empty: the system's temporary directory
    host_key: str = ""  # empty: this host's (see scaler/utility/host_key.py)
    pool_idle_seconds: float = STORE.field("pool_idle_seconds")
    work_directory_parent: str | None = None
    # Take loans of local writers' memory (borrowed_memory.py); False: every object is copied into a segment.
    borrowing: bool = STORE.field("borrowing")
