"""A worker agent's private directory (its processors' socket, their running-task slots), and who owns one.

The agent removes its directory when it exits; one killed with SIGKILL cannot. So the directory's name
says whose it is (`scaler-worker-PID-STARTTIME-random`), and every agent that starts removes the ones
whose owner is gone. The start time tells a dead owner from a new process that got the same pid.
Directories of earlier versions (no owner in the name) are stale when nobody listens on their socket.
The directory is made by mkdtemp (mode 0700), so no other user can connect to the processors.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time

import psutil

from scaler.utility.ipc_sockets import is_listening

_PREFIX = "scaler-worker-"
_OWNED_NAME = re.compile(rf"^{_PREFIX}(\d+)-(\d+)-")
# Made by earlier versions, without the owner in the name: stale when nobody listens on its socket.
_UNNAMED = re.compile(rf"^{_PREFIX}[a-z0-9_]{{8}}$")
PROCESSOR_SOCKET_NAME = "processors.sock"
# An unnamed directory younger than this may belong to an agent that has not bound its socket yet.
_UNNAMED_GRACE_SECONDS = 60.0


def _start_stamp(process: psutil.Process) -> int:
    return int(process.create_time())


def make_work_directory() -> str:
    me = psutil.Process()
    return tempfile.mkdtemp(prefix=f"{_PREFIX}{me.pid}-{_start_stamp(me)}-")


def _owner_is_alive(pid: int, stamp: int) -> bool:
    try:
        # create_time is a float rounded differently on the way in and out: a second either way is the same process
        return abs(_start_stamp(psutil.Process(pid)) - stamp) <= 1
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # cannot tell: leave it


def remove_abandoned_work_directories(directory: str | None = None) -> list[str]:
    """Remove the work directories (ours, by uid) whose agent is gone; returns their paths."""
    directory = directory or tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    for entry in entries:
        match = _OWNED_NAME.match(entry.name)
        if match is None and not _UNNAMED.match(entry.name):
            continue
        try:
            status = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid():
            continue
        if match is not None:
            abandoned = not _owner_is_alive(int(match.group(1)), int(match.group(2)))
        else:
            abandoned = time.time() - status.st_mtime > _UNNAMED_GRACE_SECONDS and not is_listening(
                os.path.join(entry.path, PROCESSOR_SOCKET_NAME)
            )
        if abandoned:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed
