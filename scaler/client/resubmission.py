"""What a client sent and has not seen finished, kept so that it can send it again to a restarted scheduler.

When the scheduler at the client's address no longer knows it (a restart), the client says hello again,
keeps its id prefix, and sends again, under the same ids (PROTOCOL.md §4, "Resuming after a restart"):

1. the objects it owns and has not deleted (functions, serializers, `send_object` values, shared arguments),
   as it last sent them: a stored object names its store again, whose bytes the store still holds (the store
   re-announces them; one whose store died too is asked for again through resendObjects, §18);
2. its tasks whose outcome has not arrived, in the order they were first sent, each as it was sent: the
   batches that carried them, cut to the rows still waiting;
3. each graph with a future still waiting, whole, as it was first sent. Whole, because the client cannot
   know which of its quiet (intermediate) tasks finished: their outcomes never reach it, and the scheduler
   rejects an edge to a task it does not know, so only the whole graph is self-contained. Its tasks whose
   results a worker still holds complete from those without running again (the scheduler's intake); the
   others run again, and an outcome of a task whose future is done already is dropped, not delivered twice.

Objects go first, so every task finds the objects it names. Owned by the connection core's thread.

Cheap on the hot path: a batch (one submit, or a chunk of a map) costs one list append when it leaves, and
nothing when its results come. Batches whose tasks all have their outcome are let go in bulk, whenever the
list has doubled since the last look, so each look's cost is paid for by the batches added since, and the
list holds at most about twice the batches that still wait (a batch's memory goes with the last of its tasks).
"""

from __future__ import annotations

import itertools
from typing import Iterable, KeysView

from scaler.client.connection_actions import GraphRequest
from scaler.client.outbox import OutboxItem, TaskBatch
from scaler.client.result_routing import PendingResults
from scaler.protocol import messages as m

# Batches added before the first look at which are finished: a few looks at a short list cost nothing.
_MIN_PRUNE = 64


class SentRecords:
    def __init__(self) -> None:
        # By object id, in the order first sent: a store that lost one makes the client send a new payload
        # for the same id (resendObjects), which replaces it here.
        self._objects: dict[bytes, m.ObjectPayload] = {}
        # The connection core appends every batch that carries tasks with a sink, then calls `after_batches`.
        self.batches: list[TaskBatch] = []
        self._prune_batches_at = _MIN_PRUNE
        # A graph's submission and its futures' task ids: not the futures, which go when their callers let go.
        self._graphs: dict[int, tuple[m.TaskSubmission, tuple[int, ...]]] = {}
        self._graph_keys = itertools.count()
        self._graphs_at_last_prune = 0

    def __len__(self) -> int:
        return len(self._objects) + len(self.batches) + len(self._graphs)

    def after_batches(self, pending: PendingResults) -> None:
        """Batches were appended: let finished ones go if the list has doubled since the last look."""
        if len(self.batches) >= self._prune_batches_at:
            self._prune_batches(pending)

    def note_object(self, payload: m.ObjectPayload) -> None:
        self._objects[bytes(payload.object_id)] = payload

    def forget_objects(self, object_ids: Iterable[bytes]) -> None:
        objects = self._objects
        for object_id in object_ids:
            objects.pop(bytes(object_id), None)

    def forget_all_objects(self) -> None:
        self._objects.clear()

    def note_graph(self, request: GraphRequest, pending: PendingResults) -> None:
        self._graphs[next(self._graph_keys)] = (request.submission, tuple(request.futures))
        # A graph is let go once none of its futures waits; checked when the records doubled since the
        # last look, so the look costs a constant per graph.
        if len(self._graphs) >= 2 * self._graphs_at_last_prune + 8:
            self._prune_graphs(pending)

    def is_graph_submission(self, item: object) -> bool:
        return any(submission is item for submission, _ in self._graphs.values())

    def unfinished(self, pending: PendingResults) -> list[OutboxItem]:
        """What to send again, in order: the objects, then tasks still waiting, then graphs still waiting."""
        self._prune_batches(pending)
        self._prune_graphs(pending)
        waiting = pending.task_ids
        items: list[OutboxItem] = list(self._objects.values())
        items.extend(_waiting_rows(batch, waiting) for batch in self.batches)
        items.extend(submission for submission, _ in self._graphs.values())
        return items

    def _prune_batches(self, pending: PendingResults) -> None:
        waiting = pending.task_ids
        self.batches = [batch for batch in self.batches if not waiting.isdisjoint(batch.task_ids)]
        self._prune_batches_at = 2 * len(self.batches) + _MIN_PRUNE

    def _prune_graphs(self, pending: PendingResults) -> None:
        finished = [
            key for key, (_, task_ids) in self._graphs.items()
            if not any(pending.expects(task_id) for task_id in task_ids)
        ]
        for key in finished:
            del self._graphs[key]
        self._graphs_at_last_prune = len(self._graphs)


def without_resent(outbox: Iterable[OutboxItem], records: SentRecords) -> list[OutboxItem]:
    """What callers queued during the outage that `SentRecords.unfinished` does not send already."""
    kept: list[OutboxItem] = []
    for item in outbox:
        if isinstance(item, TaskBatch) and item.sink is not None:
            continue
        if isinstance(item, m.ObjectPayload) or records.is_graph_submission(item):
            continue
        kept.append(item)
    return kept


def _waiting_rows(batch: TaskBatch, waiting: KeysView[int]) -> TaskBatch:
    """`batch` itself if all its tasks still wait, else a batch of those that do, with their arguments."""
    rows = [row for row, task_id in enumerate(batch.task_ids) if task_id in waiting]
    if len(rows) == len(batch.task_ids):
        return batch
    width = batch.signature.args_per_task
    objects = set(batch.object_positions)
    args: list[bytes] = []
    object_positions: list[int] = []
    for row in rows:
        for column in range(row * width, (row + 1) * width):
            if column in objects:
                object_positions.append(len(args))
            args.append(batch.args[column])
    return TaskBatch(
        batch.signature, [batch.task_ids[row] for row in rows], args, object_positions, m.inline_bytes(args),
        batch.sink,
    )
