"""The store process for real: started as a Cluster will start it, reached over real ZeroMQ sockets, holding
objects in real memfd shared memory, spilling to real unlinked files; readers and writers in other
processes; stores and readers killed with SIGKILL."""

from __future__ import annotations

import functools
import gc
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Iterator

import numpy as np
import psutil
import pytest

from scaler.store.server_config import StoreStartError
from scaler.store.store_client import ObjectMissing, StoreAddress, StoreClient, StoreError
from scaler.store.store_process import StoreProcess
from scaler.utility.host_key import this_host_key
from tests.conftest import child_python_environment
from tests.integration import waiting

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only"),
]

MB = 1 << 20
GB = 1 << 30
WAIT_SECONDS = 30.0  # an upper bound against hangs, never a measure
wait_until = functools.partial(waiting.wait_until, timeout=WAIT_SECONDS)


def start_store(spill_directory: str, **options) -> StoreProcess:
    return StoreProcess.start(spill_directory=spill_directory, environment=child_python_environment(), **options)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Iterator[StoreProcess]:
    with start_store(str(tmp_path_factory.mktemp("spill")), capacity_bytes=GB) as started:
        yield started


@pytest.fixture
def fresh_store(tmp_path) -> Iterator[StoreProcess]:
    with start_store(str(tmp_path), capacity_bytes=GB, pool_idle_seconds=600) as started:
        yield started


def object_id(name: str) -> bytes:
    return name.encode().ljust(16, b".")


def memfd_inodes(pid: int) -> set[int]:
    """The shared-memory segments a process holds open."""
    inodes = set()
    for name in os.listdir(f"/proc/{pid}/fd"):
        path = f"/proc/{pid}/fd/{name}"
        try:
            if os.readlink(path).startswith("/memfd:scaler-segment"):
                inodes.add(os.stat(path).st_ino)
        except OSError:
            continue
    return inodes


def open_files_under(pid: int, directory: str) -> list[str]:
    found = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith(directory + os.sep):
            found.append(target)
    return found


def mapping_of(address: int) -> tuple[int, str] | None:
    """(inode, path) of this process's mapping that holds `address`."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(part, 16) for part in fields[0].split("-"))
            if start <= address < end:
                return int(fields[4]), fields[5].strip() if len(fields) > 5 else ""
    return None


def inode_is_mapped_here(inode: int) -> bool:
    with open("/proc/self/maps") as maps:
        return any(len(line.split()) > 4 and line.split()[4] == str(inode) for line in maps)


def run_python(script: str, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script, *arguments], env=child_python_environment(), capture_output=True, text=True,
        timeout=WAIT_SECONDS * 4,
    )


ADDRESS_ARGUMENTS = "StoreAddress(sys.argv[1], sys.argv[2], sys.argv[3])"


def address_arguments(address: StoreAddress) -> list[str]:
    return [address.data_address, address.ipc_address, address.host_key]


# ---------------------------------------------------------------------------------------------- local


def test_a_50_mb_array_written_by_one_process_is_read_by_another_as_a_view_of_the_stores_segment(store) -> None:
    writer = run_python(
        "import sys, numpy as np\n"
        "from scaler.store.store_client import StoreAddress, StoreClient\n"
        f"with StoreClient({ADDRESS_ARGUMENTS}) as client:\n"
        "    assert client.local\n"
        "    client.put(b'array-50mb......', np.arange(50 * 2**20 // 8, dtype=np.float64))\n",
        *address_arguments(store.address),
    )
    assert writer.returncode == 0, writer.stderr
    expected = np.arange(50 * MB // 8, dtype=np.float64)
    with StoreClient(store.address) as client:
        array = client.get(object_id("array-50mb"))
        np.testing.assert_array_equal(array, expected)
        # Zero copy: the array's memory is the store's segment, mapped here.
        inode, path = mapping_of(array.ctypes.data)
        assert path.startswith("/memfd:scaler-segment") and inode in memfd_inodes(store.pid)
        assert client.status().pinned_bytes >= 50 * MB
        # Writable, copy-on-write: the store's copy does not change.
        array[:1000] = -1.0
        np.testing.assert_array_equal(client.get(object_id("array-50mb"))[:1000], expected[:1000])
        del array
        gc.collect()
        wait_until(lambda: (client.flush_releases(), client.status().pinned_bytes)[1] == 0, "mappings released")


def test_bytes_round_trip_through_shared_memory_and_over_tcp(store) -> None:
    payload = os.urandom(20 * MB)
    with StoreClient(store.address) as local, StoreClient(store.address, local=False) as remote:
        assert local.local and not remote.local
        local.put(object_id("bytes-local"), payload)
        remote.put(object_id("bytes-remote"), payload)
        for client in (local, remote):
            for name in ("bytes-local", "bytes-remote"):
                got = client.get(object_id(name))
                assert type(got) is bytes and got == payload


def test_remote_put_and_get_over_tcp_carry_arrays_and_structures(store) -> None:
    value = {"weights": np.linspace(0, 1, 3 * MB), "labels": [np.arange(10), "x"], "blob": os.urandom(100_000)}
    with StoreClient(store.address, local=False) as remote, StoreClient(store.address) as local:
        size = remote.put(object_id("structure"), value)
        assert size > 24 * MB
        got = remote.get(object_id("structure"))
        remote.put(object_id("small"), "tiny")
        assert remote.get(object_id("small")) == "tiny"
        # The segments are pinned only while zmq sends from them.
        wait_until(lambda: local.status().pinned_bytes == 0, "sends finished")
    np.testing.assert_array_equal(got["weights"], value["weights"])
    np.testing.assert_array_equal(got["labels"][0], value["labels"][0])
    assert got["labels"][1] == "x" and got["blob"] == value["blob"]
    got["weights"][0] = 5.0  # what arrives over tcp is writable too
    with StoreClient(store.address) as local:
        np.testing.assert_array_equal(local.get(object_id("structure"))["weights"], value["weights"])


def test_a_get_waits_for_an_object_being_put_and_a_missing_one_is_missing_after_its_wait(store) -> None:
    with StoreClient(store.address) as client:
        with pytest.raises(ObjectMissing, match="not here in time"):
            client.get(object_id("never"), timeout=0.3)
        results = []

        def read_when_it_comes() -> None:
            with StoreClient(store.address) as reader_client:
                results.append(reader_client.get(object_id("later")))

        reader = threading.Thread(target=read_when_it_comes)
        reader.start()
        time.sleep(0.3)
        client.put(object_id("later"), "arrived")
        reader.join(WAIT_SECONDS)
        assert results == ["arrived"]


def test_local_requests_are_refused_over_tcp(store) -> None:
    over_tcp = StoreAddress(store.address.data_address, store.address.data_address, this_host_key())
    with StoreClient(over_tcp, local=True) as client:
        with pytest.raises(StoreError, match="come over the store's ipc address"):
            client.put(object_id("sneaky"), b"x")


# ---------------------------------------------------------------------------------------------- store to store


def test_a_store_fetches_an_object_from_the_store_holding_it_and_keeps_a_copy(tmp_path) -> None:
    with start_store(str(tmp_path), capacity_bytes=GB, host_key="host-a") as holder, \
            start_store(str(tmp_path), capacity_bytes=GB, host_key="host-b") as here:
        assert holder.address.host_key != here.address.host_key
        array = np.random.default_rng(0).random(2 * MB)
        # A client on "host a" wrote it; a processor on "host b" asks its own store, naming the holder.
        with StoreClient(holder.address, local=False) as writer:
            writer.put(object_id("far"), array)
        with StoreClient(here.address, local=True) as reader:
            got = reader.get(object_id("far"), holder=holder.address.data_address)
            np.testing.assert_array_equal(got, array)
            assert mapping_of(got.ctypes.data)[0] in memfd_inodes(here.pid)  # mapped from this host's store
            status = reader.status()
            assert status.object_count == 1 and status.held_bytes >= array.nbytes
            holder.kill()
            # The copy is this store's own now: no holder needed, and the first holder may be gone.
            np.testing.assert_array_equal(reader.get(object_id("far"), timeout=0), array)
            with pytest.raises(ObjectMissing, match="still being fetched"):
                reader.get(object_id("elsewhere"), holder=holder.address.data_address, timeout=1.0)


# ---------------------------------------------------------------------------------------------- memory


def test_objects_beyond_the_capacity_spill_to_unlinked_files_and_come_back(tmp_path) -> None:
    spill_directory = str(tmp_path)
    arrays = [np.full(10 * MB // 8, index, dtype=np.int64) for index in range(6)]
    with start_store(spill_directory, capacity_bytes=25 * MB) as small:
        with StoreClient(small.address) as client:
            for index, array in enumerate(arrays):
                client.put(object_id(f"spill-{index}"), array)
            status = client.status()
            assert status.resident_bytes <= 25 * MB and status.spilled_bytes >= 35 * MB
            assert status.object_count == 6
            assert os.listdir(spill_directory) == []  # the files have no names
            assert len(open_files_under(small.pid, spill_directory)) >= 4
            for index, array in enumerate(arrays):
                got = client.get(object_id(f"spill-{index}"))
                np.testing.assert_array_equal(got, array)
                del got
                gc.collect()
            client.flush_releases()
            wait_until(lambda: client.status().pinned_bytes == 0, "mappings released")
            status = client.status()
            assert status.resident_bytes <= 25 * MB and status.object_count == 6


def test_the_segment_of_a_deleted_object_is_recycled_once_no_reader_maps_it(fresh_store) -> None:
    size = 20 * MB
    with StoreClient(fresh_store.address) as client:
        client.put(object_id("first"), os.urandom(size))
        first_segment = memfd_inodes(fresh_store.pid)
        mapped = client.get(object_id("first"))  # bytes: copied out, the mapping is already gone
        assert type(mapped) is bytes
        array_holder = np.zeros(size // 8)
        client.put(object_id("array"), array_holder)
        view = client.get(object_id("array"))  # an array: a view that keeps its segment mapped
        segments = memfd_inodes(fresh_store.pid)

        client.delete([object_id("first"), object_id("array")])
        client.put(object_id("second"), os.urandom(size))
        assert memfd_inodes(fresh_store.pid) == segments  # "first"'s segment, recycled
        client.put(object_id("third"), np.ones(size // 8))
        assert len(memfd_inodes(fresh_store.pid)) == len(segments) + 1  # not the one the view maps

        del view
        gc.collect()
        client.flush_releases()
        wait_until(lambda: client.status().pooled_bytes >= size, "the released segment pooled")
        before = memfd_inodes(fresh_store.pid)
        client.put(object_id("fourth"), np.ones(size // 8))
        assert memfd_inodes(fresh_store.pid) == before
        assert first_segment <= before


def test_a_reader_killed_with_sigkill_gives_its_mappings_back(fresh_store) -> None:
    with StoreClient(fresh_store.address) as client:
        client.put(object_id("shared"), np.arange(10 * MB // 8))
        reader = subprocess.Popen(
            [sys.executable, "-c",
             "import sys, time\n"
             "from scaler.store.store_client import StoreAddress, StoreClient\n"
             f"client = StoreClient({ADDRESS_ARGUMENTS})\n"
             "array = client.get(b'shared..........')\n"
             "print('mapped', flush=True)\n"
             "time.sleep(600)\n",
             *address_arguments(fresh_store.address)],
            env=child_python_environment(), stdout=subprocess.PIPE, text=True,
        )
        try:
            assert reader.stdout is not None and reader.stdout.readline().strip() == "mapped"
            assert client.status().pinned_bytes >= 10 * MB
            reader.send_signal(signal.SIGKILL)
            reader.wait(WAIT_SECONDS)
        finally:
            reader.kill()
            reader.wait()
        wait_until(lambda: client.status().pinned_bytes == 0, "the dead reader's pins dropped")
        segments = memfd_inodes(fresh_store.pid)
        client.delete([object_id("shared")])
        client.put(object_id("next"), np.arange(10 * MB // 8))
        assert memfd_inodes(fresh_store.pid) == segments  # its segment recycled at once


def test_a_store_killed_with_sigkill_leaves_no_segment_or_file_behind(tmp_path) -> None:
    spill_directory = str(tmp_path / "spill")
    os.mkdir(spill_directory)
    shm_before = set(os.listdir("/dev/shm"))
    store = start_store(spill_directory, capacity_bytes=25 * MB)
    work_directory = os.path.dirname(store.address.ipc_address[len("ipc://"):])
    try:
        with StoreClient(store.address) as client:
            for index in range(4):
                client.put(object_id(f"kill-{index}"), np.full(10 * MB // 8, index, dtype=np.int64))
            array = client.get(object_id("kill-3"))
            assert client.status().spilled_bytes > 0
        assert memfd_inodes(store.pid) and open_files_under(store.pid, spill_directory)
        inode, _ = mapping_of(array.ctypes.data)
    finally:
        store.kill()

    # What the store left there would be new. Other processes on this machine make and remove entries there
    # meanwhile, which the store never makes: named semaphores (dask's multiprocessing session runs beside the
    # suite) and joblib's memmapping folders (the joblib tests, in another xdist worker).
    left = {
        name for name in set(os.listdir("/dev/shm")) - shm_before
        if not name.startswith(("sem.", "joblib_memmapping_folder_"))
    }
    assert not left, left
    assert os.listdir(spill_directory) == []
    # The reader's mapping outlives the store; the segment's memory goes with the mapping.
    assert int(array[-1]) == 3 and inode_is_mapped_here(inode)
    del array
    gc.collect()
    assert not inode_is_mapped_here(inode)
    # A killed store could not remove its work directory: the next store to start does.
    assert os.path.isdir(work_directory)
    with start_store(spill_directory, capacity_bytes=MB):
        assert not os.path.exists(work_directory)


# ---------------------------------------------------------------------------------------------- process


def test_the_store_exits_when_the_process_that_started_it_dies(tmp_path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from scaler.store.store_process import StoreProcess\n"
         f"store = StoreProcess.start(capacity_bytes=2**20, spill_directory={str(tmp_path)!r})\n"
         "print(store.pid, flush=True)\n"
         "time.sleep(600)\n"],
        env=child_python_environment(), stdout=subprocess.PIPE, text=True,
    )
    try:
        assert parent.stdout is not None
        store = psutil.Process(int(parent.stdout.readline()))
        parent.send_signal(signal.SIGKILL)
        parent.wait(WAIT_SECONDS)
        store.wait(WAIT_SECONDS)
    finally:
        parent.kill()
        parent.wait()


def test_a_store_that_cannot_listen_says_why(store, tmp_path) -> None:
    with pytest.raises(StoreStartError, match="cannot listen on tcp://127.0.0.1"):
        start_store(str(tmp_path), capacity_bytes=MB, data_address=store.address.data_address)
