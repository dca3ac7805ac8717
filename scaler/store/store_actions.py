"""What the store's core asks its I/O shell to do (the actions), and who asked (requesters, readers).

store_core.py returns these; server.py carries them out in the order given.
"""

from __future__ import annotations

import dataclasses
from typing import Union

from scaler.protocol import data_messages as d


@dataclasses.dataclass(frozen=True)
class Requester:
    """Who asked: where the answer goes (a routing key the shell chose, opaque here) and the request id."""

    peer: bytes
    request_id: int


ReaderId = tuple[str, int]  # ("process", pid): a local reader's mapping; ("transfer", n): a send in flight


def process_reader(pid: int) -> ReaderId:
    return ("process", pid)


def transfer_reader(transfer: int) -> ReaderId:
    return ("transfer", transfer)


# ---------------------------------------------------------------------------------------------- actions


@dataclasses.dataclass(frozen=True)
class CreateSegment:
    """Make a segment of `capacity` bytes, numbered `segment_id`."""

    segment_id: int
    capacity: int
    # A spare for the next writer: its pages are made now, off the writers' path (the shell does it in the
    # background); a writer that gets it before they are all made simply makes the rest.
    prefault: bool = False


@dataclasses.dataclass(frozen=True)
class DestroySegment:
    """Give the segment up: its memory is freed once no other process has it open or mapped."""

    segment_id: int


@dataclasses.dataclass(frozen=True)
class SpillObject:
    """Write the segment's first `size` bytes to a spill file kept for the object, then free the segment.
    If that fails: keep the segment and report `on_spill_failed`."""

    object_id: bytes
    segment_id: int
    size: int


@dataclasses.dataclass(frozen=True)
class ReadBack:
    """Copy the object's spill file into the segment and drop the file; then report `on_read_back_done`."""

    object_id: bytes
    segment_id: int


@dataclasses.dataclass(frozen=True)
class DropSpill:
    """Delete the spill file kept for the object: the object was deleted."""

    object_id: bytes


@dataclasses.dataclass(frozen=True)
class WritePayload:
    """Copy the payload of the message being handled (a put, or a fetched object) into the segment."""

    segment_id: int
    size: int


@dataclasses.dataclass(frozen=True)
class Fetch:
    """Ask the store at `holder` for the object; then report `on_fetched` or `on_fetch_failed`."""

    object_id: bytes
    holder: str
    wait_ms: int


@dataclasses.dataclass(frozen=True)
class GrantSegment:
    """Reply `segment` with the segment's path: the writer maps it and seals it."""

    to: Requester
    segment_id: int
    size: int


@dataclasses.dataclass(frozen=True)
class Locate:
    """Reply `located` with the segment's path (the reader has it pinned)."""

    to: Requester
    object_id: bytes
    segment_id: int
    size: int


@dataclasses.dataclass(frozen=True)
class SendObject:
    """Reply `object` with the segment's first `size` bytes as a payload frame; report `on_transfer_done`
    once zmq no longer reads the segment."""

    to: Requester
    object_id: bytes
    segment_id: int
    size: int
    transfer: int
    max_frame_bytes: int = 0  # 0: one frame


@dataclasses.dataclass(frozen=True)
class SendBorrowed:
    """Read a borrowed object out of its lender's memory and send it as SendObject would; if that fails,
    answer `missing` and report `on_loan_broken`."""

    to: Requester
    object_id: bytes
    size: int
    loan: d.MemoryLoan
    max_frame_bytes: int = 0


@dataclasses.dataclass(frozen=True)
class Reply:
    """Send `message` (data protocol) to the requester."""

    to: Requester
    message: d.DataMessage


@dataclasses.dataclass(frozen=True)
class WatchProcess:
    """Report `on_process_gone` when this local process exits."""

    pid: int


@dataclasses.dataclass(frozen=True)
class UnwatchProcess:
    """Stop watching this local process: it holds nothing of the store's any more."""

    pid: int


@dataclasses.dataclass(frozen=True)
class ReportHeld:
    """For the scheduler: this store now holds these objects (object id, size)."""

    objects: tuple[tuple[bytes, int], ...]


@dataclasses.dataclass(frozen=True)
class ReportLost:
    """For the scheduler: this store no longer has these objects, though it was not told to delete them."""

    object_ids: tuple[bytes, ...]


Action = Union[
    CreateSegment, DestroySegment, SpillObject, ReadBack, DropSpill, WritePayload, Fetch, GrantSegment, Locate,
    SendObject, SendBorrowed, Reply, WatchProcess, UnwatchProcess, ReportHeld, ReportLost,
]
