"""Outcomes from the scheduler reach the sink of each task: a map's collector or a future, whichever it is."""

from __future__ import annotations

import concurrent.futures
import pickle

import pytest

from scaler.client.future import ScalerFuture
from scaler.client.result_routing import PendingResults
from scaler.client.result_sinks import MapCollector
from scaler.errors import SchedulerLostError
from scaler.protocol import messages as m
from scaler.protocol.serializer import DefaultSerializer


def future(task_id: int) -> ScalerFuture:
    return ScalerFuture(task_id, connection=None, serializer=DefaultSerializer())  # type: ignore[arg-type]


def results(succeeded: dict[int, object], failures: list[m.TaskFailure] | None = None,
            warnings: list[m.TaskWarning] | None = None) -> m.TaskResults:
    return m.TaskResults(
        succeeded_ids=list(succeeded), payloads=[pickle.dumps(value) for value in succeeded.values()],
        failures=failures or [], warnings=warnings or [],
    )


def test_a_maps_results_land_in_argument_order_whatever_order_they_arrive_in() -> None:
    pending = PendingResults()
    collector = MapCollector(first_task_id=100, count=3)
    pending.expect_all(collector.task_ids, collector)
    pending.route(results({102: "c", 100: "a"}))
    assert not collector.finished.is_set()
    pending.route(results({101: "b"}))
    assert collector.finished.is_set()
    assert [pickle.loads(payload) for payload in collector.payloads] == ["a", "b", "c"]
    assert len(pending) == 0


def test_a_failed_map_task_ends_the_wait_at_once_with_its_place() -> None:
    pending = PendingResults()
    collector = MapCollector(first_task_id=7, count=3)
    pending.expect_all(collector.task_ids, collector)
    pending.route(results({}, [m.TaskFailure(task_id=8, kind=m.FailureKind.WORKER_DIED, message="gone")]))
    assert collector.finished.is_set()
    assert list(collector.errors) == [1]


def test_futures_and_maps_get_the_same_outcomes_through_the_same_calls() -> None:
    pending = PendingResults()
    collector = MapCollector(first_task_id=10, count=2)
    pending.expect_all(collector.task_ids, collector)
    done, canceled = future(1), future(2)
    pending.expect(1, done)
    pending.expect(2, canceled)
    canceled_failure = [m.TaskFailure(task_id=task_id, kind=m.FailureKind.CANCELED) for task_id in (2, 11)]
    pending.route(results({1: 42, 10: 0}, canceled_failure))
    assert done.result(timeout=0) == 42
    assert canceled.cancelled()
    assert isinstance(collector.errors[1], concurrent.futures.CancelledError)


def test_a_late_answer_to_a_cancel_is_ignored() -> None:
    pending = PendingResults()
    waiting = future(3)
    pending.expect(3, waiting)
    pending.route(results({}, [m.TaskFailure(task_id=3, kind=m.FailureKind.NOT_FOUND)]))
    assert not waiting.done()
    assert len(pending) == 1


def test_a_lost_scheduler_fails_every_waiting_sink() -> None:
    pending = PendingResults()
    collector = MapCollector(first_task_id=20, count=2)
    pending.expect_all(collector.task_ids, collector)
    waiting = future(5)
    pending.expect(5, waiting)
    lost = SchedulerLostError("gone")
    pending.fail_all(lost)
    assert waiting.exception(timeout=0) is lost
    assert collector.finished.is_set() and set(collector.errors.values()) == {lost}
    assert len(pending) == 0


def test_a_warning_arrives_before_the_outcome_it_belongs_to() -> None:
    pending = PendingResults()
    waiting = future(6)
    pending.expect(6, waiting)
    warning = m.TaskWarning(task_id=6, category="builtins.UserWarning", message="careful", filename="x.py", lineno=1)
    pending.route(results({6: None}, warnings=[warning]))
    with pytest.warns(UserWarning, match="careful"):
        waiting.result(timeout=0)
