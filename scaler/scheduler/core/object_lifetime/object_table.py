"""Objects and how long they live: functions, serializers, send_object() values and shared arguments.

Clients upload an object once and name it by id in their tasks. An object lives while any client owns
it: the uploader, and every client whose tasks use it, even one another client uploaded. A client lets
go of its objects when it clears or leaves, and of single ones with deleteObjects once no unfinished
task of its own names them. Each worker is sent an object once, with the first task that needs it
there, and is told to delete it when the scheduler frees it.

A stored object (PROTOCOL.md §13) is known here only by its size and holders, the stores whose data
addresses hold its bytes: a client's object put into its home store, or a task's result a worker wrote
into its store (then `producer` names the task). A result lives while its client has not let go of it
(a quiet graph node has no such owner) and while any unfinished task received it as an argument
(`uses`); when it is freed, its holders are told to delete it as well as the workers that were sent it.
Stores tell which objects they hold (objectsHeld: a copy fetched from another store, or everything after
they registered) and which they lost (objectsLost), so that holders here are the stores that have the bytes.

Kept results (kept_results.py) are objects owned by their client like the others; a small one is kept here
with its payload under an id derived from its task id. A later task of that client that names a finished
kept task receives its object as a use, so the object outlives a delete sent while that task is unfinished.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Iterable
from typing import Callable

from scaler.protocol import messages as m
from scaler.protocol.task_signature import TaskSignature
from scaler.scheduler.core.kept_results import KeptResults
from scaler.scheduler.core.outgoing import Outgoing
from scaler.scheduler.core.peer_registry import ClientPeer, WorkerPeer
from scaler.scheduler.core.store_registry import StoreRegistry
from scaler.scheduler.core.task_record import TaskRecord
from scaler.utility.identifiers import OBJECT_ID_BYTES, kept_result_id, task_of_kept_result_id

# How many freed stored objects are remembered: a store that reports holding one (a copy whose fetch crossed
# the deletion) is told to delete it. Beyond that, an id is forgotten and the copy stays until the store stops.
RECENTLY_FREED = 65_536


@dataclasses.dataclass(slots=True)
class ObjectRecord:
    payload: m.Buffer
    name: str
    # Identities of the clients that keep it alive.
    owners: set[bytes]
    # Stored objects only: the bytes in the stores, the data addresses of the stores that hold them, the
    # task that made it (0: a client's object), and how many unfinished tasks received it as a result.
    size: int = 0
    holders: set[str] = dataclasses.field(default_factory=set)
    producer: int = 0
    # The worker whose processor made it (a result): that processor still has its value, so a dependent
    # placed there reads nothing at all (worker/own_results.py).
    made_by: bytes = b""
    # A result that its maker may not have written into its store yet (worker/own_results.py): it is
    # asked to (publishObjects) once another worker or a client is to read it.
    unpublished: bool = False
    uses: int = 0
    # lineage.py: its last holder is gone; it stays here while something still names it.
    lost: bool = False

    @property
    def byte_count(self) -> int:
        return self.size if self.holders else len(self.payload)


class ObjectTable:
    def __init__(self, stores: StoreRegistry) -> None:
        self.stored: dict[bytes, ObjectRecord] = {}
        self._stores = stores
        # How many entries of `stored` are in stores: placement looks for holders only when there are some.
        self.in_stores = 0
        # Stored results whose last use ended inside TaskTable, which has no output list: freed at `flush`.
        self._unused: list[bytes] = []
        # Lost objects a client stored again (lineage.py takes them after the submission).
        self.recovered: list[bytes] = []
        # lineage.py: told of the objects that leave the table.
        self.on_freed: Callable[[Iterable[bytes]], None] | None = None
        # Makers to ask to write results into their stores: worker identity -> object ids.
        self._to_publish: dict[bytes, list[bytes]] = {}
        # Stored objects freed lately, oldest first (a dict as an ordered set, at most RECENTLY_FREED).
        self._recently_freed: dict[bytes, None] = {}
        # The outcomes of finished tasks submitted with keepResults (kept_results.py).
        self.kept = KeptResults()

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
                record = ObjectRecord(payload=item.payload, name=item.name, owners={client.identity})
                if item.holder:
                    record.size = item.size
                    record.holders.add(item.holder)
                    self.in_stores += 1
                self.stored[item.object_id] = record
            else:
                stored.owners.add(client.identity)
                if stored.lost and (item.holder or item.payload):
                    self._recover(item.object_id, stored, item)
                elif item.holder and stored.holders:
                    # Put again after a store said it held it after all (objectsHeld): that copy is deleted with it.
                    stored.holders.add(item.holder)
            client.object_ids.add(item.object_id)
        return None

    def _recover(self, object_id: bytes, stored: ObjectRecord, item: m.ObjectPayload) -> None:
        """A lost client object sent again (resendObjects, or a store that holds it after all): stored again, or
        inline if its client has no store."""
        stored.lost = False
        if item.holder:
            stored.size = item.size
            stored.holders = {item.holder}
            self.in_stores += 1
        else:
            stored.payload = item.payload
        self.recovered.append(object_id)

    def note_held(
        self, holder: str, object_ids: list[bytes], sizes: list[int], recoverable: Container[bytes]
    ) -> list[bytes]:
        """The store at `holder` holds these objects (objectsHeld): it becomes a holder of those stored here.
        A lost one comes back if it is `recoverable` (a client object asked for again); the ids the store
        should delete are returned: objects freed lately, and lost ones made again under another id. Ids
        never heard of are left alone: their writer has not named them yet."""
        doomed = []
        for object_id, size in zip(object_ids, sizes):
            record = self.stored.get(object_id)
            if record is None:
                if object_id in self._recently_freed:
                    doomed.append(object_id)
            elif record.lost:
                if object_id in recoverable:
                    self._recover(object_id, record, m.ObjectPayload(
                        object_id=object_id, payload=b"", name=record.name, size=size, holder=holder
                    ))
                else:
                    doomed.append(object_id)
            elif record.holders:  # else an inline object: a store's copy of it is not the scheduler's business
                record.holders.add(holder)
        return doomed

    def drop_holder_of(self, holder: str, object_ids: Iterable[bytes]) -> list[bytes]:
        """The store at `holder` lost these objects (objectsLost from the store): the ids left with no holder."""
        orphans = []
        for object_id in object_ids:
            record = self.stored.get(object_id)
            if record is not None and holder in record.holders:
                record.holders.discard(holder)
                if not record.holders:
                    self.in_stores -= 1
                    orphans.append(object_id)
        return orphans

    # ------------------------------------------------------------------------------------------ losses

    def drop_holder(self, holder: str) -> list[bytes]:
        """The store at `holder` is gone: the ids of the objects it was the last holder of."""
        orphans = []
        for object_id, record in self.stored.items():
            if holder in record.holders:
                record.holders.discard(holder)
                if not record.holders:
                    self.in_stores -= 1
                    orphans.append(object_id)
        return orphans

    def drop_holders(self, object_ids: Iterable[bytes], out: list[Outgoing]) -> list[bytes]:
        """A reader could not get these objects from their holders: they count as gone from all of them (a
        holder that still has one is told to delete it). Returns the ids now without a holder."""
        orphans = []
        by_holder: dict[str, list[bytes]] = {}
        for object_id in object_ids:
            record = self.stored.get(object_id)
            if record is None or not record.holders:
                continue
            for holder in record.holders:
                by_holder.setdefault(holder, []).append(object_id)
            record.holders = set()
            self.in_stores -= 1
            orphans.append(object_id)
        for holder, held_ids in by_holder.items():
            store = self._stores.store_of(holder)
            if store is not None:
                out.append((store.identity, m.DeleteObjects(object_ids=held_ids)))
        return orphans

    def mark_lost(self, object_id: bytes, workers: Iterable[WorkerPeer]) -> None:
        """No holder has it: no worker may be shipped it by the old holder again."""
        self.stored[object_id].lost = True
        for worker in workers:
            worker.known_object_ids.discard(object_id)

    def disown(self, client: ClientPeer, object_id: bytes) -> None:
        """The client no longer owns this (lost) result: it will hear of another for the same task."""
        record = self.stored[object_id]
        record.owners.discard(client.identity)
        client.object_ids.discard(object_id)
        if not record.owners and not record.uses:
            self._unused.append(object_id)

    def add_use(self, record: TaskRecord, slot: int, object_id: bytes) -> None:
        """The task receives this stored result in `slot` (a rerun, or a task whose input came back)."""
        self.stored[object_id].uses += 1
        if record.result_objects is None:
            record.result_objects = [object_id]
        else:
            record.result_objects.append(object_id)
        if record.object_slots is None:
            record.object_slots = [slot]
        elif slot not in record.object_slots:
            record.object_slots.append(slot)

    def check_result(self, result: m.StoredResult) -> str | None:
        """Why a worker's stored result cannot be recorded, or None."""
        if len(result.object_id) != OBJECT_ID_BYTES:
            return f"the worker reported a stored result whose object id is not {OBJECT_ID_BYTES} bytes long"
        if result.object_id in self.stored:
            return f"the worker reported a stored result as object {result.object_id.hex()}, an id in use"
        if not result.holder:
            return "the worker reported a stored result without its holder"
        return None

    def add_result(
        self, client: ClientPeer, task_id: int, result: m.StoredResult, uses: int, for_client: bool, made_by: bytes
    ) -> None:
        """A task's result is in a store (checked by check_result): record where, and which worker made it. It
        is kept for its client (`for_client`) and for the `uses` tasks it now feeds."""
        record = ObjectRecord(
            payload=b"", name="result", owners=set(), size=result.size, holders={result.holder}, producer=task_id,
            made_by=made_by, uses=uses, unpublished=bool(made_by),
        )
        if for_client:
            record.owners.add(client.identity)
            client.object_ids.add(result.object_id)
            self._ask_to_publish(result.object_id, record)  # its client reads it from the store
        self.stored[result.object_id] = record
        self.in_stores += 1
        if not uses and not for_client:
            self._unused.append(result.object_id)  # a quiet result nothing waits for any more

    def keep_inline(self, client: ClientPeer, task_id: int, payload: m.Buffer) -> None:
        """A kept task succeeded with a small result: kept here, owned by its client, under its derived id."""
        object_id = kept_result_id(task_id)
        self.stored[object_id] = ObjectRecord(
            payload=payload, name="kept result", owners={client.identity}, producer=task_id
        )
        client.object_ids.add(object_id)
        self.kept.objects[task_id] = object_id

    def resolve_kept(self, client: ClientPeer, record: TaskRecord, slot: int, task_id: int) -> bool:
        """The new task names the finished kept task `task_id` of its client in `slot`: the slot becomes an object
        argument naming its result, used by the task until it ends. False if no such result is kept."""
        object_id = self.kept.objects.get(task_id)
        if object_id is None or client.identity not in self.stored[object_id].owners:
            return False
        record.args[slot] = object_id
        self.add_use(record, slot, object_id)
        return True

    def end_uses(self, object_ids: list[bytes]) -> None:
        """A task that received these stored results as arguments has ended."""
        for object_id in object_ids:
            record = self.stored.get(object_id)
            if record is not None:
                record.uses -= 1
                if record.uses == 0 and not record.owners:
                    self._unused.append(object_id)

    def flush(self, workers: Iterable[WorkerPeer], out: list[Outgoing]) -> None:
        """Free the stored results whose last use ended since the last flush."""
        if self._unused:
            unused, self._unused = self._unused, []
            self._free_unneeded(unused, workers, out)
        self.send_publish_requests(out)

    def _free_unneeded(self, object_ids: Iterable[bytes], workers: Iterable[WorkerPeer], out: list[Outgoing]) -> None:
        """Delete, here, in the workers that were sent them or made them and in their stores, those of these
        objects that nobody owns and no unfinished task uses."""
        freed = set()
        by_holder: dict[str, list[bytes]] = {}
        by_maker: dict[bytes, set[bytes]] = {}
        stored = self.stored
        for object_id in object_ids:
            record = stored.get(object_id)
            if record is None or record.owners or record.uses:
                continue
            del stored[object_id]
            freed.add(object_id)
            if record.producer and self.kept.objects.get(record.producer) == object_id:
                del self.kept.objects[record.producer]
            if record.holders:
                self.in_stores -= 1
                for holder in record.holders:
                    by_holder.setdefault(holder, []).append(object_id)
                self._remember_freed(object_id)
            elif record.lost:
                self._remember_freed(object_id)
            if record.made_by:
                by_maker.setdefault(record.made_by, set()).add(object_id)
        if not freed:
            return
        if self.on_freed is not None:
            self.on_freed(freed)
        for worker in workers:
            held = worker.known_object_ids & freed
            made = by_maker.get(worker.identity)  # its processor may still keep the value (own_results.py)
            if held or made:
                worker.known_object_ids -= held
                out.append((worker.identity, m.DeleteObjects(object_ids=list(held | made if made else held))))
        for holder, held_ids in by_holder.items():
            store = self._stores.store_of(holder)
            if store is not None:  # else the store is gone, and the objects with it
                out.append((store.identity, m.DeleteObjects(object_ids=held_ids)))

    def _remember_freed(self, object_id: bytes) -> None:
        recently_freed = self._recently_freed
        recently_freed[object_id] = None
        if len(recently_freed) > RECENTLY_FREED:
            del recently_freed[next(iter(recently_freed))]

    def _ask_to_publish(self, object_id: bytes, record: ObjectRecord) -> None:
        if record.unpublished:
            record.unpublished = False
            self._to_publish.setdefault(record.made_by, []).append(object_id)

    def send_publish_requests(self, out: list[Outgoing]) -> None:
        """Ask the makers of results that others are about to read to write them into their stores."""
        if self._to_publish:
            for maker, object_ids in self._to_publish.items():
                out.append((maker, m.PublishObjects(object_ids=object_ids)))
            self._to_publish = {}

    def unpublished_by(self, worker: WorkerPeer) -> list[bytes]:
        """The worker is gone: the results it made that nobody asked it to write, so perhaps nowhere."""
        self._to_publish.pop(worker.identity, None)
        lost = []
        for object_id, record in self.stored.items():
            if record.unpublished and record.made_by == worker.identity:
                record.unpublished = False
                lost.append(object_id)
        return lost

    def unused_ids(self) -> set[bytes]:
        """For the invariants: stored results to be freed at the next flush."""
        return set(self._unused)

    def bytes_held(self, object_ids: Iterable[bytes]) -> tuple[dict[str, int], dict[bytes, int]]:
        """Of these objects (stored ones only), how many bytes each store holds, and how many bytes each
        worker made (results whose values its processor may still have)."""
        held: dict[str, int] = {}
        made: dict[bytes, int] = {}
        for object_id in object_ids:
            record = self.stored.get(object_id)
            if record is not None and record.holders:
                for holder in record.holders:
                    held[holder] = held.get(holder, 0) + record.size
                if record.made_by:
                    made[record.made_by] = made.get(record.made_by, 0) + record.size
        return held, made

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
            if stored.unpublished and stored.made_by != worker.identity:
                self._ask_to_publish(object_id, stored)
            if stored.holders:
                # The worker's own store if it holds it (then the worker reads it in place), else any holder.
                holder = worker.store_address if worker.store_address in stored.holders else min(stored.holders)
                objects.append(m.ObjectPayload(
                    object_id=object_id, payload=b"", name=stored.name, size=stored.size, holder=holder
                ))
            else:
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
        if self.kept.failures:
            for object_id in object_ids:
                kept_task_id = task_of_kept_result_id(bytes(object_id))
                if kept_task_id is not None:
                    self.kept.drop_failure(client.identity, kept_task_id)
        doomed = {bytes(object_id) for object_id in object_ids} & client.object_ids
        if doomed and client.task_ids:
            for task_id in client.task_ids:
                record = records[task_id]
                doomed.discard(record.signature.function_id)
                doomed.discard(record.signature.serializer_id)
                if record.object_slots:
                    # A result the task uses (result_objects) stays by its use count, not by its owner.
                    used = record.result_objects or ()
                    doomed.difference_update(
                        bytes(record.args[slot]) for slot in record.object_slots if record.args[slot] not in used
                    )
        if doomed:
            client.object_ids -= doomed
            self._free(client, doomed, workers, out)

    def release_all(self, client: ClientPeer, workers: Iterable[WorkerPeer], out: list[Outgoing]) -> None:
        """The client cleared or left: it owns nothing any more."""
        self.kept.drop_client(client.identity)
        self._free(client, client.object_ids, workers, out)
        client.object_ids.clear()

    def _free(
        self, client: ClientPeer, object_ids: Iterable[bytes], workers: Iterable[WorkerPeer], out: list[Outgoing]
    ) -> None:
        """The client lets go of these objects; those nobody else owns are deleted here and in the workers."""
        for object_id in object_ids:
            record = self.stored.get(object_id)
            if record is not None:
                record.owners.discard(client.identity)
        self._free_unneeded(object_ids, workers, out)
