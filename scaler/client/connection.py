"""The client's link to the scheduler: one DEALER socket owned by one I/O thread.

Callers never touch the socket. They append to an outbox and wake the I/O thread, which sends
whatever has piled up as one message: under load, many submits become one batch on their own, and
a lone submit still leaves at once. Results come back on the same thread, which completes futures.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import logging
import os
import socket as socket_module
import threading
import time
import uuid
from typing import Any, Sequence, Union

import zmq

from scaler.client.future import ScalerFuture, exception_from_failure
from scaler.errors import ConnectionFailedError, PayloadTooLargeError, SchedulerLostError
from scaler.protocol import messages as m
from scaler.protocol.task_signature import TaskSignature
from scaler.utility.blocking import client_nesting_depth
from scaler.utility.curve import PeerKeys, secure_peer
from scaler.utility.fork_safety import fix_after_fork
from scaler.utility.identifiers import TASK_COUNTER_BITS
from scaler.utility.zmq_util import configure_socket, has_input, receive_frames, send_frames, send_message

logger = logging.getLogger(__name__)

_MAX_TASKS_PER_MESSAGE = 2000
_IDLE_POLL_SECONDS = 0.25
# What a graceful close gives queued messages to leave, and what close() waits for the I/O thread:
# the thread never blocks on a send, so only this linger can hold it.
_CLOSE_LINGER_SECONDS = 2.0
_CLOSE_WAIT_SECONDS = _CLOSE_LINGER_SECONDS + 3.0



class MapCollector:
    """Where the results of one `Client.map` land; cheaper than a future per task."""

    def __init__(self, count: int) -> None:
        self.payloads: list[Any] = [None] * count
        self.errors: dict[int, BaseException] = {}
        self.remaining = count
        self.finished = threading.Event()
        # Warnings the tasks raised, in arrival order; map() issues them before it returns or raises.
        self.warnings: list[m.TaskWarning] = []
        if count == 0:
            self.finished.set()

    def deliver(self, index: int, payload: m.Buffer) -> None:
        self.payloads[index] = payload
        self._one_done()

    def fail(self, index: int, error: BaseException) -> None:
        self.errors[index] = error
        self.finished.set()  # fail fast: map raises as soon as anything fails
        self._one_done()

    def _one_done(self) -> None:
        self.remaining -= 1
        if self.remaining == 0:
            self.finished.set()


class _QuietTasks:
    """The quiet tasks of one graph and the warnings they raised, shared by the graph's futures."""

    def __init__(self, task_ids: list[int]) -> None:
        self._task_ids = task_ids
        self._id_set: set[int] | None = None  # made at the first warning: most graphs never warn
        self.warnings: list[m.TaskWarning] = []

    def holds(self, task_id: int) -> bool:
        if self._id_set is None:
            self._id_set = set(self._task_ids)
        return task_id in self._id_set


_Pending = Union[ScalerFuture, tuple[MapCollector, int]]

# Outbox items: (_TASK, signature, task id, args, object positions, inline bytes of args),
# (_TASKS, signature, task ids, args, object positions, inline bytes of args), (_OBJECT, payload),
# (_MESSAGE, message).
_TASK, _TASKS, _OBJECT, _MESSAGE = range(4)


class ClientConnection:
    def __init__(
        self,
        address: str,
        name: str,
        timeout_seconds: float,
        heartbeat_interval_seconds: float,
        curve_keys: PeerKeys | None = None,
    ) -> None:
        self.address = address
        self._curve_keys = curve_keys
        self._name = name or f"{socket_module.gethostname()}|{os.getpid()}"
        self._timeout_seconds = timeout_seconds
        self._heartbeat_interval_seconds = heartbeat_interval_seconds
        self._identity = f"C|{socket_module.gethostname()}|{os.getpid()}|{uuid.uuid4().hex[:8]}".encode()
        self._outbox: collections.deque[tuple] = collections.deque()
        self._pending: dict[int, _Pending] = {}
        # The quiet tasks of graphs whose futures are not all done, for their warnings.
        self._quiet_graphs: dict[int, _QuietTasks] = {}
        self._graph_counter = itertools.count()
        self._counter = itertools.count()
        self._id_prefix = 0
        self._wake_reader, self._wake_writer = os.pipe()
        self._wake_pending = False
        # The scheduler's limits (Welcome), known before connect() returns; 0 means none. The budget is
        # what inline payloads may take in one message: half the control-frame limit, leaving room for
        # the encoding.
        self._max_frame_bytes = 0
        self._inline_budget = 0
        self._welcomed = threading.Event()
        self._stopping = False
        self._stopped = threading.Event()
        self._broken: BaseException | None = None
        self._replies: dict[type, tuple[threading.Event, list[m.Message]]] = {}
        # I/O thread only: messages zmq could not take yet (no usable connection), sent in order when it can.
        self._unsent: collections.deque[list[m.Buffer]] = collections.deque()
        self._reply_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="scaler-client-io", daemon=True)
        self._owner_pid = os.getpid()
        fix_after_fork(self)

    # ------------------------------------------------------------------------------------------ life

    def connect(self) -> None:
        self._thread.start()
        if not self._welcomed.wait(self._timeout_seconds + 1.0) or self._broken is not None:
            error = self._broken or ConnectionFailedError(self._unreachable_text())
            self.close(graceful=False)
            raise error

    def close(self, graceful: bool = True) -> None:
        """Stop the I/O thread after it has sent what is queued; cancel futures still waiting."""
        if graceful and self._thread.is_alive() and self._broken is None:
            self.send_message(m.Disconnect(reason="client disconnecting"))
        self._stopping = True
        self._wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=_CLOSE_WAIT_SECONDS)
        self._cancel_everything_pending()
        if not self._thread.is_alive():
            for descriptor in (self._wake_reader, self._wake_writer):
                try:
                    os.close(descriptor)
                except OSError:
                    pass

    def _after_fork_in_child(self) -> None:
        """The socket and the I/O thread stayed with the parent: every call here fails at once from now on."""
        self._broken = ConnectionFailedError(
            f"this Client was created in process {self._owner_pid} and cannot be used in a forked child "
            f"(process {os.getpid()}): create a new Client in the child"
        )
        self._pending = {}  # the parent's futures, which only the parent's I/O thread can settle
        self._wake_pending = True  # the wake-up pipe is shared with the parent: never write to it

    @property
    def is_open(self) -> bool:
        return not self._stopping and self._broken is None

    def check_open(self) -> None:
        if self._broken is not None:
            raise self._broken
        if self._stopping:
            raise ConnectionFailedError("this client is disconnected; create a new Client to submit more work")

    # ------------------------------------------------------------------------------------------ calls

    def next_task_id(self) -> int:
        return (self._id_prefix << TASK_COUNTER_BITS) | next(self._counter)

    def check_payload(self, payload: m.Buffer, what: str) -> None:
        """Raise PayloadTooLargeError, here in the caller, for a payload the scheduler would not read.

        ZeroMQ drops an over-limit frame before the scheduler sees it, so sending it would lose the
        message without a word (PROTOCOL.md §10); this error is the word.
        """
        limit = self._max_frame_bytes
        if limit and len(payload) > limit:
            raise PayloadTooLargeError(
                f"{what} of {len(payload):,} bytes is over the scheduler's limit of {limit:,} bytes per frame "
                "(--max-message-size-bytes); send less per task, or start the scheduler with a higher limit"
            )

    def _check_arguments(self, args: Sequence[m.Buffer], width: int) -> int:
        """Raise PayloadTooLargeError for arguments the scheduler would not read; returns their inline bytes."""
        if not args:
            return 0
        self.check_payload(max(args, key=len), "an argument")
        budget = self._inline_budget
        if budget and width * m.LARGE_PAYLOAD_BYTES > budget:  # else no task can reach the budget
            for start in range(0, len(args), width):
                inline = m.inline_bytes(args[start:start + width])
                if inline > budget:
                    raise PayloadTooLargeError(
                        f"the arguments of one task take {inline:,} bytes in the message itself, over the "
                        f"scheduler's limit of {budget * 2:,} bytes (--max-control-frame-bytes); pass large "
                        "data as fewer, bigger arguments (64 KiB or more each) or with send_object()"
                    )
        return m.inline_bytes(args)

    def send_object(self, payload: m.ObjectPayload) -> None:
        if payload.name == "shared argument":  # a large argument sent once (shared_arguments.py)
            what = "an argument"
        else:
            what = f"object {payload.name!r}" if payload.name else "an object"
        self.check_payload(payload.payload, what)
        self._outbox.append((_OBJECT, payload))

    def submit_task(
        self,
        signature: TaskSignature,
        task_id: int,
        args: list[bytes],
        future: ScalerFuture,
        object_positions: list[int],
    ) -> None:
        inline = self._check_arguments(args, signature.args_per_task)
        self._pending[task_id] = future
        self._outbox.append((_TASK, signature, task_id, args, object_positions, inline))
        self._wake()

    def submit_tasks(
        self,
        signature: TaskSignature,
        task_ids: list[int],
        args: list[bytes],
        collector: MapCollector,
        first_index: int,
        object_positions: list[int],
    ) -> None:
        """`object_positions` index into `args` of this chunk: those hold object ids."""
        width = signature.args_per_task
        inline = self._check_arguments(args, width)
        if self._inline_budget and len(task_ids) > 1 and inline > self._inline_budget:
            # Too much for one message: in halves, each its own outbox item (the I/O thread sends
            # items that together exceed the budget in separate messages).
            half = len(task_ids) // 2
            cut = half * width
            self.submit_tasks(signature, task_ids[:half], args[:cut], collector, first_index,
                              [p for p in object_positions if p < cut])
            self.submit_tasks(signature, task_ids[half:], args[cut:], collector, first_index + half,
                              [p - cut for p in object_positions if p >= cut])
            return
        pending = self._pending
        for offset, task_id in enumerate(task_ids):
            pending[task_id] = (collector, first_index + offset)
        self._outbox.append((_TASKS, signature, task_ids, args, object_positions, inline))
        self._wake()

    def wake(self) -> None:
        self._wake()

    def submit_graph(self, submission: m.TaskSubmission, futures: dict[int, ScalerFuture]) -> None:
        """A graph goes out as one message, after everything queued before it."""
        inline = sum(self._check_arguments(group.args, group.args_per_task) for group in submission.groups)
        if self._inline_budget and inline > self._inline_budget:
            raise PayloadTooLargeError(
                f"this graph's literal arguments take {inline:,} bytes in one message, over the scheduler's "
                f"limit of {self._inline_budget * 2:,} bytes (--max-control-frame-bytes); compute it in "
                "several get() calls, or send large literals with send_object()"
            )
        self._pending.update(futures)
        if submission.quiet_task_ids and futures:
            self._hold_quiet_warnings(submission.quiet_task_ids, list(futures.values()))
        self.send_message(submission)

    def _hold_quiet_warnings(self, quiet_task_ids: list[int], futures: list[ScalerFuture]) -> None:
        """The graph's futures share one list for the warnings of its quiet tasks, until every one is done.

        Quiet tasks finish before the tasks that need them, so their warnings are there by the time a
        future that depends on them is done, and the first result() that hands out an outcome issues them.
        """
        quiet = _QuietTasks(quiet_task_ids)
        for future in futures:
            future._graph_warnings = quiet.warnings
        key = next(self._graph_counter)
        graphs = self._quiet_graphs
        graphs[key] = quiet
        remaining = [len(futures)]
        lock = threading.Lock()

        def one_done(_: concurrent.futures.Future) -> None:
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                graphs.pop(key, None)

        for future in futures:
            future.add_done_callback(one_done)

    def send_message(self, message: m.Message) -> None:
        self._outbox.append((_MESSAGE, message))
        self._wake()

    def cancel_tasks(self, task_ids: list[int]) -> None:
        if task_ids and self.is_open:
            self.send_message(m.CancelTasks(task_ids=task_ids))

    def cancel_future(self, future: ScalerFuture, force: bool = False) -> bool:
        if not self.is_open:
            future._cancel_locally()
            return future.cancelled()
        future._expect_cancel_outcome()
        self.send_message(m.CancelTasks(task_ids=[future.task_id], force=force))
        if threading.current_thread() is self._thread:
            # A done-callback canceling another future cannot wait for the thread it runs on.
            future._cancel_locally()
            return True
        # Until the task is canceled, finishes, or its worker says it has started (then it runs to the end).
        future._wait_for_cancel_outcome(self._timeout_seconds)
        return future.cancelled()

    def request(self, message: m.Message, reply_type: type, timeout: float) -> m.Message:
        """Send a message and wait for the scheduler's answer of the given type."""
        self.check_open()
        with self._reply_lock:
            event = threading.Event()
            slot: list[m.Message] = []
            self._replies[reply_type] = (event, slot)
        self.send_message(message)
        if not event.wait(timeout):
            raise ConnectionFailedError(f"no {reply_type.__name__} from the scheduler within {timeout:g}s")
        if self._broken is not None and not slot:
            raise self._broken
        return slot[0]

    def forget(self, task_ids: list[int]) -> None:
        for task_id in task_ids:
            self._pending.pop(task_id, None)

    # ------------------------------------------------------------------------------------------ I/O thread

    def _consume_wake(self) -> None:
        """I/O thread: take the wake-up bytes, then let callers wake us again (in this order).

        Clearing the flag first would lose a wake-up: a caller could write its byte in between, which the
        read then swallows while the flag stays set. Every later _wake() would then write nothing, and
        each message would wait for the idle poll timeout (250 ms) to go out.
        """
        os.read(self._wake_reader, 65536)
        self._wake_pending = False

    def _wake(self) -> None:
        """Any thread: make the I/O thread look at the outbox; one byte in the pipe at most."""
        if not self._wake_pending:
            self._wake_pending = True
            try:
                os.write(self._wake_writer, b"\0")
            except OSError:
                pass  # closed: the thread is gone

    def _run(self) -> None:
        context = zmq.Context(io_threads=1)
        socket = context.socket(zmq.DEALER)
        configure_socket(socket, self._identity)
        try:
            if self._curve_keys is not None:
                secure_peer(socket, self._curve_keys)
            socket.connect(self.address)
            self._send(socket, m.Hello(
                role=m.Role.CLIENT, name=self._name, hostname=socket_module.gethostname(), pid=os.getpid(),
                nesting_depth=client_nesting_depth(),
            ))
            self._loop(socket)
        except Exception as error:  # a bug here must fail the futures, not strand them
            logger.exception("Client: I/O thread failed")
            self._break(SchedulerLostError(f"client I/O thread failed: {error!r}"))
        finally:
            socket.close(linger=int(_CLOSE_LINGER_SECONDS * 1000) if self._broken is None else 0)
            context.term()
            self._stopped.set()

    def _loop(self, socket: zmq.Socket) -> None:
        poller = zmq.Poller()
        poller.register(socket, zmq.POLLIN)
        poller.register(self._wake_reader, zmq.POLLIN)
        socket_events = zmq.POLLIN
        started = last_heard = time.monotonic()
        last_heartbeat = started  # not a deadline: the interval can shrink when the welcome comes
        while True:
            wanted = zmq.POLLIN | (zmq.POLLOUT if self._unsent else 0)
            if wanted != socket_events:
                poller.register(socket, wanted)
                socket_events = wanted
            events = dict(poller.poll(int(_IDLE_POLL_SECONDS * 1000)))
            if self._unsent:
                self._send_unsent(socket)
            if self._wake_reader in events:
                self._consume_wake()
            if events.get(socket, 0) & zmq.POLLIN:
                last_heard = time.monotonic()
                while has_input(socket):
                    self._on_frames(receive_frames(socket))
            if self._welcomed.is_set():
                self._flush_outbox(socket)
            if self._stopping or self._broken is not None:
                return
            now = time.monotonic()
            if not self._welcomed.is_set():
                if now - started > self._timeout_seconds:
                    self._break(ConnectionFailedError(self._unreachable_text()))
                    self._welcomed.set()
                    return
            elif now - last_heard > self._timeout_seconds:
                self._break(SchedulerLostError(
                    f"no word from the scheduler at {self.address} for {self._timeout_seconds:g}s; it is gone or stuck"
                ))
                return
            if now - last_heartbeat >= self._heartbeat_interval_seconds:
                last_heartbeat = now
                if not self._unsent:  # a heartbeat that cannot leave now is not worth keeping
                    try:
                        send_message(socket, m.Heartbeat(), zmq.NOBLOCK)
                    except zmq.Again:
                        pass

    def _send(self, socket: zmq.Socket, message: m.Message) -> None:
        """I/O thread: send now, or keep it (after those kept before it) while zmq has no connection to take it.

        A blocking send would stop the thread, its timeouts with it, until a connection comes; against a
        scheduler whose handshake always fails (CURVE keys missing) that is forever.
        """
        frames = m.encode(message)
        if not self._unsent:
            try:
                send_frames(socket, frames, zmq.NOBLOCK)
                return
            except zmq.Again:
                pass
        self._unsent.append(frames)

    def _send_unsent(self, socket: zmq.Socket) -> None:
        unsent = self._unsent
        while unsent:
            try:
                send_frames(socket, unsent[0], zmq.NOBLOCK)
            except zmq.Again:
                return
            unsent.popleft()

    def _flush_outbox(self, socket: zmq.Socket) -> None:
        outbox = self._outbox
        objects: list[m.ObjectPayload] = []
        groups: list[m.TaskGroup] = []
        current: m.TaskGroup | None = None
        current_signature: TaskSignature | None = None
        count = 0
        # Bytes of small payloads in this message so far: kept under the scheduler's control-frame limit.
        inline = 0
        budget = self._inline_budget

        def send_batch() -> None:
            nonlocal objects, groups, current, current_signature, count, inline
            if objects or groups:
                self._send(socket, m.TaskSubmission(objects=objects, groups=groups))
            objects, groups, current, current_signature, count, inline = [], [], None, None, 0, 0

        while outbox:
            item = outbox.popleft()
            kind = item[0]
            if kind == _TASK or kind == _TASKS:
                if budget and inline + item[5] > budget:
                    send_batch()
                inline += item[5]
                signature = item[1]
                if current is None or (signature is not current_signature and signature != current_signature):
                    current = signature.new_group()
                    current_signature = signature
                    groups.append(current)
                if kind == _TASK:
                    current.task_ids.append(item[2])
                    count += 1
                else:
                    current.task_ids.extend(item[2])
                    count += len(item[2])
                if item[4]:
                    base = len(current.args)
                    current.object_arg_indices.extend(base + position for position in item[4])
                current.args.extend(item[3])
                if count >= _MAX_TASKS_PER_MESSAGE:
                    send_batch()
            elif kind == _OBJECT:
                size = m.inline_bytes((item[1].payload,))
                if groups or (budget and inline + size > budget):
                    send_batch()
                inline += size
                objects.append(item[1])
            else:
                send_batch()
                self._send(socket, item[1])
        send_batch()

    def _on_frames(self, frames: list[m.Buffer]) -> None:
        try:
            message = m.decode(frames)
        except m.ProtocolDecodeError as error:
            logger.warning(f"Client: dropped an undecodable message from the scheduler: {error}")
            return
        if isinstance(message, m.TaskResults):
            self._on_results(message)
        elif isinstance(message, m.HeartbeatEcho):
            pass
        elif isinstance(message, m.CancelRefused):
            for task_id in message.task_ids:
                entry = self._pending.get(task_id)
                if isinstance(entry, ScalerFuture):
                    entry._refuse_cancel()
        elif isinstance(message, m.Welcome):
            self._id_prefix = message.id_prefix
            self._heartbeat_interval_seconds = message.heartbeat_interval_for(self._heartbeat_interval_seconds)
            self._max_frame_bytes = message.max_frame_bytes
            self._inline_budget = message.max_control_frame_bytes // 2
            self._welcomed.set()
        elif isinstance(message, m.Refused):
            if self._welcomed.is_set():
                # We were welcomed once: a scheduler that no longer knows us was restarted, or dropped us for silence.
                self._break(SchedulerLostError(
                    f"the scheduler at {self.address} no longer knows this client (restarted, or dropped it after "
                    f"--client-timeout-seconds of silence): {message.reason}"
                ))
            else:
                self._break(ConnectionFailedError(
                    f"the scheduler at {self.address} refused this client: {message.reason}"
                ))
            self._welcomed.set()
        elif isinstance(message, m.Disconnect):
            self._break(SchedulerLostError(f"the scheduler at {self.address} closed the connection: {message.reason}"))
        elif isinstance(message, m.ProtocolError):
            logger.warning(f"Client: the scheduler reports a protocol error: {message.reason}")
        else:
            with self._reply_lock:
                waiter = self._replies.pop(type(message), None)
            if waiter is not None:
                waiter[1].append(message)
                waiter[0].set()

    def _on_results(self, results: m.TaskResults) -> None:
        pending = self._pending
        if results.warnings:  # before the outcomes: whoever an outcome wakes finds its warnings there
            self._hold_warnings(results.warnings)
        for profile in results.profiles:
            entry = pending.get(profile.task_id)
            if isinstance(entry, ScalerFuture):
                entry._profile = profile
        for task_id, payload in zip(results.succeeded_ids, results.payloads):
            entry = pending.pop(task_id, None)
            if entry is None:
                continue
            if type(entry) is tuple:
                entry[0].deliver(entry[1], payload)
            else:
                entry._deliver(payload)  # type: ignore[union-attr]
        for failure in results.failures:
            if failure.kind == m.FailureKind.NOT_FOUND:
                continue  # an answer to a cancel that came too late; the result went out before it
            entry = pending.pop(failure.task_id, None)
            if entry is None:
                continue
            if failure.kind == m.FailureKind.CANCELED:
                if type(entry) is tuple:
                    entry[0].fail(entry[1], _canceled_error())
                else:
                    entry._cancel_locally()  # type: ignore[union-attr]
                continue
            error = exception_from_failure(failure)
            if type(entry) is tuple:
                entry[0].fail(entry[1], error)
            else:
                entry._fail(error)  # type: ignore[union-attr]

    def _hold_warnings(self, task_warnings: list[m.TaskWarning]) -> None:
        pending = self._pending
        for warning in task_warnings:
            entry = pending.get(warning.task_id)
            if entry is None:
                for quiet in list(self._quiet_graphs.values()):
                    if quiet.holds(warning.task_id):
                        quiet.warnings.append(warning)
                        break
            elif type(entry) is tuple:
                entry[0].warnings.append(warning)
            else:
                entry._hold_warning(warning)  # type: ignore[union-attr]

    def _break(self, error: BaseException) -> None:
        """The link is unusable: every waiting caller gets `error` instead of waiting forever."""
        if self._broken is None:
            self._broken = error
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            if type(entry) is tuple:
                entry[0].fail(entry[1], error)
            else:
                entry._fail(error)  # type: ignore[union-attr]
        with self._reply_lock:
            waiters, self._replies = self._replies, {}
        for event, _ in waiters.values():
            event.set()

    def _cancel_everything_pending(self) -> None:
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            if type(entry) is tuple:
                entry[0].fail(entry[1], _canceled_error())
            else:
                entry._cancel_locally()  # type: ignore[union-attr]

    def _unreachable_text(self) -> str:
        return (
            f"could not connect to the scheduler at {self.address} within {self._timeout_seconds:g}s: "
            "is it running and reachable from here?"
        )


def _canceled_error() -> BaseException:
    from concurrent.futures import CancelledError

    return CancelledError()
