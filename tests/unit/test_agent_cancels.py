"""The worker agent's cancels and releases, on its sans-I/O core with simulated processors (agent_harness.py):
which processors hear of them, which are signalled, which are stopped."""

from __future__ import annotations

import pytest
from agent_harness import SimulatedAgent, make_agent, of_type, payload_for

from scaler.protocol import messages as m
from scaler.worker.agent_actions import SignalProcessor, StopProcessor, ToScheduler


@pytest.fixture
def agent() -> SimulatedAgent:
    return make_agent()


# ---------------------------------------------------------------------------------------------- cancels and releases


def test_a_release_goes_to_every_processor_and_signals_only_one_whose_queued_task_is_named(
    agent: SimulatedAgent,
) -> None:
    running, queued = agent.submit(2)
    busy, _ = agent.wait_in_active()
    # busy: waits in `running`, its queue handed over; the new active one runs `queued` with more behind it
    more = agent.submit(2)
    active = agent.run_next(queued)
    assert not of_type(agent.release([running]), SignalProcessor), "only its running task named: nothing to do"
    assert not of_type(agent.release([queued]), SignalProcessor)
    actions = agent.release([queued, more[1]])
    assert [signal.identity for signal in of_type(actions, SignalProcessor)] == [active.identity]
    assert set(agent.failures(m.FailureKind.RETURNED)) == {more[1]}, "the signalled processor answered at once"
    for processor in agent.processors.values():
        if processor.said_hello:
            assert processor.received_of(m.ReleaseTasks), f"{processor.identity!r} was not told"
    agent.check()


def test_an_idle_processor_is_not_signalled(agent: SimulatedAgent) -> None:
    task_ids = agent.submit(2)
    assert not of_type(agent.release(task_ids), SignalProcessor)
    assert set(agent.failures(m.FailureKind.RETURNED)) == set(task_ids)


def test_a_result_held_back_behind_a_long_task_is_asked_for_once_the_task_outlasts_a_tick(
    agent: SimulatedAgent,
) -> None:
    # The balancer saw the first task as queued behind the second and released the newest: the running one.
    first, second = agent.submit(2)
    processor = agent.run_next(first)
    agent.finish(processor, held_back=True)  # it ended right after a batch went out
    agent.run_next(second)
    assert not of_type(agent.tick(0.1), SignalProcessor), "the tick that sees a task start does not ask"
    assert not agent.outcomes[first]
    assert [signal.identity for signal in of_type(agent.tick(0.1), SignalProcessor)] == [processor.identity]
    assert agent.outcomes[first] == [("ok", payload_for(first))], "the held result reached the scheduler"
    assert not of_type(agent.tick(0.1) + agent.tick(0.1), SignalProcessor), "asked once per running task"
    agent.finish(processor)
    agent.check()


def test_a_long_task_with_no_older_task_unanswered_is_not_signalled(agent: SimulatedAgent) -> None:
    first, second = agent.submit(2)
    processor = agent.run_next(first)
    for _ in range(3):
        assert not of_type(agent.tick(0.1), SignalProcessor), "nothing before it waits for an answer"
    agent.finish(processor)
    agent.run_next(second)
    for _ in range(3):
        assert not of_type(agent.tick(0.1), SignalProcessor)
    agent.check()


def test_a_cancel_of_a_running_task_is_refused_at_once_before_the_queued_ones_are_canceled(
    agent: SimulatedAgent,
) -> None:
    running, queued = agent.submit(2)
    processor = agent.run_next()
    actions = agent.cancel([running, queued])
    messages = [m.decode(action.frames) for action in of_type(actions, ToScheduler)]
    assert messages[0] == m.CancelRefused(task_ids=[running])
    assert of_type(actions, SignalProcessor), "the queued one is answered now, not after the running one"
    assert set(agent.failures(m.FailureKind.CANCELED)) == {queued}
    agent.finish(processor)
    assert agent.outcomes[running] == [("ok", payload_for(running))]
    agent.check()


def test_a_force_cancel_stops_the_processor_running_the_task(agent: SimulatedAgent) -> None:
    running, queued, other = agent.submit(3)
    processor = agent.run_next()
    actions = agent.cancel([running], force=True)
    assert of_type(actions, StopProcessor) == [StopProcessor(processor.identity)]
    assert set(agent.failures(m.FailureKind.CANCELED)) == {running}
    assert set(agent.failures(m.FailureKind.RETURNED)) == {queued, other}
    assert not agent.received(m.CancelRefused)
    agent.check()


def test_a_force_cancel_that_comes_just_before_its_task_starts_stops_it_at_the_next_tick(
    agent: SimulatedAgent,
) -> None:
    """The processor took the task from its socket and starts it before it reads the cancel behind it: the
    slot names no task when the cancel comes, then the task runs and the processor reads nothing more."""
    task, other = agent.submit(2)
    processor = agent.active()
    processor.starting = True
    actions = agent.cancel([task], force=True)
    assert not of_type(actions, StopProcessor)
    assert agent.start_task(processor) == task
    actions = agent.tick(0.1)
    assert of_type(actions, StopProcessor) == [StopProcessor(processor.identity)]
    assert set(agent.failures(m.FailureKind.CANCELED)) == {task}
    assert set(agent.failures(m.FailureKind.RETURNED)) == {other}
    agent.check()


def test_a_cancel_that_comes_just_before_its_task_starts_is_refused_at_the_next_tick(agent: SimulatedAgent) -> None:
    """As the forced one above: the slot names no task when the cancel comes, then the task runs and its processor
    reads the cancel only after it; the scheduler hears that the cancel came too late while the task runs."""
    task, other = agent.submit(2)
    processor = agent.active()
    processor.starting = True
    agent.cancel([task])
    assert not agent.received(m.CancelRefused)
    assert agent.start_task(processor) == task
    agent.tick(0.1)
    assert agent.received(m.CancelRefused) == [m.CancelRefused(task_ids=[task])]
    agent.tick(0.1)
    assert len(agent.received(m.CancelRefused)) == 1, "refused once"
    agent.finish(processor)
    assert agent.outcomes[task] == [("ok", payload_for(task))]
    agent.check()


def test_a_force_cancel_of_queued_tasks_stops_nothing(agent: SimulatedAgent) -> None:
    running, queued = agent.submit(2)
    agent.run_next()
    actions = agent.cancel([queued], force=True)
    assert not of_type(actions, StopProcessor)
    assert set(agent.failures(m.FailureKind.CANCELED)) == {queued}
    agent.check()
