"""Random bytes written at a real scheduler's port: a log line per sender per interval, not one per frame.

With libzmq's ROUTER (SCALER_SCHEDULER_TRANSPORT=zmq), a peer that speaks no ZMTP greeting is read as ZMTP 1.0,
so its bytes become a stream of messages the scheduler cannot decode (about sixteen per 4 KB write). The
scheduler logs the first, counts the rest, and after its interval says how many more there were, naming the
sender briefly. With its own ZMTP router (the default), such a connection is closed at its greeting, and the
refusals are logged the same way, counted per host.
"""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import sys
import time
from typing import Iterator

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from scaler.cluster.combo import free_local_address
from scaler.scheduler.router_link import TRANSPORT_ENV
from scaler.utility.process_stop import stop_process

pytestmark = pytest.mark.timeout(120)

STARTUP_SECONDS = 30.0
# The scheduler's counting interval (--bad-frame-log-seconds), shorter than its default 10 s, which the test
# would wait out; still far longer than a sender's writes take, so each sender's drops fall in one interval.
INTERVAL_SECONDS = 4.0
FIRST_LINE = re.compile(r"Scheduler: dropped an undecodable message \(.*\) from (\S+(?: \(\d+ bytes\))?); more from it")
REFUSED_LINE = re.compile(
    r"Scheduler: dropped a connection that did not speak ZMTP 3 \((.*)\) from (\S+); more from it"
)
SUMMARY_LINE = re.compile(r"Scheduler: dropped ([\d,]+) more bad frame\(s\) from (.+) in the ([\d.]+)s after the first")


class Scheduler:
    def __init__(self, tmp_path, transport: str) -> None:
        self.address = free_local_address()
        self.log_path = tmp_path / "scheduler.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "scaler.cli.scheduler", self.address,
             "--monitor-address", f"ipc://{tmp_path}/monitor", "--logging-paths", str(self.log_path),
             "--bad-frame-log-seconds", repr(INTERVAL_SECONDS)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            env={**os.environ, TRANSPORT_ENV: transport},
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_for(self, pattern: re.Pattern[str], count: int, timeout: float) -> list[re.Match[str]]:
        deadline = time.monotonic() + timeout
        while True:
            found = list(pattern.finditer(self.log()))
            if len(found) >= count:
                return found
            assert self.process.poll() is None, f"the scheduler exited:\n{self.log()}"
            missing = f"{count} x {pattern.pattern!r} not logged in {timeout:g}s"
            assert time.monotonic() < deadline, f"{missing}:\n{self.log()}"
            time.sleep(0.1)

    def stop(self) -> None:
        stop_process(self.process, grace_seconds=15)


@pytest.fixture
def scheduler(tmp_path, request) -> Iterator[Scheduler]:
    started = Scheduler(tmp_path, getattr(request, "param", "zmq"))
    try:
        started.wait_for(re.compile("Scheduler: listening on"), 1, STARTUP_SECONDS)
        yield started
    finally:
        started.stop()


def write_random_bytes(address: str, seed: int, writes: int) -> None:
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    noise = random.Random(seed)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        for _ in range(writes):
            chunk = bytearray(noise.randbytes(4096))
            chunk[0] = 0x20  # not 0xFF: ZeroMQ then takes the peer for ZMTP 1.0 and reads messages
            raw.sendall(chunk)
        time.sleep(1)  # let the scheduler read it all before the connection goes


def test_random_bytes_log_one_line_per_sender_then_a_count(scheduler: Scheduler) -> None:
    for seed in (1, 2):
        write_random_bytes(scheduler.address, seed, writes=2)

    summaries = scheduler.wait_for(SUMMARY_LINE, 2, timeout=INTERVAL_SECONDS + 40)
    firsts = list(FIRST_LINE.finditer(scheduler.log()))
    senders = [match.group(1) for match in firsts]
    assert len(senders) == 2 and len(set(senders)) == 2, scheduler.log()
    assert {match.group(2) for match in summaries} == set(senders)
    assert all(int(match.group(1).replace(",", "")) >= 1 for match in summaries)
    assert {match.group(3) for match in summaries} == {f"{INTERVAL_SECONDS:g}"}
    undecodable_lines = [line for line in scheduler.log().splitlines() if "undecodable" in line]
    assert len(undecodable_lines) == 2, "\n".join(undecodable_lines)
    for sender in senders:  # short: the first bytes in hex and the length, not hundreds of escaped bytes
        assert len(sender) <= 60 and "\\x" not in sender, sender
    assert scheduler.process.poll() is None


@pytest.mark.parametrize("scheduler", ["zmtp"], indirect=True)
def test_connections_without_zmtp_are_refused_and_logged_once_per_host_per_interval(scheduler: Scheduler) -> None:
    host, port = scheduler.address.removeprefix("tcp://").rsplit(":", 1)
    for seed in range(5):
        noise = random.Random(seed)
        chunk = bytearray(noise.randbytes(4096))
        chunk[0] = 0x20
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            try:
                raw.sendall(chunk)
                raw.settimeout(10)
                while raw.recv(4096):  # the scheduler's greeting, then the close
                    pass
            except (ConnectionResetError, BrokenPipeError):
                pass  # closed while we still wrote: refused all the same

    summaries = scheduler.wait_for(SUMMARY_LINE, 1, timeout=INTERVAL_SECONDS + 40)
    refused = list(REFUSED_LINE.finditer(scheduler.log()))
    assert len(refused) == 1, scheduler.log()
    assert refused[0].group(1) == "not a ZMTP peer (bad signature)"
    assert refused[0].group(2) == "127.0.0.1"
    assert [(match.group(1), match.group(2)) for match in summaries] == [("4", "127.0.0.1")], scheduler.log()
    assert "ZMTP router: closing" not in scheduler.log()

    # It still takes a real peer: a libzmq DEALER completes its handshake.
    context = zmq.Context()
    try:
        dealer = context.socket(zmq.DEALER)
        monitor = dealer.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        dealer.connect(scheduler.address)
        assert monitor.poll(10_000), "no handshake with the scheduler within 10 s"
        assert recv_monitor_message(monitor)["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED
        dealer.disable_monitor()
        monitor.close(linger=0)
        dealer.close(linger=0)
    finally:
        context.term()
    assert scheduler.process.poll() is None
