"""Which addresses get a local shortcut, and when a peer takes one (scaler/utility/local_shortcut.py), over real
Unix sockets."""

from __future__ import annotations

import os
import socket
from typing import Iterator

import pytest

from scaler.utility import local_shortcut
from scaler.utility.local_shortcut import SHORTCUT_ENV, connect, listen_address


@pytest.mark.parametrize("bound, expected", [
    ("tcp://127.0.0.1:2345", f"ipc://@scaler-{os.getuid()}-127.0.0.1-2345"),
    ("tcp://0.0.0.0:2345", f"ipc://@scaler-{os.getuid()}-127.0.0.1-2345"),
    ("tcp://[::1]:2345", f"ipc://@scaler-{os.getuid()}-::1-2345"),
    ("tcp://[::]:2345", f"ipc://@scaler-{os.getuid()}-::1-2345"),
    ("tcp://127.0.0.2:2345", None),  # another loopback address: its peers are not told apart from 127.0.0.1's
    ("tcp://10.1.2.3:2345", None),
    ("ipc:///tmp/scheduler.sock", None),
    ("inproc://scheduler", None),
])
def test_a_scheduler_on_a_loopback_or_every_address_serves_a_shortcut(bound: str, expected: str | None) -> None:
    assert listen_address(bound) == expected


def test_turned_off_nothing_is_served_and_nothing_taken(monkeypatch: pytest.MonkeyPatch, listener: int) -> None:
    monkeypatch.setenv(SHORTCUT_ENV, "off")
    assert listen_address("tcp://127.0.0.1:2345") is None
    assert connect(("127.0.0.1", listener)) is None


@pytest.fixture
def listener() -> Iterator[int]:
    """A port (not bound: only the name matters) whose shortcut name this process listens on."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    port = 40000 + os.getpid() % 20000
    address = listen_address(f"tcp://127.0.0.1:{port}")
    assert address is not None
    server.bind("\0" + address[len("ipc://@"):])
    server.listen(4)
    yield port
    server.close()


def test_a_peer_connects_to_a_shortcut_of_its_own_user(listener: int) -> None:
    connected = connect(("127.0.0.1", listener))
    assert connected is not None
    try:
        assert connected.family == socket.AF_UNIX and not connected.getblocking()
    finally:
        connected.close()


def test_no_shortcut_for_another_address_or_where_nobody_listens(listener: int) -> None:
    assert connect(("127.0.0.1", listener + 1)) is None  # nobody there: TCP
    assert connect(("10.1.2.3", listener)) is None
    assert connect(("::1", listener)) is None  # ::1's name, not 127.0.0.1's
    assert connect("/tmp/some.sock") is None  # an ipc target is not a TCP address


def test_a_listener_of_another_user_is_not_used(listener: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # This process listens as itself; a peer of another user (its getuid) must not take the shortcut it finds.
    real_uid = os.getuid()
    monkeypatch.setattr(local_shortcut.os, "getuid", lambda: real_uid + 1)
    monkeypatch.setattr(local_shortcut, "_name", lambda loopback, port: f"scaler-{real_uid}-{loopback}-{port}")
    assert connect(("127.0.0.1", listener)) is None
