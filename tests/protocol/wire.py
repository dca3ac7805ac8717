"""The suite's own view of the wire: messages built and read with pycapnp straight from the schema.

The conformance suite does not use `scaler.protocol.messages`, the Python peers' codec: a test that
encoded with the code under test could not catch that code's mistakes. It loads the one contract,
`scaler.capnp`, and handles frames exactly as PROTOCOL.md §1 describes.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from typing import Any

import capnp

import scaler.protocol

capnp.remove_import_hook()
SCHEMA_PATH = os.path.join(os.path.dirname(scaler.protocol.__file__), "scaler.capnp")
_schema = capnp.load(SCHEMA_PATH)

PROTOCOL_VERSION = 1
LARGE_PAYLOAD_BYTES = 64 * 1024
# Byte offset of the `Message` union discriminant in a one-segment frame: segment table, root pointer.
_DISCRIMINANT_OFFSET = 16


@dataclasses.dataclass
class Received:
    """One message as it arrived: its union member, its fields (pycapnp's to_dict) and all its frames."""

    member: str
    fields: dict[str, Any]
    frames: list[bytes]

    def get(self, field: str, default: Any = None) -> Any:
        # to_dict leaves out lists that are empty and fields that were never set
        return self.fields.get(field, default)


def build(member: str, **fields: Any) -> bytes:
    """The control frame of one message: `build("cancelTasks", taskIds=[1], force=True)`."""
    message = _schema.Message.new_message()
    body = message.init(member)
    for name, value in fields.items():
        setattr(body, name, value)
    return message.to_bytes()


def with_discriminant(frame: bytes, discriminant: int) -> bytes:
    """The same frame claiming another union member (an unknown one, for a bad-input test)."""
    changed = bytearray(frame)
    struct.pack_into("<H", changed, _DISCRIMINANT_OFFSET, discriminant)
    return bytes(changed)


def read(frames: list[bytes]) -> Received:
    """Decode a message a peer sent; a peer must only ever send valid ones, so anything else fails the test."""
    control = frames[0]
    limit = len(control) // 8 * 4 + 4096  # PROTOCOL.md §1, decoding limits
    with _schema.Message.from_bytes(control, traversal_limit_in_words=limit, nesting_limit=16) as reader:
        member = reader.which()
        fields = getattr(reader, member).to_dict()
    return Received(member, fields, frames)


def results_of(message: Received) -> tuple[dict[int, bytes], list[dict[str, Any]]]:
    """The successes (task id -> payload, frames put in place, §1) and failures of a taskResults."""
    ids = message.get("succeededIds", [])
    payloads = list(message.get("payloads", [b""] * len(ids)))
    assert len(ids) == len(payloads), "succeededIds and payloads differ in length (§3, §7)"
    indices = message.get("payloadFrameIndices", [])
    numbers = message.get("payloadFrames", [])
    assert len(indices) == len(numbers), "payloadFrameIndices and payloadFrames differ in length (§1)"
    used = set()
    for index, number in zip(indices, numbers):
        assert 0 < number < len(message.frames) and number not in used, f"payload frame {number} is wrong (§1)"
        used.add(number)
        payloads[index] = message.frames[number]
    assert len(used) == len(message.frames) - 1, "a payload frame is named by no field (§1)"
    return dict(zip(ids, payloads)), list(message.get("failures", []))
