"""The connected peers: how a client or worker joins (hello, welcome or refused), how long it stays
(heartbeats, timeouts), and what the scheduler remembers about each while it is there.

Everything a peer leaves behind when it goes (tasks, objects) is for the other parts of the core:
scheduler_core.py removes a peer by asking each of them in turn.
"""

from __future__ import annotations

import dataclasses
import logging
import math

from scaler.protocol import messages as m
from scaler.protocol.sharing import share_problem
from scaler.protocol.versions import UNNAMED_RELEASE, Speaks, mismatch_reason
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.message_rules import violation
from scaler.scheduler.core.prefetch import WorkerPace

logger = logging.getLogger(__name__)

_MAX_WIRE_MILLISECONDS = 2**32 - 1
# All workers' heartbeats together, per second, that the scheduler asks for at most: beyond this many times the
# configured interval workers, each is asked to heartbeat less often (each heartbeat is a wake-up, a decode and an
# echo: 500 workers at 2 s cost an idle scheduler about a tenth of a core on a slow machine).
WORKER_HEARTBEATS_PER_SECOND = 25.0
# Never asked to heartbeat less often than this many times per worker timeout, whatever the number of workers.
HEARTBEATS_PER_WORKER_TIMEOUT = 4
_MAX_ID_PREFIX = 2**32 - 1


@dataclasses.dataclass(eq=False, slots=True)
class ClientPeer:
    identity: bytes
    name: str
    id_prefix: int
    last_seen: float
    host_key: str = ""
    # Unfinished tasks of this client, so that clear() and a disconnect find them without a scan.
    task_ids: set[int] = dataclasses.field(default_factory=set)
    # Objects this client keeps alive (object_table.py).
    object_ids: set[bytes] = dataclasses.field(default_factory=set)
    # Its weight in the fair share of free slots between clients (ready_queue.py): 2.0 gets twice the slots
    # of 1.0 while both have ready tasks.
    share: float = 1.0
    # Kept by the ready queues (task_table.py): its tasks queued in the scheduler, and those with a worker.
    tasks_queued: int = 0
    tasks_running: int = 0
    # Its unfinished tasks when it last came back to this scheduler that still had it (`hello_again`): what it
    # sends again of those is the same task, kept where it is (task_intake.py), each at most once.
    resumed_ids: set[int] = dataclasses.field(default_factory=set)


@dataclasses.dataclass(eq=False, slots=True)
class WorkerPeer:
    identity: bytes
    name: str
    # The most tasks it accepts (its hello, within --per-worker-queue-size).
    capacity: int
    last_seen: float
    # How many it is given now (prefetch.py): what keeps it busy, measured; never above `capacity`.
    depth: int = 1
    pace: WorkerPace = dataclasses.field(default_factory=WorkerPace)
    # How many tasks it runs at once (its hello, within 1 and `capacity`): prefetch keeps them all busy.
    concurrency: int = 1
    # Task ids it holds, insertion-ordered so that the oldest assigned task is first.
    assigned: dict[int, None] = dataclasses.field(default_factory=dict)
    # Objects this worker registration was sent and not told to delete: each is shipped to it once.
    known_object_ids: set[bytes] = dataclasses.field(default_factory=set)
    tasks_sent: int = 0
    last_heartbeat: m.Heartbeat | None = None
    # A client asked to drain it (drainWorkers): placement sends it nothing more, until it leaves.
    draining: bool = False
    # The capabilities from its hello: it runs only tasks whose required tags are all in here.
    tags: frozenset[str] = frozenset()
    # The data address of the store it uses (its hello), registered or not; and its host key.
    store_address: str = ""
    host_key: str = ""
    # Its hello said it rejoins after a restart (rejoin.py): it gets nothing until its reannounce, which may
    # name tasks queued here already; `draining` keeps placement away until then.
    awaiting_reannounce: bool = False

    @property
    def free(self) -> int:
        # It holds more than its depth while prefetch takes tasks back (the depth shrank): no slot is free then.
        free = self.depth - len(self.assigned)
        return free if free > 0 else 0


def _wire_milliseconds(seconds: float) -> int:
    """Seconds as the UInt32 milliseconds of Welcome. SchedulerConfig already holds every timeout to what
    fits; this keeps a core made some other way from ever failing to encode (and so from dying) on one."""
    if not math.isfinite(seconds):
        return _MAX_WIRE_MILLISECONDS
    return min(max(int(seconds * 1000), 1), _MAX_WIRE_MILLISECONDS)


def speaks_of(hello: m.Hello) -> Speaks:
    return Speaks(hello.release, hello.protocol_version, hello.protocol_revision)


def version_refusal(hello: m.Hello, scheduler: Speaks) -> m.Refused | None:
    """The refusal of a peer of another protocol version, naming both sides (logged here: the operator of the
    scheduler learns which release came, as the refused peer does), or None: it speaks ours."""
    peer = speaks_of(hello)
    if peer.works_with(scheduler):
        return None
    reason = mismatch_reason(peer, scheduler)
    role = hello.role.name.lower() if isinstance(hello.role, m.Role) else "peer"
    logger.warning(f"PeerRegistry: refused {role} {hello.name or '(unnamed)'} of {hello.hostname or '?'}: {reason}")
    return m.Refused(reason=reason)


class PeerRegistry:
    """Clients and workers by routing identity. An identity is in at most one of the two tables."""

    def __init__(self, config: CoreConfig) -> None:
        self._config = config
        self.clients: dict[bytes, ClientPeer] = {}
        self.workers: dict[bytes, WorkerPeer] = {}
        # Stand-ins for clients of a scheduler before this one, owning the tasks workers re-announced for them
        # until they come back (rejoin.py); by their identity, which no real peer has.
        self.awaited_clients: dict[bytes, ClientPeer] = {}
        # Task id prefixes are never reused within one scheduler process, so a task id names one client: every
        # prefix given out or taken back by a resuming client stays here.
        self._used_id_prefixes: set[int] = set()
        # The routing identity of each client that left, by its prefix: that same client may come back under it
        # (it moved to a standby scheduler that then stepped down), nobody else.
        self._left_clients: dict[int, bytes] = {}
        # Prefixes of a previous run's clients, known from task ids workers re-announced after a restart: a new
        # client never gets one (its task ids would meet those results), the client that had it may take it back.
        self._reserved_id_prefixes: set[int] = set()
        self.next_id_prefix = config.first_id_prefix or 1
        # Those it gave new clients: a task id of another prefix was made by a client of a scheduler before,
        # which may have a result or a worker already (rejoin.py).
        self.issued_prefixes: set[int] = set()

    def welcome(self, role: m.Role) -> m.Welcome:
        """The welcome of a peer of this role, before anything particular to it is filled in."""
        config = self._config
        return m.Welcome(
            protocol_version=config.speaks.protocol_version,
            release=config.speaks.release,
            protocol_revision=config.speaks.protocol_revision,
            heartbeat_interval_ms=_wire_milliseconds(config.heartbeat_interval_seconds),
            peer_timeout_ms=_wire_milliseconds(
                config.client_timeout_seconds if role == m.Role.CLIENT else config.worker_timeout_seconds
            ),
            max_frame_bytes=config.max_frame_bytes,
            max_control_frame_bytes=config.max_control_frame_bytes,
            inline_limit_bytes=config.inline_limit_bytes,
        )

    def worker_heartbeat_seconds(self) -> float:
        """How often each worker heartbeats: the configured interval, or, with so many workers that they would
        send more than WORKER_HEARTBEATS_PER_SECOND together, as much less often as keeps them to that, but at
        least HEARTBEATS_PER_WORKER_TIMEOUT times per worker timeout. The timeout itself does not change."""
        config = self._config
        spaced = min(len(self.workers) / WORKER_HEARTBEATS_PER_SECOND,
                     config.worker_timeout_seconds / HEARTBEATS_PER_WORKER_TIMEOUT)
        return max(config.heartbeat_interval_seconds, spaced)

    def heartbeat_echo(self, worker: bool) -> m.HeartbeatEcho:
        """The echo of a heartbeat. A worker's names the interval it is to heartbeat at when that is longer
        than the configured one (0 otherwise: the welcome's interval stands, as with a scheduler before)."""
        if not worker:
            return m.HeartbeatEcho()
        seconds = self.worker_heartbeat_seconds()
        if seconds <= self._config.heartbeat_interval_seconds:
            return m.HeartbeatEcho()
        return m.HeartbeatEcho(heartbeat_interval_ms=_wire_milliseconds(seconds))

    def on_hello(self, sender: bytes, hello: m.Hello, now: float) -> tuple[m.Message, WorkerPeer | None]:
        """Register an unknown client or worker: the reply (welcome or refused), and the worker if one joined.

        A hello from a registered identity never reaches here: hello_again.py answers it. Neither does a
        store's: store_registry.py takes those, once `version_refusal` has passed them.
        """
        refusal = version_refusal(hello, self._config.speaks)
        if refusal is not None:
            return refusal, None
        config = self._config
        welcome = self.welcome(hello.role)
        if hello.role == m.Role.CLIENT:
            problem = share_problem(hello.share)
            if problem is not None:
                return m.Refused(reason=problem), None
            if hello.id_prefix:
                if hello.id_prefix in self._used_id_prefixes and self._left_clients.get(hello.id_prefix) != sender:
                    return m.Refused(reason=(
                        f"id prefix {hello.id_prefix:#x} is taken: this scheduler gave it to a client already, "
                        "so it cannot resume a client under it"
                    )), None
                prefix = hello.id_prefix
                how = f"resumed with id prefix {prefix:#x}"
            else:
                prefix = self._fresh_id_prefix()
                self.issued_prefixes.add(prefix)
                how = "connected"
            self._used_id_prefixes.add(prefix)
            self.clients[sender] = ClientPeer(
                identity=sender, name=hello.name, id_prefix=prefix, last_seen=now, host_key=hello.host_key,
                share=hello.share,
            )
            welcome.id_prefix = prefix
            logger.info(f"PeerRegistry: client {hello.name} {how}{self._other_release(hello)}")
            return welcome, None
        capacity = hello.capacity
        if config.per_worker_queue_size > 0:
            capacity = min(capacity, config.per_worker_queue_size)
        if capacity <= 0:
            return m.Refused(reason="a worker must accept at least one task"), None
        if any(not tag for tag in hello.tags):
            return m.Refused(reason="a worker tag is empty"), None
        worker = self.workers[sender] = WorkerPeer(
            identity=sender, name=hello.name, capacity=capacity, last_seen=now, tags=frozenset(hello.tags),
            store_address=hello.store, host_key=hello.host_key, concurrency=min(max(hello.concurrency, 1), capacity),
            awaiting_reannounce=hello.rejoining, draining=hello.rejoining,
        )
        tags = f", tags {','.join(sorted(worker.tags))}" if worker.tags else ""
        logger.info(
            f"PeerRegistry: worker {hello.name} connected, capacity {capacity}{tags}{self._other_release(hello)}"
        )
        return welcome, worker

    def hello_again(
        self, client: ClientPeer, hello: m.Hello, now: float, directory: m.StoreDirectory
    ) -> m.Welcome | m.ProtocolError:
        """A hello from a client this scheduler has registered. Naming the client's own id prefix, it comes back
        after it moved to another scheduler address (this one was silent to it for a while, but kept it): its
        session goes on, welcomed again. It may have missed outcomes sent meanwhile, and sends again what has
        none: its tasks unfinished here stay as they are (`resumed_ids`); those finished meanwhile run again.
        Any other hello is a breach, answered as before."""
        if not hello.id_prefix or hello.id_prefix != client.id_prefix or self.refuses_version(hello):
            return m.ProtocolError(reason=violation(m.Role.CLIENT, m.Hello))
        client.resumed_ids = set(client.task_ids)
        client.last_seen = now
        welcome = self.welcome(m.Role.CLIENT)
        welcome.id_prefix = client.id_prefix
        welcome.store_directory = directory
        logger.info(
            f"PeerRegistry: client {client.name} came back (it had moved to another scheduler address); its session "
            f"goes on with {len(client.task_ids)} unfinished tasks"
        )
        return welcome

    def refuses_version(self, hello: m.Hello) -> bool:
        return version_refusal(hello, self._config.speaks) is not None

    def _other_release(self, hello: m.Hello) -> str:
        """For the log: the peer's release when it is not this scheduler's (a cluster in the middle of an upgrade)."""
        if hello.release == self._config.speaks.release:
            return ""
        return f" ({hello.release or UNNAMED_RELEASE})"

    def reserve_id_prefix(self, prefix: int) -> None:
        """Keep `prefix` from new clients: a client of the previous scheduler had it (a re-announced task id
        carries it) and may resume under it."""
        if prefix:
            self._reserved_id_prefixes.add(prefix)

    def _fresh_id_prefix(self) -> int:
        """The next prefix no client of this process has had, nor reserved: 32 bits, never 0."""
        used = self._used_id_prefixes
        reserved = self._reserved_id_prefixes
        prefix = self.next_id_prefix
        while prefix in used or prefix in reserved or not 0 < prefix <= _MAX_ID_PREFIX:
            prefix = prefix + 1 if prefix < _MAX_ID_PREFIX else 1
        self.next_id_prefix = prefix + 1
        return prefix

    def drain(self, names: list[str]) -> tuple[list[WorkerPeer], list[str], list[str]]:
        """Mark the workers of these hello names draining: returns those that were not yet, the names now
        draining and the names of no connected worker. A name several workers share drains them all (a batch
        system may reuse a name, and whoever drains it wants none of them to get work)."""
        by_name: dict[str, list[WorkerPeer]] = {}
        for worker in self.workers.values():
            by_name.setdefault(worker.name, []).append(worker)
        newly: list[WorkerPeer] = []
        draining: list[str] = []
        unknown: list[str] = []
        for name in dict.fromkeys(names):
            workers = by_name.get(name)
            if not workers:
                unknown.append(name)
                continue
            draining.append(name)
            for worker in workers:
                if not worker.draining:
                    worker.draining = True
                    newly.append(worker)
                    logger.info(f"PeerRegistry: worker {name} drains, {len(worker.assigned)} tasks to move or finish")
        return newly, draining, unknown

    def silent_workers(self, now: float) -> list[WorkerPeer]:
        deadline = now - self._config.worker_timeout_seconds
        return [worker for worker in self.workers.values() if worker.last_seen < deadline]

    def silent_clients(self, now: float) -> list[ClientPeer]:
        deadline = now - self._config.client_timeout_seconds
        return [client for client in self.clients.values() if client.last_seen < deadline]

    def remove_client(self, client: ClientPeer, why: str, level: int = logging.INFO) -> None:
        del self.clients[client.identity]
        self._left_clients[client.id_prefix] = client.identity
        logger.log(level, f"PeerRegistry: client {client.name} {why}")

    def remove_worker(self, worker: WorkerPeer, why: str, level: int = logging.INFO) -> None:
        del self.workers[worker.identity]
        logger.log(level, f"PeerRegistry: worker {worker.name} {why}")
