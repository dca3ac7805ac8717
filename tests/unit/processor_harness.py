"""A processor core driven the way processor.py drives it, with the agent played by the test.

The test delivers the agent's messages (they wait unread, as on the socket, until the shell would read
them: between tasks, while asking to wait, when a signal is answered), signals, and says when the task's
code starts, waits on nested tasks and ends. Every action the core returns is carried out here and
recorded: what reached the agent, and every answer each task got (a result, a failure, a result stored,
or a hand-over to the agent).
"""

from __future__ import annotations

import collections
from typing import Any

from scaler.protocol import messages as m
from scaler.worker import processor_actions as actions
from scaler.worker.processor_core import URGENT_MESSAGES, ProcessorCore

FUNCTION_ID = b"f" * 32
FIRST_TASK_ID = 1 << 40


class DrivenCore:
    def __init__(self, now: float = 1000.0) -> None:
        self.core = ProcessorCore()
        self.now = now
        self.unread: list[m.Message] = []
        self.to_agent: list[m.Message] = []
        # Every answer each task got: ("ok", payload), ("failed", kind), ("stored", object id), ("handed", None).
        self.answers: dict[int, list[tuple[str, Any]]] = collections.defaultdict(list)
        self.accepted: collections.Counter[int] = collections.Counter()
        self.urgent_sent = 0
        self.running: int | None = None
        self.code_runs = False  # the running task's own code runs (not its loading, not a nesting hook)
        self.refusals: list[str] = []
        self.waits: list[float] = []
        self.published: list[list[bytes] | None] = []
        self.forgotten: list[bytes] = []
        self.memory_given_back = 0
        self.signals_answered = 0
        self._next_task_id = FIRST_TASK_ID

    # ------------------------------------------------------------------------------------------ plumbing

    def carry_out(self, done: actions.Actions) -> None:
        for action in done:
            if isinstance(action, actions.ToAgent):
                self._to_agent(action.message)
            elif isinstance(action, actions.RunTask):
                assert self.running is None, "one task at a time"
                self.running = action.task[0]
            elif isinstance(action, actions.WaitForMessages):
                assert action.seconds > 0
                self.waits.append(action.seconds)
            elif isinstance(action, actions.RefuseWait):
                self.refusals.append(action.reason)
            elif isinstance(action, actions.PublishResults):
                self.published.append(action.object_ids)
            elif isinstance(action, actions.ForgetObjects):
                self.forgotten.extend(action.object_ids)
            elif isinstance(action, actions.GiveBackMemory):
                self.memory_given_back += 1

    def _to_agent(self, message: m.Message) -> None:
        self.to_agent.append(message)
        if isinstance(message, m.TaskResults):
            for task_id, payload in zip(message.succeeded_ids, message.payloads):
                self.answers[task_id].append(("ok", payload))
            for failure in message.failures:
                self.answers[failure.task_id].append(("failed", failure.kind))
            for stored in message.stored:
                self.answers[stored.task_id].append(("stored", stored.object_id))
        elif isinstance(message, m.TaskSubmission):
            for group in message.groups:
                for task_id in group.task_ids:
                    self.answers[task_id].append(("handed", None))

    def sent(self, kind: type) -> list:
        return [message for message in self.to_agent if isinstance(message, kind)]

    def read(self) -> None:
        """The shell reads the socket: every message delivered so far, in order."""
        while self.unread:
            self.carry_out(self.core.on_message(self.unread.pop(0), self.now))

    # ------------------------------------------------------------------------------------------ the agent

    def new_task_ids(self, count: int) -> list[int]:
        first = self._next_task_id
        self._next_task_id += count
        return list(range(first, first + count))

    def deliver(self, message: m.Message) -> None:
        """The agent sends a message; it waits unread until the shell reads."""
        if isinstance(message, m.TaskSubmission):
            self.accepted.update(task_id for group in message.groups for task_id in group.task_ids)
        if isinstance(message, URGENT_MESSAGES):
            self.urgent_sent += 1
        self.unread.append(message)

    def submit(
        self, count: int = 1, *, depth: int = 0, report_start: bool = False, object_args: list[bytes] | None = None,
        ahead: bool = False,
    ) -> list[int]:
        """Tasks of one argument each; with `object_args`, task i's argument is that stored object."""
        task_ids = self.new_task_ids(count)
        group = m.TaskGroup(
            function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=task_ids,
            args=list(object_args) if object_args else [b"arg-%d" % task_id for task_id in task_ids],
            nesting_depth=depth, report_start=report_start,
            object_arg_indices=list(range(count)) if object_args else [], ahead=ahead,
        )
        self.deliver(m.TaskSubmission(objects=[], groups=[group]))
        return task_ids

    def signal(self) -> bool:
        """The agent signals (after announcing its urgent count); True if the handler answered at once."""
        if self.core.on_signal():
            self.answer_signals()
            return True
        return False

    def answer_signals(self) -> None:
        """As Processor._answer_signals: read until the announced urgent messages are handled, send, and again while
        signals came meanwhile."""
        while True:
            self.read()
            assert self.core.read_enough(self.urgent_sent), "every urgent message sent before the signal is read"
            self.carry_out(self.core.answer_signal(self.now))
            self.signals_answered += 1
            if not self.core.signal_answered():
                return

    # ------------------------------------------------------------------------------------------ the shell's loop

    def next(self) -> int | None:
        """Between tasks: the shell reads, then asks the core; returns the task it runs now, if any."""
        assert self.running is None
        self.read()
        self.carry_out(self.core.next_action(self.now))
        return self.running

    def code_starts(self) -> None:
        assert self.running is not None and not self.code_runs
        self.code_runs = True
        if self.core.task_code_starts():
            self.answer_signals()

    def end(self, outcome: str = "ok", *, lost_input: bytes = b"", first_report: bool = True) -> int:
        """The running task ends: "ok", "raised", "stored", "unloadable" (before its code ran) or "lost" (input)."""
        task_id = self.running
        assert task_id is not None
        if self.code_runs:
            self.core.task_code_ends()
        self.code_runs = False
        self.running = None
        if outcome == "lost":
            self.carry_out(self.core.on_input_lost(task_id, lost_input, first_report, self.now))
            return task_id
        result: m.Buffer | m.TaskFailure | m.StoredResult
        if outcome == "ok":
            result = b"result-%d" % task_id
        elif outcome == "stored":
            result = m.StoredResult(task_id=task_id, object_id=b"o" * 32, size=10, holder="store")
        else:
            kind = m.FailureKind.RAISED if outcome == "raised" else m.FailureKind.SERIALIZATION
            result = m.TaskFailure(task_id=task_id, kind=kind)
        self.carry_out(self.core.on_task_ended(task_id, result, self.now))
        return task_id

    def run(self, outcome: str = "ok") -> int:
        """The next task runs and ends."""
        task_id = self.next()
        assert task_id is not None, "nothing ran"
        self.code_starts()
        return self.end(outcome)

    def wait_on_nested(self, answer: m.ProcessorState | None) -> bool:
        """The running task's code waits on nested tasks: the shell asks, reads up to the answer (None: none
        comes), and carries on. Returns whether the wait was granted."""
        assert self.code_runs and not self.core.waiting
        could_read = self.core.task_code_ends()
        refused = len(self.refusals)
        self.carry_out(self.core.on_wait_start(self.now))
        if answer is not None:
            self.deliver(answer)
        while self.core.asking_to_wait and self.unread:
            self.carry_out(self.core.on_message(self.unread.pop(0), self.now))
        if self.core.asking_to_wait:
            self.carry_out(self.core.on_wait_unanswered())
        if could_read and self.core.task_code_starts():
            self.answer_signals()
        return len(self.refusals) == refused

    def end_wait(self) -> None:
        assert self.core.waiting
        could_read = self.core.task_code_ends()
        self.carry_out(self.core.on_wait_end())
        if could_read and self.core.task_code_starts():
            self.answer_signals()

    def tick(self, advance: float = 0.0) -> None:
        self.now += advance
        self.carry_out(self.core.on_tick(self.now))

    # ------------------------------------------------------------------------------------------ checks

    def check(self) -> None:
        """The core agrees with itself, and no task was answered twice or without being accepted."""
        self.core.check_invariants()
        for task_id, answers in self.answers.items():
            assert len(answers) <= self.accepted[task_id], f"task {task_id:#x} answered {answers}"
