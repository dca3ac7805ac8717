"""The real memory and disk behind the store core's ids: a memfd segment per segment id, a spill file per
spilled object. The server asks this to make, fill, spill, read back and free them as the core's actions
say; the core never sees a descriptor.
"""

from __future__ import annotations

import logging
import resource
import tempfile

from scaler.protocol.messages import Buffer
from scaler.store.prefault import Prefaulter
from scaler.store.segment import Segment
from scaler.store.spill import SpillFile

logger = logging.getLogger(__name__)


class StoreMemory:
    def __init__(self, spill_directory: str | None) -> None:
        self.spill_directory = spill_directory or tempfile.gettempdir()
        self._segments: dict[int, Segment] = {}
        self._segment_ids_by_path: dict[str, int] = {}
        self._spill_files: dict[bytes, SpillFile] = {}
        self._prefaulter: Prefaulter | None = None

    def start(self) -> None:
        """Allow a descriptor per segment and spill file; start the thread that makes spare segments' pages."""
        _raise_open_file_limit()
        self._prefaulter = Prefaulter()

    def create(self, segment_id: int, capacity: int, prefault: bool) -> None:
        segment = Segment.create(capacity)
        self._segments[segment_id] = segment
        self._segment_ids_by_path[segment.path] = segment_id
        if prefault and self._prefaulter is not None:
            self._prefaulter.prefault(segment.fd, segment.capacity)

    def destroy(self, segment_id: int) -> None:
        segment = self._segments.pop(segment_id)
        self._segment_ids_by_path.pop(segment.path, None)
        segment.close()

    def segment(self, segment_id: int) -> Segment:
        return self._segments[segment_id]

    def segment_id_at(self, path: str) -> int | None:
        """The id of the segment a writer names by its path (None: no segment of ours)."""
        return self._segment_ids_by_path.get(path)

    def write(self, segment_id: int, payload: list[Buffer]) -> None:
        """Copy a payload that came as frames into the segment."""
        with memoryview(self._segments[segment_id].mapping()) as view:
            offset = 0
            for piece in payload:
                view[offset: offset + len(piece)] = piece
                offset += len(piece)

    def spill(self, object_id: bytes, segment_id: int, size: int) -> None:
        """Write the segment's first `size` bytes to a spill file, then free the segment. SpillError: the
        segment is kept."""
        self._spill_files[object_id] = SpillFile.write(self._segments[segment_id], size, self.spill_directory)
        self.destroy(segment_id)

    def read_back(self, object_id: bytes, segment_id: int) -> None:
        """Copy the object's spill file into the segment and drop the file (also when that fails: SpillError)."""
        spill_file = self._spill_files.pop(object_id)
        try:
            spill_file.read_into(self._segments[segment_id])
        finally:
            spill_file.close()

    def drop_spill(self, object_id: bytes) -> None:
        dropped = self._spill_files.pop(object_id, None)
        if dropped is not None:
            dropped.close()

    def close(self) -> None:
        if self._prefaulter is not None:
            self._prefaulter.close()
        for segment in self._segments.values():
            segment.close()
        self._segments.clear()
        self._segment_ids_by_path.clear()
        for spill_file in self._spill_files.values():
            spill_file.close()
        self._spill_files.clear()


def _raise_open_file_limit() -> None:
    """Every segment and every spill file is a descriptor: a store of thousands of objects needs them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            logger.warning(f"Store: cannot raise the open file limit from {soft}: it holds one file per object")
