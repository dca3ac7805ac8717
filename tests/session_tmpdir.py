"""A temporary directory of the test session's own, the TMPDIR of every process the tests start.

What those processes leave in their temporary directory (a cluster's processors, a console script, an
example) lands here, not among what other programs and other test sessions on the machine keep in /tmp:
the session finds its own leftovers, and removes the directory at its end. Leftovers that nobody would
ever remove (dask's disk shuffles leave a `tmp*.partd` directory per shuffle in the processor that ran
it, since only an exit through atexit removes it) fail the session, naming them.

The test process itself keeps the temporary directory it started with (tempfile caches it): pytest's
tmp_path and the tests' own temporary files stay where they were.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tempfile

# Left by a process, removed by nobody: each name pattern with who makes such entries.
NEVER_REMOVED = {"tmp*.partd": "dask's disk shuffle (partd) in a worker's processor"}

_state: dict[str, str | None] = {}


def start() -> str:
    """Make the directory and point TMPDIR at it for every process started from now on; returns it."""
    parent = tempfile.gettempdir()  # read, and so cached, before TMPDIR changes: the test process keeps it
    directory = tempfile.mkdtemp(prefix="scaler-tests-", dir=parent)  # short: sockets are made under it
    _state["directory"] = directory
    _state["previous"] = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = directory
    return directory


def leftovers() -> list[str]:
    """Entries of the session's directory that match NEVER_REMOVED, each with who makes it."""
    directory = _state.get("directory")
    if directory is None or not os.path.isdir(directory):
        return []
    found = []
    for name in sorted(os.listdir(directory)):
        for pattern, maker in NEVER_REMOVED.items():
            if fnmatch.fnmatch(name, pattern):
                found.append(f"{os.path.join(directory, name)} ({maker})")
    return found


def finish() -> None:
    """Restore TMPDIR and remove the directory with whatever is in it."""
    directory = _state.pop("directory", None)
    previous = _state.pop("previous", None)
    if directory is None:
        return
    if previous is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = previous
    shutil.rmtree(directory, ignore_errors=True)
