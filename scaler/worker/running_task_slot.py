"""The running-task slot: eight bytes of a file, shared by an agent and one of its processors.

The processor writes the id of each task into its slot right before running it; the agent reads the
slot to know which task a processor runs without asking it (a processor that runs a task does not read
its socket). So when a processor dies, runs too long or grows too large, the agent blames the task
named there, and a cancel or release learns which named tasks have started. The slot keeps the last
task started: a task whose result the agent already has is no longer running, whatever the slot says.

Both sides map the file into memory, so a read or a write is a memory access, not a system call.
"""

from __future__ import annotations

import mmap
import struct

# Task ids are never 0 (the scheduler's id prefixes start at 1): a new slot names no task.
NO_TASK = 0
_FORMAT = struct.Struct("<Q")


def create_slot(path: str) -> None:
    """Make the slot file, naming no task; the agent does this before it starts the processor."""
    with open(path, "wb") as slot_file:
        slot_file.write(_FORMAT.pack(NO_TASK))


class RunningTaskSlot:
    """One mapped slot: `writable` for the processor that writes it, read-only for the agent."""

    def __init__(self, path: str, writable: bool = False) -> None:
        access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
        with open(path, "r+b" if writable else "rb") as slot_file:
            self._memory = mmap.mmap(slot_file.fileno(), _FORMAT.size, access=access)

    def read(self) -> int:
        return _FORMAT.unpack_from(self._memory)[0]

    def write(self, task_id: int) -> None:
        _FORMAT.pack_into(self._memory, 0, task_id)

    def close(self) -> None:
        self._memory.close()
