"""The Python view of the wire protocol: plain objects in, one Cap'n Proto frame out, and back.

This module and its sibling for the monitor feed, monitor_messages.py, are the only ones that import
capnp. Everything above them handles dataclasses, so the scheduler core, the worker, the client and
the monitor views never see a capnp reader or builder.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Sequence
from typing import Any, Callable, Iterable, Union, cast

import capnp

capnp.remove_import_hook()
_schema = capnp.load(os.path.join(os.path.dirname(__file__), "scaler.capnp"))

PROTOCOL_VERSION = 1

# A payload this large travels as its own zmq frame: nobody copies it into or out of a Cap'n Proto message.
LARGE_PAYLOAD_BYTES = 64 * 1024

# Payloads are bytes, or zero-copy views of received frames.
Buffer = Union[bytes, memoryview]


def inline_bytes(payloads: Iterable[Buffer]) -> int:
    """What these payloads add to a control frame: the small ones travel inside it, the large as frames."""
    return sum(size for size in map(len, payloads) if size < LARGE_PAYLOAD_BYTES)

# A reader may visit each word of a frame a few times; capping traversal relative to the frame's size
# stops a small forged frame (say, a list of a billion empty structs) from costing more than its bytes.
_TRAVERSAL_WORDS_PER_FRAME_WORD = 4
_TRAVERSAL_SLACK_WORDS = 4096
_NESTING_LIMIT = 16


class ProtocolDecodeError(ValueError):
    """A frame that is not a valid Scaler message."""


class Role(enum.IntEnum):
    CLIENT = 0
    WORKER = 1


class FailureKind(enum.IntEnum):
    RAISED = 0
    WORKER_DIED = 1
    CANCELED = 2
    NOT_FOUND = 3
    SERIALIZATION = 4
    REJECTED = 5
    RETURNED = 6


_ROLE_NAMES = {Role.CLIENT: "client", Role.WORKER: "worker"}
_ROLE_BY_NAME = {name: role for role, name in _ROLE_NAMES.items()}
_FAILURE_NAMES = {
    FailureKind.RAISED: "raised",
    FailureKind.WORKER_DIED: "workerDied",
    FailureKind.CANCELED: "canceled",
    FailureKind.NOT_FOUND: "notFound",
    FailureKind.SERIALIZATION: "serialization",
    FailureKind.REJECTED: "rejected",
    FailureKind.RETURNED: "returned",
}
_FAILURE_BY_NAME = {name: kind for kind, name in _FAILURE_NAMES.items()}


@dataclasses.dataclass(slots=True)
class Hello:
    role: Role
    name: str = ""
    hostname: str = ""
    pid: int = 0
    capacity: int = 0
    protocol_version: int = PROTOCOL_VERSION
    nesting_depth: int = 0


@dataclasses.dataclass(slots=True)
class Welcome:
    id_prefix: int = 0
    heartbeat_interval_ms: int = 0
    peer_timeout_ms: int = 0
    protocol_version: int = PROTOCOL_VERSION
    # The scheduler's limits on what it reads (0: none): any frame, and the control frame.
    max_frame_bytes: int = 0
    max_control_frame_bytes: int = 0

    def heartbeat_interval_for(self, own_seconds: float) -> float:
        """How often a welcomed peer heartbeats: at its own interval, or more often if the scheduler asks.

        The scheduler says how often it expects to hear from the peer, and after how much silence it drops
        it; a third of that timeout leaves room for two lost or late heartbeats.
        """
        interval = own_seconds
        if self.heartbeat_interval_ms:
            interval = min(interval, self.heartbeat_interval_ms / 1000)
        if self.peer_timeout_ms:
            interval = min(interval, self.peer_timeout_ms / 3000)
        return interval


@dataclasses.dataclass(slots=True)
class Refused:
    reason: str


@dataclasses.dataclass(slots=True)
class Heartbeat:
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    queued_tasks: int = 0
    processor_cpu_percent: float = 0.0
    processor_rss_bytes: int = 0
    latency_us: int = 0


@dataclasses.dataclass(slots=True)
class HeartbeatEcho:
    pass


@dataclasses.dataclass(slots=True)
class ObjectPayload:
    object_id: bytes
    payload: Buffer
    name: str = ""


@dataclasses.dataclass(slots=True)
class TaskGroup:
    """Tasks sharing a function and an argument layout; `args` is flattened row by row."""

    function_id: bytes
    args_per_task: int
    keywords: tuple[str, ...]
    task_ids: list[int]
    args: list[Buffer]
    serializer_id: bytes = b""
    # Graph edges: args[ref_arg_indices[k]] receives the result of task ref_task_ids[k].
    ref_arg_indices: list[int] = dataclasses.field(default_factory=list)
    ref_task_ids: list[int] = dataclasses.field(default_factory=list)
    # args[i] for i in object_arg_indices is an object id: the worker passes that object instead.
    object_arg_indices: list[int] = dataclasses.field(default_factory=list)
    nesting_depth: int = 0
    profiling: bool = False
    # The worker must say TaskStarted and hear it back before running each of these tasks.
    report_start: bool = False


@dataclasses.dataclass(slots=True)
class TaskSubmission:
    objects: list[ObjectPayload]
    groups: list[TaskGroup]
    quiet_task_ids: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class TaskFailure:
    task_id: int
    kind: FailureKind
    type_name: str = ""
    message: str = ""
    traceback: str = ""
    exception: bytes = b""


@dataclasses.dataclass(slots=True)
class TaskProfile:
    task_id: int
    duration_us: int
    cpu_time_us: int
    peak_memory_bytes: int


@dataclasses.dataclass(slots=True)
class TaskWarning:
    """A warning raised inside a task, for the client to issue again where the caller gets the result.

    One per task that raised it; on the wire, tasks that raised the same warning share one entry.
    """

    task_id: int
    category: str  # "module.QualName" of the warning class
    message: str
    filename: str
    lineno: int
    # The category's base warning classes, nearest first: the client falls back on one it can import.
    category_bases: tuple[str, ...] = ()
    module: str = ""


@dataclasses.dataclass(slots=True)
class TaskResults:
    succeeded_ids: list[int]
    payloads: list[Buffer]
    failures: list[TaskFailure]
    profiles: list[TaskProfile] = dataclasses.field(default_factory=list)
    warnings: list[TaskWarning] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class CancelTasks:
    task_ids: list[int]
    force: bool = False


@dataclasses.dataclass(slots=True)
class ReleaseTasks:
    task_ids: list[int]


@dataclasses.dataclass(slots=True)
class CancelRefused:
    """The cancel came too late: these tasks had started and will send their results."""

    task_ids: list[int]


@dataclasses.dataclass(slots=True)
class TaskStarted:
    """Worker: these report-start tasks are about to run here. Scheduler: noted, run them."""

    task_ids: list[int]


@dataclasses.dataclass(slots=True)
class DeleteObjects:
    object_ids: list[bytes]


@dataclasses.dataclass(slots=True)
class ClearRequest:
    pass


@dataclasses.dataclass(slots=True)
class ClearResponse:
    canceled_tasks: int = 0


@dataclasses.dataclass(slots=True)
class Disconnect:
    reason: str = ""


@dataclasses.dataclass(slots=True)
class ShutdownRequest:
    pass


@dataclasses.dataclass(slots=True)
class ShutdownResponse:
    accepted: bool
    reason: str = ""


@dataclasses.dataclass(slots=True)
class ProtocolError:
    reason: str


@dataclasses.dataclass(slots=True)
class ProcessorState:
    """Agent <-> processor only: a task blocks on nested work (blocked), and the agent's answer (granted)."""

    blocked: bool
    granted: bool = False
    reason: str = ""


Message = Union[
    Hello,
    Welcome,
    Refused,
    Heartbeat,
    HeartbeatEcho,
    TaskSubmission,
    TaskResults,
    CancelTasks,
    DeleteObjects,
    ClearRequest,
    ClearResponse,
    Disconnect,
    ShutdownRequest,
    ShutdownResponse,
    ProtocolError,
    ProcessorState,
    ReleaseTasks,
    CancelRefused,
    TaskStarted,
]


# ---------------------------------------------------------------------------------------------- encoding


def encode(message: Message) -> list[Buffer]:
    """The frames of one message: the Cap'n Proto frame, then any large payloads it names."""
    builder = _schema.Message.new_message()
    encoder = _ENCODERS.get(type(message))
    if encoder is None:
        raise TypeError(f"not a protocol message: {type(message).__name__}")
    frames: list[Buffer] = [b""]
    encoder(builder, message, frames)
    frames[0] = builder.to_bytes()
    return frames


def _init_with(builder, field: str, values: dict) -> None:
    # Assigning a dict to a union member only works for the member that is already set, so init first.
    struct = builder.init(field)
    for name, value in values.items():
        setattr(struct, name, value)


def _encode_hello(builder, message: Hello, frames: list[Buffer]) -> None:
    _init_with(builder, "hello", {
        "protocolVersion": message.protocol_version,
        "role": _ROLE_NAMES[message.role],
        "name": message.name,
        "hostname": message.hostname,
        "pid": message.pid,
        "capacity": message.capacity,
        "nestingDepth": message.nesting_depth,
    })


def _encode_welcome(builder, message: Welcome, frames: list[Buffer]) -> None:
    _init_with(builder, "welcome", {
        "protocolVersion": message.protocol_version,
        "idPrefix": message.id_prefix,
        "heartbeatIntervalMs": message.heartbeat_interval_ms,
        "peerTimeoutMs": message.peer_timeout_ms,
        "maxFrameBytes": message.max_frame_bytes,
        "maxControlFrameBytes": message.max_control_frame_bytes,
    })


def _encode_heartbeat(builder, message: Heartbeat, frames: list[Buffer]) -> None:
    _init_with(builder, "heartbeat", {
        "cpuPercent": message.cpu_percent,
        "rssBytes": message.rss_bytes,
        "queuedTasks": message.queued_tasks,
        "processorCpuPercent": message.processor_cpu_percent,
        "processorRssBytes": message.processor_rss_bytes,
        "latencyUs": message.latency_us,
    })


def _split_large(payloads: list[Buffer], frames: list[Buffer]) -> tuple[list[Buffer], list[int], list[int]]:
    """Move large payloads to frames; returns the inline list and the (index, frame) pairs."""
    indices: list[int] = []
    frame_numbers: list[int] = []
    inline = payloads
    for index, payload in enumerate(payloads):
        if len(payload) >= LARGE_PAYLOAD_BYTES:
            if inline is payloads:
                inline = list(payloads)
            inline[index] = b""
            indices.append(index)
            frame_numbers.append(len(frames))
            frames.append(payload)
    return inline, indices, frame_numbers


def _encode_submission(builder, message: TaskSubmission, frames: list[Buffer]) -> None:
    submission = builder.init("submitTasks")
    if message.objects:
        objects = submission.init("objects", len(message.objects))
        for slot, item in zip(objects, message.objects):
            slot.objectId = item.object_id
            slot.name = item.name
            if len(item.payload) >= LARGE_PAYLOAD_BYTES:
                slot.payloadFrame = len(frames)
                frames.append(item.payload)
            else:
                slot.payload = item.payload
    groups = submission.init("groups", len(message.groups))
    for slot, group in zip(groups, message.groups):
        slot.functionId = group.function_id
        slot.argsPerTask = group.args_per_task
        if group.keywords:
            slot.keywords = list(group.keywords)
        slot.taskIds = group.task_ids
        args, frame_indices, frame_numbers = _split_large(group.args, frames)
        slot.args = args
        if frame_indices:
            slot.argFrameIndices = frame_indices
            slot.argFrames = frame_numbers
        if group.serializer_id:
            slot.serializerId = group.serializer_id
        if group.ref_task_ids:
            slot.refArgIndices = group.ref_arg_indices
            slot.refTaskIds = group.ref_task_ids
        if group.object_arg_indices:
            slot.objectArgIndices = group.object_arg_indices
        if group.nesting_depth:
            slot.nestingDepth = group.nesting_depth
        if group.profiling:
            slot.profiling = True
        if group.report_start:
            slot.reportStart = True
    if message.quiet_task_ids:
        submission.quietTaskIds = message.quiet_task_ids


def _encode_results(builder, message: TaskResults, frames: list[Buffer]) -> None:
    results = builder.init("taskResults")
    results.succeededIds = message.succeeded_ids
    payloads, frame_indices, frame_numbers = _split_large(message.payloads, frames)
    results.payloads = payloads
    if frame_indices:
        results.payloadFrameIndices = frame_indices
        results.payloadFrames = frame_numbers
    if message.profiles:
        profiles = results.init("profiles", len(message.profiles))
        for slot, profile in zip(profiles, message.profiles):
            slot.taskId = profile.task_id
            slot.durationUs = profile.duration_us
            slot.cpuTimeUs = profile.cpu_time_us
            slot.peakMemoryBytes = profile.peak_memory_bytes
    if message.warnings:
        _encode_warnings(results, message.warnings)
    if message.failures:
        failures = results.init("failures", len(message.failures))
        for slot, failure in zip(failures, message.failures):
            slot.taskId = failure.task_id
            slot.kind = _FAILURE_NAMES[failure.kind]
            slot.typeName = failure.type_name
            slot.message = failure.message
            slot.traceback = failure.traceback
            slot.exception = failure.exception


def _encode_warnings(results, warnings: list[TaskWarning]) -> None:
    """One entry per distinct warning, and two columns naming the task and entry of each record."""
    entry_indices: dict[tuple, int] = {}
    indices = []
    for warning in warnings:
        key = (
            warning.category, warning.message, warning.filename, warning.lineno, warning.category_bases, warning.module
        )
        index = entry_indices.get(key)
        if index is None:
            index = entry_indices[key] = len(entry_indices)
        indices.append(index)
    entries = results.init("warnings", len(entry_indices))
    for slot, (category, text, filename, lineno, bases, module) in zip(entries, entry_indices):
        slot.category = category
        if bases:
            slot.categoryBases = list(bases)
        slot.message = text
        slot.filename = filename
        slot.lineno = lineno
        slot.module = module
    results.warningTaskIds = [warning.task_id for warning in warnings]
    results.warningIndices = indices


_ENCODERS: dict[type, Callable[[Any, Any, list[Buffer]], Any]] = {
    Hello: _encode_hello,
    Welcome: _encode_welcome,
    Refused: lambda b, m, f: _init_with(b, "refused", {"reason": m.reason}),
    Heartbeat: _encode_heartbeat,
    HeartbeatEcho: lambda b, m, f: b.init("heartbeatEcho"),
    TaskSubmission: _encode_submission,
    TaskResults: _encode_results,
    CancelTasks: lambda b, m, f: _init_with(b, "cancelTasks", {"taskIds": m.task_ids, "force": m.force}),
    ReleaseTasks: lambda b, m, f: _init_with(b, "releaseTasks", {"taskIds": m.task_ids}),
    CancelRefused: lambda b, m, f: _init_with(b, "cancelRefused", {"taskIds": m.task_ids}),
    TaskStarted: lambda b, m, f: _init_with(b, "taskStarted", {"taskIds": m.task_ids}),
    DeleteObjects: lambda b, m, f: _init_with(b, "deleteObjects", {"objectIds": m.object_ids}),
    ClearRequest: lambda b, m, f: b.init("clearRequest"),
    ClearResponse: lambda b, m, f: _init_with(b, "clearResponse", {"canceledTasks": m.canceled_tasks}),
    Disconnect: lambda b, m, f: _init_with(b, "disconnect", {"reason": m.reason}),
    ShutdownRequest: lambda b, m, f: b.init("shutdownRequest"),
    ShutdownResponse: lambda b, m, f: _init_with(b, "shutdownResponse", {"accepted": m.accepted, "reason": m.reason}),
    ProtocolError: lambda b, m, f: _init_with(b, "protocolError", {"reason": m.reason}),
    ProcessorState: lambda b, m, f: _init_with(
        b, "processorState", {"blocked": m.blocked, "granted": m.granted, "reason": m.reason}
    ),
}


# ---------------------------------------------------------------------------------------------- decoding


def decode(frames: Sequence[Buffer]) -> Message:
    """Decode one message from its frames; anything malformed raises ProtocolDecodeError, never anything else."""
    if not frames:
        raise ProtocolDecodeError("a message needs at least one frame")
    # Cap'n Proto needs word-aligned memory and a received frame's buffer need not be: copy the (small)
    # control frame; payload frames stay zero-copy views.
    first = bytes(frames[0]) if type(frames[0]) is not bytes else frames[0]
    try:
        traversal_limit = len(first) // 8 * _TRAVERSAL_WORDS_PER_FRAME_WORD + _TRAVERSAL_SLACK_WORDS
        with _schema.Message.from_bytes(
            first, traversal_limit_in_words=traversal_limit, nesting_limit=_NESTING_LIMIT
        ) as reader:
            which = reader.which()
            decoder = _DECODERS.get(which)
            if decoder is None:
                raise ProtocolDecodeError(f"unknown message type {which!r}")
            frame_table = _FrameTable(frames)
            message = cast(Message, decoder(getattr(reader, which), frame_table))
            frame_table.check_all_used()
            return message
    except ProtocolDecodeError:
        raise
    except Exception as error:  # capnp raises KjException and friends for corrupt frames
        first_line = str(error).split("\n", 1)[0]  # capnp appends a stack of addresses
        raise ProtocolDecodeError(f"malformed message: {type(error).__name__}: {first_line}") from None


class _FrameTable:
    """Hands out payload frames by number, each at most once, and checks that none is left over."""

    def __init__(self, frames: Sequence[Buffer]) -> None:
        self._frames = frames
        self._used: set[int] = set()

    def take(self, number: int) -> Buffer:
        if not 0 < number < len(self._frames) or number in self._used:
            raise ProtocolDecodeError(f"payload frame {number} is missing or named twice")
        self._used.add(number)
        return self._frames[number]

    def place(self, payloads: list[Buffer], indices: Sequence[int], numbers: Sequence[int]) -> None:
        if len(indices) != len(numbers):
            raise ProtocolDecodeError("frame index and frame number lists differ in length")
        for index, number in zip(indices, numbers):
            if index >= len(payloads):
                raise ProtocolDecodeError(f"payload index {index} is out of range")
            payloads[index] = self.take(number)

    def check_all_used(self) -> None:
        if len(self._used) != len(self._frames) - 1:
            raise ProtocolDecodeError(f"{len(self._frames) - 1 - len(self._used)} payload frame(s) are not named")


def message_type_name(message: Message) -> str:
    return type(message).__name__


def _decode_hello(reader, frames: _FrameTable) -> Hello:
    return Hello(
        protocol_version=reader.protocolVersion,
        role=_ROLE_BY_NAME[reader.role],
        name=reader.name,
        hostname=reader.hostname,
        pid=reader.pid,
        capacity=reader.capacity,
        nesting_depth=reader.nestingDepth,
    )


def _decode_welcome(reader, frames: _FrameTable) -> Welcome:
    return Welcome(
        protocol_version=reader.protocolVersion,
        id_prefix=reader.idPrefix,
        heartbeat_interval_ms=reader.heartbeatIntervalMs,
        peer_timeout_ms=reader.peerTimeoutMs,
        max_frame_bytes=reader.maxFrameBytes,
        max_control_frame_bytes=reader.maxControlFrameBytes,
    )


def _decode_heartbeat(reader, frames: _FrameTable) -> Heartbeat:
    return Heartbeat(
        cpu_percent=reader.cpuPercent,
        rss_bytes=reader.rssBytes,
        queued_tasks=reader.queuedTasks,
        processor_cpu_percent=reader.processorCpuPercent,
        processor_rss_bytes=reader.processorRssBytes,
        latency_us=reader.latencyUs,
    )


def _decode_submission(reader, frames: _FrameTable) -> TaskSubmission:
    objects = [
        ObjectPayload(
            object_id=bytes(item.objectId),
            name=item.name,
            payload=frames.take(item.payloadFrame) if item.payloadFrame else bytes(item.payload),
        )
        for item in reader.objects
    ]
    groups = []
    for group in reader.groups:
        args = list(group.args)
        if len(group.argFrameIndices) or len(group.argFrames):
            frames.place(args, list(group.argFrameIndices), list(group.argFrames))
        groups.append(
            TaskGroup(
                function_id=bytes(group.functionId),
                args_per_task=group.argsPerTask,
                keywords=tuple(group.keywords),
                task_ids=list(group.taskIds),
                args=args,
                serializer_id=bytes(group.serializerId),
                ref_arg_indices=list(group.refArgIndices),
                ref_task_ids=list(group.refTaskIds),
                object_arg_indices=list(group.objectArgIndices),
                nesting_depth=group.nestingDepth,
                profiling=group.profiling,
                report_start=group.reportStart,
            )
        )
    return TaskSubmission(objects=objects, groups=groups, quiet_task_ids=list(reader.quietTaskIds))


def _decode_results(reader, frames: _FrameTable) -> TaskResults:
    failures = [
        TaskFailure(
            task_id=failure.taskId,
            kind=_FAILURE_BY_NAME[str(failure.kind)],
            type_name=failure.typeName,
            message=failure.message,
            traceback=failure.traceback,
            exception=bytes(failure.exception),
        )
        for failure in reader.failures
    ]
    payloads = list(reader.payloads)
    if len(reader.payloadFrameIndices) or len(reader.payloadFrames):
        frames.place(payloads, list(reader.payloadFrameIndices), list(reader.payloadFrames))
    profiles = [
        TaskProfile(
            task_id=profile.taskId,
            duration_us=profile.durationUs,
            cpu_time_us=profile.cpuTimeUs,
            peak_memory_bytes=profile.peakMemoryBytes,
        )
        for profile in reader.profiles
    ]
    warnings = _decode_warnings(reader) if len(reader.warningTaskIds) or len(reader.warningIndices) else []
    return TaskResults(
        succeeded_ids=list(reader.succeededIds), payloads=payloads, failures=failures, profiles=profiles,
        warnings=warnings,
    )


def _decode_warnings(reader) -> list[TaskWarning]:
    task_ids = list(reader.warningTaskIds)
    indices = list(reader.warningIndices)
    if len(task_ids) != len(indices):
        raise ProtocolDecodeError("warningTaskIds and warningIndices differ in length")
    entries = [
        (entry.category, entry.message, entry.filename, entry.lineno, tuple(entry.categoryBases), entry.module)
        for entry in reader.warnings
    ]
    if indices and max(indices) >= len(entries):
        raise ProtocolDecodeError(f"a warning index is past the {len(entries)} warnings")
    return [TaskWarning(task_id, *entries[index]) for task_id, index in zip(task_ids, indices)]


_DECODERS: dict[str, Callable[[Any, _FrameTable], Any]] = {
    "hello": _decode_hello,
    "welcome": _decode_welcome,
    "refused": lambda r, f: Refused(reason=r.reason),
    "heartbeat": _decode_heartbeat,
    "heartbeatEcho": lambda r, f: HeartbeatEcho(),
    "submitTasks": _decode_submission,
    "taskResults": _decode_results,
    "cancelTasks": lambda r, f: CancelTasks(task_ids=list(r.taskIds), force=r.force),
    "releaseTasks": lambda r, f: ReleaseTasks(task_ids=list(r.taskIds)),
    "cancelRefused": lambda r, f: CancelRefused(task_ids=list(r.taskIds)),
    "taskStarted": lambda r, f: TaskStarted(task_ids=list(r.taskIds)),
    "deleteObjects": lambda r, f: DeleteObjects(object_ids=[bytes(x) for x in r.objectIds]),
    "clearRequest": lambda r, f: ClearRequest(),
    "clearResponse": lambda r, f: ClearResponse(canceled_tasks=r.canceledTasks),
    "disconnect": lambda r, f: Disconnect(reason=r.reason),
    "shutdownRequest": lambda r, f: ShutdownRequest(),
    "shutdownResponse": lambda r, f: ShutdownResponse(accepted=r.accepted, reason=r.reason),
    "protocolError": lambda r, f: ProtocolError(reason=r.reason),
    "processorState": lambda r, f: ProcessorState(blocked=r.blocked, granted=r.granted, reason=r.reason),
}
