"""What the processor's core (processor_core.py) tells its shell (processor.py) to do.

Every event of the core returns a list of these, carried out by the shell in order. Most are messages to
the agent; the others touch what only the shell holds: the task's code, the socket's wait, the values of
stored objects and the worker's stores.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence, Union

from scaler.protocol import messages as m

# A task the processor holds: its id, its group (shared by every task of it), its row in the group, and which of its
# argument slots hold object ids (None: none). A plain tuple: one is made per task, on the hot path.
QueuedTask = tuple[int, m.TaskGroup, int, Union[list[int], None]]


@dataclasses.dataclass(slots=True)
class ToAgent:
    """Send this message to the agent."""

    message: m.Message


@dataclasses.dataclass(slots=True)
class RunTask:
    """Run this task now; its end is the core's next event (ProcessorCore.on_task_ended)."""

    task: QueuedTask


@dataclasses.dataclass(slots=True)
class WaitForMessages:
    """Nothing may run now: wait at most this long for the agent's next message, then ask the core again (a tick if
    none came)."""

    seconds: float


@dataclasses.dataclass(slots=True)
class KeepObjects:
    """Objects a submission brought (functions, serializers, small arguments): keep them for its tasks."""

    objects: list[m.ObjectPayload]


@dataclasses.dataclass(slots=True)
class ForgetObjects:
    """The scheduler freed these objects: drop their values, and the functions and serializers made of them."""

    object_ids: list[bytes]


@dataclasses.dataclass(slots=True)
class PublishResults:
    """Write into the store these large results made here and kept unwritten (None: all of them)."""

    object_ids: list[bytes] | None


@dataclasses.dataclass(slots=True)
class SetStoreDirectory:
    """The stores of the cluster changed (or are known for the first time)."""

    directory: m.StoreDirectory


@dataclasses.dataclass(slots=True)
class RefuseWait:
    """The running task may not wait on nested tasks: its wait raises NestingLimitError with this reason."""

    reason: str


@dataclasses.dataclass(slots=True)
class GiveBackMemory:
    """Idle a while after work: return to the system the freed memory malloc keeps for reuse (malloc_tuning.py)."""


Action = Union[
    ToAgent, RunTask, WaitForMessages, KeepObjects, ForgetObjects, PublishResults, SetStoreDirectory, RefuseWait,
    GiveBackMemory,
]
# What an event returns: the actions in order (often none: an empty tuple, shared, costs nothing to return).
Actions = Sequence[Action]
