"""The layout of a stored payload: the same bytes in a shared-memory segment, in a spill file and on the wire.

    header   magic, version, format, buffer count, main length, total length      (32 bytes)
    table    (offset, length) of each out-of-band buffer                          (16 bytes each)
             (the offset's lowest bit set: the buffer is a whole `bytes` object)
    main     the serializer's bytes
    buffers  each at an offset that is a multiple of 64 from the start

With the default serializer the main part is a pickle protocol 5 stream and the buffers are its
out-of-band buffers, so a reader that maps a segment gets NumPy arrays that are views of the mapping
(no copy; writable, copy-on-write, when the mapping is private) and a large `bytes` object costs one
copy out of it (a `bytes` object owns its memory). A custom `Serializer`'s bytes are the main part.

Large `bytes` go out-of-band only at the top of the object and one level into an exact tuple, list or
dict: the C pickler never calls `reducer_override` (nor a dispatch table) for exact `bytes`, and a
`persistent_id` hook, which it does call, costs a Python call per pickled object (measured: 2 to 4
times slower on a list of a million ints). Deeper `bytes` stay in the main part: one more copy.

A buffer whose exporter is a `bytes` object is marked in the table: a reader on the store's host may read
it straight into a new `bytes` (pread, one copy, no mapping) and hand that to the unpickler, which is
what pickle gives for a read-only buffer in-band too (`read_parts`).

A NumPy array that is not contiguous (a column slice) is pickled in-band by NumPy, copied into the
stream and again by every reader; at the top of the object it is made contiguous first (the same one
copy), so that it goes out-of-band and readers map it (measured on a 4 MB column slice, prepare +
write + read: 12.8 ms in-band, 0.6 ms so).
"""

from __future__ import annotations

import dataclasses
import enum
import pickle
import struct
from typing import Any, Union

from scaler.protocol.serializer import DefaultSerializer, Serializer
from scaler.protocol.serializer import dumps as serializer_dumps

MAGIC = b"SCLRPAY\x00"
VERSION = 2  # 2: the whole-bytes mark in the table
BUFFER_ALIGNMENT = 64
_WHOLE_BYTES_MARK = 1  # in a table entry's offset, which is otherwise a multiple of BUFFER_ALIGNMENT
# A `bytes` this large goes out-of-band: below a page the table entry and the padding cost more than
# the copy into the pickle stream saves.
OUT_OF_BAND_BYTES_MIN = 4096

_HEADER = struct.Struct("<8sHHIQQ")  # magic, version, format, buffer count, main length, total length
_BUFFER_ENTRY = struct.Struct("<QQ")  # offset, length
HEADER_BYTES = _HEADER.size

Buffer = Union[bytes, memoryview]


class PayloadFormat(enum.IntEnum):
    PICKLE = 1  # the default serializer: pickle protocol 5, buffers out-of-band
    SERIALIZER = 2  # a custom Serializer's bytes, no buffers


class StoredPayloadError(ValueError):
    """Bytes that are not a stored payload (corrupted, truncated, or another version's), or the wrong reader."""


def _align(offset: int) -> int:
    return -(-offset // BUFFER_ALIGNMENT) * BUFFER_ALIGNMENT


@dataclasses.dataclass(frozen=True)
class PayloadLayout:
    """Where the parts of one payload are, relative to its first byte."""

    format: PayloadFormat
    main_offset: int
    main_length: int
    buffers: tuple[tuple[int, int], ...]  # (offset, length)
    total_length: int
    whole_bytes: tuple[bool, ...] = ()  # per buffer: it is a whole `bytes` object (none, if empty)

    @staticmethod
    def plan(
        format: PayloadFormat, main_length: int, buffer_lengths: list[int], whole_bytes: tuple[bool, ...] = ()
    ) -> PayloadLayout:
        main_offset = HEADER_BYTES + _BUFFER_ENTRY.size * len(buffer_lengths)
        end = main_offset + main_length
        buffers = []
        for length in buffer_lengths:
            offset = _align(end)
            buffers.append((offset, length))
            end = offset + length
        marks = whole_bytes if any(whole_bytes) else ()
        return PayloadLayout(format, main_offset, main_length, tuple(buffers), end, marks)

    @property
    def only_whole_bytes(self) -> bool:
        """Every buffer (if any) is a whole `bytes`: a reader may copy each out, mapping nothing."""
        return not self.buffers or (len(self.whole_bytes) == len(self.buffers) and all(self.whole_bytes))

    def header_bytes(self) -> bytes:
        header = _HEADER.pack(MAGIC, VERSION, self.format, len(self.buffers), self.main_length, self.total_length)
        marks = self.whole_bytes or (False,) * len(self.buffers)
        return header + b"".join(
            _BUFFER_ENTRY.pack(offset | (_WHOLE_BYTES_MARK if whole else 0), length)
            for (offset, length), whole in zip(self.buffers, marks)
        )


class PreparedPayload:
    """An object serialized once, ready to be written into a segment or sent as frames.

    It holds the main part and views of the object's own buffers (nothing copied yet), so the object
    must not change until the payload is written or sent.
    """

    def __init__(self, format: PayloadFormat, main: bytes, buffers: list[memoryview]) -> None:
        self.main = main
        self.buffers = buffers
        self.layout = PayloadLayout.plan(
            format, len(main), [buffer.nbytes for buffer in buffers],
            tuple(type(buffer.obj) is bytes for buffer in buffers),
        )

    @property
    def size(self) -> int:
        return self.layout.total_length

    def write_into(self, target: Any) -> int:
        """Write the payload at the start of `target` (a writable buffer: an mmap, a bytearray); returns its size."""
        view = memoryview(target).cast("B")
        if view.readonly:
            raise ValueError("stored payload: the target buffer is read-only")
        if view.nbytes < self.size:
            raise ValueError(f"stored payload: a payload of {self.size:,} bytes does not fit {view.nbytes:,} bytes")
        header = self.layout.header_bytes()
        view[: len(header)] = header
        start = self.layout.main_offset
        view[start: start + len(self.main)] = self.main
        for (offset, length), buffer in zip(self.layout.buffers, self.buffers):
            view[offset: offset + length] = buffer
        return self.size

    def pieces(self, max_piece_bytes: int = 0) -> list[Buffer]:
        """Consecutive pieces whose concatenation is the payload; the buffers are not copied (for zmq frames).

        With `max_piece_bytes`, no piece is larger (see split_frames)."""
        pieces: list[Buffer] = [self.layout.header_bytes()]
        if self.main:
            pieces.append(self.main)
        end = self.layout.main_offset + len(self.main)
        for (offset, length), buffer in zip(self.layout.buffers, self.buffers):
            if offset > end:
                pieces.append(bytes(offset - end))
            if length:
                pieces.append(buffer)
            end = offset + length
        return split_frames(pieces, max_piece_bytes) if max_piece_bytes else pieces

    def to_bytes(self) -> bytes:
        target = bytearray(self.size)
        self.write_into(target)
        return bytes(target)


def split_frames(pieces: list[Buffer], max_frame_bytes: int) -> list[Buffer]:
    """The same bytes, with no piece over `max_frame_bytes` (views: nothing is copied)."""
    frames: list[Buffer] = []
    for piece in pieces:
        if len(piece) <= max_frame_bytes:
            frames.append(piece)
            continue
        view = memoryview(piece).cast("B")
        frames.extend(view[start: start + max_frame_bytes] for start in range(0, len(view), max_frame_bytes))
    return frames


def _bytes_from_buffer(buffer: Any) -> bytes:
    """Unpickling half of an out-of-band `bytes`: the one copy that gives the `bytes` object its own memory
    (none, when the reader copied the buffer out of its segment into a `bytes` already)."""
    return bytes(buffer)


class _OutOfBandBytes:
    """Stands in for a large `bytes` while pickling, so that it goes out-of-band (see the module docstring)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce_ex__(self, protocol: Any) -> Any:
        return _bytes_from_buffer, (pickle.PickleBuffer(self.data),)


def _is_large_bytes(value: Any) -> bool:
    return type(value) is bytes and len(value) >= OUT_OF_BAND_BYTES_MIN


def _is_strided_array(value: Any) -> bool:
    """A NumPy array that is neither C- nor Fortran-contiguous (a column slice, say): NumPy pickles those
    in-band, a copy in the stream that every reader copies again."""
    if type(value).__name__ != "ndarray" or type(value).__module__ != "numpy":
        return False
    flags = value.flags
    return not (flags.c_contiguous or flags.f_contiguous) and value.dtype.hasobject is False


def _with_bytes_out_of_band(obj: Any) -> Any:
    """`obj`, with its large `bytes` (at the top, or one level into an exact tuple, list or dict) wrapped,
    and at the top a strided array made contiguous (one copy, and then out-of-band: readers map it)."""
    if _is_large_bytes(obj):
        return _OutOfBandBytes(obj)
    kind = type(obj)
    if _is_strided_array(obj):
        return obj.copy()  # C order; the copy is what NumPy's in-band pickling would have made anyway
    if kind is tuple or kind is list:
        if any(map(_is_large_bytes, obj)):
            return kind(_OutOfBandBytes(item) if _is_large_bytes(item) else item for item in obj)
    elif kind is dict:
        if any(map(_is_large_bytes, obj.values())):
            return {key: _OutOfBandBytes(value) if _is_large_bytes(value) else value for key, value in obj.items()}
    return obj


def _is_default(serializer: Serializer | None) -> bool:
    return serializer is None or type(serializer) is DefaultSerializer


def prepare(obj: Any, serializer: Serializer | None = None) -> PreparedPayload:
    """Serialize `obj` once: the main part, and views of its out-of-band buffers (not copied)."""
    if not _is_default(serializer):
        assert serializer is not None
        main = serializer.serialize(obj)
        if not isinstance(main, (bytes, bytearray)):
            raise TypeError(f"{type(serializer).__name__}.serialize returned {type(main).__name__}, not bytes")
        return PreparedPayload(PayloadFormat.SERIALIZER, bytes(main), [])
    buffers: list[memoryview] = []

    def keep(buffer: pickle.PickleBuffer) -> bool:
        buffers.append(buffer.raw())
        return False  # out-of-band

    main = serializer_dumps(_with_bytes_out_of_band(obj), buffer_callback=keep)
    return PreparedPayload(PayloadFormat.PICKLE, main, buffers)


# Values of these exact types are never large: a caller on a hot path skips prepare_if_large for them.
NEVER_LARGE_TYPES = frozenset({int, float, bool, complex, type(None)})
# Values of these exact types have no out-of-band buffers: the serializer's fast path is the whole story.
_NO_BUFFER_TYPES = NEVER_LARGE_TYPES | {str}


def prepare_if_large(obj: Any, serializer: Serializer | None, limit: int) -> bytes | PreparedPayload:
    """Serialize `obj` once: its serializer's bytes when they and its buffers together stay under `limit`
    (the control path), else a PreparedPayload for a store, its buffers out-of-band and not copied.

    The size is only known once serialized, so the default serializer pickles with its buffers kept
    aside; an object that has some but is small after all (a tiny array) is pickled again in-band.
    """
    if not _is_default(serializer):
        assert serializer is not None
        main = serializer.serialize(obj)
        if len(main) < limit:
            return main
        return PreparedPayload(PayloadFormat.SERIALIZER, bytes(main), [])
    kind = type(obj)
    if kind in _NO_BUFFER_TYPES or (kind is bytes and len(obj) < OUT_OF_BAND_BYTES_MIN):
        main = DefaultSerializer.serialize(obj)
        if len(main) < limit:
            return main
        return PreparedPayload(PayloadFormat.PICKLE, main, [])
    buffers: list[pickle.PickleBuffer] = []
    main = serializer_dumps(_with_bytes_out_of_band(obj), buffer_callback=buffers.append)
    if not buffers:
        if len(main) < limit:
            return main  # exactly what the serializer makes: nothing was taken out
        return PreparedPayload(PayloadFormat.PICKLE, main, [])
    views = [buffer.raw() for buffer in buffers]
    if len(main) + sum(view.nbytes for view in views) < limit:
        return DefaultSerializer.serialize(obj)
    return PreparedPayload(PayloadFormat.PICKLE, main, views)


def read_layout(buffer: Any, size: int | None = None) -> PayloadLayout:
    """The checked layout of the payload at the start of `buffer`; StoredPayloadError if it is not one.

    `size`: the payload's whole size, when `buffer` holds only its start (at least `head_bytes` of it)."""
    view = memoryview(buffer).cast("B")
    if size is None:
        size = view.nbytes
    if view.nbytes < HEADER_BYTES:
        raise StoredPayloadError(f"stored payload: {size} bytes is shorter than the {HEADER_BYTES}-byte header")
    magic, version, format_number, buffer_count, main_length, total_length = _HEADER.unpack_from(view, 0)
    if magic != MAGIC:
        raise StoredPayloadError("stored payload: bad magic (not a Scaler stored payload, or corrupted)")
    if version != VERSION:
        raise StoredPayloadError(f"stored payload: version {version}, this Scaler reads version {VERSION}")
    try:
        format = PayloadFormat(format_number)
    except ValueError:
        raise StoredPayloadError(f"stored payload: unknown format {format_number}") from None
    if total_length > size:
        raise StoredPayloadError(f"stored payload: claims {total_length:,} bytes, only {size:,} are there")
    main_offset = HEADER_BYTES + _BUFFER_ENTRY.size * buffer_count
    if main_offset + main_length > total_length:
        raise StoredPayloadError("stored payload: the header's lengths overrun the payload (corrupted)")
    if format is PayloadFormat.SERIALIZER and buffer_count:
        raise StoredPayloadError("stored payload: a custom serializer's payload has out-of-band buffers (corrupted)")
    if view.nbytes < main_offset:
        raise StoredPayloadError(f"stored payload: {view.nbytes:,} bytes do not hold its {main_offset:,}-byte table")
    buffers = []
    whole_bytes = []
    end = main_offset + main_length
    for index in range(buffer_count):
        marked_offset, length = _BUFFER_ENTRY.unpack_from(view, HEADER_BYTES + _BUFFER_ENTRY.size * index)
        offset = marked_offset & ~_WHOLE_BYTES_MARK
        if offset % BUFFER_ALIGNMENT or offset < end or offset + length > total_length:
            raise StoredPayloadError(f"stored payload: buffer {index} at {offset:,} (+{length:,}) is misplaced")
        buffers.append((offset, length))
        whole_bytes.append(bool(marked_offset & _WHOLE_BYTES_MARK))
        end = offset + length
    return PayloadLayout(
        format, main_offset, main_length, tuple(buffers), total_length, tuple(whole_bytes) if any(whole_bytes) else ()
    )


def table_end(head: Any) -> int:
    """Where the table of the payload whose start is `head` ends (header and table: what read_layout needs)."""
    view = memoryview(head).cast("B")
    if view.nbytes < HEADER_BYTES:
        return HEADER_BYTES
    buffer_count = _HEADER.unpack_from(view, 0)[3]
    return HEADER_BYTES + _BUFFER_ENTRY.size * buffer_count


# What a reader that does not map a payload reads of it first: header and table (up to 4,000 buffers), and
# most often the main part too.
HEAD_BYTES = 64 * 1024


class StoredBuffer:
    """A payload in the stored-payload layout: a result fetched from a store, mapped or received.
    `scaler.protocol.serializer.loads` reads it as such; it keeps its mapping alive while it lives."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer

    def load(self, serializer: Serializer) -> Any:
        return read(self.buffer, serializer)


def read(buffer: Any, serializer: Serializer | None = None) -> Any:
    """The object stored in `buffer`. With the default serializer, its out-of-band buffers (NumPy arrays)
    are views of `buffer`, which they keep alive; the caller must not reuse `buffer` while they live."""
    layout = read_layout(buffer)
    view = memoryview(buffer).cast("B")
    main = view[layout.main_offset: layout.main_offset + layout.main_length]
    return read_parts(layout, main, [view[offset: offset + length] for offset, length in layout.buffers], serializer)


def read_parts(layout: PayloadLayout, main: Any, buffers: list[Any], serializer: Serializer | None = None) -> Any:
    """The object whose main part and out-of-band buffers (in table order) were read apart: views of one
    mapping (`read`), or copies read out of a segment. A whole-bytes buffer given as a `bytes` object
    becomes the `bytes` argument itself, no copy more."""
    if layout.format is PayloadFormat.SERIALIZER:
        if _is_default(serializer):
            raise StoredPayloadError("stored payload: made by a custom serializer; read it with that serializer")
        assert serializer is not None
        return serializer.deserialize(bytes(main))
    if not _is_default(serializer):
        raise StoredPayloadError(
            f"stored payload: made by the default serializer (pickle), not {type(serializer).__name__}"
        )
    return pickle.loads(main, buffers=buffers)
