"""A simulated cluster around the sans-I/O scheduler core.

The harness plays every client and worker: it feeds the core `(identity, message, now)`, and routes
whatever the core returns into the inbox of the peer it is addressed to. Simulated workers remember the
tasks they were handed and answer them on request; simulated clients remember every result they got,
so a test can check that each task was answered exactly once, to the client that submitted it. After
every message and tick the core checks its own invariants (SchedulerCore.check_invariants), unless a
test of scale turns that off.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Iterable

from scaler.protocol import messages as m
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.scheduler_core import SchedulerCore
from scaler.utility.identifiers import TASK_COUNTER_BITS, content_object_id

FUNCTION_PAYLOAD = b"cloudpickled function: lambda x: x + 1"
FUNCTION_ID = content_object_id(FUNCTION_PAYLOAD)


def payload_for(task_id: int) -> bytes:
    """What a simulated worker answers for a task, so a test can check the payload reached the right task."""
    return b"result-%d" % task_id


@dataclasses.dataclass
class SimClient:
    identity: bytes
    prefix: int = 0
    counter: int = 0
    inbox: list = dataclasses.field(default_factory=list)
    # Every outcome received for each task id: ("ok", payload) or ("failed", TaskFailure).
    outcomes: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(list))
    sent_objects: set = dataclasses.field(default_factory=set)

    def next_task_ids(self, count: int) -> list[int]:
        first = self.counter
        self.counter += count
        return [(self.prefix << TASK_COUNTER_BITS) | (first + index) for index in range(count)]

    def received(self, kind: type) -> list:
        return [message for message in self.inbox if isinstance(message, kind)]

    def failures(self, kind: m.FailureKind | None = None) -> list[m.TaskFailure]:
        return [
            failure
            for message in self.received(m.TaskResults)
            for failure in message.failures
            if kind is None or failure.kind == kind
        ]

    def successes(self) -> dict[int, bytes]:
        result = {}
        for message in self.received(m.TaskResults):
            result.update(zip(message.succeeded_ids, message.payloads))
        return result


@dataclasses.dataclass
class SimWorker:
    identity: bytes
    capacity: int
    inbox: list = dataclasses.field(default_factory=list)
    # Tasks handed to this worker and not yet answered, in the order received.
    pending: dict = dataclasses.field(default_factory=dict)
    # Every task id this worker was ever handed, with repetitions.
    received_task_ids: list = dataclasses.field(default_factory=list)
    objects: dict = dataclasses.field(default_factory=dict)
    max_pending_seen: int = 0
    # Its hello tags: the harness checks that it is never handed a task requiring others.
    tags: frozenset = frozenset()

    def submissions(self) -> list[m.TaskSubmission]:
        return [message for message in self.inbox if isinstance(message, m.TaskSubmission)]

    def received(self, kind: type) -> list:
        return [message for message in self.inbox if isinstance(message, kind)]


@dataclasses.dataclass
class SimStore:
    identity: bytes
    data_address: str
    host_key: str
    capacity_bytes: int
    inbox: list = dataclasses.field(default_factory=list)

    def received(self, kind: type) -> list:
        return [message for message in self.inbox if isinstance(message, kind)]


def last_directory(inbox: list) -> m.StoreDirectory:
    """The store directory a peer holds now: the latest storeDirectory, else its welcome's."""
    for message in reversed(inbox):
        if isinstance(message, m.StoreDirectory):
            return message
        if isinstance(message, m.Welcome):
            return message.store_directory
    raise AssertionError("no welcome yet")


class SimulatedCluster:
    def __init__(
        self, config: CoreConfig | None = None, *, now: float = 1000.0, check_invariants: bool = True,
        prefetch: bool = False,
    ) -> None:
        config = config or CoreConfig()
        if not prefetch:
            # A test sees placement alone: every worker filled up to its capacity at once, which prefetch
            # (prefetch.py, see test_core_prefetch.py) allows only once it has measured a worker's pace.
            config = dataclasses.replace(config, worker_queue_seconds=0.0)
        self.core = SchedulerCore(config)
        self.now = now
        self.check_invariants = check_invariants
        self.clients: dict[bytes, SimClient] = {}
        self.workers: dict[bytes, SimWorker] = {}
        self.stores: dict[bytes, SimStore] = {}
        # Messages the core addressed to identities the harness does not (or no longer) play.
        self.stray: list[tuple[bytes, m.Message]] = []
        self.departed: dict[bytes, list] = collections.defaultdict(list)
        self.stored_runs: dict[int, int] = {}

    # ------------------------------------------------------------------------------------------ plumbing

    def send(self, identity: bytes, message: m.Message) -> list[tuple[bytes, m.Message]]:
        out = self.core.on_message(identity, message, self.now)
        if self.check_invariants:
            self.core.check_invariants()
        self._route(out)
        return out

    def tick(self, advance: float = 0.0) -> list[tuple[bytes, m.Message]]:
        self.now += advance
        out = self.core.on_tick(self.now)
        if self.check_invariants:
            self.core.check_invariants()
        self._route(out)
        return out

    def lose_connections(self, identities: Iterable[bytes]) -> list[tuple[bytes, m.Message]]:
        """As the scheduler's loop, once the router says these peers' connections ended and did not come back."""
        out = self.core.on_connections_lost(list(identities), self.now)
        if self.check_invariants:
            self.core.check_invariants()
        self._route(out)
        return out

    def _route(self, out: Iterable[tuple[bytes, m.Message]]) -> None:
        for identity, message in out:
            if identity in self.workers:
                self._to_worker(self.workers[identity], message)
            elif identity in self.clients:
                self._to_client(self.clients[identity], message)
            elif identity in self.stores:
                self.stores[identity].inbox.append(message)
            else:
                self.stray.append((identity, message))

    def _to_worker(self, worker: SimWorker, message: m.Message) -> None:
        worker.inbox.append(message)
        if isinstance(message, m.TaskSubmission):
            for item in message.objects:
                worker.objects[item.object_id] = item.payload
            for group in message.groups:
                assert group.function_id in worker.objects, "task sent before its function object"
                assert worker.tags.issuperset(group.required_tags), "task sent to a worker without its tags"
                for task_id in group.task_ids:
                    worker.pending[task_id] = group.function_id
                    worker.received_task_ids.append(task_id)
            worker.max_pending_seen = max(worker.max_pending_seen, len(worker.pending))
        elif isinstance(message, m.DeleteObjects):
            for object_id in message.object_ids:
                worker.objects.pop(object_id, None)

    def _to_client(self, client: SimClient, message: m.Message) -> None:
        client.inbox.append(message)
        if isinstance(message, m.Welcome):
            client.prefix = message.id_prefix
        elif isinstance(message, m.TaskResults):
            for task_id, payload in zip(message.succeeded_ids, message.payloads):
                client.outcomes[task_id].append(("ok", payload))
            for stored in message.stored:
                client.outcomes[stored.task_id].append(("stored", stored))
            for failure in message.failures:
                client.outcomes[failure.task_id].append(("failed", failure))

    # ------------------------------------------------------------------------------------------ peers

    def add_client(self, identity: bytes | None = None, host_key: str = "") -> SimClient:
        identity = identity or b"client-%d" % len(self.clients)
        client = self.clients[identity] = SimClient(identity=identity)
        self.send(identity, m.Hello(role=m.Role.CLIENT, name=identity.decode(), host_key=host_key))
        assert isinstance(client.inbox[-1], m.Welcome), client.inbox
        return client

    def add_worker(
        self, capacity: int = 10, identity: bytes | None = None, tags: Iterable[str] = (), store: str = "",
        host_key: str = "", concurrency: int = 1, rejoining: bool = False,
    ) -> SimWorker:
        identity = identity or b"worker-%d" % len(self.workers)
        worker = self.workers[identity] = SimWorker(identity=identity, capacity=capacity, tags=frozenset(tags))
        self.send(identity, m.Hello(
            role=m.Role.WORKER, name=identity.decode(), capacity=capacity, tags=tuple(tags), store=store,
            host_key=host_key, concurrency=concurrency, rejoining=rejoining,
        ))
        assert any(isinstance(message, m.Welcome) for message in worker.inbox), worker.inbox
        return worker

    def add_store(
        self, data_address: str, host_key: str = "host-a", capacity_bytes: int = 1 << 30,
        identity: bytes | None = None,
    ) -> SimStore:
        identity = identity or b"store-%d" % len(self.stores)
        store = self.stores[identity] = SimStore(identity, data_address, host_key, capacity_bytes)
        self.send(identity, m.Hello(
            role=m.Role.STORE, name=identity.decode(), host_key=host_key, data_address=data_address,
            ipc_address=f"ipc:///stores/{identity.decode()}", capacity_bytes=capacity_bytes,
        ))
        assert isinstance(store.inbox[-1], m.Welcome), store.inbox
        return store

    def forget_worker(self, worker: SimWorker) -> None:
        """The harness stops playing this worker (it crashed); what it held is lost."""
        del self.workers[worker.identity]

    def heartbeat_all(self, *, except_for: Iterable[bytes] = ()) -> None:
        skip = set(except_for)
        for identity in list(self.workers) + list(self.clients) + list(self.stores):
            if identity not in skip:
                self.send(identity, m.Heartbeat())

    # ------------------------------------------------------------------------------------------ clients

    def submit(
        self,
        client: SimClient,
        count: int,
        *,
        function_payload: bytes = FUNCTION_PAYLOAD,
        args_per_task: int = 1,
        send_object: bool | None = None,
        task_ids: list[int] | None = None,
        tags: Iterable[str] = (),
        wait_for_tags_ms: int = 0,
        stream_output: bool = False,
    ) -> list[int]:
        function_id = content_object_id(function_payload)
        task_ids = task_ids if task_ids is not None else client.next_task_ids(count)
        if send_object is None:
            send_object = function_id not in client.sent_objects
        objects = [m.ObjectPayload(object_id=function_id, payload=function_payload, name="f")] if send_object else []
        client.sent_objects.add(function_id)
        group = m.TaskGroup(
            function_id=function_id,
            args_per_task=args_per_task,
            keywords=(),
            task_ids=list(task_ids),
            args=[b"arg-%d-%d" % (task_id, index) for task_id in task_ids for index in range(args_per_task)],
            required_tags=tuple(tags),
            wait_for_tags_ms=wait_for_tags_ms,
            stream_output=stream_output,
        )
        self.send(client.identity, m.TaskSubmission(objects=objects, groups=[group]))
        return list(task_ids)

    def cancel(self, client: SimClient, task_ids: list[int]) -> list[tuple[bytes, m.Message]]:
        return self.send(client.identity, m.CancelTasks(task_ids=list(task_ids)))

    # ------------------------------------------------------------------------------------------ workers

    def complete(
        self,
        worker: SimWorker,
        limit: int | None = None,
        *,
        task_ids: Iterable[int] | None = None,
        failure_kind: m.FailureKind | None = None,
        task_seconds: float | None = None,
    ) -> list[tuple[bytes, m.Message]]:
        """The worker answers some of its pending tasks in one TaskResults message; with `task_seconds`, it says
        that each of those it ran (succeeded or raised) ran that long (prefetch.py reads it)."""
        if task_ids is None:
            chosen = list(worker.pending)[:limit] if limit is not None else list(worker.pending)
        else:
            chosen = list(task_ids)
        for task_id in chosen:
            worker.pending.pop(task_id, None)
        if failure_kind is None:
            message = m.TaskResults(succeeded_ids=chosen, payloads=[payload_for(t) for t in chosen], failures=[])
        else:
            message = m.TaskResults(
                succeeded_ids=[],
                payloads=[],
                failures=[m.TaskFailure(task_id=t, kind=failure_kind, type_name="E", message="m") for t in chosen],
            )
        if task_seconds is not None and failure_kind in (None, m.FailureKind.RAISED) and chosen:
            message.ran_tasks = len(chosen)
            message.run_seconds = task_seconds * len(chosen)
        return self.send(worker.identity, message)

    def complete_stored(self, worker: SimWorker, task_ids: Iterable[int], holder: str, size: int = 1 << 20) -> dict:
        """The worker answers these tasks with results it wrote into the store `holder`; returns task id ->
        the object id of its result."""
        object_ids = {}
        stored = []
        for task_id in task_ids:
            worker.pending.pop(task_id, None)
            # A task run again (lineage) writes a new object: the id counts the runs.
            runs = self.stored_runs[task_id] = self.stored_runs.get(task_id, -1) + 1
            object_ids[task_id] = object_id = task_id.to_bytes(12, "little") + runs.to_bytes(4, "little")
            stored.append(m.StoredResult(task_id=task_id, object_id=object_id, size=size, holder=holder))
        self.send(worker.identity, m.TaskResults(succeeded_ids=[], payloads=[], failures=[], stored=stored))
        return object_ids

    def run_to_completion(self, batch: int = 100, max_rounds: int = 1_000_000) -> int:
        """Workers answer everything they hold, `batch` results per message, until nothing is left."""
        rounds = 0
        while rounds < max_rounds:
            busy = [worker for worker in self.workers.values() if worker.pending]
            if not busy:
                return rounds
            for worker in busy:
                if worker.identity in self.workers and worker.pending:
                    self.complete(worker, batch)
            rounds += 1
        raise AssertionError("the cluster did not drain")


def assert_no_task_state(core: SchedulerCore) -> None:
    """Every finished task is forgotten: nothing about it stays in the core."""
    assert core.task_count == 0
    assert core.tasks.records == {}
    assert core.unassigned_count == 0
    assert core.graph.dependents == {}
    for worker in core.workers():
        assert worker.assigned == {}, f"worker {worker.name} still holds {len(worker.assigned)} tasks"
    for client in core.peers.clients.values():
        assert client.task_ids == set(), f"client {client.name} still has {len(client.task_ids)} tasks"
