"""Payloads of 2 GiB and more, through a real cluster (one worker and its store).

Linux moves at most 2 GiB less a page in one read call; a payload larger than that is read in bounded
pieces (bounded_io.py). Before, a lent 2 GiB argument read short, the store counted it lost and asked
the client again, forever; copied into a segment (--no-borrowing) it failed to read with a misleading
error. (A result that large comes back through a mapping of its segment, which has no such cap.) Each
test holds at most about 6 GiB (this machine has 24): run them one at a time.
"""

from __future__ import annotations

import sys

import psutil
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.cluster.combo import free_local_address
from scaler.errors import PayloadTooLargeError
from tests.conftest import console_script
from tests.integration.spawned import Spawner, start_scheduler

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only"),
]

PERIOD = 251  # prime: a piece that lands at the wrong offset (1 GiB, 2 GiB - 4 KiB) shows in the samples
# Just over 2 GiB + 1 MiB, a whole number of periods, so that the value is one repetition (one allocation).
LENGTH = -(-(2**31 + 2**20) // PERIOD) * PERIOD
SAMPLES = sorted({
    0, 1, 2**30 - 1, 2**30, 2**30 + 1, 2**31 - 4097, 2**31 - 4096, 2**31 - 4095, 2**31 - 1, 2**31, 2**31 + 1,
    2**31 + 2**19, LENGTH - 2, LENGTH - 1,
})


def periodic(length: int) -> bytes:
    return bytes(range(PERIOD)) * (length // PERIOD)


def length_and_samples(data: bytes) -> tuple[int, list[int]]:
    return len(data), [data[index] for index in SAMPLES]


def lengths_of(*payloads: bytes) -> list[int]:
    return [len(payload) for payload in payloads]


def expected_samples() -> list[int]:
    return [index % PERIOD for index in SAMPLES]


def cluster_address(spawn: Spawner, *cluster_options: str) -> str:
    address = free_local_address()
    start_scheduler(spawn, address)
    cluster = spawn("cluster", [console_script("scaler_cluster"), "-n", "1", *cluster_options, address])
    cluster.wait_for_log("all 1 workers registered")
    return address


@pytest.mark.parametrize("options", [(), ("--no-borrowing",)], ids=["lent", "copied into a segment"])
def test_a_bytes_argument_over_2_gib_arrives_whole(spawn: Spawner, options: tuple[str, ...]) -> None:
    address = cluster_address(spawn, *options)
    with Client(address=address, timeout_seconds=60) as client:
        argument = periodic(LENGTH)
        assert client.submit(length_and_samples, argument).result(timeout=120) == (LENGTH, expected_samples())


LIMIT = 4 * 1024**3  # the scheduler's default --max-message-size-bytes


def test_an_argument_or_object_at_or_over_the_4_gib_limit_is_refused_at_the_call_before_it_is_read() -> None:
    # bytes(n) is calloc'd: its pages cost nothing until something reads them, so a read shows in this RSS.
    at_limit, over_limit = bytes(LIMIT), bytes(LIMIT + 512 * 1024**2)
    this_process = psutil.Process()
    resident_before = this_process.memory_info().rss
    with SchedulerClusterCombo(n_workers=1) as combo, Client(address=combo.get_address(), timeout_seconds=60) as client:
        for too_large in (at_limit, over_limit):
            with pytest.raises(PayloadTooLargeError, match="an argument of 4,.* bytes is over the scheduler's limit"):
                client.submit(len, too_large)
            with pytest.raises(PayloadTooLargeError, match="an argument"):
                client.submit(lengths_of, b"small", too_large)
            with pytest.raises(PayloadTooLargeError, match="an argument"):
                client.map(lengths_of, [(b"small",), (too_large,)])
            with pytest.raises(PayloadTooLargeError, match="an argument"):
                client.get({"a": (lengths_of, too_large), "b": (lengths_of, b"small")}, ["a", "b"])
            with pytest.raises(PayloadTooLargeError, match="object 'huge'"):
                client.send_object(too_large, name="huge")
        assert this_process.memory_info().rss - resident_before < 1024**3, "the refused bytes were read"
        assert client.submit(len, b"still serves").result(timeout=60) == 12
