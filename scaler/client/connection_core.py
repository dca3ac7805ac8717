"""The client connection's decisions, as a state machine with no I/O.

The shell (connection.py) feeds it events with the time they happened: the start, each message from the
scheduler, the requests callers queued (submissions, objects, messages, graphs, forgets, clears, requests
that wait for an answer), what the fetch thread fetched, a refusal the shell saw on the socket, a tick, and
the close. Each returns the actions to carry out in order (connection_actions.py). No sockets, threads or
clocks in here (a caller's Reply or CancelPending carries an event the core sets: that is the hand-off
back), so tests drive it alone (tests/unit/test_connection_core.py, test_fuzz_connection_core.py).

What it decides:
- the handshake: `hello` first, then nothing but heartbeats until `welcome`; what callers queued meanwhile
  is held and leaves in order after it (PROTOCOL.md §4);
- what a refusal means (connection_refusal.py), and when the scheduler counts as lost: silent for
  `timeout_seconds`, a `disconnect`, or a refusal after the welcome; no welcome within the timeout means
  unreachable;
- when heartbeats go out (the client's interval, shortened by the welcome; §5);
- what each message from the scheduler does to the pending outcomes (result_routing.py), and which
  stored results go to the fetch thread;
- what requests from callers turn into, and how long one that waits for an answer may wait
  (scheduler_requests.py);
- that every task whose outcome is pending gets exactly one: its result, its failure, canceled, or the
  error that ended the link. A task queued after the end gets that error at once (or canceled, after a
  close), so no caller waits on a link that is over.

The outcomes go to the sinks callers registered (futures, map collectors): calling them is this core's
output for outcomes, as actions are for I/O. Tests pass recording sinks.

A lost scheduler ends the link here (`_end`). Issue 26 (reconnect and re-submit under the same ids) is a
different decision at that one place: keep the pending outcomes, hello again when the shell reports the
scheduler answering, and re-queue what is unfinished; every event it needs is already an event here.
"""

from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING, Sequence

from scaler.client.connection_actions import (
    Action,
    CancelPending,
    DeliverRelay,
    DirectoryChanged,
    Ended,
    EndKind,
    Fetch,
    ForgetTasks,
    GraphRequest,
    ResendObjects,
    SchedulerRequest,
    Send,
    SendHeartbeat,
    ShowOutput,
    SweepStores,
    Welcomed,
)
from scaler.client.connection_refusal import RefusalKind, refusal_error, refusal_kind
from scaler.client.outbox import OutboxItem, TaskBatch, messages_from
from scaler.client.payload_limits import PayloadLimits
from scaler.client.result_routing import PendingResults
from scaler.client.result_sinks import ResultSink
from scaler.client.scheduler_requests import SchedulerRequests
from scaler.errors import ConnectionFailedError, SchedulerLostError
from scaler.protocol import messages as m

if TYPE_CHECKING:  # the fetch thread's module; the core only reads what it hands over
    from scaler.client.stored_results import FetchedResults

logger = logging.getLogger(__name__)

_NOTHING: Sequence[Action] = ()


class ClientConnectionCore:
    def __init__(
        self, address: str, hello: m.Hello, timeout_seconds: float, heartbeat_interval_seconds: float,
    ) -> None:
        self._address = address
        self._hello = hello
        self._timeout_seconds = timeout_seconds
        self._heartbeat_interval = heartbeat_interval_seconds
        # The sink of every task whose outcome is pending (the shell reaches it as `_results` for tests).
        self.pending = PendingResults()
        self._requests = SchedulerRequests()
        # What callers queued, once taken from their queue: held here until the welcome, then sent in order.
        self._outbox: collections.deque[OutboxItem] = collections.deque()
        self.welcomed = False
        self.limits = PayloadLimits()
        # Why the link is over (None while it is not); `closed` once the client closed it itself.
        self.ended: BaseException | None = None
        self.closed = False
        self._started_at = 0.0
        self._last_heard = 0.0
        self._last_heartbeat = 0.0  # not a deadline: the interval can shrink when the welcome comes

    @property
    def is_over(self) -> bool:
        return self.ended is not None or self.closed

    # ------------------------------------------------------------------------------------------ events

    def start(self, now: float) -> Sequence[Action]:
        """The link is connecting: the hello goes first."""
        self._started_at = self._last_heard = self._last_heartbeat = now
        return [Send(self._hello)]

    def on_requests(self, queued: collections.deque, now: float) -> Sequence[Action]:
        """Take everything callers queued (oldest first) and return the messages that carry it, if welcomed."""
        if self.is_over:
            self._refuse_all(queued)
            return _NOTHING
        out: list[Action] = []
        pending = self.pending
        outbox = self._outbox
        while queued:
            item = queued.popleft()
            if isinstance(item, TaskBatch):
                if item.sink is not None:
                    if len(item.task_ids) == 1:
                        pending.expect(item.task_ids[0], item.sink)
                    else:
                        pending.expect_all(item.task_ids, item.sink)
                outbox.append(item)
            elif isinstance(item, GraphRequest):
                pending.expect_graph(item.futures, item.submission.quiet_task_ids)
                outbox.append(item.submission)
            elif isinstance(item, SchedulerRequest):
                message = self._requests.add(item, now)
                if message is not None:
                    outbox.append(message)
            elif isinstance(item, ForgetTasks):
                pending.forget(item.task_ids)
            elif isinstance(item, CancelPending):
                pending.cancel_all()
                item.done.set()
            else:
                outbox.append(item)
        if self.welcomed:
            self._flush(out)
        return out

    def on_message(self, message: m.Message, now: float) -> Sequence[Action]:
        self._last_heard = now
        if self.is_over:
            return _NOTHING
        if isinstance(message, m.TaskResults):
            if message.stored:
                return self._on_stored(message)
            self.pending.route(message)
            return _NOTHING
        if isinstance(message, m.HeartbeatEcho):
            return _NOTHING
        if isinstance(message, m.Relay):
            return [DeliverRelay(message)]
        if isinstance(message, m.TaskOutput):
            return [ShowOutput(message)]
        if isinstance(message, m.CancelRefused):
            self.pending.refuse_cancels(message.task_ids)
            return _NOTHING
        if isinstance(message, m.ResendObjects):
            return [ResendObjects([bytes(object_id) for object_id in message.object_ids])]
        if isinstance(message, m.StoreDirectory):
            return [DirectoryChanged(message)]
        if isinstance(message, m.Welcome):
            return self._on_welcome(message)
        if isinstance(message, m.Refused):
            return self.on_refused(refusal_kind(message.reason), message.reason, now)
        if isinstance(message, m.Disconnect):
            return self._end(EndKind.LOST, SchedulerLostError(
                f"the scheduler at {self._address} closed the connection: {message.reason}"
            ))
        if isinstance(message, m.ProtocolError):
            logger.warning(f"Client: the scheduler reports a protocol error: {message.reason}")
            return _NOTHING
        follow_up = self._requests.answer(message)
        if follow_up is None:
            return _NOTHING
        self._outbox.append(follow_up)  # held like any other message until the welcome
        out: list[Action] = []
        if self.welcomed:
            self._flush(out)
        return out

    def on_refused(self, kind: RefusalKind, reason: str, now: float) -> Sequence[Action]:
        """A refusal: from a `refused` message, or one the shell saw on the socket (AUTHENTICATION: the
        scheduler rejected our CURVE keys, which never reaches it as a message)."""
        if self.is_over:
            return _NOTHING
        error = refusal_error(kind, reason, self._address, self.welcomed)
        return self._end(EndKind.LOST if self.welcomed else EndKind.REFUSED, error)

    def on_fetched(self, fetched: FetchedResults, now: float) -> Sequence[Action]:
        """Stored results the fetch thread got: to their sinks, as every other result."""
        if fetched.results.succeeded_ids:
            self.pending.route(fetched.results)
        for task_id, error in fetched.failures:
            self.pending.fail_one(task_id, error)
        return _NOTHING

    def on_tick(self, now: float) -> Sequence[Action]:
        """Time passed: timeouts (the welcome's, the scheduler's silence, requests') and heartbeats."""
        if self.is_over:
            return _NOTHING
        if not self.welcomed:
            if now - self._started_at > self._timeout_seconds:
                return self._end(EndKind.UNREACHABLE, ConnectionFailedError(
                    f"could not connect to the scheduler at {self._address} within {self._timeout_seconds:g}s: "
                    "is it running and reachable from here?"
                ))
        elif now - self._last_heard > self._timeout_seconds:
            return self._end(EndKind.LOST, SchedulerLostError(
                f"no word from the scheduler at {self._address} for {self._timeout_seconds:g}s; it is gone or stuck"
            ))
        out: list[Action] = []
        if len(self._requests):
            for message in self._requests.expire(now):
                self._outbox.append(message)
            if self.welcomed:
                self._flush(out)
        if now - self._last_heartbeat >= self._heartbeat_interval:
            self._last_heartbeat = now
            out.append(SweepStores())
            out.append(SendHeartbeat())
        return out

    def on_failure(self, error: BaseException) -> Sequence[Action]:
        """The shell failed (a bug): the outcomes must not be stranded."""
        return self._end(EndKind.FAILED, SchedulerLostError(f"client I/O thread failed: {error!r}"))

    def close(self) -> None:
        """The client closed the link: what is still pending ends canceled, requests fail."""
        if self.closed:
            return
        self.closed = True
        self.pending.cancel_all()
        self._requests.fail_all(self.ended or ConnectionFailedError(
            "this client is disconnected; create a new Client to submit more work"
        ))
        self._outbox.clear()

    def seconds_to_next_decision(self, now: float) -> float:
        """How long the shell may wait for input before the next tick decides something."""
        if self.is_over:
            return 0.0
        deadlines = [self._last_heartbeat + self._heartbeat_interval]
        if self.welcomed:
            deadlines.append(self._last_heard + self._timeout_seconds)
        else:
            deadlines.append(self._started_at + self._timeout_seconds)
        request_deadline = self._requests.next_deadline()
        if request_deadline is not None:
            deadlines.append(request_deadline)
        return max(0.0, min(deadlines) - now)

    # ------------------------------------------------------------------------------------------ rules

    def _on_welcome(self, welcome: m.Welcome) -> Sequence[Action]:
        if self.welcomed:
            return _NOTHING  # a second welcome would come from a second hello, which we never send
        self.welcomed = True
        self._heartbeat_interval = welcome.heartbeat_interval_for(self._heartbeat_interval)
        self.limits = PayloadLimits(welcome.max_frame_bytes, welcome.max_control_frame_bytes)
        out: list[Action] = [Welcomed(welcome)]
        self._flush(out)
        return out

    def _on_stored(self, message: m.TaskResults) -> Sequence[Action]:
        """Results kept in stores go to the fetch thread, those of tasks still waiting; the others are let go."""
        out: list[Action] = []
        fetched = self.pending.deliver_kept(message.stored)  # kept results stay in their stores
        wanted = [stored for stored in fetched if self.pending.expects(stored.task_id)]
        unwanted = [stored.object_id for stored in fetched if not self.pending.expects(stored.task_id)]
        self.pending.route(message)
        if wanted:
            out.append(Fetch(wanted))
        if unwanted:
            out.append(Send(m.DeleteObjects(object_ids=unwanted)))
        return out

    def _flush(self, out: list[Action]) -> None:
        if self._outbox:
            out.extend(Send(message) for message in messages_from(self._outbox, self.limits.inline_budget))

    def _end(self, kind: EndKind, error: BaseException) -> Sequence[Action]:
        """The link is over: every waiting caller gets `error` instead of waiting forever.

        Issue 26 decides here instead to keep waiting, reconnect and re-submit, for LOST.
        """
        if self.is_over:
            return _NOTHING
        self.ended = error
        self.pending.fail_all(error)
        self._requests.fail_all(error)
        self._outbox.clear()
        return [Ended(kind, error)]

    def _refuse_all(self, queued: collections.deque) -> None:
        """Requests that came after the end: each settles at once, so that none waits on a link that is over."""
        while queued:
            item = queued.popleft()
            if isinstance(item, TaskBatch) and item.sink is not None:
                for task_id in item.task_ids:
                    self._settle_late(item.sink, task_id)
            elif isinstance(item, GraphRequest):
                for task_id, future in item.futures.items():
                    self._settle_late(future, task_id)
            elif isinstance(item, SchedulerRequest):
                item.reply.fail(self.ended or ConnectionFailedError(
                    "this client is disconnected; create a new Client to submit more work"
                ))
            elif isinstance(item, ForgetTasks):
                self.pending.forget(item.task_ids)
            elif isinstance(item, CancelPending):
                self.pending.cancel_all()
                item.done.set()

    def _settle_late(self, sink: ResultSink, task_id: int) -> None:
        if self.ended is not None:
            sink.fail(task_id, self.ended)
        else:
            sink.mark_canceled(task_id)

