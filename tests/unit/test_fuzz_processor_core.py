"""Fuzzing the processor core: an agent and a task doing everything they may, in any order.

A hypothesis state machine drives the sans-I/O processor core through processor_harness.py, as
processor.py drives it. The agent sends tasks (nested ones and suspects among them), cancels and
releases (of tasks queued, running, ended or unknown), go-aheads for suspects, publishes and deletes,
and signals at any moment: between tasks, before a task's code starts, while it runs, while it waits on
nested tasks. Tasks start, end in every way (a result, a stored result, an exception, a lost input),
wait on nested tasks (granted, refused, unanswered) and stop waiting; time passes. After every step:

- the core agrees with itself (check_invariants: no task queued twice, no signal kept while the task's
  code runs, ...);
- no task was answered more often than it was sent, nor answered without being sent;
- a signal answered left no urgent message it announced unread (the harness asserts it).

At the end every task runs out: every task the agent sent has exactly one answer (a result, a failure,
a stored result, or a hand-over to the agent when a wait was granted).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from processor_harness import DrivenCore

from scaler.protocol import messages as m
from scaler.worker.processor_core import AGENT_ANSWER_SECONDS, FLUSH_EVERY_SECONDS

pytestmark = pytest.mark.timeout(120)

OUTCOMES = ["ok", "raised", "stored", "unloadable", "lost"]


class ProcessorCoreFuzz(RuleBasedStateMachine):
    driven: DrivenCore

    @initialize()
    def start(self) -> None:
        self.driven = DrivenCore()

    # ------------------------------------------------------------------------------------------ helpers

    def sent_task_ids(self) -> list[int]:
        return sorted(self.driven.accepted)

    def asked_to_start(self) -> list[int]:
        return sorted({task_id for message in self.driven.sent(m.TaskStarted) for task_id in message.task_ids})

    def loading(self) -> bool:
        return self.driven.running is not None and not self.driven.code_runs

    def code_runs_unblocked(self) -> bool:
        return self.driven.code_runs and not self.driven.core.waiting

    # ------------------------------------------------------------------------------------------ the agent

    @rule(count=st.integers(1, 3), depth=st.integers(0, 2), report_start=st.booleans())
    def agent_sends_tasks(self, count: int, depth: int, report_start: bool) -> None:
        self.driven.submit(count, depth=depth, report_start=report_start)

    @precondition(lambda self: self.sent_task_ids())
    @rule(data=st.data(), release=st.booleans(), unknown=st.booleans())
    def agent_cancels_or_releases(self, data: st.DataObject, release: bool, unknown: bool) -> None:
        chosen = data.draw(st.lists(st.sampled_from(self.sent_task_ids()), min_size=1, max_size=3, unique=True))
        if unknown:
            chosen.append(7)  # never sent here
        self.driven.deliver(m.ReleaseTasks(task_ids=chosen) if release else m.CancelTasks(task_ids=chosen))

    @precondition(lambda self: self.asked_to_start())
    @rule(data=st.data())
    def scheduler_lets_a_suspect_start(self, data: st.DataObject) -> None:
        self.driven.deliver(m.TaskStarted(task_ids=[data.draw(st.sampled_from(self.asked_to_start()))]))

    @rule(publish=st.booleans())
    def agent_sends_object_news(self, publish: bool) -> None:
        news = m.PublishObjects if publish else m.DeleteObjects
        self.driven.deliver(news(object_ids=[b"o" * 32]))

    @rule()
    def agent_signals(self) -> None:
        answered = self.driven.signal()
        assert answered == self.driven.code_runs, "a signal is answered at once exactly while the task's code runs"

    @rule(advance=st.sampled_from([0.0, 0.001, FLUSH_EVERY_SECONDS * 1.5, 2.0, AGENT_ANSWER_SECONDS + 1]))
    def time_passes(self, advance: float) -> None:
        self.driven.tick(advance)

    # ------------------------------------------------------------------------------------------ the processor

    @precondition(lambda self: self.driven.running is None)
    @rule()
    def loop_turns(self) -> None:
        """Between tasks: the shell reads, and the core runs a task or waits (a suspect's answer, or anything)."""
        self.driven.next()

    @precondition(loading)
    @rule()
    def task_code_starts(self) -> None:
        self.driven.code_starts()

    @precondition(lambda self: self.driven.running is not None and not self.driven.core.waiting)
    @rule(outcome=st.sampled_from(OUTCOMES), first_report=st.booleans())
    def task_ends(self, outcome: str, first_report: bool) -> None:
        if outcome == "unloadable" or outcome == "lost":
            if self.driven.code_runs:
                outcome = "raised"  # its arguments loaded and its code ran: it can only raise now
        elif not self.driven.code_runs:
            self.driven.code_starts()
        self.driven.end(outcome, lost_input=b"i" * 32, first_report=first_report)

    @precondition(code_runs_unblocked)
    @rule(answer=st.sampled_from(["granted", "refused", "none"]))
    def task_waits_on_nested_tasks(self, answer: str) -> None:
        state = {
            "granted": m.ProcessorState(blocked=True, granted=True),
            "refused": m.ProcessorState(blocked=True, granted=False, reason="at the limit"),
            "none": None,
        }[answer]
        granted = self.driven.wait_on_nested(state)
        assert granted == (answer == "granted")
        if granted:
            assert not self.driven.core.queued_task_ids(), "a granted wait hands every queued task over"

    @precondition(lambda self: self.driven.code_runs and self.driven.core.waiting)
    @rule()
    def nested_wait_ends(self) -> None:
        self.driven.end_wait()

    # ------------------------------------------------------------------------------------------ checks

    @invariant()
    def consistent(self) -> None:
        self.driven.check()

    def teardown(self) -> None:
        """Everything runs out: every task sent has exactly one answer."""
        driven = self.driven
        if driven.running is not None:
            if driven.core.waiting:
                driven.end_wait()
            if not driven.code_runs:
                driven.code_starts()
            driven.end()
        for _ in range(10_000):
            driven.deliver(m.TaskStarted(task_ids=self.asked_to_start()))
            if driven.next() is None:
                if not driven.core.queued_task_ids() and not driven.unread:
                    break
                continue
            driven.code_starts()
            driven.end()
            driven.check()
        assert not driven.core.queued_task_ids()
        for task_id, times_sent in driven.accepted.items():
            assert len(driven.answers[task_id]) == times_sent, (task_id, driven.answers[task_id])
        assert set(driven.answers) <= set(driven.accepted), "an answer for a task never sent"


ProcessorCoreFuzz.TestCase.settings = settings(
    max_examples=200, stateful_step_count=60, database=None, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_processor_core_under_a_fuzzed_agent_and_task = ProcessorCoreFuzz.TestCase
