"""FdPoller (scaler/utility/fd_poller.py) reports plain descriptors as zmq.Poller does, flag for flag."""

from __future__ import annotations

import socket
from typing import Iterator

import pytest
import zmq

from scaler.utility.fd_poller import FdPoller
from scaler.utility.zmq_util import POLL_IN, POLL_OUT


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    left, right = socket.socketpair()
    yield left, right
    left.close()
    right.close()


def both_poll(fd: int, flags: int, timeout_ms: int = 0) -> tuple[list, list]:
    ours, theirs = FdPoller(), zmq.Poller()
    ours.register(fd, flags)
    theirs.register(fd, flags)
    return ours.poll(timeout_ms), theirs.poll(timeout_ms)


def test_nothing_ready_is_nothing_after_the_timeout(pair: tuple[socket.socket, socket.socket]) -> None:
    assert both_poll(pair[1].fileno(), POLL_IN, 10) == ([], [])


def test_readable_and_writable_read_as_zmq_flags(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    left.send(b"x")
    ours, theirs = both_poll(right.fileno(), POLL_IN)
    assert ours == theirs == [(right.fileno(), POLL_IN)]
    ours, theirs = both_poll(right.fileno(), POLL_IN | POLL_OUT)
    assert ours == theirs == [(right.fileno(), POLL_IN | POLL_OUT)]


def test_a_peer_gone_is_reported_as_zmq_reports_it(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    left.close()
    ours, theirs = both_poll(right.fileno(), POLL_IN)
    assert ours == theirs
    assert ours and ours[0][1] & POLL_IN, "the end of the stream reads as readable: the reader then finds it"


def test_modify_and_unregister(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    poller = FdPoller()
    poller.register(right.fileno(), POLL_IN)
    assert poller.poll(0) == []
    poller.modify(right.fileno(), POLL_IN | POLL_OUT)
    assert poller.poll(0) == [(right.fileno(), POLL_OUT)]
    poller.unregister(right.fileno())
    left.send(b"x")
    assert poller.poll(0) == []
