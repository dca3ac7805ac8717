"""The web view's series: rates and the task stream come from differences between snapshots, nothing else."""

from __future__ import annotations

import json

import pytest

from scaler.protocol.monitor_messages import MonitorSnapshot, TaskCounts, WorkerStatus
from scaler.ui.history import CHARTED_WORKERS, MAX_SERIES, MEAN_SERIES, MonitorHistory

pytestmark = pytest.mark.timeout(30)


def snap(sequence: int, at: float, workers: tuple[str, ...] = ("w1", "w2"), **tasks: int) -> MonitorSnapshot:
    return MonitorSnapshot(
        sequence=sequence,
        published_at=at,
        tasks=TaskCounts(**tasks),
        workers=[
            WorkerStatus(name=name, agent_cpu_percent=1.0, processor_cpu_percent=float(sequence),
                         agent_rss_bytes=10, processor_rss_bytes=20 + sequence, processor_initialized=True)
            for name in workers
        ],
    )


def test_first_snapshot_has_no_rates() -> None:
    history = MonitorHistory()
    assert history.add(snap(0, 100.0, unassigned=5))
    assert history.latest is not None
    assert list(history.throughput) == [] and list(history.stream) == []
    assert {name: len(series) for name, series in history.workers.items()} == {"w1": 1, "w2": 1}


def test_rates_are_differences_over_the_schedulers_clock() -> None:
    history = MonitorHistory()
    history.add(snap(0, 100.0, unassigned=10, running=0, success=0))
    history.add(snap(1, 102.0, unassigned=2, running=4, success=6, failed=2))
    (point,) = history.throughput
    assert point.at == 102.0
    assert point.finished_per_second == pytest.approx(8 / 2)
    # accepted = (held + finished) after - before = (6 + 8) - 10
    assert point.accepted_per_second == pytest.approx(4 / 2)
    (entry,) = history.stream
    assert (entry.accepted, entry.succeeded, entry.failed, entry.canceled, entry.running, entry.unassigned) == (
        4, 6, 2, 0, 4, 2
    )
    assert entry.seconds == 2.0


def test_quiet_seconds_add_a_zero_rate_but_no_stream_entry() -> None:
    history = MonitorHistory()
    history.add(snap(0, 100.0, success=5))
    history.add(snap(1, 101.0, success=5))
    assert [point.finished_per_second for point in history.throughput] == [0.0]
    assert list(history.stream) == []


def test_the_same_snapshot_twice_is_ignored() -> None:
    history = MonitorHistory()
    assert history.add(snap(0, 100.0))
    assert not history.add(snap(0, 100.0))
    assert len(history.workers["w1"]) == 1


def test_a_restarted_scheduler_starts_the_history_again() -> None:
    history = MonitorHistory()
    history.add(snap(5, 100.0, success=50))
    history.add(snap(6, 101.0, success=60))
    assert history.generation == 0
    history.add(snap(0, 102.0, success=0))
    assert history.generation == 1
    assert list(history.throughput) == [] and list(history.stream) == []
    assert history.latest is not None and history.latest.sequence == 0


def test_a_clock_step_back_gives_no_rate() -> None:
    history = MonitorHistory()
    history.add(snap(0, 100.0, success=1))
    history.add(snap(1, 99.0, success=3))
    assert list(history.throughput) == []


def test_workers_that_leave_lose_their_series() -> None:
    history = MonitorHistory()
    history.add(snap(0, 100.0, workers=("w1", "w2")))
    history.add(snap(1, 101.0, workers=("w2", "w3")))
    assert sorted(history.workers) == ["w2", "w3"]
    assert len(history.workers["w2"]) == 2
    point = history.workers["w2"][-1]
    assert point.processor_cpu_percent == 1.0 and point.rss_bytes == 10 + 21


def test_more_workers_than_the_charts_can_tell_apart_are_charted_as_their_mean_and_max() -> None:
    history = MonitorHistory()
    few = tuple(f"w{index:02d}" for index in range(CHARTED_WORKERS))
    history.add(snap(0, 100.0, workers=few))
    assert sorted(history.workers) == list(few)

    many = MonitorSnapshot(sequence=1, published_at=101.0, workers=[
        WorkerStatus(name=f"w{index:03d}", agent_cpu_percent=1.0, processor_cpu_percent=float(index),
                     agent_rss_bytes=10, processor_rss_bytes=index)
        for index in range(500)
    ])
    history.add(many)
    assert sorted(history.workers) == [MAX_SERIES, MEAN_SERIES]
    (mean,), (maximum,) = history.workers[MEAN_SERIES], history.workers[MAX_SERIES]
    assert (mean.processor_cpu_percent, mean.rss_bytes, mean.agent_cpu_percent) == (249.5, 10 + 249, 1.0)
    assert (maximum.processor_cpu_percent, maximum.rss_bytes) == (499.0, 10 + 499)
    assert len(json.dumps(history.to_json())) < 200_000  # the latest snapshot's rows, not 500 series

    history.add(snap(2, 102.0, workers=few))  # back to a few: each its own line again
    assert sorted(history.workers) == list(few)


def test_series_are_bounded() -> None:
    history = MonitorHistory(keep_points=5, stream_length=3)
    for sequence in range(20):
        history.add(snap(sequence, 100.0 + sequence, success=sequence))
    assert len(history.throughput) == 5
    assert len(history.stream) == 3
    assert len(history.workers["w1"]) == 5
    assert [entry.at for entry in history.stream] == [117.0, 118.0, 119.0]


def test_json_for_the_page() -> None:
    history = MonitorHistory(keep_points=10, stream_length=4)
    history.add(snap(0, 100.0, success=0))
    history.add(snap(1, 101.0, success=3))
    full = json.loads(json.dumps(history.to_json()))
    assert full["snapshot"]["tasks"]["success"] == 3
    assert full["snapshot"]["workers"][0]["flags"] == "100"
    assert len(full["throughput"]) == 1 and len(full["stream"]) == 1
    assert set(full["workers"]) == {"w1", "w2"} and len(full["workers"]["w1"]) == 2
    assert full["limits"] == {"points": 10, "stream": 4}

    history.add(snap(2, 102.0, success=3))
    update = json.loads(json.dumps(history.update_json()))
    assert update["snapshot"]["sequence"] == 2
    assert [point["finished_per_second"] for point in update["throughput"]] == [0.0]
    assert update["stream"] == []  # nothing happened in that second
    assert {name: len(points) for name, points in update["workers"].items()} == {"w1": 1, "w2": 1}


def test_empty_history_json() -> None:
    full = MonitorHistory().to_json()
    assert full["snapshot"] is None and full["throughput"] == [] and full["workers"] == {}
