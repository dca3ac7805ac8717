"""The store's link to the scheduler (scaler/store/control_link.py) against a ROUTER played by the test, over an ipc
socket in a temporary folder: what it says after a scheduler forgot it, and after it comes back."""

from __future__ import annotations

import os
import time

import pytest
import zmq

from scaler.protocol import messages as m
from scaler.store.control_link import ControlLink
from scaler.store.scheduler_link import Registered, StoreIdentity
from scaler.store.store_records import StoreStatus

pytestmark = pytest.mark.timeout(30)

STATUS = StoreStatus(0, 0, 0, 0, 0, 0, 0, 0, 0)


def receive(router: zmq.Socket) -> tuple[bytes, m.Message]:
    assert router.poll(10_000), "the store sent nothing"
    identity, *frames = router.recv_multipart()
    return identity, m.decode(frames)


def test_objects_lost_while_no_scheduler_knew_the_store_are_told_once_it_is_welcomed_again(tmp_path) -> None:
    """A scheduler that kept the store while it was away would otherwise take it for their holder still."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    address = f"ipc://{tmp_path}/scheduler"
    router.bind(address)
    link = ControlLink(address, "store-test", heartbeat_interval_seconds=60.0)
    try:
        (socket,) = link.start(context, StoreIdentity("tcp://127.0.0.1:1", "ipc:///x", "host", 1 << 20, os.getpid()),
                               time.monotonic())
        identity, hello = receive(router)
        assert isinstance(hello, m.Hello)

        def from_scheduler(message: m.Message) -> list:
            router.send_multipart([identity, *m.encode(message)])
            assert socket.poll(10_000)
            return link.on_readable(socket, time.monotonic())

        assert from_scheduler(m.Welcome()) == [Registered()]
        from_scheduler(m.Refused(reason="unknown peer", unknown_peer=True))  # forgotten: it says hello again
        assert isinstance(receive(router)[1], m.Hello)
        link.objects_lost((b"a" * 16,))  # meanwhile, it loses an object
        assert from_scheduler(m.Welcome()) == [Registered()]
        link.objects_held(((b"b" * 16, 10),))  # the server announces what it holds once registered
        link.on_tick(STATUS, time.monotonic())
        told = [receive(router)[1], receive(router)[1]]
        assert told == [m.ObjectsHeld(object_ids=[b"b" * 16], sizes=[10]), m.ObjectsLost(object_ids=[b"a" * 16])]
    finally:
        link.close()
        router.close()
        context.term()
