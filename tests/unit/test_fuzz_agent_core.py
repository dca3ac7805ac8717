"""Fuzzing the worker agent core: a scheduler and processors doing everything they may, in any order.

A hypothesis state machine drives the sans-I/O agent core through agent_harness.py. The scheduler
sends tasks (suspects among them, and tasks handed back before), cancels with and without force,
releases, answers suspects, frees objects and changes its size limits; processors say hello, run
tasks, answer them (some results too large), wait on nested tasks and stop waiting, and die; time
passes with processors over the memory limit or past the task timeout. After every step:

- the core agrees with itself (check_invariants: one active processor at most, no more processors than
  --max-processors, no task held twice, spares hold nothing, ...);
- every task the scheduler sent is held by exactly one processor or was answered, once per sending,
  and every task a simulated processor holds is one the core thinks it holds;
- nothing went to a processor before its hello or after it was stopped, and the worker did not exit.

At the end every processor finishes its work: every task sent has been answered exactly once per sending.
"""

from __future__ import annotations

from typing import Callable

import pytest
from agent_harness import SimProcessor, SimulatedAgent
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from scaler.protocol import messages as m
from scaler.worker.config import WorkerConfig

pytestmark = pytest.mark.timeout(120)

MEMORY_LIMIT = 10_000
TASK_TIMEOUT = 5.0
# Outcomes after which the scheduler may send the task again.
RETRIED = (m.FailureKind.RETURNED, m.FailureKind.WORKER_DIED)


def idle_with_tasks(processor: SimProcessor) -> bool:
    return processor.said_hello and processor.running is None and bool(processor.queue)


def runs_a_task(processor: SimProcessor) -> bool:
    """Its task's code runs (and does not wait on nested tasks)."""
    return processor.running is not None and not processor.waiting


class AgentCoreFuzz(RuleBasedStateMachine):
    agent: SimulatedAgent

    @initialize(max_processors=st.sampled_from([2, 3]))
    def start(self, max_processors: int) -> None:
        """Two processors reach the limit at the first nested wait; three leave room for a spare started ahead."""
        self.agent = SimulatedAgent(WorkerConfig(
            address="tcp://127.0.0.1:1", max_processors=max_processors, task_timeout_seconds=TASK_TIMEOUT,
            memory_limit_bytes=MEMORY_LIMIT,
        ))
        self.agent.welcome()

    # ------------------------------------------------------------------------------------------ helpers

    def processors(self, condition: Callable[[SimProcessor], bool]) -> list[SimProcessor]:
        return [p for p in self.agent.processors.values() if condition(p)]

    def held_task_ids(self) -> list[int]:
        return sorted(task_id for p in self.agent.core.pool.processors.values() for task_id in p.outstanding)

    def retriable_task_ids(self) -> list[int]:
        held = set(self.held_task_ids())
        return sorted(
            task_id for task_id in self.agent.outcomes
            if task_id not in held and self.agent.last_failure_kind(task_id) in RETRIED
        )

    # ------------------------------------------------------------------------------------------ the scheduler

    @rule(count=st.integers(1, 3), report_start=st.booleans())
    def submit(self, count: int, report_start: bool) -> None:
        self.agent.submit(count, report_start=report_start)

    @precondition(lambda self: self.retriable_task_ids())
    @rule(data=st.data(), report_start=st.booleans())
    def submit_again(self, data: st.DataObject, report_start: bool) -> None:
        """A task handed back (or whose processor died) is dispatched here again."""
        task_id = data.draw(st.sampled_from(self.retriable_task_ids()))
        self.agent.submit(task_ids=[task_id], report_start=report_start)

    @precondition(lambda self: self.held_task_ids())
    @rule(data=st.data(), force=st.booleans())
    def cancel(self, data: st.DataObject, force: bool) -> None:
        chosen = data.draw(st.lists(st.sampled_from(self.held_task_ids()), min_size=1, max_size=3, unique=True))
        self.agent.cancel(chosen, force=force)

    @precondition(lambda self: self.held_task_ids())
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        chosen = data.draw(st.lists(st.sampled_from(self.held_task_ids()), min_size=1, max_size=3, unique=True))
        self.agent.release(chosen)

    @precondition(lambda self: any(p.start_asked for p in self.agent.processors.values()))
    @rule()
    def scheduler_answers_suspects(self) -> None:
        asked = sorted(task_id for p in self.agent.processors.values() for task_id in p.start_asked)
        self.agent.grant_start(asked)

    @rule(max_frame=st.sampled_from([0, 300, 10_000]), max_control=st.sampled_from([0, 600, 100_000]))
    def welcome_again(self, max_frame: int, max_control: int) -> None:
        """A scheduler's welcome (again, as after a reconnect) with other size limits."""
        self.agent.welcome(max_frame_bytes=max_frame, max_control_frame_bytes=max_control)

    @rule()
    def scheduler_frees_the_function(self) -> None:
        self.agent.from_scheduler(m.DeleteObjects(object_ids=[b"unused-object-id".ljust(32, b"-")]))

    @rule(data=st.data(), advance=st.sampled_from([0.0, 0.1, 1.0, 2.0, TASK_TIMEOUT + 0.5, 40.0]))
    def time_passes(self, data: st.DataObject, advance: float) -> None:
        """Mostly little; sometimes past the task timeout or the spares' idle time, or a processor over the limit."""
        over_memory = data.draw(st.sets(st.sampled_from(sorted(self.agent.processors)), max_size=1))
        rss = {identity: MEMORY_LIMIT + (identity in over_memory) for identity in self.agent.processors}
        self.agent.tick(advance, rss=rss)
        self.agent.from_scheduler(m.HeartbeatEcho())

    # ------------------------------------------------------------------------------------------ processors

    @precondition(lambda self: any(not p.said_hello for p in self.agent.processors.values()))
    @rule()
    def processors_say_hello(self) -> None:
        self.agent.hello()

    @precondition(lambda self: self.processors(idle_with_tasks))
    @rule(data=st.data())
    def processor_starts_a_task(self, data: st.DataObject) -> None:
        processor = data.draw(st.sampled_from(self.processors(idle_with_tasks)))
        self.agent.start_task(processor, data.draw(st.sampled_from(sorted(processor.queue))))

    @precondition(lambda self: self.processors(runs_a_task))
    @rule(
        data=st.data(), outcome=st.sampled_from(["ok", "raised", "large"]), warnings=st.integers(0, 2),
        held_back=st.booleans(),
    )
    def processor_answers(self, data: st.DataObject, outcome: str, warnings: int, held_back: bool) -> None:
        """It ends its task; the answer goes at once, or waits for its next batch (`held_back`)."""
        processor = data.draw(st.sampled_from(self.processors(runs_a_task)))
        if outcome == "raised":
            self.agent.finish(processor, failure=m.FailureKind.RAISED, warnings=warnings, held_back=held_back)
        else:
            payload = b"r" * (1_000 if outcome == "large" else 10)
            self.agent.finish(processor, payload=payload, warnings=warnings, held_back=held_back)

    @precondition(lambda self: self.processors(lambda p: runs_a_task(p) and p.queue))
    @rule(data=st.data())
    def processor_holds_a_result_back_behind_a_long_task(self, data: st.DataObject) -> None:
        """It ends its task right after a batch went out, and its next task runs past two ticks."""
        processor = data.draw(st.sampled_from(self.processors(lambda p: runs_a_task(p) and p.queue)))
        self.agent.finish(processor, held_back=True)
        if processor.identity in self.agent.processors and processor.running is None and processor.queue:
            self.agent.start_task(processor, data.draw(st.sampled_from(sorted(processor.queue))))
        self.agent.tick(0.1)
        self.agent.tick(0.1)

    @precondition(lambda self: self.processors(lambda p: p.held_back))
    @rule(data=st.data())
    def processor_sends_its_batch(self, data: st.DataObject) -> None:
        self.agent.send_held_back(data.draw(st.sampled_from(self.processors(lambda p: p.held_back))))

    @precondition(lambda self: self.processors(idle_with_tasks))
    @rule(data=st.data())
    def processor_answers_a_batch(self, data: st.DataObject) -> None:
        """It ran several queued tasks (no suspect among them) and answers them in one message."""
        processor = data.draw(st.sampled_from(self.processors(idle_with_tasks)))
        chosen = [task_id for task_id, report_start in processor.queue.items() if not report_start][:4]
        if chosen:
            self.agent.answer_batch(
                processor, m.TaskResults(succeeded_ids=chosen, payloads=[b"p" * 200 for _ in chosen], failures=[])
            )

    @precondition(lambda self: self.processors(runs_a_task))
    @rule(data=st.data())
    def processor_waits_on_nested_tasks(self, data: st.DataObject) -> None:
        processor = data.draw(st.sampled_from(self.processors(runs_a_task)))
        self.agent.block(processor)

    @precondition(lambda self: self.processors(idle_with_tasks))
    @rule(data=st.data())
    def processor_runs_a_task_that_waits(self, data: st.DataObject) -> None:
        """Nested waits are what the agent's roles are for: this makes them as frequent as plain runs."""
        processor = data.draw(st.sampled_from(self.processors(idle_with_tasks)))
        if self.agent.start_task(processor, data.draw(st.sampled_from(sorted(processor.queue)))) is not None:
            self.agent.block(processor)

    @rule(depth=st.integers(1, 4))
    def a_recursion_unfolds(self, depth: int) -> None:
        """Each level submits two children and waits on them, until a wait is refused or the depth reached."""
        agent = self.agent
        for _ in range(depth):
            agent.submit(2)
            agent.hello()
            active = agent.active()
            if active.running is not None or not active.queue:
                return
            if agent.start_task(active) is None or not agent.block(active):
                return

    @precondition(lambda self: self.processors(lambda p: p.waiting))
    @rule(data=st.data())
    def processor_stops_waiting(self, data: st.DataObject) -> None:
        self.agent.unblock(data.draw(st.sampled_from(self.processors(lambda p: p.waiting))))

    @precondition(lambda self: self.processors(lambda p: p.running is not None))
    @rule(data=st.data())
    def processor_dies(self, data: st.DataObject) -> None:
        """A processor dies under its task (one dying idle is the same to the agent, with nothing to blame)."""
        self.agent.crash(data.draw(st.sampled_from(self.processors(lambda p: p.running is not None))))

    # ------------------------------------------------------------------------------------------ checks

    @invariant()
    def consistent(self) -> None:
        self.agent.check()
        assert not self.agent.exits, self.agent.exits

    def teardown(self) -> None:
        """Every processor finishes its work: every task sent is answered exactly once per sending."""
        agent = self.agent
        for _ in range(20):
            if not self.held_task_ids():
                break
            agent.hello()
            for processor in list(agent.processors.values()):
                agent.send_held_back(processor)
                if processor.waiting:
                    agent.unblock(processor)
                if processor.running is not None:
                    agent.finish(processor)
                while processor.identity in agent.processors and processor.said_hello and processor.queue:
                    task_id = next(iter(processor.queue))
                    if agent.start_task(processor, task_id) is None:
                        agent.grant_start([task_id])
                        agent.start_task(processor, task_id)
                    agent.finish(processor)
            agent.check()
        assert not self.held_task_ids(), "tasks the agent never answered"
        for task_id, times_sent in agent.dispatched.items():
            assert len(agent.outcomes[task_id]) == times_sent, (task_id, agent.outcomes[task_id])


AgentCoreFuzz.TestCase.settings = settings(
    max_examples=150, stateful_step_count=50, database=None, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_agent_core_under_fuzzed_scheduler_and_processors = AgentCoreFuzz.TestCase
