"""The client connection core's rules, one at a time: handshake, refusals, heartbeats, timeouts, outcomes,
requests that wait for an answer (connection_harness.py drives the core with no socket)."""

from __future__ import annotations

import threading

import pytest
from connection_harness import ADDRESS, RecordingSink, SimulatedConnection, batch, succeeded, welcome

from scaler.client.connection import ClientConnection
from scaler.client.connection_actions import (
    CancelPending,
    DirectoryChanged,
    EndKind,
    Fetch,
    ForgetTasks,
    Reply,
    ResendObjects,
    SchedulerRequest,
    Send,
)
from scaler.client.connection_refusal import RefusalKind
from scaler.client.future import ScalerFuture
from scaler.errors import ConnectionFailedError, SchedulerLostError
from scaler.protocol import messages as m
from scaler.protocol.serializer import DefaultSerializer
from scaler.protocol.task_signature import TaskSignature

# ---------------------------------------------------------------------------------------------- handshake


def test_the_hello_goes_first_and_submissions_wait_for_the_welcome_then_leave_in_order() -> None:
    link = SimulatedConnection()
    sink = RecordingSink()
    link.queue(batch([1], sink), m.ObjectPayload(object_id=b"o" * 32, payload=b"x"), batch([2], sink))
    assert [type(message) for message in link.sent()] == [m.Hello]

    link.receive(welcome())
    assert len(link.welcomed()) == 1
    assert link.sent_task_ids() == [1, 2]


def test_the_welcome_sets_the_limits_and_may_shorten_the_heartbeat_interval() -> None:
    link = SimulatedConnection(heartbeat_interval_seconds=5.0)
    link.receive(m.Welcome(heartbeat_interval_ms=1000, max_frame_bytes=100, max_control_frame_bytes=1000))
    assert link.core.limits.inline_budget == 500
    link.tick(1.0)
    assert link.sent()[-1] == m.Heartbeat()


def test_no_welcome_within_the_timeout_fails_what_is_queued_as_unreachable() -> None:
    link = SimulatedConnection(timeout_seconds=3.0)
    sink = RecordingSink()
    link.queue(batch([1], sink))
    link.tick(3.0)
    assert not link.ended()
    link.tick(0.1)
    (ended,) = link.ended()
    assert ended.kind is EndKind.UNREACHABLE and isinstance(ended.error, ConnectionFailedError)
    assert "could not connect to the scheduler at " + ADDRESS in str(ended.error)
    assert sink.outcomes[1] == [("failed", ended.error)]


# ---------------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("reason, kind_text", [
    ("protocol version 9 not supported, scheduler speaks 1", "use a client of the scheduler's protocol version"),
    ("a rule of its own", "refused this client: a rule of its own"),
])
def test_a_refusal_before_the_welcome_is_a_failed_connection_that_says_why(reason: str, kind_text: str) -> None:
    link = SimulatedConnection()
    link.receive(m.Refused(reason=reason))
    (ended,) = link.ended()
    assert ended.kind is EndKind.REFUSED
    assert type(ended.error) is ConnectionFailedError and kind_text in str(ended.error)


def test_a_refusal_after_the_welcome_other_than_unknown_peer_fails_every_waiting_task() -> None:
    """"unknown peer" is a restart, which the client resumes from (test_connection_resume.py); anything else
    the scheduler refuses after the welcome ends the link."""
    link = SimulatedConnection()
    link.receive(welcome())
    sink = RecordingSink()
    link.queue(batch([1, 2], sink))
    link.receive(m.Refused(reason="a rule of its own"))
    (ended,) = link.ended()
    assert ended.kind is EndKind.LOST and isinstance(ended.error, SchedulerLostError)
    assert "no longer knows this client" in str(ended.error)
    assert sink.outcomes == {1: [("failed", ended.error)], 2: [("failed", ended.error)]}


def test_rejected_curve_keys_are_a_refusal_that_names_the_keys() -> None:
    link = SimulatedConnection()
    link.act(link.core.on_refused(RefusalKind.AUTHENTICATION, "handshake failed", link.now))
    (ended,) = link.ended()
    assert ended.kind is EndKind.REFUSED and "rejected this client's CURVE keys" in str(ended.error)


def test_a_disconnect_from_the_scheduler_fails_every_waiting_task() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    sink = RecordingSink()
    link.queue(batch([1], sink))
    link.receive(m.Disconnect(reason="shutting down"))
    assert isinstance(sink.outcomes[1][0][1], SchedulerLostError)


# ---------------------------------------------------------------------------------------------- time


def test_heartbeats_go_out_every_interval_before_and_after_the_welcome() -> None:
    link = SimulatedConnection(heartbeat_interval_seconds=1.0)
    link.tick(0.5)
    assert m.Heartbeat() not in link.sent()
    link.tick(0.5)
    assert link.sent().count(m.Heartbeat()) == 1
    link.receive(welcome())
    link.tick(1.0)
    assert link.sent().count(m.Heartbeat()) == 2


def test_silence_past_the_timeout_loses_the_scheduler_and_any_message_counts_as_word() -> None:
    link = SimulatedConnection(timeout_seconds=5.0)
    link.receive(welcome())
    sink = RecordingSink()
    link.queue(batch([1], sink))
    link.tick(4.0)
    link.receive(m.HeartbeatEcho())
    link.tick(4.0)
    assert not link.ended()
    link.tick(1.5)
    (ended,) = link.ended()
    assert ended.kind is EndKind.LOST and "no word from the scheduler" in str(ended.error)
    assert sink.outcomes[1] == [("failed", ended.error)]


def test_the_next_decision_is_never_later_than_the_next_heartbeat_or_timeout() -> None:
    link = SimulatedConnection(timeout_seconds=5.0, heartbeat_interval_seconds=2.0)
    assert link.core.seconds_to_next_decision(0.0) == 2.0
    link.receive(welcome())
    link.tick(1.5)
    assert link.core.seconds_to_next_decision(link.now) == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------------- outcomes


def test_each_result_reaches_its_sink_once_and_a_duplicate_is_dropped() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    sink = RecordingSink()
    link.queue(batch([1, 2], sink))
    link.receive(succeeded(1))
    link.receive(succeeded(1, 2))
    assert sink.outcomes == {1: [("result", b"r1")], 2: [("result", b"r2")]}
    assert len(link.core.pending) == 0


def test_stored_results_of_waiting_tasks_are_fetched_and_those_of_forgotten_tasks_let_go() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    sink = RecordingSink()
    link.queue(batch([1, 2], sink), ForgetTasks([2]))
    stored = [m.StoredResult(1, b"a" * 32, 10, "tcp://store:1"), m.StoredResult(2, b"b" * 32, 10, "tcp://store:1")]
    actions = link.receive(m.TaskResults([], [], [], stored=stored))
    assert actions == [Fetch([stored[0]]), Send(m.DeleteObjects(object_ids=[b"b" * 32]))]


def test_clear_cancels_every_waiting_task_and_says_when_it_is_done() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    sink = RecordingSink()
    request = CancelPending()
    link.queue(batch([1, 2], sink), request)
    assert request.done.is_set()
    assert sink.outcomes == {1: [("canceled", None)], 2: [("canceled", None)]}


def test_tasks_queued_after_the_end_fail_at_once_and_after_a_close_are_canceled() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    link.receive(m.Disconnect(reason="gone"))
    late = RecordingSink()
    link.queue(batch([5], late))
    assert late.outcomes[5][0][0] == "failed"

    closed = SimulatedConnection()
    closed.core.close()
    sink = RecordingSink()
    closed.queue(batch([6], sink))
    assert sink.outcomes == {6: [("canceled", None)]}


def test_the_scheduler_asking_for_lost_objects_and_a_new_directory_go_to_the_shell() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    assert link.receive(m.ResendObjects(object_ids=[b"o" * 32])) == [ResendObjects([b"o" * 32])]
    directory = m.StoreDirectory()
    assert link.receive(directory) == [DirectoryChanged(directory)]


# ---------------------------------------------------------------------------------------------- requests


def request(message: m.Message, reply_type: type, timeout: float = 5.0) -> SchedulerRequest:
    return SchedulerRequest(message, reply_type, timeout, Reply())


def test_an_answer_after_its_request_timed_out_is_not_taken_by_the_next_request() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    first = request(m.ClearRequest(), m.ClearResponse, timeout=1.0)
    link.queue(first)
    link.tick(1.0)
    assert isinstance(first.reply.error, ConnectionFailedError)
    assert "no ClearResponse from the scheduler within 1s" in str(first.reply.error)

    second = request(m.ClearRequest(), m.ClearResponse)
    link.queue(second)
    link.receive(m.ClearResponse(canceled_tasks=1))  # the late answer to the first request
    assert not second.reply.settled
    link.receive(m.ClearResponse(canceled_tasks=2))
    assert second.reply.message == m.ClearResponse(canceled_tasks=2)


def test_a_second_request_of_a_kind_is_sent_only_when_the_first_has_its_answer() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    first = request(m.DrainWorkers(worker_names=["first"]), m.DrainWorkersResponse)
    second = request(m.DrainWorkers(worker_names=["second"]), m.DrainWorkersResponse)
    link.queue(first, second)
    assert m.DrainWorkers(worker_names=["second"]) not in link.sent()
    assert link.receive(m.DrainWorkersResponse(unknown=["first"])) == [
        Send(m.DrainWorkers(worker_names=["second"]))
    ]
    link.receive(m.DrainWorkersResponse(unknown=["second"]))
    assert first.reply.message == m.DrainWorkersResponse(unknown=["first"])
    assert second.reply.message == m.DrainWorkersResponse(unknown=["second"])


def test_the_next_request_of_a_kind_waits_for_the_welcome_like_any_other_message() -> None:
    """Found by the fuzz: an answer before the welcome sent the next request of its kind at once."""
    link = SimulatedConnection()
    first = request(m.ClearRequest(), m.ClearResponse)
    second = request(m.ClearRequest(), m.ClearResponse)
    link.queue(first, second)
    link.receive(m.ClearResponse(canceled_tasks=0))
    assert [type(message) for message in link.sent()] == [m.Hello]
    link.receive(welcome())
    assert [type(message) for message in link.sent()] == [m.Hello, m.ClearRequest, m.ClearRequest]


def test_a_request_waiting_when_the_link_ends_gets_the_reason() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    waiting = request(m.ShutdownRequest(), m.ShutdownResponse)
    link.queue(waiting)
    link.receive(m.Disconnect(reason="gone"))
    assert isinstance(waiting.reply.error, SchedulerLostError)


def test_a_reply_wakes_a_caller_waiting_on_another_thread() -> None:
    reply = Reply()
    waiter = threading.Thread(target=lambda: reply.wait(30.0))
    waiter.start()
    reply.give(m.ClearResponse(canceled_tasks=0))
    waiter.join(timeout=30.0)
    assert not waiter.is_alive() and reply.message == m.ClearResponse(canceled_tasks=0)


# ---------------------------------------------------------------------------------------------- the shell


def test_a_task_handed_to_a_connection_whose_io_thread_is_over_is_settled_at_once() -> None:
    """A submit that passed check_open just before the link closed must not leave its future waiting forever."""
    connection = ClientConnection("tcp://127.0.0.1:1", "test", timeout_seconds=30, heartbeat_interval_seconds=1)
    connection.close()
    future = ScalerFuture(1, connection, DefaultSerializer())
    connection.submit_task(TaskSignature(function_id=b"f" * 16, args_per_task=0), 1, [], future, [])
    assert future.cancelled()


def test_a_kept_result_in_a_store_is_neither_fetched_nor_let_go_and_a_remade_one_replaces_it() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    # Its connection is only asked whether it is open when the future lets go of its result.
    closed = type("ClosedConnection", (), {"is_open": False})()
    kept = ScalerFuture(1, connection=closed, serializer=DefaultSerializer(), keep=True)  # type: ignore[arg-type]
    link.queue(batch([1], kept))
    first = m.StoredResult(1, b"a" * 16, 10, "tcp://store:1")
    assert link.receive(m.TaskResults([], [], [], stored=[first])) == []
    assert kept.done() and kept._kept is not None and kept._kept.stored == first
    remade = m.StoredResult(1, b"b" * 16, 10, "tcp://store:2")  # the first store was lost (lineage)
    assert link.receive(m.TaskResults([], [], [], stored=[remade])) == []
    assert kept._kept.stored == remade
