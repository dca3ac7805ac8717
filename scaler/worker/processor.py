"""The processor: a child process of a worker agent that runs the functions, one task at a time.

It speaks the same messages as the scheduler link (TaskSubmission in, TaskResults out) over a DEALER
socket to its agent, after a Hello that says it is ready. Before it starts a task it writes the task
id into a small shared file, so that if the function crashes the process, the agent knows which task
to blame. When a task waits on nested tasks, the processor hands its queue back and asks the agent to
let another processor serve meanwhile (see docs/nested_tasks.md).
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import pickle
import signal
import sys
import time
import traceback
from functools import partial
from typing import Any, Callable

import cloudpickle
import zmq

from scaler.errors import NestingLimitError
from scaler.protocol import messages as m
from scaler.protocol.layout import slots_by_row
from scaler.protocol.serializer import DefaultSerializer, Serializer, loads
from scaler.protocol.task_signature import TaskSignature
from scaler.protocol.zmq_messages import send_message
from scaler.store.peer_stores import Stores
from scaler.utility.blocking import install_hooks, set_task_depth
from scaler.utility.malloc_tuning import give_back_freed_memory
from scaler.utility.parent_watch import die_with_parent
from scaler.utility.zmq_util import configure_socket, has_input, receive_frames
from scaler.worker.agent_actions import AGENT_SIGNAL
from scaler.worker.config import DEFAULT_INPUT_WAIT_SECONDS
from scaler.worker.large_results import LargeResults
from scaler.worker.profiler import TaskProfiler
from scaler.worker.running_task_slot import RunningTaskSlot
from scaler.worker.task_objects import InputLost, TaskObjects
from scaler.worker.warning_recorder import WarningRecorder

logger = logging.getLogger(__name__)

# Results are sent when the queue runs dry, or at least this often while it does not.
_FLUSH_EVERY_TASKS = 1000
# How long a read from or a write into a store may take before the task fails with the reason.
_STORE_TIMEOUT_SECONDS = 60.0
_FLUSH_EVERY_SECONDS = 0.005
_PARENT_CHECK_SECONDS = 1.0
# Idle this long after work, a processor gives back the freed memory malloc kept for the next task: a pause
# between batches (a client making its next arguments) does not pay for fresh pages again.
_IDLE_BEFORE_GIVING_BACK_SECONDS = 5.0
_AGENT_ANSWER_SECONDS = 30.0
# How long the signal handler waits for the message the signal announces (it is already on its way).
_SIGNALLED_MESSAGE_SECONDS = 0.5

# task id, its group, its row in the group, the argument slots of that row holding object ids
_PendingTask = tuple[int, m.TaskGroup, int, list[int] | None]


class Processor:
    def __init__(
        self, socket: zmq.Socket, running_task_slot: RunningTaskSlot,
        input_wait_seconds: float = DEFAULT_INPUT_WAIT_SECONDS,
    ) -> None:
        self._socket = socket
        self._running_task_slot = running_task_slot
        self._stores = Stores(_STORE_TIMEOUT_SECONDS)
        self._results = LargeResults(self._stores)
        self._objects = TaskObjects(self._stores, self._results, input_wait_seconds)
        self._functions: dict[tuple[bytes, bytes], Callable[..., Any]] = {}
        self._serializers: dict[bytes, Serializer] = {b"": DefaultSerializer()}
        # Queued tasks by nesting depth: the deepest run first, since shallower tasks may be waiting on them.
        self._queues: dict[int, collections.deque[_PendingTask]] = {}
        self._queued_ids: set[int] = set()
        self._succeeded_ids: list[int] = []
        self._payloads: list[m.Buffer] = []
        self._profiles: list[m.TaskProfile] = []
        self._profiler = TaskProfiler()
        self._warnings = WarningRecorder()
        self._depth = -1
        self._next_depth = 0
        self._failures: list[m.TaskFailure] = []
        self._last_flush = time.monotonic()
        self._running = True
        # Suspect tasks (reportStart): asked to start, with the deadline for the scheduler's answer; and
        # those it answered, which may run.
        self._start_asked: dict[int, float] = {}
        self._start_granted: set[int] = set()
        # True only while a task's own code runs (not while our loop or a nesting hook uses the socket):
        # the one time the signal handler may use the socket and the queues.
        self._signal_may_drain = False
        # The urgent messages (cancel, release, publish) handled so far: the agent's slot half counts those
        # it sent, and a signal is answered once this catches up with it (see _on_agent_signal).
        self._urgent_handled = 0
        # A signal not answered yet: it arrived while the handler could not read (between tasks, before a task's
        # code started, during a nesting hook or another answer), and is answered once the task's code runs.
        self._signal_missed = False

    def run(self, parent_pid: int) -> None:
        socket = self._socket
        install_hooks(self._before_waiting_on_tasks, self._after_waiting_on_tasks)
        self._warnings.install()
        signal.signal(AGENT_SIGNAL, self._on_agent_signal)
        # Restart interrupted system calls in extension code; Python's own waits (sleep, select) still
        # return to run the handler and then carry on (PEP 475).
        signal.siginterrupt(AGENT_SIGNAL, False)
        send_message(socket, m.Hello(role=m.Role.WORKER, pid=os.getpid()))
        busy_since_idle = False
        idle_polls = 0  # polls in a row that found nothing: counted, so that a task costs no clock reading
        while self._running:
            if not self._queued_ids:
                self._flush()
                if not socket.poll(int(_PARENT_CHECK_SECONDS * 1000)):
                    if os.getppid() != parent_pid:
                        return  # the agent is gone; nobody would read our results
                    idle_polls += 1
                    if busy_since_idle and idle_polls * _PARENT_CHECK_SECONDS >= _IDLE_BEFORE_GIVING_BACK_SECONDS:
                        give_back_freed_memory()  # the memory malloc kept for reuse goes back (malloc_tuning.py)
                        busy_since_idle = False
                    continue
            self._drain()  # may free values too (objects deleted)
            busy_since_idle = True
            idle_polls = 0
            if self._queued_ids:
                self._run_one()
                waiting = len(self._succeeded_ids) + len(self._failures) + len(self._results.reported)
                if waiting >= _FLUSH_EVERY_TASKS or time.monotonic() - self._last_flush >= _FLUSH_EVERY_SECONDS:
                    self._flush()
        # Results kept unwritten stay so: the scheduler takes those of a worker that left as lost (lineage.py), and
        # a store that is going away as well would only make us wait.
        self._flush()
        self._stores.close()

    # ------------------------------------------------------------------------------------------ input

    def _on_agent_signal(self, signum: int, frame: Any) -> None:
        """The agent wants an answer now, not after the running task: a cancel or release names tasks queued
        here, another process needs a result we made, or results we hold back wait behind a long task.

        The socket is only read in the loop, between tasks, so without this a queued task could be
        cancelled (or moved to an idle worker by load balancing) only once the running one has ended.
        The handler runs in this thread between two bytecodes of the task; it does anything only while
        the task's own code runs, when neither our loop nor a nesting hook is using the socket or the
        queues. A signal at any other moment is remembered, and read as soon as the task's code runs
        again: its message may still be on the way when the loop last reads the socket.
        """
        self._signal_missed = True
        if self._signal_may_drain:
            self._serve_signals()

    def _allow_signal_reads(self) -> None:
        """The task's own code runs from now: a signal is read at once, and one missed before is read now."""
        self._signal_may_drain = True
        if self._signal_missed:
            self._serve_signals()

    def _serve_signals(self) -> None:
        """Answer signals until none is left; a signal arriving meanwhile (the handler may not read then) is
        answered by the next round, so none waits for the end of the task."""
        while self._signal_missed:
            self._signal_may_drain = False
            self._signal_missed = False
            try:
                self._answer_signal()
            finally:
                self._signal_may_drain = True

    def _answer_signal(self) -> None:
        try:
            self._read_urgent_messages()
            self._flush()
        except Exception:  # never into the task's code
            logger.exception("processor: could not read the agent's message during a task")

    def _read_urgent_messages(self) -> None:
        """Read the socket until every urgent message the agent announced before signalling is handled.

        Not merely until the socket is empty: the signal can overtake its message, and a message sent
        before it (a task queued behind this one, say) would then be all there is to read.
        """
        deadline = time.monotonic() + _SIGNALLED_MESSAGE_SECONDS
        while True:
            self._drain()
            if not self._running or self._urgent_handled >= self._running_task_slot.urgent_sent():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._socket.poll(max(1, int(remaining * 1000))):
                return  # the rest is read between tasks

    def _drain(self) -> None:
        socket = self._socket
        while has_input(socket):
            message = m.decode(receive_frames(socket))
            if isinstance(message, m.ProcessorState):
                logger.warning("processor: unexpected ProcessorState from the agent")
            elif isinstance(message, m.Disconnect):
                self._running = False
                return
            else:
                self._handle(message)

    def _handle(self, message: m.Message) -> None:
        """A message of the agent other than Disconnect and ProcessorState (whose meaning depends on when)."""
        if isinstance(message, m.TaskSubmission):
            self._accept(message)
        elif isinstance(message, m.CancelTasks):
            self._urgent_handled += 1
            self._cancel(message.task_ids)
        elif isinstance(message, m.ReleaseTasks):
            self._urgent_handled += 1
            self._release(message.task_ids)
        elif isinstance(message, m.TaskStarted):
            self._on_start_granted(message.task_ids)
        elif isinstance(message, m.PublishObjects):
            self._urgent_handled += 1
            self._results.publish(message.object_ids)
        elif isinstance(message, m.DeleteObjects):
            self._forget_objects(message.object_ids)
        elif isinstance(message, m.StoreDirectory):
            self._stores.update(message)
            self._objects.directory_known = True

    def _accept(self, message: m.TaskSubmission) -> None:
        self._objects.accept(message.objects)
        for group in message.groups:
            object_slots = slots_by_row(group.object_arg_indices, group.args_per_task)
            queue = self._queues.setdefault(group.nesting_depth, collections.deque())
            for row, task_id in enumerate(group.task_ids):
                queue.append((task_id, group, row, object_slots.get(row)))
                self._queued_ids.add(task_id)

    def _forget_objects(self, object_ids: list[bytes]) -> None:
        self._results.forget(object_ids)
        self._objects.forget(object_ids)
        for object_id in object_ids:
            self._serializers.pop(object_id, None)
            for key in [key for key in self._functions if object_id in key]:
                del self._functions[key]

    def _cancel(self, task_ids: list[int]) -> None:
        self._drop_queued(task_ids, m.FailureKind.CANCELED)

    def _release(self, task_ids: list[int]) -> None:
        """Load balancing: queued ones go back to the scheduler; running or finished ones stay ours."""
        self._drop_queued(task_ids, m.FailureKind.RETURNED)

    def _drop_queued(self, task_ids: list[int], kind: m.FailureKind) -> None:
        dropped = self._queued_ids.intersection(task_ids)
        if not dropped:
            return  # already ran: their results are on the way
        for depth, queue in self._queues.items():
            self._queues[depth] = collections.deque(item for item in queue if item[0] not in dropped)
        self._queued_ids -= dropped
        for task_id in dropped:
            self._start_asked.pop(task_id, None)
            self._start_granted.discard(task_id)
            self._failures.append(m.TaskFailure(task_id=task_id, kind=kind))

    # ------------------------------------------------------------------------------------------ suspects

    def _may_start(self, task_id: int) -> bool:
        """A suspect task runs only once the scheduler knows it started here (see TaskStarted).

        The tasks of a worker that died are suspects: one of them may have killed it. Telling the
        scheduler before running one lets it blame exactly that task if this worker dies too. Results
        of earlier tasks go first, so that they are not lost with us. Until the answer comes the loop
        keeps reading the socket, so a cancel or release of the task still applies.
        """
        if task_id in self._start_granted:
            self._start_granted.discard(task_id)
            return True
        now = time.monotonic()
        deadline = self._start_asked.get(task_id)
        if deadline is None:
            self._flush()
            send_message(self._socket, m.TaskStarted(task_ids=[task_id]))
            deadline = self._start_asked[task_id] = now + _AGENT_ANSWER_SECONDS
        elif now >= deadline:
            logger.warning("processor: no answer from the scheduler to start task %#x; handing it back", task_id)
            self._drop_queued([task_id], m.FailureKind.RETURNED)
            return False
        self._socket.poll(int(min(deadline - now, _PARENT_CHECK_SECONDS) * 1000) + 1)
        return False

    def _on_start_granted(self, task_ids: list[int]) -> None:
        for task_id in task_ids:
            if self._start_asked.pop(task_id, None) is not None:
                self._start_granted.add(task_id)

    # ------------------------------------------------------------------------------------------ running

    def _run_one(self) -> None:
        task = self._peek_task()
        suspect = task[1].report_start
        if suspect and not self._may_start(task[0]):
            return
        self._pop_task()
        self._run(*task)
        if task[3]:
            self._let_go_of_arguments(task[1], task[2], task[3])
        if suspect:
            self._flush()  # its result, before anything else can take this worker down

    def _let_go_of_arguments(self, group: m.TaskGroup, row: int, object_slots: list[int]) -> None:
        """The values of the task's stored call arguments go, unless a queued task names them too: kept, ten
        50 MB arguments would hold 500 MB here until their deletes arrive, and each next task would copy into
        fresh pages instead of reusing the memory of the last one."""
        base = row * group.args_per_task
        candidates = self._objects.argument_values([bytes(group.args[base + slot]) for slot in object_slots])
        if not candidates:
            return
        for _, queued_group, queued_row, queued_slots in itertools.chain.from_iterable(self._queues.values()):
            if queued_slots:
                start = queued_row * queued_group.args_per_task
                candidates.difference_update(bytes(queued_group.args[start + slot]) for slot in queued_slots)
        self._objects.drop_values(candidates)

    def _run(self, task_id: int, group: m.TaskGroup, row: int, object_slots: list[int] | None) -> None:
        self._queued_ids.discard(task_id)
        if group.nesting_depth != self._depth:
            self._depth = group.nesting_depth
            set_task_depth(self._depth)
        self._running_task_slot.write(task_id)
        try:
            serializer = self._serializer(group.serializer_id)
            function = self._function(group.function_id, group.serializer_id, serializer)
            # The default serializer reads zero-copy views directly; a custom one gets bytes (see loads).
            deserialize = pickle.loads if type(serializer) is DefaultSerializer else partial(loads, serializer)
            width = group.args_per_task
            raw_args = group.args[row * width:(row + 1) * width]
            if object_slots:
                args = [
                    self._objects.value(bytes(payload), serializer) if slot in object_slots else deserialize(payload)
                    for slot, payload in enumerate(raw_args)
                ]
            else:
                args = [deserialize(payload) for payload in raw_args]
        except InputLost as lost:
            self._give_back(task_id, lost.object_id, lost.reason)
            return
        except Exception as error:
            context = f"could not load {self._function_name(group)} or its arguments"
            self._fail(task_id, m.FailureKind.SERIALIZATION, error, context)
            return
        if group.profiling:
            self._profiler.start()
        recorder = self._warnings
        self._signal_may_drain = True  # before the check: a signal from now on is answered by its handler
        if self._signal_missed:  # inline on this path: a call per task costs more than the check
            self._serve_signals()
        recorder.task_id = task_id
        try:
            if group.keywords:
                split = width - len(group.keywords)
                result = function(*args[:split], **dict(zip(group.keywords, args[split:])))
            else:
                result = function(*args)
        except BaseException as error:  # SystemExit from a task is the task's failure, not ours
            self._signal_may_drain = False
            recorder.end_task()
            if group.profiling:
                self._profiler.finish(task_id)
            self._fail(task_id, m.FailureKind.RAISED, error)
            return
        self._signal_may_drain = False
        if recorder.current:
            recorder.end_task()
        else:
            recorder.task_id = None
        if group.profiling:
            self._profiles.append(self._profiler.finish(task_id))
        try:
            payload = self._results.place(task_id, result, serializer)
        except Exception as error:
            context = f"result of {self._function_name(group)} could not be serialized"
            self._fail(task_id, m.FailureKind.SERIALIZATION, error, context)
            return
        if payload is None:
            return  # reported as stored
        self._succeeded_ids.append(task_id)
        self._payloads.append(payload)

    def _give_back(self, task_id: int, object_id: bytes, reason: str) -> None:
        """An input's holders did not give it: the scheduler hears which object (so it brings it back) before the
        task comes back untried (so it parks the task until then, instead of failing it)."""
        if self._objects.report_lost(object_id):
            logger.warning(f"processor: input {object_id.hex()} of task {task_id:#x} could not be read ({reason}); "
                           "reported lost, the task goes back to the scheduler")
            send_message(self._socket, m.ObjectsLost(object_ids=[object_id]))
        self._failures.append(m.TaskFailure(task_id=task_id, kind=m.FailureKind.RETURNED))

    def _function_name(self, group: m.TaskGroup) -> str:
        function = self._functions.get((group.function_id, group.serializer_id))
        name = getattr(function, "__qualname__", None) if function is not None else None
        return name or self._objects.names.get(group.function_id) or "<unnamed function>"

    # ------------------------------------------------------------------------------------------ nesting

    def _before_waiting_on_tasks(self) -> None:
        """The running task is about to wait on nested tasks: ask the agent to let another processor serve.

        Once it agrees, our queue goes to that processor through the agent (not back to the scheduler), so
        the subtrees of a recursion stay on this worker and the recursion stays depth-first.
        """
        previous, self._signal_may_drain = self._signal_may_drain, False
        try:
            self._ask_to_wait_on_tasks()
        finally:
            if previous:
                self._allow_signal_reads()

    def _ask_to_wait_on_tasks(self) -> None:
        self._results.publish_all()  # the nested tasks, or the processor taking our queue, may read them
        self._flush()
        send_message(self._socket, m.ProcessorState(blocked=True))
        deadline = time.monotonic() + _AGENT_ANSWER_SECONDS
        while time.monotonic() < deadline:
            if not self._socket.poll(int(max(0.0, deadline - time.monotonic()) * 1000)):
                break
            message = m.decode(receive_frames(self._socket))
            if isinstance(message, m.ProcessorState):
                if message.granted:
                    self._hand_off_queue()
                    return
                raise NestingLimitError(message.reason)
            self._handle(message)  # a submission here was sent before the agent learned we block
        raise NestingLimitError("the worker agent did not answer; cannot wait on nested tasks safely")

    def _after_waiting_on_tasks(self) -> None:
        previous, self._signal_may_drain = self._signal_may_drain, False
        try:
            send_message(self._socket, m.ProcessorState(blocked=False))
        finally:
            if previous:
                self._allow_signal_reads()

    def _hand_off_queue(self) -> None:
        """Send every queued task to the agent as a submission, for the processor that serves now."""
        if not self._queued_ids:
            return
        groups: dict[int, m.TaskGroup] = {}
        for queue in self._queues.values():
            for task_id, group, row, object_slots in queue:
                handed = groups.get(id(group))
                if handed is None:
                    handed = groups[id(group)] = TaskSignature.of_group(group).new_group(group.report_start)
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
        send_message(self._socket, m.TaskSubmission(objects=[], groups=list(groups.values())))

    def _peek_task(self) -> _PendingTask:
        """Top-level tasks in arrival order; nested ones deepest and newest first.

        The newest nested tasks are the children of the task that blocked last: running them first keeps
        recursion depth-first, so the number of tasks holding a processor while they wait stays near the
        recursion depth instead of the width of the tree.
        """
        depth = self._next_depth = max(depth for depth, queue in self._queues.items() if queue)
        queue = self._queues[depth]
        return queue[-1] if depth else queue[0]

    def _pop_task(self) -> None:
        """Take out of the queue the task that _peek_task just named."""
        depth = self._next_depth
        queue = self._queues[depth]
        if depth:
            queue.pop()
        else:
            queue.popleft()
        if not queue:
            del self._queues[depth]

    def _serializer(self, serializer_id: bytes) -> Serializer:
        serializer = self._serializers.get(serializer_id)
        if serializer is None:
            serializer = cloudpickle.loads(self._objects.payloads[serializer_id])
            self._serializers[serializer_id] = serializer
        return serializer

    def _function(self, function_id: bytes, serializer_id: bytes, serializer: Serializer) -> Callable[..., Any]:
        key = (function_id, serializer_id)
        function = self._functions.get(key)
        if function is None:
            function = loads(serializer, self._objects.payloads[function_id])
            self._functions[key] = function
        return function

    def _fail(self, task_id: int, kind: m.FailureKind, error: BaseException, context: str = "") -> None:
        try:
            pickled = cloudpickle.dumps(error)
            cloudpickle.loads(pickled)  # an exception that pickles but cannot be rebuilt is no use to the client
        except Exception:
            pickled = b""
        message = str(error)
        if context:
            message = f"{context}: {type(error).__name__}: {message}"
        self._failures.append(
            m.TaskFailure(
                task_id=task_id,
                kind=kind,
                type_name=f"{type(error).__module__}.{type(error).__qualname__}",
                message=message,
                traceback="".join(traceback.format_exception(type(error), error, error.__traceback__)),
                exception=pickled,
            )
        )

    def _flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._succeeded_ids and not self._failures and not self._results.reported:
            return
        results = m.TaskResults(
            succeeded_ids=self._succeeded_ids, payloads=self._payloads, failures=self._failures,
            profiles=self._profiles, warnings=self._warnings.take_finished() if self._warnings.finished else [],
            stored=self._results.reported,
        )
        send_message(self._socket, results)
        self._results.reported = []
        self._profiles = []
        self._succeeded_ids = []
        self._payloads = []
        self._failures = []


def main() -> None:
    address, identity, running_task_path, parent_pid_text, input_wait_text = sys.argv[1:6]
    parent_pid = int(parent_pid_text)
    die_with_parent()
    if os.getppid() != parent_pid:
        return
    # Ctrl-C in a terminal reaches the whole process group; the agent decides when we stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    context = zmq.Context(io_threads=1)
    socket = context.socket(zmq.DEALER)
    configure_socket(socket, identity.encode())
    socket.connect(address)
    slot = RunningTaskSlot(running_task_path)
    try:
        Processor(socket, slot, float(input_wait_text)).run(parent_pid)
    finally:
        slot.close()
        socket.close(linger=1000)
        context.term()


if __name__ == "__main__":
    main()
