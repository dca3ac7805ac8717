"""Objects and how long they live: functions, serializers, send_object() values and shared arguments.

Clients upload an object once and name it by id in their tasks. An object lives while any client owns
it: the uploader, and every client whose tasks use it, even one another client uploaded. A client lets
go of its objects when it clears or leaves, and of single ones with deleteObjects once no unfinished
task of its own names them. Each worker is sent an object once, with the first task that needs it
there, and is told to delete it when the scheduler frees it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from scaler.protocol import messages as m
from scaler.protocol.task_signature import TaskSignature
from scaler.scheduler.core.outgoing import Outgoing
from scaler.scheduler.core.peer_registry import ClientPeer, WorkerPeer
from scaler.scheduler.core.task_record import TaskRecord
from scaler.utility.identifiers import OBJECT_ID_BYTES


@dataclasses.dataclass(slots=True)
class ObjectRecord:
    payload: m.Buffer
    name: str
    # Identities of the clients that keep it alive.
    owners: set[bytes]


class ObjectTable:
    def __init__(self) -> None:
        self.stored: dict[bytes, ObjectRecord] = {}

    def __contains__(self, object_id: bytes) -> bool:
        return object_id in self.stored

    def upload(self, client: ClientPeer, items: list[m.ObjectPayload]) -> str | None:
        """Store the objects of a client's submitTasks, with the client as an owner; the first payload sent
        for an id is the one kept. Returns why nothing was stored, if an id is malformed."""
        if any(len(item.object_id) != OBJECT_ID_BYTES for item in items):
            return f"object ids are {OBJECT_ID_BYTES} bytes long"
        for item in items:
            stored = self.stored.get(item.object_id)
            if stored is None:
                self.stored[item.object_id] = ObjectRecord(
                    payload=item.payload, name=item.name, owners={client.identity}
                )
            else:
                stored.owners.add(client.identity)
            client.object_ids.add(item.object_id)
        return None

    def claim_for_group(self, client: ClientPeer, signature: TaskSignature, group: m.TaskGroup) -> None:
        """The client's accepted group uses its function, serializer and object arguments: it owns them too."""
        for object_id in (signature.function_id, signature.serializer_id):
            if object_id:
                self._claim(client, object_id)
        for flat_index in group.object_arg_indices:
            self._claim(client, bytes(group.args[flat_index]))

    def _claim(self, client: ClientPeer, object_id: bytes) -> None:
        if object_id not in client.object_ids:
            self.stored[object_id].owners.add(client.identity)
            client.object_ids.add(object_id)

    def ship(self, worker: WorkerPeer, object_id: bytes, objects: list[m.ObjectPayload]) -> None:
        """Add the object to `objects` (a submission to the worker) unless the worker has it already."""
        if object_id not in worker.known_object_ids:
            stored = self.stored[object_id]
            objects.append(m.ObjectPayload(object_id=object_id, payload=stored.payload, name=stored.name))
            worker.known_object_ids.add(object_id)

    def delete(
        self,
        client: ClientPeer,
        object_ids: Iterable[bytes],
        records: dict[int, TaskRecord],
        workers: Iterable[WorkerPeer],
        out: list[Outgoing],
    ) -> None:
        """The client drops some of its objects (the hidden objects of shared arguments, once their tasks
        ended). Ids it does not own are ignored, and so are objects an unfinished task of its own names (as
        function, serializer or argument): those stay until clear() or disconnect, since dispatch must
        still find them."""
        doomed = {bytes(object_id) for object_id in object_ids} & client.object_ids
        if doomed and client.task_ids:
            for task_id in client.task_ids:
                record = records[task_id]
                doomed.discard(record.signature.function_id)
                doomed.discard(record.signature.serializer_id)
                if record.object_slots:
                    doomed.difference_update(bytes(record.args[slot]) for slot in record.object_slots)
        if doomed:
            client.object_ids -= doomed
            self._free(client, doomed, workers, out)

    def release_all(self, client: ClientPeer, workers: Iterable[WorkerPeer], out: list[Outgoing]) -> None:
        """The client cleared or left: it owns nothing any more."""
        self._free(client, client.object_ids, workers, out)
        client.object_ids.clear()

    def _free(
        self, client: ClientPeer, object_ids: Iterable[bytes], workers: Iterable[WorkerPeer], out: list[Outgoing]
    ) -> None:
        """The client lets go of these objects; those nobody else owns are deleted here and in the workers."""
        freed = set()
        for object_id in object_ids:
            record = self.stored.get(object_id)
            if record is None:
                continue
            record.owners.discard(client.identity)
            if not record.owners:
                del self.stored[object_id]
                freed.add(object_id)
        if not freed:
            return
        for worker in workers:
            held = worker.known_object_ids & freed
            if held:
                worker.known_object_ids -= held
                out.append((worker.identity, m.DeleteObjects(object_ids=list(held))))
