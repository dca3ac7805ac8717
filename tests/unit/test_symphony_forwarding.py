"""The Symphony worker's forwarding rules: base concurrency, nested tasks first, starts, cancels, releases."""

from __future__ import annotations

import pytest

from scaler.adapters.symphony.forwarding import ForwardingQueue, Ready, Stage


def test_unnested_tasks_go_up_to_the_base_concurrency_and_more_as_they_finish() -> None:
    queue = ForwardingQueue(base_concurrency=2)
    for task_id in range(5):
        queue.add(task_id, depth=0, report_start=False)
    assert queue.take_ready(0.0) == Ready([], [0, 1])
    assert queue.take_ready(0.0) == Ready([], [])
    assert queue.finish(0) is True
    assert queue.take_ready(0.0) == Ready([], [2])
    assert queue.held == 4 and queue.in_symphony == 2


def test_nested_tasks_go_at_once_past_the_base_concurrency_deepest_and_newest_first() -> None:
    queue = ForwardingQueue(base_concurrency=1)
    queue.add(1, depth=0, report_start=False)
    queue.add(2, depth=0, report_start=False)
    assert queue.take_ready(0.0).forward == [1]
    # Task 1 waits on its children: they must run although the base concurrency is used up.
    queue.add(10, depth=1, report_start=False)
    queue.add(11, depth=1, report_start=False)
    queue.add(20, depth=2, report_start=False)
    assert queue.take_ready(0.0) == Ready([], [20, 11, 10])
    assert queue.base_in_use == 1  # nested tasks do not use the base slots
    for task_id in (20, 11, 10):
        queue.finish(task_id)
    assert queue.take_ready(0.0).forward == []
    queue.finish(1)
    assert queue.take_ready(0.0).forward == [2]


def test_report_start_tasks_are_announced_hold_their_slot_and_go_on_the_answer() -> None:
    queue = ForwardingQueue(base_concurrency=1, start_answer_seconds=30.0)
    queue.add(1, depth=0, report_start=True)
    queue.add(2, depth=0, report_start=False)
    assert queue.take_ready(0.0) == Ready([1], [])
    assert queue.take_ready(1.0) == Ready([], [])  # the slot is taken while we wait for the answer
    assert queue.on_start_answer([1, 99]) == [1]
    assert queue.stage_of(1) is Stage.FORWARDED
    assert queue.on_start_answer([1]) == []


def test_an_unanswered_announcement_gives_the_task_back_and_frees_its_slot() -> None:
    queue = ForwardingQueue(base_concurrency=1, start_answer_seconds=30.0)
    queue.add(1, depth=0, report_start=True)
    queue.add(2, depth=0, report_start=False)
    queue.take_ready(0.0)
    assert queue.unanswered(30.0) == []
    assert queue.unanswered(30.5) == [1]
    assert queue.take_ready(31.0).forward == [2]


def test_cancel_finds_each_stage() -> None:
    queue = ForwardingQueue(base_concurrency=1)
    for task_id in (1, 2):
        queue.add(task_id, depth=0, report_start=False)
    queue.take_ready(0.0)
    assert queue.cancel(2, force=False) is Stage.QUEUED and queue.stage_of(2) is None
    assert queue.cancel(1, force=False) is Stage.FORWARDED and queue.stage_of(1) is Stage.FORWARDED
    assert queue.cancel(1, force=True) is Stage.FORWARDED and queue.stage_of(1) is Stage.ABANDONED
    assert queue.held == 0
    assert queue.cancel(1, force=True) is None
    # Symphony still runs it: its slot is freed only when it answers, and its answer is dropped.
    queue.add(3, depth=0, report_start=False)
    assert queue.take_ready(0.0).forward == []
    assert queue.finish(1) is False
    assert queue.take_ready(0.0).forward == [3]
    assert queue.cancel(404, force=True) is None


def test_release_gives_back_only_what_has_not_gone_to_symphony() -> None:
    queue = ForwardingQueue(base_concurrency=1)
    queue.add(1, depth=0, report_start=False)
    queue.add(2, depth=0, report_start=True)
    queue.add(3, depth=0, report_start=False)
    queue.take_ready(0.0)
    assert queue.release([1, 2, 3, 4]) == [2, 3]
    assert queue.held == 1


def test_a_broken_session_loses_what_was_forwarded() -> None:
    queue = ForwardingQueue(base_concurrency=2)
    for task_id in (1, 2, 3):
        queue.add(task_id, depth=0, report_start=False)
    queue.take_ready(0.0)
    queue.cancel(2, force=True)
    assert queue.fail_forwarded() == [1]
    assert queue.base_in_use == 0 and queue.take_ready(0.0).forward == [3]


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_base_concurrency_must_be_a_positive_whole_number(value: object) -> None:
    with pytest.raises(ValueError, match="base concurrency"):
        ForwardingQueue(value)  # type: ignore[arg-type]
