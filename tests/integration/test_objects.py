"""send_object, object arguments, and large payloads that travel as their own frames."""

from __future__ import annotations

import functools
import os
import threading
import time
from typing import Callable, Iterator

import cloudpickle
import pytest

from scaler import Client, SchedulerClusterCombo, Serializer
from scaler.client.object_reference import ObjectReference
from scaler.errors import TaskRejectedError
from scaler.protocol.monitor_messages import ClientStatus, MonitorSnapshot
from scaler.scheduler.config import default_monitor_address
from scaler.ui.feed import MonitorSubscriber

LARGE = 150 * 1024 * 1024


def query(object_reference: list, index: int) -> int:
    return object_reference[index]


def identity_of(value: object) -> int:
    return id(value)


def length(value: bytes) -> int:
    return len(value)


def make_bytes(size: int) -> bytes:
    return b"\x07" * size


def test_send_object_example_of_the_documents(client: Client) -> None:
    reference = client.send_object([1, 2, 3, 4, 5], name="large_object")
    assert isinstance(reference, ObjectReference)
    assert reference.name == "large_object"
    assert client.submit(query, reference, 0).result(timeout=30) == 1
    assert client.submit(query, reference, 1).result(timeout=30) == 2
    assert client.map(query, [(reference, i) for i in range(5)]) == [1, 2, 3, 4, 5]
    assert client.submit(query, object_reference=reference, index=4).result(timeout=30) == 5


def test_an_object_is_deserialized_once_per_worker_and_shared(combo: SchedulerClusterCombo) -> None:
    with Client(address=combo.get_address()) as client:
        reference = client.send_object(list(range(1000)))
        identities = set(client.map(identity_of, [(reference,) for _ in range(200)]))
        # two workers: at most two copies, each reused by every task on its worker
        assert 1 <= len(identities) <= 2


def test_objects_are_freed_on_clear_and_unknown_after(combo: SchedulerClusterCombo) -> None:
    with Client(address=combo.get_address()) as client:
        reference = client.send_object(b"payload")
        assert client.submit(length, reference).result(timeout=30) == 7
        client.clear()
        with pytest.raises(TaskRejectedError, match="unknown object"):
            client.submit(length, reference).result(timeout=30)


def test_large_argument_and_result_travel_intact(client: Client) -> None:
    payload = make_bytes(LARGE)
    assert client.submit(length, payload).result(timeout=120) == LARGE
    result = client.submit(make_bytes, LARGE).result(timeout=120)
    assert len(result) == LARGE and result[:3] == b"\x07\x07\x07"
    reference = client.send_object(payload)
    assert client.map(length, [(reference,)] * 4) == [LARGE] * 4


@pytest.mark.timeout(180)
def test_the_scheduler_relays_a_large_argument_and_result_without_copying_them() -> None:
    """Zero-copy frames: the scheduler's peak memory grows by one payload, not by the copies a re-encoding makes."""
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as cluster, \
            Client(address=cluster.get_address()) as client:
        status_path = f"/proc/{cluster.scheduler_pid}/status"
        if not os.path.exists(status_path):
            pytest.skip("needs /proc to read the scheduler's peak memory")

        def peak_mib() -> float:
            with open(status_path) as status:
                return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:"))

        assert client.submit(abs, -1).result(timeout=60) == 1
        before, payload_mib = peak_mib(), LARGE / (1 << 20)
        assert client.submit(length, make_bytes(LARGE)).result(timeout=120) == LARGE
        assert len(client.submit(make_bytes, LARGE).result(timeout=120)) == LARGE
        grown = peak_mib() - before
        assert grown < 1.5 * payload_mib, f"the scheduler's peak rose {grown:.0f} MiB for {payload_mib:.0f} MiB payload"


@pytest.mark.timeout(180)
def test_small_tasks_keep_flowing_while_a_large_payload_travels() -> None:
    """Another client's small tasks finish while a large argument is still on its way through the scheduler:
    a cluster without a store, where large payloads travel as frames on the control path (with a store they
    do not pass through the scheduler at all, and are too quick to measure anything)."""
    big_submitted = threading.Event()
    big_done = threading.Event()
    finished_while_big_in_flight = 0
    with SchedulerClusterCombo(n_workers=2, store=False) as combo, \
            Client(address=combo.get_address()) as big_client, Client(address=combo.get_address()) as small_client:
        def send_big() -> None:
            payloads = [make_bytes(LARGE) for _ in range(3)]
            futures = [big_client.submit(length, payload) for payload in payloads]
            big_submitted.set()
            assert [f.result(timeout=150) for f in futures] == [LARGE] * 3
            big_done.set()

        sender = threading.Thread(target=send_big)
        sender.start()
        try:
            assert big_submitted.wait(60)
            while not big_done.is_set():
                assert small_client.submit(abs, -1).result(timeout=60) == 1
                if not big_done.is_set():
                    finished_while_big_in_flight += 1
        finally:
            sender.join(timeout=170)
        assert big_done.is_set()
        assert finished_while_big_in_flight >= 5, "small tasks stalled behind the large transfer"


class CountingSerializer(Serializer):
    """cloudpickle, counting how many bytes it serialized (class attribute: the client's copy counts)."""

    serialized_bytes = 0

    @staticmethod
    def serialize(obj: object) -> bytes:
        payload = cloudpickle.dumps(obj)
        CountingSerializer.serialized_bytes += len(payload)
        return payload

    @staticmethod
    def deserialize(payload: bytes) -> object:
        return cloudpickle.loads(payload)


def lookup(heavy_map: bytes, index: int) -> int:
    return index * 1


def test_a_heavy_function_submitted_many_times_is_serialized_and_sent_once(combo: SchedulerClusterCombo) -> None:
    """Document 002's "what not to do" (a partial holding a huge bytes, submitted 100 times) is merely wasteful."""
    big_func = functools.partial(lookup, b"1" * 50_000_000)
    CountingSerializer.serialized_bytes = 0
    with Client(address=combo.get_address(), serializer=CountingSerializer()) as client:
        futures = [client.submit(big_func, i) for i in range(100)]
        assert [future.result(timeout=120) for future in futures] == list(range(100))
    # one 50 MB serialization of the function, plus 100 tiny arguments
    assert 50_000_000 <= CountingSerializer.serialized_bytes < 51_000_000


# ---------------------------------------------------------------------------------------------- object lifetime


def latest(monitor: MonitorSubscriber) -> MonitorSnapshot:
    """The newest snapshot the scheduler has published (every 0.25 s in this module's cluster)."""
    snapshot = monitor.receive(timeout_seconds=5.0)
    assert snapshot is not None, "no monitor snapshot within 5 s"
    while True:
        newer = monitor.receive(timeout_seconds=0.0)
        if newer is None:
            return snapshot
        snapshot = newer


def wait_for_snapshot(monitor: MonitorSubscriber, condition: Callable[[MonitorSnapshot], bool], what: str,
                      seconds: float = 40.0) -> MonitorSnapshot:
    deadline = time.monotonic() + seconds
    snapshot = latest(monitor)
    while not condition(snapshot):
        assert time.monotonic() < deadline, f"the monitor never showed {what}; last snapshot: {snapshot}"
        snapshot = latest(monitor)
    return snapshot


def client_status(snapshot: MonitorSnapshot, name: str) -> ClientStatus | None:
    return next((client for client in snapshot.clients if client.name == name), None)


@pytest.fixture(scope="module")
def cluster() -> Iterator[SchedulerClusterCombo]:
    """Two workers that heartbeat every 0.5 s (their memory on the feed follows soon) and a feed published every
    0.25 s (each step below waits for a new snapshot), shared by the tests that watch objects come and go on the
    monitor: each uses clients of its own names and ends with nothing large held, which the next one's
    cluster-wide checks would catch otherwise."""
    with SchedulerClusterCombo(
        n_workers=2, logging_level="WARNING", heartbeat_interval_seconds=0.5, monitor_interval_seconds=0.25
    ) as started:
        yield started


OBJECT_SIZE = 96 * 1024 * 1024


@pytest.mark.timeout(180)
def test_objects_held_per_client_on_the_monitor_and_freed_everywhere_on_clear_and_disconnect(
    cluster: SchedulerClusterCombo,
) -> None:
    """The monitor feed shows each client's objects and their size; clear() and disconnect() free them in
    the scheduler (the feed's counts) and in the workers (their agent and processor memory, also from the feed).
    A client process that dies is covered in test_fault_injection.py (a dead client's objects are freed)."""
    with MonitorSubscriber(default_monitor_address(cluster.get_address())) as monitor, \
            Client(address=cluster.get_address(), name="holder") as holder, \
            Client(address=cluster.get_address(), name="bystander") as bystander:
        bystander_reference = bystander.send_object(b"b" * 1000)
        assert bystander.submit(length, bystander_reference).result(timeout=30) == 1000

        def worker_memory(snapshot: MonitorSnapshot) -> dict[str, int]:
            return {w.name: w.agent_rss_bytes + w.processor_rss_bytes for w in snapshot.workers}

        before = wait_for_snapshot(monitor, lambda s: len(s.workers) == 2 and client_status(s, "holder") is not None,
                                   "both workers and the holder client")
        held_before = client_status(before, "holder")
        assert held_before is not None
        memory_before = worker_memory(before)

        reference = holder.send_object(make_bytes(OBJECT_SIZE), name="big")
        assert set(holder.map(length, [(reference,)] * 40)) == {OBJECT_SIZE}

        def holds_the_object(snapshot: MonitorSnapshot) -> bool:
            status = client_status(snapshot, "holder")
            return status is not None and status.objects >= held_before.objects + 1 \
                and status.object_bytes >= held_before.object_bytes + OBJECT_SIZE

        holding = wait_for_snapshot(monitor, holds_the_object, "the holder's object and its size")
        assert holding.object_bytes >= OBJECT_SIZE and holding.object_count >= 2
        bystander_status = client_status(holding, "bystander")
        assert bystander_status is not None
        assert bystander_status.objects >= 1 and bystander_status.object_bytes < 1 << 20

        def grown_workers(snapshot: MonitorSnapshot) -> list[str]:
            memory = worker_memory(snapshot)
            return [name for name in memory_before if memory[name] - memory_before[name] > OBJECT_SIZE]

        holding_workers = grown_workers(wait_for_snapshot(monitor, grown_workers, "a worker holding the object"))

        holder.clear()
        wait_for_snapshot(
            monitor,
            lambda s: (status := client_status(s, "holder")) is not None and status.objects == 0
            and status.object_bytes == 0 and s.object_bytes < OBJECT_SIZE,
            "the holder's objects freed in the scheduler after clear()")
        wait_for_snapshot(
            monitor,
            lambda s: all(worker_memory(s)[name] - memory_before[name] < OBJECT_SIZE // 2 for name in holding_workers),
            "the workers' memory back down after clear()")
        with pytest.raises(TaskRejectedError, match="unknown object"):
            holder.submit(length, reference).result(timeout=30)

        second = holder.send_object(make_bytes(OBJECT_SIZE), name="big again")
        assert holder.submit(length, second).result(timeout=60) == OBJECT_SIZE
        wait_for_snapshot(monitor, lambda s: s.object_bytes >= OBJECT_SIZE, "the second object held")
        holder.disconnect()
        after = wait_for_snapshot(
            monitor, lambda s: client_status(s, "holder") is None and s.object_bytes < OBJECT_SIZE,
            "the holder gone and its objects freed after disconnect()")
        assert client_status(after, "bystander") == bystander_status  # the other client's objects are untouched
        wait_for_snapshot(
            monitor,
            lambda s: all(v - memory_before[name] < OBJECT_SIZE // 2 for name, v in worker_memory(s).items()),
            "the workers' memory back down after disconnect()")
        assert bystander.submit(length, bystander_reference).result(timeout=30) == 1000


# ---------------------------------------------------------------------------------------------- shared arguments


SHARED_SIZE = 20 * 1024 * 1024


class CountingCallsSerializer(Serializer):
    """cloudpickle, counting the serialize calls that made a large payload (class attribute: the client's copy)."""

    large_payloads = 0

    @staticmethod
    def serialize(obj: object) -> bytes:
        payload = cloudpickle.dumps(obj)
        if len(payload) >= SHARED_SIZE:
            CountingCallsSerializer.large_payloads += 1
        return payload

    @staticmethod
    def deserialize(payload: bytes) -> object:
        return cloudpickle.loads(payload)


def total_length(held: tuple, index: int) -> int:
    chunks, tail = held
    return sum(len(chunk) for chunk in chunks) + len(tail) + index


def first_item(values: list) -> object:
    return values[0]


def holding_nothing_large(name: str) -> Callable[[MonitorSnapshot], bool]:
    """The client is known to the scheduler and holds no large object (its function objects are small)."""
    def condition(snapshot: MonitorSnapshot) -> bool:
        status = client_status(snapshot, name)
        return status is not None and status.object_bytes < 1 << 20
    return condition


@pytest.mark.timeout(240)
def test_a_large_bytes_submitted_many_times_is_serialized_and_sent_once_then_freed(
    cluster: SchedulerClusterCombo,
) -> None:
    """Issue 6: the same (immutable) 20 MB bytes in 50 submits is one serialization and one object, which is
    deleted from the scheduler once the last task using it has finished."""
    payload = make_bytes(SHARED_SIZE)
    CountingCallsSerializer.large_payloads = 0
    with MonitorSubscriber(default_monitor_address(cluster.get_address())) as monitor, \
            Client(address=cluster.get_address(), name="sharer", serializer=CountingCallsSerializer()) as client:
        futures = [client.submit(length, payload) for _ in range(50)]
        assert [future.result(timeout=120) for future in futures] == [SHARED_SIZE] * 50
        assert CountingCallsSerializer.large_payloads == 1
        assert len(client._shared_arguments) == 0
        wait_for_snapshot(monitor, holding_nothing_large("sharer"), "the shared argument freed in the scheduler")
        wait_for_snapshot(monitor, lambda s: s.object_bytes < 1 << 20, "no large object left in the scheduler")
        # Sent again once everything using it is finished: one more serialization, still correct.
        assert client.submit(length, payload).result(timeout=120) == SHARED_SIZE
        assert CountingCallsSerializer.large_payloads == 2


@pytest.mark.timeout(240)
def test_a_large_object_shared_by_the_tasks_of_a_map_is_serialized_once_then_freed(
    cluster: SchedulerClusterCombo,
) -> None:
    """Within one map any object (here a tuple holding a list and a bytes) found in many tasks is sent once."""
    shared = ([bytes([i % 256]) * 1024 for i in range(SHARED_SIZE // 1024)], make_bytes(1000))
    expected = SHARED_SIZE + 1000
    CountingCallsSerializer.large_payloads = 0
    with MonitorSubscriber(default_monitor_address(cluster.get_address())) as monitor, \
            Client(address=cluster.get_address(), name="mapper", serializer=CountingCallsSerializer()) as client:
        assert client.map(total_length, [(shared, i) for i in range(50)]) == [expected + i for i in range(50)]
        assert CountingCallsSerializer.large_payloads == 1
        wait_for_snapshot(monitor, holding_nothing_large("mapper"), "the map's shared argument freed in the scheduler")
        wait_for_snapshot(monitor, lambda s: s.object_bytes < 1 << 20, "no large object left in the scheduler")


def test_a_large_mutable_argument_changed_between_submits_gives_the_new_value(client: Client) -> None:
    values = [0] * (SHARED_SIZE // 8)
    first = client.submit(first_item, values)
    assert first.result(timeout=60) == 0
    values[0] = 1
    second = client.submit(first_item, values)
    values[0] = 2  # after submit returns the argument is on its way: the task sees the value at submit time
    assert second.result(timeout=60) == 1
    assert client.submit(first_item, values).result(timeout=60) == 2


def test_a_mutated_argument_between_two_maps_and_a_small_repeated_one_in_a_map(client: Client) -> None:
    values = [0] * (SHARED_SIZE // 8)
    assert client.map(first_item, [(values,)] * 10) == [0] * 10
    values[0] = 7
    assert client.map(first_item, [(values,)] * 10) == [7] * 10
    small = [3, 4]
    assert client.map(first_item, [(small,)] * 10) == [3] * 10


@pytest.mark.timeout(240)
def test_a_large_object_shared_by_the_tasks_of_a_graph_is_serialized_once_then_freed(
    cluster: SchedulerClusterCombo,
) -> None:
    shared = ([bytes([i % 256]) * 1024 for i in range(SHARED_SIZE // 1024)], make_bytes(1000))
    expected = SHARED_SIZE + 1000
    graph: dict = {f"part-{i}": (total_length, shared, i) for i in range(30)}
    graph["sum"] = (sum, [f"part-{i}" for i in range(30)])
    CountingCallsSerializer.large_payloads = 0
    with MonitorSubscriber(default_monitor_address(cluster.get_address())) as monitor, \
            Client(address=cluster.get_address(), name="grapher", serializer=CountingCallsSerializer()) as client:
        outcome = client.get(graph, ["sum", "part-3"])
        assert outcome == {"sum": 30 * expected + sum(range(30)), "part-3": expected + 3}
        assert CountingCallsSerializer.large_payloads == 1
        wait_for_snapshot(monitor, holding_nothing_large("grapher"), "the graph's shared argument freed")
        wait_for_snapshot(monitor, lambda s: s.object_bytes < 1 << 20, "no large object left in the scheduler")
