"""Bad input on the wire: a real scheduler fed malformed and rule-breaking frames from a raw DEALER socket.

Each bad frame gets the reply PROTOCOL.md promises (decoded with `scaler.protocol.messages.decode`), and
after every one the scheduler still serves everybody else: a normal `Client` on the same scheduler gets
correct results and the scheduler process is still alive.
"""

from __future__ import annotations

import collections
import concurrent.futures
import operator
import pickle
import random
import struct
import time
import uuid
from typing import Callable, Iterator

import cloudpickle
import psutil
import pytest
import zmq

from scaler import Client, SchedulerClusterCombo
from scaler.protocol import messages as m
from scaler.utility.identifiers import TASK_COUNTER_BITS, content_object_id

REPLY_TIMEOUT_SECONDS = 10.0
RESULT_TIMEOUT_SECONDS = 30.0

# A frame that is not Cap'n Proto: its first word claims ~10^9 segments.
GARBAGE = b"this is not a capnp message at all!!!!!!"
# Byte offset of the `Message` union discriminant in a single-segment frame: segment table, root pointer.
_DISCRIMINANT_OFFSET = 16

MUL_PAYLOAD = cloudpickle.dumps(operator.mul)
MUL_ID = content_object_id(MUL_PAYLOAD)


# ---------------------------------------------------------------------------------------------- raw peer


class RawPeer:
    """A DEALER that speaks (or breaks) the protocol by hand; every receive has a deadline."""

    def __init__(self, context: zmq.Context, address: str, tag: str) -> None:
        self.identity = f"raw|{tag}|{uuid.uuid4().hex[:8]}".encode()
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDHWM, 0)
        self.socket.setsockopt(zmq.RCVHWM, 0)
        self.socket.setsockopt(zmq.IDENTITY, self.identity)
        self.socket.connect(address)
        self.id_prefix: int | None = None
        self._counter = 0

    def send_frames(self, frames: list[bytes]) -> None:
        self.socket.send_multipart(frames)

    def send(self, message: m.Message) -> None:
        self.socket.send(encode_one(message))

    def receive(self, timeout: float = REPLY_TIMEOUT_SECONDS) -> m.Message:
        if not self.socket.poll(int(timeout * 1000), zmq.POLLIN):
            raise AssertionError(f"no reply from the scheduler within {timeout:g}s")
        frames = self.socket.recv_multipart()
        return m.decode(frames)  # the scheduler itself must only ever send valid messages

    def expect(self, kind: type, timeout: float = REPLY_TIMEOUT_SECONDS):
        message = self.receive(timeout)
        assert isinstance(message, kind), f"expected {kind.__name__}, got {message!r}"
        return message

    def hello(self, role: m.Role = m.Role.CLIENT, capacity: int = 0, tags: tuple[str, ...] = ()) -> m.Welcome:
        self.send(m.Hello(
            role=role, name=f"raw-{role.name.lower()}", hostname="test", pid=1, capacity=capacity, tags=tags
        ))
        welcome = self.expect(m.Welcome)
        assert welcome.protocol_version == m.PROTOCOL_VERSION
        if role == m.Role.CLIENT:
            assert welcome.id_prefix > 0
            self.id_prefix = welcome.id_prefix
        return welcome

    def next_task_ids(self, count: int) -> list[int]:
        assert self.id_prefix is not None, "say hello first"
        ids = [(self.id_prefix << TASK_COUNTER_BITS) | (self._counter + i) for i in range(count)]
        self._counter += count
        return ids

    def assert_still_registered(self) -> None:
        """Nothing else is queued for us, and the scheduler still knows us: a heartbeat is echoed."""
        self.send(m.Heartbeat())
        self.expect(m.HeartbeatEcho)

    def assert_unknown(self) -> None:
        """Nothing else is queued for us, and the scheduler does not know us."""
        self.send(m.Heartbeat())
        refused = self.expect(m.Refused)
        assert "unknown peer" in refused.reason

    def close(self) -> None:
        self.socket.close(linger=0)


PeerFactory = Callable[..., RawPeer]


@pytest.fixture
def raw_peers(combo: SchedulerClusterCombo) -> Iterator[PeerFactory]:
    """Makes raw peers on a private zmq.Context; every socket and the context are closed afterwards."""
    context = zmq.Context()
    peers: list[RawPeer] = []

    def make(tag: str = "peer") -> RawPeer:
        peer = RawPeer(context, combo.get_address(), tag)
        peers.append(peer)
        return peer

    try:
        yield make
    finally:
        for peer in peers:
            peer.close()
        context.term()


def assert_scheduler_serves(client: Client, combo: SchedulerClusterCombo) -> None:
    """The scheduler process is alive and a well-behaved client still gets correct results."""
    process = psutil.Process(combo.scheduler_pid)
    assert process.is_running() and process.status() != psutil.STATUS_ZOMBIE, "the scheduler died"
    assert client.map(operator.mul, [(i, 3) for i in range(40)]) == [i * 3 for i in range(40)]
    assert client.submit(operator.add, 20, 22).result(timeout=RESULT_TIMEOUT_SECONDS) == 42


def pickled_args(*values: object) -> list[bytes]:
    return [pickle.dumps(value, protocol=5) for value in values]


def with_discriminant(message: m.Message, discriminant: int) -> bytes:
    frame = bytearray(encode_one(message))
    struct.pack_into("<H", frame, _DISCRIMINANT_OFFSET, discriminant)
    return bytes(frame)


# ---------------------------------------------------------------------------------------------- framing errors


def encode_one(message: m.Message) -> bytes:
    """The single frame of a message that carries no large payload."""
    frames = m.encode(message)
    assert len(frames) == 1
    return bytes(frames[0])


def _valid_frame() -> bytes:
    return encode_one(m.Hello(role=m.Role.CLIENT, name="a client", hostname="host", pid=42))


FRAMING_CASES = {
    "garbage_bytes": [GARBAGE],
    "empty_frame": [b""],
    "multi_frame": [_valid_frame(), b"extra frame"],
    "empty_delimiter_then_message": [b"", _valid_frame()],
    "valid_message_truncated": [_valid_frame()[:-8]],
    "valid_message_cut_in_half": [_valid_frame()[: len(_valid_frame()) // 2]],
    "length_not_multiple_of_8": [_valid_frame() + b"\x00\x00\x00"],
    "length_not_multiple_of_8_short": [_valid_frame()[:-3]],
    "segment_table_only": [b"\x00" * 8],
    "unknown_union_member": [with_discriminant(m.ShutdownRequest(), 99)],
}


def test_framing_cases_are_really_malformed() -> None:
    """Guard for the cases below: each one-frame case is rejected by the decoder itself."""
    for name, frames in FRAMING_CASES.items():
        if len(frames) == 1:
            with pytest.raises(m.ProtocolDecodeError):
                m.decode(frames)
                pytest.fail(f"{name} decoded")


@pytest.mark.parametrize("registered", [False, True], ids=["before_hello", "after_hello"])
@pytest.mark.parametrize("case", list(FRAMING_CASES))
def test_malformed_frame_gets_protocol_error_drops_its_sender_and_scheduler_keeps_serving(
    case: str, registered: bool, raw_peers: PeerFactory, client: Client, combo: SchedulerClusterCombo
) -> None:
    peer = raw_peers(case)
    if registered:
        peer.hello()
    peer.send_frames(FRAMING_CASES[case])
    error = peer.expect(m.ProtocolError)
    assert error.reason
    if len(FRAMING_CASES[case]) > 1:
        assert "frame" in error.reason or "malformed" in error.reason
    # The offending message was dropped (a multi-frame Hello does not register us). A registered peer
    # that cannot speak the protocol is dropped too, and told so; an unknown one stays unknown.
    if registered:
        goodbye = peer.expect(m.Disconnect)
        assert "malformed" in goodbye.reason or "frame" in goodbye.reason
    peer.assert_unknown()
    assert_scheduler_serves(client, combo)


# ---------------------------------------------------------------------------------------------- protocol errors


def case_wrong_protocol_version(peers: PeerFactory) -> None:
    peer = peers("version")
    wrong = m.PROTOCOL_VERSION + 1
    peer.send(m.Hello(role=m.Role.CLIENT, name="future client", protocol_version=wrong))
    refused = peer.expect(m.Refused)
    assert "version" in refused.reason
    assert str(wrong) in refused.reason
    peer.assert_unknown()  # a refused peer is not registered


def case_protocol_version_zero_worker(peers: PeerFactory) -> None:
    peer = peers("version0")
    peer.send(m.Hello(role=m.Role.WORKER, name="old worker", capacity=10, protocol_version=0))
    refused = peer.expect(m.Refused)
    assert "version" in refused.reason and "0" in refused.reason
    peer.assert_unknown()


def case_submission_before_hello(peers: PeerFactory) -> None:
    peer = peers("early")
    peer.send(m.TaskSubmission(
        objects=[m.ObjectPayload(object_id=MUL_ID, payload=MUL_PAYLOAD, name="mul")],
        groups=[m.TaskGroup(
            function_id=MUL_ID, args_per_task=2, keywords=(), task_ids=[1 << TASK_COUNTER_BITS],
            args=pickled_args(2, 3),
        )],
    ))
    refused = peer.expect(m.Refused)
    assert "unknown peer" in refused.reason
    peer.assert_unknown()


def case_other_messages_before_hello(peers: PeerFactory) -> None:
    peer = peers("early2")
    for message in (m.CancelTasks(task_ids=[1]), m.ClearRequest(), m.ShutdownRequest(), m.Disconnect()):
        peer.send(message)
        assert "unknown peer" in peer.expect(m.Refused).reason
    peer.assert_unknown()


def case_hello_twice(peers: PeerFactory) -> None:
    peer = peers("twice")
    first = peer.hello()
    peer.send(m.Hello(role=m.Role.CLIENT, name="again"))
    assert peer.expect(m.ProtocolError).reason
    peer.assert_still_registered()
    # The first registration still holds: its prefix is the one that works.
    task_id = (first.id_prefix << TASK_COUNTER_BITS) | 0
    peer.send(m.TaskSubmission(
        objects=[m.ObjectPayload(object_id=MUL_ID, payload=MUL_PAYLOAD, name="mul")],
        groups=[m.TaskGroup(function_id=MUL_ID, args_per_task=2, keywords=(), task_ids=[task_id],
                            args=pickled_args(6, 7))],
    ))
    results = peer.expect(m.TaskResults, timeout=RESULT_TIMEOUT_SECONDS)
    assert results.failures == [] and results.succeeded_ids == [task_id]
    assert pickle.loads(results.payloads[0]) == 42


def case_client_sends_task_results(peers: PeerFactory) -> None:
    peer = peers("results")
    peer.hello()
    peer.send(m.TaskResults(succeeded_ids=[12345], payloads=[pickle.dumps("forged")], failures=[]))
    assert peer.expect(m.ProtocolError).reason
    peer.assert_still_registered()


def case_client_sends_scheduler_only_messages(peers: PeerFactory) -> None:
    peer = peers("wrongway")
    peer.hello()
    for message in (
        m.Welcome(id_prefix=7),
        m.Refused(reason="no"),
        m.HeartbeatEcho(),
        m.ClearResponse(canceled_tasks=3),
        m.ShutdownResponse(accepted=True),
        m.ProtocolError(reason="you"),
    ):
        peer.send(message)
        assert peer.expect(m.ProtocolError).reason, message
    peer.assert_still_registered()


def case_worker_sends_client_messages(peers: PeerFactory) -> None:
    peer = peers("worker")
    peer.hello(role=m.Role.WORKER, capacity=1)
    try:
        # No client work is in flight at this point, so this fake worker is never handed a real task.
        for message in (
            m.TaskSubmission(objects=[], groups=[]),
            m.CancelTasks(task_ids=[1, 2, 3]),
            m.ClearRequest(),
            m.ShutdownRequest(),
            m.DeleteObjects(object_ids=[b"x" * 16]),  # clients delete their objects; workers may not
        ):
            peer.send(message)
            reason = peer.expect(m.ProtocolError).reason
            assert f"a worker may not send {type(message).__name__}; only clients do" == reason, reason
        peer.assert_still_registered()  # told, not dropped
    finally:
        peer.send(m.Disconnect(reason="test over"))
    peer.assert_unknown()  # the scheduler processed the disconnect before any client work follows


def _rejected_group_case(make_groups: Callable[[RawPeer], tuple[list[m.ObjectPayload], list[m.TaskGroup]]],
                         expect_in_message: str) -> Callable[[PeerFactory], None]:
    """Submit [bad group, good group] in one message: only the bad one is rejected, the good one runs."""

    def case(peers: PeerFactory) -> None:
        peer = peers("reject")
        peer.hello()
        objects, bad_groups = make_groups(peer)
        good_ids = peer.next_task_ids(3)
        good = m.TaskGroup(
            function_id=MUL_ID, args_per_task=2, keywords=(), task_ids=good_ids,
            args=pickled_args(1, 10, 2, 10, 3, 10),
        )
        objects = objects + [m.ObjectPayload(object_id=MUL_ID, payload=MUL_PAYLOAD, name="mul")]
        peer.send(m.TaskSubmission(objects=objects, groups=[*bad_groups, good]))
        bad_ids = [task_id for group in bad_groups for task_id in group.task_ids]

        rejections = peer.expect(m.TaskResults)
        assert rejections.succeeded_ids == [] and rejections.payloads == []
        assert sorted(f.task_id for f in rejections.failures) == sorted(bad_ids)
        for failure in rejections.failures:
            assert failure.kind == m.FailureKind.REJECTED
            assert failure.type_name == "TaskRejectedError"
            assert expect_in_message in failure.message.lower(), failure.message

        outcomes: dict[int, int] = {}
        while len(outcomes) < len(good_ids):
            results = peer.expect(m.TaskResults, timeout=RESULT_TIMEOUT_SECONDS)
            assert results.failures == [], results.failures
            for task_id, payload in zip(results.succeeded_ids, results.payloads):
                assert task_id not in outcomes, "a task got two outcomes"
                outcomes[task_id] = pickle.loads(payload)
        assert outcomes == {good_ids[0]: 10, good_ids[1]: 20, good_ids[2]: 30}
        peer.assert_still_registered()

    return case


case_args_count_mismatch = _rejected_group_case(
    lambda peer: ([], [m.TaskGroup(function_id=MUL_ID, args_per_task=2, keywords=(),
                                   task_ids=peer.next_task_ids(3), args=pickled_args(1, 2, 3, 4, 5))]),
    "argument",
)
case_unknown_function_id = _rejected_group_case(
    lambda peer: ([], [m.TaskGroup(function_id=b"\x01" * 16, args_per_task=1, keywords=(),
                                   task_ids=peer.next_task_ids(2), args=pickled_args(1, 2))]),
    "function",
)
case_unknown_serializer_id = _rejected_group_case(
    lambda peer: ([], [m.TaskGroup(function_id=MUL_ID, args_per_task=2, keywords=(), task_ids=peer.next_task_ids(1),
                                   args=pickled_args(1, 2), serializer_id=b"\x02" * 16)]),
    "serializer",
)
case_more_keywords_than_args = _rejected_group_case(
    lambda peer: ([], [m.TaskGroup(function_id=MUL_ID, args_per_task=1, keywords=("a", "b"),
                                   task_ids=peer.next_task_ids(1), args=pickled_args(1))]),
    "keyword",
)
case_task_id_with_foreign_prefix = _rejected_group_case(
    lambda peer: ([], [m.TaskGroup(function_id=MUL_ID, args_per_task=2, keywords=(),
                                   task_ids=[((peer.id_prefix + 1000) << TASK_COUNTER_BITS) | 5],
                                   args=pickled_args(1, 2))]),
    "prefix",
)


def _submit_one(peer: RawPeer, function_id: bytes, payload: bytes, args: list[bytes]) -> m.TaskResults:
    task_ids = peer.next_task_ids(1)
    peer.send(m.TaskSubmission(
        objects=[m.ObjectPayload(object_id=function_id, payload=payload, name="junk")],
        groups=[m.TaskGroup(function_id=function_id, args_per_task=len(args), keywords=(), task_ids=task_ids,
                            args=args)],
    ))
    results = peer.expect(m.TaskResults, timeout=RESULT_TIMEOUT_SECONDS)
    assert [f.task_id for f in results.failures] + results.succeeded_ids == task_ids
    return results


def case_function_payload_is_not_a_pickle(peers: PeerFactory) -> None:
    """Garbage payloads pass the scheduler untouched; the worker reports a serialization failure."""
    peer = peers("junk")
    peer.hello()
    results = _submit_one(peer, b"\x11" * 16, b"not a pickle", [b"not a pickle either"])
    (failure,) = results.failures
    assert failure.kind == m.FailureKind.SERIALIZATION
    results = _submit_one(peer, b"\x12" * 16, pickle.dumps(42), pickled_args(1))  # loads, but is not callable
    (failure,) = results.failures
    assert failure.kind in (m.FailureKind.SERIALIZATION, m.FailureKind.RAISED)
    peer.assert_still_registered()


def case_empty_function_id(peers: PeerFactory) -> None:
    """An object with an empty id used as a function is refused: object ids are 16 bytes (PROTOCOL.md)."""
    peer = peers("empty-id")
    peer.hello()
    peer.send(m.TaskSubmission(
        objects=[m.ObjectPayload(object_id=b"", payload=MUL_PAYLOAD)],
        groups=[m.TaskGroup(function_id=b"", args_per_task=2, keywords=(), task_ids=peer.next_task_ids(1),
                            args=pickled_args(6, 7))],
    ))
    reply = peer.receive()
    if isinstance(reply, m.ProtocolError):
        assert "16 bytes" in reply.reason
        peer.assert_still_registered()
        return
    assert isinstance(reply, m.TaskResults)
    results = reply
    if results.failures:
        (failure,) = results.failures
        assert failure.kind == m.FailureKind.REJECTED, (
            f"accepted a task whose function object the workers never receive: {failure.kind.name} "
            f"{failure.type_name}: {failure.message}"
        )
    else:
        assert pickle.loads(results.payloads[0]) == 42
    peer.assert_still_registered()


PROTOCOL_CASES: dict[str, Callable[[PeerFactory], None]] = {
    "wrong_protocol_version": case_wrong_protocol_version,
    "protocol_version_zero_worker": case_protocol_version_zero_worker,
    "submission_before_hello": case_submission_before_hello,
    "other_messages_before_hello": case_other_messages_before_hello,
    "hello_twice": case_hello_twice,
    "client_sends_task_results": case_client_sends_task_results,
    "client_sends_scheduler_only_messages": case_client_sends_scheduler_only_messages,
    "worker_sends_client_messages": case_worker_sends_client_messages,
    "args_count_mismatch": case_args_count_mismatch,
    "unknown_function_id": case_unknown_function_id,
    "unknown_serializer_id": case_unknown_serializer_id,
    "more_keywords_than_args": case_more_keywords_than_args,
    "task_id_with_foreign_prefix": case_task_id_with_foreign_prefix,
    "function_payload_is_not_a_pickle": case_function_payload_is_not_a_pickle,
    "empty_function_id": case_empty_function_id,
}


@pytest.mark.parametrize("case", list(PROTOCOL_CASES))
def test_rule_breaking_message_gets_documented_reply_and_scheduler_keeps_serving(
    case: str, raw_peers: PeerFactory, client: Client, combo: SchedulerClusterCombo
) -> None:
    PROTOCOL_CASES[case](raw_peers)
    assert_scheduler_serves(client, combo)


def test_a_new_client_can_still_connect_after_bad_input(
    raw_peers: PeerFactory, combo: SchedulerClusterCombo
) -> None:
    peer = raw_peers("before-new-client")
    for frames in FRAMING_CASES.values():
        peer.send_frames(frames)
    for _ in FRAMING_CASES:
        peer.expect(m.ProtocolError)
    with Client(address=combo.get_address(), timeout_seconds=30) as fresh:
        assert_scheduler_serves(fresh, combo)


def test_misbehaving_worker_does_not_lose_a_clients_tasks(
    raw_peers: PeerFactory, client: Client, combo: SchedulerClusterCombo
) -> None:
    """A fake worker takes a share of a map, answers with garbage and bogus results, then leaves."""
    worker = raw_peers("bad-worker")
    worker.hello(role=m.Role.WORKER, capacity=1000, tags=("python",))  # a Python worker, as far as it says
    arguments = [(i, 5) for i in range(60)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        # A function no other test of this module runs: its pace is unknown to the scheduler, so the map is spread
        # over the three free workers, this one included. (Tasks of a function known to be tiny, as operator.mul is
        # here, go to one idle worker in a batch: scaler/scheduler/core/function_pace.py.)
        mapped = pool.submit(client.map, operator.imul, arguments)
        try:
            deadline = time.monotonic() + RESULT_TIMEOUT_SECONDS
            while not worker.socket.poll(100, zmq.POLLIN):
                assert not mapped.done(), "the scheduler gave the fake worker no task of the map"
                assert time.monotonic() < deadline, "neither the map nor the fake worker got anywhere"
            submission = worker.expect(m.TaskSubmission)
            held = [task_id for group in submission.groups for task_id in group.task_ids]
            assert held, "the fake worker was given no task"
            assert {o.object_id for o in submission.objects} >= {g.function_id for g in submission.groups}

            # Results for tasks it does not hold are ignored; a success without its payload is dropped
            # (possibly with a protocolError: ids and payloads must have the same length).
            worker.send(m.TaskResults(succeeded_ids=[held[0] + 10_000_000, 1], payloads=[b"x", b"y"], failures=[]))
            worker.send(m.TaskResults(succeeded_ids=[held[0]], payloads=[], failures=[]))
            worker.send(m.TaskResults(succeeded_ids=[], payloads=[], failures=[
                m.TaskFailure(task_id=held[-1], kind=m.FailureKind.RETURNED),
            ]))
            worker.send(m.Heartbeat())
            while not isinstance(message := worker.receive(), m.HeartbeatEcho):
                # re-dispatched work is fine, and so is a protocolError for the malformed results
                assert isinstance(message, (m.TaskSubmission, m.ProtocolError)), message
            # Then garbage: a worker that cannot speak the protocol is dropped, and what it held requeued.
            worker.send_frames([GARBAGE])
            worker.expect(m.ProtocolError)
            worker.expect(m.Disconnect)
            worker.send_frames([encode_one(m.Heartbeat())[:-8]])
            worker.expect(m.ProtocolError)  # an unknown sender of garbage is only told
        finally:
            worker.send(m.Disconnect(reason="leaving with tasks"))
        assert mapped.result(timeout=RESULT_TIMEOUT_SECONDS) == [i * 5 for i in range(60)]
    assert_scheduler_serves(client, combo)


# ---------------------------------------------------------------------------------------------- random frames

# Valid messages of every kind, the raw material of the mutations.
_BASE_MESSAGES: list[m.Message] = [
    m.Hello(role=m.Role.CLIENT, name="fuzz", hostname="host", pid=7),
    m.Welcome(id_prefix=3, heartbeat_interval_ms=2000, peer_timeout_ms=60000, max_frame_bytes=1 << 32),
    m.Refused(reason="go away"),
    m.Heartbeat(cpu_percent=1.5, rss_bytes=1 << 20, queued_tasks=2),
    m.HeartbeatEcho(),
    m.TaskSubmission(objects=[], groups=[
        m.TaskGroup(function_id=b"\x07" * 16, args_per_task=2, keywords=("y",),
                    task_ids=[(1 << TASK_COUNTER_BITS) | 1, (1 << TASK_COUNTER_BITS) | 2],
                    args=pickled_args(1, 2, 3, 4)),
    ]),
    m.TaskResults(succeeded_ids=[1, 2], payloads=[b"a", b"b"], failures=[
        m.TaskFailure(task_id=3, kind=m.FailureKind.RAISED, type_name="builtins.ValueError", message="m"),
    ]),
    m.CancelTasks(task_ids=[5, 6, 7]),
    m.TaskStarted(task_ids=[(1 << TASK_COUNTER_BITS) | 1]),
    m.DeleteObjects(object_ids=[b"\x09" * 16]),
    m.ClearRequest(),
    m.ClearResponse(canceled_tasks=4),
    m.Disconnect(reason="bye"),
    m.ShutdownRequest(),
    m.ShutdownResponse(accepted=False, reason="protected"),
    m.ProtocolError(reason="bad"),
]

_REPLIES_TO_ANYTHING_ELSE = m.ProtocolError  # a member the scheduler never receives


def _mutate(rng: random.Random) -> list[bytes]:
    """One ZeroMQ message (list of frames): random bytes, or a valid message damaged one of several ways."""
    base = encode_one(rng.choice(_BASE_MESSAGES))
    strategy = rng.randrange(8)
    if strategy == 0:
        return [rng.randbytes(rng.randrange(0, 120))]
    if strategy == 1:
        return [rng.randbytes(8 * rng.randrange(0, 16))]
    if strategy == 2:
        frame = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            frame[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
        return [bytes(frame)]
    if strategy == 3:
        return [base[: rng.randrange(len(base))]]
    if strategy == 4:
        return [base + rng.randbytes(rng.randint(1, 24))]
    if strategy == 5:
        frame = bytearray(base)
        start = rng.randrange(len(frame))
        length = rng.randint(1, 16)
        frame[start:start + length] = rng.randbytes(min(length, len(frame) - start))
        return [bytes(frame)]
    if strategy == 6:
        return [base] + [rng.randbytes(rng.randrange(0, 32)) for _ in range(rng.randint(1, 2))]
    return [base]  # intact: a valid message from the wrong peer or at the wrong time


def _local_decode(frames: list[bytes]) -> m.Message | None:
    """What the scheduler will see: None when it must answer protocolError for bad framing or encoding."""
    try:
        return m.decode(frames)
    except m.ProtocolDecodeError:
        return None


def _expected_replies_unregistered(message: m.Message | None) -> list[type]:
    return [m.ProtocolError] if message is None else [m.Refused]


def _expected_replies_registered_client(message: m.Message | None) -> list[type]:
    """PROTOCOL.md §3 and §6 for a client that never uploaded an object and has no task."""
    if message is None:
        return [m.ProtocolError]
    if isinstance(message, m.Hello):
        return [m.Refused] if message.protocol_version != m.PROTOCOL_VERSION else [m.ProtocolError]
    if isinstance(message, m.Heartbeat):
        return [m.HeartbeatEcho]
    if isinstance(message, m.TaskSubmission):  # unknown function: every task is rejected, in one message
        return [m.TaskResults] if any(group.task_ids for group in message.groups) else []
    if isinstance(message, m.TaskResults):
        return [m.ProtocolError]
    if isinstance(message, m.CancelTasks):  # none of these ids is ours: notFound for each, in one message
        return [m.TaskResults] if message.task_ids else []
    if isinstance(message, m.ClearRequest):
        return [m.ClearResponse]
    if isinstance(message, m.ShutdownRequest):
        return [m.ShutdownResponse]  # protected mode
    if isinstance(message, m.DeleteObjects):
        return []  # a client deletes its own objects; ids it does not hold are ignored
    return [_REPLIES_TO_ANYTHING_ELSE]


def _usable_for_registered(message: m.Message | None) -> bool:
    # A disconnect or an undecodable frame would drop the peer (the latter is checked once, at the end);
    # a submission carrying objects could make a mutated task runnable.
    if message is None or isinstance(message, m.Disconnect):
        return False
    if isinstance(message, m.TaskSubmission) and message.objects:
        return False
    return True


def _usable_for_unregistered(message: m.Message | None) -> bool:
    # A hello could register this peer (even as a worker, which would then be handed real tasks).
    return not isinstance(message, m.Hello)


def _failures_expected(sent: m.Message | None) -> collections.Counter[tuple[int, m.FailureKind]]:
    """The failures a taskResults answers `sent` with: every task of a submission rejected (its function is
    unknown), every id of a cancel not found."""
    if isinstance(sent, m.TaskSubmission):
        return collections.Counter(
            (task_id, m.FailureKind.REJECTED) for group in sent.groups for task_id in group.task_ids
        )
    assert isinstance(sent, m.CancelTasks), f"a taskResults does not answer {sent!r}"
    return collections.Counter((task_id, m.FailureKind.NOT_FOUND) for task_id in sent.task_ids)


def _check_merged_results(reply: m.TaskResults, replies: list[tuple[type, m.Message | None]]) -> int:
    """A taskResults answers the next expected taskResults, and maybe those right after it: the scheduler
    merges one client's results of the frames it handled in one wake (PROTOCOL.md §7). Returns how many of
    `replies` it answers, checking that it holds exactly their failures."""
    assert reply.succeeded_ids == [] and reply.payloads == []
    left = collections.Counter((failure.task_id, failure.kind) for failure in reply.failures)
    answered = 0
    while answered < len(replies) and replies[answered][0] is m.TaskResults:
        wanted = _failures_expected(replies[answered][1])
        if any(left[item] < count for item, count in wanted.items()):
            break
        left -= wanted
        answered += 1
        if not left:
            return answered
    raise AssertionError(f"{reply!r} is not the answer to {[sent for _, sent in replies[:max(answered, 1)]]!r}")


def _check_reply(reply: m.Message, kind: type, sent: m.Message | None) -> None:
    assert isinstance(reply, kind), f"sent {sent!r}, expected {kind.__name__}, got {reply!r}"
    if isinstance(reply, m.Refused) and not isinstance(sent, m.Hello):
        assert "unknown peer" in reply.reason
    if isinstance(reply, m.ShutdownResponse):
        assert reply.accepted is False
    if isinstance(reply, m.ClearResponse):
        assert reply.canceled_tasks == 0
    if isinstance(reply, m.TaskResults):
        assert reply.succeeded_ids == [] and reply.payloads == []
        if isinstance(sent, m.TaskSubmission):
            assert {f.kind for f in reply.failures} == {m.FailureKind.REJECTED}
            assert sorted(f.task_id for f in reply.failures) == sorted(
                task_id for group in sent.groups for task_id in group.task_ids
            )
        else:
            assert isinstance(sent, m.CancelTasks)
            assert {f.kind for f in reply.failures} == {m.FailureKind.NOT_FOUND}
            assert sorted(f.task_id for f in reply.failures) == sorted(sent.task_ids)


def square_plus(x: int, offset: int = 0) -> int:
    return x * x + offset


@pytest.mark.timeout(90)
@pytest.mark.parametrize("seed", [20240601, 7])
def test_200_random_frames_interleaved_with_real_work(
    seed: int, raw_peers: PeerFactory, client: Client, combo: SchedulerClusterCombo
) -> None:
    rng = random.Random(seed)
    stranger = raw_peers("fuzz-stranger")  # never says hello
    member = raw_peers("fuzz-member")  # a registered client
    member.hello()
    expected: dict[RawPeer, list[tuple[type, m.Message | None]]] = {stranger: [], member: []}

    futures = []
    maps_checked = 0
    for index in range(200):
        peer = stranger if rng.random() < 0.5 else member
        usable = _usable_for_unregistered if peer is stranger else _usable_for_registered
        while True:
            frames = _mutate(rng)
            decoded = _local_decode(frames)
            if usable(decoded):
                break
        replies = (_expected_replies_unregistered if peer is stranger else _expected_replies_registered_client)(decoded)
        expected[peer].extend((kind, decoded) for kind in replies)
        peer.send_frames(frames)

        if index % 4 == 0:
            futures.append((index, client.submit(square_plus, index, offset=1)))
        if index % 50 == 49:
            assert client.map(square_plus, [(i,) for i in range(30)]) == [i * i for i in range(30)]
            maps_checked += 1

    assert maps_checked == 4
    for index, future in futures:
        assert future.result(timeout=RESULT_TIMEOUT_SECONDS) == index * index + 1

    # Every frame got exactly the documented reply, in order, and nothing more.
    for peer, replies in expected.items():
        position = 0
        while position < len(replies):
            kind, sent = replies[position]
            try:
                reply = peer.receive()
            except AssertionError as error:
                raise AssertionError(f"reply #{position} ({kind.__name__} to {sent!r}) missing") from error
            if isinstance(reply, m.TaskResults) and kind is m.TaskResults:
                position += _check_merged_results(reply, replies[position:])
                continue
            _check_reply(reply, kind, sent)
            position += 1
    stranger.assert_unknown()
    member.assert_still_registered()
    # Last, one undecodable frame from the registered client: it is told, dropped, and told that too.
    member.send_frames([GARBAGE])
    member.expect(m.ProtocolError)
    assert "malformed" in member.expect(m.Disconnect).reason
    member.assert_unknown()
    assert_scheduler_serves(client, combo)
