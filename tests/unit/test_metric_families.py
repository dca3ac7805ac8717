"""What /metrics makes of a monitor snapshot (scaler/scheduler/metrics.py): bounded labels, no lost tasks."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from scaler.protocol.monitor_messages import ClientStatus, MonitorSnapshot, StoreStatus, TaskCounts, WorkerStatus
from scaler.scheduler.metrics import CLIENT_LABEL_LIMIT, OTHER_CLIENTS, SnapshotCollector


def scrape(snapshot: MonitorSnapshot | None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    collector = SnapshotCollector()
    if snapshot is not None:
        collector.publish(snapshot)
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_beyond_the_busiest_clients_the_rest_share_one_label_and_no_task_is_lost() -> None:
    clients = [ClientStatus(name=f"client-{index:03}", queued=index, running=1, tasks=index + 1) for index in range(50)]
    samples = scrape(MonitorSnapshot(clients=clients))
    labels = {dict(labels)["client"] for name, labels in samples if name == "scaler_client_tasks"}
    assert len(labels) == CLIENT_LABEL_LIMIT + 1 and OTHER_CLIENTS in labels
    # The busiest have labels of their own: the 20 with the most queued.
    assert {f"client-{index:03}" for index in range(30, 50)} <= labels
    queued = sum(value for (name, labels), value in samples.items()
                 if name == "scaler_client_tasks" and ("state", "queued") in labels)
    assert queued == sum(range(50))
    assert samples[("scaler_client_tasks", (("client", OTHER_CLIENTS), ("state", "running")))] == 30
    assert samples[("scaler_clients", ())] == 50


def test_counts_workers_by_tags_and_stores_by_name() -> None:
    snapshot = MonitorSnapshot(
        tasks=TaskCounts(unassigned=3, running=2, success=7, failed=1),
        workers=[WorkerStatus(name="a", capacity=4, free=1, tags=["python"]),
                 WorkerStatus(name="b", capacity=4, free=4, tags=["gpu", "python"]),
                 WorkerStatus(name="c", capacity=2, free=0, tags=["python"])],
        stores=[StoreStatus(name="host|store", bytes_held=100, bytes_spilled=40, capacity_bytes=1000)],
        received={"TaskSubmission": 5}, bytes_relayed=12,
    )
    samples = scrape(snapshot)
    assert samples[("scaler_workers", (("tags", "python"),))] == 2
    assert samples[("scaler_workers", (("tags", "gpu,python"),))] == 1
    assert samples[("scaler_worker_slots", (("state", "free"),))] == 5
    assert samples[("scaler_tasks", (("state", "queued"),))] == 3
    assert samples[("scaler_tasks_finished_total", (("outcome", "success"),))] == 7
    assert samples[("scaler_store_spilled_bytes", (("store", "host|store"),))] == 40
    assert samples[("scaler_messages_received_total", (("type", "TaskSubmission"),))] == 5
    assert samples[("scaler_relayed_bytes_total", ())] == 12


def test_before_the_first_snapshot_there_is_nothing_to_report() -> None:
    assert scrape(None) == {}
