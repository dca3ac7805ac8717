"""What the core remembers about one unfinished task. Each field names the part of the core that keeps it."""

from __future__ import annotations

import dataclasses

from scaler.protocol.messages import Buffer
from scaler.protocol.task_signature import TaskSignature
from scaler.scheduler.core.peer_registry import ClientPeer, WorkerPeer

# The signature of a task a worker re-announced after a scheduler restart (rejoin.py) that its client has not
# submitted again: only its id is known here, so it can run nowhere but where it is.
REANNOUNCED = TaskSignature(function_id=b"", args_per_task=0)


@dataclasses.dataclass(eq=False, slots=True)
class TaskRecord:
    task_id: int
    client: ClientPeer
    # Shared by the tasks of one submitted group.
    signature: TaskSignature
    args: list[Buffer]
    # The worker holding it (task_table.py); None while it waits in the queue or on its dependencies.
    worker: WorkerPeer | None = None
    # crash_blame.py: how many processors or workers died while running it.
    crashes: int = 0
    # crash_blame.py: held by a worker that died, so maybe running then; its next worker must report its
    # start (TaskGroup.reportStart), which lets the next death be blamed on it exactly.
    suspect: bool = False
    # crash_blame.py: the death that made it a suspect is not blamed on it yet; it will be if another is.
    blame_pending: bool = False
    # crash_blame.py: a suspect whose worker reported it started (TaskStarted), and which has not come back since.
    started: bool = False
    # task_table.py: finished for good while it may still sit in the ready queue, which then skips it.
    canceled: bool = False
    # cancellation.py: its client asked to cancel it while a worker held it; if it comes back unfinished, it
    # ends there.
    cancel_requested: bool = False
    # task_graph.py: how many argument slots still wait for another task's result (parked while > 0).
    waiting_on: int = 0
    # An intermediate graph node: its result feeds dependents and never goes to the client.
    quiet: bool = False
    # Argument slots holding object ids; the worker must hold those objects before it runs the task.
    object_slots: list[int] | None = None
    # Higher runs first among its client's ready tasks (client_lane.py); equal ones in submission order.
    priority: int = 0
    # task_table.py: the `now` it was last queued at, for how long a client's oldest ready task has waited.
    ready_since: float = 0.0
    # Stored results it received through graph edges: their use by this task ends when it does (object_table.py).
    result_objects: list[bytes] | None = None
