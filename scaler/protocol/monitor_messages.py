"""The Python view of the monitor feed: a MonitorSnapshot dataclass in, one Cap'n Proto frame out, and back.

The scheduler builds a MonitorSnapshot (its core's status plus what its process adds) and publishes
`encode_snapshot` of it; `scaler_top`, `scaler_ui` and anything else reading the feed call
`decode_snapshot`. This module and `messages.py` (the task protocol) are the only ones that import capnp.
The schema is `monitor.capnp`; PROTOCOL.md §12 documents the feed for other languages.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

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

    @property
    def finished(self) -> int:
        return self.success + self.failed + self.canceled + self.not_found


@dataclasses.dataclass(slots=True)
class ClientStatus:
    name: str
    tasks: int = 0
    objects: int = 0
    object_bytes: int = 0


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

    @property
    def flags(self) -> str:
        """The ITL column of scaler_top, one digit per flag."""
        return "".join("1" if flag else "0" for flag in (self.processor_initialized, self.has_task, self.task_locked))


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
    stores: list[StoreStatus] = dataclasses.field(default_factory=list)
    bytes_relayed: int = 0
    feed_version: int = FEED_VERSION


# ---------------------------------------------------------------------------------------------- encoding


def _count(value: int | float) -> int:
    # Unsigned on the wire: a negative count would be a bug upstream, and must not kill the publisher.
    return max(0, int(value))


def encode_snapshot(snapshot: MonitorSnapshot) -> bytes:
    """One feed frame. Always writes the FEED_VERSION this module reads, whatever `feed_version` says."""
    builder = _schema.MonitorSnapshot.new_message()
    builder.feedVersion = FEED_VERSION
    builder.sequence = _count(snapshot.sequence)
    builder.publishedAtUs = _count(snapshot.published_at * 1_000_000)

    usage = builder.init("scheduler")
    usage.cpuPercent = float(snapshot.scheduler_cpu_percent)
    usage.rssBytes = _count(snapshot.scheduler_rss_bytes)

    tasks = snapshot.tasks
    counts = builder.init("tasks")
    counts.unassigned = _count(tasks.unassigned)
    counts.running = _count(tasks.running)
    counts.waitingOnDependencies = _count(tasks.waiting_on_dependencies)
    counts.success = _count(tasks.success)
    counts.failed = _count(tasks.failed)
    counts.canceled = _count(tasks.canceled)
    counts.notFound = _count(tasks.not_found)

    for field, by_name in (("sent", snapshot.sent), ("received", snapshot.received)):
        entries = builder.init(field, len(by_name))
        for slot, (name, count) in zip(entries, sorted(by_name.items())):
            slot.name = name
            slot.count = _count(count)

    clients = builder.init("clients", len(snapshot.clients))
    for slot, client in zip(clients, snapshot.clients):
        slot.name = client.name
        slot.tasks = _count(client.tasks)
        slot.objects = _count(client.objects)
        slot.objectBytes = _count(client.object_bytes)

    objects = builder.init("objects")
    objects.count = _count(snapshot.object_count)
    objects.bytes = _count(snapshot.object_bytes)

    workers = builder.init("workers", len(snapshot.workers))
    for slot, worker in zip(workers, snapshot.workers):
        slot.name = worker.name
        slot.capacity = _count(worker.capacity)
        slot.free = _count(worker.free)
        slot.sent = _count(worker.sent)
        slot.assigned = _count(worker.assigned)
        slot.queued = _count(worker.queued)
        slot.agentCpuPercent = float(worker.agent_cpu_percent)
        slot.agentRssBytes = _count(worker.agent_rss_bytes)
        slot.processorCpuPercent = float(worker.processor_cpu_percent)
        slot.processorRssBytes = _count(worker.processor_rss_bytes)
        slot.latencyUs = _count(worker.latency_us)
        slot.secondsSinceHeard = max(0.0, float(worker.seconds_since_heard))
        slot.processorInitialized = worker.processor_initialized
        slot.hasTask = worker.has_task
        slot.taskLocked = worker.task_locked

    stores = builder.init("stores", len(snapshot.stores))
    for slot, store in zip(stores, snapshot.stores):
        slot.name = store.name
        slot.hostname = store.hostname
        slot.dataAddress = store.data_address
        slot.capacityBytes = _count(store.capacity_bytes)
        slot.bytesHeld = _count(store.bytes_held)
        slot.bytesSpilled = _count(store.bytes_spilled)
        slot.bytesPinned = _count(store.bytes_pinned)
        slot.objects = _count(store.objects)
        slot.workers = _count(store.workers)
        slot.secondsSinceHeard = max(0.0, float(store.seconds_since_heard))
    builder.bytesRelayed = _count(snapshot.bytes_relayed)
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
    tasks = reader.tasks
    return MonitorSnapshot(
        feed_version=reader.feedVersion,
        sequence=reader.sequence,
        published_at=reader.publishedAtUs / 1_000_000,
        scheduler_cpu_percent=reader.scheduler.cpuPercent,
        scheduler_rss_bytes=reader.scheduler.rssBytes,
        tasks=TaskCounts(
            unassigned=tasks.unassigned,
            running=tasks.running,
            waiting_on_dependencies=tasks.waitingOnDependencies,
            success=tasks.success,
            failed=tasks.failed,
            canceled=tasks.canceled,
            not_found=tasks.notFound,
        ),
        sent={entry.name: entry.count for entry in reader.sent},
        received={entry.name: entry.count for entry in reader.received},
        clients=[
            ClientStatus(name=client.name, tasks=client.tasks, objects=client.objects, object_bytes=client.objectBytes)
            for client in reader.clients
        ],
        object_count=reader.objects.count,
        object_bytes=reader.objects.bytes,
        workers=[
            WorkerStatus(
                name=worker.name,
                capacity=worker.capacity,
                free=worker.free,
                sent=worker.sent,
                assigned=worker.assigned,
                queued=worker.queued,
                agent_cpu_percent=worker.agentCpuPercent,
                agent_rss_bytes=worker.agentRssBytes,
                processor_cpu_percent=worker.processorCpuPercent,
                processor_rss_bytes=worker.processorRssBytes,
                latency_us=worker.latencyUs,
                seconds_since_heard=worker.secondsSinceHeard,
                processor_initialized=worker.processorInitialized,
                has_task=worker.hasTask,
                task_locked=worker.taskLocked,
            )
            for worker in reader.workers
        ],
        stores=[
            StoreStatus(
                name=store.name,
                hostname=store.hostname,
                data_address=store.dataAddress,
                capacity_bytes=store.capacityBytes,
                bytes_held=store.bytesHeld,
                bytes_spilled=store.bytesSpilled,
                bytes_pinned=store.bytesPinned,
                objects=store.objects,
                workers=store.workers,
                seconds_since_heard=store.secondsSinceHeard,
            )
            for store in reader.stores
        ],
        bytes_relayed=reader.bytesRelayed,
    )
