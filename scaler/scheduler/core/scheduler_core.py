"""The scheduler's decisions, as a state machine with no I/O.

The I/O shell (server.py) feeds it `(sender identity, decoded message, now)`, frames it could not
read, and a tick, and sends whatever it returns. There are no sockets, threads or clocks in here, so
the unit tests drive thousands of simulated peers and injected faults in microseconds.

This module checks who may send what (message_rules.py) and hands each message to the part of the
core it concerns:

    peer_registry.py   who is connected: hello and welcome, heartbeats, timeouts, draining
    hello_again.py     a client or store back at this scheduler while it still has them
    store_registry.py  the stores (data plane), and the directory of them that peers are told
    task_intake.py     a client's submitTasks: checks, and where each accepted task goes
    task_table.py      every unfinished task, where it is, and how it ends (results, failures, requeues)
    task_graph.py      which task waits on which other task's result
    crash_blame.py     which task is blamed when a processor or a worker dies
    cancellation.py    cancelTasks and cancelRefused
    object_lifetime/   how long objects live: object_table.py (objects, their owners and users, which
                       worker holds which, when one is freed) and lineage.py (lost stored objects:
                       results run again, client objects asked for again)
    ready_queue.py     the ready tasks of one set of required worker tags, and which client's turn it is
    client_lane.py     one client's ready tasks in a queue, by priority
    tag_waits.py       when tasks that may wait only so long for a worker with their tags are due
    no_capable_worker.py  and how those fail if, by then, no connected worker has their tags
    placement.py       which worker gets which task, balancing (function_pace.py: batches of tiny tasks)
    prefetch.py        how many tasks each worker holds: as many as keep it busy, measured
    result_router.py   one results message per client per event
    relay.py           data messages passed between a peer and a store it cannot reach (the relay fallback)
    output_routing.py  what tasks print (taskOutput), from the worker running them to their client
    rejoin.py          after a restart: tasks workers re-announce, and results of tasks not submitted here yet
    status.py          the typed status the monitor feed publishes
    invariants.py      what must hold between all of these (checked by the tests)
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable
from typing import Any, Callable

from scaler.protocol import messages as m
from scaler.scheduler.core import cancellation, crash_blame
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.hello_again import hello_again
from scaler.scheduler.core.invariants import check_invariants
from scaler.scheduler.core.message_rules import SENDERS, violation
from scaler.scheduler.core.no_capable_worker import fail_tasks_without_capable_worker
from scaler.scheduler.core.object_lifetime.lineage import Lineage
from scaler.scheduler.core.object_lifetime.object_table import ObjectTable
from scaler.scheduler.core.outgoing import Outgoing
from scaler.scheduler.core.output_routing import route_output
from scaler.scheduler.core.peer_registry import ClientPeer, PeerRegistry, WorkerPeer, version_refusal
from scaler.scheduler.core.placement import Placement
from scaler.scheduler.core.prefetch import Prefetch
from scaler.scheduler.core.rejoin import Rejoin
from scaler.scheduler.core.relay import RelayRouter
from scaler.scheduler.core.result_router import ResultRouter
from scaler.scheduler.core.status import CoreStatus, core_status
from scaler.scheduler.core.store_registry import StorePeer, StoreRegistry
from scaler.scheduler.core.tag_waits import TagWaits
from scaler.scheduler.core.task_graph import TaskGraph
from scaler.scheduler.core.task_intake import TaskIntake
from scaler.scheduler.core.task_table import TaskTable

logger = logging.getLogger(__name__)

# A handler gets the registered peer (a ClientPeer or WorkerPeer, as message_rules.py allows), the message
# of the type it is registered for, the time, and the list to append what to send to.
_Handler = Callable[[Any, Any, float, list[Outgoing]], None]


class SchedulerCore:
    def __init__(self, config: CoreConfig) -> None:
        self._config = config
        self.should_exit = False
        # Events since start, by name: tasks_<outcome>, tasks_dropped (their client left, timed out or cleared them),
        # tasks_submitted, tasks_rescheduled, balance_requests, stores_left (disconnected), stores_lost (timed out,
        # or dropped after a malformed message), bytes_relayed (payload bytes forwarded by the relay fallback).
        self.counters: collections.Counter[str] = collections.Counter()
        self.peers = PeerRegistry(config)
        self.stores = StoreRegistry()
        self.graph = TaskGraph()
        self.objects = ObjectTable(self.stores)
        self.tasks = TaskTable(self.graph, config.max_task_crashes, self.counters, self.objects)
        self.lineage = Lineage(self.tasks, self.graph, self.objects, self.peers, self.counters)
        self.tasks.lineage = self.lineage
        self.objects.on_freed = self.lineage.freed
        self.tag_waits = TagWaits()
        self.relay = RelayRouter(self.peers, self.stores, self.counters)
        self.rejoin = Rejoin(config, self.peers, self.stores, self.tasks, self.objects, self.counters)
        self._intake = TaskIntake(config, self.tasks, self.graph, self.objects, self.tag_waits, self.counters)
        self._intake.rejoin = self.rejoin
        self.prefetch = Prefetch(config.worker_queue_seconds)
        self._placement = Placement(config, self.tasks, self.objects, self.peers.workers, self.counters, self.prefetch)
        self.room = self._placement.room  # how many of a queue's next tasks a worker may take now (tests, invariants)
        handlers: dict[type, _Handler] = {
            m.Hello: lambda peer, hello, now, out: out.append(
                (peer.identity, hello_again(self.peers, self.stores, peer, hello, now))),
            m.Heartbeat: self._on_heartbeat,
            m.Disconnect: self._on_disconnect,
            m.TaskSubmission: self._on_submission,
            m.CancelTasks: self._on_cancel,
            m.ClearRequest: self._on_clear,
            m.DeleteObjects: self._on_delete_objects,
            m.ObjectsLost: self._on_objects_lost,
            m.ObjectsHeld: self._on_objects_held,
            m.ShutdownRequest: self._on_shutdown,
            m.DrainWorkers: self._on_drain_workers,
            m.TaskResults: self._on_results,
            m.CancelRefused: self._on_cancel_refused,
            m.TaskStarted: self._on_task_started,
            m.Reannounce: self._on_reannounce,
            m.Relay: lambda peer, message, now, out: self.relay.on_relay(peer, message, out),
            m.TaskOutput: lambda worker, message, now, out: route_output(worker, message, self.tasks.records, out),
        }
        # The role table, as one lookup per message: a type missing from a role's handlers is a violation.
        self._handlers_by_role: dict[m.Role, dict[type, _Handler]] = {
            role: {kind: handlers[kind] for kind, roles in SENDERS.items() if role in roles} for role in m.Role
        }

    # ------------------------------------------------------------------------------------------ inputs

    def on_message(self, sender: bytes, message: m.Message, now: float) -> list[Outgoing]:
        out: list[Outgoing] = []
        self.tasks.now = now
        peer: ClientPeer | WorkerPeer | StorePeer | None = self.peers.clients.get(sender)
        if peer is not None:
            role = m.Role.CLIENT
        else:
            peer = self.peers.workers.get(sender)
            if peer is not None:
                role = m.Role.WORKER
            else:
                peer = self.stores.stores.get(sender)
                if peer is None:
                    self._on_unregistered(sender, message, now, out)
                    return out
                role = m.Role.STORE
        # Any decodable message is a sign of life, even one its sender may not send.
        peer.last_seen = now
        handler = self._handlers_by_role[role].get(type(message))
        if handler is None:
            out.append((sender, m.ProtocolError(reason=violation(role, type(message)))))
        else:
            handler(peer, message, now, out)
        # Stored results whose last use ended while tasks ended are deleted where they are held.
        self.objects.flush(self.peers.workers.values(), out)
        return out

    def on_bad_frame(self, sender: bytes, reason: str, *, drop_sender: bool = True) -> list[Outgoing]:
        """A frame that is not a message we can read (undecodable, or a control frame over the limit).

        The sender hears why. A registered peer that sends one is broken or hostile: it is dropped as if
        it had disconnected (a worker's tasks go back to the queue, a client's work is cancelled and its
        objects freed) and told so, which also ends any wait of its own. `drop_sender=False` is for a
        message that was fine but that the scheduler itself failed to handle: not the sender's fault.
        """
        out: list[Outgoing] = [(sender, m.ProtocolError(reason=reason))]
        why = f"dropped after a malformed message: {reason}"
        if drop_sender and self._drop(sender, why, out):
            out.append((sender, m.Disconnect(reason=why)))
        return out

    def on_connections_lost(self, identities: list[bytes], now: float) -> list[Outgoing]:
        """Peers whose connection their side ended (the process died) and who did not come back within the
        router's grace (router_link.take_lost): gone now, as at their timeout, but without waiting for it."""
        out: list[Outgoing] = []
        self.tasks.now = now
        for identity in identities:
            worker = self.peers.workers.get(identity)
            tasks = f", {len(worker.assigned)} tasks to reschedule" if worker is not None else ""
            self._drop(identity, f"lost its connection{tasks}", out)
        return out

    def _drop(self, identity: bytes, why: str, out: list[Outgoing]) -> bool:
        """Remove a registered peer as if it had left (a worker's tasks go back to the queue, a client's work is
        cancelled and its objects freed); False if no peer has that identity."""
        client = self.peers.clients.get(identity)
        worker = self.peers.workers.get(identity)
        store = self.stores.stores.get(identity)
        if client is not None:
            self._remove_client(client, why, logging.WARNING, out)
        elif worker is not None:
            self._remove_worker(worker, why, logging.WARNING, out)
        elif store is not None:
            self._remove_store(store, why, logging.WARNING, out)
        else:
            return False
        self.objects.flush(self.peers.workers.values(), out)
        self._placement.dispatch(out)
        return True

    def on_tick(self, now: float) -> list[Outgoing]:
        """Drop peers that fell silent, hand out what waits, and now and then rebalance the workers."""
        out: list[Outgoing] = []
        self.tasks.now = now
        for worker in self.peers.silent_workers(now):
            self._remove_worker(worker, f"timed out, {len(worker.assigned)} tasks to reschedule", logging.WARNING, out)
        for client in self.peers.silent_clients(now):
            self._remove_client(client, "timed out", logging.WARNING, out)
        if len(self.tag_waits):
            fail_tasks_without_capable_worker(self.tag_waits, self._placement, self.tasks, self.peers.workers.values(),
                                              now, out)
        if self.rejoin.pending:
            self.rejoin.on_tick(now, out)
        for store in self.stores.silent(now, self._config.worker_timeout_seconds):
            self._remove_store(store, "timed out", logging.WARNING, out)
        self.objects.flush(self.peers.workers.values(), out)
        self.prefetch.on_tick(self.peers.workers.values(), now, out)
        self._placement.dispatch(out)
        self._placement.balance(now, out)
        return out

    # ------------------------------------------------------------------------------------------ views
    @property
    def worker_count(self) -> int:
        return len(self.peers.workers)

    @property
    def client_count(self) -> int:
        return len(self.peers.clients)

    @property
    def task_count(self) -> int:
        return len(self.tasks.records)

    @property
    def unassigned_count(self) -> int:
        return self.tasks.waiting

    @property
    def object_count(self) -> int:
        return len(self.objects.stored)

    def workers(self) -> Iterable[WorkerPeer]:
        return self.peers.workers.values()

    def status(self, now: float) -> CoreStatus:
        """What the monitor feed shows of the core: task counts, clients, objects and workers."""
        return core_status(
            self.peers, self.stores, self.tasks, self.objects, self.counters, self._placement.waiting_for_tags(), now
        )

    def check_invariants(self) -> None:
        """Raise CoreInvariantError if the core's parts disagree (for tests: it walks the whole state)."""
        check_invariants(self._config, self.peers, self.stores, self.tasks, self.graph, self.objects, self.lineage,
                         self.should_exit, self.rejoin.held, self.room)

    # ------------------------------------------------------------------------------------------ peers

    def _on_unregistered(self, sender: bytes, message: m.Message, now: float, out: list[Outgoing]) -> None:
        if not isinstance(message, m.Hello):
            # A peer we dropped (timed out, or never said hello): tell it, so it can reconnect or exit.
            reason = "unknown peer: send hello first (or you were timed out, or the scheduler restarted)"
            out.append((sender, m.Refused(reason=reason, unknown_peer=True)))
            return
        if message.role == m.Role.STORE:
            self._on_store_hello(sender, message, now, out)
            return
        reply, worker = self.peers.on_hello(sender, message, now)
        if isinstance(reply, m.Welcome):
            reply.store_directory = self.stores.directory_for(message.host_key, message.store)
            self.rejoin.noticed(message, now)
        out.append((sender, reply))
        if worker is not None:
            self.prefetch.joined(worker)
            self._placement.workers_changed()
            self._placement.dispatch(out)

    def _on_heartbeat(self, peer: ClientPeer | WorkerPeer | StorePeer, heartbeat: m.Heartbeat, now: float,
                      out: list[Outgoing]) -> None:
        if not isinstance(peer, ClientPeer):
            peer.last_heartbeat = heartbeat  # for the monitor: a client's heartbeat fields mean nothing
        out.append((peer.identity, self.peers.heartbeat_echo(isinstance(peer, WorkerPeer))))

    def _on_disconnect(
        self, peer: ClientPeer | WorkerPeer | StorePeer, message: m.Disconnect, now: float, out: list[Outgoing]
    ) -> None:
        if isinstance(peer, ClientPeer):
            self._remove_client(peer, "disconnected", logging.INFO, out)
        elif isinstance(peer, WorkerPeer):
            self._remove_worker(peer, "disconnected", logging.INFO, out)
        else:
            self._remove_store(peer, "disconnected", logging.INFO, out)
        self._placement.dispatch(out)

    def _remove_client(self, client: ClientPeer, why: str, level: int, out: list[Outgoing]) -> None:
        """The client is gone: its unfinished tasks end without an outcome, and its objects are let go."""
        self.counters["tasks_dropped"] += self.tasks.drop_client_tasks(client, force=False, out=out)
        self._drop_lineage(client, out)
        self.objects.release_all(client, self.peers.workers.values(), out)
        self.peers.remove_client(client, why, level)
        self.relay.forget(identity=client.identity)

    def _drop_lineage(self, client: ClientPeer, out: list[Outgoing]) -> None:
        """The client's tasks are gone: so are its recipes, and it will send no lost object again."""
        router = ResultRouter()
        self.lineage.drop_client(client, router)
        router.flush(out)

    def _remove_worker(self, worker: WorkerPeer, why: str, level: int, out: list[Outgoing]) -> None:
        """The worker is gone: what it held is blamed (crash_blame.py), failed or queued again at the front."""
        self.peers.remove_worker(worker, why, level)
        self._placement.workers_changed()
        router = ResultRouter()
        records = self.tasks.records
        failed, retried = crash_blame.worker_died(
            worker, [records[task_id] for task_id in worker.assigned], self._config.max_task_crashes
        )
        for record, failure in failed:
            self.tasks.fail(record, failure, router)
        self.tasks.requeue(retried, router)
        # Its results that it may never have written into its store: made again, as if their holder were gone.
        orphans = self.objects.drop_holders(self.objects.unpublished_by(worker), out)
        if orphans:
            self.lineage.lose(orphans, router, out)
        router.flush(out)

    def _on_drain_workers(
        self, client: ClientPeer, request: m.DrainWorkers, now: float, out: list[Outgoing]
    ) -> None:
        """The named workers get nothing more, and give back what they hold and have not started (as
        balancing asks, §8 of PROTOCOL.md): it comes back as `returned` and is placed elsewhere."""
        newly, draining, unknown = self.peers.drain(request.worker_names)
        for worker in newly:
            if worker.assigned:
                out.append((worker.identity, m.ReleaseTasks(task_ids=list(worker.assigned))))
        out.append((client.identity, m.DrainWorkersResponse(draining=draining, unknown=unknown)))
    # ------------------------------------------------------------------------------------------ stores

    def _on_store_hello(self, sender: bytes, hello: m.Hello, now: float, out: list[Outgoing]) -> None:
        refusal = version_refusal(hello, self._config.speaks)
        if refusal is None:
            reason = self.stores.on_hello(sender, hello, now)
            if reason is not None:
                refusal = m.Refused(reason=reason)
        if refusal is not None:
            out.append((sender, refusal))
            return
        out.append((sender, self.peers.welcome(m.Role.STORE)))
        self._send_directory(out)

    def _remove_store(self, store: StorePeer, why: str, level: int, out: list[Outgoing]) -> None:
        """The store is gone, and with it every object it alone held (the object table's to settle)."""
        self.stores.remove(store, why, level)
        self.relay.store_left(store, why, out)
        self.counters["stores_lost" if level >= logging.WARNING else "stores_left"] += 1
        self._send_directory(out)
        orphans = self.objects.drop_holder(store.data_address)
        if orphans:
            router = ResultRouter()
            self.lineage.lose(orphans, router, out)
            router.flush(out)

    def _send_directory(self, out: list[Outgoing]) -> None:
        """Every client and worker hears the new directory, with its own home store."""
        for client in self.peers.clients.values():
            out.append((client.identity, self.stores.directory_for(client.host_key)))
        for worker in self.peers.workers.values():
            out.append((worker.identity, self.stores.directory_for(worker.host_key, worker.store_address)))

    def _on_shutdown(self, client: ClientPeer, message: m.ShutdownRequest, now: float, out: list[Outgoing]) -> None:
        if self._config.protected:
            out.append((client.identity, m.ShutdownResponse(
                accepted=False, reason="scheduler is in protected mode; start it with --no-protected to allow this"
            )))
            return
        logger.info("SchedulerCore: shutdown requested by a client")
        others = [identity for identity in self.peers.clients if identity != client.identity]
        for identity in [*self.peers.workers, *self.stores.stores, *others]:
            out.append((identity, m.Disconnect(reason="scheduler is shutting down")))
        out.append((client.identity, m.ShutdownResponse(accepted=True)))
        self.should_exit = True

    # ------------------------------------------------------------------------------------------ clients

    def _on_submission(
        self, client: ClientPeer, submission: m.TaskSubmission, now: float, out: list[Outgoing]
    ) -> None:
        problem = self.objects.upload(client, submission.objects)
        if problem is not None:
            out.append((client.identity, m.ProtocolError(reason=problem)))
            return
        router = ResultRouter()
        if self.objects.recovered:
            recovered, self.objects.recovered = self.objects.recovered, []
            self.lineage.resent(recovered, router)
        nested = False
        for group in submission.groups:
            if group.nesting_depth:
                self.prefetch.on_nested_submission(client, self.peers.workers.values(), now)
                nested = True
                break
        self._intake.accept(client, submission, router, now)
        router.flush(out)
        if nested:
            # Prefetch may just have deepened every worker: workers placement found full may have room now.
            self._placement.dispatch(out)
        else:
            self._placement.dispatch_new_tasks(out)

    def _on_cancel(self, client: ClientPeer, request: m.CancelTasks, now: float, out: list[Outgoing]) -> None:
        cancellation.cancel(client, request, self.tasks, self.counters, out)

    def _on_clear(self, client: ClientPeer, message: m.ClearRequest, now: float, out: list[Outgoing]) -> None:
        """Everything the client has ends, running tasks included, and its objects are let go; it stays."""
        canceled = self.tasks.drop_client_tasks(client, force=True, out=out)
        self.counters["tasks_dropped"] += canceled
        self._drop_lineage(client, out)
        self.objects.release_all(client, self.peers.workers.values(), out)
        out.append((client.identity, m.ClearResponse(canceled_tasks=canceled)))
        self._placement.dispatch(out)

    def _on_delete_objects(self, client: ClientPeer, request: m.DeleteObjects, now: float, out: list[Outgoing]) -> None:
        self.objects.delete(client, request.object_ids, self.tasks.records, self.peers.workers.values(), out)

    def _on_objects_lost(self, peer: ClientPeer | WorkerPeer | StorePeer, message: m.ObjectsLost, now: float,
                         out: list[Outgoing]) -> None:
        """A reader could not get these objects from their holders; a client asked to send some again cannot;
        a store no longer has them (as if it had left, for these objects only)."""
        router = ResultRouter()
        object_ids = [bytes(object_id) for object_id in message.object_ids]
        if isinstance(peer, ClientPeer):
            self.lineage.refused(peer, object_ids, router)
        if isinstance(peer, StorePeer):
            orphans = self.objects.drop_holder_of(peer.data_address, object_ids)
        else:
            orphans = self.objects.drop_holders(object_ids, out)
        if orphans:
            self.lineage.lose(orphans, router, out)
        router.flush(out)
        self._placement.dispatch(out)

    def _on_objects_held(self, store: StorePeer, message: m.ObjectsHeld, now: float, out: list[Outgoing]) -> None:
        """The store holds these objects: one more holder for each (a lost client object is back)."""
        if len(message.object_ids) != len(message.sizes):
            out.append((store.identity, m.ProtocolError(reason="objectsHeld has a different number of ids and sizes")))
            return
        object_ids = [bytes(object_id) for object_id in message.object_ids]
        self.rejoin.objects_held(store, object_ids, now)  # before note_held: a lost object it holds is known
        doomed = self.objects.note_held(store.data_address, object_ids, message.sizes, self.lineage.asked)
        if doomed:
            out.append((store.identity, m.DeleteObjects(object_ids=doomed)))
        if self.objects.recovered:
            recovered, self.objects.recovered = self.objects.recovered, []
            router = ResultRouter()
            self.lineage.resent(recovered, router)
            router.flush(out)
            self._placement.dispatch(out)

    # ------------------------------------------------------------------------------------------ workers

    def _on_results(self, worker: WorkerPeer, results: m.TaskResults, now: float, out: list[Outgoing]) -> None:
        if len(results.succeeded_ids) != len(results.payloads):
            reason = "results carry a different number of ids and payloads"
            out.append((worker.identity, m.ProtocolError(reason=reason)))
            return
        router = ResultRouter()
        if self.rejoin.active(now):
            results = self.rejoin.sift(worker, results, now, router, out)
        self._placement.pace.note(results, self.tasks.records)
        self.tasks.take_results(worker, results, router)
        router.flush(out)
        self.prefetch.on_results(worker, results, now, out)
        if self.rejoin.freed_others():  # rejoin.py: a late result freed another worker's slot too
            self._placement.dispatch(out)
        self._placement.dispatch_freed(worker, out)
        self.prefetch.after_dispatch(worker, now)

    def _on_reannounce(self, worker: WorkerPeer, message: m.Reannounce, now: float, out: list[Outgoing]) -> None:
        if self.rejoin.on_reannounce(worker, message, now):  # it may have work now
            self._placement.workers_changed()
            self._placement.dispatch(out)

    def _on_cancel_refused(self, worker: WorkerPeer, refusal: m.CancelRefused, now: float, out: list[Outgoing]) -> None:
        cancellation.refused(worker, refusal, self.tasks, out)

    def _on_task_started(self, worker: WorkerPeer, started: m.TaskStarted, now: float, out: list[Outgoing]) -> None:
        """A worker is about to run tasks sent with reportStart: note it, and let it go ahead with its own."""
        noted = crash_blame.note_started(worker, started.task_ids, self.tasks.records)
        if noted:
            out.append((worker.identity, m.TaskStarted(task_ids=noted)))

