"""Fuzzing the client connection core: callers and a scheduler doing everything they may, in any order.

A hypothesis state machine drives the sans-I/O core through connection_harness.py. Callers submit tasks
(one or many per sink), forget some, clear, and make requests that wait for an answer; the scheduler
welcomes (or not), sends results (duplicates, stored ones, failures, cancels, ids it never got), answers
requests, echoes heartbeats, refuses, disconnects or falls silent; the fetch thread returns what it
fetched; the client closes. After every step:

- no task has more than one outcome, and one the core is over with has exactly one;
- the hello went first, and again only after an "unknown peer" refusal (a restarted scheduler, or a hello
  lost before the welcome); until a welcome answered it nothing else left but heartbeats; after the end
  or the close nothing left at all; no task went to one scheduler twice (each welcome starts anew);
- nothing waits past its timeout: once no scheduler that knows the client has been heard for longer than
  the timeout (or no welcome came within it), the link is over; a request is settled once its deadline
  has passed.

At the end the client closes: every task queued has exactly one outcome, and every request its answer
or an error.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
from connection_harness import RecordingSink, SimulatedConnection, batch, welcome
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from scaler.client.connection_actions import (
    CancelPending,
    Ended,
    Fetch,
    ForgetTasks,
    Reply,
    SchedulerRequest,
    Send,
    SendHeartbeat,
    Welcomed,
)
from scaler.client.connection_refusal import RefusalKind
from scaler.client.stored_results import FetchedResults
from scaler.errors import ObjectLostError
from scaler.protocol import messages as m

pytestmark = pytest.mark.timeout(120)

TIMEOUT = 3.0
HEARTBEAT = 1.0
REQUEST_KINDS = [(m.ClearRequest(), m.ClearResponse), (m.DrainWorkers(worker_names=["w"]), m.DrainWorkersResponse)]
ANSWERS = {m.ClearResponse: m.ClearResponse(canceled_tasks=0), m.DrainWorkersResponse: m.DrainWorkersResponse()}


class ConnectionCoreFuzz(RuleBasedStateMachine):
    link: SimulatedConnection

    @initialize()
    def start(self) -> None:
        self.link = SimulatedConnection(timeout_seconds=TIMEOUT, heartbeat_interval_seconds=HEARTBEAT)
        self.sinks: dict[int, RecordingSink] = {}  # every task queued, with its sink
        self.forgotten: set[int] = set()
        self.next_task_id = 1
        self.requests: list[tuple[SchedulerRequest, float]] = []  # with the time each was queued
        self.fetching: list[m.StoredResult] = []
        self.last_heard = 0.0
        self.started = 0.0
        self.checked_actions = 0
        self.welcomed_at: int | None = None  # index of the first Welcomed action
        self.linked = False  # welcomed, and no hello sent since
        self.unknown_peer_refusals = 0
        self.hellos = 0
        self.ended_at: int | None = None
        self.sent_task_ids: collections.Counter[int] = collections.Counter()

    # ------------------------------------------------------------------------------------------ helpers

    def sent_ids(self) -> list[int]:
        return sorted(self.sent_task_ids)

    def queue(self, *items: Any) -> None:
        self.link.queue(*items)

    def hear(self, message: m.Message) -> None:
        if not isinstance(message, m.Refused):  # a scheduler that refuses the client does not know it
            self.last_heard = self.link.now
        elif message.reason.startswith("unknown peer"):
            self.unknown_peer_refusals += 1
        for action in self.link.receive(message):
            if isinstance(action, Fetch):
                self.fetching.extend(action.stored)

    # ------------------------------------------------------------------------------------------ callers

    @rule(count=st.integers(1, 5), shared=st.booleans())
    def submit(self, count: int, shared: bool) -> None:
        task_ids = list(range(self.next_task_id, self.next_task_id + count))
        self.next_task_id += count
        if shared:
            sink = RecordingSink()
            self.sinks.update(dict.fromkeys(task_ids, sink))
            self.queue(batch(task_ids, sink))
            return
        items = []
        for task_id in task_ids:
            sink = RecordingSink()
            self.sinks[task_id] = sink
            items.append(batch([task_id], sink))
        self.queue(*items)

    @precondition(lambda self: self.sinks)
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        task_ids = data.draw(st.lists(st.sampled_from(sorted(self.sinks)), min_size=1, max_size=3, unique=True))
        self.forgotten.update(task_ids)
        self.queue(ForgetTasks(task_ids))

    @rule()
    def clear(self) -> None:
        request = CancelPending()
        self.queue(request)
        assert request.done.is_set()

    @rule(kind=st.sampled_from(REQUEST_KINDS), timeout=st.sampled_from([0.5, 1.0, 30.0]))
    def ask(self, kind: tuple[m.Message, type], timeout: float) -> None:
        request = SchedulerRequest(kind[0], kind[1], timeout, Reply())
        self.requests.append((request, self.link.now))
        self.queue(request)

    # ------------------------------------------------------------------------------------------ scheduler

    @rule()
    def send_welcome(self) -> None:
        self.hear(welcome())

    @precondition(lambda self: self.sent_task_ids)
    @rule(data=st.data(), outcome=st.sampled_from(["result", "raised", "canceled", "not found", "stored"]))
    def send_outcomes(self, data: st.DataObject, outcome: str) -> None:
        """Outcomes of tasks the scheduler got, duplicates included."""
        task_ids = data.draw(st.lists(st.sampled_from(self.sent_ids()), min_size=1, max_size=4))
        if outcome == "result":
            message = m.TaskResults(task_ids, [b"r"] * len(task_ids), [])
        elif outcome == "stored":
            message = m.TaskResults([], [], [], stored=[
                m.StoredResult(task_id, task_id.to_bytes(32, "big"), 10, "tcp://store:1") for task_id in task_ids
            ])
        else:
            kind = {"raised": m.FailureKind.RAISED, "canceled": m.FailureKind.CANCELED,
                    "not found": m.FailureKind.NOT_FOUND}[outcome]
            message = m.TaskResults([], [], [m.TaskFailure(task_id, kind, "E", "boom") for task_id in task_ids])
        self.hear(message)

    @rule(task_id=st.integers(10_000, 10_010))
    def send_result_of_a_task_never_sent(self, task_id: int) -> None:
        self.hear(m.TaskResults([task_id], [b"r"], []))

    @precondition(lambda self: self.fetching)
    @rule(data=st.data(), lost=st.booleans())
    def fetch_thread_returns(self, data: st.DataObject, lost: bool) -> None:
        count = data.draw(st.integers(1, len(self.fetching)))
        done, self.fetching = self.fetching[:count], self.fetching[count:]
        if lost:
            fetched = FetchedResults(m.TaskResults([], [], []), [(s.task_id, ObjectLostError("gone")) for s in done])
        else:
            fetched = FetchedResults(m.TaskResults([s.task_id for s in done], [b"f"] * len(done), []), [])
        self.link.act(self.link.core.on_fetched(fetched, self.link.now))

    @rule(reply_type=st.sampled_from([m.ClearResponse, m.DrainWorkersResponse]))
    def answer(self, reply_type: type) -> None:
        self.hear(ANSWERS[reply_type])

    @rule()
    def echo(self) -> None:
        self.hear(m.HeartbeatEcho())

    @rule(seconds=st.sampled_from([0.1, 0.3, 0.5, 1.0, 2.0, 3.5]))
    def time_passes(self, seconds: float) -> None:
        self.link.tick(seconds)

    @rule(how=st.sampled_from(["unknown peer", "protocol version", "a rule", "keys", "disconnect", "close"]),
          dice=st.integers(0, 5))
    def end_the_link(self, how: str, dice: int) -> None:
        """A refusal, a disconnect or the client's close, on one roll in six: a link ended early tests little."""
        if dice:
            return
        if how == "close":
            self.link.core.close()
        elif how == "keys":
            self.link.act(self.link.core.on_refused(RefusalKind.AUTHENTICATION, "handshake failed", self.link.now))
        elif how == "disconnect":
            self.hear(m.Disconnect(reason="shutting down"))
        else:
            self.hear(m.Refused(reason={
                "unknown peer": "unknown peer: send hello first (or you were timed out)",
                "protocol version": "protocol version 2 not supported, scheduler speaks 1",
            }.get(how, how)))

    @rule()
    def protocol_error_or_cancel_refused(self) -> None:
        self.hear(m.ProtocolError(reason="x"))
        self.hear(m.CancelRefused(task_ids=self.sent_ids()[:2]))

    # ------------------------------------------------------------------------------------------ invariants

    @invariant()
    def what_left_and_when(self) -> None:
        actions = self.link.actions
        for index in range(self.checked_actions, len(actions)):
            action = actions[index]
            if isinstance(action, Welcomed):
                assert not self.linked, "welcomed twice without a hello between"
                if self.welcomed_at is None:
                    self.welcomed_at = index
                self.linked = True
                self.sent_task_ids.clear()  # a scheduler that took the client back gets what is unfinished
            elif isinstance(action, Ended):
                assert self.ended_at is None, "ended twice"
                self.ended_at = index
            elif isinstance(action, (Send, SendHeartbeat)):
                message = action.message if isinstance(action, Send) else m.Heartbeat()
                assert self.ended_at is None, f"{message} sent after the end"
                if isinstance(message, m.Hello):
                    assert index == 0 or self.hellos <= self.unknown_peer_refusals, "a hello nothing asked for"
                    self.hellos += 1
                    self.linked = False
                    continue
                assert index != 0, "the first message is not the hello"
                if not self.linked:
                    assert isinstance(message, m.Heartbeat), f"{message} sent before the welcome"
                if isinstance(message, m.TaskSubmission):
                    for group in message.groups:
                        self.sent_task_ids.update(group.task_ids)
        self.checked_actions = len(actions)
        assert all(count == 1 for count in self.sent_task_ids.values()), "a task sent twice"
        assert set(self.sent_task_ids) <= set(self.sinks)

    @invariant()
    def at_most_one_outcome_each_and_exactly_one_once_over(self) -> None:
        core = self.link.core
        for task_id, sink in self.sinks.items():
            outcomes = sink.outcomes.get(task_id, [])
            assert len(outcomes) <= 1, f"task {task_id} got {outcomes}"
            if core.is_over and task_id not in self.forgotten:
                assert len(outcomes) == 1, f"task {task_id} has no outcome although the link is over"
        if core.is_over:
            assert len(core.pending) == 0
            assert all(request.reply.settled for request, _ in self.requests)

    @invariant()
    def nothing_waits_past_its_timeout(self) -> None:
        core = self.link.core
        now = self.link.now
        if now - (self.last_heard if self.welcomed_at is not None else self.started) > TIMEOUT:
            assert core.is_over, "the scheduler is silent past the timeout and the link still waits"
        for request, queued_at in self.requests:
            if now >= queued_at + request.timeout_seconds:
                assert request.reply.settled, "a request waits past its deadline"

    def teardown(self) -> None:
        if not hasattr(self, "link"):
            return
        self.link.core.close()
        self.link.queue()
        for task_id, sink in self.sinks.items():
            if task_id not in self.forgotten:
                assert len(sink.outcomes.get(task_id, [])) == 1
        assert all(request.reply.settled for request, _ in self.requests)


ConnectionCoreFuzz.TestCase.settings = settings(
    max_examples=150, stateful_step_count=50, database=None, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_connection_core_fuzz = ConnectionCoreFuzz.TestCase
