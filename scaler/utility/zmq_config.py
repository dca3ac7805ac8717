"""ZeroMQ addresses as users write them, read by one parser for every entry point.

`tcp://host:port`, `ipc:///path` (or `ipc://@name`, a Linux abstract socket) and `inproc://name`.
The command lines and `Client` both call `parse_zmq_address`, so a bad address gets the same short
message everywhere, before anything is bound, connected or sent. `ZMQConfig` keeps the name and the
`from_string`/`to_address` pair that Scaler 1.9.x code uses.
"""

from __future__ import annotations

import dataclasses
import enum

EXAMPLES = "tcp://127.0.0.1:2345 or ipc:///tmp/scaler.sock"

# sun_path holds 108 bytes, the last one a NUL: a longer ipc path cannot be bound or connected to.
_MAX_IPC_PATH_BYTES = 107


class ZMQType(enum.Enum):
    tcp = "tcp"
    ipc = "ipc"
    inproc = "inproc"


@dataclasses.dataclass(frozen=True)
class ZMQConfig:
    """One address: for tcp a host and a port; for ipc the path (in `host`); for inproc the name."""

    type: ZMQType
    host: str
    port: int | None = None

    def to_address(self) -> str:
        if self.type is ZMQType.tcp:
            return f"tcp://{self.host}:{self.port}"
        return f"{self.type.value}://{self.host}"

    @staticmethod
    def from_string(text: str) -> ZMQConfig:
        return parse_zmq_address(text)

    def __str__(self) -> str:
        return self.to_address()


def parse_zmq_address(text: object) -> ZMQConfig:
    """Read an address; anything else is a ValueError saying what is wrong and what a valid one looks like."""
    if not isinstance(text, str):
        raise ValueError(f"an address must be a string such as {EXAMPLES}, got {type(text).__name__}")
    scheme, separator, rest = text.partition("://")
    if not separator or scheme not in ZMQType.__members__:
        raise ValueError(f"{text!r} is not a ZeroMQ address such as {EXAMPLES} (tcp://, ipc:// or inproc://)")
    if not rest or rest != rest.strip():
        raise ValueError(f"{text!r} has nothing (or spaces) after {scheme}://; an address looks like {EXAMPLES}")
    kind = ZMQType(scheme)
    if kind is ZMQType.ipc:
        if len(rest.encode()) > _MAX_IPC_PATH_BYTES:
            raise ValueError(
                f"{text!r}: an ipc path may have at most {_MAX_IPC_PATH_BYTES} bytes (the OS limit); "
                f"an address looks like {EXAMPLES}"
            )
        return ZMQConfig(kind, rest)
    if kind is ZMQType.inproc:
        return ZMQConfig(kind, rest)
    host, colon, port_text = rest.rpartition(":")
    if not colon or not host or not port_text:
        raise ValueError(f"{text!r}: a tcp address needs a host and a port, e.g. tcp://127.0.0.1:2345")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535, e.g. tcp://127.0.0.1:2345")
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            raise ValueError(f"{text!r}: an IPv6 host goes in brackets, e.g. tcp://[::1]:2345 (or tcp://127.0.0.1:2345)")
    elif any(character in host for character in "/[]:@ "):
        raise ValueError(f"{text!r}: {host!r} is not a host name or address, e.g. tcp://127.0.0.1:2345")
    return ZMQConfig(kind, host, int(port_text))


def zmq_address_text(text: object) -> str:
    """The address itself, checked: what sockets are given."""
    return parse_zmq_address(text).to_address()
