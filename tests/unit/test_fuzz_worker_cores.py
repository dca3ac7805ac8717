"""Fuzzing a whole Python worker's decisions: the agent core with real processor cores as its processors.

The agent's own fuzz (test_fuzz_agent_core.py) plays its processors by hand; the processor's
(test_fuzz_processor_core.py) plays its agent by hand. Here neither is played: the agent core's actions
reach processor cores (messages wait unread until the processor would read them: between tasks, while
asking to wait, when a signal is answered), and the processors' actions reach the agent core. The test
plays the scheduler (tasks, suspects, cancels with and without force, releases, go-aheads, time passing
past the task timeout) and what only the processes decide: when a processor's loop turns, when a task's
code starts and ends, when it waits on nested tasks and stops waiting, when a processor dies.

After every step both cores agree with themselves, every task the scheduler sent is answered or held by
the agent (never answered more often than sent), and every task a processor core holds is one the agent
thinks that processor holds. At the end everything runs out: every task sent is answered exactly once per
sending.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from scaler.protocol import messages as m
from scaler.utility.identifiers import content_object_id
from scaler.worker import agent_actions
from scaler.worker import processor_actions as actions
from scaler.worker.agent_core import WorkerAgentCore
from scaler.worker.config import WorkerConfig
from scaler.worker.processor_core import URGENT_MESSAGES, ProcessorCore
from scaler.worker.running_task_slot import NO_TASK

pytestmark = pytest.mark.timeout(180)

FUNCTION_PAYLOAD = b"cloudpickled function"
FUNCTION_ID = content_object_id(FUNCTION_PAYLOAD)
TASK_TIMEOUT = 5.0
RETRIED = (m.FailureKind.RETURNED, m.FailureKind.WORKER_DIED)


@dataclasses.dataclass
class Process:
    """A processor process: its core, its unread socket, and what its thread is doing."""

    identity: bytes
    core: ProcessorCore = dataclasses.field(default_factory=ProcessorCore)
    said_hello: bool = False
    unread: list[m.Message] = dataclasses.field(default_factory=list)
    urgent_received: int = 0
    announced: int = 0
    running: int | None = None
    code_runs: bool = False


class Worker:
    """The agent core and its processors' cores, wired as agent.py and processor.py wire them."""

    def __init__(self, max_processors: int) -> None:
        self.now = 1000.0
        self.slots: dict[bytes, int] = {}
        config = WorkerConfig(
            address="tcp://127.0.0.1:1", max_processors=max_processors, task_timeout_seconds=TASK_TIMEOUT
        )
        self.agent = WorkerAgentCore(config, "joint", "host", 1, self)
        self.processes: dict[bytes, Process] = {}
        self.outcomes: dict[int, list[Any]] = collections.defaultdict(list)
        self.dispatched: collections.Counter[int] = collections.Counter()
        self.asked_to_start: set[int] = set()
        self.exits: list[agent_actions.Exit] = []
        self._next_task_id = 1 << 40
        self._function_sent = False
        self.route(self.agent.start(self.now))

    def running_task_id(self, identity: bytes) -> int:
        return self.slots.get(identity, NO_TASK)

    # ------------------------------------------------------------------------------------------ wiring

    def route(self, done: list[agent_actions.Action]) -> None:
        """Carry out the agent core's actions."""
        for action in done:
            if isinstance(action, agent_actions.ToScheduler):
                message = m.decode(action.frames)
                if isinstance(message, m.TaskResults):
                    for task_id in message.succeeded_ids:
                        self.outcomes[task_id].append("ok")
                    for failure in message.failures:
                        self.outcomes[failure.task_id].append(failure.kind)
                    for stored in message.stored:
                        self.outcomes[stored.task_id].append("stored")
                elif isinstance(message, m.TaskStarted):
                    self.asked_to_start.update(message.task_ids)
            elif isinstance(action, agent_actions.ToProcessor):
                process = self.processes[action.identity]
                assert process.said_hello, "sent before the processor's hello: the ROUTER drops it"
                message = m.decode(action.frames)
                process.unread.append(message)
                if isinstance(message, URGENT_MESSAGES):
                    process.urgent_received += 1
            elif isinstance(action, agent_actions.StartProcessor):
                assert action.identity not in self.processes
                self.processes[action.identity] = Process(action.identity)
            elif isinstance(action, agent_actions.StopProcessor):
                del self.processes[action.identity]
                self.slots.pop(action.identity, None)
            elif isinstance(action, agent_actions.SignalProcessor):
                process = self.processes[action.identity]
                assert action.urgent_sent == process.urgent_received, "the slot announces every urgent message sent"
                process.announced = action.urgent_sent
                if process.core.on_signal():
                    self.answer_signals(process)
            elif isinstance(action, agent_actions.Exit):
                self.exits.append(action)

    def carry_out(self, process: Process, done: actions.Actions) -> None:
        """Carry out a processor core's actions (those touching only the process's own objects do nothing here)."""
        for action in done:
            if process.identity not in self.processes:
                return  # stopped meanwhile: whatever it would still do reaches nobody
            if isinstance(action, actions.ToAgent):
                frames = m.encode(action.message)
                self.route(self.agent.on_processor_frames(process.identity, frames, self.now))
            elif isinstance(action, actions.RunTask):
                process.running = action.task[0]
                self.slots[process.identity] = action.task[0]

    def read(self, process: Process) -> None:
        while process.unread and process.identity in self.processes:
            self.carry_out(process, process.core.on_message(process.unread.pop(0), self.now))

    def answer_signals(self, process: Process) -> None:
        core = process.core
        while True:
            self.read(process)
            if process.identity not in self.processes:
                return
            assert core.read_enough(process.announced), "a signal's urgent messages were all read"
            self.carry_out(process, core.answer_signal(self.now))
            if not core.signal_answered():
                return

    # ------------------------------------------------------------------------------------------ the scheduler

    def submit(self, task_ids: list[int], report_start: bool) -> None:
        objects = []
        if not self._function_sent:
            objects.append(m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f"))
            self._function_sent = True
        group = m.TaskGroup(
            function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=task_ids,
            args=[b"arg" for _ in task_ids], report_start=report_start,
        )
        self.dispatched.update(task_ids)
        self.from_scheduler(m.TaskSubmission(objects=objects, groups=[group]))

    def new_task_ids(self, count: int) -> list[int]:
        first = self._next_task_id
        self._next_task_id += count
        return list(range(first, first + count))

    def from_scheduler(self, message: m.Message) -> None:
        self.route(self.agent.on_scheduler_frames(m.encode(message), self.now))

    # ------------------------------------------------------------------------------------------ the processes

    def say_hello(self) -> None:
        for process in list(self.processes.values()):
            if not process.said_hello and process.identity in self.processes:
                process.said_hello = True
                frames = m.encode(m.Hello(role=m.Role.WORKER, pid=1))
                self.route(self.agent.on_processor_frames(process.identity, frames, self.now))

    def loop_turns(self, process: Process) -> None:
        """Between tasks: read the socket, then run the next task or wait."""
        self.read(process)
        if process.identity in self.processes:
            self.carry_out(process, process.core.next_action(self.now))

    def code_starts(self, process: Process) -> None:
        process.code_runs = True
        if process.core.task_code_starts():
            self.answer_signals(process)

    def end_task(self, process: Process, outcome: str) -> None:
        task_id = process.running
        assert task_id is not None
        if process.code_runs:
            process.core.task_code_ends()
        process.running, process.code_runs = None, False
        result: m.Buffer | m.TaskFailure = (
            b"result" if outcome == "ok" else m.TaskFailure(task_id=task_id, kind=m.FailureKind.RAISED)
        )
        self.carry_out(process, process.core.on_task_ended(task_id, result, self.now))

    def wait_on_nested(self, process: Process) -> None:
        core = process.core
        could_read = core.task_code_ends()
        self.carry_out(process, core.on_wait_start(self.now))
        while core.asking_to_wait and process.unread and process.identity in self.processes:
            self.carry_out(process, core.on_message(process.unread.pop(0), self.now))
        if process.identity not in self.processes:
            return
        assert not core.asking_to_wait, "the agent answers every request to wait"
        if could_read and core.task_code_starts():
            self.answer_signals(process)

    def end_wait(self, process: Process) -> None:
        core = process.core
        could_read = core.task_code_ends()
        self.carry_out(process, core.on_wait_end())
        if process.identity in self.processes and could_read and core.task_code_starts():
            self.answer_signals(process)

    # ------------------------------------------------------------------------------------------ checks

    def held_by_agent(self) -> dict[int, bytes]:
        return {
            task_id: identity
            for identity, record in self.agent.pool.processors.items() for task_id in record.outstanding
        }

    def check(self) -> None:
        self.agent.check_invariants()
        held = self.held_by_agent()
        for task_id, times_sent in self.dispatched.items():
            answers = len(self.outcomes.get(task_id, ()))
            assert answers + (task_id in held) == times_sent, (
                f"task {task_id:#x} sent {times_sent} time(s), answered {self.outcomes.get(task_id)}, held: "
                f"{task_id in held}"
            )
        assert set(self.outcomes) <= set(self.dispatched), "an answer for a task never sent"
        assert set(self.agent.pool.processors) == set(self.processes)
        for identity, process in self.processes.items():
            process.core.check_invariants()
            for task_id in [*process.core.queued_task_ids(), *([process.running] if process.running else [])]:
                owner = held.get(task_id)
                assert owner == identity, f"{identity!r} holds {task_id:#x}; the agent thinks {owner!r}"


def idle(process: Process) -> bool:
    return process.said_hello and process.running is None


def loading(process: Process) -> bool:
    return process.running is not None and not process.code_runs


def code_runs(process: Process) -> bool:
    return process.code_runs and not process.core.waiting


class WorkerCoresFuzz(RuleBasedStateMachine):
    worker: Worker

    @initialize(max_processors=st.sampled_from([2, 3]))
    def start(self, max_processors: int) -> None:
        self.worker = Worker(max_processors)
        self.worker.from_scheduler(m.Welcome())

    def processes(self, condition: Callable[[Process], bool]) -> list[Process]:
        return [process for process in self.worker.processes.values() if condition(process)]

    def held_task_ids(self) -> list[int]:
        return sorted(self.worker.held_by_agent())

    def retriable_task_ids(self) -> list[int]:
        held = self.worker.held_by_agent()
        return sorted(
            task_id for task_id, outcomes in self.worker.outcomes.items()
            if task_id not in held and outcomes and outcomes[-1] in RETRIED
        )

    # ------------------------------------------------------------------------------------------ the scheduler

    @rule(count=st.integers(1, 3), report_start=st.booleans())
    def scheduler_sends_tasks(self, count: int, report_start: bool) -> None:
        self.worker.submit(self.worker.new_task_ids(count), report_start)

    @precondition(lambda self: self.retriable_task_ids())
    @rule(data=st.data(), report_start=st.booleans())
    def scheduler_sends_a_task_again(self, data: st.DataObject, report_start: bool) -> None:
        self.worker.submit([data.draw(st.sampled_from(self.retriable_task_ids()))], report_start)

    @precondition(lambda self: self.held_task_ids())
    @rule(data=st.data(), kind=st.sampled_from(["cancel", "force", "release"]))
    def scheduler_cancels_or_releases(self, data: st.DataObject, kind: str) -> None:
        chosen = data.draw(st.lists(st.sampled_from(self.held_task_ids()), min_size=1, max_size=3, unique=True))
        if kind == "release":
            self.worker.from_scheduler(m.ReleaseTasks(task_ids=chosen))
        else:
            self.worker.from_scheduler(m.CancelTasks(task_ids=chosen, force=kind == "force"))

    @precondition(lambda self: self.worker.asked_to_start)
    @rule()
    def scheduler_lets_suspects_start(self) -> None:
        asked = sorted(self.worker.asked_to_start)
        self.worker.asked_to_start.clear()
        self.worker.from_scheduler(m.TaskStarted(task_ids=asked))

    @rule(advance=st.sampled_from([0.0, 0.01, 0.1, 0.1, 1.0, 0.0, 0.01, TASK_TIMEOUT + 0.5]))
    def time_passes(self, advance: float) -> None:
        self.worker.now += advance
        self.worker.route(self.worker.agent.on_tick(self.worker.now, {}, None))
        self.worker.from_scheduler(m.HeartbeatEcho())

    # ------------------------------------------------------------------------------------------ the processes

    @precondition(lambda self: any(not process.said_hello for process in self.worker.processes.values()))
    @rule()
    def processors_say_hello(self) -> None:
        self.worker.say_hello()

    @precondition(lambda self: self.processes(idle))
    @rule(data=st.data(), then=st.sampled_from(["nothing", "code starts", "code waits"]))
    def loop_turns(self, data: st.DataObject, then: str) -> None:
        """The loop reads and runs the next task, if it may; its code may start at once, and wait on nested tasks."""
        process = data.draw(st.sampled_from(self.processes(idle)))
        self.worker.loop_turns(process)
        if then != "nothing" and loading(process) and process.identity in self.worker.processes:
            self.worker.code_starts(process)
            if then == "code waits" and code_runs(process) and process.identity in self.worker.processes:
                self.worker.wait_on_nested(process)

    @precondition(lambda self: self.processes(loading))
    @rule(data=st.data())
    def task_code_starts(self, data: st.DataObject) -> None:
        self.worker.code_starts(data.draw(st.sampled_from(self.processes(loading))))

    @precondition(lambda self: self.processes(lambda process: process.running is not None and not process.core.waiting))
    @rule(data=st.data(), outcome=st.sampled_from(["ok", "raised"]))
    def task_ends(self, data: st.DataObject, outcome: str) -> None:
        candidates = self.processes(lambda process: process.running is not None and not process.core.waiting)
        self.worker.end_task(data.draw(st.sampled_from(candidates)), outcome)

    @precondition(lambda self: self.processes(code_runs))
    @rule(data=st.data())
    def task_waits_on_nested_tasks(self, data: st.DataObject) -> None:
        self.worker.wait_on_nested(data.draw(st.sampled_from(self.processes(code_runs))))

    @precondition(lambda self: self.processes(lambda process: process.core.waiting))
    @rule(data=st.data())
    def nested_wait_ends(self, data: st.DataObject) -> None:
        self.worker.end_wait(data.draw(st.sampled_from(self.processes(lambda process: process.core.waiting))))

    @precondition(lambda self: self.processes(lambda process: process.running is not None))
    @rule(data=st.data())
    def processor_dies(self, data: st.DataObject) -> None:
        process = data.draw(st.sampled_from(self.processes(lambda process: process.running is not None)))
        self.worker.route(self.worker.agent.on_processor_exit(process.identity, -9, self.worker.now))

    # ------------------------------------------------------------------------------------------ checks

    @invariant()
    def consistent(self) -> None:
        self.worker.check()
        assert not self.worker.exits, self.worker.exits

    def teardown(self) -> None:
        """Everything runs out: every task sent is answered exactly once per sending."""
        worker = self.worker
        for _ in range(5000):
            if not worker.held_by_agent():
                break
            worker.say_hello()
            if worker.asked_to_start:
                self.scheduler_lets_suspects_start()
            for process in list(worker.processes.values()):
                if process.identity not in worker.processes:
                    continue
                if process.core.waiting:
                    worker.end_wait(process)
                if process.running is not None:
                    if not process.code_runs:
                        worker.code_starts(process)
                    worker.end_task(process, "ok")
                elif process.said_hello:
                    worker.loop_turns(process)
            worker.check()
        assert not worker.held_by_agent(), "tasks the worker never answered"
        for task_id, times_sent in worker.dispatched.items():
            assert len(worker.outcomes[task_id]) == times_sent, (task_id, worker.outcomes[task_id])


WorkerCoresFuzz.TestCase.settings = settings(
    max_examples=150, stateful_step_count=50, database=None, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_agent_and_processor_cores_together = WorkerCoresFuzz.TestCase
