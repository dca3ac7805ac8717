"""zmq.Poller's interface over `select.poll`, for a loop that watches plain file descriptors only.

`zmq.Poller.poll` goes through zmq_poll, which polls twice when nothing is ready yet (a first pass with no
wait, then the wait) and builds its item array anew at each call: the worker agent, whose scheduler link
speaks ZMTP itself (scheduler_link.py), pays that twice per task for no zmq socket at all. Flags in and out
are zmq's (POLL_IN, POLL_OUT; anything else the kernel reports, an error or a hang-up, as zmq.POLLERR), as
zmq_poll reports a plain descriptor, so the loop reads them alike.
"""

from __future__ import annotations

import select

import zmq

from scaler.utility.zmq_util import POLL_IN, POLL_OUT

_POLL_ERR = int(zmq.POLLERR)
_SELECT_IN = select.POLLIN
_SELECT_OUT = select.POLLOUT
assert _SELECT_IN == POLL_IN
# epoll's event bits are poll's on Linux: the same translation serves both pollers below.
assert (select.EPOLLIN, select.EPOLLOUT, select.EPOLLERR, select.EPOLLHUP) == (
    select.POLLIN, select.POLLOUT, select.POLLERR, select.POLLHUP)


def _to_select(flags: int) -> int:
    return (_SELECT_IN if flags & POLL_IN else 0) | (_SELECT_OUT if flags & POLL_OUT else 0)


def _to_zmq(events: int) -> int:
    flags = (POLL_IN if events & _SELECT_IN else 0) | (POLL_OUT if events & _SELECT_OUT else 0)
    if events & ~(_SELECT_IN | _SELECT_OUT | select.POLLPRI):
        flags |= _POLL_ERR
    return flags


class FdPoller:
    """Owned by one thread, as zmq.Poller."""

    def __init__(self) -> None:
        self._poll = select.poll()

    def register(self, fd: int, flags: int) -> None:
        self._poll.register(fd, _to_select(flags))

    def modify(self, fd: int, flags: int) -> None:
        self._poll.modify(fd, _to_select(flags))

    def unregister(self, fd: int) -> None:
        self._poll.unregister(fd)

    def poll(self, timeout_ms: int) -> list[tuple[int, int]]:
        """The ready descriptors and their zmq flags, waiting up to `timeout_ms` (negative: without end)."""
        ready = self._poll.poll(timeout_ms)
        for _fd, events in ready:
            if events != _SELECT_IN:
                return [(fd, _to_zmq(events)) for fd, events in ready]
        return ready  # readable only, the usual case: select's POLLIN is zmq's


class EpollPoller(FdPoller):
    """The same over an epoll set, whose registrations another thread may change while the owner sleeps in `poll`
    (epoll_ctl takes effect for a wait under way; poll(2)'s array would not): the client's I/O thread, whose link a
    waiting caller takes out of its set (scaler/client/caller_read.py)."""

    def __init__(self) -> None:
        self._epoll = select.epoll()

    def register(self, fd: int, flags: int) -> None:
        try:
            self._epoll.register(fd, _to_select(flags))
        except FileExistsError:
            self._epoll.modify(fd, _to_select(flags))  # as zmq.Poller.register does for a registered socket

    def modify(self, fd: int, flags: int) -> None:
        self._epoll.modify(fd, _to_select(flags))

    def unregister(self, fd: int) -> None:
        self._epoll.unregister(fd)

    def poll(self, timeout_ms: int) -> list[tuple[int, int]]:
        ready = self._epoll.poll(timeout_ms / 1000 if timeout_ms >= 0 else -1)
        return [(fd, events if events == _SELECT_IN else _to_zmq(events)) for fd, events in ready]

    def close(self) -> None:
        self._epoll.close()
