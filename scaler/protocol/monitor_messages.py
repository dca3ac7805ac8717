"""The Python view of the monitor feed: a MonitorSnapshot dataclass in, one Cap'n Proto frame out, and back.

The scheduler builds a MonitorSnapshot (its core's status plus what its process adds) and publishes
`encode_snapshot` of it; `scaler_top`, `scaler_ui` and anything else reading the feed call
`decode_snapshot`. This module and `messages.py` (the task protocol) are the only ones that import capnp.
The schema is `monitor.capnp`; PROTOCOL.md §12 documents the feed for other languages.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

import capnp

from scaler.protocol.messages import Buffer

capnp.remove_import_hook()
_schema = capnp.load(os.path.join(os.path.dirname(__file__), "monitor.capnp"))

FEED_VERSION = 1

# Same rule as the task protocol: a forged frame cannot make the reader walk more than its own size.
_TRAVERSAL_WORDS_PER_FRAME_WORD = 4
_TRAVERSAL_SLACK_WORDS = 4096
_NESTING_LIMIT = 16


class MonitorDecodeError(ValueError):
    """A frame that is not a monitor snapshot."""


@dataclasses.dataclass(slots=True)
class TaskCounts:
    unassigned: int = 0
    running: int = 0
    waiting_on_dependencies: int = 0
    success: int = 0
    failed: int = 0
    canceled: int = 0
    not_found: int = 0
    # Ended without an outcome: their client left, timed out or cleared them (no one was left to tell).
    dropped: int = 0

    @property
    def finished(self) -> int:
        return self.success + self.failed + self.canceled + self.not_found + self.dropped


@dataclasses.dataclass(slots=True)
class ClientStatus:
    name: str
    # Unfinished: queued + running + parked on the tasks they need.
    tasks: int = 0
    objects: int = 0
    object_bytes: int = 0
    # Ready in the scheduler, not yet sent to a worker.
    queued: int = 0
    # Sent to a worker and not finished.
    running: int = 0
    # How long the longest-waiting of its queued tasks has waited (0.0 if none): starvation shows here.
    oldest_ready_seconds: float = 0.0
    # Its weight in the fair share of worker slots.
    share: float = 1.0


@dataclasses.dataclass(slots=True)
class WorkerStatus:
    name: str
    capacity: int = 0
    free: int = 0
    sent: int = 0
    assigned: int = 0
    queued: int = 0
    agent_cpu_percent: float = 0.0
    agent_rss_bytes: int = 0
    processor_cpu_percent: float = 0.0
    processor_rss_bytes: int = 0
    latency_us: int = 0
    seconds_since_heard: float = 0.0
    processor_initialized: bool = False
    has_task: bool = False
    task_locked: bool = False
    # Sent nothing more after a drainWorkers; it still runs what it had started.
    draining: bool = False
    # Its capabilities (hello tags), sorted.
    tags: list[str] = dataclasses.field(default_factory=list)

    @property
    def flags(self) -> str:
        """The ITL column of scaler_top, one digit per flag."""
        return "".join("1" if flag else "0" for flag in (self.processor_initialized, self.has_task, self.task_locked))


@dataclasses.dataclass(slots=True)
class TagsWait:
    """Tasks ready to run that no connected worker may run: none has all of `tags`."""

    tags: list[str]
    tasks: int = 0


@dataclasses.dataclass(slots=True)
class StoreStatus:
    name: str
    hostname: str = ""
    data_address: str = ""
    capacity_bytes: int = 0
    bytes_held: int = 0
    bytes_spilled: int = 0
    bytes_pinned: int = 0
    objects: int = 0
    workers: int = 0
    seconds_since_heard: float = 0.0

    @property
    def bytes_in_memory(self) -> int:
        return max(0, self.bytes_held - self.bytes_spilled)


@dataclasses.dataclass(slots=True)
class MonitorSnapshot:
    sequence: int = 0
    published_at: float = 0.0  # seconds since the Unix epoch, by the scheduler's clock
    scheduler_cpu_percent: float = 0.0
    scheduler_rss_bytes: int = 0
    tasks: TaskCounts = dataclasses.field(default_factory=TaskCounts)
    sent: dict[str, int] = dataclasses.field(default_factory=dict)
    received: dict[str, int] = dataclasses.field(default_factory=dict)
    clients: list[ClientStatus] = dataclasses.field(default_factory=list)
    object_count: int = 0
    object_bytes: int = 0
    workers: list[WorkerStatus] = dataclasses.field(default_factory=list)
    waiting_for_tags: list[TagsWait] = dataclasses.field(default_factory=list)
    stores: list[StoreStatus] = dataclasses.field(default_factory=list)
    bytes_relayed: int = 0
    standing_by: bool = False  # a standby scheduler that does not serve
    feed_version: int = FEED_VERSION


# ---------------------------------------------------------------------------------------------- encoding


def _count(value: int | float) -> int:
    # Unsigned on the wire: a negative count would be a bug upstream, and must not kill the publisher.
    return max(0, int(value))


def _seconds(value: float) -> float:
    return max(0.0, float(value))


def _share(value: float) -> float:
    # A weight is positive; anything else would be a bug upstream, shown as the default weight.
    value = float(value)
    return value if value > 0 and value != float("inf") else 1.0


def _as_is(value: Any) -> Any:
    return value


# A flat row's fields: (dataclass field, schema field, how its value is written). One table serves both
# directions, so a field added to a row and the schema is added here once. Lists (tags) go apart.
_Fields = tuple[tuple[str, str, Callable[[Any], Any]], ...]

_TASK_COUNT_FIELDS: _Fields = (
    ("unassigned", "unassigned", _count),
    ("running", "running", _count),
    ("waiting_on_dependencies", "waitingOnDependencies", _count),
    ("success", "success", _count),
    ("failed", "failed", _count),
    ("canceled", "canceled", _count),
    ("not_found", "notFound", _count),
    ("dropped", "dropped", _count),
)
_CLIENT_FIELDS: _Fields = (
    ("name", "name", _as_is),
    ("tasks", "tasks", _count),
    ("objects", "objects", _count),
    ("object_bytes", "objectBytes", _count),
    ("queued", "queued", _count),
    ("running", "running", _count),
    ("oldest_ready_seconds", "oldestReadySeconds", _seconds),
    ("share", "share", _share),
)
_WORKER_FIELDS: _Fields = (
    ("name", "name", _as_is),
    ("capacity", "capacity", _count),
    ("free", "free", _count),
    ("sent", "sent", _count),
    ("assigned", "assigned", _count),
    ("queued", "queued", _count),
    ("agent_cpu_percent", "agentCpuPercent", float),
    ("agent_rss_bytes", "agentRssBytes", _count),
    ("processor_cpu_percent", "processorCpuPercent", float),
    ("processor_rss_bytes", "processorRssBytes", _count),
    ("latency_us", "latencyUs", _count),
    ("seconds_since_heard", "secondsSinceHeard", _seconds),
    ("processor_initialized", "processorInitialized", _as_is),
    ("has_task", "hasTask", _as_is),
    ("task_locked", "taskLocked", _as_is),
    ("draining", "draining", _as_is),
)
_STORE_FIELDS: _Fields = (
    ("name", "name", _as_is),
    ("hostname", "hostname", _as_is),
    ("data_address", "dataAddress", _as_is),
    ("capacity_bytes", "capacityBytes", _count),
    ("bytes_held", "bytesHeld", _count),
    ("bytes_spilled", "bytesSpilled", _count),
    ("bytes_pinned", "bytesPinned", _count),
    ("objects", "objects", _count),
    ("workers", "workers", _count),
    ("seconds_since_heard", "secondsSinceHeard", _seconds),
)


def _write_row(slot: Any, row: Any, fields: _Fields) -> None:
    for field, schema_field, write in fields:
        setattr(slot, schema_field, write(getattr(row, field)))


def _read_row(reader: Any, fields: _Fields) -> dict[str, Any]:
    return {field: getattr(reader, schema_field) for field, schema_field, _ in fields}


def encode_snapshot(snapshot: MonitorSnapshot) -> bytes:
    """One feed frame. Always writes the FEED_VERSION this module reads, whatever `feed_version` says."""
    builder = _schema.MonitorSnapshot.new_message()
    builder.feedVersion = FEED_VERSION
    builder.sequence = _count(snapshot.sequence)
    builder.publishedAtUs = _count(snapshot.published_at * 1_000_000)

    usage = builder.init("scheduler")
    usage.cpuPercent = float(snapshot.scheduler_cpu_percent)
    usage.rssBytes = _count(snapshot.scheduler_rss_bytes)

    _write_row(builder.init("tasks"), snapshot.tasks, _TASK_COUNT_FIELDS)

    for field, by_name in (("sent", snapshot.sent), ("received", snapshot.received)):
        entries = builder.init(field, len(by_name))
        for slot, (name, count) in zip(entries, sorted(by_name.items())):
            slot.name = name
            slot.count = _count(count)

    for slot, client in zip(builder.init("clients", len(snapshot.clients)), snapshot.clients):
        _write_row(slot, client, _CLIENT_FIELDS)

    objects = builder.init("objects")
    objects.count = _count(snapshot.object_count)
    objects.bytes = _count(snapshot.object_bytes)

    for slot, worker in zip(builder.init("workers", len(snapshot.workers)), snapshot.workers):
        _write_row(slot, worker, _WORKER_FIELDS)
        if worker.tags:
            slot.tags = list(worker.tags)
    if snapshot.waiting_for_tags:
        waits = builder.init("waitingForTags", len(snapshot.waiting_for_tags))
        for slot, wait in zip(waits, snapshot.waiting_for_tags):
            slot.tags = list(wait.tags)
            slot.tasks = _count(wait.tasks)

    for slot, store in zip(builder.init("stores", len(snapshot.stores)), snapshot.stores):
        _write_row(slot, store, _STORE_FIELDS)
    builder.bytesRelayed = _count(snapshot.bytes_relayed)
    builder.standingBy = snapshot.standing_by
    return builder.to_bytes()


# ---------------------------------------------------------------------------------------------- decoding


def decode_snapshot(frame: Buffer) -> MonitorSnapshot:
    """Read one feed frame; anything malformed raises MonitorDecodeError, never anything else."""
    data = frame if type(frame) is bytes else bytes(frame)  # capnp wants word-aligned memory
    try:
        traversal_limit = len(data) // 8 * _TRAVERSAL_WORDS_PER_FRAME_WORD + _TRAVERSAL_SLACK_WORDS
        with _schema.MonitorSnapshot.from_bytes(
            data, traversal_limit_in_words=traversal_limit, nesting_limit=_NESTING_LIMIT
        ) as reader:
            return _read_snapshot(reader)
    except Exception as error:  # capnp raises KjException and friends for corrupt frames
        first_line = str(error).split("\n", 1)[0]
        raise MonitorDecodeError(f"malformed monitor snapshot: {type(error).__name__}: {first_line}") from None


def _read_snapshot(reader: Any) -> MonitorSnapshot:
    return MonitorSnapshot(
        feed_version=reader.feedVersion,
        sequence=reader.sequence,
        published_at=reader.publishedAtUs / 1_000_000,
        scheduler_cpu_percent=reader.scheduler.cpuPercent,
        scheduler_rss_bytes=reader.scheduler.rssBytes,
        tasks=TaskCounts(**_read_row(reader.tasks, _TASK_COUNT_FIELDS)),
        sent={entry.name: entry.count for entry in reader.sent},
        received={entry.name: entry.count for entry in reader.received},
        clients=[ClientStatus(**_read_row(client, _CLIENT_FIELDS)) for client in reader.clients],
        object_count=reader.objects.count,
        object_bytes=reader.objects.bytes,
        workers=[
            WorkerStatus(**_read_row(worker, _WORKER_FIELDS), tags=[str(tag) for tag in worker.tags])
            for worker in reader.workers
        ],
        waiting_for_tags=[
            TagsWait(tags=[str(tag) for tag in wait.tags], tasks=wait.tasks) for wait in reader.waitingForTags
        ],
        stores=[StoreStatus(**_read_row(store, _STORE_FIELDS)) for store in reader.stores],
        bytes_relayed=reader.bytesRelayed,
        standing_by=reader.standingBy,
    )
