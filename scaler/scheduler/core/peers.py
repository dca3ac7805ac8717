"""What the scheduler core remembers about each connected client and worker, and about each task."""

from __future__ import annotations

import dataclasses

from scaler.protocol.messages import Buffer, Heartbeat, Role
from scaler.protocol.task_signature import TaskSignature


@dataclasses.dataclass(eq=False, slots=True)
class ClientPeer:
    identity: bytes
    name: str
    id_prefix: int
    last_seen: float
    # Unfinished tasks of this client, so that clear() and a disconnect find them without a scan.
    task_ids: set[int] = dataclasses.field(default_factory=set)
    object_ids: set[bytes] = dataclasses.field(default_factory=set)

    role = Role.CLIENT


@dataclasses.dataclass(eq=False, slots=True)
class WorkerPeer:
    identity: bytes
    name: str
    capacity: int
    last_seen: float
    # Insertion-ordered, so the oldest assigned task is first.
    assigned: dict[int, None] = dataclasses.field(default_factory=dict)
    known_object_ids: set[bytes] = dataclasses.field(default_factory=set)
    tasks_sent: int = 0
    last_heartbeat: Heartbeat | None = None

    role = Role.WORKER

    @property
    def free(self) -> int:
        return self.capacity - len(self.assigned)


@dataclasses.dataclass(eq=False, slots=True)
class TaskRecord:
    task_id: int
    client: ClientPeer
    signature: TaskSignature
    args: list[Buffer]
    worker: WorkerPeer | None = None
    # How many processors or workers died while running this task.
    crashes: int = 0
    # Held by a worker that died: nobody knows whether it was running, so before it runs again the worker
    # must report its start (TaskGroup.reportStart), which lets the next death be blamed on it exactly.
    suspect: bool = False
    # The death that made it a suspect is not blamed on it yet; it will be if a death is (see _remove_worker).
    blame_pending: bool = False
    # A suspect whose worker reported it started (TaskStarted) and which has not come back since.
    started: bool = False
    # Set once the task is finished for good while it may still sit in the unassigned queue.
    canceled: bool = False
    # The client asked to cancel it while a worker held it: if it comes back unfinished, it ends there.
    cancel_requested: bool = False
    # Graph tasks: how many argument slots still wait for another task's result (parked while > 0).
    waiting_on: int = 0
    # An intermediate graph node: its result feeds dependents and never goes to the client.
    quiet: bool = False
    # Argument slots holding object ids; the worker must hold those objects before it runs the task.
    object_slots: list[int] | None = None
