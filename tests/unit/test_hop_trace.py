"""SCALER_HOP_TRACE (hop_trace.py): a process logs each message it sends and receives, over zmq (zmq_util) and over
the agent's socketpair with a processor (frame_stream), and nothing without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_EXCHANGE = """
import zmq
from scaler.utility.zmq_util import receive_frames, send_frames
context = zmq.Context()
left, right = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
left.bind("inproc://trace")
right.connect("inproc://trace")
send_frames(left, [b"a", b"b"])
assert receive_frames(right) == [b"a", b"b"]
left.close(); right.close(); context.term()
"""

_STREAM_EXCHANGE = """
import socket
from scaler.utility.frame_stream import FrameStream
left, right = (FrameStream(end) for end in socket.socketpair())
left.send([b"a", b"b"])
assert right.wait_for_input(10) and right.receive() == [b"a", b"b"]
"""


def _exchange(tmp_path: Path, trace: bool, script: str) -> None:
    environment = {key: value for key, value in os.environ.items() if key != "SCALER_HOP_TRACE"}
    if trace:
        environment["SCALER_HOP_TRACE"] = str(tmp_path)
    subprocess.run([sys.executable, "-c", script], env=environment, check=True, timeout=60)


@pytest.mark.parametrize("script", [_EXCHANGE, _STREAM_EXCHANGE], ids=["zmq", "socketpair"])
def test_each_message_sent_and_received_is_logged_in_order(tmp_path: Path, script: str) -> None:
    _exchange(tmp_path, trace=True, script=script)
    logs = list(tmp_path.glob("*.txt"))
    assert len(logs) == 1
    lines = [line.split() for line in logs[0].read_text().splitlines()]
    assert [kind for _, kind in lines] == ["S", "R"]
    assert int(lines[0][0]) <= int(lines[1][0])


@pytest.mark.parametrize("script", [_EXCHANGE, _STREAM_EXCHANGE], ids=["zmq", "socketpair"])
def test_nothing_is_logged_without_the_variable(tmp_path: Path, script: str) -> None:
    _exchange(tmp_path, trace=False, script=script)
    assert list(tmp_path.glob("*")) == []
