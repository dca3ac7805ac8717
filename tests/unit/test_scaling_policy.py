"""The adaptive scaling policy, driven with simulated time: no processes, no sockets, no resource manager."""

from __future__ import annotations

from typing import Iterable

import pytest

from scaler.adapters.adaptive_scaler import load_from_snapshot
from scaler.adapters.scaling_policy import (
    STALE_LOAD_SECONDS,
    ClusterLoad,
    DrainWorkers,
    ScalingPolicy,
    ScalingSettings,
    StartGroups,
    StopGroups,
)
from scaler.adapters.worker_adapter import GroupState, WorkerGroup
from scaler.protocol.monitor_messages import MonitorSnapshot, TaskCounts, WorkerStatus


class FakeResourceManager:
    """Carries out the policy's starts at once, naming groups g0, g1, ...; workers g0|0, g0|1, ..."""

    def __init__(self, policy: ScalingPolicy, per_group: int = 1) -> None:
        self.policy = policy
        self.per_group = per_group
        self.started = 0
        self.stopped: list[str] = []
        self.drained: list[str] = []

    def start(self, count: int, now: float) -> list[WorkerGroup]:
        groups = []
        for _ in range(count):
            group_id = f"g{self.started}"
            self.started += 1
            names = tuple(f"{group_id}|{index}" for index in range(self.per_group))
            groups.append(WorkerGroup(group_id, names, GroupState.PENDING))
        self.policy.on_started(groups, now)
        return groups

    def step(self, now: float, waiting: int, tasks: dict[str, int], draining: Iterable[str] = ()) -> list:
        self.policy.on_load(ClusterLoad(waiting, dict(tasks), frozenset(draining)), now)
        actions = self.policy.decide(now)
        for action in actions:
            if isinstance(action, StartGroups):
                self.start(action.count, now)
            elif isinstance(action, StopGroups):
                self.stopped.extend(action.group_ids)
            elif isinstance(action, DrainWorkers):
                self.drained.extend(action.worker_names)
        return actions

    def end(self, group_id: str, now: float, detail: str = "") -> list:
        names = (f"{group_id}|0",)
        return self.policy.on_groups([WorkerGroup(group_id, names, GroupState.ENDED, detail)], now)


def policy_with(minimum: int = 0, maximum: int = 4, idle: float = 10.0, per_group: int = 1,
                drain_first: bool = False) -> tuple[ScalingPolicy, FakeResourceManager]:
    policy = ScalingPolicy(ScalingSettings(minimum, maximum, idle), per_group, drain_first=drain_first)
    return policy, FakeResourceManager(policy, per_group)


def test_the_minimum_is_started_with_no_load() -> None:
    policy, manager = policy_with(minimum=2)
    actions = manager.step(0.0, waiting=0, tasks={})
    assert actions == [StartGroups(2, "2 workers wanted, 0 running or asked for")]
    assert manager.step(1.0, waiting=0, tasks={}) == []  # asked for already


def test_waiting_tasks_ask_for_workers_up_to_the_maximum() -> None:
    policy, manager = policy_with(maximum=3)
    manager.step(0.0, waiting=100, tasks={})
    assert manager.started == 3
    # Still pending (not in the feed): nothing more is asked for while the load stays.
    for second in range(1, 30):
        manager.step(float(second), waiting=100, tasks={})
    assert manager.started == 3


def test_one_worker_per_task_held_counting_tasks_already_assigned() -> None:
    policy, manager = policy_with(maximum=8)
    manager.step(0.0, waiting=0, tasks={})
    assert manager.started == 0
    manager.step(1.0, waiting=2, tasks={})
    assert manager.started == 2
    # Both joined and took the tasks; one more arrives and is queued on a busy worker.
    manager.step(2.0, waiting=0, tasks={"g0|0": 2, "g1|0": 1})
    assert manager.started == 3


def test_groups_of_several_workers_are_rounded_up_on_start_and_down_on_release() -> None:
    policy, manager = policy_with(maximum=8, per_group=4, idle=5.0)
    manager.step(0.0, waiting=5, tasks={})
    assert manager.started == 2  # 5 workers wanted: two groups of 4
    busy = {"g0|0": 1, "g0|1": 1, "g0|2": 1, "g0|3": 1, "g1|0": 1, "g1|1": 0, "g1|2": 0, "g1|3": 0}
    manager.step(1.0, waiting=0, tasks=busy)
    # 5 wanted, 8 running: a surplus of 3 workers is less than a group, so nothing is released.
    manager.step(100.0, waiting=0, tasks=busy)
    assert manager.stopped == []


def test_an_idle_group_is_released_after_the_idle_time_and_not_before() -> None:
    policy, manager = policy_with(maximum=2, idle=10.0)
    manager.step(0.0, waiting=2, tasks={})
    manager.step(1.0, waiting=0, tasks={"g0|0": 1, "g1|0": 1})
    manager.step(2.0, waiting=0, tasks={"g0|0": 0, "g1|0": 1})
    manager.step(11.9, waiting=0, tasks={"g0|0": 0, "g1|0": 1})
    assert manager.stopped == []  # g0 was first seen idle at 2.0
    actions = manager.step(12.0, waiting=0, tasks={"g0|0": 0, "g1|0": 1})
    assert manager.stopped == ["g0"]
    assert isinstance(actions[0], StopGroups) and "idle for 10s" in actions[0].reason
    # g1 keeps its task however long it runs.
    for second in range(13, 200):
        manager.step(float(second), waiting=0, tasks={"g1|0": 1})
    assert manager.stopped == ["g0"]


def test_release_stops_at_the_minimum() -> None:
    policy, manager = policy_with(minimum=1, maximum=3, idle=5.0)
    manager.step(0.0, waiting=3, tasks={})
    manager.step(1.0, waiting=0, tasks={"g0|0": 0, "g1|0": 0, "g2|0": 0})
    manager.step(100.0, waiting=0, tasks={"g0|0": 0, "g1|0": 0, "g2|0": 0})
    assert len(manager.stopped) == 2
    manager.step(200.0, waiting=0, tasks={"g2|0": 0})
    assert len(manager.stopped) == 2


def test_a_worker_with_a_task_is_never_stopped_even_when_over_the_maximum_of_wanted() -> None:
    policy, manager = policy_with(maximum=2, idle=1.0)
    manager.step(0.0, waiting=2, tasks={})
    # Both hold a task (one just got it): no release, whatever their idle history.
    for second in range(1, 50):
        manager.step(float(second), waiting=0, tasks={"g0|0": 1, "g1|0": 1})
    assert manager.stopped == []
    # Its idle time counts from the first snapshot that shows it without a task.
    manager.step(50.0, waiting=0, tasks={"g0|0": 0, "g1|0": 1})
    manager.step(50.5, waiting=0, tasks={"g0|0": 0, "g1|0": 1})
    assert manager.stopped == []
    manager.step(51.0, waiting=0, tasks={"g0|0": 0, "g1|0": 1})
    assert manager.stopped == ["g0"]


def test_groups_that_never_joined_are_released_first() -> None:
    policy, manager = policy_with(maximum=3, idle=5.0)
    manager.step(0.0, waiting=3, tasks={})
    # g0 and g1 joined; g2 is still queued at the resource manager when the work is done.
    manager.step(1.0, waiting=0, tasks={"g0|0": 1, "g1|0": 1})
    manager.step(2.0, waiting=0, tasks={"g0|0": 0, "g1|0": 1})
    manager.step(10.0, waiting=0, tasks={"g0|0": 0, "g1|0": 1})
    # One worker wanted (g1's task): both g2 (pending since 0.0) and g0 (idle since 2.0) go, g2 first.
    assert manager.stopped == ["g2", "g0"]


def test_a_group_the_resource_manager_ended_is_replaced_while_work_waits() -> None:
    policy, manager = policy_with(maximum=2)
    manager.step(0.0, waiting=4, tasks={})
    manager.step(1.0, waiting=2, tasks={"g0|0": 1, "g1|0": 1})
    ended = manager.end("g0", 2.0, "PREEMPTED")
    summary = [(e.group.group_id, e.expected, e.joined, e.group.detail) for e in ended]
    assert summary == [("g0", False, True, "PREEMPTED")]
    # Its task is back in the queue (the scheduler requeued it): a new group is asked for at once.
    manager.step(2.5, waiting=3, tasks={"g1|0": 1})
    assert manager.started == 3


def test_groups_that_end_without_joining_delay_the_next_start_more_each_time() -> None:
    policy, manager = policy_with(maximum=1)
    manager.step(0.0, waiting=1, tasks={})
    assert manager.started == 1
    ended = manager.end("g0", 30.0, "exit code 1")
    assert ended[0].joined is False
    manager.step(30.0, waiting=1, tasks={})
    assert manager.started == 1  # waits 5 s
    manager.step(35.0, waiting=1, tasks={})
    assert manager.started == 2
    manager.end("g1", 40.0)
    manager.step(49.0, waiting=1, tasks={})
    assert manager.started == 2  # then 10 s
    manager.step(50.0, waiting=1, tasks={})
    assert manager.started == 3
    # One that joins resets the delay.
    manager.step(51.0, waiting=0, tasks={"g2|0": 1})
    manager.end("g2", 52.0, "PREEMPTED")
    manager.step(52.0, waiting=1, tasks={})
    assert manager.started == 4


def test_a_failed_start_delays_the_next_one() -> None:
    policy, manager = policy_with(maximum=1)
    policy.on_load(ClusterLoad(1, {}), 0.0)
    assert policy.decide(0.0) == [StartGroups(1, "1 workers wanted, 0 running or asked for")]
    policy.on_start_failed(0.0)
    assert policy.decide(1.0) == []
    policy.on_load(ClusterLoad(1, {}), 5.0)
    assert [type(action) for action in policy.decide(5.0)] == [StartGroups]


def test_nothing_is_decided_on_a_stale_or_missing_snapshot() -> None:
    policy, manager = policy_with(minimum=1)
    assert policy.decide(0.0) == []
    policy.on_load(ClusterLoad(5, {}), 0.0)
    assert policy.decide(STALE_LOAD_SECONDS + 0.1) == []


def test_workers_that_are_not_ours_count_against_the_tasks() -> None:
    policy, manager = policy_with(maximum=8)
    manager.step(0.0, waiting=1, tasks={"static|0": 1, "static|1": 1})
    assert manager.started == 1  # three tasks, two workers already there


def test_groups_the_adapter_reports_on_its_own_are_managed_too() -> None:
    policy, manager = policy_with(maximum=2, idle=5.0)
    policy.on_groups([WorkerGroup("old", ("old|0",), GroupState.RUNNING)], 0.0)
    manager.step(1.0, waiting=0, tasks={"old|0": 0})
    manager.step(10.0, waiting=0, tasks={"old|0": 0})
    assert manager.stopped == ["old"]
    ended = policy.on_groups([WorkerGroup("old", ("old|0",), GroupState.ENDED)], 11.0)
    assert ended[0].expected is True
    assert policy.group_ids == []


def test_drain_first_drains_then_stops_only_once_drained() -> None:
    policy, manager = policy_with(maximum=2, idle=5.0, drain_first=True)
    manager.step(0.0, waiting=2, tasks={})
    manager.step(1.0, waiting=0, tasks={"g0|0": 0, "g1|0": 1})
    manager.step(6.0, waiting=0, tasks={"g0|0": 0, "g1|0": 1})
    assert manager.drained == ["g0|0"] and manager.stopped == []
    # The scheduler dispatched a task to it just before the drain: not stopped while it holds it,
    # and that task does not make the policy ask for another worker.
    manager.step(7.0, waiting=0, tasks={"g0|0": 1, "g1|0": 1}, draining={"g0|0"})
    assert manager.stopped == [] and manager.started == 2
    manager.step(8.0, waiting=0, tasks={"g0|0": 0, "g1|0": 1}, draining={"g0|0"})
    assert manager.stopped == ["g0"]


def test_a_drain_that_could_not_be_asked_for_leaves_the_group_live_to_be_chosen_again() -> None:
    policy, manager = policy_with(maximum=2, idle=5.0, drain_first=True)
    manager.step(0.0, waiting=2, tasks={})
    manager.step(1.0, waiting=0, tasks={"g0|0": 0, "g1|0": 1})
    manager.step(6.0, waiting=0, tasks={"g0|0": 0, "g1|0": 1})
    assert manager.drained == ["g0|0"]
    policy.on_drain_failed(["g0|0"])
    # Live again: it counts as a running worker (nothing new is started for the task g1 holds) ...
    manager.step(7.0, waiting=0, tasks={"g0|0": 0, "g1|0": 2})
    assert manager.started == 2 and manager.stopped == []
    # ... and it is never stopped on a drain the scheduler did not report, but drained again.
    manager.step(8.0, waiting=0, tasks={"g0|0": 0, "g1|0": 1})
    assert manager.drained == ["g0|0", "g0|0"] and manager.stopped == []


def test_the_monitor_feeds_draining_flag_is_what_the_policy_reads() -> None:
    snapshot = MonitorSnapshot(
        tasks=TaskCounts(unassigned=3),
        workers=[WorkerStatus(name="a", assigned=2), WorkerStatus(name="b", assigned=0, draining=True)],
    )
    assert load_from_snapshot(snapshot) == ClusterLoad(3, {"a": 2, "b": 0}, frozenset({"b"}))


def test_drain_first_stops_groups_that_never_joined_without_draining() -> None:
    policy, manager = policy_with(maximum=1, idle=5.0, drain_first=True)
    manager.step(0.0, waiting=1, tasks={})
    manager.step(1.0, waiting=0, tasks={})
    manager.step(5.0, waiting=0, tasks={})
    assert manager.stopped == ["g0"] and manager.drained == []


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"minimum_workers": -1}, ValueError),
        ({"maximum_workers": 0}, ValueError),
        ({"minimum_workers": 3, "maximum_workers": 2}, ValueError),
        ({"idle_seconds": 0}, ValueError),
        ({"idle_seconds": float("inf")}, ValueError),
        ({"maximum_workers": 2.5}, TypeError),
        ({"idle_seconds": "60"}, TypeError),
    ],
)
def test_bad_settings_are_refused_where_they_are_given(arguments: dict, error: type) -> None:
    with pytest.raises(error):
        ScalingSettings(**arguments)


def test_workers_per_group_must_be_positive() -> None:
    with pytest.raises(ValueError, match="workers_per_group"):
        ScalingPolicy(ScalingSettings(), 0)
