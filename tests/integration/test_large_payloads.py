"""Payloads of 2 GiB and more, through a real cluster (one worker and its store).

Linux moves at most 2 GiB less a page in one read call; a payload larger than that is read in bounded
pieces (bounded_io.py). Before, a lent 2 GiB argument read short, the store counted it lost and asked
the client again, forever; copied into a segment (--no-borrowing) it failed to read with a misleading
error. (A result that large comes back through a mapping of its segment, which has no such cap.) Each
test holds at most about 6 GiB (this machine has 24): run them one at a time.
"""

from __future__ import annotations

import sys

import pytest

from scaler import Client
from scaler.cluster.combo import free_local_address
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
