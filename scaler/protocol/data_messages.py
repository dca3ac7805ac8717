"""The Python view of the data protocol (data.capnp): plain objects in, frames out, and back.

The same discipline as messages.py: one Cap'n Proto frame, then payload frames; decoding a malformed
message raises ProtocolDecodeError and nothing else, and a small forged frame costs no more than its bytes.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any, Callable, Union, cast

import capnp

from scaler.protocol.messages import Buffer, ProtocolDecodeError

capnp.remove_import_hook()
_schema = capnp.load(os.path.join(os.path.dirname(__file__), "data.capnp"))

# Frames that their receiver copies out (into a segment) are sent at most this large: the receiver's
# allocator then reuses the memory of the previous frame instead of faulting in fresh pages for the whole
# payload. Measured, 50 MB over tcp loopback and copied out: 120-260 ms in one frame, 60-80 ms in 2-4 MiB.
COPIED_FRAME_BYTES = 4 << 20

# As in messages.py: a reader visits each word a few times at most, whatever counts a frame claims.
_TRAVERSAL_WORDS_PER_FRAME_WORD = 4
_TRAVERSAL_SLACK_WORDS = 4096
_NESTING_LIMIT = 16

__all__ = ["ProtocolDecodeError", "Buffer"]


@dataclasses.dataclass(slots=True)
class Allocate:
    """Local writer to store: a segment to write an object of `size` bytes into (answer: Segment or Failed)."""

    request_id: int
    size: int
    pid: int


@dataclasses.dataclass(slots=True)
class Segment:
    """Store to local writer: map `size` bytes of `path` shared, write the payload, unmap, then Seal."""

    request_id: int
    path: str
    size: int


@dataclasses.dataclass(slots=True)
class Seal:
    """Local writer to store: the segment at `path` holds object `object_id`, `size` bytes (answer: Stored)."""

    request_id: int
    object_id: bytes
    path: str
    size: int
    pid: int
    name: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class MemoryLoan:
    """Where a borrowed object's bytes are in the lender's memory (data.capnp MemoryLoan)."""

    pid: int
    header: bytes
    ranges: tuple[tuple[int, int], ...]  # (address, length): the main part, then each buffer
    cookie_address: int
    cookie: bytes


@dataclasses.dataclass(slots=True)
class Lend:
    """Local writer to store: the object stays in the writer's memory, where `loan` says (answer: Stored or Failed)."""

    request_id: int
    object_id: bytes
    size: int
    loan: MemoryLoan
    name: str = ""


@dataclasses.dataclass(slots=True)
class Borrowed:
    """Store to local reader: read the object from the lender's memory, where `loan` says (nothing to release)."""

    request_id: int
    object_id: bytes
    size: int
    loan: MemoryLoan


@dataclasses.dataclass(slots=True)
class Stored:
    """Store to writer: the object is held (also when it already was)."""

    request_id: int
    object_id: bytes


@dataclasses.dataclass(slots=True)
class Put:
    """A remote writer's object: `payload` is the stored payload in pieces (their concatenation)."""

    request_id: int
    object_id: bytes
    payload: list[Buffer]
    name: str = ""

    @property
    def size(self) -> int:
        return sum(map(len, self.payload))


@dataclasses.dataclass(slots=True)
class Get:
    """Reader to store: local (answered by Located or Borrowed) or remote (ObjectData); Missing after `wait_ms`."""

    request_id: int
    object_id: bytes
    local: bool
    wait_ms: int = 0
    pid: int = 0
    holder: str = ""
    max_frame_bytes: int = 0


@dataclasses.dataclass(slots=True)
class Located:
    """Store to local reader: map `size` bytes of `path` privately, and Release them once unmapped."""

    request_id: int
    object_id: bytes
    path: str
    size: int


@dataclasses.dataclass(slots=True)
class ObjectData:
    """Store to remote reader: the object's stored payload, in pieces (their concatenation)."""

    request_id: int
    object_id: bytes
    payload: list[Buffer]

    @property
    def size(self) -> int:
        return sum(map(len, self.payload))


@dataclasses.dataclass(slots=True)
class Missing:
    """Store to reader: the object is not here, nor arrived within the Get's wait."""

    request_id: int
    object_id: bytes
    reason: str = ""


@dataclasses.dataclass(slots=True)
class Release:
    """Local reader to store, no answer: these mappings are gone (an id twice: two mappings)."""

    object_ids: list[bytes]
    pid: int


@dataclasses.dataclass(slots=True)
class Failed:
    """Store to requester: the request was refused (bad size, a segment not lent to this pid, ...)."""

    request_id: int
    reason: str = ""


@dataclasses.dataclass(slots=True)
class Delete:
    """Local process to a standalone store, no answer: nobody needs these objects any more."""

    object_ids: list[bytes]


@dataclasses.dataclass(slots=True)
class StatusRequest:
    """Local process to store: what it holds (answer: StoreStatus)."""

    request_id: int


@dataclasses.dataclass(slots=True)
class StoreStatus:
    """Store to requester: the numbers its heartbeats report (data.capnp StoreStatus)."""

    request_id: int
    capacity_bytes: int = 0
    resident_bytes: int = 0
    held_bytes: int = 0
    spilled_bytes: int = 0
    pinned_bytes: int = 0
    pooled_bytes: int = 0
    object_count: int = 0


_STATUS_FIELDS = {
    "capacityBytes": "capacity_bytes", "residentBytes": "resident_bytes", "heldBytes": "held_bytes",
    "spilledBytes": "spilled_bytes", "pinnedBytes": "pinned_bytes", "pooledBytes": "pooled_bytes",
    "objectCount": "object_count",
}

DataMessage = Union[
    Allocate, Segment, Seal, Stored, Put, Get, Located, ObjectData, Missing, Release, Failed, Delete, StatusRequest,
    StoreStatus, Lend, Borrowed,
]


# ---------------------------------------------------------------------------------------------- encoding


def _fields(builder: Any, field: str, values: dict) -> Any:
    # A union member must be initialised before its fields are set (see messages._init_with).
    struct = builder.init(field)
    for name, value in values.items():
        setattr(struct, name, value)
    return struct


def _loan_fields(builder: Any, loan: MemoryLoan) -> None:
    builder.pid = loan.pid
    builder.header = loan.header
    builder.cookieAddress = loan.cookie_address
    builder.cookie = loan.cookie
    ranges = builder.init("ranges", len(loan.ranges))
    for entry, (address, length) in zip(ranges, loan.ranges):
        entry.address = address
        entry.length = length


def _with_loan(builder: Any, field: str, values: dict, loan: MemoryLoan) -> None:
    _loan_fields(_fields(builder, field, values).init("loan"), loan)


_ENCODERS: dict[type, Callable[[Any, Any], None]] = {
    Allocate: lambda b, m: _fields(b, "allocate", {"requestId": m.request_id, "size": m.size, "pid": m.pid}),
    Segment: lambda b, m: _fields(b, "segment", {"requestId": m.request_id, "path": m.path, "size": m.size}),
    Seal: lambda b, m: _fields(b, "seal", {
        "requestId": m.request_id, "objectId": m.object_id, "path": m.path, "size": m.size, "name": m.name,
        "pid": m.pid,
    }),
    Stored: lambda b, m: _fields(b, "stored", {"requestId": m.request_id, "objectId": m.object_id}),
    Put: lambda b, m: _fields(b, "put", {
        "requestId": m.request_id, "objectId": m.object_id, "size": m.size, "name": m.name,
        "payloadFrames": len(m.payload),
    }),
    Get: lambda b, m: _fields(b, "get", {
        "requestId": m.request_id, "objectId": m.object_id, "local": m.local, "waitMs": m.wait_ms, "pid": m.pid,
        "holder": m.holder, "maxFrameBytes": m.max_frame_bytes,
    }),
    Located: lambda b, m: _fields(b, "located", {
        "requestId": m.request_id, "objectId": m.object_id, "path": m.path, "size": m.size,
    }),
    ObjectData: lambda b, m: _fields(b, "object", {
        "requestId": m.request_id, "objectId": m.object_id, "size": m.size, "payloadFrames": len(m.payload),
    }),
    Missing: lambda b, m: _fields(b, "missing", {
        "requestId": m.request_id, "objectId": m.object_id, "reason": m.reason,
    }),
    Release: lambda b, m: _fields(b, "release", {"objectIds": m.object_ids, "pid": m.pid}),
    Failed: lambda b, m: _fields(b, "failed", {"requestId": m.request_id, "reason": m.reason}),
    Delete: lambda b, m: _fields(b, "delete", {"objectIds": m.object_ids}),
    StatusRequest: lambda b, m: _fields(b, "status", {"requestId": m.request_id}),
    StoreStatus: lambda b, m: _fields(b, "storeStatus", {
        "requestId": m.request_id, **{wire: getattr(m, name) for wire, name in _STATUS_FIELDS.items()},
    }),
    Lend: lambda b, m: _with_loan(b, "lend", {
        "requestId": m.request_id, "objectId": m.object_id, "size": m.size, "name": m.name,
    }, m.loan),
    Borrowed: lambda b, m: _with_loan(b, "borrowed", {
        "requestId": m.request_id, "objectId": m.object_id, "size": m.size,
    }, m.loan),
}


def encode(message: DataMessage) -> list[Buffer]:
    """The frames of one message: the Cap'n Proto frame, then its payload pieces (not copied)."""
    encoder = _ENCODERS.get(type(message))
    if encoder is None:
        raise TypeError(f"not a data protocol message: {type(message).__name__}")
    builder = _schema.DataMessage.new_message()
    encoder(builder, message)
    payload: list[Buffer] = getattr(message, "payload", None) or []
    return [builder.to_bytes(), *payload]


# ---------------------------------------------------------------------------------------------- decoding


def decode(frames: Sequence[Buffer]) -> DataMessage:
    """Decode one message from its frames; anything malformed raises ProtocolDecodeError, never anything else."""
    if not frames:
        raise ProtocolDecodeError("a message needs at least one frame")
    first = bytes(frames[0]) if type(frames[0]) is not bytes else frames[0]
    try:
        traversal_limit = len(first) // 8 * _TRAVERSAL_WORDS_PER_FRAME_WORD + _TRAVERSAL_SLACK_WORDS
        with _schema.DataMessage.from_bytes(
            first, traversal_limit_in_words=traversal_limit, nesting_limit=_NESTING_LIMIT
        ) as reader:
            which = reader.which()
            decoder = _DECODERS.get(which)
            if decoder is None:
                raise ProtocolDecodeError(f"unknown data message type {which!r}")
            message = cast(DataMessage, decoder(getattr(reader, which), frames))
    except ProtocolDecodeError:
        raise
    except Exception as error:  # capnp raises KjException and friends for corrupt frames
        first_line = str(error).split("\n", 1)[0]
        raise ProtocolDecodeError(f"malformed data message: {type(error).__name__}: {first_line}") from None
    if not isinstance(message, (Put, ObjectData)) and len(frames) != 1:
        raise ProtocolDecodeError(f"{type(message).__name__} carries no payload, got {len(frames) - 1} frame(s)")
    return message


def _object_id(reader: Any) -> bytes:
    object_id = bytes(reader.objectId)
    if not object_id:
        raise ProtocolDecodeError("an object id is empty")
    return object_id


def _payload(reader: Any, frames: Sequence[Buffer]) -> list[Buffer]:
    count = reader.payloadFrames
    if count != len(frames) - 1:
        raise ProtocolDecodeError(f"the message names {count} payload frame(s), {len(frames) - 1} came")
    payload = list(frames[1:])
    size = sum(map(len, payload))
    if size != reader.size:
        raise ProtocolDecodeError(f"the payload frames hold {size:,} bytes, the message says {reader.size:,}")
    return payload


_DECODERS: dict[str, Callable[[Any, Sequence[Buffer]], Any]] = {
    "allocate": lambda r, f: Allocate(request_id=r.requestId, size=r.size, pid=r.pid),
    "segment": lambda r, f: Segment(request_id=r.requestId, path=r.path, size=r.size),
    "seal": lambda r, f: Seal(
        request_id=r.requestId, object_id=_object_id(r), path=r.path, size=r.size, pid=r.pid, name=r.name
    ),
    "stored": lambda r, f: Stored(request_id=r.requestId, object_id=_object_id(r)),
    "put": lambda r, f: Put(request_id=r.requestId, object_id=_object_id(r), payload=_payload(r, f), name=r.name),
    "get": lambda r, f: Get(
        request_id=r.requestId, object_id=_object_id(r), local=r.local, wait_ms=r.waitMs, pid=r.pid, holder=r.holder,
        max_frame_bytes=r.maxFrameBytes,
    ),
    "located": lambda r, f: Located(request_id=r.requestId, object_id=_object_id(r), path=r.path, size=r.size),
    "object": lambda r, f: ObjectData(request_id=r.requestId, object_id=_object_id(r), payload=_payload(r, f)),
    "missing": lambda r, f: Missing(request_id=r.requestId, object_id=_object_id(r), reason=r.reason),
    "release": lambda r, f: Release(object_ids=_object_ids(r), pid=r.pid),
    "failed": lambda r, f: Failed(request_id=r.requestId, reason=r.reason),
    "delete": lambda r, f: Delete(object_ids=_object_ids(r)),
    "status": lambda r, f: StatusRequest(request_id=r.requestId),
    "storeStatus": lambda r, f: StoreStatus(
        request_id=r.requestId, **{name: getattr(r, wire) for wire, name in _STATUS_FIELDS.items()}
    ),
    "lend": lambda r, f: Lend(
        request_id=r.requestId, object_id=_object_id(r), size=r.size, loan=_loan(r.loan), name=r.name
    ),
    "borrowed": lambda r, f: Borrowed(request_id=r.requestId, object_id=_object_id(r), size=r.size, loan=_loan(r.loan)),
}


# A loan names at most this many ranges: one process_vm_readv call reads them all, with the cookie (IOV_MAX 1024).
MAX_LOAN_RANGES = 1000


def _loan(reader: Any) -> MemoryLoan:
    ranges = tuple((entry.address, entry.length) for entry in reader.ranges)
    if not ranges or len(ranges) > MAX_LOAN_RANGES:
        raise ProtocolDecodeError(f"a memory loan names 1 to {MAX_LOAN_RANGES} ranges, got {len(ranges)}")
    cookie = bytes(reader.cookie)
    if not cookie or reader.pid <= 0:
        raise ProtocolDecodeError("a memory loan needs the lender's pid and a cookie")
    return MemoryLoan(reader.pid, bytes(reader.header), ranges, reader.cookieAddress, cookie)


def _object_ids(reader: Any) -> list[bytes]:
    object_ids = [bytes(object_id) for object_id in reader.objectIds]
    if not all(object_ids):
        raise ProtocolDecodeError("an object id is empty")
    return object_ids
