"""Private directories named for the process that owns them, and the removal of those whose owner died.

A process removes its directory when it exits; one killed with SIGKILL cannot. So the name says whose
it is (`PREFIX-PID-STARTTIME-random`), and every process of the kind that starts removes the ones whose
owner is gone: the start time tells a dead owner from a new process that got the same pid. mkdtemp
makes the directory with mode 0700, so no other user can reach the sockets inside.

(scaler/worker/work_directory.py uses these for worker agents, with a fallback for directories of
earlier versions.)
"""

from __future__ import annotations

import re
import shutil
import stat
import tempfile

import psutil

from scaler.utility.own_entries import own_entries


def _start_stamp(process: psutil.Process) -> int:
    return int(process.create_time())


def make_owned_directory(prefix: str, parent: str | None = None) -> str:
    """A new directory `<parent>/<prefix>PID-STARTTIME-random` (mode 0700) owned by this process."""
    me = psutil.Process()
    return tempfile.mkdtemp(prefix=f"{prefix}{me.pid}-{_start_stamp(me)}-", dir=parent)


def owner_is_alive(pid: int, stamp: int) -> bool:
    try:
        # create_time is a float rounded differently on the way in and out: a second either way is the same process
        return abs(_start_stamp(psutil.Process(pid)) - stamp) <= 1
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # cannot tell: leave it


def remove_abandoned_directories(prefix: str, parent: str | None = None) -> list[str]:
    """Remove the directories made by make_owned_directory(prefix) (ours, by uid) whose owner is gone."""
    owned_name = re.compile(rf"^{re.escape(prefix)}(\d+)-(\d+)-")
    removed = []
    for entry in own_entries(parent or tempfile.gettempdir(), owned_name, stat.S_ISDIR):
        if not owner_is_alive(int(entry.name_match.group(1)), int(entry.name_match.group(2))):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed
