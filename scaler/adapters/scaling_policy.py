"""Adaptive scaling as a pure core: how many worker groups to have, from the load the scheduler reports.

No sockets, no clocks, no resource manager: the driver (adaptive_scaler.py) feeds it what the monitor
feed and the adapter say, each with `now`, and carries out the actions `decide` returns. The rules:

- A Python worker runs one task at a time, so the cluster wants one worker per task it holds (waiting
  for a worker or assigned to one), less the workers that are not ours, within [minimum, maximum].
- More workers are asked for as soon as that number exceeds the workers we have or have asked for.
- A group is released once every worker of it has held no task for `idle_seconds`, and only while we
  have more workers than wanted; groups that never joined go first, then the longest idle. A group
  with a task is never stopped. With `drain_first`, its workers are drained before they are stopped
  (the scheduler sends them nothing more and takes their queue away), which closes the window between
  the snapshot that showed them idle and the stop.
- A group that ends before any of its workers joined the scheduler (a bad address, a firewall, a
  broken environment) delays the next start, doubling up to a few minutes, so a broken setup does not
  fill the batch queue.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Mapping, Sequence, Union

from scaler.adapters.worker_adapter import GroupState, WorkerGroup

# With no snapshot for this long the scheduler may be gone or stuck: act on nothing stale.
STALE_LOAD_SECONDS = 10.0
_FIRST_BACKOFF_SECONDS = 5.0
_MAX_BACKOFF_SECONDS = 300.0


@dataclasses.dataclass(frozen=True)
class ScalingSettings:
    """Bounds of adaptive scaling. Workers, not groups: a group of 4 counts 4."""

    minimum_workers: int = 0
    maximum_workers: int = 16
    # A group whose workers held no task for this long is released (while above the minimum).
    idle_seconds: float = 60.0

    def __post_init__(self) -> None:
        for name in ("minimum_workers", "maximum_workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be a whole number, got {value!r}")
        if self.minimum_workers < 0:
            raise ValueError(f"minimum_workers must be 0 or more, got {self.minimum_workers}")
        if self.maximum_workers < 1:
            raise ValueError(f"maximum_workers must be at least 1, got {self.maximum_workers}")
        if self.minimum_workers > self.maximum_workers:
            raise ValueError(
                f"minimum_workers ({self.minimum_workers}) is above maximum_workers ({self.maximum_workers})"
            )
        if isinstance(self.idle_seconds, bool) or not isinstance(self.idle_seconds, (int, float)):
            raise TypeError(f"idle_seconds must be a number, got {self.idle_seconds!r}")
        if not (math.isfinite(self.idle_seconds) and self.idle_seconds > 0):
            raise ValueError(f"idle_seconds must be a number above 0, got {self.idle_seconds!r}")


@dataclasses.dataclass(frozen=True)
class ClusterLoad:
    """What the policy reads from one monitor snapshot."""

    waiting_tasks: int  # ready tasks no worker holds yet (the feed's `unassigned`)
    tasks_by_worker: Mapping[str, int]  # every connected worker by name: tasks it holds (the feed's `assigned`)
    # Workers the scheduler drains (sends nothing more); empty until the scheduler reports draining.
    draining_workers: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class StartGroups:
    count: int
    reason: str


@dataclasses.dataclass(frozen=True)
class StopGroups:
    group_ids: tuple[str, ...]
    reason: str


@dataclasses.dataclass(frozen=True)
class DrainWorkers:
    """Ask the scheduler to send these workers nothing more and to move their queued tasks away."""

    worker_names: tuple[str, ...]
    reason: str


ScalingAction = Union[StartGroups, StopGroups, DrainWorkers]


@dataclasses.dataclass(frozen=True)
class GroupEnded:
    """A group the adapter reports ended: `expected` if we stopped it; `joined` if any worker of it registered."""

    group: WorkerGroup
    expected: bool
    joined: bool


@dataclasses.dataclass
class _TrackedGroup:
    group: WorkerGroup
    asked_at: float
    # Since the first snapshot that showed none of its workers holding a task (`asked_at` until one
    # joins); None while one holds a task.
    idle_since: float | None
    joined: bool = False  # a worker of it appeared in the monitor feed
    draining: bool = False
    stopping: bool = False

    @property
    def live(self) -> bool:
        return not (self.draining or self.stopping)


class ScalingPolicy:
    def __init__(self, settings: ScalingSettings, workers_per_group: int, drain_first: bool = False) -> None:
        if isinstance(workers_per_group, bool) or not isinstance(workers_per_group, int) or workers_per_group < 1:
            raise ValueError(f"workers_per_group must be a whole number of at least 1, got {workers_per_group!r}")
        self._settings = settings
        self._per_group = workers_per_group
        self._drain_first = drain_first
        self._groups: dict[str, _TrackedGroup] = {}
        self._load: ClusterLoad | None = None
        self._load_at = -math.inf
        self._failed_starts = 0
        self._next_start_at = -math.inf

    # ------------------------------------------------------------------------------------------ events

    def on_load(self, load: ClusterLoad, now: float) -> None:
        self._load, self._load_at = load, now
        tasks = load.tasks_by_worker
        for tracked in self._groups.values():
            names = tracked.group.worker_names
            if any(name in tasks for name in names):
                if not tracked.joined:
                    tracked.joined = True
                    self._failed_starts = 0
                    self._next_start_at = -math.inf
            if any(tasks.get(name, 0) > 0 for name in names):
                tracked.idle_since = None
            elif tracked.idle_since is None:
                tracked.idle_since = now

    def on_started(self, groups: Iterable[WorkerGroup], now: float) -> None:
        for group in groups:
            self._groups[group.group_id] = _TrackedGroup(group=group, asked_at=now, idle_since=now)

    def on_start_failed(self, now: float) -> None:
        """The adapter could not even ask (a tool failed): wait before asking again."""
        self._back_off(now)

    def on_drain_failed(self, worker_names: Sequence[str]) -> None:
        """The drain could not be asked for: those groups count as live again, to be chosen again later."""
        names = set(worker_names)
        for tracked in self._groups.values():
            if tracked.draining and not tracked.stopping and names.intersection(tracked.group.worker_names):
                tracked.draining = False

    def on_groups(self, groups: Sequence[WorkerGroup], now: float) -> list[GroupEnded]:
        """The adapter's report; returns the groups that ended since the last one."""
        ended = []
        for group in groups:
            tracked = self._groups.get(group.group_id)
            if tracked is None:
                if group.state is GroupState.ENDED:
                    continue
                # Started before we were (or by someone else through this adapter): ours to manage now.
                tracked = self._groups[group.group_id] = _TrackedGroup(group=group, asked_at=now, idle_since=now)
            tracked.group = group
            if group.state is GroupState.ENDED:
                del self._groups[group.group_id]
                ended.append(GroupEnded(group=group, expected=tracked.stopping, joined=tracked.joined))
                if not tracked.stopping and not tracked.joined:
                    self._back_off(now)
        return ended

    # ------------------------------------------------------------------------------------------ decisions

    def decide(self, now: float) -> list[ScalingAction]:
        load = self._load
        if load is None or now - self._load_at > STALE_LOAD_SECONDS:
            return []
        actions: list[ScalingAction] = []
        drained = self._drained_groups(load)
        if drained:
            for tracked in drained:
                tracked.stopping = True
            actions.append(StopGroups(tuple(t.group.group_id for t in drained), "drained"))

        live = [tracked for tracked in self._groups.values() if tracked.live]
        have = len(live) * self._per_group
        want = self.wanted_workers(load)
        if want > have:
            if now >= self._next_start_at:
                count = math.ceil((want - have) / self._per_group)
                actions.append(StartGroups(count, f"{want} workers wanted, {have} running or asked for"))
            return actions

        surplus_groups = (have - want) // self._per_group
        if surplus_groups <= 0:
            return actions
        idle = [
            tracked for tracked in live
            if tracked.idle_since is not None and now - tracked.idle_since >= self._settings.idle_seconds
            and not any(load.tasks_by_worker.get(name, 0) for name in tracked.group.worker_names)
        ]
        # Groups that never joined cost nothing to drop; then the longest idle.
        idle.sort(key=lambda tracked: (tracked.joined, tracked.idle_since or 0.0))
        chosen = idle[:surplus_groups]
        if not chosen:
            return actions
        reason = f"idle for {self._settings.idle_seconds:g}s or more; {want} workers wanted, {have} running"
        to_stop = [tracked for tracked in chosen if not (self._drain_first and tracked.joined)]
        to_drain = [tracked for tracked in chosen if self._drain_first and tracked.joined]
        for tracked in to_stop:
            tracked.stopping = True
        for tracked in to_drain:
            tracked.draining = True
        if to_stop:
            actions.append(StopGroups(tuple(t.group.group_id for t in to_stop), reason))
        if to_drain:
            names = tuple(name for tracked in to_drain for name in tracked.group.worker_names)
            actions.append(DrainWorkers(names, reason))
        return actions

    def wanted_workers(self, load: ClusterLoad) -> int:
        """One worker per task the scheduler holds, less the workers that are not ours, within the bounds.

        Tasks held by groups being drained or stopped are not counted: what they still run needs no new
        worker, and what they give back shows up as waiting.
        """
        ours: set[str] = set()
        leaving: set[str] = set()
        for tracked in self._groups.values():
            ours.update(tracked.group.worker_names)
            if not tracked.live:
                leaving.update(tracked.group.worker_names)
        foreign = sum(1 for name in load.tasks_by_worker if name not in ours)
        tasks = load.waiting_tasks + sum(
            count for name, count in load.tasks_by_worker.items() if name not in leaving
        )
        settings = self._settings
        return min(settings.maximum_workers, max(settings.minimum_workers, tasks - foreign))

    def _drained_groups(self, load: ClusterLoad) -> list[_TrackedGroup]:
        """Draining groups none of whose workers holds a task: safe to stop."""
        drained = []
        for tracked in self._groups.values():
            if not tracked.draining or tracked.stopping:
                continue
            if all(
                name not in load.tasks_by_worker
                or (name in load.draining_workers and load.tasks_by_worker[name] == 0)
                for name in tracked.group.worker_names
            ):
                drained.append(tracked)
        return drained

    def _back_off(self, now: float) -> None:
        self._failed_starts += 1
        delay = min(_MAX_BACKOFF_SECONDS, _FIRST_BACKOFF_SECONDS * 2 ** (self._failed_starts - 1))
        self._next_start_at = now + delay

    # ------------------------------------------------------------------------------------------ state

    @property
    def drain_first(self) -> bool:
        return self._drain_first

    @property
    def group_ids(self) -> list[str]:
        """Groups started and not yet reported ended (stopping ones included)."""
        return list(self._groups)

    @property
    def start_delay_until(self) -> float:
        """No group is started before this time (after groups that ended without joining)."""
        return self._next_start_at
