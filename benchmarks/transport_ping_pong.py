"""What one message between two local processes costs by transport: zmq (ipc://, tcp://) against plain sockets.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/transport_ping_pong.py [--count 3000] [--runs 2]

A parent sends a 200-byte message to a forked child, which sends it back; the median of `--count` such
ping-pongs (two messages), per transport, alternated over `--runs`. A zmq message between processes wakes
the sender's zmq I/O thread, the receiver's, then the receiver; a socketpair's wakes the receiver only.
A round trip `submit(...).result()` crosses six zmq links (round_trip_hops.py --trace shows each), so this
is what a link without I/O threads saves per message; "FrameStream" is the socketpair with the framing the
worker agent and its processors use (scaler/utility/frame_stream.py). "ZMTP from Python" is the question of
a transport without I/O threads that still speaks ZeroMQ's wire protocol: the parent speaks ZMTP 3.1 (NULL
mechanism, scaler/utility/zmtp_codec.py as a DEALER) itself over a plain TCP socket to a child's libzmq ROUTER
(as a client or worker would talk to the scheduler), so only the child's end has an I/O thread; "ZMTP router"
is the scheduler's end of that question (scaler/utility/zmtp_router.py, which SCALER_SCHEDULER_TRANSPORT=zmtp
puts in the scheduler) against a child's libzmq DEALER; "TCP socket" is the same with no zmq at either end.
Linux only.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import select
import shutil
import socket
import statistics
import tempfile
import time
from typing import Callable

import zmq

from scaler.utility.frame_stream import FrameStream
from scaler.utility.zmq_util import receive_frames, send_frames
from scaler.utility.zmtp_codec import Frame, ZmtpCodec, encode_message
from scaler.utility.zmtp_router import ZmtpRouter

_MESSAGE = b"x" * 200
_WARM_UP = 100
_IDENTITY = b"echo"


def _zmq_echo(address: str, count: int, kind: int = zmq.DEALER) -> None:
    """Echo `count` messages: a DEALER connecting to the parent, or a ROUTER the parent connects to."""
    context = zmq.Context()
    peer = context.socket(kind)
    peer.setsockopt(zmq.ROUTING_ID, _IDENTITY)
    if kind == zmq.ROUTER:
        peer.bind(address)
    else:
        peer.connect(address)
    for _ in range(count):
        send_frames(peer, receive_frames(peer))
    peer.close(linger=1000)
    context.term()


def _timed(count: int, ping_pong: Callable[[], object]) -> list[float]:
    """The seconds each of `count` ping-pongs took."""
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        ping_pong()
        samples.append(time.perf_counter() - started)
    return samples


def _zmq(address: str, count: int) -> list[float]:
    context = zmq.Context()
    peer = context.socket(zmq.DEALER)
    peer.bind(address)
    child = multiprocessing.get_context("fork").Process(target=_zmq_echo, args=(address, count))
    child.start()
    try:
        return _timed(count, lambda: (send_frames(peer, [_MESSAGE]), receive_frames(peer)))
    finally:
        child.join(timeout=30)
        peer.close(linger=0)
        context.term()


class _ZmtpDealer:
    """A DEALER speaking ZMTP itself (scaler/utility/zmtp_codec.py) over a blocking TCP socket."""

    def __init__(self, host: str, port: int) -> None:
        self._socket = socket.create_connection((host, port))
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._codec = ZmtpCodec(socket_type=b"DEALER", identity=_IDENTITY)
        self._received: list[list[Frame]] = []
        while not self._codec.ready:
            self._read()

    def _read(self) -> None:
        self._socket.sendall(self._codec.take_output())
        chunk = self._socket.recv(65536)
        if not chunk:
            raise ConnectionError(f"the peer closed the connection: {self._codec.error or 'no reason given'}")
        self._received += self._codec.feed(chunk)

    def send(self, frames: list[bytes]) -> None:
        # The codec's own output first: its READY, made by the read that completed the handshake, must lead.
        self._socket.sendall(self._codec.take_output() + b"".join(encode_message(frames)))

    def receive(self) -> list[Frame]:
        while not self._received:
            self._read()
        return self._received.pop(0)

    def close(self) -> None:
        self._socket.close()


def _zmtp_from_python(port: int, count: int) -> list[float]:
    child = multiprocessing.get_context("fork").Process(
        target=_zmq_echo, args=(f"tcp://127.0.0.1:{port}", count, zmq.ROUTER)
    )
    child.start()
    samples = []
    dealer = None
    try:
        deadline = time.monotonic() + 10
        while dealer is None:
            try:
                dealer = _ZmtpDealer("127.0.0.1", port)
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        samples = _timed(count, lambda: (dealer.send([_MESSAGE]), dealer.receive()))
    finally:
        if dealer is not None:
            dealer.close()
        child.join(timeout=30)
    return samples


def _zmtp_router(count: int) -> list[float]:
    """The scheduler's end without libzmq (scaler/utility/zmtp_router.py, SCALER_SCHEDULER_TRANSPORT=zmtp): the
    parent's router, polled as the scheduler polls it, to a child's libzmq DEALER."""
    router = ZmtpRouter("tcp://127.0.0.1:0")
    child = multiprocessing.get_context("fork").Process(target=_zmq_echo, args=(router.address, count, zmq.DEALER))
    child.start()
    poller = select.poll()
    poller.register(router.fileno(), select.POLLIN)
    samples = []
    try:
        # The first send that finds the child's identity connected is the warm-up's first ping.
        deadline = time.monotonic() + 10
        while not router.send([_IDENTITY, _MESSAGE]):
            assert time.monotonic() < deadline, "the child's DEALER did not connect"
            poller.poll(10)
            router.receive(time.monotonic())
        router.flush()
        while not router.receive(time.monotonic()):
            poller.poll(10_000)

        def ping_pong() -> None:
            router.send([_IDENTITY, _MESSAGE])
            router.flush()
            while not router.receive(time.monotonic()):
                poller.poll(10_000)

        samples = _timed(count - 1, ping_pong)
    finally:
        child.join(timeout=30)
        router.close()
    return samples


def _tcp_echo(listener: socket.socket, count: int) -> None:
    peer, _ = listener.accept()
    peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(count):
        peer.sendall(peer.recv(65536))


def _tcp(count: int) -> list[float]:
    listener = socket.create_server(("127.0.0.1", 0))
    child = multiprocessing.get_context("fork").Process(target=_tcp_echo, args=(listener, count))
    child.start()
    mine = socket.create_connection(listener.getsockname())
    listener.close()
    mine.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return _socket_ping_pongs(mine, child, count)


def _pair_echo(descriptor: int, count: int) -> None:
    peer = socket.socket(fileno=descriptor)
    for _ in range(count):
        peer.sendall(peer.recv(65536))


def _socketpair(count: int) -> list[float]:
    mine, theirs = socket.socketpair()
    child = multiprocessing.get_context("fork").Process(target=_pair_echo, args=(theirs.fileno(), count))
    child.start()
    theirs.close()
    return _socket_ping_pongs(mine, child, count)


def _socket_ping_pongs(mine: socket.socket, child: multiprocessing.process.BaseProcess, count: int) -> list[float]:
    try:
        return _timed(count, lambda: (mine.sendall(_MESSAGE), mine.recv(65536)))
    finally:
        child.join(timeout=30)
        mine.close()


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
    try:
        return _timed(count, lambda: (stream.send_all([_MESSAGE[:24], _MESSAGE[24:]]), stream.receive()))
    finally:
        child.join(timeout=30)
        stream.close()


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
        "ZMTP from Python (tcp)": lambda: _zmtp_from_python(port, count),
        "ZMTP router (tcp)": lambda: _zmtp_router(count),
        "TCP socket (loopback)": lambda: _tcp(count),
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
