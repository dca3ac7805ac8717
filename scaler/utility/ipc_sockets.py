"""The files behind ipc:// addresses: whose they are, and which ones a dead process left behind.

libzmq unlinks whatever file is at an ipc path before it binds there, so binding blindly would take
the address away from a live process; and a process killed with SIGKILL leaves its socket file. A
socket file nobody listens on refuses connections: that is how a live one is told from a stale one.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import stat
import time

from scaler.utility.own_entries import own_entries

# What default_monitor_address makes of tcp://HOST:PORT: /tmp/HOST_PORT_monitor.
_MONITOR_FILE_NAME = re.compile(r"^.+_\d{1,5}_monitor$")
# A socket that refused once is looked at again after this long before it is removed: a process that
# is binding right now has the file before it listens, for a moment.
_SECOND_LOOK_SECONDS = 0.2


def ipc_path(address: str) -> str | None:
    """The file behind an ipc:// address; None for other transports and Linux abstract sockets."""
    scheme, _, path = address.partition("://")
    if scheme != "ipc" or not path or path.startswith("@"):
        return None
    return path


def is_listening(path: str) -> bool:
    """Whether a process accepts connections on the unix socket at `path` (when unsure: yes)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError as error:
            return error.errno not in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK)
    return True


def file_identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the socket file at `path`, to know later whether it is still the one we bound."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_dev, status.st_ino) if stat.S_ISSOCK(status.st_mode) else None


def remove_if_same(path: str, identity: tuple[int, int] | None) -> None:
    """Remove the socket file at `path` only if it is still the one with `identity` (ours)."""
    if identity is not None and file_identity(path) == identity:
        try:
            os.unlink(path)
        except OSError:
            pass


def remove_stale_monitor_sockets(directory: str) -> list[str]:
    """Remove the monitor sockets in `directory` that belong to us and that no process listens on."""
    candidates = [
        (entry.path, (entry.status.st_dev, entry.status.st_ino))
        for entry in own_entries(directory, _MONITOR_FILE_NAME, stat.S_ISSOCK)
        if not is_listening(entry.path)
    ]
    if not candidates:
        return []
    time.sleep(_SECOND_LOOK_SECONDS)
    removed = []
    for path, identity in candidates:
        if file_identity(path) == identity and not is_listening(path):
            remove_if_same(path, identity)
            removed.append(path)
    return removed
