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
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scaler.scheduler.core.peer_registry import ClientPeer
    from scaler.scheduler.core.task_record import TaskRecord


class ClientLane:
    __slots__ = (
        "client", "depth", "levels", "priorities", "head", "fronts", "waiting", "step", "virtual", "in_turns",
    )

    def __init__(self, client: ClientPeer, depth: int) -> None:
        self.client = client
        self.depth = depth
        # The tasks of each priority in the order they leave, finished ones staying (canceled) until skipped;
        # keyed by the negated priority, so that the smallest key of the heap is the highest priority.
        self.levels: dict[int, collections.deque[TaskRecord]] = {}
        # Heap of the keys of the levels in `levels` (each once).
        self.priorities: list[int] = []
        # The level of the highest priority (levels[priorities[0]]), or None: what take() reads first.
        self.head: collections.deque[TaskRecord] | None = None
        # Per level, how many entries at its front were put there ahead of the others (given back), if any:
        # the rest are in the order they were queued, and so in the order of their `ready_since`.
        self.fronts: dict[int, int] = {}
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
            level = self.levels[key] = collections.deque()
            heapq.heappush(self.priorities, key)
            if self.priorities[0] == key:
                self.head = level
        if at_front:
            level.extendleft(reversed(records))
            self.fronts[key] = self.fronts.get(key, 0) + len(records)
        else:
            level.extend(records)
        self.waiting += len(records)

    def take(self, count: int, taken: list[TaskRecord]) -> int:
        """Move up to `count` unfinished tasks, highest priority first, onto `taken`; returns how many."""
        level = self.head
        if level is None:
            return 0
        got = 0
        while True:
            before = len(level)
            if count - got == 1:  # one free slot: no methods to bind
                while level:
                    record = level.popleft()
                    if not record.canceled:
                        taken.append(record)
                        got += 1
                        break
            else:
                popleft = level.popleft
                append = taken.append
                while level and got < count:
                    record = popleft()
                    if not record.canceled:
                        append(record)
                        got += 1
            if self.fronts:
                self._popped_from_front(self.priorities[0], before - len(level))
            if level:
                break
            level = self._drop_head()
            if level is None or got == count:
                break
        self.waiting -= got
        return got

    def _drop_head(self) -> collections.deque[TaskRecord] | None:
        """The highest level is empty: the next one becomes the head."""
        del self.levels[heapq.heappop(self.priorities)]
        self.head = self.levels[self.priorities[0]] if self.priorities else None
        return self.head

    def _popped_from_front(self, key: int, popped: int) -> None:
        front = self.fronts.get(key, 0) - popped
        if front > 0:
            self.fronts[key] = front
        else:
            self.fronts.pop(key, None)

    def clear(self) -> None:
        """Drop the levels: only finished tasks are left in them (`waiting` is 0)."""
        self.levels.clear()
        self.priorities.clear()
        self.fronts.clear()
        self.head = None

    def keep_only(self, keep: Callable[[TaskRecord], bool]) -> None:
        """Keep the unfinished tasks for which `keep(record)` is true, in their order (rare: it rebuilds)."""
        fronts: dict[int, int] = {}
        for key in list(self.levels):
            front = self.fronts.get(key, 0)
            kept: collections.deque[TaskRecord] = collections.deque()
            for index, record in enumerate(self.levels[key]):
                if not record.canceled and keep(record):
                    kept.append(record)
                    if index < front:
                        fronts[key] = fronts.get(key, 0) + 1
            if kept:
                self.levels[key] = kept
            else:
                del self.levels[key]
        self.fronts = fronts
        self.priorities[:] = sorted(self.levels)
        self.head = self.levels[self.priorities[0]] if self.priorities else None
        self.waiting = sum(len(level) for level in self.levels.values())

    def next_record(self) -> TaskRecord | None:
        """The entry at the head of the lane, or None: what its next tasks are like (function_pace.py). It may be a
        finished one that take() will skip: a look past thousands of canceled entries on every dispatch costs more
        than the guess it would improve."""
        level = self.head
        return level[0] if level else None

    def oldest_ready(self) -> float | None:
        """The earliest `ready_since` of its unfinished tasks, or None if it has none.

        Entries behind a level's front part are in queueing order, so only the front part and the first
        unfinished entry after it are read (and finished entries, which take() would skip anyway)."""
        oldest: float | None = None
        for key, level in self.levels.items():
            front = self.fronts.get(key, 0)
            for index, record in enumerate(level):
                if record.canceled:
                    continue
                if oldest is None or record.ready_since < oldest:
                    oldest = record.ready_since
                if index >= front:
                    break
        return oldest

    def records(self) -> list[TaskRecord]:
        """Its unfinished tasks in the order they would leave (for the tests and the invariants)."""
        return [
            record for key in sorted(self.levels) for record in self.levels[key] if not record.canceled
        ]
