"""The messages of the wire protocol as plain objects (dataclasses), with no encoding.

Everyone else imports them through messages.py (`from scaler.protocol import messages as m`), which adds
`encode` and `decode`; the codec (capnp_codec.py, capnp_fields.py) imports them from here, so that
messages.py can import the codec without a cycle.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Iterable, Union

from scaler.protocol.sharing import DEFAULT_SHARE
from scaler.protocol.versions import PROTOCOL_REVISION, PROTOCOL_VERSION, RELEASE

# A payload this large travels as its own zmq frame: nobody copies it into or out of a Cap'n Proto message.
LARGE_PAYLOAD_BYTES = 64 * 1024

# Payloads this large go through a store when one is at hand (PROTOCOL.md §13); Welcome.inline_limit_bytes
# overrides it, 0 there meaning this default.
INLINE_LIMIT_BYTES = LARGE_PAYLOAD_BYTES

# Payloads are bytes, or zero-copy views of received frames.
Buffer = Union[bytes, memoryview]


def inline_bytes(payloads: Iterable[Buffer]) -> int:
    """What these payloads add to a control frame: the small ones travel inside it, the large as frames."""
    return sum(size for size in map(len, payloads) if size < LARGE_PAYLOAD_BYTES)

class ProtocolDecodeError(ValueError):
    """A frame that is not a valid Scaler message."""


class Role(enum.IntEnum):
    CLIENT = 0
    WORKER = 1
    STORE = 2


class FailureKind(enum.IntEnum):
    RAISED = 0
    WORKER_DIED = 1
    CANCELED = 2
    NOT_FOUND = 3
    SERIALIZATION = 4
    REJECTED = 5
    RETURNED = 6


@dataclasses.dataclass(slots=True)
class Hello:
    role: Role
    name: str = ""
    hostname: str = ""
    pid: int = 0
    capacity: int = 0
    protocol_version: int = PROTOCOL_VERSION
    nesting_depth: int = 0
    # Workers only: the capabilities it offers ("python", "native", operator tags such as "gpu").
    tags: tuple[str, ...] = ()
    # The data plane: a worker's store (its data address), everyone's host key, and a store's own addresses.
    store: str = ""
    host_key: str = ""
    data_address: str = ""
    ipc_address: str = ""
    capacity_bytes: int = 0
    # Clients only: the client's weight in the fair share of the workers (finite, > 0; see Client(share=...)).
    share: float = DEFAULT_SHARE
    # Workers only: how many tasks it runs at once (0 or absent counts as 1).
    concurrency: int = 1
    # Workers only: welcomed before by a scheduler at this address that went away; its reannounce follows.
    rejoining: bool = False
    # Clients only: the id prefix a client resuming after a scheduler restart asks to keep (0: a new client).
    id_prefix: int = 0
    # The sender's release ("scaler 2.1.0") and revision of its protocol version (versions.py).
    release: str = RELEASE
    protocol_revision: int = PROTOCOL_REVISION


@dataclasses.dataclass(frozen=True, slots=True)
class StoreEntry:
    """A registered store as the other peers reach it."""

    data_address: str  # tcp://: its identity
    ipc_address: str  # ipc://: only for processes with the same host key
    host_key: str


@dataclasses.dataclass(slots=True)
class StoreDirectory:
    """The stores the scheduler knows, and the data address of the receiver's home store (empty: none)."""

    stores: list[StoreEntry] = dataclasses.field(default_factory=list)
    home_store: str = ""


@dataclasses.dataclass(slots=True)
class Welcome:
    id_prefix: int = 0
    heartbeat_interval_ms: int = 0
    peer_timeout_ms: int = 0
    protocol_version: int = PROTOCOL_VERSION
    # The scheduler's limits on what it reads (0: none): any frame, and the control frame.
    max_frame_bytes: int = 0
    max_control_frame_bytes: int = 0
    store_directory: StoreDirectory = dataclasses.field(default_factory=StoreDirectory)
    # Payloads this large go through a store (0: INLINE_LIMIT_BYTES).
    inline_limit_bytes: int = 0
    # The scheduler's release and revision of its protocol version (versions.py).
    release: str = RELEASE
    protocol_revision: int = PROTOCOL_REVISION

    @property
    def inline_limit(self) -> int:
        return self.inline_limit_bytes or INLINE_LIMIT_BYTES

    def heartbeat_interval_for(self, own_seconds: float) -> float:
        """How often a welcomed peer heartbeats: at its own interval, or more often if the scheduler asks.

        The scheduler says how often it expects to hear from the peer, and after how much silence it drops
        it; a third of that timeout leaves room for two lost or late heartbeats.
        """
        interval = own_seconds
        if self.heartbeat_interval_ms:
            interval = min(interval, self.heartbeat_interval_ms / 1000)
        if self.peer_timeout_ms:
            interval = min(interval, self.peer_timeout_ms / 3000)
        return interval


@dataclasses.dataclass(slots=True)
class Refused:
    reason: str
    # The scheduler does not know the sender (never said hello, timed out, or the scheduler restarted):
    # a peer welcomed before says hello again; False: the hello itself was refused (PROTOCOL.md §21).
    unknown_peer: bool = False
    # From a standby scheduler that does not serve now: try the next scheduler address (PROTOCOL.md, standby).
    standby: bool = False


@dataclasses.dataclass(slots=True)
class Heartbeat:
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    queued_tasks: int = 0
    processor_cpu_percent: float = 0.0
    processor_rss_bytes: int = 0
    latency_us: int = 0
    # Stores only.
    bytes_held: int = 0
    bytes_spilled: int = 0
    bytes_pinned: int = 0
    object_count: int = 0


@dataclasses.dataclass(slots=True)
class HeartbeatEcho:
    # To workers: 0 keeps the interval the welcome set; else the interval to heartbeat at from now on, which may be
    # longer than the worker's own (a scheduler with many workers spaces their heartbeats out).
    heartbeat_interval_ms: int = 0


@dataclasses.dataclass(slots=True)
class ObjectPayload:
    object_id: bytes
    payload: Buffer
    name: str = ""
    # A stored object: `payload` is empty, and `size` bytes (stored-payload layout) are with the store
    # whose data address is `holder`.
    size: int = 0
    holder: str = ""

    @property
    def stored(self) -> bool:
        return bool(self.holder)


# The name of the objects that stand for arguments shared by several tasks (scaler/client/shared_arguments.py):
# a worker keeps their values only while its tasks need them, and error messages call them "an argument".
SHARED_ARGUMENT_NAME = "shared argument"


@dataclasses.dataclass(slots=True)
class TaskGroup:
    """Tasks sharing a function and an argument layout; `args` is flattened row by row."""

    function_id: bytes
    args_per_task: int
    keywords: tuple[str, ...]
    task_ids: list[int]
    args: list[Buffer]
    serializer_id: bytes = b""
    # Graph edges: args[ref_arg_indices[k]] receives the result of task ref_task_ids[k].
    ref_arg_indices: list[int] = dataclasses.field(default_factory=list)
    ref_task_ids: list[int] = dataclasses.field(default_factory=list)
    # args[i] for i in object_arg_indices is an object id: the worker passes that object instead.
    object_arg_indices: list[int] = dataclasses.field(default_factory=list)
    nesting_depth: int = 0
    profiling: bool = False
    # The worker must say TaskStarted and hear it back before running each of these tasks.
    report_start: bool = False
    # Only a worker whose hello tags include all of these may run the tasks; empty: any worker.
    required_tags: tuple[str, ...] = ()
    # > 0: fail the tasks (NoCapableWorkerError) if this long after submission no connected worker has the tags.
    wait_for_tags_ms: int = 0
    # Higher first among the ready tasks of one client (an Int32 on the wire; see Client.submit(priority=...)).
    priority: int = 0
    # Send what the tasks print to their client (TaskOutput); workers that cannot may ignore it.
    stream_output: bool = False
    # The results stay on the cluster, owned by the client, until it deletes them (PROTOCOL.md §7, "Kept results").
    keep_results: bool = False
    # With keep_results: results stay in the workers' stores whatever their size (persisted data); see the schema.
    keep_in_stores: bool = False
    # Set by the scheduler: run these before the top-level tasks the worker holds (a client far below its share).
    ahead: bool = False


@dataclasses.dataclass(slots=True)
class TaskSubmission:
    objects: list[ObjectPayload]
    groups: list[TaskGroup]
    quiet_task_ids: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class TaskFailure:
    task_id: int
    kind: FailureKind
    type_name: str = ""
    message: str = ""
    traceback: str = ""
    exception: bytes = b""


@dataclasses.dataclass(slots=True)
class TaskProfile:
    task_id: int
    duration_us: int
    cpu_time_us: int
    peak_memory_bytes: int


@dataclasses.dataclass(slots=True)
class TaskWarning:
    """A warning raised inside a task, for the client to issue again where the caller gets the result.

    One per task that raised it; on the wire, tasks that raised the same warning share one entry.
    """

    task_id: int
    category: str  # "module.QualName" of the warning class
    message: str
    filename: str
    lineno: int
    # The category's base warning classes, nearest first: the client falls back on one it can import.
    category_bases: tuple[str, ...] = ()
    module: str = ""


@dataclasses.dataclass(slots=True)
class StoredResult:
    """A task succeeded and its result is a stored object: `size` bytes held by the store `holder`."""

    task_id: int
    object_id: bytes
    size: int
    holder: str


@dataclasses.dataclass(slots=True)
class TaskResults:
    succeeded_ids: list[int]
    payloads: list[Buffer]
    failures: list[TaskFailure]
    profiles: list[TaskProfile] = dataclasses.field(default_factory=list)
    warnings: list[TaskWarning] = dataclasses.field(default_factory=list)
    # Successes whose results are in a store; their tasks are in neither succeeded_ids nor failures.
    stored: list[StoredResult] = dataclasses.field(default_factory=list)
    # The tasks reported here that ran, and their running time in all, as the worker measured it; 0: not measured.
    run_seconds: float = 0.0
    ran_tasks: int = 0


@dataclasses.dataclass(slots=True)
class CancelTasks:
    task_ids: list[int]
    force: bool = False


@dataclasses.dataclass(slots=True)
class ReleaseTasks:
    task_ids: list[int]


@dataclasses.dataclass(slots=True)
class CancelRefused:
    """The cancel came too late: these tasks had started and will send their results."""

    task_ids: list[int]


@dataclasses.dataclass(slots=True)
class TaskStarted:
    """Worker: these report-start tasks are about to run here. Scheduler: noted, run them."""

    task_ids: list[int]


@dataclasses.dataclass(slots=True)
class DrainWorkers:
    """Client: send these workers (by hello name) nothing more and move the tasks they have not started."""

    worker_names: list[str]


@dataclasses.dataclass(slots=True)
class DrainWorkersResponse:
    """Scheduler: which requested names now drain (newly or already), and which name no connected worker."""

    draining: list[str] = dataclasses.field(default_factory=list)
    unknown: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class DeleteObjects:
    object_ids: list[bytes]


@dataclasses.dataclass(slots=True)
class PublishObjects:
    """Scheduler to worker: write these results of yours into your store now, another process reads them (§13)."""

    object_ids: list[bytes]


@dataclasses.dataclass(slots=True)
class ObjectsLost:
    """Reader to scheduler: these stored objects could not be read from their holders; store to scheduler: this
    store lost these objects (§18)."""

    object_ids: list[bytes]


@dataclasses.dataclass(slots=True)
class ObjectsHeld:
    """Store to scheduler: this store holds these objects, `sizes[k]` bytes for `object_ids[k]` (§17)."""

    object_ids: list[bytes]
    sizes: list[int]


@dataclasses.dataclass(slots=True)
class Reannounce:
    """Worker to scheduler, right after a welcome that follows a lost scheduler: the tasks it holds, running
    or queued, that the scheduler before gave it (PROTOCOL.md §21)."""

    task_ids: list[int]


@dataclasses.dataclass(slots=True)
class ResendObjects:
    """Scheduler to client: put these objects of yours into a store again, they were lost (§18)."""

    object_ids: list[bytes]


@dataclasses.dataclass(slots=True)
class Relay:
    """A data-protocol message (`frames`: its control frame, then its payload frames) carried through the scheduler
    for a peer that cannot reach the store directly (PROTOCOL.md §19). `store` names the store (requests to the
    scheduler, answers from it); `peer` the requester (between the scheduler and the store); `error`: undeliverable."""

    frames: list[Buffer]
    store: str = ""
    peer: bytes = b""
    request_id: int = 0
    error: str = ""

    @property
    def payload_bytes(self) -> int:
        """The bytes of the data message's payload frames (the object, if it carries one)."""
        return sum(map(len, self.frames[1:]))


class OutputStream(enum.IntEnum):
    """Where a chunk of a task's output was printed (TaskOutput.streams)."""

    STDOUT = 0
    STDERR = 1
    LOG = 2  # a logging record, formatted as one line


# The most text one TaskOutput may carry (in characters, at most 4 bytes each on the wire); the scheduler refuses
# more. A worker cuts what a task prints into messages of at most OUTPUT_CHUNK_BYTES, far below it.
MAX_TASK_OUTPUT_MESSAGE_CHARS = 256 * 1024


@dataclasses.dataclass(slots=True)
class TaskOutput:
    """Chunks of what tasks printed: `texts[k]`, whole lines, printed by task `task_ids[k]` on stream `streams[k]`
    (an OutputStream). `worker` is the worker's name, set by the scheduler for the client (PROTOCOL.md §20)."""

    task_ids: list[int]
    streams: list[int]
    texts: list[str]
    worker: str = ""


@dataclasses.dataclass(slots=True)
class ClearRequest:
    pass


@dataclasses.dataclass(slots=True)
class ClearResponse:
    canceled_tasks: int = 0


@dataclasses.dataclass(slots=True)
class Disconnect:
    reason: str = ""


@dataclasses.dataclass(slots=True)
class ShutdownRequest:
    pass


@dataclasses.dataclass(slots=True)
class ShutdownResponse:
    accepted: bool
    reason: str = ""


@dataclasses.dataclass(slots=True)
class ProtocolError:
    reason: str


@dataclasses.dataclass(slots=True)
class ProcessorState:
    """Agent <-> processor only: a task blocks on nested work (blocked), and the agent's answer (granted)."""

    blocked: bool
    granted: bool = False
    reason: str = ""


@dataclasses.dataclass(slots=True)
class SubmissionIds:
    """What a hop that forwards a submission as it came reads of it (`decode_ids`): its task ids, and its
    objects (functions and shared arguments, sent once per call site, so rarely any), those in full."""

    task_ids: list[int]
    objects: list[ObjectPayload]


@dataclasses.dataclass(slots=True)
class ResultIds:
    """What a hop that forwards results as they came reads of them (`decode_ids`): the tasks they finish
    (succeeded, failed or stored), and the object each stored result is."""

    finished_ids: list[int]
    stored: list[tuple[int, bytes]]


Message = Union[
    Hello,
    Welcome,
    Refused,
    Heartbeat,
    HeartbeatEcho,
    TaskSubmission,
    TaskResults,
    CancelTasks,
    DeleteObjects,
    ClearRequest,
    ClearResponse,
    Disconnect,
    ShutdownRequest,
    ShutdownResponse,
    ProtocolError,
    ProcessorState,
    ReleaseTasks,
    CancelRefused,
    TaskStarted,
    DrainWorkers,
    DrainWorkersResponse,
    StoreDirectory,
    ObjectsLost,
    ResendObjects,
    Relay,
    PublishObjects,
    ObjectsHeld,
    TaskOutput,
    Reannounce,
]

