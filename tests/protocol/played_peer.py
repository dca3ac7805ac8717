"""A client or a worker, played by a test against the scheduler under test: a DEALER it speaks through by hand."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any, Iterable

import zmq

from tests.protocol import wire

REPLY_SECONDS = 30.0
TASK_COUNTER_BITS = 32


class PlayedPeer:
    def __init__(self, context: zmq.Context, address: str, tag: str) -> None:
        self.identity = f"conformance|{tag}|{uuid.uuid4().hex[:8]}".encode()
        self.socket = context.socket(zmq.DEALER)
        for option in (zmq.SNDHWM, zmq.RCVHWM, zmq.LINGER):
            self.socket.setsockopt(option, 0)
        self.socket.setsockopt(zmq.IDENTITY, self.identity)
        self.socket.connect(address)
        self.id_prefix = 0
        self._counter = 0

    def send_frames(self, frames: list[bytes]) -> None:
        self.socket.send_multipart(frames)

    def send(self, member: str, payload_frames: Iterable[bytes] = (), **fields: Any) -> None:
        self.send_frames([wire.build(member, **fields), *payload_frames])

    def receive(self, timeout: float = REPLY_SECONDS) -> wire.Received:
        if not self.socket.poll(int(timeout * 1000), zmq.POLLIN):
            raise AssertionError(f"no message from the scheduler within {timeout:g}s")
        return wire.read(self.socket.recv_multipart())

    def expect(self, member: str, timeout: float = REPLY_SECONDS) -> wire.Received:
        message = self.receive(timeout)
        assert message.member == member, f"expected {member}, got {message.member}: {message.fields}"
        return message

    def quiet_for(self, seconds: float) -> list[wire.Received]:
        deadline = time.monotonic() + seconds
        received = []
        while (left := deadline - time.monotonic()) > 0:
            if self.socket.poll(int(left * 1000) + 1, zmq.POLLIN):
                received.append(wire.read(self.socket.recv_multipart()))
        return received

    def hello(self, role: str = "client", capacity: int = 0, version: int = wire.PROTOCOL_VERSION) -> wire.Received:
        self.send("hello", protocolVersion=version, role=role, name=f"played {role}", hostname="test", pid=os.getpid(),
                  capacity=capacity)
        return self.receive()

    def register(self, role: str = "client", capacity: int = 0) -> wire.Received:
        welcome = self.hello(role, capacity)
        assert welcome.member == "welcome", f"not welcomed: {welcome.fields}"
        self.id_prefix = welcome.get("idPrefix", 0)
        return welcome

    def next_task_ids(self, count: int) -> list[int]:
        ids = [(self.id_prefix << TASK_COUNTER_BITS) | (self._counter + index) for index in range(count)]
        self._counter += count
        return ids

    def assert_registered(self) -> None:
        """The scheduler still knows us: a heartbeat is echoed (and nothing else was waiting for us)."""
        self.send("heartbeat")
        self.expect("heartbeatEcho")

    def assert_unknown(self) -> None:
        self.send("heartbeat")
        refused = self.expect("refused")
        assert "unknown peer" in refused.get("reason", "")

    def close(self) -> None:
        self.socket.close(linger=0)
