"""The client's link to the scheduler: one DEALER socket owned by one I/O thread.

Callers never touch the socket. They append to an outbox and wake the I/O thread, which sends
whatever has piled up as few messages (outbox.py): under load, many submits become one batch on their
own, and a lone submit still leaves at once. Results come back on the same thread, which hands each to
the sink its caller registered (result_routing.py).
"""

from __future__ import annotations

import collections
import logging
import os
import socket as socket_module
import threading
import time
import uuid
from typing import Any, Callable, Sequence

import zmq

from scaler.client.future import ScalerFuture
from scaler.client.outbox import OutboxItem, TaskBatch, messages_from
from scaler.client.payload_limits import PayloadLimits
from scaler.client.result_routing import PendingResults
from scaler.client.result_sinks import MapCollector
from scaler.client.scheduler_requests import SchedulerRequests
from scaler.client.sent_objects import SentObjects
from scaler.client.store_relay import StoreRelay
from scaler.client.stored_results import FetchedResults, StoredResultFetcher
from scaler.client.wakeup import WakeupPipe
from scaler.errors import ConnectionFailedError, SchedulerLostError
from scaler.protocol import messages as m
from scaler.protocol import stored_payload
from scaler.protocol.serializer import DefaultSerializer, Serializer
from scaler.protocol.task_signature import TaskSignature
from scaler.protocol.zmq_messages import send_message
from scaler.store.peer_stores import Stores
from scaler.store.relay_path import DEFAULT_PROBE_SECONDS
from scaler.store.store_client import StoreError
from scaler.utility.blocking import client_nesting_depth
from scaler.utility.curve import PeerKeys, secure_peer
from scaler.utility.fork_safety import fix_after_fork
from scaler.utility.host_key import this_host_key
from scaler.utility.identifiers import TASK_COUNTER_BITS
from scaler.utility.zmq_util import configure_socket, has_input, receive_frames, send_frames

logger = logging.getLogger(__name__)

_IDLE_POLL_SECONDS = 0.25
# What a graceful close gives queued messages to leave, and what close() waits for the I/O thread:
# the thread never blocks on a send, so only this linger can hold it.
_CLOSE_LINGER_SECONDS = 2.0
_CLOSE_WAIT_SECONDS = _CLOSE_LINGER_SECONDS + 3.0
# What the I/O thread, ending, gives the fetch thread to finish the fetch under way before closing the stores.
_FETCH_STOP_SECONDS = 1.0


class ClientConnection:
    """The calls the Client makes (queue tasks, objects and messages; wait for a reply) and the I/O thread."""

    def __init__(
        self,
        address: str,
        name: str,
        timeout_seconds: float,
        heartbeat_interval_seconds: float,
        curve_keys: PeerKeys | None = None,
        serializer: Serializer | None = None,
        store_probe_seconds: float = DEFAULT_PROBE_SECONDS,
    ) -> None:
        self.address = address
        # The stores the scheduler names (welcome, storeDirectory): where large objects go, and results come from;
        # those out of reach through the scheduler.
        self.relay = StoreRelay(self.send_message)
        self.stores = Stores(timeout_seconds, self.relay, store_probe_seconds, lend=True)
        self._serializer = serializer
        self._store_failure_logged = False
        # What this client stored, until it deletes it: sent again if its store is lost (resendObjects).
        self.sent_objects = SentObjects()
        self._curve_keys = curve_keys
        self._name = name or f"{socket_module.gethostname()}|{os.getpid()}"
        self._timeout_seconds = timeout_seconds
        self._heartbeat_interval_seconds = heartbeat_interval_seconds
        self._identity = f"C|{socket_module.gethostname()}|{os.getpid()}|{uuid.uuid4().hex[:8]}".encode()
        self._outbox: collections.deque[OutboxItem] = collections.deque()
        self._results = PendingResults()
        self._next_counter = 0
        self._counter_lock = threading.Lock()
        self._id_prefix = 0
        # The stores the scheduler told us of, and our home among them (PROTOCOL.md §17); replaced whole.
        self.store_directory = m.StoreDirectory()
        self._wakeup = WakeupPipe()
        self._fetcher = StoredResultFetcher(
            self.stores, timeout_seconds, lambda task_id: self._results.expects(task_id), self.send_message, self.wake
        )
        # The scheduler's limits, known from its Welcome before connect() returns.
        self.limits = PayloadLimits()
        self._welcomed = threading.Event()
        self._stopping = False
        self._stopped = threading.Event()
        self._broken: BaseException | None = None
        self._requests = SchedulerRequests()
        # I/O thread only: messages zmq could not take yet (no usable connection), sent in order when it can.
        self._unsent: collections.deque[list[m.Buffer]] = collections.deque()
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
        self._wakeup.wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=_CLOSE_WAIT_SECONDS)
        self.cancel_everything_pending()
        if not self._thread.is_alive():
            self._wakeup.close()

    def _after_fork_in_child(self) -> None:
        """The socket and the I/O thread stayed with the parent: every call here fails at once from now on."""
        self._broken = ConnectionFailedError(
            f"this Client was created in process {self._owner_pid} and cannot be used in a forked child "
            f"(process {os.getpid()}): create a new Client in the child"
        )
        self._results = PendingResults()  # the parent's futures, which only the parent's I/O thread can settle
        self._wakeup.silence()

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
        with self._counter_lock:
            counter = self._next_counter
            self._next_counter = counter + 1
        return (self._id_prefix << TASK_COUNTER_BITS) | counter

    def reserve_task_ids(self, count: int) -> int:
        """The first of `count` consecutive task ids, for the tasks of one map."""
        with self._counter_lock:
            counter = self._next_counter
            self._next_counter = counter + count
        return (self._id_prefix << TASK_COUNTER_BITS) | counter

    def send_object(self, payload: m.ObjectPayload, may_store: bool = True) -> None:
        """Queue an object for the scheduler. A large one goes into the home store first, when there is one,
        and only its id, size and holder are queued (`may_store=False`: functions and serializers, which the
        worker reads from the control path). One the caller stored already names its holder; the caller
        calls `remember_stored` for it."""
        if may_store and not payload.holder and len(payload.payload) >= self.stores.inline_limit and self.stores.home:
            stored = self.store_or_none(lambda: self.stores.put_payload(payload, self._serializer))
            if stored is not None:
                self.sent_objects.remember(payload.object_id, lambda: self._put_payload_again(payload))
                self._outbox.append(stored)
                return
        if payload.holder:
            self._outbox.append(payload)
            return
        if payload.name == "shared argument":  # a large argument sent once (shared_arguments.py)
            what = "an argument"
        else:
            what = f"object {payload.name!r}" if payload.name else "an object"
        self.limits.check_payload(payload.payload, what)
        self._outbox.append(payload)

    def _put_payload_again(self, sent: m.ObjectPayload) -> m.ObjectPayload:
        """A lost object this client had serialized: into the home store again, or inline when there is none."""
        if self.stores.home:
            return self.stores.put_payload(sent, self._serializer)
        self.limits.check_payload(sent.payload, f"lost object {sent.object_id.hex()}")
        return sent

    def remember_stored(self, stored: m.ObjectPayload, value: Any) -> None:
        """`stored` names `value`, which the caller put into the home store: kept to store it again if lost."""
        self.sent_objects.remember(stored.object_id, lambda: self._put_value_again(stored, value))

    def _put_value_again(self, stored: m.ObjectPayload, value: Any) -> m.ObjectPayload:
        """A lost object this client had stored from its value: stored again, or inline when there is no store."""
        if self.stores.home:
            return self.stores.put_prepared(
                stored.object_id, stored_payload.prepare(value, self._serializer), stored.name
            )
        payload = (self._serializer or DefaultSerializer()).serialize(value)
        self.limits.check_payload(payload, f"lost object {stored.object_id.hex()}")
        return m.ObjectPayload(object_id=stored.object_id, payload=payload, name=stored.name)

    def store_or_none(self, put: Callable[[], m.ObjectPayload]) -> m.ObjectPayload | None:
        """The stored object `put` makes, or None (logged once) when the home store fails: the payload then
        travels on the control path, as without a store."""
        try:
            return put()
        except StoreError as error:
            if not self._store_failure_logged:
                self._store_failure_logged = True
                logger.warning(f"Client: the home store failed, large objects go through the scheduler: {error}")
            return None

    def submit_task(
        self, signature: TaskSignature, task_id: int, args: list[bytes], future: ScalerFuture,
        object_positions: list[int],
    ) -> None:
        inline = self.limits.check_arguments(args, signature.args_per_task)
        self._results.expect(task_id, future)
        self._outbox.append(TaskBatch(signature, [task_id], args, object_positions, inline))
        self._wakeup.wake()

    def submit_tasks(
        self, signature: TaskSignature, task_ids: Sequence[int], args: list[bytes], collector: MapCollector,
        object_positions: list[int],
    ) -> None:
        """`object_positions` index into `args` of this chunk: those hold object ids."""
        width = signature.args_per_task
        inline = self.limits.check_arguments(args, width)
        budget = self.limits.inline_budget
        if budget and len(task_ids) > 1 and inline > budget:
            # Too much for one message: in halves, each its own outbox item (the I/O thread sends
            # items that together exceed the budget in separate messages).
            half = len(task_ids) // 2
            cut = half * width
            self.submit_tasks(signature, task_ids[:half], args[:cut], collector,
                              [p for p in object_positions if p < cut])
            self.submit_tasks(signature, task_ids[half:], args[cut:], collector,
                              [p - cut for p in object_positions if p >= cut])
            return
        self._results.expect_all(task_ids, collector)
        self._outbox.append(TaskBatch(signature, task_ids, args, object_positions, inline))
        self._wakeup.wake()

    def wake(self) -> None:
        self._wakeup.wake()

    def submit_graph(
        self, submission: m.TaskSubmission, futures: dict[int, ScalerFuture]
    ) -> None:
        """A graph goes out as one message, after everything queued before it."""
        self.limits.check_graph(submission.groups)
        self._results.expect_graph(futures, submission.quiet_task_ids)
        self.send_message(submission)

    def send_message(self, message: m.Message) -> None:
        if isinstance(message, m.DeleteObjects):
            self.sent_objects.forget(message.object_ids)
            self.stores.let_go(message.object_ids)
        self._outbox.append(message)
        self._wakeup.wake()

    def cancel_tasks(self, task_ids: list[int], force: bool = False) -> None:
        if task_ids and self.is_open:
            self.send_message(m.CancelTasks(task_ids=task_ids, force=force))

    def cancel_future(self, future: ScalerFuture, force: bool = False) -> bool:
        if not self.is_open:
            future.mark_canceled(future.task_id)
            return future.cancelled()
        future._expect_cancel_outcome()
        self.send_message(m.CancelTasks(task_ids=[future.task_id], force=force))
        if threading.current_thread() is self._thread:
            # A done-callback canceling another future cannot wait for the thread it runs on.
            future.mark_canceled(future.task_id)
            return True
        # Until the task is canceled, finishes, or its worker says it has started (then it runs to the end).
        future._wait_for_cancel_outcome(self._timeout_seconds)
        return future.cancelled()

    def request(self, message: m.Message, reply_type: type, timeout: float) -> m.Message:
        """Send a message and wait for the scheduler's answer of the given type (scheduler_requests.py)."""
        return self._requests.request(message, reply_type, timeout, self.send_message, self.check_open)

    def forget(self, task_ids: Sequence[int]) -> None:
        self._results.forget(task_ids)

    def cancel_everything_pending(self) -> None:
        """Every task still waiting for its outcome ends canceled here (clear(), close())."""
        self._results.cancel_all()

    @property
    def unfinished_tasks(self) -> int:
        """How many tasks this client still waits for."""
        return len(self._results)

    # ------------------------------------------------------------------------------------------ I/O thread

    def _run(self) -> None:
        context = zmq.Context(io_threads=1)
        socket = context.socket(zmq.DEALER)
        configure_socket(socket, self._identity)
        try:
            if self._curve_keys is not None:
                secure_peer(socket, self._curve_keys)
            socket.connect(self.address)
            self.relay.attach(socket, lambda message: self._send(socket, message), lambda: self._send_unsent(socket))
            self._send(socket, m.Hello(
                role=m.Role.CLIENT, name=self._name, hostname=socket_module.gethostname(), pid=os.getpid(),
                nesting_depth=client_nesting_depth(), host_key=this_host_key(),
            ))
            self._loop(socket)
        except Exception as error:  # a bug here must fail the futures, not strand them
            logger.exception("Client: I/O thread failed")
            self._break(SchedulerLostError(f"client I/O thread failed: {error!r}"))
        finally:
            self._fetcher.stop(_FETCH_STOP_SECONDS)
            self.stores.close()
            socket.close(linger=int(_CLOSE_LINGER_SECONDS * 1000) if self._broken is None else 0)
            context.term()
            self._stopped.set()

    def _loop(self, socket: zmq.Socket) -> None:
        wakeup = self._wakeup
        poller = zmq.Poller()
        poller.register(socket, zmq.POLLIN)
        poller.register(wakeup.reader, zmq.POLLIN)
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
            if wakeup.reader in events:
                wakeup.consume()
            while self._fetcher.fetched:
                self._deliver_fetched(self._fetcher.fetched.popleft())
            if events.get(socket, 0) & zmq.POLLIN:
                last_heard = time.monotonic()
                # Messages read while an answer relayed from a store was awaited on this thread come first.
                while self.relay.deferred or has_input(socket):
                    if self.relay.deferred:
                        last_heard = time.monotonic()
                        self._on_message(self.relay.deferred.popleft())
                    else:
                        self._on_frames(receive_frames(socket))
            if self._welcomed.is_set():
                for message in messages_from(self._outbox, self.limits.inline_budget):
                    self._send(socket, message)
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
                self.stores.sweep()
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

    def _on_frames(self, frames: list[m.Buffer]) -> None:
        try:
            message = m.decode(frames)
        except m.ProtocolDecodeError as error:
            logger.warning(f"Client: dropped an undecodable message from the scheduler: {error}")
            return
        self._on_message(message)

    def _on_message(self, message: m.Message) -> None:
        if isinstance(message, m.TaskResults):
            if message.stored:
                self._fetcher.fetch(message.stored)
            self._results.route(message)
        elif isinstance(message, m.HeartbeatEcho):
            pass
        elif isinstance(message, m.Relay):
            self.relay.deliver(message)
        elif isinstance(message, m.CancelRefused):
            self._results.refuse_cancels(message.task_ids)
        elif isinstance(message, m.ResendObjects):
            self._resend(message.object_ids)
        elif isinstance(message, m.StoreDirectory):
            self.stores.update(message)
            self.store_directory = message
            self._fetcher.directory_changed()
        elif isinstance(message, m.Welcome):
            self.stores.update(message.store_directory)
            self.stores.inline_limit = message.inline_limit
            self._id_prefix = message.id_prefix
            self._heartbeat_interval_seconds = message.heartbeat_interval_for(self._heartbeat_interval_seconds)
            self.limits = PayloadLimits(message.max_frame_bytes, message.max_control_frame_bytes)
            self.store_directory = message.store_directory
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
            self._requests.answer(message)

    def _resend(self, object_ids: list[bytes]) -> None:
        """The scheduler lost objects of ours with their store: stored again (named in a submission with no
        tasks), and those we no longer hold said to be lost, so that their tasks fail instead of waiting."""
        sent, lost = self.sent_objects.resend([bytes(object_id) for object_id in object_ids])
        self._outbox.extend(sent)
        if lost:
            self._outbox.append(m.ObjectsLost(object_ids=lost))

    def _deliver_fetched(self, fetched: FetchedResults) -> None:
        """Stored results the fetch thread got, to their futures on this thread as every other result."""
        self._results.route(fetched.results)
        for task_id, error in fetched.failures:
            self._results.fail_one(task_id, error)

    def _break(self, error: BaseException) -> None:
        """The link is unusable: every waiting caller gets `error` instead of waiting forever."""
        if self._broken is None:
            self._broken = error
        self._results.fail_all(error)
        self._requests.wake_all()

    def _unreachable_text(self) -> str:
        return (
            f"could not connect to the scheduler at {self.address} within {self._timeout_seconds:g}s: "
            "is it running and reachable from here?"
        )
