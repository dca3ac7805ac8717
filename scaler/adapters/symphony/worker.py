"""The Symphony worker: one Scaler worker that runs its tasks as tasks of an IBM Spectrum Symphony service.

It speaks the worker protocol (PROTOCOL.md §8 and §14) over its own socket, with the messages of
scaler/protocol/messages.py. Tasks arrive as usual; the worker deserializes each one's function and
arguments with the client's serializer and sends `cloudpickle.dumps((fn, *args))` to the service, which
runs `fn(*args)` and sends back `cloudpickle.dumps(result)` (document 004's service container; `fn`
carries the keywords and the nesting depth, see task_call.py). The result goes back to the scheduler
serialized with the client's serializer. Which tasks go when is the ForwardingQueue's decision.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import queue
import socket as socket_module
import time
import traceback
import uuid
from typing import Any, Callable

import cloudpickle
import psutil
import zmq

from scaler.adapters.symphony import task_call
from scaler.adapters.symphony.forwarding import ForwardingQueue, Stage
from scaler.adapters.symphony.sdk import SymphonySession
from scaler.errors import PayloadTooLargeError
from scaler.protocol import messages as m
from scaler.protocol.serializer import DefaultSerializer, Serializer, loads
from scaler.protocol.zmq_messages import send_message
from scaler.utility.curve import PeerKeys, secure_peer
from scaler.utility.loop_stop import LoopStop
from scaler.utility.setting_rules import AT_LEAST_ONE, POSITIVE_SECONDS, TASK_SLOTS, check_settings, setting
from scaler.utility.tags import PYTHON_TAG
from scaler.utility.zmq_config import parse_zmq_address
from scaler.utility.zmq_util import has_input, receive_frames

logger = logging.getLogger(__name__)

_CHECK_SECONDS = 0.1

# TaskCall travels by value: a service host needs cloudpickle, not scaler.
cloudpickle.register_pickle_by_value(task_call)


@dataclasses.dataclass
class SymphonyWorkerConfig:
    address: str
    service: str  # the Symphony application whose service runs the tasks
    base_concurrency: int = setting(4, AT_LEAST_ONE)
    name: str = ""
    task_queue_size: int = setting(1000, TASK_SLOTS)
    heartbeat_interval_seconds: float = setting(2.0, POSITIVE_SECONDS)
    death_timeout_seconds: float = setting(300.0, POSITIVE_SECONDS)
    curve_server_key: str | None = None
    curve_secret_key: str | None = None
    symphony_user: str = "Guest"
    symphony_password: str = "Guest"
    session_type: str | None = None  # a session type of the application's profile; None: its default

    def __post_init__(self) -> None:
        parse_zmq_address(self.address)
        if not self.service:
            raise ValueError("the Symphony service (application) name is empty")
        check_settings(self)


@dataclasses.dataclass
class _Task:
    function_id: bytes
    serializer_id: bytes
    keywords: tuple[str, ...]
    args: list[m.Buffer]
    object_positions: frozenset[int]  # positions in `args` that hold object ids
    depth: int


class WorkerExit(Exception):
    def __init__(self, reason: str, failed: bool = False) -> None:
        super().__init__(reason)
        self.failed = failed


class SymphonyWorker:
    def __init__(
        self, config: SymphonyWorkerConfig, session_factory: Callable[..., SymphonySession] = SymphonySession
    ) -> None:
        self._config = config
        self._session_factory = session_factory
        self._name = config.name or f"symphony|{socket_module.gethostname()}|{os.getpid()}"
        self._identity = f"W|{self._name}|{uuid.uuid4().hex[:8]}".encode()
        self._forwarding = ForwardingQueue(config.base_concurrency)
        self._tasks: dict[int, _Task] = {}
        self._symphony_ids: dict[str, int] = {}
        self._objects: dict[bytes, m.Buffer] = {}
        self._object_values: dict[bytes, Any] = {}
        self._serializers: dict[bytes, Serializer] = {b"": DefaultSerializer()}
        self._functions: dict[tuple[bytes, bytes], Any] = {}
        self._outcomes: queue.SimpleQueue[tuple[str, bytes | None, BaseException | None]] = queue.SimpleQueue()
        self._broken: BaseException | None = None
        # Ends the loop's wait: to stop (a signal handler, another thread), or for answers from the SDK's threads.
        self._loop_stop = LoopStop()
        self._welcomed = False
        self._heartbeat_interval = config.heartbeat_interval_seconds
        self._max_frame_bytes = 0  # the scheduler's limit on one frame (Welcome; 0: none)
        self._heartbeat_sent_at: float | None = None
        self._latency_us = 0
        self._process = psutil.Process()
        self._process.cpu_percent()
        self._session: SymphonySession | None = None
        self._socket: zmq.Socket | None = None
        # Outcomes waiting to go to the scheduler in the next TaskResults.
        self._succeeded: list[int] = []
        self._payloads: list[m.Buffer] = []
        self._failures: list[m.TaskFailure] = []

    @property
    def name(self) -> str:
        return self._name

    def stop(self) -> None:
        """Leave soon (from a signal handler or another thread)."""
        self._loop_stop.request()

    # ------------------------------------------------------------------------------------------ lifetime

    def run(self) -> int:
        """Serve until stopped; 1 if no scheduler ever welcomed us, or Symphony failed."""
        config = self._config
        self._loop_stop.open()
        context = zmq.Context(io_threads=1)
        scheduler = self._socket = context.socket(zmq.DEALER)
        scheduler.setsockopt(zmq.SNDHWM, 0)
        scheduler.setsockopt(zmq.RCVHWM, 0)
        scheduler.setsockopt(zmq.LINGER, 0)
        scheduler.setsockopt(zmq.IDENTITY, self._identity)
        exit_code = 0
        try:
            keys = PeerKeys.resolve(config.curve_server_key, config.curve_secret_key)
            if keys is not None:
                secure_peer(scheduler, keys)
            try:
                self._session = self._session_factory(
                    config.service, config.symphony_user, config.symphony_password, f"scaler-{self._name}",
                    config.session_type, self._on_outcome, self._on_broken,
                )
            except ImportError:
                raise
            except Exception as error:
                raise WorkerExit(
                    f"could not open a Symphony session of {config.service}: {type(error).__name__}: {error}",
                    failed=True,
                ) from None
            logger.info(
                f"SymphonyWorker[{self._name}]: Symphony session {self._session.session_id} of {config.service} open, "
                f"base concurrency {config.base_concurrency}"
            )
            scheduler.connect(config.address)
            send_message(scheduler, m.Hello(
                role=m.Role.WORKER, name=self._name, hostname=socket_module.gethostname(), pid=os.getpid(),
                capacity=config.task_queue_size, tags=(PYTHON_TAG,),  # Symphony runs the Python functions
            ))
            self._loop(scheduler)
        except WorkerExit as reason:
            level = logging.ERROR if reason.failed else logging.INFO
            logger.log(level, f"SymphonyWorker[{self._name}]: {reason}")
            exit_code = 1 if reason.failed else 0
        finally:
            try:
                send_message(scheduler, m.Disconnect(reason="worker exiting"), zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            scheduler.close(linger=100)
            context.term()
            if self._session is not None:
                try:
                    self._session.close()
                except Exception as error:
                    logger.warning(f"SymphonyWorker[{self._name}]: closing the Symphony session: {error}")
            self._loop_stop.close()
        return exit_code

    def _loop(self, scheduler: zmq.Socket) -> None:
        config = self._config
        poller = zmq.Poller()
        poller.register(scheduler, zmq.POLLIN)
        poller.register(self._loop_stop.fileno(), zmq.POLLIN)
        last_heard = time.monotonic()
        last_heartbeat = -math.inf
        while not self._loop_stop.requested:
            events = dict(poller.poll(int(_CHECK_SECONDS * 1000)))
            now = time.monotonic()
            if scheduler in events:
                last_heard = now
                while has_input(scheduler):
                    self._on_scheduler_frames(receive_frames(scheduler), now)
            if self._loop_stop.fileno() in events:
                self._loop_stop.drain()
            self._take_outcomes()
            for task_id in self._forwarding.unanswered(now):
                self._tasks.pop(task_id, None)
                self._failures.append(m.TaskFailure(task_id=task_id, kind=m.FailureKind.RETURNED))
            self._pump(now)
            self._flush()
            if self._broken is not None:
                raise WorkerExit(f"the Symphony session failed: {self._broken}", failed=True)
            if now - last_heard > config.death_timeout_seconds:
                raise WorkerExit(
                    f"no word from the scheduler at {config.address} for {config.death_timeout_seconds:g}s "
                    "(--death-timeout-seconds), exiting", failed=not self._welcomed,
                )
            if now - last_heartbeat >= self._heartbeat_interval:
                last_heartbeat = now
                try:
                    send_message(scheduler, self._heartbeat(), zmq.NOBLOCK)
                    self._heartbeat_sent_at = now
                except zmq.Again:
                    pass

    # ------------------------------------------------------------------------------------------ scheduler side

    def _on_scheduler_frames(self, frames: list[m.Buffer], now: float) -> None:
        try:
            message = m.decode(frames)
        except m.ProtocolDecodeError as error:
            logger.warning(f"SymphonyWorker[{self._name}]: dropped an undecodable message from the scheduler: {error}")
            return
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
        elif isinstance(message, m.Welcome):
            self._heartbeat_interval = message.heartbeat_interval_for(self._config.heartbeat_interval_seconds)
            self._max_frame_bytes = message.max_frame_bytes
            if not self._welcomed:
                self._welcomed = True
                logger.info(f"SymphonyWorker[{self._name}]: connected to the scheduler at {self._config.address}")
        elif isinstance(message, m.HeartbeatEcho):
            if self._heartbeat_sent_at is not None:
                self._latency_us = int((now - self._heartbeat_sent_at) * 1e6)
                self._heartbeat_sent_at = None
        elif isinstance(message, m.Disconnect):
            raise WorkerExit(f"scheduler asked us to leave: {message.reason}")
        elif isinstance(message, m.Refused):
            raise WorkerExit(f"scheduler refused us: {message.reason}", failed=not self._welcomed)
        elif isinstance(message, m.ProtocolError):
            logger.warning(f"SymphonyWorker[{self._name}]: scheduler reports a protocol error: {message.reason}")

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
            assert self._socket is not None
            send_message(self._socket, m.CancelRefused(task_ids=refused))

    # ------------------------------------------------------------------------------------------ Symphony side

    def _pump(self, now: float) -> None:
        ready = self._forwarding.take_ready(now)
        if ready.announce:
            assert self._socket is not None
            self._flush()  # results first (§8, suspect tasks)
            send_message(self._socket, m.TaskStarted(task_ids=ready.announce))
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
        assert self._session is not None
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

    def _take_outcomes(self) -> None:
        while True:
            try:
                symphony_id, payload, error = self._outcomes.get_nowait()
            except queue.Empty:
                return
            task_id = self._symphony_ids.pop(symphony_id, None)
            if task_id is None or not self._forwarding.finish(task_id):
                continue  # abandoned by a forced cancel, or not ours
            task = self._tasks.pop(task_id)
            if error is not None:
                self._fail(task_id, m.FailureKind.RAISED, error)
                continue
            serializer = self._serializer(task.serializer_id)
            try:
                result = cloudpickle.loads(payload)
            except Exception as load_error:
                self._fail(task_id, m.FailureKind.SERIALIZATION, load_error, "could not read what Symphony returned")
                continue
            try:
                result_payload = serializer.serialize(result)
            except Exception as serialize_error:
                self._fail(task_id, m.FailureKind.SERIALIZATION, serialize_error, "the result could not be serialized")
                continue
            if self._max_frame_bytes and len(result_payload) > self._max_frame_bytes:
                self._fail(task_id, m.FailureKind.RAISED, PayloadTooLargeError(
                    f"the result is {len(result_payload):,} bytes, over the scheduler's limit of "
                    f"{self._max_frame_bytes:,} bytes per frame (--max-message-size-bytes)"
                ))
                continue
            self._payloads.append(result_payload)
            self._succeeded.append(task_id)

    def _on_outcome(self, symphony_id: str, payload: bytes | None, error: BaseException | None) -> None:
        """From the SDK's threads: hand the answer to the loop."""
        self._outcomes.put((symphony_id, payload, error))
        self._loop_stop.wake()

    def _on_broken(self, error: BaseException) -> None:
        self._broken = error
        self._loop_stop.wake()

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
        if not self._succeeded and not self._failures:
            return
        assert self._socket is not None
        send_message(self._socket, m.TaskResults(
            succeeded_ids=self._succeeded, payloads=self._payloads, failures=self._failures,
        ))
        self._succeeded, self._payloads, self._failures = [], [], []

    def _heartbeat(self) -> m.Heartbeat:
        return m.Heartbeat(
            cpu_percent=self._process.cpu_percent(),
            rss_bytes=self._process.memory_info().rss,
            queued_tasks=self._forwarding.held,
            latency_us=self._latency_us,
        )


def run_symphony_worker(config: SymphonyWorkerConfig) -> int:
    import signal

    worker = SymphonyWorker(config)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: worker.stop())
    return worker.run()

