"""A worker agent core among simulated processors, played the way scaler/worker/processor.py behaves.

The harness plays the scheduler (a test sends its messages) and every processor the core starts: a
simulated processor holds the tasks it was sent, runs one when the test says so (writing its
running-task slot, which the core reads through the harness), answers it, waits on nested tasks, asks
to start suspects, and dies. As the real one, a processor reads what the agent sends only between
tasks, while it asks to wait on nested tasks, or when signalled; what arrives while its task runs
waits unread. Every action the core returns is carried out here, and checked: nothing goes to a
processor before its hello or after it was stopped.

`check()` asserts, after any step, that the core agrees with itself (check_invariants) and with the
simulation: every task the scheduler sent is held by exactly one processor or was answered, once per
time it was sent.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from scaler.protocol import messages as m
from scaler.utility.identifiers import content_object_id
from scaler.worker import agent_actions
from scaler.worker.agent_core import WorkerAgentCore
from scaler.worker.config import WorkerConfig
from scaler.worker.running_task_slot import NO_TASK

FUNCTION_PAYLOAD = b"cloudpickled function: lambda x: x + 1"
FUNCTION_ID = content_object_id(FUNCTION_PAYLOAD)
WORKER_NAME = "sim-worker"
# What a processor counts as urgent: a signal may follow each (agent_actions.SignalProcessor).
URGENT_MESSAGES = (m.CancelTasks, m.ReleaseTasks, m.PublishObjects)
# Task ids as the scheduler makes them: a client's prefix (from 1) above a counter.
FIRST_TASK_ID = 1 << 40


def payload_for(task_id: int) -> bytes:
    return b"result-%d" % task_id


@dataclasses.dataclass
class SimProcessor:
    identity: bytes
    said_hello: bool = False
    # Queued tasks in arrival order, each with its group's report_start.
    queue: dict[int, bool] = dataclasses.field(default_factory=dict)
    # The task its code runs now, and whether that task waits on nested tasks (a wait the agent granted).
    running: int | None = None
    waiting: bool = False
    # Delivered by the agent and not read yet; and everything ever delivered, in order.
    unread: list[m.Message] = dataclasses.field(default_factory=list)
    received: list[m.Message] = dataclasses.field(default_factory=list)
    objects: set[bytes] = dataclasses.field(default_factory=set)
    start_asked: set[int] = dataclasses.field(default_factory=set)
    start_granted: set[int] = dataclasses.field(default_factory=set)
    signals: int = 0
    # It took its next task from its socket and starts it before it reads what came after (see start_task).
    starting: bool = False
    # Results of ended tasks it has not sent yet (the processor batches them); a signal sends them.
    held_back: list[m.TaskResults] = dataclasses.field(default_factory=list)
    # The agent's answer to its last request to wait on nested tasks.
    answer: m.ProcessorState | None = None

    def held(self) -> set[int]:
        return set(self.queue) | ({self.running} if self.running is not None else set())

    def received_of(self, kind: type) -> list:
        return [message for message in self.received if isinstance(message, kind)]


class SimulatedAgent:
    def __init__(
        self, config: WorkerConfig | None = None, *, now: float = 1000.0, heartbeat_phase: float = 1.0
    ) -> None:
        self.config = config or WorkerConfig(address="tcp://127.0.0.1:1")
        self.now = now
        # The running-task slots the core reads (agent_actions.RunningTasks).
        self.slots: dict[bytes, int] = {}
        # The fraction of a changed heartbeat interval before the next heartbeat: a whole one unless a test says.
        self.core = WorkerAgentCore(
            self.config, WORKER_NAME, "sim-host", 4242, self, heartbeat_phase=lambda: heartbeat_phase
        )
        self.processors: dict[bytes, SimProcessor] = {}
        self.stopped: set[bytes] = set()
        self.started: list[bytes] = []
        self.to_scheduler: list[m.Message] = []
        # Heartbeats are sent may-drop; everything else must arrive.
        self.droppable: list[m.Message] = []
        # Every answer the scheduler got for each task: ("ok", payload), ("failed", TaskFailure) or
        # ("stored", StoredResult).
        self.outcomes: dict[int, list[tuple[str, Any]]] = collections.defaultdict(list)
        self.dispatched: collections.Counter[int] = collections.Counter()
        self.exits: list[agent_actions.Exit] = []
        self.registered = 0
        self._next_task_id = FIRST_TASK_ID
        self._function_sent = False
        self._route(self.core.start(self.now))

    def running_task_id(self, identity: bytes) -> int:
        return self.slots.get(identity, NO_TASK)

    # ------------------------------------------------------------------------------------------ plumbing

    def _route(self, actions: list[agent_actions.Action]) -> None:
        for action in actions:
            if isinstance(action, agent_actions.ToScheduler):
                message = m.decode(action.frames)
                (self.droppable if action.may_drop else self.to_scheduler).append(message)
                if isinstance(message, m.TaskResults):
                    for task_id, payload in zip(message.succeeded_ids, message.payloads):
                        self.outcomes[task_id].append(("ok", bytes(payload)))
                    for failure in message.failures:
                        self.outcomes[failure.task_id].append(("failed", failure))
                    for stored in message.stored:
                        self.outcomes[stored.task_id].append(("stored", stored))
            elif isinstance(action, agent_actions.ToProcessor):
                assert action.identity not in self.stopped, f"sent to stopped processor {action.identity!r}"
                processor = self.processors[action.identity]
                assert processor.said_hello, f"sent to {action.identity!r} before its hello: the ROUTER drops it"
                message = m.decode(action.frames)
                processor.received.append(message)
                processor.unread.append(message)
                if processor.running is None and not processor.starting:
                    self._read(processor)
            elif isinstance(action, agent_actions.StartProcessor):
                assert action.identity not in self.processors and action.identity not in self.stopped, action
                self.processors[action.identity] = SimProcessor(action.identity)
                self.started.append(action.identity)
            elif isinstance(action, agent_actions.StopProcessor):
                assert action.identity in self.processors, f"stopped twice or never started: {action.identity!r}"
                del self.processors[action.identity]
                self.slots.pop(action.identity, None)
                self.stopped.add(action.identity)
            elif isinstance(action, agent_actions.SignalProcessor):
                assert action.identity not in self.stopped, f"signalled stopped processor {action.identity!r}"
                processor = self.processors[action.identity]
                urgent = [message for message in processor.received if isinstance(message, URGENT_MESSAGES)]
                assert action.urgent_sent == len(urgent), "the signal announces every urgent message sent before it"
                processor.signals += 1
                self._read(processor)  # the handler reads while the task's code runs, and answers at once
                self.send_held_back(processor)  # then it sends what it held back
            elif isinstance(action, agent_actions.Registered):
                self.registered += 1
            elif isinstance(action, agent_actions.Exit):
                self.exits.append(action)

    def _from_processor(self, processor: SimProcessor, message: m.Message) -> None:
        self._route(self.core.on_processor_frames(processor.identity, m.encode(message), self.now))

    def from_scheduler(self, message: m.Message) -> list[agent_actions.Action]:
        actions = self.core.on_scheduler_frames(m.encode(message), self.now)
        self._route(actions)
        return actions

    def _read(self, processor: SimProcessor, until_answer: bool = False) -> None:
        """The processor reads what the agent sent: all of it, or up to the answer to its wait request."""
        while processor.unread:
            message = processor.unread.pop(0)
            if isinstance(message, m.TaskSubmission):
                processor.objects.update(item.object_id for item in message.objects)
                for group in message.groups:
                    assert group.function_id in processor.objects, "a task arrived before its function"
                    processor.queue.update(dict.fromkeys(group.task_ids, group.report_start))
            elif isinstance(message, (m.CancelTasks, m.ReleaseTasks)):
                kind = m.FailureKind.CANCELED if isinstance(message, m.CancelTasks) else m.FailureKind.RETURNED
                dropped = [task_id for task_id in message.task_ids if task_id in processor.queue]
                for task_id in dropped:
                    del processor.queue[task_id]
                    processor.start_asked.discard(task_id)
                    processor.start_granted.discard(task_id)
                if dropped:
                    failures = [m.TaskFailure(task_id=task_id, kind=kind) for task_id in dropped]
                    self._from_processor(processor, m.TaskResults(succeeded_ids=[], payloads=[], failures=failures))
            elif isinstance(message, m.TaskStarted):
                for task_id in message.task_ids:
                    if task_id in processor.start_asked:
                        processor.start_asked.discard(task_id)
                        processor.start_granted.add(task_id)
            elif isinstance(message, m.DeleteObjects):
                processor.objects.difference_update(message.object_ids)
            elif isinstance(message, m.ProcessorState):
                assert until_answer, "an answer to a wait nobody asked for"
                processor.answer = message
                return

    # ------------------------------------------------------------------------------------------ scheduler

    def new_task_ids(self, count: int) -> list[int]:
        first = self._next_task_id
        self._next_task_id += count
        return list(range(first, first + count))

    def welcome(self, **fields: int) -> list[agent_actions.Action]:
        return self.from_scheduler(m.Welcome(**fields))

    def submit(
        self, count: int = 1, *, task_ids: list[int] | None = None, report_start: bool = False,
        objects: list[m.ObjectPayload] | None = None,
    ) -> list[int]:
        """The scheduler sends tasks (new ids unless given: a task handed back may come again)."""
        task_ids = task_ids if task_ids is not None else self.new_task_ids(count)
        sent_objects = list(objects or [])
        if not self._function_sent:
            sent_objects.append(m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f"))
            self._function_sent = True
        group = m.TaskGroup(
            function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=list(task_ids),
            args=[b"arg-%d" % task_id for task_id in task_ids], report_start=report_start,
        )
        self.dispatched.update(task_ids)
        self.from_scheduler(m.TaskSubmission(objects=sent_objects, groups=[group] if task_ids else []))
        return list(task_ids)

    def cancel(self, task_ids: list[int], force: bool = False) -> list[agent_actions.Action]:
        return self.from_scheduler(m.CancelTasks(task_ids=list(task_ids), force=force))

    def release(self, task_ids: list[int]) -> list[agent_actions.Action]:
        return self.from_scheduler(m.ReleaseTasks(task_ids=list(task_ids)))

    def grant_start(self, task_ids: list[int]) -> list[agent_actions.Action]:
        return self.from_scheduler(m.TaskStarted(task_ids=list(task_ids)))

    def tick(
        self, advance: float = 0.0, *, rss: dict[bytes, int] | None = None, usage: m.Heartbeat | None = None
    ) -> list[agent_actions.Action]:
        self.now += advance
        actions = self.core.on_tick(self.now, rss, usage)
        self._route(actions)
        return actions

    def last_failure_kind(self, task_id: int) -> m.FailureKind | None:
        """How the task's last answer failed; None if it succeeded or was never answered."""
        outcomes = self.outcomes.get(task_id)
        last = outcomes[-1][1] if outcomes else None
        return last.kind if isinstance(last, m.TaskFailure) else None

    def received(self, kind: type) -> list:
        return [message for message in self.to_scheduler if isinstance(message, kind)]

    def failures(self, kind: m.FailureKind) -> dict[int, m.TaskFailure]:
        return {
            failure.task_id: failure for message in self.received(m.TaskResults) for failure in message.failures
            if failure.kind == kind
        }

    # ------------------------------------------------------------------------------------------ processors

    def active(self) -> SimProcessor:
        (active,) = [
            self.processors[p.identity] for p in self.core.pool.processors.values() if p.role.value == "active"
        ]
        return active

    def role_of(self, processor: SimProcessor) -> str:
        return self.core.pool.processors[processor.identity].role.value

    def hello(self) -> None:
        """Every started processor that has not said hello yet says it (it has connected)."""
        for processor in list(self.processors.values()):
            if not processor.said_hello and processor.identity in self.processors:
                processor.said_hello = True
                self._from_processor(processor, m.Hello(role=m.Role.WORKER, pid=1))

    def run_next(self, task_id: int | None = None) -> SimProcessor:
        """The active processor starts its next task (or the one named); returns that processor."""
        processor = self.active()
        assert self.start_task(processor, task_id) is not None, "a suspect waits for the scheduler"
        return processor

    def wait_in_active(self, task_id: int | None = None) -> tuple[SimProcessor, bool]:
        """The active processor runs its next task, which waits on nested tasks; the processors started
        meanwhile say hello. Returns that processor, and whether the agent granted the wait."""
        processor = self.run_next(task_id)
        granted = self.block(processor)
        self.hello()
        return processor, granted

    def start_task(self, processor: SimProcessor, task_id: int | None = None) -> int | None:
        """It takes a queued task (the first, unless named) and runs it; a suspect first asks the scheduler.

        Returns the task it runs, or None while a suspect waits for the scheduler's go-ahead.
        """
        assert processor.running is None, "one task at a time"
        task_id = task_id if task_id is not None else next(iter(processor.queue))
        if processor.queue[task_id] and task_id not in processor.start_granted:
            if task_id not in processor.start_asked:
                processor.start_asked.add(task_id)
                self._from_processor(processor, m.TaskStarted(task_ids=[task_id]))
            return None
        del processor.queue[task_id]
        processor.start_granted.discard(task_id)
        processor.starting = False
        processor.running = task_id
        self.slots[processor.identity] = task_id
        return task_id

    def finish(
        self, processor: SimProcessor, *, payload: bytes | None = None, failure: m.FailureKind | None = None,
        warnings: int = 0, held_back: bool = False,
    ) -> int:
        """Its task ends: the result (or a failure of that kind) goes to the agent; then it reads its socket.

        `held_back`: the result waits for the processor's next batch instead (see send_held_back), as the
        result of a task that ended right after a batch went out does.
        """
        task_id = processor.running
        assert task_id is not None, "nothing runs"
        processor.running, processor.waiting = None, False
        task_warnings = [
            m.TaskWarning(task_id=task_id, category="builtins.UserWarning", message=f"warning {index}",
                          filename="task.py", lineno=index)
            for index in range(warnings)
        ]
        if failure is None:
            results = m.TaskResults(
                succeeded_ids=[task_id], payloads=[payload if payload is not None else payload_for(task_id)],
                failures=[], warnings=task_warnings,
            )
        else:
            results = m.TaskResults(
                succeeded_ids=[], payloads=[], failures=[m.TaskFailure(task_id=task_id, kind=failure)],
                warnings=task_warnings,
            )
        if held_back:
            processor.held_back.append(results)
            return task_id
        self.send_held_back(processor)  # a batch goes out with the earlier results first
        self._from_processor(processor, results)
        if processor.identity in self.processors:
            self._read(processor)
        return task_id

    def send_held_back(self, processor: SimProcessor) -> None:
        """The processor sends the results it held back, in one batch."""
        if processor.held_back:
            held, processor.held_back = processor.held_back, []
            self._from_processor(processor, m.TaskResults(
                succeeded_ids=[task_id for results in held for task_id in results.succeeded_ids],
                payloads=[payload for results in held for payload in results.payloads],
                failures=[failure for results in held for failure in results.failures],
                warnings=[warning for results in held for warning in results.warnings],
            ))

    def lose_input(self, processor: SimProcessor, object_id: bytes) -> int:
        """Its task cannot read a stored input: it reports the object lost, then gives the task back."""
        self._from_processor(processor, m.ObjectsLost(object_ids=[object_id]))
        return self.finish(processor, failure=m.FailureKind.RETURNED)

    def answer_batch(self, processor: SimProcessor, results: m.TaskResults) -> None:
        """It ran these tasks one after the other and answers them in one message, as it batches."""
        answered = {*results.succeeded_ids, *(failure.task_id for failure in results.failures)}
        assert answered <= processor.held(), "it answers only tasks it holds"
        for task_id in answered:
            processor.queue.pop(task_id, None)
        if processor.running in answered:
            processor.running, processor.waiting = None, False
        self.send_held_back(processor)
        self._from_processor(processor, results)

    def block(self, processor: SimProcessor) -> bool:
        """Its task waits on nested tasks: it asks the agent, and if granted hands its queue over."""
        assert processor.running is not None and not processor.waiting
        processor.answer = None
        self.send_held_back(processor)  # it sends its results before it asks
        self._from_processor(processor, m.ProcessorState(blocked=True))
        self._read(processor, until_answer=True)
        answer = processor.answer
        assert answer is not None, "the agent did not answer a wait request"
        if not answer.granted:
            return False
        processor.waiting = True
        if processor.queue:
            suspects = [task_id for task_id, report_start in processor.queue.items() if report_start]
            others = [task_id for task_id, report_start in processor.queue.items() if not report_start]
            groups = [
                m.TaskGroup(
                    function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=task_ids,
                    args=[b"arg-%d" % task_id for task_id in task_ids], report_start=report_start,
                )
                for task_ids, report_start in ((others, False), (suspects, True)) if task_ids
            ]
            processor.queue.clear()
            processor.start_asked.clear()
            processor.start_granted.clear()
            self._from_processor(processor, m.TaskSubmission(objects=[], groups=groups))
        return True

    def unblock(self, processor: SimProcessor) -> None:
        assert processor.waiting
        processor.waiting = False
        self._from_processor(processor, m.ProcessorState(blocked=False))

    def crash(self, processor: SimProcessor, exit_code: int = -9) -> None:
        """The processor process dies; the shell reports its exit."""
        self._route(self.core.on_processor_exit(processor.identity, exit_code, self.now))
        assert processor.identity not in self.processors, "the core did not stop (reap) a dead processor"

    # ------------------------------------------------------------------------------------------ checks

    def check(self) -> None:
        self.core.check_invariants()
        held_by_core = {
            task_id: identity
            for identity, record in self.core.pool.processors.items() for task_id in record.outstanding
        }
        assert set(self.core.pool.processors) == set(self.processors), "the core and the shell disagree on processes"
        for task_id, times_sent in self.dispatched.items():
            answers = len(self.outcomes.get(task_id, ()))
            assert answers + (task_id in held_by_core) == times_sent, (
                f"task {task_id:#x} sent {times_sent} time(s), answered {answers}, held: {task_id in held_by_core}"
            )
        for identity, processor in self.processors.items():
            for task_id in processor.held():
                assert held_by_core.get(task_id) == identity, (
                    f"{identity!r} holds {task_id:#x}; the core thinks {held_by_core.get(task_id)!r}"
                )


def make_agent(**settings: Any) -> SimulatedAgent:
    """An agent welcomed by its scheduler, its first processor said hello."""
    agent = SimulatedAgent(WorkerConfig(address="tcp://127.0.0.1:1", **settings))
    agent.welcome()
    agent.hello()
    return agent


def of_type(actions: list, kind: type) -> list:
    return [action for action in actions if isinstance(action, kind)]
