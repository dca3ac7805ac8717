"""The core's status for the monitor feed, typed with the feed's own dataclasses (protocol/monitor_messages.py).

The server adds what only its process knows (CPU, memory, messages sent and received) to make the
MonitorSnapshot it publishes.
"""

from __future__ import annotations

import collections
import dataclasses

from scaler.protocol import messages as m
from scaler.protocol.monitor_messages import ClientStatus, StoreStatus, TagsWait, TaskCounts, WorkerStatus
from scaler.scheduler.core.object_lifetime.object_table import ObjectTable
from scaler.scheduler.core.peer_registry import ClientPeer, PeerRegistry
from scaler.scheduler.core.store_registry import StoreRegistry
from scaler.scheduler.core.task_table import TaskTable

# Failure kinds the feed counts as `failed`; canceled and notFound have counts of their own, and a task
# given back (returned) has not ended.
_FAILED_KINDS = (m.FailureKind.RAISED, m.FailureKind.WORKER_DIED, m.FailureKind.SERIALIZATION, m.FailureKind.REJECTED)


@dataclasses.dataclass(slots=True)
class CoreStatus:
    tasks: TaskCounts
    clients: list[ClientStatus]
    object_count: int
    object_bytes: int
    workers: list[WorkerStatus]
    stores: list[StoreStatus]
    bytes_relayed: int
    # Queued tasks no connected worker may run, by the tags they require.
    waiting_for_tags: list[TagsWait] = dataclasses.field(default_factory=list)


def core_status(
    peers: PeerRegistry, stores: StoreRegistry, tasks: TaskTable, objects: ObjectTable,
    counters: collections.Counter[str], waiting_for_tags: dict[tuple[str, ...], int], now: float,
) -> CoreStatus:
    running = sum(len(worker.assigned) for worker in peers.workers.values())
    object_sizes = {object_id: record.byte_count for object_id, record in objects.stored.items()}
    workers = []
    for worker in peers.workers.values():
        heartbeat = worker.last_heartbeat or m.Heartbeat()
        workers.append(WorkerStatus(
            name=worker.name,
            capacity=worker.capacity,
            free=worker.free,
            sent=worker.tasks_sent,
            assigned=len(worker.assigned),
            queued=heartbeat.queued_tasks,
            agent_cpu_percent=heartbeat.cpu_percent,
            agent_rss_bytes=heartbeat.rss_bytes,
            processor_cpu_percent=heartbeat.processor_cpu_percent,
            processor_rss_bytes=heartbeat.processor_rss_bytes,
            latency_us=heartbeat.latency_us,
            seconds_since_heard=now - worker.last_seen,
            # The I/T/L flags of scaler_top restate the facts above (docs/monitor.md).
            processor_initialized=heartbeat.processor_rss_bytes > 0,
            has_task=len(worker.assigned) > 0,
            task_locked=False,  # no task can be suspended while it waits for nested tasks yet
            draining=worker.draining,
            tags=sorted(worker.tags),
        ))
    return CoreStatus(
        tasks=TaskCounts(
            unassigned=tasks.waiting,
            running=running,
            waiting_on_dependencies=len(tasks.records) - tasks.waiting - running,
            success=counters["tasks_succeeded"],
            failed=sum(counters[f"tasks_{kind.name.lower()}"] for kind in _FAILED_KINDS),
            canceled=counters["tasks_canceled"],
            not_found=counters["tasks_not_found"],
            dropped=counters["tasks_dropped"],
        ),
        clients=[client_status(client, tasks, object_sizes, now) for client in peers.clients.values()],
        object_count=len(objects.stored),
        object_bytes=sum(object_sizes.values()),
        workers=workers,
        stores=store_status(stores, peers, now),
        bytes_relayed=counters["bytes_relayed"],
        waiting_for_tags=[
            TagsWait(tags=list(tags), tasks=count) for tags, count in sorted(waiting_for_tags.items(), key=_by_tags)
        ],
    )


def client_status(client: ClientPeer, tasks: TaskTable, object_sizes: dict[bytes, int], now: float) -> ClientStatus:
    summary = tasks.client_summary(client, now)
    return ClientStatus(
        name=client.name,
        tasks=len(client.task_ids),
        objects=len(client.object_ids),
        object_bytes=sum(object_sizes.get(object_id, 0) for object_id in client.object_ids),
        queued=summary.queued,
        running=summary.running,
        oldest_ready_seconds=summary.oldest_ready_seconds,
        share=client.share,
    )


def _by_tags(item: tuple[tuple[str, ...], int]) -> tuple[str, ...]:
    return item[0]


def store_status(stores: StoreRegistry, peers: PeerRegistry, now: float) -> list[StoreStatus]:
    workers_by_store = collections.Counter(worker.store_address for worker in peers.workers.values())
    rows = []
    for address, store in sorted(stores.by_address.items()):
        heartbeat = store.last_heartbeat or m.Heartbeat()
        rows.append(StoreStatus(
            name=store.name,
            hostname=store.hostname,
            data_address=address,
            capacity_bytes=store.capacity_bytes,
            bytes_held=heartbeat.bytes_held,
            bytes_spilled=heartbeat.bytes_spilled,
            bytes_pinned=heartbeat.bytes_pinned,
            objects=heartbeat.object_count,
            workers=workers_by_store[address],
            seconds_since_heard=now - store.last_seen,
        ))
    return rows
