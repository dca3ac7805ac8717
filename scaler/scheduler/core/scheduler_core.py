"""The scheduler's decisions, as a state machine with no I/O.

The I/O shell feeds it `(sender identity, decoded message, now)` and sends whatever it returns. There
are no sockets, threads or clocks in here, so the unit tests drive thousands of simulated peers and
injected faults in microseconds.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
from typing import Callable, Iterable

from scaler.protocol import messages as m
from scaler.protocol.layout import slots_by_row
from scaler.protocol.task_signature import TaskSignature
from scaler.scheduler.core.peers import ClientPeer, TaskRecord, WorkerPeer
from scaler.utility.identifiers import OBJECT_ID_BYTES, TASK_COUNTER_BITS

Outgoing = tuple[bytes, m.Message]

logger = logging.getLogger(__name__)

_MAX_WIRE_MILLISECONDS = 2**32 - 1


@dataclasses.dataclass(frozen=True)
class CoreConfig:
    protected: bool = True
    client_timeout_seconds: float = 60.0
    worker_timeout_seconds: float = 60.0
    heartbeat_interval_seconds: float = 2.0
    # Upper bound on any worker's advertised capacity; 0 trusts the worker.
    per_worker_queue_size: int = 0
    # Tasks waiting for a worker beyond this are rejected; -1 means no limit.
    max_tasks_waiting: int = -1
    # A task whose processor or worker died under it this many times fails with WorkerDiedError instead of
    # being retried (for whole-worker deaths, see _remove_worker for how a death is blamed on a task).
    max_task_crashes: int = 3
    # How often to look for imbalance between workers (0 turns balancing off), and how many looks in a
    # row must see it before queued tasks are moved.
    load_balance_seconds: float = 1.0
    load_balance_trigger_times: int = 2
    # Announced in Welcome so that peers never send what the I/O shell would not read (0: no limit).
    max_frame_bytes: int = 0
    max_control_frame_bytes: int = 0


def _wire_milliseconds(seconds: float) -> int:
    """Seconds as the UInt32 milliseconds of Welcome. SchedulerConfig already holds every timeout to what
    fits; this keeps a core made some other way from ever failing to encode (and so from dying) on one."""
    if not math.isfinite(seconds):
        return _MAX_WIRE_MILLISECONDS
    return min(max(int(seconds * 1000), 1), _MAX_WIRE_MILLISECONDS)


@dataclasses.dataclass
class _ObjectRecord:
    payload: m.Buffer
    name: str
    owners: set[bytes]


class _ResultRouter:
    """Collects results per client while one event is handled, then emits one message per client."""

    def __init__(self) -> None:
        self._by_client: dict[bytes, m.TaskResults] = {}

    def success(self, client: ClientPeer, task_id: int, payload: m.Buffer) -> None:
        results = self._results_for(client.identity)
        results.succeeded_ids.append(task_id)
        results.payloads.append(payload)

    def failure(self, client: ClientPeer, failure: m.TaskFailure) -> None:
        self._results_for(client.identity).failures.append(failure)

    def profile(self, client: ClientPeer, profile: m.TaskProfile) -> None:
        self._results_for(client.identity).profiles.append(profile)

    def warning(self, client: ClientPeer, warning: m.TaskWarning) -> None:
        self._results_for(client.identity).warnings.append(warning)

    def flush(self, out: list[Outgoing]) -> None:
        out.extend(self._by_client.items())
        self._by_client.clear()

    def _results_for(self, identity: bytes) -> m.TaskResults:
        results = self._by_client.get(identity)
        if results is None:
            results = self._by_client[identity] = m.TaskResults(succeeded_ids=[], payloads=[], failures=[])
        return results


def _refs_by_row(group: m.TaskGroup) -> dict[int, list[tuple[int, int]]]:
    """Group references by task row: row -> [(argument slot within the row, dependency task id)]."""
    width = group.args_per_task
    by_row: dict[int, list[tuple[int, int]]] = {}
    for flat_index, dependency_id in zip(group.ref_arg_indices, group.ref_task_ids):
        row, slot = divmod(flat_index, width)
        by_row.setdefault(row, []).append((slot, dependency_id))
    return by_row


def _assigned_count(worker: WorkerPeer) -> int:
    return len(worker.assigned)


def _water_fill(loads: list[int], room: list[int], count: int) -> list[int]:
    """How many of `count` tasks each worker gets, loads ascending, so that loads end up as even as possible."""
    shares = [0] * len(loads)
    remaining = count
    while remaining > 0:
        open_slots = [i for i in range(len(loads)) if room[i] > shares[i]]
        if not open_slots:
            break
        # The level all open workers would reach if the remaining tasks were spread perfectly.
        total = sum(loads[i] + shares[i] for i in open_slots) + remaining
        level = total // len(open_slots)
        given = 0
        for i in open_slots:
            grant = min(room[i] - shares[i], max(0, level - loads[i] - shares[i]), remaining - given)
            shares[i] += grant
            given += grant
        if given == 0:  # everyone is at the level: the rest go one by one to the least loaded
            for i in sorted(open_slots, key=lambda j: loads[j] + shares[j]):
                if given == remaining:
                    break
                shares[i] += 1
                given += 1
        remaining -= given
    return shares


class SchedulerCore:
    def __init__(self, config: CoreConfig) -> None:
        self._config = config
        self._clients: dict[bytes, ClientPeer] = {}
        self._workers: dict[bytes, WorkerPeer] = {}
        self._tasks: dict[int, TaskRecord] = {}
        self._unassigned: collections.deque[TaskRecord] = collections.deque()
        # Live entries of _unassigned: canceled ones stay in the deque until dispatch skips them.
        self._waiting = 0
        self._objects: dict[bytes, _ObjectRecord] = {}
        # Graph edges: task id -> the (dependent task, argument slot) pairs waiting for its result.
        self._dependents: dict[int, list[tuple[TaskRecord, int]]] = {}
        self._next_id_prefix = 1
        self.should_exit = False
        self._next_balance = 0.0
        self._imbalanced_checks = 0
        self.counters: collections.Counter[str] = collections.Counter()
        self._handlers: dict[type, Callable[[bytes, m.Message, float, list[Outgoing]], None]] = {
            m.Heartbeat: self._on_heartbeat,
            m.TaskSubmission: self._on_submission,
            m.TaskResults: self._on_results,
            m.CancelTasks: self._on_cancel,
            m.ClearRequest: self._on_clear,
            m.DeleteObjects: self._on_delete_objects,
            m.Disconnect: self._on_disconnect,
            m.ShutdownRequest: self._on_shutdown,
            m.CancelRefused: self._on_cancel_refused,
            m.TaskStarted: self._on_task_started,
        }

    # ------------------------------------------------------------------------------------------ inputs

    def on_message(self, sender: bytes, message: m.Message, now: float) -> list[Outgoing]:
        out: list[Outgoing] = []
        if isinstance(message, m.Hello):
            self._on_hello(sender, message, now, out)
            return out
        peer = self._clients.get(sender) or self._workers.get(sender)
        if peer is None:
            # A peer we dropped (timed out, or never said hello): tell it, so it can reconnect or exit.
            out.append((sender, m.Refused(reason="unknown peer: send hello first (or you were timed out)")))
            return out
        peer.last_seen = now
        handler = self._handlers.get(type(message))
        if handler is None:
            out.append((sender, m.ProtocolError(reason=f"unexpected message {type(message).__name__}")))
            return out
        handler(sender, message, now, out)
        return out

    def on_bad_frame(self, sender: bytes, reason: str, *, drop_sender: bool = True) -> list[Outgoing]:
        """A frame that is not a message we can read (undecodable, or a control frame over the limit).

        The sender hears why. A registered peer that sends one is broken or hostile: it is dropped as if
        it had disconnected (a worker's tasks go back to the queue, a client's work is cancelled and its
        objects freed) and told so, which also ends any wait of its own. `drop_sender=False` is for a
        message that was fine but that the scheduler itself failed to handle: not the sender's fault.
        """
        out: list[Outgoing] = [(sender, m.ProtocolError(reason=reason))]
        if not drop_sender:
            return out
        client = self._clients.get(sender)
        worker = self._workers.get(sender)
        if client is not None:
            logger.warning("ClientManager: client %s dropped after a malformed message: %s", client.name, reason)
            self._remove_client(client, out)
        elif worker is not None:
            logger.warning("WorkerManager: worker %s dropped after a malformed message: %s", worker.name, reason)
            self._remove_worker(worker, out)
        else:
            return out
        out.append((sender, m.Disconnect(reason=f"dropped after a malformed message: {reason}")))
        self._dispatch(out)
        return out

    def on_tick(self, now: float) -> list[Outgoing]:
        out: list[Outgoing] = []
        worker_deadline = now - self._config.worker_timeout_seconds
        for worker in [w for w in self._workers.values() if w.last_seen < worker_deadline]:
            logger.warning(
                "WorkerManager: worker %s timed out, %d tasks to reschedule", worker.name, len(worker.assigned)
            )
            self._remove_worker(worker, out)
        client_deadline = now - self._config.client_timeout_seconds
        for client in [c for c in self._clients.values() if c.last_seen < client_deadline]:
            logger.warning("ClientManager: client %s timed out", client.name)
            self._remove_client(client, out)
        self._dispatch(out)
        if self._config.load_balance_seconds > 0 and now >= self._next_balance:
            self._next_balance = now + self._config.load_balance_seconds
            self._balance(out)
        return out

    def _balance(self, out: list[Outgoing]) -> None:
        """Ask overloaded workers to give back queued tasks when others run dry.

        Only when nothing waits in the scheduler (else dispatch already feeds the idle) and the imbalance
        was seen `load_balance_trigger_times` checks in a row. A worker above the mean load releases its
        newest tasks down to the mean; the ones it has not started come back and are dispatched anew.
        """
        workers = list(self._workers.values())
        if self._waiting or len(workers) < 2:
            self._imbalanced_checks = 0
            return
        loads = [len(worker.assigned) for worker in workers]
        mean = sum(loads) / len(workers)
        if min(loads) > mean / 2 or max(loads) < 2:
            self._imbalanced_checks = 0
            return
        self._imbalanced_checks += 1
        if self._imbalanced_checks < self._config.load_balance_trigger_times:
            return
        self._imbalanced_checks = 0
        # Down to the mean rounded up, and not one above it: a worker running one task with one more
        # queued, next to an idle worker, would otherwise keep that task until the running one ends.
        target = math.ceil(mean)
        for worker, load in zip(workers, loads):
            if load > target:
                newest = list(worker.assigned)[target - load:]
                out.append((worker.identity, m.ReleaseTasks(task_ids=newest)))
                self.counters["balance_requests"] += 1

    # ------------------------------------------------------------------------------------------ views

    @property
    def worker_count(self) -> int:
        return len(self._workers)

    @property
    def client_count(self) -> int:
        return len(self._clients)

    @property
    def task_count(self) -> int:
        return len(self._tasks)

    @property
    def unassigned_count(self) -> int:
        return self._waiting

    @property
    def object_count(self) -> int:
        return len(self._objects)

    def workers(self) -> Iterable[WorkerPeer]:
        return self._workers.values()

    def status(self, now: float) -> dict:
        """A plain snapshot for the monitor feed: counts, clients, objects and workers."""
        running = sum(len(worker.assigned) for worker in self._workers.values())
        object_sizes = {object_id: len(record.payload) for object_id, record in self._objects.items()}
        workers = []
        for worker in self._workers.values():
            heartbeat = worker.last_heartbeat or m.Heartbeat()
            workers.append({
                "name": worker.name,
                "capacity": worker.capacity,
                "free": worker.free,
                "sent": worker.tasks_sent,
                "assigned": len(worker.assigned),
                "queued": heartbeat.queued_tasks,
                "agent_cpu_percent": heartbeat.cpu_percent,
                "agent_rss_bytes": heartbeat.rss_bytes,
                "processor_cpu_percent": heartbeat.processor_cpu_percent,
                "processor_rss_bytes": heartbeat.processor_rss_bytes,
                "latency_us": heartbeat.latency_us,
                "seconds_since_heard": now - worker.last_seen,
            })
        return {
            "tasks": {
                "unassigned": self._waiting,
                "running": running,
                "waiting_on_dependencies": len(self._tasks) - self._waiting - running,
                "success": self.counters["tasks_succeeded"],
                "failed": sum(self.counters[f"tasks_{kind.name.lower()}"] for kind in (
                    m.FailureKind.RAISED, m.FailureKind.WORKER_DIED, m.FailureKind.SERIALIZATION,
                    m.FailureKind.REJECTED,
                )),
                "canceled": self.counters["tasks_canceled"],
                "not_found": self.counters["tasks_not_found"],
            },
            "clients": [
                {
                    "name": client.name,
                    "tasks": len(client.task_ids),
                    "objects": len(client.object_ids),
                    "object_bytes": sum(object_sizes.get(object_id, 0) for object_id in client.object_ids),
                }
                for client in self._clients.values()
            ],
            "objects": {"count": len(self._objects), "bytes": sum(object_sizes.values())},
            "workers": workers,
        }

    # ------------------------------------------------------------------------------------------ handshake

    def _on_hello(self, sender: bytes, hello: m.Hello, now: float, out: list[Outgoing]) -> None:
        # A registered peer's second hello changes nothing, whatever it says: a `refused` would tell the peer
        # to stop while the scheduler still counted on it.
        if sender in self._clients or sender in self._workers:
            out.append((sender, m.ProtocolError(reason="hello sent twice on one connection")))
            return
        if hello.protocol_version != m.PROTOCOL_VERSION:
            out.append((sender, m.Refused(
                reason=f"protocol version {hello.protocol_version} not supported, scheduler speaks {m.PROTOCOL_VERSION}"
            )))
            return
        welcome = m.Welcome(
            heartbeat_interval_ms=_wire_milliseconds(self._config.heartbeat_interval_seconds),
            peer_timeout_ms=_wire_milliseconds(
                self._config.client_timeout_seconds if hello.role == m.Role.CLIENT
                else self._config.worker_timeout_seconds
            ),
            max_frame_bytes=self._config.max_frame_bytes,
            max_control_frame_bytes=self._config.max_control_frame_bytes,
        )
        if hello.role == m.Role.CLIENT:
            prefix = self._next_id_prefix
            self._next_id_prefix += 1
            self._clients[sender] = ClientPeer(
                identity=sender, name=hello.name, id_prefix=prefix, last_seen=now
            )
            welcome.id_prefix = prefix
            logger.info("ClientManager: client %s connected", hello.name)
        else:
            capacity = hello.capacity
            if self._config.per_worker_queue_size > 0:
                capacity = min(capacity, self._config.per_worker_queue_size)
            if capacity <= 0:
                out.append((sender, m.Refused(reason="a worker must accept at least one task")))
                return
            self._workers[sender] = WorkerPeer(identity=sender, name=hello.name, capacity=capacity, last_seen=now)
            logger.info("WorkerManager: worker %s connected, capacity %d", hello.name, capacity)
        out.append((sender, welcome))
        if hello.role == m.Role.WORKER:
            self._dispatch(out)

    def _on_heartbeat(self, sender: bytes, message: m.Message, now: float, out: list[Outgoing]) -> None:
        assert isinstance(message, m.Heartbeat)
        worker = self._workers.get(sender)
        if worker is not None:
            worker.last_heartbeat = message
        out.append((sender, m.HeartbeatEcho()))

    # ------------------------------------------------------------------------------------------ tasks

    def _on_submission(self, sender: bytes, message: m.Message, now: float, out: list[Outgoing]) -> None:
        assert isinstance(message, m.TaskSubmission)
        client = self._clients.get(sender)
        if client is None:
            out.append((sender, m.ProtocolError(reason="only clients submit tasks")))
            return
        if any(len(item.object_id) != OBJECT_ID_BYTES for item in message.objects):
            out.append((sender, m.ProtocolError(reason=f"object ids are {OBJECT_ID_BYTES} bytes long")))
            return
        for item in message.objects:
            stored = self._objects.get(item.object_id)
            if stored is None:
                self._objects[item.object_id] = _ObjectRecord(payload=item.payload, name=item.name, owners={sender})
            else:
                stored.owners.add(sender)
            client.object_ids.add(item.object_id)

        router = _ResultRouter()
        limit = self._config.max_tasks_waiting
        quiet_ids = set(message.quiet_task_ids)
        # Nested tasks jump the queue: their parents hold processors until they finish.
        ready: list[TaskRecord] = []
        nested: list[TaskRecord] = []
        for group in message.groups:
            problem = self._check_group(client, group)
            waiting_after = self._waiting + len(ready) + len(nested) + len(group.task_ids)
            if problem is None and limit >= 0 and waiting_after > limit:
                problem = f"scheduler queue is full ({limit} tasks waiting); submit fewer tasks at once"
            if problem is not None:
                self.counters["tasks_rejected"] += len(group.task_ids)
                for task_id in group.task_ids:
                    router.failure(client, m.TaskFailure(
                        task_id=task_id, kind=m.FailureKind.REJECTED, type_name="TaskRejectedError", message=problem
                    ))
                continue
            signature = TaskSignature.of_group(group)
            width = group.args_per_task
            args = group.args
            refs_by_row = _refs_by_row(group) if group.ref_task_ids else {}
            objects_by_row = slots_by_row(group.object_arg_indices, group.args_per_task)
            for index, task_id in enumerate(group.task_ids):
                record = TaskRecord(
                    task_id=task_id, client=client, signature=signature, args=args[index * width:(index + 1) * width]
                )
                if quiet_ids and task_id in quiet_ids:
                    record.quiet = True
                if objects_by_row:
                    record.object_slots = objects_by_row.get(index)
                self._tasks[task_id] = record
                client.task_ids.add(task_id)
                row_refs = refs_by_row.get(index)
                if row_refs:
                    self._park(record, row_refs)
                elif group.nesting_depth:
                    nested.append(record)
                else:
                    ready.append(record)
            self._claim_objects(client, signature)
            for flat_index in group.object_arg_indices:
                self._claim_object(client, bytes(group.args[flat_index]))
            self.counters["tasks_submitted"] += len(group.task_ids)
        self._unassigned.extendleft(reversed(nested))
        self._unassigned.extend(ready)
        self._waiting += len(ready) + len(nested)
        router.flush(out)
        self._dispatch(out)

    def _claim_objects(self, client: ClientPeer, signature: TaskSignature) -> None:
        for object_id in (signature.function_id, signature.serializer_id):
            if object_id:
                self._claim_object(client, object_id)

    def _claim_object(self, client: ClientPeer, object_id: bytes) -> None:
        """A client using an object keeps it alive, even one another client uploaded first."""
        if object_id not in client.object_ids:
            self._objects[object_id].owners.add(client.identity)
            client.object_ids.add(object_id)

    def _check_group(self, client: ClientPeer, group: m.TaskGroup) -> str | None:
        if len(group.args) != group.args_per_task * len(group.task_ids):
            return f"group carries {len(group.args)} arguments for {len(group.task_ids)} tasks of {group.args_per_task}"
        if len(group.keywords) > group.args_per_task:
            return "more keyword names than arguments per task"
        if len(group.function_id) != OBJECT_ID_BYTES or group.function_id not in self._objects:
            return "unknown function object: send its payload with or before the first task that uses it"
        if group.serializer_id and group.serializer_id not in self._objects:
            return "unknown serializer object"
        if len(set(group.task_ids)) != len(group.task_ids):
            return "a task id appears twice in one group"
        for task_id in group.task_ids:
            if task_id >> TASK_COUNTER_BITS != client.id_prefix:
                return f"task id {task_id:#x} does not carry this client's prefix {client.id_prefix:#x}"
            if task_id in self._tasks:
                return f"task id {task_id:#x} is already in use"
        for flat_index in group.object_arg_indices:
            if flat_index >= len(group.args) or bytes(group.args[flat_index]) not in self._objects:
                return "an object argument names an unknown object (was it cleared, or sent by a client that left?)"
        if group.ref_task_ids or group.ref_arg_indices:
            return self._check_references(client, group)
        return None

    def _check_references(self, client: ClientPeer, group: m.TaskGroup) -> str | None:
        if len(group.ref_arg_indices) != len(group.ref_task_ids):
            return "refArgIndices and refTaskIds differ in length"
        width = max(group.args_per_task, 1)
        row_of = {task_id: row for row, task_id in enumerate(group.task_ids)}
        object_indices = set(group.object_arg_indices)
        for flat_index, dependency_id in zip(group.ref_arg_indices, group.ref_task_ids):
            if flat_index >= len(group.args):
                return f"argument reference {flat_index} points past the {len(group.args)} arguments"
            if flat_index in object_indices:
                # Its object id would be overwritten by the result, which dispatch would then look up as an object.
                return f"argument {flat_index} is both an object argument and a task reference"
            dependency_row = row_of.get(dependency_id)
            if dependency_row is not None:
                if dependency_row >= flat_index // width:
                    return "a task may only depend on tasks sent before it"
                continue
            dependency = self._tasks.get(dependency_id)
            if dependency is None or dependency.client is not client:
                return f"depends on task {dependency_id:#x}, which is unknown, finished, or another client's"
        return None

    def _park(self, record: TaskRecord, references: list[tuple[int, int]]) -> None:
        """Hold a graph task until every argument slot that waits on another task has its result."""
        for slot, dependency_id in references:
            self._dependents.setdefault(dependency_id, []).append((record, slot))
        record.waiting_on = len(references)

    def _on_results(self, sender: bytes, message: m.Message, now: float, out: list[Outgoing]) -> None:
        assert isinstance(message, m.TaskResults)
        worker = self._workers.get(sender)
        if worker is None:
            out.append((sender, m.ProtocolError(reason="only workers send results")))
            return
        if len(message.succeeded_ids) != len(message.payloads):
            out.append((sender, m.ProtocolError(reason="results carry a different number of ids and payloads")))
            return
        router = _ResultRouter()
        tasks = self._tasks
        if message.warnings:
            self._route_warnings(worker, message.warnings, router)
        profiles = {profile.task_id: profile for profile in message.profiles}
        for task_id, payload in zip(message.succeeded_ids, message.payloads):
            record = tasks.get(task_id)
            if record is None or record.worker is not worker:
                continue  # late or duplicate: the task was canceled, or rescheduled after this worker was dropped
            self._complete(record, payload, router)
            if profiles and task_id in profiles and not record.quiet:
                router.profile(record.client, profiles[task_id])
        # Keyed by task id: a worker naming one task twice in a message must not queue it twice.
        back_to_queue: dict[int, TaskRecord] = {}
        for failure in message.failures:
            record = tasks.get(failure.task_id)
            if record is None or record.worker is not worker or failure.task_id in back_to_queue:
                continue
            if failure.kind == m.FailureKind.WORKER_DIED:
                record.crashes += 1
                if record.crashes >= self._config.max_task_crashes:
                    failure.message = (
                        f"{failure.message} (processors or workers died under it {record.crashes} times, giving up)"
                    )
                    self._finish_with_failure(record, failure, router)
                    continue
            if failure.kind in (m.FailureKind.RETURNED, m.FailureKind.WORKER_DIED):
                back_to_queue[failure.task_id] = record
                continue
            self._finish_with_failure(record, failure, router)
        self._return_to_queue(list(back_to_queue.values()), router)
        router.flush(out)
        self._dispatch(out)

    def _route_warnings(self, worker: WorkerPeer, warnings: list[m.TaskWarning], router: _ResultRouter) -> None:
        """Warnings go to the task's client, in the same message as the outcome that comes with them.

        Those of quiet graph tasks too: the client holds them for whoever gets the graph's results (a
        warning deep inside a graph is still news to the caller of get()). Warnings of a task this
        worker no longer holds are dropped with its late result.
        """
        tasks = self._tasks
        for warning in warnings:
            record = tasks.get(warning.task_id)
            if record is not None and record.worker is worker:
                router.warning(record.client, warning)

    def _complete(self, record: TaskRecord, payload: m.Buffer, router: _ResultRouter) -> None:
        dependents = self._forget(record)
        if not record.quiet:
            router.success(record.client, record.task_id, payload)
        self.counters["tasks_succeeded"] += 1
        tasks = self._tasks
        for dependent, slot in dependents:
            if tasks.get(dependent.task_id) is not dependent:
                continue  # canceled meanwhile
            dependent.args[slot] = payload
            dependent.waiting_on -= 1
            if dependent.waiting_on == 0:
                self._unassigned.append(dependent)
                self._waiting += 1

    def _finish_with_failure(self, record: TaskRecord, failure: m.TaskFailure, router: _ResultRouter) -> None:
        """The task ends unsuccessfully, and so does every task waiting on its result, with the same failure."""
        pending = [(record, failure)]
        while pending:
            current, current_failure = pending.pop()
            dependents = self._forget(current)
            if not current.quiet:
                router.failure(current.client, current_failure)
            self.counters[f"tasks_{current_failure.kind.name.lower()}"] += 1
            for dependent, _ in dependents:
                if self._tasks.get(dependent.task_id) is dependent:
                    pending.append((dependent, dataclasses.replace(current_failure, task_id=dependent.task_id)))

    def _return_to_queue(self, records: list[TaskRecord], router: _ResultRouter) -> None:
        """Unfinished tasks a worker no longer holds go to the front of the queue, keeping their order."""
        requeued = []
        for record in records:
            if record.cancel_requested:
                # Still linked to its worker, so _forget frees that slot and does not count it as queued.
                self._finish_with_failure(
                    record, m.TaskFailure(task_id=record.task_id, kind=m.FailureKind.CANCELED), router
                )
                continue
            if record.worker is not None:
                record.worker.assigned.pop(record.task_id, None)
                record.worker = None
            record.started = False
            requeued.append(record)
        self._unassigned.extendleft(reversed(requeued))
        self._waiting += len(requeued)
        self.counters["tasks_rescheduled"] += len(requeued)

    def _on_cancel(self, sender: bytes, message: m.Message, now: float, out: list[Outgoing]) -> None:
        assert isinstance(message, m.CancelTasks)
        client = self._clients.get(sender)
        if client is None:
            return
        router = _ResultRouter()
        per_worker: dict[bytes, list[int]] = {}
        # A task this cancel ends early (a dependent of one canceled before it, or an id listed twice) has its
        # outcome already: it must not get a second one, notFound.
        live_before = client.task_ids.intersection(message.task_ids)
        for task_id in message.task_ids:
            record = self._tasks.get(task_id)
            if record is None and task_id in live_before:
                continue
            if record is None or record.client is not client:
                router.failure(client, m.TaskFailure(task_id=task_id, kind=m.FailureKind.NOT_FOUND))
                self.counters["tasks_not_found"] += 1
            elif record.worker is None:
                self._finish_with_failure(record, m.TaskFailure(task_id=task_id, kind=m.FailureKind.CANCELED), router)
            else:
                record.cancel_requested = True
                per_worker.setdefault(record.worker.identity, []).append(task_id)
        router.flush(out)
        out.extend(
            (identity, m.CancelTasks(task_ids=task_ids, force=message.force))
            for identity, task_ids in per_worker.items()
        )

    def _on_cancel_refused(self, sender: bytes, message: m.Message, now: float, out: list[Outgoing]) -> None:
        """A worker could not cancel tasks that had started: tell their clients, whose cancel() returns False."""
        assert isinstance(message, m.CancelRefused)
        worker = self._workers.get(sender)
        if worker is None:
            out.append((sender, m.ProtocolError(reason="only workers refuse cancels")))
            return
        per_client: dict[bytes, list[int]] = {}
        for task_id in message.task_ids:
            record = self._tasks.get(task_id)
            if record is not None and record.worker is worker:
                record.cancel_requested = False  # it runs to the end; a later requeue must not cancel it
                per_client.setdefault(record.client.identity, []).append(task_id)
        out.extend((identity, m.CancelRefused(task_ids=task_ids)) for identity, task_ids in per_client.items())

    def _on_task_started(self, sender: bytes, message: m.Message, now: float, out: list[Outgoing]) -> None:
        """A worker is about to run tasks sent with reportStart: note it and let it go ahead.

        Tasks no longer this worker's (finished, or canceled meanwhile) are not answered: a cancel is
        already on its way to the worker and drops them there.
        """
        assert isinstance(message, m.TaskStarted)
        worker = self._workers.get(sender)
        if worker is None:
            out.append((sender, m.ProtocolError(reason="only workers report task starts")))
            return
        noted = []
        for task_id in message.task_ids:
            record = self._tasks.get(task_id)
            if record is not None and record.worker is worker:
                record.started = True
                noted.append(task_id)
        if noted:
            out.append((sender, m.TaskStarted(task_ids=noted)))

    def _on_clear(self, sender: bytes, message: m.Message, now: float, out: list[Outgoing]) -> None:
        client = self._clients.get(sender)
        if client is None:
            return
        canceled = self._drop_client_work(client, out, force=True)
        out.append((sender, m.ClearResponse(canceled_tasks=canceled)))
        self._dispatch(out)

    def _on_disconnect(self, sender: bytes, message: m.Message, now: float, out: list[Outgoing]) -> None:
        client = self._clients.get(sender)
        if client is not None:
            logger.info("ClientManager: client %s disconnected", client.name)
            self._remove_client(client, out)
            self._dispatch(out)
            return
        worker = self._workers.get(sender)
        if worker is not None:
            logger.info("WorkerManager: worker %s disconnected", worker.name)
            self._remove_worker(worker, out)
            self._dispatch(out)

    def _on_shutdown(self, sender: bytes, message: m.Message, now: float, out: list[Outgoing]) -> None:
        if sender not in self._clients:
            out.append((sender, m.ProtocolError(reason="only clients may ask the scheduler to shut down")))
            return
        if self._config.protected:
            out.append((sender, m.ShutdownResponse(
                accepted=False, reason="scheduler is in protected mode; start it with --no-protected to allow this"
            )))
            return
        logger.info("Scheduler: shutdown requested by a client")
        for identity in list(self._workers) + [c for c in self._clients if c != sender]:
            out.append((identity, m.Disconnect(reason="scheduler is shutting down")))
        out.append((sender, m.ShutdownResponse(accepted=True)))
        self.should_exit = True

    # ------------------------------------------------------------------------------------------ dispatch

    def _dispatch(self, out: list[Outgoing]) -> None:
        """Hand waiting tasks to workers with free slots, filling the least loaded first ("water filling").

        Every worker ends as close as capacity allows to one common number of assigned tasks, so tasks
        trickling in one at a time still go to idle workers, and tasks handed back by a busy worker do
        not go straight back to it.
        """
        while self._waiting > 0:
            available = sorted((w for w in self._workers.values() if w.free > 0), key=_assigned_count)
            if not available:
                return
            shares = _water_fill([len(w.assigned) for w in available], [w.free for w in available], self._waiting)
            handed = 0
            for worker, share in zip(available, shares):
                if share:
                    records = self._take(share)
                    if records:
                        handed += len(records)
                        out.append((worker.identity, self._submission_for(worker, records)))
            if handed == 0:
                return

    def _take(self, count: int) -> list[TaskRecord]:
        queue = self._unassigned
        records: list[TaskRecord] = []
        while queue and len(records) < count:
            record = queue.popleft()
            if not record.canceled:
                records.append(record)
        self._waiting -= len(records)
        return records

    def _submission_for(self, worker: WorkerPeer, records: list[TaskRecord]) -> m.TaskSubmission:
        groups: dict[object, m.TaskGroup] = {}
        objects: list[m.ObjectPayload] = []
        for record in records:
            record.worker = worker
            worker.assigned[record.task_id] = None
            signature = record.signature
            key = (signature, True) if record.suspect else signature
            group = groups.get(key)
            if group is None:
                group = groups[key] = signature.new_group(report_start=record.suspect)
                for object_id in (signature.serializer_id, signature.function_id):
                    if object_id and object_id not in worker.known_object_ids:
                        stored = self._objects[object_id]
                        objects.append(m.ObjectPayload(object_id=object_id, payload=stored.payload, name=stored.name))
                        worker.known_object_ids.add(object_id)
            group.task_ids.append(record.task_id)
            if record.object_slots:
                base = len(group.args)
                for slot in record.object_slots:
                    object_id = bytes(record.args[slot])
                    if object_id not in worker.known_object_ids:
                        stored = self._objects[object_id]
                        objects.append(m.ObjectPayload(object_id=object_id, payload=stored.payload, name=stored.name))
                        worker.known_object_ids.add(object_id)
                    group.object_arg_indices.append(base + slot)
            group.args.extend(record.args)
        worker.tasks_sent += len(records)
        return m.TaskSubmission(objects=objects, groups=list(groups.values()))

    # ------------------------------------------------------------------------------------------ removal

    def _forget(self, record: TaskRecord) -> list[tuple[TaskRecord, int]]:
        """The task is finished for good: no state about it stays behind. Returns who waited on it."""
        del self._tasks[record.task_id]
        record.client.task_ids.discard(record.task_id)
        if record.worker is not None:
            record.worker.assigned.pop(record.task_id, None)
        elif record.waiting_on == 0:
            record.canceled = True  # still in the unassigned queue; _take skips it
            self._waiting -= 1
        return self._dependents.pop(record.task_id, [])

    def _drop_client_work(self, client: ClientPeer, out: list[Outgoing], force: bool = False) -> int:
        """Cancel every unfinished task of the client and release its objects; `force` stops running ones too."""
        per_worker: dict[bytes, list[int]] = {}
        canceled = 0
        for task_id in list(client.task_ids):
            record = self._tasks[task_id]
            if record.worker is not None:
                per_worker.setdefault(record.worker.identity, []).append(task_id)
            self._forget(record)
            canceled += 1
        out.extend(
            (identity, m.CancelTasks(task_ids=task_ids, force=force)) for identity, task_ids in per_worker.items()
        )
        self._release_objects(client, out)
        return canceled

    def _on_delete_objects(self, sender: bytes, message: m.Message, now: float, out: list[Outgoing]) -> None:
        """A client drops some of its objects (the hidden objects of shared arguments, once their tasks finished)."""
        client = self._clients.get(sender)
        if client is None:
            out.append((sender, m.ProtocolError(reason="only clients delete objects")))
            return
        assert isinstance(message, m.DeleteObjects)
        doomed = {bytes(object_id) for object_id in message.object_ids} & client.object_ids
        if doomed and client.task_ids:
            # An object a live task still names stays until clear() or disconnect: dispatch must find it.
            for task_id in client.task_ids:
                record = self._tasks[task_id]
                doomed.discard(record.signature.function_id)
                doomed.discard(record.signature.serializer_id)
                if record.object_slots:
                    doomed.difference_update(bytes(record.args[slot]) for slot in record.object_slots)
        if doomed:
            client.object_ids -= doomed
            self._free_objects(client, doomed, out)

    def _release_objects(self, client: ClientPeer, out: list[Outgoing]) -> None:
        self._free_objects(client, client.object_ids, out)
        client.object_ids.clear()

    def _free_objects(self, client: ClientPeer, object_ids: Iterable[bytes], out: list[Outgoing]) -> None:
        """The client lets go of these objects; those nobody else holds are deleted here and in the workers."""
        freed = []
        for object_id in object_ids:
            record = self._objects.get(object_id)
            if record is None:
                continue
            record.owners.discard(client.identity)
            if not record.owners:
                del self._objects[object_id]
                freed.append(object_id)
        if not freed:
            return
        freed_set = set(freed)
        for worker in self._workers.values():
            held = worker.known_object_ids & freed_set
            if held:
                worker.known_object_ids -= held
                out.append((worker.identity, m.DeleteObjects(object_ids=list(held))))

    def _remove_client(self, client: ClientPeer, out: list[Outgoing]) -> None:
        self._drop_client_work(client, out)
        del self._clients[client.identity]

    def _remove_worker(self, worker: WorkerPeer, out: list[Outgoing]) -> None:
        """The worker is gone: everything it held goes back to the front of the queue, oldest first.

        Which of its tasks was running, and so may have killed it, is unknown: all of them become suspects,
        which their next worker reports before starting (TaskStarted). A suspect reported started on a
        worker that then dies is blamed for that death and for the one that made it a suspect, so a task
        that kills every worker it runs on fails with WorkerDiedError after `max_task_crashes` deaths.
        """
        del self._workers[worker.identity]
        router = _ResultRouter()
        limit = self._config.max_task_crashes
        requeued = []
        for record in [self._tasks[task_id] for task_id in worker.assigned]:
            if record.started:
                record.crashes += 2 if record.blame_pending else 1
                record.blame_pending = False
                if record.crashes >= limit and not record.cancel_requested:
                    self._finish_with_failure(record, m.TaskFailure(
                        task_id=record.task_id, kind=m.FailureKind.WORKER_DIED,
                        type_name="scaler.errors.WorkerDiedError",
                        message=(
                            f"the worker running this task died ({worker.name}); workers or processors died "
                            f"under it {record.crashes} times, giving up (--max-task-crashes {limit})"
                        ),
                    ), router)
                    continue
            elif not record.suspect:
                record.blame_pending = True
            record.suspect = True
            requeued.append(record)
        self._return_to_queue(requeued, router)
        router.flush(out)
