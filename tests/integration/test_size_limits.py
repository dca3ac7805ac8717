"""The scheduler's size limits, as a user meets them: a clear error at the call, never a silent loss.

ZeroMQ drops a frame over the scheduler's --max-message-size-bytes before the scheduler reads it, and the
scheduler drops a peer whose control frame is over --max-control-frame-bytes. Clients and workers learn
both limits from the scheduler's welcome: what cannot fit raises PayloadTooLargeError where it was made
(a submit, map, get or send_object; a task's result fails that task), and what only needs splitting is
split into several messages. Here a scheduler runs with small limits (1 MiB per frame, 512 KiB per
control frame) so that ordinary payloads reach them.
"""

from __future__ import annotations

import re
import time
from typing import Iterator

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.errors import PayloadTooLargeError
from scaler.scheduler.config import default_monitor_address
from scaler.ui.feed import MonitorSubscriber

pytestmark = pytest.mark.timeout(120)

FRAME_LIMIT = 1024 * 1024
CONTROL_LIMIT = 512 * 1024
OVER_FRAME = 2 * FRAME_LIMIT
# Under 64 KiB: such payloads travel inside the control frame, not as frames of their own.
INLINE = 40 * 1024


def size_of(payload: bytes | bytearray) -> int:
    return len(payload)


def make_bytes(size: int) -> bytes:
    return b"r" * size


def sizes_of(*payloads: bytes) -> list[int]:
    return [len(payload) for payload in payloads]


@pytest.fixture(scope="module")
def cluster() -> Iterator[SchedulerClusterCombo]:
    with SchedulerClusterCombo(
        n_workers=2, logging_level="WARNING", max_message_size_bytes=FRAME_LIMIT, max_control_frame_bytes=CONTROL_LIMIT,
        store=False,  # with a store, large payloads never reach the scheduler and its limits (test_object_path.py)
    ) as combo:
        yield combo


@pytest.fixture
def client(cluster: SchedulerClusterCombo) -> Iterator[Client]:
    with Client(address=cluster.get_address(), timeout_seconds=30) as made:
        yield made


@pytest.mark.parametrize("kind", [bytes, bytearray], ids=["bytes (sent as a shared object)", "bytearray"])
def test_an_argument_over_the_frame_limit_raises_at_submit(client: Client, kind: type) -> None:
    too_large = kind(OVER_FRAME)
    for _ in range(2):  # and again: the refused payload left nothing behind that a retry would trip on
        with pytest.raises(PayloadTooLargeError, match="--max-message-size-bytes") as raised:
            client.submit(size_of, too_large)
        # the serialized size: the payload and a few bytes of pickle framing
        assert re.match(
            r"an argument of 2,097,1\d\d bytes is over the scheduler's limit of 1,048,576 ", str(raised.value)
        )
    assert isinstance(raised.value, ValueError)
    # Just under the limit still goes through, as a frame of its own.
    assert client.submit(size_of, kind(FRAME_LIMIT - 4096)).result(timeout=30) == FRAME_LIMIT - 4096


def test_an_argument_exactly_at_the_frame_limit_raises_and_one_byte_less_goes_through(client: Client) -> None:
    with pytest.raises(PayloadTooLargeError) as raised:  # its message names the serialized size: the framing
        client.submit(size_of, bytearray(OVER_FRAME))
    named = re.search(r"an argument of ([\d,]+) bytes", str(raised.value))
    assert named is not None
    framing = int(named.group(1).replace(",", "")) - OVER_FRAME
    at_limit = FRAME_LIMIT - framing
    with pytest.raises(PayloadTooLargeError, match="of 1,048,576 bytes is at the scheduler's limit of 1,048,576 "):
        client.submit(size_of, bytearray(at_limit))
    assert client.submit(size_of, bytearray(at_limit - 1)).result(timeout=30) == at_limit - 1


def test_send_object_map_and_get_over_the_frame_limit_raise_at_the_call(client: Client) -> None:
    with pytest.raises(PayloadTooLargeError, match="object 'big'"):
        client.send_object(bytearray(OVER_FRAME), name="big")
    with pytest.raises(PayloadTooLargeError, match="an argument"):
        client.map(size_of, [(b"small",)] * 1500 + [(bytearray(OVER_FRAME),)])
    with pytest.raises(PayloadTooLargeError, match="an argument"):
        client.get({"a": (size_of, bytearray(OVER_FRAME)), "b": (size_of, b"ok")}, ["a", "b"])
    # Nothing of those calls lingers: the client and the cluster serve the next ones as usual.
    assert client.map(size_of, [(b"x" * i,) for i in range(100)]) == list(range(100))
    assert client.get({"a": (size_of, b"abc")}, "a") == {"a": 3}


def test_a_function_over_the_frame_limit_raises_at_submit(client: Client) -> None:
    ballast = bytes(OVER_FRAME)

    def carries_ballast() -> int:
        return len(ballast)

    with pytest.raises(PayloadTooLargeError, match="function 'test_a_function_over_the_frame_limit"):
        client.submit(carries_ballast)


def test_a_result_over_the_frame_limit_fails_only_its_task(client: Client) -> None:
    sizes = [10, 200 * 1024, OVER_FRAME, 30, FRAME_LIMIT - 4096]
    futures = [client.submit(make_bytes, size) for size in sizes]
    for size, future in zip(sizes, futures):
        if size == OVER_FRAME:
            with pytest.raises(PayloadTooLargeError, match="the result is .* bytes, over the scheduler's limit"):
                future.result(timeout=30)
        else:
            assert future.result(timeout=30) == b"r" * size
    # The worker was not dropped for it: it keeps serving.
    assert client.map(make_bytes, [(3,)] * 50) == [b"rrr"] * 50


def test_many_small_arguments_and_results_are_split_under_the_control_frame_limit(client: Client) -> None:
    # 300 tasks of 40 KiB in and 40 KiB out: 12 MB that would travel inside control frames of 512 KiB at most.
    arguments = [(bytes([index % 251]) * INLINE,) for index in range(300)]
    assert client.map(size_of, arguments) == [INLINE] * 300
    results = client.map(make_bytes, [(INLINE,)] * 300)
    assert results == [b"r" * INLINE] * 300
    futures = [client.submit(make_bytes, INLINE) for _ in range(300)]
    assert [future.result(timeout=30) for future in futures] == [b"r" * INLINE] * 300


def test_one_task_whose_small_arguments_exceed_the_control_frame_limit_raises(client: Client) -> None:
    arguments = [bytes([index]) * 60_000 for index in range(10)]  # 600 kB, each under 64 KiB
    with pytest.raises(PayloadTooLargeError, match="--max-control-frame-bytes"):
        client.submit(sizes_of, *arguments)
    with pytest.raises(PayloadTooLargeError, match="--max-control-frame-bytes"):
        client.map(sizes_of, [tuple(arguments)])
    assert client.submit(sizes_of, *arguments[:3]).result(timeout=30) == [60_000] * 3


def test_a_refused_call_leaves_no_object_behind(cluster: SchedulerClusterCombo) -> None:
    """A large argument two tasks share is sent ahead as an object; if the call is then refused, that
    object is deleted again rather than held until the client leaves."""
    shared = b"s" * (200 * 1024)  # the same object in two tasks: sent once, as a hidden object
    with MonitorSubscriber(default_monitor_address(cluster.get_address())) as monitor, \
            Client(address=cluster.get_address(), name="refused-calls", timeout_seconds=30) as client:
        assert client.get({"warm": (size_of, b"x")}, "warm") == {"warm": 1}  # the function is sent and kept
        graph = {"a": (size_of, shared), "b": (size_of, shared), "c": (size_of, bytearray(OVER_FRAME))}
        with pytest.raises(PayloadTooLargeError):
            client.get(graph, ["a", "b", "c"])
        with pytest.raises(PayloadTooLargeError):
            client.map(sizes_of, [(shared,), (shared,), (bytearray(OVER_FRAME),)])
        assert client.get({"d": (size_of, b"yz")}, "d") == {"d": 2}

        def held_bytes() -> int | None:
            snapshot = monitor.receive(timeout_seconds=1.5)
            status = next((c for c in snapshot.clients if c.name == "refused-calls"), None) if snapshot else None
            return status.object_bytes if status else None

        deadline = time.monotonic() + 20
        held = held_bytes()
        while (held is None or held >= len(shared)) and time.monotonic() < deadline:
            held = held_bytes()
        assert held is not None and held < len(shared), f"the client still holds {held} bytes of objects"
