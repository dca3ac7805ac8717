"""The processor's decisions, tested on its sans-I/O core (processor_harness.py drives it as processor.py does).

No process, socket, signal or clock: each test plays the agent and says when the task's code starts, waits and
ends, and checks what reaches the agent and when.
"""

from __future__ import annotations

import pytest
from processor_harness import DrivenCore

from scaler.protocol import messages as m
from scaler.worker.processor_core import (
    AGENT_ANSWER_SECONDS,
    FLUSH_EVERY_SECONDS,
    FLUSH_EVERY_TASKS,
    IDLE_BEFORE_GIVING_BACK_SECONDS,
)


@pytest.fixture
def driven() -> DrivenCore:
    return DrivenCore()


def results_sent(driven: DrivenCore) -> list[list[int]]:
    """The task ids of each TaskResults the agent got, in order."""
    return [
        [*message.succeeded_ids, *(failure.task_id for failure in message.failures),
         *(stored.task_id for stored in message.stored)]
        for message in driven.sent(m.TaskResults)
    ]


# ---------------------------------------------------------------------------------------------- order


def test_top_level_tasks_run_in_arrival_order(driven: DrivenCore) -> None:
    first = driven.submit(3)
    second = driven.submit(2)
    assert [driven.run() for _ in range(5)] == first + second
    assert driven.next() is None and driven.waits, "idle: it waits for the agent's next message"


def test_nested_tasks_run_deepest_first_and_newest_first_at_one_depth(driven: DrivenCore) -> None:
    top = driven.submit(1)
    children = driven.submit(2, depth=1)
    grandchildren = driven.submit(2, depth=2)
    later_children = driven.submit(1, depth=1)
    expected = [*grandchildren[::-1], *later_children, *children[::-1], *top]
    driven.read()
    assert driven.core.queued_task_ids() == expected
    assert [driven.run() for _ in range(6)] == expected


def test_tasks_sent_ahead_run_before_the_top_level_tasks_held_after_the_nested_ones_in_arrival_order(
    driven: DrivenCore,
) -> None:
    # A newcomer's tasks (TaskGroup.ahead): 1,000 no-op tasks of other clients queued here must not delay them.
    running, *held = driven.submit(4)
    assert driven.next() == running
    driven.code_starts()
    first = driven.submit(2, ahead=True)
    children = driven.submit(1, depth=1)
    second = driven.submit(1, ahead=True)
    nested_ahead = driven.submit(1, depth=1, ahead=True)  # a nested task keeps its depth's place
    driven.end()
    expected = [*nested_ahead, *children, *first, *second, *held]
    driven.read()
    assert driven.core.queued_task_ids() == expected
    assert [driven.run() for _ in range(len(expected))] == expected
    driven.check()


# ---------------------------------------------------------------------------------------------- cancel and release


def test_a_cancel_answers_the_queued_tasks_it_names_and_leaves_the_running_one(driven: DrivenCore) -> None:
    running, queued, other = driven.submit(3)
    assert driven.next() == running
    driven.code_starts()
    driven.deliver(m.CancelTasks(task_ids=[running, queued, 999]))
    assert driven.signal(), "the task's code runs: the handler answers at once"
    assert driven.answers[queued] == [("failed", m.FailureKind.CANCELED)]
    assert running not in driven.answers and 999 not in driven.answers
    driven.end()
    assert driven.run() == other
    assert driven.answers[running] == [("ok", b"result-%d" % running)]
    driven.check()


def test_a_release_gives_back_the_queued_tasks_it_names(driven: DrivenCore) -> None:
    running, queued = driven.submit(2)
    driven.next()
    driven.deliver(m.ReleaseTasks(task_ids=[running, queued]))
    driven.code_starts()
    driven.end()
    assert driven.next() is None
    assert driven.answers[queued] == [("failed", m.FailureKind.RETURNED)]
    assert len(driven.answers[running]) == 1 and driven.answers[running][0][0] == "ok"


# ---------------------------------------------------------------------------------------------- batching


def test_results_are_held_while_tasks_end_quickly_and_sent_when_the_queue_runs_dry(driven: DrivenCore) -> None:
    task_ids = driven.submit(4)
    driven.run()  # the first ends long after the last send (none yet): it goes at once
    driven.run()
    driven.run()
    assert results_sent(driven) == [task_ids[:1]]
    driven.run()
    assert results_sent(driven) == [task_ids[:1], task_ids[1:]]


def test_a_task_ending_a_while_after_the_last_send_sends_what_is_held(driven: DrivenCore) -> None:
    task_ids = driven.submit(4)
    driven.run()
    driven.run()
    driven.now += FLUSH_EVERY_SECONDS * 1.5
    driven.run()
    assert results_sent(driven) == [task_ids[:1], task_ids[1:3]]


def test_results_go_out_every_so_many_tasks(driven: DrivenCore) -> None:
    task_ids = driven.submit(FLUSH_EVERY_TASKS + 2)
    for _ in range(FLUSH_EVERY_TASKS + 1):
        driven.run()
    assert [len(batch) for batch in results_sent(driven)] == [1, FLUSH_EVERY_TASKS]
    assert results_sent(driven)[1][-1] == task_ids[FLUSH_EVERY_TASKS]


def test_a_signal_sends_the_results_held_behind_a_long_task(driven: DrivenCore) -> None:
    quick, long = driven.submit(3)[1:]
    driven.run()
    driven.run()  # held: it ended right after a send
    assert driven.next() == long
    driven.code_starts()
    assert quick not in driven.answers
    assert driven.signal()
    assert quick in driven.answers and long not in driven.answers


# ---------------------------------------------------------------------------------------------- the agent's signal


def test_a_signal_between_tasks_is_kept_and_answered_when_the_next_tasks_code_starts(driven: DrivenCore) -> None:
    first, queued = driven.submit(2)
    assert driven.next() == first
    driven.deliver(m.CancelTasks(task_ids=[queued]))
    assert not driven.signal(), "before the task's code runs, the loop may be using the socket"
    assert queued not in driven.answers
    driven.code_starts()
    assert driven.answers[queued] == [("failed", m.FailureKind.CANCELED)]
    driven.check()


def test_the_answer_reads_every_urgent_message_announced_not_merely_what_has_arrived(driven: DrivenCore) -> None:
    (running,) = driven.submit(1)
    driven.next()
    driven.code_starts()
    driven.core.on_message(m.CancelTasks(task_ids=[]), driven.now)
    assert driven.core.read_enough(1) and not driven.core.read_enough(2)
    driven.core.on_message(m.TaskSubmission(objects=[], groups=[]), driven.now)
    assert not driven.core.read_enough(2), "a submission is not urgent: the agent does not count it"
    driven.core.on_message(m.PublishObjects(object_ids=[b"x" * 32]), driven.now)
    driven.core.on_message(m.ReleaseTasks(task_ids=[]), driven.now)
    assert driven.core.read_enough(3)


def test_a_signal_during_an_answer_is_answered_by_another_round(driven: DrivenCore) -> None:
    driven.submit(1)
    driven.next()
    driven.code_starts()
    core = driven.core
    assert core.on_signal(), "the task's code runs: answer now"
    assert not core.on_signal(), "a second signal while the first is answered is kept"
    assert core.signal_answered(), "and answered once the first is done"
    assert not core.signal_answered()
    core.check_invariants()


def test_a_signal_during_a_nesting_hook_is_answered_when_the_tasks_code_runs_again(driven: DrivenCore) -> None:
    (running, queued) = driven.submit(2)
    driven.next()
    driven.code_starts()
    core = driven.core
    could_read = core.task_code_ends()  # the hook starts
    driven.deliver(m.CancelTasks(task_ids=[queued]))
    assert not driven.signal()
    assert could_read and core.task_code_starts(), "the hook ends: the kept signal is answered now"


def test_no_signal_is_answered_after_the_tasks_code_ended(driven: DrivenCore) -> None:
    driven.submit(2)
    driven.next()
    driven.code_starts()
    driven.end()
    assert not driven.signal()
    driven.check()


# ---------------------------------------------------------------------------------------------- suspects


def test_a_suspect_asks_to_start_after_sending_the_results_held_and_runs_once_granted(driven: DrivenCore) -> None:
    plain = driven.submit(2)
    (suspect,) = driven.submit(1, report_start=True)
    driven.run()
    driven.run()
    assert results_sent(driven) == [plain[:1]]
    assert driven.next() is None
    assert results_sent(driven) == [plain[:1], plain[1:]], "earlier results go first: not lost if it kills us"
    (asked,) = driven.sent(m.TaskStarted)
    assert asked.task_ids == [suspect]
    assert driven.next() is None and len(driven.sent(m.TaskStarted)) == 1, "asked once"
    driven.deliver(m.TaskStarted(task_ids=[suspect]))
    assert driven.next() == suspect
    driven.code_starts()
    driven.end()
    assert results_sent(driven)[-1] == [suspect]


def test_a_suspect_ends_and_its_result_goes_at_once_even_with_tasks_queued(driven: DrivenCore) -> None:
    (suspect,) = driven.submit(1, report_start=True)
    driven.submit(1)
    driven.next()
    driven.deliver(m.TaskStarted(task_ids=[suspect]))
    driven.run()
    assert results_sent(driven) == [[suspect]]


def test_a_suspect_canceled_while_it_waits_for_the_answer_never_runs(driven: DrivenCore) -> None:
    (suspect,) = driven.submit(1, report_start=True)
    assert driven.next() is None
    driven.deliver(m.CancelTasks(task_ids=[suspect]))
    driven.deliver(m.TaskStarted(task_ids=[suspect]))
    assert driven.next() is None
    assert driven.answers[suspect] == [("failed", m.FailureKind.CANCELED)]
    driven.check()


def test_a_suspect_without_an_answer_goes_back(driven: DrivenCore) -> None:
    (suspect,) = driven.submit(1, report_start=True)
    driven.next()
    driven.now += AGENT_ANSWER_SECONDS
    driven.next()
    assert driven.answers[suspect] == [("failed", m.FailureKind.RETURNED)]


# ---------------------------------------------------------------------------------------------- nested waits


def test_a_granted_wait_hands_the_queue_to_the_agent_suspects_apart(driven: DrivenCore) -> None:
    running, *plain = driven.submit(3)
    (suspect,) = driven.submit(1, report_start=True)
    driven.next()
    driven.code_starts()
    assert driven.wait_on_nested(m.ProcessorState(blocked=True, granted=True))
    assert driven.published == [None], "what it made goes into the store first: the nested tasks may read it"
    blocked, *_ = driven.sent(m.ProcessorState)
    assert blocked.blocked
    (handed,) = driven.sent(m.TaskSubmission)
    assert [(group.task_ids, group.report_start) for group in handed.groups] == [(plain, False), ([suspect], True)]
    assert driven.core.queued_task_ids() == []
    driven.end_wait()
    assert not driven.sent(m.ProcessorState)[-1].blocked
    driven.end()
    assert [kind for answers in driven.answers.values() for kind, _ in answers].count("handed") == 3
    driven.check()


def test_a_refused_wait_keeps_the_queue_and_raises_the_reason(driven: DrivenCore) -> None:
    _, queued = driven.submit(2)
    driven.next()
    driven.code_starts()
    assert not driven.wait_on_nested(m.ProcessorState(blocked=True, granted=False, reason="at --max-processors"))
    assert driven.refusals == ["at --max-processors"]
    assert driven.core.queued_task_ids() == [queued] and not driven.core.waiting


def test_a_wait_without_an_answer_is_refused(driven: DrivenCore) -> None:
    driven.submit(1)
    driven.next()
    driven.code_starts()
    assert not driven.wait_on_nested(None)
    assert "did not answer" in driven.refusals[0]


def test_a_cancel_read_while_asking_to_wait_is_answered_before_the_queue_goes(driven: DrivenCore) -> None:
    _, canceled, handed = driven.submit(3)
    driven.next()
    driven.code_starts()
    driven.deliver(m.CancelTasks(task_ids=[canceled]))
    driven.wait_on_nested(m.ProcessorState(blocked=True, granted=True))
    assert driven.answers[canceled] == [("failed", m.FailureKind.CANCELED)]
    assert driven.answers[handed] == [("handed", None)]


def test_a_wait_asked_while_the_worker_stops_is_refused(driven: DrivenCore) -> None:
    driven.submit(1)
    driven.next()
    driven.code_starts()
    driven.deliver(m.Disconnect(reason="bye"))
    assert not driven.wait_on_nested(m.ProcessorState(blocked=True, granted=True))
    assert driven.core.stopping


# ---------------------------------------------------------------------------------------------- the rest


def test_an_input_lost_is_reported_before_its_task_goes_back(driven: DrivenCore) -> None:
    (task_id,) = driven.submit(1)
    driven.next()
    driven.end("lost", lost_input=b"i" * 32)
    lost, results = driven.to_agent[-2:]
    assert isinstance(lost, m.ObjectsLost) and lost.object_ids == [b"i" * 32]
    assert isinstance(results, m.TaskResults) and results.failures[0].kind == m.FailureKind.RETURNED


def test_an_input_reported_lost_already_is_not_reported_again(driven: DrivenCore) -> None:
    driven.submit(1)
    driven.next()
    driven.end("lost", lost_input=b"i" * 32, first_report=False)
    assert not driven.sent(m.ObjectsLost)


def test_memory_goes_back_once_after_a_while_idle_after_work(driven: DrivenCore) -> None:
    driven.tick(IDLE_BEFORE_GIVING_BACK_SECONDS * 2)
    assert driven.memory_given_back == 0, "no work since it started"
    driven.submit(1)
    driven.run()
    driven.tick(IDLE_BEFORE_GIVING_BACK_SECONDS / 2)
    assert driven.memory_given_back == 0
    driven.tick(IDLE_BEFORE_GIVING_BACK_SECONDS / 2)
    driven.tick(IDLE_BEFORE_GIVING_BACK_SECONDS)
    assert driven.memory_given_back == 1


def test_a_stored_argument_is_let_go_of_unless_a_queued_task_names_it(driven: DrivenCore) -> None:
    shared, other, alone = b"s" * 32, b"o" * 32, b"a" * 32
    driven.submit(3, object_args=[shared, other, shared])
    driven.run()
    assert driven.core.unneeded_arguments({shared, alone}) == {alone}


def test_deletes_and_publishes_reach_the_shell(driven: DrivenCore) -> None:
    driven.deliver(m.DeleteObjects(object_ids=[b"d" * 32]))
    driven.deliver(m.PublishObjects(object_ids=[b"p" * 32]))
    driven.next()
    assert driven.forgotten == [b"d" * 32] and driven.published == [[b"p" * 32]]


def test_results_held_go_out_when_the_processor_stops(driven: DrivenCore) -> None:
    first, second, _ = driven.submit(3)
    driven.run()
    driven.run()
    driven.carry_out(driven.core.flush(driven.now))
    assert results_sent(driven) == [[first], [second]]


def test_a_tasks_warnings_and_profile_go_out_with_its_result(driven: DrivenCore) -> None:
    (task_id,) = driven.submit(1)
    driven.next()
    warning = m.TaskWarning(task_id=task_id, category="builtins.UserWarning", message="w", filename="f.py", lineno=1)
    profile = m.TaskProfile(task_id=task_id, duration_us=1, cpu_time_us=1, peak_memory_bytes=1)
    driven.running = None
    driven.carry_out(driven.core.on_task_ended(task_id, b"r", driven.now, profile, [warning]))
    (results,) = driven.sent(m.TaskResults)
    assert (results.succeeded_ids, results.warnings, results.profiles) == ([task_id], [warning], [profile])


def test_results_say_how_long_the_tasks_they_report_ran(driven: DrivenCore) -> None:
    # The scheduler sizes this worker's queue by it (prefetch.py): tasks that did not run are not counted.
    driven.submit(3)
    for seconds, outcome in [(0.25, "ok"), (0.5, "raised"), (4.0, "unloadable")]:
        driven.next()
        driven.code_starts()
        driven.now += seconds
        driven.end(outcome)
    first, second, third = driven.sent(m.TaskResults)  # each ended a while after the last send
    assert (first.ran_tasks, first.run_seconds) == (1, pytest.approx(0.25))
    assert (second.ran_tasks, second.run_seconds) == (1, pytest.approx(0.5))
    assert (third.ran_tasks, third.run_seconds) == (0, 0.0), "its function could not even be loaded"


def test_a_task_that_waited_on_nested_tasks_is_left_out_of_the_run_time(driven: DrivenCore) -> None:
    # It handed its queue on while it waited: its wait is not the pace of this worker's tasks.
    driven.submit(2)
    driven.next()
    driven.code_starts()
    assert driven.wait_on_nested(m.ProcessorState(blocked=True, granted=True))
    driven.now += 30.0
    driven.end_wait()
    driven.end()
    driven.submit(1)
    driven.now += 1.0
    driven.next()
    driven.code_starts()
    driven.now += 0.01
    driven.end()
    ran = [(message.ran_tasks, message.run_seconds) for message in driven.sent(m.TaskResults) if message.ran_tasks]
    assert ran == [(1, pytest.approx(0.01))]
