"""Polling for a state a test waits on. Every timeout is an upper bound against hangs, never a measure."""

from __future__ import annotations

import os
import time
from typing import Callable


def wait_until(condition: Callable[[], object], what: str, timeout: float) -> None:
    """Return once `condition()` is true; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:g}s: {what}"
        time.sleep(0.05)


def wait_for_file(path: str, seconds: float) -> bool:
    """True once `path` exists (a gate a task opens); TimeoutError after `seconds`."""
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {seconds:g}s")
        time.sleep(0.05)
    return True
