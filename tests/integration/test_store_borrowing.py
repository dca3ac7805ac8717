"""A real store borrowing what local writers lend it (StoreClient(lend=True), as a client's): the bytes stay in the
writer's memory, readers in other processes copy them out of it, and nothing is read once the writer lets go
or dies."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from typing import Iterator

import pytest

from scaler.store.store_client import StoreClient
from scaler.store.store_process import StoreProcess
from tests.conftest import child_python_environment
from tests.integration.test_store import (
    ADDRESS_ARGUMENTS,
    GB,
    MB,
    WAIT_SECONDS,
    address_arguments,
    object_id,
    run_python,
    start_store,
)

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only"),
]

READER = (
    "import hashlib, sys\n"
    "from scaler.store.store_client import StoreAddress, StoreClient, ObjectMissing\n"
    f"with StoreClient({ADDRESS_ARGUMENTS}) as client:\n"
    "    try:\n"
    "        got = client.get(sys.argv[4].encode(), timeout=float(sys.argv[5]))\n"
    "    except ObjectMissing as error:\n"
    "        print('missing', error.reason)\n"
    "    else:\n"
    "        print(type(got).__name__, hashlib.sha256(got).hexdigest())\n"
)


def read_elsewhere(store: StoreProcess, name: str, timeout: float = 5.0) -> str:
    """What a reader in another process gets for the object: its type and hash, or 'missing' and why."""
    reader = run_python(READER, *address_arguments(store.address), object_id(name).decode(), str(timeout))
    assert reader.returncode == 0, reader.stderr
    return reader.stdout.strip()


@pytest.fixture
def store(tmp_path) -> Iterator[StoreProcess]:
    with start_store(str(tmp_path), capacity_bytes=GB) as started:
        yield started


def test_a_lent_object_takes_no_shared_memory_and_readers_here_and_over_tcp_get_it(store) -> None:
    payload = os.urandom(40 * MB)
    with StoreClient(store.address, lend=True) as client, StoreClient(store.address, local=False) as remote:
        resident_before = client.status().resident_bytes
        assert client.put(object_id("lent"), payload) > 40 * MB
        status = client.status()
        assert status.resident_bytes == resident_before  # no segment: the bytes are still only ours
        assert status.object_count == 1 and status.held_bytes > 40 * MB
        assert read_elsewhere(store, "lent") == f"bytes {hashlib.sha256(payload).hexdigest()}"
        assert remote.get(object_id("lent")) == payload  # the store read it out of our memory and sent it


def test_once_the_writer_lets_go_of_an_object_nobody_reads_it(store) -> None:
    with StoreClient(store.address, lend=True) as client:
        client.put(object_id("let-go"), os.urandom(8 * MB))
        client.let_go([object_id("let-go")])
        assert read_elsewhere(store, "let-go").startswith("missing lost:")
        # The store counts it lost: a later reader does not wait for it.
        assert read_elsewhere(store, "let-go", timeout=0).startswith("missing")
        assert client.status().object_count == 0


def test_the_objects_of_a_writer_killed_with_sigkill_are_lost_and_the_store_carries_on(store) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c",
         "import os, sys\n"
         "from scaler.store.store_client import StoreAddress, StoreClient\n"
         f"client = StoreClient({ADDRESS_ARGUMENTS}, lend=True)\n"
         "client.put(b'doomed'.ljust(16, b'.'), os.urandom(8 * 2**20))\n"
         "print('lent', flush=True)\n"
         "sys.stdin.read()\n",
         *address_arguments(store.address)],
        env=child_python_environment(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "lent"
        writer.kill()
        writer.wait(WAIT_SECONDS)
    finally:
        writer.kill()
    assert read_elsewhere(store, "doomed").startswith("missing")  # lost, or already forgotten
    payload = os.urandom(MB)
    with StoreClient(store.address, lend=True) as client:
        client.put(object_id("after"), payload)
        assert read_elsewhere(store, "after") == f"bytes {hashlib.sha256(payload).hexdigest()}"


def test_a_store_that_does_not_borrow_gets_segments_from_a_writer_that_would_lend(tmp_path) -> None:
    payload = os.urandom(8 * MB)
    with start_store(str(tmp_path), capacity_bytes=GB, borrowing=False) as store, \
            StoreClient(store.address, lend=True) as client:
        client.put(object_id("copied"), payload)
        client.put(object_id("copied-too"), payload)
        assert client.status().resident_bytes >= 16 * MB  # both in segments
        client.let_go([object_id("copied")])  # nothing was lent: nothing to let go of
        assert read_elsewhere(store, "copied") == f"bytes {hashlib.sha256(payload).hexdigest()}"


def test_a_store_on_another_host_fetches_a_lent_object_from_the_store_that_borrowed_it(tmp_path) -> None:
    payload = os.urandom(12 * MB)
    with start_store(str(tmp_path), capacity_bytes=GB, host_key="host-a") as holder, \
            start_store(str(tmp_path), capacity_bytes=GB, host_key="host-b") as there, \
            StoreClient(holder.address, lend=True) as client:
        client.put(object_id("travels"), payload)
        with StoreClient(there.address, local=True) as reader:
            assert reader.get(object_id("travels"), holder=holder.address.data_address) == payload
            assert reader.status().held_bytes >= 12 * MB  # a copy of its own now
        client.let_go([object_id("travels")])
        with StoreClient(there.address, local=True) as reader:
            assert reader.get(object_id("travels"), timeout=0) == payload
