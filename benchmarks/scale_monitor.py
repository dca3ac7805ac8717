"""The monitor feed and scaler_top with many workers, for benchmarks/scale.py.

What a snapshot with W worker rows costs: its size on the wire, encoding it (the scheduler does this
once a second), decoding it, rendering it as scaler_top's lines; and scaler_top itself, run under a
pseudo-terminal against the live feed, which must draw worker rows and quit on `q`.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from typing import Callable

import zmq

from scaler.protocol.monitor_feed import MonitorSubscriber
from scaler.protocol.monitor_messages import MonitorSnapshot, decode_snapshot, encode_snapshot
from scaler.ui.top_screen import DEFAULT_SORT, render

TOP_ROWS, TOP_COLUMNS = 50, 200
TOP_SECONDS = 4.0


def wait_for_snapshot(
    address: str, condition: Callable[[MonitorSnapshot], bool], seconds: float
) -> MonitorSnapshot | None:
    """The first snapshot for which `condition` holds within `seconds`, else None."""
    deadline = time.monotonic() + seconds
    with MonitorSubscriber(address) as subscriber:
        while time.monotonic() < deadline:
            snapshot = subscriber.receive(timeout_seconds=min(1.5, max(0.0, deadline - time.monotonic())))
            if snapshot is not None and condition(snapshot):
                return snapshot
    return None


def _raw_frame(address: str, seconds: float = 10.0) -> bytes:
    context = zmq.Context()
    socket = context.socket(zmq.SUB)
    try:
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        socket.connect(address)
        if not socket.poll(int(seconds * 1000)):
            raise RuntimeError(f"no monitor snapshot from {address} in {seconds:g}s")
        return socket.recv()
    finally:
        socket.close(linger=0)
        context.term()


def _median_ms(action: Callable[[], object], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2] * 1e3


def monitor_figures(address: str, worker_count: int, directory: str) -> dict:
    frame = _raw_frame(address)
    snapshot = decode_snapshot(frame)
    top = run_top(address, worker_count)
    return {
        "snapshot_workers": len(snapshot.workers), "snapshot_kb": len(frame) / 1024,
        "encode_ms": _median_ms(lambda: encode_snapshot(snapshot)),
        "decode_ms": _median_ms(lambda: decode_snapshot(frame)),
        "render_ms": _median_ms(lambda: render(snapshot, DEFAULT_SORT, address, 0.0)),
        **top,
    }


def run_top(address: str, worker_count: int) -> dict:
    """scaler_top in a pseudo-terminal of TOP_ROWS x TOP_COLUMNS for TOP_SECONDS, then `q`: did it draw worker
    rows, did it quit by itself, and the CPU it used meanwhile."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", TOP_ROWS, TOP_COLUMNS, 0, 0))
    environment = dict(os.environ, TERM="xterm-256color", LINES=str(TOP_ROWS), COLUMNS=str(TOP_COLUMNS))
    process = subprocess.Popen([sys.executable, "-m", "scaler.cli.top", address], stdin=follower, stdout=follower,
                               stderr=follower, env=environment, start_new_session=True)
    os.close(follower)
    drawn = bytearray()
    try:
        deadline = time.monotonic() + TOP_SECONDS
        while time.monotonic() < deadline:
            _read_into(leader, drawn, deadline - time.monotonic())
        with open(f"/proc/{process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        os.write(leader, b"q")
        quit_deadline = time.monotonic() + 10
        while process.poll() is None and time.monotonic() < quit_deadline:
            _read_into(leader, drawn, 0.2)
        quit_by_itself = process.poll() == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        os.close(leader)
    text = drawn.decode(errors="replace")
    return {
        "top_drew": "worker" in text and quit_by_itself and worker_count > 0 and "host" in text,
        "top_cpu_seconds": cpu, "top_bytes_drawn": len(drawn),
    }


def _read_into(descriptor: int, into: bytearray, seconds: float) -> None:
    ready, _, _ = select.select([descriptor], [], [], max(0.0, seconds))
    if ready:
        try:
            into.extend(os.read(descriptor, 65536))
        except OSError:
            time.sleep(min(0.1, max(0.0, seconds)))
