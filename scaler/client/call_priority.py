"""The priority a call's tasks get: the one given, else the priority of the task the call runs in, else 0.

Inheriting keeps nested work in its parent's order: tasks that a priority-10 task submits and waits for
are themselves of priority 10 unless the caller says otherwise, so they are not ordered behind the queued
priority-0 work of the same client (a client shared by the tasks of one worker process).
"""

from __future__ import annotations

from typing import Any, Hashable, Mapping

from scaler.protocol.sharing import checked_priority
from scaler.utility.blocking import running_task_priority


def call_priority(priority: Any, where: str) -> int:
    """The checked priority (TypeError, ValueError naming `where`), or the inherited one when None."""
    if priority is None:
        return running_task_priority()
    return checked_priority(priority, where)


def checked_key_priorities(priorities: Any, where: str) -> dict[Hashable, int]:
    """Per-key priorities of a graph, each checked; TypeError unless a mapping of key -> int."""
    if priorities is None:
        return {}
    if not isinstance(priorities, Mapping):
        raise TypeError(f"{where}: priorities must map graph keys to ints, got {type(priorities).__name__}")
    return {key: checked_priority(value, f"{where}, key {key!r}") for key, value in priorities.items()}
