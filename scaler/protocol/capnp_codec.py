"""Cap'n Proto encoding of the protocol messages: one message in, its frames out, and back.

The control frame is a Cap'n Proto `Message` (scaler.capnp); a payload of LARGE_PAYLOAD_BYTES or more
travels as a frame of its own that the control frame names by number, so nobody copies it. `decode`
checks what a peer sent before anything above it sees it. The messages of plain fields are written
field by field from their dataclasses (capnp_fields.py); the others here.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any, Callable, cast

import capnp

from scaler.protocol.capnp_fast import decode_plain, encode_plain
from scaler.protocol.capnp_fields import FLAT_MESSAGES, read_directory, read_fields, write_directory, write_fields
from scaler.protocol.capnp_flat_reader import flat_reader_class
from scaler.protocol.frame_table import FrameTable
from scaler.protocol.message_types import (
    LARGE_PAYLOAD_BYTES,
    Buffer,
    FailureKind,
    Message,
    ObjectPayload,
    ProtocolDecodeError,
    Relay,
    StoreDirectory,
    StoredResult,
    TaskFailure,
    TaskGroup,
    TaskProfile,
    TaskResults,
    TaskSubmission,
    TaskWarning,
)

capnp.remove_import_hook()
_schema = capnp.load(os.path.join(os.path.dirname(__file__), "scaler.capnp"))

# A reader may visit each word of a frame a few times; capping traversal relative to the frame's size
# stops a small forged frame (say, a list of a billion empty structs) from costing more than its bytes.
_TRAVERSAL_WORDS_PER_FRAME_WORD = 4
_TRAVERSAL_SLACK_WORDS = 4096
_NESTING_LIMIT = 16

# pycapnp looks a field up by its name at every attribute read (1.5 to 2 us); a read by the field's schema
# object, resolved once here, costs a fifth of that. A task's submission and result are each decoded at
# three hops, a dozen fields each, so the hot messages are read this way.
_MESSAGE = _schema.Message.schema.fields
_SUBMISSION = _schema.TaskSubmission.schema.fields
_GROUP = _schema.TaskGroup.schema.fields
_OBJECT = _schema.ObjectPayload.schema.fields
_RESULTS = _schema.TaskResults.schema.fields
_FAILURE = _schema.TaskFailure.schema.fields

# None when this pycapnp lacks the class (capnp_flat_reader.py): `_read` then opens frames by `from_bytes`.
_FlatReader = flat_reader_class(_schema.Message)
_MESSAGE_SCHEMA = _schema.Message.schema

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


# ---------------------------------------------------------------------------------------------- flat messages

def _encode_flat(builder, message: Any, frames: list[Buffer]) -> None:
    write_fields(builder.init(FLAT_MESSAGES[type(message)]), message)


def _decode_flat(cls: type, reader, frames: FrameTable) -> Any:
    return read_fields(cls, reader)


# ---------------------------------------------------------------------------------------------- encoding


def encode(message: Message) -> list[Buffer]:
    """The frames of one message: the Cap'n Proto frame, then any large payloads it names."""
    plain = encode_plain(message)  # plain results, written by struct (capnp_fast.py); else None
    if plain is not None:
        return [plain]
    builder = _schema.Message.new_message()
    encoder = _ENCODERS.get(type(message))
    if encoder is None:
        raise TypeError(f"not a protocol message: {type(message).__name__}")
    frames: list[Buffer] = [b""]
    encoder(builder, message, frames)
    frames[0] = builder.to_bytes()
    return frames


def _split_large(payloads: list[Buffer], frames: list[Buffer]) -> tuple[list[Buffer], list[int], list[int]]:
    """Move large payloads to frames; returns the inline list and the (index, frame) pairs."""
    if not payloads or max(map(len, payloads)) < LARGE_PAYLOAD_BYTES:
        return payloads, [], []  # the usual case, found without a Python step per payload (a map's thousands)
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


def _put_payloads(
    struct, payloads: list[Buffer], frames: list[Buffer], field: str, indices_field: str, frames_field: str
) -> None:
    """Set a list of payloads: the small inline in `field`, the large as frames named by the other two."""
    inline, frame_indices, frame_numbers = _split_large(payloads, frames)
    setattr(struct, field, inline)
    if frame_indices:
        setattr(struct, indices_field, frame_indices)
        setattr(struct, frames_field, frame_numbers)


def _encode_submission(builder, message: TaskSubmission, frames: list[Buffer]) -> None:
    submission = builder.init("submitTasks")
    if message.objects:
        objects = submission.init("objects", len(message.objects))
        for slot, item in zip(objects, message.objects):
            slot.objectId = item.object_id
            slot.name = item.name
            if item.holder:
                slot.holder = item.holder
                slot.size = item.size
            elif len(item.payload) >= LARGE_PAYLOAD_BYTES:
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
        _put_payloads(slot, group.args, frames, "args", "argFrameIndices", "argFrames")
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
        if group.required_tags:
            slot.requiredTags = list(group.required_tags)
            slot.waitForTagsMs = group.wait_for_tags_ms
        if group.priority:
            slot.priority = group.priority
        if group.stream_output:
            slot.streamOutput = True
        if group.keep_results:
            slot.keepResults = True
        if group.keep_in_stores:
            slot.keepInStores = True
        if group.ahead:
            slot.ahead = True
    if message.quiet_task_ids:
        submission.quietTaskIds = message.quiet_task_ids


def _encode_results(builder, message: TaskResults, frames: list[Buffer]) -> None:
    results = builder.init("taskResults")
    results.succeededIds = message.succeeded_ids
    _put_payloads(results, message.payloads, frames, "payloads", "payloadFrameIndices", "payloadFrames")
    if message.profiles:
        profiles = results.init("profiles", len(message.profiles))
        for slot, profile in zip(profiles, message.profiles):
            write_fields(slot, profile)
    if message.warnings:
        _encode_warnings(results, message.warnings)
    if message.stored:
        stored = message.stored
        results.storedTaskIds = [item.task_id for item in stored]
        results.storedObjectIds = [item.object_id for item in stored]
        results.storedSizes = [item.size for item in stored]
        results.storedHolders = [item.holder for item in stored]
    if message.ran_tasks:
        results.runSeconds = message.run_seconds
        results.ranTasks = message.ran_tasks
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


def _encode_relay(builder, message: Relay, frames: list[Buffer]) -> None:
    relay = builder.init("relay")
    relay.store = message.store
    relay.peer = message.peer
    relay.requestId = message.request_id
    relay.error = message.error
    relay.dataFrames = len(message.frames)
    frames.extend(message.frames)  # passed on as they came: never copied


_ENCODERS: dict[type, Callable[[Any, Any, list[Buffer]], Any]] = {
    TaskSubmission: _encode_submission,
    Relay: _encode_relay,
    StoreDirectory: lambda builder, message, frames: write_directory(builder.init("storeDirectory"), message),
    TaskResults: _encode_results,
    **{cls: _encode_flat for cls in FLAT_MESSAGES},
}


# ---------------------------------------------------------------------------------------------- decoding


def decode(frames: Sequence[Buffer]) -> Message:
    """Decode one message from its frames; anything malformed raises ProtocolDecodeError, never anything else."""
    plain = decode_plain(frames[0]) if len(frames) == 1 else None  # a task's plain messages: capnp_fast.py
    if plain is not None:
        return plain
    return cast(Message, _read(frames, _decode_root))


def _read(frames: Sequence[Buffer], read: Callable[[Any, str, Sequence[Buffer]], Any]) -> Any:
    """`read(root, member, frames)` of the message in `frames`; a malformed one raises ProtocolDecodeError."""
    if not frames:
        raise ProtocolDecodeError("a message needs at least one frame")
    # Cap'n Proto needs word-aligned memory, and a received frame need not be (libzmq hands out slices of its
    # receive buffer): copy the small control frame (a fraction of a microsecond); payload frames stay views.
    first = bytes(frames[0]) if type(frames[0]) is not bytes else frames[0]
    try:
        traversal_limit = len(first) // 8 * _TRAVERSAL_WORDS_PER_FRAME_WORD + _TRAVERSAL_SLACK_WORDS
        if _FlatReader is not None:
            reader = _FlatReader(first, traversal_limit, _NESTING_LIMIT).get_root(_MESSAGE_SCHEMA)
            return read(reader, reader._which_str(), frames)
        with _schema.Message.from_bytes(first, traversal_limit, _NESTING_LIMIT) as reader:
            return read(reader, reader._which_str(), frames)
    except ProtocolDecodeError:
        raise
    except Exception as error:  # capnp raises KjException and friends for corrupt frames
        first_line = str(error).split("\n", 1)[0]  # capnp appends a stack of addresses
        raise ProtocolDecodeError(f"malformed message: {type(error).__name__}: {first_line}") from None


def _decode_root(reader, which: str, frames: Sequence[Buffer]) -> Any:
    decoder = _DECODERS.get(which)
    if decoder is None:
        raise ProtocolDecodeError(f"unknown message type {which!r}")
    frame_table = FrameTable(frames)
    message = decoder(reader._get_by_field(_MESSAGE[which]), frame_table)
    frame_table.check_all_used()
    return message


def _list(values) -> list:
    """A capnp list as a Python list; most lists of a small message are empty or hold one item (one task's), and
    their length and an index cost less than iterating (1.5 us for one item: pycapnp's iterator ends by an error)."""
    count = len(values)
    if count == 1:
        return [values[0]]
    return list(values) if count else []


def _decode_submission(reader, frames: FrameTable) -> TaskSubmission:
    get, has = reader._get_by_field, reader._has_by_field
    return TaskSubmission(
        objects=[_decode_object(item, frames) for item in get(_OBJECTS)] if has(_OBJECTS) else [],
        groups=[_decode_group(group, frames) for group in _list(get(_SUBMISSION["groups"]))],
        quiet_task_ids=list(get(_QUIET)) if has(_QUIET) else [],
    )


def _take_payloads(struct, inline: Any, indices: Any, numbers: Any, frames: FrameTable) -> list:
    """A list of payloads as _put_payloads wrote it: the small inline, each large one from the frame named for it."""
    get, has = struct._get_by_field, struct._has_by_field
    payloads = _list(get(inline))
    if has(indices) or has(numbers):
        frames.place(payloads, list(get(indices)), list(get(numbers)))
    return payloads


# The fields of a group that most groups leave empty: asking whether a pointer is set costs a third of reading
# an empty list (a null pointer, as _encode_submission writes an empty list; a set one is read as ever).
_KEYWORDS, _REF_ARGS, _REF_TASKS = _GROUP["keywords"], _GROUP["refArgIndices"], _GROUP["refTaskIds"]
_OBJECT_ARGS, _TAGS = _GROUP["objectArgIndices"], _GROUP["requiredTags"]
_OBJECTS, _QUIET = _SUBMISSION["objects"], _SUBMISSION["quietTaskIds"]


def _decode_group(group, frames: FrameTable) -> TaskGroup:
    get, has = group._get_by_field, group._has_by_field
    args = _take_payloads(group, _GROUP["args"], _GROUP["argFrameIndices"], _GROUP["argFrames"], frames)
    return TaskGroup(
        function_id=get(_GROUP["functionId"]),
        args_per_task=get(_GROUP["argsPerTask"]),
        keywords=tuple(get(_KEYWORDS)) if has(_KEYWORDS) else (),
        task_ids=_list(get(_GROUP["taskIds"])),
        args=args,
        serializer_id=get(_GROUP["serializerId"]),
        ref_arg_indices=list(get(_REF_ARGS)) if has(_REF_ARGS) else [],
        ref_task_ids=list(get(_REF_TASKS)) if has(_REF_TASKS) else [],
        object_arg_indices=list(get(_OBJECT_ARGS)) if has(_OBJECT_ARGS) else [],
        nesting_depth=get(_GROUP["nestingDepth"]),
        profiling=get(_GROUP["profiling"]),
        report_start=get(_GROUP["reportStart"]),
        required_tags=tuple(get(_TAGS)) if has(_TAGS) else (),
        wait_for_tags_ms=get(_GROUP["waitForTagsMs"]),
        priority=get(_GROUP["priority"]),
        stream_output=get(_GROUP["streamOutput"]),
        keep_results=get(_GROUP["keepResults"]),
        keep_in_stores=get(_GROUP["keepInStores"]),
        ahead=get(_GROUP["ahead"]),
    )


def _decode_object(item, frames: FrameTable) -> ObjectPayload:
    get = item._get_by_field
    holder = get(_OBJECT["holder"])
    payload_frame = get(_OBJECT["payloadFrame"])
    if holder:
        if payload_frame or len(get(_OBJECT["payload"])):
            raise ProtocolDecodeError("a stored object carries a payload too")
        return ObjectPayload(
            object_id=get(_OBJECT["objectId"]), payload=b"", name=get(_OBJECT["name"]), size=get(_OBJECT["size"]),
            holder=holder,
        )
    return ObjectPayload(
        object_id=get(_OBJECT["objectId"]),
        name=get(_OBJECT["name"]),
        payload=frames.take(payload_frame) if payload_frame else get(_OBJECT["payload"]),
    )


def _decode_stored(get: Callable[[Any], Any]) -> list[StoredResult]:
    columns = (list(get(_RESULTS["storedTaskIds"])), list(get(_RESULTS["storedObjectIds"])),
               list(get(_RESULTS["storedSizes"])), list(get(_RESULTS["storedHolders"])))
    if len({len(column) for column in columns}) != 1:
        raise ProtocolDecodeError("the stored-result columns differ in length")
    return [StoredResult(*row) for row in zip(*columns)]


def _decode_failure(failure) -> TaskFailure:
    get = failure._get_by_field
    return TaskFailure(
        task_id=get(_FAILURE["taskId"]),
        kind=_FAILURE_BY_NAME[str(get(_FAILURE["kind"]))],
        type_name=get(_FAILURE["typeName"]),
        message=get(_FAILURE["message"]),
        traceback=get(_FAILURE["traceback"]),
        exception=get(_FAILURE["exception"]),
    )


def _filled(struct, *fields: Any) -> bool:
    """Whether any of these list fields holds an element (most are null pointers: asking is cheap)."""
    return any(struct._has_by_field(field) and len(struct._get_by_field(field)) for field in fields)


def _decode_results(reader, frames: FrameTable) -> TaskResults:
    get, has = reader._get_by_field, reader._has_by_field
    payloads = _take_payloads(
        reader, _RESULTS["payloads"], _RESULTS["payloadFrameIndices"], _RESULTS["payloadFrames"], frames
    )
    # The columns below are empty for most batches: whether a pointer is set costs far less than reading it.
    return TaskResults(
        succeeded_ids=_list(get(_RESULTS["succeededIds"])),
        payloads=payloads,
        failures=[_decode_failure(failure) for failure in get(_RESULTS["failures"])] if has(
            _RESULTS["failures"]) else [],
        profiles=[read_fields(TaskProfile, profile) for profile in get(_RESULTS["profiles"])] if has(
            _RESULTS["profiles"]) else [],
        warnings=_decode_warnings(reader) if _filled(reader, _RESULTS["warningTaskIds"], _RESULTS["warningIndices"])
        else [],
        stored=_decode_stored(get) if _filled(reader, _RESULTS["storedTaskIds"], _RESULTS["storedObjectIds"]) else [],
        run_seconds=get(_RESULTS["runSeconds"]),
        ran_tasks=get(_RESULTS["ranTasks"]),
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


def _decode_relay(reader, frames: FrameTable) -> Relay:
    count = reader.dataFrames
    if (count == 0) != bool(reader.error):
        raise ProtocolDecodeError("a relay carries a data message or an error, exactly one of them")
    return Relay(
        frames=[frames.take(number) for number in range(1, count + 1)], store=reader.store, peer=bytes(reader.peer),
        request_id=reader.requestId, error=reader.error,
    )


_DECODERS: dict[str, Callable[[Any, FrameTable], Any]] = {
    "submitTasks": _decode_submission,
    "relay": _decode_relay,
    "taskResults": _decode_results,
    "storeDirectory": lambda reader, frames: read_directory(reader),
    **{member: functools.partial(_decode_flat, cls) for cls, member in FLAT_MESSAGES.items()},
}
