"""The tasks ready to run that one set of required worker tags (TaskGroup.requiredTags) shares, and whose
turn it is: free slots go to the clients in turn, in proportion to their shares.

The task table keeps one ReadyQueue per tag set, so that dispatch hands each queue only to the workers
whose tags include the set, and a queue no connected worker can serve waits whole without holding up
the others. The empty set (any worker) is just another queue: an untagged task costs one dict lookup.

Inside a queue each client has a lane per nesting depth (client_lane.py: its tasks by priority, then in
order). Which lane gives the next task:

- **Deeper first.** A lane of nested tasks (`nestingDepth` d > 0) is served before every lane of a
  smaller depth, whichever client it belongs to: a task waiting on nested tasks holds a processor, and
  the nested tasks come from the client inside that task, not from its parent's client. So nested tasks
  never queue behind their parents' siblings (or anyone's), and a recursion never deadlocks. A client
  that claims a depth it does not have gets the same precedence: the depth is trusted, as it was.
- **Fair share among the lanes of one depth** (start-time fair queueing): each lane has a virtual time
  that moves by 1 / share per task taken (`ClientPeer.share`, 1.0 by default), and the lane with the
  smallest virtual time gives the next task, so that over any stretch where several clients have ready
  tasks, client i gets about N * share_i / sum(shares) of N slots, leftovers rotating from round to
  round. A lane that had nothing ready and gets tasks starts at the virtual time of the last task
  served, and wins a tie: a client's first task leaves at the next free slot however much another
  client has queued, and a client cannot save up turns by staying idle (it gains at most one task).
- A lane that is alone at its depth is served without any of that: a single client with all priorities
  equal costs a deque popleft per task, as one first-in-first-out queue did.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from scaler.scheduler.core.client_lane import ClientLane

if TYPE_CHECKING:
    from scaler.scheduler.core.peer_registry import ClientPeer
    from scaler.scheduler.core.task_record import TaskRecord

# Sorted and without repeats, so that equal sets are equal keys, and ready to go on the wire as they are.
Tags = tuple[str, ...]
NO_TAGS: Tags = ()

# (-depth, virtual time, tie-break, lane): the smallest is served next. The tie-break is unique, so tuples
# never compare lanes: a lane that just got tasks has the newest negative one (it wins ties), a lane put
# back after its turn the newest positive one (it loses them, so equal lanes alternate).
_Turn = tuple[int, float, int, ClientLane]


class ReadyQueue:
    __slots__ = ("tags", "lanes", "turns", "waiting", "_virtual", "_turn_count")

    def __init__(self, tags: Tags) -> None:
        self.tags = tags
        # Each client's lane per nesting depth; a lane stays until its client's tasks are dropped.
        self.lanes: dict[tuple[ClientPeer, int], ClientLane] = {}
        # Heap of the lanes with tasks (and some whose tasks all ended since, skipped when on top).
        self.turns: list[_Turn] = []
        # The unfinished tasks in all lanes.
        self.waiting = 0
        # Per depth: the virtual time of the last turn taken among several lanes of that depth.
        self._virtual: dict[int, float] = {}
        self._turn_count = 0

    def put(self, client: ClientPeer, depth: int, priority: int, records: list[TaskRecord], at_front: bool) -> None:
        """Queue tasks of one client, depth and priority (client_lane.py says where in the lane)."""
        key = (client, depth)
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = ClientLane(client, depth)
        was_idle = lane.waiting == 0
        lane.put(priority, records, at_front)
        self.waiting += len(records)
        client.tasks_queued += len(records)
        if was_idle:
            if lane.in_turns:  # its tasks were all canceled: its stale turn goes, it starts afresh
                self.turns = [turn for turn in self.turns if turn[3] is not lane]
                heapq.heapify(self.turns)
            lane.virtual = self._virtual.get(depth, 0.0)
            self._turn_count += 1
            heapq.heappush(self.turns, (-depth, lane.virtual, -self._turn_count, lane))
            lane.in_turns = True

    def take(self, count: int) -> list[TaskRecord]:
        """Up to `count` tasks, in the order the lanes' turns give them; dispatch sends them all to workers."""
        taken: list[TaskRecord] = []
        turns = self.turns
        if len(turns) == 1:  # one lane: nothing to share
            lane = turns[0][3]
            got = lane.take(count, taken)
            client = lane.client
            client.tasks_queued -= got
            client.tasks_running += got
            if lane.waiting == 0:
                turns.pop()
                lane.in_turns = False
                lane.clear()
            self.waiting -= got
            return taken
        if count >= 2 * len(turns):
            count -= self._take_in_bulk(count, taken)
            turns = self.turns
        while count > 0 and turns:
            neg_depth, virtual, _, lane = turns[0]
            if lane.waiting == 0:
                heapq.heappop(turns)
                lane.in_turns = False
                lane.clear()
                continue
            alone = True
            want = count
            if len(turns) > 1:
                following = turns[1] if len(turns) == 2 or turns[1] < turns[2] else turns[2]
                if following[0] == neg_depth:
                    alone = False
                    # As many as keep its virtual time below the next lane's (at least one: it won the tie).
                    gap = math.ceil((following[1] - virtual) / lane.step)
                    want = min(count, gap if gap > 1 else 1)
            got = lane.take(want, taken)
            count -= got
            client = lane.client
            client.tasks_queued -= got
            client.tasks_running += got
            if lane.waiting == 0:
                heapq.heappop(turns)
                lane.in_turns = False
                lane.clear()
            elif not alone:
                self._virtual[-neg_depth] = virtual
                lane.virtual = virtual + got * lane.step
                self._turn_count += 1
                heapq.heapreplace(turns, (neg_depth, lane.virtual, self._turn_count, lane))
        self.waiting -= len(taken)
        return taken

    def next_records(self) -> list[TaskRecord]:
        """The task each lane with a turn would give first: what the next take() starts with (one per client)."""
        heads = []
        for turn in self.turns:
            lane = turn[3]
            if lane.waiting:
                record = lane.next_record()
                if record is not None:
                    heads.append(record)
        return heads

    def _take_in_bulk(self, count: int, taken: list[TaskRecord]) -> int:
        """Many slots and several lanes at the top depth: each lane gives at once the tasks whose start
        (virtual time) is below the level that about `count` tasks reach, as one turn at a time would have,
        and the turns are made again; the last few slots are left to the turns. Returns how many."""
        turns = self.turns
        top = turns[0][0]
        lanes = [turn[3] for turn in turns if turn[0] == top and turn[3].waiting]
        if len(lanes) < 2:
            return 0
        shares = sum(1.0 / lane.step for lane in lanes)
        level = (count - len(lanes) + sum(lane.virtual / lane.step for lane in lanes)) / shares
        got_total = 0
        for lane in lanes:
            want = math.ceil((level - lane.virtual) / lane.step)
            if want <= 0:
                continue
            got = lane.take(min(want, count - got_total), taken)
            got_total += got
            lane.virtual += got * lane.step
            client = lane.client
            client.tasks_queued -= got
            client.tasks_running += got
        if got_total == 0:
            return 0
        self._virtual[-top] = level
        kept = [turn for turn in turns if turn[0] != top]
        for lane in lanes:
            if lane.waiting:
                self._turn_count += 1
                kept.append((top, lane.virtual, self._turn_count, lane))
            else:
                lane.in_turns = False
                lane.clear()
        for turn in turns:  # lanes of the top depth whose tasks had all ended
            if turn[0] == top and not turn[3].waiting:
                turn[3].in_turns = False
                turn[3].clear()
        heapq.heapify(kept)
        self.turns = kept
        return got_total

    def ended(self, record: TaskRecord) -> None:
        """A queued task ended (canceled, failed with a dependency, its client gone): it stays in its lane,
        marked canceled, until taking skips it."""
        lane = self.lanes[(record.client, record.signature.nesting_depth)]
        lane.waiting -= 1
        self.waiting -= 1
        record.client.tasks_queued -= 1
        if lane.waiting == 0:
            lane.clear()

    def keep_only(self, keep: Callable[[TaskRecord], bool]) -> None:
        """Drop the queued tasks for which `keep` is false (rare: it rebuilds the lanes)."""
        for lane in self.lanes.values():
            before = lane.waiting
            lane.keep_only(keep)
            lane.client.tasks_queued -= before - lane.waiting
            self.waiting -= before - lane.waiting

    def drop_client(self, client: ClientPeer) -> None:
        """The client's tasks have all ended (it left or cleared): its lanes go."""
        keys = [key for key in self.lanes if key[0] is client]
        if not keys:
            return
        for key in keys:
            del self.lanes[key]
        self.turns = [turn for turn in self.turns if turn[3].client is not client]
        heapq.heapify(self.turns)

    def entries(self) -> int:
        """Entries in all lanes, finished ones not yet skipped included (what they cost in memory)."""
        return sum(len(level) for lane in self.lanes.values() for level in lane.levels.values())

    def records(self) -> list[TaskRecord]:
        """Every unfinished queued task, lane by lane (for the tests and the invariants)."""
        return [record for lane in self.lanes.values() for record in lane.records()]


def describe_tags(tags: Tags | frozenset[str]) -> str:
    """A tag set as users write it, sorted: `{gpu, python}`; the empty set is `{}`."""
    return "{" + ", ".join(sorted(tags)) + "}"
