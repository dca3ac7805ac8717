"""One client's ready tasks of one tag set and one nesting depth, highest priority first.

Tasks of equal priority leave in the order they came (first in, first out), except those a worker gave
back (released, balanced, or its worker died): they go back ahead of their equals, as they were ahead
of them before. Each priority level is a deque and the lane keeps a heap of the distinct levels only, so
a client whose tasks all have priority 0 (the usual case) costs a deque popleft per task taken, as one
first-in-first-out queue did.
"""

from __future__ import annotations

import collections
import heapq
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scaler.scheduler.core.peer_registry import ClientPeer
    from scaler.scheduler.core.task_record import TaskRecord


class Level(collections.deque):  # type: ignore[type-arg]
    """The tasks of one priority, in the order they leave; finished ones stay (canceled) until skipped."""

    __slots__ = ("front",)

    def __init__(self) -> None:
        super().__init__()
        # How many entries at the front were put there ahead of the others (given back): the rest are in the
        # order they were queued, and so in the order of their `ready_since`.
        self.front = 0


class ClientLane:
    __slots__ = ("client", "depth", "levels", "priorities", "waiting", "step", "virtual", "in_turns")

    def __init__(self, client: ClientPeer, depth: int) -> None:
        self.client = client
        self.depth = depth
        # Keyed by the negated priority, so that the smallest key of the heap is the highest priority.
        self.levels: dict[int, Level] = {}
        # Heap of the keys of the levels in `levels` (each once).
        self.priorities: list[int] = []
        # The unfinished tasks in the levels.
        self.waiting = 0
        # ready_queue.py's fair share: how far one task moves the lane's virtual time (1 / share).
        share = client.share
        self.step = 1.0 / share if 0.0 < share < math.inf else 1.0
        self.virtual = 0.0
        # Whether the lane has an entry in its ReadyQueue's turns.
        self.in_turns = False

    def put(self, priority: int, records: list[TaskRecord], at_front: bool) -> None:
        """Queue tasks of one priority at the back of their level, or ahead of it keeping their own order."""
        key = -priority
        level = self.levels.get(key)
        if level is None:
            level = self.levels[key] = Level()
            heapq.heappush(self.priorities, key)
        if at_front:
            level.extendleft(reversed(records))
            level.front += len(records)
        else:
            level.extend(records)
        self.waiting += len(records)

    def take(self, count: int, taken: list[TaskRecord]) -> int:
        """Move up to `count` unfinished tasks, highest priority first, onto `taken`; returns how many."""
        got = 0
        levels = self.levels
        priorities = self.priorities
        while priorities:
            key = priorities[0]
            level = levels[key]
            before = len(level)
            while level and got < count:
                record = level.popleft()
                if not record.canceled:
                    taken.append(record)
                    got += 1
            if level.front:
                level.front = max(0, level.front - (before - len(level)))
            if level:
                break
            heapq.heappop(priorities)
            del levels[key]
            if got == count:
                break
        self.waiting -= got
        return got

    def clear(self) -> None:
        """Drop the levels: only finished tasks are left in them (`waiting` is 0)."""
        self.levels.clear()
        self.priorities.clear()

    def keep_only(self, keep: object) -> None:
        """Keep the unfinished tasks for which `keep(record)` is true, in their order (rare: it rebuilds)."""
        for key in list(self.levels):
            level = self.levels[key]
            rebuilt = Level()
            front = level.front
            for index, record in enumerate(level):
                if not record.canceled and keep(record):  # type: ignore[operator]
                    rebuilt.append(record)
                    if index < front:
                        rebuilt.front += 1
            if rebuilt:
                self.levels[key] = rebuilt
            else:
                del self.levels[key]
        self.priorities[:] = sorted(self.levels)
        self.waiting = sum(len(level) for level in self.levels.values())

    def oldest_ready(self) -> float | None:
        """The earliest `ready_since` of its unfinished tasks, or None if it has none.

        Entries behind a level's front part are in queueing order, so only the front part and the first
        unfinished entry after it are read (and finished entries, which take() would skip anyway)."""
        oldest: float | None = None
        for level in self.levels.values():
            for index, record in enumerate(level):
                if record.canceled:
                    continue
                if oldest is None or record.ready_since < oldest:
                    oldest = record.ready_since
                if index >= level.front:
                    break
        return oldest

    def records(self) -> list[TaskRecord]:
        """Its unfinished tasks in the order they would leave (for the tests and the invariants)."""
        return [
            record for key in sorted(self.levels) for record in self.levels[key] if not record.canceled
        ]
