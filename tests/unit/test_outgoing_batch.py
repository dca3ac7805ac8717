"""The scheduler's I/O shell merges the results one wake's messages send to one client, and reorders nothing."""

from __future__ import annotations

from scaler.protocol import messages as m
from scaler.scheduler.outgoing_batch import OutgoingBatch

CLIENT, OTHER, WORKER = b"client", b"other", b"worker"


def _results(*task_ids: int, payload: bytes = b"r") -> m.TaskResults:
    return m.TaskResults(succeeded_ids=list(task_ids), payloads=[payload] * len(task_ids), failures=[])


def test_results_for_one_client_from_several_messages_go_out_as_one() -> None:
    batch = OutgoingBatch()
    batch.add([(CLIENT, _results(1, 2)), (WORKER, m.HeartbeatEcho())])
    batch.add([(OTHER, _results(3))])
    batch.add([(CLIENT, _results(4)), (OTHER, _results(5))])
    failure = m.TaskFailure(task_id=6, kind=m.FailureKind.RAISED, type_name="E", message="boom")
    batch.add([(CLIENT, m.TaskResults(succeeded_ids=[], payloads=[], failures=[failure]))])
    assert batch.handled == 4
    outgoing = batch.take()
    assert [identity for identity, _ in outgoing] == [CLIENT, WORKER, OTHER]
    merged = outgoing[0][1]
    assert isinstance(merged, m.TaskResults)
    assert merged.succeeded_ids == [1, 2, 4] and len(merged.payloads) == 3 and merged.failures == [failure]
    other = outgoing[2][1]
    assert isinstance(other, m.TaskResults) and other.succeeded_ids == [3, 5]
    assert batch.take() == [] and batch.handled == 0


def test_results_never_overtake_another_message_to_the_same_client() -> None:
    batch = OutgoingBatch()
    batch.add([(CLIENT, _results(1))])
    batch.add([(CLIENT, m.ClearResponse(canceled_tasks=0)), (WORKER, m.HeartbeatEcho())])
    batch.add([(CLIENT, _results(2))])
    batch.add([(CLIENT, _results(3))])
    outgoing = batch.take()
    assert [type(message).__name__ for _, message in outgoing] == [
        "TaskResults", "ClearResponse", "HeartbeatEcho", "TaskResults"
    ]
    assert [message.succeeded_ids for _, message in outgoing if isinstance(message, m.TaskResults)] == [[1], [2, 3]]


def test_a_merged_message_stays_far_below_the_frame_limits() -> None:
    batch = OutgoingBatch()
    for task_id in range(40):
        batch.add([(CLIENT, _results(task_id, payload=b"x" * 100_000))])
    outgoing = batch.take()
    assert len(outgoing) > 1
    assert all(sum(len(p) for p in message.payloads) <= 1 << 20 for _, message in outgoing)
    assert [task_id for _, message in outgoing for task_id in message.succeeded_ids] == list(range(40))
