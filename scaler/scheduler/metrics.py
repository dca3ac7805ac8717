"""The Prometheus metrics of a scheduler, made from the monitor snapshot it publishes (docs/metrics.md lists them).

Only a snapshot is read here, never the core: the HTTP thread that serves /metrics (metrics_server.py)
calls `SnapshotCollector.collect` while the scheduler's thread goes on owning its state. The snapshot is
the one the monitor feed publishes, made once a second; nothing is counted per task for this.
"""

from __future__ import annotations

import collections
import time
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scaler.protocol.monitor_messages import ClientStatus, MonitorSnapshot

# Clients with a label of their own, the busiest first; the rest are summed under OTHER_CLIENTS, so that a
# scheduler serving thousands of short-lived clients does not make thousands of time series.
CLIENT_LABEL_LIMIT = 20
OTHER_CLIENTS = "(other)"
_OUTCOMES = ("success", "failed", "canceled", "not_found", "dropped")


class SnapshotCollector(Collector):
    """Yields the metric families of the newest snapshot given to `publish` (none before the first)."""

    def __init__(self) -> None:
        # Replaced whole by the scheduler's thread, read whole by the HTTP thread: a reference swap, no lock.
        self._latest: tuple[MonitorSnapshot, float] | None = None

    def publish(self, snapshot: MonitorSnapshot) -> None:
        """Scheduler thread: the snapshot is never changed after this (the HTTP thread reads it)."""
        self._latest = (snapshot, time.monotonic())

    def collect(self) -> Iterator[Metric]:
        latest = self._latest
        if latest is None:
            return iter(())
        snapshot, made_at = latest
        return iter(metric_families(snapshot, time.monotonic() - made_at))


def metric_families(snapshot: MonitorSnapshot, age_seconds: float) -> list[Metric]:
    families: list[Metric] = []
    families.extend(_task_families(snapshot))
    families.extend(_client_families(snapshot.clients))
    families.extend(_worker_families(snapshot))
    families.extend(_store_families(snapshot))
    families.extend(_message_families(snapshot))
    age = GaugeMetricFamily(
        "scaler_snapshot_age_seconds", "How old the figures of this scrape are (they are made once a second)"
    )
    age.add_metric([], age_seconds)
    cpu = GaugeMetricFamily(
        "scaler_scheduler_cpu_percent", "CPU the scheduler process used over the last second (100: one core)"
    )
    cpu.add_metric([], snapshot.scheduler_cpu_percent)
    rss = GaugeMetricFamily("scaler_scheduler_rss_bytes", "Resident memory of the scheduler process")
    rss.add_metric([], snapshot.scheduler_rss_bytes)
    families.extend((age, cpu, rss))
    return families


def _task_families(snapshot: MonitorSnapshot) -> list[Metric]:
    counts = snapshot.tasks
    tasks = GaugeMetricFamily("scaler_tasks", "Unfinished tasks by state", labels=["state"])
    tasks.add_metric(["queued"], counts.unassigned)
    tasks.add_metric(["running"], counts.running)
    tasks.add_metric(["waiting_on_dependencies"], counts.waiting_on_dependencies)
    finished = CounterMetricFamily(
        "scaler_tasks_finished", "Tasks finished since the scheduler started, by outcome", labels=["outcome"]
    )
    for outcome in _OUTCOMES:
        finished.add_metric([outcome], getattr(counts, outcome))
    waiting = GaugeMetricFamily(
        "scaler_tasks_waiting_for_tags", "Ready tasks that no connected worker may run, by the tags they need",
        labels=["tags"],
    )
    for wait in snapshot.waiting_for_tags:
        waiting.add_metric([",".join(wait.tags)], wait.tasks)
    return [tasks, finished, waiting]


def _client_families(clients: list[ClientStatus]) -> list[Metric]:
    count = GaugeMetricFamily("scaler_clients", "Connected clients")
    count.add_metric([], len(clients))
    by_label: dict[str, list[float]] = {}
    busiest = sorted(clients, key=lambda client: (-(client.queued + client.running), client.name))
    for rank, client in enumerate(busiest):
        label = client.name if rank < CLIENT_LABEL_LIMIT else OTHER_CLIENTS
        row = by_label.setdefault(label, [0, 0, 0, 0.0])
        row[0] += client.queued
        row[1] += client.running
        row[2] += client.tasks
        row[3] = max(row[3], client.oldest_ready_seconds)
    tasks = GaugeMetricFamily(
        "scaler_client_tasks",
        f"Each client's tasks: queued (ready, in the scheduler), running (sent to a worker), unfinished (all); "
        f"beyond the {CLIENT_LABEL_LIMIT} busiest, clients are summed under client=\"{OTHER_CLIENTS}\"",
        labels=["client", "state"],
    )
    oldest = GaugeMetricFamily(
        "scaler_client_oldest_ready_seconds", "How long each client's longest-waiting queued task has waited",
        labels=["client"],
    )
    for label, (queued, running, unfinished, waited) in sorted(by_label.items()):
        tasks.add_metric([label, "queued"], queued)
        tasks.add_metric([label, "running"], running)
        tasks.add_metric([label, "unfinished"], unfinished)
        oldest.add_metric([label], waited)
    return [count, tasks, oldest]


def _worker_families(snapshot: MonitorSnapshot) -> list[Metric]:
    by_tags = collections.Counter(",".join(worker.tags) for worker in snapshot.workers)
    workers = GaugeMetricFamily("scaler_workers", "Connected workers, by their tags (\"\": none)", labels=["tags"])
    for tags, count in sorted(by_tags.items()):
        workers.add_metric([tags], count)
    slots = GaugeMetricFamily(
        "scaler_worker_slots",
        "Tasks the connected workers accept at once (their queues), and how many more they would take now",
        labels=["state"],
    )
    slots.add_metric(["capacity"], sum(worker.capacity for worker in snapshot.workers))
    slots.add_metric(["free"], sum(worker.free for worker in snapshot.workers))
    draining = GaugeMetricFamily("scaler_workers_draining", "Workers sent no new task (drain_workers)")
    draining.add_metric([], sum(1 for worker in snapshot.workers if worker.draining))
    return [workers, slots, draining]


def _store_families(snapshot: MonitorSnapshot) -> list[Metric]:
    held = GaugeMetricFamily("scaler_store_held_bytes", "Bytes of objects each store holds", labels=["store"])
    spilled = GaugeMetricFamily(
        "scaler_store_spilled_bytes", "Bytes each store has spilled to disk (part of held)", labels=["store"]
    )
    capacity = GaugeMetricFamily(
        "scaler_store_capacity_bytes", "Bytes each store keeps in memory before it spills", labels=["store"]
    )
    objects = GaugeMetricFamily("scaler_store_objects", "Objects each store holds", labels=["store"])
    for store in snapshot.stores:
        held.add_metric([store.name], store.bytes_held)
        spilled.add_metric([store.name], store.bytes_spilled)
        capacity.add_metric([store.name], store.capacity_bytes)
        objects.add_metric([store.name], store.objects)
    scheduler_objects = GaugeMetricFamily("scaler_objects", "Objects the scheduler tracks")
    scheduler_objects.add_metric([], snapshot.object_count)
    object_bytes = GaugeMetricFamily("scaler_object_bytes", "Bytes of the objects the scheduler tracks")
    object_bytes.add_metric([], snapshot.object_bytes)
    relayed = CounterMetricFamily(
        "scaler_relayed_bytes", "Bytes of payloads the scheduler passed between peers without a common store"
    )
    relayed.add_metric([], snapshot.bytes_relayed)
    return [held, spilled, capacity, objects, scheduler_objects, object_bytes, relayed]


def _message_families(snapshot: MonitorSnapshot) -> list[Metric]:
    families: list[Metric] = []
    for direction, by_type in (("received", snapshot.received), ("sent", snapshot.sent)):
        family = CounterMetricFamily(
            f"scaler_messages_{direction}", f"Protocol messages the scheduler {direction}, by type", labels=["type"]
        )
        for name, count in sorted(by_type.items()):
            family.add_metric([name], count)
        families.append(family)
    return families
