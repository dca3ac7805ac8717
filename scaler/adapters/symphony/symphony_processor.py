"""The Symphony worker's one processor: it runs no function itself, it forwards each task to a Symphony service.

The worker agent's core (scaler/worker/agent_core.py) drives it as it drives a Python processor: it hands
it, as frames, the scheduler's submissions, cancels, releases, start answers and deletes, and sends on
what it answers (TaskResults, TaskStarted, CancelRefused). Unlike a Python processor it lives in the
worker's own process and holds many tasks in Symphony at once, so the core knows no task of it as running:
a cancel that finds a task in Symphony is refused here.

Each task's function and arguments are deserialized with the client's serializer and sent to the service as
`cloudpickle.dumps((call, *args))`; the service runs `call(*args)` and sends back `cloudpickle.dumps(result)`
(document 004's service container; `call` carries the keywords and the nesting depth, see task_call.py). The
result goes back serialized with the client's serializer. Which tasks go when is the ForwardingQueue's
decision (forwarding.py).
"""

from __future__ import annotations

import dataclasses
import logging
import traceback
from typing import Any

import cloudpickle

from scaler.adapters.symphony import task_call
from scaler.adapters.symphony.forwarding import ForwardingQueue, Stage
from scaler.adapters.symphony.sdk import SymphonySession
from scaler.protocol import messages as m
from scaler.protocol.serializer import DefaultSerializer, Serializer, loads

logger = logging.getLogger(__name__)

# TaskCall travels by value: a service host needs cloudpickle, not scaler.
cloudpickle.register_pickle_by_value(task_call)


@dataclasses.dataclass
class _Task:
    function_id: bytes
    serializer_id: bytes
    keywords: tuple[str, ...]
    args: list[m.Buffer]
    object_positions: frozenset[int]  # positions in `args` that hold object ids
    depth: int


class SymphonyProcessor:
    def __init__(self, name: str, base_concurrency: int, session: SymphonySession) -> None:
        self._name = name
        self._session = session
        self._forwarding = ForwardingQueue(base_concurrency)
        self._tasks: dict[int, _Task] = {}
        self._symphony_ids: dict[str, int] = {}
        self._objects: dict[bytes, m.Buffer] = {}
        self._object_values: dict[bytes, Any] = {}
        self._serializers: dict[bytes, Serializer] = {b"": DefaultSerializer()}
        self._functions: dict[tuple[bytes, bytes], Any] = {}
        # Outcomes waiting to go in the next TaskResults, and the messages for the agent, in order.
        self._succeeded: list[int] = []
        self._payloads: list[m.Buffer] = []
        self._failures: list[m.TaskFailure] = []
        self._out: list[m.Message] = []

    def take_messages(self) -> list[m.Message]:
        """What to hand the agent now, outcomes last."""
        self._flush()
        messages, self._out = self._out, []
        return messages

    # ------------------------------------------------------------------------------------------ from the agent

    def on_frames(self, frames: list[m.Buffer]) -> None:
        message = m.decode(frames)  # the agent's core decoded these already: they are well formed
        if isinstance(message, m.TaskSubmission):
            self._on_submission(message)
        elif isinstance(message, m.CancelTasks):
            self._on_cancel(message)
        elif isinstance(message, m.ReleaseTasks):
            for task_id in self._forwarding.release(message.task_ids):
                self._tasks.pop(task_id, None)
                self._failures.append(m.TaskFailure(task_id=task_id, kind=m.FailureKind.RETURNED))
        elif isinstance(message, m.TaskStarted):
            for task_id in self._forwarding.on_start_answer(message.task_ids):
                self._forward(task_id)
        elif isinstance(message, m.DeleteObjects):
            for object_id in message.object_ids:
                self._objects.pop(object_id, None)
                self._object_values.pop(object_id, None)
                self._serializers.pop(object_id, None)
                for key in [key for key in self._functions if object_id in key]:
                    del self._functions[key]

    def _on_submission(self, submission: m.TaskSubmission) -> None:
        for item in submission.objects:
            self._objects[item.object_id] = item.payload
        for group in submission.groups:
            width = group.args_per_task
            object_positions: dict[int, set[int]] = {}
            for index in group.object_arg_indices:
                object_positions.setdefault(index // width, set()).add(index % width)
            for row, task_id in enumerate(group.task_ids):
                start = row * width
                self._tasks[task_id] = _Task(
                    function_id=group.function_id, serializer_id=group.serializer_id, keywords=group.keywords,
                    args=group.args[start:start + width], object_positions=frozenset(object_positions.get(row, ())),
                    depth=group.nesting_depth,
                )
                self._forwarding.add(task_id, group.nesting_depth, group.report_start)

    def _on_cancel(self, cancel: m.CancelTasks) -> None:
        refused = []
        for task_id in cancel.task_ids:
            stage = self._forwarding.cancel(task_id, cancel.force)
            if stage is None:
                continue
            if stage is Stage.FORWARDED and not cancel.force:
                refused.append(task_id)
                continue
            self._tasks.pop(task_id, None)
            self._failures.append(m.TaskFailure(task_id=task_id, kind=m.FailureKind.CANCELED))
        if refused:
            self._out.append(m.CancelRefused(task_ids=refused))

    # ------------------------------------------------------------------------------------------ to Symphony

    def pump(self, now: float) -> None:
        """Hand back announced tasks the scheduler never answered; announce or forward what may go now."""
        for task_id in self._forwarding.unanswered(now):
            self._tasks.pop(task_id, None)
            self._failures.append(m.TaskFailure(task_id=task_id, kind=m.FailureKind.RETURNED))
        ready = self._forwarding.take_ready(now)
        if ready.announce:
            self._flush()  # results first (§8, suspect tasks)
            self._out.append(m.TaskStarted(task_ids=ready.announce))
        for task_id in ready.forward:
            self._forward(task_id)

    def _forward(self, task_id: int) -> None:
        task = self._tasks[task_id]
        try:
            payload = self._payload(task)
        except Exception as error:
            self._forwarding.finish(task_id)
            del self._tasks[task_id]
            self._fail(task_id, m.FailureKind.SERIALIZATION, error, "could not load the function or its arguments")
            return
        try:
            symphony_id = self._session.send(payload)
        except Exception as error:
            self._forwarding.finish(task_id)
            del self._tasks[task_id]
            logger.error(f"SymphonyWorker[{self._name}]: Symphony refused a task: {error}")
            self._fail(task_id, m.FailureKind.WORKER_DIED, error, "could not send the task to Symphony")
            return
        self._symphony_ids[symphony_id] = task_id

    def _payload(self, task: _Task) -> bytes:
        serializer = self._serializer(task.serializer_id)
        function = self._function(task.function_id, task.serializer_id, serializer)
        args = [
            self._object_value(bytes(payload), serializer) if position in task.object_positions
            else loads(serializer, payload)
            for position, payload in enumerate(task.args)
        ]
        split = len(args) - len(task.keywords)
        call = task_call.TaskCall(function, dict(zip(task.keywords, args[split:])), task.depth)
        return cloudpickle.dumps((call, *args[:split]))

    # ------------------------------------------------------------------------------------------ from Symphony

    def on_outcome(self, symphony_id: str, payload: bytes | None, error: BaseException | None) -> None:
        """Symphony's answer for one task (the worker's loop hands it in from the SDK's threads)."""
        task_id = self._symphony_ids.pop(symphony_id, None)
        if task_id is None or not self._forwarding.finish(task_id):
            return  # abandoned by a forced cancel, or not ours
        task = self._tasks.pop(task_id)
        if error is not None:
            self._fail(task_id, m.FailureKind.RAISED, error)
            return
        try:
            result = cloudpickle.loads(payload)  # type: ignore[arg-type]
        except Exception as load_error:
            self._fail(task_id, m.FailureKind.SERIALIZATION, load_error, "could not read what Symphony returned")
            return
        try:
            result_payload = self._serializer(task.serializer_id).serialize(result)
        except Exception as serialize_error:
            self._fail(task_id, m.FailureKind.SERIALIZATION, serialize_error, "the result could not be serialized")
            return
        # One over the scheduler's size limits fails as too large in the agent's core (result_split.py).
        self._payloads.append(result_payload)
        self._succeeded.append(task_id)

    # ------------------------------------------------------------------------------------------ helpers

    def _serializer(self, serializer_id: bytes) -> Serializer:
        serializer = self._serializers.get(serializer_id)
        if serializer is None:
            serializer = self._serializers[serializer_id] = cloudpickle.loads(self._objects[serializer_id])
        return serializer

    def _function(self, function_id: bytes, serializer_id: bytes, serializer: Serializer) -> Any:
        key = (function_id, serializer_id)
        function = self._functions.get(key)
        if function is None:
            function = self._functions[key] = loads(serializer, self._objects[function_id])
        return function

    def _object_value(self, object_id: bytes, serializer: Serializer) -> Any:
        if object_id not in self._object_values:
            self._object_values[object_id] = loads(serializer, self._objects[object_id])
        return self._object_values[object_id]

    def _fail(self, task_id: int, kind: m.FailureKind, error: BaseException, context: str = "") -> None:
        try:
            pickled = cloudpickle.dumps(error)
            cloudpickle.loads(pickled)
        except Exception:
            pickled = b""
        message = f"{context}: {type(error).__name__}: {error}" if context else str(error)
        self._failures.append(m.TaskFailure(
            task_id=task_id, kind=kind, type_name=f"{type(error).__module__}.{type(error).__qualname__}",
            message=message, traceback="".join(traceback.format_exception(type(error), error, error.__traceback__)),
            exception=pickled,
        ))

    def _flush(self) -> None:
        if self._succeeded or self._failures:
            self._out.append(m.TaskResults(
                succeeded_ids=self._succeeded, payloads=self._payloads, failures=self._failures,
            ))
            self._succeeded, self._payloads, self._failures = [], [], []
