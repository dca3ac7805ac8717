"""What one message between two local processes costs by transport: zmq (ipc://, tcp://) against a Unix socketpair.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/transport_ping_pong.py [--count 3000] [--runs 2]

A parent sends a 200-byte message to a forked child, which sends it back; the median of `--count` such
ping-pongs (two messages), per transport, alternated over `--runs`. A zmq message between processes wakes
the sender's zmq I/O thread, the receiver's, then the receiver; a socketpair's wakes the receiver only.
A round trip `submit(...).result()` crosses six zmq links (round_trip_hops.py --trace shows each), so this
is what a link without I/O threads saves per message; "FrameStream" is the socketpair with the framing the
worker agent and its processors use (scaler/utility/frame_stream.py). Linux only.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import socket
import statistics
import tempfile
import time
from typing import Callable

import zmq

from scaler.utility.frame_stream import FrameStream
from scaler.utility.zmq_util import receive_frames, send_frames

_MESSAGE = b"x" * 200
_WARM_UP = 100


def _zmq_echo(address: str, count: int) -> None:
    context = zmq.Context()
    peer = context.socket(zmq.DEALER)
    peer.connect(address)
    for _ in range(count):
        send_frames(peer, receive_frames(peer))
    peer.close(linger=1000)
    context.term()


def _zmq(address: str, count: int) -> list[float]:
    context = zmq.Context()
    peer = context.socket(zmq.DEALER)
    peer.bind(address)
    child = multiprocessing.get_context("fork").Process(target=_zmq_echo, args=(address, count))
    child.start()
    samples = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            send_frames(peer, [_MESSAGE])
            receive_frames(peer)
            samples.append(time.perf_counter() - started)
    finally:
        child.join(timeout=30)
        peer.close(linger=0)
        context.term()
    return samples


def _pair_echo(descriptor: int, count: int) -> None:
    peer = socket.socket(fileno=descriptor)
    for _ in range(count):
        peer.sendall(peer.recv(65536))


def _socketpair(count: int) -> list[float]:
    mine, theirs = socket.socketpair()
    child = multiprocessing.get_context("fork").Process(target=_pair_echo, args=(theirs.fileno(), count))
    child.start()
    theirs.close()
    samples = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            mine.sendall(_MESSAGE)
            mine.recv(65536)
            samples.append(time.perf_counter() - started)
    finally:
        child.join(timeout=30)
        mine.close()
    return samples


def _stream_echo(descriptor: int, count: int) -> None:
    peer = FrameStream(socket.socket(fileno=descriptor))
    for _ in range(count):
        peer.send_all(peer.receive())


def _frame_stream(count: int) -> list[float]:
    """The socketpair as the worker agent and its processors use it (scaler/utility/frame_stream.py)."""
    mine, theirs = socket.socketpair()
    child = multiprocessing.get_context("fork").Process(target=_stream_echo, args=(theirs.fileno(), count))
    child.start()
    theirs.close()
    stream = FrameStream(mine)
    samples = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            stream.send_all([_MESSAGE[:24], _MESSAGE[24:]])
            stream.receive()
            samples.append(time.perf_counter() - started)
    finally:
        child.join(timeout=30)
        stream.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=3000, help="ping-pongs per transport and run (default 3000)")
    parser.add_argument("--runs", type=int, default=2, help="alternated runs (default 2)")
    arguments = parser.parse_args()
    count = arguments.count + _WARM_UP
    directory = tempfile.mkdtemp(prefix="ping-pong-")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    transports: dict[str, Callable[[], list[float]]] = {
        "zmq ipc://": lambda: _zmq(f"ipc://{os.path.join(directory, 'ping.sock')}", count),
        "zmq tcp:// (loopback)": lambda: _zmq(f"tcp://127.0.0.1:{port}", count),
        "Unix socketpair": lambda: _socketpair(count),
        "FrameStream (socketpair)": lambda: _frame_stream(count),
    }
    print(f"load average before: {' '.join(f'{value:.2f}' for value in os.getloadavg())} on {os.cpu_count()} cores")
    medians: dict[str, list[float]] = {name: [] for name in transports}
    try:
        for _ in range(arguments.runs):
            for name, run in transports.items():
                medians[name].append(statistics.median(run()[_WARM_UP:]) * 1e6)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"{'transport':<24} {'ping-pong median, us (each run)':>36}")
    for name, values in medians.items():
        print(f"{name:<24} {' '.join(f'{value:8.1f}' for value in values):>36}")
    print(f"load average after: {' '.join(f'{value:.2f}' for value in os.getloadavg())}")


if __name__ == "__main__":
    main()
