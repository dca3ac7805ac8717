"""The processor's decisions, as a state machine with no I/O.

The shell (processor.py) feeds it what happens, with the time it happened: a message from the agent, the
end of a task, the start and end of a wait on nested tasks, the agent's signal, the code of a task
starting and ending, and a tick while nothing runs. Each returns the actions to carry out in order
(processor_actions.py). No sockets, clocks, signals or processes in here, so tests drive it directly
(tests/unit/test_processor_core.py, test_fuzz_processor_core.py).

What the processor decides:

- **Which task runs next.** Top-level tasks in arrival order; nested ones deepest first and, at one depth,
  newest first: the newest are the children of the task that blocked last, so a recursion unfolds
  depth-first and the tasks holding a processor while they wait stay near the recursion's depth. Tasks the
  scheduler sent `ahead` (TaskGroup.ahead: a client far below its share) run before the top-level tasks,
  after the nested ones, in arrival order: its task does not wait behind a deep queue of other clients' tasks.
- **Suspects** (TaskGroup.reportStart) run only once the scheduler knows they started here: the processor
  sends the results it holds, asks (TaskStarted), and keeps reading the socket until the answer, so that a
  cancel or release of the task still applies. No answer within AGENT_ANSWER_SECONDS: the task goes back.
  A suspect's result goes out as soon as it ends, before anything else can take the worker down.
- **Cancel and release** answer for the named tasks still queued here (canceled, or returned to the
  scheduler); a task running or ended is answered by its result.
- **When held results go out.** Results are batched: they go when the queue runs dry, when
  FLUSH_EVERY_TASKS are held, when a task ends FLUSH_EVERY_SECONDS or more after the last send, when
  signalled, before a suspect asks to start or a wait on nested tasks begins, and when the processor stops.
- **Nested waits.** The task about to wait sends what it holds and asks the agent; once granted, every
  queued task goes to the agent (for the processor that serves meanwhile), so the waiting task alone stays.
- **The agent's signal.** The agent signals a processor whose task runs when it sent an urgent message
  (URGENT_MESSAGES) for it, or wants the results it holds. The handler runs between two bytecodes of
  whatever the processor's thread runs, so it may read the socket only while the task's own code runs (not
  our loop, not a nesting hook, not another answer): `_may_read`. A signal at any other moment is kept
  (`_signal_pending`) and answered as soon as the task's code runs again. To answer, the shell reads its
  socket until every urgent message the agent announced in the running-task slot before signalling is
  handled (the signal can overtake its message), then sends the results held. Both flags are written
  before they are read, in the order that leaves no signal unanswered whichever bytecode it lands on.
- **Memory**: idle IDLE_BEFORE_GIVING_BACK_SECONDS after work, give back what malloc keeps.
"""

from __future__ import annotations

import collections
import itertools
import logging

from scaler.protocol import messages as m
from scaler.protocol.layout import slots_by_row
from scaler.protocol.task_signature import TaskSignature
from scaler.worker.processor_actions import (
    Action,
    Actions,
    ForgetObjects,
    GiveBackMemory,
    KeepObjects,
    PublishResults,
    QueuedTask,
    RefuseWait,
    RunTask,
    SetStoreDirectory,
    ToAgent,
    WaitForMessages,
)

logger = logging.getLogger(__name__)

# The messages after which the agent may signal: it counts those it sent in the running-task slot, and a signal is
# answered once this many are handled (see read_enough). Stated on the agent's side by ProcessorPool.deliver_urgent.
URGENT_MESSAGES = (m.CancelTasks, m.ReleaseTasks, m.PublishObjects)
FLUSH_EVERY_TASKS = 1000
FLUSH_EVERY_SECONDS = 0.005
# How long the agent (or the scheduler behind it) may take to answer a suspect's ask or a request to wait.
AGENT_ANSWER_SECONDS = 30.0
# How long to wait for a message when nothing may run; a tick follows each wait that found none.
IDLE_WAIT_SECONDS = 1.0
# Idle this long after work, a processor gives back the freed memory malloc kept for the next task: a pause
# between batches (a client making its next arguments) does not pay for fresh pages again.
IDLE_BEFORE_GIVING_BACK_SECONDS = 5.0
# The queue key of tasks sent ahead: above top-level tasks (0), below every nested depth (1 and more).
AHEAD = 0.5


class ProcessorCore:
    def __init__(self) -> None:
        self._out: list[Action] = []
        # Queued tasks by nesting depth, or AHEAD (see next_action), and their ids.
        self._queues: dict[float, collections.deque[QueuedTask]] = {}
        self._queued_ids: set[int] = set()
        # The task whose code runs (or waits on nested tasks), until its end.
        self.running: QueuedTask | None = None
        # Held results, sent by _flush.
        self._succeeded_ids: list[int] = []
        self._payloads: list[m.Buffer] = []
        self._failures: list[m.TaskFailure] = []
        self._stored: list[m.StoredResult] = []
        self._profiles: list[m.TaskProfile] = []
        self._warnings: list[m.TaskWarning] = []
        self._last_flush = 0.0
        # The held results' running time, as the scheduler's prefetch reads it (TaskResults.run_seconds): the tasks
        # that ran, their seconds in all, and when the running one started. A task that waited on nested tasks
        # is left out: its wait is not work of this processor's, which handed its queue on meanwhile.
        self._run_seconds = 0.0
        self._ran_tasks = 0
        self._run_started = 0.0
        self._running_waited = False
        # Suspects asked to start, with the deadline for the answer; and those granted, which may run.
        self._start_asked: dict[int, float] = {}
        self._start_granted: set[int] = set()
        # A wait on nested tasks: asked and not answered yet; granted and not ended yet.
        self._asking_to_wait = False
        self.waiting = False
        self._urgent_handled = 0
        self._may_read = False
        self._signal_pending = False
        self.stopping = False
        self._last_activity = 0.0
        self._owes_memory_back = False

    def _take(self) -> Actions:
        out = self._out
        if not out:
            return ()
        self._out = []
        return out

    # ------------------------------------------------------------------------------------------ messages

    def on_message(self, message: m.Message, now: float) -> Actions:
        """A message of the agent, read between tasks, while asking to wait, or when signalled."""
        self._last_activity = now
        self._owes_memory_back = True
        if isinstance(message, m.TaskSubmission):
            if message.objects:
                self._out.append(KeepObjects(message.objects))
            self._accept(message.groups)
        elif isinstance(message, URGENT_MESSAGES):
            self._urgent_handled += 1
            if isinstance(message, m.CancelTasks):
                self._drop_queued(message.task_ids, m.FailureKind.CANCELED)
            elif isinstance(message, m.ReleaseTasks):
                # Load balancing: queued ones go back to the scheduler; running or ended ones stay ours.
                self._drop_queued(message.task_ids, m.FailureKind.RETURNED)
            else:
                self._out.append(PublishResults(message.object_ids))
        elif isinstance(message, m.TaskStarted):
            for task_id in message.task_ids:
                if self._start_asked.pop(task_id, None) is not None:
                    self._start_granted.add(task_id)
        elif isinstance(message, m.DeleteObjects):
            self._out.append(ForgetObjects(message.object_ids))
        elif isinstance(message, m.StoreDirectory):
            self._out.append(SetStoreDirectory(message))
        elif isinstance(message, m.ProcessorState):
            self._on_wait_answer(message, now)
        elif isinstance(message, m.Disconnect):
            self.stopping = True
            if self._asking_to_wait:
                self._asking_to_wait = False
                self._out.append(RefuseWait("the worker is stopping"))
        else:
            logger.warning(f"processor: unexpected {type(message).__name__} from the agent")
        return self._take()

    def _accept(self, groups: list[m.TaskGroup]) -> None:
        for group in groups:
            object_slots = slots_by_row(group.object_arg_indices, group.args_per_task)
            key = AHEAD if group.ahead and not group.nesting_depth else group.nesting_depth
            queue = self._queues.setdefault(key, collections.deque())
            for row, task_id in enumerate(group.task_ids):
                queue.append((task_id, group, row, object_slots.get(row)))
            self._queued_ids.update(group.task_ids)

    def _drop_queued(self, task_ids: list[int], kind: m.FailureKind) -> None:
        dropped = self._queued_ids.intersection(task_ids)
        if not dropped:
            return  # running or ended: their results answer them
        for depth, queue in list(self._queues.items()):
            kept = collections.deque(task for task in queue if task[0] not in dropped)
            if kept:
                self._queues[depth] = kept
            else:
                del self._queues[depth]
        self._queued_ids -= dropped
        for task_id in dropped:
            self._start_asked.pop(task_id, None)
            self._start_granted.discard(task_id)
            self._failures.append(m.TaskFailure(task_id=task_id, kind=kind))

    # ------------------------------------------------------------------------------------------ running

    @property
    def has_queued(self) -> bool:
        return bool(self._queued_ids)

    def next_action(self, now: float) -> Actions:
        """Between tasks, once the socket is read: run a task, or wait for a message (held results go first)."""
        queues = self._queues
        # Top-level tasks (and those sent ahead) in arrival order; nested ones deepest, then newest, first (see the
        # top of this file).
        while queues:
            depth = max(queues)  # empty queues are removed: see check_invariants
            queue = queues[depth]
            nested = depth >= 1
            task = queue[-1] if nested else queue[0]
            task_id = task[0]
            if not task[1].report_start or task_id in self._start_granted:
                if nested:
                    queue.pop()
                else:
                    queue.popleft()
                if not queue:
                    del queues[depth]
                self._queued_ids.discard(task_id)
                self._start_granted.discard(task_id)
                self.running = task
                self._run_started = now
                self._running_waited = False
                if self._out:
                    self._out.append(RunTask(task))
                    return self._take()
                return [RunTask(task)]
            deadline = self._start_asked.get(task_id)
            if deadline is None:
                self._flush(now)  # earlier results first: they are not lost if this task kills us
                self._out.append(ToAgent(m.TaskStarted(task_ids=[task_id])))
                deadline = self._start_asked[task_id] = now + AGENT_ANSWER_SECONDS
            elif now >= deadline:
                logger.warning(f"processor: no answer from the scheduler to start task {task_id:#x}; handing it back")
                self._drop_queued([task_id], m.FailureKind.RETURNED)
                continue
            self._out.append(WaitForMessages(min(deadline - now, IDLE_WAIT_SECONDS)))
            return self._take()
        self._flush(now)
        self._out.append(WaitForMessages(IDLE_WAIT_SECONDS))
        return self._take()

    def on_task_ended(
        self, task_id: int, outcome: m.Buffer | m.TaskFailure | m.StoredResult, now: float,
        profile: m.TaskProfile | None = None, warnings: list[m.TaskWarning] | None = None,
    ) -> Actions:
        """The running task ended: its payload, its failure, or its result reported as stored."""
        task = self.running
        assert task is not None and task[0] == task_id, f"task {task_id:#x} ended but did not run"
        self.running = None
        self.waiting = False
        self._last_activity = now
        ran = not self._running_waited
        if isinstance(outcome, m.TaskFailure):
            self._failures.append(outcome)
            ran = ran and outcome.kind == m.FailureKind.RAISED  # as the scheduler counts tasks run (prefetch.py)
        elif isinstance(outcome, m.StoredResult):
            self._stored.append(outcome)
        else:
            self._succeeded_ids.append(task_id)
            self._payloads.append(outcome)
        if ran:
            self._run_seconds += now - self._run_started
            self._ran_tasks += 1
        if profile is not None:
            self._profiles.append(profile)
        if warnings:
            self._warnings.extend(warnings)
        if (
            not self._queued_ids or task[1].report_start or now - self._last_flush >= FLUSH_EVERY_SECONDS
            or len(self._succeeded_ids) + len(self._failures) + len(self._stored) >= FLUSH_EVERY_TASKS
        ):
            self._flush(now)
        return self._take()

    def on_input_lost(self, task_id: int, object_id: bytes, first_report: bool, now: float) -> Actions:
        """The running task's stored input could not be read: the scheduler hears which object (the first time) before
        the task goes back untried, so that it parks the task until the object is made again instead of failing it."""
        if first_report:
            self._out.append(ToAgent(m.ObjectsLost(object_ids=[object_id])))
        out = self._take()
        return [*out, *self.on_task_ended(task_id, m.TaskFailure(task_id=task_id, kind=m.FailureKind.RETURNED), now)]

    def on_tick(self, now: float) -> Actions:
        """A wait for messages found none."""
        if (
            self._owes_memory_back and self.running is None and not self._queued_ids
            and now - self._last_activity >= IDLE_BEFORE_GIVING_BACK_SECONDS
        ):
            self._owes_memory_back = False
            return [GiveBackMemory()]
        return ()

    def flush(self, now: float) -> Actions:
        """The processor stops: the results it holds go out."""
        self._flush(now)
        return self._take()

    def unneeded_arguments(self, object_ids: set[bytes]) -> set[bytes]:
        """Of these stored arguments of the task that just ran, those no queued task names: their values may go."""
        for _, group, row, object_slots in itertools.chain.from_iterable(self._queues.values()):
            if object_slots:
                start = row * group.args_per_task
                object_ids.difference_update(bytes(group.args[start + slot]) for slot in object_slots)
                if not object_ids:
                    break
        return object_ids

    def _flush(self, now: float) -> None:
        self._last_flush = now
        if not self._succeeded_ids and not self._failures and not self._stored:
            return
        self._out.append(ToAgent(m.TaskResults(
            succeeded_ids=self._succeeded_ids, payloads=self._payloads, failures=self._failures,
            profiles=self._profiles, warnings=self._warnings, stored=self._stored,
            run_seconds=self._run_seconds, ran_tasks=self._ran_tasks,
        )))
        self._run_seconds, self._ran_tasks = 0.0, 0
        self._succeeded_ids, self._payloads, self._failures = [], [], []
        self._stored, self._profiles, self._warnings = [], [], []

    # ------------------------------------------------------------------------------------------ nesting

    def on_wait_start(self, now: float) -> Actions:
        """The running task is about to wait on nested tasks: ask the agent to let another processor serve.

        What this processor made goes into the store first (the nested tasks, or the processor that takes
        the queue, may read it), and its held results go out. The shell then reads messages until the
        answer (or gives up after AGENT_ANSWER_SECONDS: on_wait_unanswered).
        """
        self._asking_to_wait = True
        self._running_waited = True
        self._out.append(PublishResults(None))
        self._flush(now)
        self._out.append(ToAgent(m.ProcessorState(blocked=True)))
        return self._take()

    @property
    def asking_to_wait(self) -> bool:
        return self._asking_to_wait

    def _on_wait_answer(self, answer: m.ProcessorState, now: float) -> None:
        if not self._asking_to_wait:
            logger.warning("processor: unexpected ProcessorState from the agent")
            return
        self._asking_to_wait = False
        if not answer.granted:
            self._out.append(RefuseWait(answer.reason))
            return
        self.waiting = True
        # What a cancel or release read while asking answered goes before the queue does.
        self._flush(now)
        self._hand_over_queue()

    def on_wait_unanswered(self) -> Actions:
        self._asking_to_wait = False
        return [RefuseWait("the worker agent did not answer; cannot wait on nested tasks safely")]

    def on_wait_end(self) -> Actions:
        self.waiting = False
        return [ToAgent(m.ProcessorState(blocked=False))]

    def _hand_over_queue(self) -> None:
        """Every queued task goes to the agent as a submission, for the processor that serves now; it stays on this
        worker, so the subtrees of a recursion do too (not back to the scheduler)."""
        if not self._queued_ids:
            return
        groups: dict[int, m.TaskGroup] = {}
        for task_id, group, row, object_slots in itertools.chain.from_iterable(self._queues.values()):
            handed = groups.get(id(group))
            if handed is None:
                handed = groups[id(group)] = TaskSignature.of_group(group).new_group(group.report_start)
                handed.ahead = group.ahead
            width = group.args_per_task
            base = len(handed.args)
            handed.task_ids.append(task_id)
            handed.args.extend(group.args[row * width:(row + 1) * width])
            if object_slots:
                handed.object_arg_indices.extend(base + slot for slot in object_slots)
        self._queues.clear()
        self._queued_ids.clear()
        # The processor that takes them asks again; the scheduler answers a repeated ask the same way.
        self._start_asked.clear()
        self._start_granted.clear()
        self._out.append(ToAgent(m.TaskSubmission(objects=[], groups=list(groups.values()))))

    # ------------------------------------------------------------------------------------------ the agent's signal

    def on_signal(self) -> bool:
        """The agent's signal arrived. True: answer it now (see answer_signal); else it is kept for later."""
        self._signal_pending = True
        return self._may_read and self._claim_signal()

    def task_code_starts(self) -> bool:
        """The task's own code runs from now (or again, after a nesting hook): True if a signal kept meanwhile is to
        be answered now. 'May read' is set before the look, so that a signal landing between the two answers
        itself, and one landing before is seen."""
        self._may_read = True
        return self._signal_pending and self._claim_signal()

    def task_code_ends(self) -> bool:
        """Our own code runs from now (the loop, a nesting hook): a signal is kept. Returns whether one could be
        answered before, for the end of a nesting hook to restore."""
        could_read, self._may_read = self._may_read, False
        return could_read

    def read_enough(self, urgent_announced: int) -> bool:
        """Whether the messages read answer the signal: every urgent message the agent sent before it (as the slot
        says) is handled; the socket being empty is not enough, as the signal may overtake its message."""
        return self.stopping or self._urgent_handled >= urgent_announced

    def answer_signal(self, now: float) -> Actions:
        """The signal's messages are read: the results held go out too (the agent may be waiting for them)."""
        self._flush(now)
        return self._take()

    def signal_answered(self) -> bool:
        """An answer is done and the task's code runs on: True if another signal came meanwhile, to answer now."""
        return self.task_code_starts()

    def _claim_signal(self) -> bool:
        if not self._signal_pending:
            return False
        self._may_read = False  # until the answer is done: a signal meanwhile is kept, and answered next
        self._signal_pending = False
        return True

    # ------------------------------------------------------------------------------------------ checks

    def queued_task_ids(self) -> list[int]:
        """In the order they would run, were nothing to arrive."""
        by_depth = sorted(self._queues.items(), reverse=True)
        return [task[0] for depth, queue in by_depth for task in (reversed(queue) if depth >= 1 else queue)]

    def check_invariants(self) -> None:
        """Raise AssertionError if the core's state disagrees with itself (the tests call this after every step)."""
        assert not self._out, "actions left behind by an event"
        listed = [task[0] for queue in self._queues.values() for task in queue]
        assert len(listed) == len(set(listed)) and set(listed) == self._queued_ids, "the queue and its ids disagree"
        assert all(self._queues.values()), "an empty queue kept"
        assert set(self._start_asked) <= self._queued_ids and self._start_granted <= self._queued_ids
        assert not (self._may_read and self._signal_pending), "a signal kept while it could be answered"
        assert not (self.waiting and self._asking_to_wait)
        assert len(self._succeeded_ids) == len(self._payloads)
