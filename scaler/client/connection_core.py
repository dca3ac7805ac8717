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
  `timeout_seconds`, a `disconnect`, or a refusal after the welcome other than "unknown peer"; no welcome
  within the timeout means unreachable;
- resuming after a restart: "unknown peer" after the welcome means the scheduler now at the address does
  not know this client (a restart). The outcomes stay pending; the client says hello again naming its id
  prefix (again, with a bounded backoff, while the new scheduler keeps refusing what it sends), and once
  welcomed under that prefix it sends again what is unfinished (resubmission.py: objects, then tasks, then
  graphs), then what callers queued meanwhile. It waits for that as it waits for any answer: lost once no
  scheduler that knows it has been heard for `timeout_seconds`;
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

A result can arrive twice across a restart (from the old scheduler and, for the task sent again, from the new
one): the first takes the task's sink, so the second finds none and is dropped.
"""

from __future__ import annotations

import collections
import dataclasses
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
    Reconnect,
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
from scaler.client.resubmission import SentRecords, without_resent
from scaler.client.result_routing import PendingResults
from scaler.client.result_sinks import ResultSink
from scaler.client.scheduler_requests import SchedulerRequests
from scaler.errors import ConnectionFailedError, SchedulerLostError
from scaler.protocol import messages as m
from scaler.protocol.address_rotation import AddressRotation, silence_seconds
from scaler.protocol.scheduler_session import HELLO_TWICE
from scaler.protocol.versions import UNNAMED_RELEASE
from scaler.utility.scheduler_addresses import parse_scheduler_addresses

if TYPE_CHECKING:  # the fetch thread's module; the core only reads what it hands over
    from scaler.client.stored_results import FetchedResults

logger = logging.getLogger(__name__)

_NOTHING: Sequence[Action] = ()
# How long a resuming client waits for the welcome to a hello before it says hello again, doubling up to the
# bound, while the scheduler keeps refusing what it sends (a hello lost on a connection that dropped again).
_FIRST_HELLO_AGAIN_SECONDS = 0.5
_MAX_HELLO_AGAIN_SECONDS = 5.0


class ClientConnectionCore:
    def __init__(
        self, address: str, hello: m.Hello, timeout_seconds: float, heartbeat_interval_seconds: float,
    ) -> None:
        self._address = address
        # Which of several schedulers (a standby's) we talk to: the next one when it is silent or stands by.
        self.addresses = AddressRotation(
            parse_scheduler_addresses(address), silence_seconds(heartbeat_interval_seconds, timeout_seconds)
        )
        self._hello = hello
        self._timeout_seconds = timeout_seconds
        self._heartbeat_interval = heartbeat_interval_seconds
        # The sink of every task whose outcome is pending (the shell reaches it as `_results` for tests).
        self.pending = PendingResults()
        self._requests = SchedulerRequests()
        # What callers queued, once taken from their queue: held here until the welcome, then sent in order.
        self._outbox: collections.deque[OutboxItem] = collections.deque()
        # Welcomed by the scheduler at the address now; `_resuming` once one that had welcomed us forgot us.
        self.welcomed = False
        self._was_welcomed = False
        self._resuming = False
        self._id_prefix = 0
        self._next_hello_at = 0.0
        self._hello_wait = _FIRST_HELLO_AGAIN_SECONDS
        # What to send again if the scheduler restarts.
        self._records = SentRecords()
        # How many times a new scheduler took this client back, and, per task whose stored result is being
        # fetched, that count when the fetch began: a fetch that fails across a restart (relayed through the
        # scheduler that died) does not fail its task, which was sent again and will have a result anyway.
        self._resumes = 0
        self._fetching_since: dict[int, int] = {}
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
        records = self._records
        batches = records.batches
        while queued:
            item = queued.popleft()
            if isinstance(item, TaskBatch):
                if item.sink is not None:
                    if len(item.task_ids) == 1:
                        pending.expect(item.task_ids[0], item.sink)
                    else:
                        pending.expect_all(item.task_ids, item.sink)
                    # Kept to send again after a restart (resubmission.py), without its sink: `pending` has that,
                    # and a finished future must not be held here (a kept result goes when its future does).
                    batches.append(dataclasses.replace(item, sink=None))
                outbox.append(item)
            elif isinstance(item, m.ObjectPayload):
                records.note_object(item)
                outbox.append(item)
            elif isinstance(item, GraphRequest):
                pending.expect_graph(item.futures, item.submission.quiet_task_ids)
                records.note_graph(item, pending)
                outbox.append(item.submission)
            elif isinstance(item, SchedulerRequest):
                if isinstance(item.message, m.ClearRequest):
                    records.forget_all_objects()  # the scheduler drops them all; clear() forgets them too
                message = self._requests.add(item, now)
                if message is not None:
                    outbox.append(message)
            elif isinstance(item, ForgetTasks):
                pending.forget(item.task_ids)
            elif isinstance(item, CancelPending):
                pending.cancel_all()
                item.done.set()
            else:
                if isinstance(item, m.DeleteObjects):
                    records.forget_objects(item.object_ids)
                outbox.append(item)
        records.after_batches(pending)
        if self.welcomed:
            self._flush(out)
        return out

    def on_message(self, message: m.Message, now: float) -> Sequence[Action]:
        if self.is_over:
            return _NOTHING
        if isinstance(message, m.Refused):  # not a sign of life: a scheduler that refuses us does not know us
            if message.standby:
                self.addresses.refused(now)  # the next address, at the next tick
                return _NOTHING
            return self.on_refused(refusal_kind(message.reason), message.reason, now)
        self._last_heard = now
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
        if isinstance(message, m.Disconnect):
            return self._end(EndKind.LOST, SchedulerLostError(
                f"the scheduler at {self._address} closed the connection: {message.reason}"
            ))
        if isinstance(message, m.ProtocolError):
            if self._resuming and HELLO_TWICE in message.reason:
                # A scheduler of an earlier release that still has us from before we moved away (to a standby and
                # back): it refuses our hello, and leaving it would cancel our tasks there: lost. One of this release
                # welcomes us again instead, and our session goes on there (PROTOCOL.md §4).
                return self._end(EndKind.LOST, SchedulerLostError(
                    f"the scheduler at {self.addresses.current} still has this client from before it moved to "
                    "another scheduler address, and cannot take it back"
                ))
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
        if kind is RefusalKind.UNKNOWN_PEER:
            return self._hello_again(now)
        error = refusal_error(kind, reason, self._address, self._was_welcomed)
        return self._end(EndKind.LOST if self._was_welcomed else EndKind.REFUSED, error)

    def on_connected(self, now: float) -> Sequence[Action]:
        """The socket (re)connected to whatever listens at the address. After a welcome that is a scheduler
        that restarted, maybe: a heartbeat now asks it, rather than at the next interval, so that a new one's
        refusal, and the resume, come at once."""
        if self.is_over or not self._was_welcomed:
            return _NOTHING
        self._last_heartbeat = now
        return [SendHeartbeat()]

    def on_fetched(self, fetched: FetchedResults, now: float) -> Sequence[Action]:
        """Stored results the fetch thread got: to their sinks, as every other result."""
        fetching_since = self._fetching_since
        if fetched.results.succeeded_ids:
            for task_id in fetched.results.succeeded_ids:
                fetching_since.pop(task_id, None)
            self.pending.route(fetched.results)
        for task_id, error in fetched.failures:
            began = fetching_since.pop(task_id, self._resumes)
            if self._resuming or began != self._resumes:
                continue  # sent again to the new scheduler (or about to be): its result will come from there
            self.pending.fail_one(task_id, error)
        return _NOTHING

    def on_tick(self, now: float) -> Sequence[Action]:
        """Time passed: timeouts (the welcome's, the scheduler's silence, requests') and heartbeats."""
        if self.is_over:
            return _NOTHING
        if self._resuming:
            if now - self._last_heard > self._timeout_seconds:
                return self._end(EndKind.LOST, SchedulerLostError(
                    f"the scheduler at {self._address} no longer knows this client (restarted?), and none there "
                    f"took it back within {self._timeout_seconds:g}s of the last word from one that knew it"
                ))
        elif not self.welcomed:
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
        moved_to = self.addresses.on_tick(now, self._last_heard)
        if moved_to is not None:
            out.extend(self._move(moved_to, now))
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
        if self.welcomed or self._resuming:
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
        if self._resuming and welcome.id_prefix != self._id_prefix:
            return self._end(EndKind.LOST, SchedulerLostError(
                f"the scheduler at {self._address} no longer knows this client (restarted?) and gave it a new id "
                f"prefix instead of taking it back: it does not resume clients, so their tasks are lost"
            ))
        self.welcomed = True
        self._was_welcomed = True
        self.addresses.welcomed()
        self._id_prefix = welcome.id_prefix
        self._heartbeat_interval = welcome.heartbeat_interval_for(self._heartbeat_interval)
        self.limits = PayloadLimits(welcome.max_frame_bytes, welcome.max_control_frame_bytes)
        out: list[Action] = [Welcomed(welcome)]
        if self._resuming:
            self._resuming = False
            self._send_again(welcome)
        self._flush(out)
        return out

    def _hello_again(self, now: float) -> Sequence[Action]:
        """The scheduler at the address does not know us. After a welcome, it restarted (or dropped us):
        outcomes stay pending, and the hello names our id prefix. Before one, our hello was lost (the
        connection it left on dropped). Hello again, at once and then with a bounded backoff while refusals
        keep coming (each hello is answered after everything sent before it, so refusals of those come first)."""
        if self._was_welcomed and not self._resuming:
            self._resuming = True
            self.welcomed = False
            self._next_hello_at = now
            self._hello_wait = _FIRST_HELLO_AGAIN_SECONDS
            logger.warning(
                f"Client: the scheduler at {self._address} no longer knows this client (restarted?): saying hello "
                f"again to resume; {len(self.pending)} tasks wait, up to {self._timeout_seconds:g}s"
            )
        if now < self._next_hello_at:
            return _NOTHING
        self._next_hello_at = now + self._hello_wait
        self._hello_wait = min(self._hello_wait * 2, _MAX_HELLO_AGAIN_SECONDS)
        return [Send(dataclasses.replace(self._hello, id_prefix=self._id_prefix))]

    def _move(self, address: str, now: float) -> Sequence[Action]:
        """To the next scheduler address (silent, or a standby): hello there; a client welcomed before resumes
        there as after a restart (its outcomes wait, unfinished work is sent again once welcomed)."""
        logger.warning(f"Client: trying the scheduler at {address}")
        if not self._was_welcomed:
            return [Reconnect(address), Send(self._hello)]
        if not self._resuming:
            self._resuming = True
            self.welcomed = False
            self._hello_wait = _FIRST_HELLO_AGAIN_SECONDS
            logger.warning(f"Client: resuming at {address}; {len(self.pending)} tasks wait, up to "
                           f"{self._timeout_seconds:g}s")
        self._next_hello_at = now + self._hello_wait
        return [Reconnect(address), Send(dataclasses.replace(self._hello, id_prefix=self._id_prefix))]

    def _send_again(self, welcome: m.Welcome) -> None:
        """Welcomed back under our prefix: what is unfinished goes first, then what callers queued meanwhile."""
        self._resumes += 1
        queued_meanwhile = without_resent(self._outbox, self._records)
        again: list = self._records.unfinished(self.pending)
        again.extend(message for message in self._requests.send_again()
                     if not any(message is item for item in queued_meanwhile))
        again.extend(queued_meanwhile)
        self._outbox = collections.deque(again)
        logger.info(
            f"Client: resumed with the scheduler at {self._address} ({welcome.release or UNNAMED_RELEASE}, protocol "
            f"version {welcome.protocol_version}): {len(self.pending)} tasks sent again"
        )

    def _on_stored(self, message: m.TaskResults) -> Sequence[Action]:
        """Results kept in stores go to the fetch thread, those of tasks still waiting; the others are let go."""
        out: list[Action] = []
        fetched = self.pending.deliver_kept(message.stored)  # kept results stay in their stores
        wanted = [stored for stored in fetched if self.pending.expects(stored.task_id)]
        unwanted = [stored.object_id for stored in fetched if not self.pending.expects(stored.task_id)]
        self.pending.route(message)
        if wanted:
            self._fetching_since.update(dict.fromkeys((stored.task_id for stored in wanted), self._resumes))
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

