"""Who serves the client's link at each wake: the I/O thread, or a caller waiting for its result.

ClientConnection (connection.py) is made of this and of its calls: `_loop` is the I/O thread's, `read_until` a
waiting caller's (caller_read.py says when and why), and `_serve` is one wake's work for either, done by the
baton's holder.
"""

from __future__ import annotations

import collections
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

import zmq

from scaler.client.baton import Baton
from scaler.client.caller_read import READ_SECONDS, CallerRead
from scaler.client.client_link import ClientLink
from scaler.client.connection_core import ClientConnectionCore
from scaler.client.store_relay import StoreRelay
from scaler.client.stored_results import StoredResultFetcher
from scaler.client.wakeup import WakeupPipe
from scaler.utility.fd_poller import EpollPoller
from scaler.utility.zmq_util import POLL_IN, POLL_OUT

if TYPE_CHECKING:
    from scaler.client import connection_actions as actions
    from scaler.client.future import ScalerFuture

# The longest the I/O thread waits for input: the core's next decision may come sooner (seconds_to_next_decision).
_IDLE_POLL_SECONDS = 0.25


class LinkServing:
    # The connection's, set in ClientConnection.__init__ (see its docstring for which thread owns which).
    _core: ClientConnectionCore
    _link: ClientLink | None
    _baton: Baton
    _wakeup: WakeupPipe
    _queued: collections.deque[Any]
    _fetcher: StoredResultFetcher
    _reader: CallerRead | None
    _every_pass: bool
    _pollables: list[Any]  # the link's, listed once by _loop
    _caller_led: bool
    _stopping: bool
    relay: StoreRelay
    _act: Callable[[Sequence[actions.Action]], None]
    _on_handshake: Callable[[float], None]

    def read_until(self, future: ScalerFuture, timeout: float | None) -> None:
        """A caller about to wait for `future`: read the link itself for a while, if the I/O thread sleeps, so that
        the result that comes wakes this thread alone (caller_read.py); returns when the future is done or the
        caller should wait for the I/O thread as ever."""
        reader = self._reader
        if reader is None or not self._caller_led:
            return
        with reader.session() as poll:
            if poll is None:
                return
            link, core = self._link, self._core
            assert link is not None
            now = time.monotonic()
            deadline = now + (READ_SECONDS if timeout is None else min(READ_SECONDS, timeout))
            while not future.done() and now < deadline and not (self._stopping or core.is_over):
                wait = min(deadline - now, core.seconds_to_next_decision(now), link.seconds_to_tick())
                events = dict(poll.poll(int(wait * 1000) + 1))
                now = time.monotonic()
                self._serve(link, events, now)
            if self._stopping or core.is_over:
                self._wakeup.wake()  # the I/O thread ends: not at its next timer

    def _loop(self, link: ClientLink) -> None:
        """The I/O thread's: serve the link until the client closes or the core is over."""
        wakeup = self._wakeup
        data, *monitor = link.pollables()
        # ZMTP: an epoll set, which a caller reading its own result (read_until) may take the link out of while
        # this thread sleeps in it; libzmq's socket needs zmq's poll.
        poller: Any = EpollPoller() if not link.owns_io_thread else zmq.Poller()
        self._every_pass = not link.owns_io_thread  # the ZMTP dealer's events are told at every pass
        self._pollables = [data, *monitor]
        for pollable in (data, *monitor, wakeup.reader):
            poller.register(pollable, zmq.POLLIN)
        if not link.owns_io_thread:
            self._reader = CallerRead(poller, data, wakeup.reader, self._baton)
        try:
            self._serve_until_over(link, poller, data)
        finally:  # holding the baton: no caller reads meanwhile, nor after (_run)
            self._reader = None
            if isinstance(poller, EpollPoller):
                poller.close()

    def _serve_until_over(self, link: ClientLink, poller: Any, data: Any) -> None:
        core = self._core
        socket_events = POLL_IN
        now = time.monotonic()
        while True:
            wanted = POLL_IN | (POLL_OUT if link.wants_out else 0)
            if wanted != socket_events:
                poller.register(data, wanted)
                socket_events = wanted
            wait = min(_IDLE_POLL_SECONDS, core.seconds_to_next_decision(now), link.seconds_to_tick())
            self._baton.give_back()
            try:
                events = dict(poller.poll(int(wait * 1000) + 1))
            finally:
                while not self._baton.take(_IDLE_POLL_SECONDS):
                    pass  # a caller holds it for one hand-off
            now = time.monotonic()
            self._serve(link, events, now)
            if self._stopping or core.is_over:
                return

    def _serve(self, link: ClientLink, events: dict[Any, int], now: float) -> None:
        """One wake's work, by the baton's holder: what the link and the other threads brought, and the timers."""
        core, act, inbox = self._core, self._act, self.relay.deferred
        data, *monitor = self._pollables
        link.flush()
        if self._wakeup.reader in events:
            self._wakeup.consume()
        if self._every_pass or (monitor and monitor[0] in events):
            self._on_handshake(now)
        fetched = self._fetcher.fetched
        while fetched:
            act(core.on_fetched(fetched.popleft(), now))
        if events.get(data, 0) & POLL_IN:
            inbox.extend(link.receive(now))  # with a relayed answer's wait, what it read past, in order
        while inbox:
            act(core.on_message(inbox.popleft(), now))
        if self._queued:
            act(core.on_requests(self._queued, now))
        act(core.on_tick(now))
