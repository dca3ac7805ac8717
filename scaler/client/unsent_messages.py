"""Messages for the scheduler that zmq could not take yet, kept in order until it can.

The client's I/O thread never blocks on a send: a blocking send would stop the thread, its timeouts with
it, until a connection comes, and against a scheduler whose handshake always fails (CURVE keys missing)
that is forever. So a send that zmq refuses for now (no usable connection) is kept here, after whatever
was kept before it, and sent when the socket can take it (the I/O thread polls for that while any wait).
"""

from __future__ import annotations

import collections

import zmq

from scaler.protocol import messages as m
from scaler.utility.zmq_util import send_frames


class UnsentMessages:
    def __init__(self) -> None:
        self._frames: collections.deque[list[m.Buffer]] = collections.deque()

    def __bool__(self) -> bool:
        return bool(self._frames)

    def send(self, socket: zmq.Socket, message: m.Message) -> None:
        """Send now, or keep it while zmq has no connection to take it."""
        frames = m.encode(message)
        if not self._frames:
            try:
                send_frames(socket, frames, zmq.NOBLOCK)
                return
            except zmq.Again:
                pass
        self._frames.append(frames)

    def send_kept(self, socket: zmq.Socket) -> None:
        """Send what was kept, in order, as far as the socket takes it."""
        kept = self._frames
        while kept:
            try:
                send_frames(socket, kept[0], zmq.NOBLOCK)
            except zmq.Again:
                return
            kept.popleft()
