"""The client's I/O thread is woken through a pipe by the threads that queue messages; no wake-up may be lost.

A lost wake-up is not a hang (the I/O thread also wakes every 250 ms), but every message after it waits
for that timeout, so round trips jump from under a millisecond to 250 ms for the rest of the session.
The race is between a caller's `wake()` and the I/O thread's `consume()`; here a caller is made to run
at each point inside `consume()` where another thread could.
"""

from __future__ import annotations

import os
import select
from typing import Iterator

import pytest

from scaler.client import wakeup as wakeup_module
from scaler.client.wakeup import WakeupPipe


def pipe_has_a_byte(wakeup: WakeupPipe) -> bool:
    return bool(select.select([wakeup.reader], [], [], 0)[0])


@pytest.fixture
def wakeup() -> Iterator[WakeupPipe]:
    made = WakeupPipe()
    yield made
    made.close()


@pytest.mark.parametrize("caller_runs", ["before the read", "after the read"])
def test_a_wake_during_the_io_threads_consume_is_never_lost(
    wakeup: WakeupPipe, monkeypatch: pytest.MonkeyPatch, caller_runs: str
) -> None:
    real_read = os.read

    def read_with_a_caller_in_between(descriptor: int, size: int) -> bytes:
        if caller_runs == "before the read":
            wakeup.wake()
        data = real_read(descriptor, size)
        if caller_runs == "after the read":
            wakeup.wake()
        return data

    wakeup.wake()  # a message was queued: the I/O thread sees the pipe readable
    assert pipe_has_a_byte(wakeup)
    monkeypatch.setattr(wakeup_module.os, "read", read_with_a_caller_in_between)
    wakeup.consume()
    monkeypatch.setattr(wakeup_module.os, "read", real_read)
    # Either the flag is clear (the next wake() writes) or a byte waits (the next poll wakes at once).
    assert not wakeup._pending or pipe_has_a_byte(wakeup)

    # And from here on every wake reaches the pipe.
    if pipe_has_a_byte(wakeup):
        wakeup.consume()
    wakeup.wake()
    assert pipe_has_a_byte(wakeup)
