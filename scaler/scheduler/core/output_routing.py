"""What tasks print, on its way from the worker running them to their client (TaskOutput, PROTOCOL.md §20).

A chunk goes on only for a task that asked (TaskGroup.streamOutput) and that this very worker holds: a worker
cannot write into another worker's tasks, nor into a client's that never asked. The worker's name is the
scheduler's to give (its hello), not the worker's message.
"""

from __future__ import annotations

from scaler.protocol import messages as m
from scaler.scheduler.core.message_rules import output_problem
from scaler.scheduler.core.outgoing import Outgoing
from scaler.scheduler.core.peer_registry import WorkerPeer
from scaler.scheduler.core.task_record import TaskRecord


def route_output(worker: WorkerPeer, output: m.TaskOutput, records: dict[int, TaskRecord], out: list[Outgoing]) -> None:
    problem = output_problem(output)
    if problem is not None:
        out.append((worker.identity, m.ProtocolError(reason=problem)))
        return
    by_client: dict[bytes, m.TaskOutput] = {}
    for task_id, stream, text in zip(output.task_ids, output.streams, output.texts):
        record = records.get(task_id)
        if record is None or record.worker is not worker or not record.signature.stream_output:
            continue  # finished, moved, or never asked: nobody wants it
        forwarded = by_client.get(record.client.identity)
        if forwarded is None:
            forwarded = by_client[record.client.identity] = m.TaskOutput(
                task_ids=[], streams=[], texts=[], worker=worker.name
            )
        forwarded.task_ids.append(task_id)
        forwarded.streams.append(stream)
        forwarded.texts.append(text)
    out.extend(by_client.items())
