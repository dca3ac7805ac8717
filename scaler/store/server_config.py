"""What a store process is started with, and the checks of it that its command line and the Cluster share."""

from __future__ import annotations

import dataclasses

import psutil

from scaler.utility.zmq_config import parse_zmq_address

# Of this machine's memory, what a store keeps in memory by default before it spills to disk.
DEFAULT_CAPACITY_FRACTION = 0.3


def default_capacity_bytes() -> int:
    return int(psutil.virtual_memory().total * DEFAULT_CAPACITY_FRACTION)


class StoreStartError(RuntimeError):
    """The store could not start serving (its address is taken, no shared memory here, ...)."""


@dataclasses.dataclass(frozen=True)
class StoreServerConfig:
    capacity_bytes: int
    # tcp://HOST (a free port) or tcp://HOST:PORT; HOST is what peers connect to, so not a wildcard.
    data_address: str = "tcp://127.0.0.1"
    spill_directory: str = ""  # empty: the system's temporary directory
    host_key: str = ""  # empty: this host's (see scaler/utility/host_key.py)
    pool_idle_seconds: float = 30.0
    work_directory_parent: str | None = None
    # Take loans of local writers' memory (borrowed_memory.py); False: every object is copied into a segment.
    borrowing: bool = True


def tcp_bind_address(data_address: str) -> str:
    """What to bind for a data address: tcp://HOST means a free port. ValueError for anything else."""
    rest = data_address[len("tcp://"):] if data_address.startswith("tcp://") else None
    if rest is not None and (":" not in rest or rest.endswith("]")):  # no port
        if not rest:
            raise ValueError("a data address needs a host, e.g. tcp://192.168.1.10")
        host = parse_zmq_address(f"{data_address}:1").host
        bind = f"{data_address}:*"
    else:
        parsed = parse_zmq_address(data_address)
        if parsed.type.value != "tcp":
            raise ValueError(f"{data_address!r}: a data address is tcp://HOST or tcp://HOST:PORT")
        bind = parsed.to_address()
        host = parsed.host
    if host in ("*", "0.0.0.0", "[::]"):
        raise ValueError(f"{data_address!r}: give the address other hosts reach this store at, not a wildcard")
    return bind
