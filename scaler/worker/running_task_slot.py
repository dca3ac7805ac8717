"""The running-task slot: sixteen bytes of a file, shared by an agent and one of its processors.

The first eight bytes are the processor's. It writes the id of each task there right before running it;
the agent reads it to know which task a processor runs without asking it (a processor that runs a task
does not read its socket). So when a processor dies, runs too long or grows too large, the agent blames
the task named there, and a cancel or release learns which named tasks have started. The slot keeps the
last task started: a task whose result the agent already has is no longer running, whatever it says.

The last eight bytes are the agent's: how many urgent messages (a cancel, a release or a request to
publish) it has sent the processor, written right before it signals the processor to read them during a
task. The signal can arrive before the message itself does, so the processor reads its socket until it
has handled that many (see ProcessorCore.read_enough), not merely until the socket is empty.

Both sides map the file into memory, so a read or a write is a memory access, not a system call.
"""

from __future__ import annotations

import mmap
import struct

# Task ids are never 0 (the scheduler's id prefixes start at 1): a new slot names no task.
NO_TASK = 0
_FORMAT = struct.Struct("<QQ")
_TASK = struct.Struct("<Q")
_URGENT_SENT_OFFSET = _TASK.size


def create_slot(path: str) -> None:
    """Make the slot file, naming no task and no urgent message; the agent does this before it starts the processor."""
    with open(path, "wb") as slot_file:
        slot_file.write(_FORMAT.pack(NO_TASK, 0))


class RunningTaskSlot:
    """One mapped slot, for the processor or for the agent: each writes only its own half."""

    def __init__(self, path: str) -> None:
        with open(path, "r+b") as slot_file:
            self._memory = mmap.mmap(slot_file.fileno(), _FORMAT.size, access=mmap.ACCESS_WRITE)

    def read(self) -> int:
        """The task the processor started last (NO_TASK: none yet)."""
        return _TASK.unpack_from(self._memory)[0]

    def write(self, task_id: int) -> None:
        """The processor: this task starts now."""
        _TASK.pack_into(self._memory, 0, task_id)

    def urgent_sent(self) -> int:
        """How many urgent messages the agent has sent the processor, as of its last signal."""
        return _TASK.unpack_from(self._memory, _URGENT_SENT_OFFSET)[0]

    def announce_urgent_sent(self, count: int) -> None:
        """The agent, before it signals: it has sent the processor this many urgent messages."""
        _TASK.pack_into(self._memory, _URGENT_SENT_OFFSET, count)

    def close(self) -> None:
        self._memory.close()
