"""A worker agent's private directory (its processors' running-task slots), and who owns one.

The agent removes its directory when it exits; one killed with SIGKILL cannot. So the directory's name
says whose it is (`scaler-worker-PID-STARTTIME-random`), and every agent that starts removes the ones
whose owner is gone. The start time tells a dead owner from a new process that got the same pid.
Directories of earlier versions (no owner in the name) are stale when nobody listens on their socket.
The directory is made by mkdtemp (mode 0700), so no other user can touch the slots.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time

from scaler.utility.ipc_sockets import is_listening
from scaler.utility.own_entries import own_entries
from scaler.utility.owned_directory import make_owned_directory, owner_is_alive

_PREFIX = "scaler-worker-"
# Owned (PID-STARTTIME-random), or made by earlier versions without the owner in the name: such a one
# is stale when nobody listens on its socket.
_WORK_DIRECTORY_NAME = re.compile(rf"^{_PREFIX}(?:(\d+)-(\d+)-|[a-z0-9_]{{8}}$)")
# The processors' socket in directories of earlier versions (processors talk over a socketpair now).
PROCESSOR_SOCKET_NAME = "processors.sock"
# An unnamed directory younger than this may belong to an agent that has not bound its socket yet.
_UNNAMED_GRACE_SECONDS = 60.0


def make_work_directory() -> str:
    return make_owned_directory(_PREFIX)


def remove_abandoned_work_directories(directory: str | None = None) -> list[str]:
    """Remove the work directories (ours, by uid) whose agent is gone; returns their paths."""
    removed = []
    for entry in own_entries(directory or tempfile.gettempdir(), _WORK_DIRECTORY_NAME, stat.S_ISDIR):
        pid, stamp = entry.name_match.group(1, 2)
        if pid is not None:
            abandoned = not owner_is_alive(int(pid), int(stamp))
        else:
            abandoned = time.time() - entry.status.st_mtime > _UNNAMED_GRACE_SECONDS and not is_listening(
                os.path.join(entry.path, PROCESSOR_SOCKET_NAME)
            )
        if abandoned:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed
