"""Reading an object out of a segment of a store on this host: copied out, or mapped.

An object whose out-of-band buffers are all whole `bytes` (or that has none: a custom serializer's
payload, a pickle of plain Python objects) is copied out with pread, each `bytes` straight into its new
object, and the segment is let go at once. Mapping it would cost a page table entry per page, made and
torn down for nothing: a `bytes` object owns its memory, so its bytes are copied out of the mapping anyway
(50 MB: 5 ms of copying, 6 ms of mapping and unmapping). Anything else (NumPy arrays) is mapped privately,
so that its arrays are views of the mapping (segment.py), and let go when the mapping is gone.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Callable

from scaler.protocol import stored_payload
from scaler.protocol.serializer import Serializer
from scaler.store.segment import map_descriptor_for_reading, open_for_reading, read_copy


def read_segment(path: str, size: int, serializer: Serializer | None, let_go: Callable[[], None]) -> Any:
    """The object stored in the first `size` bytes of the segment at `path`. `let_go` is called once the
    segment is no longer needed: at once when the object was copied out, else when its mapping is gone."""
    try:
        fd = open_for_reading(path)
    except OSError:
        let_go()
        raise
    mapping = None
    try:
        head = read_copy(fd, min(size, stored_payload.HEAD_BYTES), 0)
        table_end = stored_payload.table_end(head)
        if len(head) < table_end <= size:
            head = read_copy(fd, table_end, 0)
        layout = stored_payload.read_layout(head, size)
        if layout.only_whole_bytes:
            main_end = layout.main_offset + layout.main_length
            main: Any = (
                memoryview(head)[layout.main_offset: main_end] if main_end <= len(head)
                else read_copy(fd, layout.main_length, layout.main_offset)
            )
            buffers = [read_copy(fd, length, offset) for offset, length in layout.buffers]
        else:
            mapping = map_descriptor_for_reading(fd, size)
    except BaseException:
        let_go()
        raise
    finally:
        os.close(fd)
    if mapping is None:
        let_go()
        return stored_payload.read_parts(layout, main, buffers, serializer)
    unmapped = weakref.finalize(mapping, let_go)
    unmapped.atexit = False  # at exit the store takes the pins back itself; no I/O while Python shuts down
    return stored_payload.read(mapping, serializer)
