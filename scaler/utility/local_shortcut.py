"""A Unix socket beside a scheduler's loopback TCP port, which its peers on the same machine connect to instead.

Over loopback, TCP runs both ends' whole network stack inside the sender's system call: on the machine this was
measured on, each sendmsg of a round trip took 32 to 34 µs over TCP against 17 to 30 µs over a Unix socket when
the machine was quiet, and 85 to 110 µs against 35 to 50 µs in a slow spell (benchmarks/README.md, "H").

So a scheduler whose ZMTP router is bound to 127.0.0.1, ::1 or every address also listens on a Linux abstract
Unix socket named for its user, that loopback address and the port (`listen_address`), and a ZMTP dealer told to
connect to that loopback address and port connects there instead (`connect`). The messages are the same ZMTP;
only the kind of socket changes, and nothing else needs to know.

Why it is safe:
- An abstract socket has no file: nothing is left behind when a process dies, and its name belongs to the
  network namespace, as the loopback address does (a peer in another namespace never finds it).
- Anyone on the machine may connect to it, as to the TCP port; a scheduler with CURVE keys uses libzmq and
  serves no shortcut.
- Anyone may also have bound the name first. So a peer uses the shortcut only when the process listening there
  runs as its own user (SO_PEERCRED) and speaks TCP otherwise; the scheduler, finding the name taken, serves TCP
  alone and says so.

`SCALER_LOCAL_SHORTCUT=off` in a process's environment turns it off there (a scheduler then serves none, a peer
connects over TCP).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from typing import Union

SHORTCUT_ENV = "SCALER_LOCAL_SHORTCUT"
_PEER_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
# The loopback address whose port a scheduler bound to all addresses serves, for each family.
_LOOPBACK_OF_ANY = {"0.0.0.0": "127.0.0.1", "::": "::1"}
_LOOPBACKS = ("127.0.0.1", "::1")


def enabled() -> bool:
    return os.environ.get(SHORTCUT_ENV, "on").strip().lower() not in ("off", "0", "no", "false")


def _name(loopback: str, port: int) -> str:
    return f"scaler-{os.getuid()}-{loopback}-{port}"


def listen_address(bound_address: str) -> str | None:
    """The abstract ipc:// address a router bound to `bound_address` (its address with the port chosen, as
    `ZmtpRouter.address` shows it) also listens on, or None: not a loopback or wildcard tcp address, or turned
    off."""
    scheme, _, rest = bound_address.partition("://")
    if scheme != "tcp" or not enabled():
        return None
    host, _, port = rest.rpartition(":")
    host = _LOOPBACK_OF_ANY.get(host.strip("[]"), host.strip("[]"))
    if host not in _LOOPBACKS or not port.isdigit():
        return None
    return f"ipc://@{_name(host, int(port))}"


def connect(target: Union[tuple, str]) -> socket.socket | None:
    """A non-blocking Unix socket connected to the shortcut of the scheduler at `target` (a resolved TCP socket
    address), or None: `target` is not 127.0.0.1 or ::1, no scheduler serves one, its listener is another user's,
    or the shortcut is turned off."""
    if not isinstance(target, tuple) or not enabled():
        return None
    try:
        host = str(ipaddress.ip_address(target[0]))
    except ValueError:
        return None
    if host not in _LOOPBACKS:
        return None
    connecting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connecting.setblocking(False)
        connecting.connect("\0" + _name(host, target[1]))  # a Unix socket connects at once, or fails
        _, uid, _ = _PEER_CREDENTIALS.unpack(
            connecting.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER_CREDENTIALS.size)
        )
    except OSError:
        connecting.close()  # nobody listens there (no scheduler, or it went), or its backlog is full: TCP
        return None
    if uid != os.getuid():
        connecting.close()  # someone else's socket under the scheduler's name: never theirs to hear from us
        return None
    return connecting
