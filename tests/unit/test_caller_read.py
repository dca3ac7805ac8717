"""The pieces of a caller reading its own result (scaler/client/caller_read.py) over real pipes: the I/O thread's
epoll set, the session that takes the link out of it, and the wake-up pipe that two threads may consume."""

from __future__ import annotations

import os
import threading
from typing import Iterator

import pytest

from scaler.client.baton import Baton
from scaler.client.caller_read import CallerRead
from scaler.client.wakeup import WakeupPipe
from scaler.utility.fd_poller import EpollPoller
from scaler.utility.zmq_util import POLL_IN, POLL_OUT


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    reader, writer = os.pipe()
    yield reader, writer
    os.close(reader)
    os.close(writer)


@pytest.fixture
def poller() -> Iterator[EpollPoller]:
    io_poller = EpollPoller()
    yield io_poller
    io_poller.close()


def test_the_io_poller_says_what_is_ready_in_zmqs_flags(pipe: tuple[int, int], poller: EpollPoller) -> None:
    reader, writer = pipe
    poller.register(reader, POLL_IN)
    assert poller.poll(0) == []
    os.write(writer, b"x")
    assert poller.poll(0) == [(reader, POLL_IN)]
    poller.register(writer, POLL_OUT)
    poller.register(writer, POLL_IN | POLL_OUT)  # registered again: modified, as zmq.Poller does
    assert sorted(poller.poll(0)) == sorted([(reader, POLL_IN), (writer, POLL_OUT)])


def test_a_descriptor_taken_out_by_another_thread_no_longer_ends_a_wait_under_way(
    pipe: tuple[int, int], poller: EpollPoller,
) -> None:
    reader, writer = pipe
    poller.register(reader, POLL_IN)
    woken: list[list[tuple[int, int]]] = []
    waiting = threading.Thread(target=lambda: woken.append(poller.poll(1500)))
    waiting.start()
    poller.unregister(reader)  # while the other thread sleeps in its epoll_wait (or is about to)
    os.write(writer, b"x")
    waiting.join(10)
    assert woken == [[]]  # it slept its whole timeout: the data was not its to see
    poller.register(reader, POLL_IN)  # back in its set with data waiting: the next wait ends at once
    assert poller.poll(1000) == [(reader, POLL_IN)]


def test_a_session_holds_the_baton_with_the_link_out_of_the_io_threads_set(
    pipe: tuple[int, int], poller: EpollPoller,
) -> None:
    reader, writer = pipe
    wakeup = WakeupPipe()
    baton = Baton()
    try:
        poller.register(reader, POLL_IN)
        read = CallerRead(poller, reader, wakeup.reader, baton)
        os.write(writer, b"x")
        with read.session() as poll:
            assert poll is not None and baton.held_here()
            assert poller.poll(0) == []  # the I/O thread would not wake for it
            assert [fd for fd, _ in poll.poll(0)] == [reader]  # the caller does
        assert not baton.held_here()
        assert poller.poll(0) == [(reader, POLL_IN)]  # left unread: the I/O thread's again

        taken = threading.Event()
        release = threading.Event()

        def hold() -> None:
            baton.take(5)
            taken.set()
            release.wait(5)
            baton.give_back()

        holder = threading.Thread(target=hold)
        holder.start()
        taken.wait(5)
        with read.session() as poll:
            assert poll is None  # the I/O thread (or another caller) is awake: wait for it as ever
        assert poller.poll(0) == [(reader, POLL_IN)]
        release.set()
        holder.join(10)
    finally:
        wakeup.close()


def test_the_second_consumer_of_a_wake_up_finds_the_pipe_empty_and_goes_on() -> None:
    wakeup = WakeupPipe()
    try:
        wakeup.wake()
        wakeup.consume()
        wakeup.consume()  # the I/O thread after a caller took the byte: it must not block
        wakeup.wake()  # and wakes still work afterwards
        assert os.read(wakeup.reader, 1) == b"\0"
    finally:
        wakeup.close()
