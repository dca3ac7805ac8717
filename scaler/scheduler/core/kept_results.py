"""Kept results: the outcomes of tasks submitted with keepResults, held for their client (PROTOCOL.md §7).

A kept success is an object in object_table.py like any other, owned by the client: a stored result as the
worker reported it, a small one under `kept_result_id(task_id)` with its payload. What this adds is the way
back from the finished task's id to that object, so that a later group of the same client may name the task
in refTaskIds after it finished (the client cannot know whether it has), and the failures of kept tasks,
which their later dependents share. An entry goes when its object is freed (the client deleted it, cleared
or left); a kept failure when the client deletes `kept_result_id(task_id)`, clears or leaves.
"""

from __future__ import annotations

import dataclasses

from scaler.protocol import messages as m


@dataclasses.dataclass(slots=True)
class KeptFailure:
    client_identity: bytes
    failure: m.TaskFailure


class KeptResults:
    def __init__(self) -> None:
        # Finished kept task id -> the object holding its result (its client owns it).
        self.objects: dict[int, bytes] = {}
        # Failed kept task id -> its failure, until its client deletes it.
        self.failures: dict[int, KeptFailure] = {}

    def __bool__(self) -> bool:
        return bool(self.objects or self.failures)

    def keep_failure(self, client_identity: bytes, failure: m.TaskFailure) -> None:
        self.failures[failure.task_id] = KeptFailure(client_identity, failure)

    def failure_of(self, client_identity: bytes, task_id: int) -> m.TaskFailure | None:
        kept = self.failures.get(task_id)
        return kept.failure if kept is not None and kept.client_identity == client_identity else None

    def drop_failure(self, client_identity: bytes, task_id: int) -> None:
        kept = self.failures.get(task_id)
        if kept is not None and kept.client_identity == client_identity:
            del self.failures[task_id]

    def drop_client(self, client_identity: bytes) -> None:
        """The client cleared or left: its kept failures go (its kept objects go with its objects)."""
        if self.failures:
            self.failures = {
                task_id: kept for task_id, kept in self.failures.items() if kept.client_identity != client_identity
            }
