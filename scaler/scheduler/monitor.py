"""The monitor feed: what the scheduler publishes about itself once a second, and how to read it back.

The scheduler's loop owns a `MonitorPublisher`; `scaler_top` and `scaler_ui` decode what it sends with
`decode_snapshot`. Beside `scaler/protocol/messages.py`, this is the only module that imports capnp.
The schema is `scaler/protocol/monitor.capnp`; PROTOCOL.md documents the feed for other languages.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any

import capnp
import zmq

from scaler.protocol import messages as m
from scaler.utility.ipc_sockets import file_identity, ipc_path, is_listening, remove_if_same

capnp.remove_import_hook()
_schema = capnp.load(os.path.join(os.path.dirname(m.__file__), "monitor.capnp"))

logger = logging.getLogger(__name__)

FEED_VERSION = 1

# Subscribers only want the newest snapshot: a slow one should lose old snapshots, not cost memory here.
_SEND_HIGH_WATER_MARK = 4

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
    feed_version: int = FEED_VERSION


# ---------------------------------------------------------------------------------------------- encoding


def _count(value: Any) -> int:
    # Unsigned on the wire: a negative count would be a bug upstream, and must not kill the publisher.
    return max(0, int(value))


def encode_snapshot(status: dict, sequence: int, published_at: float) -> bytes:
    """One feed frame from the dict `SchedulerServer.status_snapshot()` returns."""
    builder = _schema.MonitorSnapshot.new_message()
    builder.feedVersion = FEED_VERSION
    builder.sequence = _count(sequence)
    builder.publishedAtUs = _count(published_at * 1_000_000)

    usage = builder.init("scheduler")
    usage.cpuPercent = float(status["scheduler"]["cpu_percent"])
    usage.rssBytes = _count(status["scheduler"]["rss_bytes"])

    tasks = status["tasks"]
    counts = builder.init("tasks")
    counts.unassigned = _count(tasks["unassigned"])
    counts.running = _count(tasks["running"])
    counts.waitingOnDependencies = _count(tasks.get("waiting_on_dependencies", 0))
    counts.success = _count(tasks["success"])
    counts.failed = _count(tasks["failed"])
    counts.canceled = _count(tasks["canceled"])
    counts.notFound = _count(tasks["not_found"])

    for field, by_name in (("sent", status["sent"]), ("received", status["received"])):
        entries = builder.init(field, len(by_name))
        for slot, (name, count) in zip(entries, sorted(by_name.items())):
            slot.name = name
            slot.count = _count(count)

    clients = builder.init("clients", len(status["clients"]))
    for slot, client in zip(clients, status["clients"]):
        slot.name = client["name"]
        slot.tasks = _count(client["tasks"])
        slot.objects = _count(client["objects"])
        slot.objectBytes = _count(client["object_bytes"])

    objects = builder.init("objects")
    objects.count = _count(status["objects"]["count"])
    objects.bytes = _count(status["objects"]["bytes"])

    workers = builder.init("workers", len(status["workers"]))
    for slot, worker in zip(workers, status["workers"]):
        slot.name = worker["name"]
        slot.capacity = _count(worker["capacity"])
        slot.free = _count(worker["free"])
        slot.sent = _count(worker["sent"])
        slot.assigned = _count(worker["assigned"])
        slot.queued = _count(worker["queued"])
        slot.agentCpuPercent = float(worker["agent_cpu_percent"])
        slot.agentRssBytes = _count(worker["agent_rss_bytes"])
        slot.processorCpuPercent = float(worker["processor_cpu_percent"])
        slot.processorRssBytes = _count(worker["processor_rss_bytes"])
        slot.latencyUs = _count(worker["latency_us"])
        slot.secondsSinceHeard = max(0.0, float(worker["seconds_since_heard"]))
        # Derived here rather than in the core: they restate facts the snapshot already holds.
        slot.processorInitialized = worker["processor_rss_bytes"] > 0
        slot.hasTask = worker["assigned"] > 0
        slot.taskLocked = False  # no task can be suspended while it waits for nested tasks yet
    return builder.to_bytes()


# ---------------------------------------------------------------------------------------------- decoding


def decode_snapshot(frame: m.Buffer) -> MonitorSnapshot:
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
    )


# ---------------------------------------------------------------------------------------------- publisher


class MonitorPublisher:
    """A PUB socket bound at the monitor address; the scheduler loop calls `publish` about once a second.

    It never raises into the loop: a monitor address that cannot be bound is logged and the feed is
    off, and a snapshot that cannot be encoded is logged (once) and skipped. It never takes an ipc
    address another process listens on (libzmq would unlink that process's socket file to bind), and it
    removes only the socket file it bound itself.
    """

    def __init__(self, context: zmq.Context, address: str) -> None:
        self._address = address
        self._sequence = 0
        self._reported_failure = False
        self._ipc_path = ipc_path(address)
        self._socket: zmq.Socket | None = None
        self._file_identity: tuple[int, int] | None = None
        if self._ipc_path is not None and os.path.exists(self._ipc_path) and is_listening(self._ipc_path):
            logger.error(
                f"Scheduler: monitor feed is off, another process (a running scheduler?) serves {address}; "
                "choose another address with --monitor-address"
            )
            return
        socket = context.socket(zmq.PUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.SNDHWM, _SEND_HIGH_WATER_MARK)
        try:
            socket.bind(address)
        except zmq.ZMQError as error:
            socket.close(linger=0)
            logger.error(
                f"Scheduler: monitor feed is off, cannot bind {address}: {error}; "
                "choose another address with --monitor-address"
            )
            return
        self._socket = socket
        if self._ipc_path is not None:
            self._file_identity = file_identity(self._ipc_path)

    @property
    def address(self) -> str:
        return self._address

    @property
    def is_bound(self) -> bool:
        return self._socket is not None

    def publish(self, snapshot: dict) -> None:
        if self._socket is None:
            return
        try:
            frame = encode_snapshot(snapshot, self._sequence, time.time())
        except Exception:
            if not self._reported_failure:
                self._reported_failure = True
                logger.exception("Scheduler: could not encode a monitor snapshot; skipping it")
            return
        try:
            # PUB never blocks: with no subscriber, or a slow one, the snapshot is simply dropped.
            self._socket.send(frame, zmq.NOBLOCK)
        except zmq.ZMQError as error:
            logger.warning(f"Scheduler: could not publish a monitor snapshot: {error}")
            return
        self._sequence += 1

    def close(self) -> None:
        """Close the socket and remove the ipc:// file we bound, so no stale socket is left. Safe to call twice."""
        socket, self._socket = self._socket, None
        if socket is None:
            return
        socket.close(linger=0)
        if self._ipc_path is not None:
            remove_if_same(self._ipc_path, self._file_identity)
