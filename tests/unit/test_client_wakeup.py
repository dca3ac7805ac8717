"""The client's I/O thread is woken through a pipe by the threads that queue messages; no wake-up may be lost.

A lost wake-up is not a hang (the I/O thread also wakes every 250 ms), but every message after it waits
for that timeout, so round trips jump from under a millisecond to 250 ms for the rest of the session.
The race is between a caller's `_wake()` and the I/O thread's `_consume_wake()`; here a caller is made to
run at each point inside `_consume_wake()` where another thread could.
"""

from __future__ import annotations

import os
import select

import pytest

from scaler.client import connection as connection_module
from scaler.client.connection import ClientConnection


def pipe_has_a_byte(connection: ClientConnection) -> bool:
    return bool(select.select([connection._wake_reader], [], [], 0)[0])


@pytest.fixture
def connection():  # type: ignore[no-untyped-def]
    # Not connected: only its wake-up pipe and flag are used, and closed at the end.
    made = ClientConnection("tcp://127.0.0.1:1", "wakeup-test", timeout_seconds=1, heartbeat_interval_seconds=1)
    yield made
    os.close(made._wake_reader)
    os.close(made._wake_writer)


@pytest.mark.parametrize("caller_runs", ["before the read", "after the read"])
def test_a_wake_during_the_io_threads_consume_is_never_lost(connection, monkeypatch, caller_runs: str) -> None:
    real_read = os.read

    def read_with_a_caller_in_between(descriptor: int, size: int) -> bytes:
        if caller_runs == "before the read":
            connection._wake()
        data = real_read(descriptor, size)
        if caller_runs == "after the read":
            connection._wake()
        return data

    connection._wake()  # a message was queued: the I/O thread sees the pipe readable
    assert pipe_has_a_byte(connection)
    monkeypatch.setattr(connection_module.os, "read", read_with_a_caller_in_between)
    connection._consume_wake()
    monkeypatch.setattr(connection_module.os, "read", real_read)
    # Either the flag is clear (the next _wake() writes) or a byte waits (the next poll wakes at once).
    assert not connection._wake_pending or pipe_has_a_byte(connection)

    # And from here on every wake reaches the pipe.
    if pipe_has_a_byte(connection):
        connection._consume_wake()
    connection._wake()
    assert pipe_has_a_byte(connection)
