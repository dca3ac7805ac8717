"""send_object, object arguments, and large payloads that travel as their own frames."""

from __future__ import annotations

import functools
import threading

import cloudpickle
import pytest

from scaler import Client, SchedulerClusterCombo, Serializer
from scaler.client.object_reference import ObjectReference
from scaler.errors import TaskRejectedError

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
def test_small_tasks_keep_flowing_while_a_large_payload_travels(combo: SchedulerClusterCombo) -> None:
    """Another client's small tasks finish while a large argument is still on its way."""
    big_submitted = threading.Event()
    big_done = threading.Event()
    finished_while_big_in_flight = 0
    with Client(address=combo.get_address()) as big_client, Client(address=combo.get_address()) as small_client:
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
