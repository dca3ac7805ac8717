"""One protocol message onto a zmq socket: its frames (scaler/protocol/messages.py), sent as one message."""

from __future__ import annotations

import zmq

from scaler.protocol import messages as m
from scaler.utility.zmq_util import send_frames


def send_message(socket: zmq.Socket, message: m.Message, flags: int = 0) -> None:
    send_frames(socket, m.encode(message), flags)
