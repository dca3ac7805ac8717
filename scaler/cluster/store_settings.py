"""What a Cluster's store (the object store of its host, PROTOCOL.md §17) is started with.

A Cluster runs one store unless told not to (`Cluster(..., store=None)`, `scaler_cluster --no-store`).
Its data address is where other hosts reach it: by default the address of this host's interface that
routes to the scheduler, so that a store on a machine with several interfaces is reached on the one
its scheduler sees; a scheduler on loopback or ipc:// means everything runs here, so loopback.
"""

from __future__ import annotations

import dataclasses
import socket

from scaler.store.server_config import tcp_bind_address
from scaler.utility.scheduler_addresses import first_scheduler_address
from scaler.utility.zmq_config import ZMQType, parse_zmq_address

_LOOPBACK = "tcp://127.0.0.1"


@dataclasses.dataclass(frozen=True)
class StoreSettings:
    # Bytes of objects held in memory before the least recently used spill to disk; None: 30% of RAM.
    capacity_bytes: int | None = None
    # tcp://HOST (a free port) or tcp://HOST:PORT; None: see default_data_address.
    data_address: str | None = None
    # Where spilled objects go (unlinked files); None: the system's temporary directory.
    spill_directory: str | None = None
    # Whether the store borrows large `bytes` from clients on its host instead of having them copied into
    # segments (PROTOCOL.md §17, "Borrowed objects"); False: every object is copied.
    borrowing: bool = True

    def __post_init__(self) -> None:
        if self.capacity_bytes is not None and (
            isinstance(self.capacity_bytes, bool) or not isinstance(self.capacity_bytes, int) or self.capacity_bytes < 0
        ):
            raise ValueError(f"store capacity_bytes must be a whole number, 0 or more, got {self.capacity_bytes!r}")
        if self.data_address is not None:
            tcp_bind_address(self.data_address)
        if not isinstance(self.borrowing, bool):
            raise ValueError(f"store borrowing must be True or False, got {self.borrowing!r}")


def default_data_address(scheduler_address: str) -> str:
    """tcp://IP of the interface that routes to the scheduler (a free port is chosen at bind); with standby
    schedulers, to the first of them."""
    parsed = parse_zmq_address(first_scheduler_address(scheduler_address))
    if parsed.type is not ZMQType.tcp:
        return _LOOPBACK
    host = parsed.host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, parsed.port or 1))  # a UDP connect sends nothing: it only picks the route
            local_ip = probe.getsockname()[0]
    except OSError:
        return _LOOPBACK
    if local_ip in ("0.0.0.0", "::"):
        return _LOOPBACK
    return f"tcp://[{local_ip}]" if family == socket.AF_INET6 else f"tcp://{local_ip}"
