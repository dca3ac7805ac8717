"""The client's link to the scheduler: a thin I/O shell around the connection core (connection_core.py).

Which thread owns what:
- Whoever holds the baton (baton.py: one thread at a time) owns the core, and with it every pending outcome,
  every message held before the welcome, every request waiting for an answer, the timeouts and heartbeats;
  and the link to the scheduler (client_link.py). It alone calls the core, and it carries out the core's
  actions (send, fetch, tell the stores). The I/O thread ("scaler-client-io") holds the baton except while
  it sleeps in its poll.
- Caller threads (the application's, done-callbacks) and the fetch thread append to `_queued` (a deque:
  append and popleft are atomic) and wake the I/O thread (wakeup.py), which hands what piled up to the core
  at once: under load, many submits become one message on their own, and a lone submit still leaves at once
  (outbox.py). With the ZMTP link (no zmq I/O thread that writes for us), a caller that finds the baton free
  (the I/O thread asleep) takes it instead, hands the queue to the core, writes the message itself and gives
  the baton back: no wake-up of the I/O thread on the way out. A caller about to wait for a future that
  finds the baton free serves the link itself for up to 50 ms, as the I/O thread would (link_serving.py,
  caller_read.py): the result wakes that caller alone. A caller that waits for an answer waits on its
  request's Reply (connection_actions.py), which the core settles with the answer or, at the deadline, an
  error.
- Written by the I/O thread, read by callers: `limits` and the id prefix (set before connect() returns),
  `store_directory` (replaced whole), `_ended` (why the link is over) and `unfinished_tasks` (a count).
- Shared objects that lock themselves: `stores` (scaler/store/peer_stores.py), `sent_objects`, `relay`.
- Once the I/O thread has ended, the core belongs to whoever holds `_after_end_lock`: the thread's last act
  closes it, and what a caller queues after that is settled by that caller at once (canceled, or failed
  with why the link ended), so no future waits on a link that is over.
- Futures complete on the baton's holder (or, after the I/O thread's end, on the thread that settles them),
  once each; the I/O thread keeps the baton from its end on.
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

from scaler.client import connection_actions as actions
from scaler.client.baton import Baton
from scaler.client.caller_read import CallerRead
from scaler.client.client_link import ClientLink, open_link
from scaler.client.connection_core import ClientConnectionCore
from scaler.client.connection_objects import put_payload_again, put_value_again
from scaler.client.connection_refusal import RefusalKind
from scaler.client.future import ScalerFuture
from scaler.client.link_serving import LinkServing
from scaler.client.outbox import TaskBatch
from scaler.client.payload_limits import PayloadLimits
from scaler.client.result_routing import PendingResults
from scaler.client.result_sinks import MapCollector
from scaler.client.sent_objects import SentObjects
from scaler.client.store_relay import StoreRelay
from scaler.client.stored_results import StoredResultFetcher
from scaler.client.task_output_display import show_task_output
from scaler.client.wakeup import WakeupPipe
from scaler.errors import ConnectionFailedError
from scaler.protocol import messages as m
from scaler.protocol.serializer import Serializer
from scaler.protocol.task_signature import TaskSignature
from scaler.store.peer_stores import Stores
from scaler.store.relay_path import DEFAULT_PROBE_SECONDS
from scaler.store.store_client import StoreError
from scaler.utility.blocking import client_nesting_depth
from scaler.utility.curve import PeerKeys
from scaler.utility.fork_safety import fix_after_fork
from scaler.utility.host_key import this_host_key
from scaler.utility.identifiers import TASK_COUNTER_BITS

logger = logging.getLogger(__name__)

# A caller writes a request itself only if it comes this long after the one before (a submit loop's are batched).
_LONE_REQUEST_GAP_SECONDS = 0.0002
# What a graceful close gives queued messages to leave; the I/O thread never blocks on a send, so only it can hold.
_CLOSE_LINGER_SECONDS = 2.0
_CLOSE_WAIT_SECONDS = _CLOSE_LINGER_SECONDS + 3.0
# What the I/O thread, ending, gives the fetch thread to finish the fetch under way before closing the stores.
_FETCH_STOP_SECONDS = 1.0
# How much longer than its timeout a caller waits for the core (which decides timeouts) to settle a request.
_REPLY_SLACK_SECONDS = 2.0


class ClientConnection(LinkServing):
    """The calls the Client makes (queue tasks, objects and messages; wait for a reply) and the I/O thread."""

    def __init__(
        self, address: str, name: str, timeout_seconds: float, heartbeat_interval_seconds: float,
        curve_keys: PeerKeys | None = None, serializer: Serializer | None = None,
        store_probe_seconds: float = DEFAULT_PROBE_SECONDS, share: float = m.DEFAULT_SHARE,
    ) -> None:
        self.address = address  # with standby schedulers, all of them (comma-separated)
        # The stores the scheduler names (welcome, storeDirectory): where large objects go, and results come from;
        # those out of reach through the scheduler.
        self.relay = StoreRelay(self.send_message)
        self.stores = Stores(timeout_seconds, self.relay, store_probe_seconds, lend=True)
        self._serializer = serializer
        self._store_failure_logged = False
        # What this client stored, until it deletes it: sent again if its store is lost (resendObjects).
        self.sent_objects = SentObjects()
        self._curve_keys = curve_keys
        self._timeout_seconds = timeout_seconds
        self._identity = f"C|{socket_module.gethostname()}|{os.getpid()}|{uuid.uuid4().hex[:8]}".encode()
        hello = m.Hello(
            role=m.Role.CLIENT, name=name or f"{socket_module.gethostname()}|{os.getpid()}",
            hostname=socket_module.gethostname(), pid=os.getpid(), nesting_depth=client_nesting_depth(),
            host_key=this_host_key(), share=share,
        )
        self._core = ClientConnectionCore(address, hello, timeout_seconds, heartbeat_interval_seconds)
        # Any thread appends; the I/O thread (or, after its end, the holder of _after_end_lock) takes.
        self._queued: collections.deque[Any] = collections.deque()
        self._next_counter = 0
        self._counter_lock = threading.Lock()
        self._id_prefix = 0
        # The stores the scheduler told us of, and our home among them (PROTOCOL.md §17); replaced whole.
        self.store_directory = m.StoreDirectory()
        self._wakeup = WakeupPipe()
        self._fetcher = StoredResultFetcher(self.stores, timeout_seconds, self.send_message, self.wake)
        # The scheduler's limits, known from its Welcome before connect() returns.
        self.limits = PayloadLimits()
        self._welcomed = threading.Event()  # set by the welcome, or by the end of the link
        self._stopping = False
        self._ended: BaseException | None = None
        self._after_end_lock = threading.Lock()
        self._io_ended = False
        # I/O thread only: the link to the scheduler (client_link.py: libzmq's DEALER or the ZMTP one).
        self._link: ClientLink | None = None
        self._baton = Baton()
        self._caller_led = False  # callers may take the baton (the ZMTP link): set by the I/O thread
        self._last_hand = 0.0  # when a caller last queued a request (any caller: a hint, races are harmless)
        self._reader: CallerRead | None = None  # with the ZMTP link: how a waiting caller reads (caller_read.py)
        self._every_pass = False  # whether the link's handshake events are looked at every pass (set by _loop)
        self._pollables: list[Any] = []  # the link's descriptors and sockets (set by _loop)
        self._thread = threading.Thread(target=self._run, name="scaler-client-io", daemon=True)
        self._owner_pid = os.getpid()
        fix_after_fork(self)

    # ------------------------------------------------------------------------------------------ life

    def connect(self) -> None:
        self._thread.start()
        if not self._welcomed.wait(self._timeout_seconds + 1.0) or self._ended is not None:
            why = f"at {self.address} within {self._timeout_seconds:g}s: is it running and reachable from here?"
            error = self._ended or ConnectionFailedError(f"could not connect to the scheduler {why}")
            self.close(graceful=False)
            raise error

    def close(self, graceful: bool = True) -> None:
        """Stop the I/O thread after it has sent what is queued; cancel futures still waiting."""
        if graceful and self._thread.is_alive() and self._ended is None:
            self.send_message(m.Disconnect(reason="client disconnecting"))
        self._stopping = True
        self._wakeup.wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=_CLOSE_WAIT_SECONDS)
        if not self._thread.is_alive():
            self._take_over_core()  # the thread's last act did it, unless it never started
            self._wakeup.close()

    def _after_fork_in_child(self) -> None:
        """The socket and the I/O thread stayed with the parent: every call here fails at once from now on."""
        self._ended = ConnectionFailedError(
            f"this Client was created in process {self._owner_pid} and cannot be used in a forked child "
            f"(process {os.getpid()}): create a new Client in the child"
        )
        # The parent's futures, which only the parent's I/O thread can settle, stay out of the child's reach.
        self._core = ClientConnectionCore(self.address, m.Hello(role=m.Role.CLIENT), self._timeout_seconds, 1.0)
        self._core.close()
        self._queued = collections.deque()
        self._after_end_lock = threading.Lock()  # the parent's could have been held at the fork
        self._io_ended = True
        self._caller_led, self._baton, self._reader = False, Baton(), None  # the parent's could be held at the fork
        self._wakeup.silence()

    @property
    def is_open(self) -> bool:
        return not self._stopping and self._ended is None

    def check_open(self) -> None:
        if self._ended is not None:
            raise self._ended
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
        calls `remember_stored` for it. The caller wakes the I/O thread when it has queued what goes together."""
        if may_store and not payload.holder and len(payload.payload) >= self.stores.inline_limit and self.stores.home:
            stored = self.store_or_none(lambda: self.stores.put_payload(payload, self._serializer))
            if stored is not None:
                self.sent_objects.remember(
                    payload.object_id, lambda: put_payload_again(self.stores, self.limits, self._serializer, payload)
                )
                self._queued.append(stored)
                return
        if payload.holder:
            self._queued.append(payload)
            return
        if payload.name == "shared argument":  # a large argument sent once (shared_arguments.py)
            what = "an argument"
        else:
            what = f"object {payload.name!r}" if payload.name else "an object"
        self.limits.check_payload(payload.payload, what)
        self._queued.append(payload)

    def remember_stored(self, stored: m.ObjectPayload, value: Any) -> None:
        """`stored` names `value`, which the caller put into the home store: kept to store it again if lost."""
        self.sent_objects.remember(
            stored.object_id, lambda: put_value_again(self.stores, self.limits, self._serializer, stored, value)
        )

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
        object_positions: list[int], references: list[tuple[int, int]] | None = None,
    ) -> None:
        inline = self.limits.check_arguments(args, signature.args_per_task)
        self._hand(TaskBatch(signature, [task_id], args, object_positions, inline, future, references or None))

    def submit_tasks(
        self, signature: TaskSignature, task_ids: Sequence[int], args: list[bytes], collector: MapCollector,
        object_positions: list[int], references: list[tuple[int, int]] | None = None,
    ) -> None:
        """`object_positions` index into `args` of this chunk: those hold object ids; `references` (index,
        task id) name kept tasks whose results those arguments are."""
        width = signature.args_per_task
        inline = self.limits.check_arguments(args, width)
        budget = self.limits.inline_budget
        if budget and len(task_ids) > 1 and inline > budget:
            # Too much for one message: in halves, each its own batch (the core sends batches that together
            # exceed the budget in separate messages).
            half = len(task_ids) // 2
            cut = half * width
            self.submit_tasks(signature, task_ids[:half], args[:cut], collector,
                              [p for p in object_positions if p < cut],
                              [(p, t) for p, t in references or () if p < cut])
            self.submit_tasks(signature, task_ids[half:], args[cut:], collector,
                              [p - cut for p in object_positions if p >= cut],
                              [(p - cut, t) for p, t in references or () if p >= cut])
            return
        self._hand(TaskBatch(signature, task_ids, args, object_positions, inline, collector, references or None))

    def wake(self) -> None:
        self._wakeup.wake()

    def submit_graph(self, submission: m.TaskSubmission, futures: dict[int, ScalerFuture]) -> None:
        """A graph goes out as one message, after everything queued before it."""
        self.limits.check_graph(submission.groups)
        self._hand(actions.GraphRequest(submission, futures))

    def send_message(self, message: m.Message) -> None:
        if isinstance(message, m.DeleteObjects):
            self.sent_objects.forget(message.object_ids)
            self.stores.let_go(message.object_ids)
        self._hand(message)

    def send_lock_free(self, message: m.Message) -> None:
        """Any thread, taking no lock (a finalizer may call it whatever lock its thread holds): for a message about
        nothing this client stored itself, such as the delete of a kept result."""
        self._hand(message)

    def cancel_tasks(self, task_ids: list[int], force: bool = False) -> None:
        if task_ids and self.is_open:
            self.send_message(m.CancelTasks(task_ids=task_ids, force=force))

    def cancel_future(self, future: ScalerFuture, force: bool = False) -> bool:
        if not self.is_open:
            future.mark_canceled(future.task_id)
            return future.cancelled()
        future._expect_cancel_outcome()
        self.send_message(m.CancelTasks(task_ids=[future.task_id], force=force))
        if self._baton.held_here():
            # A done-callback canceling another future cannot wait for the thread it runs on.
            future.mark_canceled(future.task_id)
            return True
        # Until the task is canceled, finishes, or its worker says it has started (then it runs to the end).
        future._wait_for_cancel_outcome(self._timeout_seconds)
        return future.cancelled()

    def request(self, message: m.Message, reply_type: type, timeout: float) -> m.Message:
        """Send a message and wait for the scheduler's answer of the given type (scheduler_requests.py)."""
        self.check_open()
        reply = actions.Reply()
        self._hand(actions.SchedulerRequest(message, reply_type, timeout, reply))
        if not reply.wait(timeout + _REPLY_SLACK_SECONDS):
            raise ConnectionFailedError(f"no {reply_type.__name__} from the scheduler within {timeout:g}s")
        if reply.error is not None:
            raise reply.error
        assert reply.message is not None
        return reply.message

    def forget(self, task_ids: Sequence[int]) -> None:
        self._hand(actions.ForgetTasks(list(task_ids)))

    def cancel_everything_pending(self) -> None:
        """Every task still waiting for its outcome ends canceled here (clear())."""
        if self._baton.held_here():
            self._core.pending.cancel_all()  # a done-callback: this thread owns the core
            return
        request = actions.CancelPending()
        self._hand(request)
        request.done.wait(self._timeout_seconds)

    @property
    def unfinished_tasks(self) -> int:
        """How many tasks this client still waits for (a count the I/O thread keeps; any thread may read it)."""
        return len(self._core.pending)

    @property
    def _results(self) -> PendingResults:
        """The pending outcomes, for tests that count deliveries (owned by the I/O thread)."""
        return self._core.pending

    def on_authentication_failed(self, reason: str) -> None:
        """I/O thread: the scheduler rejected our CURVE keys (the socket's monitor tells, see _on_handshake)."""
        self._act(self._core.on_refused(RefusalKind.AUTHENTICATION, reason, time.monotonic()))

    def _on_handshake(self, now: float) -> None:
        """I/O thread: the socket's monitor has events. A refused key is said at once, and ends the connection
        before the welcome (retrying cannot help); after it, ZeroMQ's reconnects go on and the log says why.
        A connection made tells the core, which may want to know at once who answers there now."""
        assert self._link is not None
        diagnosis = self._link.diagnosis
        connections = diagnosis.handshakes_succeeded
        for problem in self._link.handshake_problems(now):
            if diagnosis.keys_refused and not self._core.welcomed:
                self.on_authentication_failed(problem)
            else:
                logger.error(f"Client: {problem}")
        if diagnosis.handshakes_succeeded > connections:
            self._act(self._core.on_connected(now))

    # ------------------------------------------------------------------------------------------ hand-off

    def _hand(self, item: Any) -> None:
        """Any thread: queue `item` for the core and wake the I/O thread; settled here if that thread has ended.
        With the baton free and the request alone, the caller hands the queue to the core and writes it itself (a
        timer that sets, such as a request's timeout, is seen by the I/O thread within its idle poll, 0.25 s)."""
        self._queued.append(item)
        now = time.monotonic()
        alone, self._last_hand = now - self._last_hand >= _LONE_REQUEST_GAP_SECONDS, now
        if self._caller_led and alone and self._baton.try_take():
            try:
                self._act(self._core.on_requests(self._queued, now))
            finally:
                self._baton.give_back()
            return
        self._wakeup.wake()
        if self._io_ended:
            with self._after_end_lock:
                self._core.on_requests(self._queued, time.monotonic())

    def _take_over_core(self) -> None:
        """The I/O thread is over (or never ran): close the core, settle what is queued, and from now on let
        callers settle what they queue (under the lock)."""
        with self._after_end_lock:
            self._io_ended = True
            self._core.close()
            self._core.on_requests(self._queued, time.monotonic())

    # ------------------------------------------------------------------------------------------ I/O thread

    def _run(self) -> None:
        link: ClientLink | None = None
        self._baton.take(_CLOSE_WAIT_SECONDS)  # free: callers take it only once _caller_led is set, below
        try:
            link = self._link = open_link(self.address, self._identity, self._curve_keys, time.monotonic())
            link.connect(self._core.addresses.current, time.monotonic())
            self.relay.attach(link, self._baton.held_here)
            self._caller_led = not link.owns_io_thread
            self._act(self._core.start(time.monotonic()))
            self._loop(link)
        except Exception as error:  # a bug here must fail the futures, not strand them
            logger.exception("Client: I/O thread failed")
            self._act(self._core.on_failure(error))
        finally:  # holding the baton, which it keeps: callers now settle what they queue (_hand)
            self._caller_led = False
            self._fetcher.stop(_FETCH_STOP_SECONDS)
            self.stores.close()
            if link is not None:
                link.close(_CLOSE_LINGER_SECONDS if self._ended is None else 0.0)
            self._take_over_core()
            self._welcomed.set()

    def _act(self, decided: Sequence[actions.Action]) -> None:
        """I/O thread: carry out what the core decided, in order."""
        link = self._link
        assert link is not None
        for action in decided:
            kind = type(action)
            if kind is actions.Send:
                link.send(action.message)  # type: ignore[union-attr]
            elif kind is actions.SendHeartbeat:
                link.send_heartbeat()
            elif kind is actions.SweepStores:
                self.stores.sweep()
            elif isinstance(action, actions.Fetch):
                self._fetcher.fetch(action.stored)
            elif isinstance(action, actions.DeliverRelay):
                self.relay.deliver(action.relay)
            elif isinstance(action, actions.Welcomed):
                welcome = action.welcome
                self.stores.update(welcome.store_directory)
                self.stores.inline_limit = welcome.inline_limit
                self._id_prefix = welcome.id_prefix
                self.limits = self._core.limits
                self.store_directory = welcome.store_directory
                self._welcomed.set()
            elif isinstance(action, actions.DirectoryChanged):
                self.stores.update(action.directory)
                self.store_directory = action.directory
                self._fetcher.directory_changed()
            elif isinstance(action, actions.ResendObjects):
                self._resend(action.object_ids)
            elif isinstance(action, actions.ShowOutput):
                show_task_output(action.output)
            elif isinstance(action, actions.Ended):
                self._ended = action.error
                self._welcomed.set()
            elif isinstance(action, actions.Reconnect):
                link.connect(action.address, time.monotonic())
        link.flush()

    def _resend(self, object_ids: list[bytes]) -> None:
        """The scheduler lost objects of ours with their store: stored again (named in a submission with no
        tasks), and those we no longer hold said to be lost, so that their tasks fail instead of waiting."""
        sent, lost = self.sent_objects.resend(object_ids)
        items: collections.deque[Any] = collections.deque(sent)
        if lost:
            items.append(m.ObjectsLost(object_ids=lost))
        self._act(self._core.on_requests(items, time.monotonic()))
