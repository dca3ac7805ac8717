"""The client connection core across a scheduler restart: waiting through the silence, hello again under the
same id prefix, what is sent again and in which order, and one outcome per task whatever arrives twice."""

from __future__ import annotations

from typing import Any

import pytest
from connection_harness import SIGNATURE, RecordingSink, SimulatedConnection, batch, succeeded, welcome

from scaler.client.connection_actions import EndKind, GraphRequest, Reply, SchedulerRequest, SendHeartbeat, Welcomed
from scaler.client.outbox import TaskBatch
from scaler.client.stored_results import FetchedResults
from scaler.errors import ConnectionFailedError, ObjectLostError, SchedulerLostError
from scaler.protocol import messages as m

UNKNOWN = m.Refused(reason="unknown peer: send hello first (or you were timed out)")
PREFIX = 7  # connection_harness.welcome()'s


def hellos(link: SimulatedConnection) -> list[m.Hello]:
    return [message for message in link.sent() if isinstance(message, m.Hello)]


def sent_since(link: SimulatedConnection, mark: int) -> list[m.Message]:
    return [message for message in link.sent()[mark:] if not isinstance(message, m.Heartbeat)]


def graph(task_ids: list[int], sink: RecordingSink) -> GraphRequest:
    group = SIGNATURE.new_group()
    group.task_ids.extend(task_ids)
    group.args.extend(b"g%d" % task_id for task_id in task_ids)
    futures: dict[int, Any] = dict.fromkeys(task_ids, sink)  # a sink stands in for each future
    return GraphRequest(m.TaskSubmission(objects=[], groups=[group]), futures)


def restarted(link: SimulatedConnection) -> int:
    """The new scheduler refuses what the client sends; returns where the messages sent after that begin."""
    mark = len(link.sent())
    link.receive(UNKNOWN)
    return mark


def test_a_silent_scheduler_keeps_the_futures_waiting_until_the_timeout_then_fails_them() -> None:
    link = SimulatedConnection(timeout_seconds=5.0)
    link.receive(welcome())
    sink = RecordingSink()
    link.queue(batch([1], sink))
    link.tick(4.9)
    assert not link.ended() and sink.outcomes == {}
    link.tick(0.2)
    (ended,) = link.ended()
    assert ended.kind is EndKind.LOST and sink.outcomes == {1: [("failed", ended.error)]}


def test_after_a_restart_the_client_says_hello_again_with_its_prefix_and_sends_again_what_is_unfinished() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    tasks, graph_sink = RecordingSink(), RecordingSink()
    function = m.ObjectPayload(object_id=b"f" * 16, name="f", payload=b"function")
    held = m.ObjectPayload(object_id=b"h" * 16, name="big", payload=b"", size=10, holder="tcp://store:1")
    link.queue(function, held, batch([1, 2, 3], tasks), graph([10, 11], graph_sink), batch([4], tasks))
    link.receive(succeeded(2))
    link.receive(succeeded(10))

    mark = restarted(link)
    assert hellos(link)[-1].id_prefix == PREFIX and len(hellos(link)) == 2
    link.queue(batch([5], tasks))  # a submit during the outage waits for the welcome
    link.receive(UNKNOWN)  # the refusal of something sent before the hello: not a reason to hello again
    assert [type(message) for message in sent_since(link, mark)] == [m.Hello]

    link.receive(welcome())
    assert len(link.welcomed()) == 2 and not link.ended()
    again = [message for message in sent_since(link, mark) if isinstance(message, m.TaskSubmission)]
    assert again[0].objects == [function, held]  # objects first: every task finds what it names
    assert [list(group.task_ids) for message in again for group in message.groups] == [[1, 3, 4, 5], [10, 11]]


def test_a_result_arriving_twice_across_a_restart_completes_its_task_once() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    sink = RecordingSink()
    link.queue(batch([1, 2], sink))
    restarted(link)
    link.receive(succeeded(1))  # the old scheduler's, read after the new one refused us
    link.receive(welcome())
    assert link.sent_task_ids()[-1:] == [2]
    link.receive(succeeded(1, 2))
    link.receive(succeeded(2))
    assert sink.outcomes == {1: [("result", b"r1")], 2: [("result", b"r2")]}
    assert link.core._records.unfinished(link.core.pending) == []  # the records went with the outcomes


def test_a_partly_finished_batch_is_sent_again_with_the_rows_still_waiting_and_their_object_positions() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    sink = RecordingSink()
    signature = SIGNATURE.__class__(function_id=b"f" * 16, args_per_task=2)
    args = [b"a1", b"o" * 16, b"a2", b"p" * 16, b"a3", b"q" * 16]
    link.queue(TaskBatch(signature, [1, 2, 3], args, [1, 3, 5], m.inline_bytes(args), sink))
    link.receive(succeeded(2))
    mark = restarted(link)
    link.receive(welcome())
    (again,) = [message for message in sent_since(link, mark) if isinstance(message, m.TaskSubmission)]
    (group,) = again.groups
    assert list(group.task_ids) == [1, 3] and list(group.args) == [b"a1", b"o" * 16, b"a3", b"q" * 16]
    assert list(group.object_arg_indices) == [1, 3]


def test_deleted_objects_and_those_a_clear_dropped_are_not_sent_again() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    kept, deleted, cleared = (m.ObjectPayload(object_id=bytes([n]) * 16, payload=b"x") for n in (1, 2, 3))
    link.queue(cleared)
    link.queue(SchedulerRequest(m.ClearRequest(), m.ClearResponse, 5.0, Reply()))
    link.receive(m.ClearResponse(canceled_tasks=0))
    link.queue(kept, deleted, m.DeleteObjects(object_ids=[deleted.object_id]))
    mark = restarted(link)
    link.receive(welcome())
    (again,) = [message for message in sent_since(link, mark) if isinstance(message, m.TaskSubmission)]
    assert again.objects == [kept]


def test_a_request_sent_to_the_old_scheduler_is_sent_again_and_answered_once() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    reply = Reply()
    link.queue(SchedulerRequest(m.DrainWorkers(worker_names=["w"]), m.DrainWorkersResponse, 5.0, reply))
    mark = restarted(link)
    link.receive(welcome())
    assert [type(message) for message in sent_since(link, mark)] == [m.Hello, m.DrainWorkers]
    link.receive(m.DrainWorkersResponse(draining=["w"]))
    assert reply.settled and reply.message == m.DrainWorkersResponse(draining=["w"])


def test_hello_again_while_refusals_keep_coming_with_a_bounded_backoff() -> None:
    link = SimulatedConnection(timeout_seconds=60.0, heartbeat_interval_seconds=100.0)
    link.receive(welcome())
    restarted(link)
    times = []
    for _ in range(100):
        link.tick(0.25)
        count = len(hellos(link))
        link.receive(UNKNOWN)  # the hello was lost: the new scheduler keeps refusing
        if len(hellos(link)) > count:
            times.append(link.now)
    waits = [later - earlier for earlier, later in zip(times, times[1:])]
    assert waits[:3] == pytest.approx([1.0, 2.0, 4.0], abs=0.3) and max(waits) <= 5.25


def test_no_scheduler_taking_the_client_back_within_the_timeout_fails_the_futures() -> None:
    link = SimulatedConnection(timeout_seconds=5.0)
    link.receive(welcome())
    sink = RecordingSink()
    link.queue(batch([1], sink))
    link.tick(2.0)
    restarted(link)
    for _ in range(6):  # refusals are no sign of life: the clock runs from the last word of the old scheduler
        link.tick(0.5)
        link.receive(UNKNOWN)
    assert not link.ended()
    link.tick(2.1)
    (ended,) = link.ended()
    assert isinstance(ended.error, SchedulerLostError) and "took it back" in str(ended.error)
    assert sink.outcomes == {1: [("failed", ended.error)]}


@pytest.mark.parametrize("answer, text", [
    (m.Welcome(id_prefix=PREFIX + 1), "gave it a new id prefix"),
    (m.Refused(reason="id prefix 0x7 is taken: this scheduler gave it to a client already"), "is taken"),
])
def test_a_scheduler_that_will_not_take_the_prefix_back_ends_the_link(answer: m.Message, text: str) -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    sink = RecordingSink()
    link.queue(batch([1], sink))
    restarted(link)
    link.receive(answer)
    (ended,) = link.ended()
    assert ended.kind is EndKind.LOST and isinstance(ended.error, SchedulerLostError) and text in str(ended.error)
    assert sink.outcomes == {1: [("failed", ended.error)]}
    assert len(link.welcomed()) == 1


def test_a_hello_lost_before_the_first_welcome_is_said_again_and_the_client_then_works() -> None:
    """A client started while the scheduler is down: its hello may leave on a connection that drops."""
    link = SimulatedConnection(timeout_seconds=10.0)
    sink = RecordingSink()
    link.queue(batch([1], sink))
    link.tick(3.0)
    link.receive(UNKNOWN)
    assert [hello.id_prefix for hello in hellos(link)] == [0, 0]
    link.receive(welcome())
    assert isinstance(link.actions[-2], Welcomed) and link.sent_task_ids() == [1]
    link.receive(succeeded(1))
    assert sink.outcomes == {1: [("result", b"r1")]}


def test_without_a_welcome_the_lost_hello_is_still_bounded_by_the_timeout() -> None:
    link = SimulatedConnection(timeout_seconds=3.0)
    link.receive(UNKNOWN)
    link.tick(3.1)
    (ended,) = link.ended()
    assert ended.kind is EndKind.UNREACHABLE and isinstance(ended.error, ConnectionFailedError)


def test_a_connection_made_after_the_welcome_asks_at_once_who_listens_there_now() -> None:
    link = SimulatedConnection(heartbeat_interval_seconds=10.0)
    assert link.act(link.core.on_connected(link.now)) == []  # the first connection: the hello is on its way
    link.receive(welcome())
    link.tick(1.0)
    (probe,) = link.act(link.core.on_connected(link.now))
    assert isinstance(probe, SendHeartbeat)


def test_a_stored_result_whose_fetch_fails_across_a_restart_waits_for_the_task_sent_again() -> None:
    """A fetch relayed through the scheduler that died fails; the task was sent again, so its result comes."""
    link = SimulatedConnection()
    link.receive(welcome())
    sink = RecordingSink()
    link.queue(batch([1, 2], sink))
    held = [m.StoredResult(task_id, bytes([task_id]) * 16, 10, "tcp://store:1") for task_id in (1, 2)]
    link.receive(m.TaskResults([], [], [], stored=held))
    restarted(link)
    lost = FetchedResults(m.TaskResults([], [], []), [(1, ObjectLostError("relay gone"))])
    link.act(link.core.on_fetched(lost, link.now))  # during the outage
    link.receive(welcome())
    assert link.sent_task_ids()[-2:] == [1, 2]
    link.act(link.core.on_fetched(FetchedResults(m.TaskResults([], [], []), [(2, ObjectLostError("gone"))]), 0))
    assert sink.outcomes == {}
    link.receive(succeeded(1, 2))
    assert sink.outcomes == {1: [("result", b"r1")], 2: [("result", b"r2")]}


def test_a_fetch_that_fails_without_a_restart_still_fails_its_task() -> None:
    link = SimulatedConnection()
    link.receive(welcome())
    sink = RecordingSink()
    link.queue(batch([1], sink))
    link.receive(m.TaskResults([], [], [], stored=[m.StoredResult(1, b"o" * 16, 10, "tcp://store:1")]))
    error = ObjectLostError("gone")
    link.act(link.core.on_fetched(FetchedResults(m.TaskResults([], [], []), [(1, error)]), link.now))
    assert sink.outcomes == {1: [("failed", error)]}
