"""A scheduler started again rebuilds its state from what the workers re-announce (PROTOCOL.md §21).

A worker that outlived the scheduler before this one says hello again, then `reannounce`s the tasks it
holds (running or queued), then sends the results it made while no scheduler knew it. This scheduler
never saw those tasks submitted, so it knows of each only its id, whose high 32 bits are its client's
id prefix:

- A re-announced task becomes a record held by that worker, owned by the connected client of that prefix
  or, until it comes back, by a stand-in for it (an awaited client, `PeerRegistry.awaited_clients`). Its
  function and arguments are not known (REANNOUNCED): it cannot be sent anywhere else, so if its worker
  gives it back or dies, it is forgotten, and its client's re-submission runs it again.
- A result for a task this scheduler does not know, or for a re-announced one, is kept as an orphan result.
- A client that re-submits a task under the same id (it outlived the scheduler too) gets it from there
  (task_intake.py asks `claim`): an orphan result completes it at once, without running it again; a
  re-announced record takes the submission's content and stays where it runs.

Which of its peers comes back first is a race, and a re-submitted task must not run again because its
client won it: a result held by a worker not back yet, or a task it runs, would be made twice. So from the
first sign of a restart (a peer that rejoins or resumes), the re-submitted tasks of resumed clients wait
for `hold_seconds` (the workers' reconnect back-off at most, plus a heartbeat) instead of being queued
(`hold_back`); a worker's late result for one of them, or its re-announcement, completes or keeps it
where it is, and the rest are queued then. A result a rejoining worker sends before its re-announcement
(one it made for the scheduler before) of a task another worker holds (it came back late, and the task
went to the other meanwhile) completes it too: the first result counts, and the other worker is told to
drop it (`sift`). Tasks of clients new to this scheduler are never completed so.

An awaited client that does not come back within the client timeout loses its tasks (cancelled on their
workers), and an orphan result nobody claims within it is dropped: a client gone for longer than that
would have been timed out by the scheduler before too. Orphan results are also bounded in number and bytes.
So are the objects a store holds that nobody names within it (`objectsHeld` ids unknown here): that store
is told to delete them. A store's copy announced a moment before its writer names the object is named by
then, so only the objects of clients that did not come back go.
"""

from __future__ import annotations

import collections
import dataclasses
import logging

from scaler.protocol import messages as m
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.object_lifetime.object_table import ObjectTable
from scaler.scheduler.core.outgoing import Outgoing
from scaler.scheduler.core.peer_registry import ClientPeer, PeerRegistry, WorkerPeer
from scaler.scheduler.core.result_router import ResultRouter
from scaler.scheduler.core.store_registry import StorePeer, StoreRegistry
from scaler.scheduler.core.task_record import REANNOUNCED, TaskRecord
from scaler.scheduler.core.task_table import TaskTable
from scaler.utility.identifiers import TASK_COUNTER_BITS

logger = logging.getLogger(__name__)

MAX_ORPHAN_RESULTS = 100_000
MAX_ORPHAN_BYTES = 256 * 1024 * 1024
# Workers and stores reconnect with a back-off of at most this (scheduler_session.LAST_HELLO_RETRY_SECONDS).
RECONNECT_SECONDS = 2.0

# Failures that are outcomes (the task ran and ended so); the others (returned, worker died, canceled) mean
# the task has to run again, which its client's re-submission does.
_OUTCOMES = frozenset({m.FailureKind.RAISED, m.FailureKind.SERIALIZATION})


@dataclasses.dataclass(slots=True)
class OrphanResult:
    """A result made for a task this scheduler has no submission of (yet); exactly one of the three is set."""

    expires: float
    payload: m.Buffer | None = None
    stored: m.StoredResult | None = None
    failure: m.TaskFailure | None = None
    # The worker that made a stored result: it may have to write it into its store before a reader gets it.
    made_by: bytes = b""

    @property
    def size(self) -> int:
        return len(self.payload) if self.payload is not None else 0


class Rejoin:
    def __init__(
        self, config: CoreConfig, peers: PeerRegistry, stores: StoreRegistry, tasks: TaskTable,
        objects: ObjectTable, counters: collections.Counter[str],
    ) -> None:
        self._grace = config.client_timeout_seconds
        self._first_sign = float("-inf")
        self.hold_until = float("-inf")
        # Re-submitted tasks waiting for that (on one input more: task_graph.py leaves them alone), in order.
        self.held: dict[int, TaskRecord] = {}
        # Set when a late result took a task from another worker (its slot is free: dispatch), for the core.
        self.took_from_others = False
        self._peers = peers
        self._stores = stores
        # Objects stores hold that nobody named here: store identity -> object id -> when it is deleted.
        self.unclaimed: dict[bytes, dict[bytes, float]] = {}
        self._tasks = tasks
        self._objects = objects
        self._counters = counters
        self.orphans: collections.OrderedDict[int, OrphanResult] = collections.OrderedDict()
        self._orphan_bytes = 0
        # When the awaited client of each prefix is dropped if it has not come back.
        self._awaited_until: dict[int, float] = {}
        # Until then results for unknown tasks may be orphans, and submissions are checked against them: the
        # hot paths pay for none of this outside a grace period after a re-announcement.
        self.active_until = float("-inf")

    @property
    def hold_seconds(self) -> float:
        """From the first sign of a restart, how long re-submitted tasks wait for the workers to come back: their
        reconnect back-off plus a heartbeat interval, since an idle worker learns of the restart at its next
        heartbeat. The scheduler before spaced those out by its number of workers (PeerRegistry.
        worker_heartbeat_seconds); this one counts the workers back so far, so the interval grows towards that
        one as they rejoin, and each rejoin stretches the hold (`noticed`): with the workers coming back spread
        over an interval, those back within the hold always ask for a hold that outlasts it, until all are back."""
        return RECONNECT_SECONDS + self._peers.worker_heartbeat_seconds()

    def active(self, now: float) -> bool:
        return now < self.active_until

    @property
    def pending(self) -> bool:
        """Whether a tick has anything to expire."""
        return bool(self.orphans or self._awaited_until or self.unclaimed or self.held)

    def noticed(self, hello: m.Hello, now: float) -> None:
        """A hello: one from a peer of a scheduler before (a worker rejoining, a client resuming) is the first
        sign of a restart, before any re-announcement; results and submissions are sifted from then on."""
        if not (hello.rejoining or hello.id_prefix):
            return
        self.active_until = max(self.active_until, now + self._grace)
        if self._first_sign == float("-inf"):
            self._first_sign = now
            self.hold_until = now + self.hold_seconds
        elif now < self.hold_until:  # still holding: for as long as the interval of the workers back by now
            self.hold_until = max(self.hold_until, self._first_sign + self.hold_seconds)

    def hold_back(self, record: TaskRecord, now: float) -> bool:
        """A ready task a resumed client submitted: True if it waits for the workers to come back."""
        if now >= self.hold_until or record.client.id_prefix in self._peers.issued_prefixes:
            return False
        record.waiting_on += 1
        self.held[record.task_id] = record
        return True

    def _unhold(self, record: TaskRecord) -> bool:
        """Whether the task was held back (it is not any more, nor queued)."""
        if self.held.pop(record.task_id, None) is None:
            return False
        record.waiting_on -= 1
        return True

    def _release(self, now: float) -> None:
        if now < self.hold_until:
            return
        records = self._tasks.records
        ready = []
        for record in self.held.values():
            if records.get(record.task_id) is record and record.worker is None:
                record.waiting_on -= 1
                if record.waiting_on == 0:
                    ready.append(record)
        self.held.clear()
        self._tasks.queue_at_front(ready)

    # ------------------------------------------------------------------------------------------ re-announced

    def on_reannounce(self, worker: WorkerPeer, message: m.Reannounce, now: float) -> bool:
        """Record the tasks a rejoining worker holds; True if it waited for this to get work (§21).

        Only once, after a hello{rejoining}, and no more tasks than its capacity: what it says beyond that is not
        recorded here, and a result of such a task is kept as an orphan result when it comes (`sift`)."""
        if not worker.awaiting_reannounce:
            logger.warning(f"Rejoin: worker {worker.name} re-announced tasks without a hello{{rejoining}}; ignored")
            return False
        self.active_until = max(self.active_until, now + self._grace)
        room = worker.capacity - len(worker.assigned)
        records = self._tasks.records
        held = 0
        submitted_again: list[TaskRecord] = []
        # Clients back with the prefix they had (not one this scheduler gave a new client).
        issued = self._peers.issued_prefixes
        returned = {
            client.id_prefix: client for client in self._peers.clients.values() if client.id_prefix not in issued
        }
        for task_id in message.task_ids:
            if held + len(submitted_again) >= room:
                break
            record = records.get(task_id)
            if record is not None:
                # Submitted again before its worker came back: if it still waits here, it is the one running there
                # (if another worker has it already, it runs twice: the first result wins).
                if self._unhold(record):
                    self._assign(record, worker)
                    held += 1
                elif record.worker is None and record.waiting_on == 0 and not record.canceled:
                    submitted_again.append(record)
                continue
            prefix = task_id >> TASK_COUNTER_BITS
            owner = returned.get(prefix) or self._awaited(prefix, now)
            record = TaskRecord(task_id=task_id, client=owner, signature=REANNOUNCED, args=[])
            records[task_id] = record
            owner.task_ids.add(task_id)
            self._assign(record, worker)
            held += 1
        if submitted_again:
            self._tasks.unqueue({record.task_id for record in submitted_again})
            for record in submitted_again:
                self._assign(record, worker)
            held += len(submitted_again)
        self._counters["tasks_reannounced"] += held
        logger.info(f"Rejoin: worker {worker.name} re-announced {len(message.task_ids)} tasks it holds ({held} taken)")
        worker.awaiting_reannounce = worker.draining = False
        return True

    def _assign(self, record: TaskRecord, worker: WorkerPeer) -> None:
        record.worker = worker
        worker.assigned[record.task_id] = None
        record.client.tasks_running += 1

    def _awaited(self, prefix: int, now: float) -> ClientPeer:
        """The stand-in that keeps the tasks of the client of this prefix until it comes back."""
        peers = self._peers
        # The ids this scheduler gives new clients must not be those of clients of the scheduler before.
        peers.reserve_id_prefix(prefix)
        identity = awaited_identity(prefix)
        awaited = peers.awaited_clients.get(identity)
        if awaited is None:
            awaited = peers.awaited_clients[identity] = ClientPeer(
                identity=identity, name=f"awaited client {prefix:#x}", id_prefix=prefix, last_seen=now
            )
            self._awaited_until[prefix] = now + self._grace
        return awaited

    # ------------------------------------------------------------------------------------------ results

    def sift(
        self, worker: WorkerPeer, results: m.TaskResults, now: float, router: ResultRouter, out: list[Outgoing]
    ) -> m.TaskResults:
        """Take out of a worker's results those of tasks unknown here or re-announced (kept as orphan results,
        and passed on to a connected owner); returns the rest, for the task table, with the tasks of those
        that another worker holds, or none, moved to this one (`_rehome`)."""
        records = self._tasks.records
        # The run time goes on with what is kept: without it the worker would count as one that does not measure
        # (prefetch.py) and be given its whole capacity of any tasks, however slow, for the whole grace period.
        kept = m.TaskResults(
            succeeded_ids=[], payloads=[], failures=[], warnings=results.warnings, profiles=results.profiles,
            run_seconds=results.run_seconds, ran_tasks=results.ran_tasks,
        )
        expires = now + self._grace
        late: list[TaskRecord] = []
        for task_id, payload in zip(results.succeeded_ids, results.payloads):
            record = records.get(task_id)
            if record is None or self._is_orphan(record, worker):
                self._keep(task_id, OrphanResult(expires, payload=payload), router)
            else:
                late.append(record)
                kept.succeeded_ids.append(task_id)
                kept.payloads.append(payload)
        for result in results.stored:
            record = records.get(result.task_id)
            if record is None or self._is_orphan(record, worker):
                self._keep(result.task_id, OrphanResult(expires, stored=result, made_by=worker.identity), router)
            else:
                late.append(record)
                kept.stored.append(result)
        for failure in results.failures:
            record = records.get(failure.task_id)
            if record is not None and not self._is_orphan(record, worker):
                kept.failures.append(failure)
                if failure.kind in _OUTCOMES:
                    late.append(record)
            elif failure.kind in _OUTCOMES:
                self._keep(failure.task_id, OrphanResult(expires, failure=failure), router)
            elif record is not None:
                self._tasks.forget(record)  # to run again: its client's re-submission does that
        if late and worker.awaiting_reannounce:
            self._rehome(worker, late, out)
        return kept

    def freed_others(self) -> bool:
        """Whether the last results took a task from another worker (whose slot is free now); once."""
        freed, self.took_from_others = self.took_from_others, False
        return freed

    def _rehome(self, worker: WorkerPeer, records: list[TaskRecord], out: list[Outgoing]) -> None:
        """Outcomes a rejoining worker made for the scheduler before (it sends them before its re-announcement)
        of tasks a resumed client re-submitted, held back, queued or given to another worker: they are this
        worker's now, so that the task table takes them instead of running them again; another worker
        holding one is told to drop it. Tasks of clients new to this scheduler are never touched."""
        queued: list[TaskRecord] = []
        elsewhere: dict[bytes, list[int]] = {}
        moved = 0
        issued = self._peers.issued_prefixes
        for record in records:
            if record.worker is worker or record.signature is REANNOUNCED or record.canceled:
                continue
            if record.client.id_prefix in issued:
                continue  # a task submitted to this scheduler only: no worker made it before it

            moved += 1
            if self._unhold(record):
                self._assign(record, worker)
            elif record.worker is None:
                if record.waiting_on == 0 and record not in queued:
                    queued.append(record)
                else:
                    moved -= 1
            else:
                other = record.worker
                other.assigned.pop(record.task_id, None)
                record.client.tasks_running -= 1
                elsewhere.setdefault(other.identity, []).append(record.task_id)
                self._assign(record, worker)
        if queued:
            self._tasks.unqueue({record.task_id for record in queued})
            for record in queued:
                self._assign(record, worker)
        if elsewhere:
            self.took_from_others = True
            out.extend((identity, m.CancelTasks(task_ids=ids, force=False)) for identity, ids in elsewhere.items())
        self._counters["tasks_completed_late"] += moved

    @staticmethod
    def _is_orphan(record: TaskRecord | None, worker: WorkerPeer) -> bool:
        return record is None or (record.signature is REANNOUNCED and record.worker is worker)

    def _keep(self, task_id: int, orphan: OrphanResult, router: ResultRouter) -> None:
        record = self._tasks.records.get(task_id)
        if record is not None:
            self._tasks.forget(record)
            if record.client.identity in self._peers.clients:
                # Its client is back but has not re-submitted it: it hears now, and a re-submission still finds it.
                self._deliver(record.client, task_id, orphan, router)
        previous = self.orphans.pop(task_id, None)
        if previous is not None:
            self._orphan_bytes -= previous.size
        self.orphans[task_id] = orphan
        self._orphan_bytes += orphan.size
        self._counters["orphan_results"] += 1
        while self.orphans and (len(self.orphans) > MAX_ORPHAN_RESULTS or self._orphan_bytes > MAX_ORPHAN_BYTES):
            _, dropped = self.orphans.popitem(last=False)
            self._orphan_bytes -= dropped.size

    # ------------------------------------------------------------------------------------------ re-submitted

    def claim(self, record: TaskRecord, router: ResultRouter) -> bool:
        """A client's newly submitted task: True if it is taken care of here (completed from an orphan result,
        or merged into the re-announced record of the same id); else the intake records it as usual."""
        task_id = record.task_id
        if record.client.id_prefix in self._peers.issued_prefixes:
            return False  # a new client of this scheduler: nothing of a scheduler before is its own
        existing = self._tasks.records.get(task_id)
        if existing is not None:
            if existing.signature is not REANNOUNCED or task_id >> TASK_COUNTER_BITS != record.client.id_prefix:
                return False
            self._adopt(existing, record)
            return True
        if record.quiet:
            return False  # a graph's inner node: its dependents want it as a record; it runs again
        orphan = self.orphans.pop(task_id, None)
        if orphan is None:
            return False
        self._orphan_bytes -= orphan.size
        self._deliver(record.client, task_id, orphan, router)
        self._counters["tasks_completed_from_orphans"] += 1
        return True

    def _adopt(self, existing: TaskRecord, submitted: TaskRecord) -> None:
        """The re-announced record takes the re-submission's content and client; it stays with its worker."""
        previous, client = existing.client, submitted.client
        if previous is not client:
            previous.task_ids.discard(existing.task_id)
            client.task_ids.add(existing.task_id)
            if existing.worker is not None:
                previous.tasks_running -= 1
                client.tasks_running += 1
            existing.client = client
        existing.signature = submitted.signature
        existing.args = submitted.args
        existing.priority = submitted.priority
        existing.quiet = submitted.quiet
        existing.object_slots = submitted.object_slots
        self._counters["tasks_adopted"] += 1

    def _deliver(self, client: ClientPeer, task_id: int, orphan: OrphanResult, router: ResultRouter) -> None:
        if orphan.payload is not None:
            router.success(client, task_id, orphan.payload)
        elif orphan.stored is not None:
            if self._objects.check_result(orphan.stored) is None:
                made_by = orphan.made_by if orphan.made_by in self._peers.workers else b""
                self._objects.add_result(client, task_id, orphan.stored, 0, for_client=True, made_by=made_by)
            router.stored(client, orphan.stored)
        elif orphan.failure is not None:
            router.failure(client, orphan.failure)

    # ------------------------------------------------------------------------------------------ objects

    def objects_held(self, store: StorePeer, object_ids: list[bytes], now: float) -> None:
        """Of the objects a store says it holds, those unknown here are deleted there if nobody names them."""
        stored = self._objects.stored
        unknown = [object_id for object_id in object_ids if object_id not in stored]
        if unknown:
            deadline = now + self._grace
            pending = self.unclaimed.setdefault(store.identity, {})
            for object_id in unknown:
                pending.setdefault(object_id, deadline)

    def _delete_unclaimed(self, now: float, out: list[Outgoing]) -> None:
        stored = self._objects.stored
        for identity, pending in list(self.unclaimed.items()):
            if identity not in self._stores.stores:
                del self.unclaimed[identity]
                continue
            doomed = []
            for object_id, deadline in list(pending.items()):
                if deadline > now:
                    break
                del pending[object_id]
                if object_id not in stored:
                    doomed.append(object_id)
            if not pending:
                del self.unclaimed[identity]
            if doomed:
                logger.info(f"Rejoin: {len(doomed)} objects a store holds were named by no client; deleting them")
                out.append((identity, m.DeleteObjects(object_ids=doomed)))

    # ------------------------------------------------------------------------------------------ expiry

    def on_tick(self, now: float, out: list[Outgoing]) -> None:
        """Awaited clients that did not come back lose their tasks; unclaimed orphan results and objects go;
        held back tasks are queued once the hold is over."""
        if self.held:
            self._release(now)
        if self.unclaimed:
            self._delete_unclaimed(now, out)
        if self._awaited_until:
            for prefix, until in list(self._awaited_until.items()):
                if now < until:
                    continue
                del self._awaited_until[prefix]
                awaited = self._peers.awaited_clients.pop(awaited_identity(prefix))
                dropped = self._tasks.drop_client_tasks(awaited, force=False, out=out)
                self._counters["tasks_dropped"] += dropped
                if dropped:
                    logger.warning(f"Rejoin: {awaited.name} did not come back; {dropped} tasks re-announced for it "
                                   "are cancelled")
        while self.orphans:
            task_id, orphan = next(iter(self.orphans.items()))
            if orphan.expires > now:
                break
            del self.orphans[task_id]
            self._orphan_bytes -= orphan.size


def awaited_identity(prefix: int) -> bytes:
    """The routing identity of an awaited client: one no real peer has (zmq gives none starting with a NUL byte
    to a peer that sets its own, and ours start with letters)."""
    return b"\x00awaited:%d" % prefix
