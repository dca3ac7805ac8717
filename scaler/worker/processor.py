"""The processor's shell: a child process of a worker agent that runs the functions, one task at a time.

It speaks the same messages as the scheduler link (TaskSubmission in, TaskResults out) over the end of a
socketpair its agent made for it (utility/frame_stream.py), after a Hello that says it is ready. Every
decision (which task runs next, what a cancel or release does, when results go out, suspects, nested
waits, the agent's signal) is the core's (processor_core.py); this file reads the link, carries out the
core's actions, and runs the user's functions: their arguments from the store, profiling, warnings.
Before it starts a task it writes the task id into a small shared file, so that if the function crashes
the process, the agent knows which task to blame (running_task_slot.py).
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import socket
import sys
import time
import traceback
from functools import partial
from typing import Any, Callable

import cloudpickle

from scaler.errors import NestingLimitError
from scaler.protocol import messages as m
from scaler.protocol.serializer import DefaultSerializer, Serializer, loads
from scaler.store.peer_stores import Stores
from scaler.utility.blocking import install_hooks, set_task_depth, set_task_priority
from scaler.utility.frame_stream import FrameStream, StreamStuck
from scaler.utility.malloc_tuning import give_back_freed_memory
from scaler.utility.parent_watch import die_with_parent
from scaler.worker.agent_signal import AGENT_SIGNAL
from scaler.worker.large_results import LargeResults
from scaler.worker.output_capture import TaskOutputCapture
from scaler.worker.processor_actions import (
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
from scaler.worker.processor_core import AGENT_ANSWER_SECONDS, ProcessorCore
from scaler.worker.profiler import TaskProfiler
from scaler.worker.running_task_slot import RunningTaskSlot
from scaler.worker.task_objects import InputLost, TaskObjects
from scaler.worker.warning_recorder import WarningRecorder

logger = logging.getLogger(__name__)

# How long a read from or a write into a store may take before the task fails with the reason.
_STORE_TIMEOUT_SECONDS = 60.0
# How long the signal handler waits for the message the signal announces (it is already on its way).
_SIGNALLED_MESSAGE_SECONDS = 0.5


class Processor:
    def __init__(
        self, link: FrameStream, running_task_slot: RunningTaskSlot, input_wait_seconds: float,
        link_timeout_seconds: float | None = None,
    ) -> None:
        self._link = link
        # How long a send may wait for an agent that takes nothing before we give up (StreamStuck, and we exit).
        self._link_timeout = link_timeout_seconds
        self._running_task_slot = running_task_slot
        self._core = ProcessorCore()
        self._stores = Stores(_STORE_TIMEOUT_SECONDS)
        self._results = LargeResults(self._stores)
        self._objects = TaskObjects(self._stores, self._results, input_wait_seconds)
        self._functions: dict[tuple[bytes, bytes], Callable[..., Any]] = {}
        self._serializers: dict[bytes, Serializer] = {b"": DefaultSerializer()}
        self._profiler = TaskProfiler()
        self._warnings = WarningRecorder()
        self._output = TaskOutputCapture(self._send_output)
        self._depth = -1
        self._priority = 0
        # The profile of the task that just ran (set by _call when the task asked for one).
        self._profile: m.TaskProfile | None = None
        self._parent_pid = -1
        self._agent_gone = False

    def run(self, parent_pid: int) -> None:
        self._parent_pid = parent_pid
        core = self._core
        install_hooks(self._before_waiting_on_tasks, self._after_waiting_on_tasks)
        self._warnings.install()
        signal.signal(AGENT_SIGNAL, self._on_agent_signal)
        # Restart interrupted system calls in extension code; Python's own waits (sleep, select) still
        # return to run the handler and then carry on (PEP 475).
        signal.siginterrupt(AGENT_SIGNAL, False)
        self._send(m.Hello(role=m.Role.WORKER, pid=os.getpid()))
        while not core.stopping:
            # With a task queued, what came meanwhile (a cancel of it) is read before it runs. With none, the core can
            # only wait and the wait's poll is the look at the socket; a task that came in that wait's read runs on
            # what that read found (a cancel arriving later is answered through the agent's signal, as one arriving
            # just after any look): two poll system calls a task fewer.
            self._drain(look=core.has_queued)
            if core.stopping:
                break
            self._carry_out(core.next_action(time.monotonic()))
            if self._agent_gone:
                return  # nobody would read our results
        # Results kept unwritten stay so: the scheduler takes those of a worker that left as lost (lineage.py), and
        # a store that is going away as well would only make us wait.
        self._carry_out(core.flush(time.monotonic()))
        self._stores.close()

    def _carry_out(self, actions: Actions) -> None:
        for action in actions:
            if isinstance(action, RunTask):
                self._run(action.task)
            elif isinstance(action, ToAgent):
                self._send(action.message)
            elif isinstance(action, WaitForMessages):
                self._wait_for_messages(action.seconds)
            elif isinstance(action, KeepObjects):
                self._objects.accept(action.objects)
            elif isinstance(action, ForgetObjects):
                self._forget_objects(action.object_ids)
            elif isinstance(action, PublishResults):
                if action.object_ids is None:
                    self._results.publish_all()
                else:
                    self._results.publish(action.object_ids)
            elif isinstance(action, SetStoreDirectory):
                self._stores.update(action.directory)
                self._objects.directory_known = True
            elif isinstance(action, GiveBackMemory):
                give_back_freed_memory()
            elif isinstance(action, RefuseWait):
                raise NestingLimitError(action.reason)

    def _send(self, message: m.Message) -> None:
        self._link.send_all(m.encode(message), self._link_timeout)

    def _wait_for_messages(self, seconds: float) -> None:
        if self._link.wait_for_input(seconds):
            return
        if self._link.closed or os.getppid() != self._parent_pid:
            self._agent_gone = True
            return
        self._carry_out(self._core.on_tick(time.monotonic()))

    def _drain(self, look: bool = True) -> None:
        """Hand the core every message received; with `look`, every message the socket holds too."""
        link = self._link
        core = self._core
        while link.has_input() if look else link.has_received():
            self._carry_out(core.on_message(m.decode(link.receive()), time.monotonic()))
            if core.stopping:
                return

    def _forget_objects(self, object_ids: list[bytes]) -> None:
        self._results.forget(object_ids)
        self._objects.forget(object_ids)
        for object_id in object_ids:
            self._serializers.pop(object_id, None)
            for key in [key for key in self._functions if object_id in key]:
                del self._functions[key]

    # ------------------------------------------------------------------------------------------ the agent's signal

    def _on_agent_signal(self, signum: int, frame: Any) -> None:
        """The agent wants an answer now, not after the running task: a cancel or release names tasks queued
        here, another process needs a result we made, or results we hold back wait behind a long task.

        The handler runs in this thread between two bytecodes of whatever runs; the core says whether it may
        read now or must leave the signal for later (ProcessorCore.on_signal).
        """
        if self._core.on_signal():
            self._answer_signals()

    def _answer_signals(self) -> None:
        """Answer signals until none is left; one arriving meanwhile is answered by the next round."""
        core = self._core
        while True:
            try:
                self._read_urgent_messages()
                self._carry_out(core.answer_signal(time.monotonic()))
            except Exception:  # never into the task's code
                logger.exception("processor: could not read the agent's message during a task")
            if not core.signal_answered():
                return

    def _read_urgent_messages(self) -> None:
        deadline = time.monotonic() + _SIGNALLED_MESSAGE_SECONDS
        while True:
            self._drain()
            if self._core.read_enough(self._running_task_slot.urgent_sent()):
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._link.wait_for_input(remaining):
                return  # the rest is read between tasks

    # ------------------------------------------------------------------------------------------ nesting

    def _before_waiting_on_tasks(self) -> None:
        """The running task is about to wait on nested tasks: ask the agent to let another processor serve
        (see docs/nested_tasks.md); raises NestingLimitError if it may not."""
        core = self._core
        could_read = core.task_code_ends()
        try:
            self._carry_out(core.on_wait_start(time.monotonic()))
            deadline = time.monotonic() + AGENT_ANSWER_SECONDS
            while core.asking_to_wait:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._link.wait_for_input(remaining):
                    self._carry_out(core.on_wait_unanswered())
                self._carry_out(core.on_message(m.decode(self._link.receive()), time.monotonic()))
        finally:
            if could_read and core.task_code_starts():
                self._answer_signals()

    def _after_waiting_on_tasks(self) -> None:
        core = self._core
        could_read = core.task_code_ends()
        try:
            self._carry_out(core.on_wait_end())
        finally:
            if could_read and core.task_code_starts():
                self._answer_signals()

    # ------------------------------------------------------------------------------------------ running

    def _run(self, task: QueuedTask) -> None:
        task_id, group, row, object_slots = task
        if group.nesting_depth != self._depth:
            self._depth = group.nesting_depth
            set_task_depth(self._depth)
        if group.priority != self._priority:
            self._priority = group.priority
            set_task_priority(self._priority)
        self._running_task_slot.write(task_id)
        outcome = self._call(task_id, group, row, object_slots)
        if outcome is not None:
            profile, self._profile = self._profile, None
            warnings = self._warnings.take_finished() if self._warnings.finished else None
            self._carry_out(self._core.on_task_ended(task_id, outcome, time.monotonic(), profile, warnings))
        if object_slots:
            self._let_go_of_arguments(group, row, object_slots)

    def _call(
        self, task_id: int, group: m.TaskGroup, row: int, object_slots: list[int] | None
    ) -> m.Buffer | m.TaskFailure | m.StoredResult | None:
        """Load the function and arguments, call it, and place its result: the task's outcome (None: it was given
        back for an input lost, and the core heard so)."""
        core = self._core
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
            return None
        except Exception as error:
            return self._failure(task_id, m.FailureKind.SERIALIZATION, error,
                                 f"could not load {self._function_name(group)} or its arguments")
        if group.profiling:
            self._profiler.start()
        recorder = self._warnings
        if group.stream_output:
            self._output.start(task_id)
        if core.task_code_starts():
            self._answer_signals()
        recorder.task_id = task_id
        try:
            if group.keywords:
                split = width - len(group.keywords)
                result = function(*args[:split], **dict(zip(group.keywords, args[split:])))
            else:
                result = function(*args)
        except BaseException as error:  # SystemExit from a task is the task's failure, not ours
            core.task_code_ends()
            if group.stream_output:
                self._output.finish()
            recorder.end_task()
            if group.profiling:
                self._profiler.finish(task_id)  # a failure carries no profile
            return self._failure(task_id, m.FailureKind.RAISED, error)
        core.task_code_ends()
        if group.stream_output:
            self._output.finish()  # before the result, which the core sends later: the client sees them in order
        if recorder.current:
            recorder.end_task()
        else:
            recorder.task_id = None
        if group.profiling:
            self._profile = self._profiler.finish(task_id)
        try:
            return self._results.place(task_id, result, serializer, group.keep_in_stores)
        except Exception as error:
            return self._failure(task_id, m.FailureKind.SERIALIZATION, error,
                                 f"result of {self._function_name(group)} could not be serialized")

    def _send_output(self, output: m.TaskOutput) -> None:
        """What the running task printed, to the agent now. Called from the task's code too (its print), where the
        agent's signal may otherwise answer in the middle of this send: kept meanwhile, as by the nesting hooks."""
        core = self._core
        could_read = core.task_code_ends()
        try:
            self._send(output)
        finally:
            if could_read and core.task_code_starts():
                self._answer_signals()

    def _let_go_of_arguments(self, group: m.TaskGroup, row: int, object_slots: list[int]) -> None:
        """The values of the task's stored call arguments go, unless a queued task names them too: kept, ten
        50 MB arguments would hold 500 MB here until their deletes arrive, and each next task would copy into
        fresh pages instead of reusing the memory of the last one."""
        base = row * group.args_per_task
        candidates = self._objects.argument_values([bytes(group.args[base + slot]) for slot in object_slots])
        if candidates:
            self._objects.drop_values(self._core.unneeded_arguments(candidates))

    def _give_back(self, task_id: int, object_id: bytes, reason: str) -> None:
        first_report = self._objects.report_lost(object_id)
        if first_report:
            logger.warning(f"processor: input {object_id.hex()} of task {task_id:#x} could not be read ({reason}); "
                           "reported lost, the task goes back to the scheduler")
        self._carry_out(self._core.on_input_lost(task_id, object_id, first_report, time.monotonic()))

    def _function_name(self, group: m.TaskGroup) -> str:
        function = self._functions.get((group.function_id, group.serializer_id))
        name = getattr(function, "__qualname__", None) if function is not None else None
        return name or self._objects.names.get(group.function_id) or "<unnamed function>"

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

    @staticmethod
    def _failure(task_id: int, kind: m.FailureKind, error: BaseException, context: str = "") -> m.TaskFailure:
        try:
            pickled = cloudpickle.dumps(error)
            cloudpickle.loads(pickled)  # an exception that pickles but cannot be rebuilt is no use to the client
        except Exception:
            pickled = b""
        message = str(error)
        if context:
            message = f"{context}: {type(error).__name__}: {message}"
        return m.TaskFailure(
            task_id=task_id,
            kind=kind,
            type_name=f"{type(error).__module__}.{type(error).__qualname__}",
            message=message,
            traceback="".join(traceback.format_exception(type(error), error, error.__traceback__)),
            exception=pickled,
        )


def main() -> None:
    # The identity is there for `ps` to show: the link is this processor's own.
    link_descriptor, _identity, running_task_path, parent_pid_text, input_wait_text, link_timeout_text = sys.argv[1:7]
    parent_pid = int(parent_pid_text)
    die_with_parent()
    # Not for the programs a task runs: one holding it would hide our exit from the agent.
    link_socket = socket.socket(fileno=int(link_descriptor))
    link_socket.set_inheritable(False)
    if os.getppid() != parent_pid:
        return
    # Ctrl-C in a terminal reaches the whole process group; the agent decides when we stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    link = FrameStream(link_socket)
    slot = RunningTaskSlot(running_task_path)
    try:
        Processor(link, slot, float(input_wait_text), float(link_timeout_text)).run(parent_pid)
    except StreamStuck as stuck:
        # The agent lives but reads nothing of ours: it no longer serves us, and whoever watches it sees us go.
        logger.error(f"processor {_identity}: exiting, the worker agent took no message: {stuck}")
        sys.exit(1)
    finally:
        slot.close()
        link.close()


if __name__ == "__main__":
    main()
