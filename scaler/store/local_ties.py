"""What ties a store to each process: what it pinned, the segments lent to it to write, the objects it lent.

A reader pins the segments it maps (a local process) or that zmq reads from (a transfer); a pinned segment
is never reused, spilled or freed. A local writer is lent segments until it seals them, and may lend the
store objects that stay in its own memory. While any of these ties a local process to the store, the store
watches it: when it exits, its pins, unsealed segments and lent objects go (store_core.py decides how).
"""

from __future__ import annotations

from scaler.store.store_actions import ReaderId, process_reader


class LocalTies:
    def __init__(self) -> None:
        self._pins: dict[ReaderId, dict[bytes, list[int]]] = {}  # reader -> object id -> segment ids
        self._loans: dict[int, int] = {}  # pid -> segments lent to it that it has not sealed
        self._lent: dict[int, set[bytes]] = {}  # pid -> objects it lent this store (in its memory)

    def ties(self, pid: int) -> bool:
        """Whether the store watches this process: it has segments mapped or lent to it, or lent us objects."""
        return process_reader(pid) in self._pins or pid in self._loans or pid in self._lent

    # ------------------------------------------------------------------------------------------ pins

    def pinned_by(self, reader: ReaderId) -> list[tuple[bytes, int]]:
        """What the reader has pinned: (object id, how many times)."""
        return [(object_id, len(segment_ids)) for object_id, segment_ids in self._pins.get(reader, {}).items()]

    def pin(self, reader: ReaderId, object_id: bytes, segment_id: int) -> None:
        self._pins.setdefault(reader, {}).setdefault(object_id, []).append(segment_id)

    def unpin(self, reader: ReaderId, object_id: bytes) -> int | None:
        """The segment of one pin of this object by this reader, or None if it has none (a release sent
        twice, or after its process was reported gone)."""
        by_object = self._pins.get(reader)
        if not by_object or object_id not in by_object:
            return None
        segment_ids = by_object[object_id]
        segment_id = segment_ids.pop()
        if not segment_ids:
            del by_object[object_id]
            if not by_object:
                del self._pins[reader]
        return segment_id

    # ------------------------------------------------------------------------------------------ writers

    def lend_segment(self, pid: int) -> None:
        self._loans[pid] = self._loans.get(pid, 0) + 1

    def segment_sealed(self, pid: int) -> None:
        left = self._loans.get(pid, 0) - 1
        if left > 0:
            self._loans[pid] = left
        else:
            self._loans.pop(pid, None)

    def borrow(self, pid: int, object_id: bytes) -> None:
        self._lent.setdefault(pid, set()).add(object_id)

    def unborrow(self, pid: int, object_id: bytes) -> None:
        lent = self._lent.get(pid)
        if lent is not None:
            lent.discard(object_id)
            if not lent:
                del self._lent[pid]

    def writer_gone(self, pid: int) -> set[bytes]:
        """The process exited: its unsealed segments are no longer lent; returns the objects it had lent."""
        self._loans.pop(pid, None)
        return set(self._lent.get(pid, ()))
