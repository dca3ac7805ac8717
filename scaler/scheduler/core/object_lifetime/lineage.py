"""Lost data (issue 15 point 5, PROTOCOL.md §18): what happens to stored objects whose last holder is gone.

A stored object is lost when no registered store holds it any more: its store left (timed out,
disconnected, dropped), or every reader that tried it reported it missing (objectsLost). What was lost
and is still needed comes back, so that every task still ends exactly once:

- A *result* is made again by running the task that made it once more, with the same task id, from its
  recipe: the task as it ran, kept here (`recipes`) while its result lives, and while a kept recipe
  names it as an input (so a chain of intermediates can be made again after its middle was freed). Its
  client, if it had not fetched that result, hears the task's result again; tasks waiting for it are
  parked on the rerun, as on any graph dependency. Reruns recurse into inputs that are gone too.
- A *client object* is asked for again from the clients that own it (resendObjects); its tasks wait
  for it. If they all answer objectsLost, or leave, those tasks fail with ObjectLostError naming it.
- A task a worker holds when its input is lost is left to finish or to come back: a reader that could
  not fetch an input gives its task back (returned), and `hold_back` parks it here instead of queueing it.

Recipes are kept for at most `MAX_RECIPES` results at once; a result made beyond that bound has none,
and if it is lost while needed, whoever needs it fails with ObjectLostError.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Iterable

from scaler.protocol import messages as m
from scaler.scheduler.core.object_lifetime.object_table import ObjectTable
from scaler.scheduler.core.peer_registry import ClientPeer, PeerRegistry
from scaler.scheduler.core.result_router import ResultRouter
from scaler.scheduler.core.task_graph import TaskGraph
from scaler.scheduler.core.task_record import TaskRecord
from scaler.scheduler.core.task_table import TaskTable

logger = logging.getLogger(__name__)

# Each recipe holds its task's inline arguments (each under the inline limit): this bounds their memory.
MAX_RECIPES = 100_000
# A client object lost again after each resend (a lent object its store cannot read while its lender lives)
# would be asked for forever: after this many resends, the next loss fails its tasks instead.
MAX_RESENDS = 3

_LOST_TYPE = "scaler.errors.ObjectLostError"


@dataclasses.dataclass(slots=True)
class LostObject:
    """A lost object still in the object table (it has users), and how it comes back."""

    # Results: the task id of its rerun (it may have ended since); 0 for a client object.
    rerun_task_id: int = 0
    # Once the rerun succeeded: the new stored result's id, or its inline payload.
    replacement_id: bytes = b""
    replacement_payload: m.Buffer | None = None
    # Once nothing can bring it back: why (the failure its users get).
    failure: m.TaskFailure | None = None


def lost_failure(task_id: int, object_id: bytes, why: str) -> m.TaskFailure:
    return m.TaskFailure(
        task_id=task_id, kind=m.FailureKind.RAISED, type_name=_LOST_TYPE,
        message=f"object {object_id.hex()} was lost with its store and {why}",
    )


class Lineage:
    def __init__(
        self, tasks: TaskTable, graph: TaskGraph, objects: ObjectTable, peers: PeerRegistry,
        counters: collections.Counter[str],
    ) -> None:
        self._tasks = tasks
        self._graph = graph
        self._objects = objects
        self._peers = peers
        self._counters = counters
        # Stored result id -> the task that made it, as it ran (its arguments name its inputs).
        self.recipes: dict[bytes, TaskRecord] = {}
        # Object id -> how many kept recipes name it as an input.
        self.input_refs: collections.Counter[bytes] = collections.Counter()
        # Lost objects still in the object table.
        self.lost: dict[bytes, LostObject] = {}
        # Task id of a rerun in the task table -> the lost result it makes again.
        self.reruns: dict[int, bytes] = {}
        # Lost client objects -> the tasks waiting for them to be sent again, and the clients asked.
        self.awaiting: dict[bytes, list[TaskRecord]] = {}
        self.asked: dict[bytes, set[bytes]] = {}
        # Client object -> how many times it was asked for again (while it is in the object table).
        self.resends: collections.Counter[bytes] = collections.Counter()
        self._bound_logged = False

    # ------------------------------------------------------------------------------------------ recipes

    def remember(self, object_id: bytes, record: TaskRecord) -> None:
        """The task ended with a stored result: keep how to make it again."""
        if len(self.recipes) >= MAX_RECIPES:
            if not self._bound_logged:
                self._bound_logged = True
                logger.warning(f"Lineage: {MAX_RECIPES:,} recipes kept; results made now cannot be recomputed if lost")
            return
        self.recipes[object_id] = record
        for slot in record.object_slots or ():
            self.input_refs[bytes(record.args[slot])] += 1

    def freed(self, object_ids: Iterable[bytes]) -> None:
        """These objects left the object table: their recipes go unless a kept recipe needs them."""
        pending = list(object_ids)
        while pending:
            object_id = pending.pop()
            self.lost.pop(object_id, None)
            self.resends.pop(object_id, None)
            if self.input_refs.get(object_id) or object_id in self._objects.stored:
                continue
            recipe = self.recipes.pop(object_id, None)
            if recipe is None:
                continue
            for slot in recipe.object_slots or ():
                input_id = bytes(recipe.args[slot])
                left = self.input_refs[input_id] - 1
                if left:
                    self.input_refs[input_id] = left
                else:
                    del self.input_refs[input_id]
                    pending.append(input_id)

    def drop_client(self, client: ClientPeer, router: ResultRouter) -> None:
        """The client cleared or left: its recipes go (nothing of its own can need them any more)."""
        gone = [object_id for object_id, recipe in self.recipes.items() if recipe.client is client]
        for object_id in gone:
            recipe = self.recipes.pop(object_id)
            for slot in recipe.object_slots or ():
                input_id = bytes(recipe.args[slot])
                self.input_refs[input_id] -= 1
                if self.input_refs[input_id] <= 0:
                    del self.input_refs[input_id]
        records = self._tasks.records
        for task_id in [task_id for task_id in self.reruns if task_id not in records]:
            del self.reruns[task_id]  # its client's tasks ended without an outcome
        self.refused(client, [oid for oid, waiting in self.asked.items() if client.identity in waiting], router)

    # ------------------------------------------------------------------------------------------ losses

    def lose(self, object_ids: Iterable[bytes], router: ResultRouter, out: list) -> None:
        """These objects just lost their last holder (the object table dropped it): bring back what is needed."""
        objects = self._objects
        newly = [object_id for object_id in object_ids if object_id in objects.stored and object_id not in self.lost]
        if not newly:
            return
        for object_id in newly:
            objects.mark_lost(object_id, self._peers.workers.values())
            self.lost[object_id] = LostObject()
        asked: dict[bytes, list[bytes]] = {}
        reruns = 0
        for object_id in newly:
            stored = objects.stored[object_id]
            if stored.producer:
                owners = list(stored.owners)
                for owner in owners:  # a client that had not fetched it hears the task's result again instead
                    objects.disown(self._peers.clients[owner], object_id)
                rerun = self._rerun(object_id, router)
                if rerun is not None:
                    reruns += 1
                    if owners:
                        rerun.quiet = False
                elif owners:
                    failure = self.lost[object_id].failure
                    assert failure is not None
                    client = self._peers.clients[owners[0]]
                    router.failure(client, dataclasses.replace(failure, task_id=stored.producer))
                    self._counters["tasks_raised"] += 1
            elif self.resends[object_id] >= MAX_RESENDS:
                self.lost[object_id].failure = lost_failure(
                    0, object_id, f"again each of the {MAX_RESENDS} times its client sent it again (can its store "
                    "read it?)"
                )
            else:
                self.resends[object_id] += 1
                self.asked[object_id] = set(stored.owners)
                for owner in stored.owners:
                    asked.setdefault(owner, []).append(object_id)
        for owner, ids in asked.items():
            out.append((owner, m.ResendObjects(object_ids=ids)))
        lost_set = set(newly)
        parked: set[int] = set()
        for record in list(self._tasks.records.values()):
            if record.worker is None and self._touches(record, lost_set):
                queued = record.waiting_on == 0
                if self._park(record, queued, router) and queued:
                    parked.add(record.task_id)
        if parked:
            self._tasks.unqueue(parked)
        logger.warning(
            f"Lineage: {len(newly)} stored objects lost; {reruns} tasks run again, "
            f"{sum(len(ids) for ids in asked.values())} objects asked of their clients"
        )

    def hold_back(self, record: TaskRecord, router: ResultRouter) -> bool:
        """A task given back unfinished (no worker, not queued): park it, or fail it, if an input of it is
        lost. True if so; False: queue it."""
        if not self.lost or not self._touches(record, self.lost.keys()):
            return False
        self._park(record, False, router)
        return record.task_id not in self._tasks.records or record.waiting_on > 0

    def _touches(self, record: TaskRecord, lost: set[bytes] | Iterable[bytes]) -> bool:
        signature = record.signature
        if signature.function_id in lost or signature.serializer_id in lost:
            return True
        return any(bytes(record.args[slot]) in lost for slot in record.object_slots or ())

    def _park(self, record: TaskRecord, queued: bool, router: ResultRouter) -> bool:
        """The record (with no worker; `queued`: still in the ready queue) needs lost objects: it waits for
        them, or fails if one cannot come back. True if it waits now."""
        failure = None
        for object_id in (record.signature.function_id, record.signature.serializer_id):
            if object_id in self.asked:
                self._await_resend(record, object_id)
            elif object_id in self.lost:
                failure = self.lost[object_id].failure or lost_failure(0, object_id, "no client could send it again")
        for slot in list(record.object_slots or ()):
            if failure is not None:
                break
            object_id = bytes(record.args[slot])
            entry = self.lost.get(object_id)
            if entry is None:
                continue
            if object_id in self.asked:
                self._await_resend(record, object_id)
            elif not self._objects.stored[object_id].producer or entry.failure is not None:
                failure = entry.failure or lost_failure(0, object_id, "no client could send it again")
            else:
                failure = self._follow(record, slot, object_id, router)
        if failure is None:
            return record.waiting_on > 0
        self._unwait(record)
        # forget() reads a record with no worker and nothing to wait on as queued.
        record.waiting_on = 0 if queued else max(record.waiting_on, 1)
        self._tasks.fail(record, dataclasses.replace(failure, task_id=record.task_id), router)
        return False

    def _unwait(self, record: TaskRecord) -> None:
        """Take the record out of every resend wait (it is about to end)."""
        for waiting in self.awaiting.values():
            while record in waiting:
                waiting.remove(record)
                record.waiting_on -= 1

    def _follow(self, record: TaskRecord, slot: int, object_id: bytes, router: ResultRouter) -> m.TaskFailure | None:
        """The lost result in `slot`: its replacement if it has one, else park on its rerun; the failure if
        it cannot be made again."""
        entry = self.lost[object_id]
        self._unfeed(record, slot, object_id)
        if entry.replacement_payload is not None:
            record.args[slot] = entry.replacement_payload
            return None
        replacement = self._objects.stored.get(entry.replacement_id) if entry.replacement_id else None
        if replacement is not None and not replacement.lost:
            record.args[slot] = entry.replacement_id
            self._objects.add_use(record, slot, entry.replacement_id)
            return None
        rerun = self._tasks.records.get(entry.rerun_task_id)
        if rerun is None or self.reruns.get(rerun.task_id) != object_id:
            rerun = self._rerun(object_id, router)
        if rerun is None:
            return entry.failure
        self._graph.dependents.setdefault(rerun.task_id, []).append((record, slot))
        record.waiting_on += 1
        return None

    def _unfeed(self, record: TaskRecord, slot: int, object_id: bytes) -> None:
        """The slot no longer names the lost object: it waits for a result again."""
        record.args[slot] = b""
        assert record.object_slots is not None
        record.object_slots.remove(slot)
        if record.result_objects is not None and object_id in record.result_objects:
            record.result_objects.remove(object_id)
            self._objects.end_uses([object_id])

    def _await_resend(self, record: TaskRecord, object_id: bytes) -> None:
        self.awaiting.setdefault(object_id, []).append(record)
        record.waiting_on += 1

    # ------------------------------------------------------------------------------------------ reruns

    def _rerun(self, object_id: bytes, router: ResultRouter) -> TaskRecord | None:
        """Run again the task that made this lost (or freed) result; None (with the failure recorded in
        `lost`) if it cannot be. Inputs that are gone too are made again first."""
        recipe = self.recipes.get(object_id)
        why = None
        if recipe is None:
            why = "its lineage was not kept"
        elif self._peers.clients.get(recipe.client.identity) is not recipe.client:
            why = "its client left"
        else:
            why = self._why_not_remakeable(recipe, set())
        if why is not None:
            entry = self.lost.setdefault(object_id, LostObject())
            entry.failure = lost_failure(0, object_id, why)
            return None
        assert recipe is not None
        records = self._tasks.records
        running = records.get(recipe.task_id)
        if running is not None:
            if object_id in self.lost:
                self.lost[object_id].rerun_task_id = running.task_id
            return running
        rerun = TaskRecord(
            task_id=recipe.task_id, client=recipe.client, signature=recipe.signature, args=list(recipe.args),
            quiet=True, object_slots=list(recipe.object_slots) if recipe.object_slots else None,
        )
        records[rerun.task_id] = rerun
        rerun.client.task_ids.add(rerun.task_id)
        self.reruns[rerun.task_id] = object_id
        if object_id in self.lost:
            self.lost[object_id].rerun_task_id = rerun.task_id
        self._counters["tasks_recomputed"] += 1
        stored = self._objects.stored
        for slot in list(rerun.object_slots or ()):
            input_id = bytes(rerun.args[slot])
            item = stored.get(input_id)
            if item is not None and not item.lost:
                if item.producer:
                    self._objects.add_use(rerun, slot, input_id)
                continue
            if input_id in self.asked:
                self._await_resend(rerun, input_id)
                continue
            # A result lost too, or freed since: made again first.
            rerun.object_slots.remove(slot)  # type: ignore[union-attr]
            rerun.args[slot] = b""
            input_entry = self.lost.get(input_id)
            source = records.get(input_entry.rerun_task_id) if input_entry is not None else None
            if source is None or self.reruns.get(source.task_id) != input_id:
                source = self._rerun(input_id, router)
            assert source is not None  # _why_not_remakeable said it can be
            self._graph.dependents.setdefault(source.task_id, []).append((rerun, slot))
            rerun.waiting_on += 1
        for object_id_needed in (rerun.signature.function_id, rerun.signature.serializer_id):
            if object_id_needed in self.asked:
                self._await_resend(rerun, object_id_needed)
        if rerun.waiting_on == 0:
            self._tasks.queue_at_front([rerun])
        return rerun

    def _why_not_remakeable(self, recipe: TaskRecord, seen: set[int]) -> str | None:
        if recipe.task_id in seen:
            return None
        seen.add(recipe.task_id)
        stored = self._objects.stored
        for object_id in (recipe.signature.function_id, recipe.signature.serializer_id):
            if object_id and object_id not in stored:
                return f"the function of task {recipe.task_id:#x} that made it is gone"
        for slot in recipe.object_slots or ():
            input_id = bytes(recipe.args[slot])
            item = stored.get(input_id)
            if item is not None and (not item.lost or input_id in self.asked):
                continue
            entry = self.lost.get(input_id)
            if entry is not None and entry.failure is not None:
                return f"its input {input_id.hex()} is lost too and {entry.failure.message.split(' and ', 1)[-1]}"
            inner = self.recipes.get(input_id)
            if inner is None:
                return f"its input {input_id.hex()} is gone and its lineage was not kept"
            why = self._why_not_remakeable(inner, seen)
            if why is not None:
                return why
        return None

    def rerun_ended(self, record: TaskRecord, object_id: bytes = b"", payload: m.Buffer | None = None,
                    failure: m.TaskFailure | None = None) -> None:
        """A rerun ended (TaskTable calls this): what comes back to its users later is known now."""
        lost_id = self.reruns.pop(record.task_id)
        entry = self.lost.get(lost_id)
        if entry is None:
            return
        if failure is not None:
            why = f"running task {record.task_id:#x} again failed: {failure.message}"
            entry.failure = lost_failure(0, lost_id, why)
        elif object_id:
            entry.replacement_id = object_id
        else:
            entry.replacement_payload = payload

    # ------------------------------------------------------------------------------------------ resends

    def resent(self, object_ids: Iterable[bytes], router: ResultRouter) -> None:
        """Lost client objects are stored again: the tasks waiting for them go on."""
        ready: list[TaskRecord] = []
        for object_id in object_ids:
            if object_id not in self.asked:
                continue
            del self.asked[object_id]
            self.lost.pop(object_id, None)
            for record in self.awaiting.pop(object_id, []):
                if self._tasks.records.get(record.task_id) is not record:
                    continue  # it ended meanwhile (failed with a dependency, or canceled)
                record.waiting_on -= 1
                if record.waiting_on == 0:
                    ready.append(record)
        self._tasks.queue_at_front(ready)

    def refused(self, client: ClientPeer, object_ids: Iterable[bytes], router: ResultRouter) -> None:
        """A client asked for lost objects cannot send them (objectsLost, or it left): if no one can, the
        tasks waiting for them fail."""
        for object_id in object_ids:
            asked = self.asked.get(object_id)
            if asked is None:
                continue
            asked.discard(client.identity)
            if asked:
                continue
            del self.asked[object_id]
            entry = self.lost.get(object_id)
            failure = lost_failure(0, object_id, "no client that owns it could send it again")
            if entry is not None:
                entry.failure = failure
            for record in self.awaiting.pop(object_id, []):
                if self._tasks.records.get(record.task_id) is record:
                    self._unwait(record)
                    record.waiting_on = max(record.waiting_on, 1)  # parked: forget() must not count it queued
                    self._tasks.fail(record, dataclasses.replace(failure, task_id=record.task_id), router)

    def waits_on_resends(self) -> collections.Counter[int]:
        """For the invariants: task id -> how many resends it waits for."""
        waits: collections.Counter[int] = collections.Counter()
        records = self._tasks.records
        for waiting in self.awaiting.values():
            for record in waiting:
                if records.get(record.task_id) is record:
                    waits[record.task_id] += 1
        return waits
