"""When tasks submitted with a wait limit for their tags (TaskGroup.waitForTagsMs) are due to be looked at.

One entry per submitted group, not per task. At its deadline the core fails those of the group's tasks
that no worker holds yet, if no connected worker has the tags then (scheduler_core.py); if one has, the
tasks simply wait their turn as any other task.
"""

from __future__ import annotations

import heapq
import itertools

from scaler.scheduler.core.ready_queue import Tags


class TagWaits:
    def __init__(self) -> None:
        # (deadline, tie-break, tags, task ids): the tie-break keeps heapq from ever comparing tag sets.
        self._deadlines: list[tuple[float, int, Tags, list[int]]] = []
        self._sequence = itertools.count()

    def __len__(self) -> int:
        return len(self._deadlines)

    def add(self, deadline: float, tags: Tags, task_ids: list[int]) -> None:
        heapq.heappush(self._deadlines, (deadline, next(self._sequence), tags, list(task_ids)))

    def due(self, now: float) -> list[tuple[Tags, list[int]]]:
        """The groups whose deadline has come, removed from the list."""
        deadlines = self._deadlines
        due = []
        while deadlines and deadlines[0][0] <= now:
            _, _, tags, task_ids = heapq.heappop(deadlines)
            due.append((tags, task_ids))
        return due
