"""What the web view draws over time, derived from successive monitor snapshots.

The feed carries counters and current values, not per-task events. Rates and the "recent tasks"
stream are therefore differences between consecutive snapshots: how many tasks finished (by outcome)
and were accepted between two snapshots, divided by the time between them by the scheduler's clock.
Nothing here is estimated or invented; a gap in the feed shows as one longer interval.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from scaler.protocol.monitor_messages import MonitorSnapshot, TaskCounts

# About five minutes of one-second snapshots.
DEFAULT_KEEP_POINTS = 300
DEFAULT_STREAM_LENGTH = 60
# Up to this many workers, each has its own line on the CPU and memory charts (the page names 12 in its
# legend). Beyond, two lines stand for them all: their mean and their maximum. Hundreds of lines would
# say nothing, and five minutes of them made a first page load of 18 MB and overflowed the page's
# script with 500 workers.
CHARTED_WORKERS = 12
MEAN_SERIES = "mean of all workers"
MAX_SERIES = "max of all workers"


@dataclasses.dataclass(frozen=True)
class ThroughputPoint:
    at: float  # the later snapshot's published_at
    finished_per_second: float
    accepted_per_second: float


@dataclasses.dataclass(frozen=True)
class WorkerPoint:
    at: float
    agent_cpu_percent: float
    processor_cpu_percent: float
    rss_bytes: int  # agent and processor together


@dataclasses.dataclass(frozen=True)
class StreamEntry:
    """What happened to tasks between two snapshots ending at `at`."""

    at: float
    seconds: float
    accepted: int
    succeeded: int
    failed: int
    canceled: int
    not_found: int
    running: int  # at `at`
    unassigned: int  # at `at`
    dropped: int = 0  # ended unanswered: their client left, timed out or cleared them


def _held(tasks: TaskCounts) -> int:
    return tasks.unassigned + tasks.running + tasks.waiting_on_dependencies


def _mean_and_max(at: float, points: list[WorkerPoint]) -> dict[str, WorkerPoint]:
    count = len(points)
    return {
        MEAN_SERIES: WorkerPoint(
            at=at,
            agent_cpu_percent=sum(point.agent_cpu_percent for point in points) / count,
            processor_cpu_percent=sum(point.processor_cpu_percent for point in points) / count,
            rss_bytes=sum(point.rss_bytes for point in points) // count,
        ),
        MAX_SERIES: WorkerPoint(
            at=at,
            agent_cpu_percent=max(point.agent_cpu_percent for point in points),
            processor_cpu_percent=max(point.processor_cpu_percent for point in points),
            rss_bytes=max(point.rss_bytes for point in points),
        ),
    }


class MonitorHistory:
    """Keeps the latest snapshot plus bounded series derived from the ones before it."""

    def __init__(self, keep_points: int = DEFAULT_KEEP_POINTS, stream_length: int = DEFAULT_STREAM_LENGTH) -> None:
        self._keep_points = keep_points
        self._stream_length = stream_length
        self.latest: MonitorSnapshot | None = None
        # Counts restarts of the scheduler seen on the feed: everything kept before one is dropped.
        self.generation = 0
        self.throughput: collections.deque[ThroughputPoint] = collections.deque(maxlen=keep_points)
        self.stream: collections.deque[StreamEntry] = collections.deque(maxlen=stream_length)
        # The chart series: one per worker, or the mean and max of all (CHARTED_WORKERS).
        self.workers: dict[str, collections.deque[WorkerPoint]] = {}
        # What the last add() appended, for `update_json`.
        self._new_throughput: ThroughputPoint | None = None
        self._new_stream: StreamEntry | None = None

    def clear(self) -> None:
        self.latest = None
        self._new_throughput = self._new_stream = None
        self.throughput.clear()
        self.stream.clear()
        self.workers.clear()

    def add(self, snapshot: MonitorSnapshot) -> bool:
        """Take a snapshot in; False if it was the one already held."""
        previous = self.latest
        if previous is not None and self._restarted(previous, snapshot):
            self.clear()
            self.generation += 1
            previous = None
        if previous is not None and snapshot.sequence == previous.sequence:
            return False  # the same snapshot twice
        self._new_throughput = self._new_stream = None
        self.latest = snapshot
        self._add_worker_points(snapshot)
        if previous is None:
            return True
        seconds = snapshot.published_at - previous.published_at
        if seconds <= 0:
            return True  # the scheduler's clock went back; a rate over it would mean nothing
        before, after = previous.tasks, snapshot.tasks
        finished = after.finished - before.finished
        accepted = (_held(after) + after.finished) - (_held(before) + before.finished)
        self._new_throughput = ThroughputPoint(
            at=snapshot.published_at,
            finished_per_second=finished / seconds,
            accepted_per_second=max(0, accepted) / seconds,
        )
        self.throughput.append(self._new_throughput)
        entry = StreamEntry(
            at=snapshot.published_at,
            seconds=seconds,
            accepted=max(0, accepted),
            succeeded=after.success - before.success,
            failed=after.failed - before.failed,
            canceled=after.canceled - before.canceled,
            not_found=after.not_found - before.not_found,
            dropped=after.dropped - before.dropped,
            running=after.running,
            unassigned=after.unassigned,
        )
        if entry.accepted or finished:
            self._new_stream = entry
            self.stream.append(entry)
        return True

    @staticmethod
    def _restarted(previous: MonitorSnapshot, snapshot: MonitorSnapshot) -> bool:
        """A new scheduler process (or another one on the same address): its counters start again."""
        before, after = previous.tasks, snapshot.tasks
        return snapshot.sequence < previous.sequence or any(
            getattr(after, name) < getattr(before, name)
            for name in ("success", "failed", "canceled", "not_found", "dropped")
        )

    def _add_worker_points(self, snapshot: MonitorSnapshot) -> None:
        at = snapshot.published_at
        points = {
            worker.name: WorkerPoint(
                at=at,
                agent_cpu_percent=worker.agent_cpu_percent,
                processor_cpu_percent=worker.processor_cpu_percent,
                rss_bytes=worker.agent_rss_bytes + worker.processor_rss_bytes,
            )
            for worker in snapshot.workers
        }
        if len(points) > CHARTED_WORKERS:
            points = _mean_and_max(at, list(points.values()))
        for name, point in points.items():
            series = self.workers.get(name)
            if series is None:
                series = self.workers[name] = collections.deque(maxlen=self._keep_points)
            series.append(point)
        for name in list(self.workers):
            if name not in points:
                del self.workers[name]  # a worker that left has no present to chart

    def _snapshot_json(self) -> dict[str, Any] | None:
        latest = self.latest
        if latest is None:
            return None
        snapshot = dataclasses.asdict(latest)
        for worker_json, worker in zip(snapshot["workers"], latest.workers):
            worker_json["flags"] = worker.flags
        return snapshot

    def update_json(self) -> dict[str, Any]:
        """What the last add() changed: the page appends it to what `to_json` gave it first."""
        return {
            "snapshot": self._snapshot_json(),
            "throughput": [dataclasses.asdict(self._new_throughput)] if self._new_throughput else [],
            "workers": {name: [dataclasses.asdict(series[-1])] for name, series in sorted(self.workers.items())},
            "stream": [dataclasses.asdict(self._new_stream)] if self._new_stream else [],
        }

    def to_json(self) -> dict[str, Any]:
        """Everything kept, oldest first; the page starts from this, then appends each `update_json`."""
        return {
            "snapshot": self._snapshot_json(),
            "throughput": [dataclasses.asdict(point) for point in self.throughput],
            "workers": {
                name: [dataclasses.asdict(point) for point in series] for name, series in sorted(self.workers.items())
            },
            "stream": [dataclasses.asdict(entry) for entry in self.stream],
            "limits": {"points": self._keep_points, "stream": self._stream_length},
        }
