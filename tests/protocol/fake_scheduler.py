"""The scheduler, played by a test: a ROUTER the test binds, and one link per worker that says hello.

Every wait has a deadline. While a test waits for a worker's next message, the link answers its
heartbeats with heartbeatEcho as the scheduler does (§5) and keeps them, so that tests can look at them.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Any, Iterable

import zmq

from tests.protocol import wire
from tests.protocol.dialects import Dialect, content_id

# Upper bounds only: the machine may be loaded.
REPLY_SECONDS = 30.0
TASK_ID_BASE = 7 << 32  # "client 7"'s task ids (§2); a worker does not interpret them


@dataclasses.dataclass
class Outcome:
    """What a worker answered for one task."""

    succeeded: bool
    value: Any = None  # decoded result of a success
    kind: str = ""  # failure kind, e.g. "raised"
    type_name: str = ""
    message: str = ""


class FakeScheduler:
    def __init__(self, context: zmq.Context) -> None:
        self.socket = context.socket(zmq.ROUTER)
        for option in (zmq.SNDHWM, zmq.RCVHWM, zmq.LINGER):
            self.socket.setsockopt(option, 0)
        self.socket.bind("tcp://127.0.0.1:*")
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._pending: dict[bytes, list[wire.Received]] = {}
        self._accepted: set[bytes] = set()

    def receive_from(self, identity: bytes | None, timeout: float) -> tuple[bytes, wire.Received]:
        """The next message (from `identity`, if given; others are kept for their own link)."""
        if identity is not None and self._pending.get(identity):
            return identity, self._pending[identity].pop(0)
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            if not self.socket.poll(int(left * 1000), zmq.POLLIN):
                raise AssertionError(f"no message within {timeout:g}s")
            sender, *frames = self.socket.recv_multipart()
            message = wire.read(frames)
            if identity is None or sender == identity:
                return sender, message
            self._pending.setdefault(sender, []).append(message)

    def accept(self, timeout: float = REPLY_SECONDS) -> WorkerLink:
        """Wait for a new worker's first message, which must be its hello (§4, §14)."""
        deadline = time.monotonic() + timeout
        while True:
            identity, message = self.receive_from(None, max(0.0, deadline - time.monotonic()))
            if identity not in self._accepted:
                break
            self._pending.setdefault(identity, []).append(message)  # for that worker's link
        assert message.member == "hello", f"a worker's first message must be hello, got {message.member}"
        self._accepted.add(identity)
        return WorkerLink(self, identity, message)

    def close(self) -> None:
        self.socket.close(linger=0)


class WorkerLink:
    """One registered worker, as the scheduler sees it."""

    def __init__(self, scheduler: FakeScheduler, identity: bytes, hello: wire.Received) -> None:
        self.scheduler = scheduler
        self.identity = identity
        self.hello = hello
        self.heartbeats: list[tuple[float, wire.Received]] = []
        self.answer_heartbeats = True
        self.echo_fields: dict[str, Any] = {}  # what each heartbeatEcho says (a heartbeat interval, §5's end)
        self.cancel_refused: list[int] = []
        self.result_messages: list[wire.Received] = []
        self.answered: dict[int, Outcome] = {}
        self._kept: list[wire.Received] = []
        self._sent_objects: set[bytes] = set()
        self._task_ids = itertools.count(TASK_ID_BASE)

    # ------------------------------------------------------------------------------------------ sending

    def send_frames(self, frames: list[bytes]) -> None:
        self.scheduler.socket.send_multipart([self.identity, *frames])

    def send(self, member: str, payload_frames: Iterable[bytes] = (), **fields: Any) -> None:
        self.send_frames([wire.build(member, **fields), *payload_frames])

    def welcome(self, **fields: Any) -> None:
        values = dict(
            protocolVersion=wire.PROTOCOL_VERSION, idPrefix=0, heartbeatIntervalMs=2000, peerTimeoutMs=60000,
            maxFrameBytes=4 << 30, maxControlFrameBytes=256 << 20,
        )
        values.update(fields)
        self.send("welcome", **values)

    def submit(
        self,
        dialect: Dialect,
        function: str,
        rows: list[tuple],
        keywords: tuple[str, ...] = (),
        report_start: bool = False,
        profiling: bool = False,
        send_function: bool = True,
        object_args: dict[int, bytes] | None = None,
        stream_output: bool = False,
    ) -> list[int]:
        """Send one group of len(rows) tasks of `function` (its object first, once); returns the task ids.

        Arguments of 64 KiB or more travel as frames (§1). `object_args` maps a flat argument index to the
        id of an object already sent; that argument's row value is ignored.
        """
        payload = dialect.function(function)
        function_id = content_id(payload)
        objects = []
        if send_function and function_id not in self._sent_objects:
            objects.append({"objectId": function_id, "name": function, "payload": payload})
            self._sent_objects.add(function_id)
        task_ids = [next(self._task_ids) for _ in rows]
        width = len(rows[0]) if rows else 0
        args: list[bytes] = []
        frames: list[bytes] = []
        frame_indices: list[int] = []
        for row in rows:
            for value in row:
                index = len(args)
                if object_args and index in object_args:
                    args.append(object_args[index])
                    continue
                encoded = dialect.encode(value)
                if len(encoded) >= wire.LARGE_PAYLOAD_BYTES:
                    frame_indices.append(index)
                    frames.append(encoded)
                    encoded = b""
                args.append(encoded)
        group = {
            "functionId": function_id, "argsPerTask": width, "keywords": list(keywords), "taskIds": task_ids,
            "args": args, "argFrameIndices": frame_indices, "argFrames": list(range(1, len(frames) + 1)),
            "objectArgIndices": sorted(object_args or ()), "profiling": profiling, "reportStart": report_start,
            "streamOutput": stream_output,
        }
        self.send("submitTasks", frames, objects=objects, groups=[group])
        return task_ids

    def send_object(self, object_id: bytes, payload: bytes, as_frame: bool = False) -> None:
        if as_frame:
            self.send("submitTasks", [payload], objects=[{"objectId": object_id, "name": "obj", "payloadFrame": 1}])
        else:
            self.send("submitTasks", objects=[{"objectId": object_id, "name": "obj", "payload": payload}])
        self._sent_objects.add(object_id)

    # ------------------------------------------------------------------------------------------ receiving

    def _receive(self, timeout: float) -> wire.Received | None:
        """The worker's next message, or None after `timeout`; a heartbeat is answered and kept."""
        try:
            _, message = self.scheduler.receive_from(self.identity, timeout)
        except AssertionError:
            return None
        if message.member == "heartbeat":
            self.heartbeats.append((time.monotonic(), message))
            if self.answer_heartbeats:
                self.send("heartbeatEcho", **self.echo_fields)
        return message

    def next(self, timeout: float = REPLY_SECONDS) -> wire.Received:
        """The worker's next message other than a heartbeat (those put back with `keep` first)."""
        if self._kept:
            return self._kept.pop(0)
        deadline = time.monotonic() + timeout
        while True:
            message = self._receive(max(0.0, deadline - time.monotonic()))
            if message is None:
                raise AssertionError(f"nothing but heartbeats from the worker within {timeout:g}s")
            if message.member != "heartbeat":
                return message

    def expect(self, member: str, timeout: float = REPLY_SECONDS) -> wire.Received:
        message = self.next(timeout)
        assert message.member == member, f"expected {member}, got {message.member}: {message.fields}"
        return message

    def keep(self, message: wire.Received) -> None:
        """Put a message back, for the next call of `next` (or `outcomes`)."""
        self._kept.append(message)

    def pause(self, seconds: float) -> None:
        """Let `seconds` pass, answering heartbeats; other messages are kept for later."""
        self._kept.extend(self.quiet_for(seconds))

    def quiet_for(self, seconds: float) -> list[wire.Received]:
        """Whatever the worker sends, heartbeats aside, in the next `seconds`."""
        deadline = time.monotonic() + seconds
        received = []
        while (left := deadline - time.monotonic()) > 0:
            message = self._receive(left)
            if message is not None and message.member != "heartbeat":
                received.append(message)
        return received

    def wait_heartbeats(self, count: int, timeout: float = REPLY_SECONDS) -> None:
        """Until `count` heartbeats have arrived in all; anything else arriving meanwhile fails the test."""
        deadline = time.monotonic() + timeout
        while len(self.heartbeats) < count:
            message = self._receive(max(0.0, deadline - time.monotonic()))
            if message is None:
                raise AssertionError(f"{len(self.heartbeats)} heartbeats within {timeout:g}s, expected {count}")
            if message.member != "heartbeat":
                raise AssertionError(f"expected only heartbeats, got {message.member}: {message.fields}")

    def outcomes(self, dialect: Dialect, task_ids: list[int], timeout: float = REPLY_SECONDS) -> dict[int, Outcome]:
        """Read taskResults until every one of `task_ids` has its outcome. A task answered twice, in this call
        or any earlier one, fails the test (§7: exactly one outcome per task).

        cancelRefused messages met on the way are noted in `cancel_refused`; anything else fails the test.
        """
        deadline = time.monotonic() + timeout
        while not set(task_ids).issubset(self.answered):
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(task_ids) - set(self.answered))
                raise AssertionError(f"no outcome within {timeout:g}s for tasks {[hex(i) for i in missing]}")
            message = self.next(left)
            if message.member == "cancelRefused":
                self.cancel_refused.extend(message.get("taskIds", []))
                continue
            assert message.member == "taskResults", f"expected taskResults, got {message.member}: {message.fields}"
            self.result_messages.append(message)
            successes, failures = wire.results_of(message)
            for task_id, payload in successes.items():
                self._answer(task_id, Outcome(True, value=dialect.decode(payload)))
            for failure in failures:
                self._answer(failure["taskId"], Outcome(
                    False, kind=failure.get("kind", "raised"), type_name=failure.get("typeName", ""),
                    message=failure.get("message", ""),
                ))
        return {task_id: self.answered[task_id] for task_id in task_ids}

    def _answer(self, task_id: int, outcome: Outcome) -> None:
        assert task_id not in self.answered, f"task {task_id:#x} answered twice (§7)"
        self.answered[task_id] = outcome
