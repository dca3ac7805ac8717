"""LoopStop: a loop's poll ends at once when it is asked to stop, or woken for work handed to it, and waits
again once it has drained the wake-ups."""

from __future__ import annotations

import zmq

from scaler.utility.loop_stop import LoopStop

_WAIT_MS = 30_000  # only an upper bound against a hang


def poller_of(loop_stop: LoopStop) -> zmq.Poller:
    poller = zmq.Poller()
    poller.register(loop_stop.fileno(), zmq.POLLIN)
    return poller


def test_a_wake_ends_the_wait_without_asking_to_stop_and_a_drain_lets_it_wait_again() -> None:
    loop_stop = LoopStop()
    loop_stop.open()
    try:
        poller = poller_of(loop_stop)
        loop_stop.wake()
        loop_stop.wake()
        assert dict(poller.poll(_WAIT_MS)) == {loop_stop.fileno(): zmq.POLLIN}
        assert not loop_stop.requested
        loop_stop.drain()
        assert poller.poll(0) == []

        loop_stop.request()
        assert dict(poller.poll(_WAIT_MS)) == {loop_stop.fileno(): zmq.POLLIN}
        assert loop_stop.requested
    finally:
        loop_stop.close()
    loop_stop.wake()  # closed: a late wake from another thread is harmless
